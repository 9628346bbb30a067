"""Request decoding and reply encoding of the $JS.API layer, without a server.

The exact texts were observed from nats-server 2.15.1 (tests/compat/test_compat_js_bad_input.py
compares them live); here they pin jetraft's Go-compatible wording for each shape of bad input.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetraft.jetstream.requests import decode_request, json_bytes, pub_ack_bytes
from jetraft.jetstream.errors import JSApiError


def _error(payload: bytes) -> str:
    with pytest.raises(JSApiError) as info:
        decode_request(payload, "StreamConfigRequest")
    assert info.value.err_code == 10025
    return info.value.description


@pytest.mark.parametrize(("payload", "description"), [
    (b"{not json", "invalid JSON: invalid character 'n' looking for beginning of object key string at offset 2"),
    (b'{"name":"T"} trailing', "invalid JSON: invalid character 'a' in literal true (expecting 'u') at offset 16"),
    (b"\xff\xfe", "invalid JSON: invalid character '\\xff' looking for beginning of value at offset 1"),
    (b'{"name":"a\tb"}', "invalid JSON: invalid character '\\t' in string at offset 11"),
    (b'{"name":', "invalid JSON: unexpected EOF"),
    (b'{"name" "x"}', "invalid JSON: invalid character '\"' after object key at offset 9"),
    (b'{"a":1 "b":2}', "invalid JSON: invalid character '\"' after object key:value pair at offset 8"),
    (b"[1 2]", "invalid JSON: invalid character '2' after array element at offset 4"),
    (b"[1,2]", "invalid JSON: json: cannot unmarshal array into Go value of type server.StreamConfigRequest"),
    (b'"T"', "invalid JSON: json: cannot unmarshal string into Go value of type server.StreamConfigRequest"),
    (b"42", "invalid JSON: json: cannot unmarshal number into Go value of type server.StreamConfigRequest"),
])
def test_bad_json_gets_gos_wording(payload, description):
    assert _error(payload) == description


def test_empty_and_concatenated_bodies():
    assert decode_request(b"", "X") is None
    assert decode_request(b"  \r\n", "X") is None
    assert decode_request(b'{"a":1} {"a":2}', "X") == {"a": 2}   # Go's streaming decoder: last wins
    assert decode_request(b"null", "X") is None


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_fail_with_10025(payload):
    try:
        decode_request(payload, "StreamConfigRequest")
    except JSApiError as err:
        assert err.err_code == 10025 and err.description.startswith("invalid JSON: ")


def test_replies_are_encoded_as_go_does():
    assert json_bytes({"d": "a > b & <c>"}) == b'{"d":"a \\u003e b \\u0026 \\u003cc\\u003e"}'
    assert json.loads(json_bytes({"d": "a > b"})) == {"d": "a > b"}
    assert pub_ack_bytes({"stream": "S", "seq": 7}) == b'{"stream":"S","seq":7}'
    assert pub_ack_bytes({"stream": "S", "seq": 1, "duplicate": True}) == \
        b'{"stream":"S","seq":1,"duplicate": true}'
    assert pub_ack_bytes({"stream": "S", "domain": "hub", "seq": 2}) == \
        b'{"stream":"S","domain":"hub","seq":2}'
