"""A stream deleted while one of its servers is down leaves nothing on that server's disk
once it is back: the meta log (or snapshot) it catches up from removes the stream, and
with it the replica's files."""

from __future__ import annotations

import asyncio
import time

import nats
import nats.js.errors
import pytest
from cluster import Cluster
from js_support import asked_again


def stream_dir(c: Cluster, name: str, stream: str):
    return c.store_dir(name) / "jetstream" / "$G" / "streams" / stream


@pytest.mark.parametrize("catch_up", ["log", "snapshot"])
def test_a_stream_deleted_while_a_server_was_down_is_removed_from_its_disk(tmp_path, catch_up):
    """``log``: the server replays the deletion from the meta leader's log; ``snapshot``:
    the meta leader compacted its log past the creation (meta_compact: 2 on n1 and n2),
    and the server, which had applied the creation but not snapshotted it, installs a meta
    snapshot without the stream."""
    c = Cluster("jetraft", tmp_path, 3, jetstream=True,
                jetstream_extra="meta_compact: 2" if catch_up == "snapshot" else "")
    own = c.config_text
    c.config_text = lambda name: own(name).replace("meta_compact: 2", "meta_compact: 100000") \
        if name == "n3" else own(name)
    try:
        c.start()
        c.wait_formed()
        c.wait_meta_leader()

        async def make():
            nc = await nats.connect(c.servers["n1"].url)
            js = nc.jetstream(timeout=10)
            await asked_again(lambda: js.add_stream(name="GONE", subjects=["gone.>"], num_replicas=3),
                              "create GONE")
            for i in range(10):
                await asked_again(lambda i=i: js.publish("gone.x", b"%d" % i, headers={"Nats-Msg-Id": str(i)}),
                                  f"publish {i}")
            await nc.close()
        asyncio.run(make())
        deadline = time.monotonic() + 30
        while not (stream_dir(c, "n3", "GONE") / "msgs").is_dir():
            assert time.monotonic() < deadline, "n3 never stored GONE"
            time.sleep(0.05)
        c.stop_one("n3")

        async def delete():
            nc = await nats.connect(c.servers["n1"].url)
            js = nc.jetstream(timeout=10)
            # n3 may have led the meta group: 10008 until the others elect a leader (nothing
            # was deleted then, so it is asked again); a delete whose answer was lost and
            # is asked again finds the stream gone
            asked = False

            async def delete_once() -> bool:
                nonlocal asked
                try:
                    return await js.delete_stream("GONE")
                except nats.js.errors.NotFoundError:
                    if not asked:
                        raise
                    return True
                finally:
                    asked = True
            assert await asked_again(delete_once, "delete GONE")
            for i in range(6):      # more meta entries: the leader snapshots past GONE
                await asked_again(lambda i=i: js.add_stream(name=f"MORE{i}", subjects=[f"more{i}"], num_replicas=1),
                                  f"create MORE{i}")
            await nc.close()
        asyncio.run(delete())
        c.restart("n3")
        c.wait_formed(timeout=30)
        c.wait_meta_leader()
        if catch_up == "snapshot":
            deadline = time.monotonic() + 30
            while not any(e["event"] == "raft_snapshot_installed" and e.get("group") == "_meta_"
                          for e in c.events("n3")):
                assert time.monotonic() < deadline, "n3 installed no meta snapshot"
                time.sleep(0.1)
        deadline = time.monotonic() + 30
        while stream_dir(c, "n3", "GONE").exists():
            assert time.monotonic() < deadline, sorted(p.name for p in stream_dir(c, "n3", "GONE").iterdir())
            time.sleep(0.1)
    finally:
        c.stop()
