"""The main job end to end: lab up, site.yml (twice: the second must change nothing),
testinfra, the drills, the day-two drills (upgrade, replace a host, scale to seven), log
collection, the Spark validation of the collected logs
(jetraft-validate), lab down; a summary at the end.

Each step's output streams to the terminal as it runs; the summary (steps, seconds, the
drills' numbers) is printed and written to lab/artifacts/<run>/summary.json. The first
failing step stops the run (the lab is still taken down unless ``keep``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab import topology
from lab.nspawn import NspawnLab

BIN = Path(sys.executable).parent


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    ok: bool = False
    detail: str = ""


@dataclass
class Summary:
    run: str
    steps: list[Step] = field(default_factory=list)
    drills: list[dict] = field(default_factory=list)
    validation: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)


class StepFailed(Exception):
    pass


def _stream(argv: list[str], env: dict | None = None) -> str:
    """Run ``argv`` from the project root, echoing its output live; returns the output.
    Raises StepFailed on a non-zero exit."""
    proc = subprocess.Popen(argv, cwd=topology.ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    if proc.wait() != 0:
        raise StepFailed(f"{' '.join(argv[:3])}... exited {proc.returncode}")
    return "".join(lines)


def _recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host from ansible-playbook's output."""
    recap = output.rsplit("PLAY RECAP", 1)[-1]
    out = {}
    for m in re.finditer(r"^(\S+)\s*:\s*((?:\w+=\d+\s*)+)$", recap, re.M):
        out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return out


#: The main job's short fault campaign: minutes of faults, and the seed of its schedule
#: (JETRAFT_CAMPAIGN_SEED overrides it, to explore another schedule).
CAMPAIGN_MINUTES = 3.0
CAMPAIGN_SEED = 1


def run(*, keep: bool = False, drills: bool = True, console: Console | None = None,
        suite: str = topology.DEFAULT_LAB_SUITE, campaign_minutes: float = CAMPAIGN_MINUTES,
        campaign_seed: int | None = None) -> Summary:
    """Run the main job on a lab of ``suite`` (topology.LAB_SUITES); returns its Summary
    (``ok`` false if a step failed). ``campaign_minutes``: the short fault campaign on the
    lab's cluster at the end (every kind of fault once; 0: none)."""
    if campaign_seed is None:
        campaign_seed = int(os.environ.get("JETRAFT_CAMPAIGN_SEED", CAMPAIGN_SEED))
    console = console or Console(width=max(Console().width, 120))
    run_id = time.strftime("%Y%m%d-%H%M%S")
    run_dir = topology.ARTIFACTS_DIR / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    summary = Summary(run_id)
    lab = NspawnLab(progress=lambda m: console.print(f"[bold]lab:[/] {m}"), suite=suite)
    env = {"ANSIBLE_CONFIG": str(topology.ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "JETRAFT_LAB_RUN": str(run_dir), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    playbook = [str(BIN / "ansible-playbook")]

    def step(name: str, action) -> None:
        console.rule(f"[bold]{name}")
        s = Step(name)
        summary.steps.append(s)
        started = time.monotonic()
        try:
            s.detail = action() or ""
            s.ok = True
        finally:
            s.seconds = round(time.monotonic() - started, 1)

    def site(second: bool) -> str:
        recap = _recap(_stream(playbook + ["site.yml"], env))
        changed = {h: c.get("changed", 0) for h, c in recap.items() if h != "localhost"}
        if second and any(changed.values()):
            raise StepFailed(f"the second site.yml changed something: {changed}")
        values = set(changed.values())
        if len(values) == 1:
            return f"changed={values.pop()} on each of {len(changed)} hosts"
        return ", ".join(f"{h} changed={n}" for h, n in changed.items())

    try:
        # The wheelhouse must install on every host's Python (3.11 and 3.13): checked offline,
        # and built when it does not.
        if subprocess.run([str(BIN / "python"), str(topology.ROOT / "tools" / "wheelhouse.py"),
                           "--check"], cwd=topology.ROOT, capture_output=True).returncode != 0:
            step("wheelhouse", lambda: _stream(["make", "wheelhouse"]) and "")
        step(f"lab up ({suite})", lambda: _lab_up(lab))
        step("site.yml (first)", lambda: site(False))
        step("site.yml (second, changed=0)", lambda: site(True))
        step("testinfra", lambda: _tail(_stream([str(BIN / "python"), "-m", "pytest", "-p",
                                                  "no:cacheprovider", "tests/infra", "-m",
                                                  "not drill and not day_two", "-v"], env)))
        if drills:
            step("drills", lambda: _tail(_stream([str(BIN / "python"), "-m", "pytest", "-p",
                                                   "no:cacheprovider", "tests/infra", "-m",
                                                   "drill", "-v"], env)))
            step("day-two drills (upgrade, replace, scale)",
                 lambda: _tail(_stream([str(BIN / "python"), "-m", "pytest", "-p",
                                        "no:cacheprovider", "tests/infra/test_day_two.py", "-m",
                                        "day_two", "-v"], env)))
            # the drills leave the lab as site.yml deploys it (the upgrade drill goes back to
            # the lab's wheelhouse): run again, site.yml changes nothing
            step("site.yml (after the drills, changed=0)", lambda: site(True))
        step("collect logs", lambda: _stream(playbook + ["playbooks/collect_logs.yml"], env)
             and str((run_dir / "logs").relative_to(topology.ROOT)))
        step("validation", lambda: _validate(run_dir, summary))
        if campaign_minutes:
            step(f"fault campaign ({campaign_minutes:g} min, every kind, seed {campaign_seed})",
                 lambda: _campaign(campaign_minutes, campaign_seed, run_dir))
    except (StepFailed, Exception) as exc:        # the summary names the failing step
        summary.steps[-1].detail = str(exc)
    finally:
        drills_file = run_dir / "drills.json"
        if drills_file.exists():
            summary.drills = json.loads(drills_file.read_text())
        if not keep:
            console.rule("[bold]lab down")
            lab.down()
        (run_dir / "summary.json").write_text(json.dumps(
            {"run": run_id, "ok": summary.ok, "steps": [asdict(s) for s in summary.steps],
             "drills": summary.drills, "validation": summary.validation}, indent=2))
        _print(console, summary, run_dir)
    return summary


def _campaign(minutes: float, seed: int, run_dir: Path) -> str:
    """One campaign run on jetraft, on a fresh lab of its own (the drills' lab is replaced:
    five hosts, deployed with site.yml), every kind of fault but membership at least once;
    its directory and verdict, its summary copied to ``run_dir/campaign.json``. StepFailed
    when the run is not valid (its table says why; the command that replays it is in its
    summary.json)."""
    argv = [str(BIN / "python"), "-m", "lab", "campaign", "--runs", "1", "--minutes", f"{minutes:g}",
            "--seed", str(seed), "--every-kind"]
    output = _stream(argv)
    found = re.findall(r"summary: (\S+summary\.json)", output)
    summary = json.loads((topology.ROOT / found[-1]).read_text()) if found else {}
    (run_dir / "campaign.json").write_text(json.dumps(summary, indent=2))
    total = summary.get("total", {})
    return (f"{found[-1] if found else 'no summary'}: {total.get('faults', 0)} faults, "
            f"{total.get('acknowledged', 0)} acknowledged, {total.get('lost', 0)} lost, "
            f"{total.get('valid', 0)}/{total.get('runs', 0)} valid")


def _lab_up(lab: NspawnLab) -> str:
    """Bring the lab up; the detail names the inventory and each Debian release's hosts."""
    inventory = lab.up()
    by_suite: dict[str, list[str]] = {}
    for name, suite in lab.suites.items():
        by_suite.setdefault(suite, []).append(name)
    return (f"{inventory.relative_to(topology.ROOT)}; "
            + "; ".join(f"{suite}: {', '.join(names)}" for suite, names in sorted(by_suite.items())))


def _validate(run_dir: Path, summary: Summary) -> str:
    """jetraft-validate on the run's collected logs and ledgers (Spark, local[*]); the
    verdict goes into the summary. StepFailed when a check is invalid."""
    try:
        _stream([str(BIN / "jetraft-validate"), str(run_dir)])
    except StepFailed:
        if not (run_dir / "report.json").exists():
            raise
    report = json.loads((run_dir / "report.json").read_text())
    summary.validation = {name: c["valid"] for name, c in report["checks"].items()}
    invalid = [name for name, valid in summary.validation.items() if valid is False]
    if invalid:
        raise StepFailed(f"INVALID: {', '.join(invalid)} (see {run_dir.name}/report.md)")
    unknown = [name for name, valid in summary.validation.items() if valid is not True]
    return (f"VALID: {len(summary.validation) - len(unknown)} checks"
            + (f" ({', '.join(unknown)} unknown)" if unknown else "") + f"; {run_dir.name}/report.md")


def _tail(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else ""


def _print(console: Console, summary: Summary, run_dir: Path) -> None:
    steps = Table("step", "seconds", "result", "detail", title=f"run {summary.run}")
    for s in summary.steps:
        steps.add_row(s.name, f"{s.seconds:.1f}", "[green]ok[/]" if s.ok else "[red]FAILED[/]",
                      s.detail[:120])
    console.print(steps)
    if summary.drills:
        table = Table("drill", "attempted", "acknowledged", "lost", "s without writes",
                      "acked while down", "client on", "reconnects", "TTL outlived",
                      "counter (allowed)", title="drills")
        for d in summary.drills:
            counter = ("-" if d.get("counter_final") is None else
                       f"{d['counter_final']} ({d.get('counter_low')}..{d.get('counter_high')})")
            table.add_row(d["name"], str(d["attempted"]), str(d["acknowledged"]),
                          str(d["lost"]), f"{d['seconds_without_writes']:.2f}",
                          str(d["acked_during_outage"]), d.get("client_server") or "-",
                          str(d.get("client_reconnects", 0)),
                          f"{d['ttl_outlived']} of {d.get('ttl_acknowledged', 0)}" if d.get("ttl_ledger") else "-",
                          counter)
        console.print(table)
    if summary.validation:
        table = Table("check", "verdict", title="validation (jetraft-validate)")
        for name, valid in summary.validation.items():
            table.add_row(name, {True: "[green]valid[/]", False: "[red]INVALID[/]"}.get(valid, "unknown")
                          if isinstance(valid, bool) else "[yellow]unknown[/]")
        console.print(table)
    console.print(f"artifacts: {run_dir.relative_to(topology.ROOT)}  "
                  f"{'[green]PASSED[/]' if summary.ok else '[red]FAILED[/]'}")
