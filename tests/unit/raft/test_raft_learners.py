"""jetraft RAFT core: learners (thesis §4.2.1 "catching up new servers", etcd learners).

A learner receives the log and snapshots, but counts for no quorum, is never asked for a
vote and never campaigns, until a PROMOTE_LEARNER entry makes it a voter."""

from __future__ import annotations

import pytest
from raft_pump import GROUP, Cluster

from jetraft.raft import ConfigChange, ConfigChangeType, MemoryStorage, MessageType, Role
from jetraft.raft.storage import meta
from jetraft.raft.types import Entry, EntryType, Message, Snapshot
from jetraft.raft.wire import decode_batch, encode_batch

ADD, REMOVE = ConfigChangeType.ADD_PEER, ConfigChangeType.REMOVE_PEER
ADD_L, PROMOTE = ConfigChangeType.ADD_LEARNER, ConfigChangeType.PROMOTE_LEARNER
REMOVE_L = ConfigChangeType.REMOVE_LEARNER


def with_learner(n_entries: int = 5) -> Cluster:
    c = Cluster("abc")
    a = c.elect("a")
    c.commit("a", n_entries)
    c.add("d", a.peers)
    a.propose_config_change(ConfigChange(ADD_L, "d"))
    c.pump()
    return c


def test_learner_gets_the_log_but_no_vote_and_no_quorum():
    c = with_learner()
    a, d = c.nodes["a"], c.nodes["d"]
    assert a.peers == ("a", "b", "c") and a.learners == ("d",)
    assert d.learners == ("d",) and d.peers == ("a", "b", "c")
    assert c.data("d") == [b"%d" % i for i in range(5)]
    assert set(a.progress()) == {"a", "b", "c", "d"}
    # with b and c gone, a and its learner are no quorum
    c.isolate("b")
    c.isolate("c")
    a.propose(b"needs-a-voter")
    c.pump()
    assert a.commit_index < a.last_index
    assert c.nodes["d"].last_index == a.last_index        # the learner holds it anyway
    c.heal()
    c.tick(["a"])
    assert a.commit_index == a.last_index


def test_learner_never_campaigns_and_is_never_asked():
    c = with_learner()
    c.isolate("a")
    c.sent.clear()
    c.tick(["d"], n=60)                 # far past any election timeout
    assert c.nodes["d"].role is Role.FOLLOWER
    assert not [m for m in c.sent if m.src == "d"
                and m.type in (MessageType.VOTE, MessageType.PRE_VOTE)]
    c.tick(["b", "c"], n=60)
    assert [n for n in c.leaders() if n != "a"] in (["b"], ["c"])
    asked = {m.dst for m in c.sent if m.type in (MessageType.VOTE, MessageType.PRE_VOTE)}
    assert "d" not in asked


def test_promoted_learner_counts_and_votes():
    c = with_learner()
    a = c.nodes["a"]
    a.propose_config_change(ConfigChange(PROMOTE, "d"))
    c.pump()
    assert all(n.peers == ("a", "b", "c", "d") and n.learners == ()
               for n in c.nodes.values())
    assert ("d", "raft_peer_promoted") in {(n, e) for n, e, _ in c.events}
    # 4 voters: a quorum is 3, and d is one of them
    c.isolate("c")
    a.propose(b"with-d")
    c.pump()
    assert a.commit_index == a.last_index
    c.isolate("b")
    a.propose(b"without-b")
    c.pump()
    assert a.commit_index < a.last_index


def test_learner_removed_and_validation():
    c = with_learner()
    a = c.nodes["a"]
    with pytest.raises(ValueError, match="as a learner"):
        a.propose_config_change(ConfigChange(ADD, "d"))
    with pytest.raises(ValueError, match="as a learner"):
        a.propose_config_change(ConfigChange(ADD_L, "d"))
    with pytest.raises(ValueError, match="not a learner"):
        a.propose_config_change(ConfigChange(PROMOTE, "b"))
    with pytest.raises(ValueError, match="not a learner"):
        a.propose_config_change(ConfigChange(REMOVE_L, "b"))
    with pytest.raises(ValueError, match="not in the group"):
        a.propose_config_change(ConfigChange(REMOVE, "d"))
    a.propose_config_change(ConfigChange(REMOVE_L, "d"))
    c.pump()
    assert a.learners == () and "d" not in a.progress()
    c.sent.clear()
    a.propose(b"after")
    c.tick(["a"], n=5)
    assert c.data("b")[-1] == b"after" and not [m for m in c.sent if m.dst == "d"]


def test_uncommitted_promotion_is_undone_on_truncation():
    c = Cluster("abcde")
    a = c.elect("a")
    c.add("f", a.peers)
    a.propose_config_change(ConfigChange(ADD_L, "f"))
    c.pump()
    c.isolate("a")
    c.cut -= {("a", "b")}          # only b hears of the promotion
    c.drop = lambda m: m.type == MessageType.APPEND_RESPONSE
    a.propose_config_change(ConfigChange(PROMOTE, "f"))
    c.pump()
    b = c.nodes["b"]
    assert "f" in b.peers and b.learners == ()   # in effect once appended
    c.drop = None
    c.heal()
    c.isolate("a")
    c.tick(["b", "c", "d", "e"], n=40)
    c.pump()
    assert b.peers == ("a", "b", "c", "d", "e") and b.learners == ("f",)
    assert ("b", "raft_peer_demoted") in {(n, e) for n, e, _ in c.events}


def test_restart_and_snapshot_keep_the_learners():
    c = with_learner()
    assert c.restart("a").learners == ("d",)
    c.tick(n=40)
    lead = c.nodes[c.leaders()[0]]
    st = c.storages[lead.id]
    snap = st.create_snapshot(lead.applied_index, b"state", lead.peers, lead.learners)
    st.compact(snap.index)
    assert snap.learners == ("d",)
    # a learner far behind gets the snapshot, learners included
    c.add("e", lead.peers)
    lead.propose_config_change(ConfigChange(ADD_L, "e"))
    c.pump()
    e = c.nodes["e"]
    assert e.learners == ("d", "e") and e.peers == ("a", "b", "c")


def test_learners_survive_storage_and_the_wire():
    snap = Snapshot(7, 2, ("a", "b", "c"), b"data", ("d",))
    assert meta.decode_snapshot(meta.encode_snapshot(snap)) == snap
    plain = Snapshot(7, 2, ("a", "b", "c"), b"data")
    assert meta.decode_snapshot(meta.encode_snapshot(plain)) == plain
    msg = Message(MessageType.SNAPSHOT, GROUP, "a", "d", term=2, snapshot=snap)
    (back,) = decode_batch(encode_batch([msg]))
    assert back.snapshot == snap
    st = MemoryStorage(("a", "b", "c"))
    st.append([Entry(1, 1, EntryType.CONFIG_CHANGE, ConfigChange(ADD_L, "d").encode()),
               Entry(1, 2, EntryType.CONFIG_CHANGE, ConfigChange(PROMOTE, "d").encode()),
               Entry(1, 3, EntryType.CONFIG_CHANGE, ConfigChange(ADD_L, "e").encode())])
    assert st.initial_state()[1] == ("a", "b", "c", "d") and st.initial_learners() == ("e",)


def test_a_node_that_may_not_vote_grants_no_vote_and_never_campaigns():
    """``can_vote`` False (a server that lost its store and was not admitted again): it
    refuses votes and pre-votes, and does not campaign; once allowed, it votes again."""
    from jetraft.raft import Config, RaftNode
    allowed = {"c": False}
    c = Cluster("abc")
    c.nodes["c"] = node = RaftNode(Config("c", GROUP, tuple("abc"), seed=7), c.storages["c"],
                                   can_vote=lambda: allowed["c"])
    c.isolate("b")                      # a needs c's vote to win (2 of 3)
    c.nodes["a"].campaign()
    c.pump()
    assert c.nodes["a"].role is not Role.LEADER
    assert [m for m in c.sent if m.src == "c" and m.type in (MessageType.VOTE_RESPONSE,
                                                            MessageType.PRE_VOTE_RESPONSE)
            and not m.reject] == []
    c.tick(["c"], n=60)
    assert node.role is Role.FOLLOWER   # never campaigned
    allowed["c"] = True
    c.nodes["a"].campaign()
    c.pump()
    assert c.nodes["a"].role is Role.LEADER
