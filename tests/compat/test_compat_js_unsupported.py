"""Stream and consumer settings jetraft does not act on: refused, never stored and ignored.

Each setting below is one nats-server 2.15.1 acts on (mirrors and sources of another account,
counters, ...) and jetraft does not. nats-server accepts it
(asserted: the test documents the difference); jetraft answers nats-server's error for an
invalid configuration -- 10052 (500) for a stream, 10012 (500) for a consumer -- described
``"<setting> is not supported by jetraft"``, and nothing is created or changed (STREAM.INFO
answers 10059, CONSUMER.INFO 10014, an update leaves the config as it was).

Also side by side and identical on both: a ``Nats-TTL`` header on a stream without
``allow_msg_ttl`` (10166 for a valid TTL, 10165 for an invalid one), ``max_consumers``
(10026), ``no_ack`` (no acknowledgement), and the defaults nats-py sends for key-value and
object-store buckets (accepted). The same refusals hold on the clustered path (a
three-server cluster of each kind).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import servers
from compat_support import connect, run
from js_support import NS, js_session
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from polling import apoll

STREAM_NOT_FOUND = {"code": 404, "err_code": 10059, "description": "stream not found"}
CONSUMER_NOT_FOUND = {"code": 404, "err_code": 10014, "description": "consumer not found"}


#: How jetraft names ``allow_batched`` (fast batch publish, nats-server 2.14) in its refusal.
BATCHED = "allow_batched (fast batch publish, nats-server 2.14)"


def stream_refusal(setting: str) -> dict:
    return {"code": 500, "err_code": 10052, "description": f"{setting} is not supported by jetraft"}


def consumer_refusal(setting: str) -> dict:
    return {"code": 500, "err_code": 10012, "description": f"{setting} is not supported by jetraft"}


#: (setting named in jetraft's refusal, STREAM.CREATE body); every body is valid for nats-server.
STREAM_CASES = [
    ("mirror external", {"name": "MIR", "mirror": {"name": "ORIGIN", "external": {"api": "$JS.hub.API",
                                                                                  "deliver": ""}}}),
    ("source external", {"name": "SRC", "subjects": ["src.>"],
                         "sources": [{"name": "ORIGIN", "external": {"api": "$JS.hub.API", "deliver": ""}}]}),
    ("persist_mode async (nats-server 2.12)", {"name": "PM", "subjects": ["pm"], "persist_mode": "async"}),
    (BATCHED, {"name": "BT", "subjects": ["bt"], "allow_batched": True}),
]

#: (setting, what an update of stream U {"subjects": ["u"]} adds).
UPDATE_CASES = [
    ("source external", {"sources": [{"name": "ORIGIN", "external": {"api": "$JS.hub.API", "deliver": ""}}]}),
    (BATCHED, {"allow_batched": True}),
]

#: (setting, consumer config on stream C {"subjects": ["c.>"]}); valid for nats-server.
CONSUMER_CASES = [
    ("direct", {"name": "DI", "deliver_subject": "dl.di", "direct": True}),
    ("sourcing", {"name": "SO", "deliver_subject": "dl.so", "sourcing": True}),
]


async def _api(nc, subject: str, body=None) -> dict:
    raw = b"" if body is None else json.dumps(body).encode()
    msg = await nc.request(subject, raw, timeout=5)
    return json.loads(msg.data)


def test_stream_settings_jetraft_does_not_act_on_are_refused_and_nothing_is_created(js_server, server_kind):
    async def scenario():
        async with js_session(js_server.url) as s:
            origin = await _api(s.nc, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["origin.>"]})
            assert "error" not in origin, origin
            for setting, body in STREAM_CASES:
                name = body["name"]
                reply = await _api(s.nc, f"$JS.API.STREAM.CREATE.{name}", body)
                info = await _api(s.nc, f"$JS.API.STREAM.INFO.{name}")
                if server_kind == "jetraft":
                    assert reply.get("error") == stream_refusal(setting), (name, reply)
                    assert info.get("error") == STREAM_NOT_FOUND, (name, info)
                else:       # nats-server acts on the setting: created
                    assert "error" not in reply, (name, reply)
                    assert info["config"]["name"] == name
            names = await _api(s.nc, "$JS.API.STREAM.NAMES")
            expected = ["ORIGIN"] if server_kind == "jetraft" else sorted(["ORIGIN"] + [b["name"] for _, b in STREAM_CASES])
            assert sorted(names["streams"]) == expected

    run(scenario)


def test_a_stream_update_to_a_setting_jetraft_does_not_act_on_is_refused_and_changes_nothing(js_server, server_kind):
    async def scenario():
        async with js_session(js_server.url) as s:
            await _api(s.nc, "$JS.API.STREAM.CREATE.ORIGIN", {"name": "ORIGIN", "subjects": ["origin.>"]})
            base = {"name": "U", "subjects": ["u"]}
            for setting, change in UPDATE_CASES:     # each on a new stream U
                await _api(s.nc, "$JS.API.STREAM.DELETE.U")
                created = await _api(s.nc, "$JS.API.STREAM.CREATE.U", base)
                assert "error" not in created, created
                before = (await _api(s.nc, "$JS.API.STREAM.INFO.U"))["config"]
                reply = await _api(s.nc, "$JS.API.STREAM.UPDATE.U", {**base, **change})
                after = (await _api(s.nc, "$JS.API.STREAM.INFO.U"))["config"]
                if server_kind == "jetraft":
                    assert reply.get("error") == stream_refusal(setting), (setting, reply)
                    assert after == before, setting
                else:
                    assert "error" not in reply, (setting, reply)

    run(scenario)


def test_consumer_settings_jetraft_does_not_act_on_are_refused_and_nothing_is_created(js_server, server_kind):
    async def scenario():
        async with js_session(js_server.url) as s:
            await _api(s.nc, "$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"]})
            for setting, config in CONSUMER_CASES:
                name = config.get("durable_name") or config["name"]
                reply = await _api(s.nc, f"$JS.API.CONSUMER.CREATE.C.{name}", {"stream_name": "C", "config": config})
                info = await _api(s.nc, f"$JS.API.CONSUMER.INFO.C.{name}")
                if server_kind == "jetraft":
                    assert reply.get("error") == consumer_refusal(setting), (name, reply)
                    assert info.get("error") == CONSUMER_NOT_FOUND, (name, info)
                else:
                    assert "error" not in reply, (name, reply)
                    assert info["name"] == name
            # An update of a consumer to such a setting is refused too and changes nothing.
            plain = {"durable_name": "UPD", "ack_policy": "explicit"}
            assert "error" not in await _api(s.nc, "$JS.API.CONSUMER.CREATE.C.UPD", {"stream_name": "C", "config": plain})
            before = (await _api(s.nc, "$JS.API.CONSUMER.INFO.C.UPD"))["config"]
            reply = await _api(s.nc, "$JS.API.CONSUMER.CREATE.C.UPD",
                               {"stream_name": "C", "config": {**plain, "sourcing": True}})
            info = await _api(s.nc, "$JS.API.CONSUMER.INFO.C.UPD")
            if server_kind == "jetraft":
                assert reply.get("error") == consumer_refusal("sourcing"), reply
            else:       # nats-server: "sourcing can not be updated"
                assert reply["error"]["err_code"] == 10012, reply
            assert info["config"] == before and "sourcing" not in info["config"]

    run(scenario)


#: Nats-TTL on a stream without allow_msg_ttl: nats-server stream.go processJetStreamMsg.
TTL_DISABLED = {"code": 400, "err_code": 10166, "description": "per-message TTL is disabled"}
TTL_INVALID = {"code": 400, "err_code": 10165, "description": "invalid per-message TTL"}


@pytest.mark.parametrize(("ttl", "expected"), [
    ("5", TTL_DISABLED), ("1s", TTL_DISABLED), ("1h", TTL_DISABLED), ("never", TTL_DISABLED),
    ("NEVER", TTL_DISABLED), ("0", TTL_INVALID), ("500ms", TTL_INVALID), ("-1s", TTL_INVALID),
    ("abc", TTL_INVALID), ("+5", TTL_INVALID), ("00", None),
])
def test_a_ttl_header_on_a_stream_without_allow_msg_ttl_is_answered_as_nats_server_does(js_server, ttl, expected):
    async def scenario():
        async with js_session(js_server.url) as s:
            await _api(s.nc, "$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t"]})
            msg = await s.nc.request("t", b"x", timeout=5, headers={"Nats-TTL": ttl})
            body = json.loads(msg.data)
            state = (await _api(s.nc, "$JS.API.STREAM.INFO.T"))["state"]
            if expected is None:
                assert body == {"stream": "T", "seq": 1}
                assert state["messages"] == 1
            else:
                assert body == {"error": expected, "stream": "T", "seq": 0}
                assert state["messages"] == 0

    run(scenario)


def test_max_consumers_is_enforced(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await _api(s.nc, "$JS.API.STREAM.CREATE.MC", {"name": "MC", "subjects": ["mc"], "max_consumers": 1})
            first = await _api(s.nc, "$JS.API.CONSUMER.CREATE.MC.a",
                               {"stream_name": "MC", "config": {"durable_name": "a", "ack_policy": "explicit"}})
            assert "error" not in first, first
            second = await _api(s.nc, "$JS.API.CONSUMER.CREATE.MC.b",
                                {"stream_name": "MC", "config": {"durable_name": "b", "ack_policy": "explicit"}})
            assert second["error"] == {"code": 400, "err_code": 10026, "description": "maximum consumers limit reached"}
            again = await _api(s.nc, "$JS.API.CONSUMER.CREATE.MC.a",     # the same consumer again is fine
                               {"stream_name": "MC", "config": {"durable_name": "a", "ack_policy": "explicit"}})
            assert "error" not in again, again
            names = await _api(s.nc, "$JS.API.CONSUMER.NAMES.MC")
            assert names["consumers"] == ["a"]

    run(scenario)


def test_no_ack_stream_sends_no_acknowledgement(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await _api(s.nc, "$JS.API.STREAM.CREATE.NA", {"name": "NA", "subjects": ["na"], "no_ack": True,
                                                          "storage": "memory"})
            await _api(s.nc, "$JS.API.STREAM.CREATE.WA", {"name": "WA", "subjects": ["wa"], "storage": "memory"})
            inbox = s.nc.new_inbox()
            sub = await s.nc.subscribe(inbox)
            await s.nc.publish("na", b"1", reply=inbox)
            await s.nc.publish("wa", b"2", reply=inbox)
            acked = json.loads((await sub.next_msg(timeout=5)).data)
            assert acked["stream"] == "WA", acked
            # Stored, not acknowledged. nats-server may store NA's message after it answered
            # WA's (each stream takes its messages on its own), so its count is polled.
            async def na_stored() -> bool:
                return (await _api(s.nc, "$JS.API.STREAM.INFO.NA"))["state"]["messages"] == 1
            await apoll(na_stored, "NA to hold its message", 5, retry_on=())
            await s.nc.flush()
            assert sub.pending_msgs == 0

    run(scenario)


def test_key_value_and_object_store_defaults_of_nats_py_are_accepted(js_server):
    """nats-py sets allow_msg_ttl on every key-value bucket: accepted (a TTL header is what
    jetraft refuses), as are its object-store defaults."""
    async def scenario():
        async with js_session(js_server.url) as s:
            kv = await s.js.create_key_value(bucket="B", history=3)
            assert await kv.put("k", b"v") == 1
            assert (await kv.get("k")).value == b"v"
            await kv.delete("k")
            await kv.purge("k")
            obj = await s.js.create_object_store(bucket="O")
            await obj.put("o", b"data")
            assert (await obj.get("o")).data == b"data"
            info = await s.jsm.stream_info("KV_B")
            assert info.config.allow_msg_ttl is True

    run(scenario)


# --------------------------------------------------------------------------- clustered path

@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    """A formed three-server JetStream cluster of one kind with an agreed meta leader."""
    with formed_cluster(request.param, "unsupported", 3, jetstream=True) as c:
        yield c


async def _ask(nc, subject: str, body=None) -> dict:
    """A JSON API request asked again (15 s at most) while no leader or interest is known yet."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return await _api(nc, subject, body)
        except (NatsTimeoutError, NoRespondersError):
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)


async def _ask_until(nc, subject: str, body, accept) -> dict:
    """Ask until the answer is accepted (a cluster still electing answers 10008 first)."""
    deadline = time.monotonic() + 20
    while True:
        reply = await _ask(nc, subject, body)
        if accept(reply) or time.monotonic() > deadline:
            return reply
        await asyncio.sleep(0.1)


def test_clustered_refusals_leave_nothing_created_or_changed(cluster):
    kind = cluster.kind

    async def scenario():
        nc = await connect(cluster.servers["n1"].url)
        other = await connect(cluster.servers["n3"].url)
        try:
            not_unavailable = lambda r: r.get("error", {}).get("err_code") != 10008  # noqa: E731
            # create: refused by jetraft before the meta group assigns anything
            body = {"name": "CR", "subjects": ["cr.>"], "num_replicas": 3, "allow_batched": True}
            reply = await _ask_until(nc, "$JS.API.STREAM.CREATE.CR", body, not_unavailable)
            info = await _ask_until(other, "$JS.API.STREAM.INFO.CR", None, not_unavailable)
            if kind == "jetraft":
                assert reply.get("error") == stream_refusal(BATCHED), reply
                assert info.get("error") == STREAM_NOT_FOUND, info
            else:
                assert "error" not in reply, reply
                assert info["config"]["allow_batched"] is True

            # update of an R3 stream: refused, its config unchanged on every server
            base = {"name": "CU", "subjects": ["cu"], "num_replicas": 3}
            created = await _ask_until(nc, "$JS.API.STREAM.CREATE.CU", base, not_unavailable)
            assert "error" not in created, created
            reply = await _ask_until(nc, "$JS.API.STREAM.UPDATE.CU", {**base, "allow_batched": True},
                                     not_unavailable)
            info = await _ask_until(other, "$JS.API.STREAM.INFO.CU", None, not_unavailable)
            if kind == "jetraft":
                assert reply.get("error") == stream_refusal(BATCHED), reply
                assert not info["config"].get("allow_batched")
            else:
                assert "error" not in reply, reply
                assert info["config"]["allow_batched"] is True

            # consumer on the R3 stream: refused by jetraft before its group takes the request
            config = {"name": "PO", "deliver_subject": "dl.po", "sourcing": True}
            reply = await _ask_until(nc, "$JS.API.CONSUMER.CREATE.CU.PO", {"stream_name": "CU", "config": config},
                                     not_unavailable)
            cinfo = await _ask_until(other, "$JS.API.CONSUMER.INFO.CU.PO", None, not_unavailable)
            if kind == "jetraft":
                assert reply.get("error") == consumer_refusal("sourcing"), reply
                assert cinfo.get("error") == CONSUMER_NOT_FOUND, cinfo
            else:
                assert "error" not in reply, reply
                assert cinfo["config"]["sourcing"] is True

        finally:
            await nc.close()
            await other.close()

    run(scenario, timeout=120)
