"""Stream snapshots and restores on trio (``$JS.API.STREAM.SNAPSHOT|RESTORE.<stream>``).

The protocol and the data format are in :mod:`jetraft.jetstream.snapshot`. Here:

- a snapshot is one task that reads the stream's store a chunk at a time (never the whole
  stream in memory) and sends each chunk with its ack subject, keeping at most
  ``window_size`` bytes unacknowledged; no ack for :data:`ACK_TIMEOUT_S` (5 s, nats-server
  ``snapshotAckTimeout``) ends it with ``408 No Flow Response``, a deliver subject that
  nobody listens on (after up to 2 s at the start) with ``408 No Interest``, a failure
  with ``500 <error>``. As nats-server does, the last chunk (shorter than ``chunk_size``)
  goes without an ack subject, and the empty end message has the status ``204`` when
  whole chunks were sent before it, none otherwise;
- the data travels in Snappy's framing format (``jetstream/snapshot_frames.py``): a snapshot
  frames what it reads, a restore unframes each chunk before spooling it;
- a restore spools the chunks to a temporary file under the store directory
  (``<store_dir>/restore-tmp``; 10072 when it cannot be made), at most the stream's
  ``max_bytes``, what the account's storage limit leaves, or the server's
  ``max_file_store``/``max_memory_store`` (without any: half the free space of the store's
  file system), plus :data:`SPOOL_SLACK` for the snapshot's own records; a chunk past that is answered with error 10062 (``restore
  failed: insufficient storage resources available``) and the restore ends. The empty
  message that ends the data starts the restore: the file is checked (digest, records) and
  the stream's files are written in a worker thread (every message checked by
  ``jetstream/admission.py``, the data decoded within a budget), in a directory of their own that is
  moved into place only once complete, then the stream and its consumers are added on the
  event loop. A client that sends nothing for :data:`IDLE_TIMEOUT_S` (5 s, nats-server's
  ``activityInterval``) ends its restore. Whatever ends a restore early removes its
  temporary files; nothing of the stream is left behind. At most
  :data:`MAX_RESTORES_PER_ACCOUNT` and :data:`MAX_RESTORES` restores receive data at once;
  the account's limits are checked again when the stream is attached (``attach_restored``,
  ``install_restore``), with the bytes restored.

Fault isolation: an exception in a snapshot or restore task ends that transfer alone (a
``500`` end message or a 10062/10064 answer, and ``api_request_failed``); it never reaches
the server's nursery.

Clustered: a snapshot is served by the stream's leader (the leader holds route interest in
``$JS.API.STREAM.SNAPSHOT.<stream>`` and ``$JS.SNAPSHOT.ACK.<stream>.>``, so the request
and the acks reach it from any server) from its replica's store and consumers. A RESTORE
goes to the meta leader (``jetstream/cluster/restores.py`` ``_restore_stream``), which assigns the
stream with a restorer; the restorer, once it leads the stream's group, is told to
:meth:`~StreamTransfers.start_clustered` (it holds route interest in the deliver subject,
so the chunks reach it from any server), spools and builds the stream as above, then
``ClusterJetStream.install_restore`` (``net/jetstream/cluster.py``) puts it in place and has the
other peers take it; the last chunk is answered only once a quorum of the peers hold it.
A clustered restore that fails (bad data, its client gone, the restorer losing its
leadership) deletes the stream through the meta group.
"""

from __future__ import annotations

import os
import shutil
import secrets
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.admission import Admission
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.requests import ERROR_EXTRAS, json_bytes
from jetraft.jetstream.snapshot import (
    ACK_PREFIX,
    RESTORE_PREFIX,
    CorruptMessage,
    SnapshotDataError,
    SnapshotWriter,
    build_restored_store,
    check_messages,
)
from jetraft.jetstream.snapshot_frames import FrameError, FramedReader, Unframer
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.store import FileStore
from jetraft.storage import fileio

if TYPE_CHECKING:
    from jetraft.jetstream.api import JetStreamAccount

__all__ = ["ACK_TIMEOUT_S", "IDLE_TIMEOUT_S", "MAX_RESTORES", "MAX_RESTORES_PER_ACCOUNT",
           "SPOOL_SLACK", "StreamTransfers"]

#: Seconds without a chunk ack before a snapshot ends (nats-server snapshotAckTimeout).
ACK_TIMEOUT_S = 5.0
#: Seconds a snapshot waits for interest in its deliver subject at the start.
INTEREST_WAIT_S = 2.0
#: Seconds without a chunk before a restore ends (nats-server processStreamRestore).
IDLE_TIMEOUT_S = 5.0
#: Bytes a restore's spool may hold beyond its storage limit (the snapshot's own records).
SPOOL_SLACK = 1 << 20
#: Restores receiving data at once, per account and per server (each holds a spool file);
#: one more is refused with 10062 naming the limit.
MAX_RESTORES_PER_ACCOUNT = 8
MAX_RESTORES = 32
#: Messages checked per step of a ``jsck`` check (between them the loop runs).
_CHECK_BATCH = 2000
SPOOL_DIR = "restore-tmp"
#: nats-server's JSApiStreamRestoreResponse has no omitempty on deliver_subject.
_RESTORE_EXTRAS = {"deliver_subject": ""}


@dataclass(slots=True)
class _Snapshot:
    acked: int = 0
    event: trio.Event = field(default_factory=trio.Event)


@dataclass(slots=True)
class _Restore:
    account: str
    stream: str
    cfg: Any
    path: str
    limit: int
    spool_limit: int
    #: what each restored message must pass (jetstream/admission.py)
    admission: Admission = field(default_factory=Admission)
    #: the spool file, open from the first chunk on (-1 before and after)
    fd: int = -1
    size: int = 0
    #: clustered: the stream's key (account, name), its restorer being this server
    key: tuple[str, str] | None = None
    last_active: float = 0.0
    ended: bool = False
    final_reply: str | None = None
    done: trio.Event = field(default_factory=trio.Event)
    #: the chunks arrive in Snappy's framing format (jetstream/snapshot_frames.py)
    unframer: Unframer = field(default_factory=Unframer)


class StreamTransfers:
    """The snapshots and restores of one server's JetStream (``service``: the
    :class:`~jetraft.net.jetstream.service.JetStreamService`, of which ``server``, ``clustered``,
    ``config`` and ``store_dir`` are read). Start :meth:`run` in the service's nursery
    before requests arrive."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.server = service.server
        self._nursery: trio.Nursery | None = None
        self._snapshots: dict[str, _Snapshot] = {}
        self._restores: dict[str, _Restore] = {}
        #: bytes in the spool files of every restore receiving data, and their bound (set
        #: when the first of them starts: see _open_restore)
        self._spooled = 0
        self._spool_cap = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Remove what restores cut short by a stop or a crash left in the spool directory,
        then run transfer tasks until cancelled (spools of unfinished restores are removed)."""
        await trio.to_thread.run_sync(fileio.remove_tree, os.path.join(self.service.store_dir, SPOOL_DIR))
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            for r in list(self._restores.values()):
                self._discard(r)

    # ------------------------------------------------------------------ sending

    def _send(self, account: str, subject: str, body: dict[str, Any] | None = None, *,
              reply: str | None = None, headers: bytes | None = None, data: bytes = b"") -> None:
        payload = json_bytes(body) if body is not None else data
        self.server.route_internal(account, Outbound(subject, reply, headers, payload))

    def _error(self, account: str, reply: str | None, rtype: str, err: E.JSApiError) -> None:
        if reply:
            extras = _RESTORE_EXTRAS if rtype == E.STREAM_RESTORE_RESPONSE else ERROR_EXTRAS.get(rtype, {})
            self._send(account, reply, {**E.error_response(rtype, err), **extras})

    def _failed(self, account: str, subject: str, exc: BaseException) -> None:
        self.server.events.emit("api_request_failed", account=account, subject=subject,
                                error=repr(exc), traceback="".join(traceback.format_exception(exc)))

    # ------------------------------------------------------------------ API requests

    def handle_api(self, acc: JetStreamAccount, kind: str, stream: str, subject: str,
                   reply: str | None, payload: bytes, *, routed: bool = False) -> bool:
        """Answer a SNAPSHOT or RESTORE request (``kind`` ``STREAM.SNAPSHOT`` or
        ``STREAM.RESTORE``) for ``stream`` in ``acc``; the transfer goes on in a task.
        ``routed``: the request came from another server. Returns False when the request
        is left to others: the routes (a clustered snapshot goes to the stream's leader) or
        the cluster controller (a clustered restore goes to the meta leader)."""
        rtype = E.STREAM_SNAPSHOT_RESPONSE if kind == "STREAM.SNAPSHOT" else E.STREAM_RESTORE_RESPONSE
        cluster = self.service.cluster
        if cluster is not None and kind == "STREAM.SNAPSHOT" and not cluster.leads_stream(acc.name, stream):
            if routed:
                return True         # sent on a stale interest: the requester asks again
            if cluster.has_remote_interest(acc.name, subject):
                return False        # the route layer takes it to the leader
            if reply:
                known = cluster.knows_stream(acc.name, stream)
                self._error(acc.name, reply, rtype,
                            E.cluster_not_available() if known else E.stream_not_found())
            return True
        if cluster is not None and kind == "STREAM.RESTORE":
            return False            # the cluster controller takes it to the meta leader
        if not reply:
            return True
        try:
            if self._nursery is None:
                raise E.not_enabled()
            if kind == "STREAM.SNAPSHOT":
                entry, req = acc.snapshot_check(stream, payload)
                self._nursery.start_soon(self._snapshot_task, acc, entry, req, subject, reply)
            else:
                self._start_restore(acc, stream, payload, reply)
        except E.JSApiError as err:
            acc.api_errors += 1
            acc.api_total += 1
            self._error(acc.name, reply, rtype, err)
        except Exception as exc:  # noqa: BLE001 - one request's failure answers that request
            self._failed(acc.name, subject, exc)
            self._error(acc.name, reply, rtype, E.api_error(
                "JSStreamSnapshotErrF" if kind == "STREAM.SNAPSHOT" else "JSStreamRestoreErrF",
                err=str(exc) or type(exc).__name__))
        return True

    def handle_msg(self, account: str, subject: str, reply: str | None, payload: bytes) -> bool:
        """A message on ``$JS.SNAPSHOT.ACK.>`` (a chunk ack) or ``$JS.SNAPSHOT.RESTORE.>``
        (restore data). Returns True when it belongs to a transfer of this server."""
        if subject.startswith(ACK_PREFIX):
            tokens = subject[len(ACK_PREFIX):].split(".")
            snap = self._snapshots.get(tokens[1]) if len(tokens) == 4 else None
            if snap is None:
                return False
            snap.acked += 1
            snap.event.set()
            return True
        if subject.startswith(RESTORE_PREFIX):
            r = self._restores.get(subject)
            if r is None or r.account != account:
                return False
            try:
                self._chunk(subject, r, reply, payload)
            except Exception as exc:  # noqa: BLE001 - a fault of this restore alone
                self._failed(account, subject, exc)
                self._end(r, reply, E.api_error("JSStreamRestoreErrF", err=str(exc) or type(exc).__name__))
            return True
        return False

    # ------------------------------------------------------------------ snapshot

    async def _snapshot_task(self, acc: JetStreamAccount, entry: Any, req: Any, subject: str,
                             reply: str) -> None:
        rtype = E.STREAM_SNAPSHOT_RESPONSE
        token = secrets.token_hex(11)
        state = _Snapshot()
        started = False
        try:
            if req.check_msgs:
                last = entry.stream.store.state().last_seq
                seq = entry.stream.store.state().first_seq
                while seq <= last:
                    seq = check_messages(entry.stream.store, seq, last, _CHECK_BATCH)
                    await trio.sleep(0)
                    if acc.streams.get(entry.name) is not entry:
                        raise E.stream_not_found()
            writer = SnapshotWriter(entry.stream, entry.consumers, no_consumers=req.no_consumers)
            self._send(acc.name, reply, acc.snapshot_response(entry, writer, time.time_ns()))
            acc.api_total += 1
            started = True
            self._snapshots[token] = state
            await self._stream_chunks(acc, entry, req, writer, token, state)
        except E.JSApiError as err:
            if not started:
                acc.api_errors += 1
                acc.api_total += 1
                self._error(acc.name, reply, rtype, err)
        except CorruptMessage as exc:
            if started:
                self._end_snapshot(acc.name, req.deliver_subject, f"500 {exc}")
            else:
                acc.api_errors += 1
                acc.api_total += 1
                self._error(acc.name, reply, rtype, E.api_error("JSStreamSnapshotErrF", err=str(exc)))
        except Exception as exc:  # noqa: BLE001 - a fault of this snapshot alone
            self._failed(acc.name, subject, exc)
            if started:
                self._end_snapshot(acc.name, req.deliver_subject, f"500 {str(exc) or type(exc).__name__}")
            else:
                self._error(acc.name, reply, rtype,
                            E.api_error("JSStreamSnapshotErrF", err=str(exc) or type(exc).__name__))
        finally:
            self._snapshots.pop(token, None)

    async def _stream_chunks(self, acc: JetStreamAccount, entry: Any, req: Any,
                             writer: SnapshotWriter, token: str, state: _Snapshot) -> None:
        sublist = self.server.account(acc.name).sublist
        cluster = self.service.cluster

        def interested(subject: str) -> bool:
            match = sublist.match(subject)
            if match.plain or match.queues:
                return True
            return cluster is not None and cluster.has_remote_interest(acc.name, subject)

        deliver = req.deliver_subject
        if not interested(deliver):
            with trio.move_on_after(INTEREST_WAIT_S):
                while not interested(deliver):
                    await trio.sleep(0.02)
        max_inflight = max(1, req.window_size // req.chunk_size)
        sent = 0
        index = 1
        ack_subject = f"{ACK_PREFIX}{entry.name}.{token}"
        framed = FramedReader(writer)       # Snappy's framing format, which natscli reads
        while True:
            while sent - state.acked >= max_inflight:
                state.event = trio.Event()
                with trio.move_on_after(ACK_TIMEOUT_S) as scope:
                    await state.event.wait()
                if scope.cancelled_caught:
                    self._end_snapshot(acc.name, deliver, "408 No Flow Response")
                    return
            if not interested(deliver):
                self._end_snapshot(acc.name, deliver, "408 No Interest")
                return
            if acc.streams.get(entry.name) is not entry:
                self._end_snapshot(acc.name, deliver, "500 stream deleted")
                return
            chunk = framed.read(req.chunk_size)
            if len(chunk) < req.chunk_size:
                # the last, short chunk goes without an ack subject (nats-server: a short
                # read ends the stream), and the end has the 204 status only after a
                # whole chunk was sent
                if chunk:
                    self._send(acc.name, deliver, data=chunk)
                break
            self._send(acc.name, deliver, reply=f"{ack_subject}.{len(chunk)}.{index}", data=chunk)
            sent += 1
            index += 1
            await trio.sleep(0)
        self._end_snapshot(acc.name, deliver, "204" if index > 1 else None)

    def _end_snapshot(self, account: str, deliver: str, status: str | None) -> None:
        headers = f"NATS/1.0 {status}\r\n\r\n".encode() if status else None
        self._send(account, deliver, headers=headers, data=b"")

    # ------------------------------------------------------------------ restore

    def start_clustered(self, acc: JetStreamAccount, sa: Any, reply: str) -> None:
        """This server restores stream assignment ``sa`` (``StartRestore``: it leads the
        stream's group): answer ``reply`` with the deliver subject and receive the data.
        A failure to start answers ``reply`` with the error and deletes the stream."""
        key = (sa.account, sa.name)
        cluster = self.service.cluster
        try:
            if self._nursery is None:
                raise E.not_enabled()
            cfg = StreamConfig.from_json(sa.config).checked()
            self._open_restore(acc, sa.name, cfg, reply, key=key)
        except Exception as exc:  # noqa: BLE001 - a fault of this restore alone
            if not isinstance(exc, E.JSApiError):
                self._failed(acc.name, f"$JS.API.STREAM.RESTORE.{sa.name}", exc)
                exc = E.api_error("JSStreamRestoreErrF", err=str(exc) or type(exc).__name__)
            acc.api_errors += 1
            acc.api_total += 1
            self._error(acc.name, reply, E.STREAM_RESTORE_RESPONSE, exc)
            cluster.execute(cluster.controller.restore_failed(key))

    def _start_restore(self, acc: JetStreamAccount, stream: str, payload: bytes, reply: str) -> None:
        cfg = acc.restore_check(stream, payload)
        self._open_restore(acc, stream, cfg, reply)

    def _open_restore(self, acc: JetStreamAccount, stream: str, cfg: Any, reply: str, *,
                      key: tuple[str, str] | None = None) -> None:
        """Start receiving a restore's data. Bounded per account and per server
        (:data:`MAX_RESTORES_PER_ACCOUNT`, :data:`MAX_RESTORES`: 10062 naming the limit), and
        so are the spool files: each is opened at its first chunk (a restore that sends
        nothing holds no descriptor) and all of them together may hold at most what the
        first of them found: ``max_file_store`` or half the free space of the store's file
        system. Raises JSApiError (10062, 10072)."""
        pending = [r for r in self._restores.values() if r.account == acc.name]
        if len(pending) >= MAX_RESTORES_PER_ACCOUNT:
            raise E.api_error("JSStreamRestoreErrF", err=f"too many restores in progress in the "
                              f"account (at most {MAX_RESTORES_PER_ACCOUNT})")
        if len(self._restores) >= MAX_RESTORES:
            raise E.api_error("JSStreamRestoreErrF", err=f"too many restores in progress on the "
                              f"server (at most {MAX_RESTORES})")
        limit = acc.restore_limit(cfg)
        jcfg = self.service.config
        server_limit = jcfg.max_memory_store if cfg.storage == "memory" else jcfg.max_file_store
        spool_dir = os.path.join(self.service.store_dir, SPOOL_DIR)
        if server_limit:
            mem, file = acc.usage()
            left = max(0, server_limit - (mem if cfg.storage == "memory" else file))
            limit = min(limit, left) if limit else left
        try:
            fileio.make_dirs(spool_dir)
            if not limit or not self._restores:
                free = shutil.disk_usage(spool_dir).free // 2
                limit = limit or free
                if not self._restores:
                    self._spool_cap = min(free, jcfg.max_file_store) if jcfg.max_file_store else free
            fd, path = tempfile.mkstemp(prefix=f"{stream}.", suffix=".spool", dir=spool_dir)
            os.close(fd)
        except OSError:
            raise E.api_error("JSTempStorageFailedErr") from None
        conf = self.server.config
        max_msg = conf.max_payload
        if cfg.max_msg_size > 0:
            max_msg = min(max_msg, cfg.max_msg_size)
        subject = f"{RESTORE_PREFIX}{stream}.{secrets.token_hex(11)}"
        r = _Restore(acc.name, stream, cfg, path, limit, limit + SPOOL_SLACK,
                     Admission(max_subject=conf.max_control_line, max_msg=max_msg), key=key,
                     last_active=trio.current_time())
        self._restores[subject] = r
        acc.restoring.add(stream)
        if key is not None:     # the chunks reach this server from any other
            self.service.cluster.hold_interest(acc.name, (subject,), True)
        assert self._nursery is not None
        self._nursery.start_soon(self._restore_task, acc, subject, r)
        acc.api_total += 1
        self._send(acc.name, reply, {"type": E.STREAM_RESTORE_RESPONSE, "deliver_subject": subject})

    def _chunk(self, subject: str, r: _Restore, reply: str | None, payload: bytes) -> None:
        if r.ended:
            return
        r.last_active = trio.current_time()
        if not reply:
            self._end(r, None, E.api_error("JSStreamRestoreErrF", err=f"restore for stream "
                                           f"'{r.account} > {r.stream}' requires reply subject for each chunk"))
            return
        if not payload:
            try:
                r.unframer.finish()
            except FrameError as exc:
                self._end(r, reply, E.api_error("JSStreamRestoreErrF", err=str(exc)))
                return
            self._close_spool(r)
            r.final_reply = reply
            r.ended = True
            r.done.set()
            return
        try:
            raw = r.unframer.feed(payload)
        except FrameError as exc:
            self._end(r, reply, E.api_error("JSStreamRestoreErrF", err=str(exc)))
            return
        if r.size + len(raw) > r.spool_limit or self._spooled + len(raw) > self._spool_cap:
            self._end(r, reply, E.api_error("JSStreamRestoreErrF",
                                            err=E.storage_resources_exceeded().description))
            return
        if raw:
            if r.fd < 0:
                r.fd = fileio.open_file(r.path, os.O_WRONLY | os.O_APPEND)
            fileio.write_all(r.fd, raw, r.path)
            r.size += len(raw)
            self._spooled += len(raw)
        self._send(r.account, reply, data=b"")

    def _end(self, r: _Restore, reply: str | None, err: E.JSApiError | None) -> None:
        """End restore ``r`` before its data is complete: answer ``reply`` with ``err``."""
        if r.ended:
            return
        r.ended = True
        if reply and err is not None:
            self._error(r.account, reply, E.STREAM_CREATE_RESPONSE, err)
        r.done.set()

    def _discard(self, r: _Restore) -> None:
        """Remove restore ``r``'s spool file and what was built of it (at a stop)."""
        self._close_spool(r)
        self._release_spool(r)
        _remove_spool(r.path)

    async def _discard_off_loop(self, r: _Restore) -> None:
        """:meth:`_discard` with the removal in a worker thread (a spool and a half-built
        store may be as large as the restore): even when the task is being cancelled."""
        self._close_spool(r)
        self._release_spool(r)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_remove_spool, r.path)

    def _release_spool(self, r: _Restore) -> None:
        """The bytes of ``r``'s spool no longer count against the server's bound."""
        self._spooled = max(0, self._spooled - r.size)
        r.size = 0

    @staticmethod
    def _close_spool(r: _Restore) -> None:
        if r.fd >= 0:
            try:
                os.close(r.fd)
            except OSError:
                pass
            r.fd = -1

    async def _restore_task(self, acc: JetStreamAccount, subject: str, r: _Restore) -> None:
        ok = False
        try:
            while not r.done.is_set():
                with trio.move_on_after(0.25):
                    await r.done.wait()
                if not r.done.is_set() and trio.current_time() - r.last_active > IDLE_TIMEOUT_S:
                    r.ended = True      # the client went away: nobody to answer
                    return
            if r.final_reply is None:
                return
            if r.key is not None:
                ok = await self._apply_clustered(acc, subject, r)
                return
            body = await self._apply(acc, subject, r)
            self._send(acc.name, r.final_reply, body)
        except E.JSApiError as err:
            self._error(acc.name, r.final_reply, E.STREAM_CREATE_RESPONSE, err)
        except Exception as exc:  # noqa: BLE001 - a fault of this restore alone
            self._failed(acc.name, subject, exc)
            if r.final_reply:
                self._error(acc.name, r.final_reply, E.STREAM_CREATE_RESPONSE,
                            E.api_error("JSStreamRestoreErrF", err=str(exc) or type(exc).__name__))
        finally:
            self._restores.pop(subject, None)
            acc.restoring.discard(r.stream)
            await self._discard_off_loop(r)
            if r.key is not None:
                self._end_clustered(acc.name, subject, r.key, ok)

    def _end_clustered(self, account: str, subject: str, key: tuple[str, str], ok: bool) -> None:
        """A clustered restore ended: drop the deliver subject's route interest and, when it
        failed, have the stream deleted (nothing of it stays, on any server). A failure here
        is reported, never raised (the task may be ending with the server)."""
        cluster = self.service.cluster
        try:
            cluster.hold_interest(account, (subject,), False)
            if not ok:
                cluster.execute(cluster.controller.restore_failed(key))
        except Exception as exc:  # noqa: BLE001 - fault isolation
            self._failed(account, subject, exc)

    async def _apply_clustered(self, acc: JetStreamAccount, subject: str, r: _Restore) -> bool:
        """Build the stream from the spooled data aside, then have the cluster put it in
        place and on a quorum of its peers (it answers the last chunk then). Returns
        whether the restore succeeded; its failure is answered here."""
        rtype = E.STREAM_CREATE_RESPONSE
        tmp = r.path + ".d"
        # the stream's max_bytes and the server's store limit bound the build; the account's
        # limits are checked with the built stream's bytes (install_restore: 10047/10028)
        limit = acc.restore_limit(r.cfg, account=False, server_limit=self.service.config.max_file_store)
        try:
            result = await trio.to_thread.run_sync(
                lambda: build_restored_store(r.path, layout.msgs_dir(tmp), max_bytes=limit,
                                             admission=r.admission))
        except (SnapshotDataError, OSError) as exc:
            self._send(acc.name, r.final_reply,
                       E.error_response(rtype, E.api_error("JSStreamRestoreErrF", err=str(exc))))
            return False
        assert r.key is not None and r.final_reply is not None
        await self.service.cluster.install_restore(acc, r.key, result, tmp, r.final_reply, r.size)
        return True

    async def _apply(self, acc: JetStreamAccount, subject: str, r: _Restore) -> dict[str, Any]:
        """Build the stream from the spooled data; its ``stream_create_response`` body."""
        rtype = E.STREAM_CREATE_RESPONSE
        cfg = r.cfg
        file_backed = cfg.storage == "file"
        tmp = r.path + ".d"
        msgs = layout.msgs_dir(tmp) if file_backed else None
        # the stream's max_bytes and the server's store limit bound the build (10062); the
        # account's limits are checked with the built stream's bytes (10047/10028/10027, as
        # nats-server answers once the backup's size is known), against its streams now
        jcfg = self.service.config
        limit = acc.restore_limit(cfg, account=False, server_limit=jcfg.max_file_store
                                  if file_backed else jcfg.max_memory_store)
        try:
            result = await trio.to_thread.run_sync(
                lambda: build_restored_store(r.path, msgs, max_bytes=limit, admission=r.admission))
        except SnapshotDataError as exc:
            return E.error_response(rtype, E.api_error("JSStreamRestoreErrF", err=str(exc)))
        except OSError as exc:
            return E.error_response(rtype, E.api_error("JSStreamRestoreErrF", err=str(exc)))
        acc.restore_attach_check(cfg, result.bytes)     # again when attached, after the awaits
        if not file_backed:
            return acc.attach_restored(cfg, result, None, result.store, time.time_ns())
        assert acc.base is not None
        sdir = layout.stream_dir(acc.base, cfg.name)
        if cfg.name in acc.streams or os.path.exists(sdir):
            return E.error_response(rtype, E.api_error("JSStreamNameExistRestoreFailedErr"))
        parent = os.path.dirname(sdir)
        fileio.make_dirs(parent)
        fileio.replace(tmp, sdir)
        fileio.sync_directory(parent)
        store = None
        try:
            def opened() -> FileStore:      # the TTL index read here too, off the loop
                opened_store = FileStore(layout.msgs_dir(sdir), sync=acc.sync, sync_always=acc.sync_always)
                if cfg.allow_msg_ttl:
                    layout.save_ttl_index(sdir, opened_store)
                return opened_store
            store = await trio.to_thread.run_sync(opened)
            body = acc.attach_restored(cfg, result, sdir, store, time.time_ns())
            entry = acc.streams[cfg.name]
            for cname, consumer in entry.consumers.items():
                if not consumer.config.mem_storage:
                    layout.atomic_write(layout.consumer_state_path(sdir, cname),
                                        json_bytes(consumer.state_to_json()))
            return body
        except BaseException:
            if acc.streams.get(cfg.name) is not None and acc.streams[cfg.name].directory == sdir:
                acc.discard_restored(cfg.name)
            else:
                if store is not None:
                    store.close()
                with trio.CancelScope(shield=True):     # as large as the restore: off the loop
                    await trio.to_thread.run_sync(fileio.remove_tree, sdir)
            raise


def _remove_spool(path: str) -> None:
    """Remove a restore's spool file ``path`` and its build directory ``path + ".d"``."""
    try:
        fileio.unlink(path)
    except OSError:
        pass
    fileio.remove_tree(path + ".d")

