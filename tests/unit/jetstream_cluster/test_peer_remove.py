"""``$JS.API.STREAM.PEER.REMOVE.<stream>``: who lets go of its copy when, and why a refusal.

Scripted against the cluster controller of server n1 in the World of ``controller_world``
(fake RAFT groups: a test sets their peers, leader and which peers are current). What a
user would see: the API answer, and whether n1 still holds the stream's replica (its
``CloseReplica`` with delete) or asks its RAFT group for a membership change. nats-server
orders it the same way (jetstream_cluster.go: a leader no longer in its group hands over
before its replica goes); the refusal keeps nats-server's 10075 and says why in the words
of its placement errors (JSClusterNoPeersErrF).
"""

from __future__ import annotations

from controller_world import World

from jetraft.jetstream import errors as E
from jetraft.jetstream.cluster import ChangePeer, CloseReplica

R = "_INBOX.r"
KEY = ("$G", "S")
SUCCESS = {"type": E.STREAM_REMOVE_PEER_RESPONSE, "success": True}


def world(servers=("n1", "n2", "n3", "n4"), zones: dict[str, str] | None = None) -> World:
    tags = {n: ((f"az:{zones[n]}",) if zones else ()) for n in servers}
    w = World(tags, unique_tag="az:" if zones else "")
    w.meta_leader("n1", peers=tuple(servers))
    return w


def peer_remove(w: World, peer: str) -> dict:
    """PEER.REMOVE on the meta leader n1, its meta entry applied; the answer."""
    w.request("$JS.API.STREAM.PEER.REMOVE.S", {"peer": peer})
    w.commit_meta()
    ((subject, body),) = w.take_replies()
    assert subject == R
    return body


def changes(w: World) -> list[ChangePeer]:
    out, w.peer_changes = w.peer_changes, []
    return out


def closed(w: World) -> bool:
    return CloseReplica(KEY, True) in w.closed and KEY not in w.replicas


def replacement(w: World) -> str:
    (event,) = w.events_named("jetstream_peer_removed")
    return event["replacement"]


def test_a_removed_r2_leader_hands_over_before_it_lets_go_of_its_copy():
    w = world()
    w.assign("S", peers=("n1", "n2"), leader="n1")
    assert peer_remove(w, "n1") == SUCCESS
    assert not closed(w)                        # the only leader of the group: kept
    group = w.groups[KEY]
    group.current = set()
    w.tick(mono=0)
    assert changes(w) == []                     # n2 not caught up: nothing yet
    group.current = None
    w.tick(mono=1)
    assert changes(w) == [ChangePeer(group.name, "remove", "n1")]
    assert not closed(w)
    group.peers, group.leader = ("n2",), None   # the removal committed, leadership handed over
    w.tick(mono=2)
    assert closed(w)


def test_a_removed_r1_leader_adds_its_replacement_first_and_waits_for_it_to_catch_up():
    w = world()
    w.assign("S", peers=("n1",), leader="n1")
    assert peer_remove(w, "n1") == SUCCESS
    new = replacement(w)
    assert w.c.meta.streams[KEY].peers == (new,)
    assert not closed(w)
    group = w.groups[KEY]
    w.tick(mono=0)
    assert changes(w) == [ChangePeer(group.name, "add", new)]
    group.peers, group.current = ("n1", new), set()
    w.tick(mono=1)
    assert changes(w) == []                     # the new copy is not current yet
    group.current = {new}
    w.tick(mono=2)
    assert changes(w) == [ChangePeer(group.name, "remove", "n1")]
    group.peers = (new,)                        # appended, not committed: still the leader
    w.tick(mono=3)
    assert changes(w) == [] and not closed(w)
    group.leader = new
    w.tick(mono=4)
    assert closed(w)


def test_a_removed_r3_leader_waits_for_a_quorum_of_the_members_that_stay():
    w = world()
    w.assign("S", peers=("n1", "n2", "n3"), leader="n1")
    assert peer_remove(w, "n1") == SUCCESS
    group = w.groups[KEY]
    group.current = {"n2"}                      # one of two: not a quorum of {n2, n3}
    w.tick(mono=0)
    assert changes(w) == [] and not closed(w)
    group.current = None
    w.tick(mono=1)
    assert changes(w) == [ChangePeer(group.name, "remove", "n1")]


def test_a_removed_r3_follower_lets_go_at_once():
    w = world()
    w.assign("S", peers=("n1", "n2", "n3"), leader="n2")
    assert peer_remove(w, "n1") == SUCCESS
    assert closed(w)


def test_a_removed_r2_follower_acknowledges_until_its_leader_dropped_it():
    w = world()
    w.assign("S", peers=("n1", "n2"), leader="n2")
    assert peer_remove(w, "n1") == SUCCESS
    assert not closed(w)                        # n2 needs n1 until it removed it
    w.tick(mono=0)
    assert not closed(w)
    w.groups[KEY].leader = None                 # n2 stopped sending: n1 is out of its group
    w.tick(mono=1)
    assert closed(w)


def test_the_replacement_of_an_r1_stream_joins_the_group_as_it_was():
    w = world(servers=("n1", "n2"))
    w.assign("S", peers=("n2",))
    assert KEY not in w.groups
    assert peer_remove(w, "n2") == SUCCESS
    assert w.groups[KEY].peers == ("n2",)       # not (): it must learn n2 is the leader


def test_peer_remove_with_no_server_outside_the_group_says_so():
    w = world(servers=("n1", "n2", "n3"), zones={"n1": "a", "n2": "b", "n3": "c"})
    w.assign("S", peers=("n1", "n2", "n3"), leader="n1")
    assert peer_remove(w, "n2") == {"type": E.STREAM_REMOVE_PEER_RESPONSE, "error": {
        "code": 503, "err_code": 10075,
        "description": "peer remap failed: no suitable peers for placement (no server outside n1, n2, n3)"}}
    assert w.c.meta.streams[KEY].peers == ("n1", "n2", "n3")


def test_peer_remove_whose_only_spares_are_in_zones_the_stream_uses_says_so():
    w = world(servers=("n1", "n2", "n3", "n4", "n5"),
              zones={"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c"})
    w.assign("S", peers=("n1", "n3", "n5"), leader="n1")
    assert peer_remove(w, "n5") == {"type": E.STREAM_REMOVE_PEER_RESPONSE, "error": {
        "code": 503, "err_code": 10075,
        "description": "peer remap failed: no suitable peers for placement, server tag not unique "
                       "(no server outside n1, n3, n5 in a zone the stream does not use, unique_tag 'az:')"}}
    (failed,) = w.events_named("jetstream_placement_failed")
    assert failed["stream"] == "S" and "server tag not unique" in failed["reason"]
