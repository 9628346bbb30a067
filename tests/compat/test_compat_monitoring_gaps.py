"""Monitoring beside nats-server where jetraft used to answer zeros or nothing: the round
trip time of /connz and $SYS CONNZ (client.go sendPing/processPong), closed connections
(/connz?state=closed|all, server.go saveClosedClient, ``max_closed_clients``), the
sublist figures of /subsz (sublist.go Stats), and the version servers report (INFO,
/varz, $SYS STATSZ) as nats-py reads it.
"""

from __future__ import annotations

import json
import re
import subprocess

import nats
import pytest
from compat_support import RawClient, run
from polling import apoll
from servers import binary
from test_compat_monitoring_varz import differences

import jetraft

ACCOUNTS = """
accounts {
  A { users [ { user: a, password: a } ] }
  B { users [ { user: b, password: b } ] }
  $SYS { users [ { user: sys, password: sys } ] }
}
"""

#: Go's time.Duration.String(): one or more <number><unit> ("1.234ms", "1m2.5s", "850µs").
GO_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ns|us|\u00b5s|ms|s|m|h))+")
_UNIT_NS = {"ns": 1, "us": 1e3, "\u00b5s": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}


def duration_ns(text: str) -> float:
    """A Go duration string in nanoseconds; AssertionError for one Go would not print."""
    assert GO_DURATION.fullmatch(text), f"not a Go duration: {text!r}"
    return sum(float(n) * _UNIT_NS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ns|us|\u00b5s|ms|s|m|h)", text))


@pytest.fixture
def pair(start_server, server_kind):
    """(jetraft, nats-server): the tests using it compare both in one run."""
    if server_kind != "jetraft":
        pytest.skip("compares jetraft with nats-server in its jetraft run")
    return (start_server(ACCOUNTS, http=True), start_server(ACCOUNTS, http=True, kind="nats-server"))


# ---------------------------------------------------------------- rtt


def test_rtt_is_measured_for_connz_and_sys_connz(start_server):
    """After the client has answered a PING, /connz and $SYS.REQ.SERVER.PING.CONNZ show its
    round trip as a positive Go duration (asking /connz is what makes the server measure
    one, as in nats-server)."""
    server = start_server(ACCOUNTS, http=True)
    seen: dict = {}

    async def scenario():
        nc = await nats.connect(server.url, user="a", password="a", name="timed")
        sys_nc = await nats.connect(server.url, user="sys", password="sys")
        await nc.flush()

        def rtt() -> str:
            conns = {c.get("name"): c for c in server.monitor("/connz")["connections"]}
            return conns["timed"]["rtt"]

        await apoll(lambda: rtt() != "0s", f"{server.kind} /connz to show a measured rtt", 10, retry_on=())
        seen["http"] = rtt()
        msg = await sys_nc.request("$SYS.REQ.SERVER.PING.CONNZ", b"{}", timeout=5)
        data = json.loads(msg.data)["data"]
        seen["sys"] = {c.get("name"): c for c in data["connections"]}["timed"]["rtt"]
        await nc.close()
        await sys_nc.close()
    run(scenario)
    for where in ("http", "sys"):
        assert duration_ns(seen[where]) > 0, (server.kind, where, seen[where])


def test_sort_by_rtt_orders_the_measured_round_trips(start_server):
    """``sort=rtt``: the longest round trip first."""
    server = start_server(http=True)
    seen = {}

    async def scenario():
        clients = [await nats.connect(server.url, name=f"c{i}") for i in range(3)]

        def measured() -> bool:
            return all(c["rtt"] != "0s" for c in server.monitor("/connz")["connections"])
        await apoll(measured, f"{server.kind} to measure every client's rtt", 10, retry_on=())
        seen["doc"] = server.monitor("/connz?sort=rtt")
        for nc in clients:
            await nc.close()
    run(scenario)
    rtts = [duration_ns(c["rtt"]) for c in seen["doc"]["connections"]]
    assert len(rtts) == 3 and rtts == sorted(rtts, reverse=True), (server.kind, rtts)


# ---------------------------------------------------------------- closed connections


async def _closed_scenario(server) -> None:
    """``a`` subscribes twice and closes; ``b`` stays open; a client with a wrong password
    is refused."""
    a = await nats.connect(server.url, user="a", password="a", name="leaver")
    await a.subscribe("orders.*")
    await a.subscribe("work", queue="workers")
    await a.flush()
    b = await nats.connect(server.url, user="b", password="b", name="stayer")
    await a.close()
    with pytest.raises(Exception):  # noqa: B017 - nats-py raises its own auth/timeout errors
        await nats.connect(server.url, user="a", password="wrong", name="intruder",
                           allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5)

    def closed() -> set:
        return set(by_name(server.monitor("/connz?state=closed")))

    await apoll(lambda: {"leaver", "intruder"} <= closed(), f"{server.kind} to list both closed connections", 10,
                retry_on=())
    server.seen = {path: server.monitor(path) for path in CLOSED_PATHS}
    server.seen["/varz"] = server.monitor("/varz")
    await b.close()


def ours(doc: dict) -> dict:
    """The connections of a /connz answer by name, without the unnamed ones the test
    harness opened to see that the server was ready."""
    return {name: c for name, c in by_name(doc).items() if name}


CLOSED_PATHS = ["/connz?state=closed", "/connz?state=all", "/connz?state=any&auth=1",
                "/connz?state=closed&subs=1", "/connz?state=closed&subs=detail&auth=1",
                "/connz?state=closed&sort=stop", "/connz?state=closed&sort=reason",
                "/connz?state=closed&acc=A&auth=1", "/connz?state=closed&user=a&auth=1"]


def by_name(doc: dict) -> dict:
    return {c.get("name"): c for c in doc["connections"]}


def test_closed_connections_match_nats_server(pair):
    """A client that closed and one refused for its password are kept with nats-server's
    keys and types, ``stop``, and reasons "Client Closed" and "Authentication Failure";
    state=all adds the open one; the options select as nats-server's do, and /varz
    total_connections counts open and closed alike."""
    for server in pair:
        run(lambda server=server: _closed_scenario(server))
    mine, ref = (server.seen for server in pair)
    problems = []
    for path in CLOSED_PATHS:
        problems += differences(path, mine[path], ref[path])
    assert not problems, "differences from nats-server:\n" + "\n".join(problems)
    for server, seen in zip(pair, (mine, ref)):
        closed = ours(seen["/connz?state=closed"])
        assert {n: c["reason"] for n, c in closed.items()} == {
            "leaver": "Client Closed", "intruder": "Authentication Failure"}, server.kind
        assert all(c["stop"] >= c["start"] for c in closed.values()), server.kind
        assert set(ours(seen["/connz?state=all"])) == {"leaver", "intruder", "stayer"}, server.kind
        assert "reason" not in ours(seen["/connz?state=all"])["stayer"], server.kind
        auth = ours(seen["/connz?state=any&auth=1"])
        assert (auth["leaver"]["authorized_user"], auth["leaver"]["account"]) == ("a", "A"), server.kind
        assert auth["intruder"].get("authorized_user") == "a" and "account" not in auth["intruder"], server.kind
        subs = by_name(seen["/connz?state=closed&subs=1"])["leaver"]["subscriptions_list"]
        assert sorted(subs) == ["orders.*", "work"], server.kind
        detail = by_name(seen["/connz?state=closed&subs=detail&auth=1"])["leaver"]["subscriptions_list_detail"]
        assert sorted((d["subject"], d.get("qgroup"), d["account"]) for d in detail) == [
            ("orders.*", None, "A"), ("work", "workers", "A")], server.kind
        reasons = [c["reason"] for c in seen["/connz?state=closed&sort=reason"]["connections"]]
        assert reasons == sorted(reasons) and "Authentication Failure" in reasons, (server.kind, reasons)
        stops = [c["stop"] for c in seen["/connz?state=closed&sort=stop"]["connections"]]
        assert stops == sorted(stops, reverse=True), server.kind
        assert [c.get("name") for c in seen["/connz?state=closed&sort=stop"]["connections"]][:2] == [
            "intruder", "leaver"], server.kind
        assert set(by_name(seen["/connz?state=closed&acc=A&auth=1"])) == {"leaver"}, server.kind
        assert set(by_name(seen["/connz?state=closed&user=a&auth=1"])) == {"leaver", "intruder"}, server.kind
        varz, kept = seen["/varz"], seen["/connz?state=closed"]["total"]
        assert varz["total_connections"] == varz["connections"] + kept, (server.kind, varz, kept)
        assert seen["/connz?state=all"]["total"] == varz["connections"] + kept, server.kind


def test_closed_connection_by_cid(pair):
    """``cid=`` finds a closed connection with state=closed or all, not with the default
    state (open)."""
    for server in pair:
        seen = {}

        async def scenario(server=server):
            nc = await nats.connect(server.url, user="b", password="b", name="gone")
            cid = nc.client_id
            await nc.close()
            await apoll(lambda: "gone" in by_name(server.monitor("/connz?state=closed")), "the close", 10,
                        retry_on=())
            seen.update({state: server.monitor(f"/connz?cid={cid}&state={state}")
                         for state in ("open", "closed", "all")})
        run(scenario)
        assert seen["open"]["connections"] == [], server.kind
        for state in ("closed", "all"):
            assert [c["name"] for c in seen[state]["connections"]] == ["gone"], (server.kind, state)


def test_stale_connection_is_kept_with_its_reason(start_server):
    """A client that answers no PING is closed as "Stale Connection", kept so, and counted
    in /varz stale_connections."""
    server = start_server('ping_interval: "100ms"\nping_max: 2', http=True)
    with RawClient(server.address) as raw:
        raw.connect()
        raw.read_until_closed(timeout=10)

    def reasons() -> list:
        return [c["reason"] for c in server.monitor("/connz?state=closed")["connections"]]
    run(lambda: apoll(lambda: "Stale Connection" in reasons(), "the stale connection to be kept", 10, retry_on=()))
    assert reasons().count("Stale Connection") == 1
    varz = server.monitor("/varz")
    assert varz["stale_connections"] == varz["stale_connection_stats"]["clients"] == 1


def test_max_closed_clients_keeps_the_last(start_server):
    """``max_closed_clients: 2``: three clients close, the last two are listed; /varz still
    counts all three."""
    server = start_server("max_closed_clients: 2", http=True)
    before = server.monitor("/varz")["total_connections"]
    cids = []

    async def scenario():
        for i in range(3):
            nc = await nats.connect(server.url, name=f"c{i}")
            cids.append(nc.client_id)
            await nc.close()
            await apoll(lambda: cids[-1] in [c["cid"] for c in server.monitor("/connz?state=closed")["connections"]],
                        "the close", 10, retry_on=())
    run(scenario)
    doc = server.monitor("/connz?state=closed")
    assert [c["cid"] for c in doc["connections"]] == cids[1:] and doc["total"] == 2
    assert server.monitor("/varz")["total_connections"] == before + 3


def test_negative_max_closed_clients_is_refused(server_kind, tmp_path):
    """nats-server cannot start with it; jetraft-server -t names the key and the minimum."""
    if server_kind != "jetraft":
        pytest.skip("jetraft's configuration check")
    conf = tmp_path / "bad.conf"
    conf.write_text("max_closed_clients: -1\n")
    done = subprocess.run([str(binary("jetraft")), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "max_closed_clients: -1 is too small (minimum 0)" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------- /subsz figures


SUBSZ_FIGURES = ("num_subscriptions", "num_cache", "num_inserts", "num_removes", "num_matches")


def test_subsz_figures_follow_the_traffic_as_nats_server(pair):
    """In account B: three subscriptions, one removed, three messages to a subject two
    match: the same keys and types, subscriptions, cached subjects, inserts, removes and
    fan-out as nats-server. Matches differ by design: nats-server keeps a per-connection
    cache of match results in front of the account's (client.go c.in.results), so one
    connection publishing three times to one subject counts one match there; jetraft has
    only the account's cache, and counts three, two of them cache hits."""
    seen = {}
    for server in pair:
        async def scenario(server=server):
            before = server.monitor("/subsz?acc=B")
            nc = await nats.connect(server.url, user="b", password="b")
            await nc.subscribe("orders.*")
            await nc.subscribe("orders.1")
            gone = await nc.subscribe("other")
            await gone.unsubscribe()
            await nc.flush()
            for _ in range(3):
                await nc.publish("orders.1", b"x")
            await nc.flush()
            after = server.monitor("/subsz?acc=B")
            seen[server.kind] = (before, after)
            await nc.close()
        run(scenario)
    ours, ref = seen["jetraft"], seen["nats-server"]
    assert not differences("/subsz", ours[1], ref[1])
    delta = {kind: {k: after[k] - before[k] for k in SUBSZ_FIGURES}
             for kind, (before, after) in seen.items()}
    assert delta["jetraft"] == {"num_subscriptions": 2, "num_cache": 1, "num_inserts": 3, "num_removes": 1,
                                "num_matches": 3}
    assert delta["nats-server"] == {**delta["jetraft"], "num_matches": 1}, delta
    assert ours[1]["cache_hit_rate"] == pytest.approx(2 / 3)
    for _, after in (ours, ref):
        assert after["max_fanout"] == 2 and after["avg_fanout"] == 2


# ---------------------------------------------------------------- version

VERSION_CONFIG = """
accounts {
  A { users [ { user: a, password: a } ], jetstream: enabled }
  $SYS { users [ { user: sys, password: sys } ] }
}
jetstream { store_dir: "%s" }
"""


def test_reported_version_names_jetraft_and_keeps_nats_py_features(start_server, server_kind, tmp_path):
    """INFO, /varz and $SYS STATSZ report ``2.12.1+jetraft.<release>``; nats-py reads
    (2, 12, 1) from it, as from nats-server 2.12.1, and so creates a named consumer with
    ``$JS.API.CONSUMER.CREATE.<stream>.<name>`` (nats.py js/manager.py), not the legacy
    ``DURABLE.CREATE``."""
    if server_kind != "jetraft":
        pytest.skip("jetraft's own version")
    server = start_server(VERSION_CONFIG % tmp_path, http=True)
    expected = f"2.12.1+jetraft.{jetraft.__version__.replace('+', '.')}"
    seen = {}

    async def scenario():
        nc = await nats.connect(server.url, user="a", password="a")
        sys_nc = await nats.connect(server.url, user="sys", password="sys")
        version = nc.connected_server_version
        seen["info"] = nc._server_info["version"]  # noqa: SLF001 - INFO as the client received it
        seen["parsed"] = (version.major, version.minor, version.patch, version.prerelease, version.build)
        api = await nc.subscribe("$JS.API.CONSUMER.>")
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        await js.add_consumer("S", name="C", durable_name="C")
        seen["api"] = (await api.next_msg(timeout=5)).subject
        statsz = await sys_nc.request("$SYS.REQ.SERVER.PING.STATSZ", b"", timeout=5)
        seen["statsz"] = json.loads(statsz.data)["server"]["ver"]
        await nc.close()
        await sys_nc.close()
    run(scenario)
    assert seen["info"] == seen["statsz"] == server.monitor("/varz")["version"] == expected
    assert seen["parsed"] == (2, 12, 1, "", f"jetraft.{jetraft.__version__.replace('+', '.')}")
    assert seen["api"] == "$JS.API.CONSUMER.CREATE.S.C"
