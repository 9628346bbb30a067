"""/healthz on a JetStream cluster: jetraft-server next to nats-server.

Run from the project root::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.healthz
        [--streams 10,100] [--messages 10000] [--requests 200] [--only KIND]

For each server kind a three-server cluster is started; for each count S it holds S R3
streams (one message each) plus one R3 stream of ``--messages`` messages, and the bench
times ``--requests`` sequential GETs of ``/healthz`` (every check: meta layer, every stream
and consumer replica on the server) and of ``/healthz?js-server-only=true`` (no JetStream
check: the cost of the HTTP round trip alone) on a follower of the meta group. A load
balancer polls /healthz, so its cost must grow with the replicas on the server and never
with the messages. Absolute numbers on a shared machine are noise; the ratio jetraft /
nats-server of the same run is the result. Not run by CI; asserts nothing.
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
import nats.js.errors
from cluster import Cluster
from servers import KINDS


def timed(server, path: str, n: int) -> tuple[float, int]:
    """Mean ms of ``n`` GETs of ``path``, and how many did not answer 200."""
    times, bad = [], 0
    for _ in range(n):
        t = time.perf_counter()
        status, _ = server.http_get(path)
        times.append((time.perf_counter() - t) * 1000)
        bad += status != 200
    return statistics.mean(times), bad


async def add_streams(url: str, first: int, last: int, big: int | None) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    for i in range(first, last):
        for _attempt in range(100):
            try:
                await js.add_stream(name=f"S{i}", subjects=[f"s{i}.>"], num_replicas=3)
                break
            except nats.js.errors.APIError:
                await asyncio.sleep(0.2)
        await js.publish(f"s{i}.x", b"x")
    if big:
        await js.add_stream(name="BIG", subjects=["big.>"], num_replicas=3)
        acks = [await js.publish_async("big.x", b"m" * 128) for _ in range(big)]
        await asyncio.gather(*acks)
    await nc.close()


def wait_healthy(c: Cluster, deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if all(s.http_get("/healthz")[0] == 200 for s in c.servers.values()):
            return
        time.sleep(0.2)
    raise RuntimeError("the cluster did not become healthy")


def bench(kind: str, workdir: Path, sizes: list[int], messages: int, requests: int) -> list[tuple]:
    rows = []
    with Cluster(kind, workdir, 3, jetstream=True) as c:
        c.start()
        c.wait_formed()
        wait_healthy(c)
        done = 0
        for i, size in enumerate(sizes):
            asyncio.run(add_streams(c.servers["n1"].url, done, size, messages if i == 0 else None))
            done = size
            wait_healthy(c)
            leader = c.servers["n1"].monitor("/jsz")["meta_cluster"].get("leader")
            follower = next(s for n, s in c.servers.items() if n != leader)
            full, bad = timed(follower, "/healthz", requests)
            base, _ = timed(follower, "/healthz?js-server-only=true", requests)
            rows.append((kind, size + 1, full, base, bad))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="10,100")
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--only", choices=KINDS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.streams.split(",")]
    results: dict[tuple[str, int], tuple[float, float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-healthz-") as tmp:
        for kind in [args.only] if args.only else KINDS:
            for row in bench(kind, Path(tmp) / kind, sizes, args.messages, args.requests):
                results[(row[0], row[1])] = row[2:]
    print(f"{'kind':<12}{'streams':>8}{'healthz ms':>12}{'js-server-only ms':>19}{'non-200':>9}")
    for (kind, n), (full, base, bad) in sorted(results.items()):
        print(f"{kind:<12}{n:>8}{full:>12.2f}{base:>19.2f}{bad:>9}")
    for n in sorted({n for _k, n in results}):
        a, b = results.get(("jetraft", n)), results.get(("nats-server", n))
        if a and b:
            print(f"ratio jetraft/nats-server, {n} streams: /healthz {a[0] / b[0]:.2f}, "
                  f"js-server-only {a[1] / b[1]:.2f}, JetStream part (healthz - js-server-only) "
                  f"{a[0] - a[1]:.2f} ms against {b[0] - b[1]:.2f} ms")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
