"""The lab on a machine without a hypervisor: five systemd-nspawn hosts on a bridge.

Each host boots a real systemd (PID 1) from a cached Debian rootfs (debootstrap, from
Debian's packages; one per suite: bookworm for Debian 12, trixie for Debian 13; the default
lab is mixed, see lab/topology.py) through its own overlay, gets a static address on the lab's bridge
(no route beyond it), sshd with the lab's key and its own pinned host key, and a
file-backed loop device as its data disk (loop devices report non-rotational).

The machine's PID 1 is not systemd, so hosts run with ``--register=no --keep-unit`` and
each from its own cgroup in the name=systemd and unified hierarchies (nothing else of the
machine's cgroups is touched). See ../shared/facts.md of the project for the measurements.

Faults: power cut (SIGKILL of the host's PID 1), clean stop (SIGTERM to systemd-nspawn),
pause (cgroup.freeze), partition (the host-side veth link down).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lab import topology
from lab.topology import ALL_HOSTS, HOSTS, LabHost

STATE_DIR = Path(os.environ.get("JETRAFT_LAB_STATE", "/var/lib/jetraft-lab"))
CACHE_DIR = Path(os.environ.get("JETRAFT_LAB_CACHE", "/var/cache/jetraft-lab"))
BRIDGE = "jrlab0"
CGROUP_NAME = "jetraft-lab"
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
#: The suite of a host whose state predates the per-host suite.
SUITE = "bookworm"
#: What the roles need on a host, installed in the base so that the hosts need no route to
#: any package mirror (the roles still ask apt for them: a no-op there).
PACKAGES = ("systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv",
            "python3-apt", "python3-packaging", "iproute2", "xfsprogs", "nftables", "procps",
            # the fault campaign's power-loss layer (lab/powerloss.py) mounts FUSE
            "fuse3")
DISK_BYTES = 1 << 30          # each host's sparse data disk file: 1 GiB
RECIPE_VERSION = "1"          # bump when base preparation changes: a new cache key
#: Where the role's unit has jetraft write its JSON event log (jetraft_server_log_file).
EVENT_LOG = "/var/log/jetraft/events.jsonl"


class LabError(Exception):
    """A lab operation that cannot be done; the message says what to do."""


Progress = Callable[[str], None]


def _run(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and result.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed (exit {result.returncode}): "
                       f"{(result.stderr or result.stdout).strip()}")
    return result


def _debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources), overridable
    by JETRAFT_LAB_MIRROR."""
    if os.environ.get("JETRAFT_LAB_MIRROR"):
        return os.environ["JETRAFT_LAB_MIRROR"]
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and "security" not in line:
                return words[1]
            if words[:1] == ["deb"] and "security" not in line:
                return next(w for w in words[1:] if "://" in w)
    return "http://deb.debian.org/debian"


@dataclass
class HostStatus:
    """What ``status`` shows for one host."""

    host: LabHost
    suite: str
    running: bool
    pid1: int | None
    paused: bool
    link_up: bool
    ssh: bool
    data_disk: str | None


class NspawnLab:
    """The nspawn provider: ``up``, ``down``, ``status`` and the faults, by host name.

    State (overlays, disk files, the SSH key, PIDs) lives under ``state_dir``; the base
    rootfs of each Debian suite is cached under ``cache_dir`` keyed by its recipe, so only
    the first ``up`` of a suite on a machine runs debootstrap (about 70 s each).
    ``suite`` is the lab's: one of topology.LAB_SUITES (``mixed`` by default).
    """

    def __init__(self, state_dir: Path = STATE_DIR, cache_dir: Path = CACHE_DIR,
                 progress: Progress = lambda message: None,
                 suite: str = topology.DEFAULT_LAB_SUITE):
        self.suites = topology.host_suites(suite)
        self.suite = suite
        self.state_dir = state_dir
        self.cache_dir = cache_dir
        self.progress = progress
        self.ssh_dir = state_dir / "ssh"
        self.ssh_key = self.ssh_dir / "id_ed25519"
        self.known_hosts = self.ssh_dir / "known_hosts"
        self.state_file = state_dir / "state.json"

    # ---- preconditions ------------------------------------------------------------------

    def preflight(self) -> None:
        """Raise LabError naming what is missing: root, systemd-nspawn, debootstrap, the
        cgroup hierarchies, or a lab network that clashes with one of the machine's."""
        if os.geteuid() != 0:
            raise LabError("the nspawn lab needs root (it makes a bridge, loop devices and "
                           "containers)")
        for tool, package in (("systemd-nspawn", "systemd-container"),
                              ("debootstrap", "debootstrap"), ("losetup", "mount"),
                              ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
            if shutil.which(tool) is None:
                raise LabError(f"{tool} is missing: apt-get install {package} (make lab-deps)")
        for root in CGROUP_ROOTS:
            if not root.is_dir():
                raise LabError(f"{root} is not mounted: this provider needs the name=systemd "
                               "and unified cgroup hierarchies")
        routes = _run("ip", "-j", "route", "show").stdout
        for route in json.loads(routes or "[]"):
            if route.get("dev") == BRIDGE or route.get("dst") in (None, "default"):
                continue
            try:
                dst = topology.ipaddress.ip_network(route["dst"], strict=False)
            except ValueError:
                continue
            if dst.overlaps(topology.NETWORK):
                raise LabError(f"the lab network {topology.NETWORK} overlaps {dst} on "
                               f"{route.get('dev')}: this machine already uses it")

    # ---- the base rootfs ----------------------------------------------------------------

    def base(self, suite: str = SUITE) -> Path:
        """The cached base rootfs of Debian ``suite`` (bookworm or trixie), built with
        debootstrap on first use (prepared: empty machine-id, no SSH host keys,
        systemd-networkd enabled, apt timers masked)."""
        if suite not in topology.DEBIAN_SUITES:
            raise LabError(f"no Debian suite {suite!r} for a lab host; the suites are "
                           f"{', '.join(topology.DEBIAN_SUITES)}")
        key = hashlib.sha256(" ".join((RECIPE_VERSION, suite, *PACKAGES)).encode()).hexdigest()
        base = self.cache_dir / f"rootfs-{suite}-{key[:12]}"
        if (base / ".jetraft-lab-ready").exists():
            return base
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        building = base.with_name(base.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        mirror = _debian_mirror()
        self.progress(f"building the {suite} base rootfs with debootstrap from {mirror} "
                      "(about 70 s, once per machine and suite)")
        _run("debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), suite,
             str(building), mirror)
        (building / "etc/machine-id").write_text("")
        (building / "var/lib/dbus/machine-id").unlink(missing_ok=True)
        for key_file in (building / "etc/ssh").glob("ssh_host_*"):
            key_file.unlink()
        _run("chroot", str(building), "systemctl", "enable", "systemd-networkd.service")
        _run("chroot", str(building), "systemctl", "mask", "apt-daily.timer",
             "apt-daily-upgrade.timer", "systemd-resolved.service", "getty@tty1.service")
        (building / "etc/ssh/sshd_config.d/lab.conf").write_text(
            "# jetraft lab: one host key (made per host by the lab), keys only\n"
            "HostKey /etc/ssh/ssh_host_ed25519_key\nPasswordAuthentication no\n"
            "UseDNS no\n")
        (building / ".jetraft-lab-ready").write_text(key + "\n")
        building.rename(base)
        return base

    # ---- state --------------------------------------------------------------------------

    def running_suite(self) -> str | None:
        """The lab suite the lab in ``state_dir`` was brought up with (None: not up)."""
        return self._state().get("suite")

    def _state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {"hosts": {}}

    def _save(self, state: dict) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def _host_dir(self, name: str) -> Path:
        return self.state_dir / "hosts" / name

    # ---- up / down ----------------------------------------------------------------------

    def up(self) -> Path:
        """Build (or rebuild) the five hosts, each on its suite's base, boot them, wait until
        each answers SSH, and write the inventory. Leftovers of an earlier lab are removed
        first. Returns the inventory's path. Raises LabError if a host does not come up (its
        console log is named)."""
        self.preflight()
        bases = {suite: self.base(suite) for suite in sorted(set(self.suites.values()))}
        if self.state_file.exists() or _link_exists(BRIDGE):
            self.progress("removing the previous lab")
            self.down()
        self._keys()
        self._bridge()
        state: dict = {"suite": self.suite, "hosts": {}}
        for h in HOSTS:
            state["hosts"][h.name] = {"disk": self._disk(h), "suite": self.suites[h.name]}
            self._save(state)
            self._prepare_host(h)
        for h in HOSTS:
            state["hosts"][h.name]["nspawn_pid"] = self._boot(
                h, bases[self.suites[h.name]], state["hosts"][h.name]["disk"])
            self._save(state)
        self.progress("waiting for sshd on every host")
        for h in HOSTS:
            self._wait_ssh(h)
        return self._write_inventory(state)

    def _write_inventory(self, state: dict) -> Path:
        inventory = topology.write_inventory(
            data_disks={name: s["disk"] for name, s in state["hosts"].items()},
            ssh_key=self.ssh_key, known_hosts=self.known_hosts,
            host_vars=topology.suite_host_vars(self.suite),
            retired=tuple(name for name, s in state["hosts"].items() if s.get("retired")))
        self.progress(f"inventory written to {inventory}")
        return inventory

    # ---- day two: new machines ------------------------------------------------------------

    def add(self, names: list[str]) -> Path:
        """Build and boot the spare hosts ``names`` (topology.SPARE_HOSTS) as new machines
        (no jetraft on them, an empty data disk), wait for their sshd, and write them into
        the inventory. Returns the inventory's path. Raises LabError when the lab is not up,
        a name is no spare, or a host is already in the lab."""
        state = self._state()
        if not state["hosts"]:
            raise LabError("the lab is not up: run `python -m lab up`")
        spares = {h.name: h for h in topology.SPARE_HOSTS}
        for name in names:
            if name not in spares:
                raise LabError(f"{name} is no spare host; the spares are {', '.join(spares)}")
            if name in state["hosts"]:
                raise LabError(f"{name} is already in the lab")
        for name in names:
            h = spares[name]
            suite = self.suites[name]
            self.progress(f"building {name} (zone {h.zone}, {suite}) as a new machine")
            state["hosts"][name] = {"disk": self._disk(h), "suite": suite}
            self._save(state)
            self._prepare_host(h)
            state["hosts"][name]["nspawn_pid"] = self._boot(h, self.base(suite),
                                                            state["hosts"][name]["disk"])
            self._save(state)
        for name in names:
            self._wait_ssh(spares[name])
        return self._write_inventory(state)

    def retire(self, names: list[str]) -> Path:
        """Write the spare hosts ``names`` into the inventory's group ``jetraft_retired``
        instead of their zone groups (still running: playbooks/scale_down.yml takes their
        servers out of the cluster, then :meth:`remove` removes the machines). Returns the
        inventory's path. LabError when a name is no spare host of the lab."""
        state = self._state()
        spares = {h.name for h in topology.SPARE_HOSTS}
        for name in names:
            if name not in spares or name not in state["hosts"]:
                raise LabError(f"{name} is no spare host of the lab; its spares: "
                               f"{', '.join(sorted(spares & set(state['hosts']))) or 'none'}")
        for name in names:
            state["hosts"][name]["retired"] = True
        self._save(state)
        return self._write_inventory(state)

    def remove(self, names: list[str]) -> Path:
        """Halt the spare hosts ``names`` (clean halt, power cut after 20 s) and throw their
        machines away (root overlay, data disk); the inventory no longer names them. Returns
        the inventory's path. LabError when a name is no spare host of the lab."""
        state = self._state()
        spares = {h.name for h in topology.SPARE_HOSTS}
        for name in names:
            if name not in spares or name not in state["hosts"]:
                raise LabError(f"{name} is no spare host of the lab")
        for name in names:
            self.progress(f"{name}: halted and removed")
            self._halt(name, state["hosts"][name], deadline_s=20.0)
            self._discard(name, state["hosts"][name])
            del state["hosts"][name]
            self._save(state)
        return self._write_inventory(state)

    def _discard(self, name: str, host_state: dict) -> None:
        """Remove a halted host's cgroups, loop device, data disk and directory."""
        _remove_cgroups(name)
        disk = host_state.get("disk")
        if disk and _loop_backing(disk) == str(self._disk_file(name)):
            _run("losetup", "-d", disk, check=False)
        for dev in _loops_backed_by(self._disk_file(name)):
            _run("losetup", "-d", dev, check=False)
        self._disk_file(name).unlink(missing_ok=True)
        shutil.rmtree(self._host_dir(name), ignore_errors=True)

    def replace(self, name: str, keep_event_log: Path | None = None) -> Path:
        """Replace ``name`` by a new machine of the same name, zone and address: power-cut
        it (when running), throw its root overlay and data disk away, and boot a fresh host
        (new SSH host key and machine id, nothing installed, an empty data disk). Returns
        the inventory's path (the data disk's device may change). ``keep_event_log``: where
        to keep the old machine's jetraft event log first, as the evidence of what it did
        (the validation reads it beside the new machine's)."""
        state = self._state()
        host_state = self._host_state(name)
        if _alive(host_state.get("nspawn_pid")):
            self.kill(name)
        old_log = self._host_dir(name) / "upper" / EVENT_LOG.lstrip("/")
        if keep_event_log is not None and old_log.is_file():
            keep_event_log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(old_log, keep_event_log)
        self._discard(name, host_state)
        h = topology.host(name)
        suite = host_state.get("suite", self.suites[name])
        self.progress(f"{name}: a new machine (empty disk, new host key)")
        host_state = {"disk": self._disk(h), "suite": suite}
        state["hosts"][name] = host_state
        self._save(state)
        self._prepare_host(h)
        host_state["nspawn_pid"] = self._boot(h, self.base(suite), host_state["disk"])
        self._save(state)
        self._wait_ssh(h)
        return self._write_inventory(state)

    def down(self) -> None:
        """Stop every host (clean halt, then power cut after 20 s), and remove the lab's
        cgroups, bridge, loop devices and host directories. Safe to run twice, and after a
        crashed ``up``."""
        state = self._state()
        for name in list(state["hosts"]):
            self._halt(name, state["hosts"][name], deadline_s=20.0)
        for name, host_state in state["hosts"].items():
            disk = host_state.get("disk")
            if disk and _loop_backing(disk) == str(self._disk_file(name)):
                _run("losetup", "-d", disk, check=False)
        # loop devices of an earlier lab whose state file was lost
        for h in ALL_HOSTS:
            for dev in _loops_backed_by(self._disk_file(h.name)):
                _run("losetup", "-d", dev, check=False)
        for h in ALL_HOSTS:
            _remove_cgroups(h.name)
        for root in CGROUP_ROOTS:
            try:
                (root / CGROUP_NAME).rmdir()
            except OSError:
                pass
        if _link_exists(BRIDGE):
            _run("ip", "link", "delete", BRIDGE)
        shutil.rmtree(self.state_dir / "hosts", ignore_errors=True)
        self.state_file.unlink(missing_ok=True)

    # ---- faults -------------------------------------------------------------------------

    def kill(self, name: str) -> None:
        """Power-cut ``name``: SIGKILL to its PID 1, so every process of the host dies at once
        with no shutdown. (The data disk is a file on the machine: writes already in the
        machine's page cache survive, unlike on real hardware; jetraft's fsync before each
        acknowledgement is what the drills rely on either way.)"""
        host_state = self._host_state(name)
        pid1 = _pid1(host_state.get("nspawn_pid"))
        if pid1 is None:
            raise LabError(f"{name} is not running")
        os.kill(pid1, signal.SIGKILL)
        _wait_gone(host_state["nspawn_pid"], 20.0)

    def stop(self, name: str) -> None:
        """Halt ``name`` cleanly (systemd shuts its units down, jetraft in lame duck mode)."""
        self._halt(name, self._host_state(name), deadline_s=90.0)

    def start(self, name: str) -> None:
        """Boot ``name`` again on its kept overlay and data disk; waits for its sshd."""
        state = self._state()
        host_state = self._host_state(name)
        if _alive(host_state.get("nspawn_pid")):
            raise LabError(f"{name} is already running")
        h = topology.host(name)
        _remove_cgroups(name)
        host_state["nspawn_pid"] = self._boot(h, self.base(host_state.get("suite", SUITE)),
                                              host_state["disk"])
        state["hosts"][name] = host_state
        self._save(state)
        self._wait_ssh(h)
        # A container has no udev, so systemd waits in vain for the data disk's device
        # unit at boot; mounting fstab's entries by hand stands in for it (the mount unit
        # then becomes active and jetraft, which requires it, starts).
        result = subprocess.run(self.ssh_argv(name, "mount", "-a"), capture_output=True,
                                text=True, timeout=60)
        if result.returncode != 0:
            raise LabError(f"{name}: mount -a failed: {result.stderr.strip()}")

    def pause(self, name: str, paused: bool = True) -> None:
        """Freeze (or thaw) every process of ``name``: it stops answering without dying."""
        self._host_state(name)
        (CGROUP_ROOTS[1] / CGROUP_NAME / name / "cgroup.freeze").write_text("1" if paused else "0")

    def partition(self, name: str, cut: bool = True) -> None:
        """Cut (or restore) ``name``'s link to the bridge: no traffic in or out, SSH included."""
        self._host_state(name)
        _run("ip", "link", "set", _veth(name), "down" if cut else "up")

    def ssh_argv(self, name: str, *command: str) -> list[str]:
        """The ssh command line that reaches ``name`` as root (with ``command``, if any)."""
        h = topology.host(name)
        return ["ssh", "-i", str(self.ssh_key), "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
                f"root@{h.address}", *command]

    def status(self) -> list[HostStatus]:
        """Each host's state as seen from the machine."""
        state = self._state()
        out = []
        for h in [h for h in ALL_HOSTS if h in HOSTS or h.name in state["hosts"]]:
            host_state = state["hosts"].get(h.name, {})
            pid = host_state.get("nspawn_pid")
            running = _alive(pid)
            freeze = CGROUP_ROOTS[1] / CGROUP_NAME / h.name / "cgroup.freeze"
            paused = running and freeze.exists() and freeze.read_text().strip() == "1"
            link = running and _link_up(_veth(h.name))
            out.append(HostStatus(h, host_state.get("suite", self.suites[h.name]), running,
                                  _pid1(pid) if running else None, paused, link,
                                  running and link and not paused and _port_open(h.address, 22),
                                  host_state.get("disk")))
        return out

    # ---- internals ----------------------------------------------------------------------

    def _host_state(self, name: str) -> dict:
        topology.host(name)
        state = self._state()
        if name not in state["hosts"]:
            raise LabError(f"the lab is not up (no {name}): run `python -m lab up`")
        return state["hosts"][name]

    def _keys(self) -> None:
        self.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.ssh_key.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "jetraft-lab",
                 "-f", str(self.ssh_key))

    def _bridge(self) -> None:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{topology.CONTROLLER_ADDRESS}/{topology.NETWORK.prefixlen}",
             "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")

    def _disk_file(self, name: str) -> Path:
        return self._host_dir(name) / "disk.img"

    def _disk(self, h: LabHost) -> str:
        path = self._disk_file(h.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(DISK_BYTES)
        dev = _run("losetup", "--find", "--show", str(path)).stdout.strip()
        # A loop device inherits "rotational" from the disk holding its file; the lab's data
        # disks stand for SSDs, so they are marked non-rotational, as the Vagrantfile does.
        Path(f"/sys/block/{Path(dev).name}/queue/rotational").write_text("0")
        return dev

    def _prepare_host(self, h: LabHost) -> None:
        upper = self._host_dir(h.name) / "upper"
        shutil.rmtree(upper, ignore_errors=True)
        for sub in ("etc/ssh", "etc/systemd/network", "root/.ssh"):
            (upper / sub).mkdir(parents=True, exist_ok=True)
        (upper / "root").chmod(0o700)
        (upper / "root/.ssh").chmod(0o700)
        (upper / "etc/hostname").write_text(h.name + "\n")
        (upper / "etc/machine-id").write_text(hashlib.md5(
            f"jetraft-lab {h.name} {time.time_ns()}".encode()).hexdigest() + "\n")
        (upper / "etc/hosts").write_text(
            "127.0.0.1 localhost\n" + f"127.0.1.1 {h.name}\n"
            + "".join(f"{o.address} {o.name}\n" for o in ALL_HOSTS if o != h))
        (upper / "etc/systemd/network/10-lab.network").write_text(
            f"[Match]\nName=host0\n\n[Network]\nAddress={h.address}/{topology.NETWORK.prefixlen}\n"
            "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
        key = upper / "etc/ssh/ssh_host_ed25519_key"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{h.name}", "-f", str(key))
        authorized = upper / "root/.ssh/authorized_keys"
        authorized.write_text(self.ssh_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        public = key.with_suffix(".pub").read_text().split()
        known = [line for line in (self.known_hosts.read_text().splitlines()
                                   if self.known_hosts.exists() else [])
                 if not line.startswith(h.address + " ")]
        known.append(f"{h.address} {public[0]} {public[1]}")
        self.known_hosts.write_text("\n".join(known) + "\n")

    def _boot(self, h: LabHost, base: Path, disk: str) -> int:
        host_dir = self._host_dir(h.name)
        argv = ["systemd-nspawn", "--boot", "--register=no", "--keep-unit",
                f"--machine={h.name}", f"--hostname={h.name}",
                "--directory", str(base), f"--overlay={base}:{host_dir / 'upper'}:/",
                f"--network-bridge={BRIDGE}", f"--bind={disk}", "--bind=/dev/fuse",
                "--console=read-only", "--resolv-conf=off", "--timezone=off",
                "--link-journal=no"]
        cgroups = [root / CGROUP_NAME / h.name for root in CGROUP_ROOTS]
        for cg in cgroups:
            cg.mkdir(parents=True, exist_ok=True)

        def enter_cgroups() -> None:            # runs in the child, before exec
            for cg in cgroups:
                (cg / "cgroup.procs").write_text(str(os.getpid()))

        console = open(host_dir / "console.log", "ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console,
                                stderr=subprocess.STDOUT, preexec_fn=enter_cgroups,
                                start_new_session=True)
        console.close()
        return proc.pid

    def _wait_ssh(self, h: LabHost, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        host_state = self._host_state(h.name)
        while time.monotonic() < deadline:
            if not _alive(host_state.get("nspawn_pid")):
                raise LabError(f"{h.name} stopped while booting; see "
                               f"{self._host_dir(h.name) / 'console.log'}")
            if _port_open(h.address, 22):
                result = subprocess.run(self.ssh_argv(h.name, "true"), capture_output=True,
                                        timeout=30)
                if result.returncode == 0:
                    return
            time.sleep(0.25)                    # polling interval, with a deadline
        raise LabError(f"{h.name} did not answer SSH within {timeout_s:.0f} s; see "
                       f"{self._host_dir(h.name) / 'console.log'}")

    def _halt(self, name: str, host_state: dict, deadline_s: float) -> None:
        pid = host_state.get("nspawn_pid")
        if not _alive(pid):
            return
        freeze = CGROUP_ROOTS[1] / CGROUP_NAME / name / "cgroup.freeze"
        if freeze.exists():
            freeze.write_text("0")
        if not _link_up(_veth(name)) and _link_exists(_veth(name)):
            _run("ip", "link", "set", _veth(name), "up", check=False)
        os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, deadline_s):
            pid1 = _pid1(pid)
            if pid1:
                os.kill(pid1, signal.SIGKILL)
            if not _wait_gone(pid, 10.0):
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid, 5.0)


def _veth(name: str) -> str:
    return ("vb-" + name)[:15]


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and "systemd-nspawn" in Path(
        f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)   # ours when started by this process
            if done:
                return True
        except ChildProcessError:
            pass
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


def _pid1(nspawn_pid: int | None) -> int | None:
    """The host's PID 1 (as the machine sees it): systemd-nspawn's child."""
    if not nspawn_pid:
        return None
    for task in Path(f"/proc/{nspawn_pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        if children:
            return int(children[0])
    return None


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def _link_up(name: str) -> bool:
    try:
        return _run("ip", "-br", "link", "show", name).stdout.split()[1] in ("UP", "UNKNOWN")
    except (LabError, IndexError):
        return False


def _loop_backing(dev: str) -> str | None:
    try:
        return Path(f"/sys/block/{Path(dev).name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def _loops_backed_by(path: Path) -> list[str]:
    out = _run("losetup", "-j", str(path), "-O", "NAME", "-n", check=False).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _remove_cgroups(name: str) -> None:
    """Remove the host's cgroups bottom-up (systemd inside made sub-cgroups)."""
    for root in CGROUP_ROOTS:
        top = root / CGROUP_NAME / name
        if not top.exists():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
