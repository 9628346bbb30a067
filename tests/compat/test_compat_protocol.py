"""The NATS text protocol on a raw socket, byte for byte, against jetraft and nats-server."""

from __future__ import annotations

import random

from compat_support import CRLF, RawClient, connect, payloads, round_trip, run, take


def test_info_comes_first(server):
    """The server speaks first: one INFO line with a JSON object."""
    with RawClient(server.address) as raw:
        assert raw.info_line.startswith(b"INFO {") and raw.info_line.endswith(CRLF)
        info = raw.info
        assert info["proto"] == 1
        assert info["headers"] is True
        assert info["max_payload"] == 1024 * 1024
        assert isinstance(info["client_id"], int)
        assert isinstance(info["server_id"], str) and info["server_id"]
        assert info["version"].startswith("2.")


def test_ping_pong(server):
    """PING is answered with PONG, repeatedly."""
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"PING\r\nPING\r\n")
        raw.expect(b"PONG\r\n")
        raw.expect(b"PONG\r\n")


def test_pub_with_two_spaces(server):
    """`PUB foo  5` (empty reply, as nats-py writes it) is accepted and delivered."""
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"SUB foo 1\r\nPUB foo  5\r\nhello\r\nPING\r\n")
        assert raw.read_msg() == ([b"MSG", b"foo", b"1", b"5"], b"hello")
        raw.expect(b"PONG\r\n")


def test_pub_with_reply_and_queue_sub(server):
    """MSG carries the reply subject; a queue SUB gets the message once."""
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"SUB req grp 7\r\nPUB req _INBOX.abc.def 2\r\nhi\r\nPING\r\n")
        assert raw.read_msg() == ([b"MSG", b"req", b"7", b"_INBOX.abc.def", b"2"], b"hi")
        raw.expect(b"PONG\r\n")


def test_hpub_multi_value_headers(server):
    """HPUB with a repeated header key arrives as HMSG with the header block unchanged."""
    block = b"NATS/1.0\r\nX-Multi: a\r\nX-Multi: b\r\nX-One: 1\r\n\r\n"
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"SUB h 1\r\nHPUB h %d %d\r\n%spay\r\nPING\r\n" % (len(block), len(block) + 3, block))
        tokens, body = raw.read_msg()
        assert tokens == [b"HMSG", b"h", b"1", str(len(block)).encode(), str(len(block) + 3).encode()]
        assert body == block + b"pay"
        raw.expect(b"PONG\r\n")


def test_headers_between_raw_and_nats_py(server):
    """nats-py's HPUB reaches a raw subscriber as HMSG; a raw HPUB reaches nats-py."""

    async def scenario():
        nc = await connect(server.url)
        with RawClient(server.address) as raw:
            raw.connect()
            raw.send(b"SUB to.raw 1\r\nPING\r\n")
            raw.expect(b"PONG\r\n")
            await nc.publish("to.raw", b"body", headers={"K": "v"})
            await round_trip(nc)
            tokens, data = raw.read_msg()
            block = b"NATS/1.0\r\nK: v\r\n\r\n"
            assert tokens == [b"HMSG", b"to.raw", b"1", b"%d" % len(block), b"%d" % (len(block) + 4)]
            assert data == block + b"body"

            sub = await nc.subscribe("to.py")
            await round_trip(nc)
            raw.send(b"HPUB to.py %d %d\r\n%sxyz\r\nPING\r\n" % (len(block), len(block) + 3, block))
            raw.expect(b"PONG\r\n")
            await round_trip(nc)
            (msg,) = await take(sub)
            assert (msg.data, msg.headers) == (b"xyz", {"K": "v"})
        await nc.close()

    run(scenario)


def test_no_responders_status(server):
    """A request to no subscriber, from a headers+no_responders client, gets a 503 HMSG."""
    with RawClient(server.address) as raw:
        raw.connect(headers=True, no_responders=True)
        raw.send(b"SUB _INBOX.r 1\r\nPUB nobody _INBOX.r 2\r\nhi\r\nPING\r\n")
        tokens, body = raw.read_msg()
        assert tokens[:3] == [b"HMSG", b"_INBOX.r", b"1"]
        assert tokens[3] == tokens[4], "status message has no payload"
        assert body.startswith(b"NATS/1.0 503") and body.endswith(b"\r\n\r\n")
        raw.expect(b"PONG\r\n")


def test_unsub_with_max(server):
    """`UNSUB <sid> 3` lets exactly three more messages through."""
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"SUB lim 1\r\nUNSUB 1 3\r\n" + b"PUB lim 1\r\nx\r\n" * 5 + b"PING\r\n")
        for _ in range(3):
            assert raw.read_msg() == ([b"MSG", b"lim", b"1", b"1"], b"x")
        raw.expect(b"PONG\r\n")


def test_verbose_connect(server):
    """A verbose client gets +OK for CONNECT and for each later SUB/PUB."""
    with RawClient(server.address) as raw:
        raw.send(b'CONNECT {"verbose":true,"pedantic":false}\r\n')
        raw.expect(b"+OK\r\n")
        raw.send(b"SUB v 1\r\n")
        raw.expect(b"+OK\r\n")
        raw.send(b"PUB v 1\r\nx\r\n")
        raw.expect(b"+OK\r\n")
        assert raw.read_msg() == ([b"MSG", b"v", b"1", b"1"], b"x")
        raw.ping()


def test_unknown_verb(server):
    """An unknown protocol verb gets nats-server's -ERR and the connection is closed."""
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"FOO bar\r\n")
        assert raw.read_until_closed() == b"-ERR 'Unknown Protocol Operation'\r\n"


def test_control_line_too_long(server):
    """A control line over 4096 bytes gets nats-server's -ERR and a close."""
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"SUB " + b"a" * 5000 + b" 1\r\n")
        assert raw.read_until_closed() == b"-ERR 'maximum control line exceeded'\r\n"


def test_invalid_subject_keeps_connection(server):
    """SUB on an invalid subject gets -ERR 'Invalid Subject'; the connection stays usable."""
    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"SUB foo..bar 1\r\n")
        raw.expect(b"-ERR 'Invalid Subject'\r\n")
        raw.send(b"SUB ok 2\r\nPUB ok 2\r\nok\r\nPING\r\n")
        assert raw.read_msg() == ([b"MSG", b"ok", b"2", b"2"], b"ok")
        raw.expect(b"PONG\r\n")


#: Byte strings a broken or hostile client might send.
GARBAGE = [
    b"FOO\r\n",
    b"\x00\x01\x02\xff\xfe\r\n",
    b"PUB\r\n",
    b"PUB foo bar baz qux 1\r\nx\r\n",
    b"PUB foo -1\r\n",
    b"PUB foo 99999999999999999999\r\n",
    b"PUB foo 3\r\nabcdef\r\n",
    b"HPUB foo 3 2\r\nab\r\n",
    b"SUB\r\n",
    b"UNSUB x\r\n",
    b"CONNECT {not json\r\n",
    b"MSG foo 1 1\r\nx\r\n",
    b"PUB foo 10\r\nshort",
    b"X" * 10000,
    b"\r\n\r\n\r\n",
]


def test_garbage_clients_do_not_disturb_others(server):
    """Malformed input on other connections never disturbs a well-behaved client."""
    rng = random.Random(20240601)
    garbage = GARBAGE + [rng.randbytes(rng.randrange(1, 3000)) for _ in range(10)]

    async def scenario():
        errors = []

        async def on_error(e):
            errors.append(e)

        nc = await connect(server.url, error_cb=on_error)
        sub = await nc.subscribe("steady")
        for i, junk in enumerate(garbage):
            with RawClient(server.address) as raw:
                if i % 2:
                    raw.connect()
                try:
                    raw.send(junk)
                except OSError:
                    pass  # the server may already have closed this connection: fine
            await nc.publish("steady", str(i).encode())
        await round_trip(nc)
        assert nc.is_connected and errors == []
        assert payloads(await take(sub)) == [str(i).encode() for i in range(len(garbage))]
        await nc.close()

    run(scenario)
