"""The checker bites: RaftNode subclasses with a deliberately broken rule must be caught.

Each broken variant overrides one of the core's mutation hooks; a targeted, fully
scripted schedule (no randomness) drives it into the situation the rule exists for, and
the simulator's checker must raise :class:`InvariantViolation`. The same schedule on the
correct RaftNode raises nothing (that is asserted too, so the scenario cannot pass by
accident). A test here fails if a broken node goes unnoticed.
"""

from __future__ import annotations

import pytest
from raftsim import Cluster, InvariantViolation
from raftsim_random import RandomSim, SimParams
from raftsim_script import elect_by_votes, figure8

from jetraft.raft.node import RaftNode
from jetraft.raft.types import MessageType, Role


class CountsStaleVotes(RaftNode):
    """Counts every vote answer, whatever term or campaign it belongs to."""

    def _vote_counts(self, msg) -> bool:
        return True


class CommitsOldTermByCounting(RaftNode):
    """Commits any entry held by a quorum, even one of an earlier term (breaks §5.4.2)."""

    def _may_commit(self, index: int) -> bool:
        return True


def stale_vote_schedule(node_cls) -> Cluster:
    """n1 asks n2 for a vote in term 1; n2 grants, but the answer is held back in the
    network. n3 then wins term 2 with n2's vote. n1 campaigns in term 2 and only then
    receives n2's term-1 grant: counting it would make a second leader of term 2."""
    c = Cluster(3, node_cls=node_cls, pre_vote=False, check_quorum=False)
    c.campaign("n1")
    c.process_ready("n1")
    c.deliver(lambda m: m.dst == "n2")
    c.drop()
    c.process_ready("n2")
    (held,) = c.mailbox
    assert held.type is MessageType.VOTE_RESPONSE and not held.reject and held.term == 1
    c.mailbox.clear()
    elect_by_votes(c, "n3", ["n2"])
    assert c.nodes["n3"].raft.term == 2
    c.campaign("n1")
    assert c.nodes["n1"].raft.term == 2
    c.process_ready("n1")
    c.drop()
    c.step(held)
    c.process_ready("n1")
    return c


def test_correct_node_ignores_a_stale_vote() -> None:
    c = stale_vote_schedule(RaftNode)
    assert c.nodes["n1"].raft.role is not Role.LEADER
    assert c.checker.leaders == {1: "n3"} or c.checker.leaders.get(2) == "n3"


def test_stale_vote_counting_is_caught() -> None:
    with pytest.raises(InvariantViolation) as info:
        stale_vote_schedule(CountsStaleVotes)
    assert info.value.invariant == "election safety"
    assert "two leaders in term 2" in info.value.detail


def test_correct_node_passes_figure8() -> None:
    c = Cluster(5, pre_vote=False, check_quorum=False, max_entries_per_message=1)
    facts = figure8(c)
    assert len(facts["x_holders"]) >= 3  # X was on a majority in term T3 ...
    assert facts["commit_after_c"] < facts["k"]  # ... and still not committed


def test_committing_an_old_term_entry_by_counting_is_caught() -> None:
    c = Cluster(5, node_cls=CommitsOldTermByCounting, pre_vote=False, check_quorum=False, max_entries_per_message=1)
    with pytest.raises(InvariantViolation) as info:
        figure8(c)
    assert info.value.invariant in ("leader completeness", "state machine safety")


class SendsBeforeSync(RandomSim):
    """A driver that breaks persistence-before-send: messages (votes, acks) leave as soon
    as the Ready is written, before its fsync. A crash then loses writes others relied on."""

    def event(self) -> None:
        c = self.cluster
        if self.queue and self.queue[0][2] == "ready":
            _, _, _, (pid, inc) = self.queue[0]
            sn = c.nodes[pid]
            super().event()
            if sn.inflight is not None and sn.inflight.messages:
                msgs, sn.inflight.messages = sn.inflight.messages, []
                for m in msgs:
                    self.send(m)
            return
        super().event()


def test_sending_before_fsync_is_caught_by_crash_nemesis() -> None:
    """Random runs with frequent crashes (slow fsyncs, crashes aimed at leaders) must catch
    the driver that acks before its fsync within a fixed set of seeds."""
    caught = []
    for seed in range(10):
        p = SimParams(
            nodes=3,
            steps=3000,
            fsync_delay=(20, 60),
            crash_weight=6,
            leader_crash_share=0.5,
            nemesis_every=40,
            torn_share=0.0,
            propose_every=5,
        )
        try:
            SendsBeforeSync(seed, p).run()
        except InvariantViolation as exc:
            caught.append((seed, exc.invariant))
    assert caught, "acking before fsync went unnoticed in 10 seeds"


class VotesRightAfterItsStoreIsWiped(RaftNode):
    """Ignores ``can_vote``: a node that lost its store votes as soon as it is back (the
    hazard of a wiped disk rejoining under its old identity: nats-server #7567)."""

    def __init__(self, *args, can_vote=None, **kw) -> None:
        super().__init__(*args, **kw)


def test_the_wipe_rule_is_what_keeps_acknowledged_entries() -> None:
    """With membership changes and wiped stores (one at a time), the random runs lose no
    committed entry when a wiped node may not vote until it is admitted again; without the
    rule the checker finds a new leader that lacks a committed entry."""
    found = None
    for seed in range(3, 800, 4):            # seeds with membership changes and wipes
        try:
            RandomSim(seed, SimParams.for_seed(seed, steps=3000),
                      node_cls=VotesRightAfterItsStoreIsWiped).run()
        except InvariantViolation as exc:
            found = (seed, exc.invariant)
            break
    assert found is not None and found[1] in ("leader completeness", "state machine safety"), found
    RandomSim(found[0], SimParams.for_seed(found[0], steps=3000)).run()   # the rule holds there
