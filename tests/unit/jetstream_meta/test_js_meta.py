"""jetraft.jetstream.meta: the meta group's assignments, entries, snapshots and determinism."""

from __future__ import annotations

import re

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.meta import (
    ConsumerAssignment,
    MetaChange,
    MetaEntryError,
    MetaState,
    StreamAssignment,
    encode_assign_consumer,
    encode_assign_stream,
    encode_remove_consumer,
    encode_remove_server,
    encode_remove_stream,
    encode_replace_stream_peer,
    encode_update_stream,
    group_name,
)

T0 = 1_763_000_000_000_000_000


def stream(name="ORDERS", account="ACC", peers=("n1", "n3", "n5"), created_ns=T0, **kw) -> StreamAssignment:
    config = kw.pop("config", {"name": name, "subjects": [f"{name.lower()}.>"], "num_replicas": len(peers)})
    group = kw.pop("group", group_name("stream", account, name, replicas=len(peers), created_ns=created_ns))
    return StreamAssignment(account, name, config, group, tuple(peers), created_ns, **kw)


def consumer(name="C1", stream_name="ORDERS", account="ACC", peers=("n1", "n3", "n5"), created_ns=T0 + 1,
             **kw) -> ConsumerAssignment:
    config = kw.pop("config", {"durable_name": name, "ack_policy": "explicit"})
    group = group_name("consumer", account, name, stream=stream_name, replicas=len(peers), created_ns=created_ns)
    return ConsumerAssignment(account, stream_name, name, config, group, tuple(peers), created_ns, **kw)


def kinds(changes: list[MetaChange]) -> list[str]:
    return [c.kind for c in changes]


@pytest.fixture
def state() -> MetaState:
    """ORDERS (R3 on n1/n3/n5, preferred n1) with consumers C1 (R3) and C2 (R1 on n1); EVENTS (R1 on n2)."""
    m = MetaState()
    m.apply(encode_assign_stream(stream(preferred="n1")))
    m.apply(encode_assign_consumer(consumer()))
    m.apply(encode_assign_consumer(consumer("C2", peers=("n1",))))
    m.apply(encode_assign_stream(stream("EVENTS", peers=("n2",))))
    return m


# --- group names


def test_group_names_have_nats_server_shape_and_are_reproducible():
    s = group_name("stream", "ACC", "ORDERS", replicas=3, created_ns=T0)
    assert re.fullmatch(r"S-R3F-[0-9A-Za-z]{8}", s)
    assert s == group_name("stream", "ACC", "ORDERS", replicas=3, created_ns=T0)
    assert s != group_name("stream", "ACC", "ORDERS", replicas=3, created_ns=T0 + 1)  # recreated
    assert s != group_name("stream", "OTHER", "ORDERS", replicas=3, created_ns=T0)
    c = group_name("consumer", "ACC", "C1", stream="ORDERS", replicas=1, storage="memory", created_ns=T0)
    assert re.fullmatch(r"C-R1M-[0-9A-Za-z]{8}", c)
    assert c != group_name("consumer", "ACC", "C1", stream="OTHER", replicas=1, storage="memory", created_ns=T0)
    assert group_name("S", "ACC", "ORDERS", T0, replicas=3) == s
    assert group_name("C", "ACC", "C1", T0, stream="ORDERS", replicas=1, storage="memory") == c
    for bad in ({"kind": "raft"}, {"stream": "ORDERS"}, {"storage": "disk"}, {"replicas": 0}):
        args = {"kind": "stream", "replicas": 1, "created_ns": 0, **bad}
        with pytest.raises(ValueError):
            group_name(args.pop("kind"), "A", "N", **args)
    with pytest.raises(ValueError):
        group_name("consumer", "A", "N", replicas=1, created_ns=0)


# --- every entry kind, round trip through apply


def test_assign_stream_round_trip():
    m = MetaState()
    sa = stream(reply="_INBOX.create", preferred="n3")
    changes = m.apply(encode_assign_stream(sa))
    assert changes == [MetaChange("stream_added", sa)]
    got = m.streams[("ACC", "ORDERS")]
    assert got == sa and got.reply == "_INBOX.create" and got.preferred == "n3"
    assert changes[0].assignment.reply == "_INBOX.create"


def test_assign_stream_again_changes_nothing_and_the_first_group_wins():
    """A repeated create (same group) and a second assignment of the name to another group
    (a meta leader behind its log) leave the first assignment; one with a reply to answer
    is reported as ``stream_create_repeated``."""
    m = MetaState()
    sa = stream()
    m.apply(encode_assign_stream(sa))
    assert m.apply(encode_assign_stream(stream())) == []
    changes = m.apply(encode_assign_stream(stream(reply="_INBOX.retry")))
    assert kinds(changes) == ["stream_create_repeated"] and changes[0].old == sa
    moved = stream(group="S-R3F-moved000", peers=("n2", "n4", "n5"), reply="_INBOX.other")
    changes = m.apply(encode_assign_stream(moved))
    assert kinds(changes) == ["stream_create_repeated"]
    assert changes[0].assignment.group == "S-R3F-moved000" and changes[0].old == sa
    assert m.streams[sa.key] == sa and m.streams[sa.key].group == sa.group


def test_update_stream_round_trip(state):
    new_config = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3, "max_msgs": 10}
    changes = state.apply(encode_update_stream("ACC", "ORDERS", new_config, reply="_INBOX.upd"))
    assert kinds(changes) == ["stream_updated"]
    sa = state.streams[("ACC", "ORDERS")]
    assert sa.config == new_config and sa.peers == ("n1", "n3", "n5") and sa.preferred == "n1"
    assert sa.reply == "_INBOX.upd" and changes[0].assignment is sa
    assert state.apply(encode_update_stream("ACC", "ORDERS", new_config)) == []
    # New peers: the group name stays, a preferred leader that left is dropped.
    changes = state.apply(encode_update_stream("ACC", "ORDERS", new_config, peers=["n3", "n5"]))
    assert changes[0].old_peers == ("n1", "n3", "n5")
    sa = state.streams[("ACC", "ORDERS")]
    assert sa.peers == ("n3", "n5") and sa.preferred is None and sa.group == changes[0].old.group
    assert state.apply(encode_update_stream("ACC", "NOPE", {"name": "NOPE"})) == []


def test_remove_stream_round_trip_takes_its_consumers(state):
    changes = state.apply(encode_remove_stream("ACC", "ORDERS", reply="_INBOX.del"))
    assert kinds(changes) == ["consumer_removed", "consumer_removed", "stream_removed"]
    assert [c.assignment.name for c in changes] == ["C1", "C2", "ORDERS"]
    assert changes[-1].reply == "_INBOX.del"
    assert set(state.streams) == {("ACC", "EVENTS")} and state.consumers == {}
    assert state.apply(encode_remove_stream("ACC", "ORDERS")) == []


def test_assign_and_remove_consumer_round_trip(state):
    ca = consumer("C3", peers=("n5",), reply="_INBOX.cc")
    assert state.apply(encode_assign_consumer(ca)) == [MetaChange("consumer_added", ca)]
    assert state.consumers[("ACC", "ORDERS", "C3")].reply == "_INBOX.cc"
    assert state.apply(encode_assign_consumer(ca)) == []
    changed = consumer("C3", peers=("n5",), config={"durable_name": "C3", "ack_policy": "none"})
    assert kinds(state.apply(encode_assign_consumer(changed))) == ["consumer_updated"]
    changes = state.apply(encode_remove_consumer("ACC", "ORDERS", "C3", reply="_INBOX.cd"))
    assert changes == [MetaChange("consumer_removed", changed, reply="_INBOX.cd")]
    assert ("ACC", "ORDERS", "C3") not in state.consumers
    assert state.apply(encode_remove_consumer("ACC", "ORDERS", "C3")) == []
    # A consumer of an unknown stream is ignored (nats-server processConsumerAssignment).
    assert state.apply(encode_assign_consumer(consumer("X", stream_name="NOPE"))) == []


def test_replace_peer_moves_the_stream_and_its_consumers(state):
    changes = state.apply(encode_replace_stream_peer("ACC", "ORDERS", "n1", "n2"))
    assert kinds(changes) == ["stream_peers_changed", "consumer_peers_changed", "consumer_peers_changed"]
    sa = state.streams[("ACC", "ORDERS")]
    assert sa.peers == ("n2", "n3", "n5") and sa.preferred is None
    assert changes[0].old_peers == ("n1", "n3", "n5")
    assert state.consumers[("ACC", "ORDERS", "C1")].peers == ("n2", "n3", "n5")
    assert state.consumers[("ACC", "ORDERS", "C2")].peers == ("n2",)
    assert [c.old_peers for c in changes[1:]] == [("n1", "n3", "n5"), ("n1",)]
    assert state.streams[("ACC", "EVENTS")].peers == ("n2",)
    # Replayed, or naming a peer that is not (or already) in the group: nothing happens.
    before = state.snapshot()
    assert state.apply(encode_replace_stream_peer("ACC", "ORDERS", "n1", "n2")) == []
    assert state.apply(encode_replace_stream_peer("ACC", "ORDERS", "n3", "n2")) == []
    assert state.apply(encode_replace_stream_peer("ACC", "NOPE", "n3", "n4")) == []
    assert state.snapshot() == before


def test_replace_peer_leaves_consumers_not_on_the_old_peer(state):
    changes = state.apply(encode_replace_stream_peer("ACC", "ORDERS", "n5", "n4"))
    assert kinds(changes) == ["stream_peers_changed", "consumer_peers_changed"]
    assert state.consumers[("ACC", "ORDERS", "C2")].peers == ("n1",)
    assert state.streams[("ACC", "ORDERS")].preferred == "n1"


def test_remove_server_round_trip(state):
    changes = state.apply(encode_remove_server("n1"))
    assert kinds(changes) == ["server_removed"] * 4
    assert changes[0].assignment is None and {c.server for c in changes} == {"n1"}
    assert [c.assignment.name for c in changes[1:]] == ["ORDERS", "C1", "C2"]
    assert state.removed_servers == {"n1"}
    assert state.apply(encode_remove_server("n1")) == []
    assert state.apply(encode_remove_server("n9")) == [MetaChange("server_removed", server="n9")]


def test_queries(state):
    assert [sa.name for sa in state.streams_on("n1")] == ["ORDERS"]
    assert [sa.name for sa in state.streams_on("n2")] == ["EVENTS"]
    assert [ca.name for ca in state.consumers_on("n1")] == ["C1", "C2"]
    assert [ca.name for ca in state.consumers_of("ACC", "ORDERS")] == ["C1", "C2"]
    assert state.consumers_of("ACC", "EVENTS") == []
    assert state.load() == {"n1": 3, "n2": 1, "n3": 2, "n5": 2}


# --- snapshots


def test_snapshot_restore_equality(state):
    state.apply(encode_remove_server("n9"))
    restored = MetaState.restore(state.snapshot())
    assert restored == state
    assert restored.snapshot() == state.snapshot()
    assert restored.streams[("ACC", "ORDERS")].preferred == "n1"
    assert restored.streams[("ACC", "ORDERS")].reply is None  # replies are not in snapshots
    assert MetaState.restore(MetaState().snapshot()) == MetaState()


def test_snapshot_bytes_do_not_depend_on_insertion_order():
    a, b = MetaState(), MetaState()
    entries = [encode_assign_stream(stream("S1")), encode_assign_stream(stream("S2")),
               encode_assign_consumer(consumer("X", "S1")), encode_remove_server("n7"), encode_remove_server("n8")]
    for e in entries:
        a.apply(e)
    for i in (1, 0, 2, 4, 3):
        b.apply(entries[i])
    assert list(a.streams) != list(b.streams)
    assert a == b and a.snapshot() == b.snapshot()


def test_install_snapshot_returns_the_difference(state):
    target = MetaState.restore(state.snapshot())
    target.apply(encode_remove_stream("ACC", "EVENTS"))
    target.apply(encode_remove_consumer("ACC", "ORDERS", "C2"))
    target.apply(encode_replace_stream_peer("ACC", "ORDERS", "n5", "n4"))
    target.apply(encode_assign_stream(stream("NEW", peers=("n4",))))
    target.apply(encode_assign_consumer(consumer("C9", peers=("n3",))))
    target.apply(encode_remove_server("n5"))
    changes = state.install_snapshot(target.snapshot())
    assert [(c.kind, getattr(c.assignment, "name", c.server)) for c in changes] == [
        ("stream_removed", "EVENTS"),
        ("consumer_removed", "C2"),
        ("stream_added", "NEW"),
        ("stream_updated", "ORDERS"),
        ("consumer_updated", "C1"),
        ("consumer_added", "C9"),
        ("server_removed", "n5"),
    ]
    assert state == target
    assert state.install_snapshot(target.snapshot()) == []


# --- malformed entries


def _packed(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _sa_map(**over):
    base = {"account": "ACC", "name": "S", "config": {"name": "S"}, "group": "S-R1F-abcdefgh",
            "peers": ["n1"], "created_ns": 5}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


BAD_ENTRIES = {
    "empty": b"",
    "not msgpack": b"\xc1",
    "truncated": _packed({"op": "remove_stream", "account": "ACC", "name": "S"})[:-2],
    "not a map": _packed(["assign_stream"]),
    "no op": _packed({"account": "ACC"}),
    "unknown op": _packed({"op": "explode"}),
    "op not str": _packed({"op": 3}),
    "int map key": _packed({1: "x"}),
    "sa missing": _packed({"op": "assign_stream"}),
    "sa no group": _packed({"op": "assign_stream", "sa": _sa_map(group=...)}),
    "sa empty name": _packed({"op": "assign_stream", "sa": _sa_map(name="")}),
    "sa peers empty": _packed({"op": "assign_stream", "sa": _sa_map(peers=[])}),
    "sa peers twice": _packed({"op": "assign_stream", "sa": _sa_map(peers=["n1", "n1"])}),
    "sa peers not str": _packed({"op": "assign_stream", "sa": _sa_map(peers=[1])}),
    "sa created negative": _packed({"op": "assign_stream", "sa": _sa_map(created_ns=-1)}),
    "sa created str": _packed({"op": "assign_stream", "sa": _sa_map(created_ns="5")}),
    "sa config bytes": _packed({"op": "assign_stream", "sa": _sa_map(config={"name": "S", "x": b"\x00"})}),
    "sa config bytes key": _packed({"op": "assign_stream", "sa": _sa_map(config={b"name": "S"})}),
    "sa config list": _packed({"op": "assign_stream", "sa": _sa_map(config=["S"])}),
    "sa config other name": _packed({"op": "assign_stream", "sa": _sa_map(config={"name": "T"})}),
    "sa preferred not a peer": _packed({"op": "assign_stream", "sa": _sa_map(preferred="n9")}),
    "sa reply int": _packed({"op": "assign_stream", "sa": _sa_map(reply=5)}),
    "ca missing stream": _packed({"op": "assign_consumer", "ca": _sa_map(name="C", config={})}),
    "update other name": _packed({"op": "update_stream", "account": "ACC", "name": "ORDERS",
                                  "config": {"name": "X"}, "peers": None}),
    "update peers str": _packed({"op": "update_stream", "account": "ACC", "name": "ORDERS",
                                 "config": {"name": "ORDERS"}, "peers": "n1"}),
    "remove no name": _packed({"op": "remove_stream", "account": "ACC"}),
    "replace same": _packed({"op": "replace_peer", "account": "ACC", "name": "ORDERS", "old": "n1", "new": "n1"}),
    "server none": _packed({"op": "remove_server", "server": None}),
}


@pytest.mark.parametrize("data", list(BAD_ENTRIES.values()), ids=list(BAD_ENTRIES))
def test_malformed_entries_raise_and_leave_state_unchanged(state, data):
    before = MetaState.restore(state.snapshot())
    with pytest.raises(MetaEntryError):
        state.apply(data)
    assert state == before


def test_not_bytes_and_bad_snapshots_raise():
    with pytest.raises(MetaEntryError):
        MetaState().apply("remove_stream")  # type: ignore[arg-type]
    good = msgpack.unpackb(MetaState().snapshot())
    bad_snapshots = [
        b"\x00", _packed([]), _packed({**good, "v": 2}), _packed({**good, "streams": [{"name": "S"}]}),
        _packed({**good, "consumers": [{**_sa_map(name="C", config={}), "stream": "NOPE"}]}),
        _packed({**good, "removed": [1]}),
    ]
    for data in bad_snapshots:
        m = MetaState()
        m.apply(encode_assign_stream(stream()))
        before = m.snapshot()
        with pytest.raises(MetaEntryError):
            MetaState.restore(data)
        with pytest.raises(MetaEntryError):
            m.install_snapshot(data)
        assert m.snapshot() == before


def test_encoders_refuse_invalid_arguments():
    with pytest.raises(ValueError):
        encode_assign_stream(stream(peers=()))
    with pytest.raises(ValueError):
        encode_assign_stream(stream(preferred="n9"))
    with pytest.raises(ValueError):
        encode_replace_stream_peer("ACC", "S", "n1", "n1")
    with pytest.raises(ValueError):
        encode_remove_server("")
    with pytest.raises(ValueError):
        encode_update_stream("ACC", "S", {"name": "S", "when": object()})


def test_unknown_keys_are_ignored_for_newer_servers():
    entry = _packed({"op": "remove_server", "server": "n1", "future": {"x": 1}})
    m = MetaState()
    assert kinds(m.apply(entry)) == ["server_removed"]


# --- determinism


def test_two_states_fed_the_same_entries_are_equal(state):
    entries = [
        encode_assign_stream(stream()), encode_assign_consumer(consumer()),
        encode_assign_stream(stream("EVENTS", peers=("n2",))),
        encode_replace_stream_peer("ACC", "ORDERS", "n1", "n2"),
        encode_remove_server("n1"),
        encode_update_stream("ACC", "EVENTS", {"name": "EVENTS", "max_age": 10}),
        encode_remove_consumer("ACC", "ORDERS", "C1"),
    ]
    a, b = MetaState(), MetaState()
    out_a = [a.apply(e) for e in entries]
    out_b = [b.apply(e) for e in entries]
    assert a == b and out_a == out_b and a.snapshot() == b.snapshot()


_names = st.sampled_from(["S1", "S2", "S3"])
_peers = st.lists(st.sampled_from(["n1", "n2", "n3", "n4", "n5"]), min_size=1, max_size=3, unique=True)
_ops = st.one_of(
    st.builds(lambda n, p, t: encode_assign_stream(stream(n, peers=p, created_ns=t)), _names, _peers,
              st.integers(0, 3)),
    st.builds(lambda n, p: encode_update_stream("ACC", n, {"name": n, "v": len(p)}, peers=p), _names, _peers),
    st.builds(lambda n: encode_remove_stream("ACC", n), _names),
    st.builds(lambda c, n, p: encode_assign_consumer(consumer(c, n, peers=p)), st.sampled_from(["C1", "C2"]),
              _names, _peers),
    st.builds(lambda c, n: encode_remove_consumer("ACC", n, c), st.sampled_from(["C1", "C2"]), _names),
    st.builds(lambda n, o, w: encode_replace_stream_peer("ACC", n, o, w) if o != w else encode_remove_server(o),
              _names, st.sampled_from(["n1", "n2", "n3"]), st.sampled_from(["n3", "n4", "n5"])),
    st.builds(encode_remove_server, st.sampled_from(["n1", "n5"])),
)


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(_ops, max_size=25), cut=st.integers(0, 25))
def test_property_replay_and_snapshot_points_agree(entries, cut):
    """Same entries -> same state; a snapshot taken anywhere, restored and fed the rest, agrees too.

    Also: every consumer's stream exists, and re-applying the last entry changes nothing
    (idempotent replay after restart).
    """
    a, b = MetaState(), MetaState()
    for i, e in enumerate(entries):
        a.apply(e)
        b.apply(e)
        if i + 1 == cut:
            b = MetaState.restore(b.snapshot())
    assert a == b and a.snapshot() == b.snapshot()
    assert all(key[:2] in a.streams for key in a.consumers)
    if entries:
        before = a.snapshot()
        a.apply(entries[-1])
        assert a.snapshot() == before
