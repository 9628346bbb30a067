"""Servers join and leave the meta group through the meta log, end to end.

Five jetraft servers in zones a/a/b/b/c form the cluster (their configurations name each
other only, as before the cluster grew). Two new servers, which list every route, join
while an application publishes: each is added as a learner, then promoted to a voter once
it has caught up, and nothing acknowledged is lost. A server removed with SERVER.REMOVE
that comes back is refused and says so in its event log; placement never picks it; started
again with an empty store it joins as a new server.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from cluster import Cluster
from test_admin_cli import Admin
from test_js_cluster import (
    SYS_PASSWORD,
    accounts_block,
    all_current,
    connect,
    create,
    publish_acked,
    read_all,
    run,
    until,
)

ZONES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c", "n6": "a", "n7": "c"}
FIRST = ["n1", "n2", "n3", "n4", "n5"]


def meta_cluster(c: Cluster, name: str) -> dict:
    return c.servers[name].monitor("/jsz").get("meta_cluster") or {}


def meta_leader(c: Cluster) -> str | None:
    for name, server in c.servers.items():
        if server.alive():
            try:
                leader = meta_cluster(c, name).get("leader")
            except (OSError, ValueError, AssertionError):
                continue
            if leader:
                return leader
    return None


def voters_seen_by_leader(c: Cluster) -> tuple[int, set[str]]:
    leader = meta_leader(c)
    if leader is None:
        return 0, set()
    mc = meta_cluster(c, leader)
    return mc.get("cluster_size", 0), {r["name"] for r in mc.get("replicas") or [] if r.get("current")}


@pytest.fixture
def grown(tmp_path):
    c = Cluster("jetraft", tmp_path, 7, jetstream=True, unique_tag="az:",
                tags=[[f"az:{z}"] for z in ZONES.values()], extra=accounts_block())
    first_routes = tuple(c.route_url(n) for n in FIRST)
    for name in FIRST:
        c.members[name].routes = first_routes
    try:
        c.start(FIRST)
        yield c
    finally:
        c.stop()


def wait_size(c: Cluster, size: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        try:
            seen = voters_seen_by_leader(c)
        except (OSError, ValueError, AssertionError) as exc:
            seen = exc
        if isinstance(seen, tuple) and seen[0] == size and len(seen[1]) == size - 1:
            return
        time.sleep(0.1)
    raise AssertionError(f"meta group not {size} current voters after {timeout}s: {seen}\n{c.outputs()}")


def events_named(c: Cluster, name: str, event: str) -> list[dict]:
    return [e for e in c.events(name) if e.get("event") == event]


def test_new_servers_join_as_learners_then_voters_under_load(grown):
    c = grown
    wait_size(c, 5, 30)

    async def scenario():
        nc = await connect(c, FIRST)
        js = nc.jetstream(timeout=5)
        await create(js, name="GROW", subjects=["grow.>"], num_replicas=3)
        await until(lambda: all_current(js, "GROW", 3), 30, "GROW current")
        acked: list[int] = []
        pub = asyncio.create_task(publish_acked(js, "grow.x", range(600), acked))
        await asyncio.sleep(0.3)
        c.start(["n6"])
        await asyncio.to_thread(wait_size, c, 6, 60)
        c.start(["n7"])
        await asyncio.to_thread(wait_size, c, 7, 60)
        await pub
        assert sorted(await read_all(js, "GROW", "grow.x")) == list(range(600))
        await nc.close()
    run(scenario, timeout=180)
    for new in ("n6", "n7"):
        added = [e for name in FIRST + ["n6", "n7"] for e in events_named(c, name, "raft_peer_added")
                 if e.get("group") == "_meta_" and e.get("peer") == new]
        promoted = [e for name in FIRST for e in events_named(c, name, "raft_peer_promoted")
                    if e.get("group") == "_meta_" and e.get("peer") == new]
        assert added and all(e["learner"] for e in added), added
        assert promoted
        assert [e for e in events_named(c, new, "jetstream_meta_joining")], new
    # every server agrees on the seven voters
    for name in c.servers:
        assert meta_cluster(c, name).get("cluster_size") == 7, name


def test_a_removed_server_that_comes_back_is_refused(grown, tmp_path):
    c = grown
    wait_size(c, 5, 30)
    c.start(["n6"])
    wait_size(c, 6, 60)
    c.stop_one("n6")

    admin = Admin(c.servers["n1"].url, tmp_path, "--user", "admin", "--password", SYS_PASSWORD)
    # natscli's spelling (server cluster); the leader cannot be removed, nor a stranger
    leader = meta_leader(c)
    out = admin("server", "cluster", "peer-remove", leader, "-f", code=1)
    assert "is the meta group leader" in out.stderr and "step-down" in out.stderr
    out = admin("server", "raft", "peer-remove", "nobody", "-f", code=1)
    assert "nobody is not a peer of the meta group" in out.stderr
    out = admin("server", "cluster", "peer-remove", "n6", "-f")
    assert 'Removed peer "n6"' in out.stdout
    wait_size(c, 5, 30)
    c.start(["n6"])
    deadline = time.monotonic() + 30
    while not events_named(c, "n6", "jetstream_meta_refused"):
        assert time.monotonic() < deadline, c.outputs()
        time.sleep(0.1)
    refused = events_named(c, "n6", "jetstream_meta_refused")[-1]
    assert "SERVER.REMOVE" in refused["reason"]
    size, _ = voters_seen_by_leader(c)
    assert size == 5

    async def placed():
        nc = await connect(c, FIRST)
        js = nc.jetstream(timeout=5)
        for i in range(4):
            await create(js, name=f"P{i}", subjects=[f"p{i}.>"], num_replicas=3)
            si = await js.stream_info(f"P{i}")
            assert "n6" not in [si.cluster.leader, *(r.name for r in si.cluster.replicas)]
        await nc.close()
    run(placed)

    # added again the way docs/cluster.md says: stopped, its store emptied, started; a new server
    import shutil
    c.stop_one("n6")
    shutil.rmtree(c.store_dir("n6"))
    c.start(["n6"])
    wait_size(c, 6, 60)
    # it joined after it was refused: by then the group had recorded its new store
    joining = events_named(c, "n6", "jetstream_meta_joining")
    refused = events_named(c, "n6", "jetstream_meta_refused")
    assert joining and joining[-1]["ts"] > refused[-1]["ts"], (joining, refused)


@pytest.mark.parametrize("zone", ["b", "c"])
def test_a_server_that_lost_its_store_rejoins_as_a_new_member(grown, zone):
    """A stream's peer is stopped, its store wiped, and started again: it joins as a new
    member (no vote, no replica until its new store is recorded), its old identity leaves
    the meta group, its stream slots are filled in its zone (zone b: by the other server
    there, or by itself when it is admitted before the vacancy is filled; zone c, which has
    no other: by itself once its old replica left the stream's group), and nothing
    acknowledged is lost."""
    import shutil
    c = grown
    wait_size(c, 5, 30)
    deadline = time.monotonic() + 30          # every store recorded (first sight)
    while not all(events_named(c, n, "jetstream_meta_member") for n in FIRST):
        assert time.monotonic() < deadline, c.outputs()
        time.sleep(0.1)

    async def scenario():
        nc = await connect(c, FIRST)
        js = nc.jetstream(timeout=5)
        await create(js, name="WIPE", subjects=["wipe.>"], num_replicas=3)
        await until(lambda: all_current(js, "WIPE", 3), 30, "WIPE current")
        si = await js.stream_info("WIPE")
        peers = [si.cluster.leader, *(r.name for r in si.cluster.replicas)]
        victim = next(p for p in peers if ZONES[p] == zone)
        acked: list[int] = []
        await publish_acked(js, "wipe.x", range(200), acked)
        c.stop_one(victim)
        shutil.rmtree(c.store_dir(victim))
        pub = asyncio.create_task(publish_acked(js, "wipe.x", range(200, 400), acked))
        c.start([victim])
        await pub

        async def rejoined():
            try:
                now = await js.stream_info("WIPE")
            except Exception:  # noqa: BLE001 - no leader at this instant
                return False
            names = [now.cluster.leader, *(r.name for r in now.cluster.replicas)]
            # zone c's only server must get its slot back; in zone b the slot goes to the
            # other server, or back to the new member when it is admitted first
            return (len(names) == 3 and (zone != "c" or victim in names)
                    and sorted(ZONES[n] for n in names) == ["a", "b", "c"]
                    and all(r.current for r in now.cluster.replicas))
        await until(rejoined, 60, f"WIPE re-replicated in zone {zone}")
        assert sorted(await read_all(js, "WIPE", "wipe.x")) == list(range(400))
        await nc.close()
        return victim
    victim = asyncio.run(asyncio.wait_for(scenario(), 180))
    wait_size(c, 5, 60)               # the wiped server is a voter again
    events = c.events(victim)
    joining = [e for e in events if e.get("event") == "jetstream_meta_joining"]
    assert joining and joining[-1]["store_lost"] is True
    assert [e for e in events if e.get("event") == "jetstream_meta_member"]
    # while it had no recorded store it granted no vote in the meta group
    granted = [e for e in events if e.get("event") == "raft_vote_granted"
               and e.get("group") == "_meta_" and e["ts"] < [
                   x for x in events if x.get("event") == "jetstream_meta_member"][-1]["ts"]
               and e["ts"] > joining[-1]["ts"]]
    assert granted == []


def test_a_stream_deleted_after_a_meta_snapshot_gets_no_group_at_restart(tmp_path):
    """The meta group snapshots while stream GONE exists, then GONE is deleted (the deletion
    is in the log after the snapshot). A restarted server replays both before it opens any
    replica: GONE's RAFT group is not created again (its log would start over at term 0)."""
    c = Cluster("jetraft", tmp_path, 3, jetstream=True, jetstream_extra="meta_compact: 2")
    try:
        c.start()
        c.wait_formed()
        deadline = time.monotonic() + 30          # the first-sight store records are in
        while not all(events_named(c, n, "jetstream_meta_member") for n in c.servers):
            assert time.monotonic() < deadline, c.outputs()
            time.sleep(0.1)

        async def scenario():
            nc = await connect(c, list(c.servers))
            js = nc.jetstream(timeout=5)
            await create(js, name="GONE", subjects=["gone.>"], num_replicas=3)
            await create(js, name="KEEP", subjects=["keep.>"], num_replicas=3)
            await until(lambda: all_current(js, "KEEP", 3), 30, "KEEP current")
            group = (await js.stream_info("GONE")).cluster.name
            await js.delete_stream("GONE")
            await nc.close()
            return group
        run(scenario)
        snaps = [e for e in events_named(c, "n2", "raft_snapshot_taken") if e.get("group") == "_meta_"]
        assert snaps, "the meta group took a snapshot while GONE existed"
        c.restart("n2")
        deadline = time.monotonic() + 30
        while not [e for e in c.events("n2")[-200:] if e.get("event") == "jetstream_meta_member"]:
            assert time.monotonic() < deadline, c.outputs()
            time.sleep(0.1)
        ran = c.members["n2"].starts
        reopened = [e for e in c.events("n2") if e.get("event") == "jetstream_stream_deleted"
                    and e.get("stream") == "GONE"]
        assert len(reopened) == 1, (ran, reopened)      # only the deletion before the restart
    finally:
        c.stop()
