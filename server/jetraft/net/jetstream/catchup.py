"""Stream catch-up: a replica completes a stream snapshot by fetching the store blocks it
lacks from its peers, and serves those blocks to peers doing the same.

A stream replica that restores a snapshot (:meth:`StreamReplica.restore
<jetraft.jetstream.replicated.StreamReplica.restore>`: its own on a restart, or one the
leader sent with InstallSnapshot, Raft §7) holds: its group applies nothing and does not
campaign. :class:`StreamCatchup` then, in a task of its own:

1. brings the replica's block files to the snapshot's manifest
   (:func:`~jetraft.jetstream.catchup.align_store`, in a worker thread: it reads the whole
   store), reporting damage as ``stream_store_damaged``;
2. fetches what is missing from the group's leader (or, when the leader cannot serve a
   block, from another peer: every replica's store holds the same bytes), in chunks of
   at most :data:`CHUNK_BYTES` with at most ``max_outstanding_catchup`` bytes requested and
   not received (flow control: default :data:`WINDOW` requests of :data:`CHUNK_BYTES`; a
   peer's event loop reads one chunk per request), a request unanswered for
   :data:`REQUEST_TIMEOUT_S` sent again (to the next peer); the leader goes on accepting
   writes meanwhile, and reports the replica lagging (``RaftGroup.note_catchup``);
3. fsyncs the fetched blocks and :meth:`completes <StreamReplica.complete>` the replica,
   which checks the store's counts against the snapshot's; the group then applies the
   entries committed meanwhile from its log (``RaftGroup.apply_backlog``).

A replica that stops part way (a restart, a leader change, a newer snapshot) goes on from
the bytes it has: the next alignment keeps every block's valid prefix. A block no peer has
any more (deleted once emptied, after the snapshot) makes that snapshot impossible to
complete: the replica then adopts the leader's latest snapshot instead
(``RaftGroup.adopt_snapshot``) and goes on from there. Events: ``stream_catchup_started``
and ``stream_catchup_finished`` (bytes, chunks, duration, sources).

Route frames (APP kinds, msgpack maps): ``"jscu"`` requests ``{"g": group, "k": "blk",
"b": block first_seq, "o": offset, "n": bytes, "a": index}``, ``{"g", "k": "snap"}``,
``{"g", "k": "hold", "a": index}`` (still completing a snapshot) and ``{"g", "k": "done"}``; ``"jscd"`` answers ``{"g", "k": "blk", "b", "o", "s": status, "d":
bytes}`` (status ``ok`` | ``behind`` | ``gone`` | ``busy`` | ``unknown``) and ``{"g", "k":
"snap", "s", "i": index, "t": term, "p": peers, "d": data}``. Requests come only from the
group's peers; malformed frames are reported and dropped.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import msgpack
import trio

from jetraft.jetstream import store_format as fmt
from jetraft.jetstream.catchup import Alignment, BlockWriter, Missing, StreamSnapshotError, align_store
from jetraft.jetstream.replicated import StoreDamaged, StoreMismatch
from jetraft.jetstream.store import FileStore
from jetraft.protocol import bounded_msgpack
from jetraft.raft.types import Snapshot
from jetraft.storage import fileio

if TYPE_CHECKING:
    from jetraft.jetstream.replicated import StreamReplica
    from jetraft.net.raft.group import RaftGroup

__all__ = ["CHUNK_BYTES", "REQUEST_TIMEOUT_S", "WINDOW", "CatchupImpossible", "StreamCatchup",
           "decode_frame"]

#: Bytes asked for per request (the peer reads at most this much per request).
CHUNK_BYTES = 256 * 1024
#: What one catch-up frame may hold: a block chunk or a stream snapshot (``"d"``, bytes) and
#: a few small fields (jetraft.protocol.bounded_msgpack).
FRAME_LIMITS = bounded_msgpack.Limits(max_units=4096, max_container=1024, max_str=64 * 1024,
                                      max_bin=256 << 20, max_buffer=(256 << 20) + (1 << 20))
#: Requests of one catch-up outstanding at once.
WINDOW = 8
#: Seconds before an unanswered request is sent again (to another peer when there is one).
REQUEST_TIMEOUT_S = 2.0
#: Seconds between attempts when no peer can serve (no leader yet, all busy or behind).
RETRY_S = 0.2
#: Most bytes served per request, whatever a request asks.
MAX_SERVE_BYTES = 1 << 20
#: Seconds between a holding replica's notes to its leader.
NOTE_S = 0.5

Key = tuple[str, str]
_REQ, _DATA = "jscu", "jscd"


def _set_aside(msgs_dir: str, aside: str) -> None:
    """Move a store that did not match its snapshot out of the way (kept, never deleted
    on this replica's own say-so; a later mismatch replaces it)."""
    fileio.remove_tree(aside)
    fileio.replace(msgs_dir, aside)


class CatchupCluster(Protocol):
    """What :class:`StreamCatchup` needs of the server's clustered JetStream
    (``net/jetstream/cluster.py``)."""

    events: Any                                 # the EventLog
    routes: Any                                 # the RouteManager: send_app, on_app
    server: Any                                 # .server_name
    host: Any                                   # the RaftHost: touch
    groups: Mapping[Key, RaftGroup]
    replicas: Mapping[Key, StreamReplica]


class CatchupImpossible(Exception):
    """No peer holds a block the snapshot needs any more (raised by
    :meth:`StreamCatchup.fetch`)."""


def _nat(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _names(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(n, str) and n for n in x)


def decode_frame(body: bytes) -> dict | None:
    """A catch-up frame (``jscu`` or ``jscd``, see the module docstring) decoded within
    :data:`FRAME_LIMITS`: its map, or None when it is malformed or over them."""
    try:
        m = bounded_msgpack.unpackb(body, FRAME_LIMITS, "catch-up frame")
    except ValueError:
        return None
    if not isinstance(m, dict) or not isinstance(m.get("g"), str) or m.get("k") not in ("blk", "snap", "done", "hold"):
        return None
    if m["k"] == "blk" and not all(_nat(m.get(f)) for f in ("b", "o")):
        return None
    if any(f in m and m[f] is not None and not _nat(m[f]) for f in ("b", "o", "n", "a", "r")):
        return None
    if "s" in m and not isinstance(m["s"], str) or "d" in m and not isinstance(m["d"], bytes):
        return None
    if m["k"] == "snap" and m.get("s") == "ok" and not (
            _nat(m.get("i")) and _nat(m.get("t")) and isinstance(m.get("d"), bytes)
            and _names(m.get("p")) and (m.get("l") is None or _names(m["l"]))):
        return None
    return m


class StreamCatchup:
    """Completes restored stream snapshots on this server and serves peers' catch-ups
    (see the module docstring). ``cluster``: the server's ClusterJetStream (its replicas,
    groups, routes, RAFT host and event log); ``max_outstanding``: bytes one catch-up may
    have requested and not received (``jetstream { max_outstanding_catchup }``). Run
    :meth:`run` in the cluster's nursery."""

    def __init__(self, cluster: CatchupCluster, *, max_outstanding: int = WINDOW * CHUNK_BYTES) -> None:
        self.cluster = cluster
        #: Bytes per request and requests outstanding: ``max_outstanding`` bytes in all.
        self.chunk = max(1, min(CHUNK_BYTES, max_outstanding))
        self.window = max(1, max_outstanding // self.chunk)
        self.events = cluster.events
        self.routes = cluster.routes
        self.me = cluster.server.server_name
        self._nursery: trio.Nursery | None = None
        self._waiting: list[StreamReplica] = []
        self._scopes: dict[Key, trio.CancelScope] = {}
        self._inbox: dict[Key, trio.MemorySendChannel] = {}
        self.routes.on_app(_REQ, self._on_request)
        self.routes.on_app(_DATA, self._on_data)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            waiting, self._waiting = self._waiting, []
            for replica in waiting:
                self.start(replica)
            task_status.started()
            await trio.sleep_forever()

    # ------------------------------------------------------------------ the replica's side

    def start(self, replica: StreamReplica) -> None:
        """``replica`` restored a snapshot: complete it (replacing a catch-up under way)."""
        key = (replica.account.name, replica.name)
        self.stop(key)
        if self._nursery is None:
            self._waiting.append(replica)
            return
        self._nursery.start_soon(self._task, key, replica)

    def stop(self, key: Key) -> None:
        """Abandon ``key``'s catch-up (its replica closed, or a newer snapshot came)."""
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()
        self._waiting = [r for r in self._waiting if (r.account.name, r.name) != key]

    def catching_up(self) -> list[Key]:
        return sorted(self._scopes)

    async def _task(self, key: Key, replica: StreamReplica) -> None:
        with trio.CancelScope() as scope:
            self._scopes[key] = scope
            recv = self.open_inbox(key)
            send = self._inbox[key]
            try:
                failures = 0
                while replica.holding and self.cluster.replicas.get(key) is replica:
                    try:
                        await self._complete(key, replica, recv)
                    except Exception as exc:  # noqa: BLE001 - one replica's catch-up, never the server
                        failures += 1
                        self.events.emit("stream_catchup_finished", group=self._group_name(key),
                                         account=key[0], stream=key[1], snapshot_index=0, ok=False,
                                         bytes=0, chunks=0, duration_ns=0, sources=[],
                                         error=f"{type(exc).__name__}: {exc}")
                        await trio.sleep(min(30.0, RETRY_S * 2 ** failures))   # then again
            finally:
                if self._scopes.get(key) is scope:
                    del self._scopes[key]
                if self._inbox.get(key) is send:
                    del self._inbox[key]

    def open_inbox(self, key: Key) -> trio.MemoryReceiveChannel:
        """Route the data frames (``jscd``) of ``key``'s group to a new channel, replacing
        any catch-up's, and return its receiving end, for :meth:`fetch` and
        :meth:`adopt_latest` (what :meth:`start` does for its own catch-up). It holds
        ``window * 2 + 8`` frames; a frame that finds it full is dropped (its request times
        out and is sent again)."""
        send, recv = trio.open_memory_channel[dict](self.window * 2 + 8)
        self._inbox[key] = send
        return recv

    def _group_name(self, key: Key) -> str:
        g = self.cluster.groups.get(key)
        return g.name if g is not None else ""

    async def _group(self, key: Key):
        """The replica's RaftGroup (it is opened right after the snapshot is restored)."""
        while True:
            g = self.cluster.groups.get(key)
            if g is not None:
                return g
            await trio.sleep(RETRY_S)

    async def _complete(self, key: Key, replica: StreamReplica, recv: trio.MemoryReceiveChannel) -> None:
        acc = replica.account
        msgs_dir = acc.replica_msgs_dir(replica.name)
        if msgs_dir is None:
            raise StreamSnapshotError("jetstream has no store directory")
        group = await self._group(key)
        snap = replica.pending
        if snap is None:
            return
        reason = replica.pending_reason
        cuts: dict[int, int] = {}
        failures = 0
        began = time.monotonic_ns()
        fetched = chunks = 0
        sources: list[str] = []
        announced = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._hold_notes, group)
            while True:
                align: Alignment = await trio.to_thread.run_sync(
                    lambda: align_store(msgs_dir, snap, expect_complete=reason == "restart", cuts=cuts))
                for d in align.damage:
                    self._damaged(key, group, d)
                if align.missing or (reason != "restart" and not announced):
                    if not announced:
                        announced = True
                        self.events.emit("stream_catchup_started", group=group.name, account=key[0],
                                         stream=key[1], snapshot_index=group.applied_index,
                                         reason="damage" if align.damage or cuts else reason,
                                         bytes_needed=align.bytes_needed, last_seq=snap.last_seq)
                    try:
                        got = await self.fetch(key, group, msgs_dir, align.missing, recv)
                    except CatchupImpossible as exc:
                        self._finished(key, group, began, False, fetched, chunks, sources, str(exc))
                        await self.adopt_latest(key, group, recv)
                        nursery.cancel_scope.cancel()
                        return
                    fetched, chunks = fetched + got[0], chunks + got[1]
                    sources += [p for p in got[2] if p not in sources]
                cuts = {}
                try:
                    ttl = bool((replica.config or {}).get("allow_msg_ttl"))
                    store = await trio.to_thread.run_sync(lambda: acc.open_replica_store(replica.name, ttl))
                    if self.cluster.replicas.get(key) is not replica or replica.pending is not snap:
                        store.close()       # closed, or a newer snapshot came, meanwhile
                        nursery.cancel_scope.cancel()
                        return
                    replica.complete(time.time_ns(), store)
                except StoreDamaged as damage:
                    for problem in damage.report:
                        start = fmt.parse_block_name(problem.get("file", ""))
                        if start is None:
                            start = fmt.parse_block_name(problem.get("file", "").removesuffix(".corrupt"))
                        if start is not None:
                            cuts[start] = min(cuts.get(start, problem.get("offset", 0)),
                                              problem.get("offset", 0))
                        self._damaged(key, group, {k: problem.get(k) for k in ("file", "offset", "kind", "detail")})
                    if not cuts:
                        raise
                    reason = "damage"
                    continue
                except StoreMismatch as exc:     # the store's counts are not the snapshot's
                    failures += 1
                    self._finished(key, group, began, False, fetched, chunks, sources,
                                   f"{type(exc).__name__}: {exc}")
                    aside = msgs_dir.rstrip("/") + ".mismatch"
                    self._damaged(key, group, {"file": "", "offset": 0, "kind": "checksum_mismatch",
                                               "detail": f"store does not match the snapshot ({exc}); "
                                                         f"set aside as {aside}, fetched again"})
                    await trio.to_thread.run_sync(lambda: _set_aside(msgs_dir, aside))
                    reason, announced = "damage", False
                    if failures > 1:
                        await trio.sleep(min(30.0, RETRY_S * 2 ** failures))
                    continue
                st = store.state()
                self.events.emit("jetstream_stream_recovered", account=key[0], stream=key[1],
                                 messages=st.messages, last_seq=st.last_seq)
                if announced:
                    self._finished(key, group, began, True, fetched, chunks, sources, None)
                leader = group.leader
                if leader is not None and leader != self.me:
                    self._send(leader, {"g": group.name, "k": "done"})
                self.cluster.host.touch(group)     # apply what was committed meanwhile
                nursery.cancel_scope.cancel()
                return

    async def _hold_notes(self, group) -> None:
        """Tell the group's leader, every :data:`NOTE_S`, that this replica is completing a
        snapshot (it reports the replica lagging meanwhile, even when nothing is fetched);
        :meth:`tell_leader` tells a new leader at once."""
        while True:
            self._note(group)
            await trio.sleep(NOTE_S)

    def _note(self, group) -> None:
        leader = group.leader
        if leader is not None and leader != self.me:
            self._send(leader, {"g": group.name, "k": "hold", "a": group.applied_index})

    def tell_leader(self, key: Key) -> None:
        """``key``'s replica, holding, learnt of a (new) leader: tell it now."""
        group = self.cluster.groups.get(key)
        if group is not None and key in self._scopes:
            self._note(group)

    def _damaged(self, key: Key, group, problem: dict) -> None:
        self.events.emit("stream_store_damaged", group=group.name, account=key[0], stream=key[1],
                         file=problem.get("file") or "", offset=problem.get("offset") or 0,
                         kind=problem.get("kind") or "checksum_mismatch",
                         detail=problem.get("detail") or "")

    def _finished(self, key: Key, group, started: int, ok: bool, fetched: int, chunks: int,
                  sources: list[str], error: str | None) -> None:
        self.events.emit("stream_catchup_finished", group=group.name, account=key[0],
                         stream=key[1], snapshot_index=group.applied_index, ok=ok,
                         bytes=fetched, chunks=chunks,
                         duration_ns=time.monotonic_ns() - started, sources=sources, error=error)

    def _sources(self, group) -> list[str]:
        """Peers to ask, the leader first."""
        peers = [p for p in group.peers if p != self.me]
        leader = group.leader
        if leader in peers:
            peers.remove(leader)
            peers.insert(0, leader)
        return peers

    async def fetch(self, key: Key, group, msgs_dir: str, missing: list[Missing],
                    recv: trio.MemoryReceiveChannel) -> tuple[int, int, list[str]]:
        """Step 2 of a catch-up (see the module docstring): fetch ``missing`` (byte ranges of
        block files) into ``msgs_dir`` from the peers of ``group`` (``key``'s RaftGroup),
        reading their answers from ``recv`` (:meth:`open_inbox`); returns (bytes fetched,
        chunks, the peers that served). Raises :class:`CatchupImpossible` when every peer
        answered that a block is gone."""
        todo: deque[tuple[int, int, int]] = deque()
        for m in missing:
            for off in range(m.have, m.want, self.chunk):
                todo.append((m.first_seq, off, min(self.chunk, m.want - off)))
        remaining = sum(n for _, _, n in todo)
        outstanding: dict[tuple[int, int], tuple[int, float, str]] = {}
        gone: dict[tuple[int, int], set[str]] = {}
        avoid: dict[str, float] = {}        # peer -> trio time until which it is skipped
        fetched = chunks = 0
        used: list[str] = []
        writer = BlockWriter(msgs_dir)
        try:
            while todo or outstanding:
                now = trio.current_time()
                sources = [p for p in self._sources(group) if avoid.get(p, 0.0) <= now]
                while todo and len(outstanding) < self.window and sources:
                    b, o, n = todo.popleft()
                    tried = gone.get((b, o), set())
                    peer = next((p for p in sources if p not in tried), None)
                    if peer is None:
                        raise CatchupImpossible(f"no peer holds block {b} from offset {o} any more")
                    if not self._send(peer, {"g": group.name, "k": "blk", "b": b, "o": o, "n": n,
                                             "a": group.applied_index, "r": remaining}):
                        avoid[peer] = now + RETRY_S
                        todo.appendleft((b, o, n))
                        sources = [p for p in sources if p != peer]
                        continue
                    outstanding[(b, o)] = (n, now, peer)
                if not outstanding:
                    await trio.sleep(RETRY_S)      # no peer to ask now (no route, all busy)
                    continue
                with trio.move_on_after(REQUEST_TIMEOUT_S):
                    resp = await recv.receive()
                    got = outstanding.pop((resp.get("b"), resp.get("o")), None)
                    if got is None:
                        continue        # a late answer to a request sent again
                    n, _, peer = got
                    status, data = resp.get("s"), resp.get("d")
                    if status == "ok" and isinstance(data, bytes) and len(data) == n:
                        writer.write(resp["b"], resp["o"], data)
                        fetched += n
                        remaining -= n
                        chunks += 1
                        if peer not in used:
                            used.append(peer)
                        continue
                    if status == "gone":
                        gone.setdefault((resp["b"], resp["o"]), set()).add(peer)
                        if set(self._sources(group)) <= gone[(resp["b"], resp["o"])]:
                            raise CatchupImpossible(f"no peer holds block {resp['b']} any more")
                    else:                   # behind, busy, unknown, short: ask elsewhere soon
                        avoid[peer] = trio.current_time() + RETRY_S
                    todo.appendleft((resp["b"], resp["o"], n))
                    continue
                now = trio.current_time()
                for k, (n, sent, peer) in list(outstanding.items()):
                    if now - sent >= REQUEST_TIMEOUT_S:
                        del outstanding[k]
                        avoid[peer] = now + REQUEST_TIMEOUT_S
                        todo.appendleft((k[0], k[1], n))
            await trio.to_thread.run_sync(writer.finish)
        finally:
            writer.close()
        return fetched, chunks, used

    async def adopt_latest(self, key: Key, group, recv: trio.MemoryReceiveChannel) -> None:
        """After :class:`CatchupImpossible`: ask the leader of ``group`` (``key``'s RaftGroup)
        for its latest snapshot, reading the answer from ``recv`` (:meth:`open_inbox`), and
        adopt it if it is past what the group applied (``RaftGroup.adopt_snapshot``, which
        starts a new catch-up, replacing this one). Asks again until it does."""
        while True:
            leader = group.leader
            if leader is not None and leader != self.me and self._send(
                    leader, {"g": group.name, "k": "snap"}):
                with trio.move_on_after(REQUEST_TIMEOUT_S):
                    while True:
                        resp = await recv.receive()
                        if resp.get("k") != "snap" or resp.get("s") != "ok":
                            continue
                        snap = Snapshot(resp["i"], resp["t"], tuple(resp["p"]), resp["d"],
                                        tuple(resp.get("l") or ()))
                        if snap.index > group.applied_index:
                            group.adopt_snapshot(snap)   # starts the next catch-up
                            return
                        break
            await trio.sleep(RETRY_S * 5)

    # ------------------------------------------------------------------ frames

    def _send(self, peer: str, body: dict) -> bool:
        kind = _DATA if body.get("s") is not None else _REQ
        return self.routes.send_app(peer, kind, msgpack.packb(body, use_bin_type=True))

    def _key_of(self, group_name: str) -> Key | None:
        for key, g in self.cluster.groups.items():
            if g.name == group_name:
                return key
        return None

    def _malformed(self, src: str, kind: str) -> None:
        self.events.emit("config_warning", message=f"malformed {kind} frame from {src}: dropped")

    def _on_data(self, src: str, body: bytes) -> None:
        m = decode_frame(body)
        if m is None or not isinstance(m.get("s"), str):
            self._malformed(src, _DATA)
            return
        key = self._key_of(m["g"])
        inbox = self._inbox.get(key) if key is not None else None
        if inbox is None:
            return                          # no catch-up of that group any more
        try:
            inbox.send_nowait(m)
        except trio.WouldBlock:
            pass                            # its request times out and is sent again

    def _on_request(self, src: str, body: bytes) -> None:
        m = decode_frame(body)
        if m is None:
            self._malformed(src, _REQ)
            return
        key = self._key_of(m["g"])
        group = self.cluster.groups.get(key) if key is not None else None
        replica = self.cluster.replicas.get(key) if key is not None else None
        base = {"g": m["g"], "k": m["k"]}
        if group is None or replica is None or src not in group.peers:
            if m["k"] in ("blk", "snap"):
                self._send(src, {**base, "s": "unknown", "b": m.get("b"), "o": m.get("o")})
            return
        if m["k"] == "done":
            group.catchup_done(src)
            return
        if m["k"] == "hold":
            if group.is_leader and isinstance(m.get("a"), int):
                group.note_catchup(src, m["a"], time.time_ns())
            return
        if m["k"] == "snap":
            snap = group.log.snapshot()
            if snap.index == 0 or replica.holding:
                self._send(src, {**base, "s": "busy"})
                return
            self._send(src, {**base, "s": "ok", "i": snap.index, "t": snap.term,
                             "p": list(snap.peers), "d": snap.data,
                             "l": list(snap.learners)})
            return
        reply = {**base, "b": m["b"], "o": m["o"]}
        if group.is_leader and isinstance(m.get("a"), int):
            group.note_catchup(src, m["a"], time.time_ns())
        entry = replica.account.streams.get(replica.name)
        store = entry.stream.store if entry is not None else None
        if replica.holding or not isinstance(store, FileStore) or store.failed is not None:
            self._send(src, {**reply, "s": "busy"})
            return
        n = m.get("n")
        n = min(n, MAX_SERVE_BYTES) if isinstance(n, int) and n > 0 else CHUNK_BYTES
        try:
            data = store.read_block(m["b"], m["o"], n)
        except OSError:
            self._send(src, {**reply, "s": "busy"})
            return
        if data is None:
            self._send(src, {**reply, "s": "gone"})
        elif len(data) < n:
            self._send(src, {**reply, "s": "behind"})
        else:
            self._send(src, {**reply, "s": "ok", "d": data})
