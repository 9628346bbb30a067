"""One replica of a clustered stream on this server, as the cluster controller
(:mod:`jetraft.jetstream.cluster`, carried out by ``net/jetstream/cluster.py``) drives it:
created, detached, deleted and polled on its assignment, and its state captured and restored
for the stream group's RAFT snapshots (:mod:`jetraft.jetstream.replica_state`).

As nats-server server/jetstream_cluster.go does for a stream assignment on one of its peers
(processClusterCreateStream, processClusterDeleteStream) and for the stream group's snapshots.
"""

from __future__ import annotations

from typing import Any

from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.api.core import AccountCore, Reply, StreamEntry
from jetraft.jetstream.consumer import Consumer
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.replica_state import ReplicaStateError, build_replica_state, check_replica_state
from jetraft.jetstream.store import FileStore
from jetraft.protocol.subjects import subjects_overlap
from jetraft.storage import fileio


class StreamReplicas(AccountCore):
    """This server's replicas of clustered streams (see the module docstring)."""

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

    def open_replica_store(self, name: str, ttl: bool = False) -> FileStore:
        """Open stream ``name``'s block files as a FileStore (reading them all: call it in a
        worker thread); its ``recovery_report`` lists any damage found. ``ttl``: the stream
        has ``allow_msg_ttl``, so its TTL index is built here too and saved for the stream
        to read back (:func:`layout.save_ttl_index`). Raises StorageError or OSError."""
        msgs = self.replica_msgs_dir(name)
        if msgs is None or self.base is None:
            raise E.stream_create("jetstream has no store directory")
        store = FileStore(msgs, sync=self.sync, sync_always=self.sync_always)
        if ttl:
            try:
                layout.save_ttl_index(layout.stream_dir(self.base, name), store)
            except BaseException:
                store.close()
                raise
        return store

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
        stream = entry.stream
        removed = stream.expire(now_ns) > 0 if stream.config.max_age > 0 or stream.ttls is not None else False
        if stream.schedules is not None:
            fired, again = stream.fire_schedules(now_ns)
            out.extend(Reply(m, needs_sync=entry.directory is not None) for m in again)
            if fired:
                self.wake_links(name)
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
        ttl = entry.stream.next_expiry()
        if ttl is not None:
            deadlines.append(ttl)
        return min(deadlines) if deadlines else None

    # --- the replica's state for RAFT snapshots (jetstream/replica_state.py) -------------

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
            consumer.account_name = self.name
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
        if checked.schedules is not None:
            stream.set_schedules(checked.schedules)
        old, entry.consumers = entry.consumers, consumers
        for consumer in old.values():
            consumer.stop()
