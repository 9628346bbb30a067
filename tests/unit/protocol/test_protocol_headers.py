"""jetraft NATS header blocks: parse/encode round trips, malformed input (HeaderError
only), and the nats-server style lookup (server/client.go sliceHeader)."""

from __future__ import annotations

import random

import pytest

from jetraft.protocol.headers import HeaderError, Headers, encode, get_header, parse


def test_plain_block_round_trip():
    raw = b"NATS/1.0\r\nNats-Msg-Id: 1\r\nA: x\r\nA: y\r\n\r\n"
    h = parse(raw)
    assert (h.status, h.description) == ("", "")
    assert h.fields == {"Nats-Msg-Id": ["1"], "A": ["x", "y"]}
    assert h.get("A") == "x" and h.get_all("A") == ["x", "y"] and h.get("a") is None
    assert encode(h) == raw


@pytest.mark.parametrize("raw, status, desc", [
    (b"NATS/1.0 503\r\n\r\n", "503", ""),
    (b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n", "408", "Request Timeout"),
    (b"NATS/1.0 100 Idle Heartbeat\r\n\r\n", "100", "Idle Heartbeat"),
])
def test_status_lines(raw, status, desc):
    h = parse(raw)
    assert (h.status, h.description) == (status, desc)
    assert encode(h) == raw


def test_values_keep_inner_spaces_and_colons_and_non_utf8():
    h = parse(b"NATS/1.0\r\nK:   a: b c  \r\nB: \xff\xfe\r\n\r\n")
    assert h.get("K") == "a: b c"
    assert parse(encode(h)) == h


@pytest.mark.parametrize("raw", [
    b"", b"NATS/1.0", b"HTTP/1.0\r\n\r\n", b"NATS/1.0\r\nA: b\r\n", b"NATS/1.0x\r\n\r\n",
    b"NATS/1.0 50\r\n\r\n", b"NATS/1.0 abc\r\n\r\n", b"NATS/1.0\r\nnocolon\r\n\r\n",
    b"NATS/1.0\r\n: v\r\n\r\n", b"NATS/1.0\r\nA B: v\r\n\r\n", b"NATS/1.0\r\nA: v\nB: w\r\n\r\n",
])
def test_malformed_raises_header_error(raw):
    with pytest.raises(HeaderError):
        parse(raw)


def test_not_bytes_and_encode_refusals():
    with pytest.raises(HeaderError):
        parse("NATS/1.0\r\n\r\n")  # type: ignore[arg-type]
    for bad in (Headers(fields={"A:B": ["v"]}), Headers(fields={"A": ["v\r\n"]}),
                Headers(status="5"), Headers(description="x")):
        with pytest.raises(HeaderError):
            encode(bad)


def test_fuzz_never_raises_anything_else():
    rng = random.Random(7)
    alphabet = b"NATS/1.0 \r\n:AbZ\xff"
    for _ in range(2000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        try:
            parse(raw)
        except HeaderError:
            pass
        get_header(raw, "A")


def test_get_header_like_nats_server():
    raw = b"NATS/1.0\r\nXNats-Msg-Id: no\r\nNats-Msg-Id:   yes \r\nNats-Msg-Id: second\r\n\r\n"
    assert get_header(raw, "Nats-Msg-Id") == "yes "
    assert get_header(raw, "nats-msg-id") is None
    assert get_header(None, "A") is None and get_header(b"", "A") is None
    assert get_header(b"NATS/1.0\r\nK: tail", "K") == "tail"
    assert get_header(b"NATS/1.0\r\nK", "K") is None
    # nats-server's quirk: a first match of the key inside "NATS/1.0" ends the search
    assert get_header(b"NATS/1.0\r\nA: v\r\n\r\n", "A") is None
