"""What a peer sends into a replica's store is decoded within a budget, as a restore's data
is (jetraft.protocol.bounded_msgpack): a stream snapshot (InstallSnapshot's data, or the
catch-up's ``snap`` answer) and every catch-up frame. A decode bomb is refused before memory
grows; a real snapshot and real frames still decode."""

from __future__ import annotations

import resource
import time

import msgpack
import pytest

from jetraft.jetstream.catchup import StreamSnapshot, StreamSnapshotError
from jetraft.net.jetstream.catchup import decode_frame
from jetraft.protocol.bounded_msgpack import Budget, DecodeBudgetExceeded, Limits, unpackb

#: 1.9 million arrays each holding an empty one: 3.8 MB, over 200 MB as Python lists.
NESTED = b"\xdd" + (1_900_000).to_bytes(4, "big") + b"\x91\x90" * 1_900_000


def snapshot(**over) -> StreamSnapshot:
    fields = dict(stream="S", last_ts=5, block_bytes=1 << 20, blocks=[(1, 4096)], first_seq=1,
                  last_seq=10, messages=10, bytes=900, state={"config": {"name": "S"}})
    fields.update(over)
    return StreamSnapshot(**fields)


def bounded(fn):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    out = fn()
    assert time.monotonic() - start < 2
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 150
    return out


def test_a_stream_snapshot_round_trips():
    snap = snapshot()
    assert StreamSnapshot.decode(snap.encode()) == snap


def test_a_stream_snapshot_bomb_is_refused_within_the_budget():
    body = msgpack.packb({"v": 1, "stream": "S"})
    data = b"\x83" + body[1:] + msgpack.packb("state") + b"\x81" + msgpack.packb("junk") + NESTED
    with pytest.raises(StreamSnapshotError, match="holds more than 2,000,000 values"):
        bounded(lambda: StreamSnapshot.decode(data))


def test_catchup_frames_decode_within_their_limits():
    frame = {"g": "S-1", "k": "blk", "b": 1, "o": 0, "s": "ok", "d": b"x" * 1000}
    assert decode_frame(msgpack.packb(frame, use_bin_type=True)) == frame
    bomb = b"\x83" + msgpack.packb({"g": "S-1", "k": "done"})[1:] + msgpack.packb("x") + NESTED
    assert bounded(lambda: decode_frame(bomb)) is None
    assert decode_frame(b"\xc1") is None


def test_the_budget_counts_containers_and_elements():
    limits = Limits(max_units=100, max_container=50, max_str=10, max_bin=10, max_buffer=1000)
    assert unpackb(msgpack.packb([[1, 2], {"a": 1}]), limits, "x") == [[1, 2], {"a": 1}]
    with pytest.raises(DecodeBudgetExceeded, match="x holds more than 100 values"):
        unpackb(msgpack.packb([[]] * 12), limits, "x")           # 12 lists of 8 + 12 elements
    with pytest.raises(ValueError, match="exceeds max_str_len"):
        unpackb(msgpack.packb("a" * 11), limits, "x")
    with pytest.raises(ValueError, match="over the limit of 1,000"):
        unpackb(b"\x00" * 1001, limits, "x")
    budget = Budget(limits, "y")
    budget.list_hook([1] * 50)
    budget.reset()
    assert budget.used == 0
