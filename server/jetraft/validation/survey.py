"""What a run directory holds, found without Spark: ``jetraft-validate`` reports it (or
refuses the run) in its first second, before Spark's half-minute start.

Only a local path can be surveyed; a URI Spark reads (``hdfs://``, ``s3a://``...) is
checked by :func:`jetraft.validation.load.read` once Spark runs.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

#: Where a run directory's event logs are, relative to it (playbooks/collect_logs.yml
#: writes logs/<host>/events.jsonl; lab/day_two.py keeps a replaced machine's log as
#: logs/<host>/events.replaced-<ns>.jsonl).
EVENTS_GLOB = "logs/*/events*.jsonl"

#: What to do when a run holds no event log.
COLLECT_HINT = "collect the logs first: ansible-playbook playbooks/collect_logs.yml"


class NoEventLog(Exception):
    """A local run has no event log to validate: the message is one line naming what was
    expected where."""


@dataclass
class Survey:
    """A local run's files: the event logs (paths), their total size in bytes and the
    hosts they come from; the drills' ledgers, drained streams and TTL and counter ledgers
    (counts), whether
    drills.json and topology.json are there, and a fault campaign's histories
    (``history/*.jsonl``: their names)."""

    run: str
    event_logs: list[str]
    bytes: int
    hosts: list[str]
    ledgers: int = 0
    drained: int = 0
    drills: bool = False
    topology: bool = False
    missing: list[str] = field(default_factory=list)
    histories: list[str] = field(default_factory=list)
    ttl_ledgers: int = 0
    counter_ledgers: int = 0

    def line(self) -> str:
        """``reading RUN: 5 event logs (8.3 MB) from 5 hosts, 6 ledgers, 5 TTL ledgers, 5 counter
        ledgers, drills.json, topology.json`` (the TTL and counter ledgers when there are any;
        ``, histories kv, queue`` for a fault campaign's run)."""
        if not self.event_logs:
            return (f"reading {self.run}: no event log (servers that write none, such as "
                    f"nats-server: only the histories are checked), histories "
                    f"{', '.join(self.histories)}")
        parts = [f"{_count(len(self.event_logs), 'event log')} ({self.bytes / 1e6:.1f} MB) "
                 f"from {_count(len(self.hosts), 'host')}",
                 _count(self.ledgers, "ledger")]
        parts += [_count(n, noun) for n, noun in ((self.ttl_ledgers, "TTL ledger"),
                                                  (self.counter_ledgers, "counter ledger")) if n]
        parts += [name for name, there in (("drills.json", self.drills), ("topology.json", self.topology))
                  if there]
        if self.histories:
            parts.append(f"histories {', '.join(self.histories)}")
        text = f"reading {self.run}: {', '.join(parts)}"
        if self.missing:
            text += f" (no {', no '.join(self.missing)})"
        return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def is_remote(run: str) -> bool:
    """A URI Spark reads (``hdfs://...``, ``s3a://...``): not surveyed here."""
    return "://" in run and not run.startswith("file://")


def events_glob(run: str) -> str:
    """The event logs of ``run``: itself when it names ``.jsonl`` files (a glob of them),
    else ``RUN/logs/*/events*.jsonl``."""
    base = run.rstrip("/")
    return base if base.endswith(".jsonl") else f"{base}/{EVENTS_GLOB}"


def survey(run: str) -> Survey | None:
    """The files of the local run ``run`` (a run directory, or a path or glob of ``.jsonl``
    event logs); None for a remote URI. Raises :class:`NoEventLog` when the run is missing,
    empty, not a directory, or holds no event log or only empty ones."""
    if is_remote(run):
        return None
    local = run.removeprefix("file://")
    pattern = events_glob(local)
    where = f"no event log at {pattern}"
    if not pattern.endswith(EVENTS_GLOB):          # a path or glob of event logs
        logs = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        if not logs:
            raise NoEventLog(f"{where}: no file matches it (RUN is a run directory, lab/artifacts/<run>, or a path or glob of .jsonl event logs)")
        root = None
    else:
        root = local.rstrip("/") or "/"
        if not os.path.exists(root):
            raise NoEventLog(f"{where}: {root} does not exist ({COLLECT_HINT})")
        if not os.path.isdir(root):
            raise NoEventLog(f"{where}: {root} is not a directory (RUN is a run directory, "
                             f"lab/artifacts/<run>, or a path of .jsonl event logs)")
        if not os.listdir(root):
            raise NoEventLog(f"{where}: {root} is empty ({COLLECT_HINT})")
        logs = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        if not logs:
            if _histories(root):        # a campaign run on servers that write no event log
                return _history_only(run, root)
            raise NoEventLog(f"{where}: {root} holds no logs/<host>/events.jsonl ({COLLECT_HINT})")
    size = sum(os.path.getsize(p) for p in logs)
    if size == 0:
        raise NoEventLog(f"{where}: the {_count(len(logs), 'event log')} there are empty ({COLLECT_HINT})")
    hosts = sorted({os.path.basename(os.path.dirname(p)) for p in logs})
    out = Survey(run, logs, size, hosts)
    if root is not None:
        out.ledgers = len(glob.glob(os.path.join(root, "*.ledger.jsonl")))
        out.drained = len(glob.glob(os.path.join(root, "*.stream.jsonl")))
        out.ttl_ledgers = len(glob.glob(os.path.join(root, "*.ttl.jsonl")))
        out.counter_ledgers = len(glob.glob(os.path.join(root, "*.counter.jsonl")))
        out.drills = os.path.isfile(os.path.join(root, "drills.json"))
        out.topology = os.path.isfile(os.path.join(root, "topology.json"))
        out.histories = _histories(root)
        out.missing = [name for name, there in (("drills.json", out.drills),
                                                ("topology.json", out.topology)) if not there]
    return out


def _histories(root: str) -> list[str]:
    """The names of the fault campaign's histories in ``root`` (``history/<name>.jsonl``)."""
    return sorted(os.path.basename(p)[:-len(".jsonl")]
                  for p in glob.glob(os.path.join(root, "history", "*.jsonl")))


def _history_only(run: str, root: str) -> Survey:
    """A campaign run whose servers wrote no event log (nats-server, the campaign's
    control): its histories alone are checked."""
    return Survey(run, [], 0, [], histories=_histories(root), missing=["event log"])
