"""Retention policies on jetraft and nats-server: workqueue and interest streams.

A workqueue stream forgets a message once its consumer acknowledges it and allows one
consumer per subject partition; an interest stream keeps a message while some consumer still
has to acknowledge it, and keeps nothing when nobody is interested.
"""

from __future__ import annotations

from compat_support import run
from js_support import api_error, error_triple, js_session
from nats.js.api import AckPolicy, DeliverPolicy, RetentionPolicy
from polling import apoll


async def _messages(s, stream: str) -> int:
    return (await s.jsm.stream_info(stream)).state.messages


async def _holds(s, stream: str, n: int) -> bool:
    """True when ``stream`` holds ``n`` messages; an AssertionError with the count if not."""
    got = await _messages(s, stream)
    assert got == n, f"{stream} holds {got} messages"
    return True


def test_workqueue_forgets_acknowledged_messages(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="WQ", subjects=["wq.>"], retention=RetentionPolicy.WORK_QUEUE)
            assert await s.publish_many("wq.job", [b"1", b"2", b"3"]) == [1, 2, 3]
            await s.jsm.add_consumer("WQ", durable_name="workers", ack_policy=AckPolicy.EXPLICIT)
            psub = await s.js.pull_subscribe_bind("workers", stream="WQ")
            msgs = await psub.fetch(3, timeout=5)
            assert [m.data for m in msgs] == [b"1", b"2", b"3"]
            await msgs[0].ack_sync()
            await msgs[2].ack_sync()
            await apoll(lambda: _holds(s, "WQ", 1), "two acked jobs removed", 5, retry_on=(AssertionError,))
            info = await s.jsm.stream_info("WQ")
            assert (info.state.first_seq, info.state.last_seq) == (2, 3)
            await msgs[1].ack_sync()
            await apoll(lambda: _holds(s, "WQ", 0), "every job removed", 5, retry_on=(AssertionError,))

    run(scenario)


def test_workqueue_refuses_a_second_unfiltered_consumer_and_non_explicit_acks(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="WQ", subjects=["wq.>"], retention=RetentionPolicy.WORK_QUEUE)
            err = await api_error(s.jsm.add_consumer("WQ", durable_name="none", ack_policy=AckPolicy.NONE))
            # A pull consumer is refused by the config check first (10084), before the
            # workqueue rule proper (10098) is reached.
            assert error_triple(err) == (400, 10084,
                                         "consumer in pull mode requires explicit ack policy on workqueue stream")
            err = await api_error(s.jsm.add_consumer("WQ", durable_name="last", ack_policy=AckPolicy.EXPLICIT,
                                                     deliver_policy=DeliverPolicy.LAST))
            assert error_triple(err) == (400, 10101, "consumer must be deliver all on workqueue stream")
            await s.jsm.add_consumer("WQ", durable_name="a", ack_policy=AckPolicy.EXPLICIT, filter_subject="wq.a")
            err = await api_error(s.jsm.add_consumer("WQ", durable_name="all", ack_policy=AckPolicy.EXPLICIT))
            assert error_triple(err) == (400, 10099, "multiple non-filtered consumers not allowed on workqueue stream")
            err = await api_error(s.jsm.add_consumer("WQ", durable_name="a2", ack_policy=AckPolicy.EXPLICIT,
                                                     filter_subject="wq.*"))
            assert error_triple(err) == (400, 10100, "filtered consumer not unique on workqueue stream")
            await s.jsm.add_consumer("WQ", durable_name="b", ack_policy=AckPolicy.EXPLICIT, filter_subject="wq.b")
            assert sorted(c.name for c in await s.jsm.consumers_info("WQ")) == ["a", "b"]

    run(scenario)


def test_interest_keeps_messages_until_every_consumer_acked(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="IN", subjects=["in.>"], retention=RetentionPolicy.INTEREST)
            # Nobody is interested yet: the publish is acknowledged, nothing is kept.
            assert (await s.js.publish("in.x", b"lost")).seq == 1
            assert await _messages(s, "IN") == 0
            for name in ("a", "b"):
                await s.jsm.add_consumer("IN", durable_name=name, ack_policy=AckPolicy.EXPLICIT)
            assert await s.publish_many("in.x", [b"m2", b"m3"]) == [2, 3]
            assert await _messages(s, "IN") == 2
            a = await s.js.pull_subscribe_bind("a", stream="IN")
            b = await s.js.pull_subscribe_bind("b", stream="IN")
            for msg in await a.fetch(2, timeout=5):
                await msg.ack_sync()
            info = await s.jsm.consumer_info("IN", "a")
            assert info.ack_floor.stream_seq == 3
            assert await _messages(s, "IN") == 2        # b still has to acknowledge both
            first = (await b.fetch(1, timeout=5))[0]
            await first.ack_sync()
            await apoll(lambda: _holds(s, "IN", 1), "m2 acked by both consumers", 5, retry_on=(AssertionError,))
            await s.jsm.delete_consumer("IN", "b")
            await apoll(lambda: _holds(s, "IN", 0), "no interest left in m3", 5, retry_on=(AssertionError,))

    run(scenario)


def test_workqueue_filters_are_checked_for_overlap_without_comparing_every_pair(js_server):
    """Three consumers of 3,000 filters each, then a fourth whose last filter overlaps one of
    theirs: refused (10100); one that overlaps nothing is created. Comparing every pair would
    be 27 million comparisons per create."""
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="WQ", subjects=["wq.>"], retention=RetentionPolicy.WORK_QUEUE)
            for c in range(3):
                await s.jsm.add_consumer("WQ", durable_name=f"c{c}", ack_policy=AckPolicy.EXPLICIT,
                                         filter_subjects=[f"wq.{c}.{i}" for i in range(3000)])
            clash = [f"wq.9.{i}" for i in range(2999)] + ["wq.*.2999"]
            err = await api_error(s.jsm.add_consumer("WQ", durable_name="clash", ack_policy=AckPolicy.EXPLICIT,
                                                     filter_subjects=clash))
            assert error_triple(err) == (400, 10100, "filtered consumer not unique on workqueue stream")
            await s.jsm.add_consumer("WQ", durable_name="apart", ack_policy=AckPolicy.EXPLICIT,
                                     filter_subjects=[f"wq.9.{i}" for i in range(3000)])
            assert sorted(c.name for c in await s.jsm.consumers_info("WQ")) == ["apart", "c0", "c1", "c2"]

    run(scenario)
