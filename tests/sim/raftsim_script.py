"""Helpers for scripted scenarios over :class:`raftsim.Cluster` (manual delivery, in the
style of etcd-io/raft's interaction tests), and the Figure 8 construction shared by the
scenario and mutation tests."""

from __future__ import annotations

from typing import Callable, Iterable

from jetraft.raft.types import Message, MessageType, Role
from raftsim import Cluster

VOTE_TYPES = frozenset(
    {MessageType.VOTE, MessageType.VOTE_RESPONSE, MessageType.PRE_VOTE, MessageType.PRE_VOTE_RESPONSE}
)


def among(*ids: str) -> Callable[[Message], bool]:
    """Messages whose both ends are in ``ids`` (a partition keeping ``ids`` together)."""
    s = frozenset(ids)
    return lambda m: m.src in s and m.dst in s


def up(c: Cluster) -> list[str]:
    return [x for x in c.ids if c.nodes[x].raft is not None]


def pump(c: Cluster, allow: Callable[[Message], bool] | None = None, rounds: int = 200) -> None:
    """Process every Ready and deliver the allowed messages (dropping the others) until
    nothing moves."""
    for _ in range(rounds):
        moved = False
        for x in up(c):
            if c.process_ready(x) is not None:
                moved = True
        if allow is not None:
            c.drop(lambda m: not allow(m))
        if c.deliver() > 0:
            moved = True
        if not moved:
            return
    raise AssertionError("messages kept flowing: no quiescence")


def tick_until(
    c: Cluster,
    cond: Callable[[], bool],
    *,
    nodes: Iterable[str] | None = None,
    allow: Callable[[Message], bool] | None = None,
    max_ticks: int = 500,
) -> int:
    """Tick ``nodes`` (default: every up node) one at a time, pumping after each tick,
    until ``cond()``; returns the ticks taken. Fails after ``max_ticks``."""
    for t in range(max_ticks):
        if cond():
            return t
        for x in list(nodes) if nodes is not None else up(c):
            if c.nodes[x].raft is not None:
                c.tick(x)
        pump(c, allow)
    if cond():
        return max_ticks
    raise AssertionError(f"condition not reached within {max_ticks} ticks")


def ticks(c: Cluster, n: int, *, nodes: Iterable[str] | None = None, allow=None) -> None:
    nodes = list(nodes) if nodes is not None else None
    for _ in range(n):
        for x in nodes if nodes is not None else up(c):
            if c.nodes[x].raft is not None:
                c.tick(x)
        pump(c, allow)


def elect_by_votes(c: Cluster, pid: str, voters: Iterable[str], rounds: int = 20) -> None:
    """Make ``pid`` leader with the votes of ``voters``: only vote traffic among them is
    delivered, and the new leader's first appends are dropped (its log gets its no-op
    entry, nobody else does)."""
    group = frozenset([pid, *voters])
    only_votes = lambda m: m.type in VOTE_TYPES and m.src in group and m.dst in group  # noqa: E731
    r = c.nodes[pid].raft
    for _ in range(rounds):
        if r.role is Role.LEADER:
            break
        c.campaign(pid)  # again, in a higher term, if the last one did not win
        for _ in range(4):
            for x in up(c):
                c.process_ready(x)
            c.drop(lambda m: not only_votes(m))
            c.deliver()
    assert r.role is Role.LEADER, f"{pid} was not elected by {sorted(voters)}"
    c.process_ready(pid)
    c.drop()


def entry_at(c: Cluster, pid: str, index: int):
    for e in c.nodes[pid].storage.view.log():
        if e.index == index:
            return e
    return None


def figure8(c: Cluster) -> dict:
    """Raft paper Figure 8 on a 5-node cluster built with ``pre_vote=False,
    check_quorum=False, max_entries_per_message=1`` (so an old entry travels alone).

    (a) n1 leads term T1 and puts X at index k on n1 and n2 only. (b) n1 crashes; n5 leads
    T2 with the votes of n3, n4 and writes its no-op Y at k on itself only. (c) n5 crashes;
    n1 restarts and leads T3 (votes of n2, n3, n4), and replicates X to n3 and n4 but not
    its own no-op: X (term T1) is now on a majority, n1, n2, n3, n4, in term T3. A correct
    leader does NOT commit it (§5.4.2). (d) n1 crashes; n5 restarts and wins T4 (its last
    term T2 beats T1) with n2, n3, n4, and overwrites X with Y. Returns the facts for the
    assertions; a leader that committed X at (c) makes the checker fail at (d).
    """
    facts: dict = {}
    c.campaign("n1")
    pump(c)
    assert c.leader() == "n1"
    t1 = c.nodes["n1"].raft.term
    k = c.nodes["n1"].raft.last_index + 1
    facts.update(k=k, t1=t1)
    # (a) X on n1 and n2 only
    c.propose("n1", b"X")
    c.process_ready("n1")
    c.deliver(lambda m: m.dst == "n2" and m.type is MessageType.APPEND)
    c.drop()
    c.process_ready("n2")
    c.drop()
    assert entry_at(c, "n2", k).data == b"X"
    # (b) n5 leads T2 and writes Y at k on itself only
    c.crash("n1")
    elect_by_votes(c, "n5", ["n3", "n4"])
    t2 = c.nodes["n5"].raft.term
    assert t2 > t1 and entry_at(c, "n5", k).term == t2
    facts["t2"] = t2
    # (c) n1 leads T3 and brings X (alone) to n3 and n4; its own no-op at k+1 goes nowhere
    c.crash("n5")
    c.restart("n1")
    elect_by_votes(c, "n1", ["n2", "n3", "n4"])
    t3 = c.nodes["n1"].raft.term
    facts["t3"] = t3
    def only_x(m: Message) -> bool:
        # an append carrying the no-op reaches only a node that cannot take it (it lacks
        # index k, so it rejects the append and the leader backs up to send X alone)
        if m.type is MessageType.APPEND and any(e.index > k for e in m.entries):
            return entry_at(c, m.dst, k) is None
        return True

    for _ in range(10):
        c.tick("n1")
        pump(c, only_x)
        if all(getattr(entry_at(c, p, k), "term", None) == t1 for p in ("n3", "n4")):
            break
    holders = [p for p in c.ids if c.nodes[p].raft is not None and getattr(entry_at(c, p, k), "term", None) == t1]
    facts["x_holders"] = holders
    facts["commit_after_c"] = c.nodes["n1"].raft.commit_index
    # (d) n5 comes back and wins T4 with the votes of n2, n3, n4
    c.crash("n1")
    c.restart("n5")
    elect_by_votes(c, "n5", ["n2", "n3", "n4"])
    facts["t4"] = c.nodes["n5"].raft.term
    pump(c)
    c.restart("n1")
    ticks(c, 3, nodes=["n5"])
    pump(c)
    return facts
