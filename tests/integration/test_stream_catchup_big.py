"""A replica restarted a million messages behind catches up through a snapshot while
publishes go on (five jetraft servers, default snapshot settings).

About 90 s: the million 128-byte messages are published with a window of acks outstanding
on two connections, as the cluster benchmark does.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from cluster import Cluster
from test_js_cluster import ZONES, all_current, connect, create, publish_acked, run, until
from test_stream_snapshots import replicas_agree, wait_events

BEHIND = 1_000_000
PAYLOAD = b"x" * 128


@pytest.fixture(scope="module")
def cluster(formed_cluster):
    with formed_cluster("jetraft", "bigcatchup", 5, jetstream=True, unique_tag="az:",
                        tags=[[f"az:{z}"] for z in ZONES.values()]) as c:
        yield c


async def publish_windowed(js, subject: str, n: int, window: int = 512) -> int:
    """Publish ``n`` messages with up to ``window`` acks outstanding; returns how many
    were acknowledged (each ack's sequence checked to be new)."""
    pending: set[asyncio.Future] = set()
    seqs: set[int] = set()
    for _ in range(n):
        pending.add(await js.publish_async(subject, PAYLOAD, wait_stall=30))
        if len(pending) >= window:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            seqs.update(f.result().seq for f in done)
    for f in asyncio.as_completed(pending):
        seqs.add((await f).seq)
    return len(seqs)


@pytest.mark.timeout(600)
def test_a_replica_a_million_messages_behind_catches_up_through_a_snapshot(cluster):
    async def scenario():
        ncs = [await connect(cluster, [n]) for n in ("n1", "n3")]
        js = [nc.jetstream(timeout=30, publish_async_max_pending=1024) for nc in ncs]
        await create(js[0], name="BIG", subjects=["big.>"], num_replicas=3)
        si = await js[0].stream_info("BIG")
        group, reps = si.cluster.raft_group, [si.cluster.leader, *(r.name for r in si.cluster.replicas)]
        behind = next(r.name for r in si.cluster.replicas)
        cluster.stop_one(behind)
        half = BEHIND // 2
        acked = await asyncio.gather(publish_windowed(js[0], "big.a", half),
                                     publish_windowed(js[1], "big.b", BEHIND - half))
        assert sum(acked) == BEHIND
        cluster.start([behind])
        during: list[int] = []
        started = time.monotonic()
        more = asyncio.ensure_future(publish_acked(js[0], "big.c", range(1, 501), during))
        done = await asyncio.to_thread(wait_events, cluster, behind, "stream_catchup_finished", group,
                                       120, since_start=True, where=lambda e: e["ok"])
        await more
        assert len(during) == 500, "publishes went on during the catch-up"
        assert events_installed(cluster, behind, group), "it went through InstallSnapshot"
        assert done[-1]["bytes"] > BEHIND * 128 // 2, done[-1]
        await until(lambda: all_current(js[0], "BIG", 3), 120, f"{behind} current")
        await until(lambda: replicas_agree(cluster, js[0], "BIG", reps), 60, "replicas agree")
        si = await js[0].stream_info("BIG")
        assert si.state.messages == BEHIND + 500 and si.state.last_seq == BEHIND + 500
        print(f"caught up {done[-1]['bytes']} bytes in {done[-1]['duration_ns'] / 1e9:.2f} s; "
              f"current {time.monotonic() - started:.2f} s after the restart")
        for nc in ncs:
            await nc.close()
    run(scenario, timeout=600)


def events_installed(c: Cluster, name: str, group: str) -> bool:
    return bool(wait_events(c, name, "raft_snapshot_installed", group, 5, since_start=True))
