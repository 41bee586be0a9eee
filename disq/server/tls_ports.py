"""TLS on the RESP and beanstalk ports: separate ports, as Redis's ``tls-port``.

``--resp-tls-port`` / ``--beanstalk-tls-port`` (config file: ``tls-port`` and
``beanstalk-tls-port``) serve the same protocols as the plaintext ports, over TLS with the
node's certificate and key (``--tls-cert`` / ``--tls-key``; ``tls-cert-file`` /
``tls-key-file``). Client certificates are required and checked against ``--tls-ca``
(``tls-ca-cert-file``) when client authentication is on: ``--tls-client-auth`` /
``tls-auth-clients yes``, and by default when a CA is given (as on the gRPC port, disq.tls,
and as Redis's ``tls-auth-clients`` defaults to ``yes``).

One :class:`ssl.SSLContext` serves every TLS port; ``loop.create_server(..., ssl=context)``
wraps the door's own protocol, so flow control (disq.server.flow) sees an SSL transport:
``pause_reading``/``resume_reading`` and ``pause_writing`` work on it as on a plain one, and
``get_extra_info("socket")`` gives the TCP socket underneath, which the hang-up poll watches.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

__all__ = ["TlsPortError", "server_ssl_context"]


class TlsPortError(ValueError):
    """TLS ports asked for without a usable certificate, key or CA."""


def server_ssl_context(files: dict[str, Any] | None) -> ssl.SSLContext:
    """The server context of the TLS ports, from the node's TLS files (node_main's
    ``_tls_files``: ``cert``, ``key``, ``ca`` paths and ``client_auth``: True, False or None,
    on with a CA). Raises :class:`TlsPortError` for a missing or unreadable file."""
    files = files or {}
    cert, key, ca = files.get("cert"), files.get("key"), files.get("ca")
    if not cert or not key:
        raise TlsPortError(
            "the TLS ports need the node's certificate and key (--tls-cert and --tls-key; "
            "tls-cert-file and tls-key-file)"
        )
    client_auth = files.get("client_auth")
    if client_auth is None:
        client_auth = bool(ca)
    if client_auth and not ca:
        raise TlsPortError("client authentication on the TLS ports needs --tls-ca")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(os.fspath(cert), os.fspath(key))
        if client_auth and ca:
            ctx.load_verify_locations(cafile=os.fspath(ca))
    except (OSError, ssl.SSLError) as exc:
        raise TlsPortError(f"cannot load the TLS ports' certificates: {exc}") from exc
    ctx.verify_mode = ssl.CERT_REQUIRED if client_auth else ssl.CERT_NONE
    return ctx
