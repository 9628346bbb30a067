"""$JS.API.STREAM.RESTORE on a three-server jetraft cluster, as a client and an operator see it.

A restore goes to the meta leader like a create; the stream's first peer receives the backup,
builds the stream, and its peers take it through a RAFT snapshot and the store catch-up; the
last chunk is answered once a quorum of the peers hold it. Checked here: a round trip on
every replica (each server's own copy through its /jsz, reads after a leader step-down, a
follower stopped and started again), ``--replicas`` overrides, a restore of an existing
stream, corrupt data and a client that stops half-way (nothing is left on any server), and
``jetraft stream backup|restore`` against the cluster. The tests share one cluster and run in
file order; every stream has a name of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from cluster import Cluster
from compat_support import connect, run
from nats.errors import TimeoutError as NatsTimeout
from polling import poll
from test_admin_cli import Admin, assert_clean_error
from test_js_cluster import retry
from test_stream_backup_restore import (
    STREAM_CREATE_RESPONSE,
    STREAM_RESTORE_RESPONSE,
    api,
    messages,
    restore,
    snapshot,
)

NAMES = ("n1", "n2", "n3")


@pytest.fixture(scope="module")
def cluster(formed_cluster):
    with formed_cluster("jetraft", "restore", 3, jetstream=True) as c:
        yield c


def replica_of(c: Cluster, server: str, stream: str) -> dict | None:
    """Server ``server``'s own replica of ``stream`` (its /jsz stream detail, with its
    consumers), or None when it holds none."""
    try:
        j = c.servers[server].monitor("/jsz?accounts=true&streams=true&consumers=true")
    except Exception:       # a server starting again
        return None
    for acc in j.get("account_details") or []:
        for s in acc.get("stream_detail") or []:
            if s["name"] == stream:
                return s
    return None


def held_by(c: Cluster, stream: str) -> list[str]:
    return [n for n in NAMES if n in c.servers and replica_of(c, n, stream) is not None]


async def ready(nc, name: str, subjects: list[str], replicas: int = 3) -> None:
    """Create a stream, retrying while the meta group elects (first test)."""
    js = nc.jetstream(timeout=5)
    deadline = time.monotonic() + 30
    while True:
        try:
            await js.add_stream(name=name, subjects=subjects, num_replicas=replicas)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def fill(nc, stream: str, replicas: int = 3) -> None:
    """Ten messages with headers, sequences 1, 4 and 7 deleted, a durable pull consumer
    delivered 5 messages and acknowledged 3."""
    subj = stream.lower()
    await ready(nc, stream, [f"{subj}.>"], replicas)
    js = nc.jetstream(timeout=5)
    for i in range(1, 11):
        await js.publish(f"{subj}.{i % 3}", f"m{i}".encode() * 50, headers={"X-N": str(i)})
    for seq in (1, 4, 7):
        assert (await api(nc, f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": seq}))["success"]
    sub = await js.pull_subscribe(f"{subj}.>", durable="worker")
    msgs = await sub.fetch(5, timeout=5)
    for m in msgs[:3]:
        await m.ack_sync()


async def backup(nc, stream: str) -> tuple[dict, bytes, list, dict, dict]:
    """Snapshot ``stream``; returns (response, data, messages, consumer info, stream info)
    taken before it is deleted."""
    info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
    msgs = await messages(nc, stream, 10)
    consumer = await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.worker")
    resp, data, status, chunks = await snapshot(nc, stream, chunk_size=1024)
    assert "error" not in resp, resp
    assert status == "204" and chunks > 1
    return resp, data, msgs, consumer, info


async def gone(nc, stream: str) -> bool:
    names = await api(nc, "$JS.API.STREAM.NAMES")
    return "error" not in names and stream not in (names.get("streams") or [])


def wait_gone(c: Cluster, nc, stream: str, timeout: float = 30.0) -> None:
    """Poll STREAM.NAMES (the meta leader's view) and every server's /jsz until no server
    knows ``stream``."""
    deadline = time.monotonic() + timeout

    async def check():
        while True:
            if await gone(nc, stream) and not held_by(c, stream):
                return
            assert time.monotonic() < deadline, (
                f"{stream} still known: names {await api(nc, '$JS.API.STREAM.NAMES')}, "
                f"replicas on {held_by(c, stream)}")
            await asyncio.sleep(0.1)
    return check()


async def ask(nc, subject: str, body=None) -> dict:
    """An API request, asked again when it times out (after a leader change, a request
    that reached the former leader is dropped, as nats-server drops it)."""
    return await retry(lambda: api(nc, subject, body), 20, subject, only=NatsTimeout)


async def read_all(nc, stream: str) -> list:
    return await retry(lambda: messages(nc, stream, 10), 20, f"messages of {stream}", only=NatsTimeout)


def same_state(a: dict, b: dict) -> bool:
    keys = ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "first_ts", "last_ts")
    return all(a.get(k) == b.get(k) for k in keys)


def test_r3_round_trip_is_on_every_replica(cluster):
    c = cluster

    async def scenario():
        nc = await connect(c.servers["n1"].url)
        await fill(nc, "ORDERS")
        resp, data, before_msgs, before_consumer, before_info = await backup(nc, "ORDERS")
        assert (await api(nc, "$JS.API.STREAM.DELETE.ORDERS"))["success"]
        await wait_gone(c, nc, "ORDERS")
        await nc.close()
        nc = await connect(c.servers["n2"].url)
        final = await restore(nc, resp["config"], resp["state"], data)
        assert final["type"] == STREAM_CREATE_RESPONSE and "error" not in final, final
        assert same_state(final["state"], before_info["state"]), (final["state"], before_info["state"])
        assert final["config"]["num_replicas"] == 3
        # every server's own replica holds the messages and the consumer's state
        for name in NAMES:
            got = await asyncio.to_thread(
                poll, lambda name=name: (r := replica_of(c, name, "ORDERS")) and same_state(
                    r["state"], before_info["state"]) and r, f"ORDERS on {name}", 30, retry_on=())
            worker = next(x for x in got["consumer_detail"] if x["name"] == "worker")
            for key in ("delivered", "ack_floor", "num_ack_pending", "num_pending"):
                assert worker[key] == before_consumer[key], (name, key)
        # stream info asked on each server
        for name in NAMES:
            one = await connect(c.servers[name].url)
            info = await api(one, "$JS.API.STREAM.INFO.ORDERS")
            assert same_state(info["state"], before_info["state"]), (name, info)
            assert len(info["cluster"]["replicas"]) == 2, info["cluster"]
            await one.close()
        assert await messages(nc, "ORDERS", 10) == before_msgs
        consumer = await api(nc, "$JS.API.CONSUMER.INFO.ORDERS.worker")
        for key in ("delivered", "ack_floor", "num_ack_pending", "num_pending"):
            assert consumer[key] == before_consumer[key], key
        # after a step-down, the new leader serves the same messages
        leader = (await api(nc, "$JS.API.STREAM.INFO.ORDERS"))["cluster"]["leader"]
        down = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.ORDERS")
        assert down.get("success"), down
        deadline = time.monotonic() + 20
        while True:
            info = await ask(nc, "$JS.API.STREAM.INFO.ORDERS")
            if "error" not in info and info["cluster"].get("leader") not in (None, leader):
                break
            assert time.monotonic() < deadline, info
            await asyncio.sleep(0.1)
        assert await read_all(nc, "ORDERS") == before_msgs
        consumer = await ask(nc, "$JS.API.CONSUMER.INFO.ORDERS.worker")
        assert consumer["ack_floor"] == before_consumer["ack_floor"]
        # a follower stopped and started again still holds the restored stream
        new_leader = info["cluster"]["leader"]
        follower = next(n for n in NAMES if n != new_leader)
        await nc.close()
        c.kill(follower)
        c.restart(follower)
        await asyncio.to_thread(
            poll, lambda: (r := replica_of(c, follower, "ORDERS")) and same_state(
                r["state"], before_info["state"]), f"ORDERS on {follower} after its restart", 30, retry_on=())
        nc = await connect(c.servers[new_leader].url)
        ack = await nc.jetstream(timeout=5).publish("orders.new", b"x")
        assert ack.seq == 11 and ack.stream == "ORDERS"
        for name in NAMES:
            await asyncio.to_thread(
                poll, lambda name=name: (r := replica_of(c, name, "ORDERS")) and r["state"]["last_seq"] == 11,
                f"the new message on {name}", 30, retry_on=())
        await nc.close()

    run(scenario)


def test_a_restore_of_several_mib_reaches_every_replica(cluster):
    """Enough data for many chunks and catch-up requests: every server's replica ends with
    the backup's messages, bytes and sequences."""
    c = cluster

    async def scenario():
        nc = await connect(c.servers["n3"].url)
        await ready(nc, "BIG", ["big.*"])
        js = nc.jetstream(timeout=5)
        for i in range(300):
            await js.publish(f"big.{i % 7}", os.urandom(16_000))
        resp, data, status, chunks = await snapshot(nc, "BIG", chunk_size=256 * 1024)
        assert status == "204" and len(data) > 4_000_000
        assert (await api(nc, "$JS.API.STREAM.DELETE.BIG"))["success"]
        await wait_gone(c, nc, "BIG")
        final = await restore(nc, resp["config"], resp["state"], data)
        assert "error" not in final, final
        assert same_state(final["state"], resp["state"])
        for name in NAMES:
            await asyncio.to_thread(
                poll, lambda name=name: (r := replica_of(c, name, "BIG")) and same_state(r["state"], resp["state"]),
                f"BIG on {name}", 60, retry_on=())
        await nc.close()

    run(scenario)


def test_replicas_override_and_an_existing_stream(cluster):
    c = cluster

    async def scenario():
        nc = await connect(c.servers["n3"].url)
        await fill(nc, "WIDE")
        resp, data, before_msgs, _, before_info = await backup(nc, "WIDE")
        # the stream exists: refused as nats-server refuses it, nothing changes
        refused = await api(nc, "$JS.API.STREAM.RESTORE.WIDE", {"config": resp["config"], "state": resp["state"]})
        assert refused == {"type": STREAM_RESTORE_RESPONSE, "error": {
            "code": 400, "err_code": 10130, "description": "stream name already in use, cannot restore"},
            "deliver_subject": ""}
        # the same backup as an R1 stream of another name
        final = await restore(nc, dict(resp["config"], name="NARROW", subjects=["narrow.>"], num_replicas=1),
                              resp["state"], data)
        assert "error" not in final, final
        assert final["config"]["num_replicas"] == 1 and final["cluster"].get("replicas") in (None, [])
        assert same_state(final["state"], before_info["state"])
        assert await messages(nc, "NARROW", 10) == before_msgs
        assert len(await asyncio.to_thread(poll, lambda: held_by(c, "NARROW"), "a NARROW replica", 30,
                                           retry_on=())) == 1
        # a memory stream is refused in a cluster: its snapshot carries no messages
        mem = await api(nc, "$JS.API.STREAM.RESTORE.MEM", {
            "config": dict(resp["config"], name="MEM", subjects=["mem.>"], storage="memory"), "state": resp["state"]})
        assert mem["error"]["err_code"] == 10062, mem
        assert "memory stream" in mem["error"]["description"]
        assert await gone(nc, "MEM")
        await nc.close()

    run(scenario)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_data_leaves_no_stream_on_any_server(cluster, damage):
    c = cluster
    name = f"BAD{damage.upper()}"

    async def scenario():
        nc = await connect(c.servers["n1"].url)
        await fill(nc, name)
        resp, data, _, _, _ = await backup(nc, name)
        assert (await api(nc, f"$JS.API.STREAM.DELETE.{name}"))["success"]
        await wait_gone(c, nc, name)
        bad = bytearray(data)
        if damage == "flip":
            bad[len(bad) // 2] ^= 0x40
        else:
            del bad[-100:]
        final = await restore(nc, resp["config"], resp["state"], bytes(bad))
        assert final["type"] == STREAM_CREATE_RESPONSE
        assert final["error"]["err_code"] == 10062, final
        assert final["error"]["description"].startswith("restore failed: snapshot data is"), final
        await wait_gone(c, nc, name)
        # the intact data restores afterwards
        final = await restore(nc, resp["config"], resp["state"], data)
        assert "error" not in final and final["state"]["messages"] == 7, final
        await nc.close()

    run(scenario)


def test_a_client_gone_mid_restore_leaves_no_stream_and_publishes_are_refused_meanwhile(cluster):
    c = cluster

    async def scenario():
        nc = await connect(c.servers["n2"].url)
        await ready(nc, "HALF", ["half"])
        js = nc.jetstream(timeout=5)
        for _ in range(20):
            await js.publish("half", os.urandom(10_000))
        resp, data, _, _ = await snapshot(nc, "HALF")
        assert (await api(nc, "$JS.API.STREAM.DELETE.HALF"))["success"]
        await wait_gone(c, nc, "HALF")
        got = await restore(nc, resp["config"], resp["state"], data, stop_after=1)
        assert got == {"stopped": True}
        # while it runs: the name is taken, publishes and changes are refused
        again = await api(nc, "$JS.API.STREAM.RESTORE.HALF", {"config": resp["config"], "state": resp["state"]})
        assert again["error"]["err_code"] == 10130
        ack = json.loads((await nc.request("half", b"x", timeout=5)).data)
        assert ack["error"]["err_code"] == 10194, ack
        assert "restore of the stream is in progress" in ack["error"]["description"]
        purge = await api(nc, "$JS.API.STREAM.PURGE.HALF")
        assert purge["error"]["err_code"] == 10194, purge
        await wait_gone(c, nc, "HALF")
        final = await restore(nc, resp["config"], resp["state"], data)
        assert "error" not in final and final["state"]["messages"] == 20, final
        await nc.close()

    run(scenario)


def test_admin_cli_backup_and_restore_against_the_cluster(cluster, tmp_path):
    c = cluster

    async def setup():
        nc = await connect(c.servers["n1"].url)
        await fill(nc, "CLI", replicas=1)
        await nc.close()

    run(setup)
    admin = Admin(c.servers["n2"].url, tmp_path)
    out = tmp_path / "backup"
    admin("stream", "backup", "CLI", str(out), "--chunk-size", "1KB")
    result = admin("stream", "restore", str(out), code=1)
    assert_clean_error(result.stderr, 'stream "CLI" already exists')
    admin("stream", "rm", "CLI", "-f")
    result = admin("stream", "restore", str(out), "--replicas", "3")
    assert 'Restored stream "CLI" in ' in result.stdout, result.stdout
    info = json.loads(admin("stream", "info", "CLI", "--json").stdout)
    assert info["config"]["num_replicas"] == 3
    assert info["state"]["messages"] == 7 and info["state"]["num_deleted"] == 2
    assert len(info["cluster"]["replicas"]) == 2
    poll(lambda: held_by(c, "CLI") == list(NAMES), "CLI on every server", 30, retry_on=())
    (out / "stream.tar.s2").write_bytes(b"garbage")
    admin("stream", "rm", "CLI", "-f")
    result = admin("stream", "restore", str(out), code=1)
    assert_clean_error(result.stderr, "restore failed")
    poll(lambda: not held_by(c, "CLI"), "no CLI replica left", 30, retry_on=())


def test_a_restorer_lost_mid_restore_leaves_no_stream(cluster):
    """The server receiving the backup stops half-way: the meta leader deletes the stream
    once that server's route has been down for ten seconds; started again, the server
    holds nothing of it either."""
    c = cluster

    async def scenario():
        nc = await connect(c.servers["n1"].url)
        await ready(nc, "LOST", ["lost"])
        js = nc.jetstream(timeout=5)
        for _ in range(20):
            await js.publish("lost", os.urandom(10_000))
        resp, data, _, _ = await snapshot(nc, "LOST")
        assert (await api(nc, "$JS.API.STREAM.DELETE.LOST"))["success"]
        await wait_gone(c, nc, "LOST")
        got = await restore(nc, resp["config"], resp["state"], data, stop_after=1)
        assert got == {"stopped": True}
        await nc.close()
        # while the data comes, only the restorer holds a replica
        restorer = (await asyncio.to_thread(poll, lambda: held_by(c, "LOST"), "the restorer", 10, retry_on=()))[0]
        c.kill(restorer)
        other = next(n for n in NAMES if n != restorer)
        nc = await connect(c.servers[other].url)
        await wait_gone(c, nc, "LOST", 40)
        c.restart(restorer)
        c.wait_formed()
        await asyncio.to_thread(poll, lambda: replica_of(c, restorer, "HALF") is not None,
                                f"{restorer} back with its replicas", 30, retry_on=())
        # its meta log catches up with the deletion
        await asyncio.to_thread(poll, lambda: replica_of(c, restorer, "LOST") is None,
                                f"no LOST on {restorer}", 30, retry_on=())
        assert await gone(nc, "LOST")
        spool = c.store_dir(restorer) / "restore-tmp"
        assert not spool.is_dir() or not os.listdir(spool)
        await nc.close()

    run(scenario)
