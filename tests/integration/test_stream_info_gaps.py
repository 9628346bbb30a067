"""A stream restored with a gap of 10**12 sequences, as an attacker restored one: the server
answers STREAM.INFO ``deleted_details`` at once, with the lowest 100,000 deleted sequences
and the true ``num_deleted``, and keeps answering other clients meanwhile; after a restart
it opens the stream (its dedupe window rebuilt from the two messages) and answers the same.

Before the fix, jetraft listed every missing sequence on its event loop: with messages at 1
and 30,000,000 it froze for seconds at 1.7 GB and wrote a 259 MB reply; here it failed (a
list of 10**12 ints cannot be allocated), and a restart walked the 10**12 sequences to
rebuild the dedupe window and never became ready.

jetraft only: the snapshot is jetraft's own format, and nats-server lists every deleted
sequence (its reply for such a gap would be terabytes). The same paging and small gaps are
compared with nats-server in tests/compat/test_compat_stream_info_pages.py.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from compat_support import connect, run
from polling import apoll
from servers import js_config

import servers
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.snapshot import SnapshotWriter
from jetraft.jetstream.snapshot_frames import FramedReader
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream

GAP = 10**12
FAR = GAP + 1
CAP = 100_000
CHUNK = 64 * 1024
REQUEST_TIMEOUT = 5.0

pytestmark = pytest.mark.timeout(180)


def gapped_snapshot(storage: str) -> tuple[dict, dict, bytes]:
    """``(config, state, data)`` of a restore of stream GAP: messages at 1 and 10**12 + 1,
    published now (both within the dedupe window), with message ids."""
    now = time.time_ns()
    store = MemoryStore()
    store.store("gap.a", b"NATS/1.0\r\nNats-Msg-Id: one\r\n\r\n", b"first", now)
    store.store_at(FAR, "gap.b", b"NATS/1.0\r\nNats-Msg-Id: two\r\n\r\n", b"far", now + 1)
    stream = Stream(StreamConfig(name="GAP", subjects=["gap.>"], storage=storage), store,
                    rebuild_dedupe=False)
    info = stream.info(now)
    framed = FramedReader(SnapshotWriter(stream, {}, no_consumers=True))
    data = b"".join(iter(lambda: framed.read(CHUNK), b""))
    return info["config"], info["state"], data


async def api(nc, subject: str, body=None) -> dict:
    data = b"" if body is None else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=REQUEST_TIMEOUT)).data)


async def restore(nc, config: dict, state: dict, data: bytes) -> dict:
    resp = await api(nc, f"$JS.API.STREAM.RESTORE.{config['name']}", {"config": config, "state": state})
    assert "error" not in resp, resp
    for i in range(0, len(data), CHUNK):
        ack = await nc.request(resp["deliver_subject"], data[i:i + CHUNK], timeout=REQUEST_TIMEOUT)
        assert not ack.data, ack.data
    final = await nc.request(resp["deliver_subject"], b"", timeout=30)
    return json.loads(final.data)


def check_details(reply: dict) -> None:
    assert "error" not in reply, reply
    st = reply["state"]
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (2, 1, FAR)
    assert st["num_deleted"] == GAP - 1
    assert st["deleted"] == list(range(2, 2 + CAP))


async def details_while_others_are_answered(url: str) -> None:
    """Three STREAM.INFO deleted_details requests from one client while another's requests
    to a third are answered: every one within a normal request timeout."""
    asker, requester, responder = [await connect(url) for _ in range(3)]
    try:
        async def echo(msg):
            await msg.respond(b"echo:" + msg.data)

        await responder.subscribe("svc.echo", cb=echo)
        await responder.flush(timeout=REQUEST_TIMEOUT)
        await requester.flush(timeout=REQUEST_TIMEOUT)

        async def infos() -> list[dict]:
            pending = [asker.request("$JS.API.STREAM.INFO.GAP", b'{"deleted_details":true}',
                                     timeout=REQUEST_TIMEOUT) for _ in range(3)]
            return [json.loads(m.data) for m in await asyncio.gather(*pending)]

        async def echoes() -> list[bytes]:
            return [(await requester.request("svc.echo", str(i).encode(), timeout=REQUEST_TIMEOUT)).data
                    for i in range(20)]

        replies, answered = await asyncio.gather(infos(), echoes())
        for reply in replies:
            check_details(reply)
        assert answered == [b"echo:%d" % i for i in range(20)]
    finally:
        for nc in (asker, requester, responder):
            await nc.close()


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_info_of_a_stream_restored_with_a_gap_of_10_12(tmp_path, storage):
    # a memory stream's restore opens it with its dedupe window rebuilt; a file stream's
    # restart does
    config, state, data = gapped_snapshot(storage)
    js = js_config(tmp_path / "store")
    started: list[servers.RunningServer] = []
    try:
        started.append(servers.start_server("jetraft", tmp_path / "first", js))

        async def first():
            nc = await connect(started[0].url)
            try:
                final = await restore(nc, config, state, data)
                assert "error" not in final, final
                assert final["state"]["num_deleted"] == GAP - 1
                assert "deleted" not in final["state"]
            finally:
                await nc.close()
            await details_while_others_are_answered(started[0].url)

        run(first)
        if storage == "memory":
            return
        assert started[0].stop() == 0
        started.append(servers.start_server("jetraft", tmp_path / "again", js, ready_timeout=30))

        async def again():
            nc = await connect(started[1].url)
            try:
                async def loaded() -> bool:
                    reply = await api(nc, "$JS.API.STREAM.INFO.GAP")
                    return "error" not in reply

                await apoll(loaded, "STREAM.INFO of GAP after the restart", 30, retry_on=())
                await details_while_others_are_answered(started[1].url)
                # the dedupe window was rebuilt over the gap: a message id seen is a duplicate
                ack = await nc.request("gap.b", b"again", timeout=REQUEST_TIMEOUT,
                                       headers={"Nats-Msg-Id": "two"})
                assert json.loads(ack.data) == {"stream": "GAP", "seq": FAR, "duplicate": True}
                ack = await nc.request("gap.c", b"new", timeout=REQUEST_TIMEOUT)
                assert json.loads(ack.data) == {"stream": "GAP", "seq": FAR + 1}
            finally:
                await nc.close()

        run(again)
    except BaseException:
        for server in started:
            print(server.output()[-6000:])
        raise
    finally:
        for server in started:
            server.stop()
