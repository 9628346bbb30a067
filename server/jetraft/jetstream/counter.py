"""Counter streams (``allow_msg_counter``, ADR-49, API level 2): a message published with a
``Nats-Incr`` header adds its increment to the last value on its subject.

Sans-IO and deterministic: every replica of a clustered stream applies the same publish to
the same last message and so stores the same value. Behaviour follows nats-server
``server/stream.go`` ``processJetStreamMsg`` (``getMessageIncr``, the counter block) and
``CounterValue``/``CounterSources``:

- ``Nats-Incr`` is a base-10 integer of any size with an optional sign (Go ``big.Int``
  ``SetString(s, 10)``); anything else is 10171 "message counter increment is invalid",
  on any stream;
- on a counter stream the message's payload must be empty (10170), the increment may not be
  combined with ``Nats-Rollup`` or any ``Nats-Expected-*`` header (10171), and a message
  without ``Nats-Incr`` is refused (10169); on any other stream an increment is refused
  (10168 "message counters is disabled") unless the message was sourced (stored as it is);
- the stored payload is ``{"val":"<new value>"}``; the PubAck carries ``"val"``;
- a message sourced into a counter stream carries its origin's value, not an increment:
  the stream remembers the last value of each (origin, subject) in the
  ``Nats-Counter-Sources`` header (``{"<origin>":{"<subject>":"<value>"}}``) and adds the
  difference since the last one, which replaces the message's ``Nats-Incr``;
- a last message whose payload or ``Nats-Counter-Sources`` is not such JSON is 10172
  "message counter is broken"; a new message over the server's payload limit is 10054.

Arithmetic and conversions are decimal (:mod:`decimal`, exact at the precision given),
linear in the digits: an increment is bounded by the header block (65,535 bytes), a
value by the payload limit, and neither costs quadratic time on the event loop as
``int(str)`` would. One difference: a sourced value that is not an integer is 10172
(nats-server reads it as zero).
"""

from __future__ import annotations

import decimal
import re
from typing import Any

from jetraft.protocol.headers import get_header, set_header

from . import errors as E
from .gojson import GoJSONError, unmarshal
from .requests import json_bytes

__all__ = ["COUNTER_SOURCES", "INCR", "MAX_COUNTER_MESSAGE", "CounterUpdate", "apply_increment",
           "check_increment", "parse_incr", "value_of"]

INCR = "Nats-Incr"
COUNTER_SOURCES = "Nats-Counter-Sources"
#: Headers plus payload a counter's new message may hold, bytes: nats-server's default
#: ``max_payload`` (MAX_PAYLOAD_SIZE, server/const.go), the same on every replica.
MAX_COUNTER_MESSAGE = 1024 * 1024

_INTEGER = re.compile(r"[+-]?[0-9]+")
#: Headers an increment may not be combined with (nats-server processJetStreamMsg).
_INCOMPATIBLE = ("Nats-Rollup", "Nats-Expected-Stream", "Nats-Expected-Last-Msg-Id",
                 "Nats-Expected-Last-Subject-Sequence-Subject", "Nats-Expected-Last-Sequence",
                 "Nats-Expected-Last-Subject-Sequence")


def _decimal(text: str) -> decimal.Decimal | None:
    """``text`` as an exact integer, or None when it is not a Go ``big.Int`` base-10 literal."""
    if not _INTEGER.fullmatch(text):
        return None
    return decimal.Decimal(text)


def _text(value: decimal.Decimal) -> str:
    """A value as Go's ``big.Int.String`` writes it (no ``+``, no leading zero, ``0``)."""
    return "0" if value.is_zero() else f"{value:f}"


def _add(a: decimal.Decimal, b: decimal.Decimal, negate: bool = False) -> decimal.Decimal:
    digits = max(len(a.as_tuple().digits), len(b.as_tuple().digits)) + 2
    ctx = decimal.Context(prec=digits, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                          traps=[decimal.Inexact, decimal.Rounded, decimal.InvalidOperation])
    return ctx.subtract(a, b) if negate else ctx.add(a, b)


def parse_incr(headers: bytes | None) -> decimal.Decimal | None:
    """The ``Nats-Incr`` of a header block: None when absent or empty; raises JSApiError
    10171 when it is not an integer (nats-server getMessageIncr)."""
    text = get_header(headers, INCR) if headers and b"Nats-Incr" in headers else None
    if not text:
        return None
    value = _decimal(text)
    if value is None:
        raise E.api_error("JSMessageIncrInvalidErr")
    return value


def check_increment(headers: bytes | None, data: bytes, *, counter: bool,
                    sourced: bool) -> decimal.Decimal | None:
    """The publish checks of an increment, in nats-server's order (before every other
    header check): returns the increment or None. Raises JSApiError 10171 (not an
    integer; with a rollup or an expected-* header), 10168 (not a counter stream), 10170
    (a payload). A sourced message is only checked for a well-formed increment."""
    incr = parse_incr(headers)
    if incr is None or sourced:
        return incr
    if not counter:
        raise E.api_error("JSMessageIncrDisabledErr")
    if data:
        raise E.api_error("JSMessageIncrPayloadErr")
    if any(get_header(headers, key) for key in _INCOMPATIBLE):
        raise E.api_error("JSMessageIncrInvalidErr")
    return incr


def value_of(payload: bytes) -> decimal.Decimal:
    """The value a counter message holds (``{"val":"<integer>"}``; ``null``, ``{}`` or an
    empty ``val`` hold 0). Raises JSApiError 10172 for anything else."""
    try:
        body = unmarshal(payload)
    except GoJSONError:
        raise E.api_error("JSMessageCounterBrokenErr") from None
    if body is None:
        return decimal.Decimal(0)
    if not isinstance(body, dict):
        raise E.api_error("JSMessageCounterBrokenErr")
    # Go's decoder matches a struct field's name in any case; the last match wins
    text: Any = ""
    for key, value in body.items():
        if key.lower() == "val":
            text = value
    if text is None or text == "":
        return decimal.Decimal(0)
    value = _decimal(text) if isinstance(text, str) else None
    if value is None:
        raise E.api_error("JSMessageCounterBrokenErr")
    return value


def _sources_of(headers: bytes | None) -> dict[str, dict[str, str]]:
    """The ``Nats-Counter-Sources`` of a stored counter message (empty when absent).
    Raises JSApiError 10172 when it is not a JSON object of objects of strings."""
    text = get_header(headers, COUNTER_SOURCES) if headers else None
    if not text:
        return {}
    try:
        body = unmarshal(text.encode("utf-8", "surrogateescape"))
    except GoJSONError:
        raise E.api_error("JSMessageCounterBrokenErr") from None
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise E.api_error("JSMessageCounterBrokenErr")
    out: dict[str, dict[str, str]] = {}
    for origin, subjects in body.items():
        if subjects is None:
            out[origin] = {}
            continue
        if not isinstance(subjects, dict) or not all(isinstance(v, str) for v in subjects.values()):
            raise E.api_error("JSMessageCounterBrokenErr")
        out[origin] = dict(subjects)
    return out


class CounterUpdate:
    """What a counter publish stores: ``headers`` (raw block), ``data`` (the
    ``{"val":...}`` payload) and ``value`` (the new value's text, for the PubAck)."""

    __slots__ = ("data", "headers", "value")

    def __init__(self, headers: bytes | None, data: bytes, value: str) -> None:
        self.headers, self.data, self.value = headers, data, value


def apply_increment(incr: decimal.Decimal, headers: bytes | None, data: bytes, subject: str,
                    last: tuple[bytes | None, bytes] | None, source_header: str) -> CounterUpdate:
    """The message a counter stream stores for an increment on ``subject``.

    ``last``: (headers, payload) of the subject's last message, or None. ``source_header``:
    the message's ``Nats-Stream-Source`` ("" unless sourced): then ``data`` is the origin's
    value and the increment is its difference from the last value seen from that origin
    and subject (nats-server: the fifth field of the header names the subject).
    Raises JSApiError 10172 (a broken last message or sourced value) or 10054 (the new
    message is over :data:`MAX_COUNTER_MESSAGE`)."""
    initial = decimal.Decimal(0)
    sources: dict[str, dict[str, str]] = {}
    if last is not None:
        initial = value_of(last[1])
        sources = _sources_of(last[0])
    if source_header:
        fields = source_header.split(" ")
        origin = fields[0]
        origin_subject = fields[4] if len(fields) >= 5 else subject
        sourced = value_of(data)
        previous = _decimal(sources.get(origin, {}).get(origin_subject, "")) or decimal.Decimal(0)
        sources.setdefault(origin, {})[origin_subject] = _text(sourced)
        incr = _add(sourced, previous, negate=True)
        headers = set_header(headers, INCR, _text(incr))
    value = _text(_add(initial, incr))
    payload = b'{"val":"' + value.encode() + b'"}'
    if sources:
        ordered = {k: dict(sorted(v.items())) for k, v in sorted(sources.items())}
        headers = set_header(headers, COUNTER_SOURCES, json_bytes(ordered).decode())
    hlen = len(headers) if headers else 0
    if hlen > MAX_COUNTER_MESSAGE or len(payload) > MAX_COUNTER_MESSAGE - hlen:
        raise E.message_exceeds_maximum()
    return CounterUpdate(headers, payload, value)
