"""A clustered stream's replicated state machine (jetraft.jetstream.replicated), without RAFT.

Three replicas, each over its own JetStreamAccount and file store, apply the same entries;
they must end with the same messages and the same consumer state, and only the leader may
send what applying produced.
"""

from __future__ import annotations

import json

import msgpack
import pytest

from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.replicated import (
    ACK,
    API,
    PUBLISH,
    TICK,
    EntryError,
    InterestOverride,
    StreamReplica,
    decode_entry,
    encode_entry,
)
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, EntryType

T0 = 1_800_000_000_000_000_000


class _Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields) -> None:
        self.lines.append((name, fields))


def _replica(tmp_path, name: str, config: dict, sent: list) -> StreamReplica:
    override = InterestOverride()
    acc = JetStreamAccount("$G", store_dir=str(tmp_path / name), sync=GroupCommit(),
                           events=_Events(), interest=lambda s: bool(override.subjects and s in override.subjects),
                           server_version="2.15.1", sync_always=False, server_name=name,
                           clustered=True)
    acc.create_replica(config, T0)
    return StreamReplica(acc, config["name"], emit=sent.extend, override=override)


@pytest.fixture
def trio_of_replicas(tmp_path):
    config = {"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3, "storage": "file",
              "retention": "limits", "duplicate_window": 120_000_000_000}
    sent: dict[str, list] = {n: [] for n in ("n1", "n2", "n3")}
    replicas = {n: _replica(tmp_path, n, config, sent[n]) for n in sent}
    replicas["n1"].leader_changed("n1", 1)     # the entries below are of term 1
    replicas["n1"].is_leader = True
    return replicas, sent


def _apply_all(replicas, entries: list[bytes], start: int = 1) -> None:
    for r in replicas.values():
        r.apply([Entry(term=1, index=start + i, type=EntryType.NORMAL, data=d)
                 for i, d in enumerate(entries)])


def _state(r: StreamReplica) -> dict:
    entry = r.account.streams["ORDERS"]
    st = entry.stream.store.state()
    msgs = [(sm.seq, sm.subject, sm.data) for sm in
            (entry.stream.store.load(s) for s in range(st.first_seq, st.last_seq + 1))]
    consumers = {n: c.state_to_json() for n, c in entry.consumers.items()}
    return {"msgs": msgs, "consumers": consumers}


def test_replicas_store_the_same_messages_and_only_the_leader_acks(trio_of_replicas):
    replicas, sent = trio_of_replicas
    hdr = b"NATS/1.0\r\nNats-Msg-Id: a1\r\n\r\n"
    entries = [encode_entry(PUBLISH, T0 + i, set(), f"orders.{i}", f"_INBOX.r{i}", None, b"x%d" % i)
               for i in range(1, 6)]
    entries.append(encode_entry(PUBLISH, T0 + 10, set(), "orders.d", "_INBOX.d1", hdr, b"once"))
    entries.append(encode_entry(PUBLISH, T0 + 11, set(), "orders.d", "_INBOX.d2", hdr, b"once"))
    _apply_all(replicas, entries)

    states = [_state(r) for r in replicas.values()]
    assert states[0] == states[1] == states[2]
    assert [m[0] for m in states[0]["msgs"]] == [1, 2, 3, 4, 5, 6]
    acks = [json.loads(r.out.data) for r in sent["n1"]]
    assert [a["seq"] for a in acks] == [1, 2, 3, 4, 5, 6, 6]
    assert acks[-1].get("duplicate") is True          # dedupe held on every replica
    assert sent["n2"] == [] and sent["n3"] == []


def test_consumer_state_is_identical_on_every_replica(trio_of_replicas):
    replicas, sent = trio_of_replicas
    create = json.dumps({"stream_name": "ORDERS", "config": {
        "durable_name": "C", "ack_policy": "explicit", "ack_wait": 30_000_000_000}}).encode()
    entries = [encode_entry(PUBLISH, T0 + i, set(), "orders.x", None, None, b"m") for i in range(1, 4)]
    entries.append(encode_entry(API, T0 + 5, set(), "$JS.API.CONSUMER.CREATE.ORDERS.C", "_INBOX.c",
                                None, create))
    next_req = json.dumps({"batch": 2}).encode()
    entries.append(encode_entry(API, T0 + 6, {"_INBOX.n"}, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.C",
                                "_INBOX.n", None, next_req))
    _apply_all(replicas, entries)
    deliveries = [r.out for r in sent["n1"] if r.out.subject == "_INBOX.n"]
    assert len(deliveries) == 2
    ack_subject = deliveries[0].reply
    _apply_all(replicas, [encode_entry(ACK, T0 + 7, set(), ack_subject, None, b"+ACK")], start=6)
    states = [_state(r) for r in replicas.values()]
    assert states[0] == states[1] == states[2]
    c = states[0]["consumers"]["C"]
    assert c["ack_floor"]["stream_seq"] == 1


def test_a_tick_replays_redelivery_on_every_replica(trio_of_replicas):
    replicas, sent = trio_of_replicas
    create = json.dumps({"stream_name": "ORDERS", "config": {
        "durable_name": "C", "ack_policy": "explicit", "ack_wait": 1_000_000_000}}).encode()
    entries = [encode_entry(PUBLISH, T0 + 1, set(), "orders.x", None, None, b"m"),
               encode_entry(API, T0 + 2, set(), "$JS.API.CONSUMER.CREATE.ORDERS.C", "_INBOX.c", None, create),
               encode_entry(API, T0 + 3, {"_INBOX.n"}, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.C", "_INBOX.n",
                            None, json.dumps({"batch": 5, "expires": 60_000_000_000}).encode()),
               encode_entry(TICK, T0 + 3 + 2_000_000_000, {"_INBOX.n"}, False)]
    _apply_all(replicas, entries)
    to_inbox = [r.out for r in sent["n1"] if r.out.subject == "_INBOX.n"]
    assert len(to_inbox) == 2                       # delivered, then redelivered after ack_wait
    assert [m.reply.split(".")[4] for m in to_inbox] == ["1", "2"]     # the delivery count
    states = [_state(r) for r in replicas.values()]
    assert states[0] == states[1] == states[2]


def test_a_follower_that_becomes_leader_answers_from_then_on(trio_of_replicas):
    replicas, sent = trio_of_replicas
    _apply_all(replicas, [encode_entry(PUBLISH, T0 + 1, set(), "orders.a", "_INBOX.1", None, b"a")])
    replicas["n1"].is_leader = False
    replicas["n2"].leader_changed("n2", 1)
    replicas["n2"].is_leader = True
    _apply_all(replicas, [encode_entry(PUBLISH, T0 + 2, set(), "orders.a", "_INBOX.2", None, b"b")], start=2)
    assert [r.out.subject for r in sent["n1"]] == ["_INBOX.1"]
    assert [r.out.subject for r in sent["n2"]] == ["_INBOX.2"]


def test_a_new_leader_does_not_resend_what_earlier_terms_produced(trio_of_replicas):
    """A whole group restarted: the new leader replays term-1 entries (a push delivery
    among them) without sending them again; its own term's entries are answered."""
    replicas, sent = trio_of_replicas
    n2 = replicas["n2"]
    n2.leader_changed("n2", 2)
    n2.is_leader = True
    create = json.dumps({"stream_name": "ORDERS", "config": {
        "durable_name": "P", "deliver_subject": "push.out", "ack_policy": "explicit"}}).encode()
    old = [encode_entry(API, T0 + 1, {"push.out"}, "$JS.API.CONSUMER.CREATE.ORDERS.P", "_INBOX.c", None, create),
           encode_entry(PUBLISH, T0 + 2, {"push.out"}, "orders.a", "_INBOX.1", None, b"a")]
    n2.apply([Entry(1, i + 1, EntryType.NORMAL, d) for i, d in enumerate(old)])
    assert sent["n2"] == []
    n2.apply([Entry(2, 3, EntryType.NORMAL,
                    encode_entry(PUBLISH, T0 + 3, {"push.out"}, "orders.a", "_INBOX.2", None, b"b"))])
    subjects = [r.out.subject for r in sent["n2"]]
    assert "_INBOX.2" in subjects and "_INBOX.1" not in subjects
    assert subjects.count("push.out") == 1          # only the new message is pushed


def test_next_ts_strictly_increases_past_applied_entries(trio_of_replicas):
    replicas, _ = trio_of_replicas
    r = replicas["n1"]
    _apply_all(replicas, [encode_entry(PUBLISH, T0 + 100, set(), "orders.a", None, None, b"a")])
    assert r.next_ts(T0) == T0 + 101          # the clock is behind the log: the log wins
    assert r.next_ts(T0) == T0 + 102
    assert r.next_ts(T0 + 500) == T0 + 500


@pytest.mark.parametrize("data", [
    b"\xc1",                                                     # never valid msgpack
    msgpack.packb({"kind": "P"}),
    msgpack.packb(["Z", 1, []]),
    msgpack.packb(["P", 1, [], "orders.a", None, None]),         # too short
    msgpack.packb(["P", -1, [], "orders.a", None, None, b""]),
    msgpack.packb(["P", 1, [], "", None, None, b""]),
    msgpack.packb(["P", 1, [], "orders.a", 5, None, b""]),
    msgpack.packb(["P", 1, [], "orders.a", None, "text", b""]),
    msgpack.packb(["T", 1, [], "yes"]),
    # what no publish could carry (jetstream/admission.py): a subject or reply that would
    # forge protocol lines when delivered, a timestamp past the store's range
    msgpack.packb(["P", 1, [], "orders.a\r\nMSG x 1 1", None, None, b""]),
    msgpack.packb(["P", 1, [], "orders..a", None, None, b""]),
    msgpack.packb(["P", 1, [], "orders.a", "_INBOX.x 1\r\n", None, b""]),
    msgpack.packb(["P", 1 << 63, [], "orders.a", None, None, b""]),
    # a durable link's step and a flow-control answer's acked sequences
    msgpack.packb(["L", 1, [], "C", -1, [1]]),
    msgpack.packb(["L", 1, [], "C", 1, [0]]),
    msgpack.packb(["L", 1, [], "C", 1, "1"]),
    msgpack.packb(["L", 1, [], "C", 1, list(range(1, 5000))]),
    msgpack.packb(["L", 1, [], "", 1, [2]]),
    msgpack.packb(["F", 1, [], "$JS.FC.S.C.abcd", [1]]),
    msgpack.packb(["F", 1, [], "$JS.FC.S.C.abcd", [1, -1]]),
    msgpack.packb(["F", 1, [], "$JS.FC.S.C.abcd", "1 1"]),
    msgpack.packb(["F", 1, [], "$JS.FC.S.C.abcd", None, None]),
])
def test_malformed_entries_are_refused(data):
    with pytest.raises(EntryError):
        decode_entry(data)


def test_a_flow_control_entry_carries_what_its_answer_acked_or_nothing():
    assert decode_entry(msgpack.packb(["F", 1, [], "$JS.FC.S.C.abcd"]))[3:] == ["$JS.FC.S.C.abcd"]
    assert decode_entry(msgpack.packb(["F", 1, [], "$JS.FC.S.C.abcd", [5, 4]]))[3:] == ["$JS.FC.S.C.abcd", (5, 4)]
    assert decode_entry(msgpack.packb(["F", 1, [], "$JS.FC.S.C.abcd", None]))[4] is None
    assert decode_entry(msgpack.packb(["L", 1, [], "C", 3, [4, 5]]))[3:] == ["C", 3, [4, 5]]


def test_a_malformed_entry_is_reported_and_skipped(trio_of_replicas):
    replicas, sent = trio_of_replicas
    problems: list[str] = []
    r = replicas["n1"]
    r.on_problem = problems.append
    r.apply([Entry(1, 1, EntryType.NORMAL, b"\xc1"),
             Entry(1, 2, EntryType.NORMAL, encode_entry(PUBLISH, T0, set(), "orders.a", "_INBOX.x", None, b"a"))])
    assert len(problems) == 1 and "entry 1" in problems[0]
    assert [json.loads(x.out.data)["seq"] for x in sent["n1"]] == [1]
