"""Fuzz target: the stream catch-up frames peers exchange (jetraft.net.jetstream.catchup:
the handlers ``StreamCatchup`` registers for route frames ``jscu`` (requests) and ``jscd``
(data), ``decode_frame``; the fetching side ``StreamCatchup.fetch`` with
jetraft.jetstream.catchup.BlockWriter, and ``adopt_latest``).

Two StreamCatchup objects over fake clusters (the ``CatchupCluster`` protocol): the
*server* ``n2``, leader of stream ORDERS's group, whose replica is tests/fuzz/js_replica.py's
source replica (a real file store, made once per process and only read), and the
*fetcher* ``n1``, completing a snapshot of the same group: it fetches missing block bytes
from ``n2``/``n3`` into a fresh directory. The fetcher's requests go to the server's real
request handler unless the input answers them itself. Trio runs the fetch on a MockClock
that jumps ahead whenever every task waits (time-outs cost nothing), and the fetch's
worker-thread calls (the blocks' fsync) in place.

Input: a flags byte, then records ``kind (1 byte) | length (2 bytes, big-endian) | body``
(at most 32):

- kind & 7 == 0: ``body`` is a request frame (``jscu``) from ``src`` to the server;
  ``src`` = ("n2"'s peers) ``n1``, ``n3``, an outsider ``n9``, or ``n2`` itself by
  ``kind >> 3 & 3``;
- 1: ``body`` is a data frame (``jscd``) from ``src`` to the server;
- 2: the fetcher's next request is answered with ``body`` as it is;
- 3: ... with the server's real answer, its fields replaced by those of ``body`` (a
  msgpack map; as 2 when it is not one), so that a few changed fields reach the fetcher's
  checks;
- 4: ... with nothing (the answer is lost);
- 5: ... by the route being down (``send_app`` returns False);
- 6, 7: ``body`` is a request (6) or data (7) frame to the fetcher from ``src`` while it
  fetches (before its next request is sent).

Records of kinds 0 and 1 are handled first, in order; the rest are the script of the fetch,
which runs when there is one. Flags: bit 0, the fetcher then asks for the leader's snapshot
(``adopt_latest``, the script answering its requests too); bits 1-2, what is missing: 0
the first block, 1 every block, 2 the second half of the first block, 3 a block no
replica has; bit 3, requests of 700 bytes one at a time (else 4 KiB, 4 at a time); bit 4,
every body is zlib-compressed (at most 16 MiB inflated): lets a small input carry a big
frame (the decode bombs among the regression inputs).

Invariants: no exception comes out of the request or data handler (a malformed frame
is reported, ``config_warning``, and dropped); the server's answers are well formed: a
status of ``ok``/``behind``/``gone``/``busy``/``unknown`` to the asker only, block bytes
only with ``ok``, to a member of the group, at most MAX_SERVE_BYTES and equal to the
store's; an outsider gets ``unknown`` and changes nothing. The fetch ends within 10
minutes (of the mock clock) once the script is spent, and raises nothing but
``CatchupImpossible`` (every peer said a block is gone): a malformed answer is dropped and
its request sent again, not a failed catch-up; when it returns, every missing block file has
its full size. ``adopt_latest`` raises nothing and adopts only a snapshot newer than what
the group applied, of the documented types.

Resource rules (fuzz_support.bounded): the handlers and the fetch take at most 100 ms
together, and memory at most fuzz_support.MEMORY_ALLOWANCE_MB.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import zlib

import atheris
import msgpack

from fuzz_support import Work, bounded, main

import trio             # (not instrumented: its event loop is not under test)
import trio.testing

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.jetstream import store_format as fmt
    from jetraft.jetstream.catchup import Missing, StreamSnapshot, StreamSnapshotError
    from jetraft.net.jetstream import catchup as sc
    from jetraft.raft.types import Snapshot

    import js_replica
    from js_replica import NAME

MAX_RECORDS = 32
KEY = ("$G", NAME)
GROUP = "S-R3F-fuzz"
PEERS = ("n1", "n2", "n3")
SOURCES = ("n1", "n3", "n9", "n2")
REQUEST, DATA = "jscu", "jscd"      # the route frame kinds of a catch-up
STATUSES = {"ok", "behind", "gone", "busy", "unknown"}
APPLIED = 7
DEADLINE_S = 600
ADOPT, SMALL, ZLIB = 1, 8, 16
MAX_INFLATED = 16 << 20
FIRST, ALL, HALF, ABSENT = range(4)


class Routes:
    """A RouteManager: handlers registered with ``on_app``; ``send_app`` hands each frame to
    ``deliver`` (peer, kind, body) -> whether the route took it."""

    def __init__(self, deliver) -> None:
        self.handlers: dict = {}
        self.deliver = deliver

    def on_app(self, kind: str, handler) -> None:
        self.handlers[kind] = handler

    def send_app(self, peer: str, kind: str, body: bytes) -> bool:
        return self.deliver(peer, kind, body)

    def receive(self, src: str, kind: str, body: bytes) -> None:
        """A frame of ``kind`` from ``src`` arrives: to the handler registered for it."""
        self.handlers[kind](src, body)


class Log:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def snapshot(self) -> Snapshot:
        return self.snap


class Group:
    """The RaftGroup calls StreamCatchup makes."""

    def __init__(self, me: str, snap: Snapshot) -> None:
        self.name = GROUP
        self.peers = PEERS
        self.leader = "n2"
        self.is_leader = me == "n2"
        self.applied_index = APPLIED
        self.log = Log(snap)
        self.calls: list = []
        self.adopted: list[Snapshot] = []

    def note_catchup(self, peer, applied, now_ns) -> None:
        self.calls.append(("note", peer))

    def catchup_done(self, peer) -> None:
        self.calls.append(("done", peer))

    def adopt_snapshot(self, snap: Snapshot) -> None:
        """RaftGroup.adopt_snapshot as far as it reads ``snap``: newer than applied, its
        data restored (StreamReplica.restore decodes it first)."""
        if snap.index <= self.applied_index:
            raise ValueError(f"snapshot {snap.index} is not past applied index {self.applied_index}")
        self.adopted.append(snap)
        StreamSnapshot.decode(snap.data)


class Cluster:
    def __init__(self, me: str, snap: Snapshot, replica, deliver) -> None:
        self.events = js_replica.Events()
        self.routes = Routes(deliver)
        self.server = type("Server", (), {"server_name": me})()
        self.host = None
        self.groups = {KEY: Group(me, snap)}
        self.replicas = {KEY: replica} if replica is not None else {}


class _Server:
    """The serving side, made once: n2 with the source replica (its store only read)."""

    def __init__(self) -> None:
        root = js_replica.scratch_root("jetraft-fuzz-catchup-")
        self.acc, self.replica, data = js_replica.source(os.path.join(root, "source"))
        self.store = self.acc.streams[NAME].stream.store
        self.manifest = self.store.manifest()
        self.sent: list[tuple[str, str, bytes]] = []
        self.cluster = Cluster("n2", Snapshot(APPLIED + 2, 1, PEERS, data), self.replica, self._capture)
        self.catchup = sc.StreamCatchup(self.cluster)
        self.scratch = root

    def _capture(self, peer: str, kind: str, body: bytes) -> bool:
        self.sent.append((peer, kind, body))
        return True

    def reset(self) -> None:
        self.sent.clear()
        self.cluster.events.lines.clear()
        self.cluster.groups[KEY].calls.clear()

    def answer(self, src: str, request: bytes) -> list[bytes]:
        """What the server sends back for ``request`` from ``src``."""
        before = len(self.sent)
        self.cluster.routes.receive(src, REQUEST, request)
        return [body for peer, _, body in self.sent[before:]]


_server: _Server | None = None
_count = 0


def server() -> _Server:
    global _server
    if _server is None:
        _server = _Server()
    return _server


def _inflate(body: bytes) -> bytes:
    try:
        return zlib.decompressobj().decompress(body, MAX_INFLATED)
    except zlib.error:
        return b""


def records(data: bytes) -> tuple[int, list[tuple[int, bytes]]]:
    """(flags, [(kind byte, body), ...]) of an input."""
    if not data:
        return 0, []
    flags, pos, out = data[0], 1, []
    while pos + 3 <= len(data) and len(out) < MAX_RECORDS:
        kind, n = data[pos], int.from_bytes(data[pos + 1:pos + 3], "big")
        body = data[pos + 3:pos + 3 + n]
        out.append((kind, _inflate(body) if flags & ZLIB else body))
        pos += 3 + n
    return flags, out


def prepare(data: bytes) -> tuple[int, list[tuple[int, bytes]]]:
    server()                # (made once, before the first input is measured)
    return records(data)


# --- the server's side --------------------------------------------------------------------


def _check_answers(src: str, request: bytes, sent: list[tuple[str, str, bytes]], events_before: int) -> None:
    srv = server()
    try:        # (within small limits: a decode bomb is the server's to refuse, not ours to decode)
        m = msgpack.unpackb(request, raw=False, strict_map_key=False, max_array_len=64, max_map_len=64)
    except Exception:  # noqa: BLE001 - any undecodable request
        m = None
    for peer, kind, body in sent:
        assert peer == src, f"answer to {src}'s request sent to {peer}"
        assert kind == "jscd", kind
        a = msgpack.unpackb(body, raw=False)
        assert isinstance(a, dict) and a.get("s") in STATUSES, a
        assert isinstance(a.get("g"), str) and a.get("k") in ("blk", "snap"), a
        if isinstance(m, dict):
            assert a.get("g") == m.get("g") and a.get("k") == m.get("k"), (m, a)
        if "d" in a and a["k"] == "blk":
            assert a["s"] == "ok" and src in PEERS, (src, a["s"])
            d = a["d"]
            assert isinstance(d, bytes) and 0 < len(d) <= sc.MAX_SERVE_BYTES, len(d)
            assert d == srv.store.read_block(a["b"], a["o"], len(d)), "served bytes are not the store's"
        if src not in PEERS:
            assert a["s"] == "unknown" and "d" not in a, a
    for name, fields in srv.cluster.events.lines[events_before:]:
        assert name == "config_warning", (name, fields)


def _to_server(kind: int, src: str, body: bytes, work: Work) -> None:
    srv = server()
    before, events = len(srv.sent), len(srv.cluster.events.lines)
    calls = len(srv.cluster.groups[KEY].calls)
    if kind == 0:
        with work("serve"):
            srv.cluster.routes.receive(src, REQUEST, body)
        _check_answers(src, body, srv.sent[before:], events)
        if src not in PEERS:
            assert len(srv.cluster.groups[KEY].calls) == calls, "an outsider's request reached the group"
    else:
        with work("serve"):
            srv.cluster.routes.receive(src, DATA, body)
        assert len(srv.sent) == before, "a data frame was answered"


# --- the fetching side --------------------------------------------------------------------


def _missing(layout: int) -> list[Missing]:
    manifest = server().manifest
    if layout == ALL:
        return [Missing(start, 0, size) for start, size in manifest]
    start, size = manifest[0]
    if layout == HALF:
        return [Missing(start, size // 2, size)]
    if layout == ABSENT:
        return [Missing(manifest[0][0] + 1, 0, 100)]
    return [Missing(start, 0, size)]


class Fetcher:
    def __init__(self, flags: int, script: list[tuple[int, bytes]], directory: str) -> None:
        self.script = script
        self.directory = directory
        srv = server()
        self.cluster = Cluster("n1", srv.cluster.groups[KEY].log.snap, None, self._route)
        max_outstanding = 700 if flags & SMALL else 4 * 4096
        self.catchup = sc.StreamCatchup(self.cluster, max_outstanding=max_outstanding)
        self.pending: list[tuple[str, bytes]] = []
        self.spent = not script

    def _route(self, peer: str, kind: str, body: bytes) -> bool:
        """The fetcher sends ``body`` to ``peer``: the script's next step, else the real
        server answers (as ``peer``: every replica's store holds the same bytes)."""
        while self.script and self.script[0][0] & 7 in (6, 7):
            k, b = self.script.pop(0)
            src = SOURCES[k >> 3 & 3]
            before = len(self.cluster.events.lines)
            self.cluster.routes.receive(src, REQUEST if k & 7 == 6 else DATA, b)
            for name, fields in self.cluster.events.lines[before:]:
                assert name == "config_warning", (name, fields)
        if not self.script:
            self.spent = True
            for answer in server().answer("n1", body):
                self.cluster.routes.receive(peer, DATA, answer)
            return True
        k, b = self.script.pop(0)
        k &= 7
        if k == 5:
            return False
        if k == 4:
            return True
        if k == 3:
            try:
                patch = msgpack.unpackb(b, raw=False, strict_map_key=False, max_array_len=64, max_map_len=64)
            except Exception:  # noqa: BLE001 - then it is a raw answer
                patch = None
            if isinstance(patch, dict):
                answers = server().answer("n1", body)
                for answer in answers or [msgpack.packb({}, use_bin_type=True)]:
                    real = msgpack.unpackb(answer, raw=False)
                    try:
                        b = msgpack.packb({**real, **patch}, use_bin_type=True)
                    except (TypeError, ValueError):
                        b = answer
                    self.cluster.routes.receive(peer, DATA, b)
                return True
        self.cluster.routes.receive(peer, DATA, b)
        return True

    async def run(self, missing: list[Missing], adopt: bool) -> str:
        recv = self.catchup.open_inbox(KEY)
        group = self.cluster.groups[KEY]
        outcome = "unfinished"
        with trio.move_on_after(DEADLINE_S):
            try:
                await self.catchup.fetch(KEY, group, self.directory, missing, recv)
                outcome = "fetched"
            except sc.CatchupImpossible:
                outcome = "impossible"
        if outcome == "unfinished" or not adopt:
            return outcome
        with trio.move_on_after(DEADLINE_S):
            await self.catchup.adopt_latest(KEY, group, recv)
            return outcome + ", adopted"
        return outcome + ", not adopted"


async def _inline(fn, *args, **kwargs):
    return fn(*args)


@contextlib.contextmanager
def _no_worker_threads():
    """``trio.to_thread.run_sync`` calls its function in place: a MockClock that jumps
    whenever every task waits would otherwise spin (and jump to the deadline) while a
    worker thread fsyncs the fetched blocks."""
    real = trio.to_thread.run_sync
    trio.to_thread.run_sync = _inline
    try:
        yield
    finally:
        trio.to_thread.run_sync = real


def _fetch(flags: int, script: list[tuple[int, bytes]], work: Work) -> None:
    global _count
    _count += 1
    directory = os.path.join(server().scratch, f"fetch-{_count}")
    os.mkdir(directory)
    try:
        missing = _missing(flags >> 1 & 3)
        fetcher = Fetcher(flags, script, directory)
        try:
            with work("fetch"), _no_worker_threads():
                outcome = trio.run(fetcher.run, missing, bool(flags & ADOPT),
                                   clock=trio.testing.MockClock(autojump_threshold=0))
        except StreamSnapshotError:
            return          # the snapshot adopted does not decode: see stream_snapshot
        assert not outcome.startswith("unfinished") and not outcome.endswith("not adopted") \
            or not fetcher.spent, f"the catch-up did not finish in {DEADLINE_S} s: {outcome}"
        if outcome.startswith("fetched"):
            for m in missing:
                path = os.path.join(directory, fmt.block_name(m.first_seq))
                assert os.path.getsize(path) >= m.want, (m, os.path.getsize(path))
        for snap in fetcher.cluster.groups[KEY].adopted:
            assert type(snap.index) is int and snap.index > APPLIED and type(snap.term) is int \
                and type(snap.data) is bytes and all(type(p) is str for p in snap.peers + snap.learners), \
                f"adopted a snapshot of the wrong types: {snap!r:.300}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run(prepared: tuple[int, list[tuple[int, bytes]]], work: Work) -> None:
    flags, recs = prepared
    server().reset()
    script = []
    for kind, body in recs:
        if kind & 7 in (0, 1):
            _to_server(kind & 7, SOURCES[kind >> 3 & 3], body, work)
        else:
            script.append((kind, body))
    if script or flags & ADOPT:
        _fetch(flags, script, work)


_bounded = bounded(run, prepare=prepare)


def TestOneInput(data: bytes) -> None:
    _bounded(data)


if __name__ == "__main__":
    main(TestOneInput)
