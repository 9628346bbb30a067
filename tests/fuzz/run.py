"""Run every fuzz target in turn for a bounded time and report what each did (``make fuzz``).

For each target, ``python tests/fuzz/<target>.py`` runs libFuzzer (atheris) for
``--seconds`` (``-max_total_time``), reading its checked-in corpus
(tests/fuzz/corpus/<target>, never written) and writing new inputs to
build/fuzz/corpus/<target>, crash inputs to build/fuzz/artifacts/<target>/ and its output
to build/fuzz/logs/<target>.log. Targets run one after another, each killed if it outlives
its time by ``--grace`` seconds. libFuzzer's ``-rss_limit_mb`` is 2048, except for the
targets of the store's doors (``RSS_BOUNDED``), held to twice an idle server's resident
memory (fuzz_support.RSS_LIMIT_MB); those targets also hold each input to 100 ms
(fuzz_support.bounded). The JetStream targets keep their stores in a scratch
directory (on /dev/shm when there is one) removed after each target.

By default the known crash classes (tests/fuzz/fuzz_support.py KNOWN_CRASHES) are
tolerated, so that a run explores past crashes already reported; each one hit is listed.
``--strict`` makes them crashes like any other.

``--merge`` then minimises the target's new inputs into its checked-in corpus
(libFuzzer ``-merge=1``: only inputs that add coverage are kept; crashing ones never);
``--merge-only`` does that for what earlier runs left, without fuzzing.

Prints, per target: executions, executions per second, coverage (``cov``, ``ft`` from
libFuzzer's final stats line), new corpus inputs, and whether it crashed (with the crash
input's path). Exits 1 if any target crashed or did not finish, else 0.

Usage: ``python tests/fuzz/run.py [--seconds 600] [--strict] [--merge] [target ...]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BUILD = ROOT / "build" / "fuzz"

from fuzz_support import CORPUS, IGNORE_KNOWN_ENV, RSS_LIMIT_MB  # noqa: E402  (tests/fuzz is on sys.path)

#: Every target, in the order they run: tests/fuzz/<name>.py.
TARGETS = (
    "client_parser",
    "route_frames",
    "raft_wire",
    "js_request",
    "js_config",
    "js_pull_request",
    "js_direct_get",
    "js_api",
    "nats_config",
    "restore_data",
    "stream_snapshot",
    "catchup_frames",
)
#: Targets held to the memory rule: libFuzzer's -rss_limit_mb is fuzz_support.RSS_LIMIT_MB
#: (twice an idle server's resident memory) instead of 2048.
RSS_BOUNDED = ("restore_data", "stream_snapshot", "catchup_frames")

SCRATCH_ENV = "JETRAFT_FUZZ_SCRATCH"  # js_account.SCRATCH_ENV (that module imports jetraft)

_STATS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.MULTILINE)
_FINAL = re.compile(r"^stat::(\w+):\s+(\d+)", re.MULTILINE)
_ARTIFACT = re.compile(r"Test unit written to (\S+)")
_KNOWN = re.compile(r"^FUZZ: known crash (\S+) hit", re.MULTILINE)


@dataclass
class Result:
    """What one libFuzzer run reported (see :func:`parse_output`)."""

    target: str
    seconds: float = 0.0
    execs: int = 0
    exec_per_sec: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    new_units: int = 0
    crashed: bool = False
    artifact: str | None = None
    known: list[str] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False

    @property
    def verdict(self) -> str:
        if self.timed_out:
            return "DID NOT FINISH"
        if self.crashed:
            return f"CRASH {self.artifact or f'(exit code {self.returncode})'}"
        return "ok" + (f" (known crashes tolerated: {', '.join(self.known)})" if self.known else "")


def parse_output(target: str, text: str, returncode: int | None) -> Result:
    """Read libFuzzer's output: the last ``#N ... cov: C ft: F corp: K/...`` line, the
    ``stat::`` lines of ``-print_final_stats=1``, a ``Test unit written to`` crash input and
    the ``FUZZ: known crash`` notes of fuzz_support.tolerate_known."""
    r = Result(target, returncode=returncode)
    lines = _STATS.findall(text)
    if lines:
        n, cov, ft, corp = lines[-1]
        r.execs, r.cov, r.ft, r.corpus = int(n), int(cov), int(ft), int(corp)
    final = dict(_FINAL.findall(text))
    r.execs = int(final.get("number_of_executed_units", r.execs))
    r.exec_per_sec = int(final.get("average_exec_per_sec", 0))
    r.new_units = int(final.get("new_units_added", 0))
    artifacts = _ARTIFACT.findall(text)
    r.artifact = artifacts[-1] if artifacts else None
    r.crashed = returncode != 0 or r.artifact is not None
    r.known = sorted(set(_KNOWN.findall(text)))
    return r


def _scratch_parent() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def rss_limit_mb(target: str) -> int:
    """libFuzzer's -rss_limit_mb for ``target``: RSS_LIMIT_MB for RSS_BOUNDED, else 2048."""
    return RSS_LIMIT_MB if target in RSS_BOUNDED else 2048


def fresh_rss(cmd: list[str]) -> list[str]:
    """``cmd`` started through a shell that forks it. Linux carries a process's peak resident
    memory (getrusage's ``ru_maxrss``, what libFuzzer's ``-rss_limit_mb`` reads) across exec
    from the process that forked or vforked it, so a target started straight from a large
    parent (a pytest worker late in a full run: 235 MB) starts above its 108 MB limit and is
    reported out of memory before its first input. Forked from the shell, its peak starts
    from the shell's few MB. The shell exits with the target's status; stop both with
    ``os.killpg`` (start them with ``start_new_session=True``)."""
    return ["/bin/sh", "-c", '"$@" & wait $!', "fuzz-target", *cmd]


def run_target(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run a target's libFuzzer command (through :func:`fresh_rss`), capturing its output as
    text; after ``timeout`` seconds the target and its shell are killed and
    ``subprocess.TimeoutExpired`` is raised."""
    proc = subprocess.Popen(fresh_rss(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def target_env(target: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` for running ``target``. An RSS_BOUNDED target gets glibc's mmap threshold
    fixed at its default, 128 KiB (``MALLOC_MMAP_THRESHOLD_``): glibc otherwise raises it
    as big blocks are freed, and then keeps the memory of an input's big transient buffers
    in its heap, which over a run took the process from about 65 MB to over 90 MB, near
    the limit, without any input holding it."""
    if target in RSS_BOUNDED:
        env = dict(env, MALLOC_MMAP_THRESHOLD_="131072")
    return env


def fuzz(target: str, seconds: int, *, strict: bool, grace: int, extra: list[str]) -> Result:
    """Run one target for ``seconds``; return its Result (its log in build/fuzz/logs)."""
    work = BUILD / "corpus" / target
    artifacts = BUILD / "artifacts" / target
    logs = BUILD / "logs"
    for d in (work, artifacts, logs):
        d.mkdir(parents=True, exist_ok=True)
    log = logs / f"{target}.log"
    scratch = tempfile.mkdtemp(prefix=f"jetraft-fuzz-{target}-", dir=_scratch_parent())
    env = target_env(target, dict(os.environ, **{SCRATCH_ENV: scratch}))
    env.pop(IGNORE_KNOWN_ENV, None)
    if not strict:
        env[IGNORE_KNOWN_ENV] = "1"
    cmd = [sys.executable, str(HERE / f"{target}.py"), f"-max_total_time={seconds}",
           "-print_final_stats=1", "-timeout=30", f"-rss_limit_mb={rss_limit_mb(target)}",
           f"-artifact_prefix={artifacts}/", *extra, str(work), str(CORPUS / target)]
    start = time.monotonic()
    timed_out = False
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(fresh_rss(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=ROOT, env=env, start_new_session=True)
            try:
                proc.wait(timeout=seconds + grace)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = parse_output(target, log.read_text(errors="replace"), proc.returncode)
    result.seconds = time.monotonic() - start
    result.timed_out = timed_out
    return result


def merge(target: str) -> str:
    """Minimise build/fuzz/corpus/<target> into the checked-in corpus; return libFuzzer's
    summary line. Strict: crashing inputs are left out."""
    env = target_env(target, dict(os.environ))
    env.pop(IGNORE_KNOWN_ENV, None)
    scratch = tempfile.mkdtemp(prefix=f"jetraft-fuzz-{target}-", dir=_scratch_parent())
    env[SCRATCH_ENV] = scratch
    try:
        proc = subprocess.run(
            [sys.executable, str(HERE / f"{target}.py"), "-merge=1", "-timeout=30",
             f"-artifact_prefix={BUILD / 'artifacts' / target}/", str(CORPUS / target),
             str(BUILD / "corpus" / target)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = [ln for ln in proc.stderr.splitlines() if "MERGE-OUTER: " in ln and "new files" in ln]
    return lines[-1] if lines else f"merge exited with {proc.returncode}"


def table(results: list[Result]) -> str:
    """The per-target report."""
    head = f"{'target':<16} {'seconds':>7} {'execs':>10} {'exec/s':>7} {'cov':>6} {'ft':>6} {'corpus':>6} {'new':>5}  result"
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(f"{r.target:<16} {r.seconds:>7.0f} {r.execs:>10} {r.exec_per_sec:>7} {r.cov:>6} "
                    f"{r.ft:>6} {r.corpus:>6} {r.new_units:>5}  {r.verdict}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help=f"targets to run (default: all: {' '.join(TARGETS)})")
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", 600)),
                    help="seconds per target (default: $FUZZ_SECONDS or 600)")
    ap.add_argument("--grace", type=int, default=120, help="seconds past --seconds before a target is killed")
    ap.add_argument("--strict", action="store_true", default=os.environ.get("FUZZ_STRICT") == "1",
                    help="known crash classes are crashes too (default: $FUZZ_STRICT=1)")
    ap.add_argument("--merge", action="store_true", help="minimise new inputs into the checked-in corpus")
    ap.add_argument("--merge-only", action="store_true",
                    help="do not fuzz: minimise what earlier runs left in build/fuzz/corpus into the checked-in corpus")
    ap.add_argument("--libfuzzer", action="append", default=[], metavar="FLAG",
                    help="an extra libFuzzer flag, e.g. --libfuzzer=-seed=1 (repeatable)")
    args = ap.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    if args.merge_only:
        for target in args.targets or TARGETS:
            print(f"{target}: {merge(target)}", flush=True)
        return 0
    results = []
    for target in args.targets or TARGETS:
        print(f"fuzzing {target} for {args.seconds} s ...", flush=True)
        r = fuzz(target, args.seconds, strict=args.strict, grace=args.grace, extra=args.libfuzzer)
        print(f"  {r.execs} execs, cov {r.cov}, ft {r.ft}: {r.verdict}", flush=True)
        if args.merge:
            print(f"  merge: {merge(target)}", flush=True)
        results.append(r)
    print()
    print(table(results))
    print(f"\nlogs: {BUILD / 'logs'}; crash inputs: {BUILD / 'artifacts'}")
    return 1 if any(r.crashed or r.timed_out for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
