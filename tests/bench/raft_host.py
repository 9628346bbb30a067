"""RaftHost throughput and failover: three hosts in one trio run, logs on disk.

Each host is a :class:`jetraft.net.raft.host.RaftHost` over its own directory (real files,
real fsync, one GroupCommit per host); the transport hands each batch straight to the
destination's ``receive`` (no sockets: this measures the host and the core, not routes).

* throughput: for ``--seconds``, every group's leader keeps proposing ``--batch`` entries of
  ``--size`` bytes and waits until they are applied, then proposes again; prints committed
  entries/s across all groups, with fsyncs, passes and send() calls per second;
* failover: ``--cuts`` times, cut the host leading the most groups, time until the two others
  agree on a leader for every group, heal, wait until the cut host caught up.

    .venv/bin/python tests/bench/raft_host.py [--groups 20] [--seconds 5] [--batch 32] [--cuts 3]

Not collected by pytest; CI does not time anything. No nats-server counterpart exists for
this layer alone; the side by side comparison is at the JetStream level (tests/bench/).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter

import trio

from jetraft.net.raft.host import RaftHost
from jetraft.raft.types import Entry

HOSTS = ("a", "b", "c")


class CountingSM:
    def __init__(self) -> None:
        self.applied = 0

    def apply(self, entries: list[Entry]) -> None:
        self.applied += len(entries)

    def snapshot(self) -> bytes:
        return str(self.applied).encode()

    def restore(self, data: bytes) -> None:
        self.applied = int(data)

    def leader_changed(self, leader: str | None, term: int) -> None:
        pass


class Bench:
    def __init__(self, root: str, groups: int) -> None:
        self.names = [f"S-{k:03d}" for k in range(groups)]
        self.cut: set[str] = set()
        self.sends = 0
        self.hosts = {h: RaftHost(h, f"{root}/{h}", self._sender(h), snapshot_entries=65536)
                      for h in HOSTS}
        for h, host in self.hosts.items():
            for g in self.names:
                host.open_group(g, HOSTS, CountingSM())

    def _sender(self, src: str):
        def send(dst: str, payload: bytes) -> bool:
            self.sends += 1
            if src in self.cut or dst in self.cut:
                return False
            self.hosts[dst].receive(src, payload)
            return True

        return send

    def leader(self, g: str, among=HOSTS) -> str | None:
        leaders = {h for h in among if self.hosts[h].groups[g].is_leader}
        views = {self.hosts[h].groups[g].leader for h in among}
        return leaders.pop() if len(leaders) == 1 and len(views) == 1 else None

    async def until(self, pred, timeout: float) -> float:
        start = time.perf_counter()
        with trio.fail_after(timeout):
            while not pred():
                await trio.sleep(0.002)
        return time.perf_counter() - start


async def throughput(b: Bench, seconds: float, batch: int, size: int) -> None:
    data = b"x" * size
    done = Counter()

    async def proposer(g: str) -> None:
        while True:
            leader = b.leader(g)
            if leader is None:
                await trio.sleep(0.01)
                continue
            grp = b.hosts[leader].groups[g]
            for _ in range(batch - 1):
                grp.propose(data)
            await grp.wait_applied(grp.propose(data))
            done[g] += batch

    fsyncs = {h: b.hosts[h].sync.fsyncs for h in HOSTS}
    passes = {h: b.hosts[h].stats["passes"] for h in HOSTS}
    sends = b.sends
    start = time.perf_counter()
    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for g in b.names:
                nursery.start_soon(proposer, g)
    took = time.perf_counter() - start
    total = sum(done.values())
    print(f"throughput: {len(b.names)} groups x R3, batch {batch} x {size} B: "
          f"{total / took:,.0f} committed entries/s ({total} in {took:.1f} s)")
    for h in HOSTS:
        print(f"  host {h}: {(b.hosts[h].sync.fsyncs - fsyncs[h]) / took:,.0f} fsyncs/s, "
              f"{(b.hosts[h].stats['passes'] - passes[h]) / took:,.0f} passes/s")
    print(f"  send() calls: {(b.sends - sends) / took:,.0f}/s across the three hosts")


async def failover(b: Bench, cuts: int) -> None:
    times = []
    for _ in range(cuts):
        victim = Counter(b.leader(g) for g in b.names).most_common(1)[0][0]
        rest = tuple(h for h in HOSTS if h != victim)
        b.cut.add(victim)
        times.append(await b.until(lambda: all(b.leader(g, rest) for g in b.names), 10))
        b.cut.discard(victim)
        await b.until(lambda: all(b.leader(g) for g in b.names), 10)
    print(f"failover after cutting the busiest host ({cuts} times): every group led again in "
          f"median {statistics.median(times):.3f} s, max {max(times):.3f} s "
          f"(election timeout 0.5-1.0 s)")


async def main(args) -> None:
    with tempfile.TemporaryDirectory(prefix="jetraft-bench-") as root:
        b = Bench(root, args.groups)
        async with trio.open_nursery() as nursery:
            for host in b.hosts.values():
                await nursery.start(host.run)
            for k, g in enumerate(b.names):
                b.hosts[HOSTS[k % 3]].groups[g].campaign()
            took = await b.until(lambda: all(b.leader(g) for g in b.names), 10)
            print(f"first elections: every group led after {took:.3f} s")
            await throughput(b, args.seconds, args.batch, args.size)
            if args.cuts:
                await failover(b, args.cuts)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=20)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=32, help="proposals per round trip per group")
    p.add_argument("--size", type=int, default=128, help="bytes per proposal")
    p.add_argument("--cuts", type=int, default=3)
    trio.run(main, p.parse_args())
