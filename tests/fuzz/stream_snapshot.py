"""Fuzz target: a clustered stream replica's RAFT snapshot as a peer sends it (InstallSnapshot,
or a catch-up's ``snap`` answer), restored the way net/jetstream/catchup.py restores it:
``StreamReplica.restore`` (jetraft.jetstream.catchup.StreamSnapshot.decode), the replica
state checked on its own (jetraft.jetstream.replica_state.check_replica_state), the block
files aligned to the snapshot's manifest (catchup.align_store), the store opened over them
(``JetStreamAccount.open_replica_store``) and the replica completed
(``StreamReplica.complete``: the stream re-created from the snapshot's config, its store's
counts checked, the stream and consumer state restored).

Input: a flags byte, then the snapshot data (msgpack). Flags:

- bit 0: the data is zlib-compressed (at most 16 MiB inflated): lets a small input carry a
  big snapshot (the decode bombs among the regression inputs);
- bit 1: ``expect_complete`` (the replica took the snapshot itself and restarts);
- bits 2-3, the block files the replica holds before alignment (tests/fuzz/js_replica.py's
  source replica, whose snapshot the seeds are): 0 all of them, 1 none, 2 all plus a block
  the snapshot does not list and a ``.corrupt`` one, 3 each cut to half its size;
- bit 4: the first manifest block is reported damaged at byte 100 (``cuts``).

Outcomes allowed: StreamSnapshotError from the decoding; ReplicaStateError from the state
check; from ``complete``, what it documents (StoreDamaged, StoreMismatch,
StreamSnapshotError, ReplicaStateError) and JSApiError from re-creating the stream (its
config does not check). Invariants: a decoded snapshot encodes and decodes to itself; the
alignment leaves only manifest blocks, none longer than listed, and asks for exactly what
is short; after a failed ``complete`` the replica still holds and the account has no stream,
after a successful one it holds no more, the account has stream ORDERS only and its store's
state is the snapshot's.

Resource rules (fuzz_support.bounded): the calls into the code under test take at most
100 ms together, and memory at most fuzz_support.MEMORY_ALLOWANCE_MB.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import zlib

import atheris

from fuzz_support import Work, bounded, main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.jetstream import store_format as fmt
    from jetraft.jetstream.catchup import StreamSnapshot, StreamSnapshotError, align_store
    from jetraft.jetstream.errors import JSApiError
    from jetraft.jetstream.replica_state import ReplicaStateError, check_replica_state
    from jetraft.jetstream.replicated import StoreDamaged

    import js_replica
    from js_replica import NAME, T0

MAX_INFLATED = 16 << 20
ZLIB, EXPECT_COMPLETE, CUT = 1, 2, 16
ALL, NONE, EXTRA, HALF = range(4)

_root: str | None = None
_count = 0


def _directory() -> str:
    global _root, _count
    if _root is None:
        _root = js_replica.scratch_root("jetraft-fuzz-snapshot-")
    _count += 1
    return os.path.join(_root, str(_count))


def prepare(data: bytes) -> tuple[int, bytes]:
    """(flags, snapshot data) of an input."""
    js_replica.template()           # (made once, before the first input is measured)
    flags, body = (data[0], data[1:]) if data else (0, b"")
    if flags & ZLIB:
        try:
            body = zlib.decompressobj().decompress(body, MAX_INFLATED)
        except zlib.error:
            body = b""
    return flags, body


def _blocks(msgs: str, which: int) -> None:
    """Put the source replica's block files (js_replica.template) into ``msgs``."""
    template, _ = js_replica.template()
    os.makedirs(msgs)
    if which == NONE:
        return
    for name in sorted(os.listdir(template)):
        src, dst = os.path.join(template, name), os.path.join(msgs, name)
        shutil.copyfile(src, dst)
        if which == HALF:
            os.truncate(dst, os.path.getsize(dst) // 2)
    if which == EXTRA:
        shutil.copyfile(src, os.path.join(msgs, fmt.block_name(10_000)))
        shutil.copyfile(src, os.path.join(msgs, fmt.block_name(7) + ".corrupt"))


def _check_snapshot(snap: StreamSnapshot) -> None:
    again = StreamSnapshot.decode(snap.encode())
    assert again == snap, (again, snap)
    assert snap.stream == NAME, snap.stream     # restore refuses another stream's


def _check_alignment(msgs: str, snap: StreamSnapshot, align) -> None:
    want = dict(snap.blocks)
    sizes = {}
    for name in os.listdir(msgs):
        start = fmt.parse_block_name(name)
        assert start is not None or not name.endswith(".corrupt"), f"{name} left after alignment"
        if start is not None:
            assert start in want, f"block {name} is not in the manifest but was kept"
            sizes[start] = os.path.getsize(os.path.join(msgs, name))
            assert sizes[start] <= want[start], (name, sizes[start], want[start])
    asked = [(m.first_seq, m.have, m.want) for m in align.missing]
    expected = [(start, sizes.get(start, 0), size) for start, size in snap.blocks
                if sizes.get(start, 0) < size]
    assert asked == expected, (asked, expected)
    assert align.bytes_needed == sum(w - h for _, h, w in asked)


def run(prepared: tuple[int, bytes], work: Work) -> None:
    flags, data = prepared
    directory = _directory()
    acc = js_replica.account(directory)
    try:
        r = js_replica.replica(acc, create=False)
        msgs = acc.replica_msgs_dir(NAME)
        _blocks(msgs, flags >> 2 & 3)
        try:
            with work("restore"):
                r.restore(data)
        except StreamSnapshotError:
            assert not r.holding
            return
        snap = r.pending
        assert r.holding and snap is not None
        _check_snapshot(snap)
        state = snap.state
        if isinstance(state, dict):
            try:
                with work("check-state"):
                    check_replica_state(state.get("replica"), NAME, "file")
            except ReplicaStateError:
                pass
        cuts = {snap.blocks[0][0]: 100} if flags & CUT and snap.blocks else None
        with work("align"):
            align = align_store(msgs, snap, expect_complete=bool(flags & EXPECT_COMPLETE), cuts=cuts)
        if cuts is None:
            _check_alignment(msgs, snap, align)
        if align.missing:
            return                   # (a catch-up fetches them: catchup_frames)
        with work("open-store"):
            store = acc.open_replica_store(NAME)
        try:
            with work("complete"):
                r.complete(T0 + 10**12, store)
        except (StoreDamaged, StreamSnapshotError, ReplicaStateError, JSApiError) as exc:
            if isinstance(exc, JSApiError):
                assert "create_replica" in _functions(exc), exc
            assert r.holding and not acc.streams, f"a failed complete left streams {sorted(acc.streams)!r:.200}"
            return
        assert not r.holding and sorted(acc.streams) == [NAME], sorted(acc.streams)
        st = acc.streams[NAME].stream.store.state()
        assert (st.first_seq, st.last_seq, st.messages, st.bytes) == \
            (snap.first_seq, snap.last_seq, snap.messages, snap.bytes)
    finally:
        acc.close()
        shutil.rmtree(directory, ignore_errors=True)


def _functions(exc: BaseException) -> list[str]:
    out = []
    tb = exc.__traceback__
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return out


_bounded = bounded(run, prepare=prepare)


def TestOneInput(data: bytes) -> None:
    _bounded(data)


if __name__ == "__main__":
    main(TestOneInput)
