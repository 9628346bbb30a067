"""jetraft RAFT log storage micro-bench: appends/s and fsyncs/s on this machine's disk.

Run from the project root:  .venv/bin/python tests/bench/raft_storage.py [--dir DIR]

For batches of 1, 64 and 1024 entries of 128 bytes, one GroupLog appends a batch, sets
the hard state (commit only, as a follower does) and calls GroupCommit.sync() — one
durable batch per loop, as the driver does per Ready — for --seconds each. A second
table runs 8 groups sharing one GroupCommit (one sync per round across all groups).
Absolute numbers on a shared machine are noise; compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from jetraft.raft.storage import GroupLog
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, HardState


def run(root: str, batch: int, groups: int, seconds: float) -> tuple[float, float, float]:
    sync = GroupCommit()
    logs = [GroupLog(os.path.join(root, f"b{batch}-g{groups}-{k}"), sync=sync, peers=("a",))
            for k in range(groups)]
    data = b"x" * 128
    index = 1
    appended = 0
    start = time.perf_counter()
    f0 = sync.fsyncs
    while time.perf_counter() - start < seconds:
        batch_entries = [Entry(1, i, data=data) for i in range(index, index + batch)]
        for log in logs:
            log.append(batch_entries)
            log.set_hard_state(HardState(1, "a", index - 1))
        sync.sync()
        index += batch
        appended += batch * groups
    elapsed = time.perf_counter() - start
    fsyncs = sync.fsyncs - f0
    for log in logs:
        log.close()
    return appended / elapsed, fsyncs / elapsed, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="directory on the disk to measure")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        print(f"{'groups':>6} {'batch':>6} {'appends/s':>12} {'fsyncs/s':>10} "
              f"{'MB/s':>8}")
        for groups in (1, 8):
            for batch in (1, 64, 1024):
                rate, fsyncs, _ = run(root, batch, groups, args.seconds)
                print(f"{groups:>6} {batch:>6} {rate:>12,.0f} {fsyncs:>10,.0f} "
                      f"{rate * 160 / 1e6:>8.1f}")


if __name__ == "__main__":
    main()
