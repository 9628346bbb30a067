"""/connz, /subsz and /routez beside nats-server (server/monitor.go Connz, ConnInfo,
SubDetail, Subsz, Routez, RouteInfo): the same clients, subscriptions and traffic on the
server under test and on a reference nats-server, then keys and JSON types compared
recursively and the values that follow from the traffic checked on both, for each query
option a user of ``nats server report connections`` or a scraper would use.
"""

from __future__ import annotations

import nats
import pytest
from cluster import Cluster
from compat_support import run
from polling import apoll
from test_compat_monitoring_varz import differences

ACCOUNTS = """
accounts {
  A { users [ { user: a, password: a }, { user: a2, password: a2 } ] }
  B { users [ { user: b, password: b } ] }
}
"""


async def traffic(server) -> list:
    """Three clients: ``a`` (account A) with a plain and a queue subscription that
    receives two messages, ``a2`` (A) publishing them, ``b`` (B) with none."""
    a = await nats.connect(server.url, user="a", password="a", name="a")
    await a.subscribe("orders.*")
    await a.subscribe("work", queue="workers")
    await a.flush()
    a2 = await nats.connect(server.url, user="a2", password="a2", name="a2")
    b = await nats.connect(server.url, user="b", password="b", name="b")
    await a2.publish("orders.1", b"12345")
    await a2.publish("work", b"1")
    await a2.flush()

    async def delivered() -> bool:
        by_name = {c.get("name"): c for c in server.monitor("/connz")["connections"]}
        return by_name.get("a", {}).get("out_msgs") == 2 and len(by_name) == 3

    await apoll(delivered, f"{server.kind} /connz to count a's two messages", 10, retry_on=())
    return [a, a2, b]


def observe(server, paths: list[str]) -> dict:
    seen = {}

    async def scenario():
        clients = await traffic(server)
        seen.update({path: server.monitor(path) for path in paths})
        for nc in clients:
            await nc.close()
    run(scenario)
    return seen


@pytest.fixture
def pair(start_server):
    return (start_server(ACCOUNTS, http=True), start_server(ACCOUNTS, http=True, kind="nats-server"))


PATHS = ["/connz", "/connz?subs=1", "/connz?subs=detail", "/connz?auth=1", "/connz?sort=msgs_to",
         "/connz?acc=A&auth=1", "/connz?auth=1&user=b", "/subsz", "/subsz?subs=1&acc=A",
         "/subsz?subs=1&acc=A&test=orders.9"]


def named(doc: dict) -> dict:
    return {c.get("name"): c for c in doc["connections"]}


def test_connz_and_subsz_match_nats_server(pair):
    """Every option answers with nats-server's keys and types, and the same connections,
    subscriptions, counters and accounts."""
    ours, ref = (observe(server, PATHS) for server in pair)
    problems = []
    for path in PATHS:
        problems += differences(path, ours[path], ref[path])
    assert not problems, "differences from nats-server:\n" + "\n".join(problems)
    for seen in (ours, ref):
        assert set(named(seen["/connz"])) == {"a", "a2", "b"}
        a = named(seen["/connz?subs=detail"])["a"]
        detail = sorted(a["subscriptions_list_detail"], key=lambda d: d["subject"])
        assert [(d["subject"], d.get("qgroup"), d["msgs"]) for d in detail] == [
            ("orders.*", None, 1), ("work", "workers", 1)]
        assert "authorized_user" not in a and "account" not in a
        auth = named(seen["/connz?auth=1"])
        assert {n: (c["authorized_user"], c["account"], c["name_tag"]) for n, c in auth.items()} == {
            "a": ("a", "A", "A"), "a2": ("a2", "A", "A"), "b": ("b", "B", "B")}
        assert [c["name"] for c in seen["/connz?sort=msgs_to"]["connections"]][0] == "a"
        assert set(named(seen["/connz?acc=A&auth=1"])) == {"a", "a2"}
        assert set(named(seen["/connz?auth=1&user=b"])) == {"b"}
        listed = seen["/subsz?subs=1&acc=A"]["subscriptions_list"]
        # nats-server adds its own service imports ($SYS.REQ.ACCOUNT.PING.CONNZ, ...)
        assert sorted(d["subject"] for d in listed if d["cid"] in {c["cid"] for c in seen["/connz"]["connections"]}
                      and not d["subject"].startswith("_INBOX.")) == ["orders.*", "work"]
        assert {d["account"] for d in listed} == {"A"}
        tested = seen["/subsz?subs=1&acc=A&test=orders.9"]["subscriptions_list"]
        assert [d["subject"] for d in tested] == ["orders.*"]


def test_connz_cid_picks_one_connection(pair):
    """``cid=`` answers that connection alone, with a limit of 1."""
    for server in pair:
        seen = {}

        async def scenario():
            nc = await nats.connect(server.url, user="b", password="b", name="only")
            other = await nats.connect(server.url, user="a", password="a")
            seen["doc"] = server.monitor(f"/connz?cid={nc.client_id}")
            await nc.close()
            await other.close()
        run(scenario)
        assert [c["name"] for c in seen["doc"]["connections"]] == ["only"], server.kind
        assert seen["doc"]["limit"] == 1


@pytest.mark.parametrize("path", ["/connz?sort=nope", "/connz?sort=stop", "/connz?cid=x",
                                  "/subsz?test=orders.*"])
def test_bad_options_are_refused_as_nats_server_does(pair, path):
    """A sort nats-server does not know, a sort by stop on open connections, a cid that is
    not a number, a wildcard test subject: 400 with nats-server's text."""
    ours, ref = (server.http_get(path) for server in pair)
    assert ours == ref and ours[0] == 400, (ours, ref)


def test_routez_matches_nats_server(tmp_path):
    """In a three-server cluster of each kind, /routez and /routez?subs=1 have nats-server's
    keys and types and one route per other server."""
    seen = {}
    for kind in ("jetraft", "nats-server"):
        with Cluster(kind, tmp_path / kind, 3).start() as c:
            c.wait_formed()
            server = c.servers["n1"]
            seen[kind] = {path: server.monitor(path) for path in ("/routez", "/routez?subs=1")}
    problems = []
    assert any(r.get("subscriptions_list") for r in seen["jetraft"]["/routez?subs=1"]["routes"])
    for path in ("/routez", "/routez?subs=1"):
        for doc in (seen["jetraft"][path], seen["nats-server"][path]):
            for route in doc["routes"]:  # omitempty: whether a route has interest depends on its pool slot
                route.pop("subscriptions_list", None)
        # nats-server adds a route pinned to the system account ("account": "$SYS"); jetraft
        # carries every account over its one route per peer.
        problems += differences(path, seen["jetraft"][path], seen["nats-server"][path], {f"{path}.routes[].account"})
        assert {r["remote_name"] for r in seen["jetraft"][path]["routes"]} == {"n2", "n3"}
        assert {r["compression"] for r in seen["nats-server"][path]["routes"]} == {"off"}
    assert not problems, "differences from nats-server:\n" + "\n".join(problems)
