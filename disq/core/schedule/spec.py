"""When a schedule fires: a cron expression or a fixed interval, in a time zone.

``<spec>`` is what ``SCHEDULE ADD`` takes:

- a cron expression of 5 fields (minute hour day month weekday), or of 6 with seconds first;
- a shortcut: ``@yearly @annually @monthly @weekly @daily @midnight @hourly``;
- ``@every <n>s`` (also ``m``, ``h``): a fixed interval.

Cron is parsed and iterated by croniter (pallets-eco's, the maintained one), not by hand.
croniter walks *local wall times*; this module maps them to instants the way Vixie cron
treats a daylight-saving change, which is what "as cron does" means to an operator:

- a local time that does not exist (the hour skipped in spring, 02:30 in Europe/Berlin on
  the last Sunday of March) fires once, at the first instant after the gap (03:00 CEST);
- a local time that happens twice (the hour repeated in autumn) fires once, at its first
  occurrence, unless the hour field is a wildcard (``*`` or a step), which fires in both:
  "every 15 minutes" keeps its pace through the repeated hour.

An interval ticks at whole multiples of its period since the Unix epoch, whatever the zone:
every node computes the same ticks without agreeing on a start. A tick is an instant in
whole Unix seconds: it names the tick's job (``schedule:<name>:<tick>``).

Pure: no clock; the caller passes the time. croniter (and dateutil under it) load on the
first cron schedule, not at a node's start.
"""

from __future__ import annotations

import bisect
import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Final

SHORTCUTS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EVERY = re.compile(r"^@every\s+([0-9]{1,9})\s*([smh]?)$", re.IGNORECASE)
_UNIT_S: Final = {"": 1, "s": 1, "m": 60, "h": 3600}
INTERVAL_MAX_S: Final = 366 * 86400
SPEC_MAX_BYTES: Final = 256
ZONE_MAX_BYTES: Final = 64
# A cron expression may match nothing for years (30 2 31 2 *); croniter gives up after this.
_YEARS_MAX: Final = 8
_CACHE_TICKS: Final = 32  # cron ticks computed per croniter walk
# Month and weekday names a cron field may use; what is left of a field without them must
# hold no R (croniter's random value, drawn anew at each evaluation) and no H (its hashed
# value, which depends on a hash id each caller may pass differently). Every node must
# compute the same ticks from the same text, or "one job per tick" breaks: two nodes would
# fire different ticks, each bound to its own job.
_NAMES: Final = re.compile(
    r"jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|sun|mon|tue|wed|thu|fri|sat", re.IGNORECASE
)


class SpecError(ValueError):
    """A schedule's spec or zone is not valid; the message names what is wrong."""


def load_zone(name: str) -> tzinfo:
    """An IANA zone by name (``UTC`` without tzdata). zoneinfo loads with the first zone
    other than UTC: a node's start goes without it (and sysconfig under it)."""
    if name.upper() in ("UTC", "Z", "ETC/UTC"):
        return UTC
    if not name or len(name.encode()) > ZONE_MAX_BYTES or name.startswith(("/", ".")):
        raise SpecError(f"invalid time zone {name!r}")
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise SpecError(
            f"unknown time zone {name!r} (an IANA name, such as Europe/Berlin)"
        ) from None


class Spec:
    """A parsed spec in its zone: the ticks after or before a time."""

    __slots__ = ("_cache", "_cron", "_hour_wild", "interval_s", "text", "zone", "zone_name")

    def __init__(self, text: str, zone_name: str = "UTC") -> None:
        self.text = text
        self.zone_name = zone_name
        self.zone = load_zone(zone_name)
        self.interval_s = 0
        self._cron = ""
        self._hour_wild = False
        self._cache: list[int] = []  # [after, tick, tick, ...]: the next ticks after ``after``
        raw = text.strip()
        if not raw or len(raw.encode()) > SPEC_MAX_BYTES:
            raise SpecError(f"invalid schedule spec {text!r}")
        m = _EVERY.match(raw)
        if m is not None:
            n = int(m.group(1)) * _UNIT_S[m.group(2).lower()]
            if not 1 <= n <= INTERVAL_MAX_S:
                raise SpecError(f"@every needs an interval of 1 s to 366 days, not {raw!r}")
            self.interval_s = n
            return
        if raw.startswith("@"):
            expr = SHORTCUTS.get(raw.lower())
            if expr is None:
                raise SpecError(
                    f"unknown schedule shortcut {raw!r} (use @yearly, @monthly, @weekly, "
                    "@daily, @hourly or @every <n>s)"
                )
        else:
            expr = raw
        fields = expr.split()
        if len(fields) not in (5, 6):
            raise SpecError(
                f"a cron expression has 5 fields, or 6 with seconds first: {text!r} has "
                f"{len(fields)}"
            )
        for field in fields:
            if set(_NAMES.sub("", field).lower()) & {"r", "h"}:
                raise SpecError(
                    f"cron field {field!r} of {text!r} is random (R) or hashed (H): every node "
                    "must compute the same ticks, so only fixed values, ranges, steps, lists, "
                    "names, L, W and # are accepted"
                )
        croniter = _croniter()
        six = len(fields) == 6
        try:
            ok = croniter.is_valid(expr, second_at_beginning=six)
        except Exception:  # croniter raises assorted errors on odd input
            ok = False
        if not ok:
            raise SpecError(f"invalid cron expression {text!r}")
        self._cron = expr
        hour = fields[2] if six else fields[1]
        self._hour_wild = hour == "*" or hour.startswith("*/")
        # One real iteration: croniter accepts some expressions it cannot walk.
        if self.next_after(0) is None:
            raise SpecError(f"cron expression {text!r} never fires")

    def describe(self) -> str:
        return self.text if self.zone_name == "UTC" else f"{self.text} ({self.zone_name})"

    # ------------------------------------------------------------------ ticks
    def next_after(self, t_s: int) -> int | None:
        """The first tick strictly after Unix second ``t_s``, or None (none in 8 years)."""
        if self.interval_s:
            n = self.interval_s
            return (t_s // n + 1) * n
        cache = self._cache
        if cache and cache[0] <= t_s < cache[-1]:
            return cache[bisect.bisect_right(cache, t_s)]
        ticks = self._cron_after(t_s, _CACHE_TICKS)
        self._cache = [t_s, *ticks] if len(ticks) == _CACHE_TICKS else []
        return ticks[0] if ticks else None

    def _cron_after(self, t_s: int, count: int) -> list[int]:
        """The first ``count`` ticks after ``t_s`` (fewer: none for 8 years after)."""
        zone = self.zone
        local = datetime.fromtimestamp(t_s, zone).replace(tzinfo=None)
        back = 0
        if self._hour_wild and zone is not UTC:
            # In the first pass of an hour that autumn repeats, a local time *before*
            # ``local`` fires again in the second pass, after t_s: start that much earlier.
            ahead = datetime.fromtimestamp(t_s + 3 * 3600, zone).utcoffset()
            now_off = datetime.fromtimestamp(t_s, zone).utcoffset()
            if ahead is not None and now_off is not None and now_off > ahead:
                back = int((now_off - ahead).total_seconds())
        start = local - timedelta(seconds=back)
        it = self._iter(start, prev=False)
        out: list[int] = []
        while True:
            try:
                nxt: datetime = it.get_next(datetime)
            except Exception:
                break
            if nxt.year - local.year > _YEARS_MAX:
                break
            out.extend(tick for tick in self._instants(nxt) if tick > t_s)
            if len(out) >= count and nxt > local + timedelta(seconds=back):
                break
        out.sort()
        return out[:count]

    def prev_at_or_before(self, t_s: int) -> int | None:
        """The last tick at or before ``t_s``, or None."""
        if self.interval_s:
            n = self.interval_s
            return (t_s // n) * n
        local = datetime.fromtimestamp(t_s, self.zone).replace(tzinfo=None) + timedelta(hours=3)
        it = self._iter(local + timedelta(seconds=1), prev=True)
        for _ in range(100_000):
            try:
                prv: datetime = it.get_prev(datetime)
            except Exception:
                return None
            if local.year - prv.year > _YEARS_MAX:
                return None
            best = [tick for tick in self._instants(prv) if tick <= t_s]
            if best:
                return max(best)
        return None

    def ticks_between(self, after_s: int, until_s: int, limit: int) -> list[int]:
        """Ticks in ``(after_s, until_s]``, oldest first, at most ``limit`` (the oldest)."""
        out: list[int] = []
        t = after_s
        while len(out) < limit:
            nxt = self.next_after(t)
            if nxt is None or nxt > until_s:
                break
            out.append(nxt)
            t = nxt
        return out

    def count_between(self, after_s: int, until_s: int, cap: int = 100_000) -> int:
        """How many ticks fall in ``(after_s, until_s]`` (counted up to ``cap``)."""
        if until_s <= after_s:
            return 0
        if self.interval_s:
            n = self.interval_s
            return min(cap, until_s // n - after_s // n)
        return len(self.ticks_between(after_s, until_s, cap))

    def upcoming(self, after_s: int, count: int) -> list[int]:
        return self.ticks_between(after_s, 1 << 40, count)

    # ------------------------------------------------------------------ cron in a zone
    def _iter(self, start: datetime, prev: bool) -> Any:
        croniter = _croniter()
        return croniter(
            self._cron,
            start,
            second_at_beginning=len(self._cron.split()) == 6,
            max_years_between_matches=_YEARS_MAX,
            is_prev=prev,
        )

    def _instants(self, local: datetime) -> list[int]:
        """The instants (Unix s) at which local wall time ``local`` fires (0, 1 or 2)."""
        zone = self.zone
        if zone is UTC:
            return [int(local.replace(tzinfo=UTC).timestamp())]
        first = local.replace(tzinfo=zone, fold=0)
        second = local.replace(tzinfo=zone, fold=1)
        t0 = int(first.timestamp())
        t1 = int(second.timestamp())
        back0 = datetime.fromtimestamp(t0, zone).replace(tzinfo=None)
        if back0 != local:
            # Skipped by a spring-forward: fire once, at the gap's end. One of the two readings
            # (the offsets before and after the change) lands before the gap and one after it:
            # the first instant whose local time is past ``local`` lies between them.
            lo, hi = min(t0, t1), max(t0, t1)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) > local:
                    hi = mid
                else:
                    lo = mid
            return [hi]
        if t0 != t1:  # happens twice (autumn)
            return [t0, t1] if self._hour_wild else [t0]
        return [t0]


_CRONITER: Any = None


def _croniter() -> Any:
    global _CRONITER
    if _CRONITER is None:
        from croniter import croniter

        _CRONITER = croniter
    return _CRONITER
