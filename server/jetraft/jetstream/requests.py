"""JetStream API requests decoded and responses encoded as nats-server does it in Go.

Requests are decoded as nats-server's ``unmarshalRequest`` decodes them (a Go
``json.Decoder``, see :mod:`jetraft.jetstream.gojson`): a key or value Go refuses raises
JSApiError 10025 ``invalid JSON: ...`` with Go's wording. Responses are written as Go's
encoder writes them (:func:`json_bytes`, :func:`pub_ack_bytes`), errors with the fields
nats-server's Go response types still carry (:data:`ERROR_EXTRAS`) and the 500 errors of
:func:`internal_error`. Pure functions: no I/O, no state.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jetraft import gofmt
from jetraft.jetstream.model.base import API_LEVEL, META_REQUIRED_LEVEL
from jetraft.protocol.headers import Headers, HeaderError, get_header
from jetraft.protocol.headers import encode as encode_headers
from jetraft.protocol.headers import parse as parse_headers

from . import errors as E
from . import gojson
from .errors import JSApiError
from jetraft.gofmt import parse_time

from .model import ConsumerConfig, raw_json

__all__ = ["DirectGet", "DirectGetRefused", "ERROR_EXTRAS", "INTERNAL_ERROR_TEXT", "MSG_GET_TYPES", "PAGING_TYPES", "bool_field",
           "check_fields", "check_value", "consumer_create_request", "decode_fields",
           "decode_request", "go_json_error", "int_field", "internal_error", "json_bytes",
           "msg_get_request", "pub_ack_bytes", "str_field"]


def go_json_error(text: str, exc: json.JSONDecodeError) -> str:
    """The message nats-server gives for the syntax error Python's json found in ``text``
    (see :mod:`jetraft.jetstream.gojson`): ``invalid character ... at offset N`` or
    ``unexpected EOF``."""
    message, index, trim = gojson.go_syntax(text, exc)
    if index is None:
        return "unexpected EOF"
    return f"{message} at offset {len(text[:index + 1].encode('utf-8', 'surrogateescape')) - trim}"


def decode_request(payload: bytes, go_type: str) -> dict[str, Any] | None:
    """A JSON API request body: None when empty (or ``null``), else the object.

    Decoded as nats-server's ``unmarshalRequest`` does (a Go ``json.Decoder``; see
    :mod:`jetraft.jetstream.gojson` for nesting, number and string limits). Raises
    JSApiError 10025 "invalid JSON: ..." with Go's wording for a syntax error (``... at
    offset N``, ``unexpected EOF``, ``exceeded max depth at offset N``) or for a body
    that is not an object (``go_type`` names the Go request struct, e.g.
    ``"JSApiStreamPurgeRequest"``). Several concatenated objects are decoded into one
    request, later keys overriding earlier ones, as Go decodes each into the same struct.
    """
    try:
        return gojson.merge_objects(payload)
    except gojson.GoJSONError as exc:
        raise E.invalid_json(exc.stream_text()) from None
    except gojson.NotAnObject as exc:
        raise E.invalid_json(f"json: cannot unmarshal {gojson.json_kind(exc.value)} "
                             f"into Go value of type server.{go_type}") from None


def _unmarshal_error(kind: str, path: str, gotype: str) -> JSApiError:
    """Go's UnmarshalTypeError text for a struct field ``path`` (``Struct.field``)."""
    return E.invalid_json(f"json: cannot unmarshal {kind} into Go struct field {path} of type {gotype}")


def _go_kind(value: Any, gotype: str) -> str:
    """What Go's type error names: ``number <literal>`` when a number does not fit an
    integer type, else the JSON kind (``number``, ``string``, ``array``...)."""
    kind = gojson.json_kind(value)
    if kind == "number" and gotype in gojson.INT_RANGES:
        return f"number {gojson.number_literal(value)}"
    return kind


def int_field(req: dict[str, Any], key: str, go_type: str, gotype: str = "uint64") -> int:
    """An integer request field (0 when absent or null), refused as Go's decoder refuses
    it: JSApiError 10025 ``json: cannot unmarshal number 1e999 into Go struct field
    <go_type>.<key> of type <gotype>`` for a number outside ``gotype``'s range (a key of
    :data:`gojson.INT_RANGES`), a fraction or an exponent; the JSON kind for anything else."""
    value = req.get(key)
    if value is None:
        return 0
    number = gojson.go_int(value, gotype)
    if number is None:
        raise _unmarshal_error(_go_kind(value, gotype), f"{go_type}.{key}", gotype)
    return number


def str_field(req: dict[str, Any], key: str, go_type: str) -> str:
    """A string request field ("" when absent or null); JSApiError 10025 otherwise."""
    value = req.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _unmarshal_error(gojson.json_kind(value), f"{go_type}.{key}", "string")
    return value


def bool_field(req: dict[str, Any], key: str, go_type: str) -> bool:
    """A boolean request field (False when absent or null); JSApiError 10025 otherwise."""
    value = req.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _unmarshal_error(gojson.json_kind(value), f"{go_type}.{key}", "bool")
    return value


def check_value(go_type: str, key: str, value: Any, gotype: str) -> None:
    """Refuse ``value`` of field ``key`` as Go's decoder refuses it for a ``gotype`` (an
    integer type of :data:`gojson.INT_RANGES`, ``string``, ``bool``, ``time.Time``,
    ``[]string``; ``any`` takes anything): JSApiError 10025 with Go's text. Null is zero."""
    if value is None or gotype == "any":
        return
    if gotype in gojson.INT_RANGES:
        int_field({key: value}, key, go_type, gotype)
    elif gotype == "string":
        str_field({key: value}, key, go_type)
    elif gotype == "bool":
        bool_field({key: value}, key, go_type)
    elif gotype == "time.Time":
        if not isinstance(value, str):
            raise _unmarshal_error(gojson.json_kind(value), f"{go_type}.{key}", gotype)
        try:
            parse_time(value)
        except ValueError as exc:
            raise E.invalid_json(str(exc)) from None
    elif not isinstance(value, list):
        raise _unmarshal_error(gojson.json_kind(value), f"{go_type}.{key}", gotype)
    else:       # []string: an element's error names its index, without "Go struct field"
        for i, item in enumerate(value):
            if item is not None and not isinstance(item, str):
                raise E.invalid_json(f"json: cannot unmarshal {gojson.json_kind(item)} into "
                                     f"{go_type}.{key}.{i} of type string")


def decode_fields(req: dict[str, Any], go_type: str, types: dict[str, str], *,
                   strict: bool = True) -> None:
    """Check ``req``'s keys in order, as nats-server's decoder meets them: an unknown key
    (``strict``: ``json: unknown field "k"``; else ignored) or a value its Go type refuses
    (:func:`check_value`) raises JSApiError 10025; the first one found wins."""
    for key, value in req.items():
        gotype = types.get(key)
        if gotype is None:
            if strict:
                raise E.invalid_json(f"json: unknown field {json.dumps(key)}")
            continue
        check_value(go_type, key, value, gotype)


#: The paging requests' fields (JSApiStreamNamesRequest, JSApiConsumersRequest...).
PAGING_TYPES = {"offset": "int", "subject": "string"}
#: JSApiMsgGetRequest (nats-server jetstream_api.go): its fields and Go types.
MSG_GET_TYPES = {"seq": "uint64", "last_by_subj": "string", "next_by_subj": "string",
                  "batch": "int", "max_bytes": "int", "start_time": "time.Time",
                  "multi_last": "[]string", "up_to_seq": "uint64", "up_to_time": "time.Time",
                  "no_hdr": "bool"}


def msg_get_request(req: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    """A JSApiMsgGetRequest checked as Go decodes it (``strict``: unknown keys refused, as
    STREAM.MSG.GET; DIRECT.GET ignores them); returns the request with ``no_hdrs`` set
    from ``no_hdr`` for the stream. Raises JSApiError 10025 with Go's text."""
    decode_fields(req, "JSApiMsgGetRequest", MSG_GET_TYPES, strict=strict)
    return {**req, "no_hdrs": bool(req.get("no_hdr"))}


_CONSUMER_ACTIONS = ("create", "update", "")


def consumer_create_request(req: dict[str, Any]) -> ConsumerConfig:
    """CreateConsumerRequest (nats-server jetstream_api.go) decoded key by key, in order, as
    Go's strict decoder does: ``stream_name`` string, ``config`` a ConsumerConfig (null:
    empty), ``action`` create|update|"" (ConsumerAction.UnmarshalJSON: ``unknown consumer
    action: <raw JSON>``), ``pedantic`` bool. Returns the decoded (unchecked) config.
    Raises JSApiError 10025."""
    go_type = "CreateConsumerRequest"
    cfg = None
    for key, value in req.items():
        if key == "stream_name":
            check_value(go_type, key, value, "string")
        elif key == "pedantic":
            check_value(go_type, key, value, "bool")
        elif key == "action":
            if value not in _CONSUMER_ACTIONS or not isinstance(value, str):
                raise E.invalid_json(f"unknown consumer action: {raw_json(value)}")
        elif key == "config":
            if value is not None and not isinstance(value, dict):
                raise _unmarshal_error(gojson.json_kind(value), f"{go_type}.config", "server.ConsumerConfig")
            cfg = ConsumerConfig.decode(value or {}, path=f"{go_type}.config")
        else:
            raise E.invalid_json(f"json: unknown field {json.dumps(key)}")
    return cfg if cfg is not None else ConsumerConfig.decode({})


@dataclass(frozen=True, slots=True)
class DirectGet:
    """A DIRECT.GET request that can be served (nats-server JSApiMsgGetRequest).

    One message: the one at ``seq``, the last on ``last_for``, or the first on ``next_for``
    at or after ``seq``. A batch (``batch`` > 0): up to ``batch`` messages from ``seq`` (or
    the first at or after ``start_time``, ns), on ``next_for`` when given. A multi-last get
    (``multi_last``): the last message of each subject matching one of its filters, at or
    below ``up_to_seq`` or before ``up_to_time`` (ns), from ``seq`` on. ``max_bytes``: stop
    once this many bytes were sent (0: the server's default); ``no_hdrs``: without the
    message's own headers (ignored by a multi-last get, as nats-server)."""

    seq: int
    last_for: str
    next_for: str
    no_hdrs: bool
    batch: int = 0
    max_bytes: int = 0
    start_time: int | None = None
    multi_last: tuple[str, ...] = ()
    up_to_seq: int = 0
    up_to_time: int | None = None


class DirectGetRefused(Exception):
    """A DIRECT.GET request answered with a 408 status; ``text`` is its description."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _time_field(req: dict[str, Any], key: str) -> int | None:
    """A ``time.Time`` pointer field: None when absent or null, else its ns since the epoch
    (0 for Go's zero time, which is still a time that was given)."""
    value = req.get(key)
    if value is None:
        return None
    try:
        return gofmt.parse_time(value) or 0
    except (TypeError, ValueError):
        raise DirectGetRefused("Malformed Request") from None


def direct_get_request(by_subject: str | None, payload: bytes) -> DirectGet:
    """``$JS.API.DIRECT.GET.<stream>[.<by_subject>]``'s body read as nats-server reads it
    (stream.go processDirectGetRequest, processDirectGetLastBySubjectRequest): with Go's
    ``json.Unmarshal`` (unknown keys ignored). Raises DirectGetRefused ``Empty Request``
    (nothing asked), ``Malformed Request`` (anything Go's decoder refuses: bad JSON,
    nesting past the limit, a number outside its field's Go type) or ``Bad Request``
    (fields that do not go together, or fields with a subject in the subject)."""
    if not payload and by_subject is None:
        raise DirectGetRefused("Empty Request")
    req: dict[str, Any] = {}
    if payload:
        try:
            value = gojson.unmarshal(payload)
            if value is not None and not isinstance(value, dict):
                raise DirectGetRefused("Malformed Request")
            req = msg_get_request(value or {}, strict=False)
        except (gojson.GoJSONError, JSApiError):
            raise DirectGetRefused("Malformed Request") from None
    seq = int(req.get("seq") or 0)
    last_for = req.get("last_by_subj") or ""
    next_for = req.get("next_by_subj") or ""
    batch = int(req.get("batch") or 0)
    multi = tuple(req.get("multi_last") or ())
    up_to_seq = int(req.get("up_to_seq") or 0)
    start, up_to_time = _time_field(req, "start_time"), _time_field(req, "up_to_time")
    if by_subject is not None:
        if last_for or next_for or multi or seq or batch or start is not None or up_to_seq \
                or up_to_time is not None:
            raise DirectGetRefused("Bad Request")
        last_for = by_subject
    else:
        if seq == 0 and not last_for and not next_for and not multi and start is None:
            raise DirectGetRefused("Empty Request")
        if ((seq > 0 and last_for) or (seq > 0 and start is not None) or (start is not None and last_for)
                or (last_for and next_for) or (last_for and batch > 0) or (last_for and multi)
                or (next_for and multi) or (up_to_seq > 0 and up_to_time is not None)):
            raise DirectGetRefused("Bad Request")
    return DirectGet(seq, last_for, next_for, bool(req.get("no_hdrs")), batch,
                     int(req.get("max_bytes") or 0), start, multi, up_to_seq, up_to_time)


def check_fields(req: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse a key of ``req`` not in ``allowed`` as Go's strict decoder does: JSApiError
    10025 ``json: unknown field "k"``."""
    for key in req:
        if key not in allowed:
            raise E.invalid_json(f"json: unknown field {json.dumps(key)}")


def pub_ack_bytes(ack: dict[str, Any]) -> bytes:
    """A PubAck exactly as nats-server writes it (stream.go: a hand-built string, so a
    duplicate reads ``{"stream":"S","seq":1,"duplicate": true}``, with that space; a counter's
    ``{"stream":"S","seq":2,"val":"7"}``)."""
    text = '{"stream":' + json.dumps(ack["stream"])
    if ack.get("domain"):
        text += ',"domain":' + json.dumps(ack["domain"])
    text += f',"seq":{ack["seq"]}'
    if ack.get("duplicate"):
        text += ',"duplicate": true'
    if "val" in ack:        # a counter's new value (ADR-49)
        text += ',"val":' + json.dumps(ack["val"])
    return (text + "}").encode()


_GO_ESCAPE_PAIRS = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                   ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def json_bytes(obj: Any) -> bytes:
    """Compact JSON as Go's encoder writes it (``<``, ``>``, ``&`` escaped as ``\\u003c``...;
    a byte that is not UTF-8, carried as a surrogate escape from a subject or a body, written
    as U+FFFD, one per byte, as Go's encoder writes invalid UTF-8)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    for ch, escaped in _GO_ESCAPE_PAIRS:     # str.replace: C speed on big bodies
        if ch in text:
            text = text.replace(ch, escaped)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode()


_SURROGATE = re.compile("[\ud800-\udfff]")


#: The nats-server error (errors.json) a response type answers an internal failure with.
_INTERNAL_ERRORS = {
    E.STREAM_CREATE_RESPONSE: "JSStreamCreateErrF",
    E.STREAM_UPDATE_RESPONSE: "JSStreamUpdateErrF",
    E.STREAM_DELETE_RESPONSE: "JSStreamDeleteErrF",
    E.STREAM_PURGE_RESPONSE: "JSStreamPurgeFailedF",
    E.STREAM_MSG_DELETE_RESPONSE: "JSStreamMsgDeleteFailedF",
    E.CONSUMER_CREATE_RESPONSE: "JSConsumerCreateErrF",
}
INTERNAL_ERROR_TEXT = "internal error"


def internal_error(rtype: str) -> JSApiError:
    """The answer to a request whose handling failed unexpectedly: nats-server's 500 error
    for the response type ``rtype`` (errors.json: JSStreamCreateErrF 10049,
    JSStreamUpdateErrF 10069, JSStreamDeleteErrF 10050, JSStreamPurgeFailedF 10110,
    JSStreamMsgDeleteFailedF 10057, JSConsumerCreateErrF 10012, otherwise
    JSStreamGeneralErrorF 10051), described as ``internal error``."""
    return E.api_error(_INTERNAL_ERRORS.get(rtype, "JSStreamGeneralErrorF"), err=INTERNAL_ERROR_TEXT)


_PAGED = {"total": 0, "offset": 0, "limit": 0}
#: Fields nats-server's error responses still carry (non-omitempty fields of the Go types).
ERROR_EXTRAS: dict[str, dict[str, Any]] = {
    E.STREAM_PURGE_RESPONSE: {"purged": 0},
    E.STREAM_INFO_RESPONSE: _PAGED,
    E.STREAM_NAMES_RESPONSE: {**_PAGED, "streams": None},
    E.STREAM_LIST_RESPONSE: {**_PAGED, "streams": []},
    E.CONSUMER_NAMES_RESPONSE: {**_PAGED, "consumers": []},
    E.CONSUMER_LIST_RESPONSE: {**_PAGED, "consumers": []},
    E.CONSUMER_RESET_RESPONSE: {"reset_seq": 0},
}


#: The header by which a client asks for a minimum API level (nats-server JSRequiredApiLevel).
REQUIRED_API_LEVEL_HEADER = "Nats-Required-Api-Level"


def required_level_met(headers: bytes | None) -> bool:
    """Whether a request's ``Nats-Required-Api-Level`` (absent: met) is an integer no higher
    than this server's API level (nats-server jetstream_versioning.go
    errorOnRequiredApiLevel: one that is not an integer is not met)."""
    value = get_header(headers, REQUIRED_API_LEVEL_HEADER) if headers else None
    if not value:
        return True
    text = value.strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isascii() or not digits.isdigit():
        return False
    return int(text) <= API_LEVEL


def unmet_required_level(config: Any) -> str | None:
    """The ``_nats.req.level`` of a stream or consumer config (a JSON dict, untrusted) when
    this server's API level is below it, else None (nats-server jetstream_versioning.go
    supportsRequiredApiLevel: a value that is not an integer is not supported). Never raises."""
    meta = config.get("metadata") if isinstance(config, dict) else None
    level = meta.get(META_REQUIRED_LEVEL) if isinstance(meta, dict) else None
    if not isinstance(level, str) or not level:
        return None
    try:
        return None if int(level) <= API_LEVEL else level
    except ValueError:
        return level


# --------------------------------------------------------------------------- request info

#: The header that carries a request's client info between servers (nats-server
#: ``ClientInfoHdr``): the requester's ClientInfo as JSON, set by the server the client is on.
REQUEST_INFO_HEADER = "Nats-Request-Info"
#: Longest client info read from the header (bytes); a longer one is ignored.
MAX_REQUEST_INFO = 4096


def request_info(headers: bytes | None) -> dict[str, Any] | None:
    """The client info in ``headers``' ``Nats-Request-Info`` (a JSON object of at most
    :data:`MAX_REQUEST_INFO` bytes), or None. Never raises."""
    if not headers or REQUEST_INFO_HEADER.encode() not in headers:
        return None
    value = get_header(headers, REQUEST_INFO_HEADER)
    if not value or len(value) > MAX_REQUEST_INFO:
        return None
    try:
        info = json.loads(value)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def with_request_info(headers: bytes | None, info: dict[str, Any] | None) -> bytes | None:
    """``headers`` without any ``Nats-Request-Info`` a client sent (only servers set it)
    and, when ``info`` is given, with ours. A malformed block that names the header loses
    its headers (an API request reads none of them); one that does not is kept as it is."""
    key = REQUEST_INFO_HEADER.encode()
    if headers and key in headers:
        try:
            block = parse_headers(headers)
        except HeaderError:
            headers = None
        else:
            block.fields.pop(REQUEST_INFO_HEADER, None)
            headers = encode_headers(block) if block.fields or block.status else None
    if info is None:
        return headers
    line = json.dumps(info, separators=(",", ":"))
    try:
        block = parse_headers(headers) if headers else Headers()
    except HeaderError:
        return headers                      # kept as sent, without our info
    block.add(REQUEST_INFO_HEADER, line)
    return encode_headers(block)
