"""/healthz with JetStream (nats-server server/monitor.go healthz), against jetraft and
nats-server: the query options, the meta layer of a cluster, lame duck mode."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest
from cluster import Cluster


def get(server, path: str) -> tuple[int, dict]:
    status, body = server.http_get(path)
    return status, json.loads(body)


def wait_health(server, path: str, want_status: int, timeout: float = 30.0) -> dict:
    """Poll ``path`` until it answers ``want_status``; return that answer's JSON."""
    deadline = time.monotonic() + timeout
    last: tuple[int, dict] | None = None
    while time.monotonic() < deadline:
        try:
            last = get(server, path)
        except OSError as exc:
            last = (0, {"unreachable": str(exc)})
        if last[0] == want_status:
            return last[1]
        time.sleep(0.05)
    raise AssertionError(f"{path} never answered {want_status}; last {last}")


def test_the_query_options_on_a_server_without_jetstream(start_server):
    """Without JetStream every check passes, js-enabled-only included (nats-server returns
    before looking at JetStream when it is not configured); a stream without an account
    or a consumer without a stream is a 400, a bad boolean a plain-text 400."""
    server = start_server(http=True)
    for query in ("", "?js-enabled-only=true", "?js-server-only=true", "?js-meta-only=1", "?details=true"):
        assert get(server, "/healthz" + query) == (200, {"status": "ok"}), query
    assert get(server, "/healthz?stream=S") == (400, {
        "status": "error", "error": '"account" must not be empty when checking stream health'})
    assert get(server, "/healthz?account=A&consumer=C&details=true") == (400, {
        "status": "error", "errors": [{"type": "BAD_REQUEST",
                                       "error": '"stream" must not be empty when checking consumer health'}]})
    status, body = server.http_get("/healthz?details=maybe")
    assert status == 400
    assert body.decode() == ("Error decoding boolean for 'details': strconv.ParseBool: parsing \"maybe\": "
                             "invalid syntax")


def test_account_stream_and_consumer_checks_on_a_single_server(start_server, tmp_path):
    """A single JetStream server: 404 for an account (one holding no stream), stream or
    consumer that does not exist, 200 once they do."""
    import asyncio

    import nats
    server = start_server(f'jetstream {{ store_dir: "{tmp_path / "js"}" }}', http=True)
    assert get(server, "/healthz?account=$G") == (404, {
        "status": "unavailable", "error": 'JetStream account "$G" not found'})
    assert get(server, "/healthz?account=$G&stream=S&details=true") == (404, {
        "status": "error", "errors": [{"type": "ACCOUNT", "account": "$G",
                                       "error": 'JetStream account "$G" not found'}]})

    async def make():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        await js.add_consumer("S", durable_name="C")
        await nc.close()
    asyncio.run(make())
    assert get(server, "/healthz?account=$G&stream=S&consumer=C") == (200, {"status": "ok"})
    assert get(server, "/healthz?account=$G&stream=T") == (404, {
        "status": "unavailable", "error": 'JetStream stream "T" not found on account "$G"'})
    assert get(server, "/healthz?account=$G&stream=S&consumer=D&details=1") == (404, {
        "status": "error", "errors": [{
            "type": "CONSUMER", "account": "$G", "stream": "S", "consumer": "D",
            "error": 'JetStream consumer "D" not found for stream "S" on account "$G"'}]})


def test_lame_duck_mode_is_unhealthy_for_every_option(start_server, server_kind, tmp_path):
    """In lame duck mode /healthz fails whatever the options; with details=true the reason
    is a CONNECTION error. nats-server answers 500 "failed to be ready for connections"
    (its listener is closed); jetraft answers 503 "lame duck mode"."""
    server = start_server('lame_duck_duration: "30s"\nlame_duck_grace_period: "5s"\n'
                          f'jetstream {{ store_dir: "{tmp_path / "js"}" }}', http=True)
    client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        client.recv(4096)
        client.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')   # a client keeps it draining
        client.recv(64)
        os.kill(server.proc.pid, signal.SIGUSR2)
        code, reason = (500, "failed to be ready for connections after 1ms: server") \
            if server_kind == "nats-server" else (503, "lame duck mode")
        wait_health(server, "/healthz", code, 10)
        for query in ("", "?js-server-only=true", "?js-enabled-only=true"):
            status, body = get(server, "/healthz" + query)
            assert status == code and body["error"] == reason, (query, status, body)
        assert get(server, "/healthz?details=true") == (code, {
            "status": "error", "errors": [{"type": "CONNECTION", "error": reason}]})
    finally:
        client.close()


@pytest.fixture
def cluster_of_three(server_kind, tmp_path):
    c = Cluster(server_kind, tmp_path / "c", 3, jetstream=True)
    try:
        yield c
    finally:
        c.stop()


def test_one_of_three_is_unhealthy_until_the_cluster_forms(cluster_of_three):
    """One server of three, alone: the meta layer is not ready (503), js-server-only and
    js-enabled-only pass, js-meta-only does not; once the others are up, 200."""
    c = cluster_of_three
    c.start(["n1"])
    n1 = c.servers["n1"]
    reason = "JetStream is still recovering meta layer"
    assert wait_health(n1, "/healthz", 503, 10) == {"status": "unavailable", "error": reason}
    assert get(n1, "/healthz?details=true") == (503, {
        "status": "error", "errors": [{"type": "JETSTREAM", "error": reason}]})
    assert get(n1, "/healthz?js-meta-only=true") == (503, {"status": "unavailable", "error": reason})
    assert get(n1, "/healthz?js-server-only=true") == (200, {"status": "ok"})
    assert get(n1, "/healthz?js-enabled-only=true") == (200, {"status": "ok"})
    c.start(["n2", "n3"])
    for name in ("n1", "n2", "n3"):
        assert wait_health(c.servers[name], "/healthz", 200, 60) == {"status": "ok"}
        assert get(c.servers[name], "/healthz?js-meta-only=true") == (200, {"status": "ok"})
