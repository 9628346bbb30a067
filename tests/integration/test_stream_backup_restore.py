"""Stream snapshots and restores ($JS.API.STREAM.SNAPSHOT / RESTORE) as a client drives them.

A nats-py client here speaks the protocol natscli (jsm.go snapshots.go) speaks: SNAPSHOT with a
deliver subject, every chunk acknowledged through its reply subject, an empty ``204`` message
at the end; RESTORE answered with a deliver subject, every chunk a request, an empty request
at the end answered with the stream's info. Against jetraft: a round trip (headers, deleted
sequences, consumers' delivered and ack floors), corrupt and truncated data, an existing
stream, a restore past its storage limit, a client that stops half-way, flow control, and
the admin CLI's ``stream backup``/``stream restore``. The request/response shapes and the
errors of the requests themselves are compared with nats-server 2.15.1 (the data format is
jetraft's own: a backup of one does not restore into the other).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest
import snappy
from compat_support import connect, run
from polling import poll
from servers import js_config

import servers
from test_admin_cli import Admin, assert_clean_error

from jetraft.jetstream.snapshot_frames import S2_IDENTIFIER, STREAM_IDENTIFIER

STREAM_SNAPSHOT_RESPONSE = "io.nats.jetstream.api.v1.stream_snapshot_response"
STREAM_RESTORE_RESPONSE = "io.nats.jetstream.api.v1.stream_restore_response"
STREAM_CREATE_RESPONSE = "io.nats.jetstream.api.v1.stream_create_response"
CHUNK = 64 * 1024


@pytest.fixture
def jetraft(tmp_path):
    server = servers.start_server("jetraft", tmp_path / "jr", js_config(tmp_path / "store"))
    yield server
    server.stop()


async def api(nc, subject: str, body=None, raw: bytes | None = None) -> dict:
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def snapshot(nc, stream: str, *, ack: bool = True, **options) -> tuple[dict, bytes, str, int]:
    """SNAPSHOT ``stream``; returns (response, data, end status, chunks)."""
    inbox = nc.new_inbox()
    chunks: list[bytes] = []
    end: dict = {}
    done = asyncio.Event()

    async def on_chunk(msg):
        if msg.data:
            chunks.append(msg.data)
            if ack and msg.reply:
                await nc.publish(msg.reply, b"")
            return
        end["status"] = (msg.headers or {}).get("Status", "")
        done.set()

    sub = await nc.subscribe(inbox, cb=on_chunk)
    resp = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, **options})
    if "error" not in resp:
        await asyncio.wait_for(done.wait(), 30)
    await sub.unsubscribe()
    return resp, b"".join(chunks), end.get("status", ""), len(chunks)


async def restore(nc, config: dict, state: dict, data: bytes, *, stop_after: int | None = None) -> dict:
    """RESTORE: the request, the data in chunks (each acknowledged), the final answer."""
    resp = await api(nc, f"$JS.API.STREAM.RESTORE.{config['name']}", {"config": config, "state": state})
    if "error" in resp:
        return resp
    deliver = resp["deliver_subject"]
    for i in range(0, len(data), CHUNK):
        if stop_after is not None and i // CHUNK >= stop_after:
            return {"stopped": True}
        ack = await nc.request(deliver, data[i:i + CHUNK], timeout=5)
        if ack.data:
            return json.loads(ack.data)
    final = await nc.request(deliver, b"", timeout=30)
    return json.loads(final.data)


async def fill(nc, stream: str = "ORDERS") -> None:
    """A stream with headers, deleted sequences (1, 4, 7) and a durable consumer that was
    delivered 5 messages and acknowledged 3 of them."""
    js = nc.jetstream(timeout=5)
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    for i in range(1, 11):
        await js.publish(f"{stream.lower()}.{i % 3}", f"m{i}".encode() * 50, headers={"X-N": str(i)})
    for seq in (1, 4, 7):
        await api(nc, f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": seq})
    sub = await js.pull_subscribe(f"{stream.lower()}.>", durable="worker")
    msgs = await sub.fetch(5, timeout=5)
    for m in msgs[:3]:
        await m.ack_sync()


async def messages(nc, stream: str, last: int) -> list[dict]:
    out = []
    for seq in range(1, last + 1):
        got = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        out.append(got.get("message") or got["error"]["err_code"])
    return out


def spool_files(store: Path) -> list[str]:
    d = store / "restore-tmp"
    return sorted(os.listdir(d)) if d.is_dir() else []


def test_round_trip_keeps_messages_headers_gaps_and_consumer_state(jetraft):
    async def scenario():
        nc = await connect(jetraft.url)
        await fill(nc)
        before_info = await api(nc, "$JS.API.STREAM.INFO.ORDERS")
        before_msgs = await messages(nc, "ORDERS", 10)
        before_consumer = await api(nc, "$JS.API.CONSUMER.INFO.ORDERS.worker")
        resp, data, status, chunks = await snapshot(nc, "ORDERS", chunk_size=1024)
        assert resp["type"] == STREAM_SNAPSHOT_RESPONSE
        assert resp["config"]["name"] == "ORDERS"
        assert resp["state"]["messages"] == 7 and resp["state"]["last_seq"] == 10
        assert status == "204" and chunks > 1
        await api(nc, "$JS.API.STREAM.DELETE.ORDERS")
        final = await restore(nc, resp["config"], resp["state"], data)
        assert final["type"] == STREAM_CREATE_RESPONSE, final
        assert "error" not in final, final
        assert final["state"]["messages"] == 7
        info = await api(nc, "$JS.API.STREAM.INFO.ORDERS")
        for key in ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "first_ts", "last_ts"):
            assert info["state"][key] == before_info["state"][key], key
        assert await messages(nc, "ORDERS", 10) == before_msgs
        consumer = await api(nc, "$JS.API.CONSUMER.INFO.ORDERS.worker")
        for key in ("delivered", "ack_floor", "num_ack_pending", "num_pending"):
            assert consumer[key] == before_consumer[key], key
        # the restored stream takes new messages after its last sequence
        ack = await nc.jetstream().publish("orders.new", b"x")
        assert ack.seq == 11
        await nc.close()

    run(scenario)


def test_no_consumers_leaves_them_out(jetraft):
    async def scenario():
        nc = await connect(jetraft.url)
        await fill(nc)
        resp, data, status, chunks = await snapshot(nc, "ORDERS", no_consumers=True, chunk_size=1024)
        assert status == ("204" if len(data) >= 1024 else "") and chunks == -(-len(data) // 1024)
        await api(nc, "$JS.API.STREAM.DELETE.ORDERS")
        final = await restore(nc, resp["config"], resp["state"], data)
        assert final["state"]["messages"] == 7 and final["state"]["consumer_count"] == 0
        names = await api(nc, "$JS.API.CONSUMER.NAMES.ORDERS")
        assert names["consumers"] == []
        await nc.close()

    run(scenario)


def test_a_restore_survives_a_restart(tmp_path):
    store = tmp_path / "store"
    server = servers.start_server("jetraft", tmp_path / "a", js_config(store))

    async def take():
        nc = await connect(server.url)
        await fill(nc)
        resp, data, _, _ = await snapshot(nc, "ORDERS")
        await api(nc, "$JS.API.STREAM.DELETE.ORDERS")
        final = await restore(nc, resp["config"], resp["state"], data)
        assert "error" not in final, final
        await nc.close()
        return final

    async def check(expected):
        nc = await connect(server.url)
        info = await api(nc, "$JS.API.STREAM.INFO.ORDERS")
        assert info["state"]["messages"] == expected["state"]["messages"]
        assert info["state"]["first_seq"] == 2 and info["state"]["last_seq"] == 10
        assert info["state"]["num_deleted"] == 2
        consumer = await api(nc, "$JS.API.CONSUMER.INFO.ORDERS.worker")
        assert consumer["ack_floor"]["stream_seq"] > 0
        await nc.close()

    try:
        final = asyncio.run(take())
        server.stop()
        server = servers.start_server("jetraft", tmp_path / "b", js_config(store))
        run(lambda: check(final))
    finally:
        server.stop()


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_or_truncated_data_is_refused_and_nothing_is_created(jetraft, tmp_path, damage):
    async def scenario():
        nc = await connect(jetraft.url)
        await fill(nc)
        resp, data, _, _ = await snapshot(nc, "ORDERS")
        await api(nc, "$JS.API.STREAM.DELETE.ORDERS")
        bad = bytearray(data)
        if damage == "flip":
            bad[len(bad) // 2] ^= 0x40
        else:
            del bad[-100:]
        final = await restore(nc, resp["config"], resp["state"], bytes(bad))
        assert final["type"] == STREAM_CREATE_RESPONSE
        assert final["error"]["err_code"] == 10062
        assert final["error"]["description"].startswith("restore failed: snapshot data is")
        info = await api(nc, "$JS.API.STREAM.INFO.ORDERS")
        assert info["error"]["err_code"] == 10059
        poll(lambda: not spool_files(tmp_path / "store"), "the restore spool emptied", retry_on=())
        assert not (tmp_path / "store" / "jetstream" / "$G" / "streams" / "ORDERS").exists()
        # the data, intact, restores afterwards
        final = await restore(nc, resp["config"], resp["state"], data)
        assert final["state"]["messages"] == 7
        await nc.close()

    run(scenario)


def test_restore_of_an_existing_stream_is_refused_as_by_nats_server(start_server, tmp_path, server_kind):
    server = start_server(js_config(tmp_path / "s"))

    async def scenario():
        nc = await connect(server.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="EXISTS", subjects=["ex"])
        info = await api(nc, "$JS.API.STREAM.INFO.EXISTS")
        resp = await api(nc, "$JS.API.STREAM.RESTORE.EXISTS", {"config": info["config"], "state": info["state"]})
        assert resp == {"type": STREAM_RESTORE_RESPONSE, "error": {
            "code": 400, "err_code": 10130, "description": "stream name already in use, cannot restore"},
            "deliver_subject": ""}
        await nc.close()

    run(scenario)


def test_request_shapes_and_errors_match_nats_server(start_server, tmp_path, server_kind):
    server = start_server(js_config(tmp_path / "s"))

    async def scenario():
        nc = await connect(server.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="SHAPE", subjects=["shape"])
        await js.publish("shape", b"one")
        missing = await api(nc, "$JS.API.STREAM.SNAPSHOT.NOPE", {"deliver_subject": "x.y"})
        assert missing["type"] == STREAM_SNAPSHOT_RESPONSE
        assert missing["error"]["err_code"] == 10059
        empty = await api(nc, "$JS.API.STREAM.SNAPSHOT.SHAPE")
        assert empty["error"] == {"code": 400, "err_code": 10003, "description": "bad request"}
        bad = await api(nc, "$JS.API.STREAM.SNAPSHOT.SHAPE", {"deliver_subject": "a.*"})
        assert bad["error"] == {"code": 400, "err_code": 10015, "description": "deliver subject not valid"}
        resp, data, status, chunks = await snapshot(nc, "SHAPE")
        assert sorted(resp) == ["config", "state", "type"]
        # one short chunk, without an ack subject, and an end without a status
        assert resp["state"]["messages"] == 1 and chunks == 1 and data and status == ""
        mismatch = await api(nc, "$JS.API.STREAM.RESTORE.OTHER", {"config": resp["config"], "state": resp["state"]})
        assert mismatch["error"]["err_code"] == 10056
        cfg = dict(resp["config"], name="COPY", subjects=["copy"])
        started = await api(nc, "$JS.API.STREAM.RESTORE.COPY", {"config": cfg, "state": resp["state"]})
        assert sorted(started) == ["deliver_subject", "type"]
        assert started["type"] == STREAM_RESTORE_RESPONSE
        assert started["deliver_subject"].startswith("$JS.SNAPSHOT.RESTORE.COPY.")
        cfg = dict(resp["config"], name="COPY2", subjects=["copy2"])
        final = await restore(nc, cfg, resp["state"], data)
        # the final answer: a stream_create_response with the restored stream's info
        assert final["type"] == STREAM_CREATE_RESPONSE
        assert sorted(final) == ["config", "created", "state", "ts", "type"]
        assert sorted(final["state"]) == ["bytes", "consumer_count", "first_seq", "first_ts",
                                          "last_seq", "last_ts", "messages", "num_subjects"]
        assert final["state"]["messages"] == 1 and final["config"]["subjects"] == ["copy2"]
        await nc.close()

    run(scenario)


def test_a_restore_past_its_storage_limit_is_refused(jetraft, tmp_path):
    async def scenario():
        nc = await connect(jetraft.url)
        await fill(nc)
        resp, data, _, _ = await snapshot(nc, "ORDERS")
        small = dict(resp["config"], name="SMALL", subjects=["small.>"], max_bytes=1000)
        final = await restore(nc, small, resp["state"], data)
        assert final["error"]["err_code"] == 10062
        assert "exceed the limit of 1000 bytes" in final["error"]["description"]
        assert (await api(nc, "$JS.API.STREAM.INFO.SMALL"))["error"]["err_code"] == 10059
        poll(lambda: not spool_files(tmp_path / "store"), "the restore spool emptied", retry_on=())
        await nc.close()

    run(scenario)


def test_a_restore_past_the_servers_file_store_limit_stops_at_the_chunk(tmp_path):
    server = servers.start_server("jetraft", tmp_path / "s",
                                  f'jetstream {{ store_dir: "{tmp_path / "store"}", max_file_store: 64KB }}')
    try:
        async def scenario():
            nc = await connect(server.url)
            js = nc.jetstream(timeout=5)
            await js.add_stream(name="BIG", subjects=["big"], storage="memory")
            for _ in range(40):
                await js.publish("big", os.urandom(60_000))
            resp, data, _, _ = await snapshot(nc, "BIG")
            assert len(data) > 2 << 20
            cfg = dict(resp["config"], name="BIGFILE", subjects=["bigfile"], storage="file")
            final = await restore(nc, cfg, resp["state"], data)
            assert final["type"] == STREAM_CREATE_RESPONSE
            assert final["error"] == {"code": 500, "err_code": 10062, "description":
                                      "restore failed: insufficient storage resources available"}
            assert (await api(nc, "$JS.API.STREAM.INFO.BIGFILE"))["error"]["err_code"] == 10059
            poll(lambda: not spool_files(tmp_path / "store"), "the restore spool emptied", retry_on=())
            await nc.close()

        run(scenario)
    finally:
        server.stop()


def test_a_client_that_stops_mid_restore_is_timed_out_and_its_files_removed(jetraft, tmp_path):
    async def scenario():
        nc = await connect(jetraft.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="HALF", subjects=["half"])
        for _ in range(20):
            await js.publish("half", os.urandom(10_000))
        resp, data, _, _ = await snapshot(nc, "HALF")
        await api(nc, "$JS.API.STREAM.DELETE.HALF")
        got = await restore(nc, resp["config"], resp["state"], data, stop_after=1)
        assert got == {"stopped": True}
        assert spool_files(tmp_path / "store")          # the first chunk is spooled
        again = await api(nc, "$JS.API.STREAM.RESTORE.HALF", {"config": resp["config"], "state": resp["state"]})
        assert again["error"]["err_code"] == 10130       # the name is taken while it runs
        await asyncio.to_thread(poll, lambda: not spool_files(tmp_path / "store"),
                                "the abandoned restore's spool removed", 20, retry_on=())
        assert (await api(nc, "$JS.API.STREAM.INFO.HALF"))["error"]["err_code"] == 10059
        final = await restore(nc, resp["config"], resp["state"], data)
        assert final["state"]["messages"] == 20
        await nc.close()

    run(scenario)


def test_a_snapshot_waits_for_acks_and_ends_without_them(jetraft):
    async def scenario():
        nc = await connect(jetraft.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="FLOW", subjects=["flow"])
        for _ in range(50):
            await js.publish("flow", os.urandom(4000))
        resp, data, status, chunks = await snapshot(nc, "FLOW", ack=False, chunk_size=1024, window_size=4096)
        assert "error" not in resp
        assert chunks == 4                      # the window: 4096 bytes of 1024-byte chunks
        assert status == "408"                  # No Flow Response
        await nc.close()

    run(scenario)


def test_a_snapshot_of_a_stream_being_written_is_consistent(jetraft):
    async def scenario():
        nc = await connect(jetraft.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="LIVE", subjects=["live"])
        for i in range(200):
            await js.publish("live", f"{i}".encode() * 100)
        writer = await connect(jetraft.url)
        wjs = writer.jetstream(timeout=5)
        stop = asyncio.Event()

        async def publish():
            while not stop.is_set():
                await wjs.publish("live", b"later" * 100)

        task = asyncio.create_task(publish())
        resp, data, status, _ = await snapshot(nc, "LIVE", chunk_size=1024)
        stop.set()
        await task
        assert status == "204"
        cfg = dict(resp["config"], name="LIVE2", subjects=["live2"])
        final = await restore(nc, cfg, resp["state"], data)
        assert final["state"]["messages"] == resp["state"]["messages"]
        assert final["state"]["last_seq"] == resp["state"]["last_seq"]
        await writer.close()
        await nc.close()

    run(scenario)


def test_admin_cli_backup_and_restore(jetraft, tmp_path):
    async def setup():
        nc = await connect(jetraft.url)
        await fill(nc)
        await nc.close()

    run(setup)
    admin = Admin(jetraft.url, tmp_path)
    out = tmp_path / "backup"
    result = admin("stream", "backup", "ORDERS", str(out), "--chunk-size", "1KB")
    assert result.stdout.startswith('Starting backup of Stream "ORDERS" with ')
    assert re.search(r'Received .* in \d+ chunks for stream "ORDERS" in ', result.stdout), result.stdout
    meta = json.loads((out / "backup.json").read_text())
    assert meta["config"]["name"] == "ORDERS" and meta["state"]["messages"] == 7
    # the data file is a standard Snappy framed stream (which natscli's s2 reader reads),
    # jetraft's snapshot format inside
    framed = (out / "stream.tar.s2").read_bytes()
    assert framed.startswith(STREAM_IDENTIFIER)
    assert snappy.StreamDecompressor().decompress(framed).startswith(b"JRSNAP")
    result = admin("stream", "restore", str(out), code=1)
    assert_clean_error(result.stderr, 'stream "ORDERS" already exists')
    admin("stream", "rm", "ORDERS", "-f")
    result = admin("stream", "restore", str(out))
    assert 'Starting restore of Stream "ORDERS" from file' in result.stdout
    assert 'Restored stream "ORDERS" in ' in result.stdout
    assert re.search(r"Messages: 7\b", result.stdout), result.stdout
    info = json.loads(admin("stream", "info", "ORDERS", "--json").stdout)
    assert info["state"]["messages"] == 7 and info["state"]["num_deleted"] == 2
    # --config overrides the configuration, --replicas on a single server is refused
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(dict(meta["config"], subjects=["other.>"])))
    admin("stream", "rm", "ORDERS", "-f")
    admin("stream", "restore", str(out), "--config", str(cfg))
    info = json.loads(admin("stream", "info", "ORDERS", "--json").stdout)
    assert info["config"]["subjects"] == ["other.>"]
    admin("stream", "rm", "ORDERS", "-f")
    result = admin("stream", "restore", str(out), "--replicas", "3", code=1)
    assert_clean_error(result.stderr, "replicas > 1 not supported in non-clustered mode")
    # bad input: one line each
    result = admin("stream", "restore", str(tmp_path / "nowhere"), code=1)
    assert_clean_error(result.stderr, "backup.json")
    result = admin("stream", "backup", "NOPE", str(tmp_path / "b2"), code=1)
    assert_clean_error(result.stderr, "stream not found")
    (out / "stream.tar.s2").write_bytes(b"garbage")
    result = admin("stream", "restore", str(out), code=1)
    assert_clean_error(result.stderr, "restore failed")
    # a nats-server backup (an s2 stream) is named as such
    (out / "stream.tar.s2").write_bytes(S2_IDENTIFIER + os.urandom(2000))
    result = admin("stream", "restore", str(out), code=1)
    assert_clean_error(result.stderr, "an s2 stream, as nats-server's backups are")
    admin("stream", "info", "ORDERS", code=1)                   # nothing was created


def test_clustered_snapshot_is_served_by_the_leader_and_restores_anywhere(tmp_path):
    """Three jetraft servers: an R3 stream's snapshot, asked on a server that does not lead
    it, comes from its leader (request and chunk acks travel on the leader's route interest)
    and restores into the cluster under another name and into a single server (the clustered
    restore itself: test_stream_restore_cluster.py)."""
    from cluster import Cluster
    single = servers.start_server("jetraft", tmp_path / "single", js_config(tmp_path / "single-store"))
    c = Cluster("jetraft", tmp_path / "c", 3, jetstream=True)
    c.start()
    try:
        c.wait_formed()
        c.wait_meta_leader()

        async def scenario():
            nc = await connect(c.servers["n1"].url)
            js = nc.jetstream(timeout=5)
            deadline = time.monotonic() + 30
            while True:
                try:
                    await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
                    break
                except Exception:       # the meta group may still be electing
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            for i in range(30):
                await js.publish(f"r3.{i % 3}", os.urandom(2000), headers={"I": str(i)})
            await api(nc, "$JS.API.STREAM.MSG.DELETE.R3", {"seq": 5})
            info = await api(nc, "$JS.API.STREAM.INFO.R3")
            leader = info["cluster"]["leader"]
            other = next(n for n in ("n1", "n2", "n3") if n != leader)
            await nc.close()
            nc = await connect(c.servers[other].url)
            resp, data, status, chunks = await snapshot(nc, "R3", chunk_size=4096)
            assert "error" not in resp, resp
            assert status == "204" and chunks > 1
            assert resp["state"]["messages"] == 29 and resp["state"]["last_seq"] == 30
            copy = await restore(nc, dict(resp["config"], name="R3B", subjects=["r3b.>"]),
                                 resp["state"], data)
            assert copy["type"] == STREAM_CREATE_RESPONSE and "error" not in copy, copy
            assert copy["state"]["messages"] == 29 and copy["state"]["num_deleted"] == 1
            info = await api(nc, "$JS.API.STREAM.INFO.R3B")
            assert info["state"]["last_seq"] == 30 and len(info["cluster"]["replicas"]) == 2
            missing = await api(nc, "$JS.API.STREAM.SNAPSHOT.NOPE", {"deliver_subject": "x"})
            assert missing["error"]["err_code"] == 10059
            await nc.close()
            one = await connect(single.url)
            final = await restore(one, dict(resp["config"], num_replicas=1), resp["state"], data)
            assert final["state"]["messages"] == 29 and final["state"]["num_deleted"] == 1
            await one.close()

        run(scenario)
    finally:
        c.stop()
        single.stop()


def test_a_memory_stream_round_trip(jetraft):
    async def scenario():
        nc = await connect(jetraft.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="MEM", subjects=["mem.>"], storage="memory")
        for i in range(5):
            await js.publish(f"mem.{i}", f"v{i}".encode(), headers={"K": str(i)})
        await api(nc, "$JS.API.STREAM.MSG.DELETE.MEM", {"seq": 3})
        before = await messages(nc, "MEM", 5)
        resp, data, _, _ = await snapshot(nc, "MEM")
        await api(nc, "$JS.API.STREAM.DELETE.MEM")
        final = await restore(nc, resp["config"], resp["state"], data)
        assert final["config"]["storage"] == "memory" and final["state"]["num_deleted"] == 1
        assert await messages(nc, "MEM", 5) == before
        await nc.close()

    run(scenario)


def test_a_corrupt_message_fails_the_backup_with_check_and_without(jetraft, tmp_path):
    async def setup():
        nc = await connect(jetraft.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="ROT", subjects=["rot"])
        for i in range(5):
            await js.publish("rot", f"payload-{i}-".encode() * 20)
        await nc.close()

    run(setup)
    msgs = tmp_path / "store" / "jetstream" / "$G" / "streams" / "ROT" / "msgs"
    block = next(p for p in msgs.iterdir() if p.suffix == ".blk")
    raw = bytearray(block.read_bytes())
    at = raw.index(b"payload-2-")
    raw[at] ^= 0x20
    with open(block, "r+b") as f:       # in place: the server holds the file open
        f.seek(at)
        f.write(bytes(raw[at:at + 1]))
    admin = Admin(jetraft.url, tmp_path)
    result = admin("stream", "backup", "ROT", str(tmp_path / "checked"), "--check", code=1)
    assert_clean_error(result.stderr, "snapshot failed: message 3 fails its checksum", "10064")
    assert not (tmp_path / "checked" / "backup.json").exists()
    result = admin("stream", "backup", "ROT", str(tmp_path / "unchecked"), "--chunk-size", "1KB", code=1)
    assert_clean_error(result.stderr, "snapshot failed: 500 message 3 fails its checksum")
    assert not (tmp_path / "unchecked" / "backup.json").exists()
    assert not (tmp_path / "unchecked" / "stream.tar.s2").exists()
