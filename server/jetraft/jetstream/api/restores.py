"""Stream snapshots and restores on the account's side: STREAM.SNAPSHOT and STREAM.RESTORE
requests checked, the bytes a restore may store, and the restored stream attached (or
discarded); the data itself moves in :mod:`jetraft.jetstream.snapshot` and
``net/jetstream/snapshot.py``.

As nats-server server/jetstream_api.go (jsStreamSnapshotRequest, jsStreamRestoreRequest) and
server/stream_backup.go (RestoreStreamV2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.api.core import AccountCore, StreamEntry
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.replica_state import ReplicaStateError
from jetraft.jetstream.requests import decode_request, json_bytes
from jetraft.jetstream.snapshot import RestoreResult, SnapshotRequest, SnapshotWriter, snapshot_request
from jetraft.jetstream.stream import Stream
from jetraft.jetstream.validate import check_stream_create
from jetraft.protocol.subjects import filters_overlap
from jetraft.storage import fileio


class SnapshotsAndRestores(AccountCore):
    """Stream snapshots and restores (see the module docstring)."""

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
