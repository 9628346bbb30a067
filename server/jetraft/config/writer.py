"""Write plain Python values as NATS configuration text.

The output reads back, through :func:`jetraft.config.parse_text`, to a value equal
to the input: strings are always double-quoted (so ``$`` is never a variable and
``true`` stays a string), keys are bare only when that is unambiguous.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["dumps"]

_BARE_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.\-]*")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_INT64 = range(-(2**63), 2**63)


def dumps(config: Mapping[str, Any], indent: str = "  ") -> str:
    """Render a mapping of plain values (``str``, ``int``, ``float``, ``bool``, aware
    UTC ``datetime`` without microseconds, lists/tuples and mappings of them) as
    configuration text, one top-level ``key: value`` per line.

    Raises TypeError for other types and ValueError for values the format cannot
    hold (a non-finite float, an integer beyond 64 bits, a key containing both
    quote characters, a datetime that is not whole seconds of UTC in years 1000-9999).
    """
    return "".join(f"{_key(key)}: {_value(value, indent, 0)}\n" for key, value in config.items())


def _key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"configuration keys must be strings, got {type(key).__name__}")
    if _BARE_KEY.fullmatch(key) and key.lower() != "include":
        return key
    if '"' not in key:  # quoted keys have no escapes
        return f'"{key}"'
    if "'" not in key:
        return f"'{key}'"
    raise ValueError(f"key {key!r} holds both quote characters; the format cannot write it")


def _string(text: str) -> str:
    out = []
    for c in text:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif c < " " or c == "\x7f":
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _float(number: float) -> str:
    if not math.isfinite(number):
        raise ValueError(f"the format cannot hold the float {number!r}")
    text = repr(number)
    if "e" in text or "E" in text:
        text = format(Decimal(text), "f")
    return text if "." in text else text + ".0"


def _datetime(stamp: _dt.datetime) -> str:
    offset = stamp.utcoffset()
    if offset is None or offset != _dt.timedelta(0) or stamp.microsecond or not 1000 <= stamp.year <= 9999:
        raise ValueError(f"the format holds only whole-second UTC datetimes in years 1000-9999, got {stamp!r}")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _value(value: Any, indent: str, depth: int) -> str:
    inner, outer = indent * (depth + 1), indent * depth
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value not in _INT64:
            raise ValueError(f"the format holds 64-bit integers only, got {value}")
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, _dt.datetime):
        return _datetime(value)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        lines = "".join(f"{inner}{_key(k)}: {_value(v, indent, depth + 1)}\n" for k, v in value.items())
        return "{\n" + lines + outer + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        lines = "".join(f"{inner}{_value(v, indent, depth + 1)}\n" for v in value)
        return "[\n" + lines + outer + "]"
    raise TypeError(f"cannot write a {type(value).__name__} as a configuration value")
