"""What the cluster benchmarks share (``cluster.py``, ``tls.py``): a log line, the
launcher's cluster with nats-server syncing before every ack, a kind's results, and the
side-by-side table with ratios."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from cluster import Cluster
from servers import KINDS

#: (key, label, "rate" (higher is better), "time" or "size" (lower is better), format)
Row = tuple[str, str, str, str]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchCluster(Cluster):
    """The launcher's cluster, with nats-server told to fsync before every ack."""

    def config_text(self, name: str) -> str:
        text = super().config_text(name)
        if self.kind == "nats-server":
            text = text.replace("jetstream {\n", "jetstream {\n  sync_interval: always\n", 1)
        return text


@dataclass
class Results:
    """One kind's numbers (None when not measured, a word such as "timeout" when the
    measurement ran out of time), raw details and errors."""

    values: dict[str, float | str | None] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def fail(self, phase: str, exc: BaseException) -> None:
        text = f"{phase}: {type(exc).__name__}: {exc}"[:300]
        log(f"  FAILED {text}")
        self.errors.append(text)


def table(rows: list[Row], results: dict[str, Results], kinds: list[str]) -> str:
    """One line per row, one column per kind, and the ratio when both kinds ran (n/a when
    either value is missing, zero or a word)."""
    both = set(kinds) == set(KINDS)
    header = ["metric", *kinds] + (["ratio (>1: jetraft better)"] if both else [])
    lines = []
    for key, label, sort, fmt in rows:
        cells = [_cell(fmt, results[k].values.get(key)) for k in kinds]
        row = [label, *cells]
        if both:
            ours, ref = results["jetraft"].values.get(key), results["nats-server"].values.get(key)
            if _number(ours) and _number(ref):
                ratio, how = (ours / ref, "jetraft/nats-server") if sort == "rate" else (ref / ours, "nats-server/jetraft")
                row.append(f"{ratio:.2f} ({how})")
            else:
                row.append("n/a")
        lines.append(row)
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *lines])



def _number(value: object) -> bool:
    """A value a ratio can be taken of: a non-zero number."""
    return isinstance(value, (int, float)) and value != 0


def _cell(fmt: str, value: float | str | None) -> str:
    if value is None:
        return "n/a"
    return value if isinstance(value, str) else fmt.format(value)
