"""Reading a run's artifacts into Spark DataFrames, with the explicit schemas of
:mod:`jetraft.validation.schema`.

A run directory (``lab/artifacts/<run>``, written by ``python -m lab run``) holds::

    logs/<host>/events.jsonl     each server's event log (playbooks/collect_logs.yml)
    logs/<host>/events.*.jsonl   the event log of a machine the host replaced (lab/day_two.py)
    topology.json                the inventory: cluster name, server names and zones
    drills.json                  each drill's summary and fault timeline (lab/drills.py)
    <drill>.ledger.jsonl         every publish attempt of a drill
    <drill>.stream.jsonl         the drill's stream as read back after healing
    <drill>.ttl.jsonl            a zone drill's publishes with a Nats-TTL and the gets after them
    <drill>.counter.jsonl        a zone drill's increments of a counter and its final value
    history/<workload>.jsonl     a fault campaign's histories (jetraft.validation.history)

The run directory may be a local path, a glob, or any URI Spark reads (``hdfs://``,
``s3a://`` with the usual Spark configuration). A path ending in ``.jsonl`` is read as
event logs only (a glob of them, say).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jetraft.events import SCHEMA_VERSION
from jetraft.validation import schema, survey
from jetraft.validation.history import read as read_history


class InputError(Exception):
    """The run directory holds no event log (or cannot be read)."""


#: How jetraft.events writes the event name of an applied batch (compact JSON): a line
#: without it is read in the pass over every other event.
APPLIED_MARK = '"event":"raft_applied"'
#: ``index`` of the per-index rows that count damaged raft_applied lines (not JSON, or of
#: an unknown schema version) instead of entries.
CORRUPT_APPLIED, UNKNOWN_VERSION_APPLIED = -1, -2


@dataclass
class Inputs:
    """The DataFrames of one run. ``events`` (every event but ``raft_applied``, and every
    line that is not JSON, in ``_corrupt_record``) and ``per_index`` always exist; the
    others are None when the run has no such file (a deploy without drills has no
    ledgers, nor ``ttl`` and ``counter``, the zone drills' TTL and counter ledgers; a run
    that is not a fault campaign's has no ``history``). ``applied`` re-reads
    the event logs: only for the few examples of a violation."""

    path: str
    events_path: str
    events: DataFrame | None
    per_index: DataFrame | None
    ledger: DataFrame | None
    drain: DataFrame | None
    drills: DataFrame | None
    topology: DataFrame | None
    history: DataFrame | None = None
    ttl: DataFrame | None = None
    counter: DataFrame | None = None

    @property
    def history_only(self) -> bool:
        """No event log, only a fault campaign's histories (servers that write no event log,
        such as nats-server): ``events`` and ``per_index`` are None."""
        return self.events is None

    def unpersist(self) -> None:
        if self.events is not None:
            self.events.unpersist()
            self.per_index.unpersist()
        if self.history is not None:
            self.history.unpersist()

    def applied(self) -> DataFrame:
        """Every applied entry: server, group, index, term, hash, ns (re-read)."""
        return _applied_rows(self.events_path, self.events.sparkSession, keep_server=True)


def _read(spark: SparkSession, struct, path: str, *, multiline: bool = False) -> DataFrame | None:
    try:
        df = spark.read.schema(struct).option("mode", "PERMISSIVE").option("multiLine", multiline).json(path)
    except AnalysisException as exc:         # no file matches: that input is absent
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            return None
        raise
    return df


def event_ns(ts):
    """RFC 3339 UTC with nine fraction digits (jetraft.events.rfc3339_ns) -> ns since the
    epoch (long): microseconds from Spark's timestamp cast, the last three digits added."""
    return (F.unix_micros(ts.cast("timestamp")) * F.lit(1000)
            + F.coalesce(F.regexp_extract(ts, r"\.\d{6}(\d{3})Z$", 1).cast("long"), F.lit(0)))


def _host():
    return F.regexp_extract(F.input_file_name(), r"([^/]+)/[^/]+$", 1)


def _applied_rows(path: str, spark: SparkSession, *, keep_server: bool = False) -> DataFrame:
    """The raft_applied lines as one row per entry: group, index, packed (term << 32 | hash),
    ns (and server, term, hash with ``keep_server``). Damaged raft_applied lines give one
    row each with index CORRUPT_APPLIED or UNKNOWN_VERSION_APPLIED."""
    df = spark.read.schema(schema.APPLIED).option("mode", "PERMISSIVE").json(path)
    corrupt = F.col(schema.CORRUPT)
    df = df.where((F.col("event") == "raft_applied") | corrupt.contains(APPLIED_MARK))
    cols = [F.col("group"), F.col("first_index"), event_ns(F.col("ts")).alias("ns"), F.col("terms"),
            corrupt.alias("bad"), F.col("v")]
    if keep_server:
        cols.append(F.col("server_name").alias("server"))
    # Two selects: in one, Spark computes ns after the explode, once per entry instead of
    # once per line (about 2.5 times the work of the timestamp parse).
    lines = df.select(*cols, F.col("hashes"))
    rows = lines.select(*[c for c in lines.columns if c != "hashes"],
                        F.posexplode_outer("hashes").alias("pos", "hash"))
    damaged = F.col("bad").isNotNull() | F.col("v").isNull() | (F.col("v") != SCHEMA_VERSION)
    index = (F.when(F.col("bad").isNotNull(), F.lit(CORRUPT_APPLIED))
             .when(damaged, F.lit(UNKNOWN_VERSION_APPLIED))
             .otherwise(F.col("first_index") + F.col("pos")))
    term = F.element_at("terms", F.col("pos") + 1)
    out = [F.when(damaged, F.lit(None)).otherwise(F.col("group")).alias("group"), index.alias("index"),
           F.when(damaged, F.lit(None)).otherwise(F.shiftleft(term, 32) + F.col("hash")).alias("packed"),
           F.col("ns")]
    if keep_server:
        out += [F.col("server"), term.alias("term"), F.col("hash")]
    return rows.select(*out).where(F.col("index").isNotNull())


@contextmanager
def _sql_conf(spark: SparkSession, key: str, value: str):
    """Set a Spark SQL option for the queries planned and run inside the block, then put
    back what was there."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def read(spark: SparkSession, path: str) -> Inputs:
    """Read the run at ``path`` in two passes over the event logs: the raft_applied lines
    (most of a log) reduced to one row per (group, index), and every other line parsed
    whole (a text filter picks them without parsing the rest). Both are kept (memory, then
    disk) for the checks. A fault campaign's run without any event log (its servers write
    none: nats-server) is read for its histories alone (:attr:`Inputs.history_only`).
    Raises InputError when there is neither an event log nor a history."""
    base = path.rstrip("/")
    events_path = survey.events_glob(path)
    try:
        lines = spark.read.text(events_path)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            history = None if base.endswith(".jsonl") else read_history(spark, base)
            if history is not None:         # servers that write no event log: nats-server
                return Inputs(path, events_path, None, None, None, None, None, None, history=history)
            raise InputError(f"no event log at {events_path} ({survey.COLLECT_HINT})") from None
        raise
    parsed = F.from_json(F.col("value"), schema.EVENT, {"mode": "PERMISSIVE"})
    events = (lines.where(~F.col("value").contains(APPLIED_MARK))
              .select(F.col("value").alias("line"), parsed.alias("e"), _host().alias("host"),
                      F.input_file_name().alias("source"))
              .select("line", "host", "source", "e.*")
              .withColumn("ns", event_ns(F.col("ts")))
              .where(F.col("event").isNull() | (F.col("event") != "raft_applied") | F.col(schema.CORRUPT).isNotNull())
              .persist(StorageLevel.MEMORY_AND_DISK))
    # Each (group, index) is in a server's log once per process lifetime (a restart applies
    # only the entries past its snapshot again), so a partial aggregation before the
    # shuffle reduces next to nothing: it is bypassed for this aggregation alone.
    with _sql_conf(spark, "spark.sql.execution.bypassPartialAggregation", "true"):
        per_index = (_applied_rows(events_path, spark).groupBy("group", "index")
                     .agg(F.min("packed").alias("packed_min"), F.max("packed").alias("packed_max"),
                          F.min("ns").alias("ns"), F.count(F.lit(1)).alias("copies"))
                     .persist(StorageLevel.MEMORY_AND_DISK))
        per_index.count()   # both passes now, so that the checks' times are their own
    events.count()
    if base.endswith(".jsonl"):
        return Inputs(path, events_path, events, per_index, None, None, None, None)
    return Inputs(
        path, events_path, events, per_index,
        ledger=_read(spark, schema.LEDGER, f"{base}/*.ledger.jsonl"),
        drain=_read(spark, schema.DRAIN, f"{base}/*.stream.jsonl"),
        drills=_read(spark, schema.DRILL, f"{base}/drills.json", multiline=True),
        topology=_read(spark, schema.TOPOLOGY, f"{base}/topology.json"),
        history=read_history(spark, base),
        ttl=_read(spark, schema.TTL_LEDGER, f"{base}/*.ttl.jsonl"),
        counter=_read(spark, schema.COUNTER_LEDGER, f"{base}/*.counter.jsonl"),
    )
