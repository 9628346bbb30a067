"""The validation job's throughput: events validated per second at 1M and 10M events.

    .venv/bin/python tests/bench/validation.py [EVENTS ...] [--master local[2]]

For each size, a synthetic run (jetraft.validation.synthetic: 5 servers, 8 groups, one
kill-zone drill; kept in /var/tmp/jetraft-validation-bench between runs) is validated by
the whole job (read, every check, reports) on one Spark session, and the table shows
seconds, events/s and how the time grows against the smallest size. The target on a
two-core machine is 10M events in under 2 minutes. There is no nats-server counterpart:
the figures stand alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from jetraft.validation import synthetic
from jetraft.validation.job import spark_session, validate

CACHE = Path("/var/tmp/jetraft-validation-bench")


def dataset(events: int) -> Path:
    """A synthetic run of ``events`` events, generated once and reused."""
    root = CACHE / f"run-{events}"
    done = root / "generated.json"
    if done.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    started = time.monotonic()
    stats = synthetic.generate(root, servers=5, groups=8, events=events, seed=1)
    done.write_text(json.dumps({k: v for k, v in stats.items() if k != "drill"}))
    print(f"generated {events:,} events in {time.monotonic() - started:.1f} s")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events", nargs="*", type=int, default=[1_000_000, 10_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="8g")
    args = parser.parse_args()
    runs = [(n, dataset(n)) for n in args.events]
    spark = spark_session(args.master, args.driver_memory)
    rows = []
    try:
        for n, root in runs:
            out = root / "report"
            started = time.monotonic()
            doc = validate(spark, str(root), out)
            seconds = time.monotonic() - started
            rows.append((n, seconds, doc["valid"]))
            print(f"{n:,} events: {seconds:.1f} s, valid={doc['valid']}")
    finally:
        spark.stop()
    table = Table("events", "seconds", "events/s", "time vs smallest", "size vs smallest", "valid",
                  title=f"jetraft-validate on {args.master}")
    base_n, base_s = rows[0][0], rows[0][1]
    for n, seconds, valid in rows:
        table.add_row(f"{n:,}", f"{seconds:.1f}", f"{n / seconds:,.0f}", f"{seconds / base_s:.2f}x",
                      f"{n / base_n:.0f}x", str(valid))
    Console().print(table)


if __name__ == "__main__":
    main()
