"""jetraft RAFT core: log replication, commit rules (Raft §5.3, §5.4.2), flow control,
fast backtracking, forwarded proposals."""

from __future__ import annotations

import pytest
from raft_pump import GROUP, Cluster, persist

from jetraft.raft import (
    Config,
    Entry,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    ProposalDroppedError,
    RaftNode,
)


def test_replication_and_commit_everywhere():
    c = Cluster("abcde")
    c.elect("a")
    c.commit("a", 100, b"v")
    want = [b"v%d" % i for i in range(100)]
    for i in "abcde":
        assert c.data(i) == want
        assert c.nodes[i].commit_index == c.nodes[i].applied_index == 101


def test_many_entries_per_append():
    c = Cluster("abc", max_entries_per_message=64)
    a = c.elect("a")
    c.sent.clear()
    for i in range(200):
        a.propose(b"x")
    c.pump()
    appends = [m for m in c.sent if m.type == MessageType.APPEND and m.src == "a" and m.entries]
    assert max(len(m.entries) for m in appends) == 64
    assert len(appends) <= 2 * 4 + 2  # 200 entries in 64-entry batches per follower


def test_bytes_per_message_bound():
    c = Cluster("abc", max_bytes_per_message=1000)
    a = c.elect("a")
    c.sent.clear()
    for i in range(20):
        a.propose(b"y" * 300)
    c.pump()
    appends = [m for m in c.sent if m.type == MessageType.APPEND and m.entries]
    assert all(sum(len(e.data) for e in m.entries) <= 1000 for m in appends)
    assert c.data("b") == [b"y" * 300] * 20


def test_committed_entries_are_handed_over_in_bounded_steps():
    c = Cluster("abc", max_committed_bytes_per_ready=1000)
    c.elect("a")
    c.commit("a", 20, b"z" * 295)                    # about 297 bytes each
    for i in "abc":
        handed = [rd.committed_entries for rd in c.readies[i] if rd.committed_entries]
        assert all(sum(len(e.data) for e in batch) <= 1000 for batch in handed)
        assert len(handed) >= 6
        assert c.data(i) == [b"z" * 295 + b"%d" % k for k in range(20)]


def test_commit_needs_quorum():
    c = Cluster("abc")
    a = c.elect("a")
    c.isolate("b")
    c.isolate("c")
    a.propose(b"lost?")
    c.pump()
    assert a.commit_index == 1
    c.heal()
    c.tick(["a"])
    assert all(n.commit_index == 2 for n in c.nodes.values())


def test_leader_own_entries_count_only_once_persisted():
    # a 3-node group where one follower is down: the leader + 1 follower are a quorum,
    # but only once the leader's own entry is persisted (after advance).
    c = Cluster("abc")
    a = c.elect("a")
    c.isolate("c")
    a.propose(b"p")
    rd = a.ready()  # handed out, not yet persisted
    st = c.storages["a"]
    for m in rd.messages:
        c.nodes[m.dst].step(m) if m.dst == "b" else None
    b_rd = c.handle("b")
    for m in b_rd.messages:
        a.step(m)
    # b has it, but a has not persisted: b alone plus an unpersisted leader is no quorum
    assert a.commit_index == 1
    st.append(rd.entries)
    a.advance(rd)
    assert a.commit_index == 2


def test_follower_commit_bounded_by_what_it_holds():
    st = MemoryStorage(("a", "b", "c"))
    n = RaftNode(Config("b", GROUP, ("a", "b", "c")), st)
    n.step(Message(MessageType.APPEND, GROUP, "a", "b", term=1, index=0, log_term=0,
                   entries=(Entry(1, 1), Entry(1, 2)), commit=10))
    assert n.commit_index == 2
    n.step(Message(MessageType.HEARTBEAT, GROUP, "a", "b", term=1, commit=50))
    assert n.commit_index == 2


def figure8_cluster() -> Cluster:
    """Raft Figure 8 (c), scripted by hand: s1 and s2 hold index 2 of term 2, s5 holds
    index 2 of term 3, s3 and s4 only index 1; everyone is at term 3 with commit 1."""
    ids = ("s1", "s2", "s3", "s4", "s5")
    c = Cluster(ids, pre_vote=False, max_entries_per_message=1)
    logs = {
        "s1": [Entry(1, 1), Entry(2, 2)],
        "s2": [Entry(1, 1), Entry(2, 2)],
        "s3": [Entry(1, 1)],
        "s4": [Entry(1, 1)],
        "s5": [Entry(1, 1), Entry(3, 2)],
    }
    for i, ents in logs.items():
        st = MemoryStorage(ids)
        st.append(ents)
        st.set_hard_state(HardState(3, None, 1))
        c.storages[i] = st
        c.start(i)
    return c


def test_figure8_old_term_entry_not_committed_by_counting():
    """Raft §5.4.2: s1 leads term 4 and copies its term-2 entry to a majority, but must
    not commit it until an entry of term 4 is on a majority too: s5 could still win an
    election and overwrite it."""
    c = figure8_cluster()
    c.isolate("s5")

    def hold_term4(m: Message) -> bool:
        if m.type == MessageType.APPEND:  # the term-4 entry never leaves s1
            m.entries = tuple(e for e in m.entries if e.term != 4)
        return False

    c.drop = hold_term4
    s1 = c.elect("s1")
    assert s1.term == 4
    c.tick(["s1"], n=3)
    assert [c.storages[i].term(2) for i in ("s1", "s2", "s3", "s4")] == [2, 2, 2, 2]
    assert s1.commit_index == 1, "an entry of an old term was committed by counting replicas"
    # what could happen next (Figure 8 d): s5 wins term 5 and overwrites index 2
    c.heal()
    c.isolate("s1")
    c.drop = None
    c.tick(["s2", "s3", "s4", "s5"], n=10)  # the others' leader lease runs out
    s5 = c.elect("s5")
    s5.propose(b"s5")
    c.pump()
    assert all(c.storages[i].term(2) == 3 for i in ("s2", "s3", "s4", "s5"))
    assert all(e.term != 2 for i in c.nodes for e in c.applied[i])


def test_figure8_commit_once_current_term_entry_replicated():
    """Figure 8 (e): once s1's term-4 entry reaches a majority, index 2 commits with it."""
    c = figure8_cluster()
    c.isolate("s5")
    s1 = c.elect("s1")
    c.tick(["s1"], n=2)
    assert s1.commit_index == 3
    assert all(c.nodes[i].commit_index == 3 for i in ("s2", "s3", "s4"))


def test_fast_backtracking_with_long_divergent_log():
    """A follower with 300 entries of an old term that the leader never had: the leader
    finds the match point in a few round trips, not 300 (reject hints)."""
    ids = ("a", "b", "c")
    stores = {i: MemoryStorage(ids) for i in ids}
    stores["b"].append([Entry(1, i) for i in range(1, 301)])
    stores["b"].set_hard_state(HardState(1, "b", 0))
    stores["a"].append([Entry(1, 1)] + [Entry(2, i) for i in range(2, 11)])
    stores["a"].set_hard_state(HardState(2, "a", 1))
    stores["c"].append([Entry(1, 1)] + [Entry(2, i) for i in range(2, 11)])
    stores["c"].set_hard_state(HardState(2, "a", 1))
    c = Cluster(ids)
    c.storages = stores
    for i in ids:
        c.start(i)
    c.isolate("b")
    c.elect("a")
    c.heal()
    c.sent.clear()
    c.nodes["a"].propose(b"z")
    c.tick(["a"], n=2)
    rejects = [m for m in c.sent if m.src == "b" and m.type == MessageType.APPEND_RESPONSE and m.reject]
    assert 1 <= len(rejects) <= 3
    assert c.nodes["b"].last_index == c.nodes["a"].last_index == 12
    assert [stores["b"].term(i) for i in (1, 2, 10, 11, 12)] == [1, 2, 2, 3, 3]


def test_inflight_window_never_exceeded():
    c = Cluster("abc", max_inflight=3, max_entries_per_message=2)
    a = c.elect("a")
    seen = []

    def watch(m):
        if m.type == MessageType.APPEND and m.src == "a":
            seen.append(a.progress()[m.dst]["inflight"])
        return False

    c.drop = watch
    for i in range(50):
        a.propose(b"%d" % i)
    # hand the leader's Ready out without delivering: only 3 appends per follower
    rd = c.handle("a")
    per = {d: sum(1 for m in rd.messages if m.type == MessageType.APPEND and m.dst == d)
           for d in "bc"}
    assert per == {"b": 3, "c": 3}
    assert a.progress()["b"]["inflight"] == 3
    c.pump()
    assert max(seen) <= 3
    assert c.data("c") == [b"%d" % i for i in range(50)]


def test_lost_appends_recovered_through_probe():
    c = Cluster("abc")
    a = c.elect("a")
    c.drop = lambda m: m.type == MessageType.APPEND and m.dst == "c"
    for i in range(10):
        a.propose(b"%d" % i)
    c.pump()
    assert c.nodes["c"].last_index == 1
    c.drop = None
    c.tick(["a"], n=3)
    assert c.data("c") == [b"%d" % i for i in range(10)]


def test_follower_forwards_proposals():
    c = Cluster("abc")
    c.elect("a")
    c.nodes["b"].propose(b"from-b")
    c.nodes["b"].propose(b"from-b2")
    c.pump()
    fwd = [m for m in c.sent if m.type == MessageType.PROPOSE]
    assert len(fwd) == 1 and fwd[0].dst == "a" and len(fwd[0].entries) == 2
    assert c.data("c") == [b"from-b", b"from-b2"]


def test_propose_without_leader_dropped():
    n = RaftNode(Config("a", GROUP, ("a", "b", "c")), MemoryStorage(("a", "b", "c")))
    with pytest.raises(ProposalDroppedError):
        n.propose(b"x")


def test_lagging_follower_catches_up_after_partition():
    c = Cluster("abc")
    c.lagging("a", "c", 500)
    c.tick(["a", "b"], n=3)
    c.heal()
    c.tick(n=3)
    assert c.data("c") == [b"%d" % i for i in range(500)]


def test_single_node_persist_then_commit():
    st = MemoryStorage(("a",))
    n = RaftNode(Config("a", GROUP, ("a",)), st)
    n.campaign()
    persist(n, st)
    for i in range(3):
        n.propose(b"%d" % i)
    rd = persist(n, st)
    assert [e.index for e in rd.committed_entries] == [1] and n.commit_index == 4
    assert [e.data for e in persist(n, st).committed_entries] == [b"0", b"1", b"2"]


def test_append_response_travels_with_the_entries_it_acknowledges():
    """Persist before send: the Ready holding an accepting APPEND_RESPONSE holds the
    entries behind it (and must_sync), so the driver persists them first."""
    n = RaftNode(Config("b", GROUP, ("a", "b", "c")), MemoryStorage(("a", "b", "c")))
    n.step(Message(MessageType.APPEND, GROUP, "a", "b", term=1, index=0, log_term=0,
                   entries=(Entry(1, 1), Entry(1, 2, data=b"d")), commit=0))
    rd = n.ready()
    (resp,) = rd.messages
    assert resp.type == MessageType.APPEND_RESPONSE and resp.index == 2 and not resp.reject
    assert [e.index for e in rd.entries] == [1, 2] and rd.must_sync
    assert rd.hard_state == HardState(1, None, 0)
    assert not n.has_ready()  # nothing handed out twice


def test_a_follower_whose_log_lost_acknowledged_entries_is_probed_again():
    """A follower's log cut back after damage (it lost entries it acknowledged) says so in
    its heartbeat response; the leader stops counting them and re-sends them."""
    c = Cluster("abc")
    a = c.elect("a")
    c.commit("a", 10, b"v")
    assert a.match_index("b") == 11
    c.sent.clear()
    a.step(Message(MessageType.HEARTBEAT_RESPONSE, GROUP, "b", "a", term=a.term, reject=True, reject_hint=3))
    assert a.match_index("b") == 3 and a.progress()["b"]["state"] == "probe"
    a.step(Message(MessageType.HEARTBEAT_RESPONSE, GROUP, "c", "a", term=a.term))
    assert a.match_index("c") == 11, "a plain heartbeat answer changes nothing"
    a.step(Message(MessageType.HEARTBEAT_RESPONSE, GROUP, "c", "a", term=a.term, reject=True, reject_hint=11))
    assert a.match_index("c") == 11, "a follower that holds what it acknowledged keeps its match"
    c.pump()
    assert a.match_index("b") == 11 and c.data("b") == c.data("a")


def test_a_follower_behind_the_commit_says_so_in_its_heartbeat_answer():
    c = Cluster("abc")
    b = c.nodes["b"]
    b.step(Message(MessageType.HEARTBEAT, GROUP, "a", "b", term=1, commit=5))
    resp = [m for m in b.ready().messages if m.type == MessageType.HEARTBEAT_RESPONSE]
    assert [(m.reject, m.reject_hint) for m in resp] == [(True, 0)]


def test_a_commit_index_is_current_only_once_it_covers_an_entry_of_the_leaders_term():
    """A follower that hears a new leader learns a commit index that can lag what earlier
    leaders committed (the new leader itself learns it only by committing an entry of its
    term, Raft §5.4.2): ``commit_current`` says when it no longer can. After a power cut of
    every server the meta group's replay must not end on such a commit index."""
    c = figure8_cluster()
    c.isolate("s5")

    def hold_term4(m: Message) -> bool:
        if m.type == MessageType.APPEND:  # the leader's term-4 entry never leaves s1
            m.entries = tuple(e for e in m.entries if e.term != 4)
        return False

    c.drop = hold_term4
    s1 = c.elect("s1")
    c.tick(["s1"], n=3)
    s2 = c.nodes["s2"]
    assert (s2.leader, s2.term, s2.commit_index) == ("s1", 4, 1)
    assert not s2.commit_current and not s1.commit_current
    c.drop = None
    c.tick(["s1"], n=2)
    assert (s1.commit_index, s2.commit_index) == (3, 3)
    assert s1.commit_current and s2.commit_current
