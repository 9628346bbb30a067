"""Where a jetraft server spends its CPU: a sampling profile (py-spy) of each server role
while a nats-py client drives one scenario, written as flame graphs and a table of the
hottest frames.

Run from the project root (``make profile`` runs every scenario the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.profile
        [--scenario sync|async|core|tls] [--messages N] [--rate HZ] [--out DIR] [--top N]

Scenarios (128-byte messages, fsync before every acknowledgement, jetraft's default):
  * ``sync``: an R3 file stream on four servers (zones a, b, c, a); a client on the server
    that holds no replica publishes N messages, each awaiting its ack;
  * ``async``: the same with up to 256 acks outstanding;
  * ``tls``: ``async`` with TLS on the client connection and on every route;
  * ``core``: one server, one publisher and one subscriber on a plain subject (no JetStream).

The roles profiled: ``leader`` (the stream's leader), ``follower`` (a replica that does not
lead), ``client-facing`` (the server the client is connected to, which holds no replica);
``server`` in the core scenario. py-spy samples each server process ``--rate`` times a
second (default 250) from just before the first publish to just after the last ack, and
writes for each role ``<out>/<scenario>-<role>.svg`` (a flame graph) and
``<out>/<scenario>-<role>.txt`` (collapsed stacks, one ``frame;frame;... count`` a line).

Printed: for each role the process's CPU seconds per 1,000 messages (from /proc, the
whole interval) and microseconds of CPU a message; then, from the samples in which a
thread held the GIL (py-spy ``--gil``: Python running, not waiting in epoll or an fsync),
the ``--top`` functions by self time and jetraft's own functions by total time
(``function (file)``, percent of those samples). py-spy needs ptrace rights
over the servers (root, or ``kernel.yama.ptrace_scope`` 0); without them the run says so
and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.js.api import StorageType
from servers import RunningServer, start_server
from tests.bench.cluster_bench import BenchCluster, log
from tests.bench.core import cpu_seconds
from tests.bench.tls import tls_block
from tls_support import client_context, make_pki

PAYLOAD = b"x" * 128
STREAM, SUBJECT = "PROFILE", "profile.js"
SCENARIOS = ("sync", "async", "tls", "core")
DEFAULT_MESSAGES = {"sync": 2_000, "async": 20_000, "tls": 20_000, "core": 200_000}
WINDOW = 256
#: Zones of the four servers: an R3 stream with unique_tag "az:" takes one of each zone,
#: so one server of zone a holds no replica.
TAGS = [["az:a"], ["az:b"], ["az:c"], ["az:a"]]
SETTLE_DEADLINE = 90.0


def py_spy() -> Path:
    """The py-spy of this interpreter's venv (or the PATH's). Raises SystemExit when absent."""
    here = Path(sys.executable).parent / "py-spy"
    found = here if here.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed: make setup installs it (the dev extra)")
    return Path(found)


@dataclass
class Sampler:
    """py-spy recording one process into collapsed stacks and a flame graph."""

    role: str
    pid: int
    out: Path
    rate: int
    procs: list[subprocess.Popen] = field(default_factory=list)
    cpu_before: float = 0.0
    cpu: float = 0.0

    def start(self, scenario: str) -> None:
        self.cpu_before = cpu_seconds(self.pid) or 0.0
        for fmt, suffix in (("raw", "txt"), ("flamegraph", "svg")):
            path = self.out / f"{scenario}-{self.role}.{suffix}"
            self.procs.append(subprocess.Popen(
                [str(py_spy()), "record", "--pid", str(self.pid), "--rate", str(self.rate), "--format", fmt,
                 "--output", str(path), "--nonblocking", "--gil", "--duration", "600"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True))

    def stop(self) -> None:
        """Stop the recordings (SIGINT: py-spy writes what it sampled) and wait for them."""
        self.cpu = (cpu_seconds(self.pid) or self.cpu_before) - self.cpu_before
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        for proc in self.procs:
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                _, err = proc.communicate()
            if proc.returncode not in (0, -signal.SIGINT) and b"Permission" in err:
                raise SystemExit(f"py-spy may not trace pid {self.pid}: {err.decode(errors='replace').strip()}")


def read_stacks(path: Path) -> collections.Counter[tuple[str, ...]]:
    """py-spy's raw output: ``frame;frame;... count`` per line (root first) as a Counter."""
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    if not path.exists():
        return stacks
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def top_frames(stacks: collections.Counter[tuple[str, ...]], top: int) -> tuple[list, list, int]:
    """(by self time, by total time, samples): each a list of (frame, percent of samples)."""
    total = sum(stacks.values())
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for stack, count in stacks.items():
        frames = [function_of(f) for f in stack if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    # total time: jetraft's own functions but the entry point, which is on every stack
    below = collections.Counter({f: n for f, n in inclusive.items()
                                 if "(jetraft/" in f and "(jetraft/cli/server.py)" not in f})
    share = (lambda c: [(f, 100.0 * n / total) for f, n in c.most_common(top)]) if total else (lambda c: [])
    return share(own), share(below), total


def function_of(frame: str) -> str:
    """``func (path/file.py:LINE)`` as py-spy names a frame, without the line: the function."""
    head, sep, tail = frame.rpartition(":")
    return f"{head})" if sep and tail.rstrip(")").isdigit() else frame


def report(scenario: str, samplers: list[Sampler], messages: int, elapsed: float, top: int) -> str:
    """The printed summary of one scenario."""
    lines = [f"== {scenario}: {messages:,} messages in {elapsed:.2f} s ({messages / elapsed:,.0f} msg/s)"]
    for s in samplers:
        own, inclusive, samples = top_frames(read_stacks(s.out / f"{scenario}-{s.role}.txt"), top)
        lines.append(f"-- {s.role} (pid {s.pid}): {s.cpu:.2f} CPU s, {1e6 * s.cpu / messages:.1f} µs CPU a "
                     f"message, {samples:,} samples holding the GIL; flame graph {s.out / f'{scenario}-{s.role}.svg'}")
        lines.append("   self time:")
        lines += [f"   {pct:5.1f}%  {frame}" for frame, pct in own]
        lines.append("   total time:")
        lines += [f"   {pct:5.1f}%  {frame}" for frame, pct in inclusive]
    return "\n".join(lines)


async def stream_roles(url: str, ctx: ssl.SSLContext | None) -> tuple[str, list[str]]:
    """Create the R3 stream (asked again while the meta group forms) and wait until every
    replica is current; (leader, followers)."""
    options = {"tls": ctx} if ctx else {}
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=5, **options)
    try:
        js = nc.jetstream(timeout=5)
        until = time.monotonic() + SETTLE_DEADLINE
        while True:
            try:
                await js.add_stream(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE, num_replicas=3)
                break
            except Exception as err:  # noqa: BLE001 - the meta group is forming
                if time.monotonic() > until:
                    raise RuntimeError(f"stream not created in {SETTLE_DEADLINE:g} s: {err}") from err
                await asyncio.sleep(0.25)
        while time.monotonic() < until:
            try:
                cl = (await js.stream_info(STREAM)).cluster
            except Exception:  # noqa: BLE001 - leaderless for now
                cl = None
            if cl and cl.leader and len(cl.replicas or []) == 2 and all(r.current and not r.lag for r in cl.replicas):
                return cl.leader, sorted(r.name for r in cl.replicas)
            await asyncio.sleep(0.1)
        raise TimeoutError(f"the stream's replicas were not all current within {SETTLE_DEADLINE:g} s")
    finally:
        await nc.close()


async def publish(url: str, ctx: ssl.SSLContext | None, scenario: str, messages: int,
                  start: Callable[[], object]) -> float:
    """Warm up, call ``start()``, publish ``messages`` as the scenario says; the seconds taken."""
    options = {"tls": ctx} if ctx else {}
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=5, **options)
    try:
        js = nc.jetstream(timeout=30, publish_async_max_pending=WINDOW)
        for _ in range(50):
            await js.publish(SUBJECT, PAYLOAD)
        start()
        began = time.perf_counter()
        if scenario == "sync":
            for _ in range(messages):
                await js.publish(SUBJECT, PAYLOAD, timeout=30)
        else:
            futures = [await js.publish_async(SUBJECT, PAYLOAD, wait_stall=30) for _ in range(messages)]
            await asyncio.wait_for(asyncio.gather(*futures), 300)
        return time.perf_counter() - began
    finally:
        await nc.close()


async def core_round(url: str, messages: int, start: Callable[[], object]) -> float:
    """One publisher, one subscriber on ``profile.core``; seconds until the last arrives."""
    sub_nc = await nats.connect(url, allow_reconnect=False)
    pub_nc = await nats.connect(url, allow_reconnect=False)
    try:
        done, seen = asyncio.Event(), [0]

        async def on_msg(_msg) -> None:
            seen[0] += 1
            if seen[0] == messages:
                done.set()

        await sub_nc.subscribe("profile.core", cb=on_msg, pending_msgs_limit=messages + 1, pending_bytes_limit=-1)
        await sub_nc.flush()
        start()
        began = time.perf_counter()
        for _ in range(messages):
            await pub_nc.publish("profile.core", PAYLOAD)
        await pub_nc.flush(timeout=60)
        await asyncio.wait_for(done.wait(), 300)
        return time.perf_counter() - began
    finally:
        await pub_nc.close()
        await sub_nc.close()


def run_core(workdir: Path, args) -> str:
    server: RunningServer = start_server("jetraft", workdir)
    samplers = [Sampler("server", server.proc.pid, args.out, args.rate)]
    try:
        elapsed = asyncio.run(core_round(server.url, args.messages, lambda: [s.start("core") for s in samplers]))
    finally:
        for s in samplers:
            s.stop()
        server.stop()
    return report("core", samplers, args.messages, elapsed, args.top)


def run_cluster(scenario: str, workdir: Path, args) -> str:
    tls = scenario == "tls"
    pki = make_pki(workdir / "pki") if tls else None
    c = BenchCluster("jetraft", workdir / "cluster", 4, jetstream=True, unique_tag="az:", tags=TAGS,
                     ready_timeout=30, extra=tls_block(pki) if tls else "",
                     cluster_extra=tls_block(pki, "  ") if tls else "")
    ctx = client_context(pki) if tls else None
    samplers: list[Sampler] = []
    try:
        c.start()
        c.wait_formed(60)
        urls = {n: (s.url.replace("nats://", "tls://") if tls else s.url) for n, s in c.servers.items()}
        leader, followers = asyncio.run(stream_roles(urls["n1"], ctx))
        facing = next(n for n in c.servers if n != leader and n not in followers)
        log(f"{scenario}: leader {leader}, follower {followers[0]}, client-facing {facing}")
        for role, name in (("leader", leader), ("follower", followers[0]), ("client-facing", facing)):
            samplers.append(Sampler(role, c.servers[name].proc.pid, args.out, args.rate))
        elapsed = asyncio.run(publish(urls[facing], ctx, "sync" if scenario == "sync" else "async", args.messages,
                                      lambda: [s.start(scenario) for s in samplers]))
    finally:
        for s in samplers:
            s.stop()
        c.stop()
    return report(scenario, samplers, args.messages, elapsed, args.top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--scenario", choices=SCENARIOS, action="append", help="one scenario (repeatable; default all)")
    add("--messages", type=int, help="messages per scenario (default: sync 2,000, async and tls 20,000, "
                                     "core 200,000)")
    add("--rate", type=int, default=250, help="samples a second (default 250)")
    add("--top", type=int, default=12, help="frames listed per table (default 12)")
    add("--out", type=Path, default=Path("build/profile"), help="where the graphs go (default build/profile)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    py_spy()
    chosen = args.scenario or list(SCENARIOS)
    count = args.messages
    with tempfile.TemporaryDirectory(prefix="jetraft-profile-") as tmp:
        for scenario in chosen:
            args.messages = count or DEFAULT_MESSAGES[scenario]
            workdir = Path(tmp) / scenario
            workdir.mkdir()
            text = run_core(workdir, args) if scenario == "core" else run_cluster(scenario, workdir, args)
            print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
