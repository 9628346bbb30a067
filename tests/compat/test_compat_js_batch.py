"""Atomic batch publish (nats-server 2.12, ADR-50, API level 2), side by side on jetraft and
nats-server 2.15.1: a stream with ``allow_atomic`` stages the messages of a batch
(``Nats-Batch-Id``, ``Nats-Batch-Sequence``), answers each with an empty message, and
stores them all when ``Nats-Batch-Commit`` arrives, with one PubAck carrying ``batch`` and
``count``; a batch never committed, or refused at its commit, leaves nothing. Every
refusal's error, the limits (1,000 messages, 50 batches in flight per stream, abandoned
after 10 s idle), deduplication and expected-sequence checks inside a batch; on three
servers a committed batch survives a step-down and a SIGKILL of its leader, and a batch
whose leader changed before its commit is refused and leaves nothing. The
``$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>`` advisory of each abandonment
nats-server advises (timeout, large, incomplete, unsupported), in the account and the system
account, the idle one when it times out; on three servers from the leader the batch was
staged on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time

import servers
from compat_support import connect, run
from js_support import across_step_down_and_sigkill, asked_again, js_session, stream_leader
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from polling import apoll

ATOMIC = {"name": "B", "subjects": ["b.>"], "allow_atomic": True}


def error(code: int, err_code: int, description: str) -> dict:
    return {"code": code, "err_code": err_code, "description": description}


INCOMPLETE = error(400, 10176, "atomic publish batch is incomplete")
DUPLICATE = error(400, 10201, "atomic publish batch contains duplicate message id")
WRONG_LAST_CONSTANT = error(400, 10164, "wrong last sequence")


async def send(s, subject: str, data: bytes, bid: str | None, seq: int | str | None,
               commit: str | None = None, **headers: str) -> bytes:
    """Publish one message of a batch as a request; the raw reply payload."""
    if bid is not None:
        headers["Nats-Batch-Id"] = bid
    if seq is not None:
        headers["Nats-Batch-Sequence"] = str(seq)
    if commit is not None:
        headers["Nats-Batch-Commit"] = commit
    msg = await s.nc.request(subject, data, timeout=5, headers=headers)
    return msg.data


async def refused(s, subject: str, data: bytes, bid: str | None, seq: int | str | None,
                  commit: str | None = None, **headers: str) -> dict:
    """The error a batch message is answered with (it must be refused)."""
    reply = json.loads(await send(s, subject, data, bid, seq, commit, **headers))
    assert set(reply) == {"error", "stream", "seq"} and reply["seq"] == 0, reply
    return reply["error"]


async def batch(s, subject: str, bid: str, n: int, *, commit: str = "1", **headers: str) -> dict:
    """Publish a batch of ``n`` messages ``<bid>-<i>`` committed on the last; the PubAck."""
    for i in range(1, n):
        assert await send(s, subject, f"{bid}-{i}".encode(), bid, i, **headers) == b""
    return json.loads(await send(s, subject, f"{bid}-{n}".encode(), bid, n, commit, **headers))


async def stored(s, stream: str) -> list[tuple[int, str, bytes, dict[str, str]]]:
    """(seq, subject, payload, headers) of every message ``stream`` holds."""
    state = (await s.api(f"$JS.API.STREAM.INFO.{stream}"))["state"]
    out = []
    for seq in range(state["first_seq"], state["last_seq"] + 1) if state["messages"] else ():
        got = await s.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in got:
            m = got["message"]
            hdrs = {}
            for line in base64.b64decode(m.get("hdrs", "")).decode().split("\r\n")[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    hdrs[k] = v.strip()
            out.append((seq, m["subject"], base64.b64decode(m.get("data", "")), hdrs))
    return out


async def count(s, stream: str) -> int:
    return (await s.api(f"$JS.API.STREAM.INFO.{stream}"))["state"]["messages"]


def test_a_committed_batch_is_stored_whole_with_one_pub_ack(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            created = await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
            assert created["config"]["allow_atomic"] is True, created
            # each staged message is answered with an empty message, nothing is stored yet
            assert await send(s, "b.one", b"a", "first", 1) == b""
            assert await send(s, "b.two", b"b", "first", 2) == b""
            assert await count(s, "B") == 0
            ack = await send(s, "b.one", b"c", "first", 3, "1")
            assert ack == b'{"stream":"B","seq":3,"batch":"first","count":3}', ack
            got = await stored(s, "B")
            assert [(seq, subj, data) for seq, subj, data, _ in got] == [
                (1, "b.one", b"a"), (2, "b.two", b"b"), (3, "b.one", b"c")]
            assert [h for *_, h in got] == [
                {"Nats-Batch-Id": "first", "Nats-Batch-Sequence": "1"},
                {"Nats-Batch-Id": "first", "Nats-Batch-Sequence": "2"},
                {"Nats-Batch-Id": "first", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1"}]

            # "eob" commits what came before it; the eob message is not stored and the last
            # stored one carries the commit
            assert await batch(s, "b.x", "second", 3, commit="eob") == {
                "stream": "B", "seq": 5, "batch": "second", "count": 2}
            got = await stored(s, "B")
            assert [(seq, data) for seq, _, data, _ in got[3:]] == [(4, b"second-1"), (5, b"second-2")]
            assert got[4][3] == {"Nats-Batch-Id": "second", "Nats-Batch-Sequence": "2",
                                 "Nats-Batch-Commit": "1"}, got[4]

            # a batch of one commits on its first message; plain publishes go on as before
            assert await batch(s, "b.y", "solo", 1) == {"stream": "B", "seq": 6, "batch": "solo", "count": 1}
            assert (await s.js.publish("b.z", b"plain")).seq == 7
    run(scenario)


def test_an_eob_commit_answers_the_count_of_the_messages_stored(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
            assert await batch(s, "b.x", "e", 4, commit="eob") == {
                "stream": "B", "seq": 3, "batch": "e", "count": 3}
            assert await count(s, "B") == 3
    run(scenario)


def test_a_batch_never_committed_or_refused_at_its_commit_leaves_nothing(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
            for i in (1, 2, 3):
                assert await send(s, "b.x", b"open", "open", i) == b""
            # a refusal at the commit (a duplicate id inside the batch) refuses it all
            assert await send(s, "b.x", b"1", "dup", 1, **{"Nats-Msg-Id": "m"}) == b""
            assert await send(s, "b.x", b"2", "dup", 2) == b""
            assert await refused(s, "b.x", b"3", "dup", 3, "1", **{"Nats-Msg-Id": "m"}) == DUPLICATE
            # and the batch is gone: its commit again is incomplete
            assert await refused(s, "b.x", b"3", "dup", 3, "1") == INCOMPLETE
            assert await count(s, "B") == 0
            assert (await s.js.publish("b.x", b"plain")).seq == 1
            info = await s.api("$JS.API.STREAM.INFO.B")
            assert info["state"]["messages"] == 1 and info["state"]["last_seq"] == 1
    run(scenario)


def test_each_refusal_of_a_batch_message(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
            await s.api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})
            assert await refused(s, "p.x", b"", "plain", 1, "1") == error(400, 10174, "atomic publish is disabled")
            assert await refused(s, "b.x", b"", "x" * 65, 1) == error(400, 10179, "atomic publish batch ID is invalid")
            assert await send(s, "b.x", b"", "x" * 64, 1) == b""     # 64 bytes is fine
            assert await refused(s, "b.x", b"", "noseq", None) == error(400, 10175, "atomic publish sequence is missing")
            assert await refused(s, "b.x", b"", "noseq", "one") == error(400, 10175, "atomic publish sequence is missing")
            assert await refused(s, "b.x", b"", "late", 2) == INCOMPLETE
            assert await refused(s, "b.x", b"", "late", 1001) == error(400, 10199, "atomic publish batch is too large: 1000")
            assert await refused(s, "b.x", b"", "late", 1001, "eob") == INCOMPLETE  # the eob is not counted
            # a commit value other than 1 or eob abandons the batch
            assert await send(s, "b.x", b"", "badcommit", 1) == b""
            assert await refused(s, "b.x", b"", "badcommit", 2, "yes") == error(400, 10200, "atomic publish batch commit is invalid")
            assert await refused(s, "b.x", b"", "badcommit", 3, "1") == INCOMPLETE
            # a gap abandons the batch; so does an eob as the first message
            assert await send(s, "b.x", b"", "gap", 1) == b""
            assert await refused(s, "b.x", b"", "gap", 3) == INCOMPLETE
            assert await refused(s, "b.x", b"", "gap", 2, "1") == INCOMPLETE
            assert await refused(s, "b.x", b"", "eob1", 1, "eob") == INCOMPLETE
            # a required API level above the server's abandons the batch
            assert await send(s, "b.x", b"", "level", 1) == b""
            assert await refused(s, "b.x", b"", "level", 2, **{"Nats-Required-Api-Level": "99"}) == \
                error(412, 10185, "JetStream minimum api level required")
            assert await refused(s, "b.x", b"", "level", 3, "1") == INCOMPLETE
            # an unsupported header, refused at the commit
            assert await send(s, "b.x", b"", "lastid", 1, **{"Nats-Expected-Last-Msg-Id": "z"}) == b""
            assert await refused(s, "b.x", b"", "lastid", 2, "1") == error(
                400, 10177, "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id")
            # a message over max_msg_size is refused and leaves a gap behind it
            await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"], "allow_atomic": True,
                                                    "max_msg_size": 100})
            assert await send(s, "m.x", b"", "big", 1) == b""
            assert await refused(s, "m.x", b"x" * 101, "big", 2) == error(400, 10054, "message size exceeds maximum allowed")
            assert await refused(s, "m.x", b"", "big", 3, "1") == INCOMPLETE
            assert await count(s, "B") == 0 and await count(s, "M") == 0 and await count(s, "P") == 0
    run(scenario)


def test_dedupe_and_expected_sequences_inside_a_batch(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
            assert (await s.js.publish("b.a", b"first", headers={"Nats-Msg-Id": "seen"})).seq == 1
            # distinct ids and a right expected last sequence on the first message: stored
            assert await send(s, "b.a", b"1", "ok", 1, **{"Nats-Msg-Id": "m1", "Nats-Expected-Last-Sequence": "1"}) == b""
            assert await send(s, "b.b", b"2", "ok", 2, **{"Nats-Msg-Id": "m2",
                                                         "Nats-Expected-Last-Subject-Sequence": "0"}) == b""
            assert json.loads(await send(s, "b.c", b"3", "ok", 3, "1", **{"Nats-Msg-Id": "m3"})) == {
                "stream": "B", "seq": 4, "batch": "ok", "count": 3}
            # an id of the batch is a duplicate afterwards, as any stored one
            assert (await s.js.publish("b.a", b"again", headers={"Nats-Msg-Id": "m2"})).duplicate is True
            # an id seen before refuses the whole batch (no duplicate PubAck)
            assert await send(s, "b.a", b"x", "seen", 1, **{"Nats-Msg-Id": "new"}) == b""
            assert await refused(s, "b.a", b"y", "seen", 2, "1", **{"Nats-Msg-Id": "seen"}) == DUPLICATE
            # the expected last sequence: wrong on the first message, any on a later one
            assert await send(s, "b.a", b"x", "wrong", 1, **{"Nats-Expected-Last-Sequence": "3"}) == b""
            assert await refused(s, "b.a", b"y", "wrong", 2, "1") == error(400, 10071, "wrong last sequence: 4")
            assert await send(s, "b.a", b"x", "later", 1) == b""
            assert await refused(s, "b.a", b"y", "later", 2, "1", **{"Nats-Expected-Last-Sequence": "5"}) == \
                WRONG_LAST_CONSTANT
            assert await send(s, "b.a", b"x", "later2", 1) == b""
            assert await refused(s, "b.a", b"y", "later2", 2, "1", **{"Nats-Expected-Last-Sequence": "7"}) == \
                error(400, 10071, "wrong last sequence: 5")
            # the expected last subject sequence: not on a subject the batch wrote before
            assert await send(s, "b.q", b"x", "subj", 1) == b""
            assert await refused(s, "b.q", b"y", "subj", 2, "1", **{"Nats-Expected-Last-Subject-Sequence": "0"}) == \
                WRONG_LAST_CONSTANT
            assert await send(s, "b.q", b"x", "subj2", 1, **{"Nats-Expected-Last-Subject-Sequence": "9"}) == b""
            assert await refused(s, "b.q", b"y", "subj2", 2, "1") == error(400, 10071, "wrong last sequence: 0")
            assert await count(s, "B") == 4
    run(scenario)


def test_a_batch_is_checked_once_against_the_stream_before_it(js_server):
    """A stream rollup first, then a message expecting the last sequence of a subject the
    rollup removes: checked before the batch, the whole batch is stored."""
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.B", {**ATOMIC, "allow_rollup_hdrs": True})
            assert (await s.js.publish("b.old", b"old")).seq == 1
            assert await send(s, "b.new", b"all", "r", 1, **{"Nats-Rollup": "all"}) == b""
            assert json.loads(await send(s, "b.old", b"next", "r", 2, "1",
                                         **{"Nats-Expected-Last-Subject-Sequence": "1"})) == {
                "stream": "B", "seq": 3, "batch": "r", "count": 2}
            assert [(seq, data) for seq, _, data, _ in await stored(s, "B")] == [(2, b"all"), (3, b"next")]
            # a stream rollup after the first message, a subject rollup on a subject written before
            assert await send(s, "b.x", b"", "late", 1) == b""
            assert await refused(s, "b.y", b"", "late", 2, "1", **{"Nats-Rollup": "all"}) == \
                error(500, 10111, "batch rollup all invalid")
            assert await send(s, "b.x", b"", "sub", 1) == b""
            assert await refused(s, "b.x", b"", "sub", 2, "1", **{"Nats-Rollup": "sub"}) == \
                error(500, 10111, "batch rollup sub invalid")
            assert await count(s, "B") == 2
    run(scenario)


def test_a_batch_holds_at_most_1000_messages(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            got = Abandoned()
            await s.nc.subscribe(f"{ABANDONED}.>", cb=got.cb)
            await s.nc.flush()
            await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
            assert await batch(s, "b.x", "full", 1000) == {"stream": "B", "seq": 1000, "batch": "full", "count": 1000}
            for i in range(1, 1001):
                assert await send(s, "b.x", b"", "over", i) == b""
            assert await refused(s, "b.x", b"", "over", 1001) == error(400, 10199, "atomic publish batch is too large: 1000")
            # the batch is gone: a commit past the limit is too large, one within it incomplete
            assert await refused(s, "b.x", b"", "over", 1002, "1") == error(
                400, 10199, "atomic publish batch is too large: 1000")
            assert await refused(s, "b.x", b"", "over", 1000, "1") == INCOMPLETE
            assert await count(s, "B") == 1000
            # abandoned as too large once, with an advisory; the refusals after it have none
            await s.nc.flush()
            assert got.bodies() == [advisory("B", "over", "large")]
            keys_in_order(got, system=False)
    run(scenario, timeout=180)


def test_50_batches_in_flight_per_stream_and_idle_ones_abandoned(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
            await s.api("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"], "allow_atomic": True})
            started = time.monotonic()
            assert await send(s, "c.x", b"", "other", 1) == b""     # the oldest batch
            for k in range(50):
                assert await send(s, "b.x", b"", f"k{k}", 1) == b""
            assert await refused(s, "b.x", b"", "k50", 1) == error(429, 10210, "atomic publish too many inflight")
            assert await send(s, "c.x", b"", "other2", 1) == b""    # the limit is per stream
            # a batch whose messages keep coming is kept; the idle ones go after 10 s
            last = [b""]

            async def accepted() -> bool:
                last[0] = await send(s, "b.x", b"", "late", 1)
                return last[0] == b""
            await apoll(accepted, "a new batch accepted once the idle ones are abandoned", timeout=30, interval=0.5)
            assert time.monotonic() - started >= 9.5, "abandoned before 10 s"
            assert await refused(s, "b.x", b"", "k0", 2, "1") == INCOMPLETE
            assert await refused(s, "c.x", b"", "other", 2, "1") == INCOMPLETE
            assert json.loads(await send(s, "b.x", b"", "late", 2, "1")) == {
                "stream": "B", "seq": 2, "batch": "late", "count": 2}
    run(scenario, timeout=90)


# ---------------------------------------------------------------------- the abandoned advisory

ABANDONED = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED"
ABANDONED_TYPE = "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
NUID = re.compile(r"^[0-9A-Za-z]{22}$")
SYS_USER, SYS_PASSWORD = "admin", "sys-pass"
APP_USER, APP_PASSWORD = "app", "app-pass"
ACCOUNTS = (f'accounts {{\n  $SYS {{ users = [ {{ user: "{SYS_USER}", pass: "{SYS_PASSWORD}" }} ] }}\n'
            f'  APP {{ jetstream: enabled, users = [ {{ user: "{APP_USER}", pass: "{APP_PASSWORD}" }} ] }}\n}}')


class Abandoned:
    """Every ``BATCH_ABANDONED`` advisory a connection receives, with when it came."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict, float]] = []

    async def cb(self, msg) -> None:
        self.got.append((msg.subject, json.loads(msg.data), time.monotonic()))

    def bodies(self) -> list[tuple[str, dict]]:
        """(subject, body without id and timestamp), in order; each id and timestamp of its form."""
        out = []
        for subject, body, _ in self.got:
            assert NUID.match(body["id"]) and RFC3339.match(body["timestamp"]), body
            out.append((subject, {k: v for k, v in body.items() if k not in ("id", "timestamp")}))
        return out


def advisory(stream: str, bid: str, reason: str, account: str | None = None) -> tuple[str, dict]:
    """An abandoned advisory as nats-server sends it, bar id and timestamp (``account``: the
    system account's copy), with its keys in nats-server's order."""
    body: dict = {"type": ABANDONED_TYPE}
    if account is not None:
        body["account"] = account
    body.update(stream=stream, batch=bid, reason=reason)
    return f"{ABANDONED}.{stream}", body


def keys_in_order(got: Abandoned, system: bool) -> None:
    want = ["type", "id", "timestamp", *(["account"] if system else []), "stream", "batch", "reason"]
    for _, body, _ in got.got:
        assert list(body) == want, body


def test_the_batch_abandoned_advisory_in_the_account_and_the_system_account(start_server, tmp_path):
    """Each abandonment nats-server advises, with its reason, in the account and (with
    ``account``) in the system account: a gap and an ``eob`` first message (incomplete), a
    required API level too high (unsupported), and a batch idle for 10 s (timeout, sent when
    it times out: within about a second, without another message). A bad commit value, a
    refusal at the commit, a batch that is not staged and a batch of a deleted stream are
    abandoned without one."""
    srv = start_server(servers.js_config(tmp_path / "store") + "\n" + ACCOUNTS)

    async def scenario():
        async with js_session(srv.url, user=APP_USER, password=APP_PASSWORD) as s:
            sys_ = await connect(srv.url, user=SYS_USER, password=SYS_PASSWORD)
            try:
                in_app, in_sys = Abandoned(), Abandoned()
                await s.nc.subscribe(f"{ABANDONED}.>", cb=in_app.cb)
                await sys_.subscribe(f"{ABANDONED}.>", cb=in_sys.cb)
                await s.nc.flush()
                await sys_.flush()
                assert "error" not in await s.api("$JS.API.STREAM.CREATE.B", ATOMIC)
                assert "error" not in await s.api("$JS.API.STREAM.CREATE.D", {
                    "name": "D", "subjects": ["d.>"], "allow_atomic": True})
                # a batch of a stream deleted meanwhile goes without an advisory
                assert await send(s, "d.x", b"", "gone", 1) == b""
                assert (await s.api("$JS.API.STREAM.DELETE.D"))["success"] is True
                # staged, then left alone: abandoned 10 s after its last message
                assert await send(s, "b.x", b"", "idle", 1) == b""
                assert await send(s, "b.x", b"", "idle", 2) == b""
                idle_at = time.monotonic()
                # a gap, and an eob as the first message
                assert await send(s, "b.x", b"", "gap", 1) == b""
                assert await refused(s, "b.x", b"", "gap", 3) == INCOMPLETE
                assert await refused(s, "b.x", b"", "eob1", 1, "eob") == INCOMPLETE
                # a required API level above the server's, on the first message too
                assert await send(s, "b.x", b"", "level", 1) == b""
                assert (await refused(s, "b.x", b"", "level", 2, **{"Nats-Required-Api-Level": "99"}))[
                    "err_code"] == 10185
                assert (await refused(s, "b.x", b"", "level1", 1, **{"Nats-Required-Api-Level": "99"}))[
                    "err_code"] == 10185
                # no advisory: a bad commit value, a batch not staged, a refusal at the commit
                assert await send(s, "b.x", b"", "badcommit", 1) == b""
                assert (await refused(s, "b.x", b"", "badcommit", 2, "yes"))["err_code"] == 10200
                assert await refused(s, "b.x", b"", "absent", 2) == INCOMPLETE
                assert await send(s, "b.x", b"", "dup", 1, **{"Nats-Msg-Id": "m"}) == b""
                assert await refused(s, "b.x", b"", "dup", 2, "1", **{"Nats-Msg-Id": "m"}) == DUPLICATE

                now = [advisory("B", "gap", "incomplete"), advisory("B", "eob1", "incomplete"),
                       advisory("B", "level", "unsupported"), advisory("B", "level1", "unsupported")]
                await apoll(lambda: len(in_app.got) >= 4 and len(in_sys.got) >= 4, "the advisories", 5)
                assert in_app.bodies() == now
                assert in_sys.bodies() == [advisory(b["stream"], b["batch"], b["reason"], "APP") for _, b in now]
                # the idle batch's, when it times out: no later than about a second after 10 s
                await apoll(lambda: len(in_app.got) >= 5 and len(in_sys.got) >= 5, "the timeout advisory", 15)
                assert in_app.bodies()[4:] == [advisory("B", "idle", "timeout")]
                assert in_sys.bodies()[4:] == [advisory("B", "idle", "timeout", "APP")]
                for got in (in_app, in_sys):
                    after = got.got[4][2] - idle_at
                    assert 9.5 <= after <= 12, f"timed out after {after:.2f} s"
                keys_in_order(in_app, system=False)
                keys_in_order(in_sys, system=True)
                # and it is gone: its commit is incomplete, without another advisory
                assert await refused(s, "b.x", b"", "idle", 3, "1") == INCOMPLETE
                await s.nc.flush()
                await sys_.flush()
                assert len(in_app.got) == 5 and len(in_sys.got) == 5
            finally:
                await sys_.close()
    run(scenario)


# ---------------------------------------------------------------------- three servers

R3 = {"name": "E", "subjects": ["e.>"], "allow_atomic": True, "num_replicas": 3}


def test_committed_batches_survive_a_step_down_and_a_sigkill(formed_cluster, server_kind):
    """Three servers, an R3 stream with allow_atomic: batch k holds three messages with
    ids; a batch refused as incomplete (its leader changed under it) is sent again whole
    under a new batch id, and one refused as a duplicate was stored already. Every server
    holds each batch exactly once, its three messages side by side."""
    with formed_cluster(server_kind, "batch", 3, jetstream=True) as c:
        async def publish_one(s, k: int, _phase: str) -> None:
            deadline = time.monotonic() + 60
            attempt = 0
            while True:
                attempt += 1
                bid = f"k{k}a{attempt}"
                try:
                    for i in (1, 2):
                        reply = await send(s, "e.x", f"{k}-{i}".encode(), bid, i, **{"Nats-Msg-Id": f"{k}-{i}"})
                        if reply != b"":
                            raise LookupError(reply)
                    reply = await send(s, "e.x", f"{k}-3".encode(), bid, 3, "1", **{"Nats-Msg-Id": f"{k}-3"})
                    ack = json.loads(reply)
                    if "error" not in ack:
                        assert ack["batch"] == bid and ack["count"] == 3, ack
                        return
                    if ack["error"] == DUPLICATE:
                        return      # stored by an earlier attempt whose PubAck was lost
                    raise LookupError(reply)
                except (LookupError, NatsTimeoutError, NoRespondersError) as err:
                    if isinstance(err, LookupError):
                        body = json.loads(err.args[0])
                        assert body["error"]["err_code"] in (10176, 10008), body
                    assert time.monotonic() < deadline, f"batch {k} never committed"
                    await asyncio.sleep(0.2)

        async def check(s, phase: str) -> None:
            want = 20 if phase == "before" else 30

            async def whole() -> bool:
                got = await asked_again(lambda: stored(s, "E"), "E's messages")
                datas = [d.decode() for _, _, d, _ in got]
                if len(datas) != want * 3:
                    return False
                for j in range(0, len(datas), 3):
                    k = datas[j].split("-")[0]
                    assert datas[j:j + 3] == [f"{k}-1", f"{k}-2", f"{k}-3"], datas[j:j + 3]
                assert sorted(int(d.split("-")[0]) for d in datas[::3]) == list(range(want))
                return True
            await apoll(whole, f"E holds {want} whole batches", timeout=30)

        across_step_down_and_sigkill(c, [R3], ("E",), "E", publish_one, check)


def test_a_leader_change_in_the_middle_of_a_batch_leaves_nothing(formed_cluster, server_kind):
    """A batch whose leader changed is refused at its commit as incomplete by the new leader,
    and abandoned without an advisory (nats-server 2.15.1 sends none, then or when it would
    have timed out); a gap, or a batch left alone on the new leader, is advised as on one
    server."""
    with formed_cluster(server_kind, "batchmid", 3, jetstream=True) as c:
        async def scenario():
            async with js_session(c.urls()[0]) as s:
                got = Abandoned()
                await s.nc.subscribe(f"{ABANDONED}.>", cb=got.cb)
                await s.nc.flush()
                created = await asked_again(lambda: s.api("$JS.API.STREAM.CREATE.E", R3), "E created")
                assert "error" not in created, created
                await asked_again(lambda: s.js.publish("e.x", b"before", headers={"Nats-Msg-Id": "before"}),
                                  "first publish")
                first = await stream_leader(s, "E")
                assert await send(s, "e.x", b"", "gap", 1) == b""
                assert await refused(s, "e.x", b"", "gap", 3) == INCOMPLETE
                await apoll(lambda: len(got.got) >= 1, "the gap's advisory", 5)
                assert got.bodies() == [advisory("E", "gap", "incomplete")]
                assert await send(s, "e.x", b"1", "mid", 1) == b""
                assert await send(s, "e.x", b"2", "mid", 2) == b""
                mid_at = time.monotonic()
                await asked_again(lambda: s.api("$JS.API.STREAM.LEADER.STEPDOWN.E"), "step-down")

                async def moved() -> bool:
                    return await stream_leader(s, "E") != first
                await apoll(moved, "E has a new leader", timeout=30)

                async def answered() -> dict:
                    try:
                        return json.loads(await send(s, "e.x", b"3", "mid", 3, "1"))
                    except (NatsTimeoutError, NoRespondersError):
                        return {}
                reply = await apoll(answered, "the commit answered", timeout=30)
                assert reply == {"error": INCOMPLETE, "stream": "E", "seq": 0}, reply
                info = await asked_again(lambda: s.api("$JS.API.STREAM.INFO.E"), "E info")
                assert info["state"]["messages"] == 1 and info["state"]["last_seq"] == 1, info["state"]
                # and a new batch on the new leader commits
                assert await batch(s, "e.y", "after", 2) == {"stream": "E", "seq": 3, "batch": "after", "count": 2}
                # a batch left alone on the new leader is abandoned when it times out; "mid",
                # staged before it on the former leader, never is
                assert await send(s, "e.z", b"", "idle", 1) == b""
                idle_at = time.monotonic()
                await apoll(lambda: len(got.got) >= 2, "the timeout advisory", 20)
                assert got.bodies() == [advisory("E", "gap", "incomplete"), advisory("E", "idle", "timeout")]
                after = got.got[1][2] - idle_at
                assert 9.5 <= after <= 12, f"timed out after {after:.2f} s"
                assert got.got[1][2] - mid_at > 10
                keys_in_order(got, system=False)
        run(scenario, timeout=120)


def test_counter_increments_and_schedules_inside_a_batch(js_server):
    """A batch of increments to a counter stream is added up in order and answered with the
    batch's PubAck (no ``val``); one bad increment or schedule refuses the whole batch at
    its commit, and nothing is stored."""
    async def scenario():
        async with js_session(js_server.url) as s:
            made = await s.api("$JS.API.STREAM.CREATE.BC", {"name": "BC", "subjects": ["bc.>"],
                                                            "allow_msg_counter": True, "allow_atomic": True})
            assert "error" not in made, made
            for i, v in enumerate(("5", "-1"), start=1):
                assert await send(s, "bc.n", b"", "inc", i, **{"Nats-Incr": v}) == b""
            ack = json.loads(await send(s, "bc.n", b"", "inc", 3, "1", **{"Nats-Incr": "10"}))
            assert ack == {"stream": "BC", "seq": 3, "batch": "inc", "count": 3}, ack
            got = await s.api("$JS.API.STREAM.MSG.GET.BC", {"last_by_subj": "bc.n"})
            assert json.loads(base64.b64decode(got["message"]["data"])) == {"val": "14"}
            assert await send(s, "bc.n", b"", "bad", 1, **{"Nats-Incr": "1"}) == b""
            err = await refused(s, "bc.n", b"payload", "bad", 2, "1", **{"Nats-Incr": "1"})
            assert err["err_code"] == 10170, err
            assert await count(s, "BC") == 3

            made = await s.api("$JS.API.STREAM.CREATE.BS", {"name": "BS", "subjects": ["bs.>"],
                                                            "allow_msg_schedules": True, "allow_atomic": True})
            assert "error" not in made, made
            assert await send(s, "bs.a", b"", "sch", 1) == b""
            err = await refused(s, "bs.sched", b"", "sch", 2, "1", **{
                "Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "elsewhere"})
            assert err["err_code"] == 10190, err
            assert await count(s, "BS") == 0
    run(scenario)
