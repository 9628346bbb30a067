"""Stream snapshots without RAFT or sockets: a replica's snapshot, another replica's store
brought to it block by block (jetraft.jetstream.catchup), and both going on alike."""

from __future__ import annotations

import json
import os

import msgpack
import pytest

from jetraft.jetstream import store_format as fmt
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.catchup import BlockWriter, StreamSnapshot, StreamSnapshotError, align_store
from jetraft.jetstream.replicated import (
    ACK,
    API,
    PUBLISH,
    InterestOverride,
    StoreDamaged,
    StreamReplica,
    encode_entry,
)
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, EntryType

T0 = 1_800_000_000_000_000_000
CONFIG = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3, "storage": "file",
          "retention": "limits", "duplicate_window": 120_000_000_000, "max_msgs": 250}


class _Events:
    def emit(self, name: str, **fields) -> None:
        pass


def _replica(tmp_path, name: str, config: dict = CONFIG, *, create: bool = True) -> StreamReplica:
    override = InterestOverride()
    acc = JetStreamAccount("$G", store_dir=str(tmp_path / name), sync=GroupCommit(),
                           events=_Events(), interest=lambda s: bool(override.subjects and s in override.subjects),
                           server_version="2.15.1", sync_always=False, server_name=name, clustered=True)
    if create:
        acc.create_replica(config, T0)
    return StreamReplica(acc, config["name"], emit=lambda out: None, override=override,
                         config=config, created_ns=T0)


class Log:
    """Entries applied to every replica given, numbered from 1."""

    def __init__(self) -> None:
        self.index = 0

    def apply(self, replicas, entries: list[bytes]) -> None:
        batch = []
        for data in entries:
            self.index += 1
            batch.append(Entry(term=1, index=self.index, type=EntryType.NORMAL, data=data))
        for r in replicas:
            r.apply(batch)


def _workload(start: int, n: int) -> list[bytes]:
    out = []
    for i in range(start, start + n):
        hdr = f"NATS/1.0\r\nNats-Msg-Id: id-{i}\r\n\r\n".encode()
        out.append(encode_entry(PUBLISH, T0 + i, set(), f"orders.{i % 3}", f"_INBOX.p{i}", hdr, b"x" * 300))
        if i % 7 == 0:
            req = json.dumps({"seq": i - 3}).encode()
            out.append(encode_entry(API, T0 + i, set(), "$JS.API.STREAM.MSG.DELETE.ORDERS", "_INBOX.d",
                                    None, req))
    return out


def _consumer_entries(ts: int) -> list[bytes]:
    create = json.dumps({"stream_name": "ORDERS", "config": {
        "durable_name": "C", "ack_policy": "explicit", "ack_wait": 30_000_000_000}}).encode()
    return [encode_entry(API, ts, set(), "$JS.API.CONSUMER.CREATE.ORDERS.C", "_INBOX.c", None, create),
            encode_entry(API, ts + 1, {"_INBOX.n"}, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.C", "_INBOX.n", None,
                         json.dumps({"batch": 5}).encode())]


def _view(r: StreamReplica) -> tuple:
    entry = r.account.streams["ORDERS"]
    st = entry.stream.store.state()
    msgs = []
    for seq in range(st.first_seq, st.last_seq + 1):
        try:
            sm = entry.stream.store.load(seq)
        except KeyError:
            continue
        msgs.append((sm.seq, sm.subject, sm.headers, sm.data, sm.ts))
    return msgs, r.account.replica_state("ORDERS")


def _copy_missing(source: StreamReplica, msgs_dir: str, align) -> int:
    """What a catch-up fetches: the missing ranges, read from ``source``'s store."""
    store = source.account.streams["ORDERS"].stream.store
    writer = BlockWriter(msgs_dir)
    n = 0
    for m in align.missing:
        for off in range(m.have, m.want, 4096):
            data = store.read_block(m.first_seq, off, min(4096, m.want - off))
            assert data, (m, off)
            writer.write(m.first_seq, off, data)
            n += len(data)
    writer.finish()
    return n


def _small_blocks(r: StreamReplica) -> None:
    """Blocks of 8 KiB, so that a few hundred messages use many and limits empty some."""
    r.account.streams["ORDERS"].stream.store.block_bytes = 8192


def test_a_snapshot_completed_from_a_peer_store_goes_on_exactly_like_the_peer(tmp_path):
    leader, behind = _replica(tmp_path, "n1"), _replica(tmp_path, "n2")
    for r in (leader, behind):
        _small_blocks(r)
    log = Log()
    log.apply([leader, behind], _workload(1, 150))
    log.apply([leader], _workload(151, 200) + _consumer_entries(T0 + 500))  # behind misses these
    data = leader.snapshot()
    assert data is not None and len(data) < 20_000, "the snapshot holds no messages"
    snap = StreamSnapshot.decode(data)
    assert len(snap.blocks) > 3 and snap.first_seq > 1           # max_msgs emptied blocks

    behind.restore(msgpack.unpackb(msgpack.packb(data)))
    assert behind.holding and "ORDERS" not in behind.account.streams
    msgs_dir = behind.account.replica_msgs_dir("ORDERS")
    align = align_store(msgs_dir, snap, expect_complete=False)
    assert align.removed, "blocks the snapshot no longer lists are removed"
    fetched = _copy_missing(leader, msgs_dir, align)
    assert 0 < fetched == align.bytes_needed < snap.store_bytes  # what it had is kept
    behind.complete(T0 + 1000, behind.account.open_replica_store("ORDERS"))
    assert not behind.holding
    assert _view(behind) == _view(leader)

    more = _workload(300, 60) + [encode_entry(ACK, T0 + 900, set(), "$JS.ACK.ORDERS.C.1.1.1.0.0", None, b"+ACK")]
    log.apply([leader, behind], more)
    assert _view(behind) == _view(leader)


def test_a_restart_cuts_the_store_back_to_the_snapshot_and_replays_the_tail(tmp_path):
    r = _replica(tmp_path, "n1")
    log = Log()
    log.apply([r], _workload(1, 50) + _consumer_entries(T0 + 60))
    data = r.snapshot()
    r.snapshot_durable(log.index)
    tail = _workload(100, 30)
    log.apply([r], tail)                           # written to the store after the snapshot
    expected = _view(r)
    r.account.streams["ORDERS"].stream.store.close()     # a crash: the store's files stay

    again = _replica(tmp_path, "n1", create=False)
    again.restore(data)
    snap = StreamSnapshot.decode(data)
    align = align_store(again.account.replica_msgs_dir("ORDERS"), snap, expect_complete=True)
    assert not align.missing and not align.damage
    again.complete(T0 + 2000, again.account.open_replica_store("ORDERS"))
    assert again.account.streams["ORDERS"].stream.store.state().last_seq == snap.last_seq
    Log.apply(log, [again], [])
    batch = [Entry(term=1, index=51 + i, type=EntryType.NORMAL, data=d) for i, d in enumerate(tail)]
    again.apply(batch)
    assert _view(again) == expected


def test_damage_found_on_open_is_cut_and_fetched_again(tmp_path):
    leader, other = _replica(tmp_path, "n1"), _replica(tmp_path, "n2")
    log = Log()
    log.apply([leader, other], _workload(1, 60))
    data = other.snapshot()
    snap = StreamSnapshot.decode(data)
    other.account.streams["ORDERS"].stream.store.close()
    msgs_dir = other.account.replica_msgs_dir("ORDERS")
    blk = os.path.join(msgs_dir, fmt.block_name(snap.blocks[0][0]))
    raw = bytearray(open(blk, "rb").read())
    raw[len(raw) // 2] ^= 0x40
    open(blk, "wb").write(bytes(raw))

    other = _replica(tmp_path, "n2", create=False)
    other.restore(data)
    assert not align_store(msgs_dir, snap, expect_complete=True).missing     # sizes are right
    with pytest.raises(StoreDamaged) as damaged:
        other.complete(T0, other.account.open_replica_store("ORDERS"))
    problem = damaged.value.report[0]
    assert problem["kind"] == "checksum_mismatch" and problem["file"] == fmt.block_name(snap.blocks[0][0])
    assert other.holding
    align = align_store(msgs_dir, snap, expect_complete=True, cuts={snap.blocks[0][0]: problem["offset"]})
    assert align.missing[0].have == problem["offset"]
    _copy_missing(leader, msgs_dir, align)
    other.complete(T0, other.account.open_replica_store("ORDERS"))
    assert _view(other) == _view(leader)


def test_missing_short_and_extra_blocks(tmp_path):
    d = tmp_path / "msgs"
    d.mkdir()
    for start, size in ((1, 100), (50, 200), (90, 300)):
        (d / fmt.block_name(start)).write_bytes(b"\0" * size)
    (d / (fmt.block_name(7) + ".corrupt")).write_bytes(b"junk")
    snap = StreamSnapshot("S", 0, 8 << 20, [(50, 150), (90, 400), (120, 64)], 50, 130, 10, 1000)
    align = align_store(str(d), snap, expect_complete=True)
    assert sorted(os.listdir(d)) == [fmt.block_name(50), fmt.block_name(90)]
    assert os.path.getsize(d / fmt.block_name(50)) == 150
    assert [(m.first_seq, m.have, m.want) for m in align.missing] == [(90, 300, 400), (120, 0, 64)]
    assert {x["kind"] for x in align.damage} == {"short_block", "missing_block"}
    again = align_store(str(d), snap, expect_complete=False, cuts={50: 10})
    assert [(m.first_seq, m.have) for m in again.missing][0] == (50, 0)     # below a header: whole
    assert not again.damage


@pytest.mark.parametrize("data", [
    b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"v": 2}),
    msgpack.packb({"v": 1, "stream": "", "last_ts": 0, "block_bytes": 100, "blocks": [],
                   "store": [1, 0, 0, 0], "state": {}}),
    msgpack.packb({"v": 1, "stream": "S", "last_ts": 0, "block_bytes": 100, "blocks": [[5, 20], [2, 20]],
                   "store": [1, 0, 0, 0], "state": {}}),
    msgpack.packb({"v": 1, "stream": "S", "last_ts": -1, "block_bytes": 100, "blocks": [],
                   "store": [1, 0, 0, 0], "state": {}}),
    msgpack.packb({"v": 1, "stream": "S", "last_ts": 0, "block_bytes": 100, "blocks": [[1, 2]],
                   "store": [1, 0, 0, 0], "state": {}}),
    msgpack.packb({"v": 1, "stream": "S", "last_ts": 0, "block_bytes": 100, "blocks": [],
                   "store": [1, 0, 0], "state": {}}),
    msgpack.packb({"v": 1, "stream": "S", "last_ts": 0, "block_bytes": 100, "blocks": [],
                   "store": [1, 0, 0, 0], "state": []}),
])
def test_a_malformed_snapshot_is_refused_with_what_is_wrong(tmp_path, data):
    with pytest.raises(StreamSnapshotError):
        StreamSnapshot.decode(data)
    r = _replica(tmp_path, "n1")
    with pytest.raises(StreamSnapshotError):
        r.restore(data)
    assert not r.holding and "ORDERS" in r.account.streams     # nothing was taken apart


def test_a_store_that_does_not_match_the_snapshot_is_refused(tmp_path):
    r = _replica(tmp_path, "n1")
    Log().apply([r], _workload(1, 20))
    snap = StreamSnapshot.decode(r.snapshot())
    snap.messages += 1
    r.restore(snap.encode())
    with pytest.raises(StreamSnapshotError, match="the snapshot says"):
        r.complete(T0, r.account.open_replica_store("ORDERS"))
    assert r.holding and "ORDERS" not in r.account.streams


def test_memory_streams_keep_their_log_and_doomed_blocks_wait_for_the_snapshot(tmp_path):
    mem = _replica(tmp_path, "m", {**CONFIG, "storage": "memory"})
    Log().apply([mem], _workload(1, 5))
    assert mem.snapshot() is None
    r = _replica(tmp_path, "n1")
    _small_blocks(r)
    Log().apply([r], _workload(1, 600))
    msgs_dir = r.account.replica_msgs_dir("ORDERS")
    store = r.account.streams["ORDERS"].stream.store
    assert store.doomed_count() > 0
    before = set(os.listdir(msgs_dir))
    snap = StreamSnapshot.decode(r.snapshot())
    assert set(os.listdir(msgs_dir)) == before, "emptied blocks stay until the snapshot is durable"
    r.snapshot_durable(1)
    assert sorted(os.listdir(msgs_dir)) == [fmt.block_name(s) for s, _ in snap.blocks]
