"""The fault campaign's histories: their schema, their reader, and operations paired from
their lines.

A campaign run directory holds ``history/queue.jsonl`` and ``history/kv.jsonl`` (written by
the campaign's workloads, lab/workloads.py), one JSON object per line in Jepsen's operation
map (Kingsbury, Jepsen, ``jepsen.history``):

- ``run`` (str), ``workload`` (``queue`` | ``kv``);
- ``process`` (int): a logical client with at most one operation outstanding; after an
  ``info`` the client goes on under a new process number, as in Jepsen;
- ``type``: ``invoke``, then ``ok`` (done), ``fail`` (definitely not done) or ``info``
  (unknown: it may take effect at any time after its invocation, or never);
- ``f``: queue ``publish`` (an invocation and a completion), ``consume``, ``drain``,
  ``read-node`` (single ``ok`` lines, one per message read); kv ``put``, ``get``,
  ``create``, ``update``, ``delete``;
- ``key`` (str or null: kv the key; queue the stream's name, null in a history of one
  stream), ``value`` (values unique over every queue stream of a run) (int or null: the unique published value; the
  value written or read, null for a delete and for a get that found nothing),
  ``revision`` (int or null: the stream sequence a publish was acknowledged at or a
  message read at; the KV revision written or read), ``expect`` (an update's expected
  revision), ``node`` (the server the client was connected to; for ``read-node``, the
  server whose own copy was read);
- ``time_ns`` (int: the controller's monotonic clock, in ns; it orders the events),
  ``wall_ns`` (int: ns since the epoch), ``error`` (str or null).

:data:`HISTORY` is the explicit Spark schema of a line, :func:`read` reads a run's
histories, :func:`pair` turns lines into :class:`Op` (pure Python: the linearizability
checker's input, testable without Spark).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql.types import LongType, StringType, StructField, StructType

#: Where a run directory's histories are, relative to it.
HISTORY_GLOB = "history/*.jsonl"
#: The column holding a line that is not a JSON object.
CORRUPT = "_corrupt_record"

#: Completions that come without an invocation: one ``ok`` line per message read.
READS = ("consume", "drain", "read-node")
#: The KV operations that write a revision.
KV_WRITES = ("put", "create", "update", "delete")


def _s(name: str, kind=StringType()) -> StructField:
    return StructField(name, kind, True)


#: One line of a history (see the module docstring); ``_corrupt_record`` holds a line that
#: is not a JSON object.
HISTORY = StructType([
    _s("run"), _s("workload"), _s("process", LongType()), _s("type"), _s("f"), _s("key"),
    _s("value", LongType()), _s("revision", LongType()), _s("expect", LongType()), _s("node"),
    _s("time_ns", LongType()), _s("wall_ns", LongType()), _s("error"), _s(CORRUPT),
])


def history_glob(run: str) -> str:
    """``RUN/history/*.jsonl``."""
    return f"{run.rstrip('/')}/{HISTORY_GLOB}"


def read(spark, run: str):
    """Every line of the run's histories (``RUN/history/*.jsonl``, local or any URI Spark
    reads) as a DataFrame of :data:`HISTORY`, kept (memory, then disk) for the checks; None
    when the run has no history file."""
    try:
        df = (spark.read.schema(HISTORY).option("mode", "PERMISSIVE")
              .option("columnNameOfCorruptRecord", CORRUPT).json(history_glob(run)))
    except AnalysisException as exc:         # no file matches: the run has no history
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            return None
        raise
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    df.count()
    return df


# --------------------------------------------------------------------------- pairing


@dataclass(frozen=True)
class Op:
    """One operation: an invocation and its completion.

    ``type`` is the completion's (``ok``, ``fail``, ``info``); an invocation never completed
    in the history is ``info`` with ``complete_ns`` None (Jepsen's reading of an incomplete
    operation). ``value``: for a get, the value read; otherwise the value written (the
    invocation's). ``revision``: the completion's (None unless ``ok``). Times in ns:
    ``invoke_ns`` / ``complete_ns`` on the controller's monotonic clock, ``*_wall_ns``
    since the epoch. A read (consume, drain, read-node) is an ``ok`` completion with no
    invocation: its invocation time is its completion time. ``index``: the operation's
    place in the history, in invocation order."""

    index: int
    process: int | None
    f: str | None
    type: str
    key: str | None = None
    value: int | None = None
    revision: int | None = None
    expect: int | None = None
    node: str | None = None
    invoke_ns: int = 0
    complete_ns: int | None = None
    invoke_wall_ns: int | None = None
    complete_wall_ns: int | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The operation as report.json shows it (every field but ``index``)."""
        return {"process": self.process, "f": self.f, "key": self.key, "value": self.value,
                "expect": self.expect, "revision": self.revision, "type": self.type,
                "node": self.node, "invoke_ns": self.invoke_ns, "complete_ns": self.complete_ns,
                "invoke_wall_ns": self.invoke_wall_ns, "complete_wall_ns": self.complete_wall_ns,
                "error": self.error}


@dataclass(frozen=True)
class PairingProblem:
    """A line that does not pair: ``problem`` says how (a second invocation while one is
    outstanding, a completion without an invocation, a completion of another operation
    than the one invoked), ``event`` is the line."""

    problem: str
    event: dict[str, Any]


def pair(events: Iterable[dict[str, Any]]) -> tuple[list[Op], list[PairingProblem]]:
    """Pair each process's invocations with their completions (events: dicts with the
    fields of a history line, in any order; ordered here by ``time_ns``, then as given).

    Returns the operations in invocation order and the lines that did not pair. A process
    has at most one operation outstanding: a second invocation before a completion is a
    problem, and the first is kept as ``info`` (incomplete); a completion of another ``f``
    (or key) than the one invoked is a problem and leaves the invocation outstanding. An
    invocation still outstanding at the end is ``info``. Reads (consume, drain, read-node)
    are operations of their own."""
    ordered = sorted(enumerate(events), key=lambda p: (p[1].get("time_ns") or 0, p[0]))
    pending: dict[Any, dict[str, Any]] = {}
    done: list[tuple[dict, dict | None]] = []
    problems: list[PairingProblem] = []
    for _, e in ordered:
        kind, proc = e.get("type"), e.get("process")
        if kind == "invoke":
            if proc in pending:
                problems.append(PairingProblem("invoked while another operation of its process "
                                               "was outstanding", e))
                done.append((pending.pop(proc), None))
            pending[proc] = e
        elif kind in ("ok", "fail", "info"):
            inv = pending.get(proc)
            if inv is not None and inv.get("f") == e.get("f") and inv.get("key") == e.get("key"):
                done.append((pending.pop(proc), e))
            elif inv is None and kind == "ok" and e.get("f") in READS:
                done.append((e, e))
            else:
                problems.append(PairingProblem(
                    "completed without an invocation" if inv is None
                    else f"completes {e.get('f')} while {inv.get('f')} was invoked", e))
        else:
            problems.append(PairingProblem(f"unknown type {kind!r}", e))
    done.extend((inv, None) for inv in pending.values())
    done.sort(key=lambda p: (p[0].get("time_ns") or 0, p[0] is not p[1]))
    return [_op(i, inv, end) for i, (inv, end) in enumerate(done)], problems


def _op(index: int, inv: dict, end: dict | None) -> Op:
    kind = "info" if end is None else end["type"]
    ok = kind == "ok"
    value = inv.get("value")
    if end is not None and (end.get("f") in ("get", *READS) or value is None):
        value = end.get("value")
    return Op(index=index, process=inv.get("process"), f=inv.get("f"), type=kind, key=inv.get("key"),
              value=value, revision=end.get("revision") if ok else None,
              expect=inv.get("expect") if inv.get("expect") is not None else (end or {}).get("expect"),
              node=inv.get("node") or (end or {}).get("node"),
              invoke_ns=inv.get("time_ns") or 0,
              complete_ns=None if end is None else max(end.get("time_ns") or 0, inv.get("time_ns") or 0),
              invoke_wall_ns=inv.get("wall_ns"), complete_wall_ns=None if end is None else end.get("wall_ns"),
              error=None if end is None else end.get("error"))
