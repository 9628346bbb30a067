"""The JetStream cluster API, as unmodified nats-py sees it, on jetraft and nats-server.

One five-server cluster per server kind serves the whole module, shaped as the seed
deployment: zones 2/2/1 (``server_tags`` ``az:a``/``az:b``/``az:c``) with
``jetstream { unique_tag: "az:" }``, a ``$SYS`` user with a bcrypt password and an ``APP``
account that holds the streams (as tests/integration/test_js_cluster.py configures
jetraft alone). Every expectation is what nats-server answers; the tests run in file
order and each uses its own stream.

Timing is never assumed: leader changes, replacement replicas and interest that travels
between servers are polled for with deadlines.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time

import bcrypt
import pytest
import servers
from cluster import Cluster
from compat_support import connect, run
from js_support import STREAM_CREATE_RESPONSE, STREAM_INFO_RESPONSE, STREAM_NAMES_RESPONSE
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from polling import apoll

ZONES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c"}
NAMES = tuple(ZONES)
SYS_USER, SYS_PASSWORD = "admin", "a very long s3cr3t! password"
APP_USER, APP_PASSWORD = "app", "app-pass"

STREAM_DELETE_RESPONSE = "io.nats.jetstream.api.v1.stream_delete_response"
STEPDOWN_RESPONSE = "io.nats.jetstream.api.v1.stream_leader_stepdown_response"
META_STEPDOWN_RESPONSE = "io.nats.jetstream.api.v1.meta_leader_stepdown_response"
REMOVE_PEER_RESPONSE = "io.nats.jetstream.api.v1.stream_remove_peer_response"

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
RAFT_GROUP = re.compile(r"^S-R3F-[0-9A-Za-z]{8}$")
#: nats-server's getHash alphabet (server/events.go): base 62.
_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

#: Peer ids seen in replies, by server kind then server name (compared across kinds).
SEEN_PEERS: dict[str, dict[str, str]] = {}


def peer_hash(name: str) -> str:
    """nats-server's ``getHash(name)``: 8 characters, SHA-256 bytes taken modulo 62."""
    return "".join(_HASH_DIGITS[b % 62] for b in hashlib.sha256(name.encode()).digest()[:8])


def config_extra() -> str:
    """The accounts block: a bcrypt-hashed $SYS user, and APP with JetStream."""
    hashed = bcrypt.hashpw(SYS_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    return (f'accounts {{\n  $SYS {{ users = [ {{ user: "{SYS_USER}", pass: "{hashed}" }} ] }}\n'
            f'  APP {{ jetstream: enabled, users = [ {{ user: "{APP_USER}", pass: "{APP_PASSWORD}" }} ] }}\n}}')


def meta_leader(c: Cluster) -> str | None:
    """The meta leader every server's /jsz names; None while they have none or disagree."""
    leaders = {s.monitor("/jsz").get("meta_cluster", {}).get("leader") for s in c.servers.values()}
    return next(iter(leaders)) if len(leaders) == 1 else None


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    """A formed five-server cluster of one kind, zones 2/2/1, with an agreed meta leader."""
    with formed_cluster(request.param, "jscluster", 5, jetstream=True, unique_tag="az:",
                        tags=[[f"az:{z}"] for z in ZONES.values()], extra=config_extra(),
                        users=[(APP_USER, APP_PASSWORD)]) as c:
        yield c
        if crashed := [n for n, s in c.servers.items() if not s.alive()]:
            pytest.fail(f"{request.param} servers exited during the tests: {crashed}\n{c.outputs()}")


def url(c: Cluster, name: str) -> str:
    return c.servers[name].url


async def app(c: Cluster, name: str = "n1") -> Client:
    """A connection of the APP user to server ``name``."""
    return await connect(url(c, name), user=APP_USER, password=APP_PASSWORD)


async def system(c: Cluster, name: str = "n2") -> Client:
    """A connection of the $SYS user to server ``name``."""
    return await connect(url(c, name), user=SYS_USER, password=SYS_PASSWORD)


async def api(nc: Client, subject: str, body=None, *, once: bool = False, headers=None,
              again: tuple[type[Exception], ...] = (NatsTimeoutError, NoRespondersError),
              sent: list[str] | None = None) -> dict:
    """A request answered with JSON (``body``: bytes as they are, else JSON-encoded). Unless
    ``once``, asked again for at most 15 s while it raises one of ``again``: no leader yet,
    or interest still on its way between servers. Each asking appends ``subject`` to
    ``sent`` when given."""
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + 15
    while True:
        if sent is not None:
            sent.append(subject)
        try:
            msg = await nc.request(subject, raw, timeout=5 if once else 2, headers=headers)
            return json.loads(msg.data)
        except again:
            if once or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)     # back off before asking again


async def publish(nc: Client, subject: str, data: bytes, headers=None) -> dict:
    """Publish with a reply subject; the stream's acknowledgement. Sent again only when no
    server knows the stream's interest yet (no responders: nothing was stored)."""
    return await api(nc, subject, data, headers=headers, again=(NoRespondersError,))


async def create(nc: Client, name: str, replicas: int = 3, sent: list[str] | None = None) -> dict:
    """STREAM.CREATE ``name`` (subjects ``<name>.>``), asked again during a meta election or
    after a timeout; each asking is appended to ``sent`` when given."""
    config = {"name": name, "subjects": [f"{name.lower()}.>"], "num_replicas": replicas}

    async def answered() -> dict:
        reply = await api(nc, f"$JS.API.STREAM.CREATE.{name}", config, sent=sent)
        assert reply.get("error", {}).get("err_code") != 10008, reply
        return reply

    return await apoll(answered, f"create {name}", 30, retry_on=(AssertionError,))


def members(cl: dict) -> list[str]:
    """The stream's servers: its leader, then its replicas."""
    return [cl.get("leader"), *(r["name"] for r in cl.get("replicas") or [])]


def settled(reply: dict, replicas: int = 3) -> bool:
    """A STREAM.INFO reply with a leader and every replica present and current."""
    cl = reply.get("cluster") or {}
    reps = cl.get("replicas") or []
    return bool(cl.get("leader")) and len(reps) == replicas - 1 and all(r["current"] for r in reps)


async def info_settled(nc: Client, stream: str, what: str, accept=lambda cl: True) -> dict:
    """Poll STREAM.INFO until it is :func:`settled` and ``accept(cluster)``; the reply."""
    async def done() -> dict:
        reply = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
        assert settled(reply) and accept(reply["cluster"]), reply
        return reply

    return await apoll(done, what, 20, retry_on=(AssertionError,))


def check_peers(kind: str, entries: list[dict]) -> None:
    """Each entry's ``peer`` is nats-server's getHash of its ``name``, and the same id the
    other server kind gave for that name (when it has run already)."""
    mine = SEEN_PEERS.setdefault(kind, {})
    for e in entries:
        assert e["peer"] == peer_hash(e["name"]), e
        mine[e["name"]] = e["peer"]
    for other, theirs in SEEN_PEERS.items():
        common = mine.keys() & theirs.keys()
        assert {n: mine[n] for n in common} == {n: theirs[n] for n in common}, (kind, other)


def check_stream_cluster(kind: str, cl: dict) -> None:
    """The ``cluster`` block of an R3 stream in C1, its three servers one per zone."""
    assert cl["name"] == "C1"
    assert isinstance(cl["raft_group"], str) and RAFT_GROUP.match(cl["raft_group"]), cl
    assert cl["leader"] in NAMES and RFC3339.match(cl["leader_since"]), cl
    assert len(cl["replicas"]) == 2 and cl["leader"] not in {r["name"] for r in cl["replicas"]}, cl
    for r in cl["replicas"]:
        assert {"name", "current", "active", "peer"} <= r.keys(), r
        assert r["name"] in NAMES and isinstance(r["current"], bool) and isinstance(r["active"], int), r
    check_peers(kind, cl["replicas"])
    assert sorted(ZONES[m] for m in members(cl)) == ["a", "b", "c"], cl


def error_body(kind: str, code: int, err_code: int, description: str, **extra) -> dict:
    return {"type": f"io.nats.jetstream.api.v1.{kind}", "error": {
        "code": code, "err_code": err_code, "description": description}, **extra}


# ----------------------------------------------------------------------------- tests


def test_jsz_meta_cluster_on_every_server(cluster):
    leader = meta_leader(cluster)

    def meta_settled() -> bool:
        # the leader sees every follower current; each follower sees the leader current
        for name, server in cluster.servers.items():
            mc = server.monitor("/jsz")["meta_cluster"]
            if mc.get("leader") != leader:
                return False
            reps = {r["name"]: r for r in mc.get("replicas") or []}
            if name == leader and not all(r["current"] for r in reps.values()):
                return False
            if name != leader and not reps.get(leader, {}).get("current"):
                return False
        return True

    async def wait() -> None:
        await apoll(meta_settled, "every server agreeing on a current meta leader", 15, retry_on=())

    run(wait)
    for name, server in cluster.servers.items():
        mc = server.monitor("/jsz")["meta_cluster"]
        assert (mc["name"], mc["leader"], mc["peer"]) == ("C1", leader, peer_hash(leader)), (name, mc)
        assert (mc["cluster_size"], mc["quorum_needed"]) == (5, 3), (name, mc)
        assert sorted(r["name"] for r in mc["replicas"]) == sorted(set(NAMES) - {name}), (name, mc)
        for r in mc["replicas"]:
            assert {"name", "current", "active", "peer"} <= r.keys(), (name, r)
            assert isinstance(r["active"], int) and isinstance(r["current"], bool), (name, r)
        check_peers(cluster.kind, mc["replicas"])


def test_r3_stream_create_and_info_carry_the_cluster_block(cluster):
    async def scenario():
        nc = await app(cluster)
        sent: list[str] = []
        created = await create(nc, "ORDERS", sent=sent)
        assert created["type"] == STREAM_CREATE_RESPONSE, created
        # did_create is true for the asking that made the stream. Asked more than once (a
        # timeout on a loaded machine, or no meta leader yet), the asking answered may be a
        # later one that found the stream made: did_create false, which is omitted
        if len(sent) == 1:
            assert created.get("did_create") is True, created
        else:
            assert isinstance(created.get("did_create", False), bool), (len(sent), created)
        check_stream_cluster(cluster.kind, created["cluster"])
        info = await info_settled(nc, "ORDERS", "ORDERS with every replica current")
        assert info["type"] == STREAM_INFO_RESPONSE
        check_stream_cluster(cluster.kind, info["cluster"])
        assert info["cluster"]["raft_group"] == created["cluster"]["raft_group"]
        await nc.close()

    run(scenario)


def test_create_again_with_the_same_config_answers_the_stream(cluster):
    async def scenario():
        nc = await app(cluster)
        first = await create(nc, "AGAIN")
        await info_settled(nc, "AGAIN", "AGAIN settled")
        config = {"name": "AGAIN", "subjects": ["again.>"], "num_replicas": 3}
        again = await api(nc, "$JS.API.STREAM.CREATE.AGAIN", config, once=True)
        assert sorted(again) == ["cluster", "config", "created", "state", "ts", "type"], again
        assert (again["type"], again["created"], again["config"]) == (
            STREAM_CREATE_RESPONSE, first["created"], first["config"])
        await nc.close()

    run(scenario)


def test_cluster_blocks_have_nats_server_fields(cluster):
    """The field names of a stream's ``cluster`` (with ``system_account``/``traffic_account``,
    the account the replication traffic rides on) and of /jsz ``meta_cluster``."""
    async def scenario():
        nc = await app(cluster)
        await create(nc, "FIELDS")
        info = await info_settled(nc, "FIELDS", "FIELDS with every replica current")
        await nc.close()
        cl = info["cluster"]
        got = {"cluster": sorted(cl), "accounts": (cl.get("system_account"), cl.get("traffic_account")),
               "meta_cluster": sorted(cluster.servers["n1"].monitor("/jsz")["meta_cluster"])}
        assert got == {
            "cluster": ["leader", "leader_since", "name", "raft_group", "replicas", "system_account",
                        "traffic_account"],
            "accounts": (True, "$SYS"),
            "meta_cluster": ["cluster_size", "leader", "name", "peer", "pending", "pending_infos",
                             "pending_requests", "quorum_needed", "replicas", "snapshot"]}

    run(scenario)


def test_r5_with_unique_tag_has_no_suitable_peers(cluster):
    async def scenario():
        nc = await app(cluster)
        reply = await create(nc, "FIVE", replicas=5)
        assert reply == error_body("stream_create_response", 400, 10005,
                                   "no suitable peers for placement, server tag not unique")
        names = await api(nc, "$JS.API.STREAM.NAMES")
        assert "FIVE" not in (names["streams"] or [])
        await nc.close()

    run(scenario)


def test_stream_leader_stepdown_moves_the_leader(cluster):
    async def scenario():
        nc = await app(cluster)
        await create(nc, "STEP")
        before = (await info_settled(nc, "STEP", "STEP settled"))["cluster"]["leader"]
        reply = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.STEP", once=True)
        assert reply == {"type": STEPDOWN_RESPONSE, "success": True}
        async def moved() -> dict:
            reply = await api(nc, "$JS.API.STREAM.INFO.STEP")
            assert reply.get("cluster", {}).get("leader") not in (None, before), reply
            return reply
        info = await apoll(moved, f"a stream leader other than {before}", 10, retry_on=(AssertionError,))
        ack = await publish(nc, "step.new", b"after step-down")
        assert ack == {"stream": "STEP", "seq": info["state"]["last_seq"] + 1}
        await nc.close()

    run(scenario)


def test_meta_leader_stepdown_from_the_system_account(cluster):
    async def scenario():
        sysc = await system(cluster)
        before = meta_leader(cluster)
        reply = await api(sysc, "$JS.API.META.LEADER.STEPDOWN", once=True)
        assert reply == {"type": META_STEPDOWN_RESPONSE, "success": True}
        await apoll(lambda: meta_leader(cluster) not in (None, before),
                    f"/jsz agreeing on a meta leader other than {before}", 10, retry_on=())
        await sysc.close()

    run(scenario)


async def remove_peers(c: Cluster, stream: str, *requests) -> tuple[dict, list[dict]]:
    """Create the R3 ``stream``, let it settle, then send it each STREAM.PEER.REMOVE request
    (a body, or a function of the stream's cluster block giving one): (that block, the replies)."""
    nc = await app(c)
    try:
        await create(nc, stream)
        cl = (await info_settled(nc, stream, f"{stream} settled"))["cluster"]
        return cl, [await api(nc, f"$JS.API.STREAM.PEER.REMOVE.{stream}", r(cl) if callable(r) else r,
                              once=True) for r in requests]
    finally:
        await nc.close()


def outsider(cl: dict) -> dict:
    """A request to remove a server of the cluster that holds no replica of the stream."""
    return {"peer": next(n for n in NAMES if n not in members(cl))}


def test_peer_remove_of_a_server_not_in_the_stream(cluster):
    async def scenario():
        _, replies = await remove_peers(cluster, "OUTSIDE", {"peer": "nobody"}, outsider)
        assert replies == [error_body("stream_remove_peer_response", 400, 10040, "peer not a member")] * 2

    run(scenario)


def test_peer_remove_without_a_peer_is_a_bad_request(cluster):
    async def scenario():
        _, replies = await remove_peers(cluster, "NOPEER", {})
        assert replies == [error_body("stream_remove_peer_response", 400, 10003, "bad request")]

    run(scenario)


def test_peer_remove_of_the_only_server_in_its_zone_cannot_be_remapped(cluster):
    """n5 is zone c's only server (and so in every R3 stream): with unique_tag no other
    server can take its place."""
    async def scenario():
        cl, replies = await remove_peers(cluster, "ZONEC", {"peer": "n5"})
        # jetraft says why after nats-server's text (see tests/integration/test_peer_remove_leader.py)
        reason = ("" if cluster.kind == "nats-server" else
                  ": no suitable peers for placement, server tag not unique (no server outside "
                  f"{', '.join(sorted(members(cl)))} in a zone the stream does not use, unique_tag 'az:')")
        assert replies == [error_body("stream_remove_peer_response", 503, 10075, "peer remap failed" + reason)]

    run(scenario)


def test_peer_remove_of_a_replica_is_replaced_in_its_zone(cluster):
    async def scenario():
        removed = []

        def replica_outside_zone_c(cl: dict) -> dict:
            removed.append(next(r["name"] for r in cl["replicas"] if ZONES[r["name"]] != "c"))
            return {"peer": removed[0]}

        before, replies = await remove_peers(cluster, "MOVED", replica_outside_zone_c)
        assert replies == [{"type": REMOVE_PEER_RESPONSE, "success": True}]
        nc = await app(cluster)
        now = await info_settled(nc, "MOVED", f"MOVED off {removed[0]}, every replica current",
                                 lambda c: removed[0] not in members(c))
        await nc.close()
        check_stream_cluster(cluster.kind, now["cluster"])
        new = set(members(now["cluster"])) - set(members(before))
        assert [ZONES[n] for n in new] == [ZONES[removed[0]]], (members(before), members(now["cluster"]))

    run(scenario)


async def ping_all(sysc: Client, subject: str) -> list[dict]:
    """Publish to a $SYS.REQ.SERVER.PING subject; the replies of the five servers."""
    inbox = sysc.new_inbox()
    sub = await sysc.subscribe(inbox)
    await sysc.publish(subject, b"", reply=inbox)
    replies = [json.loads((await sub.next_msg(timeout=5)).data) for _ in NAMES]
    await sub.unsubscribe()
    return replies


def check_server_block(server: dict) -> None:
    assert server["name"] in NAMES and server["cluster"] == "C1", server
    assert isinstance(server["id"], str) and server["id"].startswith("N") and len(server["id"]) == 56, server
    assert isinstance(server["ver"], str) and server["jetstream"] is True, server
    assert server["tags"] == [f"az:{ZONES[server['name']]}"], server


def test_system_account_pings_jsz_and_statsz(cluster):
    async def scenario():
        leader = meta_leader(cluster)
        sysc = await system(cluster, "n2")
        replies = await ping_all(sysc, "$SYS.REQ.SERVER.PING.JSZ")
        assert sorted(r["server"]["name"] for r in replies) == sorted(NAMES)
        for r in replies:
            assert set(r) == {"server", "data"}, r
            check_server_block(r["server"])
            assert r["data"]["server_id"] == r["server"]["id"]
            mc = r["data"]["meta_cluster"]
            assert (mc["name"], mc["leader"], mc["cluster_size"], mc["quorum_needed"]) == ("C1", leader, 5, 3), r
        replies = await ping_all(sysc, "$SYS.REQ.SERVER.PING")
        assert sorted(r["server"]["name"] for r in replies) == sorted(NAMES)
        for r in replies:
            check_server_block(r["server"])
            connections = r["statsz"]["connections"]
            assert isinstance(connections, int) and connections >= (1 if r["server"]["name"] == "n2" else 0), r
        await sysc.close()

    run(scenario)


def test_info_of_a_missing_stream(cluster):
    async def scenario():
        nc = await app(cluster, "n3")
        assert await api(nc, "$JS.API.STREAM.INFO.MISSING") == error_body(
            "stream_info_response", 404, 10059, "stream not found", total=0, offset=0, limit=0)
        await nc.close()

    run(scenario)


def test_a_deleted_stream_is_no_longer_listed(cluster):
    async def scenario():
        nc = await app(cluster, "n3")
        await create(nc, "GONE")
        await info_settled(nc, "GONE", "GONE settled")
        reply = await api(nc, "$JS.API.STREAM.DELETE.GONE", once=True)
        assert reply == {"type": STREAM_DELETE_RESPONSE, "success": True}
        async def unlisted() -> dict:
            reply = await api(nc, "$JS.API.STREAM.NAMES")
            assert "GONE" not in (reply.get("streams") or []), reply
            return reply
        names = await apoll(unlisted, "GONE not listed", 10, retry_on=(AssertionError,))
        assert names["type"] == STREAM_NAMES_RESPONSE
        info = await api(nc, "$JS.API.STREAM.INFO.GONE")
        assert info["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}, info
        await nc.close()

    run(scenario)


def test_msg_id_and_expected_last_sequence_across_servers(cluster):
    async def scenario():
        first, second = await app(cluster, "n1"), await app(cluster, "n5")
        await create(first, "DEDUP")
        await info_settled(first, "DEDUP", "DEDUP settled")
        msg_id = {"Nats-Msg-Id": "only-once"}
        assert await publish(first, "dedup.x", b"1", msg_id) == {"stream": "DEDUP", "seq": 1}
        assert await publish(second, "dedup.x", b"1", msg_id) == {"stream": "DEDUP", "seq": 1, "duplicate": True}
        wrong = {"error": {"code": 400, "err_code": 10071, "description": "wrong last sequence: 1"},
                 "stream": "DEDUP", "seq": 0}
        for nc in (first, second):
            assert await publish(nc, "dedup.x", b"2", {"Nats-Expected-Last-Sequence": "7"}) == wrong
        await first.close()
        await second.close()

    run(scenario)
