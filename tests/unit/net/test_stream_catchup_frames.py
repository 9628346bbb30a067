"""The catch-up frames a server answers for its peers (net/jetstream/catchup.py), with a fake
cluster: only members get blocks, a replica that has not the bytes says so, and hostile or
malformed frames are dropped and reported, never raised into the route."""

from __future__ import annotations

import msgpack
import pytest

from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.replicated import InterestOverride, StreamReplica
from jetraft.net.jetstream.catchup import MAX_SERVE_BYTES, StreamCatchup
from jetraft.storage import GroupCommit

T0 = 1_800_000_000_000_000_000


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields) -> None:
        self.lines.append((name, fields))


class Routes:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict]] = []
        self.handlers = {}

    def on_app(self, kind, handler) -> None:
        self.handlers[kind] = handler

    def send_app(self, peer: str, kind: str, body: bytes) -> bool:
        self.sent.append((peer, kind, msgpack.unpackb(body)))
        return True


class Group:
    def __init__(self) -> None:
        self.name = "S-R3F-test"
        self.peers = ("n1", "n2", "n3")
        self.is_leader = True
        self.notes: list = []

    def note_catchup(self, peer, applied, now_ns) -> None:
        self.notes.append((peer, applied))

    def catchup_done(self, peer) -> None:
        self.notes.append((peer, "done"))


class Cluster:
    def __init__(self, tmp_path) -> None:
        self.events, self.routes = Events(), Routes()
        self.server = type("S", (), {"server_name": "n1"})()
        self.host = None
        acc = JetStreamAccount("$G", store_dir=str(tmp_path), sync=GroupCommit(), events=Events(),
                               interest=lambda s: False, server_version="2.15.1", sync_always=False,
                               server_name="n1", clustered=True)
        acc.create_replica({"name": "S", "subjects": ["s.>"], "num_replicas": 3, "storage": "file"}, T0)
        for i in range(50):
            acc.publish(acc.streams["S"], "s.x", None, None, b"y" * 100, T0 + i)
        self.replicas = {("$G", "S"): StreamReplica(acc, "S", emit=lambda out: None,
                                                    override=InterestOverride())}
        self.groups = {("$G", "S"): Group()}


@pytest.fixture
def served(tmp_path):
    cl = Cluster(tmp_path)
    StreamCatchup(cl)
    return cl, cl.routes.handlers["jscu"]


def _req(**m) -> bytes:
    return msgpack.packb({"g": "S-R3F-test", **m})


def test_a_member_gets_the_bytes_it_asks_for(served):
    cl, on_request = served
    store = cl.replicas[("$G", "S")].account.streams["S"].stream.store
    first, size = store.manifest()[0]
    on_request("n2", _req(k="blk", b=first, o=0, n=1000, a=7))
    peer, kind, body = cl.routes.sent[-1]
    assert (peer, kind, body["s"]) == ("n2", "jscd", "ok")
    assert body["d"] == store.read_block(first, 0, 1000) and len(body["d"]) == 1000
    assert cl.groups[("$G", "S")].notes == [("n2", 7)]       # the leader reports it lagging
    on_request("n2", _req(k="blk", b=first, o=size - 10, n=100))
    assert cl.routes.sent[-1][2]["s"] == "behind"              # not that many bytes here
    on_request("n2", _req(k="blk", b=first + 10_000, o=0, n=100))
    assert cl.routes.sent[-1][2]["s"] == "behind"              # a block not started yet
    on_request("n2", _req(k="blk", b=first, o=0, n=10 * MAX_SERVE_BYTES))
    assert cl.routes.sent[-1][2]["s"] == "behind"              # read at most MAX_SERVE_BYTES
    on_request("n2", _req(k="done"))
    assert cl.groups[("$G", "S")].notes[-1] == ("n2", "done")


def test_a_server_outside_the_group_gets_nothing(served):
    cl, on_request = served
    on_request("n9", _req(k="blk", b=1, o=0, n=100))
    assert cl.routes.sent[-1][2]["s"] == "unknown" and "d" not in cl.routes.sent[-1][2]
    on_request("n2", msgpack.packb({"g": "S-R3F-other", "k": "blk", "b": 1, "o": 0, "n": 10}))
    assert cl.routes.sent[-1][2]["s"] == "unknown"


@pytest.mark.parametrize("body", [
    b"\xc1", b"", msgpack.packb([1, 2]), msgpack.packb({"g": 5, "k": "blk"}),
    msgpack.packb({"g": "S-R3F-test", "k": "rm -rf"}),
    msgpack.packb({"g": "S-R3F-test", "k": "blk", "b": -1, "o": 0}),
    msgpack.packb({"g": "S-R3F-test", "k": "blk", "b": 1, "o": True}),
    msgpack.packb({"g": "S-R3F-test", "k": "blk", "b": "1", "o": 0}),
])
def test_malformed_frames_are_dropped_and_reported(served, body):
    cl, on_request = served
    on_request("n2", body)
    cl.routes.handlers["jscd"]("n2", body)
    assert cl.routes.sent == []
    assert [n for n, _ in cl.events.lines] == ["config_warning", "config_warning"]
