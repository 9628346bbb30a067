"""Meta group membership through the meta log (jetraft.jetstream.meta_members and the
controller's use of it): new servers join as learners and are promoted once caught up;
removed servers stay out; placement only picks voters; a late server joins an established
group instead of starting its own."""

from __future__ import annotations

import pytest
from controller_world import ME, T0, Group, World

from jetraft.jetstream.cluster import META_GROUP, ChangePeer
from jetraft.jetstream.meta import encode_remove_server
from jetraft.jetstream.meta_members import (
    MetaHello,
    decode_hello,
    encode_hello,
    join_peers,
    membership_step,
)

FIVE = {"n1": ("az:a",), "n2": ("az:a",), "n3": ("az:b",), "n4": ("az:b",), "n5": ("az:c",)}


def step(learners=(), current=(), removed=(), candidates=None, recorded=None):
    cands = {"n1": "s1", "n2": "s2", "n3": "s3", "n4": "s4", "n6": "s6"} if candidates is None else candidates
    rec = {k: v for k, v in cands.items()} if recorded is None else recorded
    return membership_step(voters=("n1", "n2", "n3"), learners=learners, candidates=cands,
                           removed=set(removed), recorded=rec, current=lambda n: n in current)


def test_step_order_remove_then_record_then_promote_then_add():
    assert step() == ("add_learner", "n4")
    assert step(removed={"n4"}) == ("add_learner", "n6")
    assert step(learners=("n4",)) == ("add_learner", "n6")          # n4 not caught up yet
    assert step(learners=("n4",), current={"n4"}) == ("promote", "n4")
    assert step(learners=("n4", "n6"), current={"n4"}, removed={"n6"}) == ("remove", "n6")
    assert step(candidates={"n1": "s1", "n2": "s2", "n3": "s3"}) is None


def test_step_store_identities():
    base = {"n1": "s1", "n2": "s2", "n3": "s3"}
    # a member whose store is not recorded yet is recorded (first sight)
    assert step(candidates=base, recorded={"n1": "s1", "n3": "s3"}) == ("record", "n2")
    # a member that comes back with another store lost it: its old identity leaves
    assert step(candidates={**base, "n2": "NEW"}, recorded=base) == ("remove", "n2")
    # then, no member, it is recorded with its new store, then added as a learner
    def after_removal(recorded):
        return membership_step(voters=("n1", "n3"), learners=(), candidates={**base, "n2": "NEW"},
                               removed=set(), recorded=recorded, current=lambda n: False)
    assert after_removal(base) == ("record", "n2")
    assert after_removal({**base, "n2": "NEW"}) == ("add_learner", "n2")
    # a server whose store is unknown (no hello yet) is left alone
    assert step(candidates={**base, "n6": ""}, recorded=base) is None
    # a new server is recorded before it is added
    assert step(candidates={**base, "n7": "s7"}, recorded=base) == ("record", "n7")


def test_step_a_removed_server_comes_back_only_with_another_store():
    base = {"n1": "s1", "n2": "s2", "n3": "s3", "n4": "s4"}
    # removed and back with the store it had: it stays out
    assert step(candidates=base, recorded=base, removed={"n4"}) is None
    # back with a wiped store: a new identity, recorded (which re-admits it), then added
    assert step(candidates={**base, "n4": "NEW"}, recorded=base, removed={"n4"}) == ("record", "n4")
    # removed before its store was ever recorded: no way to tell, it stays out
    assert step(candidates={**base, "n4": "NEW"}, recorded={"n1": "s1", "n2": "s2", "n3": "s3"},
                removed={"n4"}) is None


def test_hello_round_trip_and_hostile_frames():
    h = MetaHello(("n1", "n2", "n3"), ("n4",), "n1", 7, removed=True, store="ab", your_store="cd")
    assert decode_hello(encode_hello(h)) == h
    for bad in (b"", b"\xc1", encode_hello(h)[:-3], b"\x80",
                __import__("msgpack").packb({"v": [1], "r": [], "l": None, "t": 1}),
                __import__("msgpack").packb({"v": ["a"], "r": [], "l": None, "t": -1})):
        with pytest.raises(ValueError):
            decode_hello(bad)


def test_join_peers():
    est = MetaHello(("n1", "n2", "n3"), (), "n2", 3)
    assert join_peers("n6", "s6", est) == (("n1", "n2", "n3"), True)   # a joiner: not itself
    assert join_peers("n3", "s3", est) == (("n1", "n2", "n3"), False)  # a first member, late
    known = MetaHello(("n1", "n2", "n3"), (), "n2", 3, your_store="s3")
    assert join_peers("n3", "s3", known) == (("n1", "n2", "n3"), False)
    # the group records another store for n3: it lost its store, it joins anew
    assert join_peers("n3", "WIPED", known) == (("n1", "n2"), True)
    assert join_peers("n6", "s6", MetaHello(("n1", "n2"), (), None, 0)) is None   # forming
    assert join_peers("n6", "s6", MetaHello(("n1", "n2"), (), "n1", 2, removed=True)) is None


def meta_world(learners=()) -> World:
    w = World({**FIVE, "n6": ("az:c",)}, unique_tag="az:")
    w.meta = Group(META_GROUP, ("n1", "n2", "n3", "n4", "n5"), leader=ME, learners=tuple(learners))
    w.c.store_id = "s-n1"
    w.c.peer_stores = {n: f"s-{n}" for n in w.peers}
    w.c.meta.stores = {n: f"s-{n}" for n in FIVE}            # the five are recorded
    return w


def test_meta_leader_adds_a_new_server_as_learner_then_promotes_it():
    w = meta_world()
    w.tick(mono=10**9)
    assert w.peer_changes == []                                # its store is recorded first
    w.commit_meta()
    assert w.c.meta.stores["n6"] == "s-n6"
    w.tick(mono=2 * 10**9)
    assert ChangePeer(META_GROUP, "add_learner", "n6") in w.peer_changes
    w.peer_changes.clear()
    w.meta.learners = ("n6",)
    w.meta.current = {"n2", "n3", "n4", "n5"}                   # n6 still catching up
    w.tick(mono=3 * 10**9)
    assert w.peer_changes == []
    w.meta.current = None
    w.tick(mono=4 * 10**9)
    assert w.peer_changes == [ChangePeer(META_GROUP, "promote", "n6")]


def test_followers_and_removed_servers_change_nothing():
    w = meta_world()
    w.meta.leader = "n2"
    w.tick(mono=10**9)
    assert w.peer_changes == []
    w = meta_world()
    w.c.meta.apply(encode_remove_server("n6"))
    w.tick(mono=10**9)
    assert not [c for c in w.peer_changes if c.peer == "n6"]


def test_a_removed_server_with_a_wiped_store_is_readmitted_as_a_new_member():
    w = meta_world()
    w.c.meta.stores["n6"] = "s-n6"
    w.c.meta.apply(encode_remove_server("n6"))
    assert w.c.hello("n6").removed
    w.tick(mono=10**9)
    w.commit_meta()
    assert "n6" in w.c.meta.removed_servers                # the same store: it stays out
    w.c.peer_stores["n6"] = "WIPED"                        # the operator wiped its store
    w.tick(mono=2 * 10**9)
    w.commit_meta()                                        # member_store n6 = WIPED
    assert w.c.meta.stores["n6"] == "WIPED" and "n6" not in w.c.meta.removed_servers
    assert not w.c.hello("n6").removed
    w.tick(mono=3 * 10**9)
    assert ChangePeer(META_GROUP, "add_learner", "n6") in w.peer_changes


def test_a_refused_server_joins_once_the_group_readmits_it():
    w = World(FIVE)
    w.run(w.c.meta_hello("n2", MetaHello(("n2", "n3", "n4"), (), "n2", 4, removed=True)))
    w.tick(mono=10 * 10**9)
    assert w.opened_meta == []
    w.run(w.c.meta_hello("n2", MetaHello(("n2", "n3", "n4"), (), "n2", 5)))
    w.tick(mono=11 * 10**9)
    assert w.opened_meta == [("n2", "n3", "n4")] and w.c.join_fresh


def test_placement_never_picks_a_server_that_is_no_voter():
    w = meta_world(learners=("n6",))
    for i in range(8):
        w.request("$JS.API.STREAM.CREATE.S%d" % i, {"name": "S%d" % i, "subjects": [f"s{i}.>"],
                                                     "num_replicas": 3, "storage": "memory"})
    w.commit_meta()
    assert len(w.c.meta.streams) == 8
    placed = {p for sa in w.c.meta.streams.values() for p in sa.peers}
    assert "n6" not in placed and placed <= {"n1", "n2", "n3", "n4", "n5"}


def test_a_late_server_joins_the_established_group():
    w = World(FIVE)                                       # n1 has no meta group yet
    w.run(w.c.meta_hello("n2", MetaHello(("n2", "n3", "n4", "n5", "n7"), (), "n2", 4)))
    w.tick(mono=1)                                        # no settle wait
    assert w.opened_meta == [("n2", "n3", "n4", "n5", "n7")]
    assert [e for e, _f in w.events.lines].count("jetstream_meta_joining") == 1


def test_a_removed_server_opens_nothing_and_says_why():
    w = World(FIVE)
    for src in ("n2", "n3"):
        w.run(w.c.meta_hello(src, MetaHello(("n2", "n3", "n4"), (), "n2", 4, removed=True)))
    w.tick(mono=10 * 10**9)
    assert w.opened_meta == []
    refused = [f for e, f in w.events.lines if e == "jetstream_meta_refused"]
    assert len(refused) == 1 and "SERVER.REMOVE" in refused[0]["reason"]


def test_a_forming_group_does_not_stop_the_bootstrap():
    w = World(FIVE)
    w.run(w.c.meta_hello("n2", MetaHello(("n1", "n2", "n3", "n4", "n5"), (), None, 0, store="s2")))
    for name in ("n3", "n4", "n5"):
        w.run(w.c.meta_hello(name, MetaHello((), (), None, 0, store=f"s-{name}")))
    w.tick(mono=1)
    w.tick(mono=10 * 10**9)
    assert w.opened_meta == [("n1", "n2", "n3", "n4", "n5")]


def test_no_bootstrap_before_every_server_said_what_its_group_is():
    """A hello held up (a busy peer, a lost frame) must not find this server already in a
    group of its own once the routes are quiet: it waits for the repeated hello."""
    w = World(FIVE)
    for name in ("n2", "n3", "n4"):
        w.run(w.c.meta_hello(name, MetaHello((), (), None, 0, store=f"s-{name}")))
    w.tick(mono=1)
    w.tick(mono=10 * 10**9)
    assert w.opened_meta == []
    w.run(w.c.meta_hello("n5", MetaHello(("n2", "n3", "n4", "n5"), (), "n5", 3, store="s-n5")))
    w.tick(mono=10 * 10**9 + 1)
    assert w.opened_meta == [("n2", "n3", "n4", "n5")]      # the group n5 leads: joined


def test_a_server_that_lost_its_store_waits_for_the_leader_of_a_group_that_is_electing():
    """Its old meta leader was this server itself: the others are electing when it starts
    again with an empty store. Their meta state records its old store, so the group exists;
    bootstrapping a group of its own would let it vote with an empty log. It waits, and
    joins as a new member (store lost) once a leader says how."""
    w = World(FIVE)
    w.c.store_id = "NEW"
    electing = MetaHello(("n1", "n2", "n3", "n4", "n5"), (), None, 7, store="s", your_store="OLD")
    for name in ("n2", "n3", "n4", "n5"):
        w.run(w.c.meta_hello(name, electing))
    w.tick(mono=1)
    w.tick(mono=10 * 10**9)
    assert w.opened_meta == []
    w.run(w.c.meta_hello("n3", MetaHello(("n1", "n2", "n3", "n4", "n5"), (), "n3", 8, store="s",
                                          your_store="OLD")))
    w.tick(mono=10 * 10**9 + 1)
    assert w.opened_meta == [("n2", "n3", "n4", "n5")] and w.c.join_fresh
    (joining,) = [f for e, f in w.events.lines if e == "jetstream_meta_joining"]
    assert joining["store_lost"] is True


def test_a_server_removed_while_down_closes_its_old_meta_group():
    w = World(FIVE)
    w.meta = Group(META_GROUP, ("n1", "n2", "n3", "n4", "n5"), leader=None)  # its old log
    stale = MetaHello(("n2", "n3", "n4", "n5"), (), "n2", 5, removed=True)
    w.run(w.c.meta_hello("n3", stale))             # not the leader: not taken on its word
    assert w.meta_closed == 0
    w.run(w.c.meta_hello("n2", stale))
    assert w.meta_closed == 1 and w.meta is None
    w.tick(mono=10 * 10**9)
    assert w.opened_meta == []                     # and it does not bootstrap again
    assert [e for e, _f in w.events.lines].count("jetstream_meta_refused") == 1


def test_a_member_that_lost_its_store_is_removed_recorded_and_its_slots_refilled():
    w = meta_world()
    for i in range(3):
        w.request("$JS.API.STREAM.CREATE.V%d" % i, {"name": "V%d" % i, "subjects": [f"v{i}.>"],
                                                     "num_replicas": 3, "storage": "memory"})
    w.commit_meta()
    # a peer of some stream in a zone that has another server (placement breaks ties by
    # hash order, so the streams' peers vary from run to run)
    victim = next(p for sa in w.c.meta.streams.values() for p in sa.peers
                  if p != ME and FIVE[p] != ("az:c",))
    on_victim = [sa.name for sa in w.c.meta.streams.values() if victim in sa.peers]
    w.c.peer_stores[victim] = "WIPED"                          # it came back with a new store
    w.tick(mono=10**9)
    assert w.peer_changes == [ChangePeer(META_GROUP, "remove", victim)]
    w.peer_changes.clear()
    w.meta.peers = tuple(p for p in FIVE if p != victim)        # the removal took effect
    w.tick(mono=2 * 10**9)
    w.commit_meta()                                            # member_store victim = WIPED
    assert w.c.meta.stores[victim] == "WIPED"
    for name in on_victim:
        sa = w.c.meta.streams[("$G", name)]
        assert victim not in sa.peers and sa.vacated == (victim,)
    w.tick(mono=3 * 10**9)                                     # vacant slots filled elsewhere
    w.commit_meta()
    for name in on_victim:
        sa = w.c.meta.streams[("$G", name)]
        assert len(sa.peers) == 3 and victim not in sa.peers
        zones = sorted(FIVE[p][0] for p in sa.peers)
        assert zones == ["az:a", "az:b", "az:c"], (name, sa.peers)


def test_a_fresh_server_opens_no_replica_until_its_store_is_recorded():
    w = World(FIVE)
    w.c.store_id = "NEW"
    w.run(w.c.meta_hello("n2", MetaHello(("n1", "n2", "n3"), (), "n2", 4, store="s-n2",
                                          your_store="OLD")))
    assert w.c.fresh and w.c.join_fresh
    w.tick(mono=1)
    assert w.opened_meta == [("n2", "n3")]                     # a joiner: not itself
    w.meta = Group(META_GROUP, ("n1", "n2", "n3"), leader="n2")
    w.c.meta.stores["n1"] = "OLD"
    w.assign("R", peers=("n1", "n2", "n3"))                    # its old assignment, replayed
    assert w.replicas == {}
    from jetraft.jetstream.meta import encode_member_store
    for change in w.c.meta.apply(encode_member_store("n1", "NEW")):
        w.run(w.c.meta_change(change, T0))
    assert not w.c.fresh
    assert [e for e, _f in w.events.lines].count("jetstream_meta_member") == 1


def test_a_vacated_server_gets_a_replica_again_once_its_old_one_left_the_group():
    from jetraft.jetstream.meta import encode_clear_vacated, encode_member_store, encode_remove_stream
    w = meta_world()
    key = w.assign("Z", peers=("n1", "n2", "n5"), leader=ME)  # n1 leads the stream's group
    w.c.meta.stores["n2"] = "s-n2"
    for change in w.c.meta.apply(encode_member_store("n2", "WIPED")):
        w.run(w.c.meta_change(change, T0))
    sa = w.c.meta.streams[key]
    assert sa.peers == ("n1", "n5") and sa.vacated == ("n2",)
    # the group still holds n2's old replica: nothing is reported yet
    w.groups[key].peers = ("n1", "n2", "n5")
    w.tick(mono=10**9)
    assert w.to_meta_leader == []
    # removed, but the removal not committed yet: still nothing
    w.groups[key].peers = ("n1", "n5")
    w.groups[key].config_settled = False
    w.tick(mono=2 * 10**9)
    assert w.to_meta_leader == []
    w.groups[key].config_settled = True
    w.tick(mono=3 * 10**9)
    assert w.to_meta_leader == [encode_clear_vacated("$G", "Z", "n2")]
    # the meta leader takes that kind of entry from a peer, and no other
    w.run(w.c.meta_op("n3", encode_remove_stream("$G", "Z")))
    assert encode_remove_stream("$G", "Z") not in w.meta.proposals
    w.run(w.c.meta_op("n3", encode_clear_vacated("$G", "Z", "n2")))
    assert encode_clear_vacated("$G", "Z", "n2") in w.meta.proposals
    w.c.meta.apply(encode_clear_vacated("$G", "Z", "n2"))
    assert w.c.meta.streams[key].vacated == ()


def test_a_replaced_server_says_so_once_not_again_when_it_replays_its_history():
    """A server that came back with a new store logs jetstream_meta_store_replaced; once it is
    a member again, a later restart replays the meta log, old member_store entry included:
    that history is not news, and is not logged again."""
    from jetraft.jetstream.meta import encode_member_store

    def apply(w, store):
        for change in w.c.meta.apply(encode_member_store(ME, store)):
            w.run(w.c.meta_change(change, T0))

    w = World(FIVE)
    w.c.store_id = "NEW"
    apply(w, "OLD")                         # the group still records the lost store
    assert [e for e, _f in w.events.lines].count("jetstream_meta_store_replaced") == 1
    apply(w, "NEW")                         # admitted again
    assert not w.c.fresh

    later = World(FIVE)                     # the same server, restarted: its log is replayed
    later.c.store_id = "NEW"
    later.c.replaying = True
    apply(later, "OLD")
    apply(later, "NEW")
    later.run(later.c.end_replay(T0))
    assert [e for e, _f in later.events.lines].count("jetstream_meta_store_replaced") == 0

    stale = World(FIVE)                     # a replay that ends with another store recorded
    stale.c.store_id = "NEW"
    stale.c.replaying = True
    apply(stale, "OLD")
    stale.run(stale.c.end_replay(T0))
    assert [e for e, _f in stale.events.lines].count("jetstream_meta_store_replaced") == 1
