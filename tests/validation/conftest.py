"""Fixtures shared by the validation tests: a Spark session (local[2], as on a two-core
machine); a KV history written by hand; a fault campaign's run directory (a synthetic run's
event logs with histories beside them); and jetraft-validate run on that shared session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark():
    from jetraft.validation.job import spark_session

    session = spark_session("local[2]", "2g")
    yield session
    session.stop()


class KVHistory:
    """One KV history written by hand, as lab/workloads.py records it: ``op(process, f,
    invoked, completed, type_, **fields)`` adds an invocation at ``invoked`` (ns) and, unless
    ``completed`` is None, its completion of ``type_`` (ok, fail, info) at ``completed``;
    fields: key (default ``k``), value, revision, expect, node. ``ops()``: the paired
    operations (jetraft.validation.history.pair)."""

    def __init__(self):
        self.lines: list[dict] = []

    def op(self, process: int, f: str, invoked: int, completed: int | None, type_: str = "ok",
           **fields) -> KVHistory:
        from jetraft.validation.synthetic_history import line

        fields.setdefault("key", "k")
        carried = {k: v for k, v in fields.items() if k in ("key", "value", "expect", "node")}
        if f == "get":
            carried.pop("value", None)
        self.lines.append(line("r1", "kv", process, "invoke", f, invoked, **carried))
        if completed is not None:
            done = dict(fields) if type_ == "ok" else {k: v for k, v in carried.items()}
            self.lines.append(line("r1", "kv", process, type_, f, completed, **done))
        return self

    def ops(self):
        from jetraft.validation.history import pair

        ops, problems = pair(self.lines)
        assert not problems, problems
        return ops


@pytest.fixture
def kv_history():
    """A new :class:`KVHistory` each call."""
    return KVHistory


@pytest.fixture(scope="session")
def campaign_run(tmp_path_factory):
    """Make a fault campaign's run directory: ``campaign_run(name, queue=lines, kv=lines)``
    writes a synthetic run (jetraft.validation.synthetic: event logs, a drill, its ledger)
    and the given history lines as history/queue.jsonl and history/kv.jsonl (None: no such
    file); returns the run's path."""
    from jetraft.validation import synthetic, synthetic_history

    def make(name: str, queue: list[dict] | None = None, kv: list[dict] | None = None) -> Path:
        root = tmp_path_factory.mktemp(name)
        synthetic.generate(root, events=2000, groups=2, seed=3)
        for workload, lines in (("queue", queue), ("kv", kv)):
            if lines is not None:
                synthetic_history.write(root, lines, workload)
        return root
    return make


class _Kept:
    """The tests' shared Spark session, which jetraft-validate's ``stop()`` leaves running."""

    def __init__(self, spark):
        self._spark = spark

    def __getattr__(self, name):
        return getattr(self._spark, name)

    def stop(self):
        pass


@pytest.fixture(scope="module")
def jetraft_validate(spark):
    """Run the ``jetraft-validate`` command (click's runner) on the shared Spark session:
    ``jetraft_validate(run, *args)`` -> (exit code, stderr, report.json as a dict or None)."""
    from click.testing import CliRunner

    from jetraft.validation import job

    patch = pytest.MonkeyPatch()
    patch.setattr(job, "spark_session", lambda master, memory: _Kept(spark))

    def run(root: Path, *args: str) -> tuple[int, str, dict | None]:
        result = CliRunner().invoke(job.main, [str(root), "--master", "local[2]", *args])
        report = root / "report.json"
        return result.exit_code, result.stderr, json.loads(report.read_text()) if report.exists() else None
    yield run
    patch.undo()
