"""State and info answers (nats-server server/stream.go StreamState, StreamInfo, ClusterInfo;
server/consumer.go ConsumerInfo; server/jetstream.go AccountLimits, AccountInfo; PubAck)."""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any



from jetraft.jetstream.model.base import (
    API_LEVEL,
    _Model,
    _go_fields,
    gofield,
)
from jetraft.jetstream.model.stream import (
    StreamConfig,
)
from jetraft.jetstream.model.consumer import (
    ConsumerConfig,
)


# --- state and info ---------------------------------------------------------------------


@_go_fields
@dataclass
class LostStreamData(_Model):
    """``{"msgs": [seq...], "bytes": n}`` (server/store.go LostStreamData)."""

    msgs: list[int] = gofield("raw", factory=list)
    bytes: int = gofield("uint64")

    _GO_NAME = "LostStreamData"


@_go_fields
@dataclass
class StreamState(_Model):
    """A stream's state (server/store.go StreamState); times are ns since the epoch or None."""

    messages: int = gofield("uint64")
    bytes: int = gofield("uint64")
    first_seq: int = gofield("uint64")
    first_ts: int | None = gofield("time")
    last_seq: int = gofield("uint64")
    last_ts: int | None = gofield("time")
    num_subjects: int = gofield("int", omit=True)
    subjects: dict[str, int] | None = gofield("raw", omit=True)
    num_deleted: int = gofield("int", omit=True)
    deleted: list[int] | None = gofield("raw", omit=True)
    lost: LostStreamData | None = gofield("obj:LostStreamData", omit=True)
    consumer_count: int = gofield("int")

    _GO_NAME = "StreamState"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        for key in ("subjects", "deleted"):
            if key in out and not out[key]:
                del out[key]
        return out


@_go_fields
@dataclass
class PeerInfo(_Model):
    """One replica (server/stream.go PeerInfo): ``active`` is ns since last seen."""

    name: str = gofield("str")
    current: bool = gofield("bool")
    offline: bool = gofield("bool", omit=True)
    active: int = gofield("dur")
    lag: int = gofield("uint64", omit=True)
    peer: str = gofield("str")
    pending: bool = gofield("bool", omit=True)

    _GO_NAME = "PeerInfo"


@_go_fields
@dataclass
class ClusterInfo(_Model):
    """``cluster`` of stream/consumer info (server/stream.go ClusterInfo); the leader is not in ``replicas``."""

    name: str = gofield("str", omit=True)
    raft_group: str = gofield("str", omit=True)
    leader: str = gofield("str", omit=True)
    leader_since: int | None = gofield("time", omit=True)
    system_account: bool = gofield("bool", omit=True)
    traffic_account: str = gofield("str", omit=True)
    replicas: list[PeerInfo] = gofield("objlist:PeerInfo", omit=True)
    desired: dict[str, Any] | None = gofield("raw", omit=True)

    _GO_NAME = "ClusterInfo"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.leader_since is None:
            out.pop("leader_since", None)
        return out


@_go_fields
@dataclass
class StreamInfo(_Model):
    """STREAM.INFO/CREATE body (server/stream.go StreamInfo); ``created``/``ts`` ns since the epoch."""

    config: StreamConfig = gofield("obj:StreamConfig", factory=StreamConfig)
    created: int | None = gofield("time")
    state: StreamState = gofield("obj:StreamState", factory=StreamState)
    domain: str = gofield("str", omit=True)
    cluster: ClusterInfo | None = gofield("obj:ClusterInfo", omit=True)
    mirror: dict[str, Any] | None = gofield("raw", omit=True)
    sources: list[dict[str, Any]] | None = gofield("raw", omit=True)
    alternates: list[dict[str, Any]] | None = gofield("raw", omit=True)
    ts: int | None = gofield("time")

    _GO_NAME = "StreamInfo"


@_go_fields
@dataclass
class SequenceInfo(_Model):
    """``{"consumer_seq","stream_seq","last_active"?}`` (server/consumer.go SequenceInfo)."""

    consumer_seq: int = gofield("uint64")
    stream_seq: int = gofield("uint64")
    last_active: int | None = gofield("time", omit=True)

    _GO_NAME = "SequenceInfo"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.last_active is None:
            out.pop("last_active", None)
        return out


@_go_fields
@dataclass
class ConsumerInfo(_Model):
    """CONSUMER.INFO/CREATE body (server/consumer.go ConsumerInfo); durations ns, times ns since epoch."""

    stream_name: str = gofield("str")
    name: str = gofield("str")
    created: int | None = gofield("time")
    config: ConsumerConfig | None = gofield("obj:ConsumerConfig", omit=True)
    delivered: SequenceInfo = gofield("obj:SequenceInfo", factory=SequenceInfo)
    ack_floor: SequenceInfo = gofield("obj:SequenceInfo", factory=SequenceInfo)
    num_ack_pending: int = gofield("int")
    num_redelivered: int = gofield("int")
    num_waiting: int = gofield("int")
    num_pending: int = gofield("uint64")
    cluster: ClusterInfo | None = gofield("obj:ClusterInfo", omit=True)
    push_bound: bool = gofield("bool", omit=True)
    paused: bool = gofield("bool", omit=True)
    pause_remaining: int = gofield("dur", omit=True)
    ts: int | None = gofield("time")
    priority_groups: list[dict[str, Any]] | None = gofield("raw", omit=True)

    _GO_NAME = "ConsumerInfo"


@_go_fields
@dataclass
class PubAck(_Model):
    """Publish acknowledgement (server/stream.go PubAck): ``{"stream","seq","domain"?,"duplicate"?,...}``."""

    stream: str = gofield("str")
    seq: int = gofield("uint64")
    domain: str = gofield("str", omit=True)
    duplicate: bool = gofield("bool", omit=True)
    val: str = gofield("str", omit=True)
    batch: str = gofield("str", omit=True)
    count: int = gofield("uint64", omit=True)

    _GO_NAME = "PubAck"


@_go_fields
@dataclass
class AccountLimits(_Model):
    """JetStreamAccountLimits (server/jetstream.go); -1 = unlimited, bytes for the byte limits."""

    max_memory: int = gofield("int64", default=-1)
    max_storage: int = gofield("int64", default=-1)
    max_streams: int = gofield("int", default=-1)
    max_consumers: int = gofield("int", default=-1)
    max_ack_pending: int = gofield("int", default=-1)
    memory_max_stream_bytes: int = gofield("int64", default=-1)
    storage_max_stream_bytes: int = gofield("int64", default=-1)
    max_bytes_required: bool = gofield("bool")

    _GO_NAME = "JetStreamAccountLimits"


@_go_fields
@dataclass
class APIStats(_Model):
    """JetStreamAPIStats: ``{"level","total","errors","inflight"?}``."""

    level: int = gofield("int", default=API_LEVEL)
    total: int = gofield("uint64")
    errors: int = gofield("uint64")
    inflight: int = gofield("uint64", omit=True)

    _GO_NAME = "JetStreamAPIStats"


@_go_fields
@dataclass
class AccountInfo(_Model):
    """ACCOUNT.INFO body (JetStreamAccountStats, server/jetstream.go), without ``type``."""

    memory: int = gofield("uint64")
    storage: int = gofield("uint64")
    reserved_memory: int = gofield("uint64")
    reserved_storage: int = gofield("uint64")
    streams: int = gofield("int")
    consumers: int = gofield("int")
    limits: AccountLimits = gofield("obj:AccountLimits", factory=AccountLimits)
    domain: str = gofield("str", omit=True)
    api: APIStats = gofield("obj:APIStats", factory=APIStats)
    tiers: dict[str, Any] | None = gofield("raw", omit=True)

    _GO_NAME = "JetStreamAccountStats"
