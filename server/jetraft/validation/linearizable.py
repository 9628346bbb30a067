"""Linearizability of the KV workload, one key at a time, and its stale reads (pure
Python: no Spark; :mod:`jetraft.validation.kvcheck` runs it on Spark's executors).

A history is linearizable when every operation can be given a single instant between its
invocation and its completion such that, in the order of those instants, each result is
what a single register would have answered (Herlihy & Wing 1990). Checking it is
NP-complete in general (Gibbons & Korach 1997); the search here is Wing & Gong's (1993)
with Lowe's (2017) memoization of (set of operations linearized, model state), as in
Porcupine (Anish Athalye): the history is a doubly linked list of call and return entries in
time order; the search linearizes calls that come before the first return still in the
list, backtracks when it reaches a return whose call it could not place, and never
explores the same (linearized set, state) twice. Each key is an object of its own and
linearizability is local (Herlihy & Wing): a history is linearizable if and only if each
key's is, so each key is checked on its own, in parallel (Porcupine's partitioning,
P-compositionality after Horn & Kroening 2015).

The model: a NATS KV key on its bucket's stream, a register with revisions. State
(exists, value, revision); a revision is the bucket stream's sequence, so it only grows.

- ``put(v)`` ok at revision r: r greater than the key's revision; the key then holds v at r;
- ``create(v)`` ok at r: only if the key is absent or deleted; then as a put;
- ``update(v, expect=e)`` ok at r: only if the key's revision is e (0: never written); then
  as a put;
- ``delete`` ok at r: the key is then absent, at revision r;
- ``get`` ok: exactly the key's value and revision (a value of null: the key absent or
  deleted; the revision, when given, that of the delete);
- ``fail``: the operation did not take effect, and is left out;
- ``info`` (and an invocation never completed): no result. A write may take effect at any
  instant after its invocation, or never, at a revision unknown but greater than the key's;
  the state then holds a lower bound of the revision, made exact by the next get or update
  that names one. A get without a result is left out.

Bounds: the search of one key stops after :data:`MAX_STEPS` steps or :data:`MAX_SECONDS`
seconds, and its verdict is then "unknown", never a pass. A key found non-linearizable gets
a counterexample: the shortest prefix of its history, by completion order, that is already
non-linearizable (operations still running at the prefix's end count as unknown ones), found
by bisection since a prefix of a linearizable history is linearizable.

Stale reads (:func:`stale_reads`): a get that returns a revision lower than that of a write
(ok) that completed before the get was invoked. Linearizability forbids it; it is listed on
its own as the first thing an operator asks about.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from jetraft.validation.history import KV_WRITES, Op, pair

#: Search steps (entries visited) per key before the verdict is "unknown": about 15 s of
#: search and at most about 0.5 GB of memoized configurations in one Python worker. A valid
#: key of 20,000 operations, 5 at once, 2% of unknown outcome takes about 2 million.
MAX_STEPS = 20_000_000
#: Seconds of search per key before the verdict is "unknown" (and, again, at most this
#: long for the counterexample's bisection).
MAX_SECONDS = 60.0
#: Operations of a counterexample kept in the report (the last ones, with the failing one).
COUNTEREXAMPLE_OPS = 30

#: (exists, value, revision, exact): ``exact`` False when an unknown write made
#: ``revision`` a lower bound (the key's revision is at least that).
State = tuple[bool, "int | None", int, bool]
#: A key never written.
INITIAL: State = (False, None, 0, True)


def step(state: State, op: Op) -> State | None:
    """The state after ``op`` takes effect in ``state``, or None when it cannot (see the
    module docstring). ``op.type`` ``ok`` with a revision: its result is known; otherwise
    (``info``, or an ``ok`` write without revision) the write's revision is unknown."""
    exists, value, rev, exact = state
    f = op.f
    if f == "get":
        if op.type != "ok":
            return state
        r = op.revision
        if op.value is None:
            if exists:
                return None
        elif not exists or value != op.value:
            return None
        if r is None:
            return state
        if exact:
            return state if r == rev else None
        return (exists, value, r, True) if r >= rev else None
    if f == "create" and exists:
        return None
    if f == "update":
        e = op.expect or 0
        if (exact and rev != e) or (not exact and e < rev):
            return None
        rev = e
    elif f not in KV_WRITES:
        return None
    new_exists = f != "delete"
    new_value = op.value if new_exists else None
    r = op.revision if op.type == "ok" else None
    if r is None:
        return (new_exists, new_value, rev + 1, False)
    if r <= rev:        # exact: greater than the key's; a bound: some revision in [rev, r)
        return None
    return (new_exists, new_value, r, True)


@dataclass
class Verdict:
    """One search: ``valid`` True, False or "unknown"; ``ops`` searched; ``steps`` (list
    entries visited); ``seconds``; ``bound`` ("steps" or "seconds") when cut short."""

    valid: bool | str
    ops: int
    steps: int
    seconds: float
    bound: str | None = None


def searchable(ops: Iterable[Op]) -> list[Op]:
    """What the search places: ok operations and writes of unknown outcome (``fail`` ones
    did not happen; a get without a result says nothing), in invocation order."""
    return sorted((op for op in ops if op.type == "ok" or (op.type == "info" and op.f != "get")),
                  key=lambda op: (op.invoke_ns, op.index))


class _Entry:
    __slots__ = ("op", "id", "call", "match", "prev", "next", "unknown")

    def __init__(self, op: Op | None, id_: int, call: bool, unknown: bool):
        self.op, self.id, self.call, self.unknown = op, id_, call, unknown
        self.match = self.prev = self.next = None


def _entry_list(ops: list[Op]) -> _Entry:
    """The history as a linked list of call and return entries in time order (a call
    before a return at the same instant: the two operations overlap); an operation of
    unknown outcome returns after everything. Returns the head (a sentinel)."""
    rows = []
    for i, op in enumerate(ops):
        unknown = op.type != "ok"
        rows.append((op.invoke_ns, 0, i, True, unknown))
        end = op.complete_ns if not unknown and op.complete_ns is not None else None
        rows.append((end, 1, i, False, unknown) if end is not None else (float("inf"), 1, i, False, unknown))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    head = _Entry(None, -1, False, False)
    calls: dict[int, _Entry] = {}
    prev = head
    for _, _, i, call, unknown in rows:
        e = _Entry(ops[i], i, call, unknown)
        if call:
            calls[i] = e
        else:
            e.match = calls[i]
            calls[i].match = e
        prev.next, e.prev = e, prev
        prev = e
    return head


def _lift(e: _Entry) -> None:
    e.prev.next = e.next
    e.next.prev = e.prev          # a call is always followed by something (its return)
    m = e.match
    m.prev.next = m.next
    if m.next is not None:
        m.next.prev = m.prev


def _unlift(e: _Entry) -> None:
    m = e.match
    m.prev.next = m
    if m.next is not None:
        m.next.prev = m
    e.prev.next = e
    e.next.prev = e


def check(ops: Iterable[Op], max_steps: int = MAX_STEPS, max_seconds: float = MAX_SECONDS,
          deadline: float | None = None) -> Verdict:
    """Whether one key's operations (:class:`~jetraft.validation.history.Op`, any order,
    any outcome) are linearizable against the register with revisions (module docstring):
    the Wing–Gong search with Lowe's memoization of (linearized set, state). "unknown"
    after ``max_steps`` entries visited or ``max_seconds`` (or at the monotonic
    ``deadline``)."""
    placed = searchable(ops)
    started = time.monotonic()
    stop_at = started + max_seconds if deadline is None else min(deadline, started + max_seconds)
    head = _entry_list(placed)
    state: State = INITIAL
    linearized = 0
    seen: set = set()
    calls: list[tuple[_Entry, State]] = []
    entry = head.next
    steps = 0

    def verdict(valid, bound=None) -> Verdict:
        return Verdict(valid, len(placed), steps, round(time.monotonic() - started, 3), bound)

    while entry is not None:
        steps += 1
        if steps > max_steps:
            return verdict("unknown", "steps")
        if not steps & 0xFFF and time.monotonic() > stop_at:
            return verdict("unknown", "seconds")
        if entry.call:
            new = step(state, entry.op)
            if new is not None:
                bits = linearized | (1 << entry.id)
                low = (~bits & (bits + 1)).bit_length() - 1     # operations 0..low-1 all placed
                key = (low, bits >> low, new)
                if key not in seen:
                    seen.add(key)
                    calls.append((entry, state))
                    state, linearized = new, bits
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        elif entry.unknown:
            # every operation with a result is placed: those left may never have happened
            return verdict(True)
        else:
            # the operation returning here was not placed before its return: backtrack
            if not calls:
                return verdict(False)
            entry, state = calls.pop()
            linearized &= ~(1 << entry.id)
            _unlift(entry)
            entry = entry.next
    return verdict(True)


def prefix(ops: list[Op], completions: int) -> list[Op]:
    """The history up to its ``completions``-th ok completion (ops: :func:`searchable`):
    the operations invoked by then; those not completed by then have no result yet (a get
    is left out, a write is of unknown outcome)."""
    done = sorted((op for op in ops if op.type == "ok"), key=lambda op: (op.complete_ns, op.index))
    if not done:
        return []
    kept = {op.index for op in done[:completions]}
    until = done[completions - 1].complete_ns
    out = []
    for op in ops:
        if op.invoke_ns > until:
            continue
        if op.index in kept:
            out.append(op)
        elif op.f != "get":
            out.append(replace(op, type="info", revision=None, complete_ns=None))
    return out


def shortest_failing_prefix(ops: Iterable[Op], max_steps: int = MAX_STEPS,
                            max_seconds: float = MAX_SECONDS) -> tuple[list[Op], Op] | None:
    """The shortest prefix (by completion order, :func:`prefix`) of a non-linearizable
    history that is already non-linearizable, by bisection, and its last completed
    operation (where the history stops being linearizable); None when the whole history
    is not found non-linearizable. A prefix whose search is cut short counts as not
    shown non-linearizable, so under the bounds the prefix found may not be the
    shortest (it is always one proven non-linearizable)."""
    placed = searchable(ops)
    total = sum(1 for op in placed if op.type == "ok")
    deadline = time.monotonic() + max_seconds
    if not total or check(placed, max_steps, max_seconds, deadline).valid is not False:
        return None
    lo, hi = 1, total
    while lo < hi:
        mid = (lo + hi) // 2
        if check(prefix(placed, mid), max_steps, max_seconds, deadline).valid is False:
            hi = mid
        else:
            lo = mid + 1
    done = sorted((op for op in placed if op.type == "ok"), key=lambda op: (op.complete_ns, op.index))
    return prefix(placed, hi), done[hi - 1]


def counterexample(ops: Iterable[Op], max_steps: int = MAX_STEPS, max_seconds: float = MAX_SECONDS,
                   keep: int = COUNTEREXAMPLE_OPS) -> dict[str, Any] | None:
    """The report's form of :func:`shortest_failing_prefix`: {``prefix_ops`` (operations in
    the prefix), ``omitted`` (the earliest ones not listed), ``failed`` (the operation whose
    completion makes the prefix non-linearizable), ``ops`` (the last ``keep`` operations by
    invocation, the failing one always among them; each as Op.as_dict with ``failed``
    true or false; those still running at the prefix's end with type ``info``)}."""
    found = shortest_failing_prefix(ops, max_steps, max_seconds)
    if found is None:
        return None
    ops_, failed = found
    shown = ops_[-keep:]
    if failed not in shown:
        shown = [failed] + shown[1:]
        shown.sort(key=lambda op: (op.invoke_ns, op.index))
    return {"prefix_ops": len(ops_), "omitted": len(ops_) - len(shown), "failed": failed.as_dict(),
            "ops": [{**op.as_dict(), "failed": op is failed} for op in shown]}


def stale_reads(ops: Iterable[Op]) -> list[dict[str, Any]]:
    """One key's stale reads: each ok get whose revision is lower than the highest revision
    written by an ok write completed before the get was invoked (a get that found nothing,
    without a revision, is stale when that write was not a delete). Each: key, process,
    node, value and revision (the get's), invoke_wall_ns (the get's invocation, ns since
    the epoch), and the write's f, process, node, value, revision (``write_revision``) and
    ``write_complete_wall_ns``; in the gets' invocation order."""
    ops = list(ops)
    writes = sorted((op for op in ops if op.type == "ok" and op.f in KV_WRITES and op.revision is not None),
                    key=lambda op: (op.complete_ns, op.index))
    gets = sorted((op for op in ops if op.type == "ok" and op.f == "get"), key=lambda op: (op.invoke_ns, op.index))
    out, latest, i = [], None, 0
    for g in gets:
        while i < len(writes) and writes[i].complete_ns < g.invoke_ns:
            if latest is None or writes[i].revision > latest.revision:
                latest = writes[i]
            i += 1
        if latest is None:
            continue
        if g.revision is not None:
            stale = g.revision < latest.revision
        else:
            stale = g.value is None and latest.f != "delete"
        if stale:
            out.append({"key": g.key, "process": g.process, "node": g.node, "value": g.value,
                        "revision": g.revision, "write_f": latest.f, "write_process": latest.process,
                        "write_node": latest.node, "write_value": latest.value,
                        "write_revision": latest.revision, "invoke_wall_ns": g.invoke_wall_ns,
                        "write_complete_wall_ns": latest.complete_wall_ns})
    return out


def check_key(key: str | None, events: Iterable[dict[str, Any]], max_steps: int = MAX_STEPS,
              max_seconds: float = MAX_SECONDS) -> dict[str, Any]:
    """Everything about one key, from its history lines (dicts of a history line): {key,
    valid (True, False, "unknown"), ops (operations paired), ok, fail, info, searched
    (operations placed by the search), steps, seconds, bound, counterexample (None, or
    :func:`counterexample`'s dict), gets, stale (:func:`stale_reads`), pairing_problems
    (count), pairing_examples (the first three lines that did not pair, with the problem)}."""
    ops, problems = pair(events)
    verdict = check(ops, max_steps, max_seconds)
    example = counterexample(ops, max_steps, max_seconds) if verdict.valid is False else None
    counts = {t: sum(1 for op in ops if op.type == t) for t in ("ok", "fail", "info")}
    return {"key": key, "valid": verdict.valid, "ops": len(ops), **counts, "searched": verdict.ops,
            "steps": verdict.steps, "seconds": verdict.seconds, "bound": verdict.bound,
            "counterexample": example, "gets": sum(1 for op in ops if op.f == "get" and op.type == "ok"),
            "stale": stale_reads(ops), "pairing_problems": len(problems),
            "pairing_examples": [{"problem": p.problem, **p.event} for p in problems[:3]]}
