"""``$JS.API.STREAM.PEER.REMOVE.<stream>`` of a stream's leader or of a follower, while a
client publishes with acknowledgements: on jetraft and on nats-server, side by side.

One five-server cluster per server kind serves the module, zones 2/2/1 (``server_tags``
``az:a``/``az:b``/``az:c``) with ``jetstream { unique_tag: "az:" }``, an ``APP`` account
holding the streams; every check goes through unmodified nats-py. Each case creates its own
stream (R1, R2 or R3), publishes throughout, removes the leader or a follower, and then
expects what a user relies on: the answer is success; the stream gets a leader again and is
back to its replica count, on distinct zones, every replica current, without the removed
server; the removed server no longer keeps the stream's files; publishes are acknowledged
again; and every acknowledged message reads back with its payload.

Nothing is timed: every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time

import bcrypt
import nats
import pytest
import servers
from cluster import Cluster
from js_support import asked_again
from nats.js.errors import APIError

ZONES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c"}
SYS_PASSWORD = "a very long s3cr3t! password"
APP = {"user": "app", "password": "app-pass"}
SUCCESS = {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True}
#: acknowledged publishes wanted before the removal, and again after the stream recovered
BATCH = 20
#: seconds between publishes (a few hundred messages per case, on a shared machine)
PAUSE = 0.01


def accounts_block() -> str:
    hashed = bcrypt.hashpw(SYS_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    return f"""accounts {{
  $SYS {{ users = [ {{ user: "admin", pass: "{hashed}" }} ] }}
  APP {{ jetstream: enabled, users = [ {{ user: "{APP['user']}", pass: "{APP['password']}" }} ] }}
}}"""


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    with formed_cluster(request.param, "peerremove", 5, jetstream=True, unique_tag="az:",
                        tags=[[f"az:{z}"] for z in ZONES.values()], extra=accounts_block(),
                        users=[(APP["user"], APP["password"])]) as c:
        yield c


async def _ignore(_exc: Exception) -> None:
    return None


async def connect(c: Cluster) -> nats.NATS:
    return await nats.connect(servers=[s.url for s in c.servers.values()], user=APP["user"],
                              password=APP["password"], max_reconnect_attempts=-1,
                              reconnect_time_wait=0.1, connect_timeout=2, error_cb=_ignore)


async def until(predicate, timeout: float, what: str, seen: dict) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout}s (last seen: {seen.get('last')})")
        await asyncio.sleep(0.1)


def members(si) -> list[str]:
    return [si.cluster.leader, *(r.name for r in si.cluster.replicas or [])]


class Publisher:
    """Publishes unique payloads one at a time, each awaiting its acknowledgement; keeps
    the acknowledged ones (sequence -> payload). A failed publish (no leader just now) is
    not retried: its payload is never counted as acknowledged. ``reused``: sequences
    acknowledged a second time (for another payload)."""

    def __init__(self, js, subject: str) -> None:
        self.js, self.subject = js, subject
        self.acked: dict[int, bytes] = {}
        self.reused: list[int] = []
        self.failed = 0
        self.stop = False

    async def run(self) -> None:
        n = 0
        while not self.stop:
            n += 1
            payload = f"m-{n}".encode()
            try:
                ack = await self.js.publish(self.subject, payload, timeout=2)
            except Exception:  # noqa: BLE001 - no leader now: not acknowledged, go on
                self.failed += 1
                await asyncio.sleep(0.05)
                continue
            if ack.seq in self.acked:
                self.reused.append(ack.seq)
            self.acked[ack.seq] = payload
            await asyncio.sleep(PAUSE)


async def peer_remove(nc, stream: str, peer: str) -> dict:
    """The answer to PEER.REMOVE, asked again while there is no meta leader (10008)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            msg = await nc.request(f"$JS.API.STREAM.PEER.REMOVE.{stream}",
                                   json.dumps({"peer": peer}).encode(), timeout=5)
            reply = json.loads(msg.data)
        except nats.errors.TimeoutError:
            reply = {"error": {"err_code": 10008}}
        if reply.get("error", {}).get("err_code") != 10008 or time.monotonic() > deadline:
            return reply
        await asyncio.sleep(0.2)


def holds_files(c: Cluster, name: str, stream: str) -> bool:
    """Whether server ``name``'s store has a directory named after ``stream``."""
    return any(p.is_dir() and p.name == stream for p in c.store_dir(name).rglob(stream))


@pytest.mark.parametrize(("replicas", "target"), [
    (1, "leader"), (2, "leader"), (3, "leader"), (2, "follower"), (3, "follower"),
])
def test_peer_remove_while_publishing_keeps_every_acknowledged_message(cluster, replicas, target):
    stream = f"PR{replicas}{target[0].upper()}"
    seen: dict = {}

    async def scenario():
        nc = await connect(cluster)
        js = nc.jetstream(timeout=5)
        deadline = time.monotonic() + 30
        while True:
            try:
                await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=replicas)
                break
            except APIError as err:     # 10008: a meta election on a loaded machine
                if err.err_code != 10008 or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
            except nats.errors.TimeoutError:    # unanswered under load: created again is the same
                if time.monotonic() > deadline:
                    raise

        async def settled(exclude: str | None = None, more: int = 0) -> bool:
            try:
                si = await js.stream_info(stream)
            except Exception as exc:  # noqa: BLE001 - no leader yet
                seen["last"] = exc
                return False
            seen["last"] = si.cluster
            cl = si.cluster
            if cl is None or cl.leader is None or len(cl.replicas or []) != replicas - 1:
                return False
            names = members(si)
            return (all(r.current and not r.offline for r in cl.replicas or [])
                    and exclude not in names and len({ZONES[n] for n in names}) == replicas
                    and len(pub.acked) >= more)

        pub = Publisher(js, f"{stream.lower()}.x")
        await until(settled, 30, f"{stream} settled", seen)
        si = await asked_again(lambda: js.stream_info(stream), f"{stream} info")
        if replicas == 3 and target == "leader" and si.cluster.leader == "n5":
            # n5 is zone c's only server: no server could take its place (see
            # test_peer_remove_refusals); another member leads first
            deadline = time.monotonic() + 60
            while si.cluster.leader == "n5":
                assert time.monotonic() < deadline, "n5 still leads after step-downs"
                try:
                    await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=5)
                except nats.errors.TimeoutError:
                    pass
                await until(settled, 30, f"{stream} settled after a step-down", seen)
                si = await asked_again(lambda: js.stream_info(stream), f"{stream} info")
        if target == "leader":
            removed = si.cluster.leader
        else:
            # n5 is zone c's only server: an R3 stream has no other server to take its
            # place, an R2 stream (followers: one) may have to lose n5
            followers = [r.name for r in si.cluster.replicas]
            removed = next((n for n in followers if n != "n5"), followers[0])
        task = asyncio.create_task(pub.run())
        try:
            await until(lambda: asyncio.sleep(0, len(pub.acked) >= BATCH), 30, "first acks", seen)
            reply = await peer_remove(nc, stream, removed)
            assert reply == SUCCESS
            wanted = len(pub.acked) + BATCH
            await until(lambda: settled(removed, wanted), 60,
                        f"{stream} off {removed}, back to R{replicas}, acknowledging again", seen)
        finally:
            pub.stop = True
            await task
        await until(lambda: asyncio.sleep(0, not holds_files(cluster, removed, stream)), 30,
                    f"{removed} without the files of {stream}", {"last": removed})
        if cluster.kind == "nats-server" and replicas == 1:
            # nats-server 2.15.1 starts the moved R1 stream empty on its new server: its
            # sequences start over at 1 and the messages acknowledged before are gone.
            # jetraft adds the new server to the group and hands over once it caught up.
            assert pub.reused
        else:
            assert pub.reused == []
            for seq, payload in sorted(pub.acked.items()):
                # a read unanswered on a loaded machine is asked again, as a user would
                msg = await asked_again(lambda seq=seq: js.get_msg(stream, seq), f"{stream} message {seq}")
                assert msg.data == payload, (seq, msg.data, payload)
        await nc.close()

    asyncio.run(asyncio.wait_for(scenario(), 150))


def remap_failed(kind: str, reason: str) -> dict:
    """The refusal: nats-server answers 10075 with the bare text; jetraft adds the reason."""
    description = "peer remap failed" + (f": {reason}" if kind == "jetraft" else "")
    return {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response",
            "error": {"code": 503, "err_code": 10075, "description": description}}


async def refused_remove(c: Cluster, stream: str, pick) -> tuple[list[str], dict]:
    """Create the R3 ``stream``, let it settle, remove ``pick(members)``: (members, answer);
    the stream keeps its members."""
    nc = await connect(c)
    js = nc.jetstream(timeout=5)
    seen: dict = {}
    deadline = time.monotonic() + 30
    while True:
        try:
            await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=3)
            break
        except nats.errors.TimeoutError:    # unanswered under load: created again is the same
            if time.monotonic() > deadline:
                raise
        except APIError as err:
            if err.err_code != 10008 or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)

    async def settled() -> bool:
        try:
            si = await js.stream_info(stream)
        except Exception as exc:  # noqa: BLE001 - no leader yet
            seen["last"] = exc
            return False
        seen["last"] = si.cluster
        return (si.cluster.leader is not None and len(si.cluster.replicas or []) == 2
                and all(r.current for r in si.cluster.replicas))

    await until(settled, 30, f"{stream} settled", seen)
    before = sorted(members(await asked_again(lambda: js.stream_info(stream), f"{stream} info")))
    reply = await peer_remove(nc, stream, pick(before))
    after = sorted(members(await asked_again(lambda: js.stream_info(stream), f"{stream} info")))
    assert after == before
    await nc.close()
    return before, reply


def test_peer_remove_whose_only_spares_are_in_zones_the_stream_uses_is_refused_with_the_reason(cluster):
    """n5 is zone c's only server: the two spare servers are in zones a and b, which the
    stream already uses."""
    async def scenario():
        group, reply = await refused_remove(cluster, "ZONEC", lambda _m: "n5")
        assert reply == remap_failed(cluster.kind, (
            "no suitable peers for placement, server tag not unique (no server outside "
            f"{', '.join(group)} in a zone the stream does not use, unique_tag 'az:')"))

    asyncio.run(asyncio.wait_for(scenario(), 90))


@pytest.mark.parametrize("kind", servers.KINDS)
def test_peer_remove_on_three_servers_in_three_zones_is_refused_with_the_reason(kind, tmp_path):
    c = Cluster(kind, tmp_path, 3, jetstream=True, unique_tag="az:",
                tags=[["az:a"], ["az:b"], ["az:c"]], extra=accounts_block())
    try:
        c.start()
        c.wait_formed()

        async def scenario():
            group, reply = await refused_remove(c, "THREE", lambda m: m[1])
            assert group == ["n1", "n2", "n3"]
            assert reply == remap_failed(kind, "no suitable peers for placement (no server outside n1, n2, n3)")

        asyncio.run(asyncio.wait_for(scenario(), 90))
    finally:
        c.stop()
