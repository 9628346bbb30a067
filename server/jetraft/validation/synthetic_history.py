"""Synthetic campaign histories (``history/queue.jsonl``, ``history/kv.jsonl``; the format
of :mod:`jetraft.validation.history`) for the validation's tests and timings, from models
instead of a cluster: every history generated is valid, anomalies are injected by editing
its lines.

- :func:`queue_history`: publishers publish unique values to a stream (each publish takes
  effect at one instant between its invocation and completion, which assigns the next
  stream sequence); an ``info`` publish was stored or not (even odds), a ``fail`` one was
  not; consumers read most stored values during the run (some twice, as redeliveries do);
  then the drain reads the whole stream and every node's own copy is read
  (``read-node``), each the stream exactly.
- :func:`kv_history`: clients run put / get / create / update / delete on a few keys of a
  register with revisions (a bucket: one revision counter for every key); each operation
  takes effect at one instant between its invocation and completion, in time order across
  clients. A create on a key that exists, an update whose expected revision (the client's
  last seen) is not the key's, fail. An ``info`` operation took effect or not (even
  odds); its client goes on under a new process number.

Times: ``time_ns`` from 1 s on a monotonic clock, ``wall_ns`` the same from
2027-01-01T00:00:00Z.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

WALL_START_NS = 1_798_761_600_000_000_000         # 2027-01-01T00:00:00Z
CLOCK_START_NS = 1_000_000_000
MS = 1_000_000


def line(run: str, workload: str, process: int, type_: str, f: str, t: int, **fields: Any) -> dict[str, Any]:
    """One history line (every field present, as lab/workloads.py writes them); ``t`` its
    monotonic time in ns."""
    out = {"run": run, "workload": workload, "process": process, "type": type_, "f": f, "key": None,
           "value": None, "revision": None, "expect": None, "node": None, "time_ns": t,
           "wall_ns": WALL_START_NS + t, "error": None}
    out.update(fields)
    return out


def write(root: Path, lines: Iterable[dict[str, Any]], workload: str) -> Path:
    """Write ``lines`` to ``root/history/<workload>.jsonl`` (in time order); its path."""
    path = root / "history" / f"{workload}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for e in sorted(lines, key=lambda e: e["time_ns"]):
            f.write(json.dumps(e) + "\n")
    return path


def queue_history(publishes: int = 1000, *, publishers: int = 3, nodes: Iterable[str] = ("n1", "n2", "n3"),
                  seed: int = 1, info: float = 0.01, fail: float = 0.01, consumed: float = 0.9,
                  run: str = "synthetic") -> list[dict[str, Any]]:
    """A valid queue history of ``publishes`` publish attempts (module docstring); values
    0, 1, 2... in invocation order of each publisher's turn."""
    rng = random.Random(seed)
    nodes = list(nodes)
    lines: list[dict[str, Any]] = []
    heap: list[tuple[int, int, int, int, int]] = []   # (takes effect, order, client, invoked, value)
    process = list(range(publishers))
    next_process = publishers
    next_value = 0
    for client in range(publishers):
        t = CLOCK_START_NS + client * MS // 3
        heapq.heappush(heap, (t + rng.randrange(1, MS), next_value, client, t, next_value))
        next_value += 1
    stored: list[tuple[int, int, int]] = []     # (sequence, value, when it took effect)
    while heap:
        at, _, client, invoked, value = heapq.heappop(heap)
        node = nodes[client % len(nodes)]
        lines.append(line(run, "queue", process[client], "invoke", "publish", invoked, value=value, node=node))
        done = at + rng.randrange(1, MS)
        roll = rng.random()
        if roll < fail:
            lines.append(line(run, "queue", process[client], "fail", "publish", done, value=value, node=node,
                              error="APIError: stream not available"))
        elif roll < fail + info:
            if rng.random() < 0.5:
                stored.append((len(stored) + 1, value, at))
            lines.append(line(run, "queue", process[client], "info", "publish", done, value=value, node=node,
                              error="TimeoutError"))
            process[client] = next_process
            next_process += 1
        else:
            stored.append((len(stored) + 1, value, at))
            lines.append(line(run, "queue", process[client], "ok", "publish", done, value=value,
                              revision=len(stored), node=node))
        if next_value < publishes:
            t = done + rng.randrange(0, MS // 2)
            heapq.heappush(heap, (t + rng.randrange(1, MS), next_value, client, t, next_value))
            next_value += 1
    end = max(e["time_ns"] for e in lines) if lines else CLOCK_START_NS
    consumer = next_process
    for seq, value, at in stored:
        if rng.random() < consumed:
            t = at + rng.randrange(1, 5 * MS)
            for _ in range(2 if rng.random() < 0.02 else 1):
                lines.append(line(run, "queue", consumer + rng.randrange(2), "ok", "consume", t, value=value,
                                  revision=seq, node=nodes[seq % len(nodes)]))
                t += MS
    t = max(end, max((e["time_ns"] for e in lines), default=end)) + 1000 * MS
    for seq, value, _ in stored:
        t += 1000
        lines.append(line(run, "queue", consumer + 2, "ok", "drain", t, value=value, revision=seq, node=nodes[0]))
    for i, node in enumerate(nodes):
        for seq, value, _ in stored:
            t += 1000
            lines.append(line(run, "queue", consumer + 3 + i, "ok", "read-node", t, value=value, revision=seq,
                              node=node))
    return lines


#: The KV workload's mix of operations (lab/workloads.py KVWorkload).
KV_MIX = (("get", 4), ("put", 3), ("create", 1), ("update", 2), ("delete", 1))


def kv_history(keys: int = 10, ops_per_key: int = 500, *, clients: int = 50, seed: int = 1,
               info: float = 0.02, run: str = "synthetic", nodes: Iterable[str] = ("n1", "n2", "n3"),
               op_ms: float = 2.0) -> list[dict[str, Any]]:
    """A valid (linearizable) KV history: ``keys`` keys, about ``ops_per_key`` operations
    each, ``clients`` clients at once (each picks a key at random, so about
    clients / keys operations run concurrently on a key); each operation takes up to
    ``op_ms`` ms from invocation to the instant it takes effect, and as long again to its
    completion (module docstring)."""
    rng = random.Random(seed)
    nodes = list(nodes)
    fs, weights = zip(*KV_MIX)
    register: dict[str, tuple[bool, int | None, int]] = {}       # key -> (exists, value, revision)
    seen: list[dict[str, int]] = [{} for _ in range(clients)]   # per client: key -> last revision
    process = list(range(clients))
    next_process = clients
    revision = 0
    next_value = 0
    span = max(2, int(op_ms * MS))
    heap: list[tuple[int, int, int, int, str, str, int | None, int | None]] = []
    total = keys * ops_per_key
    issued = 0

    def issue(client: int, t: int) -> None:
        nonlocal issued, next_value
        key = f"k{rng.randrange(keys)}"
        f = rng.choices(fs, weights)[0]
        value = None
        if f in ("put", "create", "update"):
            value = next_value
            next_value += 1
        expect = seen[client].get(key, 0) if f == "update" else None
        heapq.heappush(heap, (t + rng.randrange(1, span), issued, client, t, key, f, value, expect))
        issued += 1

    for client in range(clients):
        issue(client, CLOCK_START_NS + rng.randrange(0, span))
    lines: list[dict[str, Any]] = []
    while heap:
        at, _, client, invoked, key, f, value, expect = heapq.heappop(heap)
        node = nodes[client % len(nodes)]
        proc = process[client]
        lines.append(line(run, "kv", proc, "invoke", f, invoked, key=key, value=value, expect=expect, node=node))
        done = at + rng.randrange(1, span)
        exists, current, rev = register.get(key, (False, None, 0))
        unknown = rng.random() < info
        takes_effect = not unknown or rng.random() < 0.5
        result: dict[str, Any] = {}
        if f == "get":
            result = {"value": current if exists else None, "revision": rev or None}
        elif (f == "create" and exists) or (f == "update" and rev != expect):
            result = {"failed": "KeyWrongLastSequenceError: wrong last sequence"}
        elif takes_effect:
            revision += 1
            register[key] = (f != "delete", value if f != "delete" else None, revision)
            result = {"value": value, "revision": revision}
        if unknown:
            lines.append(line(run, "kv", proc, "info", f, done, key=key, value=value, expect=expect, node=node,
                              error="TimeoutError"))
            process[client] = next_process
            next_process += 1
        elif "failed" in result:
            lines.append(line(run, "kv", proc, "fail", f, done, key=key, value=value, expect=expect, node=node,
                              error=result["failed"]))
        else:
            if result.get("revision") is not None:
                seen[client][key] = result["revision"]
            lines.append(line(run, "kv", proc, "ok", f, done, key=key, value=result["value"],
                              revision=result["revision"], expect=expect, node=node))
        if issued < total:
            issue(client, done + rng.randrange(0, span // 4 + 1))
    return lines
