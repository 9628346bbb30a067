"""The JetStream cluster, end to end: five jetraft-server processes in zones 2/2/1.

The servers are configured as the seed's clustering guide shows (a cluster block listing
every route, a ``$SYS`` user with a bcrypt password), extended with ``server_tags`` for the
zones and ``jetstream { unique_tag: "az:" }``; an ``APP`` account holds the streams. Every
check goes through unmodified nats-py, as an application would.

The tests of the module share one cluster and run in file order (each leaves every server
running and the cluster healed).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import bcrypt
import nats
import pytest
from cluster import Cluster
from js_support import listed
from nats.js.errors import APIError, ServiceUnavailableError

ZONES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c"}
#: Servers taken out for good by SERVER.REMOVE (stopped, never started again).
REMOVED: set[str] = set()
SYS_PASSWORD = "a very long s3cr3t! password"
#: The APP account's user; the $SYS user is "admin" with SYS_PASSWORD (bcrypt-hashed).
APP = {"user": "app", "password": "app-pass"}


def accounts_block() -> str:
    hashed = bcrypt.hashpw(SYS_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    return f"""accounts {{
  $SYS {{ users = [ {{ user: "admin", pass: "{hashed}" }} ] }}
  APP {{ jetstream: enabled, users = [ {{ user: "{APP['user']}", pass: "{APP['password']}" }} ] }}
}}"""


#: Lame duck mode short enough for a test: the few clients are closed from 1 s after SIGUSR2.
LAME_DUCK = "lame_duck_grace_period: 1s\nlame_duck_duration: 30s"


def cluster_options(unique_tag: str | None = "az:") -> dict:
    """The Cluster keyword arguments of the five servers: JetStream, ZONES, the accounts."""
    return dict(jetstream=True, unique_tag=unique_tag, tags=[[f"az:{z}"] for z in ZONES.values()],
                extra=accounts_block() + "\n" + LAME_DUCK)


def make_cluster(workdir: Path, unique_tag: str | None = "az:") -> Cluster:
    return Cluster("jetraft", workdir, 5, **cluster_options(unique_tag))


@pytest.fixture(scope="module")
def cluster(formed_cluster):
    with formed_cluster("jetraft", "jscluster", 5, users=[(APP["user"], APP["password"])],
                        **cluster_options()) as c:
        yield c


def run(scenario: Callable[[], Awaitable[None]], timeout: float = 120.0) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout))


async def _ignore(_exc: Exception) -> None:
    return None


async def connect(c: Cluster, names: list[str] | None = None, **creds) -> nats.NATS:
    urls = [c.servers[n].url for n in (names or list(c.servers)) if c.servers[n].alive()]
    return await nats.connect(servers=urls, user=creds.get("user", APP["user"]),
                              password=creds.get("password", APP["password"]),
                              max_reconnect_attempts=-1, reconnect_time_wait=0.1,
                              connect_timeout=2, error_cb=_ignore)


class RetryableError(Exception):
    """A failure that is safe to retry (see :func:`retry`'s ``only``)."""


async def retry(fn: Callable[[], Awaitable], timeout: float, what: str,
                only: type[BaseException] = Exception):
    """Call ``fn`` until it returns without raising, for at most ``timeout`` seconds;
    with ``only``, other exceptions are not retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await fn()
        except only as exc:  # noqa: BLE001 - retried until the deadline
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {timeout}s: {exc!r}") from exc
            await asyncio.sleep(0.1)


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout}s (last seen: {LAST_SEEN})")
        await asyncio.sleep(0.1)


async def create(js, **config):
    """Create a stream, waiting out a meta leader election (10008)."""
    async def attempt():
        try:
            return await js.add_stream(**config)
        except APIError as err:
            if err.err_code == 10008:
                raise
            return err
    return await retry(attempt, 30, f"create {config['name']}")


#: The last stream info (or error) all_current saw, shown when a wait for it fails.
LAST_SEEN: dict[str, object] = {}


async def all_current(js, stream: str, replicas: int) -> bool:
    try:
        si = await js.stream_info(stream)
    except Exception as exc:  # noqa: BLE001 - no leader yet
        LAST_SEEN[stream] = exc
        return False
    LAST_SEEN[stream] = si.cluster
    cl = si.cluster
    return (cl is not None and cl.leader is not None and len(cl.replicas or []) == replicas - 1
            and all(r.current and not r.offline for r in cl.replicas))


def members(si) -> list[str]:
    return [si.cluster.leader, *(r.name for r in si.cluster.replicas)]


async def leader_moved(nc: nats.NATS, stream: str, before: str) -> bool:
    """Whether ``stream`` has a leader other than ``before``. Asked with a 1 s timeout: a
    request in flight while the leadership moves can go unanswered (it is dropped, and
    clients ask again), and one such request must not use up a whole wait."""
    try:
        leader = (await nc.jetstream(timeout=1).stream_info(stream)).cluster.leader
    except Exception:  # noqa: BLE001 - no leader at this instant
        return False
    return leader is not None and leader != before


async def publish_acked(js, subject: str, values: range, acked: list[int], timeout: float = 30) -> None:
    """Publish each value (with a Nats-Msg-Id) until it is acknowledged; record it."""
    for v in values:
        async def pub(v=v):
            return await js.publish(subject, str(v).encode(), timeout=0.5,
                                    headers={"Nats-Msg-Id": f"m-{v}"})
        await retry(pub, timeout, f"publish {v}")
        acked.append(v)


async def read_all(js, stream: str, subject: str) -> list[int]:
    """Every message of ``stream``, by sequence ($JS.API.STREAM.MSG.GET)."""
    si = await retry(lambda: js.stream_info(stream), 10, "stream info")
    out = []
    for seq in range(si.state.first_seq, si.state.last_seq + 1):
        # a request in flight when a route is replaced can go unanswered: ask again
        msg = await retry(lambda seq=seq: js.get_msg(stream, seq), 10, f"message {seq}")
        out.append(int(msg.data))
    return out


# ----------------------------------------------------------------------------- tests


def test_a_meta_leader_is_elected_and_every_server_agrees(cluster):
    deadline = time.monotonic() + 30
    while True:
        leaders = {n: s.monitor("/jsz").get("meta_cluster", {}).get("leader") for n, s in cluster.servers.items()}
        if None not in leaders.values() and len(set(leaders.values())) == 1:
            break
        assert time.monotonic() < deadline, f"no agreed meta leader: {leaders}"
        time.sleep(0.1)
    jsz = cluster.servers["n1"].monitor("/jsz")["meta_cluster"]
    assert jsz["cluster_size"] == 5 and jsz["quorum_needed"] == 3
    events = cluster.events(next(iter(leaders.values())))
    became = [e for e in events if e["event"] == "raft_became_leader" and e["group"] == "_meta_"]
    assert became and became[-1]["zone"] in ("a", "b", "c") and len(became[-1]["peers"]) == 5


def test_placement_r1_r3_and_r5_with_unique_tag(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        r1 = await create(js, name="ONE", subjects=["one.>"], num_replicas=1)
        assert r1.config.num_replicas == 1 and r1.cluster.leader in ZONES
        r3 = await create(js, name="ORDERS", subjects=["orders.>"], num_replicas=3)
        assert isinstance(r3, object) and r3.cluster.name == "C1"
        si = await js.stream_info("ORDERS")
        assert sorted(ZONES[m] for m in members(si)) == ["a", "b", "c"]    # one replica per zone
        r5 = await create(js, name="FIVE", subjects=["five.>"], num_replicas=5)
        assert isinstance(r5, APIError)
        assert (r5.code, r5.err_code, r5.description) == (
            400, 10005, "no suitable peers for placement, server tag not unique")
        names = await js.streams_info()
        assert sorted(s.config.name for s in names) == ["ONE", "ORDERS"]
        await nc.close()
    run(scenario)


def test_publish_and_the_cluster_block(cluster):
    async def scenario():
        nc = await connect(cluster, ["n5"])
        js = nc.jetstream(timeout=5)
        acked: list[int] = []
        await publish_acked(js, "orders.new", range(1, 51), acked)
        dup = await js.publish("orders.new", b"1", headers={"Nats-Msg-Id": "m-1"})
        assert dup.duplicate and dup.seq == 1
        await until(lambda: all_current(js, "ORDERS", 3), 20, "replicas current")
        si = await js.stream_info("ORDERS")
        assert si.state.messages == 50 and si.state.last_seq == 50
        cl = si.cluster
        assert cl.name == "C1" and cl.raft_group.startswith("S-R3F-") and cl.leader_since is not None
        for r in cl.replicas:
            assert r.current and r.active is not None and r.name != cl.leader
        assert await read_all(js, "ORDERS", "orders.>") == acked
        await nc.close()
    run(scenario)


def test_step_down_moves_the_leader(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        before = (await js.stream_info("ORDERS")).cluster.leader
        reply = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", b"", timeout=5)
        assert json.loads(reply.data) == {
            "type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "success": True}
        await until(lambda: leader_moved(nc, "ORDERS", before), 10, "a new stream leader")
        ack = await js.publish("orders.new", b"51", headers={"Nats-Msg-Id": "m-51"})
        assert ack.seq == 51
        sysc = await connect(cluster, user="admin", password=SYS_PASSWORD)
        meta_before = cluster.servers["n1"].monitor("/jsz")["meta_cluster"]["leader"]
        reply = await sysc.request("$JS.API.META.LEADER.STEPDOWN", b"", timeout=5)
        assert json.loads(reply.data)["success"] is True

        async def meta_moved():
            leader = cluster.servers["n1"].monitor("/jsz")["meta_cluster"].get("leader")
            return leader is not None and leader != meta_before
        await until(meta_moved, 10, "a new meta leader")
        await sysc.close()
        await nc.close()
    run(scenario)


def test_a_pull_consumer_redelivers_correctly_after_a_leader_change(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        sub = await js.pull_subscribe("orders.>", "worker", stream="ORDERS")
        first = await sub.fetch(10, timeout=5)
        assert [int(m.data) for m in first] == list(range(1, 11))
        for m in first[:5]:
            await m.ack_sync()
        await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", b"", timeout=5)
        await until(lambda: all_current(js, "ORDERS", 3), 20, "replicas current after step-down")
        ci = await retry(lambda: js.consumer_info("ORDERS", "worker"), 10, "consumer info")
        assert ci.ack_floor.stream_seq == 5 and ci.num_ack_pending == 5
        # unacknowledged 6..10 come back after ack_wait (30 s default: nak them instead).
        # Each nak asks for the server's reply (as ack_sync does for an ack), so that the
        # pull below is not taken before the naks, and a nak that reached the previous
        # leader while the interest in the ack subjects moved is sent again.
        for m in first[5:]:
            await retry(lambda m=m: nc.request(m.reply, b"-NAK", timeout=1), 10, "nak")
        # A pull that timed out could have taken the redeliveries into a request the client
        # gave up on, so retry only a pull nobody received (503: no leader at that moment).
        async def pull():
            try:
                return await sub.fetch(5, timeout=10)
            except ServiceUnavailableError as exc:
                raise RetryableError(str(exc)) from exc
        again = await retry(pull, 20, "pull after the leader change", only=RetryableError)
        assert [int(m.data) for m in again] == list(range(6, 11))
        assert all(m.metadata.num_delivered == 2 for m in again)
        for m in again:
            await m.ack_sync()
        ci = await js.consumer_info("ORDERS", "worker")
        assert ci.ack_floor.stream_seq == 10
        await nc.close()
    run(scenario)


def test_streams_are_found_by_subject_and_kv_buckets_replicate(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await create(js, name="AUDIT", subjects=["audit.>"], num_replicas=3)
        names = await nc.request("$JS.API.STREAM.NAMES", json.dumps({"subject": "audit.x"}).encode(),
                                 timeout=5)
        assert json.loads(names.data)["streams"] == ["AUDIT"]
        await js.publish("audit.x", b"1")
        sub = await js.pull_subscribe("audit.>", "auditor")          # stream found by subject
        assert [m.data for m in await sub.fetch(1, timeout=5)] == [b"1"]
        kv = await retry(lambda: js.create_key_value(bucket="settings", history=2, replicas=3), 20, "kv")
        await kv.put("region", b"eu-west")
        await kv.put("region", b"eu-north")
        assert (await kv.get("region")).value == b"eu-north"
        other = await connect(cluster, ["n5"])
        kv5 = await other.jetstream(timeout=5).key_value("settings")
        assert (await kv5.get("region")).value == b"eu-north"
        assert len(await listed(lambda: kv5.history("region"))) == 2
        await other.close()
        await nc.close()
    run(scenario)


def test_a_deleted_stream_gets_no_raft_group_again_after_a_restart(cluster):
    """A restart replays the meta log; a stream created and deleted in it must not have its
    RAFT group opened (and a leader elected in a fresh term 1) again."""
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await create(js, name="BRIEF", subjects=["brief.>"], num_replicas=3)
        await js.publish("brief.x", b"1")
        si = await js.stream_info("BRIEF")
        group, member = si.cluster.raft_group, si.cluster.replicas[0].name
        assert await js.delete_stream("BRIEF")
        await nc.close()
        cluster.restart(member)
        cluster.wait_formed(timeout=30)
        events = cluster.events(member)
        start = max(i for i, e in enumerate(events) if e["event"] == "server_starting")
        again = [e for e in events[start:] if e.get("group") == group]
        assert again == [], again[:5]
        nc = await connect(cluster)
        await until(lambda: all_current(nc.jetstream(timeout=5), "ORDERS", 3), 30,
                    "replicas current after the restart")
        await nc.close()
    run(scenario)


def test_a_server_removed_from_a_stream_while_down_opens_no_replica_of_it_at_restart(cluster):
    """A replica's server is stopped and peer-removed from the stream meanwhile. At its
    restart its own meta log still assigns it the stream (the removal is not in it, or its
    persisted commit index is behind): it must not open the replica from that stale state
    (a voter of an old configuration, perhaps with an empty log after a deleted group),
    but wait until the meta leader brought it up to date."""
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await create(js, name="MOVED", subjects=["moved.>"], num_replicas=3)
        await until(lambda: all_current(js, "MOVED", 3), 30, "MOVED current")
        si = await js.stream_info("MOVED")
        group, victim = si.cluster.raft_group, si.cluster.replicas[0].name
        await nc.close()
        # the victim holds its replica (a server restarted by an earlier test may still be
        # catching up when the stream is created)
        deadline = time.monotonic() + 30
        while not [e for e in cluster.events(victim)
                   if e["event"] == "raft_applied" and e.get("group") == group]:
            assert time.monotonic() < deadline, f"{victim} never applied an entry of MOVED"
            await asyncio.sleep(0.1)
        cluster.stop_one(victim)
        nc = await connect(cluster, [n for n in cluster.servers if n != victim])
        js = nc.jetstream(timeout=5)
        deadline = time.monotonic() + 30
        while True:  # 10008: no meta leader just now; nothing done
            reply = json.loads((await nc.request("$JS.API.STREAM.PEER.REMOVE.MOVED",
                                                 json.dumps({"peer": victim}).encode(), timeout=10)).data)
            if reply.get("error", {}).get("err_code") != 10008 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert reply.get("success") is True, reply

        async def replaced():
            try:
                now = await js.stream_info("MOVED")
            except Exception:  # noqa: BLE001
                return False
            return victim not in members(now) and len(members(now)) == 3 \
                and all(r.current for r in now.cluster.replicas)
        await until(replaced, 30, "a replacement replica, current")
        await nc.close()
        cluster.start([victim])
        cluster.wait_formed(timeout=30)
        nc = await connect(cluster)
        await until(lambda: all_current(nc.jetstream(timeout=5), "MOVED", 3), 30,
                    "replicas current after the restart")
        await nc.close()
        events = cluster.events(victim)
        start = max(i for i, e in enumerate(events) if e["event"] == "server_starting")
        again = [e for e in events[start:] if e.get("group") == group
                 and e["event"] != "raft_group_files_deleted"]
        assert again == [], again[:5]
        # and its copy, which the meta state no longer assigns it, is gone from its disk
        deadline = time.monotonic() + 30
        while (gone := [e for e in cluster.events(victim)[start:]
                        if e["event"] == "raft_group_files_deleted" and e["group"] == group]) == []:
            assert time.monotonic() < deadline, "the removed replica's files were kept"
            await asyncio.sleep(0.1)
        assert not (cluster.store_dir(victim) / "jetstream" / "APP" / "streams" / "MOVED").exists()
    run(scenario)


def test_peer_remove_re_replicates_in_the_same_zone(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        si = await js.stream_info("ORDERS")
        removed = si.cluster.replicas[0].name
        zone = ZONES[removed]
        deadline = time.monotonic() + 30
        while True:  # 10008: no meta leader just now (an election on a loaded machine); nothing done
            reply = json.loads((await nc.request("$JS.API.STREAM.PEER.REMOVE.ORDERS",
                                                 json.dumps({"peer": removed}).encode(), timeout=10)).data)
            if reply.get("error", {}).get("err_code") != 10008 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert reply == {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True}

        async def replaced():
            try:
                now = await js.stream_info("ORDERS")
            except Exception:  # noqa: BLE001
                return False
            peers = members(now)
            return (removed not in peers and len(peers) == 3
                    and all(r.current for r in now.cluster.replicas))
        await until(replaced, 30, "a replacement replica, current")
        now = await js.stream_info("ORDERS")
        assert sorted(ZONES[m] for m in members(now)) == ["a", "b", "c"]
        new = next(m for m in members(now) if m not in members(si))
        assert ZONES[new] == zone
        await nc.close()
    run(scenario)


def test_losing_any_one_zone_keeps_the_cluster_writable(cluster):
    async def scenario():
        acked: list[int] = list(range(1, 52))
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        next_value = 52
        for zone in ("a", "b", "c"):
            down = [n for n, z in ZONES.items() if z == zone]
            for name in down:
                cluster.kill(name)
            await publish_acked(js, "orders.new", range(next_value, next_value + 20), acked)
            next_value += 20
            si = await retry(lambda: js.stream_info("ORDERS"), 15, "stream info without a zone")
            assert si.cluster.leader not in down
            extra = await create(js, name=f"AFTER_{zone.upper()}", subjects=[f"after.{zone}"], num_replicas=1)
            assert not isinstance(extra, APIError), extra      # the meta group still decides
            for name in down:
                cluster.restart(name)
            cluster.wait_formed(timeout=30)
            await until(lambda: all_current(js, "ORDERS", 3), 30, f"replicas current after zone {zone}")
        assert await read_all(js, "ORDERS", "orders.>") == acked
        await nc.close()
    run(scenario, timeout=240)


def test_losing_two_zones_refuses_writes_and_healing_loses_nothing(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        acked = await read_all(js, "ORDERS", "orders.>")
        survivors = ["n5"]
        down = [n for n in ZONES if n not in survivors]
        await nc.close()
        for name in down:
            cluster.kill(name)
        nc = await connect(cluster, survivors)
        js = nc.jetstream(timeout=2)
        deadline = time.monotonic() + 5
        refusals = 0
        while time.monotonic() < deadline:
            try:
                await js.publish("orders.new", b"-1", timeout=0.5, headers={"Nats-Msg-Id": "lost"})
            except Exception:  # noqa: BLE001 - a timeout, no responders or 503: all refusals
                refusals += 1
            else:
                raise AssertionError("a publish was acknowledged without a quorum")
        assert refusals > 0
        for name in down:
            cluster.restart(name)
        cluster.wait_formed(timeout=30)
        await nc.close()
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await until(lambda: all_current(js, "ORDERS", 3), 60, "every replica current after healing")
        assert await read_all(js, "ORDERS", "orders.>") == acked
        await nc.close()
    run(scenario, timeout=180)


def test_the_admin_cli_shows_the_cluster_information(cluster):
    url = cluster.servers["n2"].url
    cli = Path(sys.executable).parent / "jetraft"
    result = subprocess.run([str(cli), "--server", url, "--user", APP["user"], "--password",
                             APP["password"], "stream", "info", "ORDERS"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    assert "Cluster Information" in result.stdout
    assert "Leader:" in result.stdout and "current" in result.stdout


def test_lame_duck_hands_the_leadership_over_before_stopping(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        leader = (await js.stream_info("ORDERS")).cluster.leader
        proc = cluster.servers[leader].proc
        os.kill(proc.pid, signal.SIGUSR2)
        try:
            await until(lambda: leader_moved(nc, "ORDERS", leader), 10,
                        "a new leader while the old one is in lame duck mode")
            assert proc.poll() is None or proc.returncode == 0      # handed over, not dead
            await asyncio.get_running_loop().run_in_executor(None, proc.wait, 40)
            events = cluster.events(leader)
            handed = [e for e in events if e["event"] == "jetstream_stepdown_requested"
                      and e.get("cause") == "lame_duck"]
            assert handed, "no leadership hand-over in the event log"
        finally:        # the later tests need all five servers, whatever happened here
            cluster.restart(leader)
        cluster.wait_formed(timeout=30)
        await until(lambda: all_current(js, "ORDERS", 3), 30, "replicas current after the restart")
        await nc.close()
    run(scenario)


def test_server_remove_moves_its_replicas_within_its_zone(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        si = await js.stream_info("ORDERS")
        gone = next(m for m in members(si) if m != si.cluster.leader and ZONES[m] != "c")
        cluster.kill(gone)      # decommissioned first, as an operator does; it stays down
        REMOVED.add(gone)
        sysc = await connect(cluster, user="admin", password=SYS_PASSWORD)
        async def remove(peer: str) -> dict:
            """SERVER.REMOVE, asked again while the meta group elects (``gone`` may have led it)."""
            async def ask():
                reply = await sysc.request("$JS.API.SERVER.REMOVE", json.dumps({"peer": peer}).encode(),
                                           timeout=5)
                body = json.loads(reply.data)
                if body.get("error", {}).get("err_code") == 10008:
                    raise RetryableError("no meta leader yet")
                return body
            return await retry(ask, 20, f"SERVER.REMOVE {peer}", only=RetryableError)

        assert (await remove("nobody"))["error"]["err_code"] == 10044
        assert await remove(gone) == {
            "type": "io.nats.jetstream.api.v1.meta_server_remove_response", "success": True}

        async def moved():
            try:
                now = await js.stream_info("ORDERS")
            except Exception:  # noqa: BLE001
                return False
            peers = members(now)
            return gone not in peers and len(peers) == 3 and all(r.current for r in now.cluster.replicas)
        await until(moved, 30, f"ORDERS off {gone}")
        now = await js.stream_info("ORDERS")
        assert sorted(ZONES[m] for m in members(now)) == ["a", "b", "c"]
        jsz = cluster.servers[si.cluster.leader].monitor("/jsz")["meta_cluster"]
        assert jsz["cluster_size"] == 4
        await sysc.close()
        await nc.close()
    run(scenario)


def test_a_restart_of_every_server_pushes_nothing_twice(cluster):
    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await create(js, name="PUSHED", subjects=["pushed.>"], num_replicas=3)
        got: list[bytes] = []
        sub = await js.subscribe("pushed.>", durable="pusher", manual_ack=True, stream="PUSHED")
        for i in range(5):
            await js.publish("pushed.x", b"old-%d" % i)
        for _ in range(5):
            msg = await sub.next_msg(timeout=10)
            got.append(msg.data)
            await msg.ack_sync()
        await nc.close()
        for name in ZONES:
            cluster.kill(name)
        cluster.start([n for n in ZONES if n not in REMOVED])
        cluster.wait_formed(timeout=30)
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        await until(lambda: all_current(js, "PUSHED", 3), 60, "PUSHED current after a full restart")
        sub = await retry(lambda: js.subscribe("pushed.>", durable="pusher", manual_ack=True,
                                               stream="PUSHED"), 20, "re-bind the push consumer")
        await retry(lambda: js.publish("pushed.x", b"new", timeout=1), 20, "publish after restart")
        after = []
        while not after or after[-1] != b"new":
            after.append((await sub.next_msg(timeout=10)).data)
        assert got == [b"old-%d" % i for i in range(5)]
        assert after == [b"new"], f"delivered again after the restart: {after}"
        await nc.close()
    run(scenario, timeout=180)


def test_r5_without_unique_tag_is_placed_on_every_server(tmp_path):
    c = make_cluster(tmp_path, unique_tag=None)
    c.start()
    try:
        c.wait_formed()

        async def scenario():
            nc = await connect(c)
            js = nc.jetstream(timeout=5)
            r5 = await create(js, name="FIVE", subjects=["five.>"], num_replicas=5)
            assert not isinstance(r5, APIError), r5
            await js.publish("five.x", b"1")
            await until(lambda: all_current(js, "FIVE", 5), 20, "five current replicas")
            assert sorted(members(await js.stream_info("FIVE"))) == sorted(ZONES)
            await nc.close()
        run(scenario)
    finally:
        c.stop()
