"""Fault isolation: an exception while handling one connection's input closes that connection
alone; the server, its other clients and its routes go on, and the event log holds the
traceback.

The failures are injected into an in-process Server (a handler made to raise for one subject);
every wait polls a condition under a deadline.
"""

from __future__ import annotations

import io
import json

import trio
from polling import apoll
from servers import free_port

from jetraft.config import config_from_text
from jetraft.events import EventLog
from jetraft.server import Server

DEADLINE = 10.0


class Node:
    """One in-process Server with its event log captured."""

    def __init__(self, name: str, text: str) -> None:
        self.log = io.StringIO()
        self.server = Server(config_from_text(text), events=EventLog(name, stream=self.log, threshold="debug"))

    def events(self, name: str) -> list[dict]:
        rows = [json.loads(line) for line in self.log.getvalue().splitlines()]
        return [r for r in rows if r["event"] == name]


class Raw:
    """A raw client socket with a line reader."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    @classmethod
    async def open(cls, port: int) -> Raw:
        raw = cls(await trio.open_tcp_stream("127.0.0.1", port))
        assert (await raw._line()).startswith(b"INFO ")
        return raw

    async def line(self) -> bytes:
        """The next line but asynchronous INFOs (the cluster's client URLs changing)."""
        while (line := await self._line()).startswith(b"INFO "):
            pass
        return line

    async def _line(self) -> bytes:
        with trio.fail_after(DEADLINE):
            while b"\r\n" not in self.buf:
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError(f"closed; buffered {self.buf!r}")
                self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def closed(self) -> bytes:
        """Everything until the server closes the connection."""
        with trio.fail_after(DEADLINE):
            while data := await self.stream.receive_some(65536):
                self.buf += data
        return self.buf


def failing_on(value: str, original):
    """``original``, made to raise when one of its positional arguments, or the subject of
    the message among them, is ``value``."""
    def publish(*args, **kwargs):
        if value in args or any(getattr(a, "subject", None) == value for a in args):
            raise RuntimeError(f"injected failure on {value}")
        return original(*args, **kwargs)
    return publish


async def test_an_exception_handling_one_client_closes_that_client_alone():
    node = Node("n1", "host: 127.0.0.1\nport: -1\n")
    server = node.server
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        server.router.publish = failing_on("boom", server.router.publish)
        bystander = await Raw.open(server.client_port)
        await bystander.send(b'CONNECT {"verbose":false}\r\nSUB ok 1\r\nPING\r\n')
        assert await bystander.line() == b"PONG"

        victim = await Raw.open(server.client_port)
        await victim.send(b'CONNECT {"verbose":false}\r\nPUB boom 2\r\nhi\r\nPUB ok 3\r\nnot\r\n')
        rest = await victim.closed()
        assert rest == b"-ERR 'Internal Server Error'\r\n"  # nothing after the failure is handled

        [error] = node.events("connection_error")
        assert error["kind"] == "client" and "injected failure on boom" in error["error"]
        assert "Traceback" in error["traceback"] and "failing_on" not in error["error"]
        assert [e["reason"] for e in node.events("client_closed")] == ["Internal Server Error"]

        # the server and the other client go on, and new clients are served
        fresh = await Raw.open(server.client_port)
        await fresh.send(b'CONNECT {"verbose":false}\r\nPUB ok 5\r\nhello\r\nPING\r\n')
        assert await fresh.line() == b"PONG"
        assert await bystander.line() == b"MSG ok 1 5"
        assert await bystander.line() == b"hello"
        server.shutdown()


async def test_an_exception_handling_a_route_closes_that_route_alone_and_it_comes_back():
    ports = [free_port(), free_port()]
    texts = [f"server_name: n{i}\nhost: 127.0.0.1\nport: -1\ncluster {{\n  name: C1\n  host: 127.0.0.1\n"
             f"  port: {ports[i]}\n  routes: [nats://127.0.0.1:{ports[1 - i]}]\n}}\n" for i in range(2)]
    n0, n1 = Node("n0", texts[0]), Node("n1", texts[1])
    async with trio.open_nursery() as nursery:
        async with trio.open_nursery() as starting:
            for node in (n0, n1):
                starting.start_soon(nursery.start, node.server.serve)
        await apoll(lambda: "n0" in n1.server.routes.peers and "n1" in n0.server.routes.peers,
                    "the route is up", DEADLINE)
        n1.server.router.publish_from_route = failing_on("n0", n1.server.router.publish_from_route)  # src is n0

        # a message routed from n0 to n1 makes n1's route handling raise
        sub = await Raw.open(n1.server.client_port)
        await sub.send(b'CONNECT {"verbose":false}\r\nSUB x 1\r\nPING\r\n')
        assert await sub.line() == b"PONG"
        await apoll(lambda: n0.server.routes.match_remote("$G", "x") is not None, "interest in x on n0", DEADLINE)
        pub = await Raw.open(n0.server.client_port)
        await pub.send(b'CONNECT {"verbose":false}\r\nPUB x 1\r\na\r\nPING\r\n')
        assert await pub.line() == b"PONG"

        [error] = await apoll(lambda: n1.events("connection_error"), "the route's failure logged", DEADLINE,
                             retry_on=())
        assert error["kind"] == "route" and "injected failure" in error["error"]
        assert error["peer_name"] == "n0" and "Traceback" in error["traceback"]
        await apoll(lambda: [e for e in n1.events("route_closed") if e["reason"] == "Internal Server Error"],
                    "the route closed as Internal Server Error", DEADLINE, retry_on=())

        # both servers are still up, and the route is dialled again
        del n1.server.router.publish_from_route  # the method again
        await apoll(lambda: len(n1.events("route_connected")) >= 2 and "n0" in n1.server.routes.peers,
                    "the route is up again", DEADLINE, retry_on=())
        await apoll(lambda: n0.server.routes.match_remote("$G", "x") is not None, "interest again", DEADLINE)
        await pub.send(b"PUB x 1\r\nb\r\nPING\r\n")
        assert await pub.line() == b"PONG"
        assert await sub.line() == b"MSG x 1 1"
        assert await sub.line() == b"b"
        for node in (n0, n1):
            node.server.shutdown()


async def request(raw: Raw, subject: str, body: bytes) -> dict:
    """Publish ``body`` with a reply subject and return the JSON answer."""
    await raw.send(b"PUB %s _INBOX.r %d\r\n%s\r\n" % (subject.encode(), len(body), body))
    head = await raw.line()
    assert head.startswith(b"MSG _INBOX.r 1 "), head
    return json.loads(await raw.line())


async def test_an_exception_in_one_stream_stops_that_stream_alone(tmp_path, monkeypatch):
    from jetraft.jetstream.api import JetStreamAccount

    calls = []
    original = JetStreamAccount.publish

    def publish(self, entry, subject, *args, **kwargs):
        calls.append(entry.name)
        if entry.name == "A":
            raise RuntimeError("stream fault (injected)")
        return original(self, entry, subject, *args, **kwargs)

    monkeypatch.setattr(JetStreamAccount, "publish", publish)
    node = Node("n1", f'host: 127.0.0.1\nport: -1\njetstream {{ store_dir: "{tmp_path}" }}\n')
    server = node.server
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        raw = await Raw.open(server.client_port)
        await raw.send(b'CONNECT {"verbose":false}\r\nSUB _INBOX.r 1\r\nSUB plain 2\r\n')
        for name in ("A", "B"):
            created = await request(raw, f"$JS.API.STREAM.CREATE.{name}",
                                    json.dumps({"name": name, "subjects": [f"{name.lower()}.>"]}).encode())
            assert "error" not in created, created
        internal = {"code": 500, "err_code": 10051, "description": "internal error"}
        assert await request(raw, "a.x", b"1") == {"error": internal, "stream": "A", "seq": 0}
        [failed] = node.events("jetstream_stream_failed")
        assert (failed["stream"], "stream fault (injected)" in failed["error"]) == ("A", True)
        assert "Traceback" in failed["traceback"]
        # refused at once from now on, without touching the stream again
        assert await request(raw, "a.x", b"2") == {"error": internal, "stream": "A", "seq": 0}
        assert calls.count("A") == 1
        # the other stream, the API, core NATS and the connection go on
        assert await request(raw, "b.x", b"3") == {"stream": "B", "seq": 1}
        info = await request(raw, "$JS.API.STREAM.INFO.A", b"")
        assert info["state"]["messages"] == 0
        await raw.send(b"PUB plain 2\r\nok\r\n")
        assert (await raw.line(), await raw.line()) == (b"MSG plain 2 2", b"ok")
        assert not node.events("connection_error")
        server.shutdown()
