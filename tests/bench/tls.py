"""TLS benchmark: R3 sync publish over TLS (clients and routes), a 3-server jetraft cluster
next to a 3-server nats-server cluster, measured with nats-py.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.tls [--quick]
        [--only jetraft|nats-server] [--sync-msgs N] [--async-msgs N]
        [--no-plain]

Certificates come from tests/tls_support.py (a throwaway CA; EC P-256 keys). Each kind gets
fresh clusters (tests/cluster.py): n1..n3 with JetStream, an fsync before every
acknowledgement (jetraft's default; nats-server with ``sync_interval: always``), and

  * TLS: a top-level ``tls`` block (clients must speak TLS) and ``cluster { tls }`` (every
    route TLS, certificates verified both ways);
  * plain: the same cluster without TLS (skipped with --no-plain), so that the table also
    shows what TLS costs each server.

One R3 file stream is made; a client connected to a server that is not the stream's leader
(every publish crosses a TLS route) measures, in this order:
  * sync publish: 128-byte messages, each awaiting its ack: msg/s, p50 and p99 latency;
  * async publish: 128-byte messages with up to --window (256) acks outstanding: msg/s.

The table gives ratios that read the same way: jetraft/nats-server for rates and
nats-server/jetraft for times, so above 1 means jetraft is better. Absolute numbers on a
shared machine are noise; the ratio is the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path

import nats
from cluster import Cluster
from tests.bench.cluster_bench import BenchCluster, Results, log, table
from nats.js.api import StorageType
from servers import KINDS
from tls_support import PKI, client_context, make_pki

PAYLOAD = b"x" * 128
STREAM, SUBJECT = "BENCH", "bench.tls"
SETTLE_DEADLINE = 90.0



def tls_block(pki: PKI, indent: str = "") -> str:
    return (f"{indent}tls {{\n"
            f"{indent}  cert_file: {json.dumps(str(pki.server.cert))}\n"
            f"{indent}  key_file: {json.dumps(str(pki.server.key))}\n"
            f"{indent}  ca_file: {json.dumps(str(pki.ca))}\n"
            f"{indent}}}")




async def connect(url: str, ctx: ssl.SSLContext | None):
    options = {"tls": ctx} if ctx is not None else {}
    return await nats.connect(url, allow_reconnect=False, connect_timeout=5, max_reconnect_attempts=0, **options)


async def settled(js) -> object:
    """Stream info once a leader and both other replicas are current. Raises after the deadline."""
    until = time.monotonic() + SETTLE_DEADLINE
    last = None
    while time.monotonic() < until:
        try:
            info = await asyncio.wait_for(js.stream_info(STREAM), 3)
        except Exception:  # noqa: BLE001 - leaderless for now
            info = None
        if info is not None:
            last = info
            cl = info.cluster
            if cl and cl.leader and len(cl.replicas or []) == 2 and all(r.current and not r.lag for r in cl.replicas):
                return info
        await asyncio.sleep(0.1)
    raise TimeoutError(f"replicas not all current after {SETTLE_DEADLINE:g}s; last {last}")


async def measure(c: Cluster, ctx: ssl.SSLContext | None, args, res: Results, tag: str) -> None:
    urls = {name: (s.url.replace("nats://", "tls://") if ctx else s.url) for name, s in c.servers.items()}
    nc = await connect(urls["n1"], ctx)
    try:
        js = nc.jetstream(timeout=5)
        until = time.monotonic() + 90
        while True:
            try:
                await js.add_stream(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE, num_replicas=3)
                break
            except Exception as e:  # noqa: BLE001 - the meta group is forming
                if time.monotonic() > until:
                    raise RuntimeError(f"stream not created in 90 s: {e}") from e
                await asyncio.sleep(0.25)
        info = await settled(js)
    finally:
        await nc.close()
    via = next(n for n in urls if n != info.cluster.leader)
    nc = await connect(urls[via], ctx)
    try:
        js = nc.jetstream(timeout=10)
        for _ in range(20):  # warm-up (connections, caches)
            await js.publish(SUBJECT, PAYLOAD)
        lat = []
        started = time.perf_counter()
        for _ in range(args.sync_msgs):
            t = time.perf_counter()
            await js.publish(SUBJECT, PAYLOAD, timeout=10)
            lat.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - started
        lat.sort()
        res.values[f"{tag}_sync_rate"] = args.sync_msgs / elapsed
        res.values[f"{tag}_sync_p50"] = lat[len(lat) // 2] * 1e3
        res.values[f"{tag}_sync_p99"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3
        res.raw.append(f"{tag}: sync publish {args.sync_msgs} msgs in {elapsed:.2f} s via {via} (leader "
                       f"{info.cluster.leader}); p50 {lat[len(lat) // 2] * 1e3:.2f} ms, max {lat[-1] * 1e3:.1f} ms")
        ajs = nc.jetstream(timeout=10, publish_async_max_pending=args.window)
        started = time.perf_counter()
        futures = [await ajs.publish_async(SUBJECT, PAYLOAD, wait_stall=10) for _ in range(args.async_msgs)]
        acks = await asyncio.wait_for(asyncio.gather(*futures), 120)
        elapsed = time.perf_counter() - started
        seqs = [a.seq for a in acks]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            res.errors.append(f"{tag}: async acks out of sequence")
        res.values[f"{tag}_async_rate"] = len(acks) / elapsed
        res.raw.append(f"{tag}: async publish {len(acks)} msgs (window {args.window}) in {elapsed:.2f} s")
    finally:
        await nc.close()


def measure_kind(kind: str, workdir: Path, pki: PKI, args, tag: str) -> Results:
    res = Results()
    tls = tag == "tls"
    log(f"{kind} ({tag}): starting 3 servers")
    c = BenchCluster(kind, workdir / tag, 3, jetstream=True, ready_timeout=30,
                     extra=tls_block(pki) if tls else "", cluster_extra=tls_block(pki, "  ") if tls else "")
    try:
        c.start()
        c.wait_formed(60)
        asyncio.run(asyncio.wait_for(measure(c, client_context(pki) if tls else None, args, res, tag), 600))
    except Exception as e:  # noqa: BLE001 - a failed run is a result
        res.fail(f"{tag} run", e)
    finally:
        crashed = [n for n, s in c.servers.items() if not s.alive()]
        if crashed:
            res.errors.append(f"{tag}: servers exited on their own: {crashed}")
            for n in crashed:
                log(f"{n} output:\n{c.servers[n].output()[-2000:]}")
        c.stop()
    return res


ROWS = [  # key, label, "rate" or "time", format
    ("tls_sync_rate", "TLS: R3 sync publish (128 B, await each ack), msg/s", "rate", "{:,.0f}"),
    ("tls_sync_p50", "TLS:   sync publish latency p50, ms", "time", "{:.2f}"),
    ("tls_sync_p99", "TLS:   sync publish latency p99, ms", "time", "{:.2f}"),
    ("tls_async_rate", "TLS: R3 async publish (window of acks), msg/s", "rate", "{:,.0f}"),
    ("plain_sync_rate", "plain: R3 sync publish, msg/s", "rate", "{:,.0f}"),
    ("plain_sync_p50", "plain:   sync publish latency p50, ms", "time", "{:.2f}"),
    ("plain_async_rate", "plain: R3 async publish, msg/s", "rate", "{:,.0f}"),
    ("tls_cost_sync", "TLS sync rate / plain sync rate (same server)", "rate", "{:.2f}"),
]



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--sync-msgs", type=int, default=2_000, help="sync publishes (default 2000)")
    add("--async-msgs", type=int, default=5_000, help="async publishes (default 5000)")
    add("--window", type=int, default=256, help="outstanding async publishes (default 256)")
    add("--no-plain", action="store_true", help="measure over TLS only")
    add("--quick", action="store_true", help="smoke run: 200 sync / 500 async")
    add("--only", choices=KINDS, help="measure one kind only (no ratio)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sync_msgs, args.async_msgs = 200, 500
    if min(args.sync_msgs, args.async_msgs, args.window) < 1:
        parser.error("counts must be above zero")
    kinds = [args.only] if args.only else list(KINDS)
    tags = ["tls"] if args.no_plain else ["tls", "plain"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jetraft-bench-tls-") as tmp:
        pki = make_pki(Path(tmp) / "pki")
        results: dict[str, Results] = {}
        for kind in kinds:
            res = Results()
            for tag in tags:  # TLS and plain clusters one after the other, per kind
                one = measure_kind(kind, Path(tmp) / kind, pki, args, tag)
                res.values.update(one.values)
                res.raw += one.raw
                res.errors += one.errors
            tls, plain = res.values.get("tls_sync_rate"), res.values.get("plain_sync_rate")
            if tls and plain:
                res.values["tls_cost_sync"] = tls / plain
            results[kind] = res
    print(f"3-server clusters, R3 file stream, fsync before each ack, TLS 1.3 (EC P-256) on client "
          f"connections and routes; {args.sync_msgs} sync / {args.async_msgs} async msgs; "
          f"{time.monotonic() - started:.0f} s in all\n")
    print(table(ROWS, results, kinds))
    for kind in kinds:
        print(f"\n{kind}:")
        for line in results[kind].raw:
            print(f"  {line}")
        for line in results[kind].errors:
            print(f"  ERROR {line}")
    return 1 if any(r.errors for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
