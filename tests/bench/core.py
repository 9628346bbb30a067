"""Core NATS benchmark: jetraft-server next to nats-server, measured with nats-py.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.core [--messages N] [--requests N]

Both servers run side by side in this one process's lifetime, with the same
configuration except ports.  For each server it measures
  * pub/sub throughput: one publisher, one subscriber, N messages of 128 bytes,
    counted as received at the subscriber (timer stops at the last message);
  * request/reply latency: one responder, sequential requests, p50 and p99;
and prints a table with the ratio jetraft / nats-server.  Every run is bounded by
--deadline seconds; a run that overruns is aborted and reported as such.
Absolute numbers on a shared machine are noise; the ratio is the result.  nats-py
itself tops out at some tens of thousands of messages a second, so the throughput
row can be client-bound; the server-CPU row (CPU seconds the server process spent
per 100k messages of the pub/sub run) still compares the servers then.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nats
from servers import KINDS, RunningServer, ServerStartError, start_server

PAYLOAD_SIZE = 128
CONFIG = 'max_pending: 268435456\nwrite_deadline: "30s"'


@dataclass
class Result:
    """One measurement: a value, or why there is none."""

    value: float | None = None
    error: str | None = None

    def cell(self, fmt: str) -> str:
        """The table cell: the formatted value, or the error."""
        return fmt.format(self.value) if self.value is not None else f"({self.error})"


class Overrun(Exception):
    """A run went past its deadline."""


def check(deadline_at: float) -> float:
    """Seconds left before ``deadline_at`` (monotonic); Overrun when none are."""
    left = deadline_at - time.monotonic()
    if left <= 0:
        raise Overrun
    return left


async def bounded(run, deadline: float, progress: dict) -> Result:
    """Await ``run(deadline_at)``, which checks the deadline itself, and return its value.

    A cancellation-based timeout backs it up (nats-py may swallow a cancellation).
    """
    try:
        return Result(await asyncio.wait_for(run(time.monotonic() + deadline), deadline + 10))
    except (Overrun, asyncio.TimeoutError):
        return Result(error=f"aborted after {deadline:g}s, {progress.get('done', 0)} done")
    except Exception as e:  # a broken server must not stop the other's report
        return Result(error=f"{type(e).__name__}: {e}"[:120])


async def throughput(url: str, messages: int, progress: dict, deadline_at: float) -> float:
    """Messages per second received by one subscriber from one publisher."""
    sub_nc = await nats.connect(url, allow_reconnect=False)
    pub_nc = await nats.connect(url, allow_reconnect=False)
    try:
        done = asyncio.Event()

        async def on_msg(_msg):
            progress["done"] += 1
            if progress["done"] == messages:
                done.set()

        await sub_nc.subscribe("bench.core", cb=on_msg, pending_msgs_limit=messages + 1,
                               pending_bytes_limit=-1)
        await sub_nc.flush()
        await sub_nc.flush()
        payload = b"x" * PAYLOAD_SIZE
        started = time.perf_counter()
        for i in range(messages):
            if i % 1000 == 0:
                check(deadline_at)
            await pub_nc.publish("bench.core", payload)
        await pub_nc.flush(timeout=check(deadline_at))
        try:
            await asyncio.wait_for(done.wait(), check(deadline_at))
        except asyncio.TimeoutError:
            raise Overrun from None
        return messages / (time.perf_counter() - started)
    finally:
        await pub_nc.close()
        await sub_nc.close()


async def latency(url: str, requests: int, progress: dict, deadline_at: float) -> list[float]:
    """Round-trip times in milliseconds of sequential requests to one responder."""
    responder = await nats.connect(url, allow_reconnect=False)
    requester = await nats.connect(url, allow_reconnect=False)
    try:

        async def echo(msg):
            await msg.respond(msg.data)

        await responder.subscribe("bench.echo", cb=echo)
        await responder.flush()
        await responder.flush()
        payload = b"x" * PAYLOAD_SIZE
        for _ in range(20):  # warm-up
            await requester.request("bench.echo", payload, timeout=5)
        samples = []
        for _ in range(requests):
            check(deadline_at)
            t0 = time.perf_counter()
            await requester.request("bench.echo", payload, timeout=5)
            samples.append((time.perf_counter() - t0) * 1000)
            progress["done"] += 1
        return samples
    finally:
        await requester.close()
        await responder.close()


def percentile(samples: list[float], pct: int) -> float:
    """The pct-th percentile of samples (inclusive method)."""
    return statistics.quantiles(samples, n=100, method="inclusive")[pct - 1]


def cpu_seconds(pid: int) -> float | None:
    """User+system CPU seconds a process has used (Linux /proc), or None if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(server: RunningServer, args) -> dict[str, Result]:
    """All measurements against one server."""
    progress = {"done": 0}
    run = functools.partial(throughput, server.url, args.messages, progress)
    cpu_before = cpu_seconds(server.proc.pid)
    results = {"throughput": await bounded(run, args.deadline, progress)}
    cpu_after = cpu_seconds(server.proc.pid)
    if results["throughput"].value is None or cpu_before is None or cpu_after is None:
        results["cpu"] = Result(error=results["throughput"].error or "unknown")
    else:
        results["cpu"] = Result((cpu_after - cpu_before) * 100_000 / args.messages)
    progress = {"done": 0}
    run = functools.partial(latency, server.url, args.requests, progress)
    samples = await bounded(run, args.deadline, progress)
    for pct in (50, 99):
        results[f"p{pct}"] = (Result(percentile(samples.value, pct)) if samples.value
                              else Result(error=samples.error))
    return results


ROWS = [
    ("throughput", f"pub/sub throughput ({PAYLOAD_SIZE} B), msg/s", "{:,.0f}", "higher"),
    ("cpu", "server CPU for pub/sub, s per 100k msgs", "{:.3f}", "lower"),
    ("p50", "request/reply latency p50, ms", "{:.3f}", "lower"),
    ("p99", "request/reply latency p99, ms", "{:.3f}", "lower"),
]


def table(results: dict[str, dict[str, Result]]) -> str:
    """Format results as a table with the ratio jetraft / nats-server."""
    header = ["metric", "nats-server", "jetraft", "jetraft/nats-server"]
    lines = []
    for key, label, fmt, better in ROWS:
        ref, ours = results["nats-server"][key], results["jetraft"][key]
        ratio = (f"{ours.value / ref.value:.2f} ({better} is better)"
                 if ours.value is not None and ref.value else "n/a")
        lines.append([label, ref.cell(fmt), ours.cell(fmt), ratio])
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in [header, *lines])


def main(argv: list[str] | None = None) -> int:
    """Start both servers, measure each, print the table; exit 1 if anything failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--messages", type=int, default=200_000, help="pub/sub messages (default 200000)")
    add("--requests", type=int, default=2_000, help="sequential requests (default 2000)")
    add("--deadline", type=float, default=120.0, help="seconds allowed per run (default 120)")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.requests < 2:
        parser.error("need --messages >= 1 and --requests >= 2")

    with tempfile.TemporaryDirectory(prefix="jetraft-bench-") as tmp:
        running: dict[str, RunningServer] = {}
        results: dict[str, dict[str, Result]] = {}
        try:
            for kind in KINDS:
                try:
                    running[kind] = start_server(kind, Path(tmp) / kind, CONFIG)
                except ServerStartError as e:
                    print(f"{kind} did not start:\n{str(e)[-3000:]}\n", file=sys.stderr)
                    results[kind] = {key: Result(error="did not start") for key, *_ in ROWS}
            for kind, server in running.items():
                print(f"measuring {kind} ({args.messages} messages, {args.requests} requests)...",
                      file=sys.stderr)
                results[kind] = asyncio.run(measure(server, args))
                if not server.alive():
                    print(f"{kind} exited during the run:\n{server.output()[-3000:]}", file=sys.stderr)
        finally:
            for server in running.values():
                server.stop()
    failed = any(r.error for per_server in results.values() for r in per_server.values())
    print(table(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
