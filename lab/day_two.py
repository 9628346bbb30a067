"""Day-two drills: the appliance's own playbooks run while a client publishes.

- ``upgrade``: playbooks/upgrade.yml rolls a new wheelhouse (jetraft rebuilt at a new
  version, :func:`next_wheelhouse`) over every server, one at a time;
- ``replace_host``: a server's host is power-cut and replaced by a new machine of the same
  name and zone with an empty disk (the provider's ``replace``), then
  playbooks/replace_host.yml makes it a server again;
- ``scale``: new machines (the provider's ``add``) join through playbooks/scale.yml;
- ``scale_in``: hosts moved to the inventory's group ``jetraft_retired`` (the provider's
  ``retire``) leave through playbooks/scale_down.yml.

Each drill publishes to an R3 stream (one replica per zone) throughout, as lab/drills.py's
do, runs the playbook as an operator would (``ansible-playbook -i <inventory>``, its
output in ``<drill>.ansible.log`` beside the ledger), then waits for every replica to be
current, drains the stream and compares it with the ledger. ``seconds_without_writes`` is
the longest time between acknowledgements from the drill's first change until the playbook
ended: for the upgrade the target is under 1.5 s (each server hands its leaderships over
before it stops).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

from lab import topology
from lab.drills import DrillError, DrillResult, Drills, Server, Target, until

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: A playbook that has not ended within this many seconds is stopped and the drill fails.
PLAYBOOK_DEADLINE_S = 1800.0


async def run_playbook(playbook: str, inventory: Path, args: list[str], log_file: Path, *,
                       append: bool = False, error: type[DrillError] = DrillError) -> float:
    """``ansible-playbook -i INVENTORY PLAYBOOK ARGS`` from the project's root with its
    ansible.cfg, the output into ``log_file`` (after a ``$ command`` line when ``append``).
    Returns its seconds; ``error`` naming the playbook, the log and its last lines when it
    fails, or when it outlives PLAYBOOK_DEADLINE_S (it is killed)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *args]
    started = time.monotonic()
    with log_file.open("a" if append else "w") as out:
        if append:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
        proc = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, env=env, stdout=out,
                                                    stderr=subprocess.STDOUT)
        try:
            code = await asyncio.wait_for(proc.wait(), PLAYBOOK_DEADLINE_S)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise error(f"{playbook} did not end within {PLAYBOOK_DEADLINE_S:.0f} s "
                        f"(see {log_file})") from None
    if code != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-25:])
        raise error(f"{playbook} failed (exit {code}, see {log_file}):\n{tail}")
    return time.monotonic() - started


class Machines(Protocol):
    """What a provider does to machines (lab/nspawn.py's NspawnLab)."""

    def kill(self, name: str) -> None: ...

    def replace(self, name: str, keep_event_log: Path | None = None) -> Path: ...

    def add(self, names: list[str]) -> Path: ...

    def retire(self, names: list[str]) -> Path: ...


def lab_package(dest: Path, wheelhouse: Path = ROOT / "build" / "wheelhouse") -> Path:
    """The Debian package of ``wheelhouse`` (tools/deb.py, as ``make deb`` builds it) in
    ``dest``, for the hosts the role installs from it (topology.PACKAGE_HOSTS; pass ``dest``
    as ``jetraft_server_deb_dir``). Returns ``dest``. Raises DrillError with the builder's
    words when it fails."""
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "deb.py"), "--wheelhouse",
                             str(wheelhouse), "--out", str(dest)], capture_output=True, text=True)
    if result.returncode != 0:
        raise DrillError(f"building the Debian package failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    return dest


def next_wheelhouse(wheelhouse: Path, dest: Path, version: str) -> Path:
    """A wheelhouse in ``dest``: every wheel of ``wheelhouse`` but jetraft's, and jetraft
    built from this tree at ``version`` (its pyproject.toml and ``jetraft.__version__`` set
    to it). Returns ``dest``. Raises DrillError when the build fails."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for wheel in wheelhouse.glob("*.whl"):
        if not wheel.name.startswith("jetraft-"):
            shutil.copy2(wheel, dest / wheel.name)
    with tempfile.TemporaryDirectory(prefix="jetraft-next-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "server", src / "server",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        pyproject = src / "pyproject.toml"
        pyproject.write_text(re.sub(r'(?m)^version = "[^"]*"', f'version = "{version}"',
                                    pyproject.read_text(), count=1))
        init = src / "server" / "jetraft" / "__init__.py"
        init.write_text(re.sub(r'(?m)^__version__ = "[^"]*"', f'__version__ = "{version}"',
                               init.read_text(), count=1))
        result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                                 "--wheel-dir", str(dest), str(src)],
                                capture_output=True, text=True,
                                env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"})
        if result.returncode != 0:
            raise DrillError(f"building jetraft {version} failed: {result.stderr.strip()[-2000:]}")
    if not list(dest.glob("jetraft-*.whl")):
        raise DrillError(f"no jetraft wheel was built in {dest}")
    return dest


class DayTwo(Drills):
    """The day-two drills against the cluster of ``inventory`` (re-read after a playbook
    that changes it), with ``machines`` for new machines."""

    #: A playbook runs for minutes: at most 50 publishes a second keep a drill well under
    #: the workload's MAX_MESSAGES (past it the client stops publishing).
    workload_pause_s = 0.02

    def __init__(self, inventory: Path, artifacts: Path, machines: Machines | None = None,
                 log=print):
        super().__init__(Target.from_inventory(inventory), artifacts, log=log)
        self.inventory = inventory
        self.machines = machines

    async def _playbook(self, drill: str, name: str, *extra: str) -> float:
        """Run playbooks/<name>.yml against the inventory; its output goes to
        ``<drill>.ansible.log``. Returns its seconds; DrillError when it fails (the last
        lines of its output in the message)."""
        log_file = self.artifacts / f"{drill}.ansible.log"
        playbook = f"playbooks/{name}.yml"
        self.log(f"drill {drill}: -i {self.inventory} {playbook} {' '.join(extra)}")
        seconds = await run_playbook(playbook, self.inventory, list(extra), log_file)
        self.log(f"drill {drill}: {name}.yml passed in {seconds:.1f} s")
        return seconds

    async def _around(self, name: str, servers: list[Server], change) -> DrillResult:
        """Publish to the drill's stream, run ``change(result, work)`` (the playbook and what
        comes with it), then wait for every replica current, drain and compare."""
        started, result = time.monotonic(), DrillResult(name)
        nc, js = await self._connect()
        try:
            result.stream, result.group, subject, work = await self._begin(js, name, servers)
            result.servers = [s.name for s in servers]
            await self._note_client(nc, result)
            first_ns = time.time_ns()
            end_ns = await change(result, work)
            result.seconds_without_writes = round(work.longest_gap_s(first_ns, end_ns), 3)
            self.target = Target.from_inventory(self.inventory)
            await until(lambda: self._all_current(js, result.stream), "every replica current again")
            result.replicas_current, result.healed_ns = True, time.time_ns()
            await work.wait_acks(time.time_ns(), 20, "writes after the playbook")
            await work.stop()
            drained = await self._read_back(js, result.stream, subject)
            result.client_reconnects = nc.stats.get("reconnects", 0)
            return self._finish(result, work, drained, started)
        finally:
            await nc.close()

    async def upgrade(self, version: str, back_to: str | None = None) -> DrillResult:
        """playbooks/upgrade.yml to a wheelhouse of jetraft ``version`` while publishing;
        afterwards every server runs ``version`` (its /varz). With ``back_to`` (the version
        of the lab's own wheelhouse), upgrade.yml then installs the lab's wheelhouse again,
        still publishing, and every server runs ``back_to``: the lab ends on the version
        site.yml deploys, so a second site.yml changes nothing."""
        wheelhouse = next_wheelhouse(ROOT / "build" / "wheelhouse",
                                     self.artifacts / "wheelhouse-next", version)

        def check_version(want: str, after: str) -> None:
            running = {s.name: self.target.get_json(s, "/varz").get("go", "") for s in self.target.servers}
            stale = {n: v for n, v in running.items() if v != f"jetraft {want}"}
            if stale:
                raise DrillError(f"after {after}, servers run another version than {want}: {stale}")

        async def change(result: DrillResult, work) -> int:
            result.playbook_s = round(await self._playbook(
                result.name, "upgrade", "-e", f"jetraft_server_wheelhouse={wheelhouse}"), 1)
            end_ns = time.time_ns()
            check_version(version, "the upgrade")
            if back_to is not None:
                result.playbook_s += round(await self._playbook(f"{result.name}-back", "upgrade"), 1)
                end_ns = time.time_ns()
                check_version(back_to, "the upgrade back to the lab's wheelhouse")
            return end_ns
        return await self._around("upgrade", [], change)

    async def replace_host(self, name: str) -> DrillResult:
        """Power-cut ``name`` while publishing, put a new machine (empty disk) in its place
        and run playbooks/replace_host.yml: the new server joins as a new member and every
        stream is whole again."""
        if self.machines is None:
            raise DrillError("replacing a host needs a provider that makes new machines")
        victim = next((s for s in self.target.servers if s.name == name), None)
        if victim is None:
            raise DrillError(f"no server {name} in the inventory")
        loop = asyncio.get_running_loop()

        async def change(result: DrillResult, work) -> int:
            result.fault_ns = time.time_ns()
            await loop.run_in_executor(None, self.machines.kill, name)
            result.applied_ns = time.time_ns()
            await work.wait_acks(result.applied_ns, 50, f"writes acknowledged after {name}'s power cut")
            survivor = next(s for s in self.target.servers if s.name != name)

            async def meta_leader_elsewhere() -> bool:
                meta = self.target.get_json(survivor, "/jsz").get("meta_cluster", {})
                return meta.get("leader") not in (None, "", name)
            await until(meta_leader_elsewhere, f"a meta leader other than {name}")
            # the old machine's event log is evidence for the validation: kept beside where
            # collect_logs.yml puts the new machine's (logs/<host>/events.jsonl)
            kept = self.artifacts / "logs" / name / f"events.replaced-{result.applied_ns}.jsonl"
            await loop.run_in_executor(None, self.machines.replace, name, kept)
            result.repair_ns = time.time_ns()
            result.playbook_s = round(await self._playbook(
                result.name, "replace_host", "-e", f"jetraft_replace_host={name}"), 1)
            return time.time_ns()
        return await self._around(f"replace-{name}", [victim], change)

    async def scale(self, names: list[str]) -> DrillResult:
        """New machines ``names`` (the provider's ``add``) while publishing, then
        playbooks/scale.yml: they become current voters and every stream stays whole."""
        if self.machines is None:
            raise DrillError("scaling needs a provider that makes new machines")
        loop = asyncio.get_running_loop()

        extra: list[str] = []
        if set(names) & set(topology.PACKAGE_HOSTS):
            debs = await loop.run_in_executor(None, lab_package, self.artifacts / "deb")
            extra = ["-e", f"jetraft_server_deb_dir={debs}"]

        async def change(result: DrillResult, work) -> int:
            await loop.run_in_executor(None, self.machines.add, names)
            result.playbook_s = round(await self._playbook(result.name, "scale", *extra), 1)
            return time.time_ns()
        return await self._around(f"scale-{len(self.target.servers)}-to-"
                                  f"{len(self.target.servers) + len(names)}", [], change)

    async def scale_in(self, names: list[str]) -> DrillResult:
        """The hosts ``names`` retired (the provider's ``retire``: out of their zone groups,
        into ``jetraft_retired``) while publishing, then playbooks/scale_down.yml: the
        servers that stay hold every stream, each current, and the retired ones are stopped."""
        if self.machines is None:
            raise DrillError("scaling in needs the provider that made the machines")
        unknown = sorted(set(names) - {s.name for s in self.target.servers})
        if unknown:
            raise DrillError(f"no server {', '.join(unknown)} in the inventory")
        loop = asyncio.get_running_loop()
        count = len(self.target.servers)

        async def change(result: DrillResult, work) -> int:
            self.inventory = await loop.run_in_executor(None, self.machines.retire, names)
            result.playbook_s = round(await self._playbook(result.name, "scale_down"), 1)
            return time.time_ns()
        return await self._around(f"scale-{count}-to-{count - len(names)}", [], change)

    def record(self, results: list[DrillResult]) -> None:
        """Append ``results`` to the run's drills.json (the validation reads it)."""
        path = self.artifacts / "drills.json"
        earlier = json.loads(path.read_text()) if path.exists() else []
        names = {r.name for r in results}
        path.write_text(json.dumps([d for d in earlier if d["name"] not in names]
                                   + [r.summary() for r in results], indent=2))
