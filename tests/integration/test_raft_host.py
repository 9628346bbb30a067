"""RaftHost: three hosts in one trio run, many RAFT groups each, real logs under tmp_path.

The transport is in memory (:class:`Net`): ``send`` hands the batch to the destination
host's ``receive`` at once, unless either side is cut. Every wait polls a condition under
a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import calendar
import io
import os
import json
import time
import zlib
from collections import Counter

import pytest
import trio

from jetraft.events import EventLog
from jetraft.net.raft.host import RaftGroup, RaftHost
from jetraft.raft.wire import decode_batch
from jetraft.storage import GroupCommit, StorageError
from jetraft.raft.types import Entry, EntryType, MessageType, NotLeaderError, ProposalDroppedError

HOSTS = ("a", "b", "c")
GROUPS = tuple(f"S-{k:02d}" for k in range(20)) + ("_meta_",)


class ListSM:
    """Applied NORMAL data, in order; checks that indexes only go up (each entry once)."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.last = 0
        self.leaders: list[tuple[str | None, int]] = []
        self.restores = 0

    def apply(self, entries: list[Entry]) -> None:
        for e in entries:
            assert e.index == self.last + 1, f"applied {e.index} after {self.last}"
            self.last = e.index
            if e.type == EntryType.NORMAL and e.data:
                self.items.append(e.data)

    def snapshot(self) -> bytes:
        return json.dumps([self.last, [d.hex() for d in self.items]]).encode()

    def restore(self, data: bytes) -> None:
        self.restores += 1
        self.last, items = json.loads(data)
        self.items = [bytes.fromhex(d) for d in items]

    def leader_changed(self, leader: str | None, term: int) -> None:
        self.leaders.append((leader, term))


class CheckingCommit(GroupCommit):
    """A GroupCommit that knows whether anything was written since the last sync()."""

    def __init__(self) -> None:
        super().__init__()
        self.unsynced = False

    def mark_dirty(self, f) -> None:
        self.unsynced = True
        super().mark_dirty(f)

    def sync(self) -> int:
        self.unsynced = False
        return super().sync()


class Net:
    """In-memory transport between hosts; ``cut`` hosts neither send nor receive. Every
    send checks the sender's durability rule: nothing written is left unsynced, except
    under a leader's AppendEntries and heartbeats (thesis §10.2.1)."""

    def __init__(self) -> None:
        self.hosts: dict[str, RaftHost] = {}
        self.cut: set[str] = set()
        self.sends: list[tuple[str, str, bytes]] = []
        self.record = False

    def sender(self, src: str):
        def send(dst: str, payload: bytes) -> bool:
            if self.record:
                self.sends.append((src, dst, payload))
            commit = self.hosts[src].sync if src in self.hosts else None
            if getattr(commit, "unsynced", False):   # only a leader's appends may go early
                kinds = {m.type for m in decode_batch(payload)}
                assert kinds <= {MessageType.APPEND, MessageType.HEARTBEAT}, \
                    f"{src} sends {sorted(k.name for k in kinds)} before its fsync"
            host = self.hosts.get(dst)
            if host is None or src in self.cut or dst in self.cut:
                return False
            host.receive(src, payload)
            return True

        return send


class Cluster:
    def __init__(self, nursery: trio.Nursery, root, **opts) -> None:
        self.nursery = nursery
        self.root = root
        self.opts = opts
        self.net = Net()
        self.hosts: dict[str, RaftHost] = {}
        self.sms: dict[tuple[str, str], ListSM] = {}
        self.logs: dict[str, io.StringIO] = {}
        self._stops: dict[str, tuple[trio.CancelScope, trio.Event]] = {}

    async def start(self, name: str, groups=GROUPS, peers=HOSTS, make_sm=None) -> RaftHost:
        """Start host ``name`` with ``groups`` open (each with ``make_sm(host, group)`` or
        a ListSM), its run() in the nursery."""
        out = self.logs.setdefault(name, io.StringIO())
        host = RaftHost(name, str(self.root / name), self.net.sender(name),
                        events=EventLog(name, stream=out, threshold="debug"), zone=f"az:{name}",
                        sync=CheckingCommit(), **self.opts)
        self.hosts[name] = self.net.hosts[name] = host
        for g in groups:
            self.sms[name, g] = make_sm(name, g) if make_sm else ListSM()
            host.open_group(g, peers, self.sms[name, g])
        scope, done = trio.CancelScope(), trio.Event()
        self._stops[name] = (scope, done)

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await host.run(task_status=task_status)
            finally:
                done.set()

        await self.nursery.start(run)
        return host

    async def stop(self, name: str) -> None:
        scope, done = self._stops.pop(name)
        self.net.hosts.pop(name, None)
        scope.cancel()
        await done.wait()
        del self.hosts[name]

    def events(self, name: str) -> list[dict]:
        return [json.loads(line) for line in self.logs[name].getvalue().splitlines()]

    def leaders(self, group: str, among=None) -> set[str]:
        return {n for n, h in self.hosts.items()
                if (among is None or n in among) and h.groups[group].is_leader}

    def agreed_leader(self, group: str, among=None) -> str | None:
        """The one leader of ``group`` that every host in ``among`` agrees on, or None."""
        among = tuple(among or self.hosts)
        leaders = self.leaders(group, among)
        if len(leaders) != 1:
            return None
        (leader,) = leaders
        views = {(self.hosts[n].groups[group].leader, self.hosts[n].groups[group].term) for n in among}
        return leader if len(views) == 1 else None

    def items(self, name: str, group: str) -> list[bytes]:
        return self.sms[name, group].items


async def until(pred, timeout: float, what: str) -> float:
    """Poll ``pred`` until it holds; returns the seconds it took. Fails after ``timeout``."""
    start = trio.current_time()
    with trio.move_on_after(timeout):
        while not pred():
            await trio.sleep(0.005)
        return trio.current_time() - start
    raise AssertionError(f"not within {timeout} s: {what}")


async def elect_all(cl: Cluster, among=None, timeout: float = 5.0) -> dict[str, str]:
    for k, g in enumerate(GROUPS):                 # spread the first elections
        names = sorted(among or cl.hosts)
        cl.hosts[names[k % len(names)]].groups[g].campaign()
    await until(lambda: all(cl.agreed_leader(g, among) for g in GROUPS), timeout,
                "every group has one agreed leader")
    return {g: cl.agreed_leader(g, among) for g in GROUPS}


async def propose_all(cl: Cluster, tag: str, n: int, among=None) -> None:
    """``n`` proposals on each group's leader; waits until every host in ``among`` has them."""
    among = tuple(among or cl.hosts)
    for g in GROUPS:
        leader = cl.agreed_leader(g, among)
        assert leader is not None, g
        for k in range(n):
            cl.hosts[leader].groups[g].propose(f"{tag}-{g}-{k}".encode())
    want = {g: f"{tag}-{g}-{n - 1}".encode() for g in GROUPS}
    await until(lambda: all(cl.items(h, g)[-1:] == [want[g]] for h in among for g in GROUPS), 10,
                f"{tag}: every proposal applied on {among}")


def assert_same_state(cl: Cluster, hosts=HOSTS) -> None:
    for g in GROUPS:
        first = cl.items(hosts[0], g)
        for h in hosts[1:]:
            assert cl.items(h, g) == first, f"{g}: {h} differs from {hosts[0]}"


async def started(nursery: trio.Nursery, root, **opts) -> Cluster:
    """Three hosts (``HOSTS``), each with every group of ``GROUPS`` open, running."""
    cl = Cluster(nursery, root, **opts)
    for name in HOSTS:
        await cl.start(name)
    return cl


async def led_within(cl: Cluster, among: tuple[str, ...], timeout: float = 3.0) -> float:
    """Wait until the hosts ``among`` agree on a leader (one of them) for every group."""
    return await until(lambda: all(cl.agreed_leader(g, among) for g in GROUPS), timeout,
                       f"{among} agree on a leader for every group")


@pytest.fixture
async def cluster(nursery, tmp_path):
    return await started(nursery, tmp_path)


async def test_every_group_elects_one_leader_and_applies_in_the_same_order(cluster):
    cl = cluster
    leaders = await elect_all(cl)
    assert Counter(leaders.values()) == Counter({"a": 7, "b": 7, "c": 7}), leaders
    await propose_all(cl, "p", 30)
    assert_same_state(cl)
    for g in GROUPS:
        assert cl.items("a", g) == [f"p-{g}-{k}".encode() for k in range(30)]
        for h in HOSTS:
            grp = cl.hosts[h].groups[g]
            assert grp.applied_index == grp.commit_index == cl.sms[h, g].last
            assert cl.sms[h, g].leaders[-1] == (leaders[g], grp.term)
            assert grp.leader_since_ns is not None
    # followers refuse proposals; the leader's replicas are all current
    g = GROUPS[0]
    follower = next(h for h in HOSTS if h != leaders[g])
    with pytest.raises(NotLeaderError) as info:
        cl.hosts[follower].groups[g].propose(b"x")
    assert info.value.leader == leaders[g]
    assert cl.hosts[follower].groups[g].replicas(time.time_ns()) == []
    reps = cl.hosts[leaders[g]].groups[g].replicas(time.time_ns())
    assert sorted(r["name"] for r in reps) == sorted(set(HOSTS) - {leaders[g]})
    assert all(r["current"] and not r["offline"] and r["lag"] == 0 for r in reps), reps
    # every RAFT transition event carries index, peers, zone and leader
    became = [e for e in cl.events("a") if e["event"].startswith("raft_became_")]
    assert became and all({"group", "term", "leader", "index", "peers", "zone"} <= e.keys() for e in became)
    assert all(e["zone"] == "az:a" and sorted(e["peers"]) == list(HOSTS) for e in became)


async def test_a_cut_host_loses_its_leaderships_and_catches_up_when_healed(cluster):
    cl = cluster
    leaders = await elect_all(cl)
    await propose_all(cl, "before", 5)
    led_by_a = [g for g in GROUPS if leaders[g] == "a"]
    assert led_by_a
    cl.net.cut.add("a")
    took = await led_within(cl, ("b", "c"))
    await until(lambda: not any(cl.hosts["a"].groups[g].is_leader for g in GROUPS), 3.0,
                "a, cut off, steps down everywhere (check-quorum)")
    print(f"failover of {len(led_by_a)} groups after a cut: {took:.3f} s")
    await propose_all(cl, "during", 10, among=("b", "c"))
    g0 = next(g for g in GROUPS if cl.agreed_leader(g, ("b", "c")) == "b")
    reps = {r["name"]: r for r in cl.hosts["b"].groups[g0].replicas(time.time_ns())}
    assert reps["a"]["offline"] and not reps["a"]["current"] and reps["a"]["lag"] >= 10
    assert reps["c"]["current"] and not reps["c"]["offline"]
    assert all(cl.items("a", g)[-1] == f"before-{g}-4".encode() for g in GROUPS)

    cl.net.cut.discard("a")
    await until(lambda: all(cl.items("a", g) == cl.items("b", g) for g in GROUPS), 5.0,
                "a catches up on every group")
    await until(lambda: all(r["current"] for r in cl.hosts["b"].groups[g0].replicas(time.time_ns())),
                3.0, "every replica current again")
    await propose_all(cl, "after", 3)
    assert_same_state(cl)


async def test_a_healed_host_catches_up_through_a_snapshot(nursery, tmp_path):
    cl = await started(nursery, tmp_path, snapshot_entries=16)
    await elect_all(cl)
    await propose_all(cl, "one", 5)
    cl.net.cut.add("c")
    await led_within(cl, ("a", "b"))
    await propose_all(cl, "two", 40, among=("a", "b"))
    assert any(e["event"] == "raft_snapshot_taken" for e in cl.events("a"))
    cl.net.cut.discard("c")
    await until(lambda: all(cl.items("c", g) == cl.items("a", g) for g in GROUPS), 5.0,
                "c catches up on every group")
    installed = [e for e in cl.events("c") if e["event"] == "raft_snapshot_installed"]
    assert {e["group"] for e in installed} == set(GROUPS), "every group needed a snapshot"
    assert all(cl.sms["c", g].restores >= 1 for g in GROUPS)
    await propose_all(cl, "three", 3)
    assert_same_state(cl)


async def test_step_down_moves_leadership_to_the_target_or_the_best_peer(cluster):
    cl = cluster
    leaders = await elect_all(cl)
    g = GROUPS[0]
    old = leaders[g]
    target = next(h for h in HOSTS if h != old)
    assert cl.hosts[old].groups[g].step_down(target) == target
    await until(lambda: cl.agreed_leader(g) == target, 2.0, f"{target} leads {g}")
    with pytest.raises(NotLeaderError):
        cl.hosts[old].groups[g].step_down()
    picked = cl.hosts[target].groups[g].step_down()
    assert picked in set(HOSTS) - {target}
    await until(lambda: cl.agreed_leader(g) == picked, 2.0, f"{picked} leads {g}")
    await propose_all(cl, "after-transfer", 3)
    assert any(e["event"] == "raft_leader_transfer" for h in HOSTS for e in cl.events(h))


async def test_a_restarted_host_recovers_its_groups_and_state(nursery, tmp_path):
    cl = await started(nursery, tmp_path, snapshot_entries=32)
    await elect_all(cl)
    await propose_all(cl, "first", 50)
    await propose_all(cl, "tail", 3)          # entries after the snapshot, in a segment file
    await cl.stop("c")
    await led_within(cl, ("a", "b"))
    await propose_all(cl, "while-down", 5, among=("a", "b"))
    segment = max((tmp_path / "c").glob("*/*.log"))    # one group's newest segment file
    torn_group = (segment.parent / "group").read_text()
    with open(segment, "ab") as f:                      # a write torn by the crash
        f.write(b"\x07partial record")
    await cl.start("c")
    recovered = [e for e in cl.events("c") if e["event"] == "raft_log_recovered"]
    assert [(e["group"], e["kind"], e["level"]) for e in recovered] == [(torn_group, "torn_tail", "warn")]
    restored = [g for g in GROUPS if cl.sms["c", g].restores]
    assert restored, "groups past snapshot_entries restore from their snapshot on open"
    await until(lambda: all(cl.items("c", g) == cl.items("a", g) for g in GROUPS), 5.0,
                "the restarted c has every group's state again")
    await propose_all(cl, "after-restart", 3)
    assert_same_state(cl)


class ReadLog:
    """What the ``serve`` and ``refuse`` of RaftGroup.read saw: the state machine's items
    when served, or that the read was refused."""

    def __init__(self, sm: ListSM) -> None:
        self.sm = sm
        self.served: list[list[bytes]] = []
        self.refused = 0

    def serve(self) -> None:
        self.served.append(list(self.sm.items))

    def refuse(self) -> None:
        self.refused += 1


async def test_a_read_is_served_once_confirmed_with_every_write_committed_before_it(cluster):
    cl = cluster
    leaders = await elect_all(cl)
    g = GROUPS[0]
    group = cl.hosts[leaders[g]].groups[g]
    for k in range(5):
        group.propose(f"w{k}".encode())
    reads = ReadLog(cl.sms[leaders[g], g])
    group.read(reads.serve, reads.refuse)
    assert reads.served == [], "a read is served from a later pass, once confirmed"
    await until(lambda: reads.served, 3.0, "the read served")
    assert reads.served[0][-5:] == [f"w{k}".encode() for k in range(5)] and reads.refused == 0
    follower = next(h for h in HOSTS if h != leaders[g])
    with pytest.raises(NotLeaderError):
        cl.hosts[follower].groups[g].read(reads.serve, reads.refuse)


async def test_a_leader_cut_off_from_its_peers_serves_no_read_and_refuses_it_when_it_steps_down(cluster):
    """The other side elects a leader and commits writes while the old one still thinks it
    leads: a read there must not be served from its older state (ReadIndex, thesis §6.4)."""
    cl = cluster
    leaders = await elect_all(cl)
    g = next(g for g in GROUPS if leaders[g] == "a")
    await propose_all(cl, "before", 2)
    cl.net.cut.add("a")
    reads = ReadLog(cl.sms["a", g])
    cl.hosts["a"].groups[g].read(reads.serve, reads.refuse)
    await led_within(cl, ("b", "c"))
    await propose_all(cl, "during", 2, among=("b", "c"))
    await until(lambda: reads.refused == 1, 5.0, "the cut-off leader refuses the read once it steps down")
    assert reads.served == []
    cl.net.cut.discard("a")


async def test_reads_waiting_are_bounded_and_refused_when_the_group_closes(cluster, monkeypatch):
    monkeypatch.setattr("jetraft.net.raft.group.MAX_READS", 3)
    cl = cluster
    leaders = await elect_all(cl)
    g = GROUPS[0]
    leader = cl.hosts[leaders[g]]
    for other in HOSTS:
        if other != leaders[g]:
            cl.net.cut.add(other)      # no heartbeat round completes: reads wait
    reads = ReadLog(cl.sms[leaders[g], g])
    for _ in range(3):
        leader.groups[g].read(reads.serve, reads.refuse)
    with pytest.raises(ProposalDroppedError):
        leader.groups[g].read(reads.serve, reads.refuse)
    assert leader.groups[g].reads_waiting == 3
    leader.close_group(g)
    assert reads.refused == 3 and reads.served == []
    cl.net.cut.clear()


async def test_a_pass_sends_each_peer_at_most_one_early_and_one_late_batch_with_every_groups_heartbeats(cluster):
    # A pass sends the leader's AppendEntries and heartbeats before its fsync (early) and the
    # rest, such as the responses of groups it follows, after it (late): at most two sends
    # per peer per pass, however many groups.
    cl = cluster
    leaders = await elect_all(cl)
    await propose_all(cl, "warm", 1)
    led_by_a = {g for g in GROUPS if leaders[g] == "a"}
    host = cl.hosts["a"]
    cl.net.sends.clear()
    cl.net.record = True
    passes = host.stats["passes"]
    await until(lambda: host.stats["passes"] >= passes + 40, 5.0, "40 passes on a")
    cl.net.record = False
    passes = host.stats["passes"] - passes
    to_b = [decode_batch(p) for src, dst, p in cl.net.sends if src == "a" and dst == "b"]
    assert 0 < len(to_b) <= 2 * (passes + 1), (len(to_b), passes)
    beats = [{m.group for m in batch if m.type == MessageType.HEARTBEAT} for batch in to_b]
    assert set().union(*beats) == led_by_a
    # heartbeats every 2 ticks: each group beats in every other pass, all at once per peer
    assert max(len(b) for b in beats) >= len(led_by_a) // 2, beats
    with_beats = [b for b in beats if b]
    assert sum(len(b) for b in with_beats) > 2 * len(with_beats), "heartbeats are coalesced, not one send each"


async def test_a_corrupt_batch_is_dropped_with_an_event(cluster):
    cl = cluster
    await elect_all(cl)
    host = cl.hosts["b"]
    host.receive("a", b"\x93\x01\x92")                  # truncated
    host.receive("a", b"not msgpack at all \xff\xfe")
    assert host.stats["batches_dropped"] == 2
    dropped = [e for e in cl.events("b")
               if e["event"] in ("raft_batch_dropped", "protocol_error") and e["level"] == "warn"]
    assert len(dropped) == 2 and all("a" in json.dumps(e) for e in dropped), dropped
    await propose_all(cl, "still-fine", 2)


async def test_messages_for_unknown_groups_or_other_servers_are_dropped(cluster):
    cl = cluster
    await elect_all(cl)
    before = cl.hosts["b"].stats["messages_dropped"]
    from jetraft.raft.wire import encode_batch
    from jetraft.raft.types import Message

    cl.hosts["b"].receive("a", encode_batch([
        Message(MessageType.HEARTBEAT, "no-such-group", "a", "b", term=99),
        Message(MessageType.HEARTBEAT, GROUPS[0], "a", "c", term=99),    # not for b
        Message(MessageType.HEARTBEAT, GROUPS[0], "c", "b", term=99),    # src mismatch
    ]))
    assert cl.hosts["b"].stats["messages_dropped"] == before + 3
    assert all(cl.hosts["b"].groups[g].term < 99 for g in GROUPS)


async def test_close_group_with_delete_removes_its_files(cluster):
    cl = cluster
    await elect_all(cl)
    host = cl.hosts["a"]
    directory = host.groups[GROUPS[1]].log.directory
    grp = host.groups[GROUPS[1]]
    host.close_group(GROUPS[1], delete=True)
    assert GROUPS[1] not in host.groups
    assert not os.path.exists(directory)
    assert GROUPS[1] not in host.logs.groups()
    with pytest.raises(trio.ClosedResourceError):
        await grp.wait_applied(10**9)


class FailingCommit(GroupCommit):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def sync(self) -> int:
        if self.fail:
            raise StorageError("fsync failed: EIO (injected)")
        return super().sync()


async def test_a_failed_fsync_stops_its_groups_and_the_host_goes_on(tmp_path):
    commit = FailingCommit()
    net = Net()
    host = RaftHost("a", str(tmp_path / "a"), net.sender("a"), sync=commit, tick_s=0.01,
                    events=EventLog("a", stream=(out := io.StringIO())))
    grp = host.open_group("g", ("a",), ListSM())
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        grp.campaign()
        with trio.fail_after(5):
            await grp.wait_applied(1)           # a single-server group elects itself
        commit.fail = True
        grp.propose(b"never acknowledged")
        with trio.fail_after(5):
            while grp.failed is None:
                await trio.sleep(0.01)
        commit.fail = False
        other = host.open_group("h", ("a",), ListSM())   # the host goes on
        other.campaign()
        with trio.fail_after(5):
            await other.wait_applied(1)
        nursery.cancel_scope.cancel()
    assert "jetstream_storage_failed" in out.getvalue()
    assert grp.applied_index == 1 and not grp.is_leader and grp.leader is None
    with pytest.raises(ProposalDroppedError):
        grp.propose(b"refused")


class MetaSM(ListSM):
    """A meta-like state machine: ``create:<group>`` opens a group on this host and
    ``delete:<group>`` closes it and deletes its files, from inside apply()."""

    def __init__(self, cl: Cluster, host: str) -> None:
        super().__init__()
        self.cl, self.host = cl, host

    def apply(self, entries: list[Entry]) -> None:
        super().apply(entries)
        host = self.cl.hosts[self.host]
        for e in entries:
            op, _, name = e.data.decode().partition(":")
            if op == "create":
                self.cl.sms[self.host, name] = ListSM()
                host.open_group(name, HOSTS, self.cl.sms[self.host, name])
            elif op == "delete":
                host.close_group(name, delete=True)


async def test_a_meta_group_opens_and_deletes_groups_from_its_state_machine(nursery, tmp_path):
    cl = Cluster(nursery, tmp_path)
    for name in HOSTS:
        await cl.start(name, groups=("_meta_",), make_sm=lambda h, g: MetaSM(cl, h))
    cl.hosts["a"].groups["_meta_"].campaign()
    await until(lambda: cl.agreed_leader("_meta_") == "a", 3.0, "a leads the meta group")
    streams = [f"S-new-{k}" for k in range(6)]
    meta = cl.hosts["a"].groups["_meta_"]
    for name in streams:
        meta.propose(f"create:{name}".encode())
    await until(lambda: all(s in cl.hosts[h].groups for h in HOSTS for s in streams), 3.0,
                "every host opened every new group")
    for k, name in enumerate(streams):
        cl.hosts[HOSTS[k % 3]].groups[name].campaign()
    await until(lambda: all(cl.agreed_leader(s) for s in streams), 3.0, "the new groups have leaders")
    for name in streams:
        cl.hosts[cl.agreed_leader(name)].groups[name].propose(b"m1")
    await until(lambda: all(cl.items(h, s) == [b"m1"] for h in HOSTS for s in streams), 3.0,
                "a message in every new group on every host")
    dirs = [cl.hosts[h].groups[s].log.directory for h in HOSTS for s in streams[:3]]
    for name in streams[:3]:
        meta.propose(f"delete:{name}".encode())
    await until(lambda: not any(s in cl.hosts[h].groups for h in HOSTS for s in streams[:3]), 3.0,
                "every host closed the deleted groups")
    assert not any(os.path.exists(d) for d in dirs)
    for name in streams[3:]:
        cl.hosts[cl.agreed_leader(name)].groups[name].propose(b"m2")
    await until(lambda: all(cl.items(h, s) == [b"m1", b"m2"] for h in HOSTS for s in streams[3:]),
                3.0, "the remaining groups still commit")


async def test_a_peer_is_added_then_another_removed(nursery, tmp_path):
    cl = Cluster(nursery, tmp_path)
    for name in HOSTS:
        await cl.start(name, groups=("g",))
    cl.hosts["a"].groups["g"].campaign()
    await until(lambda: cl.agreed_leader("g") == "a", 3.0, "a leads g")
    lead = cl.hosts["a"].groups["g"]
    for k in range(5):
        lead.propose(b"x%d" % k)
    await cl.start("d", groups=("g",), peers=HOSTS)   # joins with the current peers, not itself
    lead.add_peer("d")
    await until(lambda: all(cl.hosts[h].groups["g"].peers == HOSTS + ("d",) for h in (*HOSTS, "d")),
                3.0, "every member knows d")
    await until(lambda: cl.items("d", "g") == cl.items("a", "g") and len(cl.items("a", "g")) == 5,
                3.0, "d has the group's state")
    assert {r["name"] for r in lead.replicas(time.time_ns())} == {"b", "c", "d"}
    await until(lambda: lead.commit_index == lead.node.last_index, 3.0, "the addition committed")
    lead.remove_peer("b")
    rest = ("a", "c", "d")
    await until(lambda: all(cl.hosts[h].groups["g"].peers == rest for h in rest), 3.0,
                "a, c and d no longer count b")
    lead.propose(b"after")
    await until(lambda: all(cl.items(h, "g")[-1:] == [b"after"] for h in rest), 3.0,
                "the new configuration commits")
    assert {r["name"] for r in lead.replicas(time.time_ns())} == {"c", "d"}
    # the leader reported d's state once d joined, and forgets b's once b left
    await until(lambda: latest_replica_state(cl, "a", "g").get("d", {}).get("event") == "raft_replica_current",
                2.0, "a reports d current")
    await until(lambda: lead.tracked_replicas == {"c", "d"}, 1.0, "a drops b's replica state")


class KeepLogSM(ListSM):
    """Declines every snapshot (it would rather replay its whole log)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def snapshot(self) -> None:
        self.asked += 1
        return None


async def test_a_state_machine_may_decline_snapshots(nursery, tmp_path):
    cl = Cluster(nursery, tmp_path, snapshot_entries=10)
    await cl.start("a", groups=("solo",), peers=("a",), make_sm=lambda h, g: KeepLogSM())
    grp = cl.hosts["a"].groups["solo"]
    grp.campaign()
    await until(lambda: grp.is_leader, 2.0, "a single-server group elects itself")
    for k in range(45):
        grp.propose(b"%d" % k)
        await grp.wait_applied(grp.node.last_index)   # one pass per entry: many chances to ask
    sm = cl.sms["a", "solo"]
    assert len(sm.items) == 45
    assert 1 <= sm.asked <= 4, "asked again only after another snapshot_entries entries"
    assert grp.log.first_index() == 1 and grp.log.snapshot().index == 0
    assert not any(e["event"] == "raft_snapshot_taken" for e in cl.events("a"))


# -- the events a validation job reads -------------------------------------------------------


def applied_entries(cl: Cluster, host: str) -> dict[str, list[tuple[int, int, int]]]:
    """Per group, the (index, term, hash) of every entry ``host``'s raft_applied events list,
    in the order listed; checks each event's shape on the way."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for e in cl.events(host):
        if e["event"] != "raft_applied":
            continue
        assert e["level"] == "info" and e["zone"] == f"az:{host}"
        first, last = e["first_index"], e["last_index"]
        assert 1 <= first <= last and last - first + 1 == len(e["terms"]) == len(e["hashes"]), e
        assert all(t <= e["term"] for t in e["terms"]) and e["terms"] == sorted(e["terms"]), e
        out.setdefault(e["group"], []).extend(zip(range(first, last + 1), e["terms"], e["hashes"]))
    return out


def entry_hash(e: Entry) -> int:
    """raft_applied's hash, as documented in jetraft.events.EVENTS."""
    return zlib.crc32(bytes([e.type]) + e.data)


async def test_raft_applied_lists_every_entry_once_with_the_same_term_and_hash_everywhere(cluster):
    cl = cluster
    leaders = await elect_all(cl)
    await propose_all(cl, "p", 10)
    for g in GROUPS:
        cl.hosts[leaders[g]].groups[g].step_down()        # a second term in every group
    await until(lambda: all(cl.agreed_leader(g) not in (None, leaders[g]) for g in GROUPS), 5.0,
                "every group led by another server")
    await propose_all(cl, "q", 5)
    listed = {h: applied_entries(cl, h) for h in HOSTS}
    for g in GROUPS:
        lead = cl.hosts[cl.agreed_leader(g)].groups[g]
        log = lead.log.entries(1, lead.node.last_index + 1)
        want = [(e.index, e.term, entry_hash(e)) for e in log]
        assert len({t for _, t, _ in want}) >= 2, "entries of two terms"
        assert {zlib.crc32(b"\x01" + f"{tag}-{g}-{k}".encode()) for tag, n in (("p", 10), ("q", 5))
                for k in range(n)} <= {x for _, _, x in want}
        for h in HOSTS:                                   # each once, in order, as the leader has them
            assert listed[h][g] == want[:cl.hosts[h].groups[g].applied_index], (h, g)
            assert cl.hosts[h].groups[g].applied_index == len(want)
        # raft_became_leader's index: the new leader's last index, its empty entry right after
        became = [e for e in cl.events(lead.host.server_name)
                  if e["event"] == "raft_became_leader" and e["group"] == g][-1]
        assert became["term"] == lead.term
        assert want[became["index"]][1:] == (lead.term, zlib.crc32(b"\x01"))
        assert want[became["index"] - 1][1] < lead.term


async def test_raft_applied_is_not_built_when_info_is_off(nursery, tmp_path, monkeypatch):
    def never(*args):
        raise AssertionError("built an event nobody writes")

    monkeypatch.setattr(RaftGroup, "_applied_event_log", never)
    monkeypatch.setattr(RaftGroup, "track_replicas", never)
    out = io.StringIO()
    host = RaftHost("a", str(tmp_path / "a"), Net().sender("a"), tick_s=0.01,
                    events=EventLog("a", stream=out, threshold="warn"))
    grp = host.open_group("solo", ("a",), ListSM())
    await nursery.start(host.run)
    grp.campaign()
    await grp.wait_applied(1)
    await grp.wait_applied(grp.propose(b"x"))
    host.close_group("solo")
    assert out.getvalue() == ""


def replica_events(cl: Cluster, host: str, group: str) -> list[dict]:
    return [e for e in cl.events(host)
            if e["event"] in ("raft_replica_current", "raft_replica_lagging") and e["group"] == group]


def latest_replica_state(cl: Cluster, host: str, group: str) -> dict[str, dict]:
    """What a reader of ``host``'s log knows: the last raft_replica_* event per peer."""
    return {e["peer"]: e for e in replica_events(cl, host, group)}


async def test_the_leader_reports_each_replica_lagging_then_current(nursery, tmp_path):
    cl = Cluster(nursery, tmp_path)
    for name in HOSTS:
        await cl.start(name, groups=("g",))
    cl.hosts["a"].groups["g"].campaign()
    await until(lambda: cl.agreed_leader("g") == "a", 3.0, "a leads g")
    lead = cl.hosts["a"].groups["g"]
    await until(lambda: latest_replica_state(cl, "a", "g").keys() == {"b", "c"}, 2.0,
                "a's first evaluation as leader lists both peers")
    first = replica_events(cl, "a", "g")
    assert [(e["event"], e["term"], e["behind_ns"], e["offline"], e["leader"], e["zone"])
            for e in first] == [("raft_replica_current", lead.term, None, False, "a", "az:a")] * 2
    assert all(e["lag"] <= 1 and e["index"] == lead.node.last_index for e in first)

    cl.net.cut.add("c")                 # nothing reaches c, nothing comes back from it
    cl.hosts["a"].peer_down("c")
    await until(lambda: latest_replica_state(cl, "a", "g")["c"]["event"] == "raft_replica_lagging",
                2.0, "a reports c lagging")
    lagging = latest_replica_state(cl, "a", "g")["c"]
    assert lagging["offline"] is True and "behind_ns" not in lagging
    for k in range(4):                  # committed with b alone
        await lead.wait_applied(max(lead.propose(b"%d-%d" % (k, j)) for j in range(10)))
    assert {r["name"]: r["lag"] for r in lead.replicas(time.time_ns())}["c"] >= 40

    cl.net.cut.discard("c")
    cl.hosts["a"].peer_up("c")
    await until(lambda: latest_replica_state(cl, "a", "g")["c"]["event"] == "raft_replica_current",
                3.0, "a reports c current again")
    current = latest_replica_state(cl, "a", "g")["c"]
    assert current["offline"] is False and current["lag"] <= 32 and current["term"] == lead.term
    behind = rfc3339_to_ns(current["ts"]) - rfc3339_to_ns(lagging["ts"])
    assert 0 < current["behind_ns"] and abs(current["behind_ns"] - behind) < 50_000_000, (current, behind)
    assert latest_replica_state(cl, "a", "g")["b"]["event"] == "raft_replica_current"
    assert cl.items("c", "g") == cl.items("a", "g")

    # a new leader starts over: every peer's state, in its own term (a peer may show lagging
    # until its first answer: the new leader starts every peer's match index at 0)
    assert lead.step_down("b") == "b"
    await until(lambda: cl.agreed_leader("g") == "b", 3.0, "b leads g")
    term = cl.hosts["b"].groups["g"].term
    await until(lambda: {p for p, e in latest_replica_state(cl, "b", "g").items()
                         if e["term"] == term and e["event"] == "raft_replica_current"} == {"a", "c"},
                2.0, "b reports a and c current in its term")
    firsts: dict[str, dict] = {}
    for e in replica_events(cl, "b", "g"):          # b never led g before this term
        assert e["term"] == term
        firsts.setdefault(e["peer"], e)
    for e in firsts.values():                       # the initial state of each peer
        assert e["event"] == "raft_replica_lagging" or e["behind_ns"] is None, e
    await until(lambda: not lead.tracked_replicas, 1.0, "a, a follower now, forgets its replica states")


async def test_raft_group_closed_on_close_group_not_on_shutdown(cluster):
    cl = cluster
    await elect_all(cl)
    host = cl.hosts["a"]
    host.close_group(GROUPS[1], delete=True)
    host.close_group(GROUPS[2])
    host.close_group("no-such-group")
    closed = [e for e in cl.events("a") if e["event"] == "raft_group_closed"]
    assert [(e["group"], e["deleted"], e["zone"], e["level"]) for e in closed] == [
        (GROUPS[1], True, "az:a", "info"), (GROUPS[2], False, "az:a", "info")]
    await cl.stop("b")
    assert not any(e["event"] == "raft_group_closed" for e in cl.events("b"))


def rfc3339_to_ns(ts: str) -> int:
    secs, frac = ts.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(secs, "%Y-%m-%dT%H:%M:%S")) * 1_000_000_000 + int(frac)


class PoisonSM(ListSM):
    """Raises while applying the entry ``poison`` (a fault in the state machine)."""

    def apply(self, entries: list[Entry]) -> None:
        if any(e.data == b"poison" for e in entries):
            raise RuntimeError("state machine fault (injected)")
        super().apply(entries)


async def test_a_group_whose_state_machine_raises_stops_alone_and_the_host_goes_on(nursery, tmp_path):
    cl = Cluster(nursery, tmp_path)
    for name in HOSTS:
        await cl.start(name, make_sm=lambda host, group: PoisonSM() if group == GROUPS[0] else ListSM())
    await elect_all(cl)
    sick = GROUPS[0]
    leader = cl.agreed_leader(sick)
    cl.hosts[leader].groups[sick].propose(b"poison")
    await until(lambda: all(cl.hosts[h].groups[sick].failed is not None for h in HOSTS), 5,
                f"{sick} failed on every host")
    for h in HOSTS:
        [failed] = [e for e in cl.events(h) if e["event"] == "raft_group_failed"]
        assert (failed["group"], failed["op"]) == (sick, "apply")
        assert "state machine fault (injected)" in failed["error"] and "Traceback" in failed["traceback"]
        assert not any(e["event"] == "jetstream_storage_failed" for e in cl.events(h))
        grp = cl.hosts[h].groups[sick]
        assert grp.leader is None and not grp.is_leader
        with pytest.raises(ProposalDroppedError):
            grp.propose(b"refused")
    # every other group elects, replicates and applies as before
    healthy = GROUPS[1:]
    await until(lambda: all(cl.agreed_leader(g) for g in healthy), 5, "the other groups led")
    for g in healthy:
        cl.hosts[cl.agreed_leader(g)].groups[g].propose(f"after-{g}".encode())
    await until(lambda: all(cl.items(h, g)[-1:] == [f"after-{g}".encode()] for h in HOSTS for g in healthy),
                10, "the other groups applied a new entry everywhere")
