"""The checks of the zone drills' TTL and counter workloads (lab/features.py), over their
ledgers ``<drill>.ttl.jsonl`` and ``<drill>.counter.jsonl`` (read with
:data:`jetraft.validation.schema.TTL_LEDGER` and :data:`~jetraft.validation.schema.COUNTER_LEDGER`).
Each returns a :class:`~jetraft.validation.result.CheckResult`, as the checks of
:mod:`jetraft.validation.checks` do.

- ``ttl`` — no message published with a ``Nats-TTL`` was seen readable more than
  :data:`TTL_GRACE_S` (1 s) after it expired. A message expires at its stored time (the
  timestamp the stream gave it, as the first get that found it returned it; its
  acknowledgement time when no get found it) plus its TTL: that is when the stream's leader
  removes it (nats-server's expiry, ADR-43, which jetraft follows). The evidence is a get
  that found the message although it was *sent* (the controller's clock) more than 1 s, plus
  the hosts' clock skew allowance (``--clock-skew-ms``), after the expiry: the message was
  then served at least that late. A get sent earlier, or one left unanswered (a timeout, no
  leader), proves nothing. Informational figures: how long after its expiry each message was
  first seen gone, messages never seen gone (every get after the expiry unanswered), and
  messages seen gone more than 1 s *before* their expiry.
- ``counter`` — each drill's counter, read back once the drill healed, holds the sum of the
  acknowledged increments. Attempts are grouped by ``Nats-Msg-Id``: the stream keeps one
  increment per id within its duplicate window, so an id with an acknowledged attempt (a
  retry answered ``duplicate`` included) counts its increment once, an id whose attempts
  were all refused counts nothing, and an id with an attempt of unknown outcome (a timeout,
  a lost connection) and none acknowledged may have counted or not. The final value must lie
  in [acknowledged sum + the unknown ids' negative increments, acknowledged sum + their
  positive ones] (one value, the acknowledged sum, when no outcome is unknown).
"""

from __future__ import annotations

import statistics
from typing import Any

from pyspark.sql import functions as F

from jetraft.validation.load import Inputs
from jetraft.validation.result import UNKNOWN, CheckResult

#: Seconds a TTL'd message may still be served after its expiry.
TTL_GRACE_S = 1.0
#: The checks of this module, in report order.
FEATURE_CHECKS = ("ttl", "counter")


def _s(ns: int | None) -> float | None:
    """Nanoseconds as seconds (3 decimals); None stays None."""
    return None if ns is None else round(ns / 1e9, 3)


# --------------------------------------------------------------------------- ttl


def check_ttl(inp: Inputs, limit: int, skew_ns: int = 0) -> CheckResult:
    """``ttl`` (module docstring). Offending: one example per message seen readable too
    late, naming its drill, stream, message id and sequence, ``ttl_s`` (seconds),
    ``acked_ns``, ``stored_ns`` and ``expires_ns`` (ns since the epoch), ``last_seen_ns``
    (the latest get that found it), ``seen_s_after_expiry`` (seconds from the expiry to
    that get) and ``late_gets`` (gets that found it past the grace). Details: the grace and
    skew (seconds), and ``per_drill``: published, acknowledged, gets answered, seen gone,
    never seen gone, gone early, seconds from expiry until first seen gone (median, max)."""
    doc = (f"no message published with a Nats-TTL was seen readable more than {TTL_GRACE_S:g} s "
           f"after it expired (its stored time plus its TTL)")
    if inp.ttl is None:
        return CheckResult("ttl", UNKNOWN, 0, [], {"messages": 0}, doc)
    grace = int(TTL_GRACE_S * 1e9) + skew_ns
    keys = ["drill", "stream", "msg_id", "stream_seq", "ttl_ns", "acked_ns", "stored_ns", "expires_ns"]
    acked = (inp.ttl.where(F.col("acked_ns").isNotNull() & F.col("stream_seq").isNotNull()
                           & F.col("ttl_ns").isNotNull())
             .withColumn("expires_ns", F.coalesce("stored_ns", "acked_ns") + F.col("ttl_ns")))
    gets = (acked.select(*keys, F.explode_outer("observations").alias("o"))
            .select(*keys, F.col("o.ns").alias("get_ns"), F.col("o.answered_ns").alias("answered_ns"),
                    F.col("o.found").alias("found")))
    late = F.col("found") & (F.col("get_ns") > F.col("expires_ns") + F.lit(grace))
    bad = (gets.where(late).groupBy(*keys)
           .agg(F.max("get_ns").alias("last_seen_ns"), F.count(F.lit(1)).alias("late_gets"))
           .select("drill", "stream", "msg_id", "stream_seq", (F.col("ttl_ns") / 1e9).alias("ttl_s"),
                   "acked_ns", "stored_ns", "expires_ns", "last_seen_ns",
                   F.round((F.col("last_seen_ns") - F.col("expires_ns")) / 1e9, 3).alias("seen_s_after_expiry"),
                   "late_gets"))
    count = bad.count()
    examples = ([r.asDict() for r in bad.orderBy("drill", "stream_seq").limit(limit).collect()]
                if count else [])
    gone = F.col("found") == F.lit(False)
    per_message = (gets.groupBy("drill", "msg_id", "expires_ns")
                   .agg(F.count("found").alias("answered"),
                        F.min(F.when(gone, F.col("answered_ns"))).alias("first_gone_ns"),
                        F.max(F.when(gone & (F.col("answered_ns") + F.lit(grace) < F.col("expires_ns")),
                                     F.lit(1)).otherwise(F.lit(0))).alias("early"))
                   .collect())
    published = {r["drill"]: (r["published"], r["acknowledged"]) for r in inp.ttl.groupBy("drill").agg(
        F.count(F.lit(1)).alias("published"), F.count("acked_ns").alias("acknowledged")).collect()}
    per_drill: dict[str, dict[str, Any]] = {}
    for drill, (n, acks) in sorted(published.items()):
        mine = [r for r in per_message if r["drill"] == drill]
        removal = sorted(r["first_gone_ns"] - r["expires_ns"] for r in mine if r["first_gone_ns"] is not None
                         and r["first_gone_ns"] >= r["expires_ns"])
        per_drill[drill] = {
            "published": n, "acknowledged": acks, "gets_answered": sum(r["answered"] for r in mine),
            "seen_gone": sum(1 for r in mine if r["first_gone_ns"] is not None),
            "never_seen_gone": sum(1 for r in mine if r["first_gone_ns"] is None),
            "gone_early": sum(r["early"] for r in mine),
            "gone_after_expiry_median_s": _s(int(statistics.median(removal))) if removal else None,
            "gone_after_expiry_max_s": _s(removal[-1]) if removal else None}
    details = {"grace_s": TTL_GRACE_S, "skew_s": _s(skew_ns), "messages": len(per_message),
               "outlived": count, "per_drill": per_drill}
    if not any(r["answered"] for r in per_message):
        return CheckResult("ttl", UNKNOWN, 0, [], details, doc)
    return CheckResult("ttl", count == 0, count, examples, details, doc)


# --------------------------------------------------------------------------- counter


def check_counter(inp: Inputs, limit: int) -> CheckResult:
    """``counter`` (module docstring). Offending: one example per drill whose final value
    is outside the allowed range, with ``problem`` ("acknowledged increments missing": below
    it; "more than its increments": above it), ``final``, ``low`` and ``high`` (the range),
    ``acked_sum``, ``off_by`` (how far outside), the ids ``acknowledged``, ``unknown`` and
    ``retried`` (more than one attempt), ``final_seq`` (the stream sequence of the message
    read), ``last_acked_seq`` and ``last_acked_val`` (the acknowledgement of the highest
    sequence: the value the stream said it held then) and ``read_ns``. Counter values are
    integers (decimal strings in the ledger). Details: ``per_drill`` with the same figures
    for every drill, and ``unread``: drills whose final value was never read (not decided)."""
    doc = ("each counter's final value equals the sum of its acknowledged increments (a publish "
           "retried with the same Nats-Msg-Id counted once; an increment of unknown outcome "
           "widens the range allowed)")
    if inp.counter is None:
        return CheckResult("counter", UNKNOWN, 0, [], {"drills": 0}, doc)
    incs = inp.counter.where(F.col("kind") == "increment")
    ok = F.col("outcome") == "ok"
    per_id = (incs.groupBy("drill", "stream", "msg_id")
              .agg(F.min("incr").alias("incr"), F.count(F.lit(1)).alias("attempts"),
                   F.max(ok.cast("int")).alias("acked"),
                   F.max((F.col("outcome") == "info").cast("int")).alias("maybe"))
              .withColumn("state", F.when(F.col("acked") == 1, "acknowledged")
                          .when(F.col("maybe") == 1, "unknown").otherwise("failed")))
    state = F.col("state")
    sums = {(r["drill"], r["stream"]): r.asDict() for r in per_id.groupBy("drill", "stream").agg(
        F.sum(F.when(state == "acknowledged", F.col("incr")).otherwise(0)).alias("acked_sum"),
        F.sum(F.when((state == "unknown") & (F.col("incr") < 0), F.col("incr")).otherwise(0)).alias("unknown_neg"),
        F.sum(F.when((state == "unknown") & (F.col("incr") > 0), F.col("incr")).otherwise(0)).alias("unknown_pos"),
        F.count(F.when(state == "acknowledged", 1)).alias("acknowledged"),
        F.count(F.when(state == "unknown", 1)).alias("unknown"),
        F.count(F.when(state == "failed", 1)).alias("failed"),
        F.count(F.when(F.col("attempts") > 1, 1)).alias("retried")).collect()}
    last_ack = {(r["drill"], r["stream"]): r for r in
                incs.where(ok & F.col("val").isNotNull() & ~F.coalesce("duplicate", F.lit(False)))
                .groupBy("drill", "stream")
                .agg(F.max("stream_seq").alias("seq"), F.max_by("val", "stream_seq").alias("val")).collect()}
    finals = {(r["drill"], r["stream"]): r for r in
              inp.counter.where((F.col("kind") == "final") & ok & F.col("val").isNotNull())
              .groupBy("drill", "stream")
              .agg(F.max_by("val", "acked_ns").alias("val"), F.max_by("stream_seq", "acked_ns").alias("seq"),
                   F.max("acked_ns").alias("read_ns")).collect()}
    bad: list[dict[str, Any]] = []
    per_drill: dict[str, dict[str, Any]] = {}
    unread: list[str] = []
    for key in sorted(set(sums) | set(finals)):
        s = sums.get(key) or {}
        acked_sum = s.get("acked_sum") or 0
        low, high = acked_sum + (s.get("unknown_neg") or 0), acked_sum + (s.get("unknown_pos") or 0)
        final_row, last = finals.get(key), last_ack.get(key)
        final = _integer(final_row["val"]) if final_row else None
        row = {"drill": key[0], "stream": key[1], "final": final, "low": low, "high": high,
               "acked_sum": acked_sum, "acknowledged": s.get("acknowledged", 0),
               "unknown": s.get("unknown", 0), "failed": s.get("failed", 0), "retried": s.get("retried", 0),
               "final_seq": final_row["seq"] if final_row else None,
               "last_acked_seq": last["seq"] if last else None,
               "last_acked_val": _integer(last["val"]) if last else None,
               "read_ns": final_row["read_ns"] if final_row else None}
        per_drill[key[0]] = row
        if final_row is None:
            unread.append(key[0])
            continue
        if final is None:
            problem, off_by = f"final value {final_row['val']!r} is not an integer", None
        elif final < low:
            problem, off_by = "acknowledged increments missing", final - low
        elif final > high:
            problem, off_by = "more than its increments", final - high
        else:
            continue
        bad.append({"drill": key[0], "stream": key[1], "problem": problem, "final": final, "low": low,
                    "high": high, "off_by": off_by,
                    **{k: row[k] for k in ("acked_sum", "acknowledged", "unknown", "retried", "final_seq",
                                           "last_acked_seq", "last_acked_val", "read_ns")}})
    details = {"drills": len(per_drill), "unread": unread, "per_drill": per_drill}
    if len(unread) == len(per_drill):
        return CheckResult("counter", UNKNOWN, 0, [], details, doc)
    return CheckResult("counter", not bad, len(bad), bad[:limit], details, doc)


def _integer(text: str | None) -> int | None:
    """A counter value as the stream writes it (a decimal string, any size); None when it
    is not one."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
