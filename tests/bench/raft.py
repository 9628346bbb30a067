"""RAFT core throughput: committed entries per second for a 3- and a 5-node jetraft group,
driven in one process in lock-step rounds (no network delays).

Each round: the leader takes a batch of 128-byte proposals; every node with a Ready
persists it (MemoryStorage, or a GroupLog per node in a temporary directory with one
GroupCommit.sync() per node per round); then messages are sent, committed entries applied,
and every node advances; then every sent message is delivered. Prints entries/s and, for
the on-disk storage, fsyncs/s.

    .venv/bin/python tests/bench/raft.py [--entries 200000] [--batch 512] [--disk-entries 50000]

Not collected by pytest; CI does not time anything. The target is >= 50,000 committed
entries/s in memory for 3 nodes (a bar for the pure core, not a comparison: the side by
side with nats-server is in tests/bench/core.py).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from jetraft.raft.memory import MemoryStorage
from jetraft.raft.node import RaftNode
from jetraft.raft.types import Config, Role

ENTRY = b"x" * 128


class Group:
    def __init__(self, n: int, make_storage, syncs) -> None:
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.storages = {pid: make_storage(pid, tuple(self.ids)) for pid in self.ids}
        self.syncs = syncs  # callables, one per node: make that node's writes durable
        self.nodes = {
            pid: RaftNode(Config(id=pid, group="bench", peers=tuple(self.ids), seed=i), self.storages[pid])
            for i, pid in enumerate(self.ids)
        }
        self.inbox: list = []
        self.applied = 0

    def round(self) -> None:
        readies = []
        for pid in self.ids:
            node = self.nodes[pid]
            if node.has_ready():
                rd = node.ready()
                st = self.storages[pid]
                if rd.snapshot is not None:
                    st.apply_snapshot(rd.snapshot)
                if rd.entries:
                    st.append(rd.entries)
                if rd.hard_state is not None:
                    st.set_hard_state(rd.hard_state)
                readies.append((pid, rd))
        for sync in self.syncs:
            sync()
        out = self.inbox
        for pid, rd in readies:
            out.extend(rd.messages)
            if pid == self.ids[0]:
                self.applied += len(rd.committed_entries)
            self.nodes[pid].advance(rd)
        self.inbox = []
        nodes = self.nodes
        for m in out:
            nodes[m.dst].step(m)

    def elect(self) -> None:
        self.nodes[self.ids[0]].campaign()
        for _ in range(50):
            self.round()
            if self.nodes[self.ids[0]].role is Role.LEADER and not self.inbox:
                break
        assert self.nodes[self.ids[0]].role is Role.LEADER
        for _ in range(5):
            self.round()
        self.applied = 0

    def run(self, entries: int, batch: int) -> float:
        leader = self.nodes[self.ids[0]]
        proposed = 0
        t0 = time.perf_counter()
        while self.applied < entries:
            if proposed - self.applied < 4 * batch and proposed < entries:
                for _ in range(batch):
                    leader.propose(ENTRY)
                proposed += batch
            self.round()
        return time.perf_counter() - t0


def bench_memory(n: int, entries: int, batch: int) -> tuple[float, float]:
    g = Group(n, lambda pid, peers: MemoryStorage(peers), [])
    g.elect()
    dt = g.run(entries, batch)
    return g.applied / dt, 0.0


def bench_disk(n: int, entries: int, batch: int) -> tuple[float, float] | None:
    try:
        from jetraft.raft.storage import GroupLog
        from jetraft.storage import GroupCommit
    except ImportError:
        return None
    with tempfile.TemporaryDirectory(prefix="jetraft-raft-bench-") as tmp:
        commits = {}

        def make(pid, peers):
            commits[pid] = GroupCommit()
            return GroupLog(Path(tmp) / pid, sync=commits[pid], peers=peers)

        ids = [f"n{i}" for i in range(1, n + 1)]
        storages = {pid: make(pid, tuple(ids)) for pid in ids}
        g = Group(n, lambda pid, peers: storages[pid], [commits[pid].sync for pid in ids])
        g.elect()
        before = sum(c.fsyncs for c in commits.values())
        dt = g.run(entries, batch)
        fsyncs = sum(c.fsyncs for c in commits.values()) - before
        for st in storages.values():
            st.close()
        return g.applied / dt, fsyncs / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--disk-entries", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    rows = []
    for n in (3, 5):
        eps, _ = bench_memory(n, args.entries, args.batch)
        rows.append((f"{n} nodes", "memory", eps, None))
    for n in (3, 5):
        r = bench_disk(n, args.disk_entries, args.batch)
        if r is None:
            rows.append((f"{n} nodes", "disk (jetraft.raft.storage missing)", None, None))
        else:
            rows.append((f"{n} nodes", "disk (GroupLog)", r[0], r[1]))
    print(f"{'group':<10} {'storage':<22} {'entries/s':>12} {'fsyncs/s':>10}   (128-byte entries, batch {args.batch})")
    for group, kind, eps, fps in rows:
        e = f"{eps:12,.0f}" if eps is not None else f"{'-':>12}"
        f = f"{fps:10,.0f}" if fps is not None else f"{'-':>10}"
        print(f"{group:<10} {kind:<22} {e} {f}")
    mem3 = rows[0][2]
    print(f"target >= 50,000 entries/s in memory for 3 nodes: {'met' if mem3 >= 50_000 else 'NOT met'}")


if __name__ == "__main__":
    main()
