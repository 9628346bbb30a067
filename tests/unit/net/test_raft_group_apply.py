"""How a RaftGroup hands committed entries to its state machine: held back while the state
machine completes a snapshot (the backlog), and with a new leader reported at its own
term's first entry."""

from __future__ import annotations

from jetraft.net.raft.group import RaftGroup
from jetraft.raft import Config, Message, MessageType, RaftNode, Snapshot
from jetraft.storage import GroupCommit
from jetraft.raft.storage.group import GroupLog
from jetraft.raft.types import Entry


class Host:
    server_name = "n1"
    down: set[str] = set()
    election_timeout_ns = 10**9

    def touch(self, g) -> None:
        pass

    def wants_event(self, name: str) -> bool:
        return False

    def group_event(self, g, name: str, fields: dict) -> None:
        pass


class SM:
    def __init__(self) -> None:
        self.applied: list[int] = []
        self.restored: list[bytes] = []
        self.holding = False
        self.seen: list[tuple] = []        # ("apply", index) and ("leader", leader, term) in order

    def apply(self, entries) -> None:
        self.applied += [e.index for e in entries]
        self.seen += [("apply", e.index) for e in entries]

    def snapshot(self) -> bytes:
        return b"s"

    def restore(self, data: bytes) -> None:
        self.restored.append(data)

    def leader_changed(self, leader, term) -> None:
        self.seen.append(("leader", leader, term))


def test_the_backlog_waits_for_a_snapshot_the_node_just_installed(tmp_path):
    """A group whose state machine held entries back (a replica completing its own snapshot
    at start) meets an InstallSnapshot from the leader before the host's pass has handled
    it: the backlog must wait for that snapshot's Ready, not read entries the log does not
    hold (the group failed with "index ... is past the last index")."""
    log = GroupLog(str(tmp_path / "g"), sync=GroupCommit(), peers=("n1", "n2", "n3"))
    log.append([Entry(1, i) for i in range(1, 11)])
    sm = SM()
    g = RaftGroup(Host(), "g", log, sm)
    g.node = RaftNode(Config("n1", "g", ("n1", "n2", "n3")), log)
    sm.holding = True                          # completing its snapshot: entries held back
    g.node.step(Message(MessageType.APPEND, "g", "n2", "n1", term=1, index=10, log_term=1,
                        commit=10))
    g.apply_ready(g.node.ready())
    assert g.backlog_due() is False and sm.applied == []
    sm.holding = False                         # done; the leader's snapshot arrives first
    g.node.step(Message(MessageType.SNAPSHOT, "g", "n2", "n1", term=1,
                        snapshot=Snapshot(5000, 1, ("n1", "n2", "n3"), b"leader's")))
    g.apply_backlog()                          # the pass before the Ready: nothing to read
    rd = g.node.ready()
    g.persist(rd)
    g.apply_ready(rd)
    assert sm.restored == [b"leader's"] and g.applied_index == 5000
    g.apply_backlog()
    assert g.backlog_due() is False


def test_a_new_leader_is_reported_right_after_its_terms_first_entry_is_applied(tmp_path):
    """Raft §8: the leader reports itself once its own term's empty entry is applied, and
    before anything proposed after it: the replies of those entries (PubAcks) are sent
    even when they commit in the same pass as the empty entry."""
    log = GroupLog(str(tmp_path / "g"), sync=GroupCommit(), peers=("n1",))
    sm = SM()
    g = RaftGroup(Host(), "g", log, sm)
    g.node = RaftNode(Config("n1", "g", ("n1",)), log)
    g.node.campaign()
    g.node.propose(b"publish")
    while g.node.has_ready():
        rd = g.node.ready()
        g.persist(rd)
        g.apply_ready(rd)
        g.node.advance(rd)
        g.check_leader()
    assert sm.seen == [("apply", 1), ("leader", "n1", 1), ("apply", 2)]
