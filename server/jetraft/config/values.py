"""Typed values read from the parsed configuration tree (:class:`~jetraft.config.parser.Value`):
strings, booleans, integers in range, ports, ``listen``-style addresses, duration strings
and storage sizes; a value of the wrong kind or out of range is a
:class:`~jetraft.config.errors.ConfigError` at its file, line and column.

As nats-server ``server/opts.go`` reads them (``parseListen``, ``getStorageSize``), with
Go's ``net.SplitHostPort`` and ``time.ParseDuration`` (:mod:`jetraft.config.durations`).
Durations are float seconds, sizes int bytes. The helpers of
:mod:`jetraft.config.builder`, private to this package.
"""

from __future__ import annotations

import re
from typing import Any

from .durations import parse_duration
from .errors import ConfigError, Position
from .parser import Value

_KIND_WORDS = {"string": "a string", "integer": "an integer", "float": "a float", "boolean": "a boolean",
               "datetime": "a datetime", "array": "an array", "map": "a map"}  # fmt: skip


def _shown(value: Value) -> str:
    if value.kind in ("array", "map"):
        return _KIND_WORDS[value.kind]
    text = value.raw if value.raw is not None else repr(value.data) if value.kind == "string" else str(value.data)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{_KIND_WORDS[value.kind]} ({text})"


def _expect(value: Value, label: str, *kinds: str) -> Any:
    if value.kind not in kinds:
        wanted = " or ".join(_KIND_WORDS[k] for k in kinds)
        raise ConfigError.at(value.position, f"{label}: expected {wanted}, got {_shown(value)}")
    return value.data


def _string(value: Value, label: str) -> str:
    return _expect(value, label, "string")


def _bool(value: Value, label: str) -> bool:
    return _expect(value, label, "boolean")


def _int(value: Value, label: str, low: int | None = None, high: int | None = None) -> int:
    number: int = _expect(value, label, "integer")
    if low is not None and number < low:
        raise ConfigError.at(value.position, f"{label}: {number} is too small (minimum {low})")
    if high is not None and number > high:
        raise ConfigError.at(value.position, f"{label}: {number} is too big (maximum {high})")
    return number


def _port(value: Value, label: str) -> int:
    port = _int(value, label)
    _check_port(port, label, value.position)
    return port


def _check_port(port: int, label: str, position: Position) -> None:
    if not -1 <= port <= 65535:
        raise ConfigError.at(position, f"{label}: {port} is out of range (a port is 0 to 65535, or -1 for a random port)")


def _split_host_port(text: str) -> tuple[str, str] | None:
    """Go net.SplitHostPort: ``host:port``, ``[v6]:port``, ``:port``; None if malformed."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1 : end + 2] != ":":
            return None
        return text[1:end], text[end + 2 :]
    host, sep, port = text.rpartition(":")
    if not sep or ":" in host:
        return None
    return host, port


def _listen(value: Value, label: str) -> tuple[str | None, int]:
    """``listen``-style address: a port, or ``"host:port"``, ``":port"``, ``"port"``
    (nats-server opts.go parseListen). Returns (host or None, port)."""
    data = _expect(value, label, "integer", "string")
    if isinstance(data, int):
        _check_port(data, label, value.position)
        return None, data
    if data.isascii() and data.isdigit():
        host, port_text = None, data
    else:
        split = _split_host_port(data)
        if split is None:
            raise ConfigError.at(value.position, f"{label}: could not parse address {data!r}: expected host:port or a port")
        host, port_text = split[0] or None, split[1]
    if not (port_text.isascii() and port_text.isdigit()):
        raise ConfigError.at(value.position, f"{label}: could not parse port {port_text!r} in {data!r}")
    port = int(port_text)
    _check_port(port, label, value.position)
    return host, port


def _duration_string(value: Value, label: str) -> float:
    """A string value as a Go duration (seconds)."""
    try:
        return parse_duration(value.data)
    except ValueError as e:
        raise ConfigError.at(value.position, f"{label}: {e}") from None


def _storage_size(value: Value, label: str) -> int | None:
    """nats-server opts.go getStorageSize: an integer (size suffixes allowed) or a
    string ending in K, M, G or T (powers of 1024). Negative: no explicit limit (None)."""
    data = _expect(value, label, "integer", "string")
    if isinstance(data, str):
        if data == "":
            return 0
        number, unit = data[:-1], data[-1]
        shift = {"K": 10, "M": 20, "G": 30, "T": 40}.get(unit)
        if shift is None or not re.fullmatch(r"[+-]?[0-9]+", number):
            raise ConfigError.at(
                value.position, f"{label}: a size written as a string must be a number followed by K, M, G or T, got {data!r}"
            )
        data = int(number) << shift
    return None if data < 0 else data
