"""The machinery every JetStream model shares: names and limits (server/jetstream_api.go),
Go's strict JSON decoding of a field (encoding/json with DisallowUnknownFields: the errors
nats-server answers), the :class:`_Model` base and :func:`gofield`, the one declaration of
a field."""


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

_GROUP_NAME = re.compile(r"^[a-zA-Z0-9/_=-]{1,16}\Z")     # Go: "$" is the end of the text


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
        _MODELS["StreamSource"].decode(value, path=path)
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
#: Every model by class name, for the ``obj:<Name>`` and ``objlist:<Name>`` field kinds
#: (filled by :func:`_go_fields`).
_MODELS: dict[str, type[_Model]] = {}
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
    _MODELS[cls.__name__] = cls
    return cls
