"""Which server answers each clustered ``$JS.API`` request, and what the requester gets.

Scripted against the cluster controller (jetraft.jetstream.cluster) of server n1 in the
World of ``controller_world``: fake RAFT groups and route peers, no socket, no trio. Each
case says what a client on n1 (or a request forwarded to n1) sees: the reply's type, error
code and fields, or where the request goes (forwarded to which server, proposed to which
group, or not taken: the route layer or no-responders deals with it). Where nats-server
does the same: jetstream_api.go (which server answers) and jetstream_cluster.go.
"""

from __future__ import annotations

import dataclasses
import json

import msgpack
import pytest
from controller_world import T0, World

from jetraft.jetstream import errors as E
from jetraft.jetstream.api_subjects import peer_hash
from jetraft.jetstream.cluster import (
    BOOTSTRAP_SETTLE_NS,
    EXPIRY_CHECK_NS,
    MAX_HOPS,
    META_GROUP,
    RESTORE_PROPOSED_NS,
    ChangePeer,
    ClusterController,
    ForwardedRequest,
    StepDown,
)
from jetraft.jetstream.meta import encode_remove_server
from jetraft.jetstream.meta_members import MetaHello
from jetraft.jetstream.model import AccountLimits
from jetraft.jetstream.replicated import ACK, API, FLOW_CONTROL, PUBLISH, TICK, decode_entry

R = "_INBOX.r"
KEY = ("$G", "S")
UNAVAILABLE = {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}
NOT_FOUND = {"code": 404, "err_code": 10059, "description": "stream not found"}
STREAM = {"name": "S", "subjects": ["s.>"], "num_replicas": 3, "storage": "memory", "allow_direct": True}
DURABLE = {"stream_name": "S", "config": {"durable_name": "c", "ack_policy": "explicit"}}
PAGED = {"total": 0, "offset": 0, "limit": 0}
#: the fields nats-server's error responses of these types still carry
ERROR_FIELDS = {E.STREAM_PURGE_RESPONSE: {"purged": 0}, E.STREAM_INFO_RESPONSE: PAGED,
                E.CONSUMER_NAMES_RESPONSE: {**PAGED, "consumers": []},
                E.CONSUMER_LIST_RESPONSE: {**PAGED, "consumers": []}}


def raw(body) -> bytes:
    return b"" if body is None else json.dumps(body).encode()


def answer(w: World) -> dict | bytes:
    """The one message sent to the requester's inbox since the last look."""
    ((subject, body),) = w.take_replies()
    assert subject == R
    return body


def entries(w: World, key=KEY) -> list[list]:
    """The entries proposed to the stream group of ``key`` so far (decoded)."""
    return [decode_entry(d) for d in w.groups[key].proposals]


def untouched(w: World) -> bool:
    """Nothing was sent, forwarded, proposed or stepped down anywhere."""
    return (not w.replies and not w.forwards and not (w.meta and w.meta.proposals)
            and not any(g.proposals for g in w.groups.values()) and not w.stepdowns)


def cluster(meta: str | None = "n1", servers=("n1", "n2", "n3"), **kw) -> World:
    w = World({n: () for n in servers}, **kw)
    w.meta_leader(meta, peers=tuple(servers))
    return w


def with_stream(meta: str | None = "n1", leader: str | None = "n1", **kw) -> World:
    """A cluster where stream S (R3 on n1-n3, allow_direct) has one message and the durable
    consumer c, and ``leader`` leads its group."""
    w = cluster(meta)
    w.assign("S", leader="n1", allow_direct=True, **kw)
    w.request("$JS.API.CONSUMER.DURABLE.CREATE.S.c", DURABLE)
    w.request("s.a", b"hello")
    w.apply(KEY)
    w.take_replies()
    if leader != "n1":
        w.elect(KEY, leader, term=2)
    w.interest_changes.clear()
    return w


# ------------------------------------------------------------------ requests for the meta leader

META = [
    pytest.param("$G", "$JS.API.STREAM.CREATE.S", STREAM, E.STREAM_CREATE_RESPONSE, {}, id="STREAM.CREATE"),
    pytest.param("$G", "$JS.API.STREAM.UPDATE.S", STREAM, E.STREAM_UPDATE_RESPONSE, {}, id="STREAM.UPDATE"),
    pytest.param("$G", "$JS.API.STREAM.DELETE.S", None, E.STREAM_DELETE_RESPONSE, {}, id="STREAM.DELETE"),
    pytest.param("$G", "$JS.API.STREAM.NAMES", None, E.STREAM_NAMES_RESPONSE, {**PAGED, "streams": None},
                 id="STREAM.NAMES"),
    pytest.param("$G", "$JS.API.STREAM.LIST", None, E.STREAM_LIST_RESPONSE, {**PAGED, "streams": []},
                 id="STREAM.LIST"),
    pytest.param("$G", "$JS.API.STREAM.PEER.REMOVE.S", {"peer": "n2"}, E.STREAM_REMOVE_PEER_RESPONSE, {},
                 id="STREAM.PEER.REMOVE"),
    pytest.param("$G", "$JS.API.INFO", None, E.ACCOUNT_INFO_RESPONSE, {}, id="INFO"),
    pytest.param("$SYS", "$JS.API.META.LEADER.STEPDOWN", None, E.META_LEADER_STEPDOWN_RESPONSE, {},
                 id="META.LEADER.STEPDOWN"),
    pytest.param("$SYS", "$JS.API.SERVER.REMOVE", {"peer": "n3"}, E.META_SERVER_REMOVE_RESPONSE, {},
                 id="SERVER.REMOVE"),
]


@pytest.mark.parametrize(("account", "subject", "body", "rtype", "extras"), META)
def test_on_a_follower_a_meta_request_is_forwarded_to_the_meta_leader(account, subject, body, rtype, extras):
    w = cluster(meta="n2")
    assert w.request(subject, body, account=account) is True
    assert w.forwards == [("n2", ForwardedRequest(1, False, account, subject, R, None, raw(body), "n1"))]
    assert w.replies == []


@pytest.mark.parametrize(("account", "subject", "body", "rtype", "extras"), META)
def test_a_meta_request_forwarded_through_another_server_keeps_its_origin(account, subject, body, rtype,
                                                                          extras):
    w = cluster(meta="n2")
    frame = ForwardedRequest(1, False, account, subject, R, None, raw(body), "n3").pack()
    assert w.receive("n3", frame) is True
    assert w.forwards == [("n2", ForwardedRequest(2, False, account, subject, R, None, raw(body), "n3"))]


@pytest.mark.parametrize("situation", ["forwarded MAX_HOPS times", "leader unreachable", "no meta leader",
                                       "no meta group yet"])
@pytest.mark.parametrize(("account", "subject", "body", "rtype", "extras"), META)
def test_a_meta_request_that_cannot_reach_a_meta_leader_gets_10008(situation, account, subject, body, rtype,
                                                                   extras):
    w = cluster(meta="n2")
    hops = 0
    if situation == "forwarded MAX_HOPS times":
        hops = MAX_HOPS
    elif situation == "leader unreachable":
        w.unreachable.add("n2")
    elif situation == "no meta leader":
        w.meta_leader(None)
    else:
        w.meta = None
    assert w.request(subject, body, account=account, hops=hops) is True
    assert answer(w) == {"type": rtype, "error": UNAVAILABLE, **extras}
    assert w.forwards == []


@pytest.mark.parametrize(("account", "subject", "body", "rtype", "extras"), META)
def test_a_meta_request_without_a_reply_subject_is_not_answered(account, subject, body, rtype, extras):
    w = cluster(meta=None)
    assert w.request(subject, body, account=account, reply=None) is True
    assert untouched(w)


# ------------------------------------------------------------------ on the meta leader

def test_stream_create_is_proposed_and_answered_by_the_new_leader_once_elected():
    w = cluster()
    assert w.request("$JS.API.STREAM.CREATE.S", STREAM) is True
    assert (w.replies, len(w.meta.proposals)) == ([], 1)
    (assigned,) = w.events_named("jetstream_stream_assigned")
    assert sorted(assigned["peers"]) == ["n1", "n2", "n3"]
    w.commit_meta()
    assert KEY in w.replicas and w.replies == []     # placed here, no leader yet
    w.elect(KEY, "n1")
    created = answer(w)
    assert (created["type"], created["did_create"], created["config"]["subjects"]) == (
        E.STREAM_CREATE_RESPONSE, True, ["s.>"])


def test_stream_create_elected_elsewhere_is_not_answered_here():
    w = cluster()
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    w.commit_meta()
    w.elect(KEY, "n2")
    assert w.replies == []      # n2 answers it
    w.elect(KEY, "n1")
    assert w.replies == []      # nor later, when leadership comes here


def test_stream_create_refused_by_the_meta_group_at_once_gets_10008():
    w = cluster()
    w.meta.refuse = True
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    assert answer(w) == {"type": E.STREAM_CREATE_RESPONSE, "error": UNAVAILABLE}


@pytest.mark.parametrize(("body", "error"), [
    pytest.param({**STREAM, "subjects": ["other.>"]},
                 {"code": 400, "err_code": 10058,
                  "description": "stream name already in use with a different configuration"},
                 id="name-exists-other-config"),
    pytest.param({"name": "T", "subjects": ["s.a"], "storage": "memory"},
                 {"code": 400, "err_code": 10065, "description": "subjects overlap with an existing stream"},
                 id="subjects-overlap"),
])
def test_stream_create_conflicting_with_an_assignment_is_refused(body, error):
    w = cluster()
    w.assign("S", leader="n1")
    w.request(f"$JS.API.STREAM.CREATE.{body['name']}", body)
    assert answer(w) == {"type": E.STREAM_CREATE_RESPONSE, "error": error}
    assert w.meta.proposals == []


def test_stream_create_that_cannot_be_placed_gets_10005_with_the_reason():
    w = World({"n1": ("az:a",), "n2": ("az:a",), "n3": ("az:b",)}, unique_tag="az:")
    w.meta_leader("n1")
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    (failed,) = w.events_named("jetstream_placement_failed")
    assert failed["reason"]
    assert answer(w) == {"type": E.STREAM_CREATE_RESPONSE,
                         "error": {"code": 400, "err_code": 10005, "description": failed["reason"]}}
    assert w.meta.proposals == []


def test_stream_create_of_an_existing_stream_with_its_config_answers_its_info_from_its_leader():
    w = with_stream()
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    info = answer(w)
    assert info["type"] == E.STREAM_CREATE_RESPONSE and "did_create" not in info
    assert info["state"]["messages"] == 1
    w.elect(KEY, "n2", term=2)
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    assert w.forwards == [("n2", ForwardedRequest(1, True, "$G", "$JS.API.STREAM.CREATE.S", R, None,
                                                  raw(STREAM), "n1"))]


def test_stream_create_sent_by_the_meta_leader_is_answered_by_the_stream_leader_or_passed_on():
    w = with_stream(meta="n2")
    assert w.request("$JS.API.STREAM.CREATE.S", STREAM, hops=1, via_meta=True) is True
    assert answer(w)["config"]["name"] == "S"
    w.elect(KEY, "n3", term=2)
    w.request("$JS.API.STREAM.CREATE.S", STREAM, hops=1, via_meta=True)
    assert [(s, f.hops, f.via_meta) for s, f in w.forwards] == [("n3", 2, True)]


def test_stream_update_is_proposed_to_the_meta_group_and_the_stream_and_answered_once_applied():
    w = with_stream()
    update = {**STREAM, "subjects": ["s.>", "u"]}
    assert w.request("$JS.API.STREAM.UPDATE.S", update) is True
    assert len(w.meta.proposals) == 1 and w.replies == []
    ((kind, _ts, _interest, subject, reply, _h, payload),) = entries(w)
    assert (kind, subject, reply, json.loads(payload)["subjects"]) == (API, "$JS.API.STREAM.UPDATE.S", R,
                                                                       ["s.>", "u"])
    w.apply(KEY)
    updated = answer(w)
    assert (updated["type"], updated["config"]["subjects"]) == (E.STREAM_UPDATE_RESPONSE, ["s.>", "u"])


def test_stream_update_on_the_meta_leader_goes_on_to_the_stream_leader():
    w = with_stream(leader="n3")
    w.request("$JS.API.STREAM.UPDATE.S", {**STREAM, "subjects": ["s.>", "u"]})
    assert len(w.meta.proposals) == 1
    assert [(s, f.hops, f.via_meta, f.subject) for s, f in w.forwards] == [
        ("n3", 1, True, "$JS.API.STREAM.UPDATE.S")]


@pytest.mark.parametrize(("subject", "body", "error"), [
    pytest.param("$JS.API.STREAM.UPDATE.X", {**STREAM, "name": "X", "subjects": ["x"]}, NOT_FOUND,
                 id="not-found"),
    pytest.param("$JS.API.STREAM.UPDATE.S", {**STREAM, "num_replicas": 1},
                 {"code": 400, "err_code": 10061, "description": "Replicas configuration can not be updated"},
                 id="replicas-change"),
    pytest.param("$JS.API.STREAM.UPDATE.S", {**STREAM, "subjects": ["s.>", "t.a"]},
                 {"code": 400, "err_code": 10065, "description": "subjects overlap with an existing stream"},
                 id="overlap-with-a-stream-held-elsewhere"),
])
def test_stream_update_refused_by_the_meta_leader_is_not_proposed(subject, body, error):
    w = with_stream()
    w.assign("T", subjects=("t.>",), peers=("n2", "n3", "n4"))     # no replica here
    w.request(subject, body)
    assert answer(w) == {"type": E.STREAM_UPDATE_RESPONSE, "error": error}
    assert w.meta.proposals == [] and w.groups[KEY].proposals == []


def test_stream_delete_is_answered_once_applied_and_the_replica_closes():
    w = with_stream()
    assert w.request("$JS.API.STREAM.DELETE.S") is True
    assert w.replies == [] and len(w.meta.proposals) == 1
    w.commit_meta()
    assert answer(w) == {"type": E.STREAM_DELETE_RESPONSE, "success": True}
    assert KEY not in w.replicas and [(c.key, c.delete) for c in w.closed] == [(KEY, True)]
    (dropped,) = w.interest_changes
    assert "s.>" in dropped.remove and "$JS.API.STREAM.INFO.S" in dropped.remove and not dropped.add


@pytest.mark.parametrize(("subject", "body", "error"), [
    pytest.param("$JS.API.STREAM.DELETE.X", None, NOT_FOUND, id="not-found"),
    pytest.param("$JS.API.STREAM.DELETE.S", {"x": 1},
                 {"code": 400, "err_code": 10038, "description": "expected an empty request payload"},
                 id="non-empty-request"),
])
def test_stream_delete_refused(subject, body, error):
    w = with_stream()
    w.request(subject, body)
    assert answer(w) == {"type": E.STREAM_DELETE_RESPONSE, "error": error}
    assert w.meta.proposals == []


def test_stream_names_and_list_come_from_the_assignments_at_once():
    w = with_stream()
    w.assign("T", subjects=("t.>",), peers=("n2", "n3", "n4"))
    w.request("$JS.API.STREAM.NAMES")
    assert answer(w) == {"type": E.STREAM_NAMES_RESPONSE, "total": 2, "offset": 0, "limit": 1024,
                         "streams": ["S", "T"]}
    w.request("$JS.API.STREAM.NAMES", {"subject": "t.x"})
    assert answer(w)["streams"] == ["T"]
    w.request("$JS.API.STREAM.LIST")
    listed = answer(w)
    assert (listed["type"], listed["total"], listed["limit"]) == (E.STREAM_LIST_RESPONSE, 2, 256)
    s, t = listed["streams"]
    assert (s["config"]["name"], s["state"]["messages"]) == ("S", 1)     # a replica here
    assert (t["config"]["name"], t["state"]["messages"], t["cluster"]) == ("T", 0, {"name": "c1"})


@pytest.mark.parametrize(("subject", "streams"), [
    ("$JS.API.STREAM.NAMES", lambda body: body["streams"]),
    ("$JS.API.STREAM.LIST", lambda body: [s["config"]["name"] for s in body["streams"]]),
    ("$JS.API.INFO", lambda body: body["streams"]),
], ids=["NAMES", "LIST", "INFO"])
def test_the_meta_leader_answers_a_read_once_the_meta_group_confirms_it_leads(subject, streams):
    """A meta leader cut off while another was elected must not list what it holds: an
    assignment made since is in the answer once confirmed (ReadIndex on the meta group)."""
    w = with_stream()
    w.reads_confirm_at_once = False
    w.request(subject)
    assert w.replies == []
    (read,) = w.reads
    assert read.group == META_GROUP
    w.assign("T", subjects=("t.>",), peers=("n2", "n3", "n4"))
    w.confirm_reads()
    assert streams(answer(w)) in (["S", "T"], 2)


def test_a_meta_read_the_meta_group_refuses_gets_10008():
    w = with_stream()
    w.meta.refuse = True
    w.request("$JS.API.STREAM.NAMES")
    body = answer(w)
    assert (body["type"], body["error"]) == (E.STREAM_NAMES_RESPONSE, UNAVAILABLE)


def test_a_stream_assigned_while_its_not_found_waited_for_confirmation_is_taken_up():
    """"stream not found" is said only once the meta group confirms: a stream assigned
    meanwhile is answered by its leader."""
    w = cluster()
    w.reads_confirm_at_once = False
    w.request("$JS.API.STREAM.INFO.S")
    assert w.replies == [] and [r.group for r in w.reads] == [META_GROUP]
    w.assign("S", leader="n1")
    w.reads_confirm_at_once = True
    w.confirm_reads()
    info = answer(w)
    assert (info["type"], info["config"]["name"]) == (E.STREAM_INFO_RESPONSE, "S")


def test_account_info_counts_every_assigned_stream():
    w = with_stream()
    w.assign("T", subjects=("t.>",), peers=("n2", "n3", "n4"))
    w.request("$JS.API.INFO")
    info = answer(w)
    assert (info["type"], info["streams"], info["consumers"]) == (E.ACCOUNT_INFO_RESPONSE, 2, 1)


def test_stream_peer_remove_places_a_replacement_and_answers_once_applied():
    w = cluster(servers=("n1", "n2", "n3", "n4"))
    w.assign("S", peers=("n1", "n2", "n3"), leader="n1")
    assert w.request("$JS.API.STREAM.PEER.REMOVE.S", {"peer": "n2"}) is True
    (removed,) = w.events_named("jetstream_peer_removed")
    assert (removed["peer"], removed["replacement"]) == ("n2", "n4")
    assert w.replies == []
    w.commit_meta()
    assert answer(w) == {"type": E.STREAM_REMOVE_PEER_RESPONSE, "success": True}
    assert set(w.c.meta.streams[KEY].peers) == {"n1", "n3", "n4"}


@pytest.mark.parametrize(("stream", "body", "error"), [
    pytest.param("S", {"peer": "n9"}, {"code": 400, "err_code": 10040, "description": "peer not a member"},
                 id="not-a-member"),
    pytest.param("S", {"peer": "n2"}, {"code": 503, "err_code": 10075, "description":
                 "peer remap failed: no suitable peers for placement (no server outside n1, n2, n3)"},
                 id="no-server-to-replace-it"),
    pytest.param("S", {}, {"code": 400, "err_code": 10003, "description": "bad request"}, id="no-peer"),
    pytest.param("X", {"peer": "n2"}, NOT_FOUND, id="not-found"),
])
def test_stream_peer_remove_refused(stream, body, error):
    w = with_stream()
    w.request(f"$JS.API.STREAM.PEER.REMOVE.{stream}", body)
    assert answer(w) == {"type": E.STREAM_REMOVE_PEER_RESPONSE, "error": error}
    assert w.meta.proposals == []


@pytest.mark.parametrize(("to", "expected"), [
    ("n2", {"type": E.META_LEADER_STEPDOWN_RESPONSE, "success": True}),
    (None, {"type": E.META_LEADER_STEPDOWN_RESPONSE, "error": UNAVAILABLE}),
])
def test_meta_leader_stepdown_hands_the_meta_group_over(to, expected):
    w = cluster()
    w.step_down_to = to
    assert w.request("$JS.API.META.LEADER.STEPDOWN", account="$SYS") is True
    assert w.stepdowns == [StepDown(META_GROUP, "meta", "$SYS", R, E.META_LEADER_STEPDOWN_RESPONSE)]
    assert answer(w) == expected


@pytest.mark.parametrize("body", [{"peer": "n3"}, {"peer_id": peer_hash("n3")}], ids=["by-name", "by-peer-id"])
def test_server_remove_takes_the_server_out_and_answers_once_applied(body):
    w = cluster()
    assert w.request("$JS.API.SERVER.REMOVE", body, account="$SYS") is True
    assert [a.peer for a in w.removed_servers] == ["n3"] and w.meta.peers == ("n1", "n2")
    assert w.replies == []
    w.commit_meta()
    assert answer(w) == {"type": E.META_SERVER_REMOVE_RESPONSE, "success": True}


@pytest.mark.parametrize(("body", "refusal", "error"), [
    pytest.param({"peer": "n9"}, None,
                 {"code": 400, "err_code": 10044, "description": "server is not a member of the cluster"},
                 id="not-a-member"),
    pytest.param({"peer": "n1"}, None,
                 {"code": 400, "err_code": 10202, "description": "cluster member change is in progress"},
                 id="the-meta-leader-itself"),
    pytest.param({"peer": "n3"}, E.cluster_member_change_inflight(),
                 {"code": 400, "err_code": 10202, "description": "cluster member change is in progress"},
                 id="a-change-in-flight"),
])
def test_server_remove_refused(body, refusal, error):
    w = cluster()
    w.remove_error = refusal
    w.request("$JS.API.SERVER.REMOVE", body, account="$SYS")
    assert answer(w) == {"type": E.META_SERVER_REMOVE_RESPONSE, "error": error}
    assert w.meta.proposals == []


def test_system_requests_other_than_stepdown_and_remove_are_not_taken():
    w = cluster()
    assert w.request("$JS.API.STREAM.NAMES", account="$SYS") is False
    assert untouched(w)


# ------------------------------------------------------------------ requests for the stream leader

#: (subject, body, what the leader does: read / write / stepdown, response type)
STREAM_API = [
    pytest.param("$JS.API.STREAM.INFO.S", None, "read", E.STREAM_INFO_RESPONSE, id="STREAM.INFO"),
    pytest.param("$JS.API.STREAM.PURGE.S", None, "write", E.STREAM_PURGE_RESPONSE, id="STREAM.PURGE"),
    pytest.param("$JS.API.STREAM.MSG.GET.S", {"seq": 1}, "read", E.STREAM_MSG_GET_RESPONSE, id="STREAM.MSG.GET"),
    pytest.param("$JS.API.STREAM.MSG.DELETE.S", {"seq": 1}, "write", E.STREAM_MSG_DELETE_RESPONSE,
                 id="STREAM.MSG.DELETE"),
    pytest.param("$JS.API.STREAM.LEADER.STEPDOWN.S", None, "stepdown", E.STREAM_LEADER_STEPDOWN_RESPONSE,
                 id="STREAM.LEADER.STEPDOWN"),
    pytest.param("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"ack_policy": "explicit"}},
                 "write", E.CONSUMER_CREATE_RESPONSE, id="CONSUMER.CREATE.S"),
    pytest.param("$JS.API.CONSUMER.CREATE.S.d", {"stream_name": "S", "config": {"name": "d"}},
                 "write", E.CONSUMER_CREATE_RESPONSE, id="CONSUMER.CREATE.S.d"),
    pytest.param("$JS.API.CONSUMER.DURABLE.CREATE.S.d", {"stream_name": "S", "config": {"durable_name": "d"}},
                 "write", E.CONSUMER_CREATE_RESPONSE, id="CONSUMER.DURABLE.CREATE"),
    pytest.param("$JS.API.CONSUMER.NAMES.S", None, "read", E.CONSUMER_NAMES_RESPONSE, id="CONSUMER.NAMES"),
    pytest.param("$JS.API.CONSUMER.LIST.S", None, "read", E.CONSUMER_LIST_RESPONSE, id="CONSUMER.LIST"),
    pytest.param("$JS.API.CONSUMER.INFO.S.c", None, "read", E.CONSUMER_INFO_RESPONSE, id="CONSUMER.INFO"),
    pytest.param("$JS.API.CONSUMER.DELETE.S.c", None, "write", E.CONSUMER_DELETE_RESPONSE, id="CONSUMER.DELETE"),
    pytest.param("$JS.API.CONSUMER.MSG.NEXT.S.c", {"batch": 1}, "write", None, id="CONSUMER.MSG.NEXT"),
    pytest.param("$JS.API.CONSUMER.LEADER.STEPDOWN.S.c", None, "stepdown", E.CONSUMER_LEADER_STEPDOWN_RESPONSE,
                 id="CONSUMER.LEADER.STEPDOWN"),
    pytest.param("$JS.API.DIRECT.GET.S", {"seq": 1}, "read", None, id="DIRECT.GET.S"),
    pytest.param("$JS.API.DIRECT.GET.S.s.a", None, "read", None, id="DIRECT.GET.S.subject"),
]
#: not JSON API calls: a message or a status comes back, and no leader means no-responders
NO_RESPONDERS = ("$JS.API.CONSUMER.MSG.NEXT.", "$JS.API.DIRECT.GET.")


def check_answer(body, rtype) -> None:
    """``body`` is a good answer of type ``rtype`` (None: the stored message, hello)."""
    if rtype is None:
        assert body == b"hello"
    else:
        assert body["type"] == rtype and "error" not in body, body


def check_refused(w: World, taken: bool, subject: str, rtype: str, error: dict) -> None:
    """A JSON API call is answered ``error``; a pull request or a direct get is not taken
    (its requester gets no-responders)."""
    if subject.startswith(NO_RESPONDERS):
        assert taken is False and untouched(w)
    else:
        assert taken is True
        assert answer(w) == {"type": rtype, "error": error, **ERROR_FIELDS.get(rtype, {})}


def check_forwarded(w: World, taken: bool, subject: str, body, to: str) -> None:
    """A JSON API call asked on n1 is forwarded to ``to`` (one hop) and not answered here; a
    pull request or a direct get is not taken (left to the route layer: no-responders)."""
    if subject.startswith(NO_RESPONDERS):
        assert taken is False and untouched(w)
    else:
        assert taken is True and w.replies == []
        assert w.forwards == [(to, ForwardedRequest(1, False, "$G", subject, R, None, raw(body), "n1"))]


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_on_the_stream_leader_reads_are_answered_at_once_and_writes_once_applied(subject, body, does, rtype):
    w = with_stream()
    assert w.request(subject, body) is True
    if does == "read":
        check_answer(answer(w), rtype)
        assert w.groups[KEY].proposals == []
    elif does == "write":
        assert w.replies == []
        ((kind, _ts, _interest, proposed, reply, _h, payload),) = entries(w)
        assert (kind, proposed, reply, payload) == (API, subject, R, raw(body))
        w.apply(KEY)
        check_answer(answer(w), rtype)
    else:
        (stepdown,) = w.stepdowns
        kind = "stream" if subject.startswith("$JS.API.STREAM.") else "consumer"
        assert (stepdown.group, stepdown.kind, stepdown.reply) == (w.groups[KEY].name, kind, R)
        assert answer(w) == {"type": rtype, "success": True}
    assert w.forwards == []


READS = [p for p in STREAM_API if p.values[2] == "read"]


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), READS)
def test_on_the_stream_leader_a_read_waits_until_its_group_confirms_the_leadership(subject, body, does,
                                                                                  rtype):
    """ReadIndex (Raft thesis §6.4): a leader that just took over, or that a partition cut
    off while another was elected, must not answer from its own state before its group
    confirmed it still leads and it applied what was committed. Nothing is proposed."""
    w = with_stream()
    w.reads_confirm_at_once = False
    assert w.request(subject, body) is True
    assert w.replies == [] and w.groups[KEY].proposals == []
    (read,) = w.reads
    assert (read.group, read.subject, read.reply) == (w.groups[KEY].name, subject, R)
    w.confirm_reads()
    check_answer(answer(w), rtype)


def test_a_read_answers_the_state_its_group_confirmed_not_the_state_it_arrived_at():
    """A message applied between the read's arrival and its confirmation is in the answer."""
    w = with_stream()
    w.reads_confirm_at_once = False
    w.request("$JS.API.STREAM.INFO.S")
    w.request("s.a", b"second")
    w.apply(KEY)
    w.take_replies()
    w.confirm_reads()
    assert answer(w)["state"]["messages"] == 2


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), READS)
def test_a_read_the_stream_group_refuses_gets_10008_or_no_responders(subject, body, does, rtype):
    w = with_stream()
    w.groups[KEY].refuse = True
    taken = w.request(subject, body)
    if subject.startswith("$JS.API.DIRECT.GET."):   # a status or a message: nothing sent
        assert taken is True and w.replies == []
    else:
        check_refused(w, taken, subject, rtype, UNAVAILABLE)


def test_a_direct_get_of_a_stream_without_allow_direct_is_not_taken():
    w = cluster()
    w.assign("S", leader="n1")
    w.reads_confirm_at_once = False
    assert w.request("$JS.API.DIRECT.GET.S", {"seq": 1}) is False
    assert w.reads == [] and w.replies == []


@pytest.mark.parametrize(("subject", "rtype"), [
    ("$JS.API.STREAM.LEADER.STEPDOWN.S", E.STREAM_LEADER_STEPDOWN_RESPONSE),
    ("$JS.API.CONSUMER.LEADER.STEPDOWN.S.c", E.CONSUMER_LEADER_STEPDOWN_RESPONSE),
])
def test_a_stepdown_with_no_peer_to_take_over_gets_10008(subject, rtype):
    w = with_stream()
    w.step_down_to = None
    w.request(subject)
    assert answer(w) == {"type": rtype, "error": UNAVAILABLE}


@pytest.mark.parametrize(("subject", "body", "does", "rtype"),
                         [p for p in STREAM_API if p.values[2] == "write" and p.values[3]])
def test_a_write_the_stream_group_refuses_at_once_gets_10008(subject, body, does, rtype):
    w = with_stream()
    w.groups[KEY].refuse = True
    w.request(subject, body)
    assert answer(w) == {"type": rtype, "error": UNAVAILABLE, **ERROR_FIELDS.get(rtype, {})}


def test_a_pull_request_the_stream_group_refuses_gets_no_json_body():
    """A JSON body on the pull inbox would be taken for a stream message: nothing is sent
    (the client's request expires, as at a server that is not the leader)."""
    w = with_stream()
    w.groups[KEY].refuse = True
    assert w.request("$JS.API.CONSUMER.MSG.NEXT.S.c", {"batch": 1}) is True
    assert w.sent == [] and w.replies == []


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_on_a_follower_that_knows_the_leaders_interest_the_route_carries_the_request(subject, body, does,
                                                                                      rtype):
    w = with_stream(leader="n2")
    w.remote_interest.add(subject)
    assert w.request(subject, body) is False
    assert untouched(w)


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_on_a_follower_with_no_stream_leader_api_calls_go_to_another_peer_once(subject, body, does, rtype):
    """The peer may know the leader already; one it reaches that does not answers 10008.
    A pull request or a direct get is not taken (no-responders)."""
    w = with_stream(leader=None)
    check_forwarded(w, w.request(subject, body), subject, body, "n2")
    if subject.startswith(NO_RESPONDERS):
        return
    w.forwards.clear()
    frame = ForwardedRequest(1, False, "$G", subject, R, None, raw(body), "n2").pack()
    assert w.receive("n2", frame) is True
    assert w.forwards == []
    assert answer(w) == {"type": rtype, "error": UNAVAILABLE, **ERROR_FIELDS.get(rtype, {})}


def test_with_no_peer_reachable_and_no_stream_leader_an_api_call_gets_10008():
    w = with_stream(leader=None)
    for name in ("n2", "n3"):
        w.unreachable.add(name)
        w.peers.pop(name)
    check_refused(w, w.request("$JS.API.STREAM.INFO.S"), "$JS.API.STREAM.INFO.S", E.STREAM_INFO_RESPONSE,
                  UNAVAILABLE)


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_on_a_follower_the_leaders_interest_has_not_reached_api_calls_go_to_the_leader(subject, body, does,
                                                                                     rtype):
    """A stream created (or a leader elected) a moment ago: this follower knows the leader
    before its interest arrives. An API call is sent to the leader, not answered 10008; a
    pull request or a direct get is left to the route layer (no-responders)."""
    w = with_stream(leader="n2")
    check_forwarded(w, w.request(subject, body), subject, body, "n2")


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_a_request_forwarded_to_a_follower_goes_on_to_the_stream_leader(subject, body, does, rtype):
    w = with_stream(meta="n3", leader="n2")
    frame = ForwardedRequest(1, False, "$G", subject, R, None, raw(body), "n3").pack()
    assert w.receive("n3", frame) is True
    assert w.forwards == [("n2", ForwardedRequest(2, False, "$G", subject, R, None, raw(body), "n3"))]
    assert w.replies == []


@pytest.mark.parametrize("hops", [0, 1], ids=["asked-here", "forwarded-here"])
def test_a_request_on_a_server_without_a_replica_goes_to_a_reachable_peer(hops):
    """Forwarded here, or asked here before the leader's interest arrived."""
    w = cluster(servers=("n1", "n2", "n3", "n4"))
    w.assign("S", peers=("n2", "n3", "n4"))
    w.unreachable.add("n2")
    w.peers.pop("n2")
    assert w.request("$JS.API.STREAM.INFO.S", hops=hops) is True
    assert [(s, f.hops) for s, f in w.forwards] == [("n3", hops + 1)] and w.replies == []


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_a_request_for_a_stream_unknown_here_is_asked_of_the_meta_leader(subject, body, does, rtype):
    w = cluster(meta="n2")
    check_forwarded(w, w.request(subject, body), subject, body, "n2")


@pytest.mark.parametrize("meta", ["n1", None], ids=["on-the-meta-leader", "no-meta-leader"])
@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_a_request_for_a_stream_nobody_knows_gets_10059_or_10008(meta, subject, body, does, rtype):
    w = cluster(meta=meta)
    check_refused(w, w.request(subject, body), subject, rtype, NOT_FOUND if meta else UNAVAILABLE)


@pytest.mark.parametrize(("subject", "body", "does", "rtype"), STREAM_API)
def test_a_routed_request_for_a_stream_this_server_no_longer_leads_is_dropped(subject, body, does, rtype):
    w = with_stream(leader="n2")
    assert w.request(subject, body, routed=True) is True
    assert untouched(w)


def test_a_pull_request_for_a_consumer_unknown_here_is_not_taken():
    w = with_stream()
    assert w.request("$JS.API.CONSUMER.MSG.NEXT.S.nope", {"batch": 1}) is False
    assert untouched(w)


# ------------------------------------------------------------------ publishes, acks, flow control

def test_a_publish_on_the_leader_is_proposed_and_acknowledged_once_applied():
    w = with_stream()
    assert w.request("s.b", b"x") is True
    ((kind, _ts, _interest, subject, reply, _h, payload),) = entries(w)
    assert (kind, subject, reply, payload) == (PUBLISH, "s.b", R, b"x")
    assert w.replies == []
    w.apply(KEY)
    assert answer(w) == {"stream": "S", "seq": 2}


def test_a_publish_the_stream_group_refuses_gets_a_10008_puback():
    w = with_stream()
    w.groups[KEY].refuse = True
    w.request("s.b", b"x")
    assert answer(w) == {"error": UNAVAILABLE, "stream": "S", "seq": 0}


def test_a_publish_on_a_follower_is_left_to_the_route_layer():
    w = with_stream(leader="n2")
    assert w.request("s.b", b"x") is False
    assert w.request("nobody.s", b"x") is False
    assert untouched(w)


@pytest.mark.parametrize(("subject", "kind"), [
    ("$JS.ACK.S.c.1.1.1.1700000000000000000.0", ACK),
    ("$JS.FC.S.abc.def", FLOW_CONTROL),
])
def test_acks_and_flow_control_are_proposed_on_the_leader_and_left_to_the_route_elsewhere(subject, kind):
    w = with_stream()
    assert w.request(subject, b"+ACK") is True
    (entry,) = entries(w)
    assert (entry[0], entry[3]) == (kind, subject)
    w2 = with_stream(leader="n2")
    assert w2.request(subject, b"+ACK") is False and untouched(w2)


# ------------------------------------------------------------------ leadership and meta changes

def test_the_stream_leader_holds_the_route_interest_of_its_subjects_and_drops_it_when_it_loses():
    w = cluster()
    w.assign("S")
    w.elect(KEY, "n1")
    (taken,) = w.interest_changes
    assert {"s.>", "$JS.ACK.S.>", "$JS.FC.S.>", "$JS.API.CONSUMER.MSG.NEXT.S.>",
            "$JS.API.DIRECT.GET.S"} <= set(taken.add) and not taken.remove
    assert "$JS.API.STREAM.CREATE.S" not in taken.add and "$JS.API.STREAM.DELETE.S" not in taken.add
    w.elect(KEY, "n2", term=2)
    assert w.interest_changes[1].remove == taken.add and not w.interest_changes[1].add
    w.elect(KEY, None, term=3)
    assert len(w.interest_changes) == 2     # nothing held, nothing to drop


def test_a_removed_server_s_streams_get_a_replacement_under_placement():
    w = World({n: (f"az:{z}",) for n, z in (("n1", "a"), ("n2", "b"), ("n3", "c"), ("n4", "b"), ("n5", "a"))},
              unique_tag="az:")
    w.meta_leader("n1", peers=("n1", "n2", "n3", "n4", "n5"))
    w.assign("S", peers=("n1", "n2", "n3"), leader="n1")
    w.meta.proposals.append(encode_remove_server("n2"))
    w.commit_meta()
    (removed,) = w.events_named("jetstream_peer_removed")
    assert (removed["peer"], removed["replacement"]) == ("n2", "n4")   # the other az:b server
    w.commit_meta()
    assert set(w.c.meta.streams[KEY].peers) == {"n1", "n3", "n4"}


# ------------------------------------------------------------------ time

def test_the_meta_group_is_bootstrapped_once_the_routes_are_settled_and_quiet():
    w = World({"n1": (), "n2": (), "n3": (), "n4": ()})
    w.peers["n4"].jetstream = False
    w.settled = False
    w.tick(mono=0)
    w.tick(mono=10 * BOOTSTRAP_SETTLE_NS)
    assert w.opened_meta == []                      # a route is still missing
    w.settled = True
    w.c.peer_changed("n3", True, 10 * BOOTSTRAP_SETTLE_NS)
    w.tick(mono=11 * BOOTSTRAP_SETTLE_NS - 1)
    assert w.opened_meta == []                      # not quiet long enough
    w.run(w.c.meta_hello("n2", MetaHello((), (), None, 0, store="s2")))
    w.tick(mono=11 * BOOTSTRAP_SETTLE_NS)
    assert w.opened_meta == []                      # n3 has not said what its group is
    w.run(w.c.meta_hello("n3", MetaHello((), (), None, 0, store="s3")))
    w.tick(mono=11 * BOOTSTRAP_SETTLE_NS + 1)
    assert w.opened_meta == [("n1", "n2", "n3")]    # the JetStream servers only


@pytest.mark.parametrize(("group_peers", "assigned", "change"), [
    (("n1", "n2", "n3", "n4"), ("n1", "n2", "n3"), ("remove", "n4")),
    (("n1", "n2"), ("n1", "n2", "n3"), ("add", "n3")),
    (("n1", "n2", "n4"), ("n1", "n2", "n3"), ("remove", "n4")),     # remove before add
    (("n1", "n2", "n3"), ("n2", "n3", "n4"), ("remove", "n1")),     # the leader is the extra peer
    (("n1", "n2", "n3"), ("n1", "n2", "n3"), None),
], ids=["extra", "missing", "extra-and-missing", "self-extra", "in-step"])
def test_the_stream_leader_reconciles_its_group_one_change_per_tick(group_peers, assigned, change):
    w = cluster()
    w.assign("S", leader="n1")
    w.groups[KEY].peers = group_peers
    w.c.meta.streams[KEY] = dataclasses.replace(w.c.meta.streams[KEY], peers=assigned)
    w.tick(mono=0)
    group = w.groups[KEY].name
    assert w.peer_changes == ([ChangePeer(group, *change)] if change else [])


def test_a_follower_does_not_reconcile():
    w = with_stream(leader="n2")
    w.groups[KEY].peers = ("n1", "n2", "n3", "n4")
    w.tick(mono=0)
    assert w.peer_changes == []


def test_a_stream_with_a_max_age_gets_a_tick_entry_every_expiry_check():
    w = with_stream(max_age=1_000_000_000)
    w.assign("T", subjects=("t.>",), leader="n1")   # no max_age: no tick
    w.tick(mono=0)
    w.tick(mono=EXPIRY_CHECK_NS - 1)
    w.tick(mono=EXPIRY_CHECK_NS)
    assert [e[0] for e in entries(w)] == [TICK, TICK]
    assert entries(w, ("$G", "T")) == []


# ------------------------------------------------------------------ between servers

def test_a_malformed_forwarded_frame_is_reported_and_taken_by_nobody():
    w = cluster()
    assert w.receive("n2", b"\xc1 not msgpack") is False
    assert w.receive("n2", msgpack.packb([1, False, 7, "s", None, None, b"", "n2"])) is False
    assert [f["message"].split(":")[0] for f in w.events_named("config_warning")] == [
        "malformed jsapi frame from n2"] * 2
    assert untouched(w)


@pytest.mark.parametrize("local", [False, True], ids=["no-local-interest", "requester-known-here"])
def test_replies_to_a_forwarded_request_go_back_through_its_origin(local):
    w = with_stream(meta="n2")
    if local:
        w.local_interest.add(R)
    via = None if local else "n3"
    w.receive("n2", ForwardedRequest(1, False, "$G", "$JS.API.STREAM.INFO.S", R, None, b"", "n3").pack())
    w.receive("n2", ForwardedRequest(1, False, "$G", "$JS.API.STREAM.PURGE.S", R, None, b"", "n3").pack())
    w.apply(KEY)        # a write's answer, sent when applied, takes the same way
    assert [b["type"] for _s, b in w.replies] == [E.STREAM_INFO_RESPONSE, E.STREAM_PURGE_RESPONSE]
    assert w.sent_via == [via, via]


# ------------------------------------------------------------------ fault isolation

def boom(*_args, **_kwargs):
    raise RuntimeError("injected failure")


@pytest.mark.parametrize(("method", "subject", "body", "expected"), [
    ("_meta_api", "$JS.API.STREAM.CREATE.X", {"name": "X"},
     {"type": E.STREAM_CREATE_RESPONSE, "error": {"code": 500, "err_code": 10049, "description": "internal error"}}),
    ("_stream_api", "$JS.API.STREAM.INFO.S", None,
     {"type": E.STREAM_INFO_RESPONSE, "error": {"code": 500, "err_code": 10051, "description": "internal error"},
      **PAGED}),
    ("_stream_api", "$JS.API.CONSUMER.CREATE.S.d", {"stream_name": "S", "config": {"name": "d"}},
     {"type": E.CONSUMER_CREATE_RESPONSE, "error": {"code": 500, "err_code": 10012, "description": "internal error"}}),
    ("_api", "$JS.API.DIRECT.GET.S", {"seq": 1}, b""),
])
def test_a_request_whose_routing_fails_is_answered_500_and_the_next_one_works(monkeypatch, method, subject, body,
                                                                              expected):
    w = with_stream()
    monkeypatch.setattr(ClusterController, method, boom)
    assert w.request(subject, body) is True
    if expected == b"":     # DIRECT.GET: a status, as nats-server answers it
        assert [out.headers for out in w.sent] == [b"NATS/1.0 500 Internal Server Error\r\n\r\n"]
    assert answer(w) == expected
    (failed,) = w.events_named("api_request_failed")
    assert (failed["subject"], failed["error"]) == (subject, "RuntimeError('injected failure')")
    monkeypatch.undo()
    w.request("$JS.API.STREAM.INFO.S")
    assert answer(w)["state"]["messages"] == 1


def test_settings_jetraft_does_not_act_on_are_refused_before_any_proposal():
    w = with_stream()
    counter = {"name": "RP", "subjects": ["rp.>"], "storage": "memory", "allow_batched": True}
    w.request("$JS.API.STREAM.CREATE.RP", counter)
    w.request("$JS.API.STREAM.UPDATE.S", {**STREAM, "allow_batched": True})
    w.request("$JS.API.CONSUMER.CREATE.S.d", {"stream_name": "S", "config": {
        "durable_name": "d", "ack_policy": "explicit", "deliver_subject": "dl", "sourcing": True}})
    assert [b["error"] for _s, b in w.take_replies()] == [
        {"code": 500, "err_code": code, "description": f"{setting} is not supported by jetraft"}
        for setting, code in (("allow_batched (fast batch publish, nats-server 2.14)", 10052), ("allow_batched (fast batch publish, nats-server 2.14)", 10052), ("sourcing", 10012))]
    assert untouched(w)


def test_an_account_without_jetstream_is_not_taken():
    w = cluster()
    assert w.request("$JS.API.INFO", account="OTHER") is False
    assert untouched(w)


#: Zones a/a/b/b/c; every server but n2 has an SSD.
TAGGED = {"n1": ("az:a", "ssd"), "n2": ("az:a",), "n3": ("az:b", "ssd"), "n4": ("az:b", "ssd"),
          "n5": ("az:c", "ssd")}


@pytest.mark.parametrize(("peers", "placement", "error"), [
    pytest.param(("n1", "n3", "n5"), {"tags": ["ssd"]}, None, id="its-servers-satisfy-it"),
    pytest.param(("n1", "n3", "n5"), {"cluster": "c1"}, None, id="its-own-cluster"),
    pytest.param(("n1", "n2", "n5"), {"tags": ["ssd"]},
                 {"code": 500, "err_code": 10052, "description": "moving stream S off its servers "
                  "(n1, n2, n5) to satisfy a new placement is not supported by jetraft"},
                 id="others-would-satisfy-it"),
    pytest.param(("n1", "n3", "n5"), {"tags": ["gpu"]}, "no-peers", id="nobody-satisfies-it"),
    pytest.param(("n1", "n3", "n5"), {"cluster": "elsewhere"}, "no-peers", id="another-cluster"),
])
def test_a_placement_update_is_taken_only_when_nothing_has_to_move(peers, placement, error):
    """nats-server moves a stream whose new placement its servers do not satisfy; jetraft
    does not move streams: it takes a placement its servers satisfy, answers nats-server's
    10005 when no server does, and refuses a move otherwise, never storing a placement it
    does not act on."""
    w = World(TAGGED, unique_tag="az:")
    w.meta_leader("n1", peers=tuple(TAGGED))
    w.assign("S", peers=peers, leader="n1")
    w.request("$JS.API.STREAM.UPDATE.S", {**STREAM, "placement": placement})
    if error is None:
        assert len(w.meta.proposals) == 1 and w.replies == []
        return
    reply = answer(w)
    assert w.meta.proposals == []
    if error == "no-peers":
        assert (reply["error"]["code"], reply["error"]["err_code"]) == (400, 10005), reply
        assert "no suitable peers for placement" in reply["error"]["description"]
    else:
        assert reply == {"type": E.STREAM_UPDATE_RESPONSE, "error": error}


# ------------------------------------------------------------------ the account's JetStream limits

MAX_STREAMS = {"code": 400, "err_code": 10027, "description": "maximum number of streams reached"}
MAX_CONSUMERS = {"code": 400, "err_code": 10026, "description": "maximum consumers limit reached"}


def test_a_create_proposed_and_not_yet_applied_counts_against_max_streams():
    """nats-server counts its in-flight proposals (streamAssignmentsOrInflightSeq): two creates
    asked before the first is applied do not both pass a limit of one."""
    w = cluster()
    w.accounts["$G"].limits = AccountLimits(max_streams=1)
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    assert len(w.meta.proposals) == 1 and w.replies == []
    w.request("$JS.API.STREAM.CREATE.T", {**STREAM, "name": "T", "subjects": ["t.>"]})
    assert answer(w) == {"type": E.STREAM_CREATE_RESPONSE, "error": MAX_STREAMS}
    assert len(w.meta.proposals) == 1
    # the same create asked again (a client's timeout) is not a second stream
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    assert len(w.meta.proposals) == 2 and w.replies == []


def test_a_proposed_create_stops_counting_once_applied_or_after_its_window():
    w = cluster()
    w.accounts["$G"].limits = AccountLimits(max_streams=2)
    w.request("$JS.API.STREAM.CREATE.S", STREAM)
    w.commit_meta()
    # applied: counted once, as an assignment
    w.request("$JS.API.STREAM.CREATE.T", {**STREAM, "name": "T", "subjects": ["t.>"]})
    assert w.replies == [] and len(w.meta.proposals) == 1
    # T's proposal never applied (a lost meta leadership): it holds no place after the window
    w.meta.proposals.clear()
    later = T0 + RESTORE_PROPOSED_NS + 1
    w.request("$JS.API.STREAM.CREATE.U", {**STREAM, "name": "U", "subjects": ["u.>"]}, now=later)
    assert w.replies == [] and len(w.meta.proposals) == 1


def test_the_stream_leader_refuses_a_consumer_beyond_the_accounts_max_consumers_unproposed():
    """The account's limits are the server's configuration: checked by the leader before it
    proposes, never by the replicas as they apply the log."""
    w = with_stream()
    w.accounts["$G"].limits = AccountLimits(max_consumers=1)
    w.request("$JS.API.CONSUMER.DURABLE.CREATE.S.d", {"stream_name": "S", "config": {
        "durable_name": "d", "ack_policy": "explicit"}})
    assert answer(w) == {"type": E.CONSUMER_CREATE_RESPONSE, "error": MAX_CONSUMERS}
    assert w.groups[KEY].proposals == []
    # the existing consumer's update is proposed
    w.request("$JS.API.CONSUMER.DURABLE.CREATE.S.c", {**DURABLE, "config": {**DURABLE["config"],
                                                                             "description": "x"}})
    assert len(w.groups[KEY].proposals) == 1


def test_an_update_proposed_and_not_yet_applied_counts_in_the_accounts_reservation():
    """The stream's leader answers an update, possibly before the meta group applied it on
    the meta leader: what the stream reserves from then on is the new max_bytes."""
    w = cluster()
    w.accounts["$G"].limits = AccountLimits(max_memory=1000)
    w.assign("S", leader="n1", max_bytes=300)                         # 900 of 1000
    w.request("$JS.API.STREAM.UPDATE.S", {**STREAM, "max_bytes": 100})
    w.take_replies()
    assert len(w.meta.proposals) == 1                                  # not applied
    w.request("$JS.API.STREAM.CREATE.T", {**STREAM, "name": "T", "subjects": ["t.>"], "max_bytes": 200})
    assert w.replies == [] and len(w.meta.proposals) == 2              # 300 + 600: proposed
    w.request("$JS.API.STREAM.CREATE.U", {**STREAM, "name": "U", "subjects": ["u.>"], "max_bytes": 100})
    assert answer(w) == {"type": E.STREAM_CREATE_RESPONSE, "error": {
        "code": 500, "err_code": 10028, "description": "insufficient memory resources available"}}
