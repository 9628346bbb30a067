"""Go ``time.ParseDuration`` for configuration values.

nats-server reads durations (``ping_interval: "2m"``, ``write_deadline: "10s"``)
with Go's ``time.ParseDuration``; this module accepts exactly the same strings.
"""

from __future__ import annotations

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
_LIMIT = 1 << 63  # Go accumulates in uint64 and allows -2^63 .. 2^63-1 ns


def _leading_int(s: str) -> tuple[int, str]:
    """Go time.leadingInt: the leading digits; ValueError on overflow."""
    x, i = 0, 0
    while i < len(s) and "0" <= s[i] <= "9":
        if x > _LIMIT // 10:
            raise OverflowError
        x = x * 10 + ord(s[i]) - 48
        if x > _LIMIT:
            raise OverflowError
        i += 1
    return x, s[i:]


def _leading_fraction(s: str) -> tuple[int, float, str]:
    """Go time.leadingFraction: digits after '.', ignoring those past 63 bits."""
    x, scale, i, overflow = 0, 1.0, 0, False
    while i < len(s) and "0" <= s[i] <= "9":
        if not overflow:
            y = x * 10 + ord(s[i]) - 48
            if x > (_LIMIT - 1) // 10 or y > _LIMIT:
                overflow = True
            else:
                x, scale = y, scale * 10
        i += 1
    return x, scale, s[i:]


def parse_duration(text: str) -> float:
    """Parse a Go duration string (``"300ms"``, ``"-1.5h"``, ``"2h45m"``, ``"0"``) into
    float seconds.

    A duration is an optional sign then one or more decimal numbers, each with an
    optional fraction and a unit: ``ns``, ``us`` (or ``µs``), ``ms``, ``s``, ``m``,
    ``h``. A bare ``0`` is allowed. Raises ValueError (with Go's wording: invalid
    duration, missing unit, unknown unit) otherwise, or beyond about 292 years.
    Nanosecond arithmetic is Go's, fractions included.
    """
    invalid = ValueError(f"invalid duration {text!r}")
    s = text
    negative = False
    if s[:1] in ("-", "+"):
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    if s == "":
        raise invalid
    total = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise invalid
        before = len(s)
        try:
            whole, s = _leading_int(s)
        except OverflowError:
            raise invalid from None
        has_whole = len(s) != before
        fraction, scale, has_fraction = 0, 1.0, False
        if s.startswith("."):
            s = s[1:]
            before = len(s)
            fraction, scale, s = _leading_fraction(s)
            has_fraction = len(s) != before
        if not has_whole and not has_fraction:
            raise invalid
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        if i == 0:
            raise ValueError(f"missing unit in duration {text!r}")
        unit, s = s[:i], s[i:]
        if unit not in _NANOSECONDS:
            raise ValueError(f"unknown unit {unit!r} in duration {text!r}")
        factor = _NANOSECONDS[unit]
        if whole > _LIMIT // factor:
            raise invalid
        nanoseconds = whole * factor
        if fraction > 0:
            nanoseconds += int(float(fraction) * (float(factor) / scale))
            if nanoseconds > _LIMIT:
                raise invalid
        total += nanoseconds
        if total > _LIMIT:
            raise invalid
    if not negative and total > _LIMIT - 1:
        raise invalid
    return (-total if negative else total) / 1e9
