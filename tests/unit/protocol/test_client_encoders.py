"""Encoders: byte-exact output, and nats-py's own parser accepts what we send."""

from __future__ import annotations

import asyncio
import json

import pytest

from jetraft.protocol import (
    NO_RESPONDERS_HEADERS,
    OK,
    PING,
    PONG,
    encode_err,
    encode_info,
    encode_msg,
    no_responders_headers,
    status_headers,
)


def test_constants() -> None:
    assert PING == b"PING\r\n"
    assert PONG == b"PONG\r\n"
    assert OK == b"+OK\r\n"


def test_encode_info_is_compact_json_on_one_line() -> None:
    info = {"server_id": "S", "version": "2.10.0", "headers": True, "max_payload": 1048576, "name": "zoné"}
    data = encode_info(info)
    assert data == b'INFO {"server_id":"S","version":"2.10.0","headers":true,"max_payload":1048576,"name":"zon\xc3\xa9"}\r\n'
    assert json.loads(data[5:-2]) == info


def test_encode_info_rejects_what_json_cannot_encode() -> None:
    with pytest.raises(TypeError):
        encode_info({"x": object()})


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("foo", "1", None, b"hello"), b"MSG foo 1 5\r\nhello\r\n"),
        (("foo", "1", "_INBOX.a.b", b"hello"), b"MSG foo 1 _INBOX.a.b 5\r\nhello\r\n"),
        (("foo", "22", None, b""), b"MSG foo 22 0\r\n\r\n"),
        (("foo", "1", "", b"x"), b"MSG foo 1 1\r\nx\r\n"),  # an empty reply is no reply
        (("foo", "1", None, b"hello", b"NATS/1.0\r\n\r\n"), b"HMSG foo 1 12 17\r\nNATS/1.0\r\n\r\nhello\r\n"),
        (("foo", "1", "r", b"", b"NATS/1.0\r\n\r\n"), b"HMSG foo 1 r 12 12\r\nNATS/1.0\r\n\r\n\r\n"),
        (("foo", "1", None, b"x", b""), b"MSG foo 1 1\r\nx\r\n"),  # empty headers: plain MSG
        (("foo", "1", None, b"x", None), b"MSG foo 1 1\r\nx\r\n"),
        (("caf\udcc3\udca9", "s\udcff", None, b"x"), b"MSG caf\xc3\xa9 s\xff 1\r\nx\r\n"),
    ],
)
def test_encode_msg(args: tuple, expected: bytes) -> None:
    assert encode_msg(*args) == expected


def test_encode_msg_accepts_bytes_like_payloads() -> None:
    assert encode_msg("a", "1", None, bytearray(b"xy")) == b"MSG a 1 2\r\nxy\r\n"
    assert encode_msg("a", "1", None, memoryview(b"xy"), bytearray(b"NATS/1.0\r\n\r\n")) == (
        b"HMSG a 1 12 14\r\nNATS/1.0\r\n\r\nxy\r\n"
    )


def test_encode_err_quotes_the_text() -> None:
    assert encode_err("Unknown Protocol Operation") == b"-ERR 'Unknown Protocol Operation'\r\n"
    assert encode_err("Permissions Violation for Publish to \"x\"") == (
        b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((503,), b"NATS/1.0 503\r\n\r\n"),
        ((404, "No Messages"), b"NATS/1.0 404 No Messages\r\n\r\n"),
        ((408, "Request Timeout", {"Nats-Pending-Messages": "3", "Nats-Pending-Bytes": "120"}),
         b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\nNats-Pending-Bytes: 120\r\n\r\n"),
        ((100, "Idle Heartbeat", {"Nats-Last-Consumer": "0", "Nats-Last-Stream": "0"}),
         b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\nNats-Last-Stream: 0\r\n\r\n"),
        ((409, "", {}), b"NATS/1.0 409\r\n\r\n"),
    ],
)
def test_status_headers(args: tuple, expected: bytes) -> None:
    assert status_headers(*args) == expected


@pytest.mark.parametrize(
    ("args"),
    [(99,), (1000,), (503, "a\r\nb"), (503, "", {"K": "v\n"}), (503, "", {"K:x": "v"}), (503, "", {"": "v"})],
)
def test_status_headers_refuses_what_would_break_the_block(args: tuple) -> None:
    with pytest.raises(ValueError):
        status_headers(*args)


def test_no_responders_headers_match_nats_server() -> None:
    assert NO_RESPONDERS_HEADERS == b"NATS/1.0 503\r\n\r\n"
    hdr = no_responders_headers("svc.echo")
    assert hdr == b"NATS/1.0 503\r\nNats-Subject: svc.echo\r\n\r\n"
    assert len(hdr) == 32 + len("svc.echo")  # client.go: hdrLen := 32 + len(subject)
    # The full frame nats-server writes (client.go processInboundClientMsg).
    assert encode_msg("_INBOX.x.y", "7", None, b"", hdr) == (
        b"HMSG _INBOX.x.y 7 40 40\r\nNATS/1.0 503\r\nNats-Subject: svc.echo\r\n\r\n\r\n"
    )


class _RecordingClient:
    """The slice of nats-py's Client that its protocol Parser calls back into."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    async def _process_msg(self, sid, subject, reply, payload, headers) -> None:
        self.events.append(("msg", sid, bytes(subject), bytes(reply), payload, headers))

    async def _process_err(self, err) -> None:
        self.events.append(("err", err))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))

    async def _process_info(self, info) -> None:
        self.events.append(("info", info))


def test_nats_py_parser_reads_what_we_encode() -> None:
    parser_mod = pytest.importorskip("nats.protocol.parser")
    hdr = status_headers(408, "Request Timeout", {"Nats-Pending-Messages": "1"})
    stream = b"".join([
        encode_info({"server_id": "S", "headers": True}),
        PING, PONG, OK,
        encode_msg("foo.bar", "1", None, b"hello"),
        encode_msg("foo.bar", "2", "_INBOX.x.y", b"\r\nMSG x 1 1\r\n"),
        encode_msg("_INBOX.x.y", "3", None, b"", no_responders_headers("svc")),
        encode_msg("s", "4", "r", b"body", hdr),
        encode_err("Stale Connection"),
    ])
    client = _RecordingClient()
    parser = parser_mod.Parser(client)

    async def run() -> None:
        for i in range(0, len(stream), 5):  # split buffers too
            await parser.parse(stream[i : i + 5])

    asyncio.run(run())
    assert client.events == [
        ("info", {"server_id": "S", "headers": True}),
        ("ping",),
        ("pong",),
        ("msg", 1, b"foo.bar", b"", b"hello", None),
        ("msg", 2, b"foo.bar", b"_INBOX.x.y", b"\r\nMSG x 1 1\r\n", None),
        ("msg", 3, b"_INBOX.x.y", b"", b"", b"NATS/1.0 503\r\nNats-Subject: svc\r\n\r\n"),
        ("msg", 4, b"s", b"r", b"body", hdr),
        ("err", "'stale connection'"),
    ]
