"""JetStream cluster benchmark: a 5-server jetraft cluster next to a 5-server nats-server
cluster, an R3 file stream, measured with nats-py.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.cluster [--quick]
        [--only jetraft|nats-server] [--sync-msgs N] [--async-msgs N]
        [--rounds N] [--catchup-msgs N]

Each kind gets its own fresh cluster (tests/cluster.py): n1..n5 in zones az:a, az:a, az:b,
az:b, az:c, JetStream with ``unique_tag: "az:"`` (so an R3 stream spans the three zones)
and an fsync before every acknowledgement (jetraft's default; nats-server with
``sync_interval: always`` in its jetstream block).  One R3 file stream ``BENCH`` is made
and, in this order, it measures:
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
replica), so every publish crosses a route and survives the kills.  Every phase is bounded
in count and time; a phase that fails or overruns is reported as such and the run goes on.

The table gives ratios that read the same way: jetraft/nats-server for rates and
nats-server/jetraft for times, so above 1 means jetraft is better.  Absolute numbers on a
shared machine are noise; the ratio is the result.  Acknowledged sequence numbers are
checked across the failovers: a sequence acknowledged twice means an acknowledged message
was lost, and is reported.
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





# ---------------------------------------------------------------------- helpers


async def connect(url: str):
    return await nats.connect(url, allow_reconnect=False, connect_timeout=5, max_reconnect_attempts=0)


async def info_of(js):
    """Stream info of BENCH, or None on any error (leaderless, timeout, no responders)."""
    try:
        return await asyncio.wait_for(js.stream_info(STREAM), 3)
    except Exception:
        return None


def all_current(info, replicas: int = 3) -> bool:
    """A leader and every other replica online, current and without lag."""
    cl = info.cluster if info is not None else None
    if cl is None or not cl.leader or len(cl.replicas or []) != replicas - 1:
        return False
    return all(r.current and not r.offline and not r.lag for r in cl.replicas)


async def settled(js, deadline: float, what: str):
    """Poll stream info until every replica is current; the info. Raises after deadline."""
    last = None
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        info = await info_of(js)
        if info is not None:
            last = info
            if all_current(info):
                return info
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


async def create_stream(c: Cluster, res: Results) -> None:
    """Make the R3 stream (retrying while the meta group forms), wait until it is current."""
    started = time.monotonic()
    nc = await connect(c.servers["n1"].url)
    try:
        js = nc.jetstream(timeout=5)
        until = time.monotonic() + 90
        while True:
            try:
                await js.add_stream(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE,
                                    num_replicas=3)
                break
            except Exception as e:
                if time.monotonic() > until:
                    raise RuntimeError(f"stream not created in 90 s: {type(e).__name__}: {e}") from e
                await asyncio.sleep(0.25)
        info = await settled(js, SETTLE_DEADLINE, "new stream")
    finally:
        await nc.close()
    peers = [info.cluster.leader, *(r.name for r in info.cluster.replicas)]
    res.raw.append(f"stream created and current in {time.monotonic() - started:.1f} s, "
                   f"leader {info.cluster.leader}, peers {sorted(peers)}")


async def client_for(c: Cluster, avoid: set[str] = frozenset()):
    """(nc, js, info, server name): a connection to a server that is not the leader."""
    nc = await connect(c.servers["n1"].url)
    info = await settled(nc.jetstream(timeout=3), SETTLE_DEADLINE, "before connecting")
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


# ---------------------------------------------------------------------- driver


async def measure(c: Cluster, args, res: Results) -> None:
    phases = [
        ("create stream", lambda: create_stream(c, res), 200),
        ("sync publish", lambda: sync_publish(c, args.sync_msgs, res), 200),
        ("async publish", lambda: async_publish(c, args.async_msgs, args.window, res), 250),
        ("failover", lambda: failover(c, args.rounds, res), args.rounds * 250),
        ("catch-up", lambda: catchup(c, args.catchup_msgs, args.window, res), 700),
    ]
    for phase, run, limit in phases:
        log(f"  {phase}...")
        try:
            await asyncio.wait_for(run(), limit)
        except BaseException as e:  # noqa: BLE001 - a failed phase is a result
            if isinstance(e, KeyboardInterrupt):
                raise
            res.fail(phase, e)
            if phase == "create stream":
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
    log(f"{kind}: starting 5 servers")
    c = BenchCluster(kind, workdir, 5, jetstream=True, unique_tag="az:", tags=TAGS,
                     ready_timeout=30)
    try:
        started = time.monotonic()
        c.start()
        c.wait_formed(60)
        res.raw.append(f"cluster of 5 formed in {time.monotonic() - started:.1f} s")
        asyncio.run(measure(c, args, res))
    except Exception as e:
        res.fail("cluster", e)
    finally:
        crashed = [n for n, s in c.servers.items() if not s.alive() and s.proc.returncode not in (None, -9)]
        if crashed:
            res.errors.append(f"servers exited on their own: {crashed}")
            for n in crashed:
                log(f"{n} output:\n{c.servers[n].output()[-2000:]}")
        c.stop()
    return res


ROWS = [  # key, label, "rate" or "time", format
    ("sync_rate", "R3 sync publish (128 B, await each ack), msg/s", "rate", "{:,.0f}"),
    ("sync_p50", "  sync publish latency p50, ms", "time", "{:.2f}"),
    ("sync_p99", "  sync publish latency p99, ms", "time", "{:.2f}"),
    ("async_rate", "R3 async publish (window of acks), msg/s", "rate", "{:,.0f}"),
    ("fail_median", "failover: leader SIGKILL -> first ack, median s", "time", "{:.2f}"),
    ("fail_max", "failover: leader SIGKILL -> first ack, max s", "time", "{:.2f}"),
    ("catchup_pub", "catch-up: publish with one replica down, msg/s", "rate", "{:,.0f}"),
    ("catchup", "catch-up: restart -> replica current, lag 0, s", "time", "{:.2f}"),
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
    add("--quick", action="store_true", help="smoke run: 200 / 500 / 1 round / 5000")
    add("--only", choices=KINDS, help="measure one kind only (no ratio)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sync_msgs, args.async_msgs, args.rounds, args.catchup_msgs = 200, 500, 1, 5_000
    if min(args.sync_msgs, args.async_msgs, args.window, args.rounds, args.catchup_msgs) < 1:
        parser.error("counts must be above zero")
    kinds = [args.only] if args.only else list(KINDS)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jetraft-bench-cluster-") as tmp:
        results = {kind: measure_kind(kind, Path(tmp) / kind, args) for kind in kinds}
    print(f"5-server clusters (zones a/a/b/b/c, unique_tag az:), R3 file stream, fsync before "
          f"each ack; {args.sync_msgs} sync / {args.async_msgs} async msgs, {args.rounds} failover "
          f"round(s), {args.catchup_msgs} msgs catch-up; {time.monotonic() - started:.0f} s in all\n")
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
