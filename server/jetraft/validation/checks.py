"""The checks: Spark DataFrame computations over a run's event logs and ledgers.

Each check returns a :class:`CheckResult`, Jepsen-style: ``valid`` (True, False, or
``"unknown"`` when the run holds nothing to decide on), ``count`` (offending items; 0 when
valid), ``examples`` (up to ``limit`` offending items, each a dict naming the group, term,
index, server... involved) and ``details`` (figures for the report).

What is checked, and where the property comes from:

- ``input`` — every line parses as JSON and carries a known schema version
  (jetraft.events.SCHEMA_VERSION).
- ``topology`` — the servers seen match the inventory (topology.json): names, zones, one
  cluster name, no server name written from two hosts; every server joined the meta group.
  A server's zone is the one its RAFT events carry (its ``unique_tag`` value), else, when it
  runs without a unique tag (``jetraft_server_unique_zones: false``), its ``az:<zone>``
  server tag as ``server_starting`` logs it (the appliance's tag: roles/jetraft_server).
  Details list the meta group's membership changes over the run (servers added as learners,
  promoted, removed; a server back with another store), which report.md tables and the
  timeline marks.
- ``election_safety`` — at most one leader per (group, term) (Raft §5.2, Figure 3).
- ``term_monotonic`` — on each server, a group's term never decreases (Raft §5.1; the
  term is persisted before it is used); per event log, so a machine that replaced a
  server with a new store (a new RAFT identity) starts anew, and per life of a replica (one
  the server deleted, ``raft_group_closed`` with ``deleted``, and was given again is a new
  member of the group; ``raft_group_files_deleted`` likewise).
- ``log_matching`` — for each (group, index) applied on several servers (or again after a
  restart), one term and one entry hash: Log Matching and State Machine Safety (Raft §5.3,
  §5.4.3), from ``raft_applied`` events; and each snapshot's last entry
  (``raft_snapshot_taken`` / ``raft_snapshot_installed``: index, term) has the term of the
  entry applied at its index, wherever that was applied (Raft §7). Entries a snapshot covers
  are not applied on the server that installed it, and a restart applies the entries past
  its snapshot again: neither is a violation, another term or hash is.
- ``leader_completeness`` — a leader elected at time t holds (its last log index reaches)
  every entry that any server had applied, so committed, before t (Raft §5.4.1). "As far as
  the logs allow": it relies on the hosts' clocks agreeing, to within ``skew_ns``.
- ``availability`` — for each fault of a drill: seconds until the meta group and the
  drill's stream had a leader off the faulted servers, and until a write was acknowledged
  again; a fault of fewer servers than a quorum must leave both with a leader and writes
  acknowledged before it is repaired.
- ``replication`` — every replica's last reported state (``raft_replica_current`` /
  ``raft_replica_lagging``, from the leaders) is current, unless its group was deleted or
  it was removed; catch-up durations (``behind_ns``).
- ``stream_catchup`` — every ``stream_catchup_started`` is followed on its server and group
  by a ``stream_catchup_finished`` with ok true (failed attempts may come between), unless
  the server's log ends, the server restarts or the group closes first ("unfinished",
  "interrupted", "abandoned": reported, not offending); one unfinished while the server's log goes on for more than
  :data:`CATCHUP_LIMIT_S` is stuck. Details: every catch-up with its duration, and every
  ``stream_store_damaged`` (informational).
- ``ledger`` — every acknowledged publish is in the drained stream exactly once, at the
  sequence its acknowledgement gave, and the stream holds nothing never attempted
  (Jepsen's lost / duplicated / unexpected).
- ``ttl`` — no message a zone drill published with a ``Nats-TTL`` was seen readable more than
  1 s after its expiry (its stored time plus its TTL); ``counter`` — each zone drill's counter
  ends at the sum of its acknowledged increments, within the range its increments of unknown
  outcome allow (both in :mod:`~jetraft.validation.feature_checks`).

A fault campaign's run (one with ``history/*.jsonl``) has four checks more, absent from
any other run's report:

- ``queue`` — Jepsen's set checker on the queue workload: lost (prefix / middle /
  postfix), unexpected, duplicated, misplaced, recovered (:mod:`~jetraft.validation.queueset`);
- ``node_divergence`` — each replica's own copy against the acknowledged values, the other
  copies and the drain (:mod:`~jetraft.validation.queueset`);
- ``linearizable`` — each KV key's history against a register with revisions (Wing & Gong
  1993, Lowe 2017, Porcupine; :mod:`~jetraft.validation.linearizable`, on Spark by
  :mod:`~jetraft.validation.kvcheck`);
- ``stale_reads`` — gets that returned a revision older than a write completed before them.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jetraft.events import SCHEMA_VERSION, rfc3339_ns
from jetraft.validation import feature_checks, kvcheck, linearizable, queueset
from jetraft.validation.load import CORRUPT_APPLIED, UNKNOWN_VERSION_APPLIED, Inputs
from jetraft.validation.result import UNKNOWN, CheckResult

META_GROUP = "_meta_"
#: The appliance's zone tag (roles/jetraft_server: ``server_tags: ["az:<zone>"]``).
ZONE_TAG = "az:"


def _rows(df: DataFrame, limit: int) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.limit(limit).collect()]


def _verdict(name: str, doc: str, bad: DataFrame, limit: int, order: list[str],
             details: dict | None = None) -> CheckResult:
    count = bad.count()
    examples = _rows(bad.orderBy(*order), limit) if count else []
    return CheckResult(name, count == 0, count, examples, details or {}, doc)


# --------------------------------------------------------------------------- input


def check_input(inp: Inputs, limit: int) -> CheckResult:
    """Lines that are not JSON objects, or of a schema version this reader does not know."""
    doc = f"every event line is a JSON object of schema version {SCHEMA_VERSION}"
    ev = inp.events
    file = F.concat(F.lit("logs/"), F.regexp_extract(F.col("source"), r"([^/]+/[^/]+)$", 1)).alias("file")
    corrupt = (ev.where(F.col("_corrupt_record").isNotNull() | F.col("event").isNull())
               .select("host", file, F.lit("not a JSON object of an event").alias("problem"),
                       F.substring(F.col("line"), 1, 200).alias("line")))
    version = (ev.where(F.col("_corrupt_record").isNull() & F.col("event").isNotNull()
                        & (F.col("v").isNull() | (F.col("v") != SCHEMA_VERSION)))
               .select("host", file, F.concat(F.lit("schema version "),
                                              F.coalesce(F.col("v").cast("string"), F.lit("missing"))).alias("problem"),
                       F.substring(F.col("line"), 1, 200).alias("line")))
    bad = corrupt.unionByName(version)
    damaged = {r["index"]: r["copies"] for r in inp.per_index.where(F.col("index") < 0)
               .select("index", "copies").collect()}
    count = bad.count()
    examples = _rows(bad.orderBy("host", "line"), limit) if count else []
    for index, what in ((CORRUPT_APPLIED, "raft_applied lines not JSON"),
                        (UNKNOWN_VERSION_APPLIED, "raft_applied lines of another schema version")):
        if damaged.get(index):
            count += damaged[index]
            examples.append({"problem": what, "lines": damaged[index]})
    details = {"events": ev.count(), "applied_entries": inp.per_index.where(F.col("index") >= 0)
               .agg(F.sum("copies")).first()[0] or 0}
    return CheckResult("input", count == 0, count, examples[:limit], details, doc)


# --------------------------------------------------------------------------- topology


def check_topology(inp: Inputs, limit: int) -> CheckResult:
    doc = ("the servers seen match the inventory (names, zones, one cluster name, each name "
           "from one host; a server the inventory lists as retired may be seen) and every "
           "server joined the meta group")
    ev = inp.events.where(F.col("server_name").isNotNull())
    tagged = F.filter(F.coalesce("tags", F.array().cast("array<string>")),
                      lambda t: F.lower(t).startswith(ZONE_TAG))
    tag_zone = F.when((F.col("event") == "server_starting") & (F.size(tagged) > 0),
                      F.substring(tagged[0], len(ZONE_TAG) + 1, 1 << 20))
    seen = (ev.groupBy("server_name")
            .agg(F.collect_set("host").alias("hosts"),
                 F.coalesce(F.first("zone", ignorenulls=True),
                            F.first(tag_zone, ignorenulls=True)).alias("zone"),
                 F.max(F.when(F.col("event").isin("raft_became_follower", "raft_became_leader")
                              & (F.col("group") == META_GROUP), 1).otherwise(0)).alias("meta"))
            .collect())
    clusters = sorted(r["cluster"] for r in ev.where((F.col("event") == "server_starting")
                                                     & F.col("cluster").isNotNull())
                      .select("cluster").distinct().collect())
    problems: list[dict] = []
    servers = {r["server_name"]: r for r in seen}
    for name, r in sorted(servers.items()):
        if len(r["hosts"]) > 1:
            problems.append({"problem": "one server name written from several hosts",
                             "server": name, "hosts": sorted(r["hosts"])})
        if not r["meta"]:
            problems.append({"problem": "never joined the meta group", "server": name})
    if len(clusters) > 1:
        problems.append({"problem": "several cluster names", "clusters": clusters})
    details: dict[str, Any] = {"servers": sorted(servers), "clusters": clusters,
                               "hosts": {n: sorted(r["hosts"]) for n, r in sorted(servers.items())},
                               "zones": _zone_counts({n: r["zone"] for n, r in servers.items()})}
    topo = inp.topology.collect() if inp.topology is not None else []
    if topo:
        expected = {s["server_name"]: s["zone"] for s in topo[0]["servers"] or []}
        retired = {s["server_name"]: s["zone"] for s in topo[0]["retired"] or []}
        details["inventory"] = {"cluster": topo[0]["cluster"], "servers": len(expected),
                                "zones": _zone_counts(expected), "retired": sorted(retired)}
        for name in sorted(set(expected) - set(servers)):
            problems.append({"problem": "in the inventory, never seen", "server": name})
        for name in sorted(set(servers) - set(expected) - set(retired)):
            problems.append({"problem": "seen, not in the inventory", "server": name})
        known = {**retired, **expected}
        for name in sorted(set(servers) & set(known)):
            zone = servers[name]["zone"]
            if known[name] is not None and zone != known[name]:
                problems.append({"problem": "another zone than the inventory's", "server": name,
                                 "inventory": known[name], "seen": zone})
        if topo[0]["cluster"] and clusters and clusters != [topo[0]["cluster"]]:
            problems.append({"problem": "another cluster name than the inventory's",
                             "inventory": topo[0]["cluster"], "seen": clusters})
    else:
        details["inventory"] = None
    if not servers:
        problems.append({"problem": "no server seen"})
    details["membership"] = meta_membership(inp.events)
    return CheckResult("topology", not problems, len(problems), problems[:limit], details, doc)


#: The meta group's membership changes, as every member logs them (thesis §4.1, §4.2.1).
_MEMBERSHIP_EVENTS = {"raft_peer_added": "added", "raft_peer_removed": "removed",
                      "raft_peer_promoted": "promoted to voter", "raft_peer_demoted": "demoted to learner"}
#: What a server says of its own membership (jetraft.events).
_MEMBER_SELF_EVENTS = {"jetstream_meta_store_replaced": "came back with another store (a new member)",
                       "jetstream_meta_refused": "refused as a removed member"}
#: At most this many membership changes are listed.
MEMBERSHIP_LIMIT = 200


def meta_membership(events: DataFrame) -> list[dict[str, Any]]:
    """The meta group's membership changes over the run, in time order: one row per
    change (``raft_peer_added`` / ``removed`` / ``promoted`` / ``demoted`` of group
    ``_meta_``, the same log index logged by several servers counted once, at its first
    time), and what servers said of their own membership (a store replaced, refused after
    a removal). Each row: ts, ns, change, server, index (None for a server's own word),
    seen_by (servers that logged it). At most :data:`MEMBERSHIP_LIMIT` rows."""
    changes = (events.where((F.col("group") == META_GROUP)
                            & F.col("event").isin(*_MEMBERSHIP_EVENTS))
               .groupBy("event", "peer", "index")
               .agg(F.min("ns").alias("ns"), F.min("ts").alias("ts"),
                    F.max(F.coalesce("learner", F.lit(False))).alias("learner"),
                    F.countDistinct("server_name").alias("seen_by"))
               .orderBy("ns").limit(MEMBERSHIP_LIMIT).collect())
    own = (events.where(F.col("event").isin(*_MEMBER_SELF_EVENTS))
           .select("event", "server_name", "ns", "ts").orderBy("ns").limit(MEMBERSHIP_LIMIT).collect())
    rows = []
    for r in changes:
        change = _MEMBERSHIP_EVENTS[r["event"]]
        if r["event"] in ("raft_peer_added", "raft_peer_removed") and r["learner"]:
            change += " as a learner" if r["event"] == "raft_peer_added" else " (a learner)"
        rows.append({"ts": r["ts"], "ns": r["ns"], "change": change, "server": r["peer"],
                     "index": r["index"], "seen_by": r["seen_by"]})
    for r in own:
        rows.append({"ts": r["ts"], "ns": r["ns"], "change": _MEMBER_SELF_EVENTS[r["event"]],
                     "server": r["server_name"], "index": None, "seen_by": 1})
    return sorted(rows, key=lambda r: r["ns"] or 0)[:MEMBERSHIP_LIMIT]


def _zone_counts(zones: dict[str, str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for z in zones.values():
        out[str(z)] = out.get(str(z), 0) + 1
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------- RAFT safety


def check_election_safety(inp: Inputs, limit: int) -> CheckResult:
    doc = "at most one leader per (group, term) (Raft §5.2)"
    leaders = inp.events.where(F.col("event") == "raft_became_leader")
    bad = (leaders.groupBy("group", "term")
           .agg(F.sort_array(F.collect_set("server_name")).alias("leaders"),
                F.min("ts").alias("first_ts"))
           .where(F.size("leaders") > 1))
    return _verdict("election_safety", doc, bad, limit, ["group", "term"],
                    {"elections": leaders.count()})


def check_term_monotonic(inp: Inputs, limit: int) -> CheckResult:
    doc = ("on each server, a group's term never decreases (Raft §5.1); a machine that replaced "
           "a server (its own event log, a new store) starts its terms anew, and so does a "
           "replica the server deleted and was given again")
    # every raft_* event's term is the node's current term, but a snapshot's (the term of
    # the last entry it covers)
    deleted = (((F.col("event") == "raft_group_closed") & F.coalesce(F.col("deleted"), F.lit(False)))
               | (F.col("event") == "raft_group_files_deleted"))
    ev = (inp.events.where(F.col("event").startswith("raft_") & F.col("group").isNotNull()
                           & ((F.col("term").isNotNull()
                               & ~F.col("event").isin("raft_snapshot_taken", "raft_snapshot_installed"))
                              | deleted))
          .select("server_name", "source", "group", "term", "ns", "ts", "event",
                  deleted.cast("int").alias("deleted_close")))
    # one event log per machine: restarts on a kept store stay in one log, a new machine
    # (a new RAFT identity, lab/day_two.py) writes another; and a replica the server
    # deleted (removed from the group's configuration) and was given again later is a new
    # member of the group with a new log (Raft §4.1)
    life = Window.partitionBy("server_name", "source", "group").orderBy("ns") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ev = (ev.withColumn("life", F.sum("deleted_close").over(life))
          .where(F.col("deleted_close") == 0))
    w = Window.partitionBy("server_name", "source", "group", "life").orderBy("ns", "term")
    bad = (ev.withColumn("term_before", F.lag("term").over(w))
           .withColumn("event_before", F.lag("event").over(w))
           .where(F.col("term") < F.col("term_before"))
           .select(F.col("server_name").alias("server"), "group", "term_before", "term", "ts",
                   "event_before", "event"))
    return _verdict("term_monotonic", doc, bad, limit, ["server", "group", "ts"])


#: Events that name a snapshot's last entry: ``index`` and the ``term`` of that entry.
SNAPSHOT_EVENTS = ("raft_snapshot_taken", "raft_snapshot_installed")


def check_log_matching(inp: Inputs, limit: int) -> CheckResult:
    doc = ("each (group, index) applied anywhere has one term and one entry hash, and every "
           "snapshot taken or installed at an index has the term of the entry applied there "
           "(Raft §5.3 Log Matching, §5.4.3 State Machine Safety, §7)")
    # A server applies an entry once per process lifetime: after a restart it applies the
    # entries past its snapshot again (the same entries: one packed value), and the entries a
    # snapshot covers are not applied at all on a server that installed it. So every copy of
    # an index is compared with every other, whichever server and lifetime it comes from, and
    # the snapshots' (index, term) with the entries applied at their index.
    per = inp.per_index.where(F.col("index") >= 0)
    snaps = (inp.events.where(F.col("event").isin(*SNAPSHOT_EVENTS) & F.col("group").isNotNull()
                              & (F.col("index") > 0) & F.col("term").isNotNull())
             .groupBy("group", "index")
             .agg(F.min("term").alias("snap_term_min"), F.max("term").alias("snap_term_max"),
                  F.sort_array(F.collect_set(F.struct(F.col("server_name").alias("server"), "event",
                                                      "term"))).alias("snapshots")))
    applied_term = F.shiftright(F.col("packed_min"), 32)
    crossed = (snaps.join(per.select("group", "index", "packed_min", "packed_max"), ["group", "index"], "left")
               .where((F.col("snap_term_min") != F.col("snap_term_max"))
                      | (F.col("packed_min").isNotNull()
                         & ((applied_term != F.col("snap_term_min"))
                            | (F.shiftright(F.col("packed_max"), 32) != F.col("snap_term_max"))))))
    bad = (per.where(F.col("packed_min") != F.col("packed_max")).select("group", "index")
           .unionByName(crossed.select("group", "index")).distinct())
    count = bad.count()
    counts = per.agg(F.count(F.lit(1)).alias("n"),
                     F.sum(F.when(F.col("copies") > 1, 1).otherwise(0)).alias("several")).first()
    snap_counts = (snaps.join(per.select("group", "index"), ["group", "index"], "left_semi").count(),
                   snaps.count())
    examples = []
    if count:       # the offending entries, server by server (one more pass over the logs)
        first = bad.orderBy("group", "index").limit(limit)
        rows = (inp.applied().join(first, ["group", "index"])
                .groupBy("group", "index")
                .agg(F.sort_array(F.collect_set(F.struct("server", "term", "hash"))).alias("applied")))
        rows = (first.join(rows, ["group", "index"], "left")
                .join(snaps.select("group", "index", "snapshots"), ["group", "index"], "left"))
        examples = [{k: v for k, v in e.items() if v is not None}
                    for e in _rows(rows.orderBy("group", "index"), limit)]
    return CheckResult("log_matching", count == 0, count, examples,
                       {"entries": counts["n"], "applied_more_than_once": counts["several"] or 0,
                        "snapshot_indexes": snap_counts[1],
                        "snapshot_indexes_also_applied": snap_counts[0]}, doc)


def check_leader_completeness(inp: Inputs, limit: int, skew_ns: int = 0) -> CheckResult:
    doc = ("a leader's log reaches every entry applied (so committed) anywhere before it was "
           "elected (Raft §5.4.1; needs the hosts' clocks to agree)")
    committed = (inp.per_index.where(F.col("index") >= 0)
                 .select("group", "ns", F.col("index").alias("committed"),
                         F.lit(None).cast("string").alias("server"),
                         F.lit(None).cast("long").alias("term"),
                         F.lit(None).cast("long").alias("last_index"), F.lit(1).alias("order")))
    leaders = (inp.events.where(F.col("event") == "raft_became_leader")
               .select("group", (F.col("ns") - F.lit(skew_ns)).alias("ns"),
                       F.lit(None).cast("long").alias("committed"),
                       F.col("server_name").alias("server"), "term",
                       F.col("index").alias("last_index"), F.lit(0).alias("order")))
    # leaders sort before commits of the same instant: only what was committed strictly
    # before the election counts
    w = (Window.partitionBy("group").orderBy("ns", "order")
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    both = committed.unionByName(leaders).withColumn("committed_before", F.max("committed").over(w))
    bad = (both.where((F.col("order") == 0) & (F.col("committed_before") > F.col("last_index")))
           .select("group", "term", F.col("server").alias("leader"), "last_index",
                   "committed_before", (F.col("ns") + F.lit(skew_ns)).alias("elected_ns")))
    return _verdict("leader_completeness", doc, bad, limit, ["group", "term"],
                    {"skew_ns": skew_ns})


# --------------------------------------------------------------------------- availability


def _quorum(n: int) -> int:
    return n // 2 + 1


def check_availability(inp: Inputs, limit: int) -> CheckResult:
    doc = ("for each drill's fault: seconds from the fault until the meta group and the stream "
           "had a leader off the faulted servers, and from the fault in place until a write sent "
           "then was acknowledged; with fewer servers lost than a quorum, both must happen "
           "before the repair")
    if inp.drills is None:
        return CheckResult("availability", UNKNOWN, 0, [], {"drills": 0}, doc)
    drills = [d.asDict(recursive=True) for d in inp.drills.where(F.col("fault_ns").isNotNull()).collect()]
    if not drills:
        return CheckResult("availability", UNKNOWN, 0, [], {"drills": 0}, doc)
    servers = inp.events.where(F.col("server_name").isNotNull()).select("server_name").distinct().count()
    groups = sorted({META_GROUP} | {d["group"] for d in drills if d["group"]})
    elections = (inp.events.where((F.col("event") == "raft_became_leader") & F.col("group").isin(groups))
                 .select("group", "server_name", "term", "ns").orderBy("ns").collect())
    acks = {}
    if inp.ledger is not None:
        # the first acknowledgement of a publish sent once the fault was in place, per drill
        starts = inp.drills.select(F.col("name").alias("drill"),
                                   F.coalesce("applied_ns", "fault_ns").alias("applied_ns"))
        acks = {r["drill"]: r["first_ack"] for r in
                inp.ledger.join(starts, "drill")
                .where(F.col("acked_ns").isNotNull() & (F.col("sent_ns") >= F.col("applied_ns")))
                .groupBy("drill").agg(F.min("acked_ns").alias("first_ack")).collect()}
    rows, bad = [], []
    for d in sorted(drills, key=lambda d: d["fault_ns"]):
        faulted = set(d["servers"] or [])
        keeps_quorum = len(faulted) < _quorum(servers)
        repair = d["repair_ns"] or d["healed_ns"] or 2**62
        row = {"drill": d["name"], "servers": sorted(faulted), "keeps_quorum": keeps_quorum,
               "groups": {}}
        for group in [META_GROUP] + ([d["group"]] if d["group"] else []):
            mine = [e for e in elections if e["group"] == group]
            before = [e for e in mine if e["ns"] <= d["fault_ns"]]
            leader = before[-1]["server_name"] if before else None
            if leader is not None and leader not in faulted:
                new, new_ns = leader, d["fault_ns"]
            else:
                after = [e for e in mine if e["ns"] > d["fault_ns"] and e["server_name"] not in faulted]
                new, new_ns = (after[0]["server_name"], after[0]["ns"]) if after else (None, None)
            row["groups"][group] = {
                "leader_at_fault": leader, "leader_after": new,
                "seconds_to_leader": None if new_ns is None else round((new_ns - d["fault_ns"]) / 1e9, 3),
                "leader_before_repair": new_ns is not None and new_ns < repair}
        first_ack = acks.get(d["name"])
        applied = d.get("applied_ns") or d["fault_ns"]
        row["seconds_to_write"] = None if first_ack is None else round((first_ack - applied) / 1e9, 3)
        row["write_before_repair"] = first_ack is not None and first_ack < repair
        row["leaderless_groups"] = sorted(g for g, v in row["groups"].items() if not v["leader_before_repair"])
        rows.append(row)
        if keeps_quorum and (row["leaderless_groups"] or not row["write_before_repair"]):
            bad.append({"drill": d["name"], "servers": sorted(faulted),
                        "leaderless_groups": row["leaderless_groups"],
                        "write_before_repair": row["write_before_repair"],
                        "fault": rfc3339_ns(d["fault_ns"]),
                        "repair": rfc3339_ns(d["repair_ns"]) if d["repair_ns"] else None})
    return CheckResult("availability", not bad, len(bad), bad[:limit],
                       {"servers": servers, "quorum": _quorum(servers), "faults": rows}, doc)


# --------------------------------------------------------------------------- replication


def check_replication(inp: Inputs, limit: int) -> CheckResult:
    doc = ("every replica's last state reported by its group's latest leader is current (unless "
           "its group was deleted or the peer removed); catch-up durations")
    ev = inp.events
    states = ev.where(F.col("event").isin("raft_replica_current", "raft_replica_lagging"))
    if states.limit(1).count() == 0:
        return CheckResult("replication", UNKNOWN, 0, [], {"reports": 0}, doc)
    # only the latest term's leader speaks for a group (an earlier leader's last word on a
    # peer that has since become leader itself would be stale)
    latest = states.groupBy("group").agg(F.max("term").alias("term"))
    w = Window.partitionBy("group", "peer").orderBy(F.col("ns").desc())
    last = (states.join(latest, ["group", "term"])
            .withColumn("rank", F.row_number().over(w)).where(F.col("rank") == 1)
            .select("group", "peer", "event", "lag", "offline", "ns", "ts",
                    F.col("server_name").alias("leader"), "term"))
    deleted = (ev.where((F.col("event") == "raft_group_closed") & F.col("deleted"))
               .select("group").distinct())
    removed = (ev.where(F.col("event") == "raft_peer_removed")
               .groupBy("group", "peer").agg(F.max("ns").alias("removed_ns")))
    bad = (last.where(F.col("event") == "raft_replica_lagging")
           .join(deleted, "group", "left_anti")
           .join(removed, ["group", "peer"], "left")
           .where(F.col("removed_ns").isNull() | (F.col("removed_ns") < F.col("ns")))
           .select("group", "peer", "leader", "term", "lag", "offline", F.col("ts").alias("since")))
    catchups = [r["behind_ns"] for r in ev.where((F.col("event") == "raft_replica_current")
                                                 & F.col("behind_ns").isNotNull())
                .select("behind_ns").collect()]
    details = {"replicas": last.count(), "catch_ups": len(catchups)}
    if catchups:
        secs = sorted(c / 1e9 for c in catchups)
        details.update(catch_up_median_s=round(statistics.median(secs), 3),
                       catch_up_max_s=round(secs[-1], 3))
    return _verdict("replication", doc, bad, limit, ["group", "peer"], details)


# --------------------------------------------------------------------------- stream catch-up

#: Seconds a server's log may go on after a stream_catchup_started with no successful
#: stream_catchup_finished before the catch-up counts as stuck.
CATCHUP_LIMIT_S = 120.0

_CATCHUP_EVENTS = ("stream_catchup_started", "stream_catchup_finished")


def check_stream_catchup(inp: Inputs, limit: int, limit_s: float = CATCHUP_LIMIT_S) -> CheckResult:
    """Pair each ``stream_catchup_started`` with what followed it on its server and group.

    A start is resolved by any later ``stream_catchup_finished`` with ok true there (failed
    attempts, each followed by a new start, may come between); a ``raft_group_closed`` there
    abandons it, and a restart of the server (``server_starting``) interrupts it: the new
    process starts a catch-up of its own when its store still lacks anything (reason
    "restart"), and emits nothing when it does not (jetraft.net.jetstream.catchup). Otherwise
    it is "unfinished" when the server's log ends at most ``limit_s`` seconds after it, and
    stuck (offending) when the log goes on longer. The server's log end is the last of its
    events; the raft_applied lines are read again only for the servers whose other events
    end within ``limit_s`` of an unresolved start.

    details: ``catchups`` (one row per start, or per finish with no start of its own: group,
    account, stream, server, reason, snapshot_index, started, finished, bytes_needed, bytes,
    chunks, duration_s, ok, sources, error, status — ok | failed | superseded | interrupted |
    unfinished | abandoned | stuck), their count, how many finished and how many failed, the
    median and maximum duration (seconds) of the finished ones, and ``damaged_stores``
    (``stream_store_damaged``: time, server, group, account, stream, file, offset, kind,
    detail)."""
    doc = (f"every stream_catchup_started is followed on its server and group by a "
           f"stream_catchup_finished with ok true (failed attempts may come between), unless the "
           f"server's log ends, the server restarts or the group closes first; one still "
           f"unfinished while its server's log goes on for more than {limit_s:g} s is stuck")
    ev = inp.events
    # one pass over the (few) events involved; what concerns no catch-up is dropped here
    wanted = [*_CATCHUP_EVENTS, "raft_group_closed", "server_starting", "stream_store_damaged"]
    cols = ["event", "ns", "ts", "server_name", "group", "account", "stream", "reason", "snapshot_index",
            "bytes_needed", "ok", "bytes", "chunks", "duration_ns", "sources", "error", "file",
            "offset", "kind", "detail"]
    rows = [r.asDict() for r in ev.where(F.col("event").isin(*wanted)).select(*cols).collect()]
    damaged = sorted(({"ts": r["ts"], "server": r["server_name"], "group": r["group"], "account": r["account"],
                       "stream": r["stream"], "file": r["file"], "offset": r["offset"], "kind": r["kind"],
                       "detail": r["detail"]} for r in rows if r["event"] == "stream_store_damaged"),
                     key=lambda d: (d["ts"] or "", d["server"] or "", d["file"] or ""))
    keys = {(r["server_name"], r["group"]) for r in rows
            if r["event"] in _CATCHUP_EVENTS and r["group"] is not None}
    if not keys:
        return CheckResult("stream_catchup", UNKNOWN, 0, [],
                           {"count": 0, "catchups": [], "damaged_stores": damaged}, doc)
    order = {"stream_catchup_started": 0, "stream_catchup_finished": 1, "raft_group_closed": 2,
             "server_starting": 2}
    by_key: dict[tuple, list[dict]] = {k: [] for k in keys}
    for r in rows:
        key = (r["server_name"], r["group"])
        if r["event"] == "server_starting":     # a restart ends every catch-up of its server
            for k in keys:
                if k[0] == r["server_name"]:
                    by_key[k].append(r)
        elif r["event"] != "stream_store_damaged" and key in by_key:
            by_key[key].append(r)
    for events in by_key.values():
        events.sort(key=lambda r: (r["ns"] or 0, order[r["event"]]))
    catchups, open_starts = [], []       # open_starts: (row, start event) not yet resolved
    for events in by_key.values():
        _pair_catchups(events, catchups, open_starts)
    servers = sorted({st["server_name"] for _, st in open_starts})
    log_end = {r["server_name"]: r["end"] for r in
               ev.where(F.col("server_name").isin(servers)).groupBy("server_name")
               .agg(F.max("ns").alias("end")).collect()} if servers else {}
    limit_ns = int(limit_s * 1e9)
    near_end = sorted({st["server_name"] for _, st in open_starts
                       if (log_end.get(st["server_name"]) or 0) - st["ns"] <= limit_ns})
    if near_end:        # their raft_applied lines may go on longer (one more pass over the logs)
        for r in (inp.applied().where(F.col("server").isin(near_end)).groupBy("server")
                  .agg(F.max("ns").alias("end")).collect()):
            log_end[r["server"]] = max(log_end.get(r["server"]) or 0, r["end"] or 0)
    bad = []
    for row, st in open_starts:
        end = log_end.get(st["server_name"]) or st["ns"]
        stuck = end - st["ns"] > limit_ns
        if stuck and row["status"] in (None, "superseded"):
            row["status"] = "stuck"
        elif row["status"] is None:
            row["status"] = "unfinished"
        if stuck:
            bad.append({"problem": "catch-up never finished", "server": st["server_name"],
                        "group": st["group"], "stream": st["stream"], "reason": st["reason"],
                        "snapshot_index": st["snapshot_index"], "started": st["ts"],
                        "log_ends_s_after": round((end - st["ns"]) / 1e9, 3),
                        "failed_attempts": row["failed_after"], "last_error": row["last_error"]})
    for row in catchups:
        for k in ("failed_after", "last_error"):
            row.pop(k, None)
    durations = sorted(c["duration_s"] for c in catchups if c["duration_s"] is not None)
    details: dict[str, Any] = {
        "limit_s": limit_s, "count": len(catchups),
        "finished": sum(1 for c in catchups if c["ok"] is not None),
        "failed": sum(1 for c in catchups if c["ok"] is False),
        "unfinished": sum(1 for c in catchups if c["status"] == "unfinished"),
        "duration_median_s": round(statistics.median(durations), 3) if durations else None,
        "duration_max_s": durations[-1] if durations else None,
        "catchups": sorted(catchups, key=lambda c: (c["started"] or c["finished"] or "", c["server"])),
        "damaged_stores": damaged}
    bad.sort(key=lambda b: (b["started"], b["server"]))
    return CheckResult("stream_catchup", not bad, len(bad), bad[:limit], details, doc)


def _pair_catchups(events: list[dict], catchups: list[dict], open_starts: list) -> None:
    """One server's catch-up events of one group, in time order, into ``catchups`` rows; the
    starts no successful finish follows (nor a group close) go to ``open_starts``."""
    pending: list[tuple[dict, dict]] = []       # starts not yet resolved by an ok finish
    current = None                              # the row of the latest start, before its finish
    for e in events:
        if e["event"] == "stream_catchup_started":
            if current is not None:
                current["status"] = "superseded"    # a new start (a retry, a restart) replaced it
            current = _catchup_row(e, None)
            catchups.append(current)
            pending.append((current, e))
        elif e["event"] == "stream_catchup_finished":
            if current is None:                 # a finish with no start of its own: a retry's
                current = _catchup_row(None, e)     # second try, or a start before the log began
                catchups.append(current)
            else:
                _finish(current, e)
            current["status"] = "ok" if e["ok"] else "failed"
            current = None
            if e["ok"]:
                for row, _ in pending:
                    if row["status"] is None:
                        row["status"] = "superseded"
                pending = []
            else:
                for row, _ in pending:
                    row["failed_after"] += 1
                    row["last_error"] = e["error"]
        else:           # raft_group_closed: the replica stopped; server_starting: the process
            for row, _ in pending:
                if row["status"] in (None, "superseded"):
                    row["status"] = "abandoned" if e["event"] == "raft_group_closed" else "interrupted"
            pending, current = [], None
    open_starts.extend(pending)


def _catchup_row(start: dict | None, finish: dict | None) -> dict:
    first = start or finish
    row = {"group": first["group"], "account": first["account"], "stream": first["stream"],
           "server": first["server_name"], "reason": start["reason"] if start else None,
           "snapshot_index": first["snapshot_index"], "started": start["ts"] if start else None,
           "finished": None, "bytes_needed": start["bytes_needed"] if start else None, "bytes": None,
           "chunks": None, "duration_s": None, "ok": None, "sources": None, "error": None,
           "status": None, "failed_after": 0, "last_error": None}
    if finish is not None:
        _finish(row, finish)
    return row


def _finish(row: dict, e: dict) -> None:
    duration = e["duration_ns"]
    row.update(finished=e["ts"], bytes=e["bytes"], chunks=e["chunks"], ok=e["ok"],
               sources=sorted(e["sources"]) if e["sources"] is not None else None, error=e["error"],
               duration_s=None if duration is None else round(duration / 1e9, 3))


# --------------------------------------------------------------------------- names


#: Events that name the stream (and consumer) of a RAFT group, the meta group's own
#: placement first (the others only when its log is missing).
_ASSIGNED = ("jetstream_stream_assigned", "jetstream_consumer_assigned")


def group_names(inp: Inputs) -> dict[str, dict[str, Any]]:
    """What each RAFT group is, for people: group -> {account, stream, consumer, drill}.

    The stream (and consumer) come from the events that name both a group and a stream:
    ``jetstream_stream_assigned`` / ``jetstream_consumer_assigned`` (the meta group's
    placement) first, else any other (``stream_catchup_*``, ``jetstream_peer_removed``,
    ``stream_store_damaged``...). The drill comes from drills.json: the drill of that group
    or stream, or of the stream whose name begins the group's stream name and ``_`` (a
    drill's probe streams, ``<STREAM>_META1``), the longest such. The meta group is
    ``{"stream": None, "meta": True}``. A group no event names is absent."""
    rows = (inp.events.where(F.col("group").isNotNull() & F.col("stream").isNotNull())
            .select("group", "event", "account", "stream", "consumer").distinct().collect())
    drills = ([d.asDict() for d in inp.drills.select("name", "stream", "group").collect()]
              if inp.drills is not None else [])
    out: dict[str, dict[str, Any]] = {META_GROUP: {"account": None, "stream": None, "consumer": None,
                                                   "drill": None, "meta": True}}
    for r in sorted(rows, key=lambda r: (r["event"] not in _ASSIGNED, r["event"], r["stream"])):
        if r["group"] in out:
            continue
        out[r["group"]] = {"account": r["account"], "stream": r["stream"],
                           "consumer": r["consumer"] if r["event"] == "jetstream_consumer_assigned" else None,
                           "drill": None}
    for d in drills:        # a drill's group, even if no event named its stream
        if d["group"] and d["group"] not in out:
            out[d["group"]] = {"account": None, "stream": d["stream"], "consumer": None, "drill": None}
    for group, names in out.items():
        if group != META_GROUP:
            names["drill"] = drill_of(group, names["stream"], drills)
    return out


def drill_of(group: str, stream: str | None, drills: list[dict[str, Any]]) -> str | None:
    """The drill (its name) a group belongs to, given drills.json's entries (name, stream,
    group): see :func:`group_names`."""
    for d in drills:
        if d["group"] and d["group"] == group:
            return d["name"]
    if not stream:
        return None
    best = None
    for d in drills:
        ds = d["stream"]
        if ds and (stream == ds or stream.startswith(ds + "_")) and (best is None or len(ds) > len(best[0])):
            best = (ds, d["name"])
    return best[1] if best else None


# --------------------------------------------------------------------------- ledger


def check_ledger(inp: Inputs, limit: int) -> CheckResult:
    doc = ("every acknowledged publish is in the drained stream exactly once, at its "
           "acknowledged sequence; nothing in the stream was never attempted")
    if inp.ledger is None or inp.drain is None:
        return CheckResult("ledger", UNKNOWN, 0, [], {"attempted": 0}, doc)
    stored = inp.drain.groupBy("drill", "msg_id").agg(
        F.count(F.lit(1)).alias("copies"), F.sort_array(F.collect_list("stream_seq")).alias("stored_seqs"))
    attempts = inp.ledger.select("drill", "msg_id", "stream_seq", F.col("acked_ns").isNotNull().alias("acked"),
                                 F.lit(True).alias("attempted"))
    # one full outer join: every attempt beside its copies in the stream
    both = attempts.join(stored, ["drill", "msg_id"], "full_outer")
    problem = (F.when(F.col("attempted").isNull(), "unexpected")
               .when(F.col("copies") > 1, "duplicate")
               .when(F.col("acked") & F.col("copies").isNull(), "lost")
               .when(F.col("acked") & (F.col("stored_seqs")[0] != F.col("stream_seq")), "misplaced"))
    bad = (both.select("drill", "msg_id", problem.alias("problem"), F.col("stream_seq").alias("acked_seq"),
                       "stored_seqs").where(F.col("problem").isNotNull())
           .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        by_problem = {r["problem"]: r["n"] for r in
                      bad.groupBy("problem").agg(F.count(F.lit(1)).alias("n")).collect()}
        count = sum(by_problem.values())
        examples = _rows(bad.orderBy("problem", "drill", "msg_id"), limit) if count else []
    finally:
        bad.unpersist()
    per_drill = {r["drill"]: {"attempted": r["attempted"], "acknowledged": r["acknowledged"]}
                 for r in inp.ledger.groupBy("drill").agg(
                     F.count(F.lit(1)).alias("attempted"),
                     F.count("acked_ns").alias("acknowledged")).collect()}
    details = {"drills": dict(sorted(per_drill.items())),
               **{k: by_problem.get(k, 0) for k in ("lost", "duplicate", "unexpected", "misplaced")}}
    return CheckResult("ledger", count == 0, count, examples, details, doc)


def run_all(inp: Inputs, limit: int = 10, skew_ns: int = 0, progress=lambda name: None,
            catchup_limit_s: float = CATCHUP_LIMIT_S, completed=lambda result: None,
            search_steps: int = linearizable.MAX_STEPS,
            search_seconds: float = linearizable.MAX_SECONDS) -> list[CheckResult]:
    """Every check, in the order of the module docstring (the campaign's four only when the
    run has histories); ``progress(name)`` before each, ``completed(result)`` (a
    :class:`CheckResult`) after each. ``search_steps`` / ``search_seconds``: the bound of
    the linearizability search per key."""
    kv: list[CheckResult] = []

    def kv_checks() -> list[CheckResult]:        # linearizable and stale_reads: one pass
        if not kv:
            kv.extend(kvcheck.check_kv(inp.history, limit, search_steps, search_seconds))
        return kv
    campaign = [
        ("queue", lambda: queueset.check_queue(inp.history, limit)),
        ("node_divergence", lambda: queueset.check_node_divergence(inp.history, limit)),
        ("linearizable", lambda: kv_checks()[0]),
        ("stale_reads", lambda: kv_checks()[1]),
    ] if inp.history is not None else []
    if inp.history_only:
        return _run_steps([(name, lambda name=name: _without_events(name)) for name in EVENT_CHECKS]
                          + campaign, progress, completed)
    steps = [
        ("input", lambda: check_input(inp, limit)),
        ("topology", lambda: check_topology(inp, limit)),
        ("election_safety", lambda: check_election_safety(inp, limit)),
        ("term_monotonic", lambda: check_term_monotonic(inp, limit)),
        ("log_matching", lambda: check_log_matching(inp, limit)),
        ("leader_completeness", lambda: check_leader_completeness(inp, limit, skew_ns)),
        ("availability", lambda: check_availability(inp, limit)),
        ("replication", lambda: check_replication(inp, limit)),
        ("stream_catchup", lambda: check_stream_catchup(inp, limit, catchup_limit_s)),
        ("ledger", lambda: check_ledger(inp, limit)),
        ("ttl", lambda: feature_checks.check_ttl(inp, limit, skew_ns)),
        ("counter", lambda: feature_checks.check_counter(inp, limit)),
        *campaign,
    ]
    return _run_steps(steps, progress, completed)


#: The checks of a run with event logs (the RAFT checks, then the drills' ledgers), in report
#: order.
EVENT_CHECKS = ("input", "topology", "election_safety", "term_monotonic", "log_matching",
                "leader_completeness", "availability", "replication", "stream_catchup", "ledger",
                *feature_checks.FEATURE_CHECKS)
#: Why those checks are unknown on a run without event logs.
NO_EVENT_LOG = ("the run holds no event log (its servers write none: nats-server), so only "
                "the histories are checked")


def _without_events(name: str) -> CheckResult:
    return CheckResult(name, "unknown", details={"reason": NO_EVENT_LOG})


def _run_steps(steps, progress, completed) -> list[CheckResult]:
    out = []
    for name, fn in steps:
        progress(name)
        started = time.monotonic()
        result = fn()
        result.seconds = round(time.monotonic() - started, 2)
        out.append(result)
        completed(result)
    return out
