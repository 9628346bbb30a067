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

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from jetraft import gofmt
from jetraft.jetstream import errors as E
from jetraft.jetstream import gojson
from jetraft.jetstream.errors import JSApiError
from jetraft.protocol.subjects import is_valid_literal_subject, is_valid_subject, subject_matches
from jetraft.protocol.subjects import (
    OverlapWorkExceeded,
    filters_overlap,
    first_covered_filter,
    first_invalid_filter,
    first_overlapping_pair,
)
from jetraft.protocol.subjects import subjects_overlap as _collide

__all__ = [
    "API_LEVEL",
    "MAX_DESCRIPTION_LEN",
    "MAX_METADATA_LEN",
    "MAX_NAME_LEN",
    "UNSUPPORTED",
    "AccountInfo",
    "AccountLimits",
    "ClusterInfo",
    "ConsumerConfig",
    "ConsumerInfo",
    "PeerInfo",
    "Placement",
    "PubAck",
    "SequenceInfo",
    "StreamConfig",
    "StreamInfo",
    "StreamState",
    "SubjectTransform",
    "is_valid_asset_name",
    "is_valid_name",
    "raw_json",
]

SECOND = 1_000_000_000
MILLISECOND = 1_000_000
#: JSMaxNameLen, JSMaxDescriptionLen, JSMaxMetadataLen (server/jetstream_api.go).
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
#: StreamMaxReplicas (server/stream.go).
STREAM_MAX_REPLICAS = 5
#: Refusal (10052) of subjects whose overlap check would exceed its work bound
#: (jetraft only: protocol/subjects.py OVERLAP_STEPS_PER_NODE; nats-server has no bound).
SUBJECTS_TOO_COMPLEX = "subjects too complex to check for overlap"
#: How a refused setting jetraft does not act on is described: "<setting> is not supported
#: by jetraft" (StreamConfig.check_supported, ConsumerConfig.check_supported).
UNSUPPORTED = E.UNSUPPORTED
#: First tokens of the subjects that can overlap "$JS.>", "$JSC.>", "$NRG.>" or "$SYS.>".
_API_HEADS = frozenset(("$JS", "$JSC", "$NRG", "$SYS", "*", ">"))
#: StreamDefaultDuplicatesWindow (server/stream.go): 2 minutes.
DEFAULT_DUPLICATE_WINDOW = 2 * 60 * SECOND
#: JsAckWaitDefault, JsDefaultMaxAckPending, JsDefaultPinnedTTL (server/consumer.go).
DEFAULT_ACK_WAIT = 30 * SECOND
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_PINNED_TTL = 2 * 60 * SECOND
#: JSWaitQueueDefaultMax (server/jetstream_api.go): default max_waiting of a pull consumer.
DEFAULT_MAX_WAITING = 512
#: sourceHealthHB (server/stream.go): heartbeat forced by ack_policy flow_control.
SOURCE_HEALTH_HB = SECOND
#: JSApiLevel (server/jetstream_versioning.go) and the metadata keys it fills.
API_LEVEL = 5
META_REQUIRED_LEVEL = "_nats.req.level"
META_SERVER_VERSION = "_nats.ver"
META_SERVER_LEVEL = "_nats.level"

_GROUP_NAME = re.compile(r"^[a-zA-Z0-9/_=-]{1,16}$")


# --- names, time ---------------------------------------------------------------------


def is_valid_name(name: str) -> bool:
    """nats-server ``isValidName``: non-empty, none of space, \\t \\r \\n \\f ``.`` ``*`` ``>``."""
    return bool(name) and not any(c in name for c in " \t\r\n\f.*>")


def is_valid_asset_name(name: str) -> bool:
    """nats-server ``isValidAssetName`` (streams, consumers): :func:`is_valid_name` and no ``\\`` ``/``."""
    return is_valid_name(name) and "\\" not in name and "/" not in name


# --- strict decoding (Go encoding/json with DisallowUnknownFields) -----------------------


def _json_kind(value: Any) -> str:
    """Go's name for a decoded value's JSON kind (``number``, ``string``, ``array``...)."""
    return gojson.json_kind(value)


def _type_error(value: Any, path: str, gotype: str, *, element: bool = False) -> JSApiError:
    """Go's UnmarshalTypeError as nats-server 2.15 words it: ``json: cannot unmarshal <kind>
    into Go struct field <path> of type <gotype>``, where ``path`` is the request type and
    the JSON keys down to the value (``CreateConsumerRequest.config.max_deliver``); an
    array element (``element``) reads ``into <path>.<index> of type ...``. A number is
    quoted as written when ``gotype`` is an integer type (``number 1e999``)."""
    kind = gojson.json_kind(value)
    if kind == "number" and gotype in gojson.INT_RANGES:
        kind = f"number {gojson.number_literal(value)}"
    where = path if element else f"Go struct field {path}"
    return E.invalid_json(f"json: cannot unmarshal {kind} into {where} of type {gotype}")


def raw_json(value: Any) -> str:
    """The JSON text of ``value`` as Go hands it to an UnmarshalJSON method: numbers as
    written; arrays and objects compact (Go keeps the client's spacing)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return gojson.number_literal(value)
    try:
        return gojson.with_headroom(json.dumps, value, separators=(",", ":"), ensure_ascii=False)
    except (RecursionError, ValueError):     # not a value gojson decoded: deeper than it allows
        return "[...]" if isinstance(value, list) else "{...}"


@dataclass(frozen=True)
class _F:
    """One JSON field: key, attribute, kind, omitempty."""

    key: str
    attr: str
    kind: str  # str int32 int int64 uint64 bool dur time? strlist durlist map obj:<Name> objlist:<Name>
    #            source sourcelist (raw StreamSource JSON, checked) enum raw
    omit: bool = False
    enum: tuple[str, ...] = ()
    enum_error: str = ""  # "quoted" (can not unmarshal %q) or a literal message


#: Go integer type of each integer field kind.
_INT_KINDS = {"int": "int", "int32": "int32", "int64": "int64", "uint64": "uint64", "dur": "time.Duration"}


def _decode_value(f: _F, value: Any, path: str, *, element: bool = False) -> Any:
    """``value`` of field ``f`` read as Go reads it into the field's type; ``path`` names the
    field in errors (see :func:`_type_error`). Raises JSApiError 10025."""
    kind = f.kind
    if isinstance(value, str):
        value = str.__str__(value)  # a str-Enum (nats-py's policies) reads as its value
    if kind == "enum":
        if value is None or not isinstance(value, str) or (
            (value.lower() if f.enum_error == "lower" else value) not in f.enum
        ):
            if f.enum_error in ("quoted", "lower"):
                raise E.invalid_json(f"can not unmarshal {gofmt.quote(raw_json(value))}")
            if f.enum_error.startswith("raw:"):
                raise E.invalid_json(f.enum_error[4:] + raw_json(value))
            raise E.invalid_json(f.enum_error)
        return value.lower() if f.enum_error == "lower" else value
    if value is None:
        return _zero(f)
    if kind == "str":
        if not isinstance(value, str):
            raise _type_error(value, path, "string", element=element)
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise _type_error(value, path, "bool", element=element)
        return value
    if kind in _INT_KINDS:
        gotype = _INT_KINDS[kind]
        number = gojson.go_int(value, gotype)
        if number is None:
            raise _type_error(value, path, gotype, element=element)
        return number
    if kind == "time":
        if not isinstance(value, str):
            raise _type_error(value, path, "time.Time", element=element)
        try:
            return gofmt.parse_time(value)
        except ValueError as exc:
            raise E.invalid_json(str(exc)) from None
    if kind in ("strlist", "durlist"):
        if not isinstance(value, list):
            raise _type_error(value, path, "[]string" if kind == "strlist" else "[]time.Duration",
                              element=element)
        inner = _F(f.key, f.attr, "str" if kind == "strlist" else "dur")
        return [_decode_value(inner, v, f"{path}.{i}", element=True) if v is not None else _zero(inner)
                for i, v in enumerate(value)]
    if kind == "map":
        if not isinstance(value, dict):
            raise _type_error(value, path, "map[string]string", element=element)
        out = {}
        for k, v in value.items():
            if v is not None and not isinstance(v, str):
                raise _type_error(v, f"{path}.{k}", "string")
            out[k] = v or ""
        return out
    if kind.startswith("obj:"):
        cls = _MODELS[kind[4:]]
        if not isinstance(value, dict):
            raise _type_error(value, path, f"server.{cls._GO_NAME}", element=element)
        return cls.decode(value, path=path)
    if kind.startswith("objlist:"):
        cls = _MODELS[kind[8:]]
        if not isinstance(value, list):
            raise _type_error(value, path, f"[]*server.{cls._GO_NAME}", element=element)
        return [cls.decode(v, path=f"{path}.{i}") if isinstance(v, dict) else None
                for i, v in enumerate(value)]
    if kind == "source":        # a StreamSource: checked, kept as the client's JSON
        if not isinstance(value, dict):
            raise _type_error(value, path, "server.StreamSource", element=element)
        StreamSource.decode(value, path=path)
        return value
    if kind == "sourcelist":
        if not isinstance(value, list):
            raise _type_error(value, path, "[]*server.StreamSource", element=element)
        for i, v in enumerate(value):
            if v is not None:
                _decode_value(_F(f.key, f.attr, "source"), v, f"{path}.{i}", element=True)
        return value
    return value  # raw


def _zero(f: _F) -> Any:
    if f.kind in ("str",):
        return ""
    if f.kind == "bool":
        return False
    if f.kind in ("int", "int32", "int64", "uint64", "dur"):
        return 0
    return None


def _encode_value(f: _F, value: Any) -> Any:
    if f.kind == "time":
        return gofmt.format_time(value)
    if f.kind.startswith("obj:"):
        return value.to_json()
    if f.kind.startswith("objlist:"):
        return [v.to_json() if v is not None else None for v in value]
    if f.kind in ("strlist", "durlist"):
        return list(value)
    if f.kind == "map":
        return dict(value)
    return value


def _is_empty(f: _F, value: Any) -> bool:
    if value is None:
        return True
    if f.kind in ("strlist", "durlist", "map", "objlist") or f.kind.startswith("objlist:"):
        return len(value) == 0
    if f.kind.startswith("obj:"):
        return False  # a pointer: omitted only when nil
    if f.kind == "time":
        return False  # a struct: never empty for omitempty
    return not value


class _Model:
    """Spec-driven JSON mapping shared by the dataclasses below."""

    #: The JSON fields in the Go struct's order, from the :func:`gofield` attributes (:func:`_go_fields`).
    _FIELDS: ClassVar[tuple[_F, ...]] = ()
    _GO_NAME: ClassVar[str] = ""
    #: Keys accepted on input but not kept (request-only flags), with their field kind.
    _IGNORED: ClassVar[dict[str, str]] = {}

    @classmethod
    def decode(cls, data: dict[str, Any], *, path: str | None = None) -> Any:
        """Read ``data`` as nats-server's strict decoder does; no defaults, no validation.

        ``path`` names this struct in type errors: the request type and the keys leading
        here (``"CreateConsumerRequest.config"``); by default the Go type's name. Raises
        ``JSApiError`` 10025 for an unknown key, a mistyped value, an integer outside its
        Go type's range or a bad enum (the first in the object's order, as Go reports it).
        """
        if not isinstance(data, dict):
            raise E.invalid_json(f"json: cannot unmarshal {_json_kind(data)} into Go value of type server.{cls._GO_NAME}")
        base = path or cls._GO_NAME or cls.__name__
        by_key = {f.key: f for f in cls._FIELDS}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            f = by_key.get(key)
            if f is None:
                if key in cls._IGNORED:
                    _decode_value(_F(key, key, cls._IGNORED[key]), value, f"{base}.{key}")
                    continue
                raise E.invalid_json(f"json: unknown field {json.dumps(key)}")
            kwargs[f.attr] = _decode_value(f, value, f"{base}.{key}")
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        """The JSON object nats-server writes for this struct (omitempty honoured)."""
        out: dict[str, Any] = {}
        for f in self._FIELDS:
            value = getattr(self, f.attr)
            if f.omit and _is_empty(f, value):
                continue
            if value is None and not (f.kind == "time"):
                out[f.key] = None
                continue
            out[f.key] = _encode_value(f, value)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Any:
        """Decode ``data`` (strict); subclasses with validation also apply ``checked``."""
        return cls.decode(data)

    def copy(self, **changes: Any) -> Any:
        """A deep-enough copy with ``changes`` applied (lists and dicts are copied)."""
        obj = dataclasses.replace(self, **changes)
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, list):
                setattr(obj, f.name, list(v))
            elif isinstance(v, dict):
                setattr(obj, f.name, dict(v))
        return obj


_M = TypeVar("_M", bound=_Model)
#: Key of a dataclass field's metadata holding its JSON field record (see :func:`gofield`).
_SPEC = "jetraft.gofield"


def gofield(kind: str, *, omit: bool = False, key: str = "", default: Any = dataclasses.MISSING,
            factory: Callable[[], Any] | None = None, enum: tuple[str, ...] = (), enum_error: str = "") -> Any:
    """A JSON field of a model, declared once as its dataclass attribute:
    ``max_msgs: int = gofield("int64")``.

    ``kind``, ``omit`` (Go's ``omitempty``), ``enum`` and ``enum_error`` are those of
    :class:`_F`; ``key`` is the JSON key when it is not the attribute's name. The default
    is ``default``, else ``factory()``, else the zero value of ``kind`` (``""``, ``0``,
    ``False``, ``[]`` for a list kind, else ``None``). :func:`_go_fields` collects the
    fields into the class's ``_FIELDS``, in declaration order (the Go struct's order,
    which ``to_json`` keeps)."""
    spec = _F(key, "", kind, omit, enum, enum_error)
    metadata = {_SPEC: spec}
    if default is not dataclasses.MISSING:
        return field(default=default, metadata=metadata)
    if factory is None and (kind in ("strlist", "durlist") or kind.startswith("objlist:")):
        factory = list
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default="" if kind == "enum" else _zero(spec), metadata=metadata)


def _go_fields(cls: type[_M]) -> type[_M]:
    """Class decorator over ``@dataclass``: sets ``_FIELDS`` from the class's
    :func:`gofield` attributes, in declaration order. Any other attribute must be a
    request-only flag listed in ``_IGNORED`` (``StreamConfig.pedantic``)."""
    specs = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SPEC)
        if spec is None:
            if f.name not in cls._IGNORED:
                raise TypeError(f"{cls.__name__}.{f.name} is neither a gofield nor in _IGNORED")
            continue
        specs.append(dataclasses.replace(spec, key=spec.key or f.name, attr=f.name))
    cls._FIELDS = tuple(specs)
    return cls


# --- small nested types ---------------------------------------------------------------


@_go_fields
@dataclass
class Placement(_Model):
    """``{"cluster","tags","preferred"}`` all omitempty (server/jetstream_cluster.go Placement)."""

    cluster: str = gofield("str", omit=True)
    tags: list[str] = gofield("strlist", omit=True)
    preferred: str = gofield("str", omit=True)

    _GO_NAME = "Placement"

    def is_empty(self) -> bool:
        """True for ``{}`` -- nats-server drops such a placement (checkStreamCfg)."""
        return not (self.cluster or self.tags or self.preferred)


@_go_fields
@dataclass
class SubjectTransform(_Model):
    """``{"src","dest"}`` (SubjectTransformConfig; neither omitempty)."""

    src: str = gofield("str")
    dest: str = gofield("str")

    _GO_NAME = "SubjectTransformConfig"


@_go_fields
@dataclass
class RePublish(_Model):
    """``{"src"?, "dest", "headers_only"?}`` (server/stream.go RePublish)."""

    src: str = gofield("str", omit=True)
    dest: str = gofield("str")
    headers_only: bool = gofield("bool", omit=True)

    _GO_NAME = "RePublish"


@_go_fields
@dataclass
class ConsumerLimits(_Model):
    """``{"inactive_threshold"? (ns), "max_ack_pending"?}`` (StreamConsumerLimits)."""

    inactive_threshold: int = gofield("dur", omit=True)
    max_ack_pending: int = gofield("int", omit=True)

    _GO_NAME = "StreamConsumerLimits"


@_go_fields
@dataclass
class ExternalStream(_Model):
    """``{"api", "deliver"}`` (server/stream.go ExternalStream; neither omitempty)."""

    api: str = gofield("str")
    deliver: str = gofield("str")

    _GO_NAME = "ExternalStream"


@_go_fields
@dataclass
class StreamConsumerSource(_Model):
    """``{"name"?, "deliver_subject"?}`` (server/stream.go StreamConsumerSource)."""

    name: str = gofield("str", omit=True)
    deliver_subject: str = gofield("str", omit=True)

    _GO_NAME = "StreamConsumerSource"


@_go_fields
@dataclass
class StreamSource(_Model):
    """A mirror or source (server/stream.go StreamSource). jetraft keeps mirrors and
    sources as the client's JSON; this type only checks them as nats-server decodes them
    (unknown keys, types, integer ranges)."""

    name: str = gofield("str")
    opt_start_seq: int = gofield("uint64", omit=True)
    opt_start_time: int | None = gofield("time", omit=True)
    filter_subject: str = gofield("str", omit=True)
    subject_transforms: list[SubjectTransform | None] = gofield("objlist:SubjectTransform", omit=True)
    external: ExternalStream | None = gofield("obj:ExternalStream", omit=True)
    consumer: StreamConsumerSource | None = gofield("obj:StreamConsumerSource", omit=True)

    _GO_NAME = "StreamSource"


# --- StreamConfig -----------------------------------------------------------------------

_RETENTION = ("limits", "interest", "workqueue")
_STORAGE = ("file", "memory")
_DISCARD = ("old", "new")
_COMPRESSION = ("none", "s2")
_PERSIST = ("default", "async")


@_go_fields
@dataclass
class StreamConfig(_Model):
    """A stream's configuration (server/stream.go StreamConfig).

    Zero values are Go's; ``checked()`` turns them into nats-server's defaults
    (``max_*`` 0 -> -1, ``duplicate_window`` 0 -> 2 min (or max_age if smaller),
    ``num_replicas`` 0 -> 1, ``storage`` -> file, ``subjects`` [] -> [name]).
    ``mirror`` and ``sources`` are kept as raw JSON objects; jetraft neither mirrors nor
    sources, and refuses them with every other setting it does not act on
    (:meth:`check_supported`, called by the API after ``checked()``).
    ``pedantic`` is the request flag (StreamConfigRequest), never written.
    """

    name: str = gofield("str")
    description: str = gofield("str", omit=True)
    subjects: list[str] = gofield("strlist", omit=True)
    retention: str = gofield("enum", default="limits", enum=_RETENTION, enum_error="quoted")
    max_consumers: int = gofield("int")
    max_msgs: int = gofield("int64")
    max_bytes: int = gofield("int64")
    max_age: int = gofield("dur")
    max_msgs_per_subject: int = gofield("int64")
    max_msg_size: int = gofield("int32", omit=True)
    discard: str = gofield("enum", default="old", enum=_DISCARD, enum_error="lower")
    storage: str = gofield("enum", enum=_STORAGE, enum_error="quoted")
    num_replicas: int = gofield("int")
    no_ack: bool = gofield("bool", omit=True)
    duplicate_window: int = gofield("dur", omit=True)
    placement: Placement | None = gofield("obj:Placement", omit=True)
    mirror: dict[str, Any] | None = gofield("source", omit=True)
    sources: list[dict[str, Any]] | None = gofield("sourcelist", omit=True)
    compression: str = gofield("enum", default="none", enum=_COMPRESSION, enum_error="unknown compression algorithm")
    first_seq: int = gofield("uint64", omit=True)
    subject_transform: SubjectTransform | None = gofield("obj:SubjectTransform", omit=True)
    republish: RePublish | None = gofield("obj:RePublish", omit=True)
    allow_direct: bool = gofield("bool")
    mirror_direct: bool = gofield("bool")
    discard_new_per_subject: bool = gofield("bool", omit=True)
    sealed: bool = gofield("bool")
    deny_delete: bool = gofield("bool")
    deny_purge: bool = gofield("bool")
    allow_rollup_hdrs: bool = gofield("bool")
    consumer_limits: ConsumerLimits = gofield("obj:ConsumerLimits", factory=ConsumerLimits)
    allow_msg_ttl: bool = gofield("bool")
    subject_delete_marker_ttl: int = gofield("dur", omit=True)
    allow_msg_counter: bool = gofield("bool", omit=True)
    allow_atomic: bool = gofield("bool", omit=True)
    allow_msg_schedules: bool = gofield("bool", omit=True)
    persist_mode: str = gofield("enum", omit=True, enum=("default", "async", ""), enum_error="quoted")
    allow_batched: bool = gofield("bool", omit=True)
    metadata: dict[str, str] | None = gofield("map", omit=True)
    pedantic: bool = False

    _GO_NAME = "StreamConfigRequest"
    _IGNORED: ClassVar[dict[str, str]] = {"pedantic": "bool"}

    @classmethod
    def decode(cls, data: dict[str, Any], *, path: str | None = None) -> StreamConfig:
        """Strict decode of a STREAM.CREATE/UPDATE body (StreamConfigRequest); see module doc.
        ``mirror`` and ``sources`` are checked as StreamSource structs and kept as given."""
        cfg = super().decode(data, path=path)
        if isinstance(data, dict):
            if "consumer_limits" in data and data["consumer_limits"] is None:
                cfg.consumer_limits = ConsumerLimits()
            cfg.pedantic = bool(data.get("pedantic"))
        return cfg

    @classmethod
    def from_json(cls, data: dict[str, Any], *, pedantic: bool | None = None, max_duplicates: int = 0) -> StreamConfig:
        """Decode (strict) then :meth:`checked`; ``pedantic`` defaults to the body's flag."""
        cfg = cls.decode(data)
        return cfg.checked(pedantic=cfg.pedantic if pedantic is None else pedantic, max_duplicates=max_duplicates)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.persist_mode == "":
            out.pop("persist_mode", None)
        return out

    def checked(self, *, pedantic: bool = False, max_duplicates: int = 0) -> StreamConfig:
        """Return a normalized copy, as nats-server ``checkStreamCfg`` (server/stream.go).

        ``max_duplicates`` is the server's ``JetStreamLimits.Duplicates`` (ns; 0 = none).
        Raises JSApiError: 10052 (500) with checkStreamCfg's message for each refusal,
        10133 for negative replicas, 10157 in pedantic mode, 10034/10031/10143/... for
        mirror misuse. Cross-stream checks are not made here.
        """
        bad = E.stream_invalid_config
        if not is_valid_asset_name(self.name):
            raise bad("stream name is required and can not contain '.', '*', '>', '\\', '/'")
        if len(self.name.encode()) > MAX_NAME_LEN:
            raise bad(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
        if len(self.description.encode()) > MAX_DESCRIPTION_LEN:
            raise bad(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
        if _metadata_len(self.metadata) > MAX_METADATA_LEN:
            raise bad(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")
        cfg = self.copy()
        if cfg.placement is not None:
            cfg.placement = cfg.placement.copy()
        if not cfg.storage:
            cfg.storage = "file"
        if cfg.num_replicas == 0:
            cfg.num_replicas = 1
        if cfg.num_replicas > STREAM_MAX_REPLICAS:
            raise bad(f"maximum replicas is {STREAM_MAX_REPLICAS}")
        if cfg.num_replicas < 0:
            raise E.replicas_count_negative()
        for attr in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
            value = getattr(cfg, attr)
            if value == 0 or value < -1:
                if pedantic and value < -1:
                    name = "max_msgs_per_subject" if attr == "max_msgs_per_subject" else attr
                    raise E.api_error("JSPedanticErrF", err=f"{name} must be set to -1")
                setattr(cfg, attr, -1)
        if cfg.max_age < 0:
            raise bad("max age can not be negative")
        if cfg.max_age != 0 and cfg.max_age < 100 * MILLISECOND:
            raise bad("max age needs to be >= 100ms")
        if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
            window = DEFAULT_DUPLICATE_WINDOW
            if max_duplicates > 0 and window > max_duplicates:
                if pedantic:
                    raise E.api_error("JSPedanticErrF", err="duplicate window limits are higher than current limits")
                window = max_duplicates
            if cfg.max_age != 0 and cfg.max_age < window:
                if pedantic:
                    raise E.api_error("JSPedanticErrF", err="duplicate window cannot be bigger than max age")
                cfg.duplicate_window = cfg.max_age
            else:
                cfg.duplicate_window = window
        if cfg.duplicate_window < 0:
            raise bad("duplicates window can not be negative")
        if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
            raise bad("duplicates window can not be larger then max age")
        if max_duplicates > 0 and cfg.duplicate_window > max_duplicates:
            raise bad(f"duplicates window can not be larger then server limit of {gofmt.duration(max_duplicates)}")
        if 0 < cfg.duplicate_window < 100 * MILLISECOND:
            raise bad("duplicates window needs to be >= 100ms")
        if cfg.deny_purge and cfg.allow_rollup_hdrs:
            raise bad("roll-ups require the purge permission")
        if cfg.allow_msg_counter:
            if cfg.discard == "new":
                raise bad("counter stream cannot use discard new")
            if cfg.allow_msg_ttl:
                raise bad("counter stream cannot use message TTLs")
            if cfg.allow_msg_schedules:
                raise bad("counter stream cannot use message schedules")
            if cfg.retention != "limits":
                raise bad("counter stream can only use limits retention")
        if cfg.discard_new_per_subject:
            if cfg.discard != "new":
                raise bad("discard new per subject requires discard new policy to be set")
            if cfg.max_msgs_per_subject <= 0:
                raise bad("discard new per subject requires max msgs per subject > 0")
        if cfg.subject_delete_marker_ttl > 0:
            if cfg.subject_delete_marker_ttl < SECOND:
                raise bad("subject delete marker TTL must be at least 1 second")
            if not cfg.allow_msg_ttl:
                if pedantic:
                    raise bad("subject delete marker cannot be set if message TTLs are disabled")
                cfg.allow_msg_ttl = True
            if not cfg.allow_rollup_hdrs:
                if pedantic:
                    raise bad("subject delete marker cannot be set if roll-ups are disabled")
                cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
        elif cfg.subject_delete_marker_ttl < 0:
            raise bad("subject delete marker TTL must not be negative")
        if cfg.allow_msg_schedules:
            if cfg.discard == "new":
                raise bad("message scheduling cannot use discard new")
            if not cfg.allow_rollup_hdrs:
                if pedantic:
                    raise bad("message scheduling cannot be set if roll-ups are disabled")
                cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
        if cfg.persist_mode == "async":
            if cfg.storage != "file":
                raise bad("async persist mode is only supported on file storage")
            if cfg.num_replicas > 1:
                raise bad("async persist mode is not supported on replicated streams")
            if cfg.allow_atomic:
                raise bad("async persist mode is not supported with atomic batch publish")
        if cfg.mirror is not None:
            if cfg.first_seq > 0:
                raise E.api_error("JSMirrorWithFirstSeqErr")
            if cfg.subjects:
                raise E.api_error("JSMirrorWithSubjectsErr")
            if cfg.sources:
                raise E.api_error("JSMirrorWithSourcesErr")
            if cfg.allow_msg_counter:
                raise E.api_error("JSMirrorWithCountersErr")
            if cfg.allow_atomic:
                raise E.api_error("JSMirrorWithAtomicPublishErr")
            if cfg.allow_batched:
                raise E.api_error("JSMirrorWithBatchPublishErr")
            if cfg.allow_msg_schedules:
                raise E.api_error("JSMirrorWithMsgSchedulesErr")
        if cfg.sources and cfg.allow_msg_schedules:
            raise E.api_error("JSSourceWithMsgSchedulesErr")
        for src in cfg.sources or ():
            if not isinstance(src, dict) or not is_valid_asset_name(str(src.get("name") or "")):
                raise E.api_error("JSSourceInvalidStreamName")
        if not cfg.subjects:
            if cfg.mirror is None and not cfg.sources:
                cfg.subjects = [cfg.name]
        else:
            # The first overlapping pair as nats-server's pairwise loop finds it, from a trie
            # walk (protocol/subjects.py); the per-subject checks below keep their order.
            try:
                pair = first_overlapping_pair(cfg.subjects)
            except OverlapWorkExceeded:
                pair = None
                too_complex = True
            else:
                too_complex = False
            invalid = first_invalid_filter(cfg.subjects)
            seen: set[str] = set()
            for i, subj in enumerate(cfg.subjects):
                if i == invalid:
                    raise bad("invalid subject")
                if subj in seen:
                    raise bad("duplicate subjects detected")
                if subj == ">":
                    if not cfg.no_ack:
                        raise bad("capturing all subjects requires no-ack to be true")
                    if cfg.num_replicas != 1:
                        raise bad("capturing all subjects requires replicas of 1")
                if not cfg.no_ack and subj[0] in "$*>" and subj.split(".", 1)[0] in _API_HEADS:
                    for namespace in ("$JS.>", "$JSC.>", "$NRG.>"):
                        if _collide(subj, namespace) and not subject_matches("$JS.EVENT.>", subj):
                            raise bad("subjects that overlap with jetstream api require no-ack to be true")
                    if _collide(subj, "$SYS.>") and not subject_matches("$SYS.ACCOUNT.>", subj):
                        raise bad("subjects that overlap with system api require no-ack to be true")
                if pair is not None and pair[0] == i:
                    other = cfg.subjects[pair[1]]
                    raise bad(f"subject {json.dumps(subj)} overlaps with {json.dumps(other)}")
                seen.add(subj)
            if too_complex:
                raise bad(SUBJECTS_TOO_COMPLEX)
        if not cfg.subjects and not cfg.sources and cfg.mirror is None:
            raise bad("stream needs at least one configured subject or be a source/mirror")
        if cfg.subject_transform is not None:
            src = cfg.subject_transform.src
            if src and not is_valid_subject(src):
                raise E.api_error("JSStreamTransformInvalidSource", err=f"invalid subject {src}")
        if cfg.republish is not None:
            rp = cfg.republish = cfg.republish.copy()
            if not rp.src:
                if pedantic:
                    raise E.api_error("JSPedanticErrF", err="republish source can not be empty")
                rp.src = ">"
            if filters_overlap(cfg.subjects, [rp.dest]):     # the subjects' index is kept
                raise bad("stream configuration for republish destination forms a cycle")
            if not is_valid_subject(rp.src) or not is_valid_subject(rp.dest):
                raise bad(
                    f"stream configuration for republish with transform from '{rp.src}' to '{rp.dest}' not valid"
                )
        if cfg.placement is not None and cfg.placement.is_empty():
            cfg.placement = None
        if cfg.placement is not None and cfg.placement.preferred:
            raise bad("preferred server not permitted in placement")
        cfg.pedantic = False
        return cfg

    def unsupported(self) -> str | None:
        """The first setting of this (checked) config that jetraft does not act on, named as
        in the JSON (``"mirror"``, ``"compression s2"``), or None when every setting is one
        jetraft enforces.

        Refused (each when set to anything but its default): ``mirror``, ``sources``,
        ``subject_transform``, ``republish``, ``first_seq``, ``compression`` other than
        none, ``mirror_direct``, ``subject_delete_marker_ttl``, ``allow_msg_counter``,
        ``allow_atomic``, ``allow_msg_schedules``, ``persist_mode`` async, ``allow_batched``.
        ``allow_msg_ttl`` is accepted (nats-py sets it on every key-value bucket): a
        ``Nats-TTL`` header is then refused at publish (stream.py), never stored and kept.
        Every other field is enforced (docs/jetstream.md).
        """
        if self.mirror is not None:
            return "mirror"
        if self.sources:
            return "sources"
        if self.subject_transform is not None:
            return "subject_transform"
        if self.republish is not None:
            return "republish"
        if self.first_seq > 0:
            return "first_seq"
        if self.compression not in ("", "none"):
            return f"compression {self.compression}"
        if self.mirror_direct:
            return "mirror_direct"
        if self.subject_delete_marker_ttl > 0:
            return "subject_delete_marker_ttl"
        if self.allow_msg_counter:
            return "allow_msg_counter"
        if self.allow_atomic:
            return "allow_atomic"
        if self.allow_msg_schedules:
            return "allow_msg_schedules"
        if self.persist_mode == "async":
            return "persist_mode async"
        if self.allow_batched:
            return "allow_batched"
        return None

    def check_supported(self) -> None:
        """Refuse a config with a setting jetraft does not act on (see :meth:`unsupported`):
        JSApiError 10052 (500, JSStreamInvalidConfigF, the error nats-server gives for an
        invalid stream configuration) ``"<setting> is not supported by jetraft"``. Call it
        after nats-server's own checks, before anything is stored or proposed."""
        what = self.unsupported()
        if what is not None:
            raise E.unsupported_stream_setting(what)

    def create_request_checks(self, subject_name: str) -> None:
        """The checks STREAM.CREATE makes before checkStreamCfg (jetstream_api.go jsStreamCreateRequest).

        ``subject_name`` is the stream name token of ``$JS.API.STREAM.CREATE.<name>``.
        Raises 10056 (name mismatch), 10128 (path separators), 10052 (sealed on create,
        mirror_direct without mirror).
        """
        if subject_name != self.name:
            raise E.stream_name_mismatch()
        if "\\" in subject_name or "/" in subject_name:
            raise E.stream_name_contains_path_separators()
        if self.sealed:
            raise E.stream_invalid_config("stream configuration for create can not be sealed")
        if self.mirror_direct and self.mirror is None:
            raise E.stream_invalid_config("stream has no mirror but does have mirror direct")

    @staticmethod
    def update_check(old: StreamConfig, new: StreamConfig, *, clustered: bool = False) -> StreamConfig:
        """Check ``new`` (checked or not) as an update of ``old`` (already checked).

        nats-server ``configUpdateCheck`` (server/stream.go): returns the normalized new
        config; raises 10052 for a changed name, storage type, retention to/from
        workqueue, unsealing, cancelling deny_delete/deny_purge, disabling TTLs or
        schedules, changing counters or persist mode; 10055 for a changed mirror; 10074
        for replicas > 1 on a single server (``clustered=False``).
        """
        cfg = new.checked(pedantic=new.pedantic)
        bad = E.stream_invalid_config
        if cfg.name != old.name:
            raise bad("stream configuration name must match original")
        if not clustered and cfg.num_replicas > 1:
            raise E.stream_replicas_not_supported()
        if cfg.storage != old.storage:
            raise bad("stream configuration update can not change storage type")
        if cfg.retention != old.retention and "workqueue" in (cfg.retention, old.retention):
            raise bad("stream configuration update can not change retention policy to/from workqueue")
        if not cfg.sealed and old.sealed:
            raise bad("stream configuration update can not unseal a sealed stream")
        if not cfg.deny_delete and old.deny_delete:
            raise bad("stream configuration update can not cancel deny message deletes")
        if not cfg.deny_purge and old.deny_purge:
            raise bad("stream configuration update can not cancel deny purge")
        if cfg.mirror is not None and cfg.mirror != old.mirror:
            raise E.stream_mirror_not_updatable()
        if old.allow_msg_ttl and not cfg.allow_msg_ttl:
            raise bad("message TTL status can not be disabled")
        if cfg.allow_msg_counter != old.allow_msg_counter:
            raise bad("stream configuration update can not change message counter setting")
        if old.allow_msg_schedules and not cfg.allow_msg_schedules:
            raise bad("message schedules can not be disabled")
        if (old.persist_mode or "default") != (cfg.persist_mode or "default"):
            raise bad("stream configuration update can not change persist mode")
        if cfg.sealed:
            cfg.max_age = 0
            cfg.discard = "new"
            cfg.deny_delete = cfg.deny_purge = True
            cfg.allow_rollup_hdrs = False
        return cfg

    def with_static_metadata(self) -> StreamConfig:
        """Copy with ``_nats.req.level`` set as nats-server stores it (setStaticStreamMetadata)."""
        level = 0
        if self.allow_msg_ttl or self.subject_delete_marker_ttl > 0:
            level = max(level, 1)
        if self.allow_msg_counter or self.allow_atomic or self.allow_msg_schedules or self.persist_mode == "async":
            level = max(level, 2)
        if self.allow_batched:
            level = max(level, 4)
        meta = {k: v for k, v in (self.metadata or {}).items() if k not in (META_SERVER_VERSION, META_SERVER_LEVEL)}
        meta[META_REQUIRED_LEVEL] = str(level)
        return self.copy(metadata=meta)

    def to_response_json(self, server_version: str) -> dict[str, Any]:
        """``to_json()`` with ``_nats.ver``/``_nats.level`` added to metadata (setDynamicStreamMetadata)."""
        out = self.to_json()
        out["metadata"] = {**(self.metadata or {}), META_SERVER_VERSION: server_version,
                           META_SERVER_LEVEL: str(API_LEVEL)}
        return out


def _metadata_len(metadata: dict[str, str] | None) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in (metadata or {}).items())


# --- ConsumerConfig ---------------------------------------------------------------------

_DELIVER = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject", "undefined")
_ACK = ("none", "all", "explicit", "flow_control")
_REPLAY = ("instant", "original")
_PRIORITY = ("none", "overflow", "pinned_client", "prioritized")


@_go_fields
@dataclass
class ConsumerConfig(_Model):
    """A consumer's configuration (server/consumer.go ConsumerConfig).

    Durations (``ack_wait``, ``backoff``, ``max_expires``, ``idle_heartbeat``,
    ``inactive_threshold``, ``priority_timeout``) are ns; ``opt_start_time`` and
    ``pause_until`` are ns since the epoch or None.
    """

    durable_name: str = gofield("str", omit=True)
    name: str = gofield("str", omit=True)
    description: str = gofield("str", omit=True)
    deliver_policy: str = gofield("enum", default="all", enum=_DELIVER, enum_error="quoted")
    opt_start_seq: int = gofield("uint64", omit=True)
    opt_start_time: int | None = gofield("time", omit=True)
    ack_policy: str = gofield("enum", default="none", enum=_ACK, enum_error="quoted")
    ack_wait: int = gofield("dur", omit=True)
    max_deliver: int = gofield("int", omit=True)
    backoff: list[int] = gofield("durlist", omit=True)
    filter_subject: str = gofield("str", omit=True)
    filter_subjects: list[str] = gofield("strlist", omit=True)
    replay_policy: str = gofield("enum", default="instant", enum=_REPLAY, enum_error="quoted")
    rate_limit_bps: int = gofield("uint64", omit=True)
    sample_freq: str = gofield("str", omit=True)
    max_waiting: int = gofield("int", omit=True)
    max_ack_pending: int = gofield("int", omit=True)
    flow_control: bool = gofield("bool", omit=True)
    headers_only: bool = gofield("bool", omit=True)
    max_batch: int = gofield("int", omit=True)
    max_expires: int = gofield("dur", omit=True)
    max_bytes: int = gofield("int", omit=True)
    deliver_subject: str = gofield("str", omit=True)
    deliver_group: str = gofield("str", omit=True)
    idle_heartbeat: int = gofield("dur", omit=True)
    inactive_threshold: int = gofield("dur", omit=True)
    num_replicas: int = gofield("int")
    mem_storage: bool = gofield("bool", omit=True)
    direct: bool = gofield("bool", omit=True)
    sourcing: bool = gofield("bool", omit=True)
    metadata: dict[str, str] | None = gofield("map", omit=True)
    pause_until: int | None = gofield("time", omit=True)
    priority_groups: list[str] = gofield("strlist", omit=True)
    priority_policy: str = gofield("enum", omit=True, default="none", enum=_PRIORITY,
                                   enum_error="raw:unknown priority policy: ")
    priority_timeout: int = gofield("dur", omit=True)

    _GO_NAME = "ConsumerConfig"

    @classmethod
    def decode(cls, data: dict[str, Any], *, path: str | None = None) -> ConsumerConfig:
        """Strict decode (see module doc); ``"undefined"`` deliver policy reads as ``"all"``.
        ``path`` names the config in type errors (CONSUMER.CREATE: ``CreateConsumerRequest.config``)."""
        cfg = super().decode(data, path=path)
        if cfg.deliver_policy == "undefined":
            cfg.deliver_policy = "all"
        return cfg

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.opt_start_time is None:
            out.pop("opt_start_time", None)
        if self.pause_until is None:
            out.pop("pause_until", None)
        if self.priority_policy == "none":
            out.pop("priority_policy", None)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], stream: StreamConfig | None = None, *, pedantic: bool = False) -> ConsumerConfig:
        """Decode (strict), then :meth:`checked` against ``stream`` (a default stream if None)."""
        stream = stream if stream is not None else StreamConfig(name="S").checked()
        return cls.decode(data).checked(stream, pedantic=pedantic)

    @property
    def is_durable(self) -> bool:
        """A durable consumer has ``durable_name`` set (nats-server ``isDurableConsumer``)."""
        return bool(self.durable_name)

    @property
    def is_push(self) -> bool:
        """Push consumers have a ``deliver_subject``."""
        return bool(self.deliver_subject)

    def with_defaults(self, stream: StreamConfig, *, pedantic: bool = False,
                      max_ack_pending_limit: int = 0, max_request_batch_limit: int = 0) -> ConsumerConfig:
        """A copy with nats-server's defaults (``setConsumerConfigDefaults``, server/consumer.go).

        max_deliver 0/<-1 -> -1; pull max_waiting 0 -> 512; ack_wait 0 -> 30 s for explicit/all;
        backoff[0] overrides ack_wait; max_ack_pending 0 -> stream limit or 1000 (unless ack none);
        inactive_threshold 0 -> stream consumer_limits; negative limits -> 0.
        Raises 10157 (pedantic) only.
        """
        c = self.copy()

        def pedantic_err(msg: str) -> JSApiError:
            return E.api_error("JSPedanticErrF", err=msg)

        if c.max_deliver == 0 or c.max_deliver < -1:
            if pedantic and c.max_deliver < -1:
                raise pedantic_err("max_deliver must be set to -1")
            c.max_deliver = -1
        for attr, msg in (("max_waiting", "max_waiting must not be negative"),):
            if getattr(c, attr) < 0:
                if pedantic:
                    raise pedantic_err(msg)
                setattr(c, attr, 0)
        if c.max_ack_pending < -1:
            if pedantic:
                raise pedantic_err("max_ack_pending must be set to -1")
            c.max_ack_pending = -1
        for attr, key in (("max_batch", "max_batch"), ("max_expires", "max_expires"), ("max_bytes", "max_bytes"),
                          ("idle_heartbeat", "idle_heartbeat"), ("inactive_threshold", "inactive_threshold"),
                          ("priority_timeout", "priority_timeout")):
            if getattr(c, attr) < 0:
                if pedantic:
                    raise pedantic_err(f"{key} must not be negative")
                setattr(c, attr, 0)
        if not c.deliver_subject and c.max_waiting == 0:
            c.max_waiting = DEFAULT_MAX_WAITING
        if c.ack_wait == 0 and c.ack_policy in ("explicit", "all"):
            c.ack_wait = DEFAULT_ACK_WAIT
        if c.backoff:
            if pedantic and c.ack_wait != c.backoff[0]:
                raise pedantic_err("first backoff value has to equal batch AckWait")
            c.ack_wait = c.backoff[0]
        limits = stream.consumer_limits
        if c.max_ack_pending == 0:
            if pedantic and limits.max_ack_pending > 0:
                raise pedantic_err("max_ack_pending must be set if it's configured in stream limits")
            c.max_ack_pending = limits.max_ack_pending
        if c.inactive_threshold == 0:
            if pedantic and limits.inactive_threshold > 0:
                raise pedantic_err("inactive_threshold must be set if it's configured in stream limits")
            c.inactive_threshold = limits.inactive_threshold
        if c.max_ack_pending == 0 and c.ack_policy != "none":
            pending = DEFAULT_MAX_ACK_PENDING
            if 0 < max_ack_pending_limit < pending:
                pending = max_ack_pending_limit
            c.max_ack_pending = pending
        if not c.deliver_subject and c.max_batch == 0 and max_request_batch_limit > 0:
            if pedantic:
                raise pedantic_err("max_request_batch must be set if it's JetStream limits are set")
            c.max_batch = max_request_batch_limit
        if c.priority_policy == "pinned_client" and c.priority_timeout == 0:
            c.priority_timeout = DEFAULT_PINNED_TTL
        if c.ack_policy == "flow_control" and not pedantic:
            c.flow_control = True
            c.idle_heartbeat = SOURCE_HEALTH_HB
        return c

    def checked(self, stream: StreamConfig, *, pedantic: bool = False,
                max_ack_pending_limit: int = 0, max_request_batch_limit: int = 0) -> ConsumerConfig:
        """Defaults (:meth:`with_defaults`) then nats-server ``checkConsumerCfg``; returns the result.

        ``stream`` is the parent stream's (checked) config. Raises JSApiError with
        nats-server's code for each refusal (10052 names/filters, 10126/10133/10134
        replicas, 10181/10182 policies, 10183/10184 negatives, 10116 backoff vs
        max_deliver, 10107 description, 10079/10112/10081/10080/10082/10083 push,
        10084/10086/10087/10088/10089/10114/10115/10125 pull, 10121/10153 limits,
        10090/10091 direct, 10136/10139/10138 filters, 10094 deliver policy, 10095
        sampling, 10108 flow control, 10132 name vs durable, 10135 metadata,
        10178/10159/10161/10162/10196/10197 priority groups).
        """
        c = self.with_defaults(stream, pedantic=pedantic, max_ack_pending_limit=max_ack_pending_limit,
                               max_request_batch_limit=max_request_batch_limit)
        bad = E.stream_invalid_config
        if c.name and not is_valid_asset_name(c.name):
            raise bad("consumer name can not contain '.', '*', '>', '\\', '/'")
        if c.durable_name and not is_valid_asset_name(c.durable_name):
            raise bad("consumer durable name can not contain '.', '*', '>', '\\', '/'")
        if c.num_replicas > 0 and c.num_replicas > stream.num_replicas:
            raise E.api_error("JSConsumerReplicasExceedsStream")
        if c.num_replicas < 0:
            raise E.replicas_count_negative()
        if stream.retention in ("interest", "workqueue") and c.num_replicas not in (0, stream.num_replicas):
            raise E.api_error("JSConsumerReplicasShouldMatchStream")
        if any(b < 0 for b in c.backoff):
            raise E.api_error("JSConsumerBackOffNegativeErr")
        if c.ack_wait < 0:
            raise E.api_error("JSConsumerAckWaitNegativeErr")
        if c.ack_policy == "flow_control":
            if not c.deliver_subject:
                raise E.api_error("JSConsumerAckFCRequiresPushErr")
            if not c.flow_control:
                raise E.api_error("JSConsumerAckFCRequiresFCErr")
            if c.idle_heartbeat != SOURCE_HEALTH_HB:
                raise bad("flow control ack policy heartbeat needs to be 1s")
            if c.max_ack_pending <= 0:
                raise E.api_error("JSConsumerAckFCRequiresMaxAckPendingErr")
            if c.ack_wait != 0 or c.backoff:
                raise E.api_error("JSConsumerAckFCRequiresNoAckWaitErr")
            if c.max_deliver > 0:
                raise E.api_error("JSConsumerAckFCRequiresNoMaxDeliverErr")
        if c.backoff and c.max_deliver != -1 and len(c.backoff) > c.max_deliver:
            raise E.api_error("JSConsumerMaxDeliverBackoffErr")
        if len(c.description.encode()) > MAX_DESCRIPTION_LEN:
            raise E.api_error("JSConsumerDescriptionTooLongErrF", max=MAX_DESCRIPTION_LEN)
        if c.deliver_subject:
            if not is_valid_subject(c.deliver_subject) and not _has_wildcard(c.deliver_subject):
                raise E.api_error("JSConsumerInvalidDeliverSubject")
            if _has_wildcard(c.deliver_subject):
                raise E.api_error("JSConsumerDeliverToWildcardsErr")
            if not is_valid_literal_subject(c.deliver_subject):
                raise E.api_error("JSConsumerInvalidDeliverSubject")
            if filters_overlap(stream.subjects, [c.deliver_subject]):    # the index is kept
                raise E.api_error("JSConsumerDeliverCycleErr")
            if c.max_waiting != 0:
                raise E.api_error("JSConsumerPushMaxWaitingErr")
            if c.max_ack_pending > 0 and c.ack_policy == "none":
                raise E.api_error("JSConsumerMaxPendingAckPolicyRequiredErr")
            if 0 < c.idle_heartbeat < 100 * MILLISECOND:
                raise E.api_error("JSConsumerSmallHeartbeatErr")
        else:
            if c.ack_policy == "none" and stream.retention == "workqueue":
                raise E.api_error("JSConsumerPullRequiresAckErr")
            if c.rate_limit_bps > 0:
                raise E.api_error("JSConsumerPullWithRateLimitErr")
            if c.max_waiting < 0:
                raise E.api_error("JSConsumerMaxWaitingNegativeErr")
            if c.idle_heartbeat > 0:
                raise E.api_error("JSConsumerHBRequiresPushErr")
            if c.flow_control:
                raise E.api_error("JSConsumerFCRequiresPushErr")
            if c.max_batch < 0:
                raise E.api_error("JSConsumerMaxRequestBatchNegativeErr")
            if c.max_expires != 0 and c.max_expires < MILLISECOND:
                raise E.api_error("JSConsumerMaxRequestExpiresTooSmall")
            if max_request_batch_limit > 0 and c.max_batch > max_request_batch_limit:
                raise E.api_error("JSConsumerMaxRequestBatchExceededF", limit=max_request_batch_limit)
        if max_ack_pending_limit > 0 and c.max_ack_pending > max_ack_pending_limit:
            raise E.api_error("JSConsumerMaxPendingAckExcessErrF", limit=max_ack_pending_limit)
        limits = stream.consumer_limits
        if limits.max_ack_pending > 0 and c.max_ack_pending > limits.max_ack_pending:
            raise E.api_error("JSConsumerMaxPendingAckExcessErrF", limit=limits.max_ack_pending)
        if limits.inactive_threshold > 0 and c.inactive_threshold > limits.inactive_threshold:
            raise E.api_error("JSConsumerInactiveThresholdExcess", limit=gofmt.duration(limits.inactive_threshold))
        if c.direct:
            if not c.deliver_subject:
                raise E.api_error("JSConsumerDirectRequiresPushErr")
            if c.is_durable:
                raise E.api_error("JSConsumerDirectRequiresEphemeralErr")
        if c.filter_subject and c.filter_subjects:
            raise E.api_error("JSConsumerDuplicateFilterSubjects")
        if c.filter_subject and not is_valid_subject(c.filter_subject):
            raise bad("invalid subject")
        if any(f == "" for f in c.filter_subjects):
            raise E.api_error("JSConsumerEmptyFilter")
        filters = [c.filter_subject] if c.filter_subject else list(c.filter_subjects)
        # The first filter another one covers, from an index of the filters (nats-server
        # compares every pair); the order of the refusals is the pairwise loop's.
        try:
            covered = first_covered_filter(filters) if len(filters) > 1 else None
        except OverlapWorkExceeded:
            covered = -1
        for i, subj in enumerate(filters):
            if not is_valid_subject(subj):
                raise bad("invalid subject")
            if i == covered:
                raise E.api_error("JSConsumerOverlappingSubjectFilters")
        if covered == -1:
            raise bad(SUBJECTS_TOO_COMPLEX)
        self._check_deliver_policy(c)
        if c.sample_freq:
            text = c.sample_freq[:-1] if c.sample_freq.endswith("%") else c.sample_freq
            if not re.fullmatch(r"[+-]?\d+", text) or int(text) < 0:
                err = f'strconv.Atoi: parsing {json.dumps(text)}: invalid syntax' if not re.fullmatch(
                    r"[+-]?\d+", text) else "<nil>"
                raise E.api_error("JSConsumerInvalidSamplingErrF", err=err)
        if c.flow_control and c.idle_heartbeat == 0:
            raise E.api_error("JSConsumerWithFlowControlNeedsHeartbeats")
        if c.durable_name and c.name and c.name != c.durable_name:
            raise E.api_error("JSConsumerCreateDurableAndNameMismatch")
        if _metadata_len(c.metadata) > MAX_METADATA_LEN:
            raise E.api_error("JSConsumerMetadataLengthErrF", limit=f"{MAX_METADATA_LEN // 1024}KB")
        if c.priority_policy != "none":
            if c.deliver_subject:
                raise E.api_error("JSConsumerPushWithPriorityGroupErr")
            if not c.priority_groups:
                raise E.api_error("JSConsumerPriorityPolicyWithoutGroup")
            for group in c.priority_groups:
                if group == "":
                    raise E.api_error("JSConsumerEmptyGroupName")
                if not _GROUP_NAME.match(group):
                    raise E.api_error("JSConsumerInvalidGroupNameErr")
        else:
            if c.priority_groups:
                raise E.api_error("JSConsumerPriorityGroupWithPolicyNone")
            if c.priority_timeout > 0:
                raise E.api_error("JSConsumerPinnedTTLWithoutPriorityPolicyNone")
        if stream.placement is not None and stream.placement.preferred:
            raise bad("preferred server not permitted in placement")
        if not c.name and c.durable_name:
            c.name = c.durable_name  # nats-server reports a durable's name (verified by the compat test)
        return c

    def unsupported(self) -> str | None:
        """The first setting of this consumer config that jetraft does not act on (named as
        in the JSON), or None. Refused: ``replay_policy`` original, ``rate_limit_bps``,
        ``priority_policy`` other than none (and so ``priority_groups`` and
        ``priority_timeout``, which need one), ``ack_policy`` flow_control, ``direct`` and
        ``sourcing`` (nats-server's own consumers for mirrors and sources)."""
        if self.replay_policy == "original":
            return "replay_policy original"
        if self.rate_limit_bps > 0:
            return "rate_limit_bps"
        if self.priority_policy != "none":
            return f"priority_policy {self.priority_policy}"
        if self.priority_groups:
            return "priority_groups"
        if self.ack_policy == "flow_control":
            return "ack_policy flow_control"
        if self.direct:
            return "direct"
        if self.sourcing:
            return "sourcing"
        return None

    def check_supported(self) -> None:
        """Refuse a consumer config with a setting jetraft does not act on (see
        :meth:`unsupported`): JSApiError 10012 (500, JSConsumerCreateErrF, nats-server's
        general consumer creation failure) ``"<setting> is not supported by jetraft"``.
        Call it after nats-server's own checks, before anything is stored or proposed."""
        what = self.unsupported()
        if what is not None:
            raise E.unsupported_consumer_setting(what)

    @staticmethod
    def _check_deliver_policy(c: ConsumerConfig) -> None:
        def bad_start(dp: str, start: str) -> JSApiError:
            return E.api_error("JSConsumerInvalidPolicyErrF",
                               err=f"consumer delivery policy is deliver {dp}, but optional start {start} is also set")

        def not_set(dp: str, what: str) -> JSApiError:
            return E.api_error("JSConsumerInvalidPolicyErrF",
                               err=f"consumer delivery policy is deliver {dp}, but optional {what} is not set")

        dp = c.deliver_policy
        words = {"all": "all", "last": "last", "last_per_subject": "last per subject", "new": "new"}
        if dp in words:
            if c.opt_start_seq > 0:
                raise bad_start(words[dp], "sequence")
            if c.opt_start_time is not None:
                raise bad_start(words[dp], "time")
            if dp == "last_per_subject" and not c.filter_subject and not c.filter_subjects:
                raise not_set("last per subject", "filter subject")
        elif dp == "by_start_sequence":
            if c.opt_start_seq == 0:
                raise not_set("by start sequence", "start sequence")
            if c.opt_start_time is not None:
                raise bad_start("by start sequence", "time")
        elif dp == "by_start_time":
            if c.opt_start_time is None:
                raise not_set("by start time", "start time")
            if c.opt_start_seq != 0:
                raise bad_start("by start time", "start sequence")


def _has_wildcard(subject: str) -> bool:
    return any(tok in ("*", ">") for tok in subject.split("."))


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


_MODELS: dict[str, type[_Model]] = {
    cls.__name__: cls
    for cls in (Placement, SubjectTransform, RePublish, ConsumerLimits, ExternalStream,
                StreamConsumerSource, StreamSource, StreamConfig, ConsumerConfig,
                LostStreamData, StreamState, PeerInfo, ClusterInfo, StreamInfo, SequenceInfo, ConsumerInfo,
                PubAck, AccountLimits, APIStats, AccountInfo)
}
