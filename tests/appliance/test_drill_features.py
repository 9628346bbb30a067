"""The zone drills' TTL and counter workloads (lab/features.py): what they record for each
outcome a client can meet (an increment acknowledged, retried after a timeout and answered
``duplicate``, never answered, refused), the ledgers' lines against the schemas the
validation reads them with, and both workloads against three jetraft servers in three
zones while the counter stream's leader is SIGKILLed: no message is served more than 1 s
after its TTL, and the counter read back is the sum of the acknowledged increments."""

from __future__ import annotations

import asyncio
import time

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.js.api import PubAck

from lab.features import (
    CounterWorkload,
    TtlMessage,
    TtlWorkload,
    counter_stream,
    rfc3339_ns,
    ttl_stream,
)
from polling import apoll

SECOND = 1_000_000_000


class FakeJetStream:
    """``publish`` answers each call with the next of ``answers``: a PubAck, or an exception
    raised; it records each call's headers."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.headers: list[dict] = []

    async def publish(self, subject, payload=b"", timeout=None, headers=None):
        self.headers.append(dict(headers))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def counter(js) -> CounterWorkload:
    return CounterWorkload(None, js, "C", "c.n", "run", retry_pause_s=0)


def test_a_stored_time_is_read_to_the_nanosecond():
    assert rfc3339_ns("2027-01-01T00:00:01.123456789Z") == 1_798_761_601_123_456_789
    assert rfc3339_ns("2027-01-01T00:00:01.5Z") == 1_798_761_601_500_000_000
    assert rfc3339_ns("2027-01-01T00:00:01+00:00") == 1_798_761_601_000_000_000
    with pytest.raises(ValueError, match="not a UTC RFC 3339 time"):
        rfc3339_ns("2027-01-01T00:00:01.5+02:00")


def test_an_increment_retried_after_a_timeout_and_answered_duplicate_counts_once():
    js = FakeJetStream(nats.errors.TimeoutError(), PubAck(stream="C", seq=7, duplicate=True))
    work = counter(js)
    assert asyncio.run(work.increment("run-c1", 4)) == "ok"
    assert js.headers == [{"Nats-Incr": "4", "Nats-Msg-Id": "run-c1"}] * 2
    assert [(a["attempt"], a["outcome"], a["duplicate"], a["stream_seq"]) for a in work.attempts] == [
        (1, "info", None, None), (2, "ok", True, 7)]
    assert work.attempts[0]["error"].startswith("TimeoutError")
    assert work.expected() == (4, 4, 1, 0)


def test_an_increment_never_answered_widens_the_range_and_a_refused_one_counts_nothing():
    refused = nats.js.errors.APIError(code=400, err_code=10171, description="message counter increment is invalid")
    js = FakeJetStream(PubAck(stream="C", seq=1, val="2"), *[nats.errors.TimeoutError()] * 3, refused,
                       PubAck(stream="C", seq=2, val="-1"))
    work = CounterWorkload(None, js, "C", "c.n", "run", attempts=3, retry_pause_s=0)

    async def go():
        return [await work.increment("a", 2), await work.increment("b", 5), await work.increment("c", 1),
                await work.increment("d", -3)]
    assert asyncio.run(go()) == ["ok", "info", "fail", "ok"]
    assert [a["attempt"] for a in work.attempts if a["msg_id"] == "b"] == [1, 2, 3]
    # acknowledged: 2 - 3; b may have counted (0..5), c did not
    assert work.expected() == (-1, 4, 2, 1)
    assert work.attempts[-1]["val"] == "-1"


def test_a_message_is_late_when_served_more_than_a_second_after_its_stored_time_plus_ttl():
    m = TtlMessage("m", 2 * SECOND, sent_ns=100 * SECOND, acked_ns=100 * SECOND + 5_000_000,
                   stream_seq=1, stored_ns=100 * SECOND + 1_000_000)
    assert m.expires_ns == 102 * SECOND + 1_000_000
    m.observations = [{"ns": 103 * SECOND, "answered_ns": 103 * SECOND + 1, "found": True, "error": None},
                      {"ns": 103 * SECOND + 2_000_000, "answered_ns": None, "found": None, "error": "timeout"},
                      {"ns": 105 * SECOND, "answered_ns": 105 * SECOND + 1, "found": True, "error": None}]
    assert [o["ns"] for o in m.late_gets()] == [105 * SECOND]
    m.stored_ns = None              # no get found it: its acknowledgement counts
    assert m.expires_ns == 102 * SECOND + 5_000_000


def test_the_ledgers_lines_have_the_fields_the_validation_reads():
    from jetraft.validation.schema import COUNTER_LEDGER, TTL_LEDGER, TTL_OBSERVATION

    ttl = TtlWorkload(None, None, "T", "t.n", "run")
    ttl.messages.append(TtlMessage("m", SECOND, 1, observations=[
        {"ns": 2, "answered_ns": 3, "found": False, "error": None}]))
    [line] = ttl.lines("kill-zone-a")
    assert list(line) == TTL_LEDGER.fieldNames()
    assert list(line["observations"][0]) == TTL_OBSERVATION.fieldNames()
    work = counter(FakeJetStream(PubAck(stream="C", seq=1, val="1")))
    asyncio.run(work.increment("a", 1))
    work.final = {"kind": "final", "msg_id": None, "incr": None, "attempt": None, "sent_ns": 1, "acked_ns": 2,
                  "stream_seq": 1, "val": "1", "duplicate": None, "outcome": "ok", "error": None}
    for line in work.lines("kill-zone-a"):
        assert list(line) == COUNTER_LEDGER.fieldNames()


# --------------------------------------------------------------------------- on a cluster


ZONES = ("a", "b", "c")


@pytest.fixture(scope="module")
def three_zones(formed_cluster):
    with formed_cluster("jetraft", "features", 3, jetstream=True, unique_tag="az:",
                        tags=[[f"az:{z}"] for z in ZONES]) as c:
        yield c


def test_ttls_expire_and_the_counter_adds_up_across_a_leader_sigkill(three_zones):
    c = three_zones

    async def go():
        nc = await nats.connect(servers=c.urls(), connect_timeout=2, ping_interval=1,
                                max_outstanding_pings=2, reconnect_time_wait=0.2,
                                max_reconnect_attempts=-1, allow_reconnect=True)
        js = nc.jetstream(timeout=2.0)
        ttl = TtlWorkload(nc, js, "F_TTL", "f.ttl", "t", ttl_s=1, interval_s=0.2, observe_interval_s=0.2,
                          observe_after_s=2.0)
        work = CounterWorkload(nc, js, "F_COUNTER", "f.counter", "t", pause_s=0.02)
        try:
            for config in (ttl_stream(ttl.stream, ttl.subject), counter_stream(work.stream, work.subject)):
                await apoll(lambda config=config: js.add_stream(config), f"stream {config.name} created",
                            timeout=60, interval=0.5, retry_on=(Exception,))
            ttl.start()
            work.start()

            def acked(after_ns: int = 0) -> int:
                return sum(1 for a in work.attempts if a["outcome"] == "ok" and a["sent_ns"] > after_ns)
            await apoll(lambda: acked() >= 20 and sum(1 for m in ttl.messages if m.acked_ns) >= 5,
                        "20 increments and 5 TTL'd messages acknowledged", timeout=60)
            leader = (await js.stream_info(work.stream)).cluster.leader
            c.kill(leader)
            killed_ns = time.time_ns()
            await apoll(lambda: acked(killed_ns) >= 20, "increments acknowledged again after the SIGKILL",
                        timeout=60)
            await asyncio.to_thread(c.restart, leader)
            await asyncio.to_thread(c.wait_formed)
            await apoll(lambda: acked(time.time_ns() - SECOND) >= 5,
                        "increments acknowledged with every server back", timeout=60)
            await asyncio.gather(ttl.stop(), work.stop())
            await apoll(work.read_final, "the counter read back", timeout=30, retry_on=(Exception,))
        finally:
            ttl.cancel()
            work.cancel()
            await nc.close()
        return ttl, work

    ttl, work = asyncio.run(go())
    acked = [m for m in ttl.messages if m.acked_ns is not None]
    assert len(acked) >= 5
    # each TTL'd message was served, and not one more than a second after its TTL passed
    assert ttl.outlived() == []
    assert all(m.stored_ns is not None and m.stored_ns <= m.acked_ns for m in acked)
    seen_gone = [m for m in acked if any(o["found"] is False for o in m.observations)]
    assert len(seen_gone) >= len(acked) // 2, [m.observations for m in acked if m not in seen_gone][:2]
    # the counter is the sum of its acknowledged increments, within what unknown ones allow
    low, high, acknowledged, unknown = work.expected()
    assert acknowledged >= 45
    assert low <= work.final_value() <= high, (work.final, low, high, unknown)
    if unknown == 0:
        assert work.final_value() == low
    lines = work.lines("d")
    assert lines[-1]["kind"] == "final" and lines[-1]["stream"] == "F_COUNTER"
