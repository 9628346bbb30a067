"""Parsing and formatting of the sizes, durations and times the admin CLI shows.

Flags take what the ``nats`` CLI takes: sizes as ``1024``, ``10K``, ``1MB``, ``2GiB``
(powers of 1024) or ``-1``/``unlimited``; durations as Go durations (``500ms``, ``2m``,
``1h30m``) or a whole number of days, weeks or years (``7d``, ``2w``, ``1y``).
"""

from __future__ import annotations

import datetime as _dt
import math
import re

from jetraft.config.durations import parse_duration as _go_duration

_SIZE = re.compile(r"(?i)\s*([0-9]+(?:\.[0-9]+)?)\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)\s*")
_SHIFT = {"": 0, "b": 0, "k": 10, "m": 20, "g": 30, "t": 40}
_LONG_UNITS = {"d": 86_400, "w": 7 * 86_400, "y": 365 * 86_400}
_UNLIMITED = ("-1", "unlimited", "none")


def parse_size(text: str) -> int:
    """``"10K"`` -> 10240; ``"-1"``/``"unlimited"`` -> -1. Raises ValueError."""
    if text.strip().lower() in _UNLIMITED:
        return -1
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid size {text!r} (examples: 1024, 10K, 1MB, 2GiB, -1)")
    return int(float(m.group(1)) * (1 << _SHIFT[m.group(2)[:1].lower()]))


def parse_duration(text: str) -> float:
    """A Go duration, or ``<n>d``/``<n>w``/``<n>y``, in seconds; ``unlimited`` -> 0. Raises ValueError."""
    t = text.strip().lower()
    if t in _UNLIMITED or t == "0":
        return 0.0
    m = re.fullmatch(r"([0-9]+)([dwy])", t)
    if m:
        return float(int(m.group(1)) * _LONG_UNITS[m.group(2)])
    return _go_duration(t)


def format_duration(seconds: float | None) -> str:
    """Go's ``time.Duration.String`` for whole and fractional durations: ``2m0s``, ``1.5s``, ``250ms``."""
    if not seconds:
        return "0s"
    ns = int(round(seconds * 1e9))
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:g}µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:g}ms"
    hours, rest = divmod(ns, 3_600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    secs = f"{rest / 1e9:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


def format_ago(nanoseconds: int | float) -> str:
    """A short age for 'seen ... ago': ``0.07s``, ``12.30s``, ``3m5s``, ``2h1m``."""
    seconds = nanoseconds / 1e9
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes}m"
    return f"{hours // 24}d{hours % 24}h"


def format_bytes(n: int | float | None) -> str:
    """IEC bytes as the ``nats`` CLI shows them (its ``humanize.IBytes``, go-humanize
    v1.0.1): below 10 bytes ``7 B``; else the largest unit the size reaches, rounded to a
    tenth, with one decimal below 10 (``1.0 KiB``, ``5.5 GiB``) and none from 10 up
    (``1023 B``, ``293 KiB``, ``1024 KiB`` for one byte short of a MiB). A negative size
    is shown as ``-`` and its magnitude."""
    n = int(n or 0)
    if n < 0:
        return "-" + format_bytes(-n)
    if n < 10:
        return f"{n} B"
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    exponent = 0
    while exponent + 1 < len(units) and n >= 1024 ** (exponent + 1):
        exponent += 1
    tenths = math.floor(n / 1024 ** exponent * 10 + 0.5) / 10
    return f"{tenths:.1f} {units[exponent]}" if tenths < 10 else f"{tenths:.0f} {units[exponent]}"


def format_limit(value: int | None, render=lambda v: f"{v:,}") -> str:
    """A stream/consumer limit: ``unlimited`` for -1/0/None, else ``render(value)``."""
    if value is None or value <= 0:
        return "unlimited"
    return render(value)


def format_count(n: int | None) -> str:
    """A count with thousands separators (``1,234``)."""
    return f"{n or 0:,}"


def parse_time(text: str | None) -> _dt.datetime | None:
    """An RFC 3339 time from the server (nanosecond precision allowed); None for Go's zero time."""
    if not text or text.startswith("0001-01-01"):
        return None
    m = re.fullmatch(r"(.*?T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if m is None:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return _dt.datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}")


def _aware(when: _dt.datetime | str | None) -> _dt.datetime | None:
    """A server time (text or datetime) as an aware datetime (UTC when it has no zone)."""
    if isinstance(when, str):
        when = parse_time(when)
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when


def format_time(when: _dt.datetime | str | None) -> str:
    """A server time in local time, ``2021-02-05 12:07:34``; ``never`` for none."""
    when = _aware(when)
    return "never" if when is None else when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def since(when: _dt.datetime | str | None, now: _dt.datetime | str | None = None) -> str:
    """How long before ``now`` (default: this moment) ``when`` was (``12.30s``, ``3m5s``);
    ``never`` for none."""
    when = _aware(when)
    if when is None:
        return "never"
    now = _aware(now) or _dt.datetime.now(_dt.timezone.utc)
    return format_ago(max(0.0, (now - when).total_seconds()) * 1e9)


def clock() -> str:
    """The local wall-clock time prefix of progress lines (``14:32:17``)."""
    return _dt.datetime.now().strftime("%H:%M:%S")
