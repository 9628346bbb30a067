""":class:`JetStreamAccount`: one account's JetStream, the parts of this package over the
shared state of :class:`~jetraft.jetstream.api.core.AccountCore`. Here, what is not an API
request: recovery from the store directory, publishes to the streams' subjects (nats-server
server/stream.go processJetStreamMsg), acks and flow control (``$JS.ACK.>``, ``$JS.FC.>``;
server/consumer.go processAck, processFlowControl), the consumers' timers and their state
files.
"""

from __future__ import annotations

from jetraft import gofmt
from jetraft.jetstream import layout
from jetraft.jetstream.api.batches import AtomicPublish
from jetraft.jetstream.api.consumers import ConsumerRequests
from jetraft.jetstream.api.core import ACK_PREFIX, FC_PREFIX, Reply, StreamEntry
from jetraft.jetstream.api.dispatch import ApiDispatch
from jetraft.jetstream.api.limits import LimitChecks
from jetraft.jetstream.api.replicas import StreamReplicas
from jetraft.jetstream.api.restores import SnapshotsAndRestores
from jetraft.jetstream.api.sources import SourceLinks
from jetraft.jetstream.api.streams import StreamRequests
from jetraft.jetstream.consumer import Consumer
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.requests import json_bytes, pub_ack_bytes


#: A changed TTL index is saved once in this many state flushes (every 2 s at 0.1 s).
TTL_INDEX_FLUSH_EVERY = 20


class JetStreamAccount(ApiDispatch, StreamRequests, ConsumerRequests, StreamReplicas,
                       SnapshotsAndRestores, LimitChecks, SourceLinks, AtomicPublish):
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

    ``batches``: the :class:`~jetraft.jetstream.batch.AtomicBatches` staging atomic batches
    on this server, shared by its accounts (its limits are per server); one of its own
    when None.

    ``system_account``, ``system_interest``: the system account's name and
    ``system_interest(subject) -> bool`` for it, for the advisories nats-server also sends
    there (the batch abandoned advisory: :meth:`batch_abandoned`); none there when unset.
    """

    # ------------------------------------------------------------------ recovery

    def recover(self, now_ns: int) -> None:
        """Load every stream and consumer found under the store directory.

        Problems (unreadable meta files, corrupt or torn message records) are reported as
        ``jetstream_recovery_problem`` events; nothing is deleted. A stream or consumer whose
        stored config has a setting jetraft does not act on (written by an older jetraft:
        ``StreamConfig.check_supported``, ``ConsumerConfig.check_supported``) is not loaded,
        reported with the setting named, and its files are left untouched; such a stream
        is listed in :attr:`unloaded` (offline, with its reason), and so is a stream with
        such a consumer (``stopped - unsupported consumer "<name>"``, nats-server's).
        """
        for found in layout.recover_streams(self.base, now_ns, sync=self.sync, sync_always=self.sync_always,
                                            domain=self.domain, problem=self._problem):
            if found.stream is None:
                self.unloaded[found.name] = found.unloaded
                continue
            offline: list[str] = []
            consumers = list(layout.recover_consumers(found, now_ns, interest=self.interest, problem=self._problem,
                                                      unsupported=lambda cname, _reason: offline.append(cname)))
            if offline:     # nats-server jetstream.go: the stream stops with an unsupported consumer
                found.stream.store.close()
                self.unloaded[found.name] = f"stopped - unsupported consumer {gofmt.quote(offline[0])}"
                continue
            entry = StreamEntry(found.stream, directory=found.directory)
            self._add_stream(entry)
            state = found.stream.store.state()
            self.events.emit("jetstream_stream_recovered", account=self.name, stream=found.name,
                             messages=state.messages, last_seq=state.last_seq)
            for consumer in consumers:
                consumer.advisory_interest = self.advisory_interest
                consumer.account_name = self.name
                entry.consumers[consumer.name] = consumer

    def _problem(self, stream: str, consumer: str | None, path: str, detail: str) -> None:
        self.events.emit("jetstream_recovery_problem", account=self.name, stream=stream,
                         consumer=consumer, path=path, detail=detail)

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

        Returns the message the stream's ``republish`` sends, the PubAck (to ``reply``, when
        there is one; both ``needs_sync`` for a file stream: sent only once the write is
        durable), then consumer deliveries. In a cluster every replica applies the publish
        and only the leader sends what it returns, so a message is republished once.
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
            ack, republished = stream.publish_message(subject, headers, data, now_ns)
        except JSApiError as err:
            if not reply:
                return []
            body = {"error": err.to_json(), "stream": stream.config.name, "seq": 0}
            return [Reply(Outbound(reply, None, None, json_bytes(body)))]
        out: list[Reply] = []
        if not ack.get("duplicate"):
            self.wake_links(entry.name)
        if republished is not None:     # before the PubAck, as nats-server; durable first too
            out.append(Reply(republished, needs_sync=entry.directory is not None))
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

    def poll(self, now_ns: int) -> list[Reply]:
        """Run every consumer's timers and expire messages (max_age); delete inactive
        ephemeral consumers."""
        out: list[Reply] = []
        for name in list(self.streams):
            out.extend(self.poll_stream(name, now_ns))
        return out

    def run_links(self, name: str, now_ns: int) -> list[Reply]:
        """A single server's links of stream ``name``: each fetch that is due answered from
        this account's own origin and stored at once. At most one fetch per link per call
        (FETCH_MAX_MSGS messages), so a catch-up yields between batches."""
        entry = self.streams.get(name)
        if entry is None or not entry.links_for and not (entry.stream.config.mirror or entry.stream.config.sources):
            return []
        out: list[Reply] = []
        for link, req in self.fetches_due(entry, now_ns):
            answer, origin_out = self.answer_fetch(req, now_ns)
            out.extend(origin_out)
            out.extend(self.apply_fetched(entry, link.spec.iname, answer, now_ns))
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

    def flow_control(self, subject: str, now_ns: int, last: tuple[int, int] | None = None) -> list[Reply]:
        """A client's answer to a flow-control request (``$JS.FC.<stream>.<consumer>...``);
        ``last``: the stream and consumer sequences it reports stored, the ack of a consumer
        with ``ack_policy: flow_control`` (see ``Consumer.process_flow_control``)."""
        found = self._consumer_from_subject(subject, FC_PREFIX)
        if found is None:
            return []
        entry, consumer = found
        out = [Reply(m) for m in consumer.process_flow_control(subject, now_ns, last)]
        out.extend(self._apply_retention(entry, now_ns))
        return out

    def knows_consumer(self, subject: str, prefix: str) -> bool:
        """Whether the ack or flow-control ``subject`` names one of our consumers."""
        return self._consumer_from_subject(subject, prefix) is not None

    def pending_state_writes(self, force: bool = False) -> list[tuple[str, bytes]]:
        """``(path, bytes)`` for every consumer state file to write: those whose state
        changed (or all, with ``force``), and every changed TTL index once in
        TTL_INDEX_FLUSH_EVERY calls (or with ``force``: what it misses is read again from
        the messages when the stream opens). Serialised now, in the caller's thread, so that
        :func:`layout.write_state_files` may run in a worker thread."""
        writes = []
        self._ttl_flushes += 1
        ttl_due = force or self._ttl_flushes % TTL_INDEX_FLUSH_EVERY == 0
        for entry in self.streams.values():
            if entry.directory is None:
                continue
            ttls = entry.stream.ttls
            if ttls is not None and ttls.dirty and ttl_due:
                writes.append((layout.ttl_index_path(entry.directory), ttls.to_bytes()))
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
