"""Scripted classic RAFT cases on the jetraft core, driven message by message in the
simulator (etcd-io/raft interaction style: the script decides what is delivered, dropped
or ticked). The safety checker runs through every step; each test also asserts the
outcome the case is about."""

from __future__ import annotations

import pytest
from raftsim import Cluster
from raftsim_script import entry_at, figure8, pump, tick_until, ticks

from jetraft.raft.types import (
    ConfigChange,
    ConfigChangeType,
    MessageType,
    ProposalDroppedError,
    Role,
)


def start(n: int = 3, **kw) -> Cluster:
    """A cluster with n1 elected and its no-op committed everywhere."""
    c = Cluster(n, **kw)
    c.campaign("n1")
    pump(c)
    assert c.leader() == "n1"
    return c


def term(c: Cluster, pid: str) -> int:
    return c.nodes[pid].raft.term


def role(c: Cluster, pid: str) -> Role:
    return c.nodes[pid].raft.role


def without(pid: str):
    return lambda m: m.src != pid and m.dst != pid


# -- Figure 8 ------------------------------------------------------------------------------


def test_figure8_old_term_entry_on_a_majority_is_not_committed() -> None:
    c = Cluster(5, pre_vote=False, check_quorum=False, max_entries_per_message=1)
    f = figure8(c)
    k = f["k"]
    # at (c) X (term T1) was on n1..n4, a majority, in term T3 -- yet not committed
    assert set(f["x_holders"]) >= {"n1", "n3", "n4"}
    assert f["commit_after_c"] < k
    # at (d) n5 won T4 and Y (term T2) replaced X everywhere; X was never applied anywhere
    assert f["t4"] > f["t3"] > f["t2"] > f["t1"]
    for pid in c.ids:
        assert entry_at(c, pid, k).term == f["t2"], pid
        assert b"X" not in c.applied_data(pid)
        assert c.nodes[pid].sm_index >= k


# -- a partitioned leader with a stale term ---------------------------------------------------


@pytest.mark.parametrize("check_quorum", [True, False])
def test_partitioned_leader_steps_down_and_loses_uncommitted_entries(check_quorum: bool) -> None:
    c = start(3, check_quorum=check_quorum)
    c.propose("n1", b"committed")
    pump(c)
    old_term = term(c, "n1")
    # n1 is cut off; what it takes now cannot commit
    c.propose("n1", b"lost-1")
    c.propose("n1", b"lost-2")
    pump(c, without("n1"))
    assert len(c.nodes["n1"].storage.view.log()) > len(c.nodes["n2"].storage.view.log())
    # the majority elects a new leader in a higher term and commits
    tick_until(c, lambda: c.leader() in ("n2", "n3") and c.leader() != "n1" and term(c, c.leader()) > old_term,
               allow=without("n1"), nodes=["n1", "n2", "n3"])
    new = next(p for p in ("n2", "n3") if role(c, p) is Role.LEADER)
    if check_quorum:
        assert role(c, "n1") is not Role.LEADER, "check-quorum: a leader without a quorum steps down"
    else:
        assert role(c, "n1") is Role.LEADER and term(c, "n1") == old_term  # a stale leader
    c.propose(new, b"new")
    pump(c, without("n1"))
    # heal: n1 learns the higher term, steps down, its uncommitted entries are overwritten
    tick_until(c, lambda: c.nodes["n1"].sm_index == c.nodes[new].sm_index and role(c, "n1") is Role.FOLLOWER,
               nodes=[new])
    assert c.leader() == new
    assert term(c, "n1") == term(c, new)
    assert c.log("n1") == c.log(new)
    for pid in c.ids:
        data = c.applied_data(pid)
        assert b"committed" in data and b"new" in data
        assert b"lost-1" not in data and b"lost-2" not in data


# -- pre-vote ----------------------------------------------------------------------------------


@pytest.mark.parametrize("pre_vote", [True, False])
def test_rejoining_node_does_not_disrupt_with_pre_vote(pre_vote: bool) -> None:
    c = start(3, pre_vote=pre_vote, check_quorum=pre_vote)
    t0 = term(c, "n1")
    # n3 is isolated for many election timeouts while the others make progress
    for i in range(3):
        c.propose("n1", b"while-away-%d" % i)
    ticks(c, 60, allow=without("n3"))
    if pre_vote:
        assert term(c, "n3") == t0, "pre-vote: an isolated node does not inflate its term"
    else:
        assert term(c, "n3") > t0  # without pre-vote it does: the control case
    # heal and run for a while
    ticks(c, 30)
    if pre_vote:
        assert c.leader() == "n1" and term(c, "n1") == t0, "the rejoining node disrupted the leader"
        assert c.checker.leaders.keys() == {t0}
    else:
        assert term(c, c.leader()) > t0  # the rejoining node forced a new election
    leader = c.leader()
    assert c.log("n3") == c.log(leader)
    assert c.applied_data("n3") == c.applied_data(leader)


# -- leadership transfer --------------------------------------------------------------------


def test_leadership_transfer_to_a_lagging_node_catches_it_up_first() -> None:
    c = start(3)
    for i in range(10):
        c.propose("n1", b"e%d" % i)
    pump(c, without("n3"))
    target_last = c.nodes["n1"].raft.last_index
    assert c.nodes["n3"].storage.last_index() < target_last
    c.transfer("n1", "n3")
    with pytest.raises(ProposalDroppedError):
        c.propose("n1", b"during-transfer")
    # the TIMEOUT_NOW may reach n3 only once n3 holds the leader's whole log
    seen_timeout_now = []

    def check(m) -> bool:
        if m.type is MessageType.TIMEOUT_NOW:
            assert m.dst == "n3"
            assert c.nodes["n3"].storage.last_index() >= target_last, "TIMEOUT_NOW before catch-up"
            seen_timeout_now.append(m)
        return True

    tick_until(c, lambda: c.leader() == "n3", allow=check, max_ticks=30)
    assert seen_timeout_now
    assert role(c, "n1") is Role.FOLLOWER
    c.propose("n3", b"after")
    pump(c)
    for pid in c.ids:
        data = [d for d in c.applied_data(pid) if d]  # leaders' no-op entries are empty
        assert data[-11:] == [b"e%d" % i for i in range(10)] + [b"after"]


# -- removing the leader ----------------------------------------------------------------------


def test_removing_the_leader() -> None:
    c = start(3)
    c.propose("n1", b"before")
    pump(c)
    c.propose_config_change("n1", ConfigChange(ConfigChangeType.REMOVE_PEER, "n1"))
    pump(c)
    tick_until(c, lambda: c.leader() in ("n2", "n3"), max_ticks=60)
    new = c.leader()
    assert role(c, "n1") is not Role.LEADER
    for pid in ("n2", "n3"):
        assert sorted(c.nodes[pid].raft.peers) == ["n2", "n3"]
    t = term(c, new)
    # the removed node keeps ticking and talking: it must not disrupt, nor lead again
    ticks(c, 80)
    assert c.leader() == new and term(c, new) == t
    assert all(leader != "n1" for tm, leader in c.checker.leaders.items() if tm >= t)
    c.propose(new, b"two-node-group")
    pump(c)
    for pid in ("n2", "n3"):
        assert [d for d in c.applied_data(pid) if d][-1] == b"two-node-group"


# -- snapshot to a far-behind follower -------------------------------------------------------


def test_snapshot_catches_up_a_far_behind_follower() -> None:
    c = start(3)
    for i in range(30):
        c.propose("n1", b"s%d" % i)
        pump(c, without("n3"))
    applied = c.nodes["n1"].sm_index
    snap = c.snapshot("n1")
    assert snap is not None and snap.index == applied
    assert c.nodes["n1"].storage.first_index() == applied + 1  # compacted: n3 needs the snapshot
    c.record_delivered = True
    tick_until(c, lambda: c.nodes["n3"].sm_index >= applied, max_ticks=30)
    snaps = [m for m in c.delivered if m.type is MessageType.SNAPSHOT and m.dst == "n3"]
    assert snaps and snaps[0].snapshot.index == applied
    assert c.nodes["n3"].storage.snapshot().index == applied
    # and it applies what comes after the snapshot
    for i in range(3):
        c.propose("n1", b"after-%d" % i)
    pump(c)
    assert [d for d in c.applied_data("n3") if d][-3:] == [b"after-0", b"after-1", b"after-2"]
    assert c.nodes["n3"].sm_index == c.nodes["n1"].sm_index
    assert c.nodes["n3"].sm_hash == c.nodes["n1"].sm_hash


# -- crash before fsync ----------------------------------------------------------------------


def test_torn_append_on_a_follower_is_repaired() -> None:
    c = start(3)
    for i in range(5):
        c.propose("n1", b"t%d" % i)
    c.process_ready("n1")
    c.deliver(lambda m: m.dst == "n2")
    c.drop()
    rd = c.persist("n2")  # written, not synced
    assert rd is not None and len(rd.entries) >= 2
    c.crash("n2", keep=1)  # the torn append keeps only its first entry
    c.restart("n2")
    tick_until(c, lambda: c.nodes["n2"].sm_index == c.nodes["n1"].sm_index >= 6, max_ticks=30)
    assert [d for d in c.applied_data("n2") if d][-5:] == [b"t%d" % i for i in range(5)]
