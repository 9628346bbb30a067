"""Mirrors and sources (nats-server 2.10), side by side on jetraft and nats-server 2.15.1
with raw ``$JS.API`` requests and nats-py: the same stored messages (sequences, subjects,
payloads, the ``Nats-Stream-Source`` header of a sourced message), the same ``mirror`` /
``sources`` blocks in STREAM.INFO, the same config echo (``mirror_direct`` taken from the
origin) and the same refusals, word for word.

Differences, asserted: a mirror or source with ``external`` is refused by jetraft (10052,
"... is not supported by jetraft"). Workqueue and interest origins and the ``consumer``
block: tests/compat/test_compat_js_durable_sourcing.py.
"""

from __future__ import annotations

import base64
import json

from nats.errors import NoRespondersError
from compat_support import run
from js_support import across_restarts, across_step_down_and_sigkill, asked_again, js_session, stream_leader
from polling import apoll

from jetraft import gofmt
from jetraft.jetstream.sourcing import stream_identity
from jetraft.protocol import headers as hdr

INVALID = 10052


def error(code: int, err_code: int, description: str) -> dict:
    return {"code": code, "err_code": err_code, "description": description}


async def stored(s, stream: str) -> list[tuple[int, str, bytes, dict[str, str]]]:
    """Every message of ``stream`` as (seq, subject, payload, headers), by STREAM.MSG.GET."""
    info = await s.api(f"$JS.API.STREAM.INFO.{stream}")
    out = []
    for seq in range(info["state"]["first_seq"], info["state"]["last_seq"] + 1):
        got = await s.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "error" in got:
            continue
        msg = got["message"]
        raw = base64.b64decode(msg.get("hdrs", "")) if msg.get("hdrs") else b""
        headers = {k: v[0] for k, v in hdr.parse(raw).fields.items()} if raw else {}
        out.append((msg["seq"], msg["subject"], base64.b64decode(msg.get("data", "")), headers))
    return out


async def caught_up(s, stream: str, messages: int, block: str = "mirror") -> dict:
    """STREAM.INFO of ``stream`` once it holds ``messages`` and its links show no lag."""
    async def check():
        info = await s.api(f"$JS.API.STREAM.INFO.{stream}")
        links = [info[block]] if block == "mirror" else info.get(block, [])
        ok = info["state"]["messages"] == messages and links and all(x["lag"] == 0 for x in links)
        return info if ok else None
    return await apoll(check, f"{stream} holds {messages} messages", timeout=20)


def test_a_mirror_holds_the_origins_messages_at_their_sequences(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            origin = await s.api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"],
                                                             "allow_direct": True})
            assert "error" not in origin, origin
            for i in range(6):
                await s.js.publish(f"o.{i % 3}", f"m{i}".encode(), headers={"K": str(i)})
            assert (await s.api("$JS.API.STREAM.MSG.DELETE.O", {"seq": 3}))["success"]
            created = await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
            assert "error" not in created, created
            assert created["config"]["mirror"] == {"name": "O"}
            assert created["config"]["mirror_direct"] is True       # the origin's allow_direct
            assert "subjects" not in created["config"]
            info = await caught_up(s, "M", 5)
            assert set(info["mirror"]) == {"name", "lag", "active"} and info["mirror"]["name"] == "O"
            assert info["mirror"]["active"] >= 0
            assert (info["state"]["first_seq"], info["state"]["last_seq"]) == (1, 6)
            assert await stored(s, "M") == await stored(s, "O")
            await s.js.publish("o.9", b"later")
            await caught_up(s, "M", 6)
            assert (await stored(s, "M"))[-1][:3] == (7, "o.9", b"later")
            # a mirror takes no publishes of its own (it has no subjects) and refuses a
            # changed mirror; removing the mirror promotes it (nats-server 2.12)
            changed = await s.api("$JS.API.STREAM.UPDATE.M", {"name": "M", "mirror": {"name": "O",
                                                                                    "filter_subject": "o.1"}})
            assert changed["error"] == error(400, 10055, "stream mirror configuration can not be updated")
            promoted = await s.api("$JS.API.STREAM.UPDATE.M", {"name": "M", "subjects": ["m.>"]})
            assert "error" not in promoted and "mirror" not in promoted["config"], promoted
            assert (await s.js.publish("m.x", b"own", stream="M")).seq == 8
    run(scenario)


def test_a_filtered_and_transformed_mirror_starts_where_asked(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
            for i in range(8):
                await s.js.publish(f"o.{'a' if i % 2 else 'b'}.{i}", f"m{i}".encode())
            created = await s.api("$JS.API.STREAM.CREATE.M", {
                "name": "M", "mirror": {"name": "O", "opt_start_seq": 3,
                                        "subject_transforms": [{"src": "o.a.*", "dest": "mirrored.{{wildcard(1)}}"}]}})
            assert "error" not in created, created
            info = await caught_up(s, "M", 3)
            assert info["mirror"]["subject_transforms"] == [{"src": "o.a.*", "dest": "mirrored.{{wildcard(1)}}"}]
            got = [(seq, subject, data) for seq, subject, data, _ in await stored(s, "M")]
            assert got == [(4, "mirrored.3", b"m3"), (6, "mirrored.5", b"m5"), (8, "mirrored.7", b"m7")]
            # a source from a time (RFC 3339, as clients send it): the messages stored from then
            middle = (await s.api("$JS.API.STREAM.MSG.GET.O", {"seq": 6}))["message"]["time"]
            timed = await s.api("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["t"],
                                                            "sources": [{"name": "O", "opt_start_time": middle}]})
            assert "error" not in timed, timed
            await caught_up(s, "T", 3, "sources")
            assert [d for _, _, d, _ in await stored(s, "T")] == [b"m5", b"m6", b"m7"]
    run(scenario)


def test_sources_merge_origins_with_their_source_header(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            for name in ("A", "B"):
                await s.api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"]})
            await s.js.publish("a.x", b"a1")
            await s.js.publish("b.y", b"b1", headers={"Nats-Msg-Id": "same"})
            await s.js.publish("a.z", b"a2")
            await s.js.publish("b.y", b"b2", headers={"Nats-Msg-Id": "same"})   # deduped by B itself
            created = await s.api("$JS.API.STREAM.CREATE.S", {
                "name": "S", "subjects": ["s.>"],
                "sources": [{"name": "A", "filter_subject": "a.x"},
                            {"name": "B", "subject_transforms": [{"src": "b.>", "dest": "from-b.>"}]}]})
            assert "error" not in created, created
            info = await caught_up(s, "S", 2, "sources")
            by_name = {x["name"]: x for x in info["sources"]}      # nats-server's order is a map's
            assert sorted(by_name) == ["A", "B"]
            assert by_name["A"]["filter_subject"] == "a.x"
            assert by_name["B"]["subject_transforms"] == [{"src": "b.>", "dest": "from-b.>"}]
            got = {(subject, data): h for _, subject, data, h in await stored(s, "S")}
            assert set(got) == {("a.x", b"a1"), ("from-b.y", b"b1")}
            ident = {name: stream_identity(gofmt.parse_time((await s.api(f"$JS.API.STREAM.INFO.{name}"))["created"]))
                     for name in ("A", "B")}
            assert got[("a.x", b"a1")]["Nats-Stream-Source"] == f"A 1 a.x > a.x {ident['A']}"
            assert got[("from-b.y", b"b1")]["Nats-Stream-Source"] == f"B 1 b.> from-b.> b.y {ident['B']}"
            assert got[("from-b.y", b"b1")]["Nats-Msg-Id"] == "same"
            # its own subjects too
            assert (await s.js.publish("s.own", b"own")).seq == 3
            await s.js.publish("a.x", b"a3")
            await caught_up(s, "S", 4, "sources")
            # a removed source stops; one added starts from the start of its origin
            await s.api("$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"],
                                                    "sources": [{"name": "A", "filter_subject": "a.z"}]})
            await caught_up(s, "S", 5, "sources")
            subjects = [subject for _, subject, _, _ in await stored(s, "S")]
            assert subjects[-1] == "a.z"
    run(scenario)


def test_a_source_created_before_its_origin_starts_when_the_origin_comes(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            created = await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"],
                                                              "sources": [{"name": "LATER"}]})
            assert "error" not in created, created
            await s.api("$JS.API.STREAM.CREATE.LATER", {"name": "LATER", "subjects": ["later"]})
            await s.js.publish("later", b"hello")
            await caught_up(s, "S", 1, "sources")
            # the origin deleted and created again: its messages are taken from its start
            # (nats-server issue 6206), the source header naming the new identity
            await s.api("$JS.API.STREAM.DELETE.LATER")
            await s.api("$JS.API.STREAM.CREATE.LATER", {"name": "LATER", "subjects": ["later"]})
            await s.js.publish("later", b"again")
            await caught_up(s, "S", 2, "sources")
            last = (await stored(s, "S"))[-1]
            created = (await s.api("$JS.API.STREAM.INFO.LATER"))["created"]
            assert last[2] == b"again"
            assert last[3]["Nats-Stream-Source"] == f"LATER 1 > > later {stream_identity(gofmt.parse_time(created))}"
    run(scenario)


def test_mirror_and_source_refusals_are_nats_servers(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"], "max_msg_size": 100})
            cases = [
                ({"name": "M", "subjects": ["x"], "mirror": {"name": "O"}},
                 error(400, 10034, "stream mirrors can not contain subjects")),
                ({"name": "M", "first_seq": 5, "mirror": {"name": "O"}},
                 error(400, 10143, "stream mirrors can not have first sequence configured")),
                ({"name": "M", "mirror": {"name": "O"}, "sources": [{"name": "P"}]},
                 error(400, 10031, "stream mirrors can not also contain other sources")),
                ({"name": "M", "mirror": {"name": "O", "filter_subject": "o.a",
                                          "subject_transforms": [{"src": "o.b", "dest": "x"}]}},
                 error(400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter")),
                ({"name": "M", "mirror": {"name": "O", "subject_transforms": [{"src": "o.*", "dest": "x"},
                                                                            {"src": "o.a", "dest": "y"}]}},
                 error(400, 10152, "mirror subject filters can not overlap")),
                ({"name": "M", "mirror": {"name": "bad.name"}},
                 error(400, 10142, "mirrored stream name is invalid")),
                ({"name": "M", "max_msg_size": 10, "mirror": {"name": "O"}},
                 error(400, 10030, "stream mirror must have max message size >= source")),
                ({"name": "S", "subjects": ["s"], "sources": [{"name": "O"}, {"name": "O"}]},
                 error(400, 10140, "duplicate source configuration detected")),
                ({"name": "S", "subjects": ["s"], "sources": [{"name": "a b"}]},
                 error(400, 10141, "sourced stream name is invalid")),
                ({"name": "S", "subjects": ["s"], "max_msg_size": 10, "sources": [{"name": "O"}]},
                 error(400, 10046, "stream source must have max message size >= target")),
                ({"name": "S", "subjects": ["s"], "sources": [{"name": "O", "subject_transforms": [
                    {"src": "o.>", "dest": "x.>"}, {"src": "o.a", "dest": "y"}]}]},
                 error(400, 10147, "source filters can not overlap")),
                ({"name": "S", "subjects": ["s"], "sources": [{"name": "O", "subject_transforms": [
                    {"src": "o.*", "dest": "{{wildcard(2)}}"}]}]},
                 None),
            ]
            for config, expected in cases:
                got = await s.api(f"$JS.API.STREAM.CREATE.{config['name']}", config)
                if expected is None:
                    assert got["error"]["err_code"] == 10146, got
                    continue
                assert got.get("error") == expected, (config, got)
            # a cycle: O sources C, C sources O
            await s.api("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c"], "sources": [{"name": "O"}]})
            cycle = await s.api("$JS.API.STREAM.UPDATE.O", {"name": "O", "subjects": ["o.>"], "max_msg_size": 100,
                                                            "sources": [{"name": "C"}]})
            assert cycle.get("error") == error(500, INVALID, "detected cycle"), cycle
            # what jetraft does not do yet, refused by name
            external = await s.api("$JS.API.STREAM.CREATE.X", {"name": "X", "mirror": {
                "name": "O", "external": {"api": "$JS.other.API", "deliver": ""}}})
            if js_server.kind == "jetraft":
                assert external.get("error") == error(500, INVALID, "mirror external is not supported by jetraft")
            else:
                assert "error" not in external, external
    run(scenario)


def test_replicated_mirrors_and_sources_keep_every_message_once_across_step_down_and_sigkill(formed_cluster,
                                                                                             server_kind):
    """Three servers: an R3 origin with an R3 mirror and an R3 stream sourcing it, and an R1
    origin on one server mirrored by an R1 stream on another (the fetch travels between
    them). Publishes go on through a step-down of the mirror's and the source's leaders and
    a SIGKILL of the R3 mirror's leader (then to the R3 origin only: the R1 streams may be on
    the killed server): the mirrors hold the origins' messages at their sequences, the
    source each message exactly once; the killed server, started again, all of them."""
    tags = [["n:0"], ["n:1"], ["n:2"]]
    with formed_cluster(server_kind, "mirrors", 3, jetstream=True, tags=tags) as c:
        acked: dict[str, list[int]] = {"o.x": [], "p.x": []}

        async def publish(s, k: int, phase: str) -> None:
            for subject in ("o.x",) if phase == "after" else ("o.x", "p.x"):
                await asked_again(lambda subject=subject: s.js.publish(subject, str(k).encode(),
                                                                        headers={"Nats-Msg-Id": f"{subject}{k}"}),
                                  f"message {k} acknowledged")
                acked[subject].append(k)

        async def holds(s, name: str, n: int) -> dict:
            async def check():
                got = await asked_again(lambda: s.api(f"$JS.API.STREAM.INFO.{name}"), f"{name} info")
                return got if got.get("state", {}).get("messages") == n else None
            return await apoll(check, f"{name} holds {n}", timeout=60)

        async def check(s, phase: str) -> None:
            for name in ("M",) if phase == "after" else ("M", "PM"):
                keys = acked["o.x" if name == "M" else "p.x"]
                got = await holds(s, name, len(keys))
                assert got["state"]["last_seq"] == len(keys), got["state"]
                assert [(q, d) for q, _, d, _ in await stored(s, name)] == [(k + 1, str(k).encode()) for k in keys]
            await holds(s, "S", len(acked["o.x"]))
            assert sorted(int(d) for _, _, d, _ in await stored(s, "S")) == sorted(acked["o.x"])

        across_step_down_and_sigkill(
            c, [{"name": "O", "subjects": ["o.>"], "num_replicas": 3},
                {"name": "P", "subjects": ["p.>"], "placement": {"tags": ["n:0"]}},
                {"name": "M", "mirror": {"name": "O"}, "num_replicas": 3},
                {"name": "PM", "mirror": {"name": "P"}, "placement": {"tags": ["n:1"]}},
                {"name": "S", "subjects": ["s"], "sources": [{"name": "O"}], "num_replicas": 3}],
            ("M", "S"), "M", publish, check, timeout=180)


def test_sources_and_a_mirror_take_nothing_twice_across_a_restart(tmp_path, server_kind):
    """File streams: a mirror and a stream with a source, the server stopped and started
    again over the same store, the origin published to meanwhile: each holds every
    message once, the source's position read back from its headers."""
    async def before(url):
        async with js_session(url) as s:
            await s.api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o"]})
            await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
            await s.api("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s"], "sources": [{"name": "O"}]})
            for i in range(5):
                await s.js.publish("o", f"m{i}".encode())
            await caught_up(s, "M", 5)
            await caught_up(s, "S", 5, "sources")

    async def after(url):
        async with js_session(url) as s:
            for i in range(5, 8):
                await s.js.publish("o", f"m{i}".encode())
            await caught_up(s, "M", 8)
            await caught_up(s, "S", 8, "sources")
            assert [d for _, _, d, _ in await stored(s, "S")] == [f"m{i}".encode() for i in range(8)]
            assert [(q, d) for q, _, d, _ in await stored(s, "M")] == [(i + 1, f"m{i}".encode()) for i in range(8)]

    across_restarts(server_kind, tmp_path, before, after)


async def direct_get(s, stream: str, seq: int) -> tuple[str, str, bytes] | None:
    """(Nats-Stream, Nats-Sequence, payload) of ``$JS.API.DIRECT.GET.<stream>`` for ``seq``;
    None when nothing answers (no responders)."""
    try:
        msg = await s.nc.request(f"$JS.API.DIRECT.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=5)
    except NoRespondersError:
        return None
    return msg.headers.get("Nats-Stream"), msg.headers.get("Nats-Sequence"), msg.data


def test_a_caught_up_mirror_answers_its_origins_direct_gets_where_the_origin_is_not(js_server):
    """mirror_direct (nats-server subscribeToMirrorDirect): a mirror without allow_direct
    answers no direct get of its own, but once caught up it answers its origin's, as
    itself (nats-server picks the origin or the mirror at random; jetraft on one server
    the origin while it exists)."""
    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"], "allow_direct": True})
            for i in range(3):
                await s.js.publish(f"o.{i}", f"m{i}".encode())
            created = await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
            assert created["config"]["mirror_direct"] is True and created["config"]["allow_direct"] is False
            await caught_up(s, "M", 3)
            assert await direct_get(s, "M", 2) is None
            # the origin and its mirror share nats-server's queue group: either may answer
            got = await direct_get(s, "O", 2)
            assert got is not None and got[0] in ("O", "M") and got[1:] == ("2", b"m1"), got
            assert (await s.api("$JS.API.STREAM.DELETE.O"))["success"] is True
            assert await apoll(lambda: direct_get(s, "O", 2), "the mirror answers") == ("M", "2", b"m1")
    run(scenario)


def test_a_mirror_answers_its_origins_direct_gets_on_its_own_server_in_a_cluster(formed_cluster, server_kind):
    """Three servers: origin O (R1, allow_direct) on one, its mirror M (R1) on another: a
    client of the mirror's server has its direct gets of O answered by M."""
    tags = [["n:0"], ["n:1"], ["n:2"]]
    with formed_cluster(server_kind, "mdirect", 3, jetstream=True, tags=tags) as c:
        async def scenario():
            async with js_session(c.servers[list(c.servers)[0]].url) as s:
                for body in ({"name": "O", "subjects": ["o.>"], "allow_direct": True, "placement": {"tags": ["n:0"]}},
                             {"name": "M", "mirror": {"name": "O"}, "placement": {"tags": ["n:1"]}}):
                    created = await asked_again(lambda body=body: s.api(f"$JS.API.STREAM.CREATE.{body['name']}", body),
                                                f"{body['name']} created")
                    assert "error" not in created, created
                for i in range(3):
                    await asked_again(lambda i=i: s.js.publish(f"o.{i}", f"m{i}".encode(),
                                                               headers={"Nats-Msg-Id": str(i)}), "published")
                mirror_server = await stream_leader(s, "M")
            async with js_session(c.servers[mirror_server].url) as s:
                await caught_up(s, "M", 3)

                async def answered_by_mirror():
                    got = await direct_get(s, "O", 2)
                    return got if got is not None and got[0] == "M" else None
                assert await apoll(answered_by_mirror, "M answers O's direct get", timeout=30) == ("M", "2", b"m1")
        run(scenario, timeout=120)
