"""How Go prints values, where nats-server's answers and errors show them: one module for
every Go format jetraft reproduces.

- :func:`quote`: ``strconv.Quote`` (``%q``), e.g. a subject in a permissions violation;
- :func:`duration`: ``time.Duration.String()`` ("1.5ms", "1m30s", "2h0m0s");
- :func:`uptime`: nats-server's ``myUptime`` (server/monitor.go) for /connz ``uptime`` and
  ``idle`` ("59s", "2h0m1s", "1y2d3h4m5s");
- :func:`format_time` and :func:`parse_time`: ``time.RFC3339Nano`` as Go's encoding/json
  writes and reads a ``time.Time`` (trailing zeros trimmed; the zero time
  ``0001-01-01T00:00:00Z`` is ``None``);
- :func:`time_string`: ``time.Time.String()`` ("2024-05-01 10:00:00.123456 +0000 UTC").

Durations and times are integer nanoseconds (times since the Unix epoch, UTC). Pure
functions, no I/O; imported by every layer above.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re

__all__ = ["duration", "format_time", "parse_time", "quote", "time_string", "uptime"]

SECOND = 1_000_000_000
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
ZERO_TIME = "0001-01-01T00:00:00Z"
_TIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$"
)
_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def quote(text: str) -> str:
    """``text`` as Go's ``%q`` prints it (strconv.Quote). A byte that was not UTF-8
    (decoded with ``surrogateescape``) is written ``\\xNN``."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable() and not 0xD800 <= code <= 0xDFFF:
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _frac(value: int, size: int) -> str:
    whole, rest = divmod(value, size)
    if not rest:
        return str(whole)
    digits = len(str(size)) - 1
    return f"{whole}." + f"{rest:0{digits}d}".rstrip("0")


def duration(ns: int) -> str:
    """``ns`` nanoseconds as Go's ``time.Duration.String()``: ``0`` -> ``"0s"``,
    ``1500000`` -> ``"1.5ms"``, 90 s -> ``"1m30s"``, 2 h -> ``"2h0m0s"``."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < SECOND:
        for unit, size in (("ms", 10**6), ("\u00b5s", 10**3), ("ns", 1)):
            if u >= size:
                return sign + _frac(u, size) + unit
    out = ""
    hours, rest = divmod(u, 3600 * SECOND)
    minutes, rest = divmod(rest, 60 * SECOND)
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return sign + out + _frac(rest, SECOND) + "s"


def uptime(ns: int) -> str:
    """``ns`` nanoseconds as nats-server's /connz ``uptime`` and ``idle`` (monitor.go
    myUptime): whole seconds, with minutes, hours, days and years as they apply."""
    secs = max(ns, 0) // SECOND
    mins, hours, days = secs // 60, secs // 3600, secs // 86400
    years = days // 365
    if years:
        return f"{years}y{days % 365}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if days:
        return f"{days}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if hours:
        return f"{hours}h{mins % 60}m{secs % 60}s"
    if mins:
        return f"{mins}m{secs % 60}s"
    return f"{secs}s"


def format_time(ns: int | None) -> str:
    """RFC 3339 UTC with nanoseconds, trailing zeros trimmed (Go ``time.RFC3339Nano``);
    ``None`` is Go's zero time ``"0001-01-01T00:00:00Z"``."""
    if ns is None:
        return ZERO_TIME
    secs, frac = divmod(ns, SECOND)
    text = (_EPOCH + _dt.timedelta(seconds=secs)).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def parse_time(text: str) -> int | None:
    """An RFC 3339 timestamp as nanoseconds since the epoch (UTC); the zero time gives
    ``None``. Raises ``ValueError`` on malformed input."""
    m = _TIME_RE.match(text)
    if not m:
        raise ValueError(f"parsing time {json.dumps(text)}: not RFC 3339")
    year, mon, day, hh, mm, ss = (int(g) for g in m.groups()[:6])
    frac = int((m.group(7) or "0").ljust(9, "0"))
    tz = m.group(8)
    offset = 0 if tz in ("Z", "z") else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    when = _dt.datetime(year, mon, day, hh, mm, ss, tzinfo=_dt.timezone.utc)
    secs = (when - _EPOCH) // _dt.timedelta(seconds=1) - offset
    if year == 1 and mon == 1 and day == 1 and hh == mm == ss == 0 and frac == 0 and offset == 0:
        return None
    return secs * SECOND + frac


def time_string(when: _dt.datetime) -> str:
    """A time as Go's ``time.Time.String()`` prints it in UTC:
    ``2024-05-01 10:00:00.123456 +0000 UTC``."""
    text = when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    return text.rstrip("0").rstrip(".") + " +0000 UTC"


#: nats-server's hash alphabet (accounts.go ``digits``).
_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def go_hash(text: str) -> str:
    """nats-server events.go getHash: 8 characters of ``text``'s SHA-256 in base 62."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_HASH_DIGITS[b % 62] for b in digest[:8])
