"""Mirrors and sources in a cluster, on the controller alone (jetstream/cluster/sources.py):
the sourcing stream's leader fetches from its own replica of the origin or over a route
frame to one of the origin's servers, proposes each answer as one "S" entry, and a
malformed frame from a peer is reported and dropped."""

from __future__ import annotations

import msgpack
import pytest
from controller_world import T0, World

from jetraft.jetstream.cluster import ANSWER_FRAME, FETCH_FRAME
from jetraft.jetstream.replicated import SOURCED, decode_entry
from jetraft.jetstream.sourcing import FETCH_TIMEOUT_NS, FetchAnswer, FetchRequest

MS = 1_000_000


def cluster() -> World:
    w = World({"n1": (), "n2": (), "n3": ()})
    w.meta_leader("n1")
    return w


def entries(w: World, key) -> list[list]:
    return [decode_entry(d) for d in w.groups[key].proposals]


def test_a_mirror_whose_origin_is_elsewhere_asks_an_origin_server_and_proposes_its_answer():
    w = cluster()
    w.assign("O", peers=("n2",))                                  # the origin: not on this server
    mirror = w.assign("M", subjects=(), peers=("n1",), leader="n1", mirror={"name": "O"})
    w.tick(1, now=T0 + MS)
    (server, kind, body), = w.frames
    assert (server, kind) == ("n2", FETCH_FRAME)
    account, stream, iname, wire = msgpack.unpackb(body, raw=False)
    assert (account, stream, iname) == ("$G", "M", "O > >")
    assert FetchRequest.from_wire(wire).start_seq == 1
    w.tick(2, now=T0 + 2 * MS)                                    # one fetch at a time
    assert len(w.frames) == 1
    answer = FetchAnswer(((1, "o.a", None, b"one", T0), (3, "o.b", None, b"three", T0 + 1)), 4, 0, None, "ID")
    w.run(w.c.source_answer("n2", msgpack.packb(["$G", "M", iname, answer.to_wire()]), T0 + 3 * MS))
    (entry,) = entries(w, mirror)
    assert entry[0] == SOURCED and entry[3] == iname and [m[0] for m in entry[4].msgs] == [1, 3]
    w.apply(mirror)
    st = w.accounts["$G"].streams["M"].stream.store.state()
    assert (st.messages, st.first_seq, st.last_seq) == (2, 1, 3)
    w.tick(3, now=T0 + 4 * MS + 250 * MS)                         # caught up: asks again later
    assert FetchRequest.from_wire(msgpack.unpackb(w.frames[-1][2], raw=False)[3]).start_seq == 4


def test_an_unanswered_fetch_is_asked_of_another_origin_server():
    w = cluster()
    w.assign("O", peers=("n2", "n3"))
    w.assign("M", subjects=(), peers=("n1",), leader="n1", mirror={"name": "O"})
    w.tick(1, now=T0)
    w.tick(2, now=T0 + FETCH_TIMEOUT_NS)
    assert [f[0] for f in w.frames] == ["n2", "n3"]


def test_a_source_whose_origin_is_here_is_fed_from_the_local_replica():
    w = cluster()
    origin = w.assign("O", peers=("n1", "n2", "n3"), leader="n1")
    w.request("o.a", b"hello")
    w.apply(origin)
    sourced = w.assign("S", subjects=("s",), peers=("n1", "n2", "n3"), leader="n1", sources=[{"name": "O"}])
    w.tick(1, now=T0 + MS)
    assert w.frames == []
    (entry,) = entries(w, sourced)
    assert entry[0] == SOURCED and [m[3] for m in entry[4].msgs] == [b"hello"]


def test_a_fetch_for_a_stream_not_held_here_is_answered_not_found():
    w = cluster()
    req = FetchRequest("NOPE", 1, None, (">",))
    w.run(w.c.source_fetch("n2", msgpack.packb(["$G", "M", "NOPE > >", req.to_wire()]), T0))
    (server, kind, body), = w.frames
    assert (server, kind) == ("n2", ANSWER_FRAME)
    assert FetchAnswer.from_wire(msgpack.unpackb(body, raw=False)[3]).error["err_code"] == 10059


@pytest.mark.parametrize("body", [b"\xc1", msgpack.packb([1, 2]), msgpack.packb(["$G", "M", "i", ["O", -1]]),
                                  msgpack.packb(["$G", 5, "i", ["O", 1, None, [">"], "", 1, 1]])])
def test_a_malformed_frame_from_a_peer_is_reported_and_dropped(body):
    w = cluster()
    for handle, kind in ((w.c.source_fetch, FETCH_FRAME), (w.c.source_answer, ANSWER_FRAME)):
        w.run(handle("n2", body, T0))
    assert w.frames == []
    assert [f["message"].split(":")[0] for f in w.events_named("config_warning")] == [
        f"malformed {FETCH_FRAME} frame from n2", f"malformed {ANSWER_FRAME} frame from n2"]
