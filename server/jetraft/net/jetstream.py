"""JetStream on trio: one :class:`~jetraft.jetstream.api.JetStreamAccount` per account,
a group commit for every file-backed stream, and the timers consumers need.

The server hands every inbound message to :meth:`JetStreamService.handle` first. What the
sans-IO layer returns is queued in order and sent by one task:

- a PubAck or API response that follows a write to a file-backed stream is sent only after
  one :meth:`~jetraft.raft.storage.GroupCommit.sync` pass covering every write queued before
  it (group commit: the publishes read while the previous pass ran share the next one),
  unless the operator chose ``sync_interval`` (lazy sync, as nats-server's default: writes
  are fsynced every interval and acks go out at once). The pass runs on the event loop
  itself, as nats-server fsyncs in the stream's own goroutine: on this machine a thread
  hand-off cost more than the ~120 us fsync (sync publish 830 vs 1,080 msg/s);
- consumer deliveries and status messages go out in the same queue, after whatever was
  queued before them.

Consumer state files are written (on the event loop, so there is one writer per file) at most
every ``STATE_FLUSH_S`` seconds,
once more on shutdown, and before any reply to an ``ack_sync`` (double ack) is sent. A failed fsync is fatal: nothing more is acknowledged, the event
log says ``jetstream_storage_failed`` and the server stops (nats-server does the same on a
storage error it cannot recover from).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import TYPE_CHECKING

import trio

from jetraft import NATS_COMPAT_VERSION
from jetraft.jetstream.api import ACK_PREFIX, API_PREFIX, FC_PREFIX, JetStreamAccount, Reply
from jetraft.jetstream.store import FileStore
from jetraft.net.durability import DurabilityBarrier
from jetraft.raft.storage import GroupCommit

if TYPE_CHECKING:
    from jetraft.net.js_cluster import ClusterJetStream
    from jetraft.server import Server

#: Seconds between writes of changed consumer state files.
STATE_FLUSH_S = 0.1
#: Seconds between max_age expiry checks when a stream has a max_age.
EXPIRY_CHECK_S = 0.25


def default_store_dir() -> str:
    """Where JetStream keeps its files when no ``store_dir`` is configured
    (nats-server uses ``$TMPDIR/nats``)."""
    return os.path.join(tempfile.gettempdir(), "jetraft")


class JetStreamService:
    """JetStream for every account the configuration enables it for.

    Create with the :class:`~jetraft.server.Server`; ``await nursery.start(service.run)``
    recovers every stream from disk (before clients are accepted) and runs the sender,
    timer, state and sync tasks until cancelled.
    """

    def __init__(self, server: Server) -> None:
        cfg = server.config.jetstream
        assert cfg is not None
        self.server = server
        self.config = cfg
        self.store_dir = cfg.store_dir or default_store_dir()
        # jetraft's default is an fsync before every ack; an explicit sync_interval relaxes it.
        self.sync_always = cfg.sync_always or cfg.sync_interval is None
        self.commit = GroupCommit()
        self.barrier = DurabilityBarrier(self.commit)
        self.accounts: dict[str, JetStreamAccount] = {}
        #: The clustered half (net/js_cluster.py) when the server has a cluster block.
        self.cluster: ClusterJetStream | None = None
        self.clustered = server.config.cluster is not None
        # A clustered replica's files are rebuilt from its RAFT log: they are never fsynced,
        # so their writes must not ride on the RAFT logs' group commit either.
        store_sync = GroupCommit() if self.clustered else self.commit
        for name in server.config.jetstream_accounts():
            self.accounts[name] = JetStreamAccount(
                name, store_dir=self.store_dir, sync=store_sync, events=server.events,
                interest=self._interest_fn(name), server_version=NATS_COMPAT_VERSION,
                # a clustered replica's files are rebuilt from its RAFT log, never fsynced
                sync_always=self.sync_always and not self.clustered, domain=cfg.domain or "",
                server_name=server.server_name, clustered=self.clustered)
        self._queue: list[tuple[str, Reply]] = []
        self._queued = trio.Event()
        self._wake = trio.Event()
        self._interest_dirty: set[str] = set()
        self.failed: BaseException | None = None

    def _interest_fn(self, account: str):
        def has_interest(subject: str) -> bool:
            if self.cluster is not None:
                return self.cluster.interest(account, subject)
            match = self.server.account(account).sublist.match(subject)
            return bool(match.plain or match.queues)
        return has_interest

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Recover every account's streams, then serve until cancelled; on the way out,
        sync every file and write consumer state (shielded)."""
        now = time.time_ns()
        os.makedirs(self.store_dir, exist_ok=True)
        if self.clustered:
            from jetraft.net.js_cluster import ClusterJetStream
            self.cluster = ClusterJetStream(self)
        else:
            for acc in self.accounts.values():
                acc.recover(now)
            self.server.events.emit("jetstream_enabled", store_dir=self.store_dir,
                                    accounts=sorted(self.accounts),
                                    sync="always" if self.sync_always else self.config.sync_interval)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.barrier.run)
                nursery.start_soon(self._sender)
                if self.cluster is not None:    # replicas: timers are the leaders' TICK entries
                    await nursery.start(self.cluster.run)
                else:
                    nursery.start_soon(self._timers)
                    nursery.start_soon(self._state_writer)
                if not self.sync_always and not self.clustered:
                    nursery.start_soon(self._interval_sync)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                self._close()

    def _close(self) -> None:
        try:
            if self.failed is None:
                self.commit.sync()
        except Exception as exc:  # noqa: BLE001 - report, then close without acknowledging more
            self.server.events.emit("jetstream_storage_failed", error=str(exc))
        for acc in self.accounts.values():
            try:
                acc.close()
            except OSError as exc:
                self.server.events.emit("jetstream_storage_failed", error=str(exc))

    async def _sender(self) -> None:
        while True:
            await self._queued.wait()
            self._queued = trio.Event()
            batch, self._queue = self._queue, []
            if self.sync_always and any(r.needs_sync for _, r in batch):
                doomed = self._doomed_snapshot()
                try:
                    self.commit.sync()       # inline: see the module docstring
                except Exception as exc:  # noqa: BLE001 - durability lost: stop acknowledging
                    self._fail(exc)
                    return
                self._release(doomed)
            if any(r.needs_state for _, r in batch):
                for acc in self.accounts.values():    # an ack_sync reply promises the ack is kept
                    acc.write_states(acc.pending_state_writes())
            for account, reply in batch:
                self.server.route_internal(account, reply.out)

    def _doomed_snapshot(self) -> list[tuple[FileStore, int]]:
        out = []
        for acc in self.accounts.values():
            for entry in acc.streams.values():
                store = entry.stream.store
                if isinstance(store, FileStore) and store.doomed_count():
                    out.append((store, store.doomed_count()))
        return out

    @staticmethod
    def _release(doomed: list[tuple[FileStore, int]]) -> None:
        for store, n in doomed:
            store.delete_doomed(n)

    def _fail(self, exc: BaseException) -> None:
        self.failed = exc
        self.server.events.emit("jetstream_storage_failed", error=str(exc))
        self.server.shutdown("storage failure")

    async def _timers(self) -> None:
        while True:
            deadline = None
            for acc in self.accounts.values():
                d = acc.next_deadline()
                if d is not None and (deadline is None or d < deadline):
                    deadline = d
                if acc.wants_expiry():
                    d = time.time_ns() + int(EXPIRY_CHECK_S * 1e9)
                    if deadline is None or d < deadline:
                        deadline = d
            delay = max(0.0, (deadline - time.time_ns()) / 1e9) if deadline is not None else 3600.0
            with trio.move_on_after(delay):
                await self._wake.wait()
            self._wake = trio.Event()
            now = time.time_ns()
            dirty, self._interest_dirty = self._interest_dirty, set()
            for name, acc in self.accounts.items():
                if name in dirty:
                    self._enqueue(name, acc.interest_changed(now))
                self._enqueue(name, acc.poll(now))

    async def _state_writer(self) -> None:
        while True:
            await trio.sleep(STATE_FLUSH_S)
            for acc in self.accounts.values():   # on the loop: one writer per state file
                acc.write_states(acc.pending_state_writes())

    async def _interval_sync(self) -> None:
        while True:
            await trio.sleep(self.config.sync_interval)
            doomed = self._doomed_snapshot()
            try:
                await self.barrier.wait()
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)
                return
            self._release(doomed)

    # ------------------------------------------------------------------ entry points

    def _enqueue(self, account: str, replies: list[Reply]) -> None:
        if replies:
            self._queue.extend((account, r) for r in replies)
            self._queued.set()

    def handle(self, account: str, subject: str, reply: str | None, headers: bytes | None,
               payload: bytes, *, routed: bool = False) -> bool:
        """Give JetStream an inbound message. Returns True if JetStream answers it (an API
        or ack subject, or a stream's subject), so a request is not a no-responders case.
        ``routed``: it came from another server (which routes nothing twice)."""
        if self.cluster is not None and self.failed is None:
            return self.cluster.handle(account, subject, reply, headers, payload, routed=routed)
        acc = self.accounts.get(account)
        if acc is None or self.failed is not None:
            return False
        now = time.time_ns()
        if subject.startswith("$JS."):
            if subject.startswith(API_PREFIX):
                out = acc.handle_api(subject, reply, headers, payload, now)
                if out is None:
                    return False
                self._enqueue(account, out)
                self._wake.set()
                return True
            if subject.startswith(ACK_PREFIX):
                out = acc.ack(subject, reply, payload, now)
                self._enqueue(account, out)
                self._wake.set()
                return bool(out) or acc.knows_consumer(subject, ACK_PREFIX)
            if subject.startswith(FC_PREFIX):
                self._enqueue(account, acc.flow_control(subject, now))
                self._wake.set()
                return acc.knows_consumer(subject, FC_PREFIX)
        entry = acc.stream_for(subject)
        if entry is None:
            return False
        self._enqueue(account, acc.publish(entry, subject, reply, headers, payload, now))
        if entry.consumers:     # new deliveries may bring a redelivery deadline forward
            self._wake.set()
        return True

    def interest_changed(self, account: str) -> None:
        """A subscription was added or removed in ``account``: push consumers re-check."""
        if account in self.accounts:
            self._interest_dirty.add(account)
            self._wake.set()
