"""The fault campaign's membership changes: the appliance's own playbooks, run while the
workloads go on and other faults (a partition composed into the window) are in force.

Jepsen changed nats-server's membership through its API under partitions and lost data
(nats-server issue 7545). Here a change is what an operator of the appliance does, with
the playbooks docs/appliance.md documents, as lab/day_two.py's drills run them:

- ``replace-host``: the target host is power-cut, a new machine of the same name, zone and
  address put in its place (empty disk, new host key: the provider's ``replace``), then
  ``playbooks/replace_host.yml`` makes it a server again (a new member: the meta leader
  removes its old identity, records its new store, adds it as a learner and promotes it)
  and ``lab/powerloss.yml`` puts the power-loss layer under its new store. Needs a provider
  that makes machines (the nspawn lab), so it is skipped on ``--inventory``.
- ``rolling-upgrade``: ``playbooks/upgrade.yml`` rolls a wheelhouse of jetraft at a new
  version over every server, one at a time, each handing its leaderships over first.
  jetraft only: the nats-server flavours have one nats-server version in the wheelhouse.
- ``peer-remove-readd``: ``playbooks/rejoin_host.yml`` removes the target's server from the
  meta group and its streams (``$JS.API.SERVER.REMOVE`` while it runs), stops it, empties
  its store and starts it again: a removed server with a new store is a new member, taken
  in as any new server. Works on any inventory.
- ``scale-up-down``: the provider's spare machines (the nspawn lab's ``jr-a3`` and
  ``jr-c2``) boot as new hosts and ``playbooks/scale.yml`` takes the cluster from five
  servers to seven (zones 3/2/2); then they are moved to the inventory's group
  ``jetraft_retired`` and ``playbooks/scale_down.yml`` takes it back to five (each removed
  while it runs, its replicas placed again, then stopped). The retired machines stay up
  until the lab goes down, so that their event logs are collected. Needs a provider that
  makes machines, so it is skipped on ``--inventory``.

Each change returns the detail the fault's record keeps (playbook, seconds, log), or
``{"skipped": reason}``; a playbook that fails raises
:class:`~lab.nemesis.NemesisError` naming its log.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol

import jetraft
from lab import topology
from lab.day_two import lab_package, next_wheelhouse, run_playbook
from lab.drills import inventory_hosts
from lab.nemesis import NemesisError
from lab.schedule import Fault

ROOT = Path(__file__).resolve().parents[1]
#: Why a change that needs new machines is skipped on an inventory of real hosts.
NO_MACHINES = "needs a provider that makes machines (the nspawn lab); not on --inventory"


class Machines(Protocol):
    """What a provider does to machines (lab/nspawn.py's NspawnLab)."""

    def replace(self, name: str, keep_event_log: Path | None = None) -> Path: ...

    def add(self, names: list[str]) -> Path: ...

    def retire(self, names: list[str]) -> Path: ...


class PlaybookMembership:
    """``await membership(fault) -> detail``: the campaign's membership changes on
    ``inventory``. ``machines``: the provider (None on an inventory of real hosts);
    ``run_dir``: where the playbooks' logs go (``membership-<action>.log``) and where an
    old machine's event log is kept (``logs/<host>/events.replaced-<ns>.jsonl``, which
    jetraft-validate reads beside the new machine's); ``await on_new_hosts(inventory)``
    after a host was replaced (the nemesis reconnects to it); ``build_package(dest) -> dest``
    makes the Debian package a spare of topology.PACKAGE_HOSTS installs from (jetraft runs)."""

    def __init__(self, inventory: Path, run_dir: Path, *, flavour: str,
                 machines: Machines | None = None, extra: dict[str, Any] | None = None,
                 progress: Callable[[str], None] = lambda text: None,
                 on_new_hosts: Callable[[Path], Awaitable[None]] | None = None,
                 build_package: Callable[[Path], Path] = lab_package):
        self.inventory, self.run_dir, self.flavour = inventory, run_dir, flavour
        self.machines, self.extra, self.progress = machines, dict(extra or {}), progress
        self.on_new_hosts, self.build_package = on_new_hosts, build_package
        self._upgrades = 0

    async def __call__(self, fault: Fault) -> dict[str, Any]:
        action = fault.param("action")
        if action == "scale-up-down":
            return await self._scale()
        if action == "replace-host":
            return await self._replace(fault)
        if action == "rolling-upgrade":
            return await self._upgrade()
        if action == "peer-remove-readd":
            return await self._rejoin(fault)
        raise NemesisError(f"membership: no action {action!r}")

    async def _replace(self, fault: Fault) -> dict[str, Any]:
        if self.machines is None:
            return {"skipped": f"replacing a host {NO_MACHINES}"}
        if len(fault.targets) != 1:
            raise NemesisError(f"replace-host replaces one host, not {len(fault.targets)}")
        name = fault.targets[0]
        kept = self.run_dir / "logs" / name / f"events.replaced-{time.time_ns()}.jsonl"
        self.progress(f"membership: {name} power-cut and replaced by a new machine")
        self.inventory = await asyncio.to_thread(self.machines.replace, name, kept)
        if self.on_new_hosts is not None:
            await self.on_new_hosts(self.inventory)
        seconds = await self.playbook("replace-host", "playbooks/replace_host.yml",
                                      {"jetraft_replace_host": name})
        seconds += await self.playbook("replace-host", "lab/powerloss.yml", {}, limit=name)
        return {"action": "replace-host", "playbook": "playbooks/replace_host.yml",
                "seconds": round(seconds, 1), "log": "membership-replace-host.log"}

    async def _scale(self) -> dict[str, Any]:
        if self.machines is None:
            return {"skipped": f"scaling {NO_MACHINES}"}
        spares = [h.name for h in topology.SPARE_HOSTS]
        members = set(await asyncio.to_thread(inventory_hosts, self.inventory))
        if members & set(spares):
            return {"skipped": f"the spares ({', '.join(sorted(members & set(spares)))}) are "
                               "servers of the cluster already (a run on seven hosts)"}
        extra: dict[str, str] = {}
        if self.flavour == "jetraft" and set(spares) & set(topology.PACKAGE_HOSTS):
            # a spare the role installs from the Debian package (jetraft_server_install: deb)
            debs = await asyncio.to_thread(self.build_package, self.run_dir / "deb")
            extra["jetraft_server_deb_dir"] = str(debs)
        self.progress(f"membership: {', '.join(spares)} boot as new machines, scale 5 -> 7")
        self.inventory = await asyncio.to_thread(self.machines.add, spares)
        if self.on_new_hosts is not None:
            await self.on_new_hosts(self.inventory)
        up = await self.playbook("scale-up-down", "playbooks/scale.yml", extra)
        self.progress(f"membership: {', '.join(spares)} retired, scale 7 -> 5")
        self.inventory = await asyncio.to_thread(self.machines.retire, spares)
        if self.on_new_hosts is not None:
            await self.on_new_hosts(self.inventory)
        down = await self.playbook("scale-up-down", "playbooks/scale_down.yml", {})
        return {"action": "scale-up-down", "hosts": spares,
                "playbook": "playbooks/scale.yml, playbooks/scale_down.yml",
                "seconds": round(up + down, 1), "scale_up_s": round(up, 1),
                "scale_down_s": round(down, 1), "log": "membership-scale-up-down.log"}

    async def _rejoin(self, fault: Fault) -> dict[str, Any]:
        if len(fault.targets) != 1:
            raise NemesisError(f"peer-remove-readd rejoins one host, not {len(fault.targets)}")
        name = fault.targets[0]
        self.progress(f"membership: {name} removed, its store emptied, added again")
        seconds = await self.playbook("peer-remove-readd", "playbooks/rejoin_host.yml",
                                      {"jetraft_rejoin_host": name})
        return {"action": "peer-remove-readd", "playbook": "playbooks/rejoin_host.yml",
                "seconds": round(seconds, 1), "log": "membership-peer-remove-readd.log"}

    async def _upgrade(self) -> dict[str, Any]:
        if self.flavour != "jetraft":
            return {"skipped": "the nats-server flavours have one nats-server version in "
                               "the wheelhouse"}
        self._upgrades += 1
        version = f"{jetraft.__version__}.post{self._upgrades}"
        wheelhouse = await asyncio.to_thread(next_wheelhouse, ROOT / "build" / "wheelhouse",
                                             self.run_dir / f"wheelhouse-{version}", version)
        self.progress(f"membership: rolling upgrade to jetraft {version}")
        seconds = await self.playbook("rolling-upgrade", "playbooks/upgrade.yml",
                                      {"jetraft_server_wheelhouse": str(wheelhouse)})
        return {"action": "rolling-upgrade", "playbook": "playbooks/upgrade.yml",
                "version": version, "seconds": round(seconds, 1),
                "log": "membership-rolling-upgrade.log"}

    async def playbook(self, action: str, playbook: str, extra: dict[str, str],
                       limit: str | None = None) -> float:
        """Run ``playbook`` on the inventory with the campaign's and ``extra`` variables,
        its output appended to ``membership-<action>.log``; its seconds. NemesisError
        (with the log's last lines) when it fails or outlives day_two.PLAYBOOK_DEADLINE_S."""
        log = self.run_dir / f"membership-{action}.log"
        args = ["-e", json.dumps({**self.extra, **extra})]
        if limit:
            args += ["--limit", limit]
        return await run_playbook(playbook, self.inventory, args, log, append=True, error=NemesisError)
