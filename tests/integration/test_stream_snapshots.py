"""Stream snapshots, log compaction and catch-up, end to end on five jetraft servers.

The servers snapshot a stream group every 300 entries (``jetstream { stream_compact: 300 }``)
and a catching-up replica has at most 512 bytes requested at a time
(``max_outstanding_catchup``), so that a catch-up of a few MiB lasts long enough to change
the leader in the middle of it. Every check goes through nats-py, the monitoring port and
the event log, as an operator would. The tests share one cluster and run in file order.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from cluster import Cluster
from test_js_cluster import (
    APP,
    ZONES,
    accounts_block,
    all_current,
    connect,
    create,
    members,
    publish_acked,
    retry,
    run,
    until,
)

COMPACT = 300


@pytest.fixture(scope="module")
def cluster(formed_cluster):
    with formed_cluster("jetraft", "snapshots", 5, jetstream=True, unique_tag="az:",
                        tags=[[f"az:{z}"] for z in ZONES.values()], extra=accounts_block(),
                        jetstream_extra=f"stream_compact: {COMPACT}\nmax_outstanding_catchup: 512",
                        users=[(APP["user"], APP["password"])]) as c:
        yield c


def events_of(c: Cluster, name: str, event: str, group: str, since_start: bool = False) -> list[dict]:
    """Server ``name``'s ``event`` lines of ``group`` (of its latest start only with
    ``since_start``). Only lines naming the event are decoded: a server's log of applied
    entries is long, and a wait must notice an event soon after it is written."""
    home = c.workdir / name
    starts = c.members[name].starts
    paths = [home / f"{name}-{i}.stdout" for i in (range(starts, starts + 1) if since_start
                                                     else range(1, starts + 1))]
    needle = f'"event":"{event}"'
    out = []
    for path in paths:
        if not path.exists():
            continue
        with path.open(errors="replace") as f:
            for line in f:
                if needle in line and group in line:
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    if e.get("event") == event and e.get("group") == group:
                        out.append(e)
    return out


def wait_events(c: Cluster, name: str, event: str, group: str, timeout: float, *,
                since_start: bool = False, where=lambda e: True) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in events_of(c, name, event, group, since_start) if where(e)]
        if found:
            return found
        assert time.monotonic() < deadline, f"no {event} of {group} on {name} in {timeout}s"
        time.sleep(0.1)


def jsz_totals(c: Cluster, name: str) -> tuple[int, int, int]:
    j = c.servers[name].monitor("/jsz")
    return j.get("messages", 0), j.get("bytes", 0), j.get("consumers", 0)


async def consumer_view(js, stream: str, durable: str) -> tuple:
    ci = await retry(lambda: js.consumer_info(stream, durable), 20, "consumer info")
    return (ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending,
            ci.num_redelivered)


async def stream_view(js, stream: str) -> tuple:
    si = await retry(lambda: js.stream_info(stream), 20, "stream info")
    st = si.state
    return st.messages, st.bytes, st.first_seq, st.last_seq, st.num_deleted


async def read_values(js, stream: str) -> list[int]:
    """The value of every message of ``stream`` in sequence order (deleted ones skipped)."""
    from nats.js.errors import NotFoundError
    si = await retry(lambda: js.stream_info(stream), 10, "stream info")
    out = []
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        async def get(seq=seq):
            try:
                return await js.get_msg(stream, seq)
            except NotFoundError:
                return None
        msg = await retry(get, 10, f"message {seq}")
        if msg is not None and msg.data.isdigit():
            out.append(int(msg.data))
    return out


async def replicas_agree(c: Cluster, js, stream: str, replicas: list[str]) -> bool:
    """Every replica's server holds the stream's messages and bytes (one stream per test)."""
    view = await stream_view(js, stream)
    totals = {n: jsz_totals(c, n)[:2] for n in replicas}
    return all(t == view[:2] for t in totals.values())


async def with_a_replica_stopped(c: Cluster, work):
    """Stop a replica of SNAP that does not lead it, ``await work(js)``, start it again;
    returns (connection, its JetStream context, the leader, the replica)."""
    nc = await connect(c)
    js = nc.jetstream(timeout=5)
    leader = (await js.stream_info("SNAP")).cluster.leader
    behind = next(n for n in STATE["members"] if n != leader)
    c.stop_one(behind)
    await work(js)
    c.start([behind])
    return nc, js, leader, behind


# ----------------------------------------------------------------------------- tests

STATE: dict[str, object] = {}


def test_the_log_is_compacted_and_restarts_keep_stream_and_consumer_state(cluster):
    """Snapshots every COMPACT entries keep each replica's log short; restarting each
    replica, then every server at once, returns the same messages, sequences, deleted
    sequences, dedupe window and consumer state (acks, pending, redeliveries)."""
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await create(js, name="SNAP", subjects=["snap.>"], num_replicas=3, duplicate_window=300)
        acked: list[int] = []
        await publish_acked(js, "snap.a", range(1, 1201), acked)
        for seq in (10, 20, 30):
            assert await js.delete_msg("SNAP", seq)
        sub = await js.pull_subscribe("snap.>", durable="C1", stream="SNAP")
        msgs = await sub.fetch(100, timeout=5)
        for m in msgs[:50]:
            await m.ack_sync()
        for m in msgs[50:60]:
            await m.nak()
        si = await js.stream_info("SNAP")
        group, reps = si.cluster.raft_group, members(si)
        STATE["group"], STATE["members"] = group, reps
        for name in reps:
            wait_events(cluster, name, "raft_log_compacted", group, 30,
                        where=lambda e: e["index"] >= 3 * COMPACT)
        await until(lambda: all_current(js, "SNAP", 3), 30, "replicas current")
        stream0 = await stream_view(js, "SNAP")
        consumer0 = await consumer_view(js, "SNAP", "C1")
        assert stream0[0] == 1197 and stream0[4] == 3 and consumer0[1] == 53
        for name in reps:               # one replica at a time
            cluster.restart(name)
            cluster.wait_formed(timeout=30)
            evs = wait_events(cluster, name, "raft_applied", group, 30, since_start=True)
            assert evs[0]["first_index"] > COMPACT, "the restart replayed only the log's tail"
            await until(lambda: all_current(js, "SNAP", 3), 30, f"{name} current again")
            await until(lambda: replicas_agree(cluster, js, "SNAP", reps), 30, "replicas agree")
            assert await stream_view(js, "SNAP") == stream0
            assert await consumer_view(js, "SNAP", "C1") == consumer0
        await nc.close()
        cluster.stop()                  # every server at once
        cluster.start()
        cluster.wait_formed(timeout=30)
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await until(lambda: all_current(js, "SNAP", 3), 60, "replicas current after a full restart")
        await until(lambda: replicas_agree(cluster, js, "SNAP", reps), 30, "replicas agree")
        assert await stream_view(js, "SNAP") == stream0
        assert await consumer_view(js, "SNAP", "C1") == consumer0
        dup = await retry(lambda: js.publish("snap.a", b"5", headers={"Nats-Msg-Id": "m-5"}), 20,
                          "publish a duplicate")
        assert dup.duplicate and dup.seq == 5, "the dedupe window came back from the snapshot"
        got = await read_values(js, "SNAP")
        assert got == [v for v in acked if v not in (10, 20, 30)]
        await nc.close()
    run(scenario, timeout=240)


def test_a_replica_far_behind_catches_up_through_a_snapshot_while_publishes_go_on(cluster):
    async def scenario():
        group, reps = STATE["group"], STATE["members"]
        acked: list[int] = []
        nc, js, leader, behind = await with_a_replica_stopped(
            cluster, lambda js: publish_acked(js, "snap.b", range(2001, 4001), acked))
        more = asyncio.ensure_future(publish_acked(js, "snap.b", range(4001, 4301), acked))
        installed = wait_events(cluster, behind, "raft_snapshot_installed", group, 60, since_start=True)
        done = wait_events(cluster, behind, "stream_catchup_finished", group, 60, since_start=True,
                           where=lambda e: e["ok"])
        await more
        assert installed and done[-1]["bytes"] > 0 and done[-1]["sources"]
        await until(lambda: all_current(js, "SNAP", 3), 60, f"{behind} current")
        await until(lambda: replicas_agree(cluster, js, "SNAP", reps), 30, "replicas agree")
        got = await read_values(js, "SNAP")
        assert set(acked) <= set(got)
        await nc.close()
    run(scenario, timeout=240)


def test_a_leader_change_during_a_catch_up_completes_it(cluster):
    """The replica is stopped while ~8 MiB are published; when it is started again and
    its catch-up has begun (at most 512 bytes outstanding), the leader it fetches from is
    frozen: the catch-up goes on from the new leader (or the other replica) and ends. Until
    then the leader reports the replica lagging."""
    async def scenario():
        group, reps = STATE["group"], STATE["members"]
        payload = os.urandom(2048)

        async def publish(js):
            for i in range(4000):
                await retry(lambda i=i: js.publish("snap.c", payload, headers={"Nats-Msg-Id": f"c-{i}"}),
                            20, f"publish c-{i}")
        nc, js, leader, behind = await with_a_replica_stopped(cluster, publish)
        wait_events(cluster, behind, "stream_catchup_started", group, 60, since_start=True)
        si = await js.stream_info("SNAP")
        mine = next(r for r in si.cluster.replicas if r.name == behind)
        assert not mine.current and mine.lag > 0, f"a replica completing a snapshot is reported lagging: {mine}"
        pid = cluster.servers[leader].proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            done = wait_events(cluster, behind, "stream_catchup_finished", group, 90, since_start=True,
                               where=lambda e: e["ok"])
        finally:
            os.kill(pid, signal.SIGCONT)
        assert any(s != leader for s in done[-1]["sources"]), done[-1]
        await until(lambda: all_current(js, "SNAP", 3), 60, f"{behind} current")
        await until(lambda: replicas_agree(cluster, js, "SNAP", reps), 30, "replicas agree")
        await nc.close()
    run(scenario, timeout=240)


def test_monitoring_and_events_report_the_snapshots(cluster):
    group = STATE["group"]
    for name in STATE["members"]:
        taken = events_of(cluster, name, "raft_snapshot_taken", group)
        assert taken and all(e["bytes"] > 0 and e["reason"] in ("entries", "bytes", "interval")
                             for e in taken)
        compacted = events_of(cluster, name, "raft_log_compacted", group)
        assert compacted and all(e["entries"] > 0 for e in compacted)


def blocks_of(c: Cluster, name: str) -> list:
    return sorted((c.store_dir(name) / "jetstream" / "APP" / "streams" / "SNAP" / "msgs").glob("*.blk"))


def raft_dir(c: Cluster, name: str, group: str):
    root = c.store_dir(name) / "jetstream" / "_raft"
    return next(d for d in root.iterdir() if (d / "group").exists() and (d / "group").read_text() == group)


async def damage_and_restart(c: Cluster, name: str, group: str, harm) -> None:
    """Stop ``name``, damage its files with ``harm(name)``, start it again (nothing is
    published meanwhile: the repair needs no write); check that it neither led the group
    nor deleted the stream while it repaired itself."""
    c.stop_one(name)
    harm(name)
    c.start([name])
    done = await asyncio.to_thread(wait_events, c, name, "stream_catchup_finished", group, 60,
                                   since_start=True, where=lambda e: e["ok"])
    evs = c.events(name)
    start = max(i for i, e in enumerate(evs) if e["event"] == "server_starting")
    until_done = next(i for i, e in enumerate(evs) if i > start and e is not None
                      and e["event"] == "stream_catchup_finished" and e.get("group") == group and e["ok"])
    assert not [e for e in evs[start:until_done] if e["event"] == "raft_became_leader"
                and e.get("group") == group], "a damaged replica led before it was repaired"
    assert not [e for e in evs[start:] if e["event"] == "jetstream_stream_deleted"]
    assert done[-1]["bytes"] > 0


def test_a_damaged_minority_repairs_itself_and_loses_nothing_acknowledged(cluster):
    """nats-server #7549 (bit flips in a minority's block files) and #7556 (a damaged
    snapshot, then the stream deleted): each harm to one replica of three is reported,
    fetched again from a peer, and no acknowledged message is lost."""
    async def scenario():
        group = STATE["group"]
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        acked: list[int] = []
        await publish_acked(js, "snap.d", range(6001, 6601), acked)
        await until(lambda: all_current(js, "SNAP", 3), 60, "replicas current")
        expected = await read_values(js, "SNAP")
        si = await js.stream_info("SNAP")
        leader, followers = si.cluster.leader, [r.name for r in si.cluster.replicas]

        def flip(name):
            blk = blocks_of(cluster, name)[0]
            data = bytearray(blk.read_bytes())
            data[len(data) // 2] ^= 0x10
            blk.write_bytes(bytes(data))

        def cut(name):
            blk = blocks_of(cluster, name)[-1]
            os.truncate(blk, blk.stat().st_size // 2)

        def bad_snapshot(name):
            snap = raft_dir(cluster, name, group) / "snapshot"
            data = bytearray(snap.read_bytes())
            data[len(data) // 2] ^= 0x01
            snap.write_bytes(bytes(data))

        for name, harm, kinds in ((followers[0], flip, {"checksum_mismatch"}),
                                  (followers[1], cut, {"short_block", "torn_tail"})):
            await damage_and_restart(cluster, name, group, harm)
            found = events_of(cluster, name, "stream_store_damaged", group, since_start=True)
            assert any(e["kind"] in kinds and e["file"].endswith(".blk") for e in found), found
            started = events_of(cluster, name, "stream_catchup_started", group, since_start=True)
            assert started[0]["reason"] == "damage"
            await until(lambda: all_current(js, "SNAP", 3), 60, f"{name} current after repair")
        await damage_and_restart(cluster, followers[0], group, bad_snapshot)
        recovered = events_of(cluster, followers[0], "raft_log_recovered", group, since_start=True)
        assert any(e["kind"] == "snapshot_checksum_mismatch" for e in recovered), recovered
        await until(lambda: all_current(js, "SNAP", 3), 60, "current after a damaged snapshot")
        await until(lambda: replicas_agree(cluster, js, "SNAP", STATE["members"]), 30, "replicas agree")
        cluster.stop_one(leader)        # the repaired replicas alone serve the stream now
        try:
            await until(lambda: leader_elsewhere(js, leader), 60, "a repaired replica leads")
            got = await read_values(js, "SNAP")
            assert got == expected and set(acked) <= set(got)
        finally:
            cluster.start([leader])
        await until(lambda: all_current(js, "SNAP", 3), 60, "current again")
        await nc.close()
    run(scenario, timeout=300)


async def leader_elsewhere(js, before: str) -> bool:
    try:
        leader = (await js.stream_info("SNAP")).cluster.leader
    except Exception:  # noqa: BLE001 - no leader at this instant
        return False
    return leader is not None and leader != before
