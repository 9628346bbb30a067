"""``python -m lab``: up, down, status, kill, start, stop, pause, resume, partition, heal, ssh.

Over the nspawn provider (the one that runs on a machine without a hypervisor); with a
hypervisor, use lab/Vagrantfile (``vagrant up``), which writes the same inventory.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from lab import topology
from lab.nspawn import LabError, NspawnLab

console = Console(stderr=True)


def _lab(suite: str | None = None) -> NspawnLab:
    """The lab of ``suite`` (up), or of the suite the running lab was brought up with."""
    lab = NspawnLab(progress=lambda message: console.print(f"[bold]lab:[/] {message}"))
    suite = suite or lab.running_suite()
    if suite and suite != lab.suite:
        lab = NspawnLab(progress=lab.progress, suite=suite)
    return lab


def _suite_option(f):
    return click.option(
        "--suite", type=click.Choice(topology.LAB_SUITES), default=topology.DEFAULT_LAB_SUITE,
        show_default=True, envvar="JETRAFT_LAB_SUITE",
        help="The hosts' Debian: mixed (jr-c1, zone c, on Debian 13 trixie, the others on "
             "Debian 12 bookworm), bookworm or trixie for all five.")(f)


def _names(targets: tuple[str, ...], lab: NspawnLab | None = None) -> list[str]:
    """Host names from arguments that are host names or ``zone:<a|b|c>`` (the zone's hosts in
    the running lab, spares added included)."""
    in_lab = {s.host.name for s in lab.status()} if lab is not None else set()
    members = [h for h in topology.ALL_HOSTS if h in topology.HOSTS or h.name in in_lab]
    names: list[str] = []
    for target in targets:
        if target.startswith("zone:"):
            names += [h.name for h in topology.zone_hosts(target[5:], members)]
        else:
            names.append(topology.host(target).name)
    return names


class _LabGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (LabError, KeyError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
            console.print(f"[red]lab: {message}[/]")
            sys.exit(1)


@click.group(cls=_LabGroup)
def main() -> None:
    """The jetraft lab: five hosts in zones a, a, b, b, c (systemd-nspawn on a bridge), on
    Debian 12 and 13 (--suite); two spares (jr-a3, jr-c2) grow it to seven (add)."""


@main.command()
@_suite_option
def up(suite: str) -> None:
    """Build and boot the five hosts and write inventories/lab/ (replaces a running lab)."""
    started = time.monotonic()
    inventory = _lab(suite).up()
    console.print(f"lab: five hosts ({suite}) up in {time.monotonic() - started:.1f} s; "
                  f"inventory {inventory.relative_to(topology.ROOT)}")


@main.command()
def down() -> None:
    """Stop every host and remove the lab's bridge, loop devices and cgroups."""
    _lab().down()
    console.print("lab: down")


@main.command()
def status() -> None:
    """A table of the hosts: running, paused, link, SSH, data disk."""
    table = Table("host", "zone", "address", "debian", "running", "PID 1", "paused", "link", "ssh",
                  "disk")
    for s in _lab().status():
        table.add_row(s.host.name, s.host.zone, s.host.address, s.suite, _yn(s.running),
                      str(s.pid1 or "-"), _yn(s.paused), _yn(s.link_up), _yn(s.ssh),
                      s.data_disk or "-")
    Console(width=max(Console().width, 110)).print(table)


def _yn(flag: bool) -> str:
    return "yes" if flag else "no"


def _fault(name: str, help_text: str, action):
    @main.command(name=name, help=help_text)
    @click.argument("targets", nargs=-1, required=True)
    def command(targets: tuple[str, ...]) -> None:
        lab = _lab()
        for host_name in _names(targets, lab):
            action(lab, host_name)
            console.print(f"lab: {name} {host_name}")
    return command


_fault("kill", "Power-cut hosts (HOST... or zone:a|b|c): SIGKILL to their PID 1.",
       lambda lab, n: lab.kill(n))
_fault("stop", "Halt hosts cleanly (jetraft stops in lame duck mode).",
       lambda lab, n: lab.stop(n))
_fault("start", "Boot stopped or killed hosts again, on their kept disks.",
       lambda lab, n: lab.start(n))
_fault("pause", "Freeze every process of the hosts.", lambda lab, n: lab.pause(n, True))
_fault("resume", "Thaw paused hosts.", lambda lab, n: lab.pause(n, False))
_fault("partition", "Cut the hosts' network links (SSH too).",
       lambda lab, n: lab.partition(n, True))
_fault("heal", "Restore the hosts' network links.", lambda lab, n: lab.partition(n, False))


@main.command()
@click.argument("hosts", nargs=-1, required=True)
def add(hosts: tuple[str, ...]) -> None:
    """Boot spare hosts (jr-a3, jr-c2) as new machines and add them to the inventory; then
    `ansible-playbook playbooks/scale.yml` makes them servers of the cluster."""
    inventory = _lab().add(list(hosts))
    console.print(f"lab: added {', '.join(hosts)}; inventory {inventory.relative_to(topology.ROOT)}")


@main.command()
@click.argument("hosts", nargs=-1, required=True)
def retire(hosts: tuple[str, ...]) -> None:
    """Move spare hosts (jr-a3, jr-c2) from their zone groups to the inventory's group
    jetraft_retired; then `ansible-playbook playbooks/scale_down.yml` takes their servers out
    of the cluster (the machines stay up until `lab down`)."""
    inventory = _lab().retire(list(hosts))
    console.print(f"lab: retired {', '.join(hosts)}; inventory {inventory.relative_to(topology.ROOT)}")


@main.command()
@click.argument("host")
def replace(host: str) -> None:
    """Power-cut HOST and boot a new machine in its place (same name, zone and address; an
    empty disk, nothing installed); then `ansible-playbook playbooks/replace_host.yml -e
    jetraft_replace_host=HOST` makes it a server of the cluster again."""
    inventory = _lab().replace(host)
    console.print(f"lab: {host} is a new machine; inventory {inventory.relative_to(topology.ROOT)}")


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("host")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(host: str, command: tuple[str, ...]) -> None:
    """SSH into HOST as root (optionally running COMMAND)."""
    argv = _lab().ssh_argv(host, *command)
    os.execvp(argv[0], argv)


def _inventory_option(f):
    return click.option("-i", "--inventory", type=click.Path(exists=True, path_type=Path),
                        default=topology.INVENTORY_DIR / "hosts.yml", show_default=True,
                        help="The Ansible inventory of the cluster (any provider, or real hosts).")(f)


@main.command()
@_inventory_option
@click.option("--run", "run_id", default=None, help="Artifacts go to lab/artifacts/<run>/.")
def drills(inventory: Path, run_id: str | None) -> None:
    """Zone-loss drills over SSH: kill each zone, lose two zones, partition a zone, pause a
    leader; each with a publisher, messages with a TTL and a counter."""
    from lab.drills import Drills, Target

    run_dir = topology.ARTIFACTS_DIR / (run_id or time.strftime("%Y%m%d-%H%M%S"))
    results = asyncio.run(Drills(Target.from_inventory(inventory), run_dir,
                                 log=lambda m: console.print(f"[bold]lab:[/] {m}")).all())
    Console(width=max(Console().width, 110)).print(drill_table(results))
    if any(r.lost or r.acked_during_outage or r.ttl_outlived or r.counter_ok is False for r in results):
        sys.exit(1)


def drill_table(results) -> Table:
    """The drills' results as a rich table."""
    table = Table("drill", "attempted", "acknowledged", "lost", "s without writes",
                  "acked while down", "client on", "reconnects", "meta API", "replicas current",
                  "TTL outlived", "counter (allowed)", "s")
    for r in results:
        counter = ("-" if r.counter_final is None else
                   f"{r.counter_final} ({r.counter_low}..{r.counter_high})")
        table.add_row(r.name, str(r.attempted), str(r.acknowledged), str(len(r.lost)),
                      f"{r.seconds_without_writes:.2f}", str(r.acked_during_outage),
                      r.client_server or "-", str(r.client_reconnects),
                      "-" if r.meta_answered is None else _yn(r.meta_answered),
                      _yn(r.replicas_current),
                      f"{len(r.ttl_outlived)} of {r.ttl_acknowledged}" if r.ttl_ledger else "-",
                      counter, f"{r.duration_s:.1f}")
    return table


@main.command(name="run")
@click.option("--keep", is_flag=True, help="Leave the lab up at the end.")
@click.option("--no-drills", is_flag=True, help="Skip the (destructive) drills.")
@click.option("--campaign-minutes", type=click.FloatRange(0, 120), default=3.0, show_default=True,
              help="Minutes of the short fault campaign at the end (every kind of fault "
                   "once; 0: none). Its seed is JETRAFT_CAMPAIGN_SEED, else 1.")
@_suite_option
def run_command(keep: bool, no_drills: bool, campaign_minutes: float, suite: str) -> None:
    """The main job end to end: lab up, site.yml twice, testinfra, drills, logs,
    validation, a short fault campaign, summary."""
    from lab.run import run

    if not run(keep=keep, drills=not no_drills, suite=suite,
               campaign_minutes=campaign_minutes).ok:
        sys.exit(1)


@main.command()
@click.option("--runs", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="How many runs; run k (from 0) uses seed SEED + k.")
@click.option("--minutes", type=click.FloatRange(0.5, 120), default=5.0, show_default=True,
              help="Minutes of workload and faults per run (recovery, read-back and "
                   "validation come on top).")
@click.option("--seed", type=int, default=1, show_default=True,
              help="The first run's seed: the same seed draws the same schedule of faults "
                   "on every flavour.")
@click.option("--flavour", type=click.Choice(["jetraft", "nats-server", "nats-server-always"]),
              default="jetraft", show_default=True,
              help="The servers deployed: jetraft, or the real nats-server as the control "
                   "(its default sync_interval, or sync_interval: always).")
@click.option("--kinds", default=None,
              help="Only these kinds of fault, comma-separated (default: every kind but "
                   "membership).")
@click.option("--every-kind", is_flag=True,
              help="Put every kind of fault in each run at least once.")
@click.option("--hosts", type=click.Choice(["5", "7"]), default="5", show_default=True,
              help="Servers of the fresh lab: 5 (zones 2/2/1), or 7 (the spares too, zones "
                   "3/2/2, no unique zone tag) with an R5 queue stream beside the R3 one.")
@click.option("-i", "--inventory", type=click.Path(exists=True, path_type=Path), default=None,
              help="Run on this inventory's cluster as it is (default: a fresh nspawn lab "
                   "per run).")
def campaign(runs: int, minutes: float, seed: int, flavour: str, kinds: str | None,
             every_kind: bool, hosts: str, inventory: Path | None) -> None:
    """The fault campaign: per run, deploy, run the queue and KV workloads under a schedule
    of faults drawn from the seed, heal, read back, validate; a table per run and in total,
    and lab/artifacts/campaign-<stamp>/summary.json."""
    from lab.campaign import Campaign, CampaignError

    try:
        results = Campaign(runs=runs, minutes=minutes, seed=seed, flavour=flavour,
                           inventory=inventory, every_kind=every_kind, hosts=int(hosts),
                           kinds=set(kinds.split(",")) if kinds else None).run()
    except CampaignError as exc:
        raise LabError(str(exc)) from exc
    if not all(r.valid for r in results):
        sys.exit(1)
