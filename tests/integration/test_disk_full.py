"""A full disk or a failing one under JetStream: the server stays up, the writes it cannot
keep are refused, nothing acknowledged is lost, and writes resume without a restart.

- A real full disk: a small tmpfs (mounted under the test's tmp_path, unmounted whatever
  happens) holds the store of one jetraft-server or nats-server process (side by side):
  publishes until the disk is full get nats-server's error PubAck, the process, core NATS
  and a memory stream go on; the tmpfs is grown; jetraft takes publishes again without a
  restart (nats-server 2.15.1 keeps refusing: its store limit, 75% of the disk, is
  computed when it starts); every acknowledged message is there byte for byte, and again
  after a restart. Mounting needs root (CI runs the suite as root); otherwise skipped.
- Failing fsyncs and writes, injected through jetraft's file-layer seam
  (``jetraft.storage.fileio``) into in-process servers: a stream's block file whose
  fsync fails (EIO) freezes that stream alone and is rolled back to what was acknowledged;
  a RAFT log whose writes fail (EIO) on the leader of an R3 stream stops that group on that
  server only, the other two go on with the stream, and the group resumes once the disk
  works again.

Clients are unmodified nats-py (asyncio: run in a worker thread for the in-process
servers); every wait polls under a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import io
import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import nats
import nats.errors
import pytest
import trio
from polling import apoll
from servers import RunningServer, free_port, start_server

from jetraft.config import config_from_text
from jetraft.events import EventLog
from jetraft.storage import fileio
from jetraft.raft.storage.directory import group_dir_name
from jetraft.server import Server

DEADLINE = 30.0
#: The small disk, and what it is grown to.
TMPFS_SIZE = "1m"
TMPFS_GROWN = "16m"
PAYLOAD = 1000
INSUFFICIENT = {"code": 503, "err_code": 10023, "description": "insufficient resources"}
IO_ERROR = {"code": 503, "err_code": 10077, "description": "input/output error"}


# ----------------------------------------------------------------------------- helpers


@contextmanager
def tmpfs(path: Path, size: str):
    """Mount a tmpfs of ``size`` at ``path`` (under the test's tmp_path); unmount it on
    the way out, whatever happened. Skips the test without root or without mount rights."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the tests as root)")
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                           str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)   # busy: detach it now


def grow(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def run(scenario, timeout: float = 120.0):
    """Run an asyncio scenario (nats-py) to completion, bounded by ``timeout``."""
    async def bounded():
        return await asyncio.wait_for(scenario(), timeout)
    return asyncio.run(bounded())


async def request(nc, subject: str, body: bytes | dict = b"", timeout: float = 5.0) -> dict:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    return json.loads((await nc.request(subject, data, timeout=timeout)).data)


async def create_stream(nc, config: dict) -> None:
    reply = await request(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config, timeout=10)
    assert "error" not in reply, reply


async def stored(nc, stream: str) -> tuple[dict, dict[int, bytes]]:
    """The stream's state and every message it holds, by sequence."""
    state = (await request(nc, f"$JS.API.STREAM.INFO.{stream}"))["state"]
    out = {}
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        got = await request(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in got:
            out[seq] = base64.b64decode(got["message"].get("data", ""))
    return state, out


async def core_nats_works(nc) -> None:
    sub = await nc.subscribe("core.check")
    await nc.publish("core.check", b"still here")
    assert (await sub.next_msg(timeout=5)).data == b"still here"
    await sub.unsubscribe()


def events(text: str, name: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if row.get("event") == name:
                rows.append(row)
    return rows


def payload(i: int) -> bytes:
    return f"message {i} ".encode().ljust(PAYLOAD, b"x")


# ----------------------------------------------------------------------------- a real full disk


def test_a_full_disk_refuses_publishes_and_they_resume_when_it_grows(server_kind, tmp_path):
    store = tmp_path / "store"
    config = f'jetstream {{ store_dir: "{store}" }}'
    ledger: dict[int, bytes] = {}
    started: list[RunningServer] = []

    def start(name: str) -> RunningServer:
        srv = start_server(server_kind, tmp_path / name, config, name=server_kind)
        started.append(srv)
        return srv

    async def fill(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            await create_stream(nc, {"name": "FULL", "subjects": ["full.>"], "storage": "file"})
            await create_stream(nc, {"name": "MEM", "subjects": ["mem.>"], "storage": "memory"})
            refusal = None
            for i in range(20_000):             # 1 MiB holds about a thousand
                reply = await request(nc, "full.data", payload(i))
                if "error" in reply:
                    refusal = reply
                    break
                assert reply["seq"] not in ledger
                ledger[reply["seq"]] = payload(i)
            assert refusal == {"error": INSUFFICIENT, "stream": "FULL", "seq": 0}
            assert len(ledger) > 100
            # refused again, the same way; the server, core NATS and other streams go on
            assert await request(nc, "full.data", payload(-1)) == refusal
            await core_nats_works(nc)
            other = await nats.connect(url, allow_reconnect=False)
            await core_nats_works(other)
            await other.close()
            assert "error" not in await request(nc, "mem.data", b"in memory")
            assert nc.is_connected
        finally:
            await nc.close()

    async def resume(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            async def accepted():
                reply = await request(nc, "full.data", payload(100_000))
                return reply if "error" not in reply else None
            reply = await apoll(accepted, "a publish accepted after the disk grew", DEADLINE, retry_on=())
            ledger[reply["seq"]] = payload(100_000)
            for i in range(100_001, 100_011):
                reply = await request(nc, "full.data", payload(i))
                assert "error" not in reply, reply
                ledger[reply["seq"]] = payload(i)
        finally:
            await nc.close()

    async def verify(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            state, messages = await stored(nc, "FULL")
            lost = {seq: p[:20] for seq, p in ledger.items() if messages.get(seq) != p}
            assert lost == {}, f"{len(lost)} acknowledged messages lost or changed"
            assert state["messages"] == len(messages)
        finally:
            await nc.close()

    with tmpfs(store, TMPFS_SIZE):
        try:
            srv = start("first")
            run(lambda: fill(srv.url))
            assert srv.alive()
            if server_kind == "jetraft":
                failed = events(srv.output(), "jetstream_storage_failed")
                assert [(e["stream"], e["errno"]) for e in failed] == [("FULL", "ENOSPC")]
                assert failed[0]["path"].startswith(str(store))
            grow(store, TMPFS_GROWN)
            if server_kind == "jetraft":        # no restart needed
                run(lambda: resume(srv.url))
                resumed = events(srv.output(), "jetstream_storage_resumed")
                assert [e["stream"] for e in resumed] == ["FULL"]
            # (nats-server keeps its store limit from its start: 75% of a 1 MiB disk)
            run(lambda: verify(srv.url))
            srv.stop()
            srv = start("restarted")
            run(lambda: verify(srv.url))
            if server_kind == "jetraft":
                run(lambda: resume(srv.url))
                run(lambda: verify(srv.url))
            assert all(s.alive() for s in started[-1:])
        finally:
            for s in started:
                s.stop()


# ----------------------------------------------------------------------------- injected faults


class Faults:
    """A fileio fault: OSError(``err``) for operation ``op`` on paths containing ``where``."""

    def __init__(self) -> None:
        self.rules: list[tuple[str, str, int]] = []

    def fail(self, op: str, where: str, err: int = errno.EIO) -> None:
        self.rules.append((op, where, err))

    def clear(self) -> None:
        self.rules = []

    def __call__(self, op: str, path: str, size: int):
        for r_op, where, err in self.rules:
            if r_op == op and where in path:
                raise OSError(err, os.strerror(err), path)
        return None


class Node:
    """One in-process Server with its event log captured."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self.log = io.StringIO()
        self.server = Server(config_from_text(text), events=EventLog(name, stream=self.log,
                                                                     threshold="debug"))

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.server.client_port}"

    def events(self, name: str) -> list[dict]:
        return events(self.log.getvalue(), name)


async def client(url: str, scenario, timeout: float = 60.0):
    """Run ``await scenario(nc)`` with a nats-py connection to ``url`` in a worker thread
    (nats-py is asyncio; the servers run on this thread's trio loop)."""
    async def main():
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=5)
        try:
            return await asyncio.wait_for(scenario(nc), timeout)
        finally:
            await nc.close()
    return await trio.to_thread.run_sync(asyncio.run, main())


async def test_a_failed_fsync_freezes_that_stream_alone_and_rolls_it_back(tmp_path):
    store = tmp_path / "store"
    faults = Faults()
    ledger: dict[int, bytes] = {}
    with fileio.inject(faults):
        node = Node("n1", f'host: 127.0.0.1\nport: -1\njetstream {{ store_dir: "{store}" }}\n')
        async with trio.open_nursery() as nursery:
            await nursery.start(node.server.serve)

            async def setup(nc):
                for name in ("A", "B"):
                    await create_stream(nc, {"name": name, "subjects": [f"{name.lower()}.>"]})
                for i in range(20):
                    reply = await request(nc, "a.data", payload(i))
                    ledger[reply["seq"]] = payload(i)
            await client(node.url, setup)

            faults.fail("fdatasync", f"{os.sep}streams{os.sep}A{os.sep}msgs{os.sep}")

            async def refused(nc):
                first = await request(nc, "a.data", payload(20))
                again = await request(nc, "a.data", payload(21))
                other = await request(nc, "b.data", b"stream B goes on")
                await core_nats_works(nc)
                return first, again, other
            first, again, other = await client(node.url, refused)
            assert first == again == {"error": IO_ERROR, "stream": "A", "seq": 0}
            assert other == {"stream": "B", "seq": 1}
            [failed] = node.events("jetstream_storage_failed")
            assert (failed["stream"], failed["errno"], failed["op"]) == ("A", "EIO", "fsync")
            assert failed["path"].endswith(".blk")

            await trio.sleep(0)
            await apoll(lambda: node.events("jetstream_storage_retry_failed"),
                        "a resume attempt that fails while the disk does", DEADLINE, retry_on=())
            faults.clear()

            async def resumed(nc):
                async def accepted():
                    reply = await request(nc, "a.data", payload(22))
                    return reply if "error" not in reply else None
                return await apoll(accepted, "stream A taking publishes again", DEADLINE, retry_on=())
            reply = await client(node.url, resumed)
            # sequence 21 went to the refused message, rolled back: never used twice
            assert reply == {"stream": "A", "seq": 22}
            ledger[22] = payload(22)
            [back] = node.events("jetstream_storage_resumed")
            assert (back["stream"], back["rolled_back"]) == ("A", 1)

            async def check(nc):
                return await stored(nc, "A")
            state, messages = await client(node.url, check)
            assert messages == ledger and (state["last_seq"], state["num_deleted"]) == (22, 1)
            node.server.shutdown()

        again_node = Node("n1", node.text)
        async with trio.open_nursery() as nursery:
            await nursery.start(again_node.server.serve)
            state, messages = await client(again_node.url, check)
            assert messages == ledger and state["last_seq"] == 22
            again_node.server.shutdown()


def cluster_texts(tmp_path: Path, n: int = 3) -> list[str]:
    ports = [free_port() for _ in range(n)]
    routes = ", ".join(f"nats://127.0.0.1:{p}" for p in ports)
    return [f'server_name: n{i}\nhost: 127.0.0.1\nport: -1\n'
            f'cluster {{\n  name: C1\n  host: 127.0.0.1\n  port: {ports[i]}\n  routes: [{routes}]\n}}\n'
            f'jetstream {{ store_dir: "{tmp_path / f"n{i}"}" }}\n' for i in range(n)]


@pytest.mark.parametrize(("role", "op"), [("leader", "pwrite"), ("follower", "fdatasync")])
async def test_a_raft_log_that_fails_stops_its_group_on_that_server_alone(tmp_path, role, op):
    """EIO writing the leader's log, or fsyncing a follower's: that server's group stops."""
    faults = Faults()
    nodes = [Node(f"n{i}", text) for i, text in enumerate(cluster_texts(tmp_path))]
    ledger: dict[int, bytes] = {}
    with fileio.inject(faults):
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as starting:
                for node in nodes:
                    starting.start_soon(nursery.start, node.server.serve)

            def cluster(node):
                return node.server.jetstream.cluster
            await apoll(lambda: all(cluster(n).meta_group is not None and cluster(n).meta_group.leader
                                    for n in nodes), "a meta leader known everywhere", DEADLINE)

            async def setup(nc):
                await create_stream(nc, {"name": "C", "subjects": ["c.>"], "num_replicas": 3})
                await create_stream(nc, {"name": "D", "subjects": ["d.>"], "num_replicas": 3})
                for i in range(20):
                    reply = await request(nc, "c.data", payload(i))
                    assert "error" not in reply, reply
                    ledger[reply["seq"]] = payload(i)
            await client(nodes[0].url, setup)

            key = ("$G", "C")
            leader = await apoll(lambda: cluster(nodes[0]).groups[key].leader, "C's leader", DEADLINE, retry_on=())
            victim = next(n for n in nodes if (n.name == leader) == (role == "leader"))
            others = [n for n in nodes if n is not victim]
            group = cluster(victim).groups[key]
            raft_dir = str(tmp_path / victim.name / "jetstream" / "_raft" / group_dir_name(group.name))
            faults.fail(op, raft_dir)               # its next append or fsync fails: EIO

            async def publish_through(nc):
                errors = []

                async def accepted(i):
                    try:
                        reply = await request(nc, "c.data", payload(i), timeout=2)
                    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                        return None     # no leader for a moment: a client asks again
                    if "error" in reply:
                        errors.append(reply)
                        return None
                    return reply
                for i in range(20, 40):
                    reply = await apoll(lambda i=i: accepted(i), "C accepting publishes", DEADLINE, retry_on=())
                    ledger[reply["seq"]] = payload(i)
                assert "error" not in await request(nc, "d.data", b"stream D goes on")
                return errors
            errors = await client(others[0].url, publish_through)
            assert all(e["error"] == IO_ERROR for e in errors), errors
            print(f"refused while C's leadership moved: {errors}")

            [failed] = victim.events("jetstream_storage_failed")
            assert (failed["stream"], failed["group"], failed["errno"]) == ("C", group.name, "EIO")
            assert failed["op"] == {"pwrite": "write", "fdatasync": "fsync"}[op]
            assert failed["path"].startswith(raft_dir)
            assert group.failed is not None and not group.is_leader
            assert cluster(others[0]).groups[key].leader in {n.name for n in others}
            assert cluster(victim).groups[("$G", "D")].failed is None
            await client(victim.url, core_nats_works)       # the server itself goes on

            async def check(nc):
                return await stored(nc, "C")
            state, messages = await client(victim.url, check)
            assert {s: messages.get(s) for s in ledger} == ledger

            faults.clear()
            [back] = await apoll(lambda: victim.events("jetstream_storage_resumed"),
                                 "the group resumed on its server", DEADLINE, retry_on=())
            assert (back["stream"], back["group"]) == ("C", group.name)
            last = state["last_seq"]
            replica = victim.server.jetstream.accounts["$G"].streams["C"].stream
            await apoll(lambda: group.failed is None and replica.store.state().last_seq >= last,
                        "the victim's replica caught up", DEADLINE, retry_on=())
            for node in nodes:
                node.server.shutdown()


async def test_a_consumer_state_file_that_cannot_be_written_freezes_its_stream(tmp_path):
    store = tmp_path / "store"
    faults = Faults()
    text = f'host: 127.0.0.1\nport: -1\njetstream {{ store_dir: "{store}" }}\n'
    with fileio.inject(faults):
        node = Node("n1", text)
        async with trio.open_nursery() as nursery:
            await nursery.start(node.server.serve)

            async def setup(nc):
                for name in ("W", "V"):
                    await create_stream(nc, {"name": name, "subjects": [f"{name.lower()}.>"]})
                for i in range(5):
                    await request(nc, "w.data", payload(i))
                psub = await nc.jetstream().pull_subscribe("w.>", durable="dur")
                for m in await psub.fetch(2, timeout=5):
                    await m.ack_sync(timeout=5)         # confirmed: must never come back
            await client(node.url, setup)

            faults.fail("pwrite", f"{os.sep}obs{os.sep}dur{os.sep}state.json", errno.ENOSPC)

            async def ack_unconfirmed(nc):
                psub = await nc.jetstream().pull_subscribe("w.>", durable="dur")
                [m] = await psub.fetch(1, timeout=5)
                with pytest.raises(nats.errors.TimeoutError):
                    await m.ack_sync(timeout=1)         # its state could not be written
                refused = await request(nc, "w.data", payload(5))
                other = await request(nc, "v.data", b"stream V goes on")
                return m.metadata.sequence.stream, refused, other
            seq, refused, other = await client(node.url, ack_unconfirmed)
            assert seq == 3
            assert refused == {"error": INSUFFICIENT, "stream": "W", "seq": 0}
            assert other == {"stream": "V", "seq": 1}
            [failed] = node.events("jetstream_storage_failed")
            assert (failed["stream"], failed["consumer"], failed["errno"]) == ("W", "dur", "ENOSPC")

            faults.clear()

            async def resumed(nc):
                async def accepted():
                    reply = await request(nc, "w.data", payload(6))
                    return reply if "error" not in reply else None
                return await apoll(accepted, "stream W taking publishes again", DEADLINE, retry_on=())
            assert (await client(node.url, resumed))["stream"] == "W"
            assert [e["stream"] for e in node.events("jetstream_storage_resumed")] == ["W"]
            node.server.shutdown()

        again = Node("n1", text)
        async with trio.open_nursery() as nursery:
            await nursery.start(again.server.serve)

            async def next_after_restart(nc):
                info = await request(nc, "$JS.API.CONSUMER.INFO.W.dur")
                return info["ack_floor"]["stream_seq"]
            # the two confirmed acks were kept (the unconfirmed one may have been too)
            assert await client(again.url, next_after_restart) in (2, 3)
            again.server.shutdown()


async def test_a_frozen_stream_can_be_deleted_to_free_its_space(tmp_path):
    store = tmp_path / "store"
    faults = Faults()
    with fileio.inject(faults):
        node = Node("n1", f'host: 127.0.0.1\nport: -1\njetstream {{ store_dir: "{store}" }}\n')
        async with trio.open_nursery() as nursery:
            await nursery.start(node.server.serve)
            faults.fail("pwrite", f"{os.sep}streams{os.sep}A{os.sep}msgs{os.sep}", errno.ENOSPC)

            async def scenario(nc):
                await create_stream(nc, {"name": "A", "subjects": ["a.>"]})
                refused = await request(nc, "a.data", b"no room")
                info = await request(nc, "$JS.API.STREAM.INFO.A")      # reads are served
                purge = await request(nc, "$JS.API.STREAM.PURGE.A")     # writes are not
                deleted = await request(nc, "$JS.API.STREAM.DELETE.A")
                faults.clear()
                await create_stream(nc, {"name": "A", "subjects": ["a.>"]})
                return refused, info, purge, deleted, await request(nc, "a.data", b"room again")
            refused, info, purge, deleted, again = await client(node.url, scenario)
            assert refused == {"error": INSUFFICIENT, "stream": "A", "seq": 0}
            assert info["state"]["messages"] == 0
            assert purge["error"] == INSUFFICIENT
            assert deleted.get("success") is True
            assert again == {"stream": "A", "seq": 1}      # at once: no freeze left behind
            node.server.shutdown()
