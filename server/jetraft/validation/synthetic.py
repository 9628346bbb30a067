"""Synthetic runs for the validation's tests and benchmark: the files a lab run leaves
(logs/<server>/events.jsonl, topology.json, drills.json, <drill>.ledger.jsonl,
<drill>.stream.jsonl, <drill>.ttl.jsonl, <drill>.counter.jsonl), from a small model of RAFT
groups instead of a cluster.

The model: N servers in zones a, a, b, b, c (round robin beyond five), G groups (the meta
group of every server, then R3 stream groups with one replica per zone, placed by the meta
leader's ``jetstream_stream_assigned``: the drill's stream KILL_ZONE_A, then ORDERS_<i>), and about M
events. Each step one group either elects a leader (every few hundred steps) or commits a
batch of 1-4 entries that every live peer applies (``raft_applied``). One drill kills zone
a for a while: its servers fall silent, groups they led elect a leader elsewhere, their
replicas lag and catch up after the repair; a client's publishes to the first stream
group form the ledger, and the drained stream holds each acknowledged one once. Just
before the repair every live replica snapshots and compacts its log; on the repair each
returning replica installs the leader's snapshot, and a returning stream replica fetches
its messages (``stream_catchup_started``, then ``stream_catchup_finished``: the first
stream's after one failed attempt, its store reported damaged first).

Beside the drill's ledger, its TTL and counter ledgers (:func:`write_features`, as
lab/features.py writes them): messages with a 2 s ``Nats-TTL`` (one publish timed out, one
get unanswered), each looked for every 500 ms until 4 s after its expiry and gone 150 ms
after it; increments of a counter (one retried after a timeout and answered ``duplicate``,
one of unknown outcome after three timeouts, one refused) and the value read back, the sum
of the acknowledged ones.

``anomalies`` injects faults the checks must find, by name (see :data:`ANOMALIES`).
"""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from jetraft.events import SCHEMA_VERSION

ANOMALIES = {
    "two_leaders": "a second server becomes leader of a group in a term that has one",
    "term_backwards": "a server reports a lower term in a group than it reported before",
    "divergent_entry": "a server applies another entry (hash) at an index than the others",
    "stale_leader": "a leader is elected whose log lacks an entry committed before",
    "lost_ack": "an acknowledged publish is missing from the drained stream",
    "duplicate": "an acknowledged publish is twice in the drained stream",
    "unexpected": "the drained stream holds a message never published",
    "replica_never_current": "a replica is last reported lagging",
    "leaderless_fault": "the drill's stream has no leader off the faulted zone until the repair",
    "corrupt_line": "a line of an event log is not JSON",
    "foreign_server": "a server not in the inventory writes events",
    "ttl_outlived": "a message with a Nats-TTL is still served 3.25 s after its TTL passed",
    "counter_missing": "a counter's final value lacks an acknowledged increment",
    "counter_extra": "a counter's final value holds one increment more than its range allows "
                     "(the retried increment counted twice)",
}

START_NS = 1_798_761_600_000_000_000        # 2027-01-01T00:00:00Z
STEP_NS = 1_000_000                         # 1 ms of model time per step
DRILL = "kill-zone-a"
DRILL_STREAM = "KILL_ZONE_A"
TTL_STREAM = f"{DRILL_STREAM}_TTL"
COUNTER_STREAM = f"{DRILL_STREAM}_COUNTER"
MS = 1_000_000
#: The TTL of the synthetic TTL'd messages, and how long after its expiry each is removed.
TTL_NS = 2_000 * MS
REMOVAL_NS = 150 * MS


@dataclass
class _Group:
    name: str
    peers: list[str]
    term: int = 0
    leader: str | None = None
    last: int = 0
    last_term: int = 0                                      # the term of the entry at last
    lagging: dict[str, int] = field(default_factory=dict)   # peer -> since ns
    stream: str | None = None                               # the stream it replicates


def entry_hash(group: str, index: int, term: int) -> int:
    return zlib.crc32(f"{group}:{index}:{term}".encode())


class _Writer:
    def __init__(self, root: Path, servers: list[str]):
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.files = {}
        for s in servers:
            (root / "logs" / s).mkdir(exist_ok=True)
            self.files[s] = open(root / "logs" / s / "events.jsonl", "w", buffering=1 << 20)  # noqa: SIM115
        self.count = 0
        self._sec = -1
        self._prefix = ""

    def ts(self, ns: int) -> str:
        sec, frac = divmod(ns, 1_000_000_000)
        if sec != self._sec:
            self._sec, self._prefix = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._prefix}.{frac:09d}Z"

    def emit(self, server: str, ns: int, event: str, fields: str, level: str = "info") -> None:
        self.files[server].write(f'{{"ts":"{self.ts(ns)}","v":{SCHEMA_VERSION},"server_name":"{server}",'
                                 f'"level":"{level}","event":"{event}",{fields}}}\n')
        self.count += 1

    def raw(self, server: str, line: str) -> None:
        self.files[server].write(line + "\n")
        self.count += 1

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def generate(root: Path, *, servers: int = 5, groups: int = 4, events: int = 10_000, seed: int = 0,
             anomalies: frozenset[str] | set[str] = frozenset()) -> dict:
    """Write a synthetic run into ``root``; returns {events, entries, ledger, drill}.
    ValueError for an unknown anomaly or fewer than 3 servers or 2 groups."""
    unknown = set(anomalies) - set(ANOMALIES)
    if unknown:
        raise ValueError(f"unknown anomalies {sorted(unknown)}; known: {sorted(ANOMALIES)}")
    if servers < 3 or groups < 2:
        raise ValueError("need at least 3 servers and 2 groups (the meta group and a stream)")
    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    names = [f"n{i + 1}" for i in range(servers)]
    zone_of = {n: "aabbc"[i] if servers == 5 else "abc"[i % 3] for i, n in enumerate(names)}
    by_zone = {z: [n for n in names if zone_of[n] == z] for z in "abc"}
    out = _Writer(root, names + (["n99"] if "foreign_server" in anomalies else []))
    ns = START_NS
    (root / "topology.json").write_text(json.dumps({"cluster": "C1", "servers": [
        {"host": n, "server_name": n, "zone": zone_of[n]} for n in names]}) + "\n")
    for n in names:
        out.emit(n, ns, "server_starting", f'"server_id":"ID{n.upper()}","cluster":"C1",'
                                           f'"tags":["az:{zone_of[n]}"],"pid":1')
    gs = [_Group("_meta_", list(names))]
    for i in range(1, groups):
        gs.append(_Group(f"S-R3F-g{i}", [rnd.choice(by_zone[z]) for z in "abc"]))
    stream = gs[1]
    down: set[str] = set()
    entries = 0

    def peers_json(g: _Group) -> str:
        return json.dumps(g.peers)

    def elect(g: _Group, at: int, leader: str | None = None, term: int | None = None,
              index: int | None = None) -> None:
        live = [p for p in g.peers if p not in down]
        g.term = term if term is not None else g.term + 1
        g.leader = leader or rnd.choice(live)
        last = g.last if index is None else index
        for p in live:
            if p == g.leader:
                out.emit(p, at, "raft_became_leader",
                         f'"group":"{g.name}","term":{g.term},"leader":"{p}","index":{last},'
                         f'"peers":{peers_json(g)},"zone":"{zone_of[p]}"')
            else:
                out.emit(p, at, "raft_became_follower",
                         f'"group":"{g.name}","term":{g.term},"leader":"{g.leader}","index":{g.last},'
                         f'"peers":{peers_json(g)},"zone":"{zone_of[p]}"')
        for p in g.peers:
            if p != g.leader:
                state = "lagging" if p in down else "current"
                extra = ',"behind_ns":null' if state == "current" else ""
                out.emit(g.leader, at, f"raft_replica_{state}",
                         f'"group":"{g.name}","term":{g.term},"peer":"{p}","lag":0,'
                         f'"offline":{"true" if p in down else "false"}{extra}')
                if p in down:
                    g.lagging[p] = at
                else:
                    g.lagging.pop(p, None)

    for g in gs:
        elect(g, ns, leader=g.peers[0] if g.name == "_meta_" else None)
    for g in gs[1:]:                        # the meta leader places each stream on its group
        g.stream = DRILL_STREAM if g is stream else f"ORDERS_{gs.index(g)}"
        out.emit(gs[0].leader, ns, "jetstream_stream_assigned",
                 f'"account":"$G","stream":"{g.stream}","group":"{g.name}","peers":{peers_json(g)},'
                 f'"replicas":{len(g.peers)}')

    total_steps = max(1, events // 4)
    fault_at, repair_at = int(total_steps * 0.4), int(total_steps * 0.6)
    healed_at = repair_at + max(1, total_steps // 10)
    drill_start = int(total_steps * 0.3)
    next_seq = 1
    pending: dict[str, int] = {}            # group -> step of its next election
    drill: dict = {"name": DRILL, "stream": DRILL_STREAM, "group": stream.name, "servers": by_zone["a"]}
    ledger: list[dict] = []
    step = 0
    while out.count < events:
        step += 1
        ns += STEP_NS
        if step == fault_at - 50:           # the fault takes the meta and the stream leaders
            for g in (gs[0], stream):
                if g.leader not in by_zone["a"]:
                    elect(g, ns, leader=next(p for p in g.peers if p in by_zone["a"]))
        if step == fault_at:
            drill["fault_ns"] = ns
            down.update(by_zone["a"])
            for g in gs:
                for p in g.peers:
                    if p in down and p != g.leader and p not in g.lagging:
                        g.lagging[p] = ns
                        out.emit(g.leader, ns, "raft_replica_lagging",
                                 f'"group":"{g.name}","term":{g.term},"peer":"{p}","lag":0,"offline":true')
            for g in gs:                  # an election timeout later, a leader off zone a
                if g.leader in down:
                    g.leader = None
                    if not (g is stream and "leaderless_fault" in anomalies):
                        pending[g.name] = step + max(1, (repair_at - fault_at) // 4)
        if step == repair_at - 1:
            _snapshot(out, gs, down, ns)
        if step == repair_at:
            drill["repair_ns"] = ns
            _catch_up(out, gs, down, ns)
            down.clear()
            if stream.leader is None:
                elect(stream, ns)
        if step == healed_at:
            for g in gs:
                for p, since in list(g.lagging.items()):
                    out.emit(g.leader, ns, "raft_replica_current",
                             f'"group":"{g.name}","term":{g.term},"peer":"{p}","lag":0,'
                             f'"offline":false,"behind_ns":{ns - since}')
                    del g.lagging[p]
            drill["healed_ns"] = ns
        for g in gs:
            if pending.get(g.name) == step:
                del pending[g.name]
                elect(g, ns)
        g = gs[step % len(gs)]
        if g.leader is None:                 # no leader: nothing commits
            continue
        if rnd.random() < 0.002:
            elect(g, ns)
            continue
        k = rnd.randint(1, 4)
        first = g.last + 1
        g.last += k
        g.last_term = g.term
        terms = ",".join([str(g.term)] * k)
        hashes = [entry_hash(g.name, i, g.term) for i in range(first, g.last + 1)]
        for p in g.peers:
            if p in down:
                continue
            out.emit(p, ns + rnd.randint(0, STEP_NS // 2), "raft_applied",
                     f'"group":"{g.name}","term":{g.term},"first_index":{first},"last_index":{g.last},'
                     f'"terms":[{terms}],"hashes":[{",".join(map(str, hashes))}],"zone":"{zone_of[p]}"')
        entries += k
        if g is stream and step >= drill_start and "healed_ns" not in drill:
            for _ in range(k):
                ledger.append({"drill": DRILL, "msg_id": f"{DRILL}-{len(ledger) + 1}", "sent_ns": ns - STEP_NS,
                               "acked_ns": ns + STEP_NS, "stream_seq": next_seq, "error": None})
                next_seq += 1
        if g is stream and fault_at <= step < repair_at and rnd.random() < 0.01:
            ledger.append({"drill": DRILL, "msg_id": f"{DRILL}-{len(ledger) + 1}", "sent_ns": ns,
                           "acked_ns": None, "stream_seq": None, "error": "TimeoutError: nats: timeout"})
    drill.setdefault("repair_ns", ns)
    drill.setdefault("healed_ns", ns)
    _inject(out, gs, names, zone_of, ns, anomalies, rnd)
    out.close()
    _write_drill(root, drill, ledger, anomalies)
    write_features(root, drill["fault_ns"], drill["healed_ns"], anomalies)
    return {"events": out.count, "entries": entries, "ledger": len(ledger), "drill": drill}


def _snapshot(out: _Writer, gs: list[_Group], down: set[str], ns: int) -> None:
    """Every live replica snapshots its groups and compacts the log up to the snapshot."""
    for g in gs:
        if g.last == 0:
            continue
        for p in g.peers:
            if p not in down:
                out.emit(p, ns, "raft_snapshot_taken", f'"group":"{g.name}","index":{g.last},'
                                                       f'"term":{g.last_term},"bytes":{64 * g.last},"reason":"entries"')
                out.emit(p, ns, "raft_log_compacted", f'"group":"{g.name}","index":{g.last},'
                                                      f'"entries":{g.last},"log_bytes":4096')


def _catch_up(out: _Writer, gs: list[_Group], down: set[str], ns: int) -> None:
    """The replicas coming back from ``down`` install their group's snapshot; a stream
    replica then fetches the messages (the first stream's store damaged, one failed try)."""
    for g in gs:
        if g.last == 0:
            continue
        for p in g.peers:
            if p not in down:
                continue
            out.emit(p, ns, "raft_snapshot_installed", f'"group":"{g.name}","index":{g.last},"term":{g.last_term}')
            if g.name == "_meta_":
                continue
            stream = f'"group":"{g.name}","account":"$G","stream":"{g.stream}"'
            source = next(q for q in g.peers if q not in down)
            first = g is gs[1]
            if first:
                out.emit(p, ns, "stream_store_damaged", f'{stream},"file":"1.blk","offset":4096,'
                                                        f'"kind":"torn_tail","detail":"short record"', "error")
            out.emit(p, ns + 1000, "stream_catchup_started",
                     f'{stream},"snapshot_index":{g.last},"reason":"snapshot",'
                     f'"bytes_needed":{64 * g.last},"last_seq":{g.last}')
            if first:
                out.emit(p, ns + 100_000, "stream_catchup_finished",
                         f'{stream},"snapshot_index":{g.last},"ok":false,"bytes":0,"chunks":0,'
                         f'"duration_ns":99000,"sources":["{source}"],"error":"timeout"')
            out.emit(p, ns + 300_000, "stream_catchup_finished",
                     f'{stream},"snapshot_index":{g.last},"ok":true,"bytes":{64 * g.last},"chunks":2,'
                     f'"duration_ns":299000,"sources":["{source}"],"error":null')


def _inject(out: _Writer, gs: list[_Group], names: list[str], zone_of: dict, ns: int,
            anomalies, rnd: random.Random) -> None:
    g = gs[-1]
    other = next(p for p in g.peers if p != g.leader)
    at = ns + STEP_NS
    if "two_leaders" in anomalies:
        out.emit(other, at, "raft_became_leader",
                 f'"group":"{g.name}","term":{g.term},"leader":"{other}","index":{g.last},'
                 f'"peers":{json.dumps(g.peers)},"zone":"{zone_of[other]}"')
    if "term_backwards" in anomalies:
        out.emit(other, at + 1, "raft_became_follower",
                 f'"group":"{g.name}","term":{max(0, g.term - 1)},"leader":null,"index":{g.last},'
                 f'"peers":{json.dumps(g.peers)},"zone":"{zone_of[other]}"')
    if "divergent_entry" in anomalies:
        index = g.last + 1
        for p in g.peers:
            h = entry_hash(g.name, index, g.term) + (1 if p == other else 0)
            out.emit(p, at + 2, "raft_applied",
                     f'"group":"{g.name}","term":{g.term},"first_index":{index},"last_index":{index},'
                     f'"terms":[{g.term}],"hashes":[{h}],"zone":"{zone_of[p]}"')
        g.last = index
    if "stale_leader" in anomalies:
        out.emit(other, at + 3, "raft_became_leader",
                 f'"group":"{g.name}","term":{g.term + 5},"leader":"{other}","index":{max(0, g.last - 3)},'
                 f'"peers":{json.dumps(g.peers)},"zone":"{zone_of[other]}"')
    if "replica_never_current" in anomalies:
        out.emit(g.leader, at + 4, "raft_replica_lagging",
                 f'"group":"{g.name}","term":{g.term},"peer":"{other}","lag":40,"offline":true')
    if "corrupt_line" in anomalies:
        out.raw(names[0], '{"ts":"2027-01-01T00:00:00.000000000Z","v":1,"server_name":')
    if "foreign_server" in anomalies:
        out.emit("n99", at + 5, "server_starting", '"server_id":"X","cluster":"C1","tags":[]')
        out.emit("n99", at + 6, "raft_became_follower",
                 f'"group":"_meta_","term":1,"leader":null,"index":0,"peers":[],"zone":"c"')


def _write_drill(root: Path, drill: dict, ledger: list[dict], anomalies) -> None:
    acked = [a for a in ledger if a["acked_ns"] is not None]
    drained = [(a["stream_seq"], a["msg_id"]) for a in acked]
    if "lost_ack" in anomalies and drained:
        drained.pop(len(drained) // 2)
    if "duplicate" in anomalies and drained:
        drained.append((drained[-1][0] + 1, drained[0][1]))
    if "unexpected" in anomalies:
        drained.append((drained[-1][0] + 1 if drained else 1, f"{DRILL}-never-sent"))
    stored = {m for _, m in drained}
    with open(root / f"{DRILL}.ledger.jsonl", "w") as f:
        for a in ledger:
            f.write(json.dumps({**a, "present": a["msg_id"] in stored}) + "\n")
    with open(root / f"{DRILL}.stream.jsonl", "w") as f:
        for seq, msg_id in drained:
            f.write(json.dumps({"drill": DRILL, "stream_seq": seq, "msg_id": msg_id}) + "\n")
    summary = {**drill, "attempted": len(ledger), "acknowledged": len(acked),
               "seconds_without_writes": 0.3, "acked_during_outage": 0}
    (root / "drills.json").write_text(json.dumps([summary], indent=2) + "\n")


def write_features(root: Path, start_ns: int, healed_ns: int, anomalies=frozenset()) -> dict:
    """Write the drill's TTL and counter ledgers (module docstring) into ``root``, from
    ``start_ns`` (ns since the epoch; the counter read back after ``healed_ns``), with the
    anomalies ``ttl_outlived``, ``counter_missing`` and ``counter_extra``. Returns
    {ttl_messages, increments, acked_sum, final}."""
    with open(root / f"{DRILL}.ttl.jsonl", "w") as f:
        for i in range(12):
            sent = start_ns + i * 500 * MS
            row = {"drill": DRILL, "stream": TTL_STREAM, "subject": f"drill.{TTL_STREAM.lower()}",
                   "msg_id": f"{DRILL}-ttl-{i + 1}", "ttl_ns": TTL_NS, "sent_ns": sent, "acked_ns": None,
                   "stream_seq": None, "error": None, "stored_ns": None, "observations": []}
            if i == 4:
                row["error"] = "TimeoutError: nats: timeout"
            else:
                acked, stored = sent + 3 * MS, sent + MS
                expires = stored + TTL_NS
                gone = expires + (3_500 * MS if i == 6 and "ttl_outlived" in anomalies else REMOVAL_NS)
                row.update(acked_ns=acked, stream_seq=i + 1 - (i > 4), stored_ns=stored)
                get = acked + 250 * MS
                while get <= expires + 4_000 * MS:
                    unanswered = i == 2 and get == acked + 1_250 * MS
                    row["observations"].append(
                        {"ns": get, "answered_ns": None if unanswered else get + 2 * MS,
                         "found": None if unanswered else get < gone,
                         "error": "TimeoutError: nats: timeout" if unanswered else None})
                    get += 500 * MS
            f.write(json.dumps(row) + "\n")
    subject = f"drill.{COUNTER_STREAM.lower()}"
    rows, value, seq, t = [], 0, 0, start_ns
    increments = (1, 2, 3, 1, 2, 4, 1, 3, 2, 1, 5, 1, -2, 3, 1, 2)

    def attempt(msg_id: str, incr: int, n: int, outcome: str, *, applied: bool = False,
                duplicate_of: int | None = None) -> None:
        nonlocal value, seq, t
        t += 40 * MS
        row = {"drill": DRILL, "stream": COUNTER_STREAM, "subject": subject, "kind": "increment",
               "msg_id": msg_id, "incr": incr, "attempt": n, "sent_ns": t, "acked_ns": None,
               "stream_seq": None, "val": None, "duplicate": None, "outcome": outcome, "error": None}
        if applied:
            value, seq = value + incr, seq + 1
        if outcome == "ok" and duplicate_of is not None:
            row.update(acked_ns=t + 2 * MS, stream_seq=duplicate_of, duplicate=True)
        elif outcome == "ok":
            row.update(acked_ns=t + 2 * MS, stream_seq=seq, val=str(value))
        elif outcome == "fail":
            row["error"] = "ServiceUnavailableError: nats: no leader"
        else:
            row["error"] = "TimeoutError: nats: timeout"
        rows.append(row)

    acked_sum = 0
    retried = 0
    for i, incr in enumerate(increments):
        msg_id = f"{DRILL}-c{i + 1}"
        if i == 4:                  # a timeout, then the retry answered duplicate: counted once
            attempt(msg_id, incr, 1, "info", applied=True)
            attempt(msg_id, incr, 2, "ok", duplicate_of=seq)
            acked_sum += incr
            retried = incr
        elif i == 7:                # three timeouts: unknown (not applied)
            for n in (1, 2, 3):
                attempt(msg_id, incr, n, "info")
        elif i == 10:               # refused: never applied
            attempt(msg_id, incr, 1, "fail")
        else:
            attempt(msg_id, incr, 1, "ok", applied=True)
            acked_sum += incr
    final = value
    if "counter_missing" in anomalies:
        final -= increments[1]
    if "counter_extra" in anomalies:
        final += increments[7] + retried      # the unknown one applied, the retried one twice
    read = max(healed_ns, t) + 100 * MS
    rows.append({"drill": DRILL, "stream": COUNTER_STREAM, "subject": subject, "kind": "final", "msg_id": None,
                 "incr": None, "attempt": None, "sent_ns": read, "acked_ns": read + 2 * MS, "stream_seq": seq,
                 "val": str(final), "duplicate": None, "outcome": "ok", "error": None})
    with open(root / f"{DRILL}.counter.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return {"ttl_messages": 12, "increments": len(increments), "acked_sum": acked_sum, "final": final}


def main() -> None:
    """``python -m jetraft.validation.synthetic DIR [EVENTS] [GROUPS] [ANOMALY...]``"""
    import sys

    args = sys.argv[1:]
    if not args:
        raise SystemExit(main.__doc__)
    stats = generate(Path(args[0]), events=int(args[1]) if len(args) > 1 else 10_000,
                     groups=int(args[2]) if len(args) > 2 else 4, anomalies=set(args[3:]))
    print(json.dumps({k: v for k, v in stats.items() if k != "drill"}))


if __name__ == "__main__":
    main()
