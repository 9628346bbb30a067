"""Streams with 10,000 subjects, against jetraft and nats-server.

A stream's subjects are checked against each other and against every other stream's
(nats-server stream.go ``checkStreamCfg``, ``jsAccount.subjectsOverlap``). Both servers
must create and update such a stream, keep answering other clients, refuse an overlap
with the same error, and bring the stream back after a restart. Timeouts are generous
(a server that compares every pair of subjects on its event loop takes minutes here and
fails on pytest's timeout); nothing is timed.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import nats.errors

import servers
from compat_support import connect, run
from js_support import STREAM_CREATE_RESPONSE
from polling import apoll
from servers import js_config

N = 10_000
#: Long enough for nats-server's pairwise checks (about 50 million comparisons for one
#: stream of 10,000 subjects: seconds) on a loaded machine.
SLOW = 90.0
_ECHO_SUBJECTS = itertools.count(1)


def stream_subjects(prefix: str, n: int = N) -> list[str]:
    """``n`` subjects, no two overlapping: literals, with a `*` or `>` last token now and then."""
    return [f"{prefix}.{i}.{'*' if i % 20 == 0 else '>' if i % 20 == 1 else 'x'}" for i in range(n)]


async def create(nc, name: str, subjects: list[str]) -> dict:
    body = json.dumps({"name": name, "subjects": subjects, "storage": "file"}).encode()
    reply = await nc.request(f"$JS.API.STREAM.CREATE.{name}", body, timeout=SLOW)
    return json.loads(reply.data)


async def echo_round_trip(server: servers.RunningServer) -> bytes:
    """A request from one client answered by another: the server still routes messages.

    nats-py's ``flush()`` writes its PING straight to the socket, ahead of a SUB still in
    its pending buffer, so a request right after ``subscribe(); flush()`` can meet
    no-responders on either server (a few in 100 on a loaded machine). Such an answer is
    asked again until the deadline; a server that stopped routing still fails.
    """
    subject = f"svc.echo.{next(_ECHO_SUBJECTS)}"
    responder = await connect(server.url, connect_timeout=30)
    requester = await connect(server.url, connect_timeout=30)
    try:
        async def echo(msg):
            await msg.respond(b"echo:" + msg.data)

        await responder.subscribe(subject, cb=echo)
        await responder.flush(timeout=30)
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                return (await requester.request(subject, b"ping", timeout=30)).data
            except nats.errors.NoRespondersError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await responder.flush(timeout=30)
    finally:
        await requester.close()
        await responder.close()


def test_a_stream_with_10000_subjects_is_created_and_the_server_keeps_answering(start_server, tmp_path):
    server = start_server(js_config(tmp_path / "js"))

    async def scenario():
        nc = await connect(server.url)
        try:
            subjects = stream_subjects("big")
            created = await create(nc, "BIG", subjects)
            assert "error" not in created, created
            assert created["type"] == STREAM_CREATE_RESPONSE
            assert created["config"]["subjects"] == subjects
            assert await echo_round_trip(server) == b"echo:ping"
            # An update checks the subjects again, against each other and the other streams.
            body = json.dumps({"name": "BIG", "subjects": subjects, "storage": "file",
                               "description": "updated"}).encode()
            updated = json.loads((await nc.request("$JS.API.STREAM.UPDATE.BIG", body, timeout=SLOW)).data)
            assert "error" not in updated, updated
            assert updated["config"]["description"] == "updated"
            assert await echo_round_trip(server) == b"echo:ping"
            ack = json.loads((await nc.request("big.9999.x", b"m", timeout=10)).data)
            assert ack == {"stream": "BIG", "seq": 1}
            # Another stream whose last subject falls under one of BIG's: 10065.
            refused = await create(nc, "OTHER", [*stream_subjects("other", 100), "big.40.*"])
            assert refused["error"] == {"code": 400, "err_code": 10065,
                                        "description": "subjects overlap with an existing stream"}
            # Two of one stream's own subjects overlap: checkStreamCfg names the first pair.
            own = await create(nc, "SELF", ["self.a", *stream_subjects("self", 2_000), "self.1999.*"])
            assert own["error"] == {"code": 500, "err_code": 10052,
                                    "description": 'subject "self.1999.x" overlaps with "self.1999.*"'}
            # A later subject with a space in it is compared too (nats-server's
            # SubjectsCollide does not look for whitespace); first, it is refused as invalid.
            spaced = await create(nc, "SPACE", [*stream_subjects("sp", 2_000), "sp.1. x"])
            assert spaced["error"] == {"code": 500, "err_code": 10052,
                                       "description": 'subject "sp.1.>" overlaps with "sp.1. x"'}
            spaced = await create(nc, "SPACE", ["sp. x", "sp.*"])
            assert spaced["error"] == {"code": 500, "err_code": 10052, "description": "invalid subject"}
        finally:
            await nc.close()

    run(scenario, timeout=SLOW + 30)


def test_a_restart_brings_back_a_stream_with_10000_subjects(server_kind, tmp_path):
    # Two processes on one store, one after the other (the start_server fixture takes a
    # server that exits during a test for a crash).
    config = js_config(tmp_path / "js")
    started: list[servers.RunningServer] = []
    try:
        started.append(servers.start_server(server_kind, tmp_path / "first", config))

        async def make():
            nc = await connect(started[0].url)
            try:
                created = await create(nc, "BIG", stream_subjects("big"))
                assert "error" not in created, created
            finally:
                await nc.close()

        run(make, timeout=SLOW + 30)
        assert started[0].stop() == 0
        started.append(servers.start_server(server_kind, tmp_path / "again", config, ready_timeout=SLOW))
        again = started[1]

        async def after():
            nc = await connect(again.url)
            try:
                info: dict = {}

                async def answered() -> bool:
                    try:
                        reply = await nc.request("$JS.API.STREAM.INFO.BIG", b"", timeout=5)
                    except Exception:  # noqa: BLE001 - not recovered yet: poll again
                        return False
                    info.clear()
                    info.update(json.loads(reply.data))
                    return "error" not in info

                await apoll(answered, "STREAM.INFO of BIG after the restart", SLOW, retry_on=())
                assert len(info["config"]["subjects"]) == N
                assert await echo_round_trip(again) == b"echo:ping"
            finally:
                await nc.close()

        run(after, timeout=SLOW + 30)
    except BaseException:
        for server in started:
            print(server.output()[-6000:])
        raise
    finally:
        for server in started:
            server.stop()
