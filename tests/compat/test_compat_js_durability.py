"""Acknowledged means stored: SIGKILL under load, restart on the same store, count what is there.

The kill/restart test runs against jetraft and against nats-server (configured with
``sync_interval: always``, jetraft's default of an fsync before every ack, so the two are
compared like for like). Several publishers keep publishes in flight with unique
payloads and record every acknowledged ``(seq, payload)``; another task SIGKILLs the
server process (that one PID) once enough acks are in; the server is restarted with the
same configuration file (same port, same store directory) and every acknowledged
message must be there, at its sequence, exactly once. Three kills in one test.

The corrupt-store tests are jetraft's own (its block file format, its event log): a
torn last record is dropped, a message whose checksum fails is never served and is
reported, and every other message survives.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nats.errors
import pytest
from compat_support import connect, run
from js_support import listed
from nats.js.api import ConsumerConfig, ObjectMeta, ObjectMetaOptions, StorageType
from polling import apoll

import servers
from jetraft.jetstream import store_format

#: Acks to collect in each round before the kill; publishers working at once.
ACKS_BEFORE_KILL = 150
PUBLISHERS = 8
ROUNDS = 3


# ----------------------------------------------------------------------------- processes


class Processes:
    """Every server process a test started (and restarted); all stopped at teardown."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.all: list[servers.RunningServer] = []

    def start(self, kind: str, extra: str) -> servers.RunningServer:
        srv = servers.start_server(kind, self.workdir / kind, extra, name=kind)
        self.all.append(srv)
        return srv

    def restart(self, old: servers.RunningServer) -> servers.RunningServer:
        """Start ``old``'s binary again with ``old``'s config file (same port, same store)
        once ``old`` has exited; wait until it accepts connections."""
        assert not old.alive(), "restart() wants a stopped server"
        n = len(self.all)
        workdir = old.config_path.parent
        out, err = workdir / f"restart-{n}.stdout", workdir / f"restart-{n}.stderr"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen([str(servers.binary(old.kind)), "-c", str(old.config_path)],
                                    stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, cwd=workdir)
        srv = servers.RunningServer(old.kind, old.port, old.http_port, old.config_path, out, err, proc)
        self.all.append(srv)
        reason = servers.wait_ready(srv, time.monotonic() + 15)
        if reason is not None:
            raise AssertionError(f"restart failed ({reason}):\n{srv.output()[-4000:]}")
        return srv

    def stop_all(self) -> None:
        for srv in self.all:
            srv.stop()


def sigkill(srv: servers.RunningServer) -> None:
    """SIGKILL exactly the process we started (reap it with ``srv.proc.wait``)."""
    os.kill(srv.proc.pid, signal.SIGKILL)


@pytest.fixture
def procs(request, tmp_path):
    """A Processes registry for the test; prints every server's output if the test failed."""
    registry = Processes(tmp_path)
    yield registry
    registry.stop_all()
    report = getattr(request.node, "_compat_report_call", None)
    if report is not None and report.failed:
        for srv in registry.all:
            print(srv.output()[-6000:])


def store_config(store_dir: Path, kind: str) -> str:
    """JetStream with its store in ``store_dir``; nats-server fsyncs before every ack."""
    # nats-server's parser wants a "," (or a newline) after a quoted value in a map:
    # `{ store_dir: "x" sync_interval: always }` is a parse error
    sync = ", sync_interval: always" if kind == "nats-server" else ""
    return f'jetstream {{ store_dir: "{store_dir}"{sync} }}'


# ----------------------------------------------------------------------------- API


async def api(nc, subject: str, body: dict | None = None, timeout: float = 5) -> dict:
    raw = json.dumps(body).encode() if body is not None else b""
    return json.loads((await nc.request(subject, raw, timeout=timeout)).data)


async def create_stream(nc, name: str, subjects: list[str]) -> None:
    reply = await api(nc, f"$JS.API.STREAM.CREATE.{name}",
                      {"name": name, "subjects": subjects, "storage": "file"})
    assert "error" not in reply, reply


async def read_stream(nc, name: str) -> tuple[dict, dict[int, tuple[str, bytes] | dict]]:
    """The stream's state and every sequence from 1 to last_seq: (subject, data), or the
    error reply for a sequence holding no message."""
    state = (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["state"]
    out: dict[int, tuple[str, bytes] | dict] = {}
    for seq in range(1, state["last_seq"] + 1):
        got = await api(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
        if "message" in got:
            msg = got["message"]
            out[seq] = (msg["subject"], base64.b64decode(msg.get("data", "")))
        else:
            out[seq] = got["error"]
    return state, out


# ----------------------------------------------------------------------------- kill/restart


@dataclass
class Ledger:
    """What the publishers sent and what the server acknowledged."""

    acked: dict[int, bytes] = field(default_factory=dict)    # seq -> payload
    attempted: set[bytes] = field(default_factory=set)
    failures: Counter = field(default_factory=Counter)   # exception type -> count


async def publish_until_killed(url: str, ledger: Ledger, round_no: int, srv) -> None:
    """PUBLISHERS tasks publish unique payloads; a killer SIGKILLs ``srv`` after
    ACKS_BEFORE_KILL more acks. Returns once every publisher has stopped."""
    nc = await connect(url)
    js = nc.jetstream(timeout=2)
    target = len(ledger.acked) + ACKS_BEFORE_KILL
    killed = asyncio.Event()

    async def publisher(worker: int) -> None:
        i = 0
        while not killed.is_set() or nc.is_connected:
            payload = f"round {round_no} worker {worker} msg {i}".encode()
            i += 1
            ledger.attempted.add(payload)
            try:
                ack = await js.publish("dur.events", payload)
            except Exception as exc:
                ledger.failures[type(exc).__name__] += 1
                if killed.is_set():
                    return
                continue
            assert ack.stream == "D"
            assert ack.seq not in ledger.acked, f"seq {ack.seq} acknowledged twice"
            ledger.acked[ack.seq] = payload

    async def killer() -> None:
        await apoll(lambda: len(ledger.acked) >= target, f"{target} acks", 60)
        sigkill(srv)
        killed.set()
        await asyncio.to_thread(srv.proc.wait, 10)

    try:
        await asyncio.gather(killer(), *(publisher(w) for w in range(PUBLISHERS)))
    finally:
        await nc.close()


def test_acknowledged_messages_survive_sigkill(procs, server_kind, tmp_path):
    """Three SIGKILLs under concurrent publishing: every acked message survives, in place."""
    srv = procs.start(server_kind, store_config(tmp_path / "store", server_kind))
    ledger = Ledger()
    report = []

    async def setup():
        nc = await connect(srv.url)
        await create_stream(nc, "D", ["dur.>"])
        await nc.close()

    async def verify(url: str) -> None:
        nc = await connect(url)
        try:
            state, stored = await read_stream(nc, "D")
        finally:
            await nc.close()
        assert state["last_seq"] >= max(ledger.acked), state
        lost = {seq: p for seq, p in ledger.acked.items() if stored.get(seq) != ("dur.events", p)}
        assert lost == {}, f"{len(lost)} acknowledged messages lost or changed, e.g. {list(lost.items())[:5]}"
        present = [v[1] for v in stored.values() if isinstance(v, tuple)]
        assert len(present) == len(set(present)), "a payload is stored twice"
        assert all(p in ledger.attempted for p in present), "a payload nobody published"
        assert state["messages"] == len(present)
        # each publisher's messages are stored in the order it published them
        order = [tuple(int(t) for t in p.split()[1::2]) for p in present]   # (round, worker, i)
        by_worker: dict[tuple[int, int], list[int]] = {}
        for rnd, worker, i in order:
            by_worker.setdefault((rnd, worker), []).append(i)
        assert all(ix == sorted(ix) for ix in by_worker.values()), "a publisher's messages out of order"
        acked = set(ledger.acked.values())
        report.append({"acked": len(acked), "present": len(present),
                       "unacked_but_present": len(set(present) - acked),
                       "failed_publishes": dict(ledger.failures)})

    run(setup, timeout=20)
    for round_no in range(1, ROUNDS + 1):
        run(lambda: publish_until_killed(srv.url, ledger, round_no, srv), timeout=60)
        assert not srv.alive()
        srv = procs.restart(srv)
        run(lambda: verify(srv.url), timeout=40)
    print(f"{server_kind}: after each kill/restart: {report}")
    assert len(report) == ROUNDS
    assert report[-1]["acked"] >= ROUNDS * ACKS_BEFORE_KILL


def kill_and_restart(procs, srv: servers.RunningServer) -> servers.RunningServer:
    sigkill(srv)
    srv.proc.wait(timeout=10)
    return procs.restart(srv)


def test_streams_and_consumers_survive_sigkill(procs, server_kind, tmp_path):
    """A stream and a durable consumer created just before a SIGKILL are there after it,
    with their configuration, the acknowledged messages and the consumer's ack floor."""
    srv = procs.start(server_kind, store_config(tmp_path / "store", server_kind))

    async def before():
        nc = await connect(srv.url)
        try:
            await create_stream(nc, "K", ["k.>"])
            for i in range(5):
                assert (await api(nc, "$JS.API.STREAM.INFO.K"))["state"]["last_seq"] == i
                assert json.loads((await nc.request("k.x", f"m{i}".encode(), timeout=5)).data)["seq"] == i + 1
            js = nc.jetstream(timeout=5)
            sub = await js.pull_subscribe("k.>", durable="worker", stream="K",
                                          config=ConsumerConfig(ack_wait=1))
            msgs = await sub.fetch(2, timeout=5)
            for msg in msgs:
                await msg.ack_sync()
        finally:
            await nc.close()

    async def after(url):
        nc = await connect(url)
        try:
            info = await api(nc, "$JS.API.STREAM.INFO.K")
            assert (info["config"]["subjects"], info["config"]["storage"]) == (["k.>"], "file")
            assert (info["state"]["messages"], info["state"]["last_seq"]) == (5, 5)
            cinfo = await api(nc, "$JS.API.CONSUMER.INFO.K.worker")
            assert cinfo["config"]["durable_name"] == "worker"
            # nats-server 2.15 (even with sync_interval: always, which covers message
            # blocks only) keeps a consumer's delivered sequence across a SIGKILL but may
            # lose the acks that ack_sync() confirmed, one or both (ack floor 1 or 0, seen
            # on a loaded machine), and delivers those messages again after ack_wait.
            # jetraft writes the consumer's state before it confirms an ack_sync(): both
            # acks stay. At-least-once holds either way: every message after the ack floor
            # is delivered.
            floor = cinfo["ack_floor"]["stream_seq"]
            assert floor == 2 if server_kind == "jetraft" else floor in (0, 1, 2), cinfo["ack_floor"]
            assert cinfo["num_ack_pending"] + cinfo["num_pending"] == 5 - floor, cinfo
            js = nc.jetstream(timeout=5)
            sub = await js.pull_subscribe_bind("worker", stream="K")
            want = {f"m{i}".encode() for i in range(floor, 5)}
            got: list[bytes] = []

            async def all_delivered() -> bool:
                with contextlib.suppress(nats.errors.TimeoutError):
                    for msg in await sub.fetch(5, timeout=0.5):
                        got.append(msg.data)
                        await msg.ack()
                return set(got) >= want

            await apoll(all_delivered, "every message after the ack floor", 10, retry_on=())
            assert set(got) == want, got
        finally:
            await nc.close()

    run(before, timeout=20)
    srv = kill_and_restart(procs, srv)
    run(lambda: after(srv.url), timeout=20)


def test_kv_and_objects_survive_sigkill(procs, server_kind, tmp_path):
    """KV values (with their revisions and history) and a chunked object survive a SIGKILL."""
    srv = procs.start(server_kind, store_config(tmp_path / "store", server_kind))
    blob = bytes(range(256)) * 200

    async def before():
        nc = await connect(srv.url)
        try:
            js = nc.jetstream(timeout=5)
            kv = await js.create_key_value(bucket="cfg", history=3, storage=StorageType.FILE)
            for key, value in [("a", b"1"), ("b", b"1"), ("a", b"2"), ("c", b"1")]:
                await kv.put(key, value)
            await kv.delete("c")
            obs = await js.create_object_store(bucket="files", storage=StorageType.FILE)
            await obs.put("blob", blob, meta=ObjectMeta(name="blob",
                                                        options=ObjectMetaOptions(max_chunk_size=4096)))
        finally:
            await nc.close()

    async def after(url):
        nc = await connect(url)
        try:
            js = nc.jetstream(timeout=5)
            kv = await js.key_value("cfg")
            assert [(e.value, e.revision) for e in await listed(lambda: kv.history("a"))] == [(b"1", 1), (b"2", 3)]
            assert ((await kv.get("b")).value, (await kv.get("b")).revision) == (b"1", 2)
            assert sorted(await listed(kv.keys)) == ["a", "b"]
            assert await kv.put("c", b"again") == 6
            obs = await js.object_store("files")
            assert (await obs.get("blob")).data == blob
        finally:
            await nc.close()

    run(before, timeout=20)
    srv = kill_and_restart(procs, srv)
    run(lambda: after(srv.url), timeout=20)


# ----------------------------------------------------------------------------- corrupt store (jetraft)

PAYLOADS = [f"message {i:02d} ".encode() * 8 for i in range(1, 11)]


def msgs_dir(store_dir: Path) -> Path:
    """Where jetraft keeps stream S's block files (global account $G)."""
    return store_dir / "jetstream" / "$G" / "streams" / "S" / "msgs"


def records(block: Path) -> list[store_format.Record]:
    """The message records of a block file, in file order."""
    scan = store_format.scan_block(block.read_bytes(), True)
    assert scan.damage == [], scan.damage
    return [r for r in scan.records if r.rtype == store_format.REC_MSG]


def stored_stream(procs, tmp_path) -> tuple[servers.RunningServer, Path]:
    """A stopped jetraft whose stream S (file storage) held PAYLOADS; its last block file."""
    srv = procs.start("jetraft", store_config(tmp_path / "store", "jetraft"))

    async def fill():
        nc = await connect(srv.url)
        try:
            await create_stream(nc, "S", ["s.>"])
            for seq, data in enumerate(PAYLOADS, 1):
                assert json.loads((await nc.request("s.x", data, timeout=5)).data) == {"stream": "S", "seq": seq}
        finally:
            await nc.close()

    run(fill, timeout=20)
    srv.stop()
    blocks = sorted(msgs_dir(tmp_path / "store").glob("*.blk"))
    assert blocks, f"no block files under {msgs_dir(tmp_path / 'store')}"
    return srv, blocks[-1]


def events(srv: servers.RunningServer, name: str) -> list[dict]:
    """The restarted server's event-log lines (JSON on stdout) named ``name``."""
    found = []
    for line in srv.stdout_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                found.append(event)
    return found


async def fetch_all(nc, expected: int) -> list[tuple[int, bytes]]:
    """(stream seq, data) of every message a new pull consumer on S delivers."""
    js = nc.jetstream(timeout=5)
    sub = await js.pull_subscribe("s.>", stream="S")
    got = []
    while len(got) < expected:
        for msg in await sub.fetch(expected - len(got), timeout=5):
            got.append((msg.metadata.sequence.stream, msg.data))
            await msg.ack()
    with pytest.raises(asyncio.TimeoutError):
        await sub.fetch(1, timeout=0.5)  # and nothing more
    return got


NO_MESSAGE = {"code": 404, "err_code": 10037, "description": "no message found"}


def check_recovered(srv: servers.RunningServer, survivors: dict[int, bytes], last_seq: int,
                    problem: list[str]) -> None:
    """The restarted ``srv`` serves exactly ``survivors`` (seq -> payload) of PAYLOADS, by
    MSG.GET and through a new consumer, answers 10037 for the others, gives the next
    publish ``last_seq + 1``, and logged one recovery problem for S naming ``problem``."""

    async def check():
        nc = await connect(srv.url)
        try:
            state, stored = await read_stream(nc, "S")
            assert (state["messages"], state["first_seq"], state["last_seq"]) == (len(survivors), 1, last_seq)
            for seq in range(1, len(PAYLOADS) + 1):
                if seq in survivors:
                    assert stored[seq] == ("s.x", survivors[seq]), seq
                else:
                    assert await api(nc, "$JS.API.STREAM.MSG.GET.S", {"seq": seq}) == {
                        "type": "io.nats.jetstream.api.v1.stream_msg_get_response", "error": NO_MESSAGE}
            assert await fetch_all(nc, len(survivors)) == sorted(survivors.items())
            reply = await nc.request("s.x", b"new", timeout=5)
            assert json.loads(reply.data) == {"stream": "S", "seq": last_seq + 1}
        finally:
            await nc.close()

    run(check, timeout=20)
    problems = events(srv, "jetstream_recovery_problem")
    assert [p["stream"] for p in problems] == ["S"], problems
    assert all(word in problems[0]["detail"] for word in problem), problems[0]


def test_torn_last_record_is_dropped(procs, tmp_path):
    """A last block cut in the middle of its last record: the server starts, serves the
    other nine messages, reports the torn tail, and reuses the torn record's sequence
    (it was never acknowledged: the ack follows the fsync of the whole record)."""
    old, block = stored_stream(procs, tmp_path)
    last = records(block)[-1]
    assert last.seq == len(PAYLOADS)
    os.truncate(block, last.off + last.size // 2)
    srv = procs.restart(old)
    check_recovered(srv, dict(enumerate(PAYLOADS[:9], 1)), last_seq=9, problem=["torn_tail"])


def test_flipped_byte_message_is_never_served(procs, tmp_path):
    """A byte flipped in the payload of message 5: the server starts, never serves 5
    (get -> 10037, a consumer skips it), serves the nine others intact, reports it, and
    never reuses sequence 5."""
    old, block = stored_stream(procs, tmp_path)
    fifth = next(r for r in records(block) if r.seq == 5)
    at = fifth.off + store_format.HEADER_SIZE + fifth.subject_len + fifth.headers_len + 3
    with open(block, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x20]))
    srv = procs.restart(old)
    survivors = {seq: p for seq, p in enumerate(PAYLOADS, 1) if seq != 5}
    check_recovered(srv, survivors, last_seq=10, problem=["checksum_mismatch", "seq 5"])
