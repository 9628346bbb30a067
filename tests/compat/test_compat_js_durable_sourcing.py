"""Durable sourcing (nats-server 2.14+, ADR-60), side by side on jetraft and nats-server
2.15.1 with raw ``$JS.API`` requests: the ``flow_control`` ack policy of a consumer, the
consumers a mirror or a source makes on a workqueue or interest origin, a mirror or source
fed by a durable consumer named in its ``consumer`` block, and ``$JS.API.CONSUMER.RESET``.

The behaviour is nats-server's: server/consumer.go ``setConsumerConfigDefaults`` (a
non-pedantic request with ack policy ``flow_control`` gets ``flow_control`` true and a 1 s
``idle_heartbeat``) and ``checkConsumerCfg`` (errors 10218-10222, and "heartbeat needs to
be 1s"), ``processResetReq`` / ``resetStartingSeqLocked``; server/stream.go
``setupMirrorConsumer`` / ``trySetupSourceConsumer`` (consumers ``JS_MIRROR_<hash>`` and
``JS_SRC_<hash>`` with ack policy ``flow_control``, acked up to what the mirror or source
stored, so that a workqueue or interest origin lets the messages go) and the ``consumer``
block checks of ``checkStreamCfg`` (errors 10213-10217). Every literal below was observed
on nats-server 2.15.1. One difference, asserted: nats-server's link consumers carry
``sourcing: true`` in their config; jetraft's do not (it refuses the setting from clients).
"""

from __future__ import annotations

import base64
import json

from compat_support import run
from js_support import NS, across_step_down_and_sigkill, asked_again, js_session
from nats.errors import TimeoutError as NatsTimeoutError
from polling import apoll

from jetraft.protocol import headers as hdr

#: A valid flow-control consumer, less its name and deliver subject.
FC = {"ack_policy": "flow_control", "flow_control": True, "idle_heartbeat": NS, "max_ack_pending": 100}
RESET_RESPONSE = "io.nats.jetstream.api.v1.consumer_reset_response"
#: Keys whose values differ from run to run or between the two servers.
VOLATILE = {"ts", "created", "last_active", "_nats.ver", "_nats.level"}


def error(code: int, err_code: int, description: str) -> dict:
    return {"code": code, "err_code": err_code, "description": description}


def stable(value):
    """``value`` without timestamps and the server's own version / level metadata."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    return value


def fc_config(name: str, deliver: str, **changes) -> dict:
    """A flow-control durable ``name`` pushing to ``deliver``; a change to None drops the key."""
    config = {"durable_name": name, "deliver_subject": deliver, **FC, **changes}
    return {k: v for k, v in config.items() if v is not None}


def echoed(name: str, deliver: str = "dl.c", max_ack_pending: int = 100) -> dict:
    """The config nats-server answers for a flow-control durable (stable keys only)."""
    return {"durable_name": name, "name": name, "deliver_policy": "all", "ack_policy": "flow_control",
            "max_deliver": -1, "replay_policy": "instant", "max_ack_pending": max_ack_pending,
            "flow_control": True, "deliver_subject": deliver, "idle_heartbeat": NS, "num_replicas": 0,
            "metadata": {"_nats.req.level": "4"}}


async def create_consumer(s, stream: str, config: dict, **request) -> dict:
    name = config.get("durable_name") or config.get("name")
    return await s.api(f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
                       {"stream_name": stream, "config": config, **request})


async def stored(s, stream: str) -> list[tuple[int, str, bytes, dict[str, str]]]:
    """Every message of ``stream`` as (seq, subject, payload, headers), by STREAM.MSG.GET."""
    state = (await s.api(f"$JS.API.STREAM.INFO.{stream}"))["state"]
    out = []
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        msg = (await s.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq}))["message"]
        raw = base64.b64decode(msg["hdrs"]) if msg.get("hdrs") else b""
        headers = {k: v[0] for k, v in hdr.parse(raw).fields.items()} if raw else {}
        out.append((msg["seq"], msg["subject"], base64.b64decode(msg.get("data", "")), headers))
    return out


async def drained(s, origin: str, target: str, messages: int, kept: int = 0) -> tuple[dict, list[dict]]:
    """Once ``target`` holds ``messages``, ``origin`` holds ``kept`` and every sourcing
    consumer on ``origin`` has its ack floor at ``origin``'s last sequence: (``origin``'s
    state, its consumers from CONSUMER.LIST)."""
    async def check():
        got = (await s.api(f"$JS.API.STREAM.INFO.{target}"))["state"]["messages"]
        state = (await s.api(f"$JS.API.STREAM.INFO.{origin}"))["state"]
        consumers = (await s.api(f"$JS.API.CONSUMER.LIST.{origin}"))["consumers"]
        floors = [c["ack_floor"]["stream_seq"] for c in consumers if c["config"]["ack_policy"] == "flow_control"]
        ok = got == messages and state["messages"] == kept and floors and set(floors) == {state["last_seq"]}
        return (state, consumers) if ok else None
    return await apoll(check, f"{target} holds {messages}, {origin} {kept}, its sourcing acked", timeout=20)


def test_flow_control_ack_policy_checks_and_defaults_are_nats_servers(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l"]})
            created = await create_consumer(s, "L", fc_config("C", "dl.c"))
            assert created["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
            assert stable(created["config"]) == echoed("C")
            assert "ack_wait" not in created["config"]
            refused = [
                (fc_config("C1", None), error(400, 10218, "flow control ack policy requires a push based consumer")),
                (fc_config("C2", "dl.c", max_ack_pending=-1),
                 error(400, 10220, "flow control ack policy requires max ack pending")),
                (fc_config("C3", "dl.c", ack_wait=5 * NS),
                 error(400, 10221, "flow control ack policy requires unset ack wait")),
                (fc_config("C4", "dl.c", backoff=[NS, 2 * NS]),
                 error(400, 10221, "flow control ack policy requires unset ack wait")),
                (fc_config("C5", "dl.c", max_deliver=3),
                 error(400, 10222, "flow control ack policy requires unset max deliver")),
                (fc_config("C6", "dl.c", max_deliver=1),
                 error(400, 10222, "flow control ack policy requires unset max deliver")),
            ]
            for config, expected in refused:
                got = await create_consumer(s, "L", config)
                assert got.get("error") == expected, (config, got)
            # not pedantic: flow_control and the heartbeat are set for the client, an unset
            # max_ack_pending takes the default (1000)
            filled = [
                (fc_config("D1", "dl.c", flow_control=False), 100),
                (fc_config("D2", "dl.c", idle_heartbeat=2 * NS), 100),
                (fc_config("D3", "dl.c", flow_control=None, idle_heartbeat=None), 100),
                (fc_config("D4", "dl.c", max_ack_pending=0), 1000),
                (fc_config("D5", "dl.c", max_ack_pending=None), 1000),
            ]
            for config, max_ack_pending in filled:
                got = await create_consumer(s, "L", config)
                assert "error" not in got, (config, got)
                assert stable(got["config"]) == echoed(config["durable_name"], max_ack_pending=max_ack_pending)
            # pedantic: nothing is filled in
            heartbeat = error(500, 10052, "flow control ack policy heartbeat needs to be 1s")
            pedantic = [
                (fc_config("P1", "dl.c", flow_control=False),
                 error(400, 10219, "flow control ack policy requires flow control")),
                (fc_config("P2", "dl.c", flow_control=None, idle_heartbeat=None),
                 error(400, 10219, "flow control ack policy requires flow control")),
                (fc_config("P3", "dl.c", idle_heartbeat=2 * NS), heartbeat),
                (fc_config("P4", "dl.c", idle_heartbeat=None), heartbeat),
                (fc_config("P5", None), error(400, 10218, "flow control ack policy requires a push based consumer")),
            ]
            for config, expected in pedantic:
                got = await create_consumer(s, "L", config, pedantic=True)
                assert got.get("error") == expected, (config, got)
            got = await create_consumer(s, "L", fc_config("P6", "dl.c"), pedantic=True)
            assert stable(got["config"]) == echoed("P6")
            # an ack policy is not changed by an update
            await create_consumer(s, "L", {"durable_name": "E", "ack_policy": "explicit", "deliver_subject": "dl.e"})
            changed = await create_consumer(s, "L", fc_config("E", "dl.e"), action="update")
            assert changed.get("error") == error(500, 10012, "ack policy can not be updated"), changed
    run(scenario)


def test_a_mirror_or_source_empties_a_workqueue_origin(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            for name in ("W", "V"):
                await s.api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()],
                                                               "retention": "workqueue"})
                for i in range(3):
                    await s.js.publish(name.lower(), f"m{i}".encode())
            created = await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "W"}})
            assert "error" not in created, created
            created = await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [{"name": "V"}]})
            assert "error" not in created, created
            for i in range(3, 5):
                await s.js.publish("w", f"m{i}".encode())
                await s.js.publish("v", f"m{i}".encode())
            payloads = [f"m{i}".encode() for i in range(5)]
            for origin, target, prefix, deliver, link in (("W", "M", "JS_MIRROR_", "$JS.M.", "mirror"),
                                                          ("V", "S", "JS_SRC_", "$JS.S.", "src")):
                state, consumers = await drained(s, origin, target, 5)
                assert (state["messages"], state["first_seq"], state["last_seq"]) == (0, 6, 5)
                assert len(consumers) == 1 and consumers[0]["name"].startswith(prefix), consumers
                config = consumers[0]["config"]
                assert config["deliver_subject"].startswith(deliver), config
                name = consumers[0]["name"]
                assert stable({k: v for k, v in config.items() if k != "deliver_subject"}) == {
                    "durable_name": name, "name": name, "deliver_policy": "all", "ack_policy": "flow_control",
                    "max_deliver": -1, "replay_policy": "instant", "max_ack_pending": 1000, "flow_control": True,
                    "idle_heartbeat": NS, "num_replicas": 0,
                    "metadata": {f"_nats.{link}.stream": target, f"_nats.{link}.acc": "$G",
                                 "_nats.req.level": "4"},
                    # nats-server marks the consumers it makes for links (a setting jetraft
                    # refuses from clients, 10012); jetraft's link consumers are plain ones
                    **({"sourcing": True} if js_server.kind == "nats-server" else {})}
                assert consumers[0]["ack_floor"]["stream_seq"] == 5 and consumers[0]["num_pending"] == 0
            mirrored = await stored(s, "M")
            assert [(q, subject, data) for q, subject, data, _ in mirrored] == [
                (i + 1, "w", p) for i, p in enumerate(payloads)]
            sourced = await stored(s, "S")
            assert [(q, subject, data) for q, subject, data, _ in sourced] == [
                (i + 1, "v", p) for i, p in enumerate(payloads)]
            assert [h["Nats-Stream-Source"].rsplit(" ", 1)[0] for *_, h in sourced] == [
                f"V {i + 1} > > v" for i in range(5)]
            await gone_with_their_links(s, {"M": "W", "S": "V"})
    run(scenario)


async def gone_with_their_links(s, links: dict[str, str]) -> None:
    """Each sourcing stream in ``links`` (name -> origin) deleted: its origin's link consumer
    goes with it (nats-server tryDeleteMirrorConsumer, tryDeleteSourceConsumer)."""
    for name in links:
        deleted = await asked_again(lambda name=name: s.api(f"$JS.API.STREAM.DELETE.{name}"), f"{name} deleted")
        assert deleted.get("success") is True, deleted

    async def none_left():
        for origin in links.values():
            listed = await asked_again(lambda origin=origin: s.api(f"$JS.API.CONSUMER.NAMES.{origin}"),
                                       f"{origin}'s consumers")
            if listed.get("consumers"):
                return False
        return True
    await apoll(none_left, "the link consumers deleted with their streams", timeout=30)


def test_a_source_removed_by_an_update_takes_its_link_consumer_with_it(js_server):
    """An update that removes one of a stream's workqueue sources deletes that source's
    link consumer from its origin (nats-server tryDeleteSourceConsumer), so the origin
    keeps the messages published after it; the other source's link is untouched."""
    async def scenario():
        async with js_session(js_server.url) as s:
            for name in ("A", "B"):
                await s.api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()],
                                                               "retention": "workqueue"})
            both = {"name": "S", "sources": [{"name": "A"}, {"name": "B"}]}
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.S", both)
            await s.js.publish("a", b"a1")
            await s.js.publish("b", b"b1")
            await drained(s, "A", "S", 2)
            updated = await s.api("$JS.API.STREAM.UPDATE.S", {"name": "S", "sources": [{"name": "B"}]})
            assert "error" not in updated, updated

            async def link_gone():
                listed = await s.api("$JS.API.CONSUMER.NAMES.A")
                return not listed.get("consumers")
            await apoll(link_gone, "A's link consumer deleted by the update", timeout=30)
            names = (await s.api("$JS.API.CONSUMER.NAMES.B"))["consumers"]
            assert len(names) == 1 and names[0].startswith("JS_SRC_"), names
            await s.js.publish("a", b"a2")
            await s.js.publish("b", b"b2")
            state, _ = await drained(s, "B", "S", 3)
            assert state["messages"] == 0
            assert (await s.api("$JS.API.STREAM.INFO.A"))["state"]["messages"] == 1    # a2 stays
    run(scenario)


def test_a_mirror_of_an_interest_origin_leaves_the_messages_to_its_other_consumers(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "retention": "interest"})
            x = await create_consumer(s, "W", {"durable_name": "X", "ack_policy": "explicit"})
            assert "error" not in x, x
            for i in range(3):
                await s.js.publish("w", f"m{i}".encode())
            created = await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "W"}})
            assert "error" not in created, created
            for i in range(3, 5):
                await s.js.publish("w", f"m{i}".encode())
            state, consumers = await drained(s, "W", "M", 5, kept=5)
            assert (state["first_seq"], state["last_seq"]) == (1, 5)
            names = sorted(c["name"] for c in consumers)
            assert names[1] == "X" and names[0].startswith("JS_MIRROR_"), names
            assert [(q, d) for q, _, d, _ in await stored(s, "M")] == [(i + 1, f"m{i}".encode()) for i in range(5)]
            # X takes and acks the five: nothing keeps them now
            inbox = s.nc.new_inbox()
            sub = await s.nc.subscribe(inbox)
            await s.nc.publish("$JS.API.CONSUMER.MSG.NEXT.W.X", json.dumps({"batch": 5}).encode(), reply=inbox)
            taken = []
            for _ in range(5):
                msg = await sub.next_msg(timeout=5)
                taken.append(msg.data)
                await msg.ack_sync()
            assert taken == [f"m{i}".encode() for i in range(5)]

            async def emptied():
                got = (await s.api("$JS.API.STREAM.INFO.W"))["state"]
                return got if got["messages"] == 0 else None
            got = await apoll(emptied, "W empty once X acked", timeout=20)
            assert (got["first_seq"], got["last_seq"]) == (6, 5)
    run(scenario)


def test_a_mirror_and_a_source_fed_by_a_named_durable_consumer(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"], "retention": "workqueue"})
            mc = await create_consumer(s, "W", fc_config("MC", "dl.m"))
            assert "error" not in mc, mc
            for i in range(3):
                await s.js.publish("w", f"m{i}".encode())
            mirror = {"name": "W", "consumer": {"name": "MC", "deliver_subject": "dl.m"}}
            created = await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": mirror})
            assert "error" not in created and created["config"]["mirror"] == mirror, created
            for i in range(3, 5):
                await s.js.publish("w", f"m{i}".encode())
            state, consumers = await drained(s, "W", "M", 5)
            assert [c["name"] for c in consumers] == ["MC"]     # no JS_MIRROR_ consumer of its own
            assert consumers[0]["ack_floor"]["stream_seq"] == state["last_seq"] == 5
            assert stable(consumers[0]["config"]) == echoed("MC", "dl.m")
            assert [(q, d) for q, _, d, _ in await stored(s, "M")] == [(i + 1, f"m{i}".encode()) for i in range(5)]
    run(scenario)


def test_consumer_block_refusals_are_nats_servers(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o"]})
            mirror_invalid = error(400, 10213, "stream mirror consumer config is invalid")
            source_invalid = error(400, 10215, "stream source consumer config is invalid")
            good = {"name": "MC", "deliver_subject": "dl.x"}
            cases = [
                ({"mirror": {"name": "O", "consumer": {"name": "a.b", "deliver_subject": "dl.x"}}}, mirror_invalid),
                ({"mirror": {"name": "O", "consumer": {"name": "MC", "deliver_subject": "dl.*"}}}, mirror_invalid),
                ({"mirror": {"name": "O", "consumer": {"name": "MC"}}}, mirror_invalid),
                ({"mirror": {"name": "O", "consumer": {"deliver_subject": "dl.x"}}}, mirror_invalid),
                ({"mirror": {"name": "O", "opt_start_seq": 2, "consumer": good}}, mirror_invalid),
                ({"mirror": {"name": "O", "filter_subject": "o", "consumer": good}}, mirror_invalid),
                ({"sources": [{"name": "O", "consumer": {"name": "a.b", "deliver_subject": "dl.x"}}]}, source_invalid),
                ({"sources": [{"name": "O", "consumer": {"name": "MC", "deliver_subject": "dl.>"}}]}, source_invalid),
                ({"sources": [{"name": "O", "opt_start_seq": 2, "consumer": good}]}, source_invalid),
                ({"sources": [{"name": "O", "filter_subject": "o", "consumer": good}]}, source_invalid),
                # the same stream and consumer twice: only a transform tells the two apart
                # (identical sources are refused as duplicates first, 10140)
                ({"sources": [{"name": "O", "consumer": good},
                              {"name": "O", "subject_transforms": [{"src": "o", "dest": "p"}],
                               "consumer": {"name": "MC", "deliver_subject": "dl.y"}}]},
                 error(400, 10216, "duplicate stream source consumer detected")),
                ({"sources": [{"name": "O", "consumer": good}, {"name": "O", "consumer": good}]},
                 error(400, 10140, "duplicate source configuration detected")),
            ]
            for config, expected in cases:
                got = await s.api("$JS.API.STREAM.CREATE.X", {"name": "X", **config})
                assert got.get("error") == expected, (config, got)
            # a mirror with transforms may name a consumer
            transformed = {"name": "O", "subject_transforms": [{"src": "o", "dest": "p"}], "consumer": good}
            got = await s.api("$JS.API.STREAM.CREATE.X", {"name": "X", "mirror": transformed})
            assert "error" not in got and got["config"]["mirror"] == transformed, got
            # a named consumer that does not ack by flow control: the link shows why it stands still
            await s.js.publish("o", b"x")
            ex = await create_consumer(s, "O", {"durable_name": "EX", "ack_policy": "explicit",
                                                "deliver_subject": "dl.e"})
            assert "error" not in ex, ex
            named = {"name": "O", "consumer": {"name": "EX", "deliver_subject": "dl.e"}}
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.ME", {"name": "ME", "mirror": named})
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.SE", {"name": "SE", "sources": [named]})

            async def link_error(stream: str, block: str):
                info = await s.api(f"$JS.API.STREAM.INFO.{stream}")
                link = info[block] if block == "mirror" else info[block][0]
                return (link, info["state"]["messages"]) if "error" in link else None
            link, held = await apoll(lambda: link_error("ME", "mirror"), "ME's mirror error", timeout=20)
            assert link == {"name": "O", "lag": 0, "active": -1,
                            "error": error(400, 10214, "stream mirror consumer requires flow control ack policy")}
            assert held == 0
            link, held = await apoll(lambda: link_error("SE", "sources"), "SE's source error", timeout=20)
            assert link == {"name": "O", "lag": 0, "active": -1,
                            "error": error(400, 10217, "stream source consumer requires flow control ack policy")}
            assert held == 0
    run(scenario)


def test_consumer_reset_moves_the_start_as_nats_server_does(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l"]})
            for i in range(5):
                await s.js.publish("l", f"m{i}".encode())
            assert "error" not in await create_consumer(s, "L", fc_config("MC", "dl.m"))

            def reset(seq: int, pending: int, config: dict, name: str = "MC") -> dict:
                return {"type": RESET_RESPONSE, "stream_name": "L", "name": name, "config": config,
                        "delivered": {"consumer_seq": 0, "stream_seq": seq - 1},
                        "ack_floor": {"consumer_seq": 0, "stream_seq": seq - 1},
                        "num_ack_pending": 0, "num_redelivered": 0, "num_waiting": 0,
                        "num_pending": pending, "reset_seq": seq}

            config = echoed("MC", "dl.m")
            # an empty request resets to the ack floor + 1; a sequence to that sequence
            assert stable(await s.api("$JS.API.CONSUMER.RESET.L.MC")) == reset(1, 5, config)
            assert stable(await s.api("$JS.API.CONSUMER.RESET.L.MC", {"seq": 3})) == reset(3, 3, config)
            assert stable(await s.api("$JS.API.CONSUMER.RESET.L.MC")) == reset(3, 3, config)
            assert stable(await s.api("$JS.API.CONSUMER.RESET.L.MC", {"seq": 0})) == reset(3, 3, config)
            assert stable(await s.api("$JS.API.CONSUMER.RESET.L.MC", {"seq": 99})) == reset(99, 0, config)
            info = await s.api("$JS.API.CONSUMER.INFO.L.MC")
            assert (info["delivered"]["stream_seq"], info["ack_floor"]["stream_seq"], info["num_pending"]) == (98, 98, 0)
            bad = await s.api("$JS.API.CONSUMER.RESET.L.MC", raw=b"{nope")
            assert bad == {"type": RESET_RESPONSE, "reset_seq": 0, "error": error(
                400, 10025, "invalid JSON: invalid character 'n' looking for beginning of object key string")}
            # not below a consumer's start sequence; not at all for deliver_policy new
            started = await create_consumer(s, "L", {"durable_name": "P", "ack_policy": "explicit",
                                                     "deliver_policy": "by_start_sequence", "opt_start_seq": 3})
            assert "error" not in started, started
            below = await s.api("$JS.API.CONSUMER.RESET.L.P", {"seq": 2})
            assert below == {"type": RESET_RESPONSE, "reset_seq": 0,
                             "error": error(400, 10204, "invalid reset: below start seq")}
            p_config = stable(started["config"])
            assert stable(await s.api("$JS.API.CONSUMER.RESET.L.P", {"seq": 4})) == reset(4, 2, p_config, "P")
            await create_consumer(s, "L", {"durable_name": "N", "ack_policy": "explicit", "deliver_policy": "new"})
            new = await s.api("$JS.API.CONSUMER.RESET.L.N", {"seq": 2})
            assert new == {"type": RESET_RESPONSE, "reset_seq": 0,
                           "error": error(400, 10204, "invalid reset: not allowed")}
            # a consumer or stream that is not there: nothing answers (the consumer itself
            # listens on its RESET subject), and the request times out
            for subject in ("$JS.API.CONSUMER.RESET.L.NOPE", "$JS.API.CONSUMER.RESET.NOPE.NOPE"):
                try:
                    answer = await s.nc.request(subject, b'{"seq": 2}', timeout=1)
                except NatsTimeoutError:
                    continue
                raise AssertionError(f"{subject} answered {answer.data!r}")
    run(scenario)


def test_replicated_workqueue_links_keep_every_message_once_across_step_down_and_sigkill(formed_cluster,
                                                                                       server_kind):
    """Three servers: R3 workqueue origins W (mirrored by R3 M) and V (sourced by R3 S).
    Publishes go on through step-downs of the origins' and the links' leaders and a SIGKILL
    of W's leader: M holds W's messages at their sequences, S each of V's exactly once, and
    both origins empty (a message leaves its origin only once the link stored it); the
    killed server, started again, holds the same."""
    tags = [["n:0"], ["n:1"], ["n:2"]]
    with formed_cluster(server_kind, "durable", 3, jetstream=True, tags=tags) as c:
        acked: dict[str, list[int]] = {"w.x": [], "v.x": []}

        async def publish(s, k: int, _phase: str) -> None:
            for subject in acked:
                await asked_again(lambda subject=subject: s.js.publish(subject, str(k).encode(),
                                                                        headers={"Nats-Msg-Id": f"{subject}{k}"}),
                                  f"{subject} {k} acknowledged")
                acked[subject].append(k)

        async def check(s, phase: str) -> None:
            n = len(acked["w.x"])

            async def emptied():
                got = {}
                for name in ("W", "V", "M", "S"):
                    info = await asked_again(lambda name=name: s.api(f"$JS.API.STREAM.INFO.{name}"), f"{name} info")
                    got[name] = info.get("state", {})
                return got if all(got[o].get("messages") == 0 and got[o].get("last_seq") == n for o in "WV") \
                    and got["M"].get("messages") == n and got["S"].get("messages") == n else None
            await apoll(emptied, f"M and S hold {n} each, W and V none", timeout=90)
            mirrored = await asked_again(lambda: stored(s, "M"), "M's messages")
            assert [(q, d) for q, _, d, _ in mirrored] == [(k + 1, str(k).encode()) for k in acked["w.x"]]
            sourced = await asked_again(lambda: stored(s, "S"), "S's messages")
            assert sorted(int(d) for _, _, d, _ in sourced) == sorted(acked["v.x"])
            if phase == "rejoined":
                await gone_with_their_links(s, {"M": "W", "S": "V"})

        across_step_down_and_sigkill(
            c, [{"name": "W", "subjects": ["w.>"], "retention": "workqueue", "num_replicas": 3},
                {"name": "V", "subjects": ["v.>"], "retention": "workqueue", "num_replicas": 3},
                {"name": "M", "mirror": {"name": "W"}, "num_replicas": 3},
                {"name": "S", "sources": [{"name": "V"}], "num_replicas": 3}],
            ("W", "M", "V", "S"), "W", publish, check)


def test_a_source_removed_by_an_update_in_a_cluster_takes_its_link_consumer_with_it(formed_cluster,
                                                                                    server_kind):
    """Three servers, R3 workqueue origin A sourced by R3 S: the update that removes the
    source deletes A's link consumer (the meta leader asks A's leader, once)."""
    with formed_cluster(server_kind, "unsource", 3, jetstream=True) as c:
        async def scenario():
            async with js_session(c.servers[next(iter(c.servers))].url) as s:
                for body in ({"name": "A", "subjects": ["a"], "retention": "workqueue", "num_replicas": 3},
                             {"name": "S", "sources": [{"name": "A"}], "num_replicas": 3}):
                    made = await asked_again(lambda body=body: s.api(f"$JS.API.STREAM.CREATE.{body['name']}", body),
                                             f"{body['name']} created")
                    assert "error" not in made, made
                await asked_again(lambda: s.js.publish("a", b"a1"), "a1")

                async def linked():
                    listed = await asked_again(lambda: s.api("$JS.API.CONSUMER.NAMES.A"), "A's consumers")
                    return bool(listed.get("consumers"))
                await apoll(linked, "A's link consumer made", timeout=30)
                updated = await asked_again(lambda: s.api("$JS.API.STREAM.UPDATE.S", {
                    "name": "S", "subjects": ["s"], "num_replicas": 3}), "S updated")
                assert "error" not in updated, updated

                async def gone():
                    listed = await asked_again(lambda: s.api("$JS.API.CONSUMER.NAMES.A"), "A's consumers")
                    return not listed.get("consumers")
                await apoll(gone, "A's link consumer deleted by the update", timeout=30)
        run(scenario, timeout=180)
