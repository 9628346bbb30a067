"""Hostile clients never kill jetraft-server nor disturb a well-behaved client.

Hypothesis sends random bytes and mutated valid protocol streams over real sockets to one
running server; after every example the server must still be alive and a subscriber that
connected before the fuzzing began must receive a message published by a fresh client.
"""

from __future__ import annotations

import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servers

VALID = (
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
    b"SUB fuzz.* 1\r\nSUB fuzz.> q 2\r\nPUB fuzz.a  5\r\nhello\r\n"
    b"HPUB fuzz.b _INBOX.x 22 27\r\nNATS/1.0\r\nA: b\r\n\r\n\r\nhello\r\n"
    b"PING\r\nUNSUB 1 3\r\nPUB fuzz.c 0\r\n\r\nPONG\r\n"
)


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "repeat"]))
        pos = draw(st.integers(0, len(data)))
        if op == "flip" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 16))]
        else:
            data[pos:pos] = data[pos:pos + draw(st.integers(1, 64))]
    return bytes(data)


class Subscriber:
    """A raw, well-behaved client subscribed to ``canary``; counts the messages it gets."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=5)
        self.buf = b""
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false}\r\nSUB canary 1\r\nPING\r\n')
        assert self._line() == b"PONG"
        self.received = 0

    def _line(self) -> bytes:
        deadline = time.monotonic() + 5
        while b"\r\n" not in self.buf:
            if time.monotonic() > deadline:
                raise AssertionError("no line from the server")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("the well-behaved client was disconnected")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def expect_canary(self, payload: bytes) -> None:
        """Read until the MSG with ``payload`` arrives, answering server PINGs."""
        while True:
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            assert line.startswith(b"MSG canary 1 "), line
            assert self._line() == payload
            self.received += 1
            return


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    server = servers.start_server("jetraft", tmp_path_factory.mktemp("fuzz"), "max_payload: 4096\n")
    subscriber = Subscriber(server.address)
    yield server, subscriber
    subscriber.sock.close()
    server.stop()


def send_hostile(address: tuple[str, int], data: bytes) -> None:
    with socket.create_connection(address, timeout=5) as sock:
        sock.settimeout(0.2)
        try:
            sock.sendall(data)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # the server may cut us off: that is its right


def publish_canary(address: tuple[str, int], payload: bytes) -> None:
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(b"CONNECT {}\r\nPUB canary %d\r\n%s\r\nPING\r\n" % (len(payload), payload))
        data = b""
        deadline = time.monotonic() + 5
        while b"PONG" not in data and time.monotonic() < deadline:
            data += sock.recv(65536)
        assert b"PONG" in data


def check_still_serving(target, n: int) -> None:
    server, subscriber = target
    assert server.alive(), server.output()
    payload = b"canary-%d" % n
    publish_canary(server.address, payload)
    subscriber.expect_canary(payload)


_counter = iter(range(10**9))
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.binary(min_size=1, max_size=2048))
def test_random_bytes(target, data):
    send_hostile(target[0].address, data)
    check_still_serving(target, next(_counter))


@FUZZ
@given(data=mutated())
def test_mutated_streams(target, data):
    send_hostile(target[0].address, data)
    check_still_serving(target, next(_counter))


@pytest.mark.parametrize("data", [
    b"PUB foo 999999999999\r\n",
    b"PUB foo 5000\r\n" + b"x" * 5000 + b"\r\n",       # over max_payload
    b"SUB " + b"a" * 10000 + b" 1\r\n",                 # control line too long
    b"HPUB foo 10 5\r\nhello\r\n",                      # header size > total
    b"CONNECT {not json}\r\n",
    b"\x00\xff" * 4096,
])
def test_known_hostile_inputs(target, data):
    send_hostile(target[0].address, data)
    check_still_serving(target, next(_counter))
