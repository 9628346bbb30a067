"""JetStream advisories and metrics: ``$JS.EVENT.ADVISORY.>`` and ``$JS.EVENT.METRIC.>``.

Pure: each builder returns the :class:`~jetraft.jetstream.outbound.Outbound` message to
route in the account (subject, JSON body), field for field as nats-server publishes it
(server/jetstream_events.go, stream.go, consumer.go, jetstream_cluster.go,
jetstream_api.go). Every body starts with ``type``, ``id`` (a random 22-character
nuid) and ``timestamp`` (RFC 3339 UTC, nanoseconds); ``domain`` is present only when
the server has a JetStream domain.

===============================================  ==========================================
subject                                          ``type`` (``io.nats.jetstream.``...)
===============================================  ==========================================
``$JS.EVENT.ADVISORY.STREAM.CREATED.<s>``        ``advisory.v1.stream_action`` (``create``)
``$JS.EVENT.ADVISORY.STREAM.UPDATED.<s>``        ``advisory.v1.stream_action`` (``modify``)
``$JS.EVENT.ADVISORY.STREAM.DELETED.<s>``        ``advisory.v1.stream_action`` (``delete``)
``$JS.EVENT.ADVISORY.CONSUMER.CREATED.<s>.<c>``  ``advisory.v1.consumer_action`` (``create``)
``$JS.EVENT.ADVISORY.CONSUMER.DELETED.<s>.<c>``  ``advisory.v1.consumer_action`` (``delete``)
``$JS.EVENT.ADVISORY.API``                       ``advisory.v1.api_audit``
``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES..``  ``advisory.v1.max_deliver``
``$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED..``  ``advisory.v1.terminated``
``$JS.EVENT.METRIC.CONSUMER.ACK.<s>.<c>``        ``metric.v1.consumer_ack``
``$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<s>``  ``advisory.v1.stream_leader_elected``
``$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.<s>``    ``advisory.v1.stream_quorum_lost``
``$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED..``  ``advisory.v1.consumer_leader_elected``
``$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST..``    ``advisory.v1.consumer_quorum_lost``
``$JS.EVENT.ADVISORY.CONSUMER.PINNED..``         ``advisory.v1.consumer_group_pinned``
``$JS.EVENT.ADVISORY.CONSUMER.UNPINNED..``       ``advisory.v1.consumer_group_unpinned``
``$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<s>``  ``advisory.v1.stream_batch_abandoned``
===============================================  ==========================================

The leader-elected, quorum-lost and batch-abandoned advisories go to the stream's account
and, with an ``account`` field added, to the system account, as nats-server sends them. A consumer is
replicated in its stream's RAFT group, so its leader is the stream's: the consumer
advisories follow the stream's, one per consumer (nats-server jetstream_cluster.go
sendConsumerLeaderElectAdvisory, sendConsumerLostQuorumAdvisory).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from jetraft import gofmt
from jetraft.events import rfc3339_ns
from jetraft.jetstream.outbound import Outbound

__all__ = [
    "API_AUDIT", "Nuid", "api_audit", "consumer_action", "consumer_ack_metric", "max_deliver",
    "consumer_group_pinned", "consumer_group_unpinned", "stream_batch_abandoned",
    "consumer_leader_elected", "consumer_quorum_lost",
    "stream_action", "stream_leader_elected", "stream_quorum_lost", "stream_subject",
    "terminated",
]

ADVISORY_PREFIX = "$JS.EVENT.ADVISORY."
METRIC_PREFIX = "$JS.EVENT.METRIC."
API_AUDIT = ADVISORY_PREFIX + "API"

STREAM_ACTION_TYPE = "io.nats.jetstream.advisory.v1.stream_action"
CONSUMER_ACTION_TYPE = "io.nats.jetstream.advisory.v1.consumer_action"
API_AUDIT_TYPE = "io.nats.jetstream.advisory.v1.api_audit"
MAX_DELIVER_TYPE = "io.nats.jetstream.advisory.v1.max_deliver"
TERMINATED_TYPE = "io.nats.jetstream.advisory.v1.terminated"
ACK_METRIC_TYPE = "io.nats.jetstream.metric.v1.consumer_ack"
STREAM_LEADER_ELECTED_TYPE = "io.nats.jetstream.advisory.v1.stream_leader_elected"
STREAM_QUORUM_LOST_TYPE = "io.nats.jetstream.advisory.v1.stream_quorum_lost"
CONSUMER_LEADER_ELECTED_TYPE = "io.nats.jetstream.advisory.v1.consumer_leader_elected"
CONSUMER_QUORUM_LOST_TYPE = "io.nats.jetstream.advisory.v1.consumer_quorum_lost"
CONSUMER_PAUSE_TYPE = "io.nats.jetstream.advisory.v1.consumer_pause"
CONSUMER_GROUP_PINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_pinned"
CONSUMER_GROUP_UNPINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_unpinned"
STREAM_BATCH_ABANDONED_TYPE = "io.nats.jetstream.advisory.v1.stream_batch_abandoned"

#: stream/consumer action -> the subject's verb (nats-server JSAdvisoryStreamCreatedPre...)
_VERBS = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_PRE_LEN, _SEQ_LEN = 12, 10
_MAX_SEQ = 62 ** _SEQ_LEN


class Nuid:
    """Unique ids in nats-server's nuid form: 22 base-62 characters, a random 12-character
    prefix and a 10-character sequence that advances by a random step (a new prefix once
    it runs out)."""

    def __init__(self) -> None:
        self._new_prefix()

    def _new_prefix(self) -> None:
        self._pre = "".join(secrets.choice(_DIGITS) for _ in range(_PRE_LEN))
        self._seq = secrets.randbelow(_MAX_SEQ // 2)
        self._inc = 33 + secrets.randbelow(300)

    def next(self) -> str:
        """The next id."""
        self._seq += self._inc
        if self._seq >= _MAX_SEQ:
            self._new_prefix()
            self._seq += self._inc
        n, out = self._seq, []
        for _ in range(_SEQ_LEN):
            n, d = divmod(n, 62)
            out.append(_DIGITS[d])
        return self._pre + "".join(reversed(out))


_NUID = Nuid()


def _event(type_: str, now_ns: int, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "id": _NUID.next(), "timestamp": rfc3339_ns(now_ns), **fields}


def _out(subject: str, body: dict[str, Any], domain: str) -> Outbound:
    if domain:
        body["domain"] = domain
    return Outbound(subject, None, None, json.dumps(body, separators=(",", ":")).encode())


def stream_action(stream: str, action: str, now_ns: int, *, domain: str = "") -> Outbound:
    """``action`` (``create``, ``modify`` or ``delete``) of ``stream``:
    ``{type, id, timestamp, stream, action, domain?}`` on
    ``$JS.EVENT.ADVISORY.STREAM.{CREATED,UPDATED,DELETED}.<stream>`` (nats-server
    JSStreamActionAdvisory; ``template`` is never set, templates being gone)."""
    return _out(f"{ADVISORY_PREFIX}STREAM.{_VERBS[action]}.{stream}",
                _event(STREAM_ACTION_TYPE, now_ns, stream=stream, action=action), domain)


def consumer_action(stream: str, consumer: str, action: str, now_ns: int, *,
                    domain: str = "") -> Outbound:
    """``action`` (``create`` or ``delete``) of a consumer:
    ``{type, id, timestamp, stream, consumer, action, domain?}`` on
    ``$JS.EVENT.ADVISORY.CONSUMER.{CREATED,DELETED}.<stream>.<consumer>``
    (nats-server JSConsumerActionAdvisory)."""
    return _out(f"{ADVISORY_PREFIX}CONSUMER.{_VERBS[action]}.{stream}.{consumer}",
                _event(CONSUMER_ACTION_TYPE, now_ns, stream=stream, consumer=consumer,
                       action=action), domain)


def api_audit(server: str, client: dict[str, Any] | None, subject: str, request: bytes,
              response: bytes, now_ns: int, *, domain: str = "") -> Outbound:
    """One answered ``$JS.API`` request: ``{type, id, timestamp, server, client, subject,
    request?, response, domain?}`` on ``$JS.EVENT.ADVISORY.API`` (nats-server JSAPIAudit).
    ``server``: this server's name; ``client``: the requester's client info (nats-server
    ClientInfo: start, host, id, acc, user?, name?, lang, ver, server, kind, client_type)
    or None (``null``) when it is not known here; ``request``/``response``: the payloads
    as text (``request`` left out when empty)."""
    body = _event(API_AUDIT_TYPE, now_ns, server=server, client=client, subject=subject)
    if request:
        body["request"] = request.decode("utf-8", "replace")
    body["response"] = response.decode("utf-8", "replace")
    return _out(API_AUDIT, body, domain)


def max_deliver(stream: str, consumer: str, stream_seq: int, deliveries: int, now_ns: int, *,
                domain: str = "") -> Outbound:
    """Message ``stream_seq`` reached the consumer's max_deliver: ``{type, id, timestamp,
    stream, consumer, stream_seq, deliveries, domain?}`` on
    ``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`` (nats-server
    JSConsumerDeliveryExceededAdvisory)."""
    return _out(f"{ADVISORY_PREFIX}CONSUMER.MAX_DELIVERIES.{stream}.{consumer}",
                _event(MAX_DELIVER_TYPE, now_ns, stream=stream, consumer=consumer,
                       stream_seq=stream_seq, deliveries=deliveries), domain)


def consumer_pause(stream: str, consumer: str, paused: bool, pause_until: int | None, now_ns: int, *,
                   domain: str = "") -> Outbound:
    """A consumer was paused or resumed (its ``pause_until`` changed, or passed): ``{type, id,
    timestamp, stream, consumer, paused, pause_until, domain?}`` on
    ``$JS.EVENT.ADVISORY.CONSUMER.PAUSE.<stream>.<consumer>`` (nats-server
    JSConsumerPauseAdvisory; ``pause_until`` the zero time when unset)."""
    return _out(f"{ADVISORY_PREFIX}CONSUMER.PAUSE.{stream}.{consumer}",
                _event(CONSUMER_PAUSE_TYPE, now_ns, stream=stream, consumer=consumer, paused=paused,
                       pause_until=gofmt.format_time(pause_until)), domain)


def consumer_group_pinned(stream: str, consumer: str, account: str, group: str, pinned_id: str,
                          now_ns: int, *, domain: str = "") -> Outbound:
    """A pull request of priority group ``group`` was pinned: ``{type, id, timestamp,
    account?, stream, consumer, domain?, group, pinned_id}`` on
    ``$JS.EVENT.ADVISORY.CONSUMER.PINNED.<stream>.<consumer>`` (nats-server
    JSConsumerGroupPinnedAdvisory)."""
    return _out(f"{ADVISORY_PREFIX}CONSUMER.PINNED.{stream}.{consumer}",
                _group_event(CONSUMER_GROUP_PINNED_TYPE, now_ns, account, stream, consumer, domain,
                             group=group, pinned_id=pinned_id), "")


def consumer_group_unpinned(stream: str, consumer: str, account: str, group: str, reason: str,
                            now_ns: int, *, domain: str = "") -> Outbound:
    """The pin of priority group ``group`` ended, ``reason`` ``timeout`` or ``admin``
    (CONSUMER.UNPIN): ``{type, id, timestamp, account?, stream, consumer, domain?, group,
    reason}`` on ``$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.<stream>.<consumer>`` (nats-server
    JSConsumerGroupUnpinnedAdvisory)."""
    return _out(f"{ADVISORY_PREFIX}CONSUMER.UNPINNED.{stream}.{consumer}",
                _group_event(CONSUMER_GROUP_UNPINNED_TYPE, now_ns, account, stream, consumer, domain,
                             group=group, reason=reason), "")


def _group_event(type_: str, now_ns: int, account: str, stream: str, consumer: str, domain: str,
                 **fields: Any) -> dict[str, Any]:
    body = _event(type_, now_ns)
    if account:
        body["account"] = account
    body.update(stream=stream, consumer=consumer)
    if domain:
        body["domain"] = domain
    body.update(fields)
    return body


def terminated(stream: str, consumer: str, consumer_seq: int, stream_seq: int, deliveries: int,
               reason: str, now_ns: int, *, domain: str = "") -> Outbound:
    """A client answered ``+TERM``: ``{type, id, timestamp, stream, consumer, consumer_seq,
    stream_seq, deliveries, reason?, domain?}`` on
    ``$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>`` (nats-server
    JSConsumerDeliveryTerminatedAdvisory)."""
    body = _event(TERMINATED_TYPE, now_ns, stream=stream, consumer=consumer,
                  consumer_seq=consumer_seq, stream_seq=stream_seq, deliveries=deliveries)
    if reason:
        body["reason"] = reason
    return _out(f"{ADVISORY_PREFIX}CONSUMER.MSG_TERMINATED.{stream}.{consumer}", body, domain)


def consumer_ack_metric(stream: str, consumer: str, consumer_seq: int, stream_seq: int,
                        ack_time_ns: int, deliveries: int, now_ns: int, *,
                        domain: str = "") -> Outbound:
    """A sampled acknowledgement: ``{type, id, timestamp, stream, consumer, consumer_seq,
    stream_seq, ack_time (ns from delivery to ack), deliveries, domain?}`` on
    ``$JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>`` (nats-server JSConsumerAckMetric)."""
    return _out(f"{METRIC_PREFIX}CONSUMER.ACK.{stream}.{consumer}",
                _event(ACK_METRIC_TYPE, now_ns, stream=stream, consumer=consumer,
                       consumer_seq=consumer_seq, stream_seq=stream_seq,
                       ack_time=ack_time_ns, deliveries=deliveries), domain)


def stream_leader_elected(stream: str, leader: str, replicas: list[dict[str, Any]], now_ns: int,
                          *, account: str = "", domain: str = "") -> Outbound:
    """``leader`` leads ``stream`` now: ``{type, id, timestamp, account?, stream, leader,
    replicas, domain?}`` on ``$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>``
    (nats-server JSStreamLeaderElectedAdvisory; ``replicas``: the followers' peer info,
    ``{name, current, active, lag?, peer?}``). ``account`` is set in the system account's copy."""
    body = _event(STREAM_LEADER_ELECTED_TYPE, now_ns)
    if account:
        body["account"] = account
    body.update(stream=stream, leader=leader, replicas=replicas)
    return _out(f"{ADVISORY_PREFIX}STREAM.LEADER_ELECTED.{stream}", body, domain)


def stream_quorum_lost(stream: str, replicas: list[dict[str, Any]], now_ns: int, *,
                       account: str = "", domain: str = "") -> Outbound:
    """``stream``'s group has no quorum: ``{type, id, timestamp, account?, stream, replicas,
    domain?}`` on ``$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.<stream>`` (nats-server
    JSStreamQuorumLostAdvisory)."""
    body = _event(STREAM_QUORUM_LOST_TYPE, now_ns)
    if account:
        body["account"] = account
    body.update(stream=stream, replicas=replicas)
    return _out(f"{ADVISORY_PREFIX}STREAM.QUORUM_LOST.{stream}", body, domain)


def consumer_leader_elected(stream: str, consumer: str, leader: str, replicas: list[dict[str, Any]],
                            now_ns: int, *, account: str = "", domain: str = "") -> Outbound:
    """``leader`` leads ``consumer`` of ``stream`` now: ``{type, id, timestamp, account?, stream,
    consumer, leader, replicas, domain?}`` on
    ``$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.<stream>.<consumer>`` (nats-server
    JSConsumerLeaderElectedAdvisory). ``account`` is set in the system account's copy."""
    body = _event(CONSUMER_LEADER_ELECTED_TYPE, now_ns)
    if account:
        body["account"] = account
    body.update(stream=stream, consumer=consumer, leader=leader, replicas=replicas)
    return _out(f"{ADVISORY_PREFIX}CONSUMER.LEADER_ELECTED.{stream}.{consumer}", body, domain)


def consumer_quorum_lost(stream: str, consumer: str, replicas: list[dict[str, Any]], now_ns: int, *,
                         account: str = "", domain: str = "") -> Outbound:
    """``consumer``'s group has no quorum: ``{type, id, timestamp, account?, stream, consumer,
    replicas, domain?}`` on ``$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST.<stream>.<consumer>``
    (nats-server JSConsumerQuorumLostAdvisory)."""
    body = _event(CONSUMER_QUORUM_LOST_TYPE, now_ns)
    if account:
        body["account"] = account
    body.update(stream=stream, consumer=consumer, replicas=replicas)
    return _out(f"{ADVISORY_PREFIX}CONSUMER.QUORUM_LOST.{stream}.{consumer}", body, domain)


def stream_batch_abandoned(stream: str, batch: str, reason: str, now_ns: int, *, account: str = "",
                           domain: str = "") -> Outbound:
    """Atomic batch ``batch`` of ``stream`` was abandoned for ``reason`` (``timeout``,
    ``large``, ``incomplete`` or ``unsupported``): ``{type, id, timestamp, account?, stream,
    domain?, batch, reason}`` on ``$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>``
    (nats-server JSStreamBatchAbandonedAdvisory, sendStreamBatchAbandonedAdvisory).
    ``account`` is set in the system account's copy."""
    body = _event(STREAM_BATCH_ABANDONED_TYPE, now_ns)
    if account:
        body["account"] = account
    body["stream"] = stream
    if domain:
        body["domain"] = domain
    body.update(batch=batch, reason=reason)
    return _out(f"{ADVISORY_PREFIX}STREAM.BATCH_ABANDONED.{stream}", body, "")


def stream_subject(build: Any, stream: str) -> str:
    """The subject :func:`stream_leader_elected` or :func:`stream_quorum_lost` (``build``)
    publishes on for ``stream`` (to check for listeners before building it)."""
    verb = "LEADER_ELECTED" if build is stream_leader_elected else "QUORUM_LOST"
    return f"{ADVISORY_PREFIX}STREAM.{verb}.{stream}"
