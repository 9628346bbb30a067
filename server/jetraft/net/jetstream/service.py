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
every ``STATE_FLUSH_S`` seconds, once more on shutdown, and before any reply to an
``ack_sync`` (double ack) is sent.

Storage failures (a full disk, an I/O error) stop one stream, never the server. A write,
truncation or fsync of a stream's message store or of one of its consumers' state files that
fails *freezes* that stream (:attr:`JetStreamService.frozen`) and logs
``jetstream_storage_failed`` (account, stream, errno, path):

- what the failure concerns is refused: the request whose write failed, and every reply
  waiting for a sync pass in which one of the stream's files failed, get nats-server's
  error instead of their success (:func:`storage_api_error`: 10023 "insufficient resources"
  for ENOSPC/EDQUOT, as nats-server 2.15 answers on a full store; 10077 with the system
  error's text otherwise). Replies to writes that a sync made durable before the failure
  are sent: they are durable;
- while frozen, the stream takes no input that would change it: publishes, purges, message
  deletes, stream updates and consumer creation get the same error at once (no disk I/O);
  acks and pull requests are dropped (delivered messages are redelivered after their
  ack_wait once it runs again); its timers (expiry, redelivery, push deliveries) pause.
  Reads (stream info, message get, direct get, consumer info, names, lists) and deletes of
  the stream or its consumers are served;
- every ``STORAGE_RETRY_S`` (1) seconds a *resume attempt* runs off the event loop: a probe
  (``PROBE_BYTES``, 1 MiB, written and fsynced in the stream's directory, then removed;
  both constants in :mod:`jetraft.net.jetstream.durability`); if that
  succeeds, a stream whose store failed is rolled back to what is provably on disk and
  read back (:meth:`~jetraft.jetstream.store.FileStore.reopen_verified`: a file whose
  fsync failed is cut to its length at its last successful fsync, so nothing acknowledged
  is lost and nothing not provably durable is kept; sequences never go back; message ids of
  rolled back messages are forgotten), its consumers' state files are written again, and
  the stream runs again (``jetstream_storage_resumed``). No restart is needed.

Any other exception while handling one stream's input or timers (a publish, an ack, a flow
control answer, a poll of its consumers) is a fault of that stream alone: it is frozen the
same way, for good (no resume attempts: the same input would raise again; a restart reopens
it), the request that raised gets nats-server's 500 error 10051 ``internal error``, and
``jetstream_stream_failed`` carries the traceback. (A JetStream API request that raises is
answered by :meth:`JetStreamAccount.handle_api` itself and freezes nothing.)

Core NATS, every other stream and every other account go on throughout.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import trio

from jetraft import NATS_COMPAT_VERSION
from jetraft.events import rfc3339_ns
from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.api import ACK_PREFIX, API_PREFIX, FC_PREFIX, JetStreamAccount, Reply
from jetraft.jetstream.api.batches import timed_out_advisories
from jetraft.jetstream.batch import AtomicBatches, batch_id
from jetraft.jetstream.consumer_delivery import flow_control_last
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.requests import ERROR_EXTRAS, INTERNAL_ERROR_TEXT, json_bytes, with_request_info
from jetraft.jetstream.store import FileStore
from jetraft.net.jetstream.durability import (
    TimedGroupCommit,
    PROBE_TIMEOUT_S,
    STORAGE_RETRY_S,
    DurabilityBarrier,
    probe_directory,
    storage_api_error,
)
from jetraft.net.jetstream.snapshot import StreamTransfers
from jetraft.jetstream.api_subjects import api_kind as _api_kind, response_type as _response_type, stream_of as _stream_of
from jetraft.protocol import Message
from jetraft.storage import fileio, GroupCommit, StorageError, SyncFailed
from jetraft.storage.group_commit import storage_error

if TYPE_CHECKING:
    from jetraft.jetstream.api import StreamEntry
    from jetraft.net.transport.client import ClientConnection
    from jetraft.net.jetstream.cluster import ClusterJetStream
    from jetraft.net.ports import JetStreamHost

#: Seconds between writes of changed consumer state files.
STATE_FLUSH_S = 0.1
#: Seconds between max_age expiry checks when a stream has a max_age.
EXPIRY_CHECK_S = 0.25
#: Chunk acks and restore data of stream snapshots (net/jetstream/snapshot.py).
_TRANSFER_PREFIX = "$JS.SNAPSHOT."
#: API requests that get no audit (the jetstream/api package answers them without one).
_UNAUDITED = ("$JS.API.DIRECT.GET.", "$JS.API.CONSUMER.MSG.NEXT.")
_TRANSFER_API = "$JS.API.STREAM."
#: API operations refused on a frozen stream (they would write its store or its consumers'
#: files). Reads and deletes are served.
_FROZEN_REFUSED = frozenset({"STREAM.PURGE", "STREAM.MSG.DELETE", "STREAM.UPDATE",
                            "CONSUMER.CREATE", "CONSUMER.DURABLE"})


def _refusal_error(exc: BaseException) -> E.JSApiError:
    """What a request refused because its stream stopped after ``exc`` gets: the storage
    failure's error (:func:`storage_api_error`), or 10051 (500) ``internal error`` for a
    fault that is not one."""
    if isinstance(exc, (StorageError, OSError)):
        return storage_api_error(exc)
    return E.stream_general(INTERNAL_ERROR_TEXT)


def default_store_dir() -> str:
    """Where JetStream keeps its files when no ``store_dir`` is configured
    (nats-server uses ``$TMPDIR/nats``)."""
    return os.path.join(tempfile.gettempdir(), "jetraft")


def error_reply(out: Outbound, err: E.JSApiError) -> Outbound:
    """``out`` (a PubAck or an API response) turned into the error answer to the same
    request: ``{"error", "stream", "seq": 0}`` for a PubAck (nats-server
    processJetStreamMsg), the response type's error shape otherwise."""
    try:
        body = json.loads(out.data)
    except ValueError:
        body = {}
    rtype = body.get("type") if isinstance(body, dict) else None
    if isinstance(rtype, str):
        data = {**E.error_response(rtype, err), **ERROR_EXTRAS.get(rtype, {})}
    else:
        data = {"error": err.to_json(), "stream": body.get("stream", "") if isinstance(body, dict)
                else "", "seq": 0}
    return Outbound(out.subject, None, None, json_bytes(data))


def write_state_file(path: str, data: bytes) -> None:
    """Write a consumer state file durably (temp file, fdatasync, rename, directory fsync),
    through the :mod:`~jetraft.storage.fileio` seam. Raises OSError."""
    layout.atomic_write(path, data)


@dataclass(slots=True)
class Frozen:
    """A stream stopped by a storage failure: ``store`` the store it had then (a stream
    deleted and created again is another stream), ``error`` the failure, ``since``
    (trio clock) and ``retry_at`` seconds, ``attempts`` resume attempts made."""

    account: str
    stream: str
    store: Any
    error: BaseException
    since: float
    retry_at: float
    attempts: int = 0


class JetStreamService:
    """JetStream for every account the configuration enables it for.

    Create with the :class:`~jetraft.server.Server`; ``await nursery.start(service.run)``
    recovers every stream from disk (before clients are accepted) and runs the sender,
    timer, state, sync and resume tasks until cancelled.
    """

    def __init__(self, server: JetStreamHost) -> None:
        cfg = server.config.jetstream
        assert cfg is not None
        self.server = server
        self.config = cfg
        self.store_dir = cfg.store_dir or default_store_dir()
        # jetraft's default is an fsync before every ack; an explicit sync_interval relaxes it.
        self.sync_always = cfg.sync_always or cfg.sync_interval is None
        # standalone: the stores' group commit, which tells what each request wrote
        # standalone and clustered, every fsync's time goes to /metrics (net/monitoring/metrics.py)
        self.commit = TimedGroupCommit(track_owners=server.config.cluster is None)
        self.barrier = DurabilityBarrier(self.commit)
        self.accounts: dict[str, JetStreamAccount] = {}
        #: The clustered half (net/jetstream/cluster.py) when the server has a cluster block.
        self.cluster: ClusterJetStream | None = None
        self.clustered = server.config.cluster is not None
        # A clustered replica's files are rebuilt from its RAFT log: they are never fsynced,
        # so their writes must not ride on the RAFT logs' group commit either.
        store_sync = GroupCommit() if self.clustered else self.commit
        #: atomic batches staged on this server, every account's (jetstream/batch.py)
        self.batches = AtomicBatches()
        system = server.config.system_account
        for name in server.config.jetstream_accounts():
            self.accounts[name] = JetStreamAccount(
                name, store_dir=self.store_dir, sync=store_sync, events=server.events,
                interest=self._interest_fn(name), server_version=NATS_COMPAT_VERSION,
                # a clustered replica's files are rebuilt from its RAFT log, never fsynced
                sync_always=self.sync_always and not self.clustered, domain=cfg.domain or "",
                server_name=server.server_name, clustered=self.clustered,
                advisory_interest=self._listening_fn(name),
                limits=dict(account.jetstream_limits) if (account := server.config.accounts.get(name)) else None,
                batches=self.batches, system_account=system or "",
                system_interest=self._listening_fn(system) if system else None)
        #: (account, reply, ids of the stores its call wrote, (account, stream) or None)
        self._queue: list[tuple[str, Reply, frozenset[int], tuple[str, str] | None]] = []
        self._queued = trio.Event()
        self._wake = trio.Event()
        #: when the standalone timers wake next (ns; None: not before woken)
        self._timer_deadline: int | None = None
        self._interest_dirty: set[str] = set()
        #: Streams stopped by a storage failure (standalone), by (account, stream).
        self.frozen: dict[tuple[str, str], Frozen] = {}
        #: Stream snapshots and restores in progress (net/jetstream/snapshot.py).
        self.transfers = StreamTransfers(self)

    def _listening_fn(self, account: str):
        """Whether a subscription anywhere in the cluster listens on an advisory subject
        in ``account`` (advisories are built only then)."""
        def listening(subject: str) -> bool:
            if self.cluster is not None:
                return self.cluster.has_interest(account, subject)
            match = self.server.account(account).sublist.match(subject)
            return bool(match.plain or match.queues)
        return listening

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
        fileio.make_dirs(self.store_dir)
        if self.clustered:
            from jetraft.net.jetstream.cluster import ClusterJetStream
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
                await nursery.start(self.transfers.run)
                nursery.start_soon(self._sender)
                if self.cluster is not None:    # replicas: timers are the leaders' TICK entries
                    await nursery.start(self.cluster.run)
                else:
                    nursery.start_soon(self._timers)
                    nursery.start_soon(self._state_writer)
                    nursery.start_soon(self._resumer)
                if not self.sync_always and not self.clustered:
                    nursery.start_soon(self._interval_sync)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                self._close()

    def _close(self) -> None:
        try:
            self.commit.sync()
        except SyncFailed as exc:
            self._sync_failed(exc)
        except (StorageError, OSError) as exc:
            self.server.events.emit("jetstream_storage_failed", account=None, stream=None,
                                    consumer=None, group=None, errno=fileio.errno_name(exc),
                                    path=getattr(exc, "path", None), op="close", error=str(exc))
        self._write_states(force=True)
        for acc in self.accounts.values():
            for entry in list(acc.streams.values()):
                try:
                    entry.stream.store.close()
                except OSError as exc:
                    self._freeze(acc.name, entry.name, exc, "close")

    async def _sender(self) -> None:
        while True:
            await self._queued.wait()
            self._queued = trio.Event()
            batch, self._queue = self._queue, []
            failed: set[int] = set()
            if self.sync_always and any(r.needs_sync for _, r, _, _ in batch):
                doomed = self._doomed_snapshot()
                try:
                    self.commit.sync()       # inline: see the module docstring
                except SyncFailed as exc:
                    failed = exc.owners()
                    self._sync_failed(exc)
                except (StorageError, OSError) as exc:   # no owner known: all of this batch
                    for _, _, owners, _ in batch:
                        failed |= owners
                    for key in self._keys_of(failed):
                        self._freeze(key[0], key[1], exc, "fsync")
                self._release(doomed)
            if any(r.needs_state for _, r, _, _ in batch):
                self._write_states()    # an ack_sync reply promises the ack is kept
            for account, reply, owners, key in batch:
                out = reply.out
                if reply.needs_sync and owners & failed:
                    # its writes were not made durable: the request is refused after all
                    fr = self.frozen.get(key) if key is not None else None
                    out = error_reply(out, storage_api_error(fr.error if fr else None))
                elif reply.needs_state and key in self.frozen:
                    continue        # its consumer's state was not written: the ack is not kept
                self.server.route_internal(reply.account or account, out)

    def _doomed_snapshot(self) -> list[tuple[FileStore, int]]:
        out = []
        for acc in self.accounts.values():
            for entry in acc.streams.values():
                store = entry.stream.store
                if isinstance(store, FileStore) and store.failed is None and store.doomed_count():
                    out.append((store, store.doomed_count()))
        return out

    @staticmethod
    def _release(doomed: list[tuple[FileStore, int]]) -> None:
        for store, n in doomed:
            if store.failed is None:        # its records are not provably durable otherwise
                store.delete_doomed(n)

    async def _timers(self) -> None:
        while True:
            deadline = None
            for acc in self.accounts.values():
                for name in acc.streams:
                    if (acc.name, name) in self.frozen:
                        continue            # paused until it resumes
                    for d in (acc.stream_deadline(name), acc.sources_deadline(acc.streams[name])):
                        if d is not None and (deadline is None or d < deadline):
                            deadline = d
                if acc.wants_expiry():
                    d = time.time_ns() + int(EXPIRY_CHECK_S * 1e9)
                    if deadline is None or d < deadline:
                        deadline = d
            d = self.batches.next_expiry()      # the oldest staged atomic batch times out
            if d is not None and (deadline is None or d < deadline):
                deadline = d
            self._timer_deadline = deadline
            delay = max(0.0, (deadline - time.time_ns()) / 1e9) if deadline is not None else 3600.0
            with trio.move_on_after(delay):
                await self._wake.wait()
            self._wake = trio.Event()
            now = time.time_ns()
            self._batch_timeouts(now)
            dirty, self._interest_dirty = self._interest_dirty, set()
            for name, acc in self.accounts.items():
                changed = name in dirty     # push consumers re-check their interest first
                for sname in list(acc.streams):
                    if (name, sname) in self.frozen:
                        continue
                    self._guarded(name, sname, None, None,
                                  lambda acc=acc, sname=sname, changed=changed:
                                  acc.poll_stream(sname, now, interest_changed=changed))
                    self._guarded(name, sname, None, None,
                                  lambda acc=acc, sname=sname: acc.run_links(sname, now))
                acc.links_woken = False

    def _batch_timeouts(self, now: int) -> None:
        """Abandon the atomic batches that timed out, with their advisories (standalone; a
        cluster's tick does it for the batches its leaders staged). Fault isolation: a
        failure is reported and the timers go on."""
        try:
            for account, reply in timed_out_advisories(self.batches, self.accounts, now):
                self._enqueue(account, [reply])
        except Exception as exc:  # noqa: BLE001 - the timers go on
            self.server.events.emit("advisory_failed", account=None, advisory="stream_batch_abandoned",
                                    error=repr(exc))

    async def _state_writer(self) -> None:
        while True:
            await trio.sleep(STATE_FLUSH_S)
            self._write_states()     # on the loop: one writer per state file

    def _write_states(self, force: bool = False) -> None:
        """Write every changed (``force``: every) consumer state file of every stream that
        is not frozen; a failure freezes the consumer's stream. A state not written stays
        changed, to be written once the stream runs again."""
        for acc in self.accounts.values():
            for path, data in acc.pending_state_writes(force):
                sname, cname = _stream_and_consumer(acc, path)
                key = (acc.name, sname)
                if key in self.frozen:
                    _redirty(acc, sname, cname)
                    continue
                if not os.path.isdir(os.path.dirname(path)):
                    continue            # the consumer was deleted meanwhile
                try:
                    write_state_file(path, data)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    _redirty(acc, sname, cname)
                    self._freeze(acc.name, sname, exc, "write", consumer=cname)

    async def _interval_sync(self) -> None:
        while True:
            await trio.sleep(self.config.sync_interval)
            doomed = self._doomed_snapshot()
            try:
                await self.barrier.wait()
            except SyncFailed as exc:
                self._sync_failed(exc)
            except (StorageError, OSError) as exc:
                self.server.events.emit("jetstream_storage_failed", account=None, stream=None,
                                        consumer=None, group=None, errno=fileio.errno_name(exc),
                                        path=getattr(exc, "path", None), op="fsync", error=str(exc))
            self._release(doomed)

    # ------------------------------------------------------------------ storage failures

    def _keys_of(self, owners: set[int] | frozenset[int]) -> list[tuple[str, str]]:
        """The (account, stream) of each store whose ``id()`` is in ``owners``."""
        if not owners:
            return []
        return [(acc.name, name) for acc in self.accounts.values()
                for name, entry in acc.streams.items() if id(entry.stream.store) in owners]

    def _sync_failed(self, exc: SyncFailed) -> None:
        """Freeze the stream of every store a sync pass could not make durable."""
        owners = exc.owners()
        for acc in self.accounts.values():
            for name, entry in acc.streams.items():
                store = entry.stream.store
                if id(store) in owners:
                    failure = exc.failure_of(store)
                    err: BaseException = exc
                    if failure is not None:
                        err = failure.error
                        if isinstance(err, OSError):
                            err = storage_error("fsync", failure.path, err)
                    if isinstance(store, FileStore):
                        store.fail(exc)
                    # failed for good: later passes need not report its files again
                    self.commit.forget_owner(store)
                    self._freeze(acc.name, name, err, "fsync")

    def _freeze(self, account: str, stream: str, exc: BaseException, op: str, *,
                consumer: str | None = None, path: str | None = None) -> None:
        """Stop ``stream`` after the storage failure ``exc`` (see the module docstring);
        logs ``jetstream_storage_failed`` once per freeze."""
        acc = self.accounts.get(account)
        entry = acc.streams.get(stream) if acc is not None else None
        if entry is None:
            return
        key = (account, stream)
        store = entry.stream.store
        fr = self.frozen.get(key)
        if fr is not None and fr.store is store:
            return
        now = trio.current_time()
        self.frozen[key] = Frozen(account, stream, store, exc, now, now + STORAGE_RETRY_S)
        self.server.events.emit(
            "jetstream_storage_failed", account=account, stream=stream, consumer=consumer,
            group=None, errno=fileio.errno_name(exc),
            path=path or getattr(exc, "path", None) or getattr(exc, "filename", None),
            op=op, error=str(exc))

    def _fault(self, account: str, stream: str, exc: BaseException) -> None:
        """Stop ``stream`` for good after ``exc``, an exception that is not a storage
        failure (see the module docstring); logs ``jetstream_stream_failed`` once."""
        acc = self.accounts.get(account)
        entry = acc.streams.get(stream) if acc is not None else None
        if entry is None:
            return
        now = trio.current_time()
        self.frozen[(account, stream)] = Frozen(account, stream, entry.stream.store, exc, now, math.inf)
        self.server.events.emit("jetstream_stream_failed", account=account, stream=stream,
                                error=repr(exc), traceback="".join(traceback.format_exception(exc)))

    def _guarded(self, account: str, stream: str | None, reply: str | None,
                 make_error: Callable[[E.JSApiError], Outbound | None] | None,
                 call: Callable[[], list[Reply] | None]) -> list[Reply] | None:
        """Run ``call`` (into the account), queue what it returns tagged with the stores it
        wrote, and return it. A storage failure freezes the stream whose write failed (the
        one ``stream`` names, or the one the failure's path is in) and queues the error
        ``make_error`` builds (nothing when it is None or there is no reply)."""
        touched = self.commit.touched
        assert touched is not None      # standalone only
        touched.clear()
        try:
            out = call()
        except (StorageError, OSError) as exc:
            touched.clear()
            acc = self.accounts[account]
            path = getattr(exc, "path", None) or getattr(exc, "filename", None)
            name, consumer = _stream_and_consumer(acc, path) if path else (None, None)
            name = name if name in acc.streams else stream
            if name is not None:
                self._freeze(account, name, exc, "write", consumer=consumer)
            err = storage_api_error(exc)
            if make_error is not None and reply:
                refusal = make_error(err)
                if refusal is not None:
                    self._queue_replies(account, [Reply(refusal)], frozenset(), None)
            return []
        except Exception as exc:  # noqa: BLE001 - a fault of this stream alone
            touched.clear()
            if stream is not None:
                self._fault(account, stream, exc)
            if make_error is not None and reply:
                refusal = make_error(_refusal_error(exc))
                if refusal is not None:
                    self._queue_replies(account, [Reply(refusal)], frozenset(), None)
            return []
        owners = frozenset(touched)
        touched.clear()
        if out:
            self._queue_replies(account, out, owners,
                                (account, stream) if stream is not None else None)
        return out

    async def _resumer(self) -> None:
        """Every STORAGE_RETRY_S, try to resume each frozen stream whose retry is due."""
        while True:
            await trio.sleep(STORAGE_RETRY_S / 4)
            now = trio.current_time()
            for key, fr in list(self.frozen.items()):
                if fr.retry_at <= now and self.frozen.get(key) is fr:
                    await self._try_resume(fr)

    async def _try_resume(self, fr: Frozen) -> None:
        key = (fr.account, fr.stream)
        acc = self.accounts.get(fr.account)
        entry = acc.streams.get(fr.stream) if acc is not None else None
        if entry is None or entry.stream.store is not fr.store:
            self.frozen.pop(key, None)      # deleted (and maybe created again) meanwhile
            return
        fr.attempts += 1
        store = entry.stream.store
        try:
            directory = entry.directory or self.store_dir
            with trio.fail_after(PROBE_TIMEOUT_S):
                await trio.to_thread.run_sync(probe_directory, directory, abandon_on_cancel=True)
            rolled_back = None
            if isinstance(store, FileStore) and store.failed is not None:
                fresh = await trio.to_thread.run_sync(store.reopen_verified)
                if acc.streams.get(fr.stream) is not entry or entry.stream.store is not store:
                    fresh.close()               # deleted while it was verified
                    self.frozen.pop(key, None)
                    return
                durable_last = fresh.recovered_last
                rolled_back = max(0, store.state().last_seq - durable_last)
                entry.stream.store = fresh
                entry.stream.forget_msg_ids_after(durable_last)
                store.close()
                fr.store = fresh
            for path, consumer in _state_files(entry):
                if os.path.isdir(os.path.dirname(path)):
                    write_state_file(path, json_bytes(consumer.state_to_json()))
        except (StorageError, OSError, trio.TooSlowError) as exc:
            fr.retry_at = trio.current_time() + STORAGE_RETRY_S
            self.server.events.emit("jetstream_storage_retry_failed", account=fr.account,
                                    stream=fr.stream, group=None, errno=fileio.errno_name(exc),
                                    error=str(exc) or type(exc).__name__,
                                    retry_in_s=STORAGE_RETRY_S)
            return
        if self.frozen.get(key) is fr:
            del self.frozen[key]
        self.server.events.emit("jetstream_storage_resumed", account=fr.account, stream=fr.stream,
                                group=None, frozen_s=round(trio.current_time() - fr.since, 3),
                                attempts=fr.attempts, rolled_back=rolled_back)
        self._wake.set()        # its timers run again

    # ------------------------------------------------------------------ entry points

    def _enqueue(self, account: str, replies: list[Reply]) -> None:
        self._queue_replies(account, replies, frozenset(), None)

    def _queue_replies(self, account: str, replies: list[Reply], owners: frozenset[int],
                       key: tuple[str, str] | None) -> None:
        if replies:
            self._queue.extend((account, r, owners, key) for r in replies)
            self._queued.set()

    def handle(self, account: str, msg: Message, *, routed: bool = False,
               client: ClientConnection | None = None) -> bool:
        """Give JetStream an inbound message. Returns True if JetStream answers it (an API
        or ack subject, or a stream's subject), so a request is not a no-responders case.
        ``routed``: it came from another server (which routes nothing twice); ``client``:
        the local client that published it (its info goes into the API audit advisory)."""
        subject, reply, headers, payload = msg.subject, msg.reply, msg.headers, msg.payload
        if subject.startswith(_TRANSFER_PREFIX):
            return self.transfers.handle_msg(account, subject, reply, payload)
        if subject.startswith(_TRANSFER_API):
            tokens = subject.split(".")
            acc = self.accounts.get(account)
            # a clustered RESTORE goes to the meta leader like a create (jetstream/cluster/meta_requests.py)
            if len(tokens) == 5 and tokens[3] in ("SNAPSHOT", "RESTORE") and acc is not None \
                    and not (tokens[3] == "RESTORE" and self.cluster is not None):
                return self.transfers.handle_api(acc, _api_kind(tokens), tokens[4], subject, reply,
                                                 payload, routed=routed)
        if self.cluster is not None:
            return self.cluster.handle(account, subject, reply, headers, payload, routed=routed)
        acc = self.accounts.get(account)
        if acc is None:
            return False
        now = time.time_ns()
        if subject.startswith("$JS."):
            if subject.startswith(API_PREFIX):
                return self._handle_api(acc, subject, reply, headers, payload, now,
                                        self._client_info(client))
            if subject.startswith(ACK_PREFIX) or subject.startswith(FC_PREFIX):
                ack = subject.startswith(ACK_PREFIX)
                prefix = ACK_PREFIX if ack else FC_PREFIX
                sname = _ack_stream_name(subject, ack)
                if (account, sname) in self.frozen:
                    return acc.knows_consumer(subject, prefix)      # dropped: redelivered later
                out = self._guarded(account, sname, None, None,
                                    (lambda: acc.ack(subject, reply, payload, now)) if ack
                                    else (lambda: acc.flow_control(subject, now, flow_control_last(headers))))
                self._wake.set()
                return bool(out) or acc.knows_consumer(subject, prefix)
        entry = acc.stream_for(subject)
        if entry is None:
            return False
        name = entry.name

        def refusal(err: E.JSApiError) -> Outbound:
            body = {"error": err.to_json(), "stream": name, "seq": 0}
            return Outbound(reply, None, None, json_bytes(body))

        fr = self._frozen_now(acc, name)
        if fr is not None:
            if reply:
                self._enqueue(account, [Reply(refusal(_refusal_error(fr.error)))])
            return True
        if headers and batch_id(headers):       # atomic batch publish (jetstream/batch.py)
            self._guarded(account, name, reply, refusal,
                          lambda: acc.publish_atomic(entry, subject, reply, headers, payload, now))
            due = self.batches.next_expiry()    # a first batch staged, or one timed out on the way
            if due is not None and (self._timer_deadline is None or due < self._timer_deadline):
                self._wake.set()
        else:
            self._guarded(account, name, reply, refusal,
                          lambda: acc.publish(entry, subject, reply, headers, payload, now))
        if entry.consumers or acc.links_woken:   # a redelivery deadline, or a mirror or source, is due
            acc.links_woken = False
            self._wake.set()
        return True

    def with_client_info(self, msg: Message, client: ClientConnection) -> Message:
        """``msg``, a ``$JS.API`` request ``client`` published, as a clustered server passes
        it on: with the client's info in its ``Nats-Request-Info`` header (nats-server
        ClientInfoHdr) for the API audit of whichever server answers it (forwarded, routed
        or replicated), and never with one the client set itself. Pull requests and direct
        gets are not audited (nor by nats-server): they are left as they are."""
        if self.cluster is None or msg.subject.startswith(_UNAUDITED):
            return msg
        headers = with_request_info(msg.headers, self._client_info(client))
        if headers is msg.headers:
            return msg
        return Message(msg.subject, msg.reply, headers, msg.payload)

    def _client_info(self, client: ClientConnection | None) -> dict[str, Any] | None:
        """The requester's client info in an API audit advisory (nats-server ClientInfo):
        ``{start, host, id, acc, user?, name?, lang, ver, rtt?, server, cluster?, kind, client_type}``
        (``rtt`` in nanoseconds, once measured);
        None without a local client (a request routed from another server)."""
        if client is None or client.account is None:
            return None
        try:
            info: dict[str, Any] = {"start": rfc3339_ns(client.start_ns), "host": client.ip,
                                    "id": client.cid, "acc": client.account.name}
            user = client.identity.user if client.identity is not None else None
            if user:
                info["user"] = user
            if client.name:
                info["name"] = client.name
            info.update(lang=client.lang or "", ver=client.version or "")
            if client.rtt_ns:                               # nanoseconds, once measured
                info["rtt"] = client.rtt_ns
            info["server"] = self.server.server_name
            cluster = self.server.config.cluster
            if cluster is not None and cluster.name:
                info["cluster"] = cluster.name
            info.update(kind="Client", client_type="nats")
            return info
        except Exception:  # noqa: BLE001 - an advisory never breaks the request
            return None

    def _handle_api(self, acc: JetStreamAccount, subject: str, reply: str | None,
                    headers: bytes | None, payload: bytes, now: int,
                    client: dict[str, Any] | None = None) -> bool:
        tokens = subject.split(".")
        sname = _stream_of(tokens)
        kind = _api_kind(tokens)
        fr = self._frozen_now(acc, sname) if sname is not None else None
        if fr is not None:
            if kind == "CONSUMER.MSG":
                return acc.knows_consumer(f"$JS.ACK.{sname}.{tokens[6]}", ACK_PREFIX) \
                    if len(tokens) == 7 else False      # dropped: the client's pull expires
            if kind in _FROZEN_REFUSED:
                if reply:
                    err = _refusal_error(fr.error)
                    rtype = _response_type(tokens)
                    body = {**E.error_response(rtype, err), **ERROR_EXTRAS.get(rtype, {})}
                    self._enqueue(acc.name, [Reply(Outbound(reply, None, None, json_bytes(body)))])
                return True

        def refusal(err: E.JSApiError) -> Outbound:
            rtype = _response_type(tokens)
            body = {**E.error_response(rtype, err), **ERROR_EXTRAS.get(rtype, {})}
            return Outbound(reply, None, None, json_bytes(body))

        answered = [True]

        def call() -> list[Reply] | None:
            out = acc.handle_api(subject, reply, headers, payload, now, client)
            if out is None:
                answered[0] = False
            return out

        self._guarded(acc.name, sname, reply, refusal, call)
        self._wake.set()
        return answered[0]

    def _frozen_now(self, acc: JetStreamAccount, stream: str) -> Frozen | None:
        """The freeze of ``stream``, if it is frozen; a freeze of a stream deleted (and
        maybe created again) since is forgotten."""
        fr = self.frozen.get((acc.name, stream))
        if fr is None:
            return None
        entry = acc.streams.get(stream)
        if entry is None or entry.stream.store is not fr.store:
            del self.frozen[(acc.name, stream)]
            return None
        return fr

    def interest_changed(self, account: str) -> None:
        """A subscription was added or removed in ``account``: push consumers re-check."""
        if account in self.accounts:
            self._interest_dirty.add(account)
            self._wake.set()


def _ack_stream_name(subject: str, ack: bool) -> str:
    """The stream an ack (``$JS.ACK.<stream>...`` v1, ``$JS.ACK.<domain>.<hash>.<stream>...``
    v2) or flow-control subject (``$JS.FC.<stream>...``) names."""
    rel = subject[len("$JS.ACK." if ack else "$JS.FC."):].split(".")
    if ack and len(rel) >= 9 and len(rel) != 7:
        return rel[2]
    return rel[0]


def _stream_and_consumer(acc: JetStreamAccount, path: str | None) -> tuple[str | None, str | None]:
    """The stream (and consumer, for ``obs/<consumer>/...``) whose directory holds ``path``
    in ``acc``'s store, else (None, None)."""
    base = acc.base
    if not path or base is None:
        return None, None
    prefix = base.rstrip(os.sep) + os.sep
    if not path.startswith(prefix):
        return None, None
    parts = path[len(prefix):].split(os.sep)
    consumer = parts[2] if len(parts) > 2 and parts[1] == "obs" else None
    return parts[0], consumer


def _state_files(entry: StreamEntry) -> list[tuple[str, Any]]:
    """``(path, consumer)`` of every consumer state file of a file stream."""
    if entry.directory is None:
        return []
    return [(os.path.join(entry.directory, "obs", cname, "state.json"), c)
            for cname, c in entry.consumers.items() if not c.config.mem_storage]


def _redirty(acc: JetStreamAccount, stream: str | None, consumer: str | None) -> None:
    entry = acc.streams.get(stream) if stream else None
    c = entry.consumers.get(consumer) if entry is not None and consumer else None
    if c is not None:
        c.dirty = True
