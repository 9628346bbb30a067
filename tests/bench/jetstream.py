"""JetStream benchmark: jetraft-server next to nats-server, measured with nats-py.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.jetstream [--messages N]
        [--seconds S] [--only jetraft|nats-server]

Both servers run JetStream with a file store, R1, and an fsync before every
acknowledgement (jetraft's default; nats-server with ``sync_interval: always``), so the
comparison is like for like.  For each server it measures, on a fresh stream each time,
  * sync publish: 128-byte messages, each publish awaits its ack before the next;
  * async publish: 128-byte messages with up to --window (256) acks outstanding;
  * pull consume: a durable pull consumer (explicit ack) fetching batches of --batch
    (100) from a stream pre-filled with the same messages, each message acked;
and prints a table with the ratio jetraft / nats-server.  Each run stops at --messages
or after --seconds, whichever comes first (the rate counts what was done); a run that
goes past its deadline by more than a few seconds is aborted and reported as such.
Absolute numbers on a shared machine are noise; the ratio is the result.  nats-py
itself is the ceiling of the async and consume rows on a fast server.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.js.api import AckPolicy, StorageType
from servers import KINDS, RunningServer, ServerStartError, start_server

PAYLOAD = b"x" * 128
STREAM, SUBJECT = "BENCH", "bench.js"


def js_config(kind: str, store_dir: Path) -> str:
    """JetStream with a file store; nats-server made to fsync before every ack."""
    sync = ", sync_interval: always" if kind == "nats-server" else ""
    return f'jetstream {{ store_dir: "{store_dir}"{sync} }}'


@dataclass
class Result:
    """One measurement: msg/s and how many messages it counted, or why there is none."""

    rate: float | None = None
    count: int = 0
    error: str | None = None

    def cell(self) -> str:
        if self.rate is None:
            return f"({self.error})"
        return f"{self.rate:,.0f} ({self.count:,} msgs)"


class Budget:
    """--messages and --seconds: how many a run may still do and until when."""

    def __init__(self, messages: int, seconds: float):
        self.messages = messages
        self.until = time.monotonic() + seconds

    def more(self, done: int) -> bool:
        return done < self.messages and time.monotonic() < self.until


async def fresh_stream(js) -> None:
    """Delete and create the bench stream (file storage, R1)."""
    try:
        await js.delete_stream(STREAM)
    except nats.js.errors.NotFoundError:
        pass
    await js.add_stream(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE, num_replicas=1)


async def sync_publish(js, budget: Budget) -> tuple[int, float]:
    """Publish one at a time, awaiting each ack; returns (acked, seconds)."""
    done = 0
    started = time.perf_counter()
    while budget.more(done):
        await js.publish(SUBJECT, PAYLOAD, timeout=10)
        done += 1
    return done, time.perf_counter() - started


async def async_publish(js, budget: Budget) -> tuple[int, float]:
    """Publish with up to --window acks outstanding (nats-py publish_async); returns
    (acked, seconds) once every outstanding ack is in."""
    futures = []
    started = time.perf_counter()
    while budget.more(len(futures)):
        futures.append(await js.publish_async(SUBJECT, PAYLOAD, wait_stall=10))
    acks = await asyncio.gather(*futures)
    elapsed = time.perf_counter() - started
    seqs = [a.seq for a in acks]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "acks out of sequence"
    return len(acks), elapsed


async def pull_consume(nc, js, budget: Budget, batch: int) -> tuple[int, float]:
    """Fill the stream (async publish), then fetch it in batches with a durable pull
    consumer, acking each message; returns (consumed, seconds of consuming)."""
    filled, _ = await async_publish(js, budget)
    sub = await js.pull_subscribe(SUBJECT, durable="bench", stream=STREAM,
                                  config=nats.js.api.ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                                    max_ack_pending=-1))
    done = 0
    started = time.perf_counter()
    while done < filled:
        for msg in await sub.fetch(min(batch, filled - done), timeout=10):
            await msg.ack()
            done += 1
    elapsed = time.perf_counter() - started
    await nc.flush(timeout=10)  # the acks reached the server
    return done, elapsed


async def measure(server: RunningServer, args) -> dict[str, Result]:
    """Every measurement against one server, each on a fresh stream."""
    nc = await nats.connect(server.url, allow_reconnect=False)
    js = nc.jetstream(timeout=10, publish_async_max_pending=args.window)
    runs = {
        "sync": lambda budget: sync_publish(js, budget),
        "async": lambda budget: async_publish(js, budget),
        "consume": lambda budget: pull_consume(nc, js, budget, args.batch),
    }
    results = {}
    try:
        for key, run in runs.items():
            try:
                await fresh_stream(js)
                budget = Budget(args.messages, args.seconds)
                count, elapsed = await asyncio.wait_for(run(budget), args.seconds * 2 + 20)
                results[key] = Result(count / elapsed, count)
            except asyncio.TimeoutError:
                results[key] = Result(error=f"aborted after {args.seconds * 2 + 20:g}s")
            except Exception as e:  # a broken server must not stop the other's report
                results[key] = Result(error=f"{type(e).__name__}: {e}"[:120])
    finally:
        await nc.close()
    return results


ROWS = [
    ("sync", f"sync publish ({len(PAYLOAD)} B, await each ack), msg/s"),
    ("async", f"async publish ({len(PAYLOAD)} B, window of acks), msg/s"),
    ("consume", "pull consume (fetch batch, ack each), msg/s"),
]


def table(results: dict[str, dict[str, Result]], kinds: list[str]) -> str:
    """Format results as a table, with the ratio jetraft / nats-server when both ran."""
    header = ["metric", *kinds]
    both = set(kinds) == set(KINDS)
    if both:
        header.append("jetraft/nats-server")
    lines = []
    for key, label in ROWS:
        row = [label, *(results[k][key].cell() for k in kinds)]
        if both:
            ref, ours = results["nats-server"][key], results["jetraft"][key]
            row.append(f"{ours.rate / ref.rate:.2f} (higher is better)"
                       if ours.rate is not None and ref.rate else "n/a")
        lines.append(row)
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in [header, *lines])


def main(argv: list[str] | None = None) -> int:
    """Start the servers, measure each, print the table; exit 1 if anything failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--messages", type=int, default=3_000, help="messages per run at most (default 3000)")
    add("--seconds", type=float, default=10.0, help="seconds per run at most (default 10)")
    add("--window", type=int, default=256, help="outstanding async publishes (default 256)")
    add("--batch", type=int, default=100, help="pull fetch batch size (default 100)")
    add("--only", choices=KINDS, help="measure one server only (no ratio)")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.seconds <= 0 or args.window < 1 or args.batch < 1:
        parser.error("need --messages, --seconds, --window and --batch above zero")
    kinds = [args.only] if args.only else list(KINDS)
    with tempfile.TemporaryDirectory(prefix="jetraft-bench-js-") as tmp:
        results = {kind: measure_kind(kind, Path(tmp) / kind, args) for kind in kinds}
    print(table(results, kinds))
    return 1 if any(r.error for per in results.values() for r in per.values()) else 0


def measure_kind(kind: str, workdir: Path, args) -> dict[str, Result]:
    """Start one server in ``workdir``, measure it, stop it (a failed start is a result)."""
    try:
        server = start_server(kind, workdir, js_config(kind, workdir / "store"))
    except ServerStartError as e:
        print(f"{kind} did not start:\n{str(e)[-3000:]}\n", file=sys.stderr)
        return {key: Result(error="did not start") for key, _ in ROWS}
    try:
        print(f"measuring {kind} (up to {args.messages} messages or {args.seconds:g} s per run)...",
              file=sys.stderr)
        results = asyncio.run(measure(server, args))
        if not server.alive():
            print(f"{kind} exited during the run:\n{server.output()[-3000:]}", file=sys.stderr)
        return results
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
