"""Streams with many subjects: jetraft-server next to nats-server, measured with nats-py.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.stream_subjects
        [--sizes 1000,3000,10000] [--deadline S] [--only KIND]
        [--cluster N]

For each server (JetStream, file store; standalone, or with --cluster N an N-server
cluster and R3 streams, every client on the first server) and each size N it creates one
stream with N subjects (raw ``$JS.API.STREAM.CREATE`` request; 90% literal subjects, 5%
ending in ``*``, 5% in ``>``, no two overlapping) while another client does back-to-back
request/reply through the same server, and reports:
  * the time from sending the create request to its answer;
  * the other client's round trips in flight during the create: how many, p50 and max
    (a server that blocks its event loop while it checks the subjects shows it here),
    and the p99 over the create and the 0.3 s before and 0.1 s after it;
then stops the server(s) (SIGTERM) and starts them again on the same store, and reports
the time until they accept connections and until every stream answers STREAM.INFO.
Every step has a deadline (--deadline, default 120 s); a step past it is reported as such
and the run goes on. Absolute numbers on a shared machine are noise; the ratio
jetraft / nats-server of the same run is the result. Not run by CI; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nats
from servers import KINDS, RunningServer, ServerStartError, start_server

PROBE_SUBJECT = "bench.probe"


def subjects(prefix: str, n: int) -> list[str]:
    """``n`` distinct, pairwise non-overlapping subjects under ``prefix``."""
    out = []
    for i in range(n):
        kind = i % 20
        out.append(f"{prefix}.{i}.{'*' if kind == 0 else '>' if kind == 1 else 'x'}")
    return out


def server_config(store_dir: Path) -> str:
    return f'jetstream {{ store_dir: "{store_dir}" }}\nmax_payload: 8MB'


@dataclass
class Probe:
    """Back-to-back request/reply from one client to a responder on another."""

    samples: list[tuple[float, float]] = field(default_factory=list)  # (sent at, seconds)
    errors: int = 0
    stop: bool = False

    async def run(self, requester) -> None:
        while not self.stop:
            t0 = time.perf_counter()
            try:
                await requester.request(PROBE_SUBJECT, b"x", timeout=30)
            except Exception:  # noqa: BLE001 - counted, the run goes on
                self.errors += 1
                continue
            self.samples.append((t0, time.perf_counter() - t0))

    def during(self, start: float, end: float) -> list[float]:
        """Round trips (ms) that were in flight at some moment of [start, end]."""
        return [rtt * 1000 for sent, rtt in self.samples if sent <= end and sent + rtt >= start]


def pct(values: list[float], p: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


async def create_with_probe(url: str, name: str, subs: list[str], deadline: float, replicas: int = 1) -> dict:
    """Create one stream while a probe runs; the create time and the probe's round trips."""
    admin = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    responder = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    requester = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        async def echo(msg):
            await msg.respond(msg.data)

        await responder.subscribe(PROBE_SUBJECT, cb=echo)
        await responder.flush()
        payload = json.dumps({"name": name, "subjects": subs, "storage": "file",
                              "num_replicas": replicas}).encode()
        probe = Probe()
        task = asyncio.create_task(probe.run(requester))
        await asyncio.sleep(0.3)            # the probe's steady state, before the create
        start = time.perf_counter()
        try:
            reply = await admin.request(f"$JS.API.STREAM.CREATE.{name}", payload, timeout=deadline)
        except asyncio.TimeoutError:
            result = {"error": f"no answer in {deadline:.0f} s"}
        else:
            end = time.perf_counter()
            body = json.loads(reply.data)
            if "error" in body:
                result = {"error": f"refused: {body['error']}"}
            else:
                result = {"create": end - start, "window": (start, end)}
        await asyncio.sleep(0.1)
        probe.stop = True
        await asyncio.wait_for(task, 60)
        if "window" in result:
            start, end = result.pop("window")
            rtts = probe.during(start, end)
            around = probe.during(start - 0.3, end + 0.1)
            result.update(n=len(rtts), p50=pct(rtts, 50), max=max(rtts), p99=pct(around, 99),
                          n_around=len(around))
        result["probe_errors"] = probe.errors
        return result
    finally:
        for nc in (requester, responder, admin):
            await nc.close()


async def streams_answer(url: str, names: list[str], deadline_at: float) -> float | None:
    """Poll STREAM.INFO of every stream until each answers without error; the time it took."""
    t0 = time.perf_counter()
    pending = list(names)
    last: object = None
    while pending and time.monotonic() < deadline_at:
        try:
            nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0,
                                    connect_timeout=2)
        except Exception:  # noqa: BLE001 - not up yet
            await asyncio.sleep(0.05)
            continue
        try:
            while pending and time.monotonic() < deadline_at:
                try:
                    reply = await nc.request(f"$JS.API.STREAM.INFO.{pending[0]}", b"",
                                             timeout=max(0.1, min(5.0, deadline_at - time.monotonic())))
                    last = json.loads(reply.data).get("error")
                    if last is None:
                        pending.pop(0)
                        continue
                except Exception as exc:  # noqa: BLE001 - JetStream not ready yet
                    last = exc
                await asyncio.sleep(0.05)
        finally:
            await nc.close()
    if pending:
        print(f"streams not answering INFO: {pending}; last: {last!r}", file=sys.stderr)
    return None if pending else time.perf_counter() - t0


class Standalone:
    """One server on a store under ``workdir``."""

    def __init__(self, kind: str, workdir: Path, args) -> None:
        self.kind, self.workdir, self.args = kind, workdir, args
        self.extra = server_config(workdir / "store")
        self.server: RunningServer | None = None
        self.starts = 0
        self.replicas = 1

    def start(self, ready_timeout: float = 15.0) -> None:
        self.starts += 1
        self.server = start_server(self.kind, self.workdir, self.extra, name=f"{self.kind}-{self.starts}",
                                   ready_timeout=ready_timeout)

    @property
    def url(self) -> str:
        return self.server.url

    def alive(self) -> bool:
        return self.server.alive()

    def output(self) -> str:
        return self.server.output()

    def stop(self) -> None:
        self.server.stop(timeout=self.args.deadline)


class Clustered:
    """``--cluster N`` servers (tests/cluster.py); clients use the first one."""

    def __init__(self, kind: str, workdir: Path, args) -> None:
        from cluster import Cluster
        self.cluster = Cluster(kind, workdir, args.cluster, jetstream=True, extra="max_payload: 8MB",
                               ready_timeout=args.deadline)
        self.replicas = min(3, args.cluster)

    def start(self, ready_timeout: float = 15.0) -> None:
        self.cluster.start()
        self.cluster.wait_formed(timeout=ready_timeout + 15)

    @property
    def url(self) -> str:
        return next(iter(self.cluster.servers.values())).url

    def alive(self) -> bool:
        return all(s.alive() for s in self.cluster.servers.values())

    def output(self) -> str:
        return self.cluster.outputs()

    def stop(self) -> None:
        self.cluster.stop(timeout=self.cluster.ready_timeout)


async def jetstream_ready(url: str, deadline_at: float) -> bool:
    """Poll ``$JS.API.INFO`` until it answers without error (a cluster has a meta leader)."""
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        while time.monotonic() < deadline_at:
            try:
                reply = await nc.request("$JS.API.INFO", b"", timeout=2)
                if "error" not in json.loads(reply.data):
                    return True
            except Exception:  # noqa: BLE001 - not ready yet
                pass
            await asyncio.sleep(0.1)
        return False
    finally:
        await nc.close()


def measure_kind(kind: str, workdir: Path, args) -> dict:
    results: dict = {}
    target = Clustered(kind, workdir, args) if args.cluster else Standalone(kind, workdir, args)
    try:
        target.start()
        if not asyncio.run(jetstream_ready(target.url, time.monotonic() + args.deadline)):
            raise ServerStartError("JetStream not ready")
    except ServerStartError as exc:
        print(f"{kind} did not start:\n{str(exc)[-3000:]}", file=sys.stderr)
        target.stop()
        return {"error": "did not start"}
    names = []
    try:
        for n in args.sizes:
            name = f"S{n}"
            print(f"{kind}: creating {name} ({n:,} subjects)...", file=sys.stderr)
            res = asyncio.run(create_with_probe(target.url, name, subjects(f"s{n}", n), args.deadline,
                                                target.replicas))
            results[n] = res
            if "create" in res:
                names.append(name)
            if not target.alive():
                print(f"{kind} exited:\n{target.output()[-3000:]}", file=sys.stderr)
                return results
    finally:
        t0 = time.perf_counter()
        target.stop()
        results["stop"] = time.perf_counter() - t0
    print(f"{kind}: restarting with {len(names)} streams...", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        target.start(ready_timeout=args.deadline)
    except ServerStartError as exc:
        results["restart_error"] = str(exc).splitlines()[0]
        target.stop()
        return results
    try:
        results["listening"] = time.perf_counter() - t0
        waited = asyncio.run(streams_answer(target.url, names, time.monotonic() + args.deadline))
        results["restart"] = None if waited is None else results["listening"] + waited
    finally:
        target.stop()
    return results


def table(results: dict[str, dict], sizes: list[int]) -> str:
    kinds = [k for k in ("nats-server", "jetraft") if k in results]

    def cell(kind: str, value: float | None, fmt: str, err: str | None) -> str:
        return fmt.format(value) if value is not None else f"({err or 'n/a'})"

    header = ["measure", *kinds, "jetraft/nats-server"]
    lines = []
    for n in sizes:
        for key, label, fmt in (
            ("create", f"create, {n:,} subjects, s", "{:.3f}"),
            ("p50", "  other client during it: p50, ms", "{:.2f}"),
            ("max", "  other client during it: max, ms", "{:.2f}"),
            ("p99", "  other client p99, create -0.3/+0.1 s, ms", "{:.2f}"),
        ):
            vals, cells = {}, []
            for kind in kinds:
                res = results[kind].get(n, {}) if isinstance(results[kind], dict) else {}
                vals[kind] = res.get(key)
                extra = (f" (n={res['n']})" if key == "max" and "n" in res
                         else f" (n={res['n_around']})" if key == "p99" and "n_around" in res else "")
                cells.append(cell(kind, vals[kind], fmt, res.get("error") or results[kind].get("error"))
                             + extra)
            lines.append([label, *cells, _ratio(vals)])
    for key, label in (("stop", "stop (SIGTERM to exit), s"), ("listening", "restart: accepting connections, s"),
                       ("restart", "restart: every stream answers INFO, s")):
        vals = {kind: results[kind].get(key) for kind in kinds}
        cells = [cell(kind, vals[kind], "{:.3f}", results[kind].get("restart_error")) for kind in kinds]
        lines.append([label, *cells, _ratio(vals)])
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in [header, *lines])


def _ratio(vals: dict[str, float | None]) -> str:
    ours, ref = vals.get("jetraft"), vals.get("nats-server")
    if ours is None or not ref:
        return "n/a"
    return f"{ours / ref:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,3000,10000",
                        help="comma-separated subject counts, one stream each (default 1000,3000,10000)")
    parser.add_argument("--deadline", type=float, default=120.0,
                        help="seconds allowed per create / per restart (default 120)")
    parser.add_argument("--only", choices=KINDS, help="measure one server only")
    parser.add_argument("--cluster", type=int, default=0, metavar="N",
                        help="an N-server cluster (R3 streams) instead of one server")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    kinds = [args.only] if args.only else list(KINDS)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="jetraft-bench-subjects-") as tmp:
        for kind in kinds:
            results[kind] = measure_kind(kind, Path(tmp) / kind, args)
    print(table(results, args.sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
