"""The fault campaign: ``python -m lab campaign --runs N --minutes M --seed S --flavour F``.

Jepsen's shape (jepsen-io/nats): workloads record histories, a nemesis applies a schedule of
faults drawn from a seed, checkers judge the histories. Each run:

1. a fresh lab (nspawn; or the cluster of ``--inventory``, left as it is) deployed with
   ``site.yml`` in the run's flavour (``jetraft``; ``nats-server`` and
   ``nats-server-always``, the control, are the real nats-server deployed by the same roles,
   with its default ``sync_interval`` and with ``always``);
2. the power-loss layer (lab/powerloss.py) mounted under every server's store
   (lab/powerloss.yml), so that a power cut drops what was not fsynced;
3. the workloads (lab/workloads.py: the queue and the KV registers) started, the schedule
   (lab/schedule.py, from the run's seed: the same on every flavour) applied by the nemesis
   (lab/nemesis.py) with the progress on the terminal every second;
4. every fault healed, the cluster's recovery waited for (every server healthy, every
   replica of the workloads' streams current), the workloads stopped, the stream drained;
5. the logs collected (playbooks/collect_logs.yml) and the run validated
   (``jetraft-validate``: the set checker, per-node divergence, linearizability of each
   key, stale reads, the RAFT checks).

Run ``k`` (from 0) uses seed ``S + k``. Everything goes to
``lab/artifacts/campaign-<stamp>/``: per run a directory (histories, faults.json, logs,
report.json/report.md) and ``summary.json`` with every run's figures. A run that loses,
diverges or is not linearizable keeps its artifacts and names the command that replays it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from lab import topology
from lab.schedule import MEMBERSHIP

BIN = Path(sys.executable).parent
#: The variables each flavour's runs deploy with. The Debian package carries jetraft alone:
#: under nats-server, the spare that installs from it (topology.PACKAGE_HOSTS) installs from
#: the wheelhouse like the others.
FLAVOURS: dict[str, dict[str, str]] = {
    "jetraft": {},
    "nats-server": {"jetraft_server_flavour": "nats-server", "jetraft_server_install": "wheelhouse"},
    "nats-server-always": {"jetraft_server_flavour": "nats-server",
                           "jetraft_server_install": "wheelhouse",
                           "jetraft_server_sync_interval": "always"},
}
#: Seconds the cluster has to recover after the last fault is healed: every server healthy,
#: every replica of the workloads' streams current.
RECOVERY_S = 180.0
#: The checks whose verdicts a run reports (report.json of jetraft-validate).
#: jetraft-validate's verdict for a check it could not decide.
UNKNOWN = "unknown"
RAFT_CHECKS = ("election_safety", "term_monotonic", "log_matching", "leader_completeness")
#: From this many servers a run has a second queue stream, R5 (and the servers no unique
#: zone tag, so that five replicas fit in three zones).
SEVEN = 7
#: findmnt's SOURCE of the power-loss layer (lab/powerloss.py mounts with fsname=powerloss):
#: the storage role is told it may sit over the store, so that scale.yml and
#: replace_host.yml, which run the storage play on every server, pass while it is in place.
POWERLOSS_SOURCE = "powerloss"


class CampaignError(Exception):
    """A run could not be carried out (a deploy failed, the cluster did not recover)."""


@dataclass
class RunResult:
    """One run's figures (summary.json); ``valid``: nothing lost, nothing divergent,
    linearizable, the RAFT checks and the validation valid."""

    index: int
    flavour: str
    seed: int
    minutes: float
    directory: str
    replay: str
    faults: list[dict[str, Any]] = field(default_factory=list)
    attempted: int = 0
    acknowledged: int = 0
    lost: dict[str, int] = field(default_factory=lambda: {"prefix": 0, "middle": 0, "postfix": 0})
    unexpected: int = 0
    duplicated: int = 0
    recovered: int = 0
    divergent: int | None = None
    kv_ops: int = 0
    linearizable: bool | str | None = None
    stale_reads: int | None = None
    raft: bool | str | None = None
    validation: bool | str | None = None
    first_fault_before_anomaly: dict[str, Any] | None = None
    seconds: float = 0.0
    error: str | None = None

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    @property
    def valid(self) -> bool:
        return (self.error is None and self.lost_total == 0 and self.unexpected == 0
                and self.duplicated == 0 and not self.divergent
                and self.linearizable is True and self.raft in (True, None)
                and self.validation is True)


def _env(run_dir: Path) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(topology.ROOT / "ansible.cfg"),
            "ANSIBLE_FORCE_COLOR": "0", "JETRAFT_LAB_RUN": str(run_dir),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _playbook(run_dir: Path, inventory: Path, playbook: str, extra: dict[str, Any],
              log: Path) -> None:
    """``ansible-playbook`` with ``extra`` vars, its output into ``log``; CampaignError
    naming the log on failure."""
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook]
    if extra:
        argv += ["-e", json.dumps(extra)]
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        code = subprocess.run(argv, cwd=topology.ROOT, stdout=out, stderr=subprocess.STDOUT,
                              env=_env(run_dir)).returncode
    if code != 0:
        raise CampaignError(f"{playbook} failed (exit {code}); see {log}")


class Campaign:
    """Runs of one flavour; ``progress(text)`` gets a line at least every second while a
    run's workloads are running."""

    def __init__(self, *, runs: int, minutes: float, seed: int, flavour: str,
                 inventory: Path | None = None, kinds: set[str] | None = None,
                 every_kind: bool = False, console: Console | None = None,
                 artifacts: Path | None = None, hosts: int = 5):
        if flavour not in FLAVOURS:
            raise CampaignError(f"no flavour {flavour!r}: one of {', '.join(FLAVOURS)}")
        if runs < 1 or minutes <= 0:
            raise CampaignError("--runs must be at least 1 and --minutes positive")
        if hosts not in (5, 7):
            raise CampaignError(f"--hosts is 5 or 7, not {hosts}")
        if hosts == 7 and inventory is not None:
            raise CampaignError("--hosts 7 boots the lab's spares: leave out --inventory (an "
                                "inventory of seven servers runs the R5 stream as it is)")
        self.hosts = hosts
        self.runs, self.minutes, self.seed, self.flavour = runs, minutes, seed, flavour
        self.inventory, self.kinds, self.every_kind = inventory, kinds, every_kind
        self.console = console or Console(width=max(Console().width, 120))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.dir = artifacts or topology.ARTIFACTS_DIR / f"campaign-{stamp}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.results: list[RunResult] = []

    def replay_command(self, seed: int) -> str:
        parts = ["python -m lab campaign --runs 1", f"--minutes {self.minutes:g}",
                 f"--seed {seed}", f"--flavour {self.flavour}"]
        if self.every_kind:
            parts.append("--every-kind")
        if self.kinds:
            parts.append("--kinds " + ",".join(sorted(self.kinds)))
        if self.hosts != 5:
            parts.append(f"--hosts {self.hosts}")
        if self.inventory:
            parts.append(f"-i {self.inventory}")
        return " ".join(parts)

    def run(self) -> list[RunResult]:
        for k in range(self.runs):
            seed = self.seed + k
            run_dir = self.dir / f"run-{k + 1:02d}-{self.flavour}-seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            result = RunResult(k + 1, self.flavour, seed, self.minutes,
                               str(run_dir.relative_to(topology.ROOT)), self.replay_command(seed))
            self.console.rule(f"[bold]campaign run {k + 1} of {self.runs}: {self.flavour}, "
                              f"seed {seed}, {self.minutes:g} min")
            started = time.monotonic()
            try:
                self._one(result, run_dir)
            except Exception as exc:      # the summary names what stopped the run
                result.error = f"{type(exc).__name__}: {exc}"
                self.console.print(f"[red]run {k + 1}: {result.error}[/]")
            finally:
                result.seconds = round(time.monotonic() - started, 1)
                (run_dir / "result.json").write_text(json.dumps(asdict(result), indent=2))
                self.results.append(result)
                self._write_summary()
            self.console.print(result_table([result], f"run {k + 1}"))
        self.console.print(result_table(self.results, "campaign", total=True))
        self.console.print(f"summary: {(self.dir / 'summary.json').relative_to(topology.ROOT)}")
        return self.results

    def _write_summary(self) -> None:
        runs = []
        for r in self.results:
            d = asdict(r)
            d["valid"] = r.valid
            runs.append(d)
        total = {"runs": len(self.results), "valid": sum(r.valid for r in self.results),
                 "attempted": sum(r.attempted for r in self.results),
                 "acknowledged": sum(r.acknowledged for r in self.results),
                 "lost": sum(r.lost_total for r in self.results),
                 "faults": sum(len(r.faults) for r in self.results)}
        (self.dir / "summary.json").write_text(json.dumps(
            {"flavour": self.flavour, "seed": self.seed, "minutes": self.minutes,
             "runs": runs, "total": total}, indent=2))

    # ---- one run --------------------------------------------------------------------

    def _one(self, result: RunResult, run_dir: Path) -> None:
        from lab.drills import Target
        from lab.schedule import draw

        log = run_dir / "deploy.log"
        inventory = self.inventory
        lab = None
        if inventory is None:
            from lab.nspawn import NspawnLab
            lab = NspawnLab(progress=lambda m: self.console.print(f"[bold]lab:[/] {m}"))
            self.console.print("lab: a fresh lab for this run")
            inventory = lab.up()
            if self.hosts == 7:
                spares = [h.name for h in topology.SPARE_HOSTS]
                self.console.print(f"lab: the spares {', '.join(spares)} too (seven hosts, "
                                   "zones 3/2/2)")
                inventory = lab.add(spares)
        extra = {**FLAVOURS[self.flavour], "jetraft_storage_stacked_sources": [POWERLOSS_SOURCE]}
        seven = len(Target.from_inventory(inventory).servers) >= SEVEN
        if seven:
            # an R5 stream over three zones: no unique zone tag (replicas placed by load)
            extra["jetraft_server_unique_zones"] = False
        if lab is None:
            # a cluster this run did not build: an earlier run's power-loss layer comes off
            # first, so that site.yml finds each store on its own disk
            self.console.print("deploy: an earlier run's power-loss layer taken away")
            _playbook(run_dir, inventory, "lab/powerloss.yml", {**extra, "powerloss_state": "absent"},
                      log)
        self.console.print(f"deploy: site.yml ({self.flavour}); output in {log.name}")
        _playbook(run_dir, inventory, "site.yml", extra, log)
        self.console.print("deploy: the power-loss layer under every store (lab/powerloss.yml)")
        _playbook(run_dir, inventory, "lab/powerloss.yml", extra, log)
        target = Target.from_inventory(inventory)
        servers = [(s.name, s.zone) for s in target.servers]
        schedule = draw(result.seed, self.minutes, servers, kinds=self.kinds,
                        every_kind=self.every_kind)
        (run_dir / "schedule.json").write_text(json.dumps([f.as_dict() for f in schedule],
                                                          indent=2))
        self.console.print(f"schedule: {len(schedule)} faults from seed {result.seed} "
                           f"({', '.join(sorted({f.kind for f in schedule}))})")
        from lab.membership import PlaybookMembership
        membership = PlaybookMembership(inventory, run_dir, flavour=self.flavour,
                                        machines=lab,
                                        extra=extra, progress=self._progress(result))
        exercise = Exercise(target, schedule, run_dir, seed=result.seed, minutes=self.minutes,
                            flavour=self.flavour, progress=self._progress(result),
                            membership=membership)
        try:
            asyncio.run(exercise.run())
        finally:
            # figures as measured, even when the workloads stopped on an error
            result.faults = exercise.records
            result.attempted, result.acknowledged = exercise.attempted, exercise.acknowledged
            result.kv_ops = exercise.kv_ok
        self.console.print("collect: the servers' logs (playbooks/collect_logs.yml)")
        _playbook(run_dir, inventory, "playbooks/collect_logs.yml", extra, log)
        self._validate(result, run_dir)
        if exercise.errors:
            # judged on what the cluster still served, and never valid
            result.error = "; ".join(exercise.errors)

    def _progress(self, result: RunResult) -> Callable[[str], None]:
        prefix = f"run {result.index} of {self.runs} ({self.flavour}, seed {result.seed})"
        return lambda text: self.console.print(f"[dim]{prefix}[/] {text}", highlight=False)

    def _validate(self, result: RunResult, run_dir: Path) -> None:
        """jetraft-validate on the run; its verdicts into ``result``."""
        self.console.print("validate: jetraft-validate (Spark)")
        with (run_dir / "validate.log").open("w") as out:
            code = subprocess.run([str(BIN / "jetraft-validate"), str(run_dir)],
                                  cwd=topology.ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  env=_env(run_dir)).returncode
        report_file = run_dir / "report.json"
        if not report_file.exists():
            raise CampaignError(f"jetraft-validate wrote no report (exit {code}); see "
                                f"{run_dir / 'validate.log'}")
        report = json.loads(report_file.read_text())
        apply_report(result, report)
        result.first_fault_before_anomaly = first_fault_before(result.faults, anomaly_ns(report))


def apply_report(result: RunResult, report: dict) -> None:
    """The run's figures from jetraft-validate's report.json (its ``checks``)."""
    checks = report.get("checks", {})
    queue = checks.get("queue", {}).get("details", {})
    result.lost = {part: int(queue.get("lost", {}).get(part, 0) or 0)
                   for part in ("prefix", "middle", "postfix")} \
        if isinstance(queue.get("lost"), dict) else result.lost
    for name in ("unexpected", "duplicated", "recovered"):
        value = queue.get(name)
        setattr(result, name, int(value if not isinstance(value, list) else len(value)) if value else 0)
    if "node_divergence" in checks and checks["node_divergence"].get("valid") is not UNKNOWN:
        # unknown (no replica's copy read: nats-server's files are not read) stays None
        result.divergent = int(checks["node_divergence"].get("count", 0))
    if "linearizable" in checks:
        result.linearizable = checks["linearizable"].get("valid")
    if "stale_reads" in checks:
        result.stale_reads = int(checks["stale_reads"].get("count", 0))
    # nats-server writes no event log: its RAFT is not judged (None), never "unknown"
    raft = [checks[name].get("valid") for name in RAFT_CHECKS if name in checks
            and "no event log" not in str(checks[name].get("details", {}).get("reason", ""))]
    result.raft = (False if False in raft else True if raft and all(v is True for v in raft)
                   else "unknown" if raft else None)
    verdicts = [c.get("valid") for c in checks.values()]
    result.validation = False if False in verdicts else True if verdicts else None


def anomaly_ns(report: dict) -> int | None:
    """The earliest wall time (ns since the epoch) among the offending examples of the
    campaign's checks, or None."""
    times = []
    for name in ("queue", "node_divergence", "linearizable", "stale_reads"):
        check = report.get("checks", {}).get(name, {})
        if check.get("valid") is False:
            for example in check.get("examples", []):
                for key in ("wall_ns", "invoke_wall_ns", "ack_wall_ns"):
                    if isinstance(example.get(key), int):
                        times.append(example[key])
    return min(times) if times else None


def first_fault_before(records: list[dict[str, Any]], at_ns: int | None) -> dict | None:
    """The fault applied last before ``at_ns`` (the one that preceded the anomaly)."""
    if at_ns is None:
        return None
    before = [r for r in records if r.get("applied_ns") and r["applied_ns"] <= at_ns]
    return max(before, key=lambda r: r["applied_ns"]) if before else None


class Exercise:
    """The workloads and the nemesis of one run, on asyncio (nats-py)."""

    def __init__(self, target, schedule, run_dir: Path, *, seed: int, minutes: float,
                 flavour: str, progress: Callable[[str], None], membership=None):
        self.target, self.schedule, self.run_dir = target, schedule, run_dir
        #: lab/membership.py's PlaybookMembership (None: membership faults are skipped)
        self.membership = membership
        self.seed, self.minutes, self.flavour, self.progress = seed, minutes, flavour, progress
        self.records: list[dict[str, Any]] = []
        self.attempted = self.acknowledged = self.kv_ok = 0
        #: What kept the run from its end as planned (the cluster not recovering, a stream
        #: that could not be read back); the run goes on to read and judge what it can.
        self.errors: list[str] = []

    async def run(self) -> None:
        from lab.nemesis import CampaignNemesis
        from lab.schedule import FILE_KINDS
        from lab.workloads import (QUEUE5_FIRST, QUEUE5_STREAM, QUEUE5_SUBJECT, History,
                                   KVWorkload, QueueWorkload)

        run = self.run_dir.name
        qh = History(self.run_dir / "history" / "queue.jsonl", run, "queue")
        kh = History(self.run_dir / "history" / "kv.jsonl", run, "kv")
        # the queue stream R3 (a unique zone tag allows no more over three zones), with a
        # replica on the run's one corruption host, so the damage hits its files; on seven
        # servers (no unique zone tag) an R5 stream beside it, which then is the one given a
        # replica there (placement by load alone would not put a second group on that host)
        queue = QueueWorkload(self.target, qh, replicas=3)
        queues = [queue]
        if len(self.target.servers) >= SEVEN:
            queues.append(QueueWorkload(self.target, qh, replicas=5, stream=QUEUE5_STREAM,
                                        subject=QUEUE5_SUBJECT, first_value=QUEUE5_FIRST))
        corrupted = sorted({f.targets[0] for f in self.schedule
                            if f.kind in FILE_KINDS and f.targets})
        kv = KVWorkload(self.target, kh, seed=self.seed)
        nemesis = CampaignNemesis(self.target, flavour=self.flavour.split("-always")[0],
                                  membership=self.membership)
        if self.membership is not None:
            from lab.drills import Target

            async def reconnect(inventory: Path) -> None:
                await nemesis.reconnect(Target.from_inventory(inventory))
            self.membership.on_new_hosts = reconnect
        try:
            self.progress("workloads: the queue stream"
                          f"{'s' if len(queues) > 1 else ''}, consumers and the KV bucket")
            for q in queues:
                await q.setup(replica_on=corrupted[0] if corrupted and q is queues[-1] else None)
            await kv.setup()
            for q in queues:
                await q.start()
            await kv.start()
            await self._faults(nemesis, queues, kv)
            self.progress("recovery: every server healthy, every replica current")
            try:
                await self._recovered(queue, [q.stream for q in queues])
            except CampaignError as exc:
                self.errors.append(str(exc))
                self.progress(f"recovery: {exc}; reading back what the cluster still serves")
            for q in queues:
                await q.stop()
            await kv.stop()
            for q in queues:
                self.progress(f"drain: reading the whole stream {q.stream} back")
                try:
                    drained = await q.drain()
                except Exception as exc:       # judged as read: what was not read is lost
                    self.errors.append(f"the drain of {q.stream} stopped: {exc}")
                    self.progress(f"drain: {q.stream} could not be read to its end: {exc}")
                    continue
                self.progress(f"drain: {drained} messages of {q.stream} read")
            if self.flavour == "jetraft":
                for q in queues:
                    try:
                        await self._node_copies(q)
                    except Exception as exc:
                        self.errors.append(f"a copy of {q.stream} could not be read: {exc}")
        finally:
            try:
                await nemesis.heal_all()
            finally:
                nemesis.close()
                for q in queues:
                    await q.stop()
                await kv.stop()
                for q in queues:
                    await q.close()
                await kv.close()
                qh.close()
                kh.close()
                (self.run_dir / "faults.json").write_text(json.dumps(self.records, indent=2))
                self.attempted = qh.counts.get("invoke", 0)
                self.acknowledged = sum(q.acknowledged for q in queues)
                self.kv_ok = kv.ok

    async def _faults(self, nemesis, queues, kv) -> None:
        """Apply and heal the schedule's faults at their times, telling the progress every
        second (elapsed, the faults in force, acknowledgements so far)."""
        started = time.monotonic()
        steps = sorted([(f.start_s, 0, "apply", f) for f in self.schedule]
                       + [(f.end_s, 1, "heal", f) for f in self.schedule],
                       key=lambda s: (s[0], s[1]))
        in_force: list = []
        total_s = self.minutes * 60.0
        last_report = 0.0

        def report() -> None:
            elapsed = time.monotonic() - started
            faults = "; ".join(f"{f.kind} {','.join(f.targets) or '-'}" for f in in_force) or "none"
            self.progress(f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d} of "
                          f"{int(total_s) // 60:02d}:{int(total_s) % 60:02d}  faults: {faults}  "
                          f"acks: {' + '.join(str(q.acknowledged) for q in queues)} queue, "
                          f"{kv.ok} kv")

        # a membership change runs its playbooks for minutes: in the background, so that
        # the faults composed into its window are applied and healed on time
        changes: dict[Any, asyncio.Task] = {}

        async def tick_until(done: Callable[[], bool]) -> None:
            nonlocal last_report
            while not done():
                if time.monotonic() - last_report >= 1.0:
                    report()
                    last_report = time.monotonic()
                await asyncio.sleep(0.2)

        def applied(fault, record) -> None:
            self.records.append(_record_dict(record))
            self.progress(f"applied {fault.kind} on {', '.join(fault.targets) or '-'}"
                          + (f" (skipped: {record.skipped})" if record.skipped else "")
                          + (f" (failed: {record.detail['failed'][:200]})"
                             if record.detail.get("failed") else ""))
        try:
            for at, _, action, fault in steps + [(total_s, 2, "end", None)]:
                await tick_until(lambda at=at: time.monotonic() - started >= at)
                if action == "apply" and fault.kind == MEMBERSHIP:
                    self.progress(f"applying {fault.kind} ({fault.param('action')}) on "
                                  f"{', '.join(fault.targets) or '-'}")
                    changes[fault] = asyncio.create_task(nemesis.apply(fault))
                    in_force.append(fault)
                elif action == "apply":
                    record = await nemesis.apply(fault)
                    in_force.append(fault)
                    applied(fault, record)
                elif action == "heal":
                    if fault in changes:            # the change ends when its playbooks do
                        await tick_until(changes[fault].done)
                        applied(fault, changes.pop(fault).result())
                    await self._heal(nemesis, fault, in_force)
            report()
        finally:
            for task in changes.values():
                task.cancel()

    async def _heal(self, nemesis, fault, in_force: list) -> None:
        record = await nemesis.heal(fault)
        if fault in in_force:
            in_force.remove(fault)
        self._merge(_record_dict(record))
        self.progress(f"healed {fault.kind} on {', '.join(fault.targets) or '-'}")

    async def _node_copies(self, queue) -> None:
        """Each replica's own copy of the queue stream, read on its host (``read-node``
        lines). nats-server's files are not read: its per-node figures are what its
        monitoring reports."""
        from lab.workloads import read_node_copy

        for server in self.target.servers:
            rows = await asyncio.to_thread(read_node_copy, self.target, server, queue.stream)
            if rows is not None:
                queue.record_node_copy(server.name, rows)
                self.progress(f"read-node: {server.name} holds {len(rows)} messages of "
                              f"{queue.stream}")

    def _merge(self, healed: dict) -> None:
        for rec in reversed(self.records):
            if (rec["kind"], rec["targets"], rec.get("start_s")) == (
                    healed["kind"], healed["targets"], healed.get("start_s")):
                rec.update({k: v for k, v in healed.items() if v is not None})
                return
        self.records.append(healed)

    async def _recovered(self, queue, streams: list[str]) -> None:
        """Every server answers /healthz, and the queue stream and the KV bucket each have a
        leader and every replica current; CampaignError past RECOVERY_S."""
        deadline = time.monotonic() + RECOVERY_S
        last = "nothing checked yet"
        while time.monotonic() < deadline:
            try:
                for server in self.target.servers:
                    try:
                        health = await asyncio.to_thread(self.target.get_json, server,
                                                         "/healthz?js-enabled-only=true")
                    except Exception as exc:
                        raise CampaignError(f"{server.name} /healthz: {exc}") from exc
                    if health.get("status") != "ok":
                        raise CampaignError(f"{server.name} /healthz: {health}")
                for stream in (*streams, "KV_campaign"):
                    info = await queue.js.stream_info(stream)
                    cluster = info.cluster
                    if not cluster or not cluster.leader:
                        raise CampaignError(f"{stream} has no leader")
                    behind = [r.name for r in cluster.replicas or [] if not r.current or r.offline]
                    if behind:
                        raise CampaignError(f"{stream}: {', '.join(behind)} not current")
                return
            except Exception as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(1.0)
        raise CampaignError(f"the cluster did not recover within {RECOVERY_S:.0f} s: {last}")


def _record_dict(record) -> dict[str, Any]:
    d = asdict(record) if hasattr(record, "__dataclass_fields__") else dict(record)
    d["targets"] = list(d.get("targets") or ())
    return d


def result_table(results: list[RunResult], title: str, total: bool = False) -> Table:
    """Runs as a rich table (and their total)."""
    table = Table("run", "flavour", "seed", "faults", "attempted", "acked", "lost p/m/s",
                  "unexpected", "dup", "divergent", "kv ops", "linearizable", "raft",
                  "validation", "s", title=title)

    def verdict(v) -> str:
        return {True: "[green]valid[/]", False: "[red]INVALID[/]", None: "-"}.get(
            v, "[yellow]unknown[/]") if isinstance(v, bool) or v is None else "[yellow]unknown[/]"

    for r in results:
        lost = "/".join(str(r.lost[p]) for p in ("prefix", "middle", "postfix"))
        table.add_row(str(r.index), r.flavour, str(r.seed), str(len(r.faults)), str(r.attempted),
                      str(r.acknowledged), lost if not r.lost_total else f"[red]{lost}[/]",
                      str(r.unexpected), str(r.duplicated),
                      "-" if r.divergent is None else str(r.divergent), str(r.kv_ops),
                      verdict(r.linearizable), verdict(r.raft),
                      verdict(r.validation) if r.error is None else f"[red]{r.error[:40]}[/]",
                      f"{r.seconds:.0f}")
    if total and len(results) > 1:
        table.add_row("total", "", "", str(sum(len(r.faults) for r in results)),
                      str(sum(r.attempted for r in results)),
                      str(sum(r.acknowledged for r in results)),
                      str(sum(r.lost_total for r in results)),
                      str(sum(r.unexpected for r in results)),
                      str(sum(r.duplicated for r in results)),
                      str(sum(r.divergent or 0 for r in results)),
                      str(sum(r.kv_ops for r in results)),
                      f"{sum(r.linearizable is True for r in results)}/{len(results)}",
                      f"{sum(r.raft is True for r in results)}/{len(results)}",
                      f"{sum(r.valid for r in results)}/{len(results)} valid", "")
    return table
