"""An account's JetStream limits (``max_streams``, ``max_file``) on stream restores, jetraft and
nats-server 2.15.1 side by side: on one server and in a three-server cluster.

Each server restores backups it made itself (the data formats differ): an account ``SRC``
without limits holds the streams that are backed up, the account ``LIM`` (``max_streams: 2,
max_file: 1MB``) takes the restores. A restore is driven as natscli drives it (see
test_stream_backup_restore.py): RESTORE, every chunk a request, an empty request at the end.
Its outcome is where it ended (``start``, ``chunk`` or ``end``) and the error it ended with.

nats-server checks ``max_streams`` and the streams' reservations when a restore starts, and the
bytes of the backup once they are known (stream_backup.go RestoreStreamV2): restores started
together all start, one of them takes its bytes, and the others are refused with 10047 at
their end. jetraft answers the same; its restore checks the account's limits again when it
attaches the stream it built (single server), or before it puts it in place (cluster, on the
server that restores it). Where they differ, the test says so:

- restores started together whose bytes fit but whose number does not: nats-server 2.15.1
  attaches them all and leaves the account past its ``max_streams``; jetraft refuses those
  past it with 10027 at their end;
- a clustered restore refused for its bytes: nats-server leaves its stream, empty, in the
  account; jetraft deletes it (as every clustered restore that fails).

Last, on an in-process jetraft server (its restores' idle timeout shortened): what a restore
refused at its end or abandoned by its client leaves behind (nothing).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time

import nats
import pytest
import servers
import trio
from compat_support import connect, run
from test_stream_backup_restore import CHUNK, snapshot

from jetraft.config import config_from_text
from jetraft.events import EventLog
from jetraft.net.jetstream import snapshot as snapshots
from jetraft.server import Server

ACCOUNTS = """
accounts {
  SRC { users [ { user: src, password: src } ], jetstream: enabled }
  LIM { users [ { user: lim, password: lim } ], jetstream { max_streams: 2, max_file: 1MB } }
  LIM3 { users [ { user: lim3, password: lim3 } ], jetstream { max_file: 1MB } }
  $SYS { users [ { user: sys, password: sys } ] }
}
"""
NO_STORAGE = {"code": 500, "err_code": 10047, "description": "insufficient storage resources available"}
MAX_STREAMS = {"code": 400, "err_code": 10027, "description": "maximum number of streams reached"}
OK = ("end", None)
#: A message's payload: a backup of N of them holds about N * 10,000 bytes.
PAYLOAD = 10_000


async def api(nc, subject: str, body=None, *, timeout: float = 10.0) -> dict:
    """A JSON API request's answer, asked again for at most 30 s while a cluster has no leader
    for it (10008, or no answer yet) or its meta leader counts a server offline (10005 "peer
    offline": nats-server judges a peer by its last statsz, which a loaded machine delays)."""
    data = b"" if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + 30
    while True:
        try:
            reply = json.loads((await nc.request(subject, data, timeout=timeout)).data)
            error = reply.get("error") or {}
            if error.get("err_code") != 10008 and not (
                    error.get("err_code") == 10005 and "peer offline" in error.get("description", "")):
                return reply
        except Exception:  # noqa: BLE001 - no responders or a timeout while electing
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, f"{subject}: no leader, or a peer offline, after 30 s"
        await asyncio.sleep(0.2)


async def backups(nc, count: int, messages: int, first: int = 0) -> list[tuple[dict, bytes]]:
    """``count`` streams R<first>, R<first + 1>, ... of ``messages`` messages each (R1, file
    storage) in the connection's account, and a backup of each: (SNAPSHOT response, data)."""
    out = []
    for i in range(first, first + count):
        name = f"R{i}"
        created = await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"r{i}.>"]})
        assert "error" not in created, created
        for _ in range(messages):
            ack = json.loads((await heard(nc, f"r{i}.x", os.urandom(PAYLOAD))).data)
            assert "error" not in ack, ack
        resp, data, _status, _chunks = await snapshot(nc, name)
        assert "error" not in resp and resp["state"]["messages"] == messages, resp
        out.append((resp, data))
    return out


async def heard(nc, subject: str, data: bytes):
    """``nc.request(subject, data)``, sent again on no-responders for at most 10 s. A cluster
    may answer a stream's create or a restore's start before the interest on the stream's
    subjects (or the restore's deliver subject) has crossed the route to the client's server
    (nats-server subscribes on the stream's leader): no-responders means nobody received it."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return await nc.request(subject, data, timeout=10)
        except nats.errors.NoRespondersError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def restore_together(nc, restores: list[tuple[dict, dict, bytes]]) -> list[tuple[str, dict | None]]:
    """Start a restore of each (config, state, data), send their data a chunk of each in turn,
    then end them all at once (a restore left waiting for its end while another's end is
    processed would be stalled: nats-server gives up on a restore after 5 s without a
    chunk, jetstream_api.go activityInterval). Returns each one's outcome: (where it
    ended, its error or None)."""
    outcomes: list[tuple[str, dict | None] | None] = [None] * len(restores)
    delivers: list[str | None] = []
    for i, (config, state, _data) in enumerate(restores):
        started = await api(nc, f"$JS.API.STREAM.RESTORE.{config['name']}",
                            {"config": config, "state": state})
        if "error" in started:
            outcomes[i] = ("start", started["error"])
        delivers.append(started.get("deliver_subject") or None)
    longest = max(len(data) for _c, _s, data in restores)
    for offset in range(0, longest, CHUNK):
        for i, (_config, _state, data) in enumerate(restores):
            if outcomes[i] is not None or offset >= len(data):
                continue
            ack = await heard(nc, delivers[i], data[offset:offset + CHUNK])
            if ack.data:
                outcomes[i] = ("chunk", json.loads(ack.data).get("error"))
    ending = [i for i in range(len(restores)) if outcomes[i] is None]
    finals = await asyncio.gather(*(nc.request(delivers[i], b"", timeout=60) for i in ending))
    for i, final in zip(ending, finals):
        outcomes[i] = ("end", json.loads(final.data).get("error"))
    return outcomes


async def names(nc) -> list[str]:
    return sorted((await api(nc, "$JS.API.STREAM.NAMES")).get("streams") or [])


# ----------------------------------------------------------------------------- one server


def one_server(start_server, tmp_path):
    return start_server(ACCOUNTS + f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n')


def test_restores_started_together_past_max_file_are_refused_at_their_end(start_server, tmp_path):
    """Five restores of about 700 KB each, started together into an account of 1 MB and two
    streams: one ends with its stream, the four others with 10047. Which one is not the same
    from run to run on nats-server (its restores read their data in goroutines of their
    own); jetraft's is the first one ended."""
    server = one_server(start_server, tmp_path)

    async def scenario():
        src = await connect(server.url, user="src", password="src")
        lim = await connect(server.url, user="lim", password="lim")
        made = await backups(src, 5, 70)
        outcomes = await restore_together(lim, [(r["config"], r["state"], d) for r, d in made])
        assert sorted(outcomes, key=repr) == sorted([OK] + [("end", NO_STORAGE)] * 4, key=repr), outcomes
        info = await api(lim, "$JS.API.INFO")
        assert (info["streams"], info["storage"]) == (1, made[0][0]["state"]["bytes"]), info
        assert await names(lim) == [f"R{outcomes.index(OK)}"]
        await src.close()
        await lim.close()

    run(scenario, timeout=120)


def test_a_restore_into_an_account_the_previous_one_filled_is_refused_at_its_end(start_server, tmp_path):
    """One restore of about 700 KB, then another: the second is refused with 10047 once its
    data is in (jetraft used to answer 10062, the stream's bytes over what the account had
    left when it started)."""
    server = one_server(start_server, tmp_path)

    async def scenario():
        src = await connect(server.url, user="src", password="src")
        lim = await connect(server.url, user="lim", password="lim")
        made = await backups(src, 2, 70)
        first = await restore_together(lim, [(made[0][0]["config"], made[0][0]["state"], made[0][1])])
        second = await restore_together(lim, [(made[1][0]["config"], made[1][0]["state"], made[1][1])])
        assert (first, second) == ([OK], [("end", NO_STORAGE)])
        assert await names(lim) == ["R0"]
        # the refused restore left nothing: once the account has room it restores
        assert (await api(lim, "$JS.API.STREAM.DELETE.R0"))["success"] is True
        again = await restore_together(lim, [(made[1][0]["config"], made[1][0]["state"], made[1][1])])
        assert again == [OK] and await names(lim) == ["R1"]
        await src.close()
        await lim.close()

    run(scenario, timeout=120)


def test_restores_started_together_past_max_streams(start_server, tmp_path, server_kind):
    """Five restores of about 100 KB each (their bytes fit), started together into an account
    of two streams: nats-server 2.15.1 attaches all five, past the account's max_streams;
    jetraft attaches two and refuses the others with 10027 at their end."""
    server = one_server(start_server, tmp_path)

    async def scenario():
        src = await connect(server.url, user="src", password="src")
        lim = await connect(server.url, user="lim", password="lim")
        made = await backups(src, 5, 10)
        outcomes = await restore_together(lim, [(r["config"], r["state"], d) for r, d in made])
        if server_kind == "nats-server":
            assert outcomes == [OK] * 5, outcomes
            assert len(await names(lim)) == 5
        else:       # which two: as their ends are taken, all at once
            assert sorted(outcomes, key=repr) == sorted([OK, OK] + [("end", MAX_STREAMS)] * 3, key=repr), outcomes
            assert await names(lim) == sorted(f"R{i}" for i, o in enumerate(outcomes) if o == OK)
        # either way, no third stream is created now
        create = await api(lim, "$JS.API.STREAM.CREATE.X", {"name": "X", "subjects": ["x"]})
        assert create["error"] == MAX_STREAMS
        await src.close()
        await lim.close()

    run(scenario, timeout=120)


# ----------------------------------------------------------------------------- a cluster


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    """A formed three-server cluster of one kind; n1 has the tag ``pin`` (a stream placed
    there is restored there)."""
    with formed_cluster(request.param, "restorelimits", 3, jetstream=True, extra=ACCOUNTS,
                        tags=[["pin"], [], []], users=[("src", "src"), ("lim", "lim"), ("lim3", "lim3")]) as c:
        yield c


def test_a_cluster_holds_max_streams_from_the_start_and_max_file_at_install(cluster):
    """Five restores into the account of two streams and 1 MB, started together, their
    streams placed on one server: the meta leader counts the restores it assigned (the three
    last are refused at once with 10027); of the two assigned, one takes its 700 KB and
    the other is refused at its end with 10047. jetraft then deletes the refused
    stream (nats-server 2.15.1 leaves it, empty)."""
    async def scenario():
        src = await connect(cluster.servers["n1"].url, user="src", password="src")
        lim = await connect(cluster.servers["n2"].url, user="lim", password="lim")
        made = await backups(src, 5, 70)
        pinned = [(dict(r["config"], placement={"tags": ["pin"]}), r["state"], d) for r, d in made]
        outcomes = await restore_together(lim, pinned)
        assert outcomes[2:] == [("start", MAX_STREAMS)] * 3, outcomes
        assert sorted(outcomes[:2], key=repr) == sorted([OK, ("end", NO_STORAGE)], key=repr), outcomes
        restored = f"R{outcomes.index(OK)}"
        if cluster.kind == "jetraft":
            deadline = time.monotonic() + 30
            while (listed := await names(lim)) != [restored]:
                assert time.monotonic() < deadline, f"the refused restore's stream is still listed: {listed}"
                await asyncio.sleep(0.1)
        info = await api(lim, f"$JS.API.STREAM.INFO.{restored}")
        assert info["state"]["bytes"] == made[0][0]["state"]["bytes"], info
        await src.close()
        await lim.close()

    run(scenario, timeout=180)


def test_a_clustered_restore_counts_its_bytes_once_per_replica(cluster):
    """A backup of about 400 KB restored with three replicas into an account of 1 MB takes
    1.2 MB: refused at its end with 10047 (and deleted by jetraft)."""
    async def scenario():
        src = await connect(cluster.servers["n1"].url, user="src", password="src")
        lim = await connect(cluster.servers["n3"].url, user="lim3", password="lim3")
        created = await api(src, "$JS.API.STREAM.CREATE.T3", {"name": "T3", "subjects": ["t3.>"]})
        assert "error" not in created, created
        for _ in range(40):
            await heard(src, "t3.x", os.urandom(PAYLOAD))
        resp, data, _status, _chunks = await snapshot(src, "T3")
        outcome = await restore_together(lim, [(dict(resp["config"], num_replicas=3), resp["state"], data)])
        assert outcome == [("end", NO_STORAGE)], outcome
        if cluster.kind == "jetraft":
            deadline = time.monotonic() + 30
            while (listed := await names(lim)) != []:
                assert time.monotonic() < deadline, f"the refused restore's stream is still listed: {listed}"
                await asyncio.sleep(0.1)
        await src.close()
        await lim.close()

    run(scenario, timeout=180)


# ----------------------------------------------------------------------------- what a failed restore leaves


async def in_thread(url: str, user: str, scenario):
    """``await scenario(nc)`` with a nats-py connection as ``user`` in a worker thread (the
    in-process server runs on this thread's trio loop)."""
    async def main():
        nc = await nats.connect(url, user=user, password=user, allow_reconnect=False, connect_timeout=5)
        try:
            return await asyncio.wait_for(scenario(nc), 60)
        finally:
            await nc.close()
    return await trio.to_thread.run_sync(asyncio.run, main())


async def test_a_restore_refused_at_its_end_or_abandoned_leaves_nothing_counted(tmp_path, monkeypatch):
    """In an account of 1 MB and two streams, on an in-process server whose restores time out
    after 0.5 s without data: a restore abandoned after one chunk holds its name until it
    times out, then nothing; a restore refused at its end (10047: the account's bytes) holds
    neither a stream, nor bytes, nor its name, so that a create and a restore of that name
    succeed once the account has room."""
    monkeypatch.setattr(snapshots, "IDLE_TIMEOUT_S", 0.5)
    store = tmp_path / "store"
    text = "host: 127.0.0.1\nport: -1\n" + ACCOUNTS + f'jetstream {{ store_dir: "{store}" }}\n'
    server = Server(config_from_text(text), events=EventLog("n1", stream=io.StringIO()))
    spool = store / snapshots.SPOOL_DIR

    async def spool_empty() -> None:
        with trio.fail_after(10):
            while spool.exists() and any(spool.iterdir()):
                await trio.sleep(0.02)

    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        url = f"nats://127.0.0.1:{server.client_port}"

        async def make(nc):
            return await backups(nc, 1, 30) + await backups(nc, 1, 80, first=1)
        (small, small_data), (big, big_data) = await in_thread(url, "src", make)

        async def abandon(nc):
            request = {"config": small["config"], "state": small["state"]}
            started = await api(nc, "$JS.API.STREAM.RESTORE.R0", request)
            ack = await nc.request(started["deliver_subject"], small_data[:CHUNK], timeout=10)
            again = await api(nc, "$JS.API.STREAM.RESTORE.R0", request)
            return ack.data, again.get("error")
        ack, again = await in_thread(url, "lim", abandon)
        assert (ack, again["err_code"]) == (b"", 10130)     # its name is held while it runs
        await spool_empty()

        async def fill_then_refuse(nc):
            first = await restore_together(nc, [(small["config"], small["state"], small_data)])
            second = await restore_together(nc, [(big["config"], big["state"], big_data)])
            return first, second, await api(nc, "$JS.API.INFO"), await names(nc)
        first, second, info, listed = await in_thread(url, "lim", fill_then_refuse)
        assert (first, second, listed) == ([OK], [("end", NO_STORAGE)], ["R0"])
        assert (info["streams"], info["storage"]) == (1, small["state"]["bytes"])
        await spool_empty()

        async def room_then_again(nc):
            assert (await api(nc, "$JS.API.STREAM.DELETE.R0"))["success"] is True
            created = await api(nc, "$JS.API.STREAM.CREATE.R1", {"name": "R1", "subjects": ["r1.>"]})
            assert "error" not in created, created
            assert (await api(nc, "$JS.API.STREAM.DELETE.R1"))["success"] is True
            again = await restore_together(nc, [(big["config"], big["state"], big_data)])
            return again, await api(nc, "$JS.API.INFO")
        again, info = await in_thread(url, "lim", room_then_again)
        assert again == [OK]
        assert (info["streams"], info["storage"]) == (1, big["state"]["bytes"])
        server.shutdown()
