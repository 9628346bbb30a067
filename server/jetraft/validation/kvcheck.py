"""The fault campaign's KV checks on Spark: ``linearizable`` and ``stale_reads`` of
``history/kv.jsonl``.

The history's lines are grouped by key (an RDD ``groupByKey``: Porcupine's
P-compositionality, each key a history of its own) so that keys spread over the executors;
each key is paired, searched and scanned for stale reads by the pure-Python
:func:`jetraft.validation.linearizable.check_key` (Wing & Gong 1993 with Lowe's 2017
memoization, bounded per key), and the per-key results come back to the driver (one small
dict per key, its counterexample at most
:data:`~jetraft.validation.linearizable.COUNTEREXAMPLE_OPS` operations).

The executors run Python: their interpreter must import jetraft (a local master uses this
one; a cluster's executors get the wheel with ``--py-files``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jetraft.validation import linearizable
from jetraft.validation.history import CORRUPT
from jetraft.validation.result import UNKNOWN, CheckResult

#: The columns of a history line the KV checks read.
COLUMNS = ("process", "type", "f", "key", "value", "revision", "expect", "node", "time_ns", "wall_ns", "error")


def _keyed(row) -> tuple[Any, dict[str, Any]]:
    line = row.asDict()
    return line["key"], line


def _check_group(max_steps: int, max_seconds: float, group) -> dict[str, Any]:
    key, lines = group
    return linearizable.check_key(key, list(lines), max_steps, max_seconds)


def per_key(history: DataFrame, max_steps: int = linearizable.MAX_STEPS,
            max_seconds: float = linearizable.MAX_SECONDS) -> list[dict[str, Any]]:
    """:func:`~jetraft.validation.linearizable.check_key` of every key of the KV workload,
    computed on the executors; sorted by key (a null key last)."""
    kv = history.where((F.col("workload") == "kv") & F.col(CORRUPT).isNull()).select(*COLUMNS)
    results = (kv.rdd.map(_keyed).groupByKey()
               .map(partial(_check_group, max_steps, max_seconds)).collect())
    return sorted(results, key=lambda r: (r["key"] is None, r["key"] or ""))


def check_kv(history: DataFrame, limit: int, max_steps: int = linearizable.MAX_STEPS,
             max_seconds: float = linearizable.MAX_SECONDS) -> tuple[CheckResult, CheckResult]:
    """The ``linearizable`` and ``stale_reads`` checks of the KV workload (one pass).

    ``linearizable``: valid when every key's history is linearizable, False when one is not
    (count: such keys), "unknown" when a key's search reached its bound (``max_steps``
    entries or ``max_seconds`` seconds) or there is no KV operation. Details: keys ({key:
    {valid, ops, ok, fail, info, steps, seconds, bound, stale}}), counterexamples ({key:
    linearizable.counterexample's dict}), operations, keys_checked, unknown_keys,
    pairing_problems (lines that did not pair, in every key), max_steps, max_seconds.
    Examples (one per non-linearizable key): key, prefix_ops, the failing operation's f,
    process, node, value, expect, revision, type, invoke_wall_ns (its invocation, ns since
    the epoch).

    ``stale_reads``: valid when no get returned a revision lower than a write completed
    before it was invoked (linearizable.stale_reads); "unknown" without an ok get. Count:
    stale gets. Details: gets, stale, per_key ({key: stale gets}). Examples: the stale gets
    in time order (linearizable.stale_reads's dicts)."""
    lin_doc = ("each key's KV history is linearizable: its operations can be ordered, each at an "
               "instant between its invocation and completion, as a register with revisions "
               "answers (Wing-Gong search with Lowe's memoization, per key)")
    stale_doc = ("no get returned a revision lower than that of a write completed before the get "
                 "was invoked")
    keys = per_key(history, max_steps, max_seconds)
    limits = {"max_steps": max_steps, "max_seconds": max_seconds}
    if not keys:
        return (CheckResult("linearizable", UNKNOWN, 0, [], {"keys": {}, "counterexamples": {}, "operations": 0,
                                                             "keys_checked": 0, **limits}, lin_doc),
                CheckResult("stale_reads", UNKNOWN, 0, [], {"gets": 0, "stale": 0, "per_key": {}}, stale_doc))
    bad = [r for r in keys if r["valid"] is False]
    unknown = [r for r in keys if r["valid"] not in (True, False)]
    examples = []
    for r in bad[:limit]:
        c = r["counterexample"]
        failed = (c or {}).get("failed") or {}
        examples.append({"key": r["key"], "prefix_ops": c["prefix_ops"] if c else None,
                         **{k: failed.get(k) for k in ("f", "process", "node", "value", "expect", "revision",
                                                       "type")},
                         "invoke_wall_ns": failed.get("invoke_wall_ns")})
    valid = False if bad else UNKNOWN if unknown else True
    details = {"keys": {_name(r["key"]): {k: (len(r[k]) if k == "stale" else r[k])
                                          for k in ("valid", "ops", "ok", "fail", "info", "steps", "seconds",
                                                    "bound", "stale")} for r in keys},
               "counterexamples": {_name(r["key"]): r["counterexample"] for r in bad if r["counterexample"]},
               "operations": sum(r["ops"] for r in keys), "keys_checked": len(keys),
               "unknown_keys": [_name(r["key"]) for r in unknown],
               "pairing_problems": sum(r["pairing_problems"] for r in keys),
               "pairing_examples": [e for r in keys for e in r["pairing_examples"]][:3], **limits}
    lin = CheckResult("linearizable", valid, len(bad), examples, details, lin_doc)
    stale = sorted((s for r in keys for s in r["stale"]), key=lambda s: (s["invoke_wall_ns"] or 0, _name(s["key"])))
    gets = sum(r["gets"] for r in keys)
    stale_details = {"gets": gets, "stale": len(stale),
                     "per_key": {_name(r["key"]): len(r["stale"]) for r in keys if r["stale"]}}
    stale_result = CheckResult("stale_reads", (not stale) if gets else UNKNOWN, len(stale), stale[:limit],
                               stale_details, stale_doc)
    return lin, stale_result


def _name(key: str | None) -> str:
    """A key as report.json names it (a line without a key: ``(none)``)."""
    return "(none)" if key is None else key
