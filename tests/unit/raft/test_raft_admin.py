"""jetraft RAFT core: leadership transfer, membership changes, snapshots, read index."""

from __future__ import annotations

import pytest
from raft_pump import GROUP, Cluster

from jetraft.raft import (
    Config,
    ConfigChange,
    ConfigChangeType,
    MemoryStorage,
    Message,
    MessageType,
    NotLeaderError,
    ProposalDroppedError,
    RaftNode,
    ReadState,
    Role,
    Snapshot,
)

ADD, REMOVE = ConfigChangeType.ADD_PEER, ConfigChangeType.REMOVE_PEER


# -- leadership transfer (thesis §3.10) ----------------------------------------------------


def test_transfer_to_up_to_date_follower():
    c = Cluster("abc")
    a = c.elect("a")
    a.transfer_leadership("b")
    with pytest.raises(ProposalDroppedError):
        a.propose(b"x")
    c.pump()
    assert c.leaders() == ["b"] and c.nodes["b"].term == 2
    assert a.role is Role.FOLLOWER and a.leader == "b"
    assert any(e == "raft_leader_transfer" for _, e, _ in c.events)


def test_transfer_to_lagging_follower_brings_it_up_to_date_first():
    c = Cluster("abc")
    a = c.lagging("a", "c", 30)
    c.heal()
    c.sent.clear()
    a.transfer_leadership("c")
    c.pump()
    kinds = [m.type for m in c.sent if m.src == "a"]
    assert MessageType.TIMEOUT_NOW in kinds
    assert kinds.index(MessageType.APPEND) < kinds.index(MessageType.TIMEOUT_NOW)
    assert c.leaders() == ["c"]
    assert c.data("c")[:30] == [b"%d" % i for i in range(30)]


def test_transfer_aborted_after_election_timeout():
    c = Cluster("abc")
    a = c.elect("a")
    c.isolate("c")
    a.transfer_leadership("c")
    with pytest.raises(ProposalDroppedError):
        a.propose(b"x")
    c.tick(["a", "b"], n=10)  # one election timeout
    assert a.role is Role.LEADER
    a.propose(b"after")
    c.pump()
    assert c.data("b") == [b"after"]


def test_follower_forwards_transfer_request():
    c = Cluster("abc")
    c.elect("a")
    c.nodes["b"].transfer_leadership("c")
    c.pump()
    assert c.leaders() == ["c"]


def test_transfer_vote_passes_leader_lease():
    c = Cluster("abc")
    c.elect("a")
    c.nodes["b"].step(Message(MessageType.TIMEOUT_NOW, GROUP, "a", "b", term=1))
    c.pump()  # c heard from a just now, yet grants: the vote carries the transfer flag
    assert c.leaders() == ["b"]


# -- membership changes (thesis §4.1) ------------------------------------------------------


def test_add_peer_then_it_catches_up_and_votes():
    c = Cluster("abc")
    a = c.elect("a")
    c.commit("a", 5)
    c.add("d", ("a", "b", "c"))  # joins knowing the group, not itself: cannot campaign
    assert c.nodes["d"].peers == ("a", "b", "c")
    a.propose_config_change(ConfigChange(ADD, "d"))
    assert a.peers == ("a", "b", "c", "d")  # effective when appended
    c.pump()
    assert all(n.peers == ("a", "b", "c", "d") for n in c.nodes.values())
    assert c.data("d") == [b"%d" % i for i in range(5)]
    assert set(a.progress()) == {"a", "b", "c", "d"}
    # quorum is now 3 of 4: with b and c gone, a and d cannot commit
    c.isolate("b")
    c.isolate("c")
    a.propose(b"needs3")
    c.pump()
    assert a.commit_index < a.last_index
    c.heal()
    c.tick(["a"])
    assert a.commit_index == a.last_index


def test_one_config_change_at_a_time_and_validation():
    c = Cluster("abc")
    a = c.elect("a")
    with pytest.raises(ValueError):
        a.propose_config_change(ConfigChange(ADD, "b"))
    with pytest.raises(ValueError):
        a.propose_config_change(ConfigChange(REMOVE, "z"))
    with pytest.raises(NotLeaderError) as err:
        c.nodes["b"].propose_config_change(ConfigChange(ADD, "d"))
    assert err.value.leader == "a"
    c.isolate("b")
    c.isolate("c")
    a.propose_config_change(ConfigChange(ADD, "d"))
    with pytest.raises(ProposalDroppedError):
        a.propose_config_change(ConfigChange(REMOVE, "c"))


def test_remove_follower():
    c = Cluster("abc")
    a = c.elect("a")
    a.propose_config_change(ConfigChange(REMOVE, "c"))
    c.pump()
    assert a.peers == ("a", "b") and "c" not in a.progress()
    c.isolate("c")
    a.propose(b"two-of-two")
    c.tick(["a", "b"], n=30)  # check-quorum counts only a and b now
    assert a.role is Role.LEADER and c.data("b") == [b"two-of-two"]
    assert c.nodes["c"].role is Role.FOLLOWER  # removed: never campaigns


def test_remove_leader_steps_down_after_commit():
    c = Cluster("abc")
    a = c.elect("a")
    a.propose_config_change(ConfigChange(REMOVE, "a"))
    assert a.role is Role.LEADER  # until the removal commits
    c.pump()
    assert a.role is Role.FOLLOWER
    c.tick(["b", "c"], n=30)
    new = c.leaders()
    assert len(new) == 1 and new[0] in "bc"
    lead = c.nodes[new[0]]
    assert lead.peers == ("b", "c")
    lead.propose(b"on")
    c.pump()
    assert c.data("b")[-1] == b"on" and c.data("c")[-1] == b"on"


def test_replace_peer():
    c = Cluster("abc")
    a = c.elect("a")
    c.add("d", a.peers)
    a.propose_config_change(ConfigChange(ADD, "d"))
    c.pump()
    a.propose_config_change(ConfigChange(REMOVE, "c"))
    c.pump()
    assert a.peers == ("a", "b", "d")
    c.isolate("c")
    a.propose(b"r")
    c.pump()
    assert c.data("d")[-1] == b"r"


def test_uncommitted_config_change_undone_on_truncation():
    c = Cluster("abcde")
    a = c.elect("a")
    c.isolate("a")
    c.cut -= {("a", "b")}  # only b hears of the removal, and a never learns b has it
    c.drop = lambda m: m.type == MessageType.APPEND_RESPONSE
    a.propose_config_change(ConfigChange(REMOVE, "e"))
    c.pump()
    b = c.nodes["b"]
    assert b.peers == ("a", "b", "c", "d")  # appended, not committed: already in effect
    c.drop = None
    c.heal()
    c.isolate("a")
    c.tick(["b", "c", "d", "e"], n=40)  # c, d, e (3 of 5) elect one of them
    (lead,) = [i for i in "cde" if c.nodes[i].role is Role.LEADER]
    c.pump()
    assert c.storages["b"].term(2) == c.nodes[lead].term  # replaced by the new leader
    assert b.peers == ("a", "b", "c", "d", "e")
    assert ("b", "raft_peer_added") in {(n, e) for n, e, f in c.events if f.get("peer") == "e"}


def test_restart_restores_uncommitted_config():
    c = Cluster("abc")
    a = c.elect("a")
    c.add("d", a.peers)
    c.isolate("b")
    c.isolate("c")
    a.propose_config_change(ConfigChange(ADD, "d"))
    c.pump()
    a2 = c.restart("a")
    assert a2.peers == ("a", "b", "c", "d")


# -- snapshots (Raft §7) --------------------------------------------------------------------


def compact_leader(c: Cluster, node_id: str) -> Snapshot:
    st = c.storages[node_id]
    n = c.nodes[node_id]
    snap = st.create_snapshot(n.applied_index, b"state@%d" % n.applied_index, n.peers)
    st.compact(snap.index)
    return snap


def test_snapshot_to_far_behind_follower():
    c = Cluster("abc")
    a = c.lagging("a", "c", 50)
    snap = compact_leader(c, "a")
    assert c.storages["a"].first_index() == snap.index + 1
    for i in range(50, 55):
        a.propose(b"%d" % i)
    c.pump()
    c.heal()
    c.tick(["a"], n=3)
    st = c.storages["c"]
    assert st.snapshot() == snap and st.first_index() == snap.index + 1
    assert c.applied["c"][0].data == b"<snap>"
    assert c.data("c")[-5:] == [b"%d" % i for i in range(50, 55)]
    assert c.nodes["c"].commit_index == a.commit_index
    assert a.progress()["c"]["state"] == "replicate"
    assert any(n == "c" and e == "raft_snapshot_installed" for n, e, _ in c.events)


def test_old_and_duplicate_snapshots_ignored():
    c = Cluster("abc")
    a = c.elect("a")
    c.commit("a", 5)
    b = c.nodes["b"]
    before = (b.commit_index, b.last_index)
    old = Snapshot(2, 1, ("a", "b", "c"), b"old")
    b.step(Message(MessageType.SNAPSHOT, GROUP, "a", "b", term=1, snapshot=old))
    rd = c.handle("b")
    assert rd.snapshot is None and (b.commit_index, b.last_index) == before
    assert rd.messages[0].type == MessageType.APPEND_RESPONSE


def test_snapshot_installs_peers():
    st = MemoryStorage(())
    n = RaftNode(Config("d", GROUP), st)
    snap = Snapshot(10, 3, ("a", "b", "d"), b"s")
    n.step(Message(MessageType.SNAPSHOT, GROUP, "a", "d", term=3, snapshot=snap))
    rd = n.ready()
    assert rd.snapshot == snap and n.peers == ("a", "b", "d")
    assert rd.messages[0].index == 10 and not rd.messages[0].reject
    st.apply_snapshot(rd.snapshot)
    st.set_hard_state(rd.hard_state)
    n.advance(rd)
    assert n.applied_index == 10 and n.commit_index == 10 and n.last_index == 10
    n2 = RaftNode(Config("d", GROUP), st)
    assert n2.peers == ("a", "b", "d") and n2.commit_index == 10 and n2.term == 3


def test_memory_storage_semantics():
    from jetraft.raft import CompactedError, Entry, UnavailableError

    st = MemoryStorage(("a",))
    st.append([Entry(1, i) for i in range(1, 11)])
    st.append([Entry(2, 5), Entry(2, 6)])  # truncates 5..10
    assert st.last_index() == 6 and st.term(5) == 2
    snap = st.create_snapshot(4, b"d", ("a",))
    st.compact(4)
    assert st.first_index() == 5 and st.term(4) == 1
    with pytest.raises(CompactedError):
        st.entries(3, 5)
    with pytest.raises(UnavailableError):
        st.term(7)
    with pytest.raises(ValueError):
        st.compact(5)
    assert st.snapshot() == snap
    st.apply_snapshot(Snapshot(6, 2, ("a",)))  # log holds 6@2: keep what follows
    assert st.first_index() == 7 and st.last_index() == 6
    st.apply_snapshot(Snapshot(9, 9, ("a",)))  # not held: drop all
    assert st.first_index() == 10 and st.term(9) == 9


# -- read index (thesis §6.4) ---------------------------------------------------------------


def test_read_index_on_leader_needs_heartbeat_quorum():
    c = Cluster("abc")
    a = c.elect("a")
    a.propose(b"w")
    c.pump()
    c.isolate("b")
    c.isolate("c")
    a.read_index(b"r1")
    c.pump()
    assert c.read_states["a"] == []
    c.heal()
    c.tick(["a"])
    assert c.read_states["a"] == [ReadState(2, b"r1")]


def test_read_index_from_follower():
    c = Cluster("abc")
    a = c.elect("a")
    a.propose(b"w")
    c.pump()
    c.nodes["b"].read_index(b"rb")
    c.pump()
    assert c.read_states["b"] == [ReadState(2, b"rb")]


def test_read_index_waits_for_commit_in_leader_term():
    c = Cluster("abc")
    a = c.elect("a")
    c.isolate("a")
    c.tick(["b", "c"], n=30)
    (lead,) = [i for i in "bc" if c.nodes[i].role is Role.LEADER]
    b = c.nodes[lead]
    assert b.term == 2
    # b's empty entry of term 2 is held back: b cannot answer reads yet
    c.heal()
    c.isolate("a")
    other = "c" if b.id == "b" else "b"
    c.cut |= {(b.id, other)}
    b.read_index(b"early")
    c.pump()
    assert c.read_states[b.id] == []
    c.cut.discard((b.id, other))
    c.tick([b.id], n=2)
    assert c.read_states[b.id] == [ReadState(b.commit_index, b"early")]
    assert b.commit_index >= 2


def test_read_index_single_node_immediate():
    c = Cluster("a")
    a = c.elect("a")
    c.pump()
    a.read_index(b"solo")
    c.pump()
    assert c.read_states["a"] == [ReadState(1, b"solo")]


def test_read_index_without_leader_dropped():
    n = RaftNode(Config("a", GROUP, ("a", "b", "c")), MemoryStorage(("a", "b", "c")))
    with pytest.raises(ProposalDroppedError):
        n.read_index(b"x")
