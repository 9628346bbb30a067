"""The JetStream API data model: configs, infos, acks -- decoded, defaulted, validated.

Field for field as nats-server (2.15) reads and writes them:
- ``StreamConfig``, ``Placement``, ``SubjectTransform``, ``StreamInfo``, ``ClusterInfo``,
  ``PeerInfo``, ``PubAck`` -- server/stream.go, server/jetstream_cluster.go;
- ``StreamState`` -- server/store.go;
- ``ConsumerConfig``, ``ConsumerInfo``, ``SequenceInfo`` -- server/consumer.go;
- ``AccountLimits``, ``AccountInfo`` -- server/jetstream.go.

Conventions:
- each field is declared once, as a :func:`gofield` attribute, in the Go struct's order
  (which ``to_json()`` keeps);
- durations are integer nanoseconds (Go ``time.Duration``);
- timestamps are integer nanoseconds since the Unix epoch, UTC; ``None`` is Go's zero
  time, written ``"0001-01-01T00:00:00Z"`` (e.g. ``first_ts`` of an empty stream);
  written as RFC 3339 with up to 9 fraction digits, trailing zeros trimmed
  (Go ``time.RFC3339Nano``), e.g. ``"2026-11-22T03:54:36.123456789Z"``;
- ``to_json()`` emits what Go's ``encoding/json`` emits for the struct: every key, except
  ``omitempty`` ones when zero/empty;
- ``decode(data)`` reads a request body the way nats-server's strict decoder does
  (``unmarshalRequest``, ``DisallowUnknownFields``; strict is the default): an unknown key,
  a wrongly typed value, an integer outside its Go type's range (``int``, ``int32``,
  ``int64``, ``uint64``, ``time.Duration``; fractions and exponents included, quoted as the
  client wrote them: see :mod:`jetraft.jetstream.gojson`) or a bad enum string raises
  ``JSApiError`` 10025 "invalid JSON: ...", naming the field by its path from the request
  type (``CreateConsumerRequest.config.max_deliver``) as nats-server 2.15 does; mirrors and
  sources are checked as StreamSource structs and kept as the client's JSON;
- ``checked(...)`` applies nats-server's defaults and validation (checkStreamCfg,
  setConsumerConfigDefaults + checkConsumerCfg), raising ``JSApiError`` with its exact
  ``err_code`` and description; ``from_json`` is ``decode`` then ``checked``.

Checks that need other streams (cross-stream subject overlap, mirror/source existence,
cycles) or account limits are the caller's; this module is pure, no I/O.
"""

from jetraft.jetstream.model.base import (
    API_LEVEL,
    DEFAULT_ACK_WAIT,
    DEFAULT_DUPLICATE_WINDOW,
    DEFAULT_MAX_ACK_PENDING,
    DEFAULT_MAX_WAITING,
    DEFAULT_PINNED_TTL,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    META_REQUIRED_LEVEL,
    META_SERVER_LEVEL,
    META_SERVER_VERSION,
    MILLISECOND,
    SECOND,
    SOURCE_HEALTH_HB,
    STREAM_MAX_REPLICAS,
    SUBJECTS_TOO_COMPLEX,
    UNSUPPORTED,
    gofield,
    is_valid_asset_name,
    is_valid_name,
    raw_json,
)
from jetraft.jetstream.model.stream import (
    ConsumerLimits,
    ExternalStream,
    Placement,
    RePublish,
    StreamConfig,
    StreamConsumerSource,
    StreamSource,
    SubjectTransform,
)
from jetraft.jetstream.model.consumer import (
    ConsumerConfig,
)
from jetraft.jetstream.model.info import (
    APIStats,
    AccountInfo,
    AccountLimits,
    ClusterInfo,
    ConsumerInfo,
    LostStreamData,
    PeerInfo,
    PubAck,
    SequenceInfo,
    StreamInfo,
    StreamState,
)

__all__ = [
    "APIStats",
    "API_LEVEL",
    "AccountInfo",
    "AccountLimits",
    "ClusterInfo",
    "ConsumerConfig",
    "ConsumerInfo",
    "ConsumerLimits",
    "DEFAULT_ACK_WAIT",
    "DEFAULT_DUPLICATE_WINDOW",
    "DEFAULT_MAX_ACK_PENDING",
    "DEFAULT_MAX_WAITING",
    "DEFAULT_PINNED_TTL",
    "ExternalStream",
    "LostStreamData",
    "MAX_DESCRIPTION_LEN",
    "MAX_METADATA_LEN",
    "MAX_NAME_LEN",
    "META_REQUIRED_LEVEL",
    "META_SERVER_LEVEL",
    "META_SERVER_VERSION",
    "MILLISECOND",
    "PeerInfo",
    "Placement",
    "PubAck",
    "RePublish",
    "SECOND",
    "SOURCE_HEALTH_HB",
    "STREAM_MAX_REPLICAS",
    "SUBJECTS_TOO_COMPLEX",
    "SequenceInfo",
    "StreamConfig",
    "StreamConsumerSource",
    "StreamInfo",
    "StreamSource",
    "StreamState",
    "SubjectTransform",
    "UNSUPPORTED",
    "gofield",
    "is_valid_asset_name",
    "is_valid_name",
    "raw_json",
]
