"""A STREAM.CREATE of a name whose first create is proposed but not applied yet.

Several clients creating the same stream at start-up is the usual pattern (each calls
``add_stream``). nats-server's meta leader proposes a create of a name it has in flight with
the same RAFT group again, or answers 10058 for another config
(jetstream_cluster.go jsClusteredStreamRequest, streamAssignmentOrInflight). A meta leader
that is behind its log may still propose a second assignment of a name with another group:
applying it must not move the stream to a new, empty group (its acknowledged messages are
in the first), so the first assignment of a name wins on every server.

Scripted against server n1's cluster controller in the World of ``controller_world``."""

from __future__ import annotations

import json

from controller_world import T0
from test_cluster_controller import KEY, STREAM, answer, cluster

from jetraft.jetstream import errors as E
from jetraft.jetstream.meta import StreamAssignment, encode_assign_stream, group_name

CREATE = "$JS.API.STREAM.CREATE.S"
NAME_EXISTS = {"code": 400, "err_code": 10058,
               "description": "stream name already in use with a different configuration"}
LATER = T0 + 10**9


def apply_meta(w, data: bytes) -> None:
    for change in w.c.meta.apply(data):
        w.run(w.c.meta_change(change, LATER))


def created_with_a_message(w) -> str:
    """Commit the first create, elect n1 in its group, publish one message; the group."""
    w.commit_meta()
    w.elect(KEY, "n1")
    assert answer(w)["did_create"] is True
    w.request("s.a", b"hello")
    w.apply(KEY)
    assert w.take_replies() == [("_INBOX.r", {"stream": "S", "seq": 1})]
    return w.c.meta.streams[KEY].group


def test_a_second_create_in_flight_gets_the_same_group_and_the_streams_info():
    w = cluster()
    w.request(CREATE, STREAM)
    w.request(CREATE, STREAM, reply="_INBOX.r2", now=LATER)
    first, second = list(w.meta.proposals)
    assert len(w.events_named("jetstream_stream_assigned")) == 1
    w.meta.proposals = [first]
    group = created_with_a_message(w)
    w.meta.proposals = [second]
    w.commit_meta()
    assert w.c.meta.streams[KEY].group == group and w.closed == []
    ((subject, info),) = w.take_replies()
    assert subject == "_INBOX.r2" and info["type"] == E.STREAM_CREATE_RESPONSE
    assert "did_create" not in info and info["state"]["messages"] == 1


def test_a_second_create_in_flight_with_another_config_gets_10058_and_is_not_proposed():
    w = cluster()
    w.request(CREATE, STREAM)
    w.request(CREATE, {**STREAM, "subjects": ["other.>"]}, reply="_INBOX.r2", now=LATER)
    assert w.take_replies() == [("_INBOX.r2", {"type": E.STREAM_CREATE_RESPONSE, "error": NAME_EXISTS})]
    assert len(w.meta.proposals) == 1


def another_group(w, config: dict, reply: str) -> bytes:
    """What a meta leader behind its log proposes for S: an assignment with a new group."""
    sa = w.c.meta.streams[KEY]
    return encode_assign_stream(StreamAssignment(
        account="$G", name="S", config=config, peers=sa.peers, created_ns=LATER, reply=reply,
        group=group_name("S", "$G", "S", LATER, replicas=3, storage="memory")))


def test_an_assignment_of_an_assigned_name_to_another_group_changes_nothing():
    w = cluster()
    w.request(CREATE, STREAM)
    group = created_with_a_message(w)
    config = w.c.meta.streams[KEY].config
    apply_meta(w, another_group(w, config, "_INBOX.r2"))
    assert w.c.meta.streams[KEY].group == group and w.closed == []
    ((subject, info),) = w.take_replies()
    assert subject == "_INBOX.r2" and info["state"]["messages"] == 1 and "did_create" not in info

    apply_meta(w, another_group(w, {**config, "subjects": ["other.>"]}, "_INBOX.r3"))
    assert w.c.meta.streams[KEY].group == group
    assert w.take_replies() == [("_INBOX.r3", {"type": E.STREAM_CREATE_RESPONSE, "error": NAME_EXISTS})]
    w.request("s.b", b"again")
    w.apply(KEY)
    assert w.take_replies() == [("_INBOX.r", {"stream": "S", "seq": 2})]


def test_only_the_meta_leader_answers_and_a_replayed_entry_answers_nobody():
    w = cluster(meta="n2")
    w.assign("S", leader="n1")
    config = w.c.meta.streams[KEY].config
    apply_meta(w, another_group(w, config, "_INBOX.r2"))
    assert w.replies == [] and w.forwards == []
    same = dict(json.loads(json.dumps(config)))
    apply_meta(w, another_group(w, same, None))
    assert w.replies == []
