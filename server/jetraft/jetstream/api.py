"""One account's JetStream: its streams and consumers, the ``$JS.API`` and the ack subjects.

:class:`JetStreamAccount` is sans-IO apart from its files: every entry point takes the time
as ``now_ns`` (ns since the epoch) and returns the :class:`~jetraft.jetstream.outbound.Outbound`
messages the server must route (API responses, PubAcks, consumer deliveries). It never
fsyncs a message itself: a PubAck for a file-backed stream is returned with
``needs_sync=True`` and the caller (``net/jetstream/service.py``) sends it only after its group
commit has made the message durable.

Subjects served (nats-server ``server/jetstream_api.go``, ``server/stream.go``):

- ``$JS.API.INFO``; ``$JS.API.STREAM.CREATE|UPDATE|INFO|DELETE|PURGE.<stream>``,
  ``$JS.API.STREAM.NAMES``, ``$JS.API.STREAM.LIST``, ``$JS.API.STREAM.MSG.GET|DELETE.<stream>``;
- ``$JS.API.DIRECT.GET.<stream>[.<subject>]`` (streams with ``allow_direct``);
- ``$JS.API.CONSUMER.CREATE.<stream>[.<consumer>[.<filter>]]``,
  ``$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>``,
  ``$JS.API.CONSUMER.INFO|DELETE.<stream>.<consumer>``, ``$JS.API.CONSUMER.NAMES|LIST.<stream>``,
  ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``;
- ``$JS.ACK.<stream>.<consumer>...`` acks and ``$JS.FC.<stream>.<consumer>...`` flow control.

Every response carries nats-server's ``type`` string and, on failure, an ``error`` object
with exactly ``code``, ``err_code`` and ``description``.

Files: nats-server's layout, JSON instead of its binary meta files
(:mod:`jetraft.jetstream.layout`). A meta file that cannot be read is reported
(``jetstream_recovery_problem``) and its stream or consumer left on disk, untouched, for
the operator; it is never deleted.
"""

from __future__ import annotations

import secrets
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jetraft import gofmt
from jetraft.protocol.client import status_headers
from jetraft.storage import fileio
from jetraft.protocol.subjects import (
    SubjectIndex,
    filters_overlap,
    is_valid_subject,
    subjects_overlap,
)

from . import advisories as adv
from . import errors as E
from . import layout
from .consumer import Consumer
from .errors import JSApiError, UnsupportedSetting
from .model import (
    API_LEVEL,
    META_SERVER_LEVEL,
    META_SERVER_VERSION,
    AccountInfo,
    AccountLimits,
    APIStats,
    ConsumerConfig,
    StreamConfig,
)
from .outbound import Outbound
from .replica_state import ReplicaStateError, build_replica_state, check_replica_state
from .requests import (
    ERROR_EXTRAS,
    request_info,
    PAGING_TYPES,
    decode_fields,
    DirectGetRefused,
    decode_request,
    direct_get_request,
    int_field,
    internal_error,
    json_bytes,
    msg_get_request,
    pub_ack_bytes,
    str_field,
)
from .snapshot import RestoreResult, SnapshotRequest, SnapshotWriter, snapshot_request
from .store import CorruptMessage, FileStore, MemoryStore, MessageNotFound
from .stream import Stream
from .validate import (
    check_consumer_create,
    check_consumer_update,
    check_new_consumer,
    check_stream_create,
    check_stream_update,
    consumer_filters_unique,
    same_consumer_config,
)

__all__ = ["JetStreamAccount", "Reply", "StreamEntry"]

API_PREFIX = "$JS.API."
ACK_PREFIX = "$JS.ACK."
FC_PREFIX = "$JS.FC."
NAMES_LIMIT = 1024          # nats-server JSApiNamesLimit
LIST_LIMIT = 256            # nats-server JSApiListLimit
SUBJECTS_LIMIT = 100_000    # nats-server JSMaxSubjectDetails: subjects per STREAM.INFO page
_NAME_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(slots=True)
class Reply:
    """An outbound message plus what must be durable before it leaves: the stream's writes
    (a group commit) or the consumer state files."""

    out: Outbound
    needs_sync: bool = False
    needs_state: bool = False     # an ack_sync reply: send once the consumer state file is written


@dataclass(slots=True)
class StreamEntry:
    """A stream with its consumers and its directory (None for a memory stream)."""

    stream: Stream
    consumers: dict[str, Consumer] = field(default_factory=dict)
    directory: str | None = None

    @property
    def name(self) -> str:
        return self.stream.config.name



def new_consumer_name() -> str:
    """A random 8-character ephemeral consumer name (nats-server createConsumerName)."""
    return "".join(secrets.choice(_NAME_CHARS) for _ in range(8))


class JetStreamAccount:
    """JetStream for one account (nats-server ``jsAccount``).

    ``name``: the account; ``store_dir``: JetStream's store directory (None: memory only,
    file streams refused); ``sync``: the server's GroupCommit shared by every FileStore;
    ``sync_always``: FileStores sync on every group commit (False: only when forced by
    the ``sync_interval`` timer); ``interest``: ``interest(subject) -> bool``, whether any
    subscription in the account matches (push consumers deliver only with interest);
    ``events``: the event log (``emit(name, **fields)``); ``server_version``: reported in
    stream metadata; ``now_ns``: the time recovery happens at.

    ``advisory_interest``: ``advisory_interest(subject) -> bool`` for the advisories of
    :mod:`~jetraft.jetstream.advisories` (the server's subscription interest; None: none
    are built, see :meth:`advise`).

    ``clustered``: the account is one replica of a JetStream cluster (``net/jetstream/cluster.py``):
    replicas > 1 are accepted, and the cluster layer sets :attr:`cluster_info`
    (``cluster_info(stream_name) -> dict | None``, the ``cluster`` object of stream info).
    """

    def __init__(self, name: str, *, store_dir: str | None, sync: Any, events: Any,
                 interest: Callable[[str], bool], server_version: str,
                 sync_always: bool = True, domain: str = "", server_name: str = "",
                 clustered: bool = False,
                 advisory_interest: Callable[[str], bool] | None = None,
                 limits: Mapping[str, int | bool] | None = None) -> None:
        self.name = name
        #: whether a subscription listens on an advisory subject; None: no advisories
        self.advisory_interest = advisory_interest
        self.clustered = clustered
        self.cluster_info: Callable[[str], dict[str, Any] | None] | None = None
        self.server_name = server_name
        self.sync = sync
        self.sync_always = sync_always
        self.events = events
        self.interest = interest
        self.server_version = server_version
        self.domain = domain
        self.streams: dict[str, StreamEntry] = {}
        #: Streams found on disk but not loaded by :meth:`recover` (name -> why); their
        #: files are kept, and STREAM.CREATE of the same name is refused.
        self.unloaded: dict[str, str] = {}
        #: Streams being restored (net/jetstream/snapshot.py): their names are in use. Nothing else of
        #: them counts against the account's limits until they are attached (as nats-server
        #: on one server, whose restores started together all start): the account's limits
        #: are checked again then, with their bytes (:meth:`restore_attach_check`).
        self.restoring: set[str] = set()
        self._capture: SubjectIndex[str] = SubjectIndex()
        self.api_total = 0
        self.api_errors = 0
        #: the account's JetStream limits (the account's ``jetstream { ... }`` block)
        self.limits = AccountLimits(**dict(limits or {}))
        self.base = layout.streams_dir(store_dir, name) if store_dir is not None else None

    # ------------------------------------------------------------------ recovery

    def recover(self, now_ns: int) -> None:
        """Load every stream and consumer found under the store directory.

        Problems (unreadable meta files, corrupt or torn message records) are reported as
        ``jetstream_recovery_problem`` events; nothing is deleted. A stream or consumer whose
        stored config has a setting jetraft does not act on (written by an older jetraft:
        ``StreamConfig.check_supported``, ``ConsumerConfig.check_supported``) is not loaded,
        reported with the setting named, and its files are left untouched; such a stream
        is listed in :attr:`unloaded`.
        """
        for found in layout.recover_streams(self.base, now_ns, sync=self.sync, sync_always=self.sync_always,
                                            domain=self.domain, problem=self._problem):
            if found.stream is None:
                self.unloaded[found.name] = found.unloaded
                continue
            entry = StreamEntry(found.stream, directory=found.directory)
            self._add_stream(entry)
            state = found.stream.store.state()
            self.events.emit("jetstream_stream_recovered", account=self.name, stream=found.name,
                             messages=state.messages, last_seq=state.last_seq)
            for consumer in layout.recover_consumers(found, now_ns, interest=self.interest,
                                                     problem=self._problem):
                consumer.advisory_interest = self.advisory_interest
                entry.consumers[consumer.name] = consumer

    def _problem(self, stream: str, consumer: str | None, path: str, detail: str) -> None:
        self.events.emit("jetstream_recovery_problem", account=self.name, stream=stream,
                         consumer=consumer, path=path, detail=detail)

    def _add_stream(self, entry: StreamEntry) -> None:
        self.streams[entry.name] = entry
        self._add_capture(entry)
        for consumer in entry.consumers.values():
            consumer.advisory_interest = self.advisory_interest

    def _add_capture(self, entry: StreamEntry) -> None:
        for subject in entry.stream.config.subjects:
            self._capture.insert(subject, entry.name)

    def _remove_capture(self, entry: StreamEntry) -> None:
        for subject in entry.stream.config.subjects:
            self._capture.remove(subject, entry.name)

    def close(self) -> None:
        """Persist consumer state and close every store (after a final sync by the caller)."""
        self.flush_state(force=True)
        for entry in self.streams.values():
            entry.stream.store.close()

    # ------------------------------------------------------------------ publish

    def stream_for(self, subject: str) -> StreamEntry | None:
        """The stream whose subjects take ``subject``, or None."""
        match = self._capture.match(subject)
        if match.plain:
            return self.streams.get(match.plain[0])
        return None

    def publish(self, entry: StreamEntry, subject: str, reply: str | None, headers: bytes | None,
                data: bytes, now_ns: int) -> list[Reply]:
        """Store a message published on one of ``entry``'s subjects.

        Returns the PubAck (to ``reply``, when there is one; ``needs_sync`` for a file
        stream: send it only once the write is durable) followed by consumer deliveries.
        A refused message gets ``{"error": {...}, "stream": name, "seq": 0}`` and changes
        nothing (nats-server stream.go processJetStreamMsg).
        """
        stream = entry.stream
        if stream.config.no_ack:
            reply = None        # stream.go processJetStreamMsg: canRespond needs !NoAck
        try:
            if not self.clustered:      # a clustered stream's leader checks before proposing
                refusal = self.publish_limit_refusal(entry, subject, headers, data)
                if refusal is not None:
                    raise refusal
            ack = stream.publish(subject, headers, data, now_ns)
        except JSApiError as err:
            if not reply:
                return []
            body = {"error": err.to_json(), "stream": stream.config.name, "seq": 0}
            return [Reply(Outbound(reply, None, None, json_bytes(body)))]
        out: list[Reply] = []
        if reply:
            out.append(Reply(Outbound(reply, None, None, pub_ack_bytes(ack)),
                             needs_sync=entry.directory is not None))
        if not ack.get("duplicate"):
            if stream.config.retention == "interest":
                seq = ack["seq"]
                if not any(c.needs_ack(seq) for c in entry.consumers.values()):
                    stream.store.remove(seq)
            out.extend(self._poll_stream(entry, now_ns, removed=stream.config.retention == "interest"))
        return out

    # ------------------------------------------------------------------ consumers: time and acks

    def _poll_stream(self, entry: StreamEntry, now_ns: int, removed: bool = False) -> list[Reply]:
        out: list[Reply] = []
        for consumer in list(entry.consumers.values()):
            msgs = consumer.on_messages_removed(now_ns) if removed else []
            msgs += consumer.poll(now_ns)
            out.extend(Reply(m) for m in msgs)
        out.extend(self._apply_retention(entry, now_ns))
        return out

    def _apply_retention(self, entry: StreamEntry, now_ns: int) -> list[Reply]:
        """Remove acknowledged messages from workqueue and interest streams."""
        retention = entry.stream.config.retention
        removed = False
        for consumer in entry.consumers.values():
            acked = consumer.drain_acked()
            if retention == "limits" or not acked:
                continue
            for seq in acked:
                if retention == "workqueue" or not any(c.needs_ack(seq) for c in entry.consumers.values()):
                    if entry.stream.store.remove(seq):
                        removed = True
        if removed:
            return [Reply(m) for c in entry.consumers.values() for m in c.on_messages_removed(now_ns)]
        return []

    def poll(self, now_ns: int) -> list[Reply]:
        """Run every consumer's timers and expire messages (max_age); delete inactive
        ephemeral consumers."""
        out: list[Reply] = []
        for name in list(self.streams):
            out.extend(self.poll_stream(name, now_ns))
        return out

    def next_deadline(self) -> int | None:
        """The earliest ns-since-epoch at which :meth:`poll` has timed work, or None."""
        best: int | None = None
        for entry in self.streams.values():
            for consumer in entry.consumers.values():
                d = consumer.next_deadline()
                if d is not None and (best is None or d < best):
                    best = d
        return best

    def wants_expiry(self) -> bool:
        """Whether any stream has a max_age, so the caller polls periodically."""
        return any(e.stream.config.max_age > 0 for e in self.streams.values())

    def _consumer_from_subject(self, subject: str, prefix: str) -> tuple[StreamEntry, Consumer] | None:
        tokens = subject[len(prefix):].split(".")
        if len(tokens) >= 9 and subject.startswith(ACK_PREFIX) and len(tokens) != 7:
            sname, cname = tokens[2], tokens[3]     # v2: <domain>.<acc hash>.<stream>.<consumer>...
        elif len(tokens) >= 2:
            sname, cname = tokens[0], tokens[1]
        else:
            return None
        entry = self.streams.get(sname)
        consumer = entry.consumers.get(cname) if entry else None
        if consumer is None:
            return None
        return entry, consumer

    def ack(self, subject: str, reply: str | None, payload: bytes, now_ns: int) -> list[Reply]:
        """An ack (``$JS.ACK.<stream>.<consumer>...``) for one of our consumers."""
        found = self._consumer_from_subject(subject, ACK_PREFIX)
        if found is None:
            return []
        entry, consumer = found
        out = [Reply(m, needs_state=bool(reply))
               for m in consumer.process_ack(subject, payload, reply, now_ns)]
        out.extend(self._apply_retention(entry, now_ns))
        out.extend(Reply(m) for m in consumer.poll(now_ns))
        return out

    def flow_control(self, subject: str, now_ns: int) -> list[Reply]:
        """A client's answer to a flow-control request (``$JS.FC.<stream>.<consumer>...``)."""
        found = self._consumer_from_subject(subject, FC_PREFIX)
        if found is None:
            return []
        return [Reply(m) for m in found[1].process_flow_control(subject, now_ns)]

    def knows_consumer(self, subject: str, prefix: str) -> bool:
        """Whether the ack or flow-control ``subject`` names one of our consumers."""
        return self._consumer_from_subject(subject, prefix) is not None

    def pending_state_writes(self, force: bool = False) -> list[tuple[str, bytes]]:
        """``(path, bytes)`` for every consumer state file to write: those whose state
        changed (or all, with ``force``). Serialised now, in the caller's thread, so that
        :func:`layout.write_state_files` may run in a worker thread."""
        writes = []
        for entry in self.streams.values():
            if entry.directory is None:
                continue
            for cname, consumer in entry.consumers.items():
                if consumer.config.mem_storage or not (consumer.dirty or force):
                    continue
                path = layout.consumer_state_path(entry.directory, cname)
                writes.append((path, json_bytes(consumer.state_to_json())))
        return writes

    def flush_state(self, force: bool = False) -> int:
        """Write changed (or, with ``force``, all) consumer state files now; returns how many."""
        writes = self.pending_state_writes(force)
        layout.write_state_files(writes)
        return len(writes)

    # ------------------------------------------------------------------ the API

    def handle_api(self, subject: str, reply: str | None, headers: bytes | None, payload: bytes,
                   now_ns: int, client: dict[str, Any] | None = None) -> list[Reply] | None:
        """Answer one ``$JS.API.>`` request; returns the replies, or None when nothing on
        this server listens on ``subject`` (the requester then gets no-responders, as from
        nats-server: DIRECT.GET of a stream without ``allow_direct``, MSG.NEXT of an
        unknown consumer). Requests without a reply subject are ignored, as nats-server
        does; an unknown API subject gets no answer.

        Fault isolation: an unexpected exception while handling the request answers it
        with :func:`internal_error` for its response type (a ``500`` status for DIRECT.GET
        and pull requests) and is reported as ``api_request_failed``; it never propagates.

        Advisories: every answer is followed by an ``api_audit`` on ``$JS.EVENT.ADVISORY.API``
        (``client``: the requester's client info, see
        :func:`~jetraft.jetstream.advisories.api_audit`; without it, the one the
        ``Nats-Request-Info`` header carries, which in a cluster the requester's server sets),
        stream and consumer changes by their ``stream_action``/``consumer_action`` (see
        :meth:`advise`).
        """
        try:
            if client is None:
                client = request_info(headers)
            return self._handle_api(subject, reply, payload, now_ns, client)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not reach the server
            return self.api_failed(subject, reply, exc)

    def api_failed(self, subject: str, reply: str | None, exc: BaseException) -> list[Reply]:
        """Report an exception raised while handling the request on ``subject``
        (``api_request_failed``, with its traceback) and return the answer to send: the
        response type's :func:`internal_error`, or a ``500`` status for DIRECT.GET and
        pull requests; nothing without a reply subject."""
        self.events.emit("api_request_failed", account=self.name, subject=subject,
                         error=repr(exc), traceback="".join(traceback.format_exception(exc)))
        if not reply:
            return []
        tokens = subject.split(".")
        if ".".join(tokens[2:4]) in ("DIRECT.GET", "CONSUMER.MSG"):
            return [Reply(Outbound(reply, None, status_headers(500, "Internal Server Error"), b""))]
        rtype = E.ACCOUNT_INFO_RESPONSE if subject == "$JS.API.INFO" else (self._route(tokens)[1]
                                                                          or E.SYSTEM_RESPONSE)
        self.api_errors += 1
        self.api_total += 1
        return self._respond(reply, {**E.error_response(rtype, internal_error(rtype)),
                                     **ERROR_EXTRAS.get(rtype, {})})

    def _handle_api(self, subject: str, reply: str | None, payload: bytes,
                    now_ns: int, client: dict[str, Any] | None = None) -> list[Reply] | None:
        tokens = subject.split(".")
        kind = ".".join(tokens[2:4])
        if kind == "DIRECT.GET" and len(tokens) >= 5:
            return self._direct_get(tokens, reply, payload)
        if kind == "CONSUMER.MSG" and len(tokens) == 7 and tokens[4] == "NEXT":
            return self._msg_next(tokens[5], tokens[6], reply, payload, now_ns)
        if not reply:
            return []
        if subject == "$JS.API.INFO":
            handler, rtype = self._api_info, E.ACCOUNT_INFO_RESPONSE
        else:
            handler, rtype = self._route(tokens)
            if handler is None:
                return []
        extra: list[Reply] = []
        try:
            body = handler(tokens, payload, now_ns)
        except JSApiError as err:
            if getattr(err, "counted", True):
                self.api_errors += 1
            body = {**E.error_response(rtype, err), **ERROR_EXTRAS.get(rtype, {})}
        else:
            if isinstance(body, tuple):
                body, extra = body
            body = {"type": rtype, **body}
        self.api_total += 1       # counted once answered (an INFO does not count itself)
        response = self._respond(reply, body)
        return response + extra + self.audit(subject, payload, response[0].out.data, client, now_ns)

    def audit(self, subject: str, request: bytes, response: bytes, client: dict[str, Any] | None,
              now_ns: int) -> list[Reply]:
        """The ``api_audit`` advisory of one answered request, when someone listens (also
        for the answers the cluster's meta leader sends: jetstream/cluster/)."""
        if not self._listening(adv.API_AUDIT):
            return []
        return self.advise(adv.api_audit, self.server_name, client, subject, request, response, now_ns)

    def _listening(self, subject: str) -> bool:
        listening = self.advisory_interest
        if listening is None:
            return False
        try:
            return bool(listening(subject))
        except Exception:  # noqa: BLE001 - an advisory never breaks the request
            return False

    def advise(self, build: Callable[..., Outbound], *args: Any) -> list[Reply]:
        """The advisory ``build(*args, domain=...)`` (a builder of
        :mod:`jetraft.jetstream.advisories`) as a reply to route in this account, when a
        subscription listens on its subject; else []. Fault isolation: an advisory that
        fails is reported (``advisory_failed``) and left out; what caused it goes on."""
        if self.advisory_interest is None:
            return []
        try:
            out = build(*args, domain=self.domain)
            return [Reply(out)] if self._listening(out.subject) else []
        except Exception as exc:  # noqa: BLE001 - an advisory never breaks the request
            self.events.emit("advisory_failed", account=self.name,
                             advisory=getattr(build, "__name__", "?"), error=repr(exc))
            return []

    def _respond(self, reply: str, body: dict[str, Any]) -> list[Reply]:
        return [Reply(Outbound(reply, None, None, json_bytes(body)), needs_sync=True)]

    def _route(self, tokens: list[str]) -> tuple[Callable[..., Any] | None, str]:
        n = len(tokens)
        area = tokens[2] if n > 2 else ""
        op = tokens[3] if n > 3 else ""
        if area == "STREAM":
            if op == "LEADER" and n == 6 and tokens[4] == "STEPDOWN":
                return self._cluster_required, E.STREAM_LEADER_STEPDOWN_RESPONSE
            if op == "PEER" and n == 6 and tokens[4] == "REMOVE":
                return self._cluster_required, E.STREAM_REMOVE_PEER_RESPONSE
            if op in ("NAMES", "LIST") and n == 4:
                return ((self._api_stream_names, E.STREAM_NAMES_RESPONSE) if op == "NAMES"
                        else (self._api_stream_list, E.STREAM_LIST_RESPONSE))
            if op == "MSG" and n == 6:
                if tokens[4] == "GET":
                    return self._api_msg_get, E.STREAM_MSG_GET_RESPONSE
                if tokens[4] == "DELETE":
                    return self._api_msg_delete, E.STREAM_MSG_DELETE_RESPONSE
                return None, ""
            if n != 5:
                return None, ""
            table = {
                "CREATE": (self._api_stream_create, E.STREAM_CREATE_RESPONSE),
                "UPDATE": (self._api_stream_update, E.STREAM_UPDATE_RESPONSE),
                "INFO": (self._api_stream_info, E.STREAM_INFO_RESPONSE),
                "DELETE": (self._api_stream_delete, E.STREAM_DELETE_RESPONSE),
                "PURGE": (self._api_stream_purge, E.STREAM_PURGE_RESPONSE),
            }
            return table.get(op, (None, ""))
        if area == "CONSUMER":
            if op == "LEADER" and n == 7 and tokens[4] == "STEPDOWN":
                return self._cluster_required, E.CONSUMER_LEADER_STEPDOWN_RESPONSE
            if op == "CREATE" and n >= 5:
                return self._api_consumer_create, E.CONSUMER_CREATE_RESPONSE
            if op == "DURABLE" and n >= 5 and tokens[4] == "CREATE":
                return self._api_consumer_create, E.CONSUMER_CREATE_RESPONSE
            if op in ("NAMES", "LIST") and n == 5:
                return ((self._api_consumer_names, E.CONSUMER_NAMES_RESPONSE) if op == "NAMES"
                        else (self._api_consumer_list, E.CONSUMER_LIST_RESPONSE))
            if op in ("INFO", "DELETE") and n == 6:
                return ((self._api_consumer_info, E.CONSUMER_INFO_RESPONSE) if op == "INFO"
                        else (self._api_consumer_delete, E.CONSUMER_DELETE_RESPONSE))
        return None, ""

    def _cluster_required(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        """Leader step-down and peer-remove need a cluster (10010 on a single server)."""
        raise E.cluster_required()

    # --- account ------------------------------------------------------------------------

    def usage(self) -> tuple[int, int]:
        """Bytes stored in (memory, file) streams."""
        mem = file = 0
        for entry in self.streams.values():
            b = entry.stream.store.stored_bytes
            if entry.stream.config.storage == "memory":
                mem += b
            else:
                file += b
        return mem, file

    def _api_info(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        return self.account_info(payload, now_ns)

    def account_info(self, payload: bytes, now_ns: int) -> dict[str, Any]:
        """The ``$JS.API.INFO`` body (nats-server JSApiAccountInfoResponse without its type):
        usage in bytes, stream and consumer counts, limits, API level and counters."""
        mem, file = self.usage()
        info = AccountInfo(memory=mem, storage=file, streams=len(self.streams),
                           consumers=sum(len(e.consumers) for e in self.streams.values()),
                           limits=self.limits, domain=self.domain,
                           api=APIStats(level=API_LEVEL, total=self.api_total, errors=self.api_errors))
        return info.to_json()

    # --- streams --------------------------------------------------------------------------

    def _entry(self, name: str) -> StreamEntry:
        entry = self.streams.get(name)
        if entry is None:
            raise E.stream_not_found()
        return entry

    def stream_info(self, entry: StreamEntry, now_ns: int, *, dynamic: bool = True,
                    **kw: Any) -> dict[str, Any]:
        """STREAM.INFO body; ``dynamic`` adds ``_nats.ver``/``_nats.level`` to the config's
        metadata (CREATE, UPDATE and INFO do; LIST does not, as nats-server)."""
        info = entry.stream.info(now_ns, consumer_count=len(entry.consumers), **kw)
        if dynamic:
            info["config"] = entry.stream.config.to_response_json(self.server_version)
        if self.cluster_info is not None:
            cluster = self.cluster_info(entry.name)
            if cluster:
                info["cluster"] = cluster
        return info

    # --- one replica of a clustered stream (net/jetstream/cluster.py) -----------------------------

    def create_replica(self, config: dict[str, Any], created_ns: int, *,
                       keep_files: bool = False, store: FileStore | None = None) -> StreamEntry:
        """Create this server's replica of a stream the meta group assigned to it.

        ``config``: the stream config JSON as the meta leader checked it; ``created_ns``: the
        assignment's creation time. Any files left by an earlier replica of the same name
        are removed first (the stream's RAFT log is then replayed into the fresh replica),
        unless ``keep_files``: the store's blocks were brought to a snapshot's state
        (jetstream/catchup.py) and are opened as they are; ``store``: those blocks opened
        already (off the event loop: :meth:`open_replica_store`), the dedupe window left
        empty for the snapshot's. Raises JSApiError for a config that no longer checks.
        """
        cfg = StreamConfig.from_json(config).checked()
        cfg.check_supported()       # before the old files go: an old log's setting is refused
        old = self.streams.get(cfg.name)
        if old is not None:
            self.delete_replica(cfg.name)
        if cfg.storage == "file" and self.base is not None and not keep_files:
            fileio.remove_tree(layout.stream_dir(self.base, cfg.name))
        if cfg.storage == "file" and self.base is None:
            raise E.stream_create("jetstream has no store directory")
        return self._create_stream(cfg, created_ns, store=store)

    def open_replica_store(self, name: str) -> FileStore:
        """Open stream ``name``'s block files as a FileStore (reading them all: call it in a
        worker thread); its ``recovery_report`` lists any damage found. Raises StorageError
        or OSError."""
        msgs = self.replica_msgs_dir(name)
        if msgs is None:
            raise E.stream_create("jetstream has no store directory")
        return FileStore(msgs, sync=self.sync, sync_always=self.sync_always)

    def replica_msgs_dir(self, name: str) -> str | None:
        """The directory of stream ``name``'s block files (None without a store directory)."""
        if self.base is None:
            return None
        return layout.msgs_dir(layout.stream_dir(self.base, name))

    def detach_replica(self, name: str) -> None:
        """Forget this server's replica of stream ``name`` in memory and close its store,
        keeping its files (a snapshot is being installed over them): no consumer is
        reported deleted, nothing is sent."""
        entry = self.streams.pop(name, None)
        if entry is None:
            return
        for consumer in entry.consumers.values():
            consumer.stop()
        self._remove_capture(entry)
        entry.stream.store.close()

    def delete_replica(self, name: str) -> list[Outbound]:
        """Remove this server's replica of stream ``name`` and its files (the stream was
        deleted, or this server left its group). Returns what its consumers still send."""
        entry = self.streams.get(name)
        if entry is None:
            return []
        out: list[Outbound] = []
        for cname in list(entry.consumers):
            out.extend(self._delete_consumer(entry, cname, "stream deleted"))
        self._remove_capture(entry)
        del self.streams[name]
        entry.stream.store.close()
        if entry.directory is not None:
            fileio.remove_tree(entry.directory)
        return out

    def poll_stream(self, name: str, now_ns: int, *, interest_changed: bool = False) -> list[Reply]:
        """:meth:`poll` for one stream (a clustered stream's leader replicates its timers)."""
        entry = self.streams.get(name)
        if entry is None:
            return []
        out: list[Reply] = []
        if interest_changed:
            for consumer in entry.consumers.values():
                if consumer.config.deliver_subject:
                    out.extend(Reply(m) for m in consumer.poll(now_ns))
        removed = entry.stream.expire(now_ns) > 0 if entry.stream.config.max_age > 0 else False
        for cname, consumer in list(entry.consumers.items()):
            if consumer.is_inactive(now_ns):
                out.extend(Reply(m) for m in self._delete_consumer(entry, cname, "inactive"))
                out.extend(self.advise(adv.consumer_action, name, cname, "delete", now_ns))
        out.extend(self._poll_stream(entry, now_ns, removed=removed))
        return out

    def stream_deadline(self, name: str) -> int | None:
        """The earliest ns at which :meth:`poll_stream` has timed work for ``name``, or None."""
        entry = self.streams.get(name)
        if entry is None:
            return None
        deadlines = [d for c in entry.consumers.values() if (d := c.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    # --- a clustered replica's state for RAFT snapshots (jetstream/replica_state.py) -------

    def replica_state(self, name: str) -> dict[str, Any]:
        """Everything of stream ``name`` (in :attr:`streams`) that applying its later log
        entries reads, except its stored messages: the stream's config, creation time,
        last sequence, last message id and dedupe window, and each consumer's name, config,
        creation time and whole working state (:meth:`Consumer.replica_state`), in the
        stream's order. A new value made of dict (str keys), list, int, str, bool and None
        (safe for ``msgpack.packb(use_bin_type=True)``); its shape is in
        :mod:`jetraft.jetstream.replica_state`. Account-wide counters (``api_total``,
        ``api_errors``) are not part of it. Raises KeyError for an unknown stream."""
        entry = self.streams[name]
        return build_replica_state(entry.stream, entry.consumers)

    def restore_replica_state(self, name: str, state: dict[str, Any], now_ns: int) -> None:
        """Make stream ``name`` and its consumers what they were when :meth:`replica_state`
        produced ``state`` (possibly on another server), so that later entries apply here
        exactly as they did there. The caller has already brought the stream's store to
        the messages it held then. ``now_ns``: the time of the restore; the restored state
        does not depend on it (its clocks are absolute ns since the epoch).

        The stream's consumers in memory are replaced (the old ones are stopped, without
        sending anything); no file is written or removed, and no event is emitted. Raises
        :class:`ReplicaStateError` naming the field at fault for a state that is malformed
        (a wrong type, a missing or unknown key, an unknown version), whose configs do not
        check, whose stream name or storage differ from this stream's, whose subjects
        overlap another stream's, or for an unknown stream; the account is then unchanged."""
        entry = self.streams.get(name)
        if entry is None:
            raise ReplicaStateError(f"replica state: no stream {name!r} in account {self.name!r}")
        stream = entry.stream
        checked = check_replica_state(state, name, stream.config.storage)
        cfg = checked.config
        moved = list(cfg.subjects) != list(stream.config.subjects)
        if moved:
            for other in self.streams.values():
                clash = next((s for s in cfg.subjects for o in other.stream.config.subjects
                              if other is not entry and subjects_overlap(s, o)), None)
                if clash is not None:
                    raise ReplicaStateError(f"replica state: stream.config.subjects: {clash!r} "
                                            f"overlaps stream {other.name!r}")
        consumers: dict[str, Consumer] = {}
        for c in checked.consumers:
            consumer = Consumer(stream, c.name, c.config, created_ns=c.created_ns,
                                has_interest=self.interest)
            consumer.advisory_interest = self.advisory_interest
            consumer.restore_replica_state(c.state)
            consumers[c.name] = consumer
        # nothing below raises: the account changes only now
        if moved:
            self._remove_capture(entry)
        stream.config = cfg
        if moved:
            self._add_capture(entry)
        stream.created_ns = checked.created_ns
        stream.last_seq, stream.last_msg_id = checked.last_seq, checked.last_msg_id
        stream.set_dedupe_entries(checked.dedupe)
        old, entry.consumers = entry.consumers, consumers
        for consumer in old.values():
            consumer.stop()

    # --- stream snapshots and restores (jetstream/snapshot.py, net/jetstream/snapshot.py) -----------

    def snapshot_check(self, stream: str, payload: bytes) -> tuple[StreamEntry, SnapshotRequest]:
        """Check a ``$JS.API.STREAM.SNAPSHOT.<stream>`` request in nats-server's order
        (jsStreamSnapshotRequest): 10003 for an empty body, 10059 for an unknown stream,
        10025 for bad JSON, 10015 for an invalid deliver subject. Raises JSApiError."""
        if not payload.strip():
            raise E.bad_request()
        entry = self._entry(stream)
        return entry, snapshot_request(payload)

    def snapshot_response(self, entry: StreamEntry, writer: SnapshotWriter, now_ns: int) -> dict[str, Any]:
        """The SNAPSHOT answer: ``{type, config, state}``, built in the same step as
        ``writer`` (so the state is the one the snapshot holds; nats-server
        JSApiStreamSnapshotResponse)."""
        info = entry.stream.info(now_ns, consumer_count=len(entry.consumers))
        state = info.get("state") or {}
        return {"type": E.STREAM_SNAPSHOT_RESPONSE, "config": entry.stream.config.to_json(),
                "state": state}

    def restore_check(self, stream: str, payload: bytes, *, subjects: Any = None,
                      exists: Callable[[str], bool] | None = None) -> StreamConfig:
        """Check a ``$JS.API.STREAM.RESTORE.<stream>`` request ``{config, state}`` in
        nats-server's order (jsStreamRestoreRequest): 10003 for an empty body, 10025 for bad
        JSON, 10056 for a config naming another stream, 10128 for path separators, the
        stream config's own checks (as STREAM.CREATE), 10130 when the stream exists.
        ``subjects``/``exists``: the streams' subjects and whether a stream exists, when
        not this account's own (a clustered meta leader passes its assignments'). Returns
        the checked config. Raises JSApiError."""
        if not payload.strip():
            raise E.bad_request()
        req = decode_request(payload, "JSApiStreamRestoreRequest") or {}
        config = req.get("config")
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise E.invalid_json("json: cannot unmarshal into Go struct field "
                                 "JSApiStreamRestoreRequest.config of type server.StreamConfig")
        config = dict(config)
        if not config.get("name"):
            config["name"] = stream
        if config["name"] != stream:
            raise E.api_error("JSStreamMismatchErr")
        if "/" in stream or "\\" in stream:
            raise E.stream_name_contains_path_separators()
        taken = exists(stream) if exists is not None else (
            stream in self.streams or stream in self.unloaded or stream in self.restoring)
        if taken:
            raise E.api_error("JSStreamNameExistRestoreFailedErr")
        cfg, _exists = check_stream_create(json_bytes(config), stream,
                                           self._capture if subjects is None else subjects,
                                           existing=lambda name: None, clustered=self.clustered,
                                           unloaded=self.unloaded)
        if not self.clustered:      # a cluster's meta leader checks these with its own count
            self.check_stream_count_limits(cfg, sum(1 for name in self.streams if name != cfg.name))
            self.check_stream_reservation(cfg, self._stream_configs(), create=True)
            self.check_stream_bytes_limits(cfg)
        if cfg.storage == "file" and self.base is None:
            raise E.stream_create("jetstream has no store directory")
        return cfg

    def restore_limit(self, cfg: StreamConfig, *, account: bool = True,
                      server_limit: int | None = None) -> int:
        """The bytes a restore of ``cfg`` may store (0: no limit): the smallest of its
        ``max_bytes``, what the account's storage limit for ``cfg``'s storage leaves
        (``account``: its spool is bounded so; its stream, once built, is checked against
        the account's limits by :meth:`restore_attach_check`) and what ``server_limit`` (the
        server's ``max_file_store`` / ``max_memory_store``, None or 0: none) leaves after the
        account's bytes. A limit with nothing left counts as 1 byte (no room, never "no
        limit")."""
        limits = []
        if cfg.max_bytes > 0:
            limits.append(cfg.max_bytes)
        mem, file = self.usage()
        used = mem if cfg.storage == "memory" else file
        acct = self.limits.max_memory if cfg.storage == "memory" else self.limits.max_storage
        if account and acct is not None and acct >= 0:
            limits.append(max(1, acct - used))
        if server_limit:
            limits.append(max(1, server_limit - used))
        return min(limits) if limits else 0

    def restore_attach_check(self, cfg: StreamConfig, restored: int) -> None:
        """On a single server: the account's limits on adding the stream a restore of ``cfg``
        built, its store holding ``restored`` bytes, against the account's streams now
        (those attached since the restore started included): :meth:`check_restored_limits`,
        with ``max_streams`` checked again. Raises JSApiError 10028 / 10047 / 10027."""
        self.check_restored_limits(cfg, restored, self._stream_configs(), self.usage(),
                                   streams=sum(1 for name in self.streams if name != cfg.name))

    def attach_restored(self, cfg: StreamConfig, result: RestoreResult, sdir: str | None,
                        store: Any, now_ns: int) -> dict[str, Any]:
        """Add the stream a restore built: ``sdir`` its directory (moved into place, with
        ``store`` opened over its messages) or None with ``store`` a MemoryStore. The
        snapshot's consumers and stream state (``result.replica``) are restored with the
        request's config in place of the snapshot's; the stream's creation time is now (as
        nats-server's restore). Returns the ``stream_create_response``
        body (the stream's info). Raises JSApiError 10130 when a stream of its name was
        added meanwhile, 10028 / 10047 / 10027 when the account's limits have no room for
        it now (:meth:`restore_attach_check` with ``result.bytes``), 10062 when the
        snapshot's state does not apply, 10065 when its subjects overlap a stream created
        meanwhile (nothing is then added)."""
        if cfg.name in self.streams:
            raise E.api_error("JSStreamNameExistRestoreFailedErr")
        self.restore_attach_check(cfg, result.bytes)
        if filters_overlap(cfg.subjects, self._capture):
            raise E.subjects_overlap()
        replica = dict(result.replica)
        stream_part = dict(replica.get("stream") or {})
        created_ns = now_ns         # nats-server: a restored stream is created now
        stream_part["config"] = cfg.to_json()
        stream_part["created_ns"] = created_ns
        replica["stream"] = stream_part
        if cfg.storage == "memory":
            entry = StreamEntry(Stream(cfg, store, created_ns=created_ns, domain=self.domain))
            self._add_stream(entry)
        else:
            entry = self._create_stream(cfg, created_ns, store=store)
        try:
            self.restore_replica_state(cfg.name, replica, now_ns)
        except ReplicaStateError as exc:
            self._remove_capture(entry)
            del self.streams[cfg.name]
            raise E.api_error("JSStreamRestoreErrF", err=str(exc)) from None
        entry.stream.created_ns = created_ns
        for consumer in entry.consumers.values():
            self._write_consumer_meta(entry, consumer)
            consumer.dirty = True
        self.events.emit("jetstream_stream_created", account=self.name, stream=cfg.name,
                         subjects=list(cfg.subjects), storage=cfg.storage, retention=cfg.retention)
        return {"type": E.STREAM_CREATE_RESPONSE, **self.stream_info(entry, now_ns)}

    def discard_restored(self, name: str) -> None:
        """Remove a restored stream whose files could not be completed (a consumer file
        failed to be written): its directory goes too."""
        entry = self.streams.pop(name, None)
        if entry is None:
            return
        self._remove_capture(entry)
        entry.stream.store.close()
        if entry.directory is not None:
            fileio.remove_tree(entry.directory)

    # ------------------------------------------------------------------ account limits

    def check_stream_count_limits(self, cfg: StreamConfig, others: int) -> None:
        """The account's limits on creating stream ``cfg``, ``others`` the number of the
        account's streams but one of that name (nats-server jetstream_api.go
        jsNonClusteredStreamLimitsCheck, jetstream_cluster.go jsClusteredStreamLimitsCheck).
        Raises JSApiError 10027 at ``max_streams``, then :meth:`check_stream_consumers_limit`'s."""
        if self.limits.max_streams > 0 and others >= self.limits.max_streams:
            raise E.maximum_streams_limit()
        self.check_stream_consumers_limit(cfg)

    def check_stream_consumers_limit(self, cfg: StreamConfig) -> None:
        """A stream's ``max_consumers`` above the account's ``max_consumers`` (nats-server
        jetstream.go checkLimits, on create and update). Raises JSApiError 10026."""
        if 0 < self.limits.max_consumers < cfg.max_consumers:
            raise E.maximum_consumers_limit()

    def check_stream_bytes_limits(self, cfg: StreamConfig) -> None:
        """The account's ``max_bytes_required`` and its largest stream (bytes) for the
        stream's storage (nats-server stream.go checkStreamCfg, on create and update).
        Raises JSApiError 10113 for a stream without ``max_bytes`` when one is required,
        10122 for a ``max_bytes`` above the limit."""
        lim = self.limits
        largest = lim.memory_max_stream_bytes if cfg.storage == "memory" else lim.storage_max_stream_bytes
        if lim.max_bytes_required and cfg.max_bytes <= 0:
            raise E.api_error("JSStreamMaxBytesRequired")
        if largest > 0 and cfg.max_bytes > largest:
            raise E.api_error("JSStreamMaxStreamBytesExceeded")

    def check_stream_reservation(self, cfg: StreamConfig, others: Iterable[StreamConfig], *,
                                 create: bool, own: int | None = None) -> None:
        """The account's ``max_mem`` / ``max_file`` (bytes) against what its streams
        reserve: each other stream of ``cfg``'s storage with a ``max_bytes`` reserves it times
        its replicas (nats-server jetstream_api.go tieredReservation, un-tiered), and ``cfg``
        adds its own ``max_bytes`` times its replicas, 1 byte without one on a create
        (jetstream.go checkBytesLimits; on update stream.go configUpdateCheck counts the new
        ``max_bytes``), or ``own`` bytes when given (a restore: see
        :meth:`check_restored_limits`). ``others``: the account's streams but ``cfg``'s.
        Raises JSApiError 10028 (memory) or 10047 (file)."""
        memory = cfg.storage == "memory"
        cap = self.limits.max_memory if memory else self.limits.max_storage
        if cap < 0:
            return
        reserved = sum(o.max_bytes * max(1, o.num_replicas) for o in others
                       if o.name != cfg.name and o.storage == cfg.storage and o.max_bytes > 0)
        if own is None:
            own = cfg.max_bytes if cfg.max_bytes > 0 else (1 if create else 0)
        if reserved > cap or own * max(1, cfg.num_replicas) > cap - reserved:
            raise E.memory_resources_exceeded() if memory else E.storage_resources_exceeded()

    def check_restored_limits(self, cfg: StreamConfig, restored: int, others: Iterable[StreamConfig],
                              used: tuple[int, int], *, streams: int | None = None) -> None:
        """The account's limits on adding the stream a restore of ``cfg`` built, its store
        (one replica) holding ``restored`` bytes, as nats-server checks them once the backup's
        size is known (stream_backup.go RestoreStreamV2, on the stream's leader in a cluster):
        first what the streams reserve, ``cfg``'s own reservation being the larger of its
        ``max_bytes`` and ``restored`` times its replicas (:meth:`check_stream_reservation`,
        ``others`` the account's streams; jetstream.go checkAllLimits), then the bytes the
        account stores, ``used`` = (memory, file) over every server, with ``restored`` added
        once (checkUsageLimits). Then, when ``streams`` (the number of the account's
        streams but ``cfg``'s) is given, ``max_streams`` again: nats-server counts the
        account's streams only when a restore starts, so that restores started together on
        one server all attach past it; jetraft refuses the one that would go past it (a
        cluster counts a restore as a stream assignment from its start on). Raises
        JSApiError 10028 (memory) or 10047 (file), then 10027."""
        memory = cfg.storage == "memory"
        cap = self.limits.max_memory if memory else self.limits.max_storage
        if cap >= 0:
            self.check_stream_reservation(cfg, others, create=True, own=max(cfg.max_bytes, restored, 0))
            if (used[0] if memory else used[1]) + restored > cap:
                raise E.memory_resources_exceeded() if memory else E.storage_resources_exceeded()
        if streams is not None and self.limits.max_streams > 0 and streams >= self.limits.max_streams:
            raise E.maximum_streams_limit()

    def byte_limited(self) -> bool:
        """Whether the account has a ``max_mem`` or ``max_file``."""
        return self.limits.max_memory >= 0 or self.limits.max_storage >= 0

    def publish_limit_refusal(self, entry: StreamEntry, subject: str, headers: bytes | None,
                              data: bytes, others: tuple[int, int] = (0, 0)) -> JSApiError | None:
        """10002 when storing the message (its stored size times the stream's replicas)
        would take the account's bytes of that storage past its ``max_mem`` / ``max_file``
        (nats-server stream.go processJetStreamMsg and jetstream_cluster.go
        processClusteredInboundMsg, jsAccount.wouldExceedLimits); None otherwise.
        ``others``: (memory, file) bytes the cluster's other servers hold for the account."""
        cfg = entry.stream.config
        memory = cfg.storage == "memory"
        cap = self.limits.max_memory if memory else self.limits.max_storage
        if cap < 0:
            return None
        mem, file = self.usage()
        used = (mem + others[0]) if memory else (file + others[1])
        size = entry.stream.store.msg_size(subject, headers, data) * max(1, cfg.num_replicas)
        return E.account_resources_exceeded() if used + size > cap else None

    def check_consumer_count_limit(self, entry: StreamEntry, name: str) -> None:
        """The account's ``max_consumers`` on creating consumer ``name`` ("" for an
        ephemeral not yet named) on ``entry``'s stream: an existing consumer is an update
        and not counted (nats-server consumer.go addConsumerWithAssignment,
        jetstream_cluster.go jsClusteredConsumerRequest). Raises JSApiError 10026."""
        lim = self.limits.max_consumers
        if lim > 0 and (not name or name not in entry.consumers) and len(entry.consumers) >= lim:
            raise E.maximum_consumers_limit()

    def consumer_limit_refusal(self, subject: str, payload: bytes) -> JSApiError | None:
        """The refusal of a CONSUMER.CREATE request on ``subject`` by the account's
        ``max_consumers`` (:meth:`check_consumer_count_limit`), or None (also when the
        request fails another check: handling it answers that). A clustered stream's leader
        asks this before proposing the request: the account's limits are this server's
        configuration, so they are checked once, never as the replicas apply the log."""
        try:
            entry, cfg, action = self._consumer_request(subject.split("."), payload)
            if action != "update":
                self.check_consumer_count_limit(entry, cfg.durable_name or cfg.name)
        except JSApiError as err:
            return err if err.err_code == 10026 else None
        return None

    def _api_stream_create(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        cfg, exists = check_stream_create(payload, tokens[4], self._capture, existing=self._config_json,
                                          clustered=self.clustered, unloaded=self.unloaded)
        if not self.clustered:      # a cluster's meta leader checks these before proposing
            self.check_stream_count_limits(cfg, sum(1 for name in self.streams if name != cfg.name))
            self.check_stream_reservation(cfg, self._stream_configs(), create=True)
            self.check_stream_bytes_limits(cfg)
        if exists:
            return {**self.stream_info(self.streams[cfg.name], now_ns), "did_create": True}
        if cfg.name in self.restoring:
            raise E.stream_name_exist()
        if cfg.storage == "file" and self.base is None:
            raise E.stream_create("jetstream has no store directory")
        entry = self._create_stream(cfg, now_ns)
        self.events.emit("jetstream_stream_created", account=self.name, stream=cfg.name,
                         subjects=list(cfg.subjects), storage=cfg.storage, retention=cfg.retention)
        return ({**self.stream_info(entry, now_ns), "did_create": True},
                self.advise(adv.stream_action, cfg.name, "create", now_ns))

    def _stream_configs(self) -> list[StreamConfig]:
        return [entry.stream.config for entry in self.streams.values()]

    def _config_json(self, name: str) -> dict[str, Any] | None:
        entry = self.streams.get(name)
        return entry.stream.config.to_json() if entry is not None else None

    def _create_stream(self, cfg: StreamConfig, now_ns: int, store: FileStore | None = None) -> StreamEntry:
        if cfg.storage == "memory":
            entry = StreamEntry(Stream(cfg, MemoryStore(), created_ns=now_ns, domain=self.domain))
        else:
            sdir = layout.stream_dir(self.base, cfg.name)
            fileio.make_dirs(sdir)
            layout.write_stream_meta(sdir, cfg, now_ns)
            opened = store is not None
            if store is None:
                store = FileStore(layout.msgs_dir(sdir), sync=self.sync, sync_always=self.sync_always)
            entry = StreamEntry(Stream(cfg, store, created_ns=now_ns, domain=self.domain,
                                       rebuild_dedupe=not opened), directory=sdir)
        self._add_stream(entry)
        return entry

    def _api_stream_update(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        entry = self.streams.get(tokens[4])
        if entry is not None:
            self._remove_capture(entry)     # the other streams' subjects are left in the index
        try:
            cfg = check_stream_update(payload, tokens[4], lambda name: self._entry(name).stream.config,
                                      self._capture, clustered=self.clustered)
            if not self.clustered:      # a cluster's meta leader checks these before proposing
                self.check_stream_bytes_limits(cfg)
                self.check_stream_consumers_limit(cfg)
                self.check_stream_reservation(cfg, self._stream_configs(), create=False)
        except Exception:
            if entry is not None:
                self._add_capture(entry)
            raise
        entry.stream.config = cfg
        for subject in cfg.subjects:
            self._capture.insert(subject, entry.name)
        if entry.directory is not None:
            layout.write_stream_meta(entry.directory, cfg, entry.stream.created_ns)
        entry.stream.enforce_limits("")  # tightened limits apply now
        self.events.emit("jetstream_stream_updated", account=self.name, stream=cfg.name)
        return self.stream_info(entry, now_ns), (self.advise(adv.stream_action, cfg.name, "modify", now_ns)
                                                 + self._poll_stream(entry, now_ns, removed=True))

    def _api_stream_info(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        req = decode_request(payload, "JSApiStreamInfoRequest") or {}
        decode_fields(req, "JSApiStreamInfoRequest",
                       {"deleted_details": "bool", "subjects_filter": "string", "offset": "int"})
        entry = self._entry(tokens[4])
        sf = str_field(req, "subjects_filter", "JSApiStreamInfoRequest") or None
        offset = max(int_field(req, "offset", "JSApiStreamInfoRequest", "int"), 0)
        # deleted: the lowest store.MAX_DELETED_DETAILS only; subjects: one sorted page of
        # SUBJECTS_LIMIT from offset (Stream.info)
        info = self.stream_info(entry, now_ns, subjects_filter=sf,
                                deleted_details=bool(req.get("deleted_details")),
                                subjects_offset=offset, subjects_limit=SUBJECTS_LIMIT)
        # nats-server adds paging fields (set with subjects_filter when a subject matches,
        # else 0) and, even on a single server, cluster.leader (its own name).
        out = {key: info.pop(key, 0) for key in ("total", "offset", "limit")}
        info.pop("cluster", None)
        out.update(info)
        cluster = {"leader": self.server_name} if self.server_name else None
        if self.cluster_info is not None:
            cluster = self.cluster_info(entry.name) or cluster
        if cluster:
            info_keys = list(out)
            pos = info_keys.index("state") + 1 if "state" in info_keys else len(info_keys)
            items = list(out.items())
            items.insert(pos, ("cluster", cluster))
            out = dict(items)
        return out

    def _api_stream_delete(self, tokens: list[str], payload: bytes, now_ns: int):
        if payload.strip():
            raise E.not_empty_request()
        entry = self._entry(tokens[4])
        consumers = list(entry.consumers)
        out = [Reply(m) for m in self.delete_replica(entry.name)]
        self.events.emit("jetstream_stream_deleted", account=self.name, stream=entry.name)
        return {"success": True}, out + self.deleted_advisories(entry.name, consumers, now_ns)

    def deleted_advisories(self, stream: str, consumers: list[str], now_ns: int) -> list[Reply]:
        """The advisories of a stream's deletion, as nats-server sends them: a
        ``CONSUMER.DELETED`` for each consumer it still had, then ``STREAM.DELETED``."""
        out: list[Reply] = []
        for cname in consumers:
            out.extend(self.advise(adv.consumer_action, stream, cname, "delete", now_ns))
        return out + self.advise(adv.stream_action, stream, "delete", now_ns)

    def _api_stream_purge(self, tokens: list[str], payload: bytes, now_ns: int):
        req = decode_request(payload, "JSApiStreamPurgeRequest") or {}
        decode_fields(req, "JSApiStreamPurgeRequest",
                       {"filter": "string", "seq": "uint64", "keep": "uint64"})
        entry = self._entry(tokens[4])
        body = entry.stream.purge(req)
        self.events.emit("jetstream_stream_purged", account=self.name, stream=entry.name,
                         purged=body["purged"])
        return body, self._poll_stream(entry, now_ns, removed=True)

    def _api_msg_get(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        if not payload.strip():
            self._entry(tokens[5])
            raise E.bad_request()
        req = msg_get_request(decode_request(payload, "JSApiMsgGetRequest") or {}, strict=True)
        entry = self._entry(tokens[5])
        return entry.stream.get_message(req)

    def _api_msg_delete(self, tokens: list[str], payload: bytes, now_ns: int):
        if not payload.strip():
            raise E.bad_request()
        req = decode_request(payload, "JSApiMsgDeleteRequest") or {}
        decode_fields(req, "JSApiMsgDeleteRequest", {"seq": "uint64", "no_erase": "bool"})
        seq = int_field(req, "seq", "JSApiMsgDeleteRequest")
        entry = self._entry(tokens[5])
        if seq > entry.stream.store.state().last_seq:
            err = E.stream_msg_delete_failed("stream store EOF")
            err.counted = False     # nats-server does not count this one in api.errors
            raise err
        body = entry.stream.delete_message(seq)
        return body, self._poll_stream(entry, now_ns, removed=True)

    def names_request(self, payload: bytes, go_type: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        """A NAMES/LIST request's object (``{}`` when the body is not one), its ``allowed``
        keys (``offset``, ``subject``) checked as Go decodes them (JSApiError 10025)."""
        text = payload.lstrip()
        if not text or text[:1] not in (b"{", b"["):
            return {}           # nats-server: only a JSON object or array is read
        req = decode_request(payload, go_type) or {}
        decode_fields(req, go_type, {key: PAGING_TYPES[key] for key in allowed})
        return req

    def _page(self, payload: bytes, go_type: str, stream: str | None, limit: int) -> tuple[list[str], int, list[str]]:
        """A NAMES/LIST request's names (the account's streams, filtered by its ``subject``;
        or, with ``stream``, that stream's consumers: JSApiError 10059 when there is none),
        its ``offset`` (clamped to the names) and the page of at most ``limit`` names."""
        if stream is None:
            req = self.names_request(payload, go_type, ("offset", "subject"))
            offset = max(int_field(req, "offset", go_type, "int"), 0)
            names = self._filtered_streams(str_field(req, "subject", go_type))
        else:
            req = self.names_request(payload, go_type, ("offset",))
            offset = max(int_field(req, "offset", go_type, "int"), 0)
            names = sorted(self._entry(stream).consumers)
        offset = min(offset, len(names))
        return names, offset, names[offset:offset + limit]

    def _filtered_streams(self, subject: str) -> list[str]:
        names = []
        for name, entry in self.streams.items():
            if not subject or any(subjects_overlap(subject, s) for s in entry.stream.config.subjects):
                names.append(name)
        return sorted(names)

    def _api_stream_names(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiStreamNamesRequest", None, NAMES_LIMIT)
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "streams": page or None}

    def _api_stream_list(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiStreamListRequest", None, LIST_LIMIT)
        infos = [self.stream_info(self.streams[n], now_ns, dynamic=False) for n in page]
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "streams": infos}   # [] when none

    # --- direct get -----------------------------------------------------------------------

    def _direct_get(self, tokens: list[str], reply: str | None, payload: bytes) -> list[Reply] | None:
        """``$JS.API.DIRECT.GET.<stream>[.<subject>]`` (nats-server stream.go
        processDirectGetRequest, processDirectGetLastBySubjectRequest): the message itself
        with Nats-Stream, Nats-Subject, Nats-Sequence and Nats-Time-Stamp headers, or a
        404/408 status. The body is read as Go's ``json.Unmarshal`` reads it (unknown keys
        ignored): anything it refuses (bad JSON, nesting past the limit, a number outside
        its field's Go type) is ``408 Malformed Request``. Streams without ``allow_direct``
        do not answer (no responders)."""
        entry = self.streams.get(tokens[4])
        if entry is None or not entry.stream.config.allow_direct:
            return None
        if not reply:
            return []

        def status(code: int, text: str) -> list[Reply]:
            return [Reply(Outbound(reply, None, status_headers(code, text), b""))]

        try:
            req = direct_get_request(".".join(tokens[5:]) if len(tokens) > 5 else None, payload)
        except DirectGetRefused as refused:
            return status(408, refused.text)
        store = entry.stream.store
        seq, last_for, next_for = req.seq, req.last_for, req.next_for
        try:
            if next_for:
                sm = store.load_next(next_for, seq)
            elif seq > 0:
                sm = store.load(seq)
            else:
                sm = store.load_last(last_for)
        except (MessageNotFound, CorruptMessage):
            sm = None
        if sm is None:
            return status(404, "Message Not Found")
        extra = (f"Nats-Stream: {entry.name}\r\nNats-Subject: {sm.subject}\r\n"
                 f"Nats-Sequence: {sm.seq}\r\nNats-Time-Stamp: {gofmt.format_time(sm.ts)}\r\n")
        if req.no_hdrs:
            headers = None
        elif sm.headers:
            base = sm.headers[:-2] if sm.headers.endswith(b"\r\n\r\n") else sm.headers
            headers = base + extra.encode() + b"\r\n"
        else:
            headers = b"NATS/1.0\r\n" + extra.encode() + b"\r\n"
        return [Reply(Outbound(reply, None, headers, sm.data))]

    # --- consumers ------------------------------------------------------------------------

    def consumer_create_refusal(self, subject: str, payload: bytes) -> JSApiError | None:
        """The refusal of a CONSUMER.CREATE request on ``subject`` for a setting jetraft does
        not act on (``ConsumerConfig.check_supported``), found without changing anything, or
        None (also when the request fails an earlier check: handling it answers that). A
        clustered stream's leader asks this before proposing the request."""
        try:
            self._consumer_request(subject.split("."), payload)
        except UnsupportedSetting as err:
            return err
        except JSApiError:
            return None
        return None

    def _consumer_request(self, tokens: list[str], payload: bytes) -> tuple[StreamEntry, ConsumerConfig, str]:
        """CONSUMER.CREATE's checks of the request alone (:func:`check_consumer_create`): the
        stream's entry, the checked config and the action. Raises JSApiError."""
        sname, cfg, action = check_consumer_create(tokens, payload, lambda name: self._entry(name).stream.config,
                                                   clustered=self.clustered)
        return self.streams[sname], cfg, action

    def _api_consumer_create(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        entry, cfg, action = self._consumer_request(tokens, payload)
        name = cfg.durable_name or cfg.name
        existing = entry.consumers.get(name) if name else None
        if existing is not None:
            if action == "create" and not same_consumer_config(cfg, existing.config):
                raise E.consumer_already_exists()
            if entry.stream.config.retention == "workqueue" and \
                    not consumer_filters_unique(name, cfg, self._consumer_configs(entry)):
                raise E.api_error("JSConsumerWQConsumerNotUniqueErr")
            if not same_consumer_config(cfg, existing.config):
                try:
                    check_consumer_update(existing.config, cfg)
                except ValueError as exc:
                    raise E.consumer_create(str(exc)) from None
                out = existing.update_config(cfg, now_ns)
                self._write_consumer_meta(entry, existing)
                return self._consumer_info(existing, now_ns), [Reply(m) for m in out]
            return self._consumer_info(existing, now_ns)
        if action == "update":
            raise E.consumer_does_not_exist()
        check_new_consumer(entry.stream.config, self._consumer_configs(entry), name, cfg)
        if not self.clustered:      # a clustered stream's leader checks it before proposing
            self.check_consumer_count_limit(entry, name)
        if not name:
            name = new_consumer_name()
            cfg.name = name
        elif not cfg.name:
            cfg.name = name
        consumer = Consumer(entry.stream, name, cfg, created_ns=now_ns, has_interest=self.interest)
        consumer.advisory_interest = self.advisory_interest
        entry.consumers[name] = consumer
        self._write_consumer_meta(entry, consumer)
        self.events.emit("jetstream_consumer_created", account=self.name, stream=entry.name,
                         consumer=name, durable=bool(cfg.durable_name),
                         kind="push" if cfg.deliver_subject else "pull")
        return self._consumer_info(consumer, now_ns), (
            self.advise(adv.consumer_action, entry.name, name, "create", now_ns)
            + [Reply(m) for m in consumer.poll(now_ns)])

    @staticmethod
    def _consumer_configs(entry: StreamEntry) -> dict[str, ConsumerConfig]:
        return {name: consumer.config for name, consumer in entry.consumers.items()}

    def _write_consumer_meta(self, entry: StreamEntry, consumer: Consumer) -> None:
        if entry.directory is not None and not consumer.config.mem_storage:
            layout.write_consumer_meta(entry.directory, consumer)

    def _consumer_info(self, consumer: Consumer, now_ns: int) -> dict[str, Any]:
        """CONSUMER.INFO/CREATE body: the info with ``_nats.ver``/``_nats.level`` added to
        the config's metadata (nats-server jetstream_versioning.go setDynamicConsumerMetadata;
        CONSUMER.LIST does not add them)."""
        info = consumer.info(now_ns)
        config = dict(info.get("config") or {})
        config["metadata"] = {**(config.get("metadata") or {}), META_SERVER_VERSION: self.server_version,
                              META_SERVER_LEVEL: str(API_LEVEL)}
        info["config"] = config
        if self.cluster_info is not None:
            # a consumer is replicated in its stream's RAFT group: the stream's cluster block
            # (nats-server ConsumerInfo.Cluster, placed after num_pending)
            cluster = self.cluster_info(consumer.stream.config.name)
            if cluster:
                items = list(info.items())
                keys = [k for k, _ in items]
                pos = keys.index("num_pending") + 1 if "num_pending" in keys else len(items)
                items.insert(pos, ("cluster", cluster))
                info = dict(items)
        return info

    def _consumer(self, sname: str, cname: str) -> tuple[StreamEntry, Consumer]:
        entry = self._entry(sname)
        consumer = entry.consumers.get(cname)
        if consumer is None:
            raise E.consumer_not_found()
        return entry, consumer

    def _api_consumer_info(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        if payload.strip():
            raise E.not_empty_request()
        _entry, consumer = self._consumer(tokens[4], tokens[5])
        return self._consumer_info(consumer, now_ns)

    def _delete_consumer(self, entry: StreamEntry, cname: str, reason: str) -> list[Outbound]:
        consumer = entry.consumers.pop(cname)
        out = consumer.stop()
        if entry.directory is not None:
            fileio.remove_tree(layout.consumer_dir(entry.directory, cname))
        self.events.emit("jetstream_consumer_deleted", account=self.name, stream=entry.name,
                         consumer=cname, reason=reason)
        if entry.stream.config.retention == "interest":
            self._drop_uninteresting(entry)
        return out

    def _drop_uninteresting(self, entry: StreamEntry) -> None:
        """Interest retention: remove messages no remaining consumer needs."""
        store = entry.stream.store
        st = store.state()
        # the stored sequences, never every one of a gap (a restore may leave one of 10^12)
        for seq in list(store.stored_seqs(st.first_seq, st.last_seq)):
            if not any(c.needs_ack(seq) for c in entry.consumers.values()):
                store.remove(seq)

    def _api_consumer_delete(self, tokens: list[str], payload: bytes, now_ns: int):
        if payload.strip():
            raise E.not_empty_request()
        entry, _consumer = self._consumer(tokens[4], tokens[5])
        out = self._delete_consumer(entry, tokens[5], "deleted by request")
        return {"success": True}, ([Reply(m) for m in out]
                                   + self.advise(adv.consumer_action, entry.name, tokens[5], "delete", now_ns))

    def _api_consumer_names(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiConsumersRequest", tokens[4], NAMES_LIMIT)
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "consumers": page}

    def _api_consumer_list(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiConsumersRequest", tokens[4], LIST_LIMIT)
        consumers = self.streams[tokens[4]].consumers
        infos = [consumers[n].info(now_ns) for n in page]
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "consumers": infos}

    def _msg_next(self, sname: str, cname: str, reply: str | None, payload: bytes,
                  now_ns: int) -> list[Reply] | None:
        """A pull request (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``); None for an
        unknown consumer (nats-server has no subscription for it: no responders)."""
        entry = self.streams.get(sname)
        consumer = entry.consumers.get(cname) if entry else None
        if consumer is None:
            return None
        if not reply:
            return []
        return [Reply(m) for m in consumer.request_next(reply, payload, now_ns)]


def is_api_subject(subject: str) -> bool:
    """Whether ``subject`` is one the JetStream layer consumes itself."""
    return subject.startswith(("$JS.API.", "$JS.ACK.", "$JS.FC.")) and is_valid_subject(subject)
