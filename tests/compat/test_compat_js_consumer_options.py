"""Consumer options that pace or watch delivery, side by side on jetraft and nats-server
2.15.1, on one server and on a three-server cluster (R3 stream and consumer):

- ``replay_policy: original`` on push and pull consumers: messages arrive at the pace they
  were stored (nats-server consumer.go ``loopAndGatherMsgs``, ``o.replay``), then, once
  caught up, new messages at once;
- ``rate_limit_bps`` on push consumers (bits per second; the token bucket's burst is the
  stream's ``max_msg_size``), refused on pull consumers with nats-server's 10086;
- pull requests with ``idle_heartbeat``: ``100 Idle Heartbeat`` with ``Nats-Last-Consumer``
  and ``Nats-Last-Stream`` while the request waits, its refusals, nats-py's
  ``fetch(heartbeat=...)``;
- push consumers' idle heartbeats and flow control (``100 FlowControl Request``, the
  stall at the window and ``Nats-Consumer-Stalled``).

Timing is asserted as ratios (arrival gaps to stored gaps, elapsed time to what the rate
allows), never as absolute sleeps. The gaps between stored messages are made by pausing
between publishes: that is the data replayed, not synchronisation. Messages are stamped
with ``time.monotonic()`` in a subscription callback as they arrive.

One difference, asserted: a message whose delivery size (subject, ack subject, headers and
payload) is larger than the limiter's burst is never delivered by nats-server (its
``rate.Limiter`` refuses the reservation and the consumer waits for ever); jetraft sends it
when the bucket has paid for it.
"""

from __future__ import annotations

import asyncio
import json
import time

import nats.errors
import pytest
import servers
from compat_support import round_trip, run
from js_support import NS, Session, api_error, asked_again, error_triple, js_session
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ReplayPolicy
from nats.js.errors import FetchTimeoutError
from polling import apoll

#: Seconds paused between the stored messages a replay test plays back.
GAPS = (0.8, 0.4, 1.0)
#: rate_limit_bps tests: bytes per second, the stream's max_msg_size (the limiter's burst),
#: payload bytes and message count.
RATE = 16_000
BURST = 4_096
PAYLOAD = 1_000
COUNT = 40
#: Push flow control: nats-server JsFlowControlMaxPending / 16, the first window (bytes).
FC_WINDOW = 2 * 1024 * 1024
FC_PAYLOAD = 64 * 1024


def ack_ts(msg: Msg) -> int:
    """The stored time (ns since the epoch) carried by a delivered message's ack subject
    (``$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>``)."""
    return int(msg.reply.split(".")[7])


def status_of(msg: Msg) -> str | None:
    return (msg.headers or {}).get("Status")


class Arrivals:
    """Every message on one subscription, stamped with ``time.monotonic()`` on arrival."""

    def __init__(self) -> None:
        self.items: list[tuple[float, Msg]] = []
        self.answer_flow_control: Client | None = None

    async def cb(self, msg: Msg) -> None:
        self.items.append((time.monotonic(), msg))
        if self.answer_flow_control is not None and self.is_fc(msg):
            await self.answer_flow_control.publish(msg.reply, b"")

    @staticmethod
    def is_fc(msg: Msg) -> bool:
        return status_of(msg) == "100" and (msg.headers or {}).get("Description") == "FlowControl Request"

    @staticmethod
    def is_hb(msg: Msg) -> bool:
        return status_of(msg) == "100" and (msg.headers or {}).get("Description") == "Idle Heartbeat"

    def data(self) -> list[tuple[float, Msg]]:
        return [(t, m) for t, m in self.items if status_of(m) is None]

    def heartbeats(self) -> list[tuple[float, Msg]]:
        return [(t, m) for t, m in self.items if self.is_hb(m)]

    def with_status(self, code: str) -> list[tuple[float, Msg]]:
        return [(t, m) for t, m in self.items if status_of(m) == code]

    async def wait_data(self, count: int, what: str, timeout: float = 30.0) -> list[tuple[float, Msg]]:
        await apoll(lambda: len(self.data()) >= count, what, timeout)
        return self.data()


async def watch(nc: Client, subject: str) -> Arrivals:
    """Subscribe ``nc`` to ``subject`` with an :class:`Arrivals` callback, in place on return."""
    arrivals = Arrivals()
    await nc.subscribe(subject, cb=arrivals.cb)
    await round_trip(nc)
    return arrivals


async def stored_with_gaps(s: Session, subject: str, gaps=GAPS) -> None:
    """Publish ``len(gaps) + 1`` messages to ``subject``, pausing ``gaps[i]`` seconds before
    message i+2: the stored timestamps replay_policy original plays back. The first is asked
    again while a just-made replicated stream has no responders yet (once: its Nats-Msg-Id)."""
    await asked_again(lambda: s.js.publish(subject, b"0", headers={"Nats-Msg-Id": f"{subject}-0"}),
                      "the first message stored")
    for i, gap in enumerate(gaps):
        await asyncio.sleep(gap)
        await s.js.publish(subject, b"%d" % (i + 1))


def assert_replayed(got: list[tuple[float, Msg]], worst: float) -> None:
    """Arrival gaps of ``got`` against the gaps between their stored times: each at least
    0.7 of it (arrivals jitter on a loaded machine) and at most ``worst`` times it; the
    whole span between 0.9 and ``worst`` times the stored span."""
    stored = [ack_ts(m) / NS for _, m in got]
    arrived = [t for t, _ in got]
    for i in range(1, len(got)):
        want, took = stored[i] - stored[i - 1], arrived[i] - arrived[i - 1]
        assert 0.7 * want <= took <= worst * want, (i, want, took, stored, arrived)
    want, took = stored[-1] - stored[0], arrived[-1] - arrived[0]
    assert 0.9 * want <= took <= worst * want, (want, took)


def rate_schedule(got: list[tuple[float, Msg]]) -> list[tuple[float, float]]:
    """(expected, observed) seconds after the first arrival for each message that must wait
    for the bucket: with the bucket full at the start, message k goes once the bytes of
    messages 0..k (subject, ack subject, payload: nats-server ``sz``) less the burst have
    been paid at RATE."""
    first = got[0][0]
    out, total = [], 0
    for t, m in got:
        total += len(m.subject) + len(m.reply) + len(m.data)
        expected = (total - BURST) / RATE
        if expected >= 0.5:
            out.append((expected, t - first))
    return out


# =========================================================================== single server


def test_replay_original_push_delivers_at_the_pace_the_messages_were_stored(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="RP", subjects=["rp.>"])
            await stored_with_gaps(s, "rp.a")
            original = await watch(s.nc, "dl.original")
            instant = await watch(s.nc, "dl.instant")
            await s.jsm.add_consumer("RP", durable_name="INSTANT", deliver_subject="dl.instant")
            created = await s.jsm.add_consumer("RP", durable_name="ORIGINAL", deliver_subject="dl.original",
                                               replay_policy=ReplayPolicy.ORIGINAL)
            assert created.config.replay_policy == ReplayPolicy.ORIGINAL
            got = await original.wait_data(len(GAPS) + 1, "the replayed messages")
            assert [m.data for _, m in got] == [b"0", b"1", b"2", b"3"]
            assert_replayed(got, worst=1.5)
            fast = await instant.wait_data(len(GAPS) + 1, "the instant messages")
            assert fast[-1][0] - fast[0][0] < 0.25 * sum(GAPS)
            # caught up: a new message goes at once, not after its gap since the last one
            published = time.monotonic()
            await s.js.publish("rp.a", b"new")
            got = await original.wait_data(len(GAPS) + 2, "the new message")
            gap = (ack_ts(got[-1][1]) - ack_ts(got[-2][1])) / NS
            assert gap > sum(GAPS)
            assert got[-1][0] - published < 0.25 * gap, (got[-1][0] - published, gap)

    run(scenario)


def test_replay_original_pull_paces_a_batch_and_each_fetch(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="RP", subjects=["rp.>"])
            await stored_with_gaps(s, "rp.a")
            for name in ("BATCH", "FETCH"):
                await s.jsm.add_consumer("RP", durable_name=name, ack_policy=AckPolicy.EXPLICIT,
                                         replay_policy=ReplayPolicy.ORIGINAL)
            # one request for the four: they arrive at the stored pace
            inbox = s.nc.new_inbox()
            batch = await watch(s.nc, inbox)
            await s.nc.publish("$JS.API.CONSUMER.MSG.NEXT.RP.BATCH",
                               json.dumps({"batch": 4, "expires": 20 * NS}).encode(), reply=inbox)
            got = await batch.wait_data(4, "the replayed batch")
            assert_replayed(got, worst=1.5)
            # nats-py's fetch(1), one message at a time: each waits its gap after the request
            psub = await s.js.pull_subscribe_bind("FETCH", stream="RP")
            took, stored = [], []
            for _ in range(4):
                start = time.monotonic()
                (msg,) = await psub.fetch(1, timeout=5)
                took.append(time.monotonic() - start)
                stored.append(ack_ts(msg) / NS)
                await msg.ack()
            assert took[0] < 0.5 * GAPS[0], took
            for i in range(1, 4):
                want = stored[i] - stored[i - 1]
                assert 0.7 * want <= took[i] <= 1.5 * want, (i, want, took)
            # caught up: a new message is fetched at once
            await s.js.publish("rp.a", b"new")
            start = time.monotonic()
            (msg,) = await psub.fetch(1, timeout=5)
            assert time.monotonic() - start < 0.25 * sum(GAPS)
            assert msg.data == b"new"

    run(scenario)


def test_rate_limit_bps_paces_a_push_consumer_and_a_pull_consumer_refuses_it(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="RL", subjects=["rl"], max_msg_size=BURST)
            for _ in range(COUNT):
                await s.js.publish("rl", b"x" * PAYLOAD)
            limited = await watch(s.nc, "dl.rl")
            free = await watch(s.nc, "dl.free")
            await s.jsm.add_consumer("RL", durable_name="FREE", deliver_subject="dl.free")
            created = await s.jsm.add_consumer("RL", durable_name="RATE", deliver_subject="dl.rl",
                                               rate_limit_bps=RATE * 8)
            assert created.config.rate_limit_bps == RATE * 8
            got = await limited.wait_data(COUNT, "the rate-limited messages")
            assert [ack_ts(m) for _, m in got] == sorted(ack_ts(m) for _, m in got)
            schedule = rate_schedule(got)
            assert schedule, "no message had to wait"
            for expected, observed in schedule:
                assert 0.8 * expected <= observed <= 1.4 * expected + 0.2, (expected, observed)
            fast = await free.wait_data(COUNT, "the unlimited messages")
            assert fast[-1][0] - fast[0][0] < 0.3 * schedule[-1][0]
            # an update may change the rate; the replay policy may not change
            body = {"stream_name": "RL", "config": {**created.config.as_dict(), "rate_limit_bps": RATE * 16}}
            updated = await s.api("$JS.API.CONSUMER.CREATE.RL.RATE", body)
            assert updated["config"]["rate_limit_bps"] == RATE * 16, updated
            body["config"]["replay_policy"] = "original"
            refused = await s.api("$JS.API.CONSUMER.CREATE.RL.RATE", body)
            assert refused["error"] == {"code": 500, "err_code": 10012,
                                        "description": "replay policy can not be updated"}, refused
            # a pull consumer can not have one
            err = await api_error(s.jsm.add_consumer("RL", durable_name="PULL", ack_policy=AckPolicy.EXPLICIT,
                                                     rate_limit_bps=8000))
            assert error_triple(err) == (400, 10086, "consumer in pull mode can not have rate limit set")

    run(scenario)


def test_the_rate_limiter_edges_a_rate_of_zero_and_a_message_larger_than_the_burst(js_server, server_kind):
    """Under 8 bits per second the rate is 0 bytes per second: what the full bucket holds
    goes, then nothing. A message larger than the burst: nats-server never sends it (see
    the module docstring); jetraft sends it."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="RZ", subjects=["rz"], max_msg_size=400)
            await s.publish_many("rz", [b"z" * 100] * 3)      # about 160 bytes each to send
            zero = await watch(s.nc, "dl.rz")
            await s.jsm.add_consumer("RZ", durable_name="ZERO", deliver_subject="dl.rz", rate_limit_bps=7)
            got = await zero.wait_data(2, "what the full bucket holds")
            assert [m.metadata.sequence.stream for _, m in got] == [1, 2]
            with pytest.raises(AssertionError):
                await zero.wait_data(3, "a third message", timeout=1.5)

            await s.jsm.add_stream(name="RB", subjects=["rb"], max_msg_size=256)
            await s.js.publish("rb", b"x" * 250)       # with its ack subject, over 256 bytes
            limited = await watch(s.nc, "dl.rb")
            free = await watch(s.nc, "dl.rbfree")
            await s.jsm.add_consumer("RB", durable_name="RATE", deliver_subject="dl.rb",
                                     rate_limit_bps=8 * 1_000_000)
            await s.jsm.add_consumer("RB", durable_name="FREE", deliver_subject="dl.rbfree")
            (_, msg), = await free.wait_data(1, "the message without a rate limit")
            assert len(msg.subject) + len(msg.reply) + len(msg.data) > 256
            if server_kind == "jetraft":
                (_, msg), = await limited.wait_data(1, "the message larger than the burst", timeout=10)
                assert msg.data == b"x" * 250
            else:
                with pytest.raises(AssertionError):
                    await limited.wait_data(1, "the message larger than the burst", timeout=1.5)

    run(scenario)


def test_pull_request_heartbeats_while_it_waits_then_408(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="PH", subjects=["ph.>"])
            await s.publish_many("ph.a", [b"1", b"2"])
            await s.jsm.add_consumer("PH", durable_name="HB", ack_policy=AckPolicy.EXPLICIT)
            psub = await s.js.pull_subscribe_bind("HB", stream="PH")
            for msg in await psub.fetch(2, timeout=5):
                await msg.ack()
            inbox = s.nc.new_inbox()
            arrivals = await watch(s.nc, inbox)
            hb = 0.25
            sent = time.monotonic()
            await s.nc.publish("$JS.API.CONSUMER.MSG.NEXT.PH.HB",
                               json.dumps({"batch": 1, "expires": int(1.2 * NS), "idle_heartbeat": int(hb * NS)}
                                          ).encode(), reply=inbox)
            await apoll(lambda: arrivals.with_status("408"), "the request's 408", 10)
            beats = arrivals.heartbeats()
            assert 3 <= len(beats) <= 4, [m.headers for _, m in arrivals.items]
            for _, m in beats:
                assert m.data == b"" and not m.reply
                assert m.headers == {"Status": "100", "Description": "Idle Heartbeat",
                                     "Nats-Last-Consumer": "2", "Nats-Last-Stream": "2"}, m.headers
            times = [sent] + [t for t, _ in beats]
            for a, b in zip(times, times[1:]):
                assert 0.7 * hb <= b - a <= 2.0 * hb, times
            (_, timeout), = arrivals.with_status("408")
            assert timeout.headers == {"Status": "408", "Description": "Request Timeout",
                                       "Nats-Pending-Messages": "1", "Nats-Pending-Bytes": "0"}
            assert arrivals.items[-1][1] is timeout

            # a heartbeat of more than half the expiry, or without one: 400
            for body in ({"batch": 1, "expires": 400_000_000, "idle_heartbeat": 300_000_000},
                         {"batch": 1, "idle_heartbeat": 100_000_000}):
                reply = await s.nc.request("$JS.API.CONSUMER.MSG.NEXT.PH.HB", json.dumps(body).encode(), timeout=5)
                assert reply.headers == {"Status": "400",
                                         "Description": "Bad Request - heartbeat value too large"}, body
            # exactly half is taken
            inbox = s.nc.new_inbox()
            half = await watch(s.nc, inbox)
            await s.nc.publish("$JS.API.CONSUMER.MSG.NEXT.PH.HB",
                               json.dumps({"batch": 1, "expires": 600_000_000, "idle_heartbeat": 300_000_000}
                                          ).encode(), reply=inbox)
            await apoll(lambda: half.with_status("408"), "the half-heartbeat request's 408", 10)
            assert [status_of(m) for _, m in half.items] == ["100", "408"]

    run(scenario)


def test_pull_request_heartbeats_beside_messages_and_a_full_waiting_queue(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="PH", subjects=["ph.>"])
            await s.jsm.add_consumer("PH", durable_name="ONE", ack_policy=AckPolicy.EXPLICIT, max_waiting=1)
            inbox = s.nc.new_inbox()
            first = await watch(s.nc, inbox)
            await s.nc.publish("$JS.API.CONSUMER.MSG.NEXT.PH.ONE",
                               json.dumps({"batch": 3, "expires": 3 * NS, "idle_heartbeat": 200_000_000}).encode(),
                               reply=inbox)
            await apoll(lambda: first.heartbeats(), "a heartbeat to the waiting request", 10)
            # the queue is full: a request without a heartbeat is told so, one with is not
            full = await s.nc.request("$JS.API.CONSUMER.MSG.NEXT.PH.ONE",
                                      json.dumps({"batch": 1, "expires": NS}).encode(), timeout=5)
            assert full.headers == {"Status": "409", "Description": "Exceeded MaxWaiting"}
            other = s.nc.new_inbox()
            silent = await watch(s.nc, other)
            await s.nc.publish("$JS.API.CONSUMER.MSG.NEXT.PH.ONE",
                               json.dumps({"batch": 1, "expires": NS, "idle_heartbeat": 200_000_000}).encode(),
                               reply=other)
            # a message goes to the waiting request; its heartbeats then name it
            await s.js.publish("ph.a", b"m")
            (_, msg), = await first.wait_data(1, "the message")
            assert msg.data == b"m"
            after = len(first.items)
            await apoll(lambda: [m for _, m in first.items[after:] if Arrivals.is_hb(m)], "a later heartbeat", 10)
            hb = next(m for _, m in first.items[after:] if Arrivals.is_hb(m))
            assert (hb.headers["Nats-Last-Consumer"], hb.headers["Nats-Last-Stream"]) == ("1", "1")
            await apoll(lambda: first.with_status("408"), "the first request's 408", 10)
            (_, timeout), = first.with_status("408")
            assert timeout.headers["Nats-Pending-Messages"] == "2"
            assert silent.items == [], [m.headers for _, m in silent.items]

    run(scenario)


def test_a_no_wait_request_held_by_max_ack_pending_ends_at_its_next_heartbeat(js_server):
    """nats.py's fetch of a batch (a no_wait request with an expiry and a heartbeat) from a
    consumer whose max_ack_pending stops it part-way: the messages it may take, then 404 No
    Messages when its heartbeat comes due, long before its expiry."""
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="MA", subjects=["ma.>"])
            await s.publish_many("ma.a", [str(i).encode() for i in range(9)])
            await s.jsm.add_consumer("MA", durable_name="M", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=5)
            inbox = s.nc.new_inbox()
            arrivals = await watch(s.nc, inbox)
            sent = time.monotonic()
            await s.nc.publish("$JS.API.CONSUMER.MSG.NEXT.MA.M",
                               json.dumps({"batch": 20, "expires": 2 * NS, "no_wait": True,
                                           "idle_heartbeat": 100_000_000}).encode(), reply=inbox)
            await apoll(lambda: arrivals.with_status("404"), "the request's 404", 10)
            assert [m.data for _, m in arrivals.items if not status_of(m)] == [str(i).encode() for i in range(5)]
            (at, end), = arrivals.with_status("404")
            assert end.headers == {"Status": "404", "Description": "No Messages"}
            assert at - sent < 1.5, at - sent

    run(scenario)


def test_nats_py_fetch_with_heartbeat(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="PF", subjects=["pf.>"])
            await s.publish_many("pf.a", [b"1", b"2", b"3"])
            await s.jsm.add_consumer("PF", durable_name="F", ack_policy=AckPolicy.EXPLICIT)
            psub = await s.js.pull_subscribe_bind("F", stream="PF")
            msgs = await psub.fetch(5, timeout=2, heartbeat=0.3)
            assert [m.data for m in msgs] == [b"1", b"2", b"3"]
            for m in msgs:
                await m.ack()
            # nothing to fetch: the heartbeats say the server is there
            with pytest.raises(FetchTimeoutError):
                await psub.fetch(1, timeout=1, heartbeat=0.2)
            with pytest.raises(nats.errors.TimeoutError):
                await psub.fetch(2, timeout=1, heartbeat=0.2)
            # a message published while a fetch waits reaches it
            waiting = asyncio.ensure_future(psub.fetch(1, timeout=5, heartbeat=0.2))

            async def one_waiting() -> bool:
                return (await s.jsm.consumer_info("PF", "F")).num_waiting >= 1

            await apoll(one_waiting, "the fetch waiting on the server", 5)
            await s.js.publish("pf.a", b"4")
            (msg,) = await waiting
            assert msg.data == b"4"

    run(scenario)


def test_push_flow_control_stalls_at_the_window_and_heartbeats_name_it(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="FC", subjects=["fc"])
            for _ in range(COUNT):
                await s.js.publish("fc", b"f" * FC_PAYLOAD)
            await check_flow_control(s, "FC", hb=0.3)

    run(scenario)


async def check_flow_control(s: Session, stream: str, hb: float) -> None:
    """A push consumer with flow control and ``hb`` s heartbeats on ``stream`` (COUNT messages
    of FC_PAYLOAD bytes on subject ``fc``), its flow control left unanswered: the request
    comes after the first message past half the window, delivery stops after the first
    past the window, heartbeats carry ``Nats-Consumer-Stalled``; answered, the rest comes,
    then idle heartbeats every ``hb``."""
    deliver = f"dl.{stream.lower()}"
    arrivals = await watch(s.nc, deliver)
    await asked_again(lambda: s.jsm.add_consumer(stream, durable_name="PUSH", deliver_subject=deliver,
                                                 flow_control=True, idle_heartbeat=hb), "PUSH created")

    def stalled() -> list[Msg]:
        return [m for _, m in arrivals.heartbeats() if "Nats-Consumer-Stalled" in m.headers]

    await apoll(stalled, "a heartbeat of the stalled consumer", 30)
    before = len(arrivals.data())
    order = [m for _, m in arrivals.items]
    fc = [m for m in order if Arrivals.is_fc(m)]
    assert len(fc) == 1, [m.headers for m in fc]
    request = fc[0]
    assert request.data == b"" and request.headers == {"Status": "100", "Description": "FlowControl Request"}
    assert request.reply.startswith(f"$JS.FC.{stream}.PUSH.") and len(request.reply.split(".")[-1]) == 4
    # the sizes nats-server counts: deliver subject, ack subject, headers, payload
    total, half_at, full_at = 0, None, None
    for i, m in enumerate([m for m in order if status_of(m) is None]):
        total += len(deliver) + len(m.reply) + len(m.data)
        if half_at is None and total > FC_WINDOW // 2:
            half_at = i + 1
        if full_at is None and total > FC_WINDOW:
            full_at = i + 1
    assert before == full_at, (before, full_at)
    data_before_fc = sum(1 for m in order[:order.index(request)] if status_of(m) is None)
    assert data_before_fc == half_at, (data_before_fc, half_at)
    hb_msg = stalled()[0]
    assert hb_msg.headers == {"Status": "100", "Description": "Idle Heartbeat",
                              "Nats-Last-Consumer": str(before), "Nats-Last-Stream": str(before),
                              "Nats-Consumer-Stalled": request.reply}, hb_msg.headers
    # answered: the rest comes, every later request answered at once
    arrivals.answer_flow_control = s.nc
    await s.nc.publish(request.reply, b"")
    got = await arrivals.wait_data(COUNT, "the rest after the answer")
    assert [m.metadata.sequence.stream for _, m in got] == list(range(1, COUNT + 1))
    # idle: heartbeats every hb naming the last message, not stalled
    seen = len(arrivals.items)

    def idle() -> list[tuple[float, Msg]]:
        return [(t, m) for t, m in arrivals.items[seen:] if Arrivals.is_hb(m)]

    await apoll(lambda: len(idle()) >= 3, "three idle heartbeats", 15)
    beats = idle()
    for _, m in beats:
        assert m.headers == {"Status": "100", "Description": "Idle Heartbeat",
                             "Nats-Last-Consumer": str(COUNT), "Nats-Last-Stream": str(COUNT)}, m.headers
    for (a, _), (b, _) in zip(beats, beats[1:]):
        assert 0.7 * hb <= b - a <= 2.0 * hb, [t for t, _ in beats]


# =========================================================================== cluster


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    with formed_cluster(request.param, "consumer-options", 3, jetstream=True) as c:
        yield c


async def r3_stream(s: Session, name: str, subjects: list[str], **config) -> None:
    """Create the R3 stream and wait until it has a leader (its first publish is still asked
    again: the leader's subject interest reaches the other servers a moment after)."""
    body = {"name": name, "subjects": subjects, "num_replicas": 3, **config}
    created = await asked_again(lambda: s.api(f"$JS.API.STREAM.CREATE.{name}", body), f"{name} created")
    assert "error" not in created, created

    async def led():
        info = await s.api(f"$JS.API.STREAM.INFO.{name}")
        return (info.get("cluster") or {}).get("leader")
    await apoll(led, f"{name} has a leader", 30)


async def r3_consumer(s: Session, stream: str, config: dict) -> dict:
    name = config["durable_name"]
    body = {"stream_name": stream, "config": config}
    created = await asked_again(lambda: s.api(f"$JS.API.CONSUMER.CREATE.{stream}.{name}", body),
                                f"{stream} > {name} created")
    assert "error" not in created, created
    assert created["config"]["num_replicas"] in (0, 3)
    return created


def test_replicated_replay_original_and_rate_limit(cluster):
    async def scenario():
        urls = [srv.url for srv in cluster.servers.values()]
        async with js_session(urls[0]) as s, js_session(urls[2]) as watcher:
            await r3_stream(s, "CR", ["cr.>"])
            await stored_with_gaps(s, "cr.a")
            push = await watch(watcher.nc, "dl.cr")
            inbox = watcher.nc.new_inbox()
            pull = await watch(watcher.nc, inbox)
            await r3_consumer(s, "CR", {"durable_name": "PUSH", "deliver_subject": "dl.cr",
                                        "replay_policy": "original"})
            await r3_consumer(s, "CR", {"durable_name": "PULL", "ack_policy": "explicit",
                                        "replay_policy": "original"})
            await watcher.nc.publish("$JS.API.CONSUMER.MSG.NEXT.CR.PULL",
                                     json.dumps({"batch": 4, "expires": 30 * NS}).encode(), reply=inbox)
            assert_replayed(await push.wait_data(4, "the replayed push messages"), worst=1.8)
            assert_replayed(await pull.wait_data(4, "the replayed pull messages"), worst=1.8)

            await r3_stream(s, "CL", ["cl"], max_msg_size=BURST)
            # the first asked again while the new stream has no responders (no header: the
            # rate schedule counts payloads alone)
            await asked_again(lambda: s.js.publish("cl", b"x" * PAYLOAD), "the first message stored")
            for _ in range(COUNT - 1):
                await s.js.publish("cl", b"x" * PAYLOAD)
            limited = await watch(watcher.nc, "dl.cl")
            await r3_consumer(s, "CL", {"durable_name": "RATE", "deliver_subject": "dl.cl",
                                        "rate_limit_bps": RATE * 8})
            got = await limited.wait_data(COUNT, "the rate-limited messages", timeout=60)
            assert sorted(m.metadata.sequence.stream for _, m in got) == list(range(1, COUNT + 1))
            for expected, observed in rate_schedule(got):
                assert 0.8 * expected <= observed <= 1.6 * expected + 0.4, (expected, observed)

    run(scenario, timeout=180)


def test_replicated_pull_heartbeats_and_push_flow_control(cluster):
    async def scenario():
        urls = [srv.url for srv in cluster.servers.values()]
        async with js_session(urls[0]) as s, js_session(urls[1]) as watcher:
            await r3_stream(s, "CH", ["ch.>"])
            await s.js.publish("ch.a", b"1")
            await r3_consumer(s, "CH", {"durable_name": "HB", "ack_policy": "explicit"})
            inbox = watcher.nc.new_inbox()
            arrivals = await watch(watcher.nc, inbox)
            await watcher.nc.publish("$JS.API.CONSUMER.MSG.NEXT.CH.HB",
                                     json.dumps({"batch": 2, "expires": int(1.5 * NS),
                                                 "idle_heartbeat": 300_000_000}).encode(), reply=inbox)
            await apoll(lambda: arrivals.with_status("408"), "the request's 408", 15)
            assert [m.data for _, m in arrivals.data()] == [b"1"]
            beats = arrivals.heartbeats()
            assert 2 <= len(beats) <= 4, [m.headers for _, m in arrivals.items]
            assert all((m.headers["Nats-Last-Consumer"], m.headers["Nats-Last-Stream"]) == ("1", "1")
                       for _, m in beats)
            (_, timeout), = arrivals.with_status("408")
            assert timeout.headers["Nats-Pending-Messages"] == "1"
            reply = await watcher.nc.request("$JS.API.CONSUMER.MSG.NEXT.CH.HB",
                                             json.dumps({"batch": 1, "idle_heartbeat": NS}).encode(), timeout=5)
            assert reply.headers["Description"] == "Bad Request - heartbeat value too large"

            await r3_stream(s, "CF", ["fc"])
            for _ in range(COUNT):
                await s.js.publish("fc", b"f" * FC_PAYLOAD)
            await check_flow_control(watcher, "CF", hb=0.4)

    run(scenario, timeout=180)
