"""Randomized runs of a jetraft RAFT group: a discrete-event scheduler in virtual time.

Every event is one primitive of :class:`raftsim.Cluster`: a node ticks; a message is
delivered (after a random delay: reordering; possibly lost or duplicated); a node takes
its Ready and writes it (volatile); those writes become durable (fsync), and only then
are its messages sent and its committed entries applied; a client proposes a unique value
to some node; or a nemesis acts: partition (a random split, or one-way cuts), heal, crash
(unsynced writes lost, sometimes a torn append), restart, leadership transfer, config
change (remove / re-add a node, when enabled), snapshot + compaction.

The invariants are checked after every event; at random heal points and at the end the
run checks liveness: with the network healed (FIFO links), every node up and no loss, a leader is
elected and a fresh proposal commits within ``liveness_bound`` of virtual time.

Everything derives from the seed: the same seed replays the same run.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, replace

from jetraft.raft.types import (
    ConfigChange,
    ConfigChangeType,
    EntryType,
    Message,
    RaftError,
)
from raftsim import Cluster, InvariantViolation

TICK = 10  # virtual time between two ticks of a node


@dataclass
class SimParams:
    """Knobs of one run. ``for_seed`` picks a varied mix from the seed."""

    nodes: int = 3
    steps: int = 2000
    delay: tuple[int, int] = (1, 12)
    fsync_delay: tuple[int, int] = (1, 6)
    loss: float = 0.02
    duplicate: float = 0.02
    propose_every: int = 15            # mean virtual time between client proposals
    nemesis_every: int = 120           # mean virtual time between nemesis actions
    crash_weight: int = 3
    torn_share: float = 0.5            # share of crashes that tear the pending append
    partition_weight: int = 3
    transfer_weight: int = 1
    snapshot_weight: int = 2
    config_changes: bool = False
    config_weight: int = 2
    wipe_weight: int = 1               # with config changes: a node loses its whole store
    liveness_checks: float = 0.2       # share of heals that start a liveness check
    election_ticks: int = 10
    heartbeat_ticks: int = 3
    pre_vote: bool = True
    check_quorum: bool = True
    max_entries_per_message: int = 64
    slow: float = 0.0                  # share of messages held up to ``slow_delay`` (long reordering)
    slow_delay: int = 600
    leader_crash_share: float = 0.3    # share of crashes aimed at the current leader

    @classmethod
    def for_seed(cls, seed: int, steps: int = 2000) -> SimParams:
        rng = random.Random(seed ^ 0x5EED)
        return cls(
            nodes=3 if seed % 2 == 0 else 5,
            steps=steps,
            loss=rng.choice((0.0, 0.01, 0.05, 0.15)),
            duplicate=rng.choice((0.0, 0.02, 0.1)),
            delay=rng.choice(((1, 4), (1, 12), (2, 40))),
            propose_every=rng.choice((5, 15, 40)),
            nemesis_every=rng.choice((40, 120, 300)),
            torn_share=rng.choice((0.0, 0.5, 1.0)),
            config_changes=seed % 4 == 3,
            pre_vote=seed % 5 != 4,
            check_quorum=seed % 7 != 6,
            max_entries_per_message=rng.choice((1, 4, 64)),
            slow=rng.choice((0.0, 0.0, 0.01, 0.05)),
        )

    @property
    def liveness_bound(self) -> int:
        """10 election timeouts, plus slack for one message round per heartbeat."""
        return 10 * 2 * self.election_ticks * TICK


class RandomSim:
    """One seeded run. ``run()`` raises :class:`InvariantViolation` with a replayable report."""

    def __init__(self, seed: int, params: SimParams | None = None, *, node_cls=None, node_cls_for=None, verbose=False) -> None:
        self.seed = seed
        self.p = params or SimParams.for_seed(seed)
        self.rng = random.Random(seed)
        self.cluster = Cluster(
            self.p.nodes,
            seed=seed,
            node_cls=node_cls,
            node_cls_for=node_cls_for,
            election_ticks=self.p.election_ticks,
            heartbeat_ticks=self.p.heartbeat_ticks,
            pre_vote=self.p.pre_vote,
            check_quorum=self.p.check_quorum,
            max_entries_per_message=self.p.max_entries_per_message,
            record_applied=False,
        )
        self.verbose = verbose
        self.queue: list[tuple[int, int, str, object]] = []
        self.seq = 0
        self.steps = 0
        self.cut: set[tuple[str, str]] = set()
        self.link_clock: dict[tuple[str, str], int] = {}  # FIFO delivery times while healed
        self.ready_scheduled: set[str] = set()
        self.members = list(self.cluster.ids)     # the current configuration (as last proposed by the sim)
        self.removed: list[str] = []
        self.proposed = 0
        self.calm_until: int | None = None        # a liveness check is running until then
        self.calm_values: set[bytes] = set()
        self.liveness_checks = 0
        self.stats = dict(
            delivered=0, lost=0, duplicated=0, crashes=0, torn=0, restarts=0, partitions=0,
            snapshots=0, transfers=0, config_changes=0, proposals=0, wipes=0, admissions=0,
        )
        self.wiped: str | None = None             # a wiped node not admitted again yet
        self.wipe_admit_at: int | None = None     # ... once its commit index reaches this
        for pid in self.cluster.ids:
            self.at(self.rng.randrange(TICK), "tick", (pid, 1))

    # -- scheduling -------------------------------------------------------------------------

    def at(self, delay: int, kind: str, arg: object) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (self.cluster.now + delay, self.seq, kind, arg))

    def touch(self, pid: str) -> None:
        sn = self.cluster.nodes[pid]
        if pid not in self.ready_scheduled and sn.inflight is None and sn.raft is not None and sn.raft.has_ready():
            self.ready_scheduled.add(pid)
            self.at(self.rng.randrange(2), "ready", (pid, sn.incarnation))

    def send(self, m: Message) -> None:
        p = self.p
        rng = self.rng
        if (m.src, m.dst) in self.cut:
            self.stats["lost"] += 1
            return
        calm = self.calm_until is not None
        if not calm and rng.random() < p.loss:
            self.stats["lost"] += 1
            return
        if calm:
            # healed: links are FIFO (jetraft multiplexes a group over one TCP route per
            # peer pair), still with random delays
            link = (m.src, m.dst)
            t = max(self.cluster.now + rng.randint(*p.delay), self.link_clock.get(link, 0))
            self.link_clock[link] = t
            self.at(t - self.cluster.now, "deliver", m)
        elif p.slow and rng.random() < p.slow:
            self.at(rng.randint(p.delay[1], p.slow_delay), "deliver", m)
        else:
            self.at(rng.randint(*p.delay), "deliver", m)
        if not calm and rng.random() < p.duplicate:
            self.stats["duplicated"] += 1
            self.at(rng.randint(*p.delay), "deliver", replace(m))

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> RandomSim:
        try:
            self._run()
        except InvariantViolation as exc:
            raise InvariantViolation(exc.invariant, self.report(exc)) from None
        except Exception as exc:  # a crash of the core under some schedule is a finding too
            raise InvariantViolation("no exception from the core", self.report(exc)) from exc
        return self

    def report(self, exc: BaseException) -> str:
        return (
            f"seed {self.seed} ({self.p.nodes} nodes, step {self.steps}, virtual time {self.cluster.now}): "
            f"{exc}\n--- last {len(self.cluster.trace)} events ---\n{self.cluster.format_trace()}\n"
            f"--- replay: JETRAFT_SIM_REPLAY={self.seed} .venv/bin/pytest tests/sim -k replay -s"
        )

    def _run(self) -> None:
        self.at(self._exp(self.p.propose_every), "propose", None)
        self.at(self._exp(self.p.nemesis_every), "nemesis", None)
        while self.steps < self.p.steps:
            self.event()
        self.final_liveness()

    def _exp(self, mean: int) -> int:
        return 1 + int(self.rng.expovariate(1.0 / mean))

    def event(self) -> None:
        c = self.cluster
        now, _, kind, arg = heapq.heappop(self.queue)
        c.now = now
        self.steps += 1
        if kind == "deliver":
            m: Message = arg  # type: ignore[assignment]
            dst = c.nodes[m.dst]
            if dst.raft is None or (m.src, m.dst) in self.cut:
                self.stats["lost"] += 1
                return
            self.stats["delivered"] += 1
            c.step(m)
            self.touch(m.dst)
        elif kind == "tick":
            pid, inc = arg  # type: ignore[misc]
            sn = c.nodes[pid]
            if sn.raft is None or sn.incarnation != inc:
                return
            sn.raft.tick()
            c.note("tick", pid)
            c.checker.observe(sn)
            self.at(TICK, "tick", (pid, inc))
            self.touch(pid)
        elif kind == "ready":
            pid, inc = arg  # type: ignore[misc]
            self.ready_scheduled.discard(pid)
            sn = c.nodes[pid]
            if sn.raft is None or sn.incarnation != inc:
                return
            rd = c.persist(pid)
            if rd is None:
                return
            if rd.must_sync:
                self.at(self.rng.randint(*self.p.fsync_delay), "sync", (pid, inc))
            else:
                self._after_apply(pid, c.complete(pid, send=self.send, fsync=False))
                self.touch(pid)
        elif kind == "sync":
            pid, inc = arg  # type: ignore[misc]
            sn = c.nodes[pid]
            if sn.raft is None or sn.incarnation != inc:
                return
            rd = c.complete(pid, send=self.send, fsync=True)
            self._after_apply(pid, rd)
            self.touch(pid)
        elif kind == "propose":
            self.at(self._exp(self.p.propose_every), "propose", None)
            if self.calm_until is None:
                self.client_propose()
        elif kind == "nemesis":
            self.at(self._exp(self.p.nemesis_every), "nemesis", None)
            if self.calm_until is None:
                self.nemesis()
        elif kind == "restart":
            pid = arg  # type: ignore[assignment]
            if c.nodes[pid].raft is None:
                self.restart(pid)
        elif kind == "heal":
            self.heal()
        elif kind == "liveness":
            if self.calm_until is not None:
                self._liveness_tick()
        else:  # pragma: no cover
            raise AssertionError(kind)
        if self.steps % 64 == 0 and not self.p.config_changes:
            c.checker.check_durable_quorum(c.ids)
        if self.wiped is not None and self.steps % 16 == 0:
            self.admission()

    # -- clients ------------------------------------------------------------------------------

    def _after_apply(self, pid: str, rd) -> None:
        if rd is not None and self.calm_values:
            for e in rd.committed_entries:
                if e.data in self.calm_values:
                    self.calm_values = set()
                    c = self.cluster
                    c.note("liveness", "ok", f"committed within {c.now - (self.calm_until - self.p.liveness_bound)}")
                    self.calm_until = None
                    return

    def client_propose(self, pid: str | None = None) -> bytes:
        c = self.cluster
        up = [p for p in c.ids if c.nodes[p].raft is not None]
        if not up:
            return b""
        if pid is None:
            leader = c.leader()
            pid = leader if leader is not None and self.rng.random() < 0.7 else self.rng.choice(up)
        self.proposed += 1
        value = b"v%d" % self.proposed
        self.stats["proposals"] += 1
        try:
            c.propose(pid, value)
        except RaftError:
            pass
        self.touch(pid)
        return value

    # -- nemesis ------------------------------------------------------------------------------

    def nemesis(self) -> None:
        p, rng, c = self.p, self.rng, self.cluster
        choices = (
            ["crash"] * p.crash_weight
            + ["partition"] * p.partition_weight
            + ["heal"] * p.partition_weight
            + ["transfer"] * p.transfer_weight
            + ["snapshot"] * p.snapshot_weight
            + (["config"] * p.config_weight if p.config_changes else [])
            + (["wipe"] * p.wipe_weight if p.config_changes else [])
        )
        what = rng.choice(choices)
        if what == "crash":
            up = [x for x in c.ids if c.nodes[x].raft is not None]
            if not up:
                return
            leader = c.leader()
            pid = leader if leader is not None and rng.random() < p.leader_crash_share else rng.choice(up)
            keep = None
            if rng.random() < p.torn_share:
                n = c.nodes[pid].storage.unsynced_entries()
                if n > 0:
                    keep = rng.randrange(n)
                    self.stats["torn"] += 1
            c.crash(pid, keep)
            self.stats["crashes"] += 1
            self.ready_scheduled.discard(pid)
            self.at(rng.randint(TICK, 40 * TICK), "restart", pid)
        elif what == "partition":
            self.partition()
        elif what == "heal":
            self.heal()
            if rng.random() < p.liveness_checks:
                self.start_liveness_check()
        elif what == "transfer":
            up = [x for x in c.ids if c.nodes[x].raft is not None]
            leader = c.leader()
            if leader is None or len(up) < 2:
                return
            at = leader if rng.random() < 0.7 else rng.choice(up)
            targets = [x for x in c.nodes[at].raft.peers if x != leader]
            if not targets:
                return
            to = rng.choice(targets)
            self.stats["transfers"] += 1
            try:
                c.transfer(at, to)
            except RaftError:
                pass
            self.touch(at)
        elif what == "snapshot":
            up = [x for x in c.ids if c.nodes[x].raft is not None]
            pid = rng.choice(up) if up else None
            if pid is None:
                return
            sn = c.nodes[pid]
            if sn.sm_index > sn.storage.view.snap.index and sn.storage.durable.term_at(sn.sm_index) is not None:
                lo = sn.storage.view.snap.index + 1
                compact_to = rng.randint(lo, sn.sm_index)
                if c.snapshot(pid, compact_to=compact_to) is not None:
                    self.stats["snapshots"] += 1
        elif what == "config":
            self.config_change()
        elif what == "wipe":
            self.wipe()

    # -- wiped stores (a server that lost its disk is a new member) ----------------------------

    def wipe(self) -> None:
        """One node at a time loses its store. It may not vote until admitted: its old
        identity is removed from the configuration by a committed change, and its log reaches
        that change's index (everything it acknowledged before the wipe was committed at or
        before it, so from then on its votes are as safe as any node's). The same rule as
        jetraft's meta group (jetstream/meta_members.py)."""
        if self.wiped is not None:
            return
        c, rng = self.cluster, self.rng
        leader = c.leader()
        # with fewer than three voters, losing one store leaves no quorum of stores that
        # still hold the data: the group cannot go on without an operator (as nats-server)
        if leader is None or len(c.nodes[leader].raft.peers) < 3:
            return
        pid = rng.choice(c.ids)
        c.wipe(pid, tuple(c.nodes[leader].raft.peers))
        self.wiped, self.wipe_admit_at = pid, None
        self.stats["wipes"] += 1
        self.ready_scheduled.discard(pid)
        self.at(rng.randint(TICK, 40 * TICK), "restart", pid)

    def admission(self) -> None:
        """Drive the wiped node's admission: remove its old identity, then admit it once its
        log holds that removal (the random config changes add it back)."""
        w = self.wiped
        if w is None:
            return
        c = self.cluster
        wn = c.nodes[w]
        if self.wipe_admit_at is not None:
            if wn.raft is not None and wn.raft.commit_index >= self.wipe_admit_at:
                wn.admitted = True
                self.wiped = self.wipe_admit_at = None
                self.stats["admissions"] += 1
                c.note("admitted", w)
            return
        leader = c.leader()
        if leader is None or leader == w:
            return
        lr = c.nodes[leader].raft
        if w in lr.peers or w in lr.learners:
            if w in lr.peers and len(lr.peers) == 1:
                return
            kind = (ConfigChangeType.REMOVE_LEARNER if w in lr.learners
                    else ConfigChangeType.REMOVE_PEER)
            try:
                c.propose_config_change(leader, ConfigChange(kind, w))
            except RaftError:
                return
            self.touch(leader)
            return
        # out of the leader's configuration: where was it removed, and is that committed?
        view = c.nodes[leader].storage.view
        at = view.snap.index
        for e in view.ents[1:]:
            if e.index > view.snap.index and e.type == EntryType.CONFIG_CHANGE:
                cc = ConfigChange.decode(e.data)
                if cc.peer == w and cc.type in (ConfigChangeType.REMOVE_PEER,
                                                ConfigChangeType.REMOVE_LEARNER):
                    at = e.index
        if lr.commit_index >= at:
            self.wipe_admit_at = max(at, 1)

    def readmit(self, leader: str) -> None:
        """While a wiped node is not admitted: remove its old identity, then add it back
        (as a learner, then promoted; or directly as a voter)."""
        if self.wipe_admit_at is None:
            self.admission()
            return
        c, w = self.cluster, self.wiped
        lr = c.nodes[leader].raft
        if w in lr.learners:
            cc = ConfigChange(ConfigChangeType.PROMOTE_LEARNER, w)
        elif w not in lr.peers:
            cc = ConfigChange(ConfigChangeType.ADD_LEARNER if self.rng.random() < 0.7
                              else ConfigChangeType.ADD_PEER, w)
        else:
            return
        self._propose_change(leader, cc)

    def _propose_change(self, leader: str, cc: ConfigChange) -> None:
        try:
            self.cluster.propose_config_change(leader, cc)
        except RaftError:
            return
        self.stats["config_changes"] += 1
        self.touch(leader)

    def partition(self) -> None:
        rng, c = self.rng, self.cluster
        ids = list(c.ids)
        rng.shuffle(ids)
        kind = rng.randrange(3)
        self.cut.clear()
        if kind == 0:  # a clean split into two sides
            k = rng.randint(1, len(ids) // 2)
            a, b = ids[:k], ids[k:]
            for x in a:
                for y in b:
                    self.cut.add((x, y))
                    self.cut.add((y, x))
            desc = f"split {sorted(a)} | {sorted(b)}"
        elif kind == 1:  # one-way cuts: x no longer hears from some nodes, they still hear x
            x = ids[0]
            srcs = ids[1 : 1 + rng.randint(1, len(ids) - 1)]
            for y in srcs:
                self.cut.add((y, x))
            desc = f"one-way: {sorted(srcs)} -/-> {x}"
        else:  # random asymmetric cuts
            for x in ids:
                for y in ids:
                    if x != y and rng.random() < 0.3:
                        self.cut.add((x, y))
            desc = "random cuts " + " ".join(f"{x}-/->{y}" for x, y in sorted(self.cut))
        self.stats["partitions"] += 1
        c.note("partition", desc)

    def heal(self) -> None:
        self.cut.clear()
        self.cluster.note("heal")

    def restart(self, pid: str) -> None:
        c = self.cluster
        c.restart(pid)
        self.stats["restarts"] += 1
        self.at(self.rng.randrange(TICK), "tick", (pid, c.nodes[pid].incarnation))
        self.touch(pid)

    def config_change(self) -> None:
        rng, c = self.rng, self.cluster
        leader = c.leader()
        if leader is None:
            return
        if self.wiped is not None:
            self.readmit(leader)    # nothing else changes until it is a member again
            return
        self.members = list(c.nodes[leader].raft.peers)
        learners = list(c.nodes[leader].raft.learners)
        self.removed = [x for x in c.ids if x not in self.members and x not in learners]
        roll = rng.random()
        if learners and roll < 0.6:
            # a learner is promoted (or, now and then, dropped again)
            kind = (ConfigChangeType.PROMOTE_LEARNER if rng.random() < 0.8
                    else ConfigChangeType.REMOVE_LEARNER)
            cc = ConfigChange(kind, rng.choice(learners))
        elif self.removed and (len(self.members) <= 3 or roll < 0.5):
            peer = self.removed[0]
            # new servers join as learners first (thesis §4.2.1), sometimes directly
            kind = (ConfigChangeType.ADD_LEARNER if rng.random() < 0.7
                    else ConfigChangeType.ADD_PEER)
            cc = ConfigChange(kind, peer)
        elif len(self.members) > 3 or (len(self.members) == 3 and rng.random() < 0.3):
            peer = rng.choice(self.members)
            cc = ConfigChange(ConfigChangeType.REMOVE_PEER, peer)
        else:
            return
        self._propose_change(leader, cc)

    # -- liveness -------------------------------------------------------------------------

    def start_liveness_check(self) -> None:
        """Heal everything, bring every node up, stop loss, duplication and reordering (links
        become FIFO): a leader must be elected and a fresh proposal must commit within the
        bound."""
        c = self.cluster
        self.heal()
        for pid in c.ids:
            if c.nodes[pid].raft is None:
                self.restart(pid)
        # a wiped node that is not admitted yet counts for its configuration's quorum but
        # votes for nobody: elections need every other voter to agree, and take longer
        self.calm_until = c.now + self.p.liveness_bound * (2 if self.wiped is not None else 1)
        self.calm_values = set()
        self.liveness_checks += 1
        c.note("liveness", "check until", self.calm_until)
        self.at(TICK, "liveness", None)

    def _liveness_tick(self) -> None:
        c = self.cluster
        if c.now > self.calm_until:
            leader = c.leader()
            raise InvariantViolation(
                "liveness",
                f"no proposal committed within {self.p.liveness_bound} virtual time after healing "
                f"(leader now: {leader}; terms: "
                + ", ".join(f"{x}=t{c.nodes[x].raft.term}/{c.nodes[x].raft.role.name}" for x in c.ids)
                + ")",
            )
        leader = c.leader()
        # propose once a leader is known; again now and then (a new leader may have dropped it)
        if leader is not None and (not self.calm_values or self.rng.random() < 0.2):
            self.calm_values.add(self.client_propose(leader))
        self.at(TICK, "liveness", None)

    def final_liveness(self) -> None:
        self.start_liveness_check()
        while self.calm_until is not None:
            self.event()
