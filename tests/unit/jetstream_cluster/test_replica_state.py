"""A clustered stream replica's state apart from its messages (JetStreamAccount.replica_state
and restore_replica_state): a replica restored from another's state, with the same
messages, answers every later log entry exactly as the other does.

Replica A applies a seeded random workload (publishes with and without Nats-Msg-Id, push
and pull consumers, acks of every kind, pull requests, timer ticks, deletes, purges,
updates) through StreamReplica.apply, as the RAFT group does. At a random point A's state
goes through msgpack into replica B (whose store gets A's messages); from then on both
apply the same entries and must send the same messages and end in the same state.
"""

from __future__ import annotations

import copy
import json
import random

import msgpack
import pytest

from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.consumer import Consumer
from jetraft.jetstream.replica_state import ReplicaStateError
from jetraft.jetstream.replicated import (
    ACK,
    API,
    FLOW_CONTROL,
    PUBLISH,
    TICK,
    InterestOverride,
    StreamReplica,
    encode_entry,
)
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, EntryType

T0 = 1_800_000_000_000_000_000
MS = 1_000_000
SECOND = 1_000 * MS
STREAM = "S"

#: Consumer attributes a restore does not take from the state, and why: the parent stream
#: and the interest function are the restoring account's own; the config, name and creation
#: time travel beside the working state; the rest are derived from the config. Advisories
#: are output (the leader's, sent with its next poll or ack) and whether anyone listens to
#: them is the restoring server's own.
NOT_IN_WORKING_STATE = {"stream", "has_interest", "name", "config", "created_ns",
                        "_filters", "_maxp", "_ack_prefix", "_sfreq", "advisory_interest",
                        "_advisories", "account_name"}
#: Carried in the state's "pace" when the consumer keeps a pace (consumer_pacing.py); a
#: consumer without one has them as it starts.
PACE = {"_replay", "_replay_lseq", "_replay_lts", "_pace_due", "_pace_stage", "_rl_credit", "_rl_last"}
#: Carried in the state's "priority" when the consumer has priority groups, a pin or a RAFT
#: term seen (consumer_priority.py).
PRIORITY = {"_pin", "_pin_ts", "_pin_due", "_pin_group", "_pin_term", "_pin_seq", "_term"}


class _Events:
    def emit(self, name: str, **fields) -> None:
        pass


class Replica:
    """One server's replica of stream S, leading term 1 (so that it sends what it applies)."""

    def __init__(self, config: dict) -> None:
        self.override = InterestOverride()
        override = self.override
        self.acc = JetStreamAccount("$G", store_dir=None, sync=GroupCommit(), events=_Events(),
                                    interest=lambda s: bool(override.subjects and s in override.subjects),
                                    server_version="2.15.1", server_name="n", clustered=True)
        self.acc.create_replica(config, T0)
        self.sent: list = []
        self.replica = StreamReplica(self.acc, STREAM, emit=self.sent.extend, override=override)
        self.replica.leader_changed("n", 1)
        self.replica.is_leader = True
        self.index = 0

    def apply(self, data: bytes) -> list[tuple]:
        self.index += 1
        start = len(self.sent)
        self.replica.apply([Entry(term=1, index=self.index, type=EntryType.NORMAL, data=data)])
        return [_wire(r) for r in self.sent[start:]]

    @property
    def entry(self):
        return self.acc.streams[STREAM]


def _wire(reply) -> tuple:
    o = reply.out
    return (type(o).__name__, o.subject, o.reply, o.headers, o.payload,
            getattr(o, "deliver_as", None), reply.needs_sync, reply.needs_state)


def _create(name: str, cfg: dict) -> tuple[str, bytes]:
    return (f"$JS.API.CONSUMER.CREATE.{STREAM}.{name}",
            json.dumps({"stream_name": STREAM, "config": cfg}).encode())


#: Consumers the workload creates (name -> config); some are refused on some streams
#: (workqueue filters must not overlap, ack none is refused there): the refusal is compared too.
CONSUMERS = {
    "PULL": {"durable_name": "PULL", "ack_policy": "explicit", "ack_wait": 2 * SECOND,
             "max_deliver": 4, "backoff": [1 * SECOND, 3 * SECOND]},
    "PULLA": {"durable_name": "PULLA", "ack_policy": "explicit", "filter_subject": "s.a",
              "ack_wait": 1 * SECOND, "max_ack_pending": 3, "max_waiting": 3},
    "ALL": {"durable_name": "ALL", "ack_policy": "all", "filter_subjects": ["s.b", "s.c.>"],
            "ack_wait": 1500 * MS, "max_bytes": 4096, "max_batch": 5},
    "LPS": {"durable_name": "LPS", "ack_policy": "explicit", "deliver_policy": "last_per_subject",
            "filter_subject": "s.c.>", "ack_wait": 3 * SECOND, "headers_only": True},
    "PUSH": {"durable_name": "PUSH", "deliver_subject": "push.p", "ack_policy": "explicit",
             "flow_control": True, "idle_heartbeat": 500 * MS, "ack_wait": 2 * SECOND,
             "max_deliver": 3},
    "PUSHN": {"durable_name": "PUSHN", "deliver_subject": "push.n", "ack_policy": "none",
              "filter_subject": "s.b"},
    "EPH": {"name": "EPH", "ack_policy": "explicit", "inactive_threshold": 2 * SECOND,
            "ack_wait": 1 * SECOND},
    "EPUSH": {"name": "EPUSH", "deliver_subject": "push.e", "ack_policy": "explicit",
              "inactive_threshold": 3 * SECOND, "ack_wait": 1 * SECOND},
    "REPLAY": {"durable_name": "REPLAY", "ack_policy": "explicit", "replay_policy": "original",
               "filter_subject": "s.c.>", "ack_wait": 1 * SECOND},
    "RATE": {"durable_name": "RATE", "deliver_subject": "push.r", "ack_policy": "explicit",
             "rate_limit_bps": 8 * 50_000, "replay_policy": "original", "ack_wait": 2 * SECOND},
}
#: Consumers with priority groups (consumer_priority.py), in a priority workload only.
PRIORITY_CONSUMERS = {
    "PIN": {"durable_name": "PIN", "ack_policy": "explicit", "priority_policy": "pinned_client",
            "priority_groups": ["A", "B"], "priority_timeout": 2 * SECOND, "filter_subject": "s.a",
            "ack_wait": 1 * SECOND},
    "OVER": {"durable_name": "OVER", "ack_policy": "explicit", "priority_policy": "overflow",
             "priority_groups": ["A"], "filter_subject": "s.b", "ack_wait": 2 * SECOND},
    "PRIO": {"durable_name": "PRIO", "ack_policy": "explicit", "priority_policy": "prioritized",
             "priority_groups": ["A"], "filter_subject": "s.c.>", "ack_wait": 1 * SECOND},
}
PULLS = ["PULL", "PULLA", "ALL", "LPS", "EPH", "REPLAY"]
ALL_CONSUMERS = {**CONSUMERS, **PRIORITY_CONSUMERS}
DELIVER = {"PUSH": "push.p", "PUSHN": "push.n", "EPUSH": "push.e", "RATE": "push.r"}
SUBJECTS = ["s.a", "s.b", "s.c.x", "s.c.y"]


class Workload:
    """Random log entries, each chosen from what A has sent so far (ack subjects, flow
    control requests); the same object then feeds A and B alike."""

    def __init__(self, seed: int, priority: bool = False) -> None:
        self.rng = random.Random(seed)
        #: with priority groups: their consumers, pull requests and unpins join the mix
        self.priority = priority
        self.consumers = list(ALL_CONSUMERS if priority else CONSUMERS)
        self.pulls = PULLS + list(PRIORITY_CONSUMERS) if priority else PULLS
        self.now = T0
        self.acks: list[str] = []
        self.fcs: list[str] = []
        self.inboxes: list[str] = []
        self.pins: list[str] = []
        self.interest: set[str] = set(DELIVER.values())

    def observe(self, wire: list[tuple]) -> None:
        for _kind, subject, reply, headers, *_ in wire:
            if headers and b"Nats-Pin-Id: " in headers:
                pin = headers.split(b"Nats-Pin-Id: ")[1].split(b"\r\n")[0].decode()
                if pin and pin not in self.pins[-3:]:
                    self.pins = [*self.pins[-3:], pin]
            if reply and reply.startswith("$JS.ACK."):
                self.acks.append(reply)
            elif reply and reply.startswith("$JS.FC."):
                self.fcs.append(reply)
        self.acks = self.acks[-40:]
        self.fcs = self.fcs[-5:]

    def next(self) -> bytes:
        rng = self.rng
        self.now += rng.randint(1, 80 * MS)
        if rng.random() < 0.1:      # interest comes and goes
            self.interest ^= {rng.choice(list(DELIVER.values()) + self.inboxes[-3:] or ["push.p"])}
        interest = self.interest
        r = rng.random()
        if r < 0.30:
            hdr = None
            if rng.random() < 0.4:
                hdr = f"NATS/1.0\r\nNats-Msg-Id: id{rng.randint(0, 15)}\r\n\r\n".encode()
            size = rng.randint(0, 300) if rng.random() < 0.95 else 400_000   # flow control
            return encode_entry(PUBLISH, self.now, interest, rng.choice(SUBJECTS),
                                rng.choice([None, "_INBOX.pub"]), hdr, b"x" * size)
        if r < 0.38:
            name = rng.choice(self.consumers)
            subject, body = _create(name, ALL_CONSUMERS[name])
            return encode_entry(API, self.now, interest, subject, "_INBOX.api", None, body)
        if r < 0.55:
            name = rng.choice(self.pulls)
            inbox = f"_INBOX.pull.{rng.randint(0, 5)}"
            self.inboxes.append(inbox)
            if rng.random() < 0.8:
                self.interest = self.interest | {inbox}
            req: dict = {"batch": rng.randint(1, 6)}
            if rng.random() < 0.6:
                req["expires"] = rng.randint(1, 4000) * MS
                if rng.random() < 0.3:
                    req["idle_heartbeat"] = req["expires"] // 3
            if rng.random() < 0.3:
                req["max_bytes"] = rng.randint(50, 1500)
            if rng.random() < 0.2:
                req["no_wait"] = True
            if name in ("PIN", "OVER", "PRIO") and rng.random() < 0.95:
                req["group"] = rng.choice(["A", "A", "A", "B", "Z"])
                if name == "PIN" and self.pins and rng.random() < 0.5:
                    req["id"] = rng.choice(self.pins)
                if name == "OVER":
                    req.update(rng.choice([{}, {"min_pending": rng.randint(1, 8)},
                                           {"min_ack_pending": rng.randint(1, 4)}]))
                if name == "PRIO":
                    req["priority"] = rng.randint(0, 10)
            return encode_entry(API, self.now, self.interest, f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{name}",
                                inbox, None, json.dumps(req).encode())
        if r < 0.75 and self.acks:
            subject = rng.choice(self.acks)
            payload = rng.choice([b"+ACK", b"", b"-NAK", b'-NAK {"delay": 1500000000}', b"-NAK 2s",
                                  b"+WPI", b"+TERM", b"+TERM bored", b'+NXT {"batch":2}'])
            reply = "_INBOX.ack" if rng.random() < 0.3 or payload.startswith(b"+NXT") else None
            return encode_entry(ACK, self.now, interest | {"_INBOX.ack"}, subject, reply, payload)
        if r < 0.78 and self.fcs:
            return encode_entry(FLOW_CONTROL, self.now, interest, self.fcs.pop(0))
        if r < 0.82:
            op = rng.random()
            if op < 0.3:
                return encode_entry(API, self.now, interest, f"$JS.API.STREAM.MSG.DELETE.{STREAM}",
                                    "_INBOX.api", None, json.dumps({"seq": rng.randint(1, 40)}).encode())
            if op < 0.5:
                req = rng.choice([{}, {"filter": "s.a"}, {"keep": 3}, {"seq": rng.randint(1, 30)}])
                return encode_entry(API, self.now, interest, f"$JS.API.STREAM.PURGE.{STREAM}",
                                    "_INBOX.api", None, json.dumps(req).encode())
            if op < 0.7:
                name = rng.choice(self.consumers)
                return encode_entry(API, self.now, interest, f"$JS.API.CONSUMER.DELETE.{STREAM}.{name}",
                                    "_INBOX.api", None, b"")
            if op < 0.8 and self.priority:
                group = rng.choice(["A", "B"])
                return encode_entry(API, self.now, interest, f"$JS.API.CONSUMER.UNPIN.{STREAM}.PIN",
                                    "_INBOX.api", None, json.dumps({"group": group}).encode())
            name = rng.choice(self.consumers)
            return encode_entry(API, self.now, interest, f"$JS.API.CONSUMER.INFO.{STREAM}.{name}",
                                "_INBOX.api", None, b"")
        self.now += rng.choice([10 * MS, 300 * MS, 1 * SECOND, 2500 * MS])
        return encode_entry(TICK, self.now, interest, rng.random() < 0.3)


STREAMS = {
    "limits": {"name": STREAM, "subjects": ["s.>"], "storage": "memory", "num_replicas": 3,
               "retention": "limits", "max_msgs": 30, "max_age": 20 * SECOND,
               "max_msgs_per_subject": 12, "duplicate_window": 3 * SECOND},
    "interest": {"name": STREAM, "subjects": ["s.>"], "storage": "memory", "num_replicas": 3,
                 "retention": "interest", "max_bytes": 6000, "duplicate_window": 5 * SECOND},
    "workqueue": {"name": STREAM, "subjects": ["s.>"], "storage": "memory", "num_replicas": 3,
                  "retention": "workqueue", "max_msgs": 25, "discard": "new",
                  "duplicate_window": 2 * SECOND},
}


def _infos(acc: JetStreamAccount, now: int) -> list:
    out = [acc.stream_info(acc.streams[STREAM], now, deleted_details=True)]
    out += [(n, c.info(now)) for n, c in acc.streams[STREAM].consumers.items()]
    return out


def _attrs(obj, skip: set[str]) -> dict:
    return {k: v for k, v in vars(obj).items() if k not in skip}


def _assert_same(a: Replica, b: Replica, now: int) -> None:
    assert a.acc.replica_state(STREAM) == b.acc.replica_state(STREAM)
    assert _infos(a.acc, now) == _infos(b.acc, now)
    sa, sb = a.entry.stream, b.entry.stream
    assert _attrs(sa, {"store"}) == _attrs(sb, {"store"})
    assert list(a.entry.consumers) == list(b.entry.consumers)
    for name, ca in a.entry.consumers.items():
        assert _attrs(ca, {"stream", "has_interest"}) == _attrs(b.entry.consumers[name],
                                                               {"stream", "has_interest"})


def _handover(a: Replica, b: Replica) -> None:
    """A's state, through msgpack, into B; B's store first gets A's messages."""
    state = a.acc.replica_state(STREAM)
    packed = msgpack.packb(state, use_bin_type=True)
    unpacked = msgpack.unpackb(packed, raw=False, strict_map_key=True)
    assert unpacked == state                # only msgpack-safe values: nothing changed type
    b.entry.stream.store = copy.deepcopy(a.entry.stream.store)
    b.acc.restore_replica_state(STREAM, unpacked, a.replica.last_ts)


@pytest.mark.parametrize("priority", [False, True], ids=["plain", "priority-groups"])
@pytest.mark.parametrize("retention", sorted(STREAMS))
@pytest.mark.parametrize("seed", range(6))
def test_a_restored_replica_behaves_as_the_original(retention, seed, priority):
    a, b = Replica(STREAMS[retention]), Replica(STREAMS[retention])
    work = Workload(seed * 31 + len(retention), priority)
    cut = work.rng.randint(60, 260)
    b_prefix = work.rng.randint(0, cut)       # B has applied part of the log (other consumers)
    for i in range(cut):
        data = work.next()
        work.observe(a.apply(data))
        if i < b_prefix:
            b.apply(data)
    _handover(a, b)
    at_handover = (a.acc.replica_state(STREAM), b.acc.replica_state(STREAM))
    sent = 0
    for _ in range(300):        # behaviour first: what each sends, entry by entry
        data = work.next()
        out_a, out_b = a.apply(data), b.apply(data)
        assert out_a == out_b
        sent += len(out_a)
        work.observe(out_a)
    _assert_same(a, b, work.now)
    assert at_handover[0] == at_handover[1]
    assert sent > 0


def test_the_workload_reaches_the_states_worth_covering():
    """The random workload above does exercise what the state carries (else its
    comparisons could pass with a state that leaves these out)."""
    seen: dict[str, bool] = {k: False for k in ("waiting", "rdq", "fcid", "lss", "rdc", "dedupe",
                                                 "no_interest_since", "pending", "replay hold",
                                                 "rate hold", "pin", "waiting with a pin id")}
    for retention, priority in [(r, p) for r in STREAMS for p in (False, True)]:
        for seed in range(4):
            a = Replica(STREAMS[retention])
            work = Workload(seed * 31 + len(retention), priority)
            for _ in range(400):
                work.observe(a.apply(work.next()))
                st = a.acc.replica_state(STREAM)
                seen["dedupe"] |= bool(st["stream"]["dedupe"])
                for c in st["consumers"]:
                    s = c["state"]
                    for key in ("waiting", "rdq", "fcid", "lss", "rdc", "pending"):
                        seen[key] |= bool(s[key])
                    seen["no_interest_since"] |= s["no_interest_since"] is not None \
                        and bool(c["config"].get("deliver_subject"))
                    seen["pin"] |= bool(s.get("priority") and s["priority"][0])
                    seen["waiting with a pin id"] |= any(len(w) > 8 and w[8][3] for w in s["waiting"])
                    pace = s.get("pace")
                    seen["replay hold"] |= bool(pace and pace[3] and pace[4] == 1)
                    seen["rate hold"] |= bool(pace and pace[3] and pace[4] == 2)
    assert all(seen.values()), seen


def test_every_consumer_attribute_is_carried_or_documented():
    """A consumer attribute added without a place in the replica state fails here: after a
    restore every attribute of every consumer must equal the original's, and each must be
    either in Consumer.replica_state() or documented as not needing it."""
    a, b = Replica(STREAMS["limits"]), Replica(STREAMS["limits"])
    work = Workload(7, priority=True)
    for _ in range(250):
        work.observe(a.apply(work.next()))
    assert a.entry.consumers
    _handover(a, b)
    for name, ca in a.entry.consumers.items():
        cb = b.entry.consumers[name]
        assert set(vars(ca)) == set(vars(cb))
        carried = {k if k == "dirty" else "_" + k for k in ca.replica_state()} | PACE | PRIORITY
        unaccounted = set(vars(ca)) - carried - NOT_IN_WORKING_STATE
        assert not unaccounted, f"consumer attributes not in the replica state: {unaccounted}"
        for key in set(vars(ca)) - {"stream", "has_interest"}:
            assert getattr(ca, key) == getattr(cb, key), key
        assert cb.stream is b.entry.stream
    assert isinstance(next(iter(b.entry.consumers.values())), Consumer)


def test_restore_replaces_the_consumers_and_sends_nothing():
    a, b = Replica(STREAMS["limits"]), Replica(STREAMS["limits"])
    subject, body = _create("EPH", CONSUMERS["EPH"])
    b.apply(encode_entry(API, T0 + 1, set(), subject, "_INBOX.api", None, body))
    b.apply(encode_entry(API, T0 + 2, {"_INBOX.w"}, f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.EPH",
                         "_INBOX.w", None, b'{"batch":3,"expires":60000000000}'))
    old = b.entry.consumers["EPH"]
    subject, body = _create("PULL", CONSUMERS["PULL"])
    a.apply(encode_entry(API, T0 + 1, set(), subject, "_INBOX.api", None, body))
    sent = len(b.sent)
    _handover(a, b)
    assert list(b.entry.consumers) == ["PULL"]
    assert len(b.sent) == sent
    assert old.poll(T0 + 3) == []               # the replaced consumer is stopped
    _assert_same(a, b, T0 + 3)


def test_restore_writes_no_file(tmp_path):
    """A file stream's replica: restoring writes nothing under the store directory."""
    config = {**STREAMS["limits"], "storage": "file"}
    accs = []
    for n in ("a", "b"):
        override = InterestOverride()
        acc = JetStreamAccount("$G", store_dir=str(tmp_path / n), sync=GroupCommit(), events=_Events(),
                               interest=lambda s: False, server_version="2.15.1", sync_always=False,
                               clustered=True)
        acc.create_replica(config, T0)
        accs.append((acc, StreamReplica(acc, STREAM, emit=lambda r: None, override=override)))
    (a, ra), (b, _rb) = accs
    subject, body = _create("PULL", CONSUMERS["PULL"])
    ra.apply([Entry(1, 1, EntryType.NORMAL, encode_entry(API, T0 + 1, set(), subject, "_INBOX.api", None, body))])
    state = a.replica_state(STREAM)

    def listing():
        return sorted((p.relative_to(tmp_path / "b"), p.stat().st_mtime_ns, p.stat().st_size)
                      for p in (tmp_path / "b").rglob("*"))

    before = listing()
    b.restore_replica_state(STREAM, state, T0 + 2)
    assert listing() == before
    assert list(b.streams[STREAM].consumers) == ["PULL"]


# --- malformed states -------------------------------------------------------------------


def _valid_state() -> tuple[Replica, dict]:
    a = Replica(STREAMS["limits"])
    work = Workload(3)
    for _ in range(200):
        work.observe(a.apply(work.next()))
    state = a.acc.replica_state(STREAM)
    assert len(state["consumers"]) >= 2 and state["stream"]["dedupe"]
    assert any(c["state"]["pending"] for c in state["consumers"])
    return a, state


def _pending_consumer(state: dict) -> dict:
    return next(c for c in state["consumers"] if c["state"]["pending"])


def _set(path: list, value):
    def mutate(state: dict) -> None:
        node = state
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


def _del(path: list):
    def mutate(state: dict) -> None:
        node = state
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return mutate


def _on_pending(key, value):
    def mutate(state: dict) -> None:
        _pending_consumer(state)["state"][key] = value
    return mutate


def _consumer_cfg(**changes):
    def mutate(state: dict) -> None:
        state["consumers"][0]["config"].update(changes)
    return mutate


def _dup_consumer(state: dict) -> None:
    state["consumers"].append(copy.deepcopy(state["consumers"][0]))


MALFORMED = {
    "not a map": (lambda s: None, "the state"),
    "unknown version": (_set(["version"], 2), "version 2"),
    "version as text": (_set(["version"], "1"), "version"),
    "missing stream": (_del(["stream"]), "lacks 'stream'"),
    "unknown top key": (_set(["extra"], 1), "unknown key"),
    "consumers not a list": (_set(["consumers"], {}), "the state.consumers"),
    "negative last_seq": (_set(["stream", "last_seq"], -1), "stream.last_seq"),
    "bool last_seq": (_set(["stream", "last_seq"], True), "stream.last_seq"),
    "msg id not text": (_set(["stream", "last_msg_id"], b"x"), "stream.last_msg_id"),
    "dedupe item short": (_set(["stream", "dedupe", 0], ["id", 1]), "stream.dedupe[0]"),
    "stream config not a map": (_set(["stream", "config"], []), "stream.config"),
    "stream config bad type": (_set(["stream", "config", "max_msgs"], "many"), "stream.config"),
    "stream config other name": (_set(["stream", "config", "name"], "T"), "stream.config.name"),
    "stream config other storage": (_set(["stream", "config", "storage"], "file"), "storage"),
    "consumer config bad": (_consumer_cfg(ack_policy="sometimes"), "consumers[0].config"),
    "consumer config unsupported": (_consumer_cfg(sourcing=True), "consumers[0].config"),
    "pace short": (_set(["consumers", 0, "state", "pace"], [True, 0, 0]), "pace"),
    "pace bucket text": (_set(["consumers", 0, "state", "pace"], [True, 0, 0, 0, 0, 0, "now"]), "pace[6]"),
    "consumer name mismatch": (_set(["consumers", 0, "name"], "OTHER"), "consumers[0].name"),
    "consumer name invalid": (_set(["consumers", 0, "name"], "a.b"), "consumers[0].name"),
    "consumer repeated": (_dup_consumer, "repeated"),
    "consumer lacks state": (_del(["consumers", 0, "state"]), "lacks 'state'"),
    "state key missing": (_del(["consumers", 0, "state", "rdq"]), "lacks 'rdq'"),
    "state key unknown": (_set(["consumers", 0, "state", "future"], 0), "unknown key"),
    "pending item text": (_on_pending("pending", [["1", 1, T0]]), "pending[0][0]"),
    "pending repeated": (_on_pending("pending", [[1, 1, T0], [1, 2, T0]]), "repeats"),
    "waiting item short": (_set(["consumers", 0, "state", "waiting"], [["_INBOX.x", 1]]), "waiting[0]"),
    "waiting empty reply": (_set(["consumers", 0, "state", "waiting"],
                                 [["", 1, 0, 0, 0, 0, False, 0]]), "empty reply"),
    "lss_undo long": (_set(["consumers", 0, "state", "lss_undo"], [1, 2, 3]), "lss_undo"),
    "fcid not text": (_set(["consumers", 0, "state", "fcid"], None), "fcid"),
    "closed not bool": (_set(["consumers", 0, "state", "closed"], 0), "closed"),
    "created_ns float": (_set(["consumers", 0, "created_ns"], 1.5), "created_ns"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_state_is_refused_and_changes_nothing(case):
    mutate, words = MALFORMED[case]
    a, state = _valid_state()
    b, _ = _valid_state()
    b_before = b.acc.replica_state(STREAM)
    b_consumers = dict(b.entry.consumers)
    b_config = b.entry.stream.config
    bad = copy.deepcopy(state)
    if case == "not a map":
        bad = [1, 2]
    else:
        mutate(bad)
    with pytest.raises(ReplicaStateError) as err:
        b.acc.restore_replica_state(STREAM, bad, T0)
    assert words in str(err.value)
    assert b.acc.replica_state(STREAM) == b_before
    assert b.entry.consumers == b_consumers
    assert all(b.entry.consumers[n] is c for n, c in b_consumers.items())
    assert b.entry.stream.config is b_config
    b.acc.restore_replica_state(STREAM, state, T0)       # the good one still restores


def test_an_unknown_stream_is_refused():
    a, state = _valid_state()
    with pytest.raises(ReplicaStateError, match="no stream 'NOPE'"):
        a.acc.restore_replica_state("NOPE", state, T0)


def test_subjects_that_overlap_another_stream_are_refused():
    a, state = _valid_state()
    b = Replica(STREAMS["limits"])
    b.acc.create_replica({"name": "OTHER", "subjects": ["t.>"], "storage": "memory", "num_replicas": 3}, T0)
    bad = copy.deepcopy(state)
    bad["stream"]["config"]["subjects"] = ["s.>", "t.x"]
    before = b.acc.replica_state(STREAM)
    with pytest.raises(ReplicaStateError, match="overlaps stream 'OTHER'"):
        b.acc.restore_replica_state(STREAM, bad, T0)
    assert b.acc.replica_state(STREAM) == before
    assert b.acc.stream_for("t.x").name == "OTHER"


def test_restored_subjects_route_publishes():
    """A state whose stream config has other subjects (a STREAM.UPDATE in the log) moves
    the subjects this account captures for the stream."""
    a, state = _valid_state()
    b = Replica(STREAMS["limits"])
    moved = copy.deepcopy(state)
    moved["stream"]["config"]["subjects"] = ["s.>", "u.*"]
    b.entry.stream.store = copy.deepcopy(a.entry.stream.store)
    b.acc.restore_replica_state(STREAM, moved, T0)
    assert b.acc.stream_for("u.x").name == STREAM
    assert b.entry.stream.config.subjects == ["s.>", "u.*"]


def _nodes(value, path=()):
    """Every (path, value) of a state, the root included."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, path + (i,))


JUNK = [None, True, 0, -1, 2**64, 1.5, "", "x", b"x", [], [1], {}, {"a": 1}, {1: 2}]


def test_random_damage_raises_only_replica_state_errors():
    """Untrusted input: any node of a valid state replaced by a value of another kind
    either restores or raises ReplicaStateError, never another exception, and a refused
    state leaves the account as it was."""
    a, state = _valid_state()
    b, _ = _valid_state()
    nodes = list(_nodes(state))
    rng = random.Random(5)
    refused = 0
    for _ in range(400):
        path, _value = rng.choice(nodes)
        bad = copy.deepcopy(state)
        junk = copy.deepcopy(rng.choice(JUNK))
        if not path:
            bad = junk
        else:
            parent = bad
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = junk
        before = b.acc.replica_state(STREAM)
        try:
            b.acc.restore_replica_state(STREAM, bad, T0)
        except ReplicaStateError:
            refused += 1
            assert b.acc.replica_state(STREAM) == before
        b.acc.restore_replica_state(STREAM, state, T0)
    assert refused > 300
