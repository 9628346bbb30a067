"""Idle cost benchmark: what five servers holding many R3 streams cost while nothing is
published, jetraft next to nats-server.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.idle [--streams N]
        [--seconds S] [--only jetraft|nats-server]

Each kind gets a fresh 5-server cluster (zones a, a, b, b, c; ``unique_tag: "az:"``; an
fsync before every acknowledgement, nats-server with ``sync_interval: always``) and
--streams (100) R3 file streams, each with one message. Once every stream has a leader and
--settle (10) seconds have passed, each server's CPU (user + system, /proc) is read over
--seconds (30) of quiet, and its resident memory at the end. Printed: CPU milliseconds a
second per server (median and max over the five) and resident MB (median), and the ratio
nats-server/jetraft (above 1: jetraft costs less). Absolute numbers on a shared machine are
noise; the ratio is the result.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StorageType
from servers import KINDS
from tests.bench.cluster_bench import BenchCluster, Results, log, table
from tests.bench.core import cpu_seconds

TAGS = [["az:a"], ["az:a"], ["az:b"], ["az:b"], ["az:c"]]
CREATE_DEADLINE = 300.0


def rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MB (/proc/<pid>/status VmRSS), None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def make_streams(url: str, count: int) -> None:
    """``count`` R3 file streams ``IDLE<i>`` on ``idle.<i>``, one message each, each create
    and publish asked again while the cluster elects (to a deadline)."""
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=5)
    try:
        js = nc.jetstream(timeout=10)
        until = time.monotonic() + CREATE_DEADLINE
        for i in range(count):
            while True:
                try:
                    await js.add_stream(name=f"IDLE{i}", subjects=[f"idle.{i}"], storage=StorageType.FILE,
                                        num_replicas=3)
                    await js.publish(f"idle.{i}", b"x")
                    break
                except Exception as err:  # noqa: BLE001 - the meta group or the stream is electing
                    if time.monotonic() > until:
                        raise RuntimeError(f"stream IDLE{i} not made in {CREATE_DEADLINE:g} s: {err}") from err
                    await asyncio.sleep(0.25)
            if i % 25 == 24:
                log(f"  {i + 1} streams")
    finally:
        await nc.close()


def measure_kind(kind: str, workdir: Path, args) -> Results:
    res = Results()
    log(f"{kind}: starting 5 servers, {args.streams} R3 streams")
    c = BenchCluster(kind, workdir, 5, jetstream=True, unique_tag="az:", tags=TAGS, ready_timeout=30)
    try:
        c.start()
        c.wait_formed(60)
        started = time.monotonic()
        asyncio.run(make_streams(c.servers["n1"].url, args.streams))
        res.raw.append(f"{args.streams} streams made in {time.monotonic() - started:.1f} s")
        time.sleep(args.settle)  # the quiet the measurement is about, not a synchronisation
        pids = {name: s.proc.pid for name, s in c.servers.items()}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        time.sleep(args.seconds)
        after = {name: cpu_seconds(pid) for name, pid in pids.items()}
        per_s = {n: 1000 * (after[n] - before[n]) / args.seconds for n in pids
                 if before[n] is not None and after[n] is not None}
        rss = [m for m in (rss_mb(pid) for pid in pids.values()) if m is not None]
        if len(per_s) != len(pids):
            res.errors.append(f"servers gone during the quiet: {sorted(set(pids) - set(per_s))}")
        res.values["cpu_median"] = statistics.median(per_s.values()) if per_s else None
        res.values["cpu_max"] = max(per_s.values()) if per_s else None
        res.values["rss_median"] = statistics.median(rss) if rss else None
        res.raw.append("CPU ms/s per server: " + ", ".join(f"{n} {v:.1f}" for n, v in sorted(per_s.items())))
        res.raw.append("resident MB per server: " + ", ".join(f"{m:.0f}" for m in rss))
    except Exception as err:  # noqa: BLE001 - a failed run is a result
        res.fail("idle run", err)
    finally:
        c.stop()
    return res


ROWS = [  # key, label, "rate" or "time"/"size" (lower is better), format
    ("cpu_median", "idle CPU per server, ms a second, median", "time", "{:.1f}"),
    ("cpu_max", "idle CPU per server, ms a second, max", "time", "{:.1f}"),
    ("rss_median", "resident memory per server, MB, median", "size", "{:.0f}"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--streams", type=int, default=100, help="R3 streams (default 100)")
    add("--settle", type=float, default=10.0, help="seconds of quiet before measuring (default 10)")
    add("--seconds", type=float, default=30.0, help="seconds measured (default 30)")
    add("--only", choices=KINDS, help="measure one kind only (no ratio)")
    args = parser.parse_args(argv)
    if args.streams < 1 or args.seconds <= 0 or args.settle < 0:
        parser.error("--streams and --seconds must be above zero, --settle zero or more")
    kinds = [args.only] if args.only else list(KINDS)
    with tempfile.TemporaryDirectory(prefix="jetraft-bench-idle-") as tmp:
        results = {kind: measure_kind(kind, Path(tmp) / kind, args) for kind in kinds}
    print(f"5-server clusters (zones a/a/b/b/c), {args.streams} R3 file streams of one message, "
          f"{args.seconds:g} s of quiet measured after {args.settle:g} s\n")
    print(table(ROWS, results, kinds))
    for kind in kinds:
        print(f"\n{kind}:")
        for line in results[kind].raw + [f"ERROR {e}" for e in results[kind].errors]:
            print(f"  {line}")
    return 1 if any(r.errors for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
