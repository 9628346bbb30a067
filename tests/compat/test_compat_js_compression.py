"""Stream ``compression: s2`` (nats-server 2.10), side by side with nats-server 2.15.1.

Both servers take ``compression: s2`` on create and on update, in either direction, for a
file stream and for a memory stream (nats-server's memory store ignores it), echo
``"compression":"s2"`` in the config, and count a compressed stream by its messages
(STREAM.INFO ``state.bytes``, /jsz ``bytes`` and ``storage``), not by its files. Both keep
compressible messages in a fraction of their size on disk (measured in one test on both,
the ratios printed). A three-server cluster of each kind stores and serves a compressed R3
stream across a stream leader step-down, each replica compressing its own files.

jetraft's own (its block file format, its event log): its compressed blocks survive a
restart, and a byte flipped in one is reported, the messages it held are never served,
every other one is, and no sequence is used twice.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import servers
from compat_support import connect, run
from js_support import js_session
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from polling import apoll, poll
from test_compat_js_streams import DEFAULT_CONFIG, file_bytes

from jetraft.jetstream import store_compress, store_format

#: Messages of about 900 KiB each (under the default 1 MiB max_payload): a few fill a block.
MSG_BYTES = 900 * 1024
NO_MESSAGE = {"code": 404, "err_code": 10037, "description": "no message found"}


def reading(i: int) -> bytes:
    """Message ``i``: JSON readings, compressible as real telemetry is, different per message."""
    line = b'{"msg":%d,"sensor":"sensor-%02d","reading":%d,"unit":"kPa","status":"nominal"}\n'
    return b"".join(line % (i, j % 37, (i * 7919 + j) % 100_000) for j in range(MSG_BYTES // 60))[:MSG_BYTES]


def msgs_dir(store_dir: Path, stream: str) -> Path:
    """Where both servers keep a stream's block files (account $G)."""
    return Path(store_dir) / "jetstream" / "$G" / "streams" / stream / "msgs"


def disk_bytes(store_dir: Path, stream: str) -> int:
    d = msgs_dir(store_dir, stream)
    return sum(p.stat().st_size for p in d.glob("*.blk")) if d.is_dir() else 0


def compressed_blocks(store_dir: Path, stream: str) -> list[Path]:
    """jetraft's block files of ``stream`` that are compressed (store_compress.PACK_MAGIC)."""
    return [p for p in sorted(msgs_dir(store_dir, stream).glob("*.blk"))
            if store_compress.is_packed(p.read_bytes()[:8])]


async def api(nc, subject: str, body=None) -> dict:
    raw = b"" if body is None else json.dumps(body).encode()
    return json.loads((await nc.request(subject, raw, timeout=10)).data)


def test_create_and_update_take_s2_as_nats_server_does(js_server):
    """File and memory streams: s2 on create echoed in the config, and updates to none and
    back accepted; the stored messages stay readable throughout."""

    async def scenario():
        async with js_session(js_server.url) as s:
            for storage in ("file", "memory"):
                name = "CF" if storage == "file" else "CM"
                body = {"name": name, "subjects": [f"{name.lower()}.>"], "storage": storage,
                        "compression": "s2"}
                reply = await s.api(f"$JS.API.STREAM.CREATE.{name}", body)
                assert "error" not in reply, reply
                config = reply["config"]
                assert config.pop("metadata")["_nats.req.level"] == "0"
                assert config == {**DEFAULT_CONFIG, "name": name, "subjects": body["subjects"],
                                  "storage": storage, "compression": "s2"}
                assert (await s.api(f"$JS.API.STREAM.INFO.{name}"))["config"]["compression"] == "s2"
                assert (await s.js.publish(f"{name.lower()}.a", b"first")).seq == 1
                for value in ("none", "s2"):
                    updated = await s.api(f"$JS.API.STREAM.UPDATE.{name}", {**body, "compression": value})
                    assert "error" not in updated, updated
                    assert updated["config"]["compression"] == value
                    info = await s.api(f"$JS.API.STREAM.INFO.{name}")
                    assert info["config"]["compression"] == value
                    assert info["state"]["messages"] == 1
                got = await s.api(f"$JS.API.STREAM.MSG.GET.{name}", {"seq": 1})
                assert got["message"]["subject"] == f"{name.lower()}.a"
            plain = {"name": "P", "subjects": ["p"]}
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.P", plain)
            updated = await s.api("$JS.API.STREAM.UPDATE.P", {**plain, "compression": "s2"})
            assert updated["config"]["compression"] == "s2", updated
            explicit = await s.api("$JS.API.STREAM.CREATE.N", {"name": "N", "compression": "none"})
            assert explicit["config"]["compression"] == "none", explicit

    run(scenario)


def test_compressed_messages_take_a_fraction_of_their_size_on_disk_on_both(start_server, server_kind, tmp_path):
    """40 compressible messages of 900 KiB to a file stream with s2 on the server under test
    and on nats-server, in one run: the same state and bytes (the messages', as /jsz counts
    them too), and block files far smaller than the messages (nats-server compresses a
    block once it is no longer the last, in the background: polled)."""
    seen = []
    count = 40
    for kind in (server_kind, "nats-server"):
        store = tmp_path / f"store-{len(seen)}"
        srv = start_server(servers.js_config(store), http=True, kind=kind)

        state: dict = {}

        async def scenario():
            nc = await connect(srv.url)
            try:
                created = await api(nc, "$JS.API.STREAM.CREATE.Z", {"name": "Z", "subjects": ["z.>"],
                                                                   "compression": "s2"})
                assert "error" not in created, created
                js = nc.jetstream(timeout=10)
                for i in range(count):
                    assert (await js.publish("z.r", reading(i))).seq == i + 1
                got = await api(nc, "$JS.API.STREAM.MSG.GET.Z", {"seq": 7})
                assert got["message"]["data"] == base64.b64encode(reading(6)).decode()
                state.update((await api(nc, "$JS.API.STREAM.INFO.Z"))["state"])
            finally:
                await nc.close()

        run(scenario, timeout=120)
        assert state["messages"] == count
        assert state["bytes"] == sum(file_bytes("z.r", reading(i)) for i in range(count))
        jsz = srv.monitor("/jsz")
        assert (jsz["messages"], jsz["bytes"], jsz["storage"]) == (count, state["bytes"], state["bytes"])
        on_disk = poll(lambda: (n := disk_bytes(store, "Z")) < state["bytes"] // 2 and n,
                       f"{kind}: sealed blocks compressed", 30)
        seen.append((state, on_disk))
    (ours, ours_disk), (ref, ref_disk) = seen
    assert {k: ours[k] for k in ("messages", "bytes", "first_seq", "last_seq")} == \
        {k: ref[k] for k in ("messages", "bytes", "first_seq", "last_seq")}
    print(f"on disk / message bytes: {server_kind} {ours_disk / ours['bytes']:.3f}, "
          f"nats-server {ref_disk / ref['bytes']:.3f} (ratio {ours_disk / ref_disk:.2f})")


@pytest.fixture
def jetraft_on(request, tmp_path):
    """``jetraft_on(store_dir)``: a jetraft server with JetStream in ``store_dir``, started
    again on the same store as often as a test asks (each stopped at teardown; their
    output printed when the test failed)."""
    started: list[servers.RunningServer] = []

    def start(store: Path) -> servers.RunningServer:
        srv = servers.start_server("jetraft", tmp_path / f"jetraft-{len(started)}",
                                   servers.js_config(store), name="jetraft")
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
    report = getattr(request.node, "_compat_report_call", None)
    if report is not None and report.failed:
        for srv in started:
            print(srv.output()[-6000:])


def test_jetraft_compressed_blocks_survive_restart_and_a_flipped_byte_is_never_served(jetraft_on, tmp_path):
    store = tmp_path / "store"
    count = 20
    first = jetraft_on(store)

    async def fill():
        nc = await connect(first.url)
        try:
            created = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"],
                                                               "compression": "s2"})
            assert "error" not in created, created
            js = nc.jetstream(timeout=10)
            for i in range(count):
                await js.publish("s.r", reading(i))
        finally:
            await nc.close()

    run(fill, timeout=60)
    first.stop()
    packed = compressed_blocks(store, "S")
    assert len(packed) >= 2, sorted(msgs_dir(store, "S").iterdir())
    assert sum(p.stat().st_size for p in packed) < len(packed) * (8 << 20) // 4

    async def check(url: str, lost: set[int], extra: int) -> None:
        """Every message but ``lost`` served intact (``extra`` more published after them),
        the lost ones answered 10037; the next publish gets the next sequence."""
        nc = await connect(url)
        try:
            state = (await api(nc, "$JS.API.STREAM.INFO.S"))["state"]
            assert (state["messages"], state["last_seq"]) == (count + extra - len(lost), count + extra)
            for seq in range(1, count + 1):
                got = await api(nc, "$JS.API.STREAM.MSG.GET.S", {"seq": seq})
                if seq in lost:
                    assert got.get("error") == NO_MESSAGE, (seq, got)
                else:
                    assert got["message"]["data"] == base64.b64encode(reading(seq - 1)).decode(), seq
            ack = json.loads((await nc.request("s.r", b"next", timeout=10)).data)
            assert ack == {"stream": "S", "seq": count + extra + 1}     # no sequence used twice
        finally:
            await nc.close()

    again = jetraft_on(store)
    run(lambda: check(again.url, set(), 0), timeout=60)
    again.stop()

    # flip a byte in the middle of the second chunk of the first compressed block
    block = packed[0]
    buf = block.read_bytes()
    pb = store_compress.read_packed(buf)
    plain, _ = store_compress.unpack(buf, pb)
    a, b = pb.plain_range(1)
    hit = {r.seq for r in store_format.scan_block(plain, False).records
           if r.rtype == store_format.REC_MSG and r.off < b and r.off + r.size > a}
    assert len(hit) == 1, hit
    at = pb.offs[1] + store_compress.stored_len(pb, 1) // 2
    with open(block, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))

    third = jetraft_on(store)
    run(lambda: check(third.url, hit, 1), timeout=60)
    problems = [json.loads(line) for line in third.stdout_path.read_text(errors="replace").splitlines()
                if line.startswith("{") and '"jetstream_recovery_problem"' in line]
    assert problems and {p["stream"] for p in problems} == {"S"}, problems
    assert any("compressed block: chunk 1" in p["detail"] for p in problems), problems


@pytest.fixture(scope="module", params=servers.KINDS)
def three(request, formed_cluster):
    """A formed three-server JetStream cluster of one kind with an agreed meta leader."""
    with formed_cluster(request.param, "compression", 3, jetstream=True) as c:
        yield c


def test_r3_compressed_stream_served_across_a_leader_stepdown(three):
    count = 20
    stream = "CZ"

    async def ask(nc, subject: str, body=None, accept=lambda r: True, what: str = "") -> dict:
        async def once() -> dict:
            reply = await api(nc, subject, body)
            assert accept(reply), reply
            return reply
        return await apoll(once, what or subject, 30,
                           retry_on=(AssertionError, NatsTimeoutError, NoRespondersError))

    def settled(reply: dict) -> bool:
        cl = reply.get("cluster") or {}
        reps = cl.get("replicas") or []
        return bool(cl.get("leader")) and len(reps) == 2 and all(r.get("current") for r in reps)

    async def scenario() -> None:
        nc = await connect(three.servers["n1"].url)
        try:
            body = {"name": stream, "subjects": ["cz.>"], "num_replicas": 3, "compression": "s2"}
            created = await ask(nc, f"$JS.API.STREAM.CREATE.{stream}", body,
                                lambda r: r.get("error", {}).get("err_code") != 10008)
            assert "error" not in created, created
            assert created["config"]["compression"] == "s2"
            js = nc.jetstream(timeout=10)
            for i in range(count):
                assert (await js.publish("cz.r", reading(i))).seq == i + 1
            info = await ask(nc, f"$JS.API.STREAM.INFO.{stream}", None,
                             lambda r: settled(r) and r["state"]["messages"] == count, "R3 settled")
            before = info["cluster"]["leader"]
            step = await api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}")
            assert step.get("success") is True, step
            info = await ask(nc, f"$JS.API.STREAM.INFO.{stream}", None,
                             lambda r: r.get("cluster", {}).get("leader") not in (None, before),
                             f"a leader other than {before}")
            assert info["state"]["messages"] == count
            assert info["state"]["bytes"] == sum(file_bytes("cz.r", reading(i)) for i in range(count))
            for seq in (1, count // 2, count):
                got = await ask(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq},
                                lambda r: "message" in r, f"get {seq}")
                assert got["message"]["data"] == base64.b64encode(reading(seq - 1)).decode()
            ack = await js.publish("cz.r", b"after the step-down")
            assert ack.seq == count + 1
            out["bytes"], out["leader"] = info["state"]["bytes"], info["cluster"]["leader"]
        finally:
            await nc.close()

    async def served_by(target: str) -> None:
        """Once ``target`` (killed and started again) is current, step the leader down
        until ``target`` leads, and read the messages from it."""
        nc = await connect(three.servers["n1"].url)
        try:
            await ask(nc, f"$JS.API.STREAM.INFO.{stream}", None,
                      lambda r: settled(r) and r["state"]["messages"] == count + 1, "R3 current again")

            async def leads() -> dict:
                info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
                leader = info.get("cluster", {}).get("leader")
                if leader is not None and leader != target and settled(info):
                    await api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}")
                assert leader == target, info
                return info

            await apoll(leads, f"{target} leads {stream}", 60,
                        retry_on=(AssertionError, NatsTimeoutError, NoRespondersError))
            for seq in (1, count // 2, count):
                got = await ask(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq},
                                lambda r: "message" in r, f"get {seq} from {target}")
                assert got["message"]["data"] == base64.b64encode(reading(seq - 1)).decode()
        finally:
            await nc.close()

    out: dict = {}
    run(scenario, timeout=120)
    # every replica compressed its own sealed blocks
    for name in three.servers:
        poll(lambda: 0 < disk_bytes(three.store_dir(name), stream) < out["bytes"] // 2,
             f"{three.kind} {name}: compressed blocks on disk", 30)
        if three.kind == "jetraft":
            assert compressed_blocks(three.store_dir(name), stream)
    # a replica killed and started again opens its compressed blocks and serves them as leader
    target = next(name for name in three.servers if name != out["leader"])
    three.kill(target)
    three.start([target])
    run(lambda: served_by(target), timeout=120)
    if three.kind == "jetraft":      # its compressed blocks were taken as they were: nothing damaged
        events = three.events(target)
        assert [e for e in events if e.get("event") in ("stream_store_damaged", "jetstream_recovery_problem")
                and e.get("stream") == stream] == []
        assert any(e.get("event") == "raft_snapshot_taken" and e.get("group", "").startswith("S-")
                   for e in events), "no stream snapshot: the restart aligned nothing"
