"""STREAM.INFO ``subjects_filter`` paging and ``deleted_details``, against jetraft and
nats-server.

nats-server server/jetstream_api.go ``jsStreamInfoRequest``: with a ``subjects_filter``
that matches, the reply's ``total`` is the number of matching subjects, ``offset`` the one
asked (a negative one as 0), ``limit`` ``JSMaxSubjectDetails`` (100,000) and
``state.subjects`` the page of the sorted subjects from ``offset`` (none past the end); when
nothing matches, or without a filter, all three are 0. A page of 100,000 subjects needs
more than 100,000 subjects, too many to publish to both servers here: the offsets are
compared on a few subjects, and the page size is checked in-process
(tests/unit/jetstream_api/test_api_stream_info_pages.py).

``deleted_details`` is compared on small gaps only (nats-server lists every deleted
sequence: never ask it about a huge gap): deletes, a filtered purge that empties whole
blocks, a purge to a far sequence.
"""

from __future__ import annotations

from compat_support import run
from js_support import STREAM_INFO_RESPONSE, js_session

LIMIT = 100_000         # nats-server JSMaxSubjectDetails


def paging(reply: dict) -> tuple[int, int, int]:
    return reply["total"], reply["offset"], reply["limit"]


def test_subject_pages_from_an_offset(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="P", subjects=["p.>"])
            for subject in ["p.c", "p.a", "p.b", "p.a", "p.d", "p.x.1"]:
                await s.js.publish(subject, b"m")
            counts = {"p.a": 2, "p.b": 1, "p.c": 1, "p.d": 1, "p.x.1": 1}

            reply = await s.api("$JS.API.STREAM.INFO.P", {"subjects_filter": ">"})
            assert reply["type"] == STREAM_INFO_RESPONSE
            assert paging(reply) == (5, 0, LIMIT)
            assert reply["state"]["subjects"] == counts
            # from an offset: the sorted subjects after the first ``offset``
            reply = await s.api("$JS.API.STREAM.INFO.P", {"subjects_filter": "p.*", "offset": 1})
            assert paging(reply) == (4, 1, LIMIT)
            assert reply["state"]["subjects"] == {"p.b": 1, "p.c": 1, "p.d": 1}
            reply = await s.api("$JS.API.STREAM.INFO.P", {"subjects_filter": ">", "offset": 4})
            assert paging(reply) == (5, 4, LIMIT)
            assert reply["state"]["subjects"] == {"p.x.1": 1}
            # at and past the end: the offset as asked, no subjects
            for offset in (5, 1_000_000):
                reply = await s.api("$JS.API.STREAM.INFO.P", {"subjects_filter": ">", "offset": offset})
                assert paging(reply) == (5, offset, LIMIT)
                assert "subjects" not in reply["state"]
                assert reply["state"]["num_subjects"] == 5
            # a negative offset counts as 0
            reply = await s.api("$JS.API.STREAM.INFO.P", {"subjects_filter": ">", "offset": -2})
            assert paging(reply) == (5, 0, LIMIT)
            assert reply["state"]["subjects"] == counts
            # a filter nothing matches, and no filter: all three 0
            reply = await s.api("$JS.API.STREAM.INFO.P", {"subjects_filter": "q.>", "offset": 2})
            assert paging(reply) == (0, 0, 0)
            assert "subjects" not in reply["state"]
            reply = await s.api("$JS.API.STREAM.INFO.P", {"offset": 3})
            assert paging(reply) == (0, 0, 0)
            assert "subjects" not in reply["state"]
            # nats-py sends the offset too
            info = await s.jsm.stream_info("P", subjects_filter="p.a")
            assert info.state.subjects == {"p.a": 2}

    run(scenario)


def test_deleted_details_of_small_gaps(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="D", subjects=["d.>"])
            await s.js.publish("d.keep", b"first")
            for _ in range(5):
                await s.js.publish("d.drop", b"x")
            await s.js.publish("d.keep", b"middle")
            # messages of nearly 1 MB: a few fill a block (jetraft and nats-server: 8 MB),
            # so the purge below empties whole blocks
            big = b"y" * 900_000
            for _ in range(20):
                await s.js.publish("d.big", big)
            await s.js.publish("d.keep", b"last")
            assert (await s.api("$JS.API.STREAM.PURGE.D", {"filter": "d.drop"}))["purged"] == 5
            assert (await s.api("$JS.API.STREAM.PURGE.D", {"filter": "d.big"}))["purged"] == 20
            assert await s.jsm.delete_msg("D", 7) is True
            reply = await s.api("$JS.API.STREAM.INFO.D", {"deleted_details": True})
            st = reply["state"]
            assert (st["messages"], st["first_seq"], st["last_seq"]) == (2, 1, 28)
            assert st["deleted"] == list(range(2, 28))
            assert st["num_deleted"] == 26

            # a purge to a far sequence moves the first sequence there: nothing deleted
            far = 10**12
            await s.api("$JS.API.STREAM.PURGE.D", {"seq": far})
            ack = await s.js.publish("d.keep", b"far")
            assert ack.seq == far
            reply = await s.api("$JS.API.STREAM.INFO.D", {"deleted_details": True})
            st = reply["state"]
            assert (st["messages"], st["first_seq"], st["last_seq"]) == (1, far, far)
            assert st.get("num_deleted", 0) == 0
            assert "deleted" not in st
            # a gap after it: the message in the middle deleted
            await s.js.publish("d.keep", b"a")
            await s.js.publish("d.keep", b"b")
            assert await s.jsm.delete_msg("D", far + 1) is True
            reply = await s.api("$JS.API.STREAM.INFO.D", {"deleted_details": True})
            st = reply["state"]
            assert (st["messages"], st["num_deleted"], st["deleted"]) == (2, 1, [far + 1])

    run(scenario)
