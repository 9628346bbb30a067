"""The fault campaign's queue checks, on Spark DataFrames: Jepsen's set checker over
``history/queue.jsonl`` (:mod:`jetraft.validation.history`), and each replica's own copy
against the others and the drain.

``queue`` (Jepsen's queue / set checker, as in jepsen-io/nats ``jepsen.nats.queue``), per
published value (values are unique), one join of the publishes with the reads (``consume``
and ``drain`` lines) on the value:

- ``attempted`` (a publish invoked), ``acknowledged`` (its completion ``ok``);
- ``lost``: acknowledged, never read by a consumer nor the drain; split into ``prefix``,
  ``middle`` and ``postfix`` by its place among the attempted values in invocation order
  (``time_ns``, then value): before the first value that was read, after the last, or
  between (Jepsen's lost-prefix / lost-middle / lost-postfix; Jepsen draws them per writing
  process, and a client here takes a new process number after every ``info``, so the
  epochs are drawn over all values: a window lost mid-run is middle, not the postfix of a
  process that happened to time out). With nothing read, every lost value is postfix, as
  in Jepsen. A lost middle is loss beyond doubt; a lost postfix may be a reader that
  stopped early;
- ``unexpected``: read but never attempted (a payload that is not a value of the
  workload counts, as value null);
- ``duplicated``: stored at more than one stream sequence in the drain;
- ``misplaced``: acknowledged at one stream sequence, read at another (a value
  duplicated in the drain is counted as duplicated only);
- ``recovered``: a publish that failed or whose outcome is unknown (``info``, or never
  completed), read nonetheless (Jepsen's recovered; not offending). ``recovered_after_fail``
  counts those whose publish was answered with an error.

Offending: lost, unexpected, duplicated, misplaced. "unknown" when the history holds no
publish.

``node_divergence`` (Jepsen's NATS analysis, 2025: divergence, or split-brain), from the
``read-node`` lines (each replica's own copy, read on its server at the end):

- ``lost_on_node``: an acknowledged value absent from a node's copy, per node, split into
  prefix / middle / postfix as above among the values that node holds;
- ``divergent``: a stream sequence that some node lacks while another holds it, that two
  nodes (or one node twice) hold with different values, or where a node's value is not
  the drain's (or the drain lacks it).

Offending: every value lost on a node and every divergent sequence (a value lost on one
node is also a sequence that node lacks: both are counted). "unknown" with no read-node
line.
"""

from __future__ import annotations

from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jetraft.validation.history import CORRUPT
from jetraft.validation.result import UNKNOWN, CheckResult

#: The order examples are listed in.
PROBLEMS = ("lost", "misplaced", "duplicated", "unexpected")
EPOCHS = ("prefix", "middle", "postfix")


def _queue(history: DataFrame) -> DataFrame:
    return history.where(F.col("workload") == "queue")


def _is(kind: str):
    return F.col("type") == kind


def publishes(history: DataFrame) -> DataFrame:
    """One row per published value: attempts (invocations), order_ns (its invocation's
    time_ns, else its first line's), invoke_wall_ns, process, node, outcome (``ok``,
    ``fail``, ``info``: info or never completed), ack_seq, ack_wall_ns, error."""
    pub = _queue(history).where(F.col("f") == "publish")
    invoke = _is("invoke")
    return (pub.groupBy("value").agg(
        F.count(F.when(invoke, 1)).alias("attempts"),
        F.coalesce(F.min(F.when(invoke, F.col("time_ns"))), F.min("time_ns")).alias("order_ns"),
        F.min(F.when(invoke, F.col("wall_ns"))).alias("invoke_wall_ns"),
        F.min(F.when(invoke, F.col("process"))).alias("process"),
        F.min(F.when(invoke, F.col("node"))).alias("node"),
        F.max(_is("ok").cast("int")).alias("ok"), F.max(_is("fail").cast("int")).alias("failed"),
        F.min(F.when(_is("ok"), F.col("revision"))).alias("ack_seq"),
        F.min(F.when(_is("ok"), F.col("wall_ns"))).alias("ack_wall_ns"),
        F.first(F.when(_is("fail") | _is("info"), F.col("error")), ignorenulls=True).alias("error"))
        .select("value", "attempts", "order_ns", "invoke_wall_ns", "process", "node",
                F.when(F.col("ok") == 1, "ok").when(F.col("failed") == 1, "fail").otherwise("info").alias("outcome"),
                "ack_seq", "ack_wall_ns", "error", F.lit(True).alias("attempted")))


def _reads(history: DataFrame) -> DataFrame:
    """One row per value read by a consumer or the drain: consumed and drained (lines),
    drain_seqs and read_seqs (the distinct stream sequences), read_wall_ns (the first)."""
    q = _queue(history).where(F.col("f").isin("consume", "drain"))
    drain = F.col("f") == "drain"
    return (q.groupBy("value").agg(
        F.count(F.when(F.col("f") == "consume", 1)).alias("consumed"),
        F.count(F.when(drain, 1)).alias("drained"),
        F.sort_array(F.collect_set(F.when(drain, F.col("revision")))).alias("drain_seqs"),
        F.sort_array(F.collect_set("revision")).alias("read_seqs"),
        F.min("wall_ns").alias("read_wall_ns"))
        .withColumn("was_read", F.lit(True)))


def _position():
    return F.struct(F.col("order_ns").cast("long").alias("order_ns"), F.col("value").cast("long").alias("value"))


def _epoch(first, last):
    """prefix / middle / postfix of a lost value, by its position against the first and
    last read ones (columns or literal structs; null: nothing read)."""
    pos = _position()
    return (F.when(first.isNull(), "postfix").when(pos < first, "prefix")
            .when(pos > last, "postfix").otherwise("middle"))


def _bounds(df: DataFrame, by: list[str] | None = None):
    """min and max of (order_ns, value) over ``df`` (per ``by``)."""
    aggs = [F.min(_position()).alias("first"), F.max(_position()).alias("last")]
    return df.groupBy(*(by or [])).agg(*aggs)


_POSITION = "struct<order_ns:bigint,value:bigint>"


def _lit_pos(row) -> Any:
    if row is None:
        return F.lit(None).cast(_POSITION)
    return F.struct(F.lit(row[0]).cast("long").alias("order_ns"), F.lit(row[1]).cast("long").alias("value"))


def unreadable(history: DataFrame) -> int:
    """Lines of the run's histories that are not JSON objects."""
    return history.where(F.col(CORRUPT).isNotNull()).count()


def _ranked(bad: DataFrame, by: str, order: list, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of ``bad``, taken in turn from each value of column ``by`` (so
    that every kind of problem is shown), each in ``order``."""
    w = Window.partitionBy(by).orderBy(*order)
    rows = [r.asDict(recursive=True) for r in
            bad.withColumn("_rank", F.row_number().over(w)).where(F.col("_rank") <= limit).collect()]
    groups: dict[Any, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["_rank"]):
        r.pop("_rank")
        groups.setdefault(r[by], []).append(r)
    keys = sorted(groups, key=lambda k: PROBLEMS.index(k) if k in PROBLEMS else len(PROBLEMS))
    out: list[dict] = []
    while len(out) < limit and any(groups[k] for k in keys):
        for k in keys:
            if groups[k] and len(out) < limit:
                out.append(groups[k].pop(0))
    return out


def check_queue(history: DataFrame, limit: int) -> CheckResult:
    """Jepsen's set checker on the queue workload (module docstring). Details: attempted,
    acknowledged, failed, unknown (publishes of unknown outcome), read (distinct values read
    by consumers or the drain), ok (attempted and read), consumed and drained (lines), lost
    ({prefix, middle, postfix}: counts), unexpected, duplicated, misplaced, recovered,
    recovered_after_fail (counts), unreadable_lines. Examples: problem, epoch (of a lost
    value), value, process, node, outcome, ack_seq, read_seqs, drain_seqs, invoke_wall_ns,
    ack_wall_ns, wall_ns (the ack's, else the first read's: ns since the epoch)."""
    doc = ("every acknowledged publish of history/queue.jsonl was read by a consumer or the "
           "drain, at the sequence acknowledged, once in the drained stream; nothing read was "
           "never published (Jepsen's lost, duplicated, unexpected)")
    pubs = publishes(history)
    both = pubs.join(_reads(history), "value", "full_outer")
    attempted, was_read = F.col("attempted").isNotNull(), F.col("was_read").isNotNull()
    acked = F.coalesce(F.col("outcome") == "ok", F.lit(False))
    both = both.select("*", attempted.alias("is_attempted"), was_read.alias("is_read"), acked.alias("is_acked"))
    both = both.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        reference = _bounds(both.where("is_attempted AND is_read")).first()
        first, last = _lit_pos(reference["first"]), _lit_pos(reference["last"])
        duplicated = F.size(F.coalesce("drain_seqs", F.array().cast("array<bigint>"))) > 1
        problems = F.array_compact(F.array(
            F.when(F.col("is_acked") & ~F.col("is_read"), F.lit("lost")),
            F.when(~F.col("is_attempted") & F.col("is_read"), F.lit("unexpected")),
            F.when(duplicated, F.lit("duplicated")),
            F.when(F.col("is_acked") & F.col("is_read") & ~duplicated
                   & F.exists("read_seqs", lambda s: s != F.col("ack_seq")), F.lit("misplaced"))))
        bad = (both.select("*", F.explode(problems).alias("problem"))
               .select("problem", F.when(F.col("problem") == "lost", _epoch(first, last)).alias("epoch"),
                       "value", "process", "node", "outcome", "ack_seq", "read_seqs", "drain_seqs",
                       "order_ns", "invoke_wall_ns", "ack_wall_ns",
                       F.coalesce("ack_wall_ns", "read_wall_ns", "invoke_wall_ns").alias("wall_ns"))
               .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            counts: dict[tuple, int] = {(r["problem"], r["epoch"]): r["n"] for r in
                                        bad.groupBy("problem", "epoch").agg(F.count(F.lit(1)).alias("n")).collect()}
            count = sum(counts.values())
            examples = _ranked(bad, "problem", ["order_ns", "value"], limit) if count else []
        finally:
            bad.unpersist()
        figures = both.agg(
            F.count(F.when(F.col("is_attempted"), 1)).alias("attempted"),
            F.count(F.when(F.col("is_acked"), 1)).alias("acknowledged"),
            F.count(F.when(F.col("outcome") == "fail", 1)).alias("failed"),
            F.count(F.when(F.col("outcome") == "info", 1)).alias("unknown"),
            F.count(F.when(F.col("is_read"), 1)).alias("read"),
            F.count(F.when(F.col("is_read") & F.col("is_attempted"), 1)).alias("ok"),
            F.coalesce(F.sum("consumed"), F.lit(0)).alias("consumed"),
            F.coalesce(F.sum("drained"), F.lit(0)).alias("drained"),
            F.count(F.when(F.col("is_attempted") & ~F.col("is_acked") & F.col("is_read"), 1)).alias("recovered"),
            F.count(F.when((F.col("outcome") == "fail") & F.col("is_read"), 1)).alias("recovered_after_fail"),
        ).first().asDict()
    finally:
        both.unpersist()
    for e in examples:
        e.pop("order_ns", None)
    details = {**{k: figures[k] for k in ("attempted", "acknowledged", "failed", "unknown", "read", "ok",
                                          "consumed", "drained")},
               "lost": {epoch: counts.get(("lost", epoch), 0) for epoch in EPOCHS},
               **{p: counts.get((p, None), 0) for p in ("unexpected", "duplicated", "misplaced")},
               "recovered": figures["recovered"], "recovered_after_fail": figures["recovered_after_fail"],
               "unreadable_lines": unreadable(history)}
    if not figures["attempted"]:
        return CheckResult("queue", UNKNOWN if not count else False, count, examples, details, doc)
    return CheckResult("queue", count == 0, count, examples, details, doc)


def check_node_divergence(history: DataFrame, limit: int) -> CheckResult:
    """Each node's own copy of each queue stream (``read-node`` lines; the stream is the
    lines' ``key``, one stream when it is null) against the acknowledged values of that
    stream, the other nodes and its drain (module docstring). Details: nodes (those whose
    copy of some stream was read), read_node_lines, lost_on_node ({node: count}),
    lost_on_node_epochs ({node: {prefix, middle, postfix}}), divergent (sequences),
    divergent_kinds ({kind: sequences}), drain (whether a drain was compared), streams
    ({stream: {nodes, lost_on_node, divergent}} when the lines name their streams).
    Examples: stream, problem (``lost on node`` or ``divergent``), node, value, epoch,
    ack_seq, process, ack_wall_ns, wall_ns; or seq, kinds, copies ({node: value}), drained
    (the drain's values at that sequence)."""
    doc = ("each replica's own copy of the queue's stream holds every acknowledged value, and "
           "the copies agree with each other and with the drain at every sequence")
    q = _queue(history)
    streams = sorted((r["key"] for r in q.where(F.col("f") == "read-node").select("key").distinct().collect()),
                     key=lambda k: (k is None, k or ""))
    if not streams:
        return CheckResult("node_divergence", UNKNOWN, 0, [],
                           {"nodes": [], "read_node_lines": 0, "lost_on_node": {}, "divergent": 0}, doc)
    parts = {stream: _stream_divergence(q.where(F.col("key").eqNullSafe(F.lit(stream))), limit)
             for stream in streams}
    nodes = sorted({n for p in parts.values() for n in p["nodes"]})
    by_node: dict[str, dict[str, int]] = {n: dict.fromkeys(EPOCHS, 0) for n in nodes}
    kind_counts: dict[str, int] = {}
    examples: list[dict[str, Any]] = []
    for stream, part in parts.items():
        for node, epochs in part["lost_on_node_epochs"].items():
            for epoch, n in epochs.items():
                by_node[node][epoch] += n
        for kind, n in part["divergent_kinds"].items():
            kind_counts[kind] = kind_counts.get(kind, 0) + n
        examples += [{"stream": stream, **e} for e in part["examples"]]
    count = sum(p["count"] for p in parts.values())
    details = {"nodes": nodes, "read_node_lines": sum(p["read_node_lines"] for p in parts.values()),
               "lost_on_node": {n: sum(v.values()) for n, v in by_node.items()},
               "lost_on_node_epochs": by_node, "divergent": sum(p["divergent"] for p in parts.values()),
               "divergent_kinds": dict(sorted(kind_counts.items())),
               "drain": any(p["drain"] for p in parts.values())}
    if streams != [None]:
        details["streams"] = {stream: {"nodes": p["nodes"],
                                       "lost_on_node": sum(sum(v.values()) for v in p["lost_on_node_epochs"].values()),
                                       "divergent": p["divergent"]} for stream, p in parts.items()}
    return CheckResult("node_divergence", count == 0, count, examples[:limit], details, doc)


def _stream_divergence(q: DataFrame, limit: int) -> dict[str, Any]:
    """:func:`check_node_divergence` of one stream's lines ``q``: nodes, read_node_lines,
    lost_on_node_epochs, divergent, divergent_kinds, drain, count and examples."""
    copies = q.where(F.col("f") == "read-node").select("node", "value", F.col("revision").alias("seq"))
    nodes = sorted(r["node"] for r in copies.select("node").distinct().collect() if r["node"] is not None)
    spark = q.sparkSession
    pubs = publishes(q).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        present = copies.select("node", "value").distinct()
        node_df = spark.createDataFrame([(n,) for n in nodes], "node string")
        refs = _bounds(present.join(pubs.select("value", "order_ns"), "value"), ["node"])
        acked = pubs.where(F.col("outcome") == "ok").select("value", "order_ns", "ack_seq", "process", "ack_wall_ns")
        lost = (acked.crossJoin(node_df)
                .join(present, ["node", "value"], "left_anti")
                .join(refs, "node", "left")
                .select(F.lit("lost on node").alias("problem"), "node", "value",
                        _epoch(F.col("first"), F.col("last")).alias("epoch"), "ack_seq", "process",
                        "ack_wall_ns", F.col("ack_wall_ns").alias("wall_ns"), "order_ns")
                .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            by_node: dict[str, dict[str, int]] = {n: dict.fromkeys(EPOCHS, 0) for n in nodes}
            for r in lost.groupBy("node", "epoch").agg(F.count(F.lit(1)).alias("n")).collect():
                by_node[r["node"]][r["epoch"]] = r["n"]
            lost_total = sum(sum(v.values()) for v in by_node.values())
            lost_examples = [r.asDict() for r in lost.orderBy("order_ns", "node").limit(limit).collect()] \
                if lost_total else []
        finally:
            lost.unpersist()
    finally:
        pubs.unpersist()
    drain = q.where(F.col("f") == "drain").select(F.col("revision").alias("seq"), "value")
    has_drain = drain.limit(1).count() > 0
    per_seq = copies.groupBy("seq").agg(F.collect_list(F.struct("node", "value")).alias("copies"))
    if has_drain:
        per_seq = per_seq.join(drain.groupBy("seq").agg(F.collect_list("value").alias("drained")), "seq",
                               "full_outer")
    else:
        per_seq = per_seq.withColumn("drained", F.lit(None).cast("array<long>"))
    held = F.coalesce(F.col("copies"), F.array().cast("array<struct<node:string,value:bigint>>"))
    node_names, node_values = F.transform(held, lambda c: c["node"]), F.transform(held, lambda c: c["value"])
    all_nodes = F.array(*[F.lit(n) for n in nodes])
    kinds = F.array_compact(F.array(
        F.when(F.size(F.array_except(all_nodes, node_names)) > 0,
               F.concat(F.lit("missing on "), F.array_join(F.array_except(all_nodes, node_names), ", "))),
        F.when((F.size(F.array_distinct(node_values)) > 1)
               | (F.size(node_names) > F.size(F.array_distinct(node_names))), F.lit("nodes hold different values")),
        F.when(F.lit(has_drain) & F.col("drained").isNull() & (F.size(held) > 0), F.lit("not in the drain")),
        F.when(F.col("drained").isNotNull()
               & ((F.size(F.array_distinct("drained")) > 1)
                  | F.exists(held, lambda c: ~F.coalesce(F.array_contains("drained", c["value"]), F.lit(False)))),
               F.lit("differs from the drain"))))
    divergent = (per_seq.select("seq", kinds.alias("kinds"), held.alias("copies"), "drained")
                 .where(F.size("kinds") > 0).persist(StorageLevel.MEMORY_AND_DISK))
    try:
        kind_counts: dict[str, int] = {}
        for r in divergent.select(F.explode("kinds").alias("kind")).groupBy("kind").count().collect():
            kind = "missing on a node" if r["kind"].startswith("missing on ") else r["kind"]
            kind_counts[kind] = kind_counts.get(kind, 0) + r["count"]
        divergent_total = divergent.count()
        div_examples = [_divergent_example(r.asDict(recursive=True))
                        for r in divergent.orderBy("seq").limit(limit).collect()] if divergent_total else []
    finally:
        divergent.unpersist()
    read_lines = copies.count()
    half = max(1, limit // 2)
    examples = (lost_examples[:half if div_examples else limit] + div_examples)[:limit]
    if len(examples) < limit:
        examples += lost_examples[half:half + limit - len(examples)] if div_examples else []
    for e in examples:
        e.pop("order_ns", None)
    return {"nodes": nodes, "read_node_lines": read_lines, "lost_on_node_epochs": by_node,
            "divergent": divergent_total, "divergent_kinds": dict(sorted(kind_counts.items())),
            "drain": has_drain, "count": lost_total + divergent_total, "examples": examples}




def _divergent_example(r: dict[str, Any]) -> dict[str, Any]:
    held: dict[str, Any] = {}
    for c in r["copies"] or []:
        node, value = c["node"], c["value"]
        if node in held:
            held[node] = (held[node] if isinstance(held[node], list) else [held[node]]) + [value]
        else:
            held[node] = value
    return {"problem": "divergent", "seq": r["seq"], "kinds": r["kinds"], "copies": dict(sorted(held.items())),
            "drained": r["drained"]}
