"""Consumer pause (nats-server 2.11, API level 1), side by side on jetraft and
nats-server 2.15.1: ``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` with
``{"pause_until": <RFC 3339>}`` pauses a consumer (nothing delivered, heartbeats go on), an
empty request resumes it; the answer, CONSUMER.INFO's ``paused``/``pause_remaining`` and the
``$JS.EVENT.ADVISORY.CONSUMER.PAUSE`` advisories are nats-server's (jetstream_api.go
jsConsumerPauseRequest, consumer.go updatePauseState, sendPauseAdvisoryLocked); on three
servers the pause is replicated and kept across a step-down.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

from compat_support import run
from js_support import asked_again, js_session
from nats.errors import TimeoutError as NatsTimeoutError
from polling import apoll

PAUSE = "io.nats.jetstream.api.v1.consumer_pause_response"
ADVISORY = "io.nats.jetstream.advisory.v1.consumer_pause"
ZERO = "0001-01-01T00:00:00Z"


async def collect(s, subject: str) -> list[dict]:
    """The JSON messages on ``subject`` from now on, appended as they come."""
    found: list[dict] = []

    async def take(msg) -> None:
        found.append(json.loads(msg.data))
    await s.nc.subscribe(subject, cb=take)
    return found


def rfc3339(seconds_from_now: float) -> str:
    when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds_from_now)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_paused_consumer_sends_heartbeats_but_no_messages_until_resumed(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p"]})
            got: asyncio.Queue = asyncio.Queue()
            await s.nc.subscribe("dl.p", cb=got.put)
            advisories = await collect(s, "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.P.D")
            created = await s.api("$JS.API.CONSUMER.CREATE.P.D", {"stream_name": "P", "config": {
                "durable_name": "D", "deliver_subject": "dl.p", "ack_policy": "explicit",
                "idle_heartbeat": 200_000_000}})
            assert "error" not in created, created
            until = rfc3339(30)
            paused = await s.api("$JS.API.CONSUMER.PAUSE.P.D", {"pause_until": until})
            assert set(paused) == {"type", "paused", "pause_until", "pause_remaining"}, paused
            assert paused["type"] == PAUSE and paused["paused"] is True
            assert 20e9 < paused["pause_remaining"] <= 30e9
            info = await s.api("$JS.API.CONSUMER.INFO.P.D")
            assert info["paused"] is True and 20e9 < info["pause_remaining"] <= 30e9
            assert info["config"]["pause_until"] == paused["pause_until"]
            assert info["config"]["metadata"]["_nats.req.level"] == "1"
            await s.js.publish("p", b"held")
            # heartbeats go on while paused; the message waits
            deadline = time.monotonic() + 10
            beats = 0
            while beats < 2:
                msg = await asyncio.wait_for(got.get(), max(0.1, deadline - time.monotonic()))
                assert msg.data == b"" and msg.headers and msg.headers.get("Status") == "100", msg
                beats += 1
            resumed = await s.api("$JS.API.CONSUMER.PAUSE.P.D")
            assert resumed == {"type": PAUSE, "paused": False, "pause_until": ZERO}, resumed
            while True:
                msg = await asyncio.wait_for(got.get(), max(0.1, deadline - time.monotonic()))
                if msg.data:
                    break
            assert msg.data == b"held"
            info = await s.api("$JS.API.CONSUMER.INFO.P.D")
            assert "paused" not in info and "pause_remaining" not in info
            assert "pause_until" not in info["config"]
            await apoll(lambda: len(advisories) >= 2, "two pause advisories")
            assert [(a["type"], a["stream"], a["consumer"], a["paused"]) for a in advisories] == [
                (ADVISORY, "P", "D", True), (ADVISORY, "P", "D", False)]
            assert advisories[0]["pause_until"] == paused["pause_until"] and advisories[1]["pause_until"] == ZERO
    run(scenario)


def test_a_pause_that_ends_advises_it_and_bad_requests_are_refused(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.Q", {"name": "Q", "subjects": ["q"]})
            await s.api("$JS.API.CONSUMER.CREATE.Q.E", {"stream_name": "Q", "config": {
                "durable_name": "E", "ack_policy": "explicit"}})
            advisories = await collect(s, "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.Q.E")
            short = await s.api("$JS.API.CONSUMER.PAUSE.Q.E", {"pause_until": rfc3339(1)})
            assert short["paused"] is True
            await apoll(lambda: [a["paused"] for a in advisories] == [True, False], "paused, then resumed",
                        timeout=10)
            info = await s.api("$JS.API.CONSUMER.INFO.Q.E")
            assert "paused" not in info
            # a time in the past: not paused, the time kept
            past = await s.api("$JS.API.CONSUMER.PAUSE.Q.E", {"pause_until": "2020-01-01T00:00:00Z"})
            assert past == {"type": PAUSE, "paused": False, "pause_until": "2020-01-01T00:00:00Z"}, past
            missing = await s.api("$JS.API.CONSUMER.PAUSE.Q.NOPE", {"pause_until": rfc3339(5)})
            assert missing["error"] == {"code": 404, "err_code": 10014, "description": "consumer not found"}
            no_stream = await s.api("$JS.API.CONSUMER.PAUSE.NOPE.E", {"pause_until": rfc3339(5)})
            assert no_stream["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}
            bad = await s.api("$JS.API.CONSUMER.PAUSE.Q.E", {"pause_until": 5})
            assert bad["error"]["err_code"] == 10025, bad
    run(scenario)


def test_a_pause_is_kept_by_every_replica_across_a_step_down(formed_cluster, server_kind):
    with formed_cluster(server_kind, "pause", 3, jetstream=True) as c:
        async def scenario():
            async with js_session(c.servers[list(c.servers)[1]].url) as s:
                created = await asked_again(lambda: s.api("$JS.API.STREAM.CREATE.R", {
                    "name": "R", "subjects": ["r"], "num_replicas": 3}), "R created")
                assert "error" not in created, created
                await asked_again(lambda: s.api("$JS.API.CONSUMER.CREATE.R.C", {"stream_name": "R", "config": {
                    "durable_name": "C", "ack_policy": "explicit"}}), "C created")
                paused = await asked_again(lambda: s.api("$JS.API.CONSUMER.PAUSE.R.C",
                                                         {"pause_until": rfc3339(60)}), "paused")
                assert paused["paused"] is True, paused
                step = await asked_again(lambda: s.api("$JS.API.STREAM.LEADER.STEPDOWN.R"), "step-down")
                assert step.get("success") is True, step

                async def still_paused():
                    info = await s.api("$JS.API.CONSUMER.INFO.R.C")
                    return info if info.get("paused") else None
                info = await apoll(still_paused, "C paused under the new leader", timeout=30,
                                   retry_on=(NatsTimeoutError,))
                assert info["config"]["pause_until"] == paused["pause_until"]
        run(scenario, timeout=120)
