"""The fault campaign's schedule: which faults, on which servers, when; drawn from a seed.

Pure: no I/O, no clock. :func:`draw` depends on its arguments alone (``random.Random(seed)``
and integer arithmetic in tenths of a second), so a seed gives the same schedule on every
machine and on every flavour (jetraft, nats-server, nats-server-always), and a run that
found something is replayed with ``--seed``.

The shape is Jepsen's (jepsen-io/nats): after a quiet start, fault windows of 5-25 s
alternate with quiet windows of 10-20 s in which the cluster may recover, and the last
30 s of a run are quiet. A window holds one fault, or two composed on purpose: a kill
during a partition (Jepsen's part-kill) or pauses plus a kill of another server
(pause-kill), or a membership change with one other server cut off in its middle
(membership-part); both faults of a composition carry ``composed`` in their params. A flapping
partition is the same cut applied and healed every ``flap_s`` seconds: one
:class:`Fault` per time it is in place.

The faults that touch files (bitflip, chunk-copy, truncate) only ever hit one host per
run, drawn once from the seed: a minority of every replica group, so that the cluster
always holds a good copy to repair from. ``membership`` changes run the appliance's
playbooks for minutes; they are drawn only when asked for in ``kinds``.

Windows never overlap but for the two compositions, so no host is paused and killed, or
partitioned twice, unless a composition says so; every fault ends (a partition is healed)
before the final quiet window.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KILL = "kill"
PAUSE = "pause"
PARTITION = "partition"
POWER_LOSS = "power-loss"
BITFLIP = "bitflip"
CHUNK_COPY = "chunk-copy"
TRUNCATE = "truncate"
PACKET_LOSS = "packet-loss"
PACKET_DELAY = "packet-delay"
MEMBERSHIP = "membership"

#: Every kind of fault, with the line ``python -m lab campaign --help`` and docs/lab.md show.
KINDS: dict[str, str] = {
    KILL: "SIGKILL of the server (one, a zone or a majority); started again at the heal",
    PAUSE: "SIGSTOP of the server (one, a zone or a majority); SIGCONT at the heal",
    PARTITION: "nftables cuts between servers: one, zone, majority, one-way or "
               "majorities-ring (each sees a majority, no two majorities agree); may flap",
    POWER_LOSS: "the server and its store's power-loss layer killed at once, unsynced writes "
                "dropped (one, a zone, or every host at once)",
    BITFLIP: "the server crashed, bits flipped in one store file of a class, restarted "
             "(the run's one corruption host)",
    CHUNK_COPY: "the server crashed, a chunk of one store file copied over another of the "
                "same class, restarted (the corruption host)",
    TRUNCATE: "the server crashed, one store file of a class cut short, restarted "
              "(the corruption host)",
    PACKET_LOSS: "a share of the packets between servers dropped (one way or both)",
    PACKET_DELAY: "packets to the other servers delayed with netem (skipped where the "
                  "kernel has no netem)",
    MEMBERSHIP: "a playbook changes the cluster: peer remove and re-add, replace a host, "
                "scale up and down, rolling upgrade (only when asked for; takes minutes)",
}
#: What a run draws from when ``kinds`` is not given: every kind but membership.
DEFAULT_KINDS: frozenset[str] = frozenset(KINDS) - {MEMBERSHIP}
#: Kinds that change store files, always on the run's one corruption host.
FILE_KINDS: frozenset[str] = frozenset({BITFLIP, CHUNK_COPY, TRUNCATE})
#: Kinds that act on the network (one nftables table or one netem qdisc at a time).
NETWORK_KINDS: frozenset[str] = frozenset({PARTITION, PACKET_LOSS, PACKET_DELAY})

PARTITION_SHAPES: tuple[str, ...] = ("one", "zone", "majority", "one-way", "majorities-ring")
#: The classes of store file a corruption picks from (lab/nemesis.py says which files).
FILE_CLASSES: tuple[str, ...] = ("stream-block", "index", "raft-log", "snapshot")
MEMBERSHIP_ACTIONS: tuple[str, ...] = ("peer-remove-readd", "replace-host", "scale-up-down",
                                       "rolling-upgrade")
#: Compositions: two faults in one window, on purpose.
PART_KILL = "part-kill"
PAUSE_KILL = "pause-kill"
#: A membership change with a partition of another server in the middle of it (Jepsen's
#: membership changes under partitions: nats-server issue 7545).
MEMBERSHIP_PART = "membership-part"

#: Window lengths in seconds (inclusive bounds).
FAULT_WINDOW_S = (5, 25)
QUIET_WINDOW_S = (10, 20)
MEMBERSHIP_WINDOW_S = (120, 240)
FINAL_QUIET_S = 30
FLAP_S = (2, 5)

_DS = 10          # the schedule's arithmetic is in tenths of a second


class ScheduleError(ValueError):
    """A schedule that cannot be drawn (unknown kinds, too few servers, too little time)."""


def _frozen(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` (one of :data:`KINDS`) on ``targets`` (server names), applied
    ``start_s`` and healed ``end_s`` seconds after the workloads' start. ``params``: the
    kind's settings as sorted ``(key, value)`` pairs (a mapping is accepted and sorted),
    values JSON-serialisable (lists become tuples)."""

    kind: str
    targets: tuple[str, ...]
    start_s: float
    end_s: float
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        items = self.params.items() if isinstance(self.params, Mapping) else self.params
        object.__setattr__(self, "params", tuple(sorted((str(k), _frozen(v)) for k, v in items)))
        object.__setattr__(self, "targets", tuple(self.targets))

    def param(self, key: str, default: Any = None) -> Any:
        """The value of parameter ``key`` (``default`` when the fault has none)."""
        return dict(self.params).get(key, default)

    def as_dict(self) -> dict[str, Any]:
        """The fault as JSON-ready data (:meth:`from_dict` reads it back)."""
        return {"kind": self.kind, "targets": list(self.targets), "start_s": self.start_s,
                "end_s": self.end_s, "params": {k: _thawed(v) for k, v in self.params}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Fault":
        return cls(data["kind"], tuple(data["targets"]), data["start_s"], data["end_s"],
                   dict(data.get("params", {})))


def digest(faults: Iterable[Fault]) -> str:
    """A SHA-256 of the schedule's canonical JSON: equal digests, equal schedules."""
    text = json.dumps([f.as_dict() for f in faults], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Cluster:
    names: tuple[str, ...]
    zones: dict[str, tuple[str, ...]]

    def scope(self, rng: random.Random, scopes: tuple[str, ...]) -> tuple[tuple[str, ...], dict]:
        """Targets of a scope drawn from ``scopes``: one server, a zone (one that is not the
        whole cluster; one server when no zone is), a majority, or all."""
        proper = [z for z in sorted(self.zones) if len(self.zones[z]) < len(self.names)]
        scope = rng.choice(scopes)
        if scope == "zone" and not proper:
            scope = "one"
        if scope == "one":
            return (rng.choice(self.names),), {"scope": "one"}
        if scope == "zone":
            zone = rng.choice(proper)
            return self.zones[zone], {"scope": "zone", "zone": zone}
        if scope == "majority":
            return tuple(sorted(rng.sample(self.names, len(self.names) // 2 + 1))), \
                {"scope": "majority"}
        return self.names, {"scope": "all"}


def _steps(kinds: frozenset[str]) -> list[str]:
    """What may fill a window: each kind alone, and the compositions its kinds allow."""
    steps = sorted(kinds)
    if {PARTITION, KILL} <= kinds:
        steps.append(PART_KILL)
    if {PAUSE, KILL} <= kinds:
        steps.append(PAUSE_KILL)
    if {MEMBERSHIP, PARTITION} <= kinds:
        steps.append(MEMBERSHIP_PART)
    return steps


def _required(kinds: frozenset[str]) -> list[str]:
    """Steps that put every kind in at least once, compositions first where they fit."""
    steps = set(kinds)
    if {PAUSE, KILL} <= kinds:
        steps -= {PAUSE, KILL}
        steps.add(PAUSE_KILL)
    if {PARTITION, KILL} <= kinds:
        steps.discard(PARTITION)
        steps.add(PART_KILL)
    if {MEMBERSHIP, PARTITION} <= kinds:
        steps.discard(MEMBERSHIP)
        steps.add(MEMBERSHIP_PART)
    return sorted(steps)


def _min_window(step: str) -> int:
    return (MEMBERSHIP_WINDOW_S if step in (MEMBERSHIP, MEMBERSHIP_PART) else FAULT_WINDOW_S)[0] * _DS


def _max_window(step: str) -> int:
    return (MEMBERSHIP_WINDOW_S if step in (MEMBERSHIP, MEMBERSHIP_PART) else FAULT_WINDOW_S)[1] * _DS


def _need(steps: list[str]) -> int:
    """Tenths of a second ``steps`` need at least: each a minimal quiet window, then its
    minimal fault window."""
    return sum(QUIET_WINDOW_S[0] * _DS + _min_window(s) for s in steps)


def draw(seed: int, minutes: float, servers: Iterable[tuple[str, str]],
         kinds: set[str] | frozenset[str] | None = None, every_kind: bool = False) -> list[Fault]:
    """The schedule of a run of ``minutes`` over ``servers`` (``(name, zone)`` pairs, in any
    order), drawn from ``seed``: faults sorted by start. ``kinds``: the kinds to draw from
    (default :data:`DEFAULT_KINDS`; membership only when named). ``every_kind``: each of
    ``kinds`` at least once (raises ScheduleError when ``minutes`` is too short for that).
    Raises ScheduleError for an unknown kind, fewer than three servers or duplicate names."""
    if not minutes > 0:
        raise ScheduleError(f"a run lasts a positive number of minutes, not {minutes!r}")
    chosen = DEFAULT_KINDS if kinds is None else frozenset(kinds)
    unknown = sorted(chosen - set(KINDS))
    if unknown:
        raise ScheduleError(f"no kind of fault {', '.join(map(repr, unknown))}: the kinds are "
                            f"{', '.join(KINDS)}")
    if not chosen:
        raise ScheduleError("no kind of fault to draw from")
    members = sorted((str(n), str(z)) for n, z in servers)
    names = tuple(n for n, _ in members)
    if len(set(names)) != len(names):
        raise ScheduleError(f"server names repeat: {', '.join(names)}")
    if len(names) < 3:
        raise ScheduleError(f"a schedule needs at least three servers, not {len(names)}")
    zones: dict[str, tuple[str, ...]] = {}
    for n, z in members:
        zones[z] = zones.get(z, ()) + (n,)
    cluster = _Cluster(names, zones)
    total = math.floor(minutes * 60 * _DS + 1e-6)
    horizon = total - FINAL_QUIET_S * _DS
    pending = _required(chosen) if every_kind else []
    if every_kind and _need(pending) > horizon:
        least = math.ceil((_need(pending) + FINAL_QUIET_S * _DS) / 60) / _DS
        raise ScheduleError(f"{minutes:g} minutes is too short for every kind of fault "
                            f"({', '.join(sorted(chosen))}): at least {least:g} minutes")

    rng = random.Random(seed)
    corruption_host = rng.choice(names)
    rng.shuffle(pending)
    steps = _steps(chosen)
    faults: list[Fault] = []
    t = 0
    while True:
        if pending:
            step = pending.pop(0)
        else:
            fits = [s for s in steps if t + _need([s]) <= horizon]
            if not fits:
                break
            step = rng.choice(fits)
        reserve = _need(pending)
        quiet_hi = min(QUIET_WINDOW_S[1] * _DS, horizon - reserve - t - _min_window(step))
        t += rng.randint(QUIET_WINDOW_S[0] * _DS, quiet_hi)
        window = rng.randint(_min_window(step), min(_max_window(step), horizon - reserve - t))
        faults += _faults(rng, step, t, t + window, cluster, corruption_host)
        t += window
    return sorted(faults, key=lambda f: (f.start_s, f.end_s, f.kind))


def _fault(kind: str, targets: tuple[str, ...], start: int, end: int, params: dict) -> Fault:
    return Fault(kind, targets, start / _DS, end / _DS, params)


def _faults(rng: random.Random, step: str, start: int, end: int, cluster: _Cluster,
            corruption_host: str) -> list[Fault]:
    """The faults of one window [start, end) (tenths of a second)."""
    if step in (KILL, PAUSE):
        targets, params = cluster.scope(rng, ("one", "zone", "majority"))
        return [_fault(step, targets, start, end, params)]
    if step == POWER_LOSS:
        targets, params = cluster.scope(rng, ("one", "zone", "all"))
        return [_fault(step, targets, start, end, params)]
    if step == PARTITION:
        return _partition(rng, start, end, cluster, flapping=True)
    if step == PART_KILL:
        cut = _partition(rng, start, end, cluster, flapping=False, composed=PART_KILL)
        a, b = rng.randint(10, (end - start) // 3), rng.randint(10, (end - start) // 3)
        victim = rng.choice(cluster.names)
        return cut + [_fault(KILL, (victim,), start + a, end - b,
                             {"scope": "one", "composed": PART_KILL})]
    if step == PAUSE_KILL:
        paused, params = cluster.scope(rng, ("one", "zone"))
        others = [n for n in cluster.names if n not in paused]
        a, b = rng.randint(10, (end - start) // 3), rng.randint(10, (end - start) // 3)
        victim = rng.choice(others)
        return [_fault(PAUSE, paused, start, end, {**params, "composed": PAUSE_KILL}),
                _fault(KILL, (victim,), start + a, end - b,
                       {"scope": "one", "composed": PAUSE_KILL})]
    if step in FILE_KINDS:
        params: dict[str, Any] = {"file_class": rng.choice(FILE_CLASSES),
                                  "seed": rng.getrandbits(32)}
        if step == BITFLIP:
            params["bits"] = rng.randint(1, 8)
        elif step == CHUNK_COPY:
            params["chunk"] = rng.choice((512, 4096, 65536))
        return [_fault(step, (corruption_host,), start, end, params)]
    if step == PACKET_LOSS:
        targets, params = cluster.scope(rng, ("one", "zone", "all"))
        params.update(percent=rng.randint(5, 50), direction=rng.choice(("one-way", "both")))
        return [_fault(step, targets, start, end, params)]
    if step == PACKET_DELAY:
        targets, params = cluster.scope(rng, ("one", "zone", "all"))
        delay = rng.randint(20, 200)
        params.update(delay_ms=delay, jitter_ms=rng.randint(0, delay // 2))
        return [_fault(step, targets, start, end, params)]
    if step in (MEMBERSHIP, MEMBERSHIP_PART):
        action = rng.choice(MEMBERSHIP_ACTIONS)
        if action in ("peer-remove-readd", "replace-host"):
            targets: tuple[str, ...] = (rng.choice(cluster.names),)
        elif action == "rolling-upgrade":
            targets = cluster.names
        else:
            targets = ()
        params: dict[str, Any] = {"action": action}
        if step == MEMBERSHIP:
            return [_fault(MEMBERSHIP, targets, start, end, params)]
        # one server cut off in the middle of the change: never the one being replaced
        params["composed"] = MEMBERSHIP_PART
        others = [n for n in cluster.names if not (len(targets) == 1 and n in targets)]
        cut_start = start + rng.randint(10 * _DS, (end - start) // 3)
        cut_end = cut_start + rng.randint(FAULT_WINDOW_S[0] * _DS, FAULT_WINDOW_S[1] * _DS)
        return [_fault(MEMBERSHIP, targets, start, end, params),
                _fault(PARTITION, (rng.choice(others),), cut_start, min(cut_end, end),
                       {"shape": "one", "composed": MEMBERSHIP_PART})]
    raise ScheduleError(f"no step {step!r}")       # unreachable: steps come from KINDS


def _partition(rng: random.Random, start: int, end: int, cluster: _Cluster, *, flapping: bool,
               composed: str | None = None) -> list[Fault]:
    """A partition of a drawn shape over [start, end): targets are the side that is cut
    off (one, zone, majority), the side that stops hearing the others (one-way), or every
    server in ``ring`` order (majorities-ring). Flapping (a third of the windows of 8 s or
    more): in place for ``flap_s``, healed for ``flap_s``, and so on."""
    shape = rng.choice(PARTITION_SHAPES)
    params: dict[str, Any] = {"shape": shape}
    if shape == "one":
        targets: tuple[str, ...] = (rng.choice(cluster.names),)
    elif shape == "zone":
        targets, scope = cluster.scope(rng, ("zone",))
        params.update(scope)
        params["shape"] = "zone" if scope["scope"] == "zone" else "one"
    elif shape == "majority":
        targets, _ = cluster.scope(rng, ("majority",))
    elif shape == "one-way":
        targets, scope = cluster.scope(rng, ("one", "zone"))
        params.update(scope)
    else:
        ring = list(cluster.names)
        rng.shuffle(ring)
        targets, params["ring"] = cluster.names, tuple(ring)
    if composed:
        params["composed"] = composed
    if flapping and end - start >= 8 * _DS and rng.random() < 1 / 3:
        flap = rng.randint(FLAP_S[0] * _DS, min(FLAP_S[1] * _DS, (end - start) // 2))
        params["flap_s"] = flap / _DS
        out, t = [], start
        while t + flap <= end:
            out.append(_fault(PARTITION, targets, t, t + flap, params))
            t += 2 * flap
        return out
    return [_fault(PARTITION, targets, start, end, params)]
