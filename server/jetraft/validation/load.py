"""Reading a run's artifacts into Spark DataFrames, with the explicit schemas of
:mod:`jetraft.validation.schema`.

A run directory (``lab/artifacts/<run>``, written by ``python -m lab run``) holds::

    logs/<host>/events.jsonl     each server's event log (playbooks/collect_logs.yml)
    topology.json                the inventory: cluster name, server names and zones
    drills.json                  each drill's summary and fault timeline (lab/drills.py)
    <drill>.ledger.jsonl         every publish attempt of a drill
    <drill>.stream.jsonl         the drill's stream as read back after healing

The run directory may be a local path, a glob, or any URI Spark reads (``hdfs://``,
``s3a://`` with the usual Spark configuration). A path ending in ``.jsonl`` is read as
event logs only (a glob of them, say).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jetraft.validation import schema


class InputError(Exception):
    """The run directory holds no event log (or cannot be read)."""


@dataclass
class Inputs:
    """The DataFrames of one run. ``events`` always exists; the others are None when the
    run has no such file (a deploy without drills has no ledgers)."""

    path: str
    events: DataFrame
    corrupt: DataFrame
    raw: DataFrame
    ledger: DataFrame | None
    drain: DataFrame | None
    drills: DataFrame | None
    topology: DataFrame | None

    def unpersist(self) -> None:
        self.raw.unpersist()


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
    epoch (long). Needs the session time zone to be UTC (the job sets it)."""
    seconds = F.unix_timestamp(F.substring(ts, 1, 19), "yyyy-MM-dd'T'HH:mm:ss")
    fraction = F.rpad(F.regexp_extract(ts, r"\.(\d{1,9})Z$", 1), 9, "0")
    return seconds * F.lit(1_000_000_000) + F.coalesce(fraction.cast("long"), F.lit(0))


def read(spark: SparkSession, path: str) -> Inputs:
    """Read the run at ``path``. The event logs are parsed once and kept (memory, then
    disk) for the checks. Raises InputError when no event log is found."""
    base = path.rstrip("/")
    events_path = base if base.endswith(".jsonl") else f"{base}/logs/*/events.jsonl"
    raw = _read(spark, schema.EVENT, events_path)
    if raw is None:
        raise InputError(f"no event log at {events_path} (collect the logs first: "
                         f"ansible-playbook playbooks/collect_logs.yml)")
    raw = (raw.withColumn("host", F.regexp_extract(F.input_file_name(), r"([^/]+)/[^/]+$", 1))
           .withColumn("ns", event_ns(F.col("ts")))
           .persist(StorageLevel.MEMORY_AND_DISK))
    corrupt = raw.where(F.col(schema.CORRUPT).isNotNull()).select("host", schema.CORRUPT)
    events = raw.where(F.col(schema.CORRUPT).isNull()).drop(schema.CORRUPT)
    if base.endswith(".jsonl"):
        return Inputs(path, events, corrupt, raw, None, None, None, None)
    return Inputs(
        path, events, corrupt, raw,
        ledger=_read(spark, schema.LEDGER, f"{base}/*.ledger.jsonl"),
        drain=_read(spark, schema.DRAIN, f"{base}/*.stream.jsonl"),
        drills=_read(spark, schema.DRILL, f"{base}/drills.json", multiline=True),
        topology=_read(spark, schema.TOPOLOGY, f"{base}/topology.json"),
    )
