"""jetraft RAFT core: elections, votes, pre-vote, check-quorum, persistence before send."""

from __future__ import annotations

from raft_pump import GROUP, Cluster, persist

from jetraft.raft import (
    Config,
    Entry,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    RaftNode,
    Role,
)


def vote_msg(src, dst, term, index=0, log_term=0, mtype=MessageType.VOTE, group=GROUP):
    return Message(mtype, group, src, dst, term=term, index=index, log_term=log_term)


def lone(node_id="a", peers=("a", "b", "c"), storage=None, **cfg):
    return RaftNode(Config(node_id, GROUP, peers, seed=7, **cfg), storage or MemoryStorage(peers))


def test_single_node_becomes_leader_at_once():
    st = MemoryStorage(("a",))
    n = lone(peers=("a",), storage=st)
    n.campaign()
    assert n.role is Role.LEADER and n.term == 1 and n.leader == "a"
    assert n.commit_index == 0  # its own entry counts only once persisted
    rd = persist(n, st)
    assert [e.index for e in rd.entries] == [1] and rd.entries[0].data == b""
    assert n.commit_index == 1
    n.propose(b"x")
    persist(n, st)
    assert [e.data for e in persist(n, st).committed_entries] == [b"x"]


def test_single_node_elects_itself_on_timeout():
    n = lone(peers=("a",))
    for _ in range(2 * 10):
        n.tick()
    assert n.role is Role.LEADER


def test_three_and_five_nodes_elect_one_leader_by_timeout():
    for ids in ("abc", "abcde"):
        c = Cluster(ids)
        for _ in range(40):
            c.tick()
            if c.leaders():
                break
        assert len(c.leaders()) == 1
        lead = c.nodes[c.leaders()[0]]
        assert all(n.leader == lead.id and n.term == lead.term for n in c.nodes.values())
        # the leader's empty entry of its term is committed everywhere (Raft §8)
        assert all(n.commit_index == 1 for n in c.nodes.values())


def test_election_timeout_randomized_in_range_and_redrawn():
    n = lone(pre_vote=False)
    timeouts = set()
    for _ in range(20):
        elapsed = 0
        term = n.term
        while n.term == term:
            n.tick()
            elapsed += 1
        assert 10 <= elapsed < 20
        timeouts.add(elapsed)
        n.ready()
    assert len(timeouts) > 1


def test_vote_once_per_term_and_persisted_with_response():
    n = lone(pre_vote=False)
    n.step(vote_msg("b", "a", 1))
    rd = n.ready()
    grant = [m for m in rd.messages if m.type == MessageType.VOTE_RESPONSE]
    assert grant and not grant[0].reject and grant[0].term == 1
    # persistence before send: the vote is in the same Ready's hard state
    assert rd.hard_state == HardState(1, "b", 0) and rd.must_sync
    n.advance(rd)
    n.step(vote_msg("c", "a", 1))
    rd = n.ready()
    assert [m.reject for m in rd.messages] == [True]
    n.step(vote_msg("b", "a", 1))  # the same candidate again: granted again
    assert [m.reject for m in n.ready().messages] == [False]


def test_vote_rejected_when_candidate_log_is_behind():
    st = MemoryStorage(("a", "b", "c"))
    st.append([Entry(1, 1), Entry(2, 2)])
    st.set_hard_state(HardState(2, None, 1))
    n = lone(storage=st, pre_vote=False)
    n.step(vote_msg("b", "a", 3, index=5, log_term=1))  # longer, older last term
    assert n.ready().messages[0].reject
    n.step(vote_msg("c", "a", 3, index=1, log_term=2))  # same term, shorter
    assert n.ready().messages[0].reject
    n.step(vote_msg("c", "a", 4, index=2, log_term=2))  # as up to date (Raft §5.4.1)
    assert not n.ready().messages[0].reject
    assert n.vote == "c" and n.term == 4


def test_stale_vote_request_ignored():
    st = MemoryStorage(("a", "b", "c"))
    st.set_hard_state(HardState(5, None, 0))
    n = lone(storage=st, pre_vote=False)
    n.step(vote_msg("b", "a", 3))
    assert n.term == 5 and n.vote is None
    assert all(not (m.type == MessageType.VOTE_RESPONSE and not m.reject) for m in n.ready().messages)


def test_restart_restores_term_vote_commit_and_log():
    c = Cluster("abc")
    c.elect("a")
    for i in range(5):
        c.nodes["a"].propose(b"%d" % i)
    c.pump()
    b = c.nodes["b"]
    before = (b.term, b.vote, b.commit_index, b.last_index)
    b2 = c.restart("b")
    assert (b2.term, b2.vote, b2.commit_index, b2.last_index) == before
    assert b2.role is Role.FOLLOWER and b2.applied_index == 0
    c.pump()
    assert c.data("b") == [b"0", b"1", b"2", b"3", b"4"]
    # the persisted vote survives: b refuses another candidate in that term
    b2.step(vote_msg("c", "b", b2.term, index=99, log_term=b2.term))
    assert [m.reject for m in b2.ready().messages if m.type == MessageType.VOTE_RESPONSE] == [True]


def test_prevote_does_not_bump_terms():
    c = Cluster("abc")
    c.isolate("a")
    c.nodes["a"].campaign()
    c.pump()
    assert c.nodes["a"].role is Role.PRE_CANDIDATE and c.nodes["a"].term == 0
    for _ in range(60):
        c.tick(["a"])
    assert c.nodes["a"].term == 0  # never got a pre-vote quorum, never bumped
    assert all(n.term == 0 for n in c.nodes.values())


def test_partitioned_node_rejoining_does_not_disrupt_leader():
    c = Cluster("abc")
    c.elect("a")
    c.isolate("c")
    c.tick(n=50)  # c times out repeatedly (pre-vote fails); a keeps leading b
    assert c.nodes["c"].term == 1
    c.heal()
    c.tick(n=5)
    assert c.leaders() == ["a"] and c.nodes["a"].term == 1
    assert c.nodes["c"].leader == "a"


def test_rejoining_node_without_prevote_is_ignored_within_lease():
    c = Cluster("abc", pre_vote=False)
    c.elect("a")
    c.isolate("c")
    c.tick(n=50)
    assert c.nodes["c"].term > 1  # without pre-vote it bumps its term alone
    c.heal()
    c.nodes["c"].campaign()
    c.pump()  # a and b heard from a within the election timeout: lease refuses
    assert c.nodes["b"].leader == "a" and c.nodes["a"].role is Role.LEADER


def test_prevote_granted_when_leader_is_gone():
    c = Cluster("abc")
    c.elect("a")
    c.isolate("a")
    c.tick(["b", "c"], n=40)
    new = [i for i in "bc" if c.nodes[i].role is Role.LEADER]
    assert len(new) == 1 and c.nodes[new[0]].term == 2


def test_check_quorum_leader_steps_down():
    c = Cluster("abc")
    c.elect("a")
    c.isolate("a")
    c.tick(["a"], n=20)
    assert c.nodes["a"].role is Role.FOLLOWER and c.nodes["a"].term == 1


def test_candidate_steps_down_on_append_of_same_term():
    n = lone(pre_vote=False)
    n.campaign()
    assert n.role is Role.CANDIDATE and n.term == 1
    n.step(Message(MessageType.APPEND, GROUP, "b", "a", term=1))
    assert n.role is Role.FOLLOWER and n.leader == "b" and n.term == 1


def test_leader_steps_down_on_higher_term():
    c = Cluster("abc")
    a = c.elect("a")
    a.step(Message(MessageType.APPEND_RESPONSE, GROUP, "b", "a", term=3))
    assert a.role is Role.FOLLOWER and a.term == 3 and a.leader is None


def test_stale_vote_response_does_not_count():
    n = lone(pre_vote=False)
    n.campaign()  # term 1
    n.ready()
    n.campaign()  # term 2
    n.ready()
    n.step(Message(MessageType.VOTE_RESPONSE, GROUP, "b", "a", term=1))
    assert n.role is Role.CANDIDATE
    n.step(Message(MessageType.VOTE_RESPONSE, GROUP, "b", "a", term=2))
    assert n.role is Role.LEADER


def test_wrong_group_wrong_dst_and_unknown_messages_ignored():
    n = lone(pre_vote=False)
    n.step(vote_msg("b", "a", 5, group="other"))
    n.step(vote_msg("b", "z", 5))
    n.step(vote_msg("a", "a", 5))
    assert n.term == 0 and not n.has_ready()
    n.step(Message(MessageType.HEARTBEAT_RESPONSE, GROUP, "q", "a", term=0))
    n.step(Message(MessageType.SNAPSHOT, GROUP, "b", "a", term=0))
    n.step(Message(MessageType.READ_INDEX_RESPONSE, GROUP, "b", "a", term=0, index=3))
    assert n.term == 0


def test_stale_append_answered_with_current_term():
    st = MemoryStorage(("a", "b", "c"))
    st.set_hard_state(HardState(4, None, 0))
    n = lone(storage=st)
    n.step(Message(MessageType.APPEND, GROUP, "b", "a", term=2, entries=(Entry(2, 1),)))
    rd = n.ready()
    assert n.last_index == 0
    assert [(m.type, m.term) for m in rd.messages] == [(MessageType.APPEND_RESPONSE, 4)]


def test_events_reported():
    c = Cluster("abc")
    c.elect("a")
    names = {(n, e) for n, e, _ in c.events}
    assert ("a", "raft_became_pre_candidate") in names
    assert ("a", "raft_became_candidate") in names
    assert ("a", "raft_became_leader") in names
    assert ("b", "raft_vote_granted") in names
    assert ("b", "raft_commit_advanced") in names
    lead = [f for n, e, f in c.events if e == "raft_became_leader"][0]
    assert lead == {"group": GROUP, "term": 1, "leader": "a", "index": 0}   # before its empty entry (§8)
