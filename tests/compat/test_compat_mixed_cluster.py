"""A mixed cluster: three JetStream servers and one server without JetStream, as nats-py
sees it through the plain server, on jetraft and nats-server.

The seed ("Mixing JetStream enabled servers with standard NATS servers") lets a cluster mix
both kinds: the plain server carries core NATS and its clients reach JetStream through it.
One four-server cluster per server kind serves the module (n1..n3 with a ``jetstream``
block, n4 without); the tests run in file order, the last one stops the JetStream servers.

Clients of the plain server connect without credentials as the APP user (``no_auth_user``),
a JetStream account; the ``$SYS`` user is the system account's (``sys``/``sys``).

Timing is never assumed: interest travelling between servers and the meta leader's election
are polled for with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import servers
from cluster import Cluster
from compat_support import connect, round_trip, run
from js_support import asked_again
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError
from polling import apoll

JS_SERVERS = ("n1", "n2", "n3")
PLAIN = "n4"
ACCOUNT_INFO_RESPONSE = "io.nats.jetstream.api.v1.account_info_response"
SERVER_REMOVE_RESPONSE = "io.nats.jetstream.api.v1.meta_server_remove_response"
#: A JetStream account for the clients without credentials, and the system account's user.
ACCOUNTS = """
accounts {
  $SYS { users [ { user: sys, password: sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
no_auth_user: app
"""


def meta_leader(c: Cluster) -> str | None:
    """The meta leader every JetStream server's /jsz names; None while they disagree."""
    leaders = {c.servers[n].monitor("/jsz").get("meta_cluster", {}).get("leader") for n in JS_SERVERS}
    return next(iter(leaders)) if len(leaders) == 1 else None


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    """A formed cluster of one kind: n1..n3 with JetStream and an agreed meta leader, n4
    without JetStream."""
    with formed_cluster(request.param, "mixed", 4, jetstream=True, plain=(PLAIN,), extra=ACCOUNTS) as c:
        yield c


async def plain_client(c: Cluster) -> Client:
    return await connect(c.servers[PLAIN].url)


async def api(nc: Client, subject: str, body=None, timeout: float = 15) -> dict:
    """A JSON API request through ``nc``, asked again (for at most ``timeout`` seconds) while
    it gets no responders or no answer: interest still on its way between the servers."""
    raw = b"" if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = await nc.request(subject, raw, timeout=2)
            return json.loads(msg.data)
        except (NoRespondersError, NatsTimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


# ----------------------------------------------------------------------------- tests


def test_account_info_through_plain_server(cluster):
    async def scenario():
        nc = await plain_client(cluster)
        try:
            info = await api(nc, "$JS.API.INFO")
            assert info["type"] == ACCOUNT_INFO_RESPONSE, info
            assert "error" not in info, info
            assert info["streams"] == 0 and info["consumers"] == 0, info
        finally:
            await nc.close()

    run(scenario)


def test_each_request_answered_once(cluster):
    """Every JetStream server could answer: exactly one does, for each request."""
    async def scenario():
        nc = await plain_client(cluster)
        try:
            await api(nc, "$JS.API.INFO")       # interest has arrived
            replies: dict[str, int] = {}

            async def count(msg):
                replies[msg.subject] = replies.get(msg.subject, 0) + 1

            await nc.subscribe("answers.>", cb=count)
            await round_trip(nc)
            for i in range(20):
                await nc.publish("$JS.API.INFO", b"", reply=f"answers.{i}")
            await apoll(lambda: len(replies) == 20, "20 answers", 15)
            # a last request: later than any second answer to the first twenty
            await nc.publish("$JS.API.STREAM.NAMES", b"", reply="answers.last")
            await apoll(lambda: "answers.last" in replies, "the last answer", 15)
            assert set(replies.values()) == {1}, replies
        finally:
            await nc.close()

    run(scenario)


def test_stream_through_plain_server(cluster):
    """Create an R3 stream, publish 100 messages with acknowledgements, read them back
    (stream info, message get, a pull consumer) — all through the plain server; the
    stream's replicas are on the JetStream servers."""
    async def scenario():
        nc = await plain_client(cluster)
        js = nc.jetstream(timeout=5)
        try:
            created = await api(nc, "$JS.API.STREAM.CREATE.MIXED",
                                {"name": "MIXED", "subjects": ["mixed.>"], "num_replicas": 3})
            assert "error" not in created, created
            assert created["config"]["num_replicas"] == 3, created

            async def first_ack():
                try:
                    return await js.publish("mixed.0", b"m0")
                except NoRespondersError:       # the leader's interest is on its way
                    return None

            ack = await apoll(first_ack, "first ack", 15, retry_on=())
            assert (ack.stream, ack.seq) == ("MIXED", 1)
            for i in range(1, 100):
                ack = await js.publish(f"mixed.{i}", f"m{i}".encode())
                assert (ack.stream, ack.seq) == ("MIXED", i + 1)

            info = await js.stream_info("MIXED")
            assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (100, 1, 100)
            names = {info.cluster.leader, *(r.name for r in info.cluster.replicas or [])}
            assert names == set(JS_SERVERS), info.cluster

            for seq in (1, 50, 100):
                msg = await js.get_msg("MIXED", seq)
                assert (msg.subject, msg.data, msg.seq) == (f"mixed.{seq - 1}", f"m{seq - 1}".encode(), seq)

            # the cluster's first consumer: asked again while unanswered (the same durable again
            # is the same consumer)
            psub = await asked_again(lambda: js.pull_subscribe("mixed.>", durable="PULL", stream="MIXED"),
                                     "create consumer PULL")
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                try:
                    batch = await psub.fetch(100 - len(got), timeout=2)
                except (NatsTimeoutError, ServiceUnavailableError):   # 503: interest on its way
                    continue
                for m in batch:
                    got.append(m.data)
                    await m.ack()
            assert got == [f"m{i}".encode() for i in range(100)]
            cinfo = await js.consumer_info("MIXED", "PULL")
            assert cinfo.delivered.stream_seq == 100, cinfo

            async def acks_applied():
                ci = await js.consumer_info("MIXED", "PULL")
                assert ci.ack_floor.stream_seq == 100, ci
                return ci
            await apoll(acks_applied, "acks applied", 15, retry_on=(AssertionError,))
        finally:
            await nc.close()
        # the plain server is no member of the meta group either
        leader = meta_leader(cluster)
        assert leader in JS_SERVERS
        mc = cluster.servers[leader].monitor("/jsz")["meta_cluster"]
        assert mc["cluster_size"] == 3, mc
        assert {r["name"] for r in mc.get("replicas") or []} | {leader} == set(JS_SERVERS), mc

    run(scenario)


def test_system_account_request_through_plain_server(cluster):
    """A ``$SYS`` user of the plain server asks ``$JS.API.SERVER.REMOVE`` (served in the
    system account only, by the meta leader) for a server that is no member: one JetStream
    server answers, once, with error 10044 (no member of the cluster)."""
    async def scenario():
        nc = await connect(cluster.servers[PLAIN].url, user="sys", password="sys")
        try:
            first = await api(nc, "$JS.API.SERVER.REMOVE", {"peer": "nobody"})
            assert first["type"] == SERVER_REMOVE_RESPONSE, first
            assert first["error"]["err_code"] == 10044, first
            replies: dict[str, list[dict]] = {}

            async def collect(msg):
                replies.setdefault(msg.subject, []).append(json.loads(msg.data))

            await nc.subscribe("removes.>", cb=collect)
            await round_trip(nc)
            body = json.dumps({"peer": "nobody"}).encode()
            for i in range(5):
                await nc.publish("$JS.API.SERVER.REMOVE", body, reply=f"removes.{i}")
            await apoll(lambda: len(replies) == 5, "5 answers", 15)
            # a last request: later than any second answer to the first five
            await nc.publish("$JS.API.SERVER.REMOVE", body, reply="removes.last")
            await apoll(lambda: "removes.last" in replies, "the last answer", 15)
            assert {len(answers) for answers in replies.values()} == {1}, replies
            for answers in replies.values():
                assert answers[0]["type"] == SERVER_REMOVE_RESPONSE, answers
                assert answers[0]["error"]["err_code"] == 10044, answers
        finally:
            await nc.close()

    run(scenario)


def test_no_jetstream_server_left(cluster):
    """With every JetStream server stopped, a request through the plain server gets the
    503 no-responders status (nats-py's NoRespondersError), as core NATS answers a request
    nobody can take; core NATS on the plain server goes on."""
    async def scenario():
        nc = await plain_client(cluster)
        try:
            assert "error" not in await api(nc, "$JS.API.INFO")     # served until then
            for name in JS_SERVERS:
                await asyncio.to_thread(cluster.stop_one, name)

            async def refused() -> bool:
                try:
                    await nc.request("$JS.API.INFO", b"", timeout=2)
                except NoRespondersError:
                    return True
                except NatsTimeoutError:
                    return False
                return False

            await apoll(refused, "no responders once the JetStream servers are gone", 20, retry_on=())
            with pytest.raises(NoRespondersError):
                await nc.request("$JS.API.STREAM.INFO.MIXED", b"", timeout=2)
            with pytest.raises(NoRespondersError):
                await nc.request("mixed.1", b"x", timeout=2)
            sub = await nc.subscribe("core.still")
            await nc.publish("core.still", b"up")
            msg = await sub.next_msg(timeout=5)
            assert msg.data == b"up"
        finally:
            await nc.close()

    run(scenario)
