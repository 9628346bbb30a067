"""Helpers shared by the compat tests: a raw-socket NATS client and nats-py plumbing.

The compat tests are plain (sync) pytest functions so that pytest-trio leaves them
alone; each runs its asyncio scenario with ``run()``, since nats-py is asyncio-only.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

CRLF = b"\r\n"

#: The CONNECT a quiet raw client sends: no +OK acknowledgements, headers enabled.
QUIET_CONNECT = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True}


def json_type(value) -> str:
    """The JSON type of a decoded value (int and float are both "number")."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def run(scenario: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
    """Run an asyncio scenario to completion in a fresh event loop, bounded by ``timeout``;
    returns what it returns."""

    async def bounded() -> Any:
        return await asyncio.wait_for(scenario(), timeout)

    return asyncio.run(bounded())


async def connect(url: str, **options) -> Client:
    """Connect unmodified nats-py to ``url`` without reconnects (a drop is a failure).

    Errors go to ``error_cb`` when given, else are ignored (tests assert on what they
    can see: exceptions, messages, connection state).
    """

    async def ignore(_error: Exception) -> None:
        return None

    options.setdefault("error_cb", ignore)
    options.setdefault("allow_reconnect", False)
    options.setdefault("connect_timeout", 5)
    return await nats.connect(url, **options)


def server_info(nc: Client) -> dict:
    """The INFO the server sent ``nc`` (its latest), as nats-py decoded it: a JSON object.

    nats-py 2.16 (pinned in pyproject.toml) keeps it only in ``Client._server_info`` and has
    no public accessor; its public properties cover a few fields (``client_id``,
    ``max_payload``, ``connected_server_version``). This is the one place a test reads it.
    """
    return nc._server_info  # noqa: SLF001 - nats-py's, no public accessor (see above)


async def round_trip(*clients: Client) -> None:
    """Flush each client in order (PING/PONG), publishers first, then subscribers.

    Once a publisher's PONG is back the server has routed all its messages; once a
    subscriber's PONG is back, every message routed to it sits in its subscriptions'
    pending queues.  This is how a test knows a message was *not* delivered.
    """
    for nc in clients:
        # nats-py 2.16 writes flush()'s PING straight to the socket, ahead of publishes
        # still buffered for its flusher task; the first flush pushes those out, the
        # second PING then follows everything this client sent.
        await nc.flush(timeout=10)
        await nc.flush(timeout=10)


async def take(sub: Subscription) -> list[Msg]:
    """Return every message pending on a callback-less subscription (after round_trip)."""
    msgs = []
    while sub.pending_msgs > 0:
        msgs.append(await sub.next_msg(timeout=5))
    return msgs


def payloads(msgs: list[Msg]) -> list[bytes]:
    """The payloads of ``msgs`` in order."""
    return [m.data for m in msgs]


async def pub_and_sub(url: str, subject: str) -> tuple[Client, Client, Subscription]:
    """Two connections: a publisher, and a subscriber whose SUB on ``subject`` is in place."""
    pub, sub_nc = await connect(url), await connect(url)
    sub = await sub_nc.subscribe(subject)
    await round_trip(sub_nc)
    return pub, sub_nc, sub


async def close_all(*clients: Client) -> None:
    """Close every client."""
    for nc in clients:
        await nc.close()


async def assert_usable(nc: Client, subject: str = "usable.check") -> None:
    """Assert ``nc`` still works: a message it publishes comes back on its own subscription."""
    sub = await nc.subscribe(subject)
    await nc.publish(subject, b"still here")
    await round_trip(nc)
    assert nc.is_connected
    assert payloads(await take(sub)) == [b"still here"]
    await sub.unsubscribe()


class RawClient:
    """A NATS client that writes bytes and reads lines over a plain blocking socket.

    Reads INFO on construction (``self.info``).  Every read has a deadline, so a server
    that stays silent fails the test instead of hanging it.
    """

    def __init__(self, address: tuple[str, int], *, rcvbuf: int | None = None, timeout: float = 5.0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(address)
        self.timeout = timeout
        self._buf = bytearray()
        self.info_line = self.readline()
        op, _, body = self.info_line.partition(b" ")
        if op != b"INFO":
            raise AssertionError(f"expected INFO first, got {self.info_line!r}")
        self.info = json.loads(body)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def send(self, data: bytes) -> None:
        """Write all of ``data``."""
        self.sock.sendall(data)

    def connect(self, **options) -> None:
        """Send CONNECT (quiet defaults overridden by ``options``) and check PING/PONG."""
        self.send(b"CONNECT " + json.dumps({**QUIET_CONNECT, **options}).encode() + CRLF)
        if options.get("verbose"):
            self.expect(b"+OK\r\n")
        self.ping()

    def ping(self) -> None:
        """PING and expect PONG next, answering any server PING that comes first."""
        self.send(b"PING\r\n")
        while (line := self.readline()) == b"PING\r\n":
            self.send(b"PONG\r\n")
        assert line == b"PONG\r\n", f"expected PONG, got {line!r}"

    def _fill(self, deadline: float) -> None:
        """Receive more bytes into the buffer; EOFError when the server closed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no data before the deadline; buffered {bytes(self._buf)!r}")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout as e:
            raise TimeoutError(f"no data before the deadline; buffered {bytes(self._buf)!r}") from e
        except ConnectionResetError as e:
            raise EOFError("connection reset by the server") from e
        if not chunk:
            raise EOFError(f"connection closed by the server; buffered {bytes(self._buf)!r}")
        self._buf += chunk

    def readline(self, timeout: float | None = None) -> bytes:
        """Return the next line including its CRLF."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while (i := self._buf.find(CRLF)) < 0:
            self._fill(deadline)
        line = bytes(self._buf[: i + 2])
        del self._buf[: i + 2]
        return line

    def read_exact(self, n: int, timeout: float | None = None) -> bytes:
        """Return exactly the next ``n`` bytes."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self._buf) < n:
            self._fill(deadline)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def expect(self, line: bytes) -> None:
        """Read one line and assert it equals ``line``."""
        got = self.readline()
        assert got == line, f"expected {line!r}, got {got!r}"

    def read_msg(self) -> tuple[list[bytes], bytes]:
        """Read one MSG or HMSG; return (control line tokens, headers+payload bytes)."""
        tokens = self.readline().split()
        assert tokens and tokens[0] in (b"MSG", b"HMSG"), f"expected MSG/HMSG, got {tokens!r}"
        body = self.read_exact(int(tokens[-1]) + 2)
        assert body.endswith(CRLF), f"message body not CRLF-terminated: {body!r}"
        return tokens, body[:-2]

    def read_until_closed(self, timeout: float = 10.0) -> bytes:
        """Read everything until the server closes the connection; fail if it stays open."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._fill(deadline)
            except EOFError:
                data = bytes(self._buf)
                self._buf.clear()
                return data
            except TimeoutError as e:
                raise AssertionError(f"server did not close the connection within {timeout}s") from e
