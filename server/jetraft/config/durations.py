"""Go ``time.ParseDuration`` for configuration values.

nats-server reads durations (``ping_interval: "2m"``, ``write_deadline: "10s"``)
with Go's ``time.ParseDuration``; this module accepts exactly the same strings.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["parse_duration"]

_NANOSECONDS = {
    "ns": 1,
    "us": 10**3,
    "\u00b5s": 10**3,  # micro sign
    "\u03bcs": 10**3,  # Greek small letter mu
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_MAX_NANOSECONDS = 2**63 - 1


def parse_duration(text: str) -> float:
    """Parse a Go duration string (``"300ms"``, ``"-1.5h"``, ``"2h45m"``, ``"0"``) into
    float seconds.

    A duration is an optional sign then one or more decimal numbers, each with an
    optional fraction and a unit: ``ns``, ``us`` (or ``µs``), ``ms``, ``s``, ``m``,
    ``h``. A bare ``0`` is allowed. Raises ValueError (with Go's wording: invalid
    duration, missing unit, unknown unit) otherwise, or beyond about 292 years.
    """
    s = text
    negative = False
    if s[:1] in ("-", "+"):
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    if s == "":
        raise ValueError(f"invalid duration {text!r}")
    total = 0
    while s:
        i = 0
        while i < len(s) and s[i].isascii() and s[i].isdigit():
            i += 1
        whole, s = s[:i], s[i:]
        fraction = ""
        if s.startswith("."):
            i = 1
            while i < len(s) and s[i].isascii() and s[i].isdigit():
                i += 1
            fraction, s = s[1:i], s[i:]
        if whole == "" and fraction == "":
            raise ValueError(f"invalid duration {text!r}")
        i = 0
        while i < len(s) and s[i] != "." and not (s[i].isascii() and s[i].isdigit()):
            i += 1
        unit, s = s[:i], s[i:]
        if unit == "":
            raise ValueError(f"missing unit in duration {text!r}")
        if unit not in _NANOSECONDS:
            raise ValueError(f"unknown unit {unit!r} in duration {text!r}")
        amount = Fraction(int(whole or "0"))
        if fraction:
            amount += Fraction(int(fraction), 10 ** len(fraction))
        total += int(amount * _NANOSECONDS[unit])
        if total > _MAX_NANOSECONDS + (1 if negative else 0):
            raise ValueError(f"invalid duration {text!r}")
    return (-total if negative else total) / 1e9
