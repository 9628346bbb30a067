"""A clustered stream RESTORE (nats-server jetstream_cluster.go
jsClusteredStreamRestoreRequest, stream_backup.go): assigned by the meta leader with a
restorer, refused publishes and changes (10194) until done, deleted when it fails or its
restorer is lost."""

from __future__ import annotations

from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.api import (
    JetStreamAccount,
)
from jetraft.jetstream.cluster.actions import (
    Key,
)
from jetraft.jetstream.cluster.core import (
    RESTORE_LOST_NS,
    RESTORE_PROPOSED_NS,
    ControllerCore,
)
from jetraft.jetstream.meta import (
    StreamAssignment,
    encode_assign_stream,
    encode_remove_stream,
    encode_restore_state,
    group_name,
)
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.requests import (
    json_bytes,
)


class Restores(ControllerCore):
    """Clustered stream restores (see the module docstring)."""

    def _lost_restores(self, now_ns: int) -> None:
        """On the meta leader: a stream being restored whose restoring server has had no
        route to this one for :data:`RESTORE_LOST_NS` (since the route went down, or since
        this server started when it never came up) is deleted (the backup was on that
        server alone; its client gets no answer, as from a nats-server whose restoring
        leader went away)."""
        for sa in self.meta.streams.values():
            if sa.restore is None or sa.restored_by in (None, self.me):
                continue
            down = self.view.unreachable_since(sa.restored_by)
            if down is not None and now_ns - down > RESTORE_LOST_NS:
                self._propose_once(encode_remove_stream(sa.account, sa.name))

    def restore_failed(self, key: Key) -> list[Any]:
        """The restore of stream ``key`` failed (bad data, its client gone, the restorer
        lost leadership or restarted): have the meta leader delete the stream, so that
        nothing of it is left on any server."""
        self._restore_failed(key)
        return self._take()

    def _restore_failed(self, key: Key) -> None:
        self.restores.discard(key)
        sa = self.meta.streams.get(key)
        if sa is not None and sa.restore is not None:
            self._propose_once(encode_remove_stream(*key), via_leader=True)

    def restore_phase(self, key: Key, phase: str | None) -> list[Any]:
        """The restorer of stream ``key`` moves its restore to ``phase`` ("catchup": its
        data is in its store and RAFT snapshot; None: a quorum of the peers hold it)."""
        sa = self.meta.streams.get(key)
        if sa is not None and sa.restore is not None and sa.restore != phase:
            self._propose_once(encode_restore_state(key[0], key[1], phase), via_leader=True)
        return self._take()

    def restore_limits_check(self, key: Key, restored: int, now_ns: int) -> None:
        """On the restorer of stream ``key``, its backup built into a store of ``restored``
        bytes (one replica), before it is put in place: the account's ``max_mem`` /
        ``max_file`` against what the account's stream assignments reserve and what its
        streams store over the cluster (this server's bytes and the others' last usage
        reports: :mod:`jetraft.jetstream.usage`), as nats-server's stream leader checks a
        restore (stream_backup.go RestoreStreamV2; :meth:`JetStreamAccount.check_restored_limits`).
        ``max_streams`` was held when the meta leader assigned the restore (a stream
        assignment from then on). Raises JSApiError 10028 / 10047 (the caller has the
        stream deleted, see :meth:`restore_failed`), 10062 when the stream's assignment is
        gone."""
        self._now = now_ns
        acc = self.accounts.get(key[0])
        sa = self.meta.streams.get(key)
        if acc is None or sa is None:
            raise E.api_error("JSStreamRestoreErrF", err="the stream was deleted during the restore")
        if not acc.byte_limited():
            return
        cfg = StreamConfig.from_json(sa.config)
        mem, file = acc.usage()
        others_mem, others_file = self.usage.others(key[0], (p for p in self._meta_peers() if p != self.me))
        for other, (memory, size) in self._installing.items():
            if other[0] == key[0] and other != key:
                if memory:
                    mem += size
                else:
                    file += size
        acc.check_restored_limits(cfg, restored, self._stream_configs(key[0], now_ns),
                                  (mem + others_mem, file + others_file))
        self._installing[key] = (cfg.storage == "memory", restored)

    def restore_attached(self, key: Key) -> None:
        """The restore of ``key`` that :meth:`restore_limits_check` admitted is attached
        (its stream's bytes count in the account's usage now) or abandoned."""
        self._installing.pop(key, None)

    def restore_answer(self, key: Key, reply: str, now_ns: int) -> list[Any]:
        """The restore of stream ``key`` is done: its info (at ``now_ns``) answers the
        client's last chunk (``stream_create_response``), and the stream's create advisory
        goes out."""
        self._now = now_ns
        self.restores.discard(key)
        acc = self.accounts.get(key[0])
        entry = acc.streams.get(key[1]) if acc is not None else None
        if entry is None:
            self._error(key[0], reply, E.STREAM_CREATE_RESPONSE, E.stream_not_found())
            return self._take()
        body = {"type": E.STREAM_CREATE_RESPONSE, **acc.stream_info(entry, self._now)}
        self._send(key[0], Outbound(reply, None, None, json_bytes(body)))
        self._stream_advisory(key[0], key[1], "create")
        return self._take()

    def _restore_stream(self, acc: JetStreamAccount, stream: str, reply: str, payload: bytes,
                        now: int) -> bool:
        """RESTORE on the meta leader (nats-server jetstream_cluster.go
        jsClusteredStreamRestoreRequest): the request's checks (as on one server, against
        every stream assignment of the account), then the peers are placed and the stream
        assigned with ``restore="data"`` and the first peer as its restorer and preferred
        leader; that peer answers the request with the deliver subject once it leads the
        stream's group (:class:`StartRestore`). A memory stream is refused (10062): its
        RAFT snapshot holds no messages, so its other peers could not take them."""
        rtype = E.STREAM_RESTORE_RESPONSE
        try:
            cfg = acc.restore_check(stream, payload, subjects=self._account_subjects(acc.name),
                                    exists=lambda name: (acc.name, name) in self.meta.streams
                                    or now - self._restore_proposed.get((acc.name, name), -RESTORE_PROPOSED_NS)
                                    < RESTORE_PROPOSED_NS)
            if cfg.storage == "memory":
                raise E.api_error("JSStreamRestoreErrF", err="a memory stream cannot be restored "
                                  "in clustered mode: restore it with file storage")
            acc.check_stream_bytes_limits(cfg)
            acc.check_stream_count_limits(cfg, self._other_streams(acc.name, cfg.name, now))
            if acc.byte_limited():
                acc.check_stream_reservation(cfg, self._stream_configs(acc.name, now), create=True)
            peers = self._place_new(acc.name, cfg)
        except E.JSApiError as err:
            self._error(acc.name, reply, rtype, err)
            return True
        sa = StreamAssignment(account=acc.name, name=cfg.name, config=cfg.to_json(),
                              group=group_name("S", acc.name, cfg.name, now, replicas=len(peers),
                                               storage=cfg.storage), peers=tuple(peers),
                              created_ns=now, reply=reply, preferred=peers[0], restore="data",
                              restored_by=peers[0])
        if len(self._restore_proposed) > 1024:
            self._restore_proposed.clear()
        self._restore_proposed[sa.key] = now     # a second RESTORE of the name meanwhile: 10130
        self._propose_meta(encode_assign_stream(sa), acc.name, reply, rtype)
        self._emit("jetstream_stream_assigned", account=acc.name, stream=cfg.name,
                   group=sa.group, peers=list(sa.peers), replicas=cfg.num_replicas)
        return True
