"""Routes between jetraft servers: the RouteManager API in one trio process, a hand-driven
route peer speaking the frame protocol, and 3-server clusters of jetraft-server processes.

Every wait polls a condition under a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time

import nats
import pytest
import trio
from cluster import Cluster
from polling import apoll, poll
from servers import free_port

from jetraft.config import config_from_text
from jetraft.events import EventLog
from jetraft.jetstream.outbound import Outbound
from jetraft.protocol import route as rp
from jetraft.server import Server

DEADLINE = 10.0


# ---------------------------------------------------------------- in one trio process


def route_config(name: str, port: int, routes: list[int], extra: str = "") -> str:
    listed = ", ".join(f"nats://127.0.0.1:{p}" for p in routes)
    return (f"server_name: {name}\nhost: 127.0.0.1\nport: -1\n{extra}\n"
            f"cluster {{\n  name: C1\n  host: 127.0.0.1\n  port: {port}\n  routes: [{listed}]\n}}\n")


class Node:
    """One in-process Server with its event log captured."""

    def __init__(self, name: str, text: str) -> None:
        self.log = io.StringIO()
        self.server = Server(config_from_text(text), events=EventLog(name, stream=self.log, threshold="debug"))
        self.routes = self.server.routes
        self.peer_changes: list[tuple[str, bool]] = []
        self.routes.on_peer_change(lambda name, up: self.peer_changes.append((name, up)))

    def events(self, name: str | None = None) -> list[dict]:
        rows = [json.loads(line) for line in self.log.getvalue().splitlines()]
        return [r for r in rows if name is None or r["event"] == name]


async def start_nodes(nursery: trio.Nursery, *nodes: Node) -> None:
    """Start every node at once (so that routes listed both ways are dialled together)."""
    async with trio.open_nursery() as starting:
        for node in nodes:
            starting.start_soon(nursery.start, node.server.serve)


def mesh_formed(*nodes: Node) -> bool:
    names = {n.server.server_name for n in nodes}
    return all(set(n.routes.peers) == names - {n.server.server_name} for n in nodes)


async def test_app_frames_peer_changes_and_a_handler_that_raises():
    ports = [free_port(), free_port()]
    n1 = Node("n1", route_config("n1", ports[0], []))
    n2 = Node("n2", route_config("n2", ports[1], [ports[0]]))
    got: list[tuple[str, bytes]] = []
    n1.routes.on_app("echo", lambda src, body: got.append((src, body)))
    n2.routes.on_app("echo", lambda src, body: n2.routes.send_app(src, "echo", body + b"!"))

    def reject(src: str, body: bytes) -> None:
        raise ValueError("malformed body")

    n1.routes.on_app("picky", reject)
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, n1, n2)
        await apoll(lambda: mesh_formed(n1, n2), "the route", DEADLINE)
        peer = n1.routes.peers["n2"]
        assert (peer.server_name, peer.server_id, peer.cluster) == ("n2", n2.server.server_id, "C1")
        assert peer.tags == () and peer.jetstream is False
        assert peer.remote.startswith("127.0.0.1:") and peer.connected_ns <= peer.last_seen_ns
        assert n1.routes.send_app("nobody", "echo", b"x") is False

        assert n1.routes.send_app("n2", "echo", b"ping")
        await apoll(lambda: got, "the echo", DEADLINE)
        assert got == [("n2", b"ping!")]
        assert n1.routes.peers["n2"].last_seen_ns >= peer.connected_ns

        # a body a handler rejects closes that route; the soliciting side dials it again
        assert n2.routes.send_app("n1", "picky", b"?")
        await apoll(lambda: len(n1.peer_changes) == 3, "the route to come back", DEADLINE)
        assert n1.peer_changes == [("n2", True), ("n2", False), ("n2", True)]
        assert any("APP frame of kind 'picky' rejected: ValueError: malformed body" in e["reason"]
                   for e in n1.events("route_refused"))
        n1.server.shutdown()
        n2.server.shutdown()
    assert n2.peer_changes[-1] == ("n1", False)
    assert {e["reason"] for e in n2.events("route_closed")} & {"Server Shutdown", "Remote Closed"}


async def test_routes_dialled_both_ways_leave_one_route_without_flapping():
    ports = [free_port() for _ in range(3)]
    nodes = [Node(f"n{i + 1}", route_config(f"n{i + 1}", ports[i], ports)) for i in range(3)]
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, *nodes)
        await apoll(lambda: mesh_formed(*nodes), "the mesh", DEADLINE)
        await apoll(lambda: all(len(n.routes.connections) == 2 for n in nodes), "duplicates closed", DEADLINE)
        for node in nodes:
            for name, peer in node.routes.peers.items():
                other = next(n for n in nodes if n.server.server_name == name)
                # the kept route is the one dialled by the lower server id, on both ends
                lower_dialled = node.server.server_id < other.server.server_id
                assert peer.conn.solicited == lower_dialled
            assert sorted(node.peer_changes) == sorted(
                (n.server.server_name, True) for n in nodes if n is not node)  # no down/up flap
            refused = [e["reason"] for e in node.events("route_refused")]
            assert "route to self ignored" in refused
            assert len(node.events("listening")) == 2  # cluster, then client
        for node in nodes:
            node.server.shutdown()


async def test_five_servers_in_a_chain_of_seeds_form_a_full_mesh():
    """n2 lists n1, n3 lists n2, ... n5 lists n4: gossip alone completes the mesh."""
    ports = [free_port() for _ in range(5)]
    nodes = [Node(f"n{i + 1}", route_config(f"n{i + 1}", ports[i], ports[i - 1:i])) for i in range(5)]
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, *nodes)
        await apoll(lambda: mesh_formed(*nodes), "the full mesh", DEADLINE)
        await apoll(lambda: all(len(n.routes.connections) == 4 for n in nodes), "duplicates closed", DEADLINE)
        for node in nodes:  # every peer came up once and never went down
            assert sorted(node.peer_changes) == sorted(
                (n.server.server_name, True) for n in nodes if n is not node)
        for node in nodes:
            node.server.shutdown()


async def test_internal_interest_is_propagated_and_withdrawn():
    ports = [free_port(), free_port()]
    n1 = Node("n1", route_config("n1", ports[0], [ports[1]]))
    n2 = Node("n2", route_config("n2", ports[1], []))
    routed: list[tuple] = []
    original = n1.server.router.publish_from_route

    def record(src, account, msg, queues=()):
        routed.append((src, account, msg.subject, msg.reply, msg.headers, msg.payload, queues, msg.deliver_as))
        original(src, account, msg, queues)

    n1.server.router.publish_from_route = record
    marks: list[bytes] = []
    n1.routes.on_app("mark", lambda src, body: marks.append(body))
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, n1, n2)
        await apoll(lambda: mesh_formed(n1, n2), "the route", DEADLINE)
        n1.routes.add_internal_interest("$G", "orders.>")
        n1.routes.add_internal_interest("$G", "orders.>")  # a second reference
        await apoll(lambda: n2.routes.has_remote_interest("$G", "orders.new"), "the interest on n2", DEADLINE)
        assert not n2.routes.has_remote_interest("$G", "other")
        assert not n2.routes.has_remote_interest("APP", "orders.new")  # per account

        n2.server.route_internal("$G", Outbound("orders.new", "_INBOX.r", b"NATS/1.0\r\nA: 1\r\n\r\n", b"x"))
        await apoll(lambda: routed, "the routed message", DEADLINE)
        assert routed == [("n2", "$G", "orders.new", "_INBOX.r", b"NATS/1.0\r\nA: 1\r\n\r\n", b"x", (), None)]

        n1.routes.remove_internal_interest("$G", "orders.>")
        n2.routes.send_app("n1", "mark", b"1")
        await apoll(lambda: marks == [b"1"], "the first mark", DEADLINE)
        assert n2.routes.has_remote_interest("$G", "orders.new")  # one reference is left
        n1.routes.remove_internal_interest("$G", "orders.>")
        await apoll(lambda: not n2.routes.has_remote_interest("$G", "orders.new"), "the withdrawal", DEADLINE)
        n2.server.route_internal("$G", Outbound("orders.new", None, None, b"late"))
        n2.routes.send_app("n1", "mark", b"2")  # same route, so after any routed message
        await apoll(lambda: marks == [b"1", b"2"], "the second mark", DEADLINE)
        assert len(routed) == 1
        n1.server.shutdown()
        n2.server.shutdown()


# ---------------------------------------------------------------- a hand-driven route peer


class FakePeer:
    """A route peer driven by the test: raw socket, frames from jetraft.protocol.route."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.parser = rp.RouteParser()
        self.frames: list = []

    @classmethod
    async def dial(cls, port: int, rcvbuf: int | None = None) -> FakePeer:
        sock = trio.socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        await sock.connect(("127.0.0.1", port))
        return cls(trio.SocketStream(sock))

    async def hello(self, *, cluster: str = "C1", name: str = "fake", user=None, password=None,
                    server_id: str | None = None, minor: int = 0) -> None:
        info = rp.RouteInfo(server_name=name, server_id=server_id or "NFAKE" + name.upper(),
                            cluster=cluster, listen="127.0.0.1:1", minor=minor)
        await self.stream.send_all(rp.encode_connect(user, password) + rp.encode_info(info))

    async def next(self, kind: type, timeout: float = DEADLINE):
        with trio.fail_after(timeout):
            while True:
                while self.frames:
                    frame = self.frames.pop(0)
                    if isinstance(frame, kind):
                        return frame
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError("route closed")
                self.frames += self.parser.feed(data)


async def test_handshakes_that_are_refused_say_why():
    port = free_port()
    node = Node("n1", route_config("n1", port, []) .replace(
        "routes: []", 'routes: []\n  authorization { user: ruser, password: "rpass" }'))
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, node)
        cases = [
            ({"user": "ruser", "password": "nope"}, rp.ERR_AUTH, "authorization violation"),
            ({}, rp.ERR_AUTH, "(none given)"),
            ({"user": "ruser", "password": "rpass", "cluster": "OTHER"}, rp.ERR_CLUSTER, "cluster name conflict"),
            ({"user": "ruser", "password": "rpass", "name": "n1"}, rp.ERR_NAME, "duplicate name"),
        ]
        for kwargs, code, text in cases:
            peer = await FakePeer.dial(port)
            await peer.hello(**kwargs)
            err = await peer.next(rp.RouteErr)
            assert (err.code, text in err.text) == (code, True), err
            assert text in node.events("route_refused")[-1]["reason"]
        # garbage is a protocol error, answered and logged
        peer = await FakePeer.dial(port)
        await peer.stream.send_all(b"\x00\x00\x00\x03abc")
        err = await peer.next(rp.RouteErr)
        assert err.code == rp.ERR_PROTOCOL and "not a msgpack value" in err.text
        # so is nats-server's text protocol, named as such
        peer = await FakePeer.dial(port)
        await peer.stream.send_all(b'INFO {"server_id":"NX"}\r\n')
        err = await peer.next(rp.RouteErr)
        assert "nats-server's text route protocol" in err.text
        # the right credentials: INFO comes back, then the route is up
        peer = await FakePeer.dial(port)
        await peer.hello(user="ruser", password="rpass")
        info = await peer.next(rp.RouteInfo)
        assert (info.server_name, info.cluster, info.server_id) == ("n1", "C1", node.server.server_id)
        await apoll(lambda: "fake" in node.routes.peers, "the fake peer registered", DEADLINE)
        assert node.routes.peers["fake"].listen == "127.0.0.1:1"
        node.server.shutdown()


async def test_a_peer_that_stops_reading_loses_raft_frames_first_then_its_route():
    port = free_port()
    node = Node("n1", route_config("n1", port, [], extra="max_pending: 262144\nmax_payload: 65536\nwrite_deadline: 30s"))
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, node)
        peer = await FakePeer.dial(port, rcvbuf=4096)
        await peer.hello()
        await peer.next(rp.RouteInfo)
        await apoll(lambda: "fake" in node.routes.peers, "the fake peer registered", DEADLINE)
        body = b"r" * 16384
        with trio.fail_after(DEADLINE):  # the peer never reads: raft frames start being dropped
            while node.routes.send_app("fake", "raft", body):
                await trio.sleep(0)
        assert "fake" in node.routes.peers  # dropping RAFT frames keeps the route
        conn = node.routes.peers["fake"].conn
        assert conn.dropped_frames == 1 and conn.pending_bytes > 262144 // 2
        with trio.fail_after(DEADLINE):  # core frames are never dropped: past max_pending it closes
            while node.routes.send_app("fake", "jsapi", body):
                await trio.sleep(0)
        await apoll(lambda: "fake" not in node.routes.peers, "the route closed", DEADLINE)
        closed = node.events("route_closed")[-1]
        assert closed["peer_name"] == "fake" and closed["reason"].startswith("Slow Consumer")
        assert "exceed max_pending 262144" in closed["reason"]
        node.server.shutdown()


async def test_a_route_that_stops_answering_pings_is_closed_as_stale():
    port = free_port()
    node = Node("n1", route_config("n1", port, [], extra='ping_interval: "100ms"\nping_max: 2'))
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, node)
        peer = await FakePeer.dial(port)
        await peer.hello()
        await peer.next(rp.RouteInfo)
        await peer.next(rp.RoutePing)  # keepalive runs; the fake peer never answers
        await peer.stream.send_all(rp.PONG)  # an answer resets the count once...
        await apoll(lambda: "fake" not in node.routes.peers, "the stale route closed", 5)
        closed = node.events("route_closed")[-1]
        assert (closed["peer_name"], closed["reason"]) == ("fake", "Stale Connection")
        node.server.shutdown()


async def test_a_server_back_with_a_new_id_replaces_its_old_route_as_down_then_up():
    port = free_port()
    node = Node("n1", route_config("n1", port, []))
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, node)
        before = await FakePeer.dial(port)
        await before.hello(server_id="NOLD")
        await before.next(rp.RouteInfo)
        await apoll(lambda: "fake" in node.routes.peers, "the first incarnation", DEADLINE)
        after = await FakePeer.dial(port)  # the old socket is still open: a half-dead route
        await after.hello(server_id="NNEW")
        await after.next(rp.RouteInfo)
        await apoll(lambda: node.routes.peers["fake"].server_id == "NNEW", "the new incarnation", DEADLINE,
                    retry_on=())
        assert node.peer_changes == [("fake", True), ("fake", False), ("fake", True)]
        with pytest.raises(EOFError):
            await before.next(rp.RouteErr)  # closed without a word: it is presumed dead
        node.server.shutdown()


# ---------------------------------------------------------------- jetraft-server processes


def routez_names(c: Cluster, name: str) -> list[str]:
    return sorted(r["remote_name"] for r in c.servers[name].monitor("/routez")["routes"])


def test_one_seed_route_each_forms_the_full_mesh_and_a_route_to_self_is_ignored(tmp_path):
    with Cluster("jetraft", tmp_path, 3, seed=True) as c:  # all list n1 only, n1 too
        c.start()
        c.wait_formed()
        for name in c.members:
            assert routez_names(c, name) == sorted(set(c.members) - {name})  # one route each
            varz = c.servers[name].monitor("/varz")
            assert varz["routes"] == 2 and varz["cluster"]["name"] == "C1"
        n2_connected = {e["peer_name"]: e["direction"] for e in c.events("n2") if e["event"] == "route_connected"}
        assert n2_connected["n1"] == "solicited"  # its seed; n3 was learnt from n1's gossip
        assert "n3" in n2_connected
        assert any(e["event"] == "route_refused" and e["reason"] == "route to self ignored"
                   for e in c.events("n1"))
        # clients learn every server's URL
        with socket.create_connection(("127.0.0.1", c.members["n2"].port), timeout=5) as s:
            info = json.loads(s.makefile("rb").readline().split(b" ", 1)[1])
        assert info["cluster"] == "C1"
        assert sorted(info.get("connect_urls", [])) == sorted(u.split("//")[1] for u in c.urls())


def test_wrong_credentials_and_cluster_name_are_refused_and_logged(tmp_path):
    good = Cluster("jetraft", tmp_path / "good", 3, auth=("ruser", "rpass"))
    intruder = Cluster("jetraft", tmp_path / "bad", 1, names=["intruder"], auth=("ruser", "wrong"),
                       routes=[good.route_url("n1", auth=("ruser", "wrong"))])
    alien = Cluster("jetraft", tmp_path / "alien", 1, name="OTHER", names=["alien"], auth=("ruser", "rpass"),
                    routes=[good.route_url("n2")])
    with good, intruder, alien:
        good.start()
        intruder.start()
        alien.start()
        good.wait_formed()

        def refusals(c: Cluster, name: str) -> list[str]:
            return [e["reason"] for e in c.events(name) if e["event"] == "route_refused"]

        poll(lambda: any("authorization violation" in r for r in refusals(good, "n1")), "n1 refusing", DEADLINE,
             retry_on=())
        poll(lambda: any("cluster name conflict" in r for r in refusals(good, "n2")), "n2 refusing", DEADLINE,
             retry_on=())
        poll(lambda: any("refused by the remote: authorization violation" in r
                         for r in refusals(intruder, "intruder")), "the intruder told", DEADLINE, retry_on=())
        poll(lambda: any("refused by the remote: cluster name conflict" in r
                         for r in refusals(alien, "alien")), "the alien told", DEADLINE, retry_on=())
        assert routez_names(intruder, "intruder") == [] and routez_names(alien, "alien") == []
        for name in good.members:
            assert routez_names(good, name) == sorted(set(good.members) - {name})


def test_a_killed_server_is_dropped_and_rejoins_when_restarted(tmp_path):
    with Cluster("jetraft", tmp_path, 3).start() as c:
        c.wait_formed()
        c.kill("n2")
        poll(lambda: routez_names(c, "n1") == ["n3"] and routez_names(c, "n3") == ["n1"],
             "n1 and n3 to drop n2", DEADLINE, retry_on=())
        closed = [e for e in c.events("n1") if e["event"] == "route_closed" and e["peer_name"] == "n2"]
        assert closed and closed[-1]["reason"] == "Remote Closed"
        c.restart("n2")
        c.wait_formed()

        async def across() -> bytes:  # the restarted server carries messages both ways again
            sub_nc = await nats.connect(f"nats://127.0.0.1:{c.members['n2'].port}")
            pub_nc = await nats.connect(f"nats://127.0.0.1:{c.members['n3'].port}")
            async def reverse(msg) -> None:
                await sub_nc.publish(msg.reply, msg.data[::-1])

            sub = await sub_nc.subscribe("back.>", cb=reverse)
            await sub_nc.flush()
            deadline = time.monotonic() + DEADLINE
            while True:
                try:
                    reply = await pub_nc.request("back.again", b"olleh", timeout=1)
                    break
                except nats.errors.NoRespondersError:
                    assert time.monotonic() < deadline, "n2's subscription never reached n3"
                    await asyncio.sleep(0.02)
            await sub.unsubscribe()
            await sub_nc.close()
            await pub_nc.close()
            return reply.data

        assert asyncio.run(asyncio.wait_for(across(), 30)) == b"hello"


async def test_connections_in_their_handshake_are_bounded(monkeypatch):
    """Past MAX_PENDING_ROUTES strangers that never finish their handshake, a new connection
    is closed at once (and said so); once they are gone a peer connects as usual."""
    from jetraft.net.transport import route as route_module
    monkeypatch.setattr(route_module, "MAX_PENDING_ROUTES", 3)
    port = free_port()
    node = Node("n1", route_config("n1", port, []))
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, node)
        strangers = [await FakePeer.dial(port) for _ in range(3)]
        await apoll(lambda: len(node.routes.connections) == 3, "three connections accepted", DEADLINE)
        late = await FakePeer.dial(port)
        with trio.fail_after(DEADLINE):
            assert await late.stream.receive_some(65536) == b""  # closed without a word
        refused = await apoll(lambda: node.events("route_refused"), "the refusal logged", DEADLINE, retry_on=())
        assert "3 route connections are in their handshake already (at most 3)" in refused[-1]["reason"]
        for stranger in strangers:
            await stranger.stream.aclose()
        await apoll(lambda: not node.routes.connections, "the strangers gone", DEADLINE)
        peer = await FakePeer.dial(port)
        await peer.hello()
        await peer.next(rp.RouteInfo)
        await apoll(lambda: "fake" in node.routes.peers, "the fake peer registered", DEADLINE)
        node.server.shutdown()


# ---------------------------------------------------------------- interest in many subjects at once


def stream_subjects(prefix: str, n: int) -> list[str]:
    """``n`` distinct subjects as a stream has them: literals, some ending in ``*`` or ``>``."""
    return [f"{prefix}.{i}.{'*' if i % 20 == 0 else '>' if i % 20 == 1 else 'x'}" for i in range(n)]


def count_calls(obj: object, name: str) -> list:
    """Wrap the bound method ``obj.name`` so that each call's arguments are recorded."""
    calls: list = []
    original = getattr(obj, name)

    def wrapper(*args):
        calls.append(args)
        return original(*args)

    setattr(obj, name, wrapper)
    return calls


async def test_a_batch_of_interests_arrives_whole_in_order_and_is_announced_once_per_frame(tmp_path):
    """A stream leader's interest in thousands of subjects (add_internal_interests) reaches the
    peer in SUBS frames: the frame after it on the route finds every subject there, in order;
    the peer's JetStream hears of it once per frame, not once per subject; and the peer's other
    tasks run between slices of the batch instead of waiting for all of it."""
    from jetraft.net.transport import route as route_module
    ports = [free_port(), free_port()]
    n1 = Node("n1", route_config("n1", ports[0], [ports[1]]))
    n2 = Node("n2", route_config("n2", ports[1], [], extra=f'jetstream {{ store_dir: "{tmp_path}" }}'))
    interest_changed = count_calls(n2.server.jetstream, "interest_changed")
    marks: list[tuple[bytes, list[str]]] = []

    def on_mark(src: str, body: bytes) -> None:  # what n2 holds when the frame after arrives
        conn = n2.routes.peers["n1"].conn
        marks.append((body, [subject for (acc, subject, _q) in conn.interest if acc == "$G"]))

    n2.routes.on_app("mark", on_mark)
    subjects = stream_subjects("orders", 3 * route_module.INTEREST_SLICE)  # < BATCH_SUBJECTS
    assert len(subjects) < rp.BATCH_SUBJECTS
    seen: set[int] = set()  # n2's count of n1's $G interest, each time another task ran

    async def watch() -> None:
        while True:
            seen.add(n2.routes.interest.remote_subscription_count("$G"))
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, n1, n2)
        await apoll(lambda: mesh_formed(n1, n2), "the route", DEADLINE)
        assert n1.routes.send_app("n2", "mark", b"up")  # after the interest table of route-up
        await apoll(lambda: marks, "the first mark", DEADLINE)
        assert marks[0] == (b"up", [])
        interest_changed.clear()
        nursery.start_soon(watch)

        n1.routes.add_internal_interests("$G", subjects)
        n1.routes.send_app("n2", "mark", b"subs")
        await apoll(lambda: len(marks) == 2, "the mark after the batch", DEADLINE)
        assert marks[1] == (b"subs", subjects)  # whole, in order, before the next frame
        assert interest_changed == [("$G",)]  # once for the frame of 3,000 subjects
        assert all(n2.routes.has_remote_interest("$G", s.replace("*", "y").replace(">", "z"))
                   for s in subjects)
        assert not n2.routes.has_remote_interest("$G", "orders.x.x")
        assert any(0 < count < len(subjects) for count in seen), sorted(seen)  # others ran midway

        # references are counted as add_internal_interest counts them: only the subjects that
        # lose their last reference are withdrawn, in one UNSUBS
        n1.routes.add_internal_interests("$G", subjects[:10])
        n1.routes.remove_internal_interests("$G", subjects[::2])
        n1.routes.send_app("n2", "mark", b"unsubs")
        await apoll(lambda: len(marks) == 3, "the mark after the withdrawal", DEADLINE)
        kept = [s for i, s in enumerate(subjects) if i % 2 or i < 10]
        assert sorted(marks[2][1]) == sorted(kept)
        assert interest_changed == [("$G",), ("$G",)]
        n1.routes.remove_internal_interests("$G", subjects + subjects[1:10:2])  # every reference
        await apoll(lambda: n2.routes.remote_subscription_count()
                    == n1.routes.interest.local_subscription_count(),
                    "every $G interest withdrawn", DEADLINE)
        assert n1.routes.interest.local_subscription_count("$G") == 0

        # a stream's 10,000 subjects: three frames, three announcements, the same interest
        many = stream_subjects("big", 10_000)
        interest_changed.clear()
        n1.routes.add_internal_interests("$G", many)
        n1.routes.send_app("n2", "mark", b"many")
        await apoll(lambda: len(marks) == 4, "the mark after 10,000 subjects", DEADLINE)
        assert marks[3] == (b"many", many)
        assert interest_changed == [("$G",)] * 3  # 4096 + 4096 + 1808
        n1.server.shutdown()
        n2.server.shutdown()
        nursery.cancel_scope.cancel()


async def frames_until_mark(peer: FakePeer) -> list:
    """Every frame the fake peer receives until an APP frame of kind ``mark`` (excluded)."""
    out = []
    while True:
        frame = await peer.next(object)
        if isinstance(frame, rp.AppFrame) and frame.kind == "mark":
            return out
        out.append(frame)


async def test_a_peer_of_minor_0_gets_one_sub_per_subject_and_a_peer_of_minor_1_subs_frames():
    """A server that does not announce minor 1 (one of an older release, during a rolling
    upgrade) never receives a frame kind it does not know: the same interest reaches it as
    SUB/UNSUB frames, in the same order, in the route-up table as in later changes."""
    port = free_port()
    node = Node("n1", route_config("n1", port, []))
    before = ["early.1", "early.*", "early.>"]
    after = stream_subjects("late", 5)
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, node)
        node.routes.add_internal_interests("$G", before)
        node.routes.add_internal_interest("$G", "work", "workers")  # a queue group: SUB + weight
        old, new = await FakePeer.dial(port), await FakePeer.dial(port)
        await old.hello(name="old")
        await new.hello(name="new", minor=1)
        for peer in (old, new):
            info = await peer.next(rp.RouteInfo)
            assert (info.version, info.minor) == (1, 1)  # this server announces minor 1
        await apoll(lambda: {"old", "new"} <= set(node.routes.peers), "both registered", DEADLINE)
        assert node.routes.send_app("old", "mark", b"") and node.routes.send_app("new", "mark", b"")

        def mine(frames: list) -> list:
            return [f for f in frames if getattr(f, "account", None) == "$G"]

        assert mine(await frames_until_mark(old)) == [
            *(rp.RouteSub("$G", s) for s in before), rp.RouteSub("$G", "work", "workers", 1)]
        assert mine(await frames_until_mark(new)) == [
            rp.RouteSubs("$G", tuple(before)), rp.RouteSub("$G", "work", "workers", 1)]

        node.routes.add_internal_interests("$G", after)
        node.routes.remove_internal_interests("$G", [after[3], "never.added", after[0]])
        for peer in ("old", "new"):
            node.routes.send_app(peer, "mark", b"")
        assert mine(await frames_until_mark(old)) == [
            *(rp.RouteSub("$G", s) for s in after), rp.RouteUnsub("$G", after[3]),
            rp.RouteUnsub("$G", after[0])]
        assert mine(await frames_until_mark(new)) == [
            rp.RouteSubs("$G", tuple(after)), rp.RouteUnsubs("$G", (after[3], after[0]))]
        node.server.shutdown()


async def test_subs_from_a_peer_are_applied_before_the_frames_after_them():
    """The receiving side: a SUBS frame larger than one slice, then an UNSUB, a SUB and an
    UNSUBS of some of its subjects, then a mark: the mark sees the end state, as if every
    subject had come in a SUB frame of its own. A SUBS before the handshake, or with an
    invalid subject, closes the route."""
    from jetraft.net.transport import route as route_module
    port = free_port()
    node = Node("n1", route_config("n1", port, []))
    subjects = stream_subjects("in", 2 * route_module.INTEREST_SLICE + 500)
    marks: list[list[str]] = []

    def on_mark(src: str, body: bytes) -> None:
        conn = node.routes.peers["fake"].conn
        marks.append([subject for (acc, subject, _q) in conn.interest if acc == "APP"])

    node.routes.on_app("mark", on_mark)
    changed = count_calls(node.server.router, "subscriptions_changed")
    async with trio.open_nursery() as nursery:
        await start_nodes(nursery, node)
        early = await FakePeer.dial(port)
        await early.stream.send_all(rp.encode_connect(None, None) + rp.encode_subs("APP", ["a"]))
        err = await early.next(rp.RouteErr)
        assert err.code == rp.ERR_PROTOCOL and "RouteSubs before the handshake finished" in err.text

        peer = await FakePeer.dial(port)
        await peer.hello(minor=1)
        await peer.next(rp.RouteInfo)
        await apoll(lambda: "fake" in node.routes.peers, "the fake peer registered", DEADLINE)
        changed.clear()
        await peer.stream.send_all(
            rp.encode_subs("APP", subjects) + rp.encode_unsub("APP", subjects[0])
            + rp.encode_sub("APP", subjects[0]) + rp.encode_unsubs("APP", subjects[1:3])
            + rp.encode_subs("APP", [subjects[5]]) + rp.encode_app("mark", b""))
        await apoll(lambda: marks, "the mark", DEADLINE)
        assert marks == [[*subjects[3:], subjects[0]]]
        assert node.routes.has_remote_interest("APP", "in.0.y") and not node.routes.has_remote_interest("APP", "in.1.q")
        assert [c for c in changed if c == ("APP",)] == [("APP",)] * 4  # SUBS, UNSUB, SUB, UNSUBS

        await peer.stream.send_all(rp.encode_subs("APP", ["ok.1", "bad..subject", "ok.2"]))
        err = await peer.next(rp.RouteErr)
        assert err.code == rp.ERR_PROTOCOL and "invalid subject in SUBS: 'bad..subject'" in err.text
        await apoll(lambda: "fake" not in node.routes.peers, "the route closed", DEADLINE)
        assert node.routes.remote_subscription_count() == 0  # what it had sent is forgotten
        node.server.shutdown()
