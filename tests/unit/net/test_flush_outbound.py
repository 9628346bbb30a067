"""Server.flush_outbound / StreamConnection.flush_now: queued output written to the socket
at once, in order, with what the socket does not take left for the writer task."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from jetraft.net.transport.client import StreamConnection
from jetraft.server import Server


class Conn(StreamConnection):
    """The smallest StreamConnection: a byte queue (``queued``: what is not yet taken for a
    write), no protocol."""

    def __init__(self, server, stream) -> None:
        super().__init__()
        self.server = server
        self.stream = stream
        self.queued = bytearray()

    def send(self, data: bytes) -> None:
        self.queued += data
        self._queued()

    async def run_writer(self) -> None:
        """The writer task alone (``_serve`` would run it beside the reader)."""
        await self._writer()

    def _take(self):
        data, self.queued = self.queued, bytearray()
        return data

    def _put_back(self, rest: bytes) -> None:
        self.queued[:0] = rest

    def _write_timed_out(self, size: int) -> None:
        raise AssertionError("write timed out")

    async def _reader(self) -> None:
        await trio.sleep_forever()


def fake_server():
    s = SimpleNamespace(outbound_queued=set(), in_read=False,
                        config=SimpleNamespace(write_deadline=10.0))
    s.flush_outbound = lambda: Server.flush_outbound(s)
    return s


async def read_exactly(sock: trio.socket.SocketType, n: int) -> bytes:
    buf = bytearray()
    with trio.fail_after(20):
        while len(buf) < n:
            chunk = await sock.recv(1 << 20)
            assert chunk, "peer closed early"
            buf += chunk
    return bytes(buf)


def pattern(n: int, start: int = 0) -> bytes:
    return bytes((start + i) % 251 for i in range(n))


@pytest.mark.trio
async def test_flush_writes_without_the_writer_task():
    a, b = trio.socket.socketpair()
    server = fake_server()
    conn = Conn(server, trio.SocketStream(a))
    conn.send(b"hello ")
    conn.send(b"world")
    assert conn in server.outbound_queued
    server.flush_outbound()                  # no checkpoint: the writer never ran
    assert server.outbound_queued == set()
    assert conn.queued == b""
    assert await read_exactly(b, 11) == b"hello world"
    a.close(); b.close()


def small_buffer_pair():
    """A socket pair whose sending side has a small send buffer (fills quickly)."""
    a, b = trio.socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    return a, b


@pytest.mark.trio
async def test_what_the_socket_does_not_take_is_sent_by_the_writer_in_order():
    a, b = small_buffer_pair()
    server = fake_server()
    conn = Conn(server, trio.SocketStream(a))
    big = pattern(4 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run_writer)
        await trio.testing.wait_all_tasks_blocked()
        conn.send(big)
        server.flush_outbound()              # writes what fits, puts the rest back
        assert 0 < len(conn.queued) < len(big)
        conn.send(b"tail")                   # queued behind the rest
        assert await read_exactly(b, len(big) + 4) == big + b"tail"
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_no_direct_write_while_the_writer_is_mid_write():
    a, b = small_buffer_pair()
    server = fake_server()
    conn = Conn(server, trio.SocketStream(a))
    first = pattern(2 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run_writer)
        await trio.testing.wait_all_tasks_blocked()
        conn.send(first)
        await trio.testing.wait_all_tasks_blocked()   # the writer took it; the socket is full
        assert conn.writing
        conn.send(b"second")
        server.flush_outbound()              # must not jump ahead of the writer's bytes
        assert conn.queued == b"second"
        assert await read_exactly(b, len(first) + 6) == first + b"second"
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_during_a_read_writers_stay_parked_and_the_flush_sends():
    a, b = trio.socket.socketpair()
    server = fake_server()
    conn = Conn(server, trio.SocketStream(a))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run_writer)
        await trio.testing.wait_all_tasks_blocked()
        server.in_read = True
        conn.send(b"ack")
        assert conn.writer_parked            # not woken: the end of the read flushes
        server.in_read = False
        server.flush_outbound()
        assert await read_exactly(b, 3) == b"ack"
        conn.send(b"later")                  # outside a read the writer sends it
        assert not conn.writer_parked
        assert await read_exactly(b, 5) == b"later"
        nursery.cancel_scope.cancel()
