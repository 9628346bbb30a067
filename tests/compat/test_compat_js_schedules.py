"""Message schedules (nats-server 2.12, ADR-51, API level 2), side by side on jetraft and
nats-server 2.15.1: ``allow_msg_schedules``, ``Nats-Schedule`` with ``@at <RFC 3339>`` and
``@every <duration>``, ``Nats-Schedule-Target``, ``Nats-Schedule-TTL``,
``Nats-Schedule-Source``, a schedule purged by its client; the copy stored within a second
of its time, with nats-server's headers; nats-server's errors; a file stream's schedule
fired after a restart; on three servers every schedule fired exactly once across a leader
step-down and a SIGKILL (nats-server server/scheduler.go, stream.go processJetStreamMsg).
What jetraft refuses that nats-server 2.15 takes (cron patterns and time zones, 2.14) is
asserted as the difference it is.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import time

from compat_support import run
from js_support import across_restarts, across_step_down_and_sigkill, asked_again, js_session
from polling import apoll

SECOND = 1_000_000_000


def rfc3339(ns: int) -> str:
    when = dt.datetime.fromtimestamp(ns // SECOND, dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def at_in(seconds: float) -> tuple[str, int]:
    """An ``@at`` pattern ``seconds`` from now (whole seconds, as RFC 3339 without a
    fraction), and its time in ns."""
    ns = (time.time_ns() // SECOND + int(seconds) + 1) * SECOND
    return f"@at {rfc3339(ns)}", ns


async def publish(s, subject: str, data: bytes = b"", **headers: str) -> dict:
    msg = await s.nc.request(subject, data, timeout=5, headers=headers or None)
    return json.loads(msg.data)


def ns_of(text: str) -> int:
    """An RFC 3339 time with up to nine fraction digits, in ns since the epoch."""
    whole, _, rest = text.rstrip("Z").partition(".")
    secs = dt.datetime.fromisoformat(whole + "+00:00").timestamp()
    return int(secs) * SECOND + int((rest or "0").ljust(9, "0"))


def parse_headers(raw: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in raw.split("\r\n")[1:] if ": " in line)


async def last_on(s, stream: str, subject: str) -> dict | None:
    """The last message on ``subject`` (STREAM.MSG.GET) with ``headers`` decoded, or None."""
    got = await s.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
    if "message" not in got:
        return None
    message = got["message"]
    message["headers"] = parse_headers(base64.b64decode(message.get("hdrs", "")).decode())
    message["body"] = base64.b64decode(message.get("data", ""))
    return message


async def per_subject(s, stream: str, filt: str) -> dict[str, int]:
    info = await s.api(f"$JS.API.STREAM.INFO.{stream}", {"subjects_filter": filt})
    return info["state"].get("subjects") or {}


def test_an_at_schedule_fires_once_within_a_second_of_its_time(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            made = await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"],
                                                           "allow_msg_schedules": True, "allow_msg_ttl": True})
            assert "error" not in made, made
            assert made["config"]["allow_rollup_hdrs"] is True       # schedules turn roll-ups on
            assert made["config"]["metadata"]["_nats.req.level"] == "2"
            pattern, due = at_in(2)
            ack = await publish(s, "s.sched", b"hello", **{
                "Nats-Schedule": pattern, "Nats-Schedule-Target": "s.out", "Nats-Schedule-TTL": "5s",
                "Nats-Msg-Id": "m1", "Foo": "bar"})
            assert ack == {"stream": "S", "seq": 1}
            sched = await last_on(s, "S", "s.sched")
            assert sched["headers"]["Nats-Rollup"] == "sub"
            copy = await apoll(lambda: last_on(s, "S", "s.out"), "the copy on s.out", timeout=10)
            fired = ns_of(copy["time"])
            assert due - 50_000_000 <= fired <= due + SECOND, (fired - due) / SECOND
            assert copy["body"] == b"hello"
            assert copy["headers"] == {"Foo": "bar", "Nats-Scheduler": "s.sched", "Nats-Schedule-Next": "purge",
                                       "Nats-TTL": "5s"}
            # the schedule is purged once it fired; the copy expires by its TTL
            await apoll(lambda: _gone(s, "s.sched"), "the schedule purged", timeout=5)
            assert await per_subject(s, "S", "s.out") == {"s.out": 1}
            await apoll(lambda: _gone(s, "s.out"), "the copy gone by its 5 s TTL", timeout=12)
    run(scenario)


async def _gone(s, subject: str) -> bool:
    return await last_on(s, "S", subject) is None


def test_an_every_schedule_repeats_until_its_client_purges_it(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_msg_schedules": True})
            await s.api("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"], "allow_msg_schedules": True})
            await publish(s, "s.value", b"v1")
            ack = await publish(s, "s.every", b"own", **{
                "Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "s.tick",
                "Nats-Schedule-Source": "s.value"})
            assert "error" not in ack, ack

            async def ticks(n: int):
                counts = await per_subject(s, "S", "s.tick")
                return counts.get("s.tick", 0) >= n
            await apoll(lambda: ticks(2), "two ticks", timeout=10)
            copy = await last_on(s, "S", "s.tick")
            assert copy["body"] == b"v1"                        # the source's last message
            assert copy["headers"]["Nats-Scheduler"] == "s.every"
            nxt = ns_of(copy["headers"]["Nats-Schedule-Next"])
            assert 0 < nxt - time.time_ns() <= 2.5 * SECOND
            # a purge from the client: only with its scheduler, and only of a schedule
            bad = await publish(s, "s.purge", **{"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.value"})
            assert bad["error"]["err_code"] == 10212, bad
            done = await publish(s, "s.purge", **{"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.every"})
            assert "error" not in done, done
            assert await last_on(s, "S", "s.every") is None
            stopped = (await per_subject(s, "S", "s.tick"))["s.tick"]
            # no tick after the purge: watched for two more intervals of the schedule
            await asyncio.sleep(2.2)
            assert (await per_subject(s, "S", "s.tick"))["s.tick"] == stopped
    run(scenario)


def test_schedules_nats_server_refuses(js_server):
    def err(ack: dict) -> int:
        return ack["error"]["err_code"]

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_msg_schedules": True})
            await s.api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})
            pattern, _ = at_in(60)
            ok = {"Nats-Schedule": pattern, "Nats-Schedule-Target": "s.out"}
            assert err(await publish(s, "p.x", **{**ok, "Nats-Schedule-Target": "p.out"})) == 10188
            assert err(await publish(s, "p.x", **{"Nats-Schedule": "nonsense"})) == 10188
            for bad in ("nonsense", "@at tomorrow", "@every 500ms", "@every x", "@at 2026-13-01T00:00:00Z"):
                assert err(await publish(s, "s.x", **{**ok, "Nats-Schedule": bad})) == 10189, bad
            for target in ("", "s.x", "s.*", "elsewhere", "s..x"):
                assert err(await publish(s, "s.x", **{**ok, "Nats-Schedule-Target": target})) == 10190, target
            assert err(await publish(s, "s.x", **{**ok, "Nats-Schedule-TTL": "0"})) == 10191
            assert err(await publish(s, "s.x", **{**ok, "Nats-Schedule-TTL": "5s"})) == 10166  # no allow_msg_ttl
            assert err(await publish(s, "s.x", **{**ok, "Nats-Schedule-Rollup": "all"})) == 10192
            assert err(await publish(s, "s.x", **{**ok, "Nats-Rollup": "all"})) == 10192
            for source in ("s.out", "s.x", "elsewhere"):
                assert err(await publish(s, "s.x", **{**ok, "Nats-Schedule-Source": source})) == 10203, source
            assert err(await publish(s, "s.x", **{"Nats-Scheduler": "s.y"})) == 10212
            assert err(await publish(s, "s.x", **{"Nats-Schedule-Next": "2030-01-01T00:00:00Z",
                                                  "Nats-Scheduler": "s.y"})) == 10212
            assert err(await publish(s, "s.x", **{"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.x"})) == 10212
            assert (await s.api("$JS.API.STREAM.INFO.S"))["state"]["messages"] == 0
            off = await s.api("$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"]})
            assert off["error"]["description"] == "message schedules can not be disabled", off
            for body, code in (({"mirror": {"name": "S"}}, 10186),
                               ({"sources": [{"name": "S"}], "subjects": ["z"]}, 10187),
                               ({"subjects": ["z"], "discard": "new"}, 10052)):
                got = await s.api("$JS.API.STREAM.CREATE.Z", {"name": "Z", "allow_msg_schedules": True, **body})
                assert got["error"]["err_code"] == code, got
    run(scenario)


def test_cron_patterns_and_time_zones_are_refused_by_jetraft_only(js_server, server_kind):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_msg_schedules": True})
            cron = await publish(s, "s.c", **{"Nats-Schedule": "0 0 * * * *", "Nats-Schedule-Target": "s.out"})
            zoned = await publish(s, "s.z", **{"Nats-Schedule": "@daily", "Nats-Schedule-Target": "s.out",
                                               "Nats-Schedule-Time-Zone": "Europe/Amsterdam"})
            if server_kind == "nats-server":
                assert "error" not in cron and "error" not in zoned, (cron, zoned)
            else:
                assert cron["error"] == {"code": 400, "err_code": 10189, "description": (
                    "message schedules pattern is invalid: cron schedules (nats-server 2.14) are not "
                    "supported by jetraft")}, cron
                assert zoned["error"]["err_code"] == 10223, zoned
                assert "(nats-server 2.14)" in zoned["error"]["description"]
    run(scenario)


def test_a_schedule_of_a_file_stream_fires_after_a_restart(tmp_path, server_kind):
    due: list[int] = []

    async def before(url: str) -> None:
        async with js_session(url) as s:
            await s.api("$JS.API.STREAM.CREATE.R", {"name": "R", "subjects": ["r.>"], "allow_msg_schedules": True})
            pattern, at = at_in(3)
            due.append(at)
            ack = await publish(s, "r.sched", b"later", **{"Nats-Schedule": pattern, "Nats-Schedule-Target": "r.out"})
            assert "error" not in ack, ack
            every = await publish(s, "r.every", b"e", **{"Nats-Schedule": "@every 2s", "Nats-Schedule-Target": "r.tick"})
            assert "error" not in every, every

    async def after(url: str) -> None:
        async with js_session(url) as s:
            async def fired():
                counts = await per_subject(s, "R", "r.>")
                return counts.get("r.out") == 1 and counts.get("r.tick", 0) >= 1 and "r.sched" not in counts
            await apoll(fired, "the schedule fired once after the restart", timeout=15)

    across_restarts(server_kind, tmp_path, before, after)


def test_every_schedule_fires_exactly_once_across_step_down_and_sigkill(formed_cluster, server_kind):
    """Three servers, an R3 stream: thirty @at schedules, each due a second after it is
    published, through a step-down and a SIGKILL of the leader; each one's copy is stored
    exactly once, on every server, and no schedule is left."""
    with formed_cluster(server_kind, "sched", 3, jetstream=True) as c:
        published: list[int] = []

        async def publish_one(s, k: int, _phase: str) -> None:
            pattern, _ = at_in(1)
            headers = {"Nats-Schedule": pattern, "Nats-Schedule-Target": f"q.out.{k}", "Nats-Msg-Id": f"s{k}"}
            await asked_again(lambda: s.js.publish(f"q.sched.{k}", str(k).encode(), headers=headers),
                              f"schedule {k}")
            published.append(k)

        async def check(s, _phase: str) -> None:
            async def all_fired():
                counts = await asked_again(lambda: per_subject(s, "Q", "q.>"), "Q's subjects")
                return all(counts.get(f"q.out.{k}") == 1 for k in published) and \
                    not any(name.startswith("q.sched.") for name in counts) and \
                    sum(1 for name in counts if name.startswith("q.out.")) == len(published)
            await apoll(all_fired, "each schedule fired once", timeout=40)

        across_step_down_and_sigkill(
            c, [{"name": "Q", "subjects": ["q.>"], "allow_msg_schedules": True, "num_replicas": 3}],
            ("Q",), "Q", publish_one, check)
