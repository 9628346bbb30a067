"""Fuzz target: stream and consumer configuration decoding and checks (jetraft.jetstream.model).

Input: a flags byte, then a JSON body. Flags: bit 0 = consumer (else stream), bit 1 =
pedantic, bits 2-3 = the parent stream of a consumer (one of PARENTS).

A stream body is handled as STREAM.CREATE.S does: ``decode_request``,
``StreamConfig.decode``, ``create_request_checks("S")``, ``checked(pedantic=...)``,
``with_static_metadata()``; a consumer body as the ``config`` of a CONSUMER.CREATE:
``ConsumerConfig.decode`` then ``checked(parent, pedantic=...)``.

Invariants: only JSApiError comes out of decode and checks (the module docstring); an
accepted config survives what a restart does with it -- ``to_json`` written as JSON and
read back with ``StreamConfig.from_json`` (or ``ConsumerConfig.decode(...).checked(parent)``,
as JetStreamAccount.recover does) without an error and to the same JSON.
"""

from __future__ import annotations

import contextlib
import json

import atheris

from fuzz_support import main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.jetstream.requests import decode_request, json_bytes
    from jetraft.jetstream.errors import JSApiError
    from jetraft.jetstream.model import ConsumerConfig, StreamConfig

#: Parent streams for consumer checks: limits, work queue, interest, and one with limits
#: that the consumer defaults read (consumer_limits, max ack pending).
PARENTS = tuple(StreamConfig.from_json(c) for c in (
    {"name": "S", "subjects": ["s.>"]},
    {"name": "S", "subjects": ["s.>", "t.*"], "retention": "workqueue", "storage": "file"},
    {"name": "S", "subjects": ["s.>"], "retention": "interest", "max_msgs": 10},
    {"name": "S", "subjects": ["s.a", "s.b.>"], "allow_direct": True,
     "consumer_limits": {"inactive_threshold": 5_000_000_000, "max_ack_pending": 100}},
))


def _reread(cfg) -> dict:
    """``cfg`` as a restart reads it back: its JSON on disk, decoded and checked again."""
    return json.loads(json_bytes(cfg.to_json()))


def _stream(body: bytes, pedantic: bool) -> None:
    req = decode_request(body, "StreamConfigRequest") or {}
    cfg = StreamConfig.decode(req)
    cfg.create_request_checks("S")
    cfg = cfg.checked(pedantic=pedantic).with_static_metadata()
    stored = _reread(cfg)
    again = StreamConfig.from_json(stored)
    assert again.to_json() == cfg.to_json(), (cfg, again)


def _consumer(body: bytes, pedantic: bool, parent: StreamConfig) -> None:
    raw = decode_request(body, "ConsumerConfig") or {}
    cfg = ConsumerConfig.decode(raw).checked(parent, pedantic=pedantic)
    stored = _reread(cfg)
    again = ConsumerConfig.decode(stored).checked(parent)
    assert again.to_json() == cfg.to_json(), (cfg, again)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    flags, body = data[0], data[1:]
    pedantic = bool(flags & 2)
    try:
        if flags & 1:
            _consumer(body, pedantic, PARENTS[(flags >> 2) & 3])
        else:
            _stream(body, pedantic)
    except JSApiError as err:
        assert type(err.code) is int and type(err.err_code) is int and type(err.description) is str
        assert json.loads(json_bytes(err.to_json())) == err.to_json()


if __name__ == "__main__":
    main(TestOneInput)
