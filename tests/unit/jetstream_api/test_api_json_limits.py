"""The JetStream API's JSON decoding limits (jetraft.jetstream.gojson), without a server.

Properties: any nesting depth, any number literal and any JSON text either decode to a
value or are refused with the API's error (JSApiError 10025 from ``decode_request``,
GoJSONError from the gojson functions) -- never RecursionError, OverflowError, ValueError
or anything else; where Python's json decodes a text within jetraft's depth limit, the
result is the same value. Texts pinned here were observed from nats-server 2.15.1
(tests/compat/test_compat_js_hostile_json.py compares them live).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jetraft.jetstream import gojson
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.api.streams import DIRECT_GET_MAX_MSGS
from jetraft.jetstream.requests import decode_request, int_field
from jetraft.jetstream.consumer_pull import _BadRequest, _parse_next_request
from jetraft.jetstream.errors import JSApiError
from jetraft.events import EVENTS

GO_LIMIT, OUR_LIMIT = gojson.GO_MAX_DEPTH, gojson.MAX_DEPTH
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)


def refusal(payload: bytes, go_type: str = "StreamConfigRequest") -> str:
    with pytest.raises(JSApiError) as info:
        decode_request(payload, go_type)
    assert (info.value.code, info.value.err_code) == (400, 10025)
    assert info.value.description.startswith("invalid JSON: ")
    return info.value.description[len("invalid JSON: "):]


# --- nesting ---------------------------------------------------------------------------------

OPENERS = {"array": (b"[", b"]"), "object": (b'{"k":', b"}")}


def nested(depth: int, kind: str, closed: bool, prefix: bytes = b"") -> bytes:
    opener, closer = OPENERS[kind]
    inner = b"0" if closed else b""
    return prefix + opener * depth + inner + (closer * depth if closed else b"")


def first_past(body: bytes, limit: int) -> int | None:
    """The index of the byte that opens nesting level ``limit`` + 1 outside strings (a
    byte-by-byte reference for bodies without escapes)."""
    depth, in_string = 0, False
    for i, byte in enumerate(body):
        if byte == 0x22:
            in_string = not in_string
        elif not in_string and byte in b"[{":
            depth += 1
            if depth > limit:
                return i
        elif not in_string and byte in b"]}":
            depth -= 1
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=st.integers(0, 30_000), kind=st.sampled_from(sorted(OPENERS)), closed=st.booleans(),
       prefix=st.sampled_from([b"", b"  ", b'{"name":', b'{"a":1} ']))
@example(depth=50_000, kind="array", closed=False, prefix=b"")
@example(depth=10_001, kind="array", closed=True, prefix=b"")
@example(depth=10_000, kind="object", closed=True, prefix=b"")
@example(depth=9_999, kind="array", closed=True, prefix=b'{"name":')
@example(depth=OUR_LIMIT, kind="array", closed=True, prefix=b"")
@example(depth=OUR_LIMIT + 1, kind="array", closed=True, prefix=b"")
def test_any_depth_decodes_or_is_refused_at_the_right_offset(depth, kind, closed, prefix):
    body = nested(depth, kind, closed, prefix)
    try:
        values = list(gojson.iter_values(body))
    except gojson.GoJSONError as err:
        text = err.stream_text()
    else:
        text = None
    go, ours = first_past(body, GO_LIMIT), first_past(body, OUR_LIMIT)
    if go is not None:              # Go's own answer, at Go's offset
        assert text == f"exceeded max depth at offset {go + 1}"
    elif ours is not None:          # jetraft's limit: refused where the nesting passes it
        assert text == f"exceeded max depth at offset {ours + 1}"
    elif prefix == b'{"name":' or (depth and not closed):
        assert text == "unexpected EOF"
    else:
        assert text is None
        if closed and depth <= 500:
            assert values[-1] == json.loads(nested(depth, kind, closed))
    if text is not None:            # the API's entry point refuses with the same text
        assert refusal(body) == text


def test_python_json_agrees_up_to_jetrafts_limit():
    for depth in (1, 100, 500, OUR_LIMIT):
        body = nested(depth, "array", True)
        value = gojson.unmarshal(body)
        for _ in range(depth - 1):
            (value,) = value
        assert value == [0]


def test_depth_is_counted_outside_strings_only():
    brackets = b"[" * 20_000
    assert gojson.unmarshal(b'{"a":"' + brackets + b'"}') == {"a": "[" * 20_000}
    assert gojson.unmarshal(b'["\\"[' + brackets + b'"]') == ['"[' + "[" * 20_000]
    assert gojson.unmarshal(b'["\\\\", ' + b"[" * 5 + b"]" * 5 + b"]") == ["\\", [[[[[]]]]]]


def test_a_syntax_error_before_the_depth_limit_is_reported_instead():
    assert refusal(b"[1 2" + b"[" * 50_000) == "invalid character '2' after array element at offset 4"
    assert refusal(b'{"a":tru' + b"[" * 50_000) == "invalid character '[' in literal true (expecting 'e') at offset 9"


def test_unmarshal_wording_has_no_offset():
    with pytest.raises(gojson.GoJSONError) as info:
        gojson.unmarshal(b"{" + b'"a":{' * 20_000)
    assert info.value.unmarshal_text() == "exceeded max depth"
    with pytest.raises(gojson.GoJSONError) as info:
        gojson.unmarshal(b'{"batch":1')
    assert info.value.unmarshal_text() == "unexpected end of JSON input"
    with pytest.raises(gojson.GoJSONError) as info:
        gojson.unmarshal(b'{"batch":1} {"batch":2}')
    assert info.value.unmarshal_text() == "invalid character '{' after top-level value"


# --- numbers ---------------------------------------------------------------------------------

LITERALS = st.one_of(
    st.from_regex(re.compile(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,4})?([eE][+-]?[0-9]{1,4})?"), fullmatch=True),
    st.integers(1, 6_000).map(lambda n: "9" * n),
    st.sampled_from(["-0", "1e999", "-1e999", "1E400", "9223372036854775807", "9223372036854775808",
                     "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
                     "18446744073709551616", "1.0", "1e2", "0.5e-3"]),
)


def integer_value(literal: str) -> int | None:
    """The integer a literal without fraction or exponent stands for (None otherwise or
    beyond any Go integer type)."""
    if not re.fullmatch(r"-?[0-9]+", literal) or len(literal.lstrip("-")) > 25:
        return None
    return int(literal)


@settings(max_examples=300, deadline=None)
@given(literal=LITERALS, gotype=st.sampled_from(["int", "int32", "int64", "uint64", "time.Duration"]))
def test_any_number_literal_is_taken_only_within_its_go_type(literal, gotype):
    req = decode_request(b'{"offset":' + literal.encode() + b"}", "JSApiStreamNamesRequest")
    expected = integer_value(literal)
    lo, hi = gojson.INT_RANGES[gotype]
    if expected is not None and lo <= expected <= hi and not (lo == 0 and literal.startswith("-")):
        value = int_field(req, "offset", "JSApiStreamNamesRequest", gotype)
        assert type(value) is int and value == expected
        return
    with pytest.raises(JSApiError) as info:
        int_field(req, "offset", "JSApiStreamNamesRequest", gotype)
    assert info.value.description == (f"invalid JSON: json: cannot unmarshal number {literal} into Go "
                                      f"struct field JSApiStreamNamesRequest.offset of type {gotype}")


@settings(max_examples=200, deadline=None)
@given(literal=LITERALS)
def test_any_number_literal_decodes_to_its_value(literal):
    (value,) = gojson.unmarshal(b"[" + literal.encode() + b"]")
    assert gojson.number_literal(value) == literal
    if re.fullmatch(r"-?[0-9]{1,4000}", literal):
        assert isinstance(value, int) and value == int(literal)
    else:
        assert isinstance(value, float) and value == float(literal)


def test_pinned_integer_refusals():
    req = decode_request(b'{"offset":1e999}', "JSApiStreamNamesRequest")    # decodes fine...
    with pytest.raises(JSApiError) as info:                                 # ...the field refuses
        int_field(req, "offset", "JSApiStreamNamesRequest", "int")
    assert info.value.description == ("invalid JSON: json: cannot unmarshal number 1e999 into Go struct "
                                      "field JSApiStreamNamesRequest.offset of type int")


def test_nan_and_infinity_are_syntax_errors():
    assert refusal(b'{"offset":NaN}') == "invalid character 'N' looking for beginning of value at offset 11"
    assert refusal(b'{"offset":Infinity}') == "invalid character 'I' looking for beginning of value at offset 11"
    assert refusal(b'{"offset":-Infinity}') == "invalid character 'I' in numeric literal at offset 12"
    assert refusal(b'{"s":"NaN", "offset":NaN}') == "invalid character 'N' looking for beginning of value at offset 22"


# --- any JSON text -----------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(INT64[0], UINT64[1])
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_random_json_decodes_as_python_does(value, ascii_only, indent):
    body = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()
    assert gojson.unmarshal(body) == json.loads(body)
    assert list(gojson.iter_values(body)) == [json.loads(body)]


def same(ours, theirs) -> bool:
    """Equal values of the same kinds (a float may be a GoNumber, 0 a GoInt)."""
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(ours) == len(theirs) and all(map(same, ours, theirs))
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and list(ours) == list(theirs) and all(
            same(ours[k], theirs[k]) for k in theirs)
    return type(ours) in (type(theirs), gojson.GoNumber, gojson.GoInt) and ours == theirs


JSONISH = st.text(alphabet='[]{}",:0123456789.eE-+ tfrunlasx\\', max_size=40)


@settings(max_examples=500, deadline=None)
@given(text=JSONISH)
def test_jsonish_text_agrees_with_python_or_is_refused(text):
    body = text.encode()
    try:
        theirs = json.loads(body)
    except ValueError:
        theirs = ValueError
    try:
        ours = gojson.unmarshal(body)
    except gojson.GoJSONError as err:
        assert err.unmarshal_text()
        assert theirs is ValueError or "NaN" in text or "Infinity" in text
    else:
        assert same(ours, theirs)


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=80) | JSONISH.map(str.encode))
def test_any_bytes_give_a_value_or_10025(payload):
    try:
        decode_request(payload, "StreamConfigRequest")
    except JSApiError as err:
        assert err.err_code == 10025 and err.description.startswith("invalid JSON: ")


def test_bad_strings_read_as_go_reads_them():
    assert gojson.unmarshal(b'{"a":"\xff\xfe"}') == {"a": "\ufffd\ufffd"}
    assert gojson.unmarshal(b'["\\ud800", "\\ud83d\\ude00", "\\udc00x", "\\\\ud800"]') == \
        ["\ufffd", "\U0001f600", "\ufffdx", "\\ud800"]
    assert refusal(b'{"a":"\\q"}') == "invalid escape sequence `\\q` in string at offset 8"
    assert refusal(b'{"a":"\\u12x4"}') == "invalid escape sequence `\\u12x4` in string at offset 12"
    assert refusal(b'{"a":1.}') == "invalid character '}' in numeric literal at offset 8"


# --- pull requests ------------------------------------------------------------------------------

@pytest.mark.parametrize(("payload", "reason"), [
    (b"{" + b'"a":{' * 20_000, "exceeded max depth"),
    (b'{"batch":1e999}', "json: cannot unmarshal number 1e999 into Go struct field .batch of type int"),
    (b'{"expires":99999999999999999999}',
     "json: cannot unmarshal number 99999999999999999999 into Go struct field .expires of type time.Duration"),
    (b'{"max_bytes":9223372036854775808}',
     "json: cannot unmarshal number 9223372036854775808 into Go struct field .max_bytes of type int"),
    (b'{"min_pending":1e999}', "json: cannot unmarshal number 1e999 into Go struct field .min_pending of type int64"),
    (b'{"no_wait":1e999}', "json: cannot unmarshal number into Go struct field .no_wait of type bool"),
    (b'{"batch":NaN}', "invalid character 'N' looking for beginning of value"),
    (b'{"batch":1', "unexpected end of JSON input"),
])
def test_pull_request_refusals(payload, reason):
    with pytest.raises(_BadRequest) as info:
        _parse_next_request(payload)
    assert str(info.value) == reason


@pytest.mark.parametrize(("payload", "batch"), [
    (b"[" * 50_000, 1), (b"99999999999999999999", 1), (b"+3", 3), (b"1_0", 1), (b" 7 ", 7),
])
def test_a_pull_request_that_is_not_an_object_is_a_batch_size(payload, batch):
    assert _parse_next_request(payload)[0] == batch


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=60) | JSONISH.map(lambda t: ("{" + t).encode()))
def test_any_pull_request_decodes_or_is_a_bad_request(payload):
    try:
        _parse_next_request(payload)
    except _BadRequest as err:
        assert str(err)


# --- through the account: DIRECT.GET and every API subject ------------------------------------

class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields) -> None:
        assert name in EVENTS, name
        self.lines.append((name, fields))


T0 = 1_800_000_000_000_000_000


@pytest.fixture
def account():
    acc = JetStreamAccount("$G", store_dir=None, sync=None, events=Events(), interest=lambda s: True,
                           server_version="2.15.1")
    body = json.dumps({"name": "KV", "subjects": ["kv.>"], "allow_direct": True, "storage": "memory"})
    (created,) = acc.handle_api("$JS.API.STREAM.CREATE.KV", "_INBOX.r", None, body.encode(), T0)
    assert "error" not in json.loads(created.out.data)
    acc.publish(acc.streams["KV"], "kv.a", None, None, b"hi", T0)
    consumer = json.dumps({"stream_name": "KV", "config": {"durable_name": "c", "ack_policy": "explicit"}})
    acc.handle_api("$JS.API.CONSUMER.DURABLE.CREATE.KV.c", "_INBOX.r", None, consumer.encode(), T0)
    return acc


MALFORMED = b"NATS/1.0 408 Malformed Request\r\n\r\n"


@pytest.mark.parametrize("payload", [
    b"[" * 50_000, b'{"seq":1e999}', b'{"seq":99999999999999999999}', b'{"seq":-1}', b'{"seq":-0}',
    b'{"seq":1.0}', b'{"seq":NaN}', b'[{"seq":1}]', b'{"seq":1} {"seq":2}', b'{"last_by_subj":5}',
    b'{"seq":1,"no_hdr":5}', b'{"seq":1,"start_time":"x"}', b"  ",
])
def test_direct_get_refuses_what_go_refuses(account, payload):
    (reply,) = account.handle_api("$JS.API.DIRECT.GET.KV", "_INBOX.r", None, payload, T0)
    assert (reply.out.headers, reply.out.data) == (MALFORMED, b"")


def test_direct_get_takes_no_hdr_and_ignores_unknown_keys(account):
    (reply,) = account.handle_api("$JS.API.DIRECT.GET.KV", "_INBOX.r", None, b'{"seq":1,"bogus":[[1]]}', T0)
    assert b"Nats-Sequence: 1\r\n" in reply.out.headers and reply.out.data == b"hi"
    (reply,) = account.handle_api("$JS.API.DIRECT.GET.KV", "_INBOX.r", None, b'{"seq":1,"no_hdr":true}', T0)
    assert (reply.out.headers, reply.out.data) == (None, b"hi")


def test_one_direct_get_batch_sends_at_most_its_bound_and_says_what_is_left(account):
    """A batch of a million over 5,000 stored messages: DIRECT_GET_MAX_MSGS messages then an
    EOB whose Nats-Num-Pending is what is left; asked again from there, the rest."""
    for i in range(5_000):
        account.publish(account.streams["KV"], "kv.n", None, None, b"x", T0 + i)
    out = account.handle_api("$JS.API.DIRECT.GET.KV", "_INBOX.r", None, b'{"seq":2,"batch":1000000}', T0)
    assert len(out) == DIRECT_GET_MAX_MSGS + 1
    eob = out[-1].out.headers.decode()
    assert eob.startswith("NATS/1.0 204 EOB\r\n")
    left = 5_001 - 1 - DIRECT_GET_MAX_MSGS            # "hi" at 1, then 5,000; asked from 2
    assert f"Nats-Num-Pending: {left}\r\n" in eob
    assert f"Nats-Last-Sequence: {1 + DIRECT_GET_MAX_MSGS}\r\n" in eob
    rest = account.handle_api("$JS.API.DIRECT.GET.KV", "_INBOX.r", None,
                              f'{{"seq":{2 + DIRECT_GET_MAX_MSGS},"batch":1000000}}'.encode(), T0)
    assert len(rest) == left + 1 and "Nats-Num-Pending: 0\r\n" in rest[-1].out.headers.decode()


API_SUBJECTS = ["$JS.API.STREAM.CREATE.X", "$JS.API.STREAM.UPDATE.KV", "$JS.API.STREAM.INFO.KV",
                "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.STREAM.PURGE.NOPE",
                "$JS.API.STREAM.MSG.GET.KV", "$JS.API.STREAM.MSG.DELETE.NOPE", "$JS.API.DIRECT.GET.KV",
                "$JS.API.DIRECT.GET.KV.kv.a", "$JS.API.CONSUMER.CREATE.KV", "$JS.API.CONSUMER.NAMES.KV",
                "$JS.API.CONSUMER.LIST.KV", "$JS.API.CONSUMER.MSG.NEXT.KV.c", "$JS.API.INFO"]
HOSTILE = st.one_of(
    st.binary(max_size=60),
    JSONISH.map(str.encode),
    st.builds(lambda n, o: o * n, st.integers(0, 30_000), st.sampled_from([b"[", b"{", b'{"a":', b'{"seq":['])),
    st.builds(lambda k, lit: json.dumps({k: 0}).replace("0", lit).encode(),
              st.sampled_from(["seq", "offset", "keep", "batch", "max_msgs", "config", "name", "expires"]),
              LITERALS),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(subject=st.sampled_from(API_SUBJECTS), payload=HOSTILE)
def test_no_request_body_makes_the_api_fail_inside(account, subject, payload):
    """Whatever the body, every API subject answers with its reply (JSON with its type, or a
    status) and nothing fails inside the server (no api_request_failed event)."""
    out = account.handle_api(subject, "_INBOX.r", None, payload, T0)
    assert out is not None
    for reply in out:
        if reply.out.subject == "_INBOX.r" and reply.out.headers is None and "MSG" not in subject \
                and "DIRECT" not in subject:
            assert json.loads(reply.out.data)["type"].startswith("io.nats.jetstream.api.v1.")
    assert [name for name, _ in account.events.lines if name == "api_request_failed"] == []
