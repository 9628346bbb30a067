"""Session rules, side by side: auth timeout, commands before CONNECT, max_connections,
lame duck mode (SIGUSR2) and clean stop (SIGTERM)."""

from __future__ import annotations

import asyncio
import signal

import socket

import pytest
import servers
from compat_support import RawClient, connect, run
from polling import apoll

SEED_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
AUTH = f"""
authorization {{ timeout: 0.5 }}
accounts {{ $SYS {{ users = [ {{ user: "admin", pass: "{SEED_HASH}" }} ] }} }}
"""


def test_auth_timeout(start_server):
    server = start_server(AUTH)
    with RawClient(server.address) as raw:
        assert raw.info.get("auth_required") is True
        data = raw.read_until_closed(timeout=10)
    assert data == b"-ERR 'Authentication Timeout'\r\n"


def test_commands_before_connect_need_auth(start_server):
    server = start_server(AUTH)
    with RawClient(server.address) as raw:
        raw.send(b"SUB foo 1\r\n")
        data = raw.read_until_closed(timeout=10)
    assert data == b"-ERR 'Authorization Violation'\r\n"


def test_commands_before_connect_without_auth_are_served(server):
    with RawClient(server.address) as raw:
        raw.send(b"PING\r\n")
        assert raw.readline() == b"PONG\r\n"


def test_max_connections(start_server):
    server = start_server("max_connections: 2\n", http=True)
    # The readiness probe's connection may not be reaped yet: wait until no client is left.
    run(lambda: apoll(lambda: server.monitor("/varz")["connections"] == 0, "no connections", 10, retry_on=()))
    with RawClient(server.address) as first, RawClient(server.address) as second:
        first.connect()
        second.connect()
        with socket.create_connection(server.address, timeout=5) as third:
            third.settimeout(5)
            data = b""
            while chunk := third.recv(4096):
                data += chunk
        assert b"-ERR 'maximum connections exceeded'\r\n" in data
        first.ping()  # the first two are unaffected


@pytest.fixture
def own_server(server_kind, tmp_path):
    """Factory for a server this test stops itself (the shared fixture treats an exit as a crash)."""
    started = []

    def start(extra: str = "") -> servers.RunningServer:
        started.append(servers.start_server(server_kind, tmp_path / f"own-{len(started)}", extra))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def test_lame_duck_mode(own_server):
    server = own_server('lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n')

    async def scenario():
        ldm = asyncio.Event()

        async def on_ldm():
            ldm.set()

        nc = await connect(server.url, lame_duck_mode_cb=on_ldm)
        server.proc.send_signal(signal.SIGUSR2)
        await asyncio.wait_for(ldm.wait(), 10)
        await nc.close()
        with pytest.raises(ConnectionRefusedError):  # the client listener is closed
            socket.create_connection(server.address, timeout=5).close()

    run(scenario)
    assert server.proc.wait(timeout=30) == 0


def test_sigterm_stops_with_status_zero(own_server):
    server = own_server()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=10) == 0
