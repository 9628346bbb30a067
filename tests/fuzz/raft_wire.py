"""Fuzz target: the RAFT batch decoder (jetraft.raft.wire.decode_batch).

Input: the body of a route APP frame of kind ``raft`` (a msgpack batch), as a peer sends it.

Invariants (raft_wire's docstring): ``decode_batch`` returns a list of Message with checked
fields or raises ValueError, and nothing else ("trusts nothing"); what it returns encodes
with ``encode_batch`` and decodes back to the same messages.
"""

from __future__ import annotations

import contextlib

import atheris

from fuzz_support import main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.raft.wire import decode_batch, encode_batch
    from jetraft.raft.types import Entry, EntryType, Message, MessageType, Snapshot

_U64 = 1 << 64


def _check(m: object) -> None:
    assert type(m) is Message, m
    assert isinstance(m.type, MessageType), m
    assert all(type(s) is str for s in (m.group, m.src, m.dst)), m
    for v in (m.term, m.index, m.log_term, m.commit, m.reject_hint):
        assert type(v) is int and 0 <= v < _U64, m
    assert type(m.reject) is bool and type(m.context) is bytes, m
    assert type(m.entries) is tuple, m
    for e in m.entries:
        assert type(e) is Entry and isinstance(e.type, EntryType) and type(e.data) is bytes, e
        assert type(e.term) is int and type(e.index) is int and 0 <= min(e.term, e.index), e
    s = m.snapshot
    assert s is None or (type(s) is Snapshot and type(s.peers) is tuple and type(s.data) is bytes), s


def TestOneInput(data: bytes) -> None:
    try:
        messages = decode_batch(data)
    except ValueError:
        return
    assert type(messages) is list, messages
    for m in messages:
        _check(m)
    assert decode_batch(encode_batch(messages)) == messages


if __name__ == "__main__":
    main(TestOneInput)
