"""JetStream cluster benchmark: a 5-server jetraft cluster next to a 5-server nats-server
cluster, an R3 file stream, measured with nats-py.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.cluster [--quick]
        [--only jetraft|nats-server] [--sync-msgs N] [--async-msgs N]
        [--rounds N] [--catchup-msgs N] [--big-msgs N] [--big-conns N]
        [--big-window N] [--big-deadline S] [--big-only]

Each kind gets its own fresh clusters (tests/cluster.py): n1..n5 in zones az:a, az:a, az:b,
az:b, az:c, JetStream with ``unique_tag: "az:"`` (so an R3 stream spans the three zones)
and an fsync before every acknowledgement (jetraft's default; nats-server with
``sync_interval: always`` in its jetstream block).  On the first cluster one R3 file
stream ``BENCH`` is made and, in this order, it measures:
  * sync publish: 128-byte messages, each awaiting its ack: msg/s, p50 and p99 latency;
  * async publish: 128-byte messages with up to --window (256) acks outstanding: msg/s;
  * failover: a client publishes continuously (each publish with a 0.25 s timeout,
    retried on any error) while the stream's leader is SIGKILLed; the time from the kill
    to the first acknowledgement of a publish sent after it.  --rounds (3) rounds, the
    killed server restarted and every replica current again between rounds; median, max;
  * catch-up: one non-leader replica SIGKILLed, --catchup-msgs (100,000) messages
    published (async, windowed), the replica restarted; the time from the restart to
    stream info showing that replica current with lag 0 (polled every 0.1 s).
Clients always connect to a server that is not the stream's leader (nor the stopped
replica), so every publish crosses a route and survives the kills.

Then that cluster is stopped and a second fresh one gets an R3 file stream ``BIG`` (a
fresh cluster, so that no other stream's history weighs on its restarts and its
directories hold this stream alone; --big-msgs 0 skips it, --big-only runs it alone):
  * big publish: --big-msgs (1,000,000; 20,000 with --quick) 128-byte messages over
    --big-conns (2) connections to servers other than the leader, each with --big-window
    (512) acks outstanding: msg/s from the first publish to the last ack.  (Against
    nats-server on a two-core machine two connections of 512 were the fastest setting in
    one process, 15,000-17,000 msg/s; one connection or more connections, or larger
    windows, were slower, and publishing processes gained only about 15%.)  Then every
    replica current again, unrated;
  * restart-to-current: one non-leader replica, which holds the whole history, stopped
    cleanly (SIGTERM) and started again; the time from the start to stream info showing
    that replica current with lag 0, online, and heard from by the leader since the start
    (``active`` shorter than the time since the start, so a view from before the stop
    does not count).  Below it: the time until that server's own ``/jsz`` counts every
    message of the stream;
  * new-replica-to-current: ``$JS.API.STREAM.PEER.REMOVE.BIG`` with ``{"peer": <name>}`` of a
    non-leader replica whose zone has a server outside the stream (so ``unique_tag`` can
    place a replacement); the time from the request to stream info listing a server that
    was not a replica before as current with lag 0.  Below it: the time until that
    server's ``/jsz`` counts every message;
  * disk per replica / stream bytes: once every replica is current after those two
    phases, for each replica the bytes (file sizes) of the stream's directory
    ``<store_dir>/jetstream/$G/streams/BIG`` plus its RAFT group's directory (jetraft:
    ``<store_dir>/jetstream/_raft/<dir>`` whose name or ``group`` file gives the group of
    stream info's ``cluster.raft_group``; nats-server: ``<store_dir>/jetstream/$SYS/_js_/<group>``,
    the system account's), divided by the stream's ``state.bytes``; the maximum over the
    replicas, and below it that maximum in MB;
  * RAFT log after the run: at the same moment, the bytes of the group's log (jetraft: the
    ``*.log`` segments of the group directory; nats-server: the group directory's
    ``msgs``), the maximum over the replicas, in MB.  The same sizes just after publishing
    are in the details.
Every wait of the big stream is bounded by --big-deadline (default 120 s plus 1 ms per
message) and reported as "timeout" when it runs out; progress is logged every 5 s.
Every phase is bounded in count and time; a phase that fails or overruns is reported as
such and the run goes on.

The table gives ratios that read the same way: jetraft/nats-server for rates and
nats-server/jetraft for times and sizes, so above 1 means jetraft is better.  Absolute
numbers on a shared machine are noise; the ratio is the result.  Acknowledged sequence
numbers are checked across the failovers and the big publish: a sequence acknowledged
twice means an acknowledged message was lost, and is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nats
from cluster import Cluster
from tests.bench.cluster_bench import BenchCluster, Results, log, table
from nats.js.api import StorageType
from servers import KINDS

PAYLOAD = b"x" * 128
STREAM, SUBJECT = "BENCH", "bench.cluster"
TAGS = [["az:a"], ["az:a"], ["az:b"], ["az:b"], ["az:c"]]
FAILOVER_TIMEOUT = 0.25  # seconds per publish while the leader is down
RECOVER_DEADLINE = 60.0  # seconds a failover round may wait for its first ack
SETTLE_DEADLINE = 90.0  # seconds to wait for every replica current again
CATCHUP_DEADLINE = 300.0  # seconds from restart to current
BIG_STREAM, BIG_SUBJECT = "BIG", "bench.big"


# ---------------------------------------------------------------------- helpers


async def connect(url: str):
    return await nats.connect(url, allow_reconnect=False, connect_timeout=5, max_reconnect_attempts=0)


async def info_of(js, stream: str = STREAM):
    """Stream info of ``stream``, or None on any error (leaderless, timeout, no responders)."""
    try:
        return await asyncio.wait_for(js.stream_info(stream), 3)
    except Exception:
        return None


def all_current(info, replicas: int = 3) -> bool:
    """A leader and every other replica online, current and without lag."""
    cl = info.cluster if info is not None else None
    if cl is None or not cl.leader or len(cl.replicas or []) != replicas - 1:
        return False
    return all(r.current and not r.offline and not r.lag for r in cl.replicas)


class Ticker:
    """A progress clock: ``due()`` is True at most once every ``every`` seconds."""

    def __init__(self, every: float = 5.0) -> None:
        self.every, self.next = every, time.monotonic() + every

    def due(self) -> bool:
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + self.every
        return True


async def settled(js, deadline: float, what: str, stream: str = STREAM):
    """Poll stream info until every replica is current; the info. Raises after deadline.
    Logs the replicas' state every 5 s while waiting."""
    last = None
    until = time.monotonic() + deadline
    ticker = Ticker()
    while time.monotonic() < until:
        info = await info_of(js, stream)
        if info is not None:
            last = info
            if all_current(info):
                return info
        if ticker.due():
            cl = last.cluster if last is not None else None
            log(f"    {what}: waiting for every replica current; leader {cl.leader if cl else '?'}, "
                f"replicas {[(r.name, r.current, r.lag) for r in cl.replicas or []] if cl else '?'}")
        await asyncio.sleep(0.1)
    cl = last.cluster if last is not None else None
    raise TimeoutError(f"{what}: replicas not all current after {deadline:g}s; last cluster info {cl}")


def other_server(c: Cluster, avoid: set[str]) -> str:
    """The first live server (by name) not in ``avoid``."""
    for name, server in c.servers.items():
        if name not in avoid and server.alive():
            return name
    raise RuntimeError(f"no live server outside {avoid}")


# ---------------------------------------------------------------------- phases


async def create_stream(c: Cluster, res: Results, stream: str = STREAM, subject: str = SUBJECT,
                        what: str = "stream") -> None:
    """Make an R3 file stream (retrying while the meta group forms), wait until it is current."""
    started = time.monotonic()
    nc = await connect(c.servers["n1"].url)
    try:
        js = nc.jetstream(timeout=5)
        until = time.monotonic() + 90
        while True:
            try:
                await js.add_stream(name=stream, subjects=[subject], storage=StorageType.FILE,
                                    num_replicas=3)
                break
            except Exception as e:
                if time.monotonic() > until:
                    raise RuntimeError(f"stream not created in 90 s: {type(e).__name__}: {e}") from e
                await asyncio.sleep(0.25)
        info = await settled(js, SETTLE_DEADLINE, "new stream", stream)
    finally:
        await nc.close()
    res.raw.append(f"{what} created and current in {time.monotonic() - started:.1f} s, "
                   f"leader {info.cluster.leader}, peers {peers_of(info)}")


def peers_of(info) -> list[str]:
    """The stream's replicas, leader included, sorted by name."""
    return sorted([info.cluster.leader, *(r.name for r in info.cluster.replicas or [])])


async def client_for(c: Cluster, avoid: set[str] = frozenset(), stream: str = STREAM):
    """(nc, info, server name): a connection to a server that is not the leader."""
    nc = await connect(c.servers["n1"].url)
    info = await settled(nc.jetstream(timeout=3), SETTLE_DEADLINE, "before connecting", stream)
    await nc.close()
    name = other_server(c, {info.cluster.leader, *avoid})
    nc = await connect(c.servers[name].url)
    return nc, info, name


async def sync_publish(c: Cluster, n: int, res: Results) -> None:
    nc, info, name = await client_for(c)
    try:
        js = nc.jetstream(timeout=10)
        lat = []
        started = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            await js.publish(SUBJECT, PAYLOAD, timeout=10)
            lat.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - started
    finally:
        await nc.close()
    lat.sort()
    res.values["sync_rate"] = n / elapsed
    res.values["sync_p50"] = lat[len(lat) // 2] * 1e3
    res.values["sync_p99"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3
    res.raw.append(f"sync publish: {n} msgs in {elapsed:.2f} s via {name} (leader "
                   f"{info.cluster.leader}); latency ms p50 {res.values['sync_p50']:.2f} "
                   f"p99 {res.values['sync_p99']:.2f} max {lat[-1] * 1e3:.1f}")


async def windowed(js, n: int, seconds: float) -> tuple[int, float]:
    """Publish up to ``n`` messages (or until ``seconds``) with the js window of acks
    outstanding; (acked, seconds) once every outstanding ack is in."""
    futures = []
    until = time.monotonic() + seconds
    started = time.perf_counter()
    while len(futures) < n and time.monotonic() < until:
        futures.append(await js.publish_async(SUBJECT, PAYLOAD, wait_stall=10))
    acks = await asyncio.wait_for(asyncio.gather(*futures), 60)
    elapsed = time.perf_counter() - started
    seqs = [a.seq for a in acks]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "acks out of sequence"
    return len(acks), elapsed


async def async_publish(c: Cluster, n: int, window: int, res: Results) -> None:
    nc, info, name = await client_for(c)
    try:
        js = nc.jetstream(timeout=10, publish_async_max_pending=window)
        done, elapsed = await windowed(js, n, 120)
    finally:
        await nc.close()
    res.values["async_rate"] = done / elapsed
    res.raw.append(f"async publish: {done} msgs (window {window}) in {elapsed:.2f} s via {name}"
                   + ("" if done == n else f" (stopped at 120 s of {n})"))


async def failover_round(c: Cluster, rnd: int, acked_seqs: dict[int, int], res: Results) -> float:
    """Kill the leader under a continuous publisher; seconds until an ack of a publish sent
    after the kill. Then restart the killed server and wait for every replica current."""
    nc, info, name = await client_for(c)
    leader = info.cluster.leader
    js = nc.jetstream(timeout=FAILOVER_TIMEOUT)
    state = {"kill_at": None, "first": None, "acked": 0, "stop": False}
    errors: dict[str, int] = {}
    steady = asyncio.Event()

    async def publisher() -> None:
        while not state["stop"]:
            t = time.monotonic()
            try:
                ack = await js.publish(SUBJECT, PAYLOAD, timeout=FAILOVER_TIMEOUT)
            except Exception as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                if not isinstance(e, (asyncio.TimeoutError, nats.errors.TimeoutError)):
                    await asyncio.sleep(0.005)  # no responders / 503 come back at once
                continue
            state["acked"] += 1
            acked_seqs[ack.seq] = acked_seqs.get(ack.seq, 0) + 1
            if state["acked"] >= 20:
                steady.set()
            if state["kill_at"] is not None and t >= state["kill_at"]:
                state["first"] = time.monotonic()
                return

    task = asyncio.create_task(publisher())
    try:
        await asyncio.wait_for(steady.wait(), 10)
        before = state["acked"]
        t0 = time.monotonic()
        c.kill(leader)  # synchronous: no publish starts between the signal and kill_at
        state["kill_at"] = time.monotonic()
        await asyncio.wait_for(task, RECOVER_DEADLINE)
        took = state["first"] - t0
    finally:
        state["stop"] = True
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    after = await info_of(js)
    new_leader = after.cluster.leader if after is not None and after.cluster else "?"
    res.raw.append(f"failover {rnd}: killed leader {leader} (client on {name}), first ack after "
                   f"{took:.3f} s, new leader {new_leader}; acked {before} before the kill; "
                   f"errors {errors or 'none'}")
    await nc.close()
    started = time.monotonic()
    await asyncio.to_thread(c.restart, leader)
    await asyncio.to_thread(c.wait_formed, 60)
    nc = await connect(c.servers[name].url)
    try:
        await settled(nc.jetstream(timeout=3), SETTLE_DEADLINE, f"after restarting {leader}")
    finally:
        await nc.close()
    res.raw.append(f"failover {rnd}: {leader} restarted, all replicas current after "
                   f"{time.monotonic() - started:.1f} s")
    return took


async def failover(c: Cluster, rounds: int, res: Results) -> None:
    times = []
    acked_seqs: dict[int, int] = {}
    try:
        for rnd in range(1, rounds + 1):
            times.append(await failover_round(c, rnd, acked_seqs, res))
    finally:
        reused = sum(1 for v in acked_seqs.values() if v > 1)
        res.raw.append(f"failover: {len(acked_seqs)} sequences acknowledged, "
                       f"{reused} acknowledged more than once (must be 0)")
        if reused:
            res.errors.append(f"failover: {reused} sequence numbers acknowledged twice "
                              "(acknowledged messages lost)")
        if times:
            res.values["fail_median"] = statistics.median(times)
            res.values["fail_max"] = max(times)


async def catchup(c: Cluster, n: int, window: int, res: Results) -> None:
    nc, info, _ = await client_for(c)
    await nc.close()
    leader = info.cluster.leader
    victim = sorted(r.name for r in info.cluster.replicas)[0]
    name = other_server(c, {leader, victim})
    nc = await connect(c.servers[name].url)
    try:
        js = nc.jetstream(timeout=3, publish_async_max_pending=window)
        c.kill(victim)
        log(f"  killed replica {victim}; publishing {n} messages via {name}")
        done, elapsed = await windowed(js, n, 240)
        res.values["catchup_pub"] = done / elapsed
        state = await info_of(js)
        last_seq = state.state.last_seq if state is not None else "?"
        res.raw.append(f"catch-up: {victim} killed (leader {leader}, client on {name}); "
                       f"published {done} msgs in {elapsed:.1f} s"
                       + ("" if done == n else f" (stopped at 240 s of {n})")
                       + f"; stream last_seq {last_seq}")
        log(f"  published {done} in {elapsed:.1f} s; restarting {victim}")
        t0 = time.monotonic()
        await asyncio.to_thread(c.restart, victim)
        ready = time.monotonic() - t0
        until = t0 + CATCHUP_DEADLINE
        peer = None
        polls = failed_polls = 0
        while time.monotonic() < until:
            polls += 1
            info = await info_of(js)
            if info is None or info.cluster is None:
                failed_polls += 1
            else:
                peer = next((r for r in info.cluster.replicas or [] if r.name == victim), peer)
                if peer is not None and peer.current and not peer.offline and not peer.lag:
                    break
            await asyncio.sleep(0.1)
        else:
            res.raw.append(f"catch-up: NOT current after {CATCHUP_DEADLINE:g} s; last seen "
                           f"{peer}; {polls} polls, {failed_polls} failed")
            raise TimeoutError(f"{victim} not current {CATCHUP_DEADLINE:g} s after restart "
                               f"(last seen {peer})")
        took = time.monotonic() - t0
        res.values["catchup"] = took
        try:
            local = c.servers[victim].monitor("/jsz").get("messages")
        except Exception as e:  # a cross-check only
            local = f"? ({type(e).__name__})"
        res.raw.append(f"catch-up: {victim} ready {ready:.2f} s after restart, current with lag 0 "
                       f"after {took:.2f} s ({polls} polls, {failed_polls} failed); its /jsz "
                       f"messages {local}, stream messages "
                       f"{info.state.messages if info.state else '?'}")
    finally:
        await nc.close()


# ---------------------------------------------------------------------- big stream


@dataclass
class BigRun:
    """What the big-stream phases hand each other: the cluster, the stream's group and the
    stream's message count once published."""

    c: Cluster
    args: argparse.Namespace
    res: Results
    group: str = ""
    messages: int = 0
    nbytes: int = 0


def big_deadline(args) -> float:
    """Seconds any one big-stream wait may take: --big-deadline, else 120 s plus 1 ms per message."""
    return args.big_deadline or 120.0 + args.big_msgs / 1000


async def watch_client(c: Cluster, avoid: set[str] = frozenset()):
    """(nc, js, server name): a connection to the first live server outside ``avoid``."""
    name = other_server(c, set(avoid))
    nc = await connect(c.servers[name].url)
    return nc, nc.jetstream(timeout=5), name


async def big_settled(c: Cluster, what: str, deadline: float = SETTLE_DEADLINE):
    """Stream info of BIG once every replica is current (asked of any live server)."""
    nc, js, _ = await watch_client(c)
    try:
        return await settled(js, deadline, what, BIG_STREAM)
    finally:
        await nc.close()


async def big_publish(run: BigRun) -> None:
    """--big-msgs messages over --big-conns connections (to servers other than the leader),
    each with --big-window acks outstanding; msg/s until every ack is in.  Each sequence
    number may be acknowledged once."""
    args, c, res = run.args, run.c, run.res
    n, deadline = args.big_msgs, big_deadline(args)
    info = await big_settled(c, "before publishing")
    run.group = info.cluster.raft_group or ""
    targets = [name for name in c.servers if name != info.cluster.leader]
    st = {"sent": 0, "acked": 0, "failed": 0, "twice": 0}
    errors: dict[str, int] = {}
    seen = bytearray(n + 1)

    def done(fut) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            st["failed"] += 1
            key = "cancelled" if exc is None else type(exc).__name__
            errors[key] = errors.get(key, 0) + 1
            return
        st["acked"] += 1
        seq = fut.result().seq
        if 0 < seq <= n:
            st["twice"] += seen[seq]
            seen[seq] = 1

    async def one(url: str, until: float) -> None:
        conn = await connect(url)
        try:
            pub = conn.jetstream(timeout=30, publish_async_max_pending=args.big_window)
            while st["sent"] < n and time.monotonic() < until:
                st["sent"] += 1
                (await pub.publish_async(BIG_SUBJECT, PAYLOAD, wait_stall=30)).add_done_callback(done)
            await asyncio.wait_for(pub.publish_async_completed(), 60)
        except Exception as e:  # counted; the other connections go on
            errors[f"{type(e).__name__} ({url})"] = errors.get(f"{type(e).__name__} ({url})", 0) + 1
        finally:
            await conn.close()

    log(f"  publishing {n:,} msgs over {args.big_conns} connection(s) x window {args.big_window} "
        f"to {targets[:args.big_conns]} (leader {info.cluster.leader}, at most {deadline:.0f} s)")
    started = time.perf_counter()
    until = time.monotonic() + deadline
    tasks = [asyncio.create_task(one(c.servers[targets[i % len(targets)]].url, until))
             for i in range(args.big_conns)]
    ticker = Ticker()
    while not all(t.done() for t in tasks):
        await asyncio.wait(tasks, timeout=0.5)
        if ticker.due():
            took = time.perf_counter() - started
            log(f"    {st['acked']:,}/{n:,} acked in {took:.0f} s ({st['acked'] / took:,.0f} msg/s), "
                f"{st['failed']} failed")
    elapsed = time.perf_counter() - started
    res.values["big_pub"] = st["acked"] / elapsed
    res.raw.append(f"big: published {st['acked']:,} of {n:,} msgs acknowledged in {elapsed:.1f} s "
                   f"({args.big_conns} connection(s) x window {args.big_window}); "
                   f"{st['failed']} failed, {st['sent'] - st['acked'] - st['failed']} unanswered; "
                   f"errors {errors or 'none'}")
    if st["twice"]:
        res.errors.append(f"big publish: {st['twice']} sequence numbers acknowledged twice")
    if st["acked"] < n:
        res.errors.append(f"big publish: {n - st['acked']} of {n} messages not acknowledged")


async def big_settle(run: BigRun) -> None:
    """Wait until every replica is current (bounded); note the stream's state."""
    started = time.monotonic()
    info = await big_settled(run.c, "after publishing", big_deadline(run.args))
    run.messages, run.nbytes = info.state.messages, info.state.bytes
    run.group = info.cluster.raft_group or run.group
    run.res.raw.append(f"big: every replica current {time.monotonic() - started:.1f} s after the "
                       f"last ack; stream {run.messages:,} msgs, {run.nbytes:,} bytes, group "
                       f"{run.group}, peers {peers_of(info)}")


def tree_bytes(path: Path, suffix: str = "") -> int:
    """Bytes (file sizes) of the files under ``path`` whose names end with ``suffix``; 0 when
    ``path`` does not exist. Files removed while walking are skipped."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            if f.endswith(suffix):
                try:
                    total += os.stat(os.path.join(root, f)).st_size
                except FileNotFoundError:
                    continue
    return total


def group_dir(kind: str, store: Path, group: str) -> Path | None:
    """The RAFT group's directory in a server's store, found by listing: jetraft
    ``jetstream/_raft/<dir>`` whose name ends with the group name or whose ``group`` file
    holds it; nats-server ``jetstream/<system account>/_js_/<group>``."""
    if kind == "jetraft":
        for d in sorted((store / "jetstream" / "_raft").glob("*")):
            try:
                if d.name.endswith(group) or (d / "group").read_text().strip() == group:
                    return d
            except OSError:
                continue
        return None
    return next(iter(sorted((store / "jetstream").glob(f"*/_js_/{group}"))), None)


def stream_disk(c: Cluster, name: str, group: str) -> tuple[int, int, int]:
    """(stream directory bytes, RAFT group directory bytes, RAFT log bytes) on server
    ``name``: jetraft's ``*.log`` segments, nats-server's ``msgs`` of the group directory."""
    store = c.store_dir(name)
    stream = tree_bytes(store / "jetstream" / "$G" / "streams" / BIG_STREAM)
    gdir = group_dir(c.kind, store, group)
    if gdir is None:
        return stream, 0, 0
    log_bytes = tree_bytes(gdir, ".log") if c.kind == "jetraft" else tree_bytes(gdir / "msgs")
    return stream, tree_bytes(gdir), log_bytes


def disk_report(run: BigRun, peers: list[str], when: str) -> tuple[float, int, int]:
    """Per-replica sizes into the raw lines; (max disk / stream bytes, max disk, max RAFT log)."""
    sizes = {name: stream_disk(run.c, name, run.group) for name in peers}
    others = {name: stream_disk(run.c, name, run.group) for name in run.c.members if name not in peers}
    mb = 1e6
    run.res.raw.append(f"big: disk {when} (stream dir + RAFT group dir, of which RAFT log), MB, "
                       f"stream bytes {run.nbytes / mb:.1f}: " + "; ".join(
                           f"{n} {s / mb:.1f} + {g / mb:.1f} ({lg / mb:.1f})" for n, (s, g, lg) in sizes.items()))
    left = {n: s + g for n, (s, g, _) in others.items() if s + g}
    if left:
        run.res.raw.append(f"big: {when}, servers without a replica still hold (MB): "
                           + ", ".join(f"{n} {b / mb:.1f}" for n, b in left.items()))
    disk = max(s + g for s, g, _ in sizes.values())
    return disk / max(run.nbytes, 1), disk, max(lg for _, _, lg in sizes.values())


async def big_disk_after_publish(run: BigRun) -> None:
    info = await big_settled(run.c, "before measuring disk")
    disk_report(run, peers_of(info), "after publishing")


def replica_current(info, name: str, since: float | None = None):
    """(peer info or None, True when ``name`` is a replica that is current, online, without
    lag and -- with ``since``, a monotonic time -- heard from by the leader after ``since``)."""
    cl = info.cluster if info is not None else None
    peer = next((r for r in (cl.replicas or []) if r.name == name), None) if cl else None
    ok = peer is not None and peer.current and not peer.offline and not peer.lag
    if ok and since is not None:
        ok = peer.active is not None and peer.active / 1e9 < time.monotonic() - since
    return peer, ok


async def jsz_messages(c: Cluster, name: str) -> int | None:
    """The messages server ``name`` holds by its own /jsz (the only stream on this cluster is
    BIG), or None while it does not answer (within 5 s)."""
    try:
        return int(await asyncio.to_thread(lambda: c.servers[name].monitor("/jsz").get("messages") or 0))
    except Exception:
        return None


async def until_current(run: BigRun, js, pick, t0: float, what: str, since: float | None = None,
                        ready=None) -> tuple[float | None, float | None, str]:
    """Two polls side by side, every 0.1 s, until the deadline: stream info until
    ``pick(info)`` names a replica current with lag 0 (heard from after ``since``), and that
    server's /jsz (once ``ready``, a task, is done) until it holds every message of the
    stream.  (seconds to current, seconds to /jsz complete, the replica's name) from ``t0``,
    None for what the deadline cut off.  Raises what ``ready`` raised."""
    deadline = big_deadline(run.args)
    until = t0 + deadline
    st: dict = {"current": None, "full": None, "name": "", "peer": None, "held": None,
                "first": None, "polls": 0, "failed": 0, "jsz": 0, "jsz_failed": 0}

    async def paced(step) -> None:
        while time.monotonic() < until:
            started = time.monotonic()
            if await step():
                return
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - started)))

    async def info_step() -> bool:
        st["polls"] += 1
        info = await info_of(js, BIG_STREAM)
        if info is None:
            st["failed"] += 1
            return False
        st["name"] = pick(info) or st["name"]
        if st["name"]:
            st["peer"], ok = replica_current(info, st["name"], since)
            if ok:
                st["current"] = time.monotonic() - t0
                return True
        return False

    async def jsz_step() -> bool:
        if not st["name"] or (ready is not None and not ready.done()):
            return False
        st["jsz"] += 1
        st["held"] = held = await jsz_messages(run.c, st["name"])
        if held is None:
            st["jsz_failed"] += 1
            return False
        if st["first"] is None:
            st["first"] = (time.monotonic() - t0, held)
        if held >= run.messages:
            st["full"] = time.monotonic() - t0
            return True
        return False

    async def progress() -> None:
        ticker = Ticker()
        while time.monotonic() < until and (st["current"] is None or st["full"] is None):
            if ready is not None and ready.done() and ready.exception() is not None:
                raise ready.exception()
            if ticker.due():
                log(f"    {what}: {time.monotonic() - t0:.0f} s, replica {st['name'] or '?'} "
                    f"{'current' if st['current'] is not None else st['peer']}, "
                    f"its /jsz messages {st['held']}")
            await asyncio.sleep(0.1)

    tasks = [asyncio.create_task(x) for x in (paced(info_step), paced(jsz_step), progress())]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    current, full, first = st["current"], st["full"], st["first"]
    run.res.raw.append(
        f"big: {what}: replica {st['name'] or '?'} current with lag 0 after "
        + (f"{current:.2f} s" if current is not None else f"timeout ({deadline:.0f} s; last {st['peer']})")
        + ", its /jsz holds every message after "
        + (f"{full:.2f} s" if full is not None else f"timeout (last {st['held']} of {run.messages})")
        + (f" (first answer after {first[0]:.2f} s: {first[1]:,} msgs)" if first else "")
        + f"; {st['polls']} stream info polls, {st['failed']} failed; {st['jsz']} /jsz polls, "
        f"{st['jsz_failed']} failed")
    return current, full, st["name"]


async def big_restart(run: BigRun) -> None:
    """SIGTERM one non-leader replica, start it again; seconds from the start to the leader
    showing it current with lag 0 (having heard from the new process)."""
    c, res = run.c, run.res
    info = await big_settled(c, "before the restart")
    victim = sorted(r.name for r in info.cluster.replicas)[0]
    nc, js, client = await watch_client(c, {info.cluster.leader, victim})
    try:
        t = time.monotonic()
        code = await asyncio.to_thread(c.stop_one, victim, 60.0)
        stopped = time.monotonic() - t
        res.raw.append(f"big: restart: {victim} stopped by SIGTERM in {stopped:.2f} s, exit code {code} "
                       f"(leader {info.cluster.leader}, client on {client})")
        if code == -9:
            res.errors.append(f"big restart: {victim} did not stop within 60 s of SIGTERM (killed)")
        log(f"  {victim} stopped (exit {code}); starting it again")
        c.ready_timeout = max(c.ready_timeout, big_deadline(run.args))
        t0 = time.monotonic()
        ready = asyncio.create_task(asyncio.to_thread(c.start, [victim]))
        ready_at: list[float] = []
        ready.add_done_callback(lambda _t: ready_at.append(time.monotonic() - t0))
        try:
            current, full, _ = await until_current(run, js, lambda _i: victim, t0, "restart",
                                                   since=t0, ready=ready)
        finally:
            if not ready.done():
                await asyncio.gather(ready, return_exceptions=True)
        res.raw.append(f"big: restart: {victim} ready (TCP and /healthz) "
                       + (f"{ready_at[0]:.2f} s" if ready_at else "?") + " after its start")
    finally:
        await nc.close()
    res.values["big_restart"] = current if current is not None else "timeout"
    res.values["big_restart_full"] = full if full is not None else "timeout"


def spare_zone_replica(c: Cluster, info) -> str:
    """A non-leader replica whose zone (``az:`` tag) has a server outside the stream, so a
    replacement can be placed under ``unique_tag``."""
    peers = set(peers_of(info))
    zone = {name: m.tags for name, m in c.members.items()}
    for r in sorted(r.name for r in info.cluster.replicas):
        if any(zone[o] == zone[r] for o in c.members if o not in peers):
            return r
    raise RuntimeError(f"no non-leader replica with a spare server in its zone (peers {sorted(peers)})")


async def big_peer_remove(run: BigRun) -> None:
    """$JS.API.STREAM.PEER.REMOVE.BIG {"peer": <non-leader replica>}; seconds until stream
    info lists a server that was not a replica before as current with lag 0."""
    c, res = run.c, run.res
    info = await big_settled(c, "before the peer removal")
    before = set(peers_of(info))
    victim = spare_zone_replica(c, info)
    nc, js, client = await watch_client(c, {info.cluster.leader, victim})
    try:
        t0 = time.monotonic()
        reply = await nc.request(f"$JS.API.STREAM.PEER.REMOVE.{BIG_STREAM}",
                                 json.dumps({"peer": victim}).encode(), timeout=10)
        answer = json.loads(reply.data)
        res.raw.append(f"big: peer remove {victim} (leader {info.cluster.leader}, client on {client}): "
                       f"answered in {time.monotonic() - t0:.2f} s: {reply.data.decode()[:200]}")
        if not answer.get("success"):
            raise RuntimeError(f"peer remove refused: {answer}")

        def newcomer(i) -> str | None:
            return next((r.name for r in i.cluster.replicas or [] if r.name not in before), None) if i.cluster else None

        current, full, name = await until_current(run, js, newcomer, t0, f"peer remove {victim}")
        res.raw.append(f"big: peer remove: {victim} replaced by {name or '?'}")
    finally:
        await nc.close()
    res.values["big_new"] = current if current is not None else "timeout"
    res.values["big_new_full"] = full if full is not None else "timeout"


async def big_sizes(run: BigRun) -> None:
    """Every replica current again, then disk per replica / stream bytes and RAFT log bytes."""
    info = await big_settled(run.c, "before the final sizes", big_deadline(run.args))
    run.nbytes = info.state.bytes
    ratio, disk, raft_log = disk_report(run, peers_of(info), "after the run")
    run.res.values.update(big_disk_ratio=ratio, big_disk=disk / 1e6, big_raft_log=raft_log / 1e6)


async def measure_big(c: Cluster, args, res: Results) -> None:
    run = BigRun(c, args, res)
    wait = big_deadline(args) + SETTLE_DEADLINE + 60  # a phase's own deadlines come first
    phases = [
        ("big: create stream", lambda: create_stream(c, res, BIG_STREAM, BIG_SUBJECT, "big stream"), 200),
        ("big: publish", lambda: big_publish(run), wait + 60),
        ("big: settle", lambda: big_settle(run), wait),
        ("big: disk after publishing", lambda: big_disk_after_publish(run), wait),
        ("big: restart", lambda: big_restart(run), wait + 60),
        ("big: peer remove", lambda: big_peer_remove(run), wait),
        ("big: sizes after the run", lambda: big_sizes(run), wait),
    ]
    await run_phases(c, phases, res)


# ---------------------------------------------------------------------- driver


async def measure(c: Cluster, args, res: Results) -> None:
    phases = [
        ("create stream", lambda: create_stream(c, res), 200),
        ("sync publish", lambda: sync_publish(c, args.sync_msgs, res), 200),
        ("async publish", lambda: async_publish(c, args.async_msgs, args.window, res), 250),
        ("failover", lambda: failover(c, args.rounds, res), args.rounds * 250),
        ("catch-up", lambda: catchup(c, args.catchup_msgs, args.window, res), 700),
    ]
    await run_phases(c, phases, res)


async def run_phases(c: Cluster, phases, res: Results) -> None:
    """Run (name, coroutine function, seconds) phases in order, each bounded; a failure is
    recorded and the next phase runs (none after a failed stream creation); servers found
    not running after a phase are restarted."""
    for phase, run, limit in phases:
        log(f"  {phase}...")
        try:
            await asyncio.wait_for(run(), limit)
        except BaseException as e:  # noqa: BLE001 - a failed phase is a result
            if isinstance(e, KeyboardInterrupt):
                raise
            res.fail(phase, e)
            if phase.endswith("create stream"):
                return
        dead = [n for n, s in c.servers.items() if not s.alive()]
        if dead:
            log(f"  not running after {phase}: {dead}; restarting")
            for n in dead:
                try:
                    await asyncio.to_thread(c.restart, n)
                except Exception as e:
                    res.fail(f"restart {n}", e)


def measure_kind(kind: str, workdir: Path, args) -> Results:
    res = Results()
    if not args.big_only:
        on_cluster(kind, workdir / "small", res, lambda c: measure(c, args, res), "")
    if args.big_msgs:
        started = time.monotonic()
        on_cluster(kind, workdir / "big", res, lambda c: measure_big(c, args, res), "big: ")
        res.raw.append(f"big: all big-stream phases took {time.monotonic() - started:.0f} s")
    return res


def on_cluster(kind: str, workdir: Path, res: Results, measure_on, tag: str) -> None:
    """Start a fresh 5-server cluster of ``kind``, run ``measure_on(cluster)`` (a coroutine
    function) on it, stop it; failures and servers that exited on their own go to ``res``."""
    log(f"{kind}: starting 5 servers{' for the big stream' if tag else ''}")
    c = BenchCluster(kind, workdir, 5, jetstream=True, unique_tag="az:", tags=TAGS,
                     ready_timeout=30)
    try:
        started = time.monotonic()
        c.start()
        c.wait_formed(60)
        res.raw.append(f"{tag}cluster of 5 formed in {time.monotonic() - started:.1f} s")
        asyncio.run(measure_on(c))
    except Exception as e:
        res.fail(f"{tag}cluster", e)
    finally:
        crashed = [n for n, s in c.servers.items() if not s.alive() and s.proc.returncode not in (None, -9)]
        if crashed:
            res.errors.append(f"{tag}servers exited on their own: {crashed}")
            for n in crashed:
                log(f"{n} output:\n{c.servers[n].output()[-2000:]}")
        c.stop()


ROWS = [  # key, label, "rate" or "time", format
    ("sync_rate", "R3 sync publish (128 B, await each ack), msg/s", "rate", "{:,.0f}"),
    ("sync_p50", "  sync publish latency p50, ms", "time", "{:.2f}"),
    ("sync_p99", "  sync publish latency p99, ms", "time", "{:.2f}"),
    ("async_rate", "R3 async publish (window of acks), msg/s", "rate", "{:,.0f}"),
    ("fail_median", "failover: leader SIGKILL -> first ack, median s", "time", "{:.2f}"),
    ("fail_max", "failover: leader SIGKILL -> first ack, max s", "time", "{:.2f}"),
    ("catchup_pub", "catch-up: publish with one replica down, msg/s", "rate", "{:,.0f}"),
    ("catchup", "catch-up: restart -> replica current, lag 0, s", "time", "{:.2f}"),
    ("big_pub", "big: publish, conns x window of acks, msg/s", "rate", "{:,.0f}"),
    ("big_restart", "big: restart-to-current (SIGTERM, start -> lag 0), s", "time", "{:.2f}"),
    ("big_restart_full", "  restarted replica's /jsz holds every msg, s", "time", "{:.2f}"),
    ("big_new", "big: new-replica-to-current (peer remove -> lag 0), s", "time", "{:.2f}"),
    ("big_new_full", "  new replica's /jsz holds every msg, s", "time", "{:.2f}"),
    ("big_disk_ratio", "big: disk per replica / stream bytes, max", "size", "{:.2f}"),
    ("big_disk", "  disk per replica (stream + RAFT group), max, MB", "size", "{:,.1f}"),
    ("big_raft_log", "big: RAFT log after the run, max replica, MB", "size", "{:,.2f}"),
]



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--sync-msgs", type=int, default=2_000, help="sync publishes (default 2000)")
    add("--async-msgs", type=int, default=5_000, help="async publishes (default 5000)")
    add("--window", type=int, default=256, help="outstanding async publishes (default 256)")
    add("--rounds", type=int, default=3, help="failover rounds (default 3)")
    add("--catchup-msgs", type=int, default=100_000,
        help="messages published while a replica is down (default 100000)")
    add("--big-msgs", type=int, default=None,
        help="messages in the big stream (default 1000000, 20000 with --quick; 0 skips the "
             "big-stream phases)")
    add("--big-conns", type=int, default=2, help="connections publishing the big stream (default 2)")
    add("--big-window", type=int, default=512,
        help="outstanding async publishes per big-stream connection (default 512)")
    add("--big-deadline", type=float, default=0.0,
        help="seconds each big-stream wait may take (default 120 plus 1 ms per message)")
    add("--big-only", action="store_true", help="run the big-stream phases only")
    add("--quick", action="store_true", help="smoke run: 200 / 500 / 1 round / 5000 / 20000 big")
    add("--only", choices=KINDS, help="measure one kind only (no ratio)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sync_msgs, args.async_msgs, args.rounds, args.catchup_msgs = 200, 500, 1, 5_000
    if args.big_msgs is None:
        args.big_msgs = 20_000 if args.quick else 1_000_000
    if min(args.sync_msgs, args.async_msgs, args.window, args.rounds, args.catchup_msgs,
           args.big_conns, args.big_window) < 1 or args.big_msgs < 0 or args.big_deadline < 0:
        parser.error("counts must be above zero (--big-msgs and --big-deadline: zero or more)")
    if args.big_only and not args.big_msgs:
        parser.error("--big-only needs --big-msgs above zero")
    kinds = [args.only] if args.only else list(KINDS)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jetraft-bench-cluster-") as tmp:
        results = {kind: measure_kind(kind, Path(tmp) / kind, args) for kind in kinds}
    ran = ([] if args.big_only else [f"{args.sync_msgs} sync / {args.async_msgs} async msgs, "
                                     f"{args.rounds} failover round(s), {args.catchup_msgs} msgs catch-up"])
    ran += [f"big stream {args.big_msgs} msgs ({args.big_conns} conns x window {args.big_window})"] * bool(args.big_msgs)
    print(f"5-server clusters (zones a/a/b/b/c, unique_tag az:), R3 file stream, fsync before "
          f"each ack; {'; '.join(ran)}; {time.monotonic() - started:.0f} s in all\n")
    rows = [row for row in ROWS if (row[0].startswith("big_") and args.big_msgs)
            or (not row[0].startswith("big_") and not args.big_only)]
    print(table(rows, results, kinds))
    for kind in kinds:
        print(f"\n{kind}:")
        for line in results[kind].raw:
            print(f"  {line}")
        for line in results[kind].errors:
            print(f"  ERROR {line}")
    return 1 if any(r.errors for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
