"""Stream restore as an attacker drives it, with nothing more than publish rights on
``$JS.API.STREAM.RESTORE.>`` and the deliver subject it is given: restored messages pass
the checks a publish does (jetstream/admission.py), the data is decoded within a budget,
and pending restores are bounded per account and per server so that they cannot take the
server's descriptors from new clients. Where a client sees the same thing on both servers
(new clients keep being served), the test runs side by side with nats-server."""

from __future__ import annotations

import asyncio
import json
import resource

import msgpack
from compat_support import connect, run
from servers import js_config
from snapshot_forge import forge, frame, header
from test_stream_backup_restore import CHUNK, api, restore, snapshot

from jetraft.net.jetstream.snapshot import MAX_RESTORES_PER_ACCOUNT

FORGING = "i1.a _in.x 3\r\nPWN\r\nMSG _in.injected 1 4\r\nEVIL\r\nMSG i1.b"
CONFIG = {"name": "I1", "subjects": ["i1.>"], "storage": "file", "retention": "limits",
          "num_replicas": 1, "discard": "old"}


async def send_raw(nc, deliver: str, data: bytes) -> dict:
    """Send ``data`` (already framed) to a restore's deliver subject; the final answer."""
    for i in range(0, len(data), CHUNK):
        ack = await nc.request(deliver, data[i:i + CHUNK], timeout=5)
        if ack.data:
            return json.loads(ack.data)
    return json.loads((await nc.request(deliver, b"", timeout=30)).data)


def test_a_restored_subject_cannot_forge_protocol_frames(start_server, tmp_path, server_kind):
    """The attack: a restored message whose subject holds CRLF and a whole MSG frame. jetraft
    refuses the restore (10062 naming the rule) and creates nothing; readers of the stream
    (there is none) are never fed a frame. The forged data is jetraft's format; nats-server
    takes its own format only, and refuses it too: the test checks that on both the attack
    leaves no stream and no client receives a message it did not subscribe to."""
    server = start_server(js_config(tmp_path / "s"))

    async def scenario():
        victim = await connect(server.url)
        injected = []

        async def on_msg(msg):
            injected.append(msg.subject)

        await victim.subscribe("_in.>", cb=on_msg)
        nc = await connect(server.url)
        data = frame(forge(header(1, 2, 2, 10), [[1, FORGING, None, b"x", 1],
                                                  [2, "i1.b", None, b"y", 2]]))
        started = await api(nc, "$JS.API.STREAM.RESTORE.I1", {"config": CONFIG, "state": {}})
        final = await send_raw(nc, started["deliver_subject"], data)
        assert final["error"]["err_code"] == 10062, final
        if server_kind == "jetraft":
            assert final["error"]["description"].startswith("restore failed: snapshot message 1: subject ")
            assert "holds whitespace or a line break" in final["error"]["description"]
        info = await api(nc, "$JS.API.STREAM.INFO.I1")
        assert info["error"]["err_code"] == 10059
        await victim.flush()
        assert injected == []
        await nc.close()
        await victim.close()

    run(scenario)


def test_a_restore_header_with_a_decode_bomb_is_refused_in_bounded_memory(tmp_path):
    """12 million empty arrays under an unknown header key: about 12 MB raw, well under a
    MB framed, and 840 MB as Python objects. Refused with the budget named; the server's
    memory stays bounded and it answers another client meanwhile."""
    import servers
    server = servers.start_server("jetraft", tmp_path / "jr", js_config(tmp_path / "store"))
    try:
        base = msgpack.packb(header(1, 1, 1), use_bin_type=True)
        bomb = b"\x85" + base[1:] + msgpack.packb("junk") + b"\xdd" + (1_900_000).to_bytes(4, "big") \
            + b"\x91\x90" * 1_900_000
        data = frame(forge(bomb, [[1, "i1.a", None, b"x", 1]]))
        assert len(data) < 1_000_000

        async def scenario():
            nc = await connect(server.url)
            started = await api(nc, "$JS.API.STREAM.RESTORE.I1", {"config": CONFIG, "state": {}})
            final = await send_raw(nc, started["deliver_subject"], data)
            assert final["error"]["err_code"] == 10062
            assert "values (the limit)" in final["error"]["description"] \
                or "unknown key 'junk'" in final["error"]["description"]
            assert (await api(nc, "$JS.API.INFO"))["type"] == "io.nats.jetstream.api.v1.account_info_response"
            await nc.close()

        run(scenario)
        rss_kb = int(next(line.split()[1] for line in open(f"/proc/{server.proc.pid}/status")
                          if line.startswith("VmHWM:")))
        assert rss_kb < 400 * 1024, f"server peaked at {rss_kb // 1024} MB"
    finally:
        server.stop()


def test_pending_restores_cannot_take_the_servers_descriptors(start_server, tmp_path, server_kind):
    """300 restore requests that never send data, with the server's descriptor limit at 256:
    new clients are still accepted and answered on both servers. jetraft answers each
    restore past its per-account bound with 10062 naming the limit (nats-server keeps each
    one pending, without a file)."""
    server = start_server(js_config(tmp_path / "s"))
    resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (256, 256))

    async def scenario():
        nc = await connect(server.url)
        answers = []
        for i in range(300):
            cfg = dict(CONFIG, name=f"R{i}", subjects=[f"r{i}.>"])
            answers.append(await api(nc, f"$JS.API.STREAM.RESTORE.R{i}", {"config": cfg, "state": {}}))
        started = [a for a in answers if "error" not in a]
        refused = [a for a in answers if "error" in a]
        if server_kind == "jetraft":
            assert len(started) == MAX_RESTORES_PER_ACCOUNT
            assert {a["error"]["err_code"] for a in refused} == {10062}
            assert refused[0]["error"]["description"] == (
                f"restore failed: too many restores in progress in the account (at most "
                f"{MAX_RESTORES_PER_ACCOUNT})")
        else:
            assert len(started) == 300
        clients = [await connect(server.url) for _ in range(20)]
        for c in clients:
            assert (await api(c, "$JS.API.INFO"))["type"] == "io.nats.jetstream.api.v1.account_info_response"
            await c.close()
        await nc.close()

    run(scenario, timeout=120)


def test_a_refused_restore_frees_its_place(tmp_path):
    """Once pending restores end (their client went away: the idle timeout), new restores
    are accepted again, and a whole restore then works."""
    import servers
    server = servers.start_server("jetraft", tmp_path / "jr", js_config(tmp_path / "store"))
    try:
        async def scenario():
            nc = await connect(server.url)
            js = nc.jetstream(timeout=5)
            await js.add_stream(name="SRC", subjects=["src.>"])
            await js.publish("src.a", b"one")
            resp, data, _, _ = await snapshot(nc, "SRC")
            for i in range(MAX_RESTORES_PER_ACCOUNT):
                cfg = dict(CONFIG, name=f"P{i}", subjects=[f"p{i}.>"])
                assert "error" not in await api(nc, f"$JS.API.STREAM.RESTORE.P{i}", {"config": cfg, "state": {}})
            cfg = dict(resp["config"], name="LATE", subjects=["late.>"])
            assert (await api(nc, "$JS.API.STREAM.RESTORE.LATE", {"config": cfg, "state": {}}))["error"]["err_code"] == 10062
            deadline = asyncio.get_running_loop().time() + 30
            while True:     # the pending ones time out after 5 s without data
                final = await restore(nc, cfg, resp["state"], data)
                if "error" not in final or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.25)
            assert final["state"]["messages"] == 1, final
            await nc.close()

        run(scenario)
    finally:
        server.stop()
