"""JetStream advisories as a client of the account sees them, against jetraft and nats-server.

A client subscribes to ``$JS.EVENT.>`` and makes the same JetStream calls on both servers;
the subjects, the ``type`` strings, the order, and the keys and JSON types of every
advisory must be the same (ids, timestamps and sequences differ from run to run, and are
checked for their form).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re

import pytest
import servers
from compat_support import connect, json_type, run
from js_support import js_session
from nats.js.api import AckPolicy, ConsumerConfig
from polling import apoll

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
NUID = re.compile(r"^[0-9A-Za-z]{22}$")

COMMON = {"type": "string", "id": "string", "timestamp": "string"}
STREAM_ACTION = {**COMMON, "stream": "string", "action": "string"}
CONSUMER_ACTION = {**COMMON, "stream": "string", "consumer": "string", "action": "string"}
AUDIT = {**COMMON, "server": "string", "client": "object", "subject": "string",
         "request": "string", "response": "string"}
#: nats-server ClientInfo of a nats-py client (bar ``rtt``, there once the server has measured it).
CLIENT = {"start": "string", "host": "string", "id": "number", "acc": "string", "lang": "string",
          "ver": "string", "server": "string", "kind": "string", "client_type": "string"}
TERMINATED = {**COMMON, "stream": "string", "consumer": "string", "consumer_seq": "number",
              "stream_seq": "number", "deliveries": "number"}
ACK_METRIC = {**COMMON, "stream": "string", "consumer": "string", "consumer_seq": "number",
              "stream_seq": "number", "ack_time": "number", "deliveries": "number"}
MAX_DELIVER = {**COMMON, "stream": "string", "consumer": "string", "stream_seq": "number",
               "deliveries": "number"}

ADV = "$JS.EVENT.ADVISORY."
TYPE = "io.nats.jetstream.advisory.v1."


def shape(body: dict) -> dict:
    """Key -> JSON type of an advisory."""
    return {k: json_type(v) for k, v in body.items()}


class Events:
    """Everything published on ``$JS.EVENT.>`` in the account, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict]] = []
        self.probes_done = False

    async def cb(self, msg) -> None:
        self.got.append((msg.subject, json.loads(msg.data)))
        if ".PROBE" in msg.subject and self.probes_done:
            self.got.pop()          # a late copy of a test's own probe (see interest_everywhere)

    async def wait(self, count: int, what: str, timeout: float = 10) -> list[tuple[str, dict]]:
        await apoll(lambda: len(self.got) >= count, what, timeout)
        return list(self.got)

    def take(self) -> list[tuple[str, dict]]:
        out, self.got = self.got, []
        return out


def check_common(body: dict) -> None:
    assert NUID.match(body["id"]), body
    assert RFC3339.match(body["timestamp"]), body


def test_stream_and_consumer_actions_and_api_audit(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            ev = Events()
            await s.nc.subscribe("$JS.EVENT.>", cb=ev.cb)
            await s.nc.flush()
            await s.jsm.add_stream(name="ADV", subjects=["adv.>"])
            await s.jsm.update_stream(name="ADV", subjects=["adv.>", "other"])
            await s.jsm.add_consumer("ADV", ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT))
            await s.jsm.delete_consumer("ADV", "D")
            await s.jsm.delete_stream("ADV")
            got = await ev.wait(10, "five actions and their five audits")
            await s.nc.flush()
            got = ev.take()
            # nats-server sends an action's advisory and its request's audit from different
            # places: their interleaving varies, the order within each kind does not
            assert [(subj, b["type"], b["action"]) for subj, b in got if subj != f"{ADV}API"] == [
                (f"{ADV}STREAM.CREATED.ADV", f"{TYPE}stream_action", "create"),
                (f"{ADV}STREAM.UPDATED.ADV", f"{TYPE}stream_action", "modify"),
                (f"{ADV}CONSUMER.CREATED.ADV.D", f"{TYPE}consumer_action", "create"),
                (f"{ADV}CONSUMER.DELETED.ADV.D", f"{TYPE}consumer_action", "delete"),
                (f"{ADV}STREAM.DELETED.ADV", f"{TYPE}stream_action", "delete"),
            ]
            assert all(b["type"] == f"{TYPE}api_audit" for subj, b in got if subj == f"{ADV}API")
            audits = [b for subj, b in got if subj == f"{ADV}API"]
            requests = ["$JS.API.STREAM.CREATE.ADV", "$JS.API.STREAM.UPDATE.ADV",
                        "$JS.API.CONSUMER.DURABLE.CREATE.ADV.D", "$JS.API.CONSUMER.DELETE.ADV.D",
                        "$JS.API.STREAM.DELETE.ADV"]
            if js_server.kind == "jetraft":
                assert [a["subject"] for a in audits] == requests
            else:   # each audit leaves from the goroutine that answered: now and then two cross
                assert sorted(a["subject"] for a in audits) == sorted(requests)
            for subj, body in got:
                check_common(body)
                if "action" not in body:
                    continue
                assert shape(body) == (CONSUMER_ACTION if "consumer" in body else STREAM_ACTION)
                assert body["stream"] == "ADV"
            # the deletes carry no request body: "request" is left out
            for a in audits:
                assert shape(a) == (AUDIT if ".DELETE." not in a["subject"] else
                                    {k: v for k, v in AUDIT.items() if k != "request"}), a
            for a in audits:
                client = {k: v for k, v in shape(a["client"]).items() if k != "rtt"}
                assert client == CLIENT
                assert isinstance(a["client"].get("rtt", 0), int)      # nanoseconds, when present
                assert a["client"]["acc"] == "$G" and a["client"]["lang"] == "python3"
                assert a["client"]["kind"] == "Client" and a["client"]["client_type"] == "nats"
                assert a["client"]["server"] == a["server"]
                assert json.loads(a["response"])["type"].startswith("io.nats.jetstream.api.v1.")
            create = next(a for a in audits if a["subject"] == "$JS.API.STREAM.CREATE.ADV")
            assert json.loads(create["request"])["name"] == "ADV"
            assert json.loads(create["response"])["did_create"] is True
            assert len({b["id"] for _, b in got}) == len(got)

    run(scenario)


def test_a_stream_deleted_with_its_consumers_announces_each_consumer_first(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="ADV", subjects=["adv.>"])
            for durable in ("A", "B"):
                await s.jsm.add_consumer("ADV", ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
            ev = Events()
            await s.nc.subscribe("$JS.EVENT.ADVISORY.*.DELETED.>", cb=ev.cb)
            await s.nc.flush()
            await s.jsm.delete_stream("ADV")
            stream_deleted = f"{ADV}STREAM.DELETED.ADV"
            if js_server.kind == "jetraft":
                await ev.wait(3, "three deletes")
            else:
                # nats-server 2.15.1 queues the stream's advisory on the stream's own send
                # loop and closes that loop straight after (stream.go, stop: "Quit channel,
                # do this after sending the delete advisory"): now and then it is never sent,
                # nor are some of the consumers'
                with contextlib.suppress(AssertionError):
                    await apoll(lambda: any(subj == stream_deleted for subj, _ in ev.got), "the stream's delete", 5)
            await s.nc.flush()
            got = ev.take()
            # jetraft announces every consumer, then the stream; of what nats-server
            # announces, the consumers come first
            consumers = [subj for subj, _ in got if subj != stream_deleted]
            assert [subj for subj, _ in got] == consumers + [stream_deleted] * (len(got) - len(consumers))
            assert len(got) - len(consumers) <= 1
            assert set(consumers) <= {f"{ADV}CONSUMER.DELETED.ADV.A", f"{ADV}CONSUMER.DELETED.ADV.B"}
            assert len(consumers) == len(set(consumers))
            if js_server.kind == "jetraft":
                assert sorted(consumers) == [f"{ADV}CONSUMER.DELETED.ADV.A", f"{ADV}CONSUMER.DELETED.ADV.B"]
                assert got[-1][0] == stream_deleted
            assert all(shape(b) == CONSUMER_ACTION and b["action"] == "delete" for subj, b in got if subj != stream_deleted)

    run(scenario)


def test_every_api_answer_is_audited_errors_and_reads_included(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            ev = Events()
            await s.nc.subscribe("$JS.EVENT.>", cb=ev.cb)
            await s.nc.flush()
            await s.jsm.add_stream(name="ADV", subjects=["adv.>"])
            # nats-server may publish an audit late: the first create's is awaited and set aside
            await apoll(lambda: any(subj == f"{ADV}API" for subj, _ in ev.got), "the first create's audit", 10)
            ev.take()
            await s.api("$JS.API.STREAM.INFO.ADV")
            await s.api("$JS.API.STREAM.INFO.NOPE")
            # the same config again: no stream_action, only the audit
            await s.api("$JS.API.STREAM.CREATE.ADV", {"name": "ADV", "subjects": ["adv.>"]})
            await apoll(lambda: sum(1 for subj, _ in ev.got if subj == f"{ADV}API") >= 3, "three audits", 10)
            await s.nc.flush()
            # nats-server now and then announces the stream created before the subscription
            # after it: only the audits are compared
            got = [(subj, b) for subj, b in ev.take() if subj == f"{ADV}API"]
            # (nats-server answers reads on other goroutines: audits of a burst may cross)
            assert sorted((subj, b["subject"]) for subj, b in got) == [
                (f"{ADV}API", "$JS.API.STREAM.CREATE.ADV"),
                (f"{ADV}API", "$JS.API.STREAM.INFO.ADV"),
                (f"{ADV}API", "$JS.API.STREAM.INFO.NOPE"),
            ]
            nope = next(b for _, b in got if b["subject"].endswith("NOPE"))
            assert json.loads(nope["response"])["error"]["err_code"] == 10059

    run(scenario)


def test_terminated_and_max_deliveries(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="ADV", subjects=["adv.>"])
            await s.jsm.add_consumer("ADV", ConsumerConfig(
                durable_name="D", ack_policy=AckPolicy.EXPLICIT, max_deliver=1, ack_wait=0.5))
            for p in (b"1", b"2", b"3"):
                await s.js.publish("adv.x", p)
            ev = Events()
            # the consumer advisories only: nats-server may publish an earlier request's
            # API audit late, after this subscription is made
            await s.nc.subscribe(f"{ADV}CONSUMER.>", cb=ev.cb)
            await s.nc.flush()
            sub = await s.js.pull_subscribe_bind("D", "ADV")
            msgs = await sub.fetch(3, timeout=5)
            assert len(msgs) == 3
            await msgs[0].ack_sync()
            await msgs[1].term()
            # the third is never acknowledged: after ack_wait it has had its one delivery
            got = await ev.wait(2, "terminated and max deliveries advisories")
            assert [(subj, b["type"]) for subj, b in got] == [
                (f"{ADV}CONSUMER.MSG_TERMINATED.ADV.D", f"{TYPE}terminated"),
                (f"{ADV}CONSUMER.MAX_DELIVERIES.ADV.D", f"{TYPE}max_deliver"),
            ]
            term, maxd = got[0][1], got[1][1]
            check_common(term)
            check_common(maxd)
            assert shape(term) == TERMINATED
            assert {k: term[k] for k in ("stream", "consumer", "consumer_seq", "stream_seq", "deliveries")} == \
                {"stream": "ADV", "consumer": "D", "consumer_seq": 2, "stream_seq": 2, "deliveries": 1}
            assert shape(maxd) == MAX_DELIVER
            assert {k: maxd[k] for k in ("stream", "consumer", "stream_seq", "deliveries")} == \
                {"stream": "ADV", "consumer": "D", "stream_seq": 3, "deliveries": 1}

    run(scenario)



def test_sampled_acks_are_published_as_metrics(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="ADV", subjects=["adv.>"])
            await s.jsm.add_consumer("ADV", ConsumerConfig(
                durable_name="ALL", ack_policy=AckPolicy.EXPLICIT, sample_freq="100%"))
            await s.jsm.add_consumer("ADV", ConsumerConfig(
                durable_name="NONE", ack_policy=AckPolicy.EXPLICIT))
            assert (await s.jsm.consumer_info("ADV", "ALL")).config.sample_freq == "100%"
            for p in (b"1", b"2"):
                await s.js.publish("adv.x", p)
            ev = Events()
            await s.nc.subscribe("$JS.EVENT.METRIC.>", cb=ev.cb)
            await s.nc.flush()
            for durable in ("ALL", "NONE"):
                sub = await s.js.pull_subscribe_bind(durable, "ADV")
                for msg in await sub.fetch(2, timeout=5):
                    await msg.ack_sync()
            got = await ev.wait(2, "two ack metrics")
            await s.nc.flush()
            assert [(subj, b["type"], b["consumer_seq"], b["stream_seq"], b["deliveries"])
                    for subj, b in ev.take()] == [
                ("$JS.EVENT.METRIC.CONSUMER.ACK.ADV.ALL", "io.nats.jetstream.metric.v1.consumer_ack", 1, 1, 1),
                ("$JS.EVENT.METRIC.CONSUMER.ACK.ADV.ALL", "io.nats.jetstream.metric.v1.consumer_ack", 2, 2, 1),
            ]
            for _, body in got:
                check_common(body)
                assert shape(body) == ACK_METRIC
                assert body["stream"] == "ADV" and body["consumer"] == "ALL" and body["ack_time"] > 0

    run(scenario)


# ---------------------------------------------------------------- a three-server cluster

SYS_USER, SYS_PASSWORD = "admin", "sys-pass"
APP_USER, APP_PASSWORD = "app", "app-pass"
CLUSTER_ACCOUNTS = (f'accounts {{\n  $SYS {{ users = [ {{ user: "{SYS_USER}", pass: "{SYS_PASSWORD}" }} ] }}\n'
                    f'  APP {{ jetstream: enabled, users = [ {{ user: "{APP_USER}", pass: "{APP_PASSWORD}" }} ] }}\n}}')
#: nats-server PeerInfo of a peer in a leader-elected advisory (bar ``lag``, ``offline``).
PEER = {"name": "string", "current": "boolean", "active": "number", "peer": "string"}
LEADER_ELECTED = {**COMMON, "stream": "string", "leader": "string", "replicas": "array"}


@pytest.fixture(params=servers.KINDS)
def three(request, formed_cluster):
    """A formed three-server cluster of one kind with an APP account and $SYS."""
    with formed_cluster(request.param, "advisories", 3, jetstream=True, extra=CLUSTER_ACCOUNTS,
                        users=[(APP_USER, APP_PASSWORD)]) as c:
        yield c


async def request_ok(nc, subject: str, body: dict | None = None) -> dict:
    """A JetStream API request, asked again (for at most 30 s) while the cluster has no
    leader for it yet (a timeout, or an error answer). A delete asked again after a timeout
    may find its first asking done: "not found" (10014, 10059) then answers it."""
    deadline = asyncio.get_running_loop().time() + 30
    timed_out = False
    while True:
        try:
            reply = json.loads((await nc.request(subject, json.dumps(body).encode() if body else b"",
                                                 timeout=3)).data)
        except Exception as exc:  # noqa: BLE001 - no leader yet: asked again
            reply = {"error": repr(exc)}
            timed_out = True
        if timed_out and ".DELETE." in subject and \
                isinstance(reply.get("error"), dict) and reply["error"].get("err_code") in (10014, 10059):
            return {"success": True}
        if "error" not in reply or asyncio.get_running_loop().time() > deadline:
            assert "error" not in reply, (subject, reply)
            return reply
        await asyncio.sleep(0.1)


def test_cluster_leader_elected_and_actions_in_the_account_and_the_system_account(three):
    async def scenario():
        app = await connect(three.servers["n1"].url, user=APP_USER, password=APP_PASSWORD)
        sys_ = await connect(three.servers["n2"].url, user=SYS_USER, password=SYS_PASSWORD)
        try:
            in_app, in_sys = Events(), Events()
            await app.subscribe("$JS.EVENT.>", cb=in_app.cb)
            await sys_.subscribe("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.>", cb=in_sys.cb)
            await app.flush()
            await sys_.flush()

            # the subscriptions reached every server (the stream's leader, wherever it is,
            # sends the advisories): a probe published on each server arrives at both
            probes = []
            for name in three.servers:
                probes.append((name, await connect(three.servers[name].url, user=APP_USER, password=APP_PASSWORD),
                               await connect(three.servers[name].url, user=SYS_USER, password=SYS_PASSWORD)))

            async def interest_everywhere() -> bool:
                for name, a, s in probes:
                    await a.publish(f"$JS.EVENT.PROBE.{name}", b"{}")
                    await s.publish(f"{ADV}STREAM.LEADER_ELECTED.PROBE{name}", b"{}")
                    await a.flush()
                    await s.flush()
                got_app = {subj for subj, _ in in_app.got}
                got_sys = {subj for subj, _ in in_sys.got}
                return all(f"$JS.EVENT.PROBE.{n}" in got_app and f"{ADV}STREAM.LEADER_ELECTED.PROBE{n}" in got_sys
                           for n, _a, _s in probes)
            try:
                await apoll(interest_everywhere, "the subscriptions on every server", 20)
            finally:
                for _name, a, s in probes:
                    await a.close()
                    await s.close()
            for events in (in_app, in_sys):
                events.probes_done = True
                events.got.clear()
            await request_ok(app, "$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l.>"], "num_replicas": 3})
            await apoll(lambda: any(s.endswith("LEADER_ELECTED.L") for s, _ in in_app.got)
                        and bool(in_sys.got), "leader elected advisories", 20)
            elected = next(b for s, b in in_app.got if s == f"{ADV}STREAM.LEADER_ELECTED.L")
            check_common(elected)
            assert shape(elected) == LEADER_ELECTED
            assert elected["type"] == f"{TYPE}stream_leader_elected"
            assert elected["leader"] in three.servers
            # every peer, the leader included
            assert sorted(r["name"] for r in elected["replicas"]) == sorted(three.servers)
            for r in elected["replicas"]:
                assert {k: v for k, v in shape(r).items() if k not in ("lag", "offline")} == PEER
            subj, system_copy = in_sys.got[0]
            assert subj == f"{ADV}STREAM.LEADER_ELECTED.L"
            assert shape(system_copy) == {**COMMON, "account": "string", "stream": "string", "leader": "string",
                                          "replicas": "array"}
            assert system_copy["account"] == "APP" and system_copy["leader"] == elected["leader"]
            assert list(system_copy)[:4] == ["type", "id", "timestamp", "account"]

            # the actions on a replicated stream, announced once each
            await request_ok(app, "$JS.API.CONSUMER.DURABLE.CREATE.L.D",
                             {"stream_name": "L", "config": {"durable_name": "D", "ack_policy": "explicit"}})
            await request_ok(app, "$JS.API.CONSUMER.DELETE.L.D")
            await request_ok(app, "$JS.API.STREAM.DELETE.L")
            await apoll(lambda: any(s == f"{ADV}STREAM.DELETED.L" for s, _ in in_app.got), "stream deleted", 20)
            await app.flush()
            assert [(s, b["action"]) for s, b in in_app.got if b["type"].endswith("_action")] == [
                (f"{ADV}STREAM.CREATED.L", "create"),
                (f"{ADV}CONSUMER.CREATED.L.D", "create"),
                (f"{ADV}CONSUMER.DELETED.L.D", "delete"),
                (f"{ADV}STREAM.DELETED.L", "delete"),
            ]
        finally:
            await app.close()
            await sys_.close()

    run(scenario, timeout=90)


QUORUM_LOST = {**COMMON, "stream": "string", "replicas": "array"}


def test_cluster_stream_quorum_lost(three):
    async def scenario():
        app = await connect(three.servers["n1"].url, user=APP_USER, password=APP_PASSWORD)
        try:
            await request_ok(app, "$JS.API.STREAM.CREATE.Q", {"name": "Q", "subjects": ["q.>"], "num_replicas": 3})
            info = await request_ok(app, "$JS.API.STREAM.INFO.Q")
            leader = info["cluster"]["leader"]
        finally:
            await app.close()
        watcher = await connect(three.servers[leader].url, user=APP_USER, password=APP_PASSWORD)
        try:
            ev = Events()
            await watcher.subscribe(f"{ADV}STREAM.QUORUM_LOST.Q", cb=ev.cb)
            await watcher.flush()
            for name in three.servers:
                if name != leader:
                    three.kill(name)
            (subj, body), = await ev.wait(1, "quorum lost advisory from the former leader", 60)
            check_common(body)
            assert body["type"] == f"{TYPE}stream_quorum_lost"
            assert shape(body) == QUORUM_LOST and body["stream"] == "Q"
        finally:
            await watcher.close()

    run(scenario, timeout=120)


CONSUMER_LEADER_ELECTED = {**COMMON, "stream": "string", "consumer": "string", "leader": "string",
                           "replicas": "array"}


def test_cluster_consumer_leader_elected_in_the_account_and_the_system_account(three):
    """A durable consumer of an R3 stream whose leader steps down gets a new leader: the
    consumer leader-elected advisory, in the account and (with ``account``) in the system
    account, naming the leader among the stream's servers."""
    async def scenario():
        app = await connect(three.servers["n1"].url, user=APP_USER, password=APP_PASSWORD)
        sys_ = await connect(three.servers["n2"].url, user=SYS_USER, password=SYS_PASSWORD)
        try:
            await request_ok(app, "$JS.API.STREAM.CREATE.CL", {"name": "CL", "subjects": ["cl.>"], "num_replicas": 3})
            await request_ok(app, "$JS.API.CONSUMER.DURABLE.CREATE.CL.D",
                             {"stream_name": "CL", "config": {"durable_name": "D", "ack_policy": "explicit"}})
            in_app, in_sys = Events(), Events()
            await app.subscribe(f"{ADV}CONSUMER.LEADER_ELECTED.>", cb=in_app.cb)
            await sys_.subscribe(f"{ADV}CONSUMER.LEADER_ELECTED.>", cb=in_sys.cb)
            await app.flush()
            await sys_.flush()
            before = (await request_ok(app, "$JS.API.CONSUMER.INFO.CL.D"))["cluster"]["leader"]
            await request_ok(app, "$JS.API.CONSUMER.LEADER.STEPDOWN.CL.D")
            await apoll(lambda: bool(in_app.got) and bool(in_sys.got), "consumer leader elected advisories", 30)
            subj, elected = in_app.got[-1]
            assert subj == f"{ADV}CONSUMER.LEADER_ELECTED.CL.D"
            check_common(elected)
            assert shape(elected) == CONSUMER_LEADER_ELECTED, elected
            assert elected["type"] == f"{TYPE}consumer_leader_elected"
            assert (elected["stream"], elected["consumer"]) == ("CL", "D")
            assert elected["leader"] in three.servers and elected["leader"] != before
            assert sorted(r["name"] for r in elected["replicas"]) == sorted(three.servers)
            subj, system_copy = in_sys.got[-1]
            assert subj == f"{ADV}CONSUMER.LEADER_ELECTED.CL.D"
            assert shape(system_copy) == {**COMMON, "account": "string", **{
                k: v for k, v in CONSUMER_LEADER_ELECTED.items() if k not in COMMON}}
            assert system_copy["account"] == "APP" and system_copy["leader"] == elected["leader"]
        finally:
            await app.close()
            await sys_.close()

    run(scenario, timeout=120)


def test_cluster_api_audits_carry_the_requesters_client_info(three):
    """In a cluster, the audit of a request answered by another server than the client's
    (the meta leader for NAMES and DELETE, the stream's leader for INFO and, for a create,
    the new stream's leader) names the client as
    its own server knows it; a Nats-Request-Info header the client sends itself is not
    believed (nats-server ClientInfoHdr)."""
    async def scenario():
        info = await leaders(three)
        # the client is on a server that leads neither the meta group nor the stream
        others = [n for n in three.servers if n not in (info["meta"], info["stream"])]
        home = others[0] if others else next(n for n in three.servers if n != info["meta"])
        app = await connect(three.servers[home].url, user=APP_USER, password=APP_PASSWORD)
        try:
            ev = Events()
            await app.subscribe(f"{ADV}API", cb=ev.cb)
            await app.flush()
            await interest_everywhere(app, ev)
            forged = {"Nats-Request-Info": json.dumps({"acc": "EVIL", "lang": "forged"})}
            msg = await app.request("$JS.API.STREAM.NAMES", b"", timeout=5, headers=forged)
            assert json.loads(msg.data)["streams"] == ["AU"]
            await request_ok(app, "$JS.API.STREAM.INFO.AU")
            await request_ok(app, "$JS.API.STREAM.DELETE.AU")
            await request_ok(app, "$JS.API.STREAM.CREATE.AU2", {"name": "AU2", "subjects": ["au2.>"],
                                                                "num_replicas": 3})

            def audited(kind: str) -> list[dict]:
                return [b for _, b in ev.got if b.get("subject") == f"$JS.API.{kind}"]
            kinds = ("STREAM.NAMES", "STREAM.INFO.AU", "STREAM.DELETE.AU", "STREAM.CREATE.AU2")
            await apoll(lambda: all(audited(k) for k in kinds), "the four audits", 20)
            for kind in kinds:
                audit = audited(kind)[0]
                client = audit["client"]
                assert isinstance(client, dict), (kind, audit)
                assert client["acc"] == "APP" and client["lang"] == "python3", (kind, client)
                assert client["server"] == home, (kind, client, home)
            assert audited("STREAM.NAMES")[0]["server"] == info["meta"]
        finally:
            await app.close()

    async def interest_everywhere(app, ev: Events) -> None:
        """Every server knows of the audit subscription (it travels over the routes): a probe
        published through each server reaches it."""
        for name, server in three.servers.items():
            nc = await connect(server.url, user=APP_USER, password=APP_PASSWORD)
            try:
                async def arrived(marker=f"probe-{name}") -> bool:
                    await nc.publish(f"{ADV}API", json.dumps({"probe": marker}).encode())
                    await nc.flush()
                    await asyncio.sleep(0.05)
                    return any(b.get("probe") == marker for _, b in ev.got)
                deadline = asyncio.get_running_loop().time() + 20
                while not await arrived():
                    assert asyncio.get_running_loop().time() < deadline, f"no route interest on {name}"
            finally:
                await nc.close()

    async def leaders(cluster) -> dict:
        nc = await connect(cluster.servers["n1"].url, user=APP_USER, password=APP_PASSWORD)
        try:
            await request_ok(nc, "$JS.API.STREAM.CREATE.AU", {"name": "AU", "subjects": ["au.>"], "num_replicas": 1})
            stream = (await request_ok(nc, "$JS.API.STREAM.INFO.AU"))["cluster"]["leader"]
        finally:
            await nc.close()
        sys_ = await connect(cluster.servers["n1"].url, user=SYS_USER, password=SYS_PASSWORD)
        try:
            msg = await sys_.request("$SYS.REQ.SERVER.PING.JSZ", json.dumps({"leader_only": True}).encode(),
                                     timeout=5)
            meta = json.loads(msg.data)["data"]["meta_cluster"]["leader"]
        finally:
            await sys_.close()
        return {"meta": meta, "stream": stream}

    run(scenario, timeout=120)
