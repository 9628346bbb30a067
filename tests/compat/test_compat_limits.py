"""Limits a server enforces: max payload, slow consumers, keep-alive PINGs.

Run against jetraft and nats-server with the limit set in the configuration file.
"""

from __future__ import annotations

import asyncio

import pytest
from compat_support import (
    RawClient,
    assert_usable,
    close_all,
    connect,
    payloads,
    round_trip,
    run,
    take,
)
from nats.errors import MaxPayloadError
from polling import apoll


def test_max_payload_client_side(start_server):
    """nats-py learns max_payload from INFO and refuses larger publishes itself."""
    server = start_server("max_payload: 1024")

    async def scenario():
        nc = await connect(server.url)
        assert nc.max_payload == 1024
        sub = await nc.subscribe("big")
        await nc.publish("big", b"x" * 1024)
        with pytest.raises(MaxPayloadError):
            await nc.publish("big", b"x" * 1025)
        await round_trip(nc)
        assert payloads(await take(sub)) == [b"x" * 1024]
        await nc.close()

    run(scenario)


def test_max_payload_violation_on_the_wire(start_server):
    """An oversize PUB from a raw client gets -ERR 'Maximum Payload Violation' and a close."""
    server = start_server("max_payload: 1024")
    with RawClient(server.address) as raw:
        assert raw.info["max_payload"] == 1024
        raw.connect()
        raw.send(b"PUB big 1025\r\n")
        assert raw.read_until_closed() == b"-ERR 'Maximum Payload Violation'\r\n"


#: Small limits so that a subscriber that never reads falls behind quickly.
SLOW_CONSUMER_CONFIG = """
max_payload: 8192
max_pending: 65536
write_deadline: "1s"
"""


def test_slow_consumer_is_cut_off(start_server):
    """A subscriber that never reads is disconnected; a normal one on the subject gets all."""
    server = start_server(SLOW_CONSUMER_CONFIG, http=True)
    total, size, window = 2000, 4096, 8  # 8 MB: more than socket buffers plus max_pending
    # The raw subscriber asks for a tiny receive buffer and never reads.
    slow = RawClient(server.address, rcvbuf=4096)
    slow.connect()
    slow.send(b"SUB firehose 1\r\nPING\r\n")
    slow.expect(b"PONG\r\n")
    slow_cid = slow.info["client_id"]

    async def scenario():
        received = 0
        progress = asyncio.Condition()

        async def count(_msg):
            nonlocal received
            async with progress:
                received += 1
                progress.notify_all()

        reader = await connect(server.url)
        await reader.subscribe("firehose", cb=count)
        await round_trip(reader)
        publisher = await connect(server.url)
        for i in range(total):
            # Keep at most `window` messages (32 KiB) in flight to the normal reader, so
            # only the raw subscriber can exceed max_pending.
            async with progress:
                await asyncio.wait_for(progress.wait_for(lambda: received >= i - window), 10)
            await publisher.publish("firehose", b"m" * size)
        await round_trip(publisher)
        async with progress:
            await asyncio.wait_for(progress.wait_for(lambda: received >= total), 10)
        await round_trip(publisher, reader)
        assert received == total

        def slow_gone() -> bool:
            connz = server.monitor("/connz")
            return slow_cid not in [c["cid"] for c in connz["connections"]]

        await apoll(lambda: asyncio.to_thread(slow_gone), "the slow consumer to be dropped", 15, retry_on=())
        assert reader.is_connected and publisher.is_connected
        varz = await asyncio.to_thread(server.monitor, "/varz")
        assert varz["slow_consumers"] >= 1
        await close_all(reader, publisher)

    try:
        run(scenario)
        # What the slow client sees: whatever was buffered, then the server closing.
        slow.read_until_closed(timeout=15)
    finally:
        slow.close()


#: Server PINGs every 100ms; a client with 2 unanswered PINGs is stale.
PING_CONFIG = """
ping_interval: "100ms"
ping_max: 2
"""


def test_silent_client_is_disconnected_as_stale(start_server):
    """A client that never answers PING gets ping_max PINGs, then 'Stale Connection', closed."""
    server = start_server(PING_CONFIG)
    with RawClient(server.address) as raw:
        raw.connect()
        seen = raw.read_until_closed(timeout=10)
        assert seen == b"PING\r\n" * 2 + b"-ERR 'Stale Connection'\r\n"


def answer_pings(raw: RawClient, count: int) -> None:
    """Answer ``count`` server PINGs with PONG, then check the connection with our own PING."""
    for _ in range(count):
        raw.expect(b"PING\r\n")
        raw.send(b"PONG\r\n")
    raw.ping()


def test_answering_client_stays_connected(start_server):
    """A client that answers PINGs stays connected well past the stale limit; so does nats-py."""
    server = start_server(PING_CONFIG)

    async def scenario():
        nc = await connect(server.url)
        with RawClient(server.address) as raw:
            raw.connect()
            # 10 PINGs at 100ms is several times the 2-PING stale limit.  In a thread, so
            # that nats-py's event loop answers its own PINGs meanwhile.
            await asyncio.to_thread(answer_pings, raw, 10)
        # nats-py answered the same PINGs in the background and is still connected.
        await assert_usable(nc)
        await nc.close()

    run(scenario)
