"""The fault campaign's nemesis: each fault of a schedule (lab/schedule.py) as shell commands
on the servers' hosts, over SSH with pyinfra, on any inventory.

- kill: ``systemctl kill --signal=SIGKILL`` of the unit, then a stop (so that
  Restart=on-failure does not bring it back); the heal starts it.
- pause: SIGSTOP of the unit; the heal sends SIGCONT.
- partition and packet-loss: an nftables table ``inet jetraft_nemesis`` on the hosts that
  drops packets by peer address (all of them, or ``numgen random mod 100 < P`` of them);
  SSH (port 22) is always let through, so the controller keeps its hands on every host.
  The heal deletes the table. :func:`drop_rules` says which host drops what, per shape.
- packet-delay: a netem qdisc on the route to the other servers (``prio`` with a filter
  per peer, so that only server traffic waits); reported skipped where the kernel has no
  netem (probed once with ``tc qdisc add dev lo root netem delay 1ms``).
- power-loss: on every target at once, the server frozen (SIGSTOP), the power-loss layer
  (lab/powerloss.py, which holds what was written since the last fsync) killed, the server
  killed, both stopped, the store unmounted: unsynced writes are gone. The heal starts the
  layer, then the server.
- bitflip, chunk-copy, truncate: the server crashed (SIGKILL), then a small Python program
  (stdlib only, sent with the command; every host has python3) picks the store files of one
  class (:func:`file_class`, per flavour) and damages one (:func:`corrupt`) with the random
  choices drawn from the fault's ``seed``; then the server is started on the damaged files.
  The record's ``detail`` names the file, offsets and bits.
- membership: handed to the campaign's playbook runner (``membership``), skipped without.

:meth:`CampaignNemesis.heal_all` deletes every nemesis table and qdisc, resumes and starts
every server (and its power-loss layer): the campaign calls it in a ``finally``.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import json
import os
import random
import shlex
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from lab.drills import DEADLINE_S, DrillError, Nemesis, Server, Target
from lab.schedule import (
    FILE_CLASSES,
    FILE_KINDS,
    KILL,
    MEMBERSHIP,
    PACKET_DELAY,
    PACKET_LOSS,
    PARTITION,
    PAUSE,
    POWER_LOSS,
    Fault,
)

NFT_TABLE = "jetraft_nemesis"
SSH_PORT = 22
FLAVOURS = ("jetraft", "nats-server", "nats-server-always")
NO_NETEM = "the kernel has no netem"


class NemesisError(DrillError):
    """A fault that could not be applied or healed (the message names host and command)."""


@dataclass(frozen=True)
class CommandResult:
    """What one shell command on one host did."""

    ok: bool
    stdout: str = ""
    stderr: str = ""


class Runner(Protocol):
    """Runs shell commands on hosts: one command per host, the hosts at the same time;
    results in the order of ``commands``."""

    async def run(self, commands: list[tuple[Server, str]]) -> list[CommandResult]: ...

    def close(self) -> None: ...


class PyinfraRunner(Nemesis):
    """lab/drills.py's Nemesis's SSH connections (pyinfra, in one worker thread of its own)
    running commands on several hosts at once: each host's command is started on its SSH
    connection before any is waited for. ``hosts``: pyinfra hosts by server name, already
    connected (default: connect to every server of ``target`` now)."""

    def __init__(self, target: Target, hosts: Mapping[str, Any] | None = None):
        if hosts is None:
            super().__init__(target)
        else:
            self.target = target
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="nemesis")
            self._hosts = dict(hosts)

    async def run(self, commands: list[tuple[Server, str]]) -> list[CommandResult]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._run_all,
                                                                commands)

    def _run_all(self, commands: list[tuple[Server, str]]) -> list[CommandResult]:
        from pyinfra.api.command import StringCommand

        started: list[Any] = []
        for server, command in commands:
            client = getattr(self._hosts[server.name].connector, "client", None)
            if client is None or len(commands) == 1:
                started.append(None)
                continue
            try:
                stdin, stdout, stderr = client.exec_command(f"sh -c {shlex.quote(command)}",
                                                            timeout=DEADLINE_S)
                stdin.close()
                started.append((stdout, stderr))
            except Exception as exc:          # reported as that host's failure
                started.append(exc)
        results = []
        for (server, command), handle in zip(commands, started):
            if handle is None:
                ok, output = self._hosts[server.name].run_shell_command(StringCommand(command))
                results.append(CommandResult(bool(ok), output.stdout, output.stderr))
            elif isinstance(handle, Exception):
                results.append(CommandResult(False, "", f"{type(handle).__name__}: {handle}"))
            else:
                stdout, stderr = handle
                try:
                    out = stdout.read().decode(errors="replace")
                    err = stderr.read().decode(errors="replace")
                    status = stdout.channel.recv_exit_status()
                except Exception as exc:      # a timeout or a dropped connection
                    results.append(CommandResult(False, "", f"{type(exc).__name__}: {exc}"))
                    continue
                results.append(CommandResult(status == 0, out, err))
        return results


@dataclass
class FaultRecord:
    """What the nemesis did for one fault: the planned ``start_s``/``end_s`` (seconds from
    the workloads' start), ``applied_ns``/``healed_ns`` (ns since the epoch, when the
    fault was in place and when it was undone), ``skipped`` (why it was not applied, or
    None) and ``detail`` (what exactly: addresses cut, files and bits damaged...)."""

    kind: str
    targets: list[str]
    params: dict[str, Any]
    start_s: float
    end_s: float
    applied_ns: int | None = None
    healed_ns: int | None = None
    skipped: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- network faults: pure rule generation -------------------------------------------

@dataclass(frozen=True)
class DropRule:
    """On one host: drop packets from (``chain`` input) or to (output) ``addresses``;
    all of them, or ``percent`` of them at random."""

    chain: str
    addresses: tuple[str, ...]
    percent: int | None = None


def _others(host: str, side: tuple[str, ...], names: list[str]) -> list[str]:
    """The servers on the other side from ``host`` (every other server when ``side`` is
    the whole cluster)."""
    if set(side) >= set(names):
        return [n for n in names if n != host]
    mine = set(side) if host in side else set(names) - set(side)
    return [n for n in names if n not in mine]


def ring_far(ring: list[str]) -> dict[str, list[str]]:
    """Jepsen's majorities-ring over ``ring`` (names in ring order): each server keeps the
    servers within ring distance ``m // 2`` (``m`` a majority) and loses the others, so each
    sees a majority and no two see the same one. For five: the two not adjacent to it."""
    n = len(ring)
    keep = (n // 2 + 1) // 2
    far: dict[str, list[str]] = {}
    for i, name in enumerate(ring):
        far[name] = sorted(ring[j] for j in range(n)
                           if min((i - j) % n, (j - i) % n) > keep)
    return far


def drop_rules(fault: Fault, addresses: Mapping[str, str]) -> dict[str, list[DropRule]]:
    """Per server name, the drop rules ``fault`` (a partition or packet-loss) puts on that
    server's host; ``addresses``: every server's address. Hosts without rules are absent.

    - partition ``one``/``zone``/``majority``: the targets and the others drop each other,
      both ways, on both sides;
    - ``one-way``: the targets drop what comes from the others (their own packets still
      arrive);
    - ``majorities-ring``: each server drops both ways the servers :func:`ring_far` names
      (``ring`` in the params, else the targets sorted);
    - packet-loss: the targets drop ``percent`` % of what comes from (and, ``both``, goes
      to) the servers on the other side (every other server when the targets are all).
    """
    names = sorted(addresses)
    unknown = [t for t in fault.targets if t not in addresses]
    if unknown:
        raise NemesisError(f"{fault.kind}: no server {', '.join(unknown)} in the inventory")

    def addr(hosts: list[str]) -> tuple[str, ...]:
        return tuple(addresses[h] for h in hosts)

    rules: dict[str, list[DropRule]] = {}
    if fault.kind == PARTITION:
        shape = fault.param("shape")
        if shape in ("one", "zone", "majority"):
            for host in names:
                other = addr(_others(host, fault.targets, names))
                if other:
                    rules[host] = [DropRule("input", other), DropRule("output", other)]
        elif shape == "one-way":
            for host in fault.targets:
                other = addr(_others(host, fault.targets, names))
                if other:
                    rules[host] = [DropRule("input", other)]
        elif shape == "majorities-ring":
            ring = list(fault.param("ring") or sorted(fault.targets))
            for host, far in ring_far(ring).items():
                if far:
                    rules[host] = [DropRule("input", addr(far)), DropRule("output", addr(far))]
        else:
            raise NemesisError(f"partition: no shape {shape!r}")
    elif fault.kind == PACKET_LOSS:
        percent = int(fault.param("percent", 10))
        if not 0 < percent <= 100:
            raise NemesisError(f"packet-loss: percent must be 1-100, not {percent}")
        both = fault.param("direction", "both") == "both"
        for host in fault.targets:
            other = addr(_others(host, fault.targets, names))
            if other:
                rules[host] = [DropRule("input", other, percent)]
                if both:
                    rules[host].append(DropRule("output", other, percent))
    else:
        raise NemesisError(f"{fault.kind} is not a fault of nftables rules")
    return rules


def nft_ruleset(rules: list[DropRule], table: str = NFT_TABLE) -> str:
    """The nftables ruleset (for ``nft -f``) of one host's ``rules``: replaces the table
    ``inet <table>`` atomically; SSH is accepted before any drop."""
    chains: dict[str, list[str]] = {"input": [f"tcp dport {SSH_PORT} accept"],
                                    "output": [f"tcp sport {SSH_PORT} accept"]}
    for rule in rules:
        if rule.chain not in chains:
            raise ValueError(f"no chain {rule.chain!r}")
        way = "saddr" if rule.chain == "input" else "daddr"
        sample = f"numgen random mod 100 < {rule.percent} " if rule.percent is not None else ""
        for family in ("ip", "ip6"):
            picked = sorted({a for a in rule.addresses
                             if (ipaddress.ip_address(a).version == 4) == (family == "ip")},
                            key=ipaddress.ip_address)
            if picked:
                chains[rule.chain].append(f"{family} {way} {{ {', '.join(picked)} }} {sample}drop")
    lines = [f"table inet {table} {{}}", f"delete table inet {table}", f"table inet {table} {{"]
    for chain, body in chains.items():
        lines.append(f"\tchain {chain} {{")
        lines.append(f"\t\ttype filter hook {chain} priority -10; policy accept;")
        lines += [f"\t\t{line}" for line in body]
        lines.append("\t}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def nft_rulesets(fault: Fault, addresses: Mapping[str, str]) -> dict[str, str]:
    """Per server name, the nftables ruleset ``fault`` loads on that host."""
    return {host: nft_ruleset(rules) for host, rules in drop_rules(fault, addresses).items()}


def nft_apply_command(ruleset: str) -> str:
    return f"printf %s {shlex.quote(ruleset)} | nft -f -"


def nft_heal_command(table: str = NFT_TABLE) -> str:
    return (f"if nft list table inet {table} >/dev/null 2>&1; "
            f"then nft delete table inet {table}; fi")


def _devices_script(peers: list[str]) -> str:
    """Shell: ``$devs``, the devices the routes to ``peers`` leave by."""
    quoted = " ".join(shlex.quote(p) for p in peers)
    return (f"devs=; for peer in {quoted}; do "
            "dev=$(ip -o route get \"$peer\" | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'); "
            "[ -n \"$dev\" ] || { echo \"no route to $peer\" >&2; exit 1; }; "
            "case \" $devs \" in *\" $dev \"*) ;; *) devs=\"$devs $dev\" ;; esac; done")


_OURS = "tc qdisc show dev \"$dev\" | grep -q '^qdisc prio 1: root'"


def netem_script(peers: list[str], delay_ms: int, jitter_ms: int) -> str:
    """Shell for one host: the packets to ``peers`` delayed ``delay_ms`` (± ``jitter_ms``)
    by netem, other traffic (SSH from the controller) not: a ``prio`` root qdisc whose
    third band is netem, and a filter per peer sending its packets there."""
    lines = [_devices_script(peers), "for dev in $devs; do",
             f"  if {_OURS}; then tc qdisc del dev \"$dev\" root; fi",
             "  tc qdisc replace dev \"$dev\" root handle 1: prio || exit 1",
             f"  tc qdisc add dev \"$dev\" parent 1:3 handle 30: netem delay {int(delay_ms)}ms "
             f"{int(jitter_ms)}ms || exit 1"]
    for peer in sorted(peers, key=ipaddress.ip_address):
        if ipaddress.ip_address(peer).version == 4:
            match = f"protocol ip parent 1: prio 3 u32 match ip dst {peer}/32"
        else:
            match = f"protocol ipv6 parent 1: prio 4 u32 match ip6 dst {peer}/128"
        lines.append(f"  tc filter add dev \"$dev\" {match} flowid 1:3 || exit 1")
    lines.append("done")
    return "\n".join(lines) + "\n"


def netem_heal_script(peers: list[str]) -> str:
    """Shell for one host: the nemesis's qdisc removed from the devices towards ``peers``."""
    return "\n".join([_devices_script(peers), "for dev in $devs; do",
                      f"  if {_OURS}; then tc qdisc del dev \"$dev\" root || exit 1; fi",
                      "done"]) + "\n"


NETEM_PROBE = "tc qdisc add dev lo root netem delay 1ms && tc qdisc del dev lo root"


# ---- file faults: shipped to the host as source (stdlib only) -------------------------

def file_class(relpath: str, flavour: str) -> str | None:
    """The class of a store file, by its path relative to the store directory ('/'
    separated): ``stream-block``, ``index``, ``raft-log``, ``snapshot``, or None.

    jetraft (server/jetraft/jetstream/layout.py, store_format.py; raft/storage/): message
    blocks ``jetstream/<acct>/streams/<stream>/msgs/<20 digits>.blk`` and their index files
    ``.idx``; each RAFT group's log segments ``jetstream/_raft/<group>/<20 digits>.log`` and
    its ``snapshot`` file. nats-server: message blocks ``.blk`` under
    ``jetstream/<acct>/streams/<stream>/msgs``; index and state files ``.idx``, ``.db``,
    ``.inf``, ``.sum`` of a stream (its directory and msgs/); RAFT logs
    ``jetstream/<acct>/_js_/<group>/msgs/*.blk`` and snapshots ``.../snapshots/snap.*``.
    Temporary files (``.tmp``) are in no class."""
    parts = relpath.strip("/").split("/")
    name = parts[-1]
    if len(parts) < 4 or parts[0] != "jetstream" or name.endswith(".tmp"):
        return None
    if flavour == "jetraft":
        if len(parts) == 6 and parts[2] == "streams" and parts[4] == "msgs":
            if name.endswith(".blk"):
                return "stream-block"
            if name.endswith(".idx"):
                return "index"
        if len(parts) == 4 and parts[1] == "_raft":
            if name.endswith(".log"):
                return "raft-log"
            if name == "snapshot":
                return "snapshot"
        return None
    if parts[2] == "streams":
        if len(parts) == 6 and parts[4] == "msgs" and name.endswith(".blk"):
            return "stream-block"
        if (len(parts) == 5 or (len(parts) == 6 and parts[4] == "msgs")) and \
                name.endswith((".idx", ".db", ".inf", ".sum")):
            return "index"
    if parts[2] == "_js_" and len(parts) == 6:
        if parts[4] == "msgs" and name.endswith(".blk"):
            return "raft-log"
        if parts[4] == "snapshots" and name.startswith("snap."):
            return "snapshot"
    return None


def store_files(store_dir: str) -> list[str]:
    """Every regular file under ``store_dir``, relative ('/' separated), sorted."""
    found = []
    for root, dirs, files in os.walk(store_dir):
        dirs.sort()
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(os.path.relpath(path, store_dir).replace(os.sep, "/"))
    return sorted(found)


def corrupt(paths: list[str], kind: str, rng: random.Random, *, bits: int = 1,
            chunk: int = 4096) -> dict:
    """Damage one of ``paths`` (files of one class) as ``kind`` says, every choice drawn
    from ``rng`` (the paths are sorted first), the damage fsynced; returns what was done:

    - ``bitflip``: ``bits`` distinct bits of one file flipped (``bits``: [offset, bit]);
    - ``chunk-copy``: up to ``chunk`` bytes of one file copied over the same number of bytes
      of another (``source``, ``source_offset``, ``file``, ``offset``, ``length``);
    - ``truncate``: one file cut to a random shorter length (``size`` -> ``new_size``).

    Empty files are never picked; ``{"skipped": reason}`` when nothing can be damaged."""
    sizes = []
    for p in sorted(paths):
        size = os.path.getsize(p)
        if size > 0:
            sizes.append((p, size))
    if len(sizes) < (2 if kind == "chunk-copy" else 1):
        return {"kind": kind, "skipped": f"{len(sizes)} non-empty file(s) of the class"}

    def rewrite(path: str, edits: list) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            for offset, data in edits:
                os.pwrite(fd, data, offset)
            os.fsync(fd)
        finally:
            os.close(fd)

    if kind == "bitflip":
        path, size = rng.choice(sizes)
        flips = sorted(rng.sample(range(size * 8), min(bits, size * 8)))
        changed: dict[int, int] = {}
        with open(path, "rb") as f:
            for position in flips:
                offset = position // 8
                if offset not in changed:
                    f.seek(offset)
                    changed[offset] = f.read(1)[0]
                changed[offset] ^= 1 << (position % 8)
        rewrite(path, [(offset, bytes([byte])) for offset, byte in sorted(changed.items())])
        return {"kind": kind, "file": path, "size": size,
                "bits": [[p // 8, p % 8] for p in flips]}
    if kind == "chunk-copy":
        (src, src_size), (dst, dst_size) = rng.sample(sizes, 2)
        length = rng.randint(1, min(chunk, src_size, dst_size))
        src_off = rng.randrange(src_size - length + 1)
        dst_off = rng.randrange(dst_size - length + 1)
        with open(src, "rb") as f:
            f.seek(src_off)
            piece = f.read(length)
        with open(dst, "rb") as f:
            f.seek(dst_off)
            before = f.read(length)
        rewrite(dst, [(dst_off, piece)])
        return {"kind": kind, "source": src, "source_offset": src_off, "file": dst,
                "offset": dst_off, "length": length, "changed": before != piece}
    if kind == "truncate":
        path, size = rng.choice(sizes)
        new_size = rng.randrange(size)
        fd = os.open(path, os.O_RDWR)
        try:
            os.ftruncate(fd, new_size)
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"kind": kind, "file": path, "size": size, "new_size": new_size}
    raise ValueError(f"no corruption {kind!r}")


def _corrupt_store(store_dir: str, flavour: str, kind: str, klass: str, seed: int, bits: int,
                   chunk: int, classes: tuple = ()) -> None:
    """On the host: damage a file of class ``klass`` under ``store_dir``, or, when the host
    holds too few non-empty files of that class (none: a stream whose group never took a
    snapshot; one, for a chunk-copy, which needs a file to copy from), of the first of
    ``classes`` it holds enough of; print the detail as one line of JSON (``file_class``
    the class damaged, ``drawn_class`` the one the schedule drew)."""
    files = store_files(store_dir)
    picked: list = []
    chosen = klass
    need = 2 if kind == "chunk-copy" else 1
    for chosen in [klass, *(c for c in classes if c != klass)]:
        picked = [r for r in files if file_class(r, flavour) == chosen
                  and os.path.getsize(os.path.join(store_dir, r)) > 0]
        if len(picked) >= need:
            break
    if len(picked) < need:
        chosen = klass
        picked = [r for r in files if file_class(r, flavour) == klass
                  and os.path.getsize(os.path.join(store_dir, r)) > 0]
    detail = corrupt([os.path.join(store_dir, r) for r in picked], kind, random.Random(seed),
                     bits=bits, chunk=chunk)
    detail.update(file_class=chosen, drawn_class=klass, candidates=len(picked))
    print(json.dumps(detail))


def corruption_script(store_dir: str, flavour: str, kind: str, klass: str, seed: int,
                      bits: int = 1, chunk: int = 4096) -> str:
    """The Python program the host runs (``python3 -c``): :func:`file_class`,
    :func:`store_files`, :func:`corrupt` as they are here, then the call."""
    source = "\n\n".join(inspect.getsource(f) for f in (file_class, store_files, corrupt,
                                                          _corrupt_store))
    call = f"_corrupt_store{(store_dir, flavour, kind, klass, int(seed), int(bits), int(chunk), tuple(FILE_CLASSES))!r}"
    header = "from __future__ import annotations\n\nimport json, os, random\n"
    return f"{header}\n\n{source}\n\n{call}\n"


# ---- the nemesis ------------------------------------------------------------------------

Membership = Callable[[Fault], Awaitable[dict]]


class CampaignNemesis:
    """Applies and heals a schedule's faults on ``target``'s hosts.

    ``unit``: the server's systemd unit; ``powerloss_unit``: its store's power-loss layer
    (installed by lab/powerloss.yml); ``store_dir``: the store directory (the layer's
    mount); ``flavour``: which server's files the corruptions look for (jetraft,
    nats-server, nats-server-always). ``runner``: how commands reach the hosts (default
    :class:`PyinfraRunner`, which connects over SSH at once); ``membership``: the
    campaign's playbook runner for membership faults (``await membership(fault) ->
    detail``); ``clock``: ns since the epoch."""

    def __init__(self, target: Target, *, unit: str = "jetraft.service",
                 powerloss_unit: str = "jetraft-powerloss.service",
                 store_dir: str = "/var/lib/jetraft", flavour: str = "jetraft",
                 runner: Runner | None = None, membership: Membership | None = None,
                 clock: Callable[[], int] = time.time_ns):
        if flavour not in FLAVOURS:
            raise ValueError(f"no flavour {flavour!r}: one of {', '.join(FLAVOURS)}")
        self.target, self.unit, self.powerloss_unit = target, unit, powerloss_unit
        self.store_dir, self.flavour = store_dir, flavour
        self.membership, self.clock = membership, clock
        self.runner: Runner = runner if runner is not None else PyinfraRunner(target)
        self.records: dict[Fault, FaultRecord] = {}
        self._netem: str | None = None          # "" works; else why not; None: not probed
        self._addresses: dict[str, str] | None = None

    # -- helpers --

    def _servers(self, names: tuple[str, ...] | list[str]) -> list[Server]:
        by_name = {s.name: s for s in self.target.servers}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise NemesisError(f"no server {', '.join(unknown)} in the inventory")
        return [by_name[n] for n in names]

    def addresses(self) -> dict[str, str]:
        """Every server's IP address (names in the inventory are resolved once)."""
        if self._addresses is None:
            out = {}
            for s in self.target.servers:
                try:
                    out[s.name] = str(ipaddress.ip_address(s.address))
                except ValueError:
                    try:
                        out[s.name] = socket.gethostbyname(s.address)
                    except OSError as exc:
                        raise NemesisError(f"cannot resolve {s.name}'s address {s.address}: "
                                           f"{exc}") from exc
            self._addresses = out
        return self._addresses

    async def _run(self, commands: list[tuple[Server, str]], what: str,
                   check: bool = True) -> list[CommandResult]:
        results = await self.runner.run(commands) if commands else []
        failed = [(s, r) for (s, _), r in zip(commands, results) if not r.ok]
        if check and failed:
            raise NemesisError(f"{what} failed on " + "; ".join(
                f"{s.name}: {(r.stderr or r.stdout).strip()[-500:] or 'no output'}"
                for s, r in failed))
        return results

    async def _each(self, names, command: str, what: str, check: bool = True):
        return await self._run([(s, command) for s in self._servers(names)], what, check)

    def _record(self, fault: Fault) -> FaultRecord:
        if fault not in self.records:
            self.records[fault] = FaultRecord(fault.kind, list(fault.targets),
                                              dict(fault.as_dict()["params"]), fault.start_s,
                                              fault.end_s)
        return self.records[fault]

    def _kill_command(self) -> str:
        return f"systemctl kill --signal=SIGKILL {self.unit}; systemctl stop {self.unit}"

    def _signal_command(self, signal: str) -> str:
        return f"systemctl kill --signal={signal} {self.unit}"

    def _start_command(self) -> str:
        return f"systemctl start {self.unit}"

    def powerloss_commands(self) -> list[str]:
        """One host's power cut, in order."""
        return [f"systemctl kill --signal=SIGSTOP {self.unit}",
                f"systemctl kill --signal=SIGKILL {self.powerloss_unit}",
                f"systemctl kill --signal=SIGKILL {self.unit}",
                f"systemctl stop {self.unit} {self.powerloss_unit} || exit 1",
                # only the layer's own mount: the store's disk stays mounted beneath it
                f"findmnt -n -o FSTYPE {shlex.quote(self.store_dir)} | tail -n 1 | grep -q '^fuse'"
                f" && umount -l {shlex.quote(self.store_dir)}; true"]

    # -- apply / heal --

    async def apply(self, fault: Fault) -> FaultRecord:
        """Put ``fault`` in place; its record (``applied_ns`` once it is in place, or
        ``skipped``). Raises NemesisError when a command fails."""
        record = self._record(fault)
        kind = fault.kind
        if kind == KILL:
            await self._each(fault.targets, self._kill_command(), "kill")
        elif kind == PAUSE:
            await self._each(fault.targets, self._signal_command("SIGSTOP"), "pause")
        elif kind in (PARTITION, PACKET_LOSS):
            rulesets = nft_rulesets(fault, self.addresses())
            await self._run([(s, nft_apply_command(rulesets[s.name]))
                             for s in self._servers(sorted(rulesets))], kind)
            record.detail["dropped"] = {
                host: {r.chain: list(r.addresses) for r in rules}
                for host, rules in drop_rules(fault, self.addresses()).items()}
        elif kind == PACKET_DELAY:
            await self._apply_delay(fault, record)
        elif kind == POWER_LOSS:
            await self._power_cut(fault, record)
        elif kind in FILE_KINDS:
            await self._corrupt(fault, record)
        elif kind == MEMBERSHIP:
            if self.membership is None:
                record.skipped = "membership changes need the campaign's playbook runner"
            else:
                try:
                    detail = dict(await self.membership(fault))
                except NemesisError as exc:     # a playbook that refused or failed: a finding
                    detail = {"failed": str(exc)[-2000:]}
                record.skipped = detail.pop("skipped", None)
                record.detail.update(detail)
        else:
            raise NemesisError(f"no fault of kind {kind!r}")
        if record.skipped is None:
            record.applied_ns = self.clock()
        return record

    async def heal(self, fault: Fault) -> FaultRecord:
        """Undo ``fault``; its record with ``healed_ns``. Raises NemesisError when a command
        fails."""
        record = self._record(fault)
        kind = fault.kind
        if record.skipped is not None:
            pass
        elif kind == KILL:
            await self._each(fault.targets, self._start_command(), "start after kill")
        elif kind == PAUSE:
            await self._each(fault.targets, self._signal_command("SIGCONT"), "resume")
        elif kind in (PARTITION, PACKET_LOSS):
            await self._each(sorted(drop_rules(fault, self.addresses())), nft_heal_command(),
                             f"{kind} heal")
        elif kind == PACKET_DELAY:
            names = sorted(self.addresses())
            await self._run([(s, netem_heal_script(self._peers(s.name, fault, names)))
                             for s in self._servers(fault.targets)], "packet-delay heal")
        elif kind == POWER_LOSS:
            await self._each(fault.targets,
                             f"systemctl start {self.powerloss_unit} {self.unit}",
                             "start after power loss")
        elif kind in FILE_KINDS or kind == MEMBERSHIP:
            pass                                # restarted at apply; playbooks undo themselves
        else:
            raise NemesisError(f"no fault of kind {kind!r}")
        record.healed_ns = self.clock()
        return record

    def _peers(self, host: str, fault: Fault, names: list[str]) -> list[str]:
        return [self.addresses()[n] for n in _others(host, fault.targets, names)]

    async def _apply_delay(self, fault: Fault, record: FaultRecord) -> None:
        targets = self._servers(fault.targets)
        if self._netem is None:
            probe = (await self._run([(targets[0], NETEM_PROBE)], "netem probe", check=False))[0]
            self._netem = "" if probe.ok else (probe.stderr or probe.stdout).strip() or "refused"
        if self._netem:
            record.skipped = NO_NETEM
            record.detail["probe"] = self._netem
            return
        names = sorted(self.addresses())
        delay, jitter = int(fault.param("delay_ms", 50)), int(fault.param("jitter_ms", 0))
        await self._run([(s, netem_script(self._peers(s.name, fault, names), delay, jitter))
                         for s in targets], "packet-delay")
        record.detail["delayed"] = {s.name: self._peers(s.name, fault, names) for s in targets}

    async def _power_cut(self, fault: Fault, record: FaultRecord) -> None:
        """Refuse unless every target has the power-loss layer; then cut every target at
        once."""
        check = await self._each(fault.targets,
                                 f"systemctl cat {self.powerloss_unit} >/dev/null 2>&1",
                                 "power-loss check", check=False)
        missing = [n for n, r in zip(fault.targets, check) if not r.ok]
        if missing:
            raise NemesisError(f"power-loss: {self.powerloss_unit} is not installed on "
                               f"{', '.join(missing)}; the campaign installs it "
                               "(ansible-playbook lab/powerloss.yml)")
        await self._each(fault.targets, "; ".join(self.powerloss_commands()), "power-loss")
        record.detail["coordinated"] = len(fault.targets) > 1

    async def _corrupt(self, fault: Fault, record: FaultRecord) -> None:
        """Crash the server, damage one of its files, start it on them."""
        if len(fault.targets) != 1:
            raise NemesisError(f"{fault.kind} hits exactly one host, not {len(fault.targets)}")
        klass = fault.param("file_class")
        if klass not in FILE_CLASSES:
            raise NemesisError(f"{fault.kind}: no file class {klass!r}")
        await self._each(fault.targets, self._kill_command(), f"{fault.kind}: crash")
        script = corruption_script(self.store_dir, self.flavour, fault.kind, klass,
                                   int(fault.param("seed", 0)), int(fault.param("bits", 1)),
                                   int(fault.param("chunk", 4096)))
        result = (await self._each(fault.targets, f"python3 -c {shlex.quote(script)}",
                                   f"{fault.kind}: damage"))[0]
        try:
            detail = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise NemesisError(f"{fault.kind}: unreadable report from {fault.targets[0]}: "
                               f"{result.stdout!r}") from exc
        record.detail.update(detail)
        if "skipped" in detail:
            record.skipped = f"no {klass} file to damage: {detail['skipped']}"
        restart = (await self._each(fault.targets, self._start_command(),
                                    f"{fault.kind}: restart", check=False))[0]
        record.detail["restart"] = "ok" if restart.ok else \
            (restart.stderr or restart.stdout).strip()[-500:] or "failed"

    def heal_all_command(self) -> str:
        """One host's repair of everything: tables, qdiscs, SIGCONT, the layer and the
        server started."""
        peers = sorted(self.addresses().values(), key=ipaddress.ip_address)
        return "\n".join([
            f"{nft_heal_command()} || failed=1",
            f"( {netem_heal_script(peers).strip()}\n) 2>/dev/null || true",
            f"systemctl kill --signal=SIGCONT {self.unit} 2>/dev/null || true",
            f"if systemctl cat {self.powerloss_unit} >/dev/null 2>&1; then "
            f"systemctl start {self.powerloss_unit} || failed=1; fi",
            f"systemctl start {self.unit} || failed=1",
            "exit ${failed:-0}"]) + "\n"

    async def heal_all(self) -> FaultRecord:
        """Every host repaired, whatever was applied: nemesis tables deleted, netem removed,
        servers resumed, layers and servers started. Never raises for a host's failure: the
        record's ``detail`` says per host ``ok`` or what failed."""
        names = [s.name for s in self.target.servers]
        record = FaultRecord("heal-all", names, {}, 0.0, 0.0)
        try:
            results = await self._run([(s, self.heal_all_command())
                                       for s in self.target.servers], "heal-all", check=False)
            record.detail = {s.name: "ok" if r.ok else (r.stderr or r.stdout).strip()[-500:]
                             or "failed" for s, r in zip(self.target.servers, results)}
        except Exception as exc:      # in a finally: report, never mask the campaign's error
            record.detail = {"error": f"{type(exc).__name__}: {exc}"}
        record.healed_ns = self.clock()
        return record

    async def reconnect(self, target: Target | None = None) -> None:
        """New SSH connections to every host (``target``: the inventory as it is now), after
        a host was replaced by a new machine with a new host key. A runner given to the
        constructor is kept as it is."""
        if target is not None:
            self.target = target
            self._addresses = None              # resolved again for the servers there are now
        if isinstance(self.runner, PyinfraRunner):
            old = self.runner
            self.runner = await asyncio.to_thread(PyinfraRunner, self.target)
            old.close()

    def close(self) -> None:
        self.runner.close()
