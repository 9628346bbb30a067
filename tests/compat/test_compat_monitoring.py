"""The monitoring port (/healthz, /varz, /connz, /subsz), against jetraft and nats-server."""

from __future__ import annotations

import asyncio
import json

from compat_support import close_all, connect, round_trip, run, server_info
from polling import apoll


def test_healthz(monitored_server):
    """/healthz answers 200 with {"status": "ok"}."""
    status, body = monitored_server.http_get("/healthz")
    assert status == 200
    assert json.loads(body) == {"status": "ok"}


def test_unknown_path_is_404(monitored_server):
    """An unknown monitoring path is a 404, not a 200 or a crash."""
    status, _ = monitored_server.http_get("/no-such-endpoint")
    assert status == 404


async def wait_for_fields(server, path: str, expected: dict, timeout: float = 10.0) -> dict:
    """Poll ``path`` until every key in ``expected`` has that value; return the document."""
    doc: dict = {}

    async def matches() -> bool:
        nonlocal doc
        doc = await asyncio.to_thread(server.monitor, path)
        return all(doc.get(k) == v for k, v in expected.items())

    try:
        await apoll(matches, f"{path} to show {expected}", timeout, retry_on=())
    except AssertionError as e:
        got = {k: doc.get(k) for k in expected}
        raise AssertionError(f"{e}; last seen {got}") from None
    return doc


def test_varz_identity_and_counters(monitored_server):
    """/varz names the server as INFO does, counts connections, and counts traffic."""
    server = monitored_server

    async def scenario():
        a, b = await connect(server.url), await connect(server.url)
        info = server_info(a)
        varz = await wait_for_fields(server, "/varz", {"connections": 2})
        assert varz["server_id"] == info["server_id"]
        assert varz["server_name"] == info["server_name"]
        assert varz["version"] == info["version"]
        assert varz["max_payload"] == info["max_payload"]
        before = {k: varz[k] for k in ("in_msgs", "out_msgs", "in_bytes", "out_bytes")}

        sub = await b.subscribe("metrics.>")
        await round_trip(b)
        for i in range(10):
            await a.publish(f"metrics.{i}", b"12345")
        await round_trip(a, b)
        assert sub.pending_msgs == 10
        await wait_for_fields(
            server,
            "/varz",
            {
                "in_msgs": before["in_msgs"] + 10,
                "out_msgs": before["out_msgs"] + 10,
                "in_bytes": before["in_bytes"] + 50,
                "out_bytes": before["out_bytes"] + 50,
            },
        )
        await close_all(a, b)
        await wait_for_fields(server, "/varz", {"connections": 0})

    run(scenario)


def test_connz_lists_connections(monitored_server):
    """/connz lists each client with its id, name, language and subscription count."""
    server = monitored_server

    async def scenario():
        a = await connect(server.url, name="conn-a")
        b = await connect(server.url, name="conn-b")
        await a.subscribe("one")
        await a.subscribe("two", queue="q")
        await round_trip(a, b)
        connz = await wait_for_fields(server, "/connz", {"num_connections": 2})
        by_cid = {c["cid"]: c for c in connz["connections"]}
        assert set(by_cid) == {a.client_id, b.client_id}
        assert by_cid[a.client_id]["name"] == "conn-a"
        assert by_cid[b.client_id]["name"] == "conn-b"
        assert by_cid[a.client_id]["lang"] == "python3"
        assert by_cid[a.client_id]["subscriptions"] == 2
        assert by_cid[b.client_id]["subscriptions"] == 0

        detail = await asyncio.to_thread(server.monitor, "/connz?subs=1")
        subjects = {c["cid"]: sorted(c.get("subscriptions_list", [])) for c in detail["connections"]}
        assert subjects[a.client_id] == ["one", "two"]

        await b.close()
        connz = await wait_for_fields(server, "/connz", {"num_connections": 1})
        assert [c["cid"] for c in connz["connections"]] == [a.client_id]
        await a.close()

    run(scenario)


def test_subsz_counts_subscriptions(monitored_server):
    """/subsz num_subscriptions goes up with SUBs and back down with UNSUB and close."""
    server = monitored_server

    async def scenario():
        base = (await asyncio.to_thread(server.monitor, "/subsz"))["num_subscriptions"]
        nc = await connect(server.url)
        first = await nc.subscribe("s.1")
        await nc.subscribe("s.2")
        await nc.subscribe("s.*", queue="g")
        await round_trip(nc)
        await wait_for_fields(server, "/subsz", {"num_subscriptions": base + 3})
        await first.unsubscribe()
        await round_trip(nc)
        await wait_for_fields(server, "/subsz", {"num_subscriptions": base + 2})
        await nc.close()
        await wait_for_fields(server, "/subsz", {"num_subscriptions": base})

    run(scenario)
