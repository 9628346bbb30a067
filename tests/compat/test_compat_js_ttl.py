"""Per-message TTL (nats-server 2.11, ADR-43), side by side on jetraft and nats-server 2.15.1:
a stream with ``allow_msg_ttl`` stores a message with a ``Nats-TTL`` header and removes it
once its TTL passed (nats-server memstore.go/filestore.go expireMsgs and its time hash
wheel); ``never`` outlives the stream's ``max_age``; the setting cannot be turned off; a
file stream's TTLs survive a restart; on three servers every replica removes the same
messages across a leader step-down and a SIGKILL. Timings are what a user sees: a message
with a 1 s TTL is gone within a few seconds (polled to a deadline, never slept on).
"""

from __future__ import annotations

import base64
import json

from compat_support import run
from js_support import across_restarts, across_step_down_and_sigkill, asked_again, js_session
from polling import apoll

NOT_FOUND = {"code": 404, "err_code": 10037, "description": "no message found"}


async def publish(s, subject: str, data: bytes, ttl: str | None = None, **headers) -> dict:
    if ttl is not None:
        headers["Nats-TTL"] = ttl
    msg = await s.nc.request(subject, data, timeout=5, headers=headers or None)
    return json.loads(msg.data)


async def kept(s, stream: str) -> list[tuple[int, bytes]]:
    """(seq, payload) of every message ``stream`` holds now."""
    state = (await s.api(f"$JS.API.STREAM.INFO.{stream}"))["state"]
    out = []
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        got = await s.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in got:
            out.append((seq, base64.b64decode(got["message"].get("data", ""))))
    return out


async def holds(s, stream: str, want: list[tuple[int, bytes]], timeout: float = 8.0) -> None:
    async def check():
        return await kept(s, stream) == want
    await apoll(check, f"{stream} holds {want}", timeout=timeout)


def test_a_message_goes_when_its_ttl_passes_and_never_outlives_max_age(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            created = await s.api("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"],
                                                              "allow_msg_ttl": True})
            assert "error" not in created and created["config"]["allow_msg_ttl"] is True, created
            assert await publish(s, "t.a", b"one-second", "1s") == {"stream": "T", "seq": 1}
            assert await publish(s, "t.b", b"an-hour", "3600") == {"stream": "T", "seq": 2}
            assert await publish(s, "t.c", b"plain") == {"stream": "T", "seq": 3}
            assert await publish(s, "t.d", b"never", "never") == {"stream": "T", "seq": 4}
            assert len(await kept(s, "T")) == 4
            await holds(s, "T", [(2, b"an-hour"), (3, b"plain"), (4, b"never")])
            gone = await s.api("$JS.API.STREAM.MSG.GET.T", {"seq": 1})
            assert gone["error"] == NOT_FOUND

            # max_age takes every message but one whose TTL is never
            await s.api("$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["a.>"], "allow_msg_ttl": True,
                                                    "max_age": 1_000_000_000})
            await publish(s, "a.x", b"aged")
            await publish(s, "a.y", b"kept", "never")
            await publish(s, "a.z", b"longer", "1h")
            await holds(s, "A", [(2, b"kept")])

            # the setting cannot be turned off once on
            off = await s.api("$JS.API.STREAM.UPDATE.T", {"name": "T", "subjects": ["t.>"]})
            assert off["error"] == {"code": 500, "err_code": 10052,
                                    "description": "message TTL status can not be disabled"}, off
    run(scenario)


def test_ttls_of_a_file_stream_survive_a_restart(tmp_path, server_kind):
    async def before(url):
        async with js_session(url) as s:
            await s.api("$JS.API.STREAM.CREATE.R", {"name": "R", "subjects": ["r.>"], "allow_msg_ttl": True})
            assert (await publish(s, "r.a", b"short", "2s"))["seq"] == 1
            assert (await publish(s, "r.b", b"long", "1h"))["seq"] == 2

    async def after(url):
        async with js_session(url) as s:
            await holds(s, "R", [(2, b"long")], timeout=10)

    across_restarts(server_kind, tmp_path, before, after)


def test_replicas_remove_the_same_messages_across_step_down_and_sigkill(formed_cluster, server_kind):
    """Three servers, an R3 stream with allow_msg_ttl: every second message carries a 2 s
    TTL. Through a step-down and a SIGKILL of its leader, the messages without a TTL stay
    and those with one go, on every server (the killed one, started again, too)."""
    with formed_cluster(server_kind, "ttl", 3, jetstream=True) as c:
        plain: list[bytes] = []

        async def publish_one(s, k: int, _phase: str) -> None:
            ttl = "2s" if k % 2 else None
            headers = {"Nats-Msg-Id": f"m{k}", **({"Nats-TTL": ttl} if ttl else {})}
            await asked_again(lambda: s.js.publish("e.x", str(k).encode(), headers=headers), f"message {k}")
            if not ttl:
                plain.append(str(k).encode())

        async def check(s, _phase: str) -> None:
            async def only_plain():
                got = await asked_again(lambda: kept(s, "E"), "E's messages")
                return sorted(d for _, d in got) == sorted(plain)
            await apoll(only_plain, "E holds only the messages without a TTL", timeout=20)

        across_step_down_and_sigkill(
            c, [{"name": "E", "subjects": ["e.>"], "allow_msg_ttl": True, "num_replicas": 3}],
            ("E",), "E", publish_one, check)


def test_a_key_created_with_a_ttl_and_a_purge_marker_with_one_go_as_nats_py_uses_them(js_server):
    """ADR-48 as nats.py 2.16 uses it: ``kv.create(key, value, msg_ttl=...)`` and
    ``kv.purge(key, msg_ttl=...)`` publish with a Nats-TTL on a bucket whose stream allows
    it; the key, then the purge marker, are gone once their TTL passed."""
    async def scenario():
        async with js_session(js_server.url) as s:
            kv = await s.js.create_key_value(bucket="B", history=2)
            info = await s.api("$JS.API.STREAM.INFO.KV_B")
            assert info["config"]["allow_msg_ttl"] is True, info["config"]
            assert await kv.create("short", b"v", msg_ttl=1) == 1
            assert await kv.create("long", b"w", msg_ttl=3600) == 2
            await kv.purge("long", msg_ttl=1)       # a purge marker that goes in its turn

            async def gone():
                return [seq for seq, _ in await kept(s, "KV_B")] == []
            await apoll(gone, "the key and the purge marker expired", timeout=10)
            assert await kv.create("short", b"again") == 4    # created again: the old one went
    run(scenario)


def test_the_last_message_of_a_subject_that_expires_leaves_a_marker(js_server):
    """subject_delete_marker_ttl (nats-server memstore.go handleRemovalOrSdm): when its TTL
    passes, a subject's last message is replaced by a marker (no payload, Nats-Marker-Reason
    MaxAge, the marker TTL, a subject rollup) that expires in its turn; a message that is
    not its subject's last goes without one."""
    async def scenario():
        async with js_session(js_server.url) as s:
            created = await s.api("$JS.API.STREAM.CREATE.K", {"name": "K", "subjects": ["k.>"],
                                                              "subject_delete_marker_ttl": 2_000_000_000})
            config = created["config"]
            assert (config["allow_msg_ttl"], config["allow_rollup_hdrs"]) == (True, True), config
            await publish(s, "k.a", b"first", "1s")       # not k.a's last: goes without a marker
            await publish(s, "k.a", b"second", "1h")
            await publish(s, "k.b", b"lonely", "1s")      # k.b's last: a marker replaces it

            async def marked():
                state = (await s.api("$JS.API.STREAM.INFO.K"))["state"]
                if state["last_seq"] != 4:
                    return None
                got = await s.api("$JS.API.STREAM.MSG.GET.K", {"seq": 4})
                return got.get("message")
            marker = await apoll(marked, "a marker stored at seq 4", timeout=10)
            assert marker["subject"] == "k.b" and not marker.get("data"), marker
            assert base64.b64decode(marker["hdrs"]) == (
                b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 2s\r\nNats-Rollup: sub\r\n\r\n")
            # the marker expires in its turn; k.a's second message stays
            await holds(s, "K", [(2, b"second")], timeout=10)
    run(scenario)
