"""RaftHost: many RAFT groups in one trio server, their logs on disk, their messages batched.

The host drives every :class:`~jetraft.raft.node.RaftNode` of a server (the meta group, one
per stream, one per consumer) the way etcd-io/raft's ``rawnode.go`` asks a driver to
handle a ``Ready``, with one change of scale: a *pass* handles the Ready of every group
that has one at once, so that the groups share one fsync and one message per peer. Each
group's handle, what it replicates and its share of every step of a pass are in
:mod:`jetraft.net.raft.group` (:class:`RaftGroup`, :class:`StateMachine`; both importable
from here too).

One pass (:meth:`RaftHost._pass`), whenever a tick, a received batch or a proposal made
some group ready:

1. persist, for every ready group: the snapshot (``GroupLog.apply_snapshot``), the entries
   (``GroupLog.append``), the hard state (``GroupLog.set_hard_state``);
2. one ``GroupCommit.sync()`` for the whole pass (group commit across groups). Nothing of
   the pass is sent or applied before it returns: persist before send (Raft Figure 2;
   etcd ``Ready.MustSync``);
3. send: every message of the pass for one server goes into one
   :func:`~jetraft.raft.wire.encode_batch` and one ``send(server, payload)`` (the
   heartbeats of all groups to a peer cost one call; a pass carrying more than
   :data:`MAX_BATCH_BYTES` of entry and snapshot data to one peer is split);
4. apply: the installed snapshot (``StateMachine.restore``) and the committed entries
   (``StateMachine.apply``), in log order, each once; each batch is logged as
   ``raft_applied`` (term and hash per entry, for log matching checks: Raft §5.3, §5.4.3);
5. ``RaftNode.advance``; then snapshots are taken where due, and leader changes reported
   to the state machines (``StateMachine.leader_changed``).

Time: the host ticks every group every ``tick_s`` seconds (default 0.05 s). With
``heartbeat_ticks`` 2 and ``election_ticks`` 10 a leader heartbeats every 0.1 s, a follower
that hears nothing campaigns after a random 0.5–1.0 s, and a leader that cannot reach a
quorum steps down within 0.5–1.0 s (pre-vote, thesis §9.6; check-quorum, thesis §6.2). A
tick missed because the loop was busy is skipped, not caught up. On each tick, a group's
leader also compares each peer's state with the last tick's (current: online and at most
:data:`CURRENT_LAG` entries behind, as :meth:`RaftGroup.replicas`) and logs the changes as
``raft_replica_current`` / ``raft_replica_lagging``.

The transport is abstract: ``send(server_name, payload) -> bool`` (False: unreachable, the
messages are dropped and RAFT retries) and :meth:`RaftHost.receive` for what arrives.
Messages for a group this host does not hold are dropped (the leader retries).

Storage failures stop one group on this server, never the host: a group whose Ready could
not be written (step 1), whose files the pass's sync could not make durable (step 2), whose
log could not be read, or whose state machine raised while applying (step 4) is *failed*
(:attr:`RaftGroup.failed`): nothing of that Ready is sent or applied, it is no longer ticked,
the messages for it are dropped (it neither votes nor acknowledges, and a leader loses its
leadership to the others at their election timeout) and it reports no leader to its state
machine. ``on_group_failed`` (or, without one, the ``jetstream_storage_failed`` event)
tells the owner, who may later :meth:`RaftHost.reopen_group` it: the log is rolled back to
what is provably on disk (``GroupLog.rollback_to_durable``) and reopened, and the group
goes on with its state machine as it was. Every other group goes on throughout.

Any other exception while driving one group (its node's ``tick``/``ready``/``advance``, its
state machine's ``apply``/``snapshot``/``leader_changed``) is a fault of that group alone:
it is failed the same way, for good (no resume: the same entries would raise again), and
``raft_group_failed`` carries the traceback; the host and every other group go on.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from jetraft.events import EVENTS
from jetraft.net.raft.group import CURRENT_LAG, RaftGroup, SnapshotPolicy, StateMachine
from jetraft.raft.wire import decode_batch, encode_batch
from jetraft.raft.node import RaftNode
from jetraft.raft.storage import GroupLog, LogDirectory
from jetraft.storage import fileio, GroupCommit, StorageError, SyncFailed
from jetraft.raft.storage.directory import group_dir_name
from jetraft.storage.fileio import errno_name
from jetraft.storage.group_commit import storage_error
from jetraft.raft.types import Config, Entry, Message, MessageType, Ready

if TYPE_CHECKING:
    from jetraft.events import EventLog

__all__ = ["CURRENT_LAG", "MAX_BATCH_BYTES", "RaftGroup", "RaftHost", "StateMachine"]

#: Entry and snapshot bytes per batch to one peer above which a pass's messages to that
#: peer are split into several batches (a catching-up peer may be owed many MiB at once).
MAX_BATCH_BYTES = 4 << 20

#: Bounds of one AppendEntries and of the appends in flight per follower (etcd
#: MaxSizePerMsg / MaxInflightMsgs): at most 16 MiB owed to a follower per group.
MAX_BYTES_PER_MESSAGE = 256 << 10
MAX_INFLIGHT = 64

#: Message types a leader may send before its own fsync (thesis §10.2.1).
_LEADER_EARLY = frozenset({MessageType.APPEND, MessageType.HEARTBEAT})

#: Event for a batch that failed to decode, when jetraft.events has it (else protocol_error).
BATCH_DROPPED_EVENT = "raft_batch_dropped"


class RaftHost:
    """Hosts the RAFT groups of server ``server_name``, their logs under ``directory``
    (one :class:`~jetraft.raft.storage.LogDirectory`), and exchanges their messages
    through ``send``. ``events``: a :class:`jetraft.events.EventLog` or None; ``zone``: this
    server's ``unique_tag`` value, added to every RAFT event. ``sync``: the server's
    :class:`GroupCommit` when shared with other stores (one is made otherwise).
    ``snapshot_entries``: applied entries between two snapshots of a group, unless
    :meth:`open_group` is given its own :class:`SnapshotPolicy`. ``flush``
    (optional) writes what ``send`` and the state machines queued to the sockets at once
    (``Server.flush_outbound``); a pass calls it before its fsync, before applying and at
    its end, so AppendEntries overlap the leader's fsync and answers leave before apply.
    ``pass_follows`` (optional) tells whether the caller's code is certain to call
    :meth:`pass_now` before it yields (``Server.in_read``); then :meth:`receive` and proposals
    leave the pass to it instead of waking :meth:`run`'s task.

    Run :meth:`run` in a nursery; open groups before or after it starts.
    """

    def __init__(self, server_name: str, directory: str | os.PathLike,
                 send: Callable[[str, bytes], bool], *, events: EventLog | None = None,
                 zone: str | None = None, tick_s: float = 0.05, election_ticks: int = 10,
                 heartbeat_ticks: int = 2, snapshot_entries: int = 8192,
                 sync: GroupCommit | None = None,
                 flush: Callable[[], None] | None = None,
                 pass_follows: Callable[[], bool] | None = None) -> None:
        if tick_s <= 0 or snapshot_entries < 1:
            raise ValueError("need tick_s > 0 and snapshot_entries >= 1")
        if not 1 <= heartbeat_ticks < election_ticks:
            raise ValueError("need 1 <= heartbeat_ticks < election_ticks")
        self.server_name = server_name
        self.events = events
        self.zone = zone
        self.tick_s = tick_s
        self.election_ticks = election_ticks
        self.heartbeat_ticks = heartbeat_ticks
        self.snapshot_entries = snapshot_entries
        self.election_timeout_ns = int(election_ticks * tick_s * 1e9)
        self.sync = sync if sync is not None else GroupCommit()
        self.logs = LogDirectory(directory, self.sync)
        self.groups: dict[str, RaftGroup] = {}
        #: Servers the transport reported unreachable (peer_down) and not back yet.
        self.down: set[str] = set()
        #: Counters for tests, benchmarks and monitoring.
        self.stats = {"passes": 0, "syncs": 0, "batches_sent": 0, "batches_unsent": 0,
                      "batches_dropped": 0, "messages_dropped": 0}
        self._send = send
        self._flush = flush if flush is not None else (lambda: None)
        self._pass_follows = pass_follows if pass_follows is not None else (lambda: False)
        self._pending: dict[str, RaftGroup] = {}      # groups that may have a Ready
        self._wake = trio.Event()
        self._fatal: BaseException | None = None     # a storage error met outside run()
        self._closed = False
        self._running = False                        # run() started and not ended
        self._in_pass = False
        self._tracking = False                       # _tick tracks the replica states
        #: ``on_group_failed(group, exc, op, entries)``: a group failed (see the module
        #: docstring); ``entries`` are those of its Ready that were not made durable here
        #: (their proposers get no answer from this server). None: the host logs
        #: ``jetstream_storage_failed`` itself.
        self.on_group_failed: Callable[[RaftGroup, BaseException, str, list[Entry]], None] | None = None

    # -- groups --------------------------------------------------------------------------

    def open_group(self, group: str, peers: tuple[str, ...], sm: StateMachine, *,
                   commit_broadcast: bool = True, policy: SnapshotPolicy | None = None,
                   segment_bytes: int | None = None) -> RaftGroup:
        """Start hosting ``group``: open (or create, with ``peers``) its log, restore ``sm``
        from the stored snapshot if there is one, and start its node. Committed entries
        after the snapshot reach ``sm.apply`` again from the first pass on. Problems that
        opening the log found and repaired are reported as ``raft_log_recovered``.
        ``commit_broadcast`` is the node's :class:`~jetraft.raft.types.Config` setting (False:
        followers learn a new commit index from the next AppendEntries or heartbeat).
        ``policy``: when the group snapshots (default: every ``snapshot_entries`` entries);
        ``segment_bytes``: the log's segment size (GroupLog's default when None: a log
        compacted by a bytes threshold keeps at most one segment more than it).
        ValueError if the group is open already."""
        if self._closed:
            raise RuntimeError("the RAFT host has stopped")
        if group in self.groups:
            raise ValueError(f"RAFT group {group!r} is open already")
        options = {} if segment_bytes is None else {"segment_bytes": segment_bytes}
        log = self.logs.open(group, peers=tuple(peers), **options)
        if policy is None:
            policy = SnapshotPolicy(entries=self.snapshot_entries)
        g = RaftGroup(self, group, log, sm, commit_broadcast=commit_broadcast, policy=policy)
        g.log_options = options
        for problem in log.recovery_report:
            self._emit("raft_log_recovered", {"group": group, **problem})
        snap = log.snapshot()
        if snap.index > 0:
            sm.restore(snap.data)
        g.node = self._new_node(g, log, tuple(peers))
        self.groups[group] = g
        self.touch(g)
        return g

    def _new_node(self, g: RaftGroup, log: GroupLog, peers: tuple[str, ...]) -> RaftNode:
        cfg = Config(id=self.server_name, group=g.name, peers=peers,
                     election_ticks=self.election_ticks, heartbeat_ticks=self.heartbeat_ticks,
                     pre_vote=True, check_quorum=True, max_bytes_per_message=MAX_BYTES_PER_MESSAGE,
                     max_inflight=MAX_INFLIGHT, commit_broadcast=g.commit_broadcast)
        return RaftNode(cfg, log, on_event=lambda name, fields: self.group_event(g, name, fields),
                        can_lead=g.can_lead, can_vote=g.can_vote)

    def reopen_group(self, group: str) -> RaftGroup:
        """Resume a failed group (see the module docstring) with the same RaftGroup object
        and state machine: a failed log is rolled back to what is provably on disk
        (``GroupLog.rollback_to_durable``), then reopened from disk with a new node (which
        votes and acknowledges only what its log holds). Entries already applied are not
        applied again (the state machine is as it was; a group whose state machine failed
        while applying must instead be closed and opened anew). Problems reopening found
        and repaired are reported as ``raft_log_recovered``. Raises StorageError or OSError
        when the rollback or the reopening fails (the group stays failed: retry later);
        KeyError for a group not hosted; returns the group at once when it is not failed."""
        g = self.groups[group]
        if g.failed is None:
            return g
        return self._install_log(g, self._reopen_log(g))

    async def reopen_group_off_loop(self, group: str) -> RaftGroup:
        """:meth:`reopen_group`, with the rollback and the reading of the log (which takes
        time in proportion to the log) in a worker thread. A group closed meanwhile is left
        closed."""
        g = self.groups[group]
        if g.failed is None:
            return g
        log = await trio.to_thread.run_sync(self._reopen_log, g)
        if self.groups.get(group) is not g or g.failed is None or g.closed:
            log.abandon()
            return g
        return self._install_log(g, log)

    def _reopen_log(self, g: RaftGroup) -> GroupLog:
        old = g.log
        if g.failed_op == "apply":
            old.close()
        else:
            old.rollback_to_durable()
        return self.logs.open(g.name, **g.log_options)

    def _install_log(self, g: RaftGroup, log: GroupLog) -> RaftGroup:
        try:
            node = self._new_node(g, log, tuple(g.node.peers))
        except Exception:
            log.abandon()
            raise
        for problem in log.recovery_report:
            self._emit("raft_log_recovered", {"group": g.name, **problem})
        g.resume(log, node)
        self.touch(g)
        return g

    def close_group(self, group: str, *, delete: bool = False) -> None:
        """Stop hosting ``group`` (its log closed, durable); ``delete`` also removes its
        files. Emits ``raft_group_closed``. Waiters in wait_applied get
        trio.ClosedResourceError. Unknown: no-op."""
        g = self.groups.pop(group, None)
        if g is None:
            return
        self.group_event(g, "raft_group_closed", {"group": group, "deleted": delete})
        self._pending.pop(group, None)
        g.mark_closed()
        try:
            g.log.close()       # a failed log is closed without a sync
        except (StorageError, OSError) as exc:
            if not delete:
                raise
            self._emit("jetstream_storage_failed", {"group": group, "op": "close",
                                                    "error": str(exc), "path": getattr(exc, "path", None)})
        if delete:
            fileio.remove_tree(g.log.directory)
            self.sync.fsync_dir_now(self.logs.root)

    def delete_group_files(self, group: str) -> None:
        """Remove the files of ``group``, which this host does not run (a replica found on
        disk and never opened); the removal is made durable. Unknown or running: no-op."""
        if group in self.groups:
            return
        path = os.path.join(self.logs.root, group_dir_name(group))
        if os.path.isdir(path):
            fileio.remove_tree(path)
            self.sync.fsync_dir_now(self.logs.root)
            self._emit("raft_group_files_deleted", {"group": group})

    # -- transport -----------------------------------------------------------------------

    def receive(self, src: str, payload: bytes) -> None:
        """A batch from server ``src``. A batch that does not decode is dropped with a warn
        event; messages not from ``src``, not for this server, or for a group not hosted
        here are dropped (counted in ``stats["messages_dropped"]``)."""
        try:
            msgs = decode_batch(payload)
        except ValueError as exc:
            self.stats["batches_dropped"] += 1
            self._batch_dropped(src, str(exc), len(payload))
            return
        self.down.discard(src)                       # it reached us: it is up
        now = time.time_ns()
        me = self.server_name
        groups = self.groups
        pending = self._pending
        dropped = 0
        for m in msgs:
            g = groups.get(m.group)
            if g is None or g.failed is not None or m.src != src or m.dst != me:
                dropped += 1                        # a failed group neither votes nor acks
                continue
            g.heard_from(src, now)
            try:
                g.node.step(m)
            except (StorageError, OSError) as exc:   # reading the log failed: this group stops
                dropped += 1
                self._group_failed(g, exc, "read")
                continue
            except Exception as exc:  # noqa: BLE001 - a peer's bad message must not stop us
                dropped += 1
                self._batch_dropped(src, f"group {m.group}: {m.type.name}: {exc!r}", len(payload))
                continue
            pending[m.group] = g
        if dropped:
            self.stats["messages_dropped"] += dropped
        if pending and not self._pass_follows():
            self._wake.set()

    def peer_down(self, peer: str) -> None:
        """Hint from the transport: ``peer`` is unreachable. Its replicas show offline and
        nothing is encoded for it until :meth:`peer_up` (or a batch from it)."""
        self.down.add(peer)

    def peer_up(self, peer: str) -> None:
        """Hint from the transport: ``peer`` is reachable again."""
        self.down.discard(peer)
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tick every group every ``tick_s`` and run a pass whenever a group may be ready.
        Returns only by cancellation (then every log is closed, durably) or raises the
        StorageError of a failed write or fsync (logged as ``jetstream_storage_failed``)."""
        try:
            self._running = True
            task_status.started()
            next_tick = trio.current_time() + self.tick_s
            while True:
                with trio.move_on_at(next_tick):
                    await self._wake.wait()
                self._wake = trio.Event()
                if self._fatal is not None:
                    raise self._fatal
                now = trio.current_time()
                if now >= next_tick:
                    self._tick()
                    next_tick += self.tick_s
                    if next_tick <= now:        # the loop was late: skip, never catch up
                        next_tick = now + self.tick_s
                if self._pending:
                    self._pass()
        except (StorageError, OSError) as exc:
            self._emit("jetstream_storage_failed", {"error": str(exc)})
            raise
        finally:
            self._running = False
            with trio.CancelScope(shield=True):
                self._shutdown()

    def pass_now(self) -> None:
        """Run a pass at once if a group may be ready: for code that just delivered RAFT
        messages or proposed (the end of a route's or client's read), so the pass need not
        wait for :meth:`run`'s task to be scheduled. A storage error is handed to run().
        Does nothing before run() started, after it ended, or inside a pass."""
        if not self._pending or not self._running or self._in_pass or self._fatal is not None:
            return
        try:
            self._pass()
        except (StorageError, OSError) as exc:
            self._fatal = exc
            self._wake.set()
            return
        if self._pending:               # proposed while the pass ran: run() takes it
            self._wake.set()

    def _tick(self) -> None:
        groups = self.groups
        pending = self._pending
        for name, g in groups.items():
            if g.failed is None:
                try:
                    g.node.tick()
                except Exception as exc:  # noqa: BLE001 - the group stops, the host goes on
                    self._group_failed(g, exc, "tick")
                    continue
                pending[name] = g
        # The leaders' replica states (raft_replica_current/_lagging): tracked only while
        # the events are written; when they start being written again, each leader starts
        # over with every peer's state.
        if self.wants_event("raft_replica_current"):
            now = time.time_ns()
            for g in groups.values():
                if g.failed is None:
                    try:
                        g.track_replicas(now)
                    except Exception as exc:  # noqa: BLE001 - the group stops, the host goes on
                        self._group_failed(g, exc, "tick")
            self._tracking = True
        elif self._tracking:
            self._tracking = False
            for g in groups.values():
                g.forget_replicas()

    def touch(self, g: RaftGroup) -> None:
        """``g`` may have a Ready: include it in the next pass (woken unless one follows)."""
        self._pending[g.name] = g
        if not self._pass_follows():
            self._wake.set()

    def _pass(self) -> None:
        """One pass over every group that may be ready (see the module docstring)."""
        self._in_pass = True
        try:
            self._pass_once()
        finally:
            self._in_pass = False

    def _pass_once(self) -> None:
        groups = list(self._pending.values())
        self._pending.clear()
        work: list[tuple[RaftGroup, Ready]] = []
        for g in groups:
            if g.failed is not None or g.closed:
                continue
            if g.backlog_due():
                try:
                    g.apply_backlog()
                except Exception as exc:  # noqa: BLE001 - the group stops, the host goes on
                    self._group_failed(g, exc, "apply")
                    continue
            try:
                if not g.node.has_ready():
                    continue
                rd = g.node.ready()
            except Exception as exc:  # noqa: BLE001 - the group stops, the host goes on
                self._group_failed(g, exc, "ready")
                continue
            try:
                g.persist(rd)
            except Exception as exc:  # noqa: BLE001 - storage or not, this group alone
                self._group_failed(g, exc, "write", rd.entries)
                continue
            work.append((g, rd))
        if work:
            self.stats["passes"] += 1
            # A leader's AppendEntries and heartbeats may leave before its own fsync: its
            # entries count towards a commit only once persisted (advance), so the leader's
            # and the followers' writes overlap (thesis §10.2.1). Everything else waits.
            early: list[Message] = []
            late: list[Message] = []
            for _, rd in work:
                for m in rd.messages:
                    (early if m.type in _LEADER_EARLY else late).append(m)
            if early:
                self._send_all(early)
                self._flush()
            self._sync_pass(work)
            self.stats["syncs"] += 1
            failed = {g.name for g, _ in work if g.failed is not None}
            if failed:                          # persist before send: nothing of theirs
                late = [m for m in late if m.group not in failed]
            self._send_all(late)
            self._flush()
            now_mono = time.monotonic_ns()
            for g, rd in work:
                if g.closed or g.failed is not None:    # closed by a state machine earlier
                    continue
                try:
                    g.apply_ready(rd)
                except Exception as exc:  # noqa: BLE001 - the group stops, the host goes on
                    self._group_failed(g, exc, "apply")
                    continue
                try:
                    g.node.advance(rd)
                    if g.closed:                # closed by its own state machine
                        continue
                    g.maybe_snapshot(now_mono)
                    if g.node.has_ready():
                        self._pending[g.name] = g
                except Exception as exc:  # noqa: BLE001 - storage or not, this group alone
                    self._group_failed(g, exc, "write" if isinstance(exc, (StorageError, OSError))
                                       else "advance")
            if self._pending:
                self._wake.set()
            self._flush()
        for g in groups:
            if not g.closed and g.failed is None:
                try:
                    g.check_leader()
                except Exception as exc:  # noqa: BLE001 - the group stops, the host goes on
                    self._group_failed(g, exc, "leader_changed")

    def _sync_pass(self, work: list[tuple[RaftGroup, Ready]]) -> None:
        """The pass's GroupCommit.sync(); each group of ``work`` one of whose files it
        could not make durable fails (every group, when the failure names no owner)."""
        try:
            self.sync.sync()
        except SyncFailed as exc:
            for g, rd in work:
                failure = exc.failure_of(g.log)
                if failure is None and not exc.concerns(None):
                    continue
                err: BaseException = exc
                if failure is not None:
                    err = failure.error
                    if isinstance(err, OSError):
                        err = storage_error("fsync", failure.path, err)
                g.log.fail(exc)
                self.sync.forget_owner(g.log)   # failed for good: not reported again
                self._group_failed(g, err, "fsync", rd.entries)
        except (StorageError, OSError) as exc:
            for g, rd in work:
                self._group_failed(g, exc, "fsync", rd.entries)

    def _group_failed(self, g: RaftGroup, exc: BaseException, op: str,
                      entries: list[Entry] | tuple = ()) -> None:
        """Stop ``g`` on this server after ``exc`` (see the module docstring)."""
        if g.failed is not None or g.closed:
            return
        g.failed, g.failed_op = exc, op
        if op != "apply" and isinstance(exc, StorageError):
            g.log.fail(exc)
        self._pending.pop(g.name, None)
        term = g.node.term
        g.forget_leader()
        if not isinstance(exc, (StorageError, OSError)):   # a fault, not the disk: for good
            self.group_event(g, "raft_group_failed", {
                "group": g.name, "term": term, "op": op, "error": repr(exc),
                "traceback": "".join(traceback.format_exception(exc))})
            return
        if self.on_group_failed is not None:
            self.on_group_failed(g, exc, op, list(entries))
            return
        self._emit("jetstream_storage_failed", {
            "account": None, "stream": None, "consumer": None, "group": g.name,
            "errno": errno_name(exc), "path": getattr(exc, "path", None), "op": op,
            "error": str(exc) or type(exc).__name__})

    def _send_all(self, msgs: list[Message]) -> None:
        """One batch per destination (split past MAX_BATCH_BYTES), one send() each."""
        by_dst: dict[str, list[list[Message]]] = {}
        size: dict[str, int] = {}
        for m in msgs:
            n = sum(len(e.data) for e in m.entries) if m.entries else 0
            if m.snapshot is not None:
                n += len(m.snapshot.data)
            chunks = by_dst.get(m.dst)
            if chunks is None:
                chunks = by_dst[m.dst] = [[]]
                size[m.dst] = 0
            elif n and size[m.dst] + n > MAX_BATCH_BYTES and chunks[-1]:
                chunks.append([])
                size[m.dst] = 0
            chunks[-1].append(m)
            size[m.dst] += n
        stats = self.stats
        for dst, chunks in by_dst.items():
            if dst in self.down:
                stats["batches_unsent"] += len(chunks)
                continue
            for chunk in chunks:
                if self._send(dst, encode_batch(chunk)):
                    stats["batches_sent"] += 1
                else:
                    stats["batches_unsent"] += 1

    def _shutdown(self) -> None:
        """Close every group and log (each log.close() syncs what is left)."""
        self._closed = True
        for g in self.groups.values():
            g.mark_closed()
        self.groups.clear()
        self._pending.clear()
        try:
            self.logs.close()
        except (StorageError, OSError) as exc:
            self._emit("jetstream_storage_failed", {"error": f"closing the RAFT logs: {exc}"})

    # -- events --------------------------------------------------------------------------

    def group_event(self, g: RaftGroup, name: str, fields: dict) -> None:
        """The nodes' event hook: every RAFT event also carries the node's last log index,
        peers, leader and this server's zone."""
        events = self.events
        if events is None:
            return
        spec = EVENTS.get(name)
        if spec is not None and not events.enabled(spec.level):
            return
        node = g.node
        fields.setdefault("index", node.last_index)
        fields.setdefault("peers", list(node.peers))
        fields.setdefault("leader", node.leader)
        fields.setdefault("zone", self.zone)
        events.emit(name, **fields)

    def wants_event(self, name: str) -> bool:
        """Whether event ``name`` would be written (skip building its fields otherwise)."""
        events = self.events
        return events is not None and events.enabled(EVENTS[name].level)

    def _emit(self, name: str, fields: dict) -> None:
        if self.events is not None:
            self.events.emit(name, **fields)

    def _batch_dropped(self, src: str, error: str, size: int) -> None:
        if BATCH_DROPPED_EVENT in EVENTS:
            self._emit(BATCH_DROPPED_EVENT, {"peer": src, "error": error, "bytes": size})
        else:
            self._emit("protocol_error", {"level": "warn", "cid": None, "peer": src,
                                          "error": f"RAFT batch from {src} dropped: {error}",
                                          "bytes": size, "fatal": False})
