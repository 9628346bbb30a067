"""The account's shared state, and what several parts of
:class:`~jetraft.jetstream.api.JetStreamAccount` do to it: :class:`Reply` and
:class:`StreamEntry`, the API's subject prefixes and page sizes, the streams and the index
of their subjects, creating and removing streams and consumers with their files
(:mod:`jetraft.jetstream.layout`), stream info, the account's usage, retention after acks
and removals, and advisories.

As nats-server keeps them in ``jsAccount`` (server/jetstream.go); retention as
server/stream.go and server/consumer.go apply the interest and workqueue policies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.batch import AtomicBatches
from jetraft.jetstream.consumer import Consumer
from jetraft.jetstream.model import AccountLimits, StreamConfig
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.store import FileStore, MemoryStore
from jetraft.jetstream.stream import Stream
from jetraft.protocol.subjects import SubjectIndex
from jetraft.storage import fileio

API_PREFIX = "$JS.API."
ACK_PREFIX = "$JS.ACK."
FC_PREFIX = "$JS.FC."
NAMES_LIMIT = 1024          # nats-server JSApiNamesLimit
LIST_LIMIT = 256            # nats-server JSApiListLimit
SUBJECTS_LIMIT = 100_000    # nats-server JSMaxSubjectDetails: subjects per STREAM.INFO page


@dataclass(slots=True)
class Reply:
    """An outbound message plus what must be durable before it leaves: the stream's writes
    (a group commit) or the consumer state files."""

    out: Outbound
    needs_sync: bool = False
    needs_state: bool = False     # an ack_sync reply: send once the consumer state file is written
    #: the account to route it in when not the account that made it (the system account's
    #: copy of an advisory); None: that account
    account: str | None = None


@dataclass(slots=True)
class StreamEntry:
    """A stream with its consumers and its directory (None for a memory stream)."""

    stream: Stream
    consumers: dict[str, Consumer] = field(default_factory=dict)
    directory: str | None = None
    #: its mirror's or sources' links by index name (jetstream/api/sources.py), made for
    #: the config ``links_for``
    links: dict[str, Any] = field(default_factory=dict)
    links_for: Any = None

    @property
    def name(self) -> str:
        return self.stream.config.name


class AccountCore:
    """The state every part of :class:`~jetraft.jetstream.api.JetStreamAccount` reads (the
    arguments are described there) and the operations on it that several parts share."""

    def __init__(self, name: str, *, store_dir: str | None, sync: Any, events: Any,
                 interest: Callable[[str], bool], server_version: str,
                 sync_always: bool = True, domain: str = "", server_name: str = "",
                 clustered: bool = False,
                 advisory_interest: Callable[[str], bool] | None = None,
                 limits: Mapping[str, int | bool] | None = None,
                 batches: AtomicBatches | None = None, system_account: str = "",
                 system_interest: Callable[[str], bool] | None = None) -> None:
        self.name = name
        #: the system account, and whether a subscription in it listens on an advisory
        #: subject (for the advisories nats-server copies there, with ``account`` set)
        self.system_account = system_account
        self.system_interest = system_interest
        #: atomic batches staged on this server (jetstream/batch.py), shared by its accounts
        self.batches = batches if batches is not None else AtomicBatches()
        #: whether a subscription listens on an advisory subject; None: no advisories
        self.advisory_interest = advisory_interest
        self.clustered = clustered
        #: each clustered stream's RAFT term, as its last applied entry has it
        self.stream_terms: dict[str, int] = {}
        self.cluster_info: Callable[[str], dict[str, Any] | None] | None = None
        self.server_name = server_name
        self.sync = sync
        self.sync_always = sync_always
        self.events = events
        self.interest = interest
        self.server_version = server_version
        self.domain = domain
        self._ttl_flushes = 0       # state flushes, to save TTL indexes once in a while
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
        #: origin stream -> the streams whose links fetch from it (jetstream/api/sources.py)
        self.sourced_by: dict[str, set[str]] = {}
        #: a link became due since the caller last looked (it clears it)
        self.links_woken = False
        self.api_total = 0
        self.api_errors = 0
        #: the account's JetStream limits (the account's ``jetstream { ... }`` block)
        self.limits = AccountLimits(**dict(limits or {}))
        self.base = layout.streams_dir(store_dir, name) if store_dir is not None else None

    # ------------------------------------------------------------------ streams and their subjects

    def _add_stream(self, entry: StreamEntry) -> None:
        self.streams[entry.name] = entry
        self._add_capture(entry)
        for consumer in entry.consumers.values():
            consumer.advisory_interest = self.advisory_interest
            consumer.account_name = self.name

    def _add_capture(self, entry: StreamEntry) -> None:
        for subject in entry.stream.config.subjects:
            self._capture.insert(subject, entry.name)

    def _remove_capture(self, entry: StreamEntry) -> None:
        for subject in entry.stream.config.subjects:
            self._capture.remove(subject, entry.name)

    def _entry(self, name: str) -> StreamEntry:
        """The loaded stream ``name``. Raises 10194 "stream is offline: <reason>" for one
        on disk but not loaded (:attr:`unloaded`, nats-server's offline stream), else 10059."""
        entry = self.streams.get(name)
        if entry is None:
            if name in self.unloaded:
                raise E.api_error("JSStreamOfflineReasonErrF", err=self.unloaded[name])
            raise E.stream_not_found()
        return entry

    def _stream_configs(self) -> list[StreamConfig]:
        return [entry.stream.config for entry in self.streams.values()]

    def _create_stream(self, cfg: StreamConfig, now_ns: int, store: FileStore | None = None) -> StreamEntry:
        """A new stream of ``cfg`` (or one over the opened ``store``), its first sequence
        ``first_seq`` when set on a new store (nats-server: each replica's store purges to it
        when it is made, filestore.go/memstore.go)."""
        if cfg.storage == "memory":
            memory = MemoryStore()
            if cfg.first_seq > 0:
                memory.compact_to(cfg.first_seq)
            entry = StreamEntry(Stream(cfg, memory, created_ns=now_ns, domain=self.domain))
        else:
            sdir = layout.stream_dir(self.base, cfg.name)
            fileio.make_dirs(sdir)
            layout.write_stream_meta(sdir, cfg, now_ns)
            opened = store is not None
            if store is None:
                store = FileStore(layout.msgs_dir(sdir), sync=self.sync, sync_always=self.sync_always)
                if cfg.first_seq > 0:
                    store.compact_to(cfg.first_seq)
            entry = StreamEntry(Stream(cfg, store, created_ns=now_ns, domain=self.domain,
                                       rebuild_dedupe=not opened,
                                       ttl_state=layout.read_ttl_index(sdir) if opened else None),
                                directory=sdir)
        self._add_stream(entry)
        return entry

    def stream_info(self, entry: StreamEntry, now_ns: int, *, dynamic: bool = True,
                    **kw: Any) -> dict[str, Any]:
        """STREAM.INFO body; ``dynamic`` adds ``_nats.ver``/``_nats.level`` to the config's
        metadata (CREATE, UPDATE and INFO do; LIST does not, as nats-server)."""
        info = entry.stream.info(now_ns, consumer_count=len(entry.consumers), **kw)
        sourcing = self.source_info(entry, now_ns)
        if sourcing:        # before "ts", as nats-server's StreamInfo orders them
            ts = info.pop("ts")
            info.update(sourcing)
            info["ts"] = ts
        if dynamic:
            info["config"] = entry.stream.config.to_response_json(self.server_version)
        if self.cluster_info is not None:
            cluster = self.cluster_info(entry.name)
            if cluster:
                info["cluster"] = cluster
        return info

    def source_info(self, entry: StreamEntry, now_ns: int) -> dict[str, Any]:
        """STREAM.INFO's ``mirror``/``sources`` (jetstream/api/sources.py)."""
        return {}

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

    # ------------------------------------------------------------------ consumers and retention

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

    def _write_consumer_meta(self, entry: StreamEntry, consumer: Consumer) -> None:
        if entry.directory is not None and not consumer.config.mem_storage:
            layout.write_consumer_meta(entry.directory, consumer)

    # ------------------------------------------------------------------ advisories

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

    def _listening(self, subject: str) -> bool:
        listening = self.advisory_interest
        if listening is None:
            return False
        try:
            return bool(listening(subject))
        except Exception:  # noqa: BLE001 - an advisory never breaks the request
            return False
