"""Hostile and odd clients, side by side with nats-server: what each gets, and that the
server survives with its memory bounded.

- Without authentication, PUB and SUB before CONNECT are served (in the global account).
- With authentication required, anything but CONNECT first is an Authorization Violation,
  refused before its arguments or payload are read.
- Memory before authentication: hundreds of unauthenticated clients each starting a 1 MiB
  PUB, and strangers on the route port announcing 64 MiB frames, leave the server's peak RSS
  within twice its idle RSS.
- A client that keeps sending PINGs shows it is alive: it is not dropped as stale even
  though it never answers the server's PINGs.
- Monitoring query parameters that do not parse are answered 400 with nats-server's text.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from compat_support import RawClient
from servers import free_port

AUTH = 'authorization { user: alice, password: "s3cret" }'


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """``field`` of /proc/<pid>/status (VmRSS: now; VmHWM: the peak so far), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def idle_rss(server) -> int:
    """The server's RSS once a client has done a round trip (its start-up is over)."""
    with RawClient(server.address) as raw:
        if raw.info.get("auth_required"):
            raw.connect(user="alice", **{"pass": "s3cret"})
        else:
            raw.connect()
    return rss_kib(server.proc.pid)


def push(sock: socket.socket, data: bytes) -> None:
    """Send what the kernel takes now; a server that closed the connection is fine."""
    try:
        sock.send(data)
    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
        pass


# ---------------------------------------------------------------- before CONNECT


def test_pub_and_sub_before_connect_are_served_without_auth(server):
    with RawClient(server.address) as raw:
        raw.send(b"SUB foo 1\r\nPUB foo 5\r\nhello\r\n")
        # verbose until a CONNECT says otherwise (nats-server's defaults)
        assert [raw.readline(), raw.readline()] == [b"+OK\r\n", b"+OK\r\n"]
        assert raw.read_msg() == ([b"MSG", b"foo", b"1", b"5"], b"hello")
        raw.connect()  # a CONNECT later keeps the subscription
        raw.send(b"PUB foo 2\r\nhi\r\n")
        assert raw.read_msg() == ([b"MSG", b"foo", b"1", b"2"], b"hi")


@pytest.mark.parametrize("first", [b"PUB foo 5\r\nhello\r\n", b"SUB foo 1\r\n", b"PING\r\n",
                                   b"PUB foo 1048576\r\n", b"\r\n"])
def test_anything_but_connect_first_is_refused_when_auth_is_required(start_server, first):
    server = start_server(AUTH)
    with RawClient(server.address) as raw:
        raw.send(first)
        assert raw.read_until_closed() == b"-ERR 'Authorization Violation'\r\n"
    with RawClient(server.address) as raw:  # the server is fine
        raw.connect(user="alice", **{"pass": "s3cret"})


# ---------------------------------------------------------------- memory before authentication


def unauthenticated_pubs(server, clients: int = 200) -> int:
    """``clients`` connections to a server requiring authentication each start a 1 MiB PUB
    before CONNECT and push its payload as fast as the server reads; returns the server's
    peak RSS (KiB) once a legitimate client got through."""
    socks = []
    try:
        for _ in range(clients):
            sock = socket.create_connection(server.address, timeout=5)
            sock.setblocking(False)
            socks.append(sock)
        megabyte = b"x" * (1 << 20)
        for sock in socks:
            push(sock, b"PUB foo 1048576\r\n")
        for _ in range(4):  # what the kernel takes of each connection's payload, several times
            for sock in socks:
                push(sock, megabyte)
        with RawClient(server.address) as raw:  # the server still answers
            raw.connect(user="alice", **{"pass": "s3cret"})
        return rss_kib(server.proc.pid, "VmHWM")
    finally:
        for sock in socks:
            sock.close()


def route_strangers(server, route_port: int, strangers: int = 8, seconds: float = 2.0) -> int:
    """``strangers`` connections to the route port each announce a 64 MiB frame (jetraft's
    length prefix) and push its body for ``seconds``; returns the server's peak RSS (KiB)
    once a client got through."""
    socks = []
    try:
        for _ in range(strangers):
            sock = socket.create_connection(("127.0.0.1", route_port), timeout=5)
            sock.setblocking(False)
            socks.append(sock)
        chunk = b"\x91" * (1 << 20)
        for sock in socks:
            push(sock, (64 << 20).to_bytes(4, "big"))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for sock in socks:
                push(sock, chunk)
        with RawClient(server.address) as raw:
            raw.connect()
        return rss_kib(server.proc.pid, "VmHWM")
    finally:
        for sock in socks:
            sock.close()


def route_config(route_port: int) -> str:
    return f"server_name: s1\ncluster {{ name: C1, listen: 127.0.0.1:{route_port} }}"


def test_unauthenticated_clients_cannot_make_the_server_buffer_their_payloads(start_server):
    server = start_server(AUTH)
    idle = idle_rss(server)
    peak = unauthenticated_pubs(server)
    assert peak <= 2 * idle, f"{server.kind}: peak RSS {peak} KiB, idle {idle} KiB"


def test_strangers_on_the_route_port_cannot_make_the_server_buffer_big_frames(start_server):
    route_port = free_port()
    server = start_server(route_config(route_port))
    idle = idle_rss(server)
    peak = route_strangers(server, route_port)
    assert peak <= 2 * idle, f"{server.kind}: peak RSS {peak} KiB, idle {idle} KiB"


# ---------------------------------------------------------------- keep-alive


def test_a_client_whose_pings_show_it_alive_is_not_stale(start_server):
    """It never answers the server's PINGs, but sends its own more often than ping_interval."""
    server = start_server('ping_interval: "200ms"\nping_max: 2')
    with RawClient(server.address) as raw:
        raw.connect()
        end = time.monotonic() + 2.0  # ten ping intervals, five times the stale limit
        while time.monotonic() < end:
            raw.send(b"PING\r\n")
            while (line := raw.readline()) == b"PING\r\n":
                pass  # never answered
            assert line == b"PONG\r\n", line
            time.sleep(0.05)  # the client's own pace, not a wait for the server
        raw.send(b"PUB still.here 0\r\n\r\nPING\r\n")
        while (line := raw.readline()) == b"PING\r\n":
            pass
        assert line == b"PONG\r\n"


# ---------------------------------------------------------------- monitoring


@pytest.mark.parametrize("query,text", [
    ("/connz?limit=abc", "Error decoding int for 'limit': strconv.Atoi: parsing \"abc\": invalid syntax"),
    ("/connz?offset=1.5", "Error decoding int for 'offset': strconv.Atoi: parsing \"1.5\": invalid syntax"),
    ("/connz?limit=99999999999999999999",
     "Error decoding int for 'limit': strconv.Atoi: parsing \"99999999999999999999\": value out of range"),
    ("/connz?subs=maybe", "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"maybe\": invalid syntax"),
    ("/connz?state=gone", "Error decoding state for gone"),
    ("/subsz?limit=x", "Error decoding int for 'limit': strconv.Atoi: parsing \"x\": invalid syntax"),
    ("/routez?subs=2", "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"2\": invalid syntax"),
])
def test_monitoring_refuses_query_values_that_do_not_parse(start_server, query, text):
    server = start_server(http=True)
    status, body = server.http_get(query)
    assert (status, body.decode()) == (400, text)
    status, _ = server.http_get(query.split("?")[0] + "?limit=1&subs=1")
    assert status == 200


# ---------------------------------------------------------------- names that are not UTF-8


def test_a_consumer_name_that_is_not_utf8_is_written_with_replacement_characters(start_server, tmp_path):
    """Go writes each byte that is not UTF-8 as U+FFFD in JSON; the stream keeps working."""
    server = start_server(f"jetstream {{ store_dir: {tmp_path / 'js'} }}")

    def request(raw: RawClient, subject: bytes, body: bytes) -> dict:
        raw.send(b"PUB %s _INBOX.r %d\r\n%s\r\n" % (subject, len(body), body))
        return json.loads(raw.read_msg()[1])

    with RawClient(server.address) as raw:
        raw.connect()
        raw.send(b"SUB _INBOX.r 1\r\n")
        assert "error" not in request(raw, b"$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s"]}')
        created = request(raw, b"$JS.API.CONSUMER.CREATE.S.C\x80",
                          b'{"stream_name":"S","config":{"name":"C\x80","ack_policy":"explicit"}}')
        assert (created.get("name"), created["config"]["name"]) == ("C\ufffd", "C\ufffd"), created
        names = request(raw, b"$JS.API.CONSUMER.NAMES.S", b"")
        assert names["consumers"] == ["C\ufffd"]
        assert request(raw, b"$JS.API.STREAM.INFO.S", b"")["state"]["consumer_count"] == 1
