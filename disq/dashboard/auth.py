"""Sessions, CSRF tokens and who may act.

- **Session.** A cookie ``disq_session`` holding ``<sid>.<authenticated 0|1>.<expiry s>.<mac>``,
  the MAC an HMAC-SHA256 under a per-process random secret: nothing is stored on the node,
  and a restart logs everyone out (the secret is new). Every visitor gets one (anonymous) so
  the login form itself carries a CSRF token. The cookie is HttpOnly and SameSite=Strict.
- **CSRF.** Every POST carries ``csrf`` = HMAC(secret, "csrf:" + sid): a page of another
  site cannot read it, so a forged POST fails whatever cookies the browser sends.
- **Who may act.** With a ``requirepass``: every page wants a login (the same password as
  RESP AUTH and /metrics), and logged-in users may act. Without one: pages are read-only
  for everyone, unless the node runs with ``--dashboard-actions``, which lets loopback
  clients act.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass

COOKIE = "disq_session"
SESSION_TTL_S = 12 * 3600


@dataclass(frozen=True, slots=True)
class Session:
    sid: str
    authenticated: bool
    expires_s: int


class Signer:
    """Signs and checks session cookies and CSRF tokens with one secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def _mac(self, msg: str) -> str:
        return hmac.new(self._secret, msg.encode(), hashlib.sha256).hexdigest()

    def new_session(self, authenticated: bool = False, now_s: float | None = None) -> Session:
        now = time.time() if now_s is None else now_s
        return Session(secrets.token_hex(16), authenticated, int(now) + SESSION_TTL_S)

    def dump(self, s: Session, bind: str = "") -> str:
        """The cookie for ``s``; ``bind`` (a digest of the node's password) is signed with it,
        so a session stops verifying when the password changes (CONFIG SET requirepass)."""
        payload = f"{s.sid}.{int(s.authenticated)}.{s.expires_s}"
        return f"{payload}.{self._mac(payload + '.' + bind)}"

    def load(
        self, cookie: str | None, now_s: float | None = None, bind: str = ""
    ) -> Session | None:
        """The session a cookie carries, or None if absent, malformed, forged, expired or
        signed under another password (``bind``, as given to :meth:`dump`)."""
        if not cookie or len(cookie) > 256:
            return None
        parts = cookie.split(".")
        if len(parts) != 4:
            return None
        sid, auth, exp, mac = parts
        if not hmac.compare_digest(mac, self._mac(f"{sid}.{auth}.{exp}.{bind}")):
            return None
        if auth not in ("0", "1") or not exp.isdigit():
            return None
        now = time.time() if now_s is None else now_s
        if int(exp) < now:
            return None
        return Session(sid, auth == "1", int(exp))

    def csrf_token(self, s: Session) -> str:
        return self._mac("csrf:" + s.sid)

    def check_csrf(self, s: Session | None, token: str | None) -> bool:
        if s is None or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(s))


def password_digest(password: str | None) -> str:
    """What a session is bound to: a digest of the node's current password ("" without one)."""
    return hashlib.sha256(password.encode()).hexdigest() if password else ""


def password_ok(given: str | None, password: str | None) -> bool:
    """Constant-time comparison of a submitted password with the node's."""
    if not password or given is None:
        return False
    return hmac.compare_digest(given.encode(), password.encode())


def is_loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        return ipaddress.ip_address(remote.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def may_view(session: Session | None, password: str | None) -> bool:
    """Pages: open without a password; with one, only after login."""
    return not password or (session is not None and session.authenticated)


def action_refusal(
    session: Session | None, password: str | None, actions_flag: bool, remote: str | None
) -> str | None:
    """Why an action is refused (None: allowed). The CSRF token is checked separately."""
    if password:
        if session is None or not session.authenticated:
            return "log in first: actions need the node's password"
        return None
    if not actions_flag:
        return (
            "the dashboard is read-only: set requirepass (actions after login) or start the "
            "node with --dashboard-actions (actions from loopback)"
        )
    if not is_loopback(remote):
        return "actions without a password are allowed from loopback only"
    return None
