"""The account's JetStream limits (its ``jetstream { ... }`` block): streams, consumers,
bytes and consumers' ``max_ack_pending``, checked on creating or updating a stream or
consumer, on a restore and on a publish.

As nats-server server/jetstream.go (checkLimits, checkBytesLimits, checkAllLimits,
checkUsageLimits), server/jetstream_api.go (jsNonClusteredStreamLimitsCheck,
tieredReservation), server/jetstream_cluster.go (jsClusteredStreamLimitsCheck,
jsClusteredConsumerRequest), server/stream.go (checkStreamCfg, processJetStreamMsg) and
server/consumer.go (setConsumerConfigDefaults, checkConsumerCfg).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from jetraft.jetstream import errors as E
from jetraft.jetstream.api.core import AccountCore, StreamEntry
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.requests import decode_request

#: JSConsumerMaxPendingAckExcessErrF: a consumer's max_ack_pending above a limit.
_MAX_ACK_PENDING_EXCESS = 10121


class LimitChecks(AccountCore):
    """The account's limits checked (see the module docstring)."""

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
        stored = entry.stream.stored_subject(subject, 0)     # its length only: the draw of a random() does not matter
        size = entry.stream.store.msg_size(stored, headers, data) * max(1, cfg.num_replicas)
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
        ``max_consumers`` (:meth:`check_consumer_count_limit`) or ``max_ack_pending`` (10121),
        or None (also when the request fails another check: handling it answers that). A
        clustered stream's leader asks this before proposing the request: the account's
        limits are this server's configuration, so they are checked once, never as the
        replicas apply the log."""
        try:
            entry, cfg, action = self._consumer_request(subject.split("."), payload)
            if action != "update":
                self.check_consumer_count_limit(entry, cfg.durable_name or cfg.name)
        except JSApiError as err:
            return err if err.err_code in (10026, _MAX_ACK_PENDING_EXCESS) else None
        return None

    def consumer_request_with_limits(self, subject: str, payload: bytes) -> bytes:
        """The CONSUMER.CREATE request on ``subject`` that a clustered stream's leader
        proposes: ``payload`` itself, or, when the account's ``max_ack_pending`` lowers the
        ``max_ack_pending`` the config gets by default (nats-server
        setConsumerConfigDefaults), the request with that value written into its
        ``config``. The replicas apply the request without the account's limits (their
        configuration is theirs), so all of them store the leader's value, as nats-server's
        consumer assignment carries the defaults its meta leader gave
        (jsClusteredConsumerRequest). A request that fails a check is proposed as it is:
        the replicas answer its error."""
        if self.limits.max_ack_pending <= 0:
            return payload
        tokens = subject.split(".")
        try:
            _, limited, _ = self._consumer_request(tokens, payload)
            _, plain, _ = self._consumer_request(tokens, payload, account_limits=False)
        except JSApiError:
            return payload
        if limited.max_ack_pending == plain.max_ack_pending:
            return payload
        req = decode_request(payload, "CreateConsumerRequest") or {}
        req["config"] = {**(req.get("config") or {}), "max_ack_pending": limited.max_ack_pending}
        # ASCII escapes: a string the body held as invalid UTF-8 (surrogate-escaped) decodes
        # back to the same text on the replicas
        return json.dumps(req, separators=(",", ":")).encode()
