"""Streams that store under another subject or send their messages on: ``first_seq``,
``subject_transform`` (with nats-server's mapping functions) and ``republish``, side by side
on jetraft and nats-server 2.15.1 with raw ``$JS.API`` requests and nats-py: the same
replies, the same stored subjects and sequences, the same republished messages and headers.

The subjects each transform stores are those jetraft's transform engine
(``jetraft.protocol.transform``) computes: on nats-server this checks the engine against the
real one (partition hashes included). One difference, asserted: an update that changes
``first_seq`` is refused by jetraft (nats-server takes it and acts on it only when its file
store next starts, purging every message below it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import servers
from compat_support import round_trip, run, take
from js_support import asked_again, js_session

from jetraft import gofmt
from jetraft.protocol.transform import SubjectTransform

INVALID = 10052


def error(code: int, err_code: int, description: str) -> dict:
    return {"code": code, "err_code": err_code, "description": description}


def headers_of(msg) -> dict[str, str]:
    return dict(msg.headers or {})


# --------------------------------------------------------------------------- first_seq


@contextlib.contextmanager
def serving(kind: str, workdir: Path, store: Path) -> Iterator[servers.RunningServer]:
    """A server of ``kind`` with JetStream over ``store``, stopped on the way out (a test
    that restarts a server starts another over the same store)."""
    server = servers.start_server(kind, workdir, servers.js_config(store), name=kind)
    try:
        yield server
    finally:
        server.stop()


def test_a_stream_created_with_first_seq_starts_there_and_keeps_it_across_a_restart(tmp_path, server_kind):
    store = tmp_path / "store"

    async def create():
        async with js_session(first.url) as s:
            created = await s.api("$JS.API.STREAM.CREATE.FS", {"name": "FS", "subjects": ["fs"], "first_seq": 100})
            assert "error" not in created, created
            st = created["state"]
            assert (st["messages"], st["first_seq"], st["last_seq"]) == (0, 100, 99)
            assert st["first_ts"] == "0001-01-01T00:00:00Z"
            memory = await s.api("$JS.API.STREAM.CREATE.FM", {"name": "FM", "subjects": ["fm"], "storage": "memory",
                                                              "first_seq": 7})
            assert (memory["state"]["first_seq"], memory["state"]["last_seq"]) == (7, 6), memory
            assert (await s.js.publish("fs", b"one")).seq == 100
            assert (await s.js.publish("fm", b"one")).seq == 7
            # a changed first_seq: nats-server takes it (and acts on it at its next start);
            # jetraft refuses it
            changed = await s.api("$JS.API.STREAM.UPDATE.FS", {"name": "FS", "subjects": ["fs"], "first_seq": 500})
            if server_kind == "jetraft":
                assert changed.get("error") == error(500, INVALID, "stream configuration update can not change "
                                                                   "first sequence"), changed
            else:
                assert changed["config"]["first_seq"] == 500, changed
                back = await s.api("$JS.API.STREAM.UPDATE.FS", {"name": "FS", "subjects": ["fs"], "first_seq": 100})
                assert "error" not in back, back
            same = await s.api("$JS.API.STREAM.UPDATE.FS", {"name": "FS", "subjects": ["fs"], "first_seq": 100,
                                                            "description": "kept"})
            assert same["config"]["first_seq"] == 100 and "error" not in same, same
            empty = await s.api("$JS.API.STREAM.CREATE.E", {"name": "E", "subjects": ["e"], "first_seq": 42})
            assert "error" not in empty, empty

    with serving(server_kind, tmp_path / "first", store) as first:
        run(create)

    async def after():
        async with js_session(again.url) as s:
            info = await s.api("$JS.API.STREAM.INFO.FS")
            st = info["state"]
            assert (st["messages"], st["first_seq"], st["last_seq"]) == (1, 100, 100), info
            assert (await s.js.publish("fs", b"two")).seq == 101
            st = (await s.api("$JS.API.STREAM.INFO.E"))["state"]       # empty, its first_seq kept
            assert (st["messages"], st["first_seq"], st["last_seq"]) == (0, 42, 41), st
            assert (await s.js.publish("e", b"x")).seq == 42

    with serving(server_kind, tmp_path / "again", store) as again:
        run(after)


# --------------------------------------------------------------------------- subject_transform

TRANSFORMS = [
    # (source, destination, subjects published)
    ("st.*.*", "tr.{{wildcard(2)}}.{{wildcard(1)}}", ["st.a.b", "st.x.y"]),
    ("st.*.*", "tr.{{partition(7,1,2)}}.{{wildcard(1)}}.{{wildcard(2)}}",
     ["st.a.b", "st.east.1", "st.west.22", "st.ü.9"]),
    ("st.>", "tr.{{partition(10)}}.>", ["st.a", "st.a.b.c", "st.orders.42"]),
    ("st.*", "tr.{{SplitFromLeft(1,2)}}.{{splitfromright(1,1)}}", ["st.abcd", "st.a"]),
    ("st.*", "tr.{{left(1,2)}}.{{Right(1,3)}}", ["st.abcdef", "st.ab"]),
    ("st.*", "tr.{{sliceFromLeft(1,3)}}.x.{{ sliceFromRight( 1 , 2 ) }}", ["st.1234567", "st.12"]),
    ("st.*", "tr.{{split(1,-)}}", ["st.a-b--c-", "st.--a", "st.plain"]),
    ("st.*.>", "tr.$1.>", ["st.a.b", "st.q.r.s"]),
    ("", "tr.>", ["st.any.thing"]),
]


def test_a_subject_transform_stores_what_nats_server_stores(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            for i, (src, dest, published) in enumerate(TRANSFORMS):
                name = f"T{i}"
                body = {"name": name, "subjects": ["st.>"], "subject_transform": {"src": src, "dest": dest}}
                created = await s.api(f"$JS.API.STREAM.CREATE.{name}", body)
                assert "error" not in created, (body, created)
                assert created["config"]["subject_transform"] == {"src": src, "dest": dest}
                engine = SubjectTransform.parse(src, dest)
                for subject in published:
                    ack = await s.js.publish(subject, subject.encode())
                    got = await s.api(f"$JS.API.STREAM.MSG.GET.{name}", {"seq": ack.seq})
                    assert got["message"]["subject"] == engine.match(subject), (src, dest, subject, got)
                deleted = await s.api(f"$JS.API.STREAM.DELETE.{name}")
                assert deleted.get("success"), deleted
            # a subject the source does not take is stored as published
            body = {"name": "P", "subjects": ["p.>"], "subject_transform": {"src": "p.a.*", "dest": "q.$1"}}
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.P", body)
            for subject, stored in (("p.a.b", "q.b"), ("p.z", "p.z")):
                ack = await s.js.publish(subject, b"x")
                got = await s.api("$JS.API.STREAM.MSG.GET.P", {"seq": ack.seq})
                assert got["message"]["subject"] == stored

    run(scenario)


BAD_TRANSFORMS = [
    # (transform, nats-server's error)
    ({"src": "st.*", "dest": "tr.{{upper(1)}}"},
     error(400, 10156, "stream transform: invalid mapping destination: unknown function in {{upper(1)}}")),
    ({"src": "st.*", "dest": "tr.{{wildcard(2)}}"},
     error(400, 10156, "stream transform: invalid mapping destination: wildcard index out of range in "
                       "{{wildcard(2)}}: [2]")),
    ({"src": "st.*", "dest": "tr.{{wildcard()}}"},
     error(400, 10156, "stream transform: invalid mapping destination: not enough arguments passed to the "
                       "function in {{wildcard()}}")),
    ({"src": "st.*", "dest": "tr.{{split(1,a b)}}"},
     error(400, 10156, "stream transform: invalid mapping destination: function argument is invalid or in "
                       "the wrong format in {{split(1,a b)}}")),
    ({"src": "st.*", "dest": "tr.*"}, error(400, 10156, "stream transform: invalid subject")),
    ({"src": "st.>", "dest": "tr.x"}, error(400, 10156, "stream transform: invalid subject")),
    ({"src": "st..x", "dest": "tr"}, error(400, 10155, "stream transform source: invalid subject st..x")),
    ({"src": "st.*", "dest": "tr.>.x"},
     error(400, 10156, "stream transform: invalid mapping destination: invalid transform in x")),
    ({"src": "st", "dest": "tr.{{wildcard(1)}}"},
     error(400, 10156, "stream transform: invalid mapping destination: wildcard index out of range in "
                       "{{wildcard(1)}}")),
]


def test_a_subject_transform_nats_server_refuses_is_refused_in_its_words(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            for transform, expected in BAD_TRANSFORMS:
                body = {"name": "BAD", "subjects": ["st.>"], "subject_transform": transform}
                reply = await s.api("$JS.API.STREAM.CREATE.BAD", body)
                assert reply.get("error") == expected, (transform, reply)
            names = await s.api("$JS.API.STREAM.NAMES")
            assert not names.get("streams"), names

    run(scenario)


# --------------------------------------------------------------------------- republish


def test_republish_sends_each_stored_message_on_with_its_headers(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            sub = await s.nc.subscribe("out.>")
            body = {"name": "RP", "subjects": ["rp.>"], "republish": {"src": "rp.>", "dest": "out.>"}}
            created = await s.api("$JS.API.STREAM.CREATE.RP", body)
            assert created["config"]["republish"] == {"src": "rp.>", "dest": "out.>"}, created
            acks = [await s.js.publish("rp.a", b"one"),
                    await s.js.publish("rp.b", b"two", headers={"Custom": "kept"}),
                    await s.js.publish("rp.a", b"three")]
            await round_trip(s.nc)
            got = await take(sub)
            assert [m.subject for m in got] == ["out.a", "out.b", "out.a"]     # rp.> taken, out.> given
            assert [m.data for m in got] == [b"one", b"two", b"three"]
            for msg, ack, subject, last in zip(got, acks, ["rp.a", "rp.b", "rp.a"], [0, 0, 1]):
                h = headers_of(msg)
                assert (h["Nats-Stream"], h["Nats-Subject"], h["Nats-Sequence"], h["Nats-Last-Sequence"]) == (
                    "RP", subject, str(ack.seq), str(last)), h
                stored = await s.api("$JS.API.STREAM.MSG.GET.RP", {"seq": ack.seq})
                assert gofmt.parse_time(h["Nats-Time-Stamp"]) == gofmt.parse_time(stored["message"]["time"])
            assert headers_of(got[1])["Custom"] == "kept"

            # headers only: the size of the payload, no payload
            body = {"name": "HO", "subjects": ["ho.*"],
                    "republish": {"src": "ho.*", "dest": "meta.{{wildcard(1)}}", "headers_only": True}}
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.HO", body)
            meta = await s.nc.subscribe("meta.*")
            await s.js.publish("ho.x", b"12345")
            await round_trip(s.nc)
            (msg,) = await take(meta)
            assert (msg.subject, msg.data, headers_of(msg)["Nats-Msg-Size"]) == ("meta.x", b"", "5")

            # a duplicate is not republished again; a subject outside src is not republished
            body = {"name": "DD", "subjects": ["dd.>"], "republish": {"src": "dd.yes", "dest": "copy.dd"}}
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.DD", body)
            copies = await s.nc.subscribe("copy.>")
            await s.js.publish("dd.yes", b"a", headers={"Nats-Msg-Id": "1"})
            dup = await s.js.publish("dd.yes", b"a", headers={"Nats-Msg-Id": "1"})
            await s.js.publish("dd.no", b"b")
            await round_trip(s.nc)
            assert dup.duplicate and [m.data for m in await take(copies)] == [b"a"]

    run(scenario)


def test_republish_with_a_subject_transform_and_its_refusals(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            # ">" to ">" with the stream's one subject transformed: what is stored is republished
            sub = await s.nc.subscribe("new.>")
            body = {"name": "IM", "subjects": ["old.>"], "subject_transform": {"src": "old.>", "dest": "new.>"},
                    "republish": {"src": ">", "dest": ">"}}
            created = await s.api("$JS.API.STREAM.CREATE.IM", body)
            assert created["config"]["republish"] == {"src": "new.>", "dest": "new.>"}, created
            await s.js.publish("old.a", b"x")
            await round_trip(s.nc)
            (msg,) = await take(sub)
            assert (msg.subject, headers_of(msg)["Nats-Subject"]) == ("new.a", "new.a")
            for republish, expected in (
                    ({"src": "c.>", "dest": "c.x.>"},
                     error(500, INVALID, "stream configuration for republish destination forms a cycle")),
                    ({"src": "c.*", "dest": "d.{{wildcard(3)}}"},
                     error(500, INVALID, "stream configuration for republish with transform from 'c.*' to "
                                         "'d.{{wildcard(3)}}' not valid"))):
                reply = await s.api("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"],
                                                                "republish": republish})
                assert reply.get("error") == expected, (republish, reply)
            pedantic = await s.api("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"], "pedantic": True,
                                                               "republish": {"dest": "out.>"}})
            assert pedantic.get("error") == error(400, 10157, "pedantic mode: republish source can not be empty")

    run(scenario)


def test_republish_is_sent_once_by_the_leader_of_a_replicated_stream(formed_cluster, server_kind):
    """An R3 stream with republish and a subject transform on three servers: every
    acknowledged message is republished exactly once, across a leader step-down, by jetraft
    (nats-server: at most once, see below)."""
    with formed_cluster(server_kind, "republish", 3, jetstream=True) as c:
        async def scenario():
            urls = [s.url for s in c.servers.values()]
            async with js_session(urls[0]) as s, js_session(urls[2]) as watcher:
                sub = await watcher.nc.subscribe("out.>")
                await round_trip(watcher.nc)
                body = {"name": "R3", "subjects": ["in.>"], "num_replicas": 3,
                        "subject_transform": {"src": "in.*", "dest": "in.{{partition(4,1)}}.{{wildcard(1)}}"},
                        "republish": {"src": "in.>", "dest": "out.>"}}
                created = await asked_again(lambda: s.api("$JS.API.STREAM.CREATE.R3", body), "R3 created")
                assert "error" not in created, created
                acked: dict[int, str] = {}

                async def publish(k: int) -> None:
                    subject = f"in.k{k}"
                    for _ in range(50):
                        try:
                            ack = await s.js.publish(subject, str(k).encode(), headers={"Nats-Msg-Id": str(k)})
                            acked[ack.seq] = subject
                            return
                        except Exception:       # no leader for a moment: asked again
                            await asyncio.sleep(0.1)
                    raise AssertionError(f"message {k} never acknowledged")

                for k in range(20):
                    await publish(k)
                stepped = await asked_again(lambda: s.api("$JS.API.STREAM.LEADER.STEPDOWN.R3"), "step-down")
                assert stepped.get("success"), stepped
                for k in range(20, 40):
                    await publish(k)
                engine = SubjectTransform.parse("in.*", "in.{{partition(4,1)}}.{{wildcard(1)}}")
                deadline = asyncio.get_running_loop().time() + 20
                got: list = []
                while len(got) < len(acked) and asyncio.get_running_loop().time() < deadline:
                    try:
                        got.append(await sub.next_msg(timeout=1))
                    except Exception:
                        pass
                seqs = [int(headers_of(m)["Nats-Sequence"]) for m in got]
                assert len(set(seqs)) == len(seqs), "a message was republished twice"
                if server_kind == "jetraft":
                    assert sorted(seqs) == sorted(acked), (len(seqs), len(acked))
                else:
                    # nats-server's new leader republished none of the messages acked after
                    # the step-down once, on a loaded machine (20 of 40 seen): at most once
                    assert set(seqs) <= set(acked), (len(seqs), len(acked))
                for m in got:
                    subject = acked[int(headers_of(m)["Nats-Sequence"])]
                    assert m.subject == "out." + engine.match(subject).removeprefix("in.")

        run(scenario, timeout=120)


def test_a_replicated_stream_keeps_its_first_seq_and_stored_subjects_across_a_leader_sigkill(formed_cluster,
                                                                                            server_kind):
    """An R3 stream with ``first_seq`` and a subject transform: its leader SIGKILLed half-way
    through the publishes; the new leader holds every acknowledged message at its sequence
    under its transformed subject, and the killed server, started again, has the same."""
    transform = {"src": "sk.*.*", "dest": "sk.{{wildcard(2)}}.{{partition(3,1)}}.{{wildcard(1)}}"}
    engine = SubjectTransform.parse(transform["src"], transform["dest"])
    with formed_cluster(server_kind, "sigkill", 3, jetstream=True) as c:
        names = list(c.servers)

        async def stream_info(s, name: str) -> dict:
            return await asked_again(lambda: s.api(f"$JS.API.STREAM.INFO.{name}"), "stream info")

        async def publish(s, k: int, acked: dict[int, str]) -> None:
            subject = f"sk.z{k % 4}.{k}"
            ack = await asked_again(lambda: s.js.publish(subject, str(k).encode(), headers={"Nats-Msg-Id": str(k)}),
                                    f"message {k} acknowledged")
            acked[ack.seq] = subject

        async def before() -> tuple[str, dict[int, str]]:
            async with js_session(c.servers[names[0]].url) as s:
                body = {"name": "SK", "subjects": ["sk.>"], "num_replicas": 3, "first_seq": 1000,
                        "subject_transform": transform}
                created = await asked_again(lambda: s.api("$JS.API.STREAM.CREATE.SK", body), "SK created")
                assert "error" not in created, created
                acked: dict[int, str] = {}
                for k in range(10):
                    await publish(s, k, acked)
                leader = (await stream_info(s, "SK"))["cluster"]["leader"]
                return leader, acked

        leader, acked = run(before, timeout=120)
        c.kill(leader)
        survivor = next(n for n in names if n != leader)

        async def after() -> None:
            async with js_session(c.servers[survivor].url) as s:
                for k in range(10, 20):
                    await publish(s, k, acked)
                await check(s)

        async def check(s) -> None:
            assert sorted(acked) == list(range(1000, 1020))
            st = (await stream_info(s, "SK"))["state"]
            assert (st["messages"], st["first_seq"], st["last_seq"]) == (20, 1000, 1019), st
            for seq, subject in acked.items():
                got = await asked_again(lambda: s.api("$JS.API.STREAM.MSG.GET.SK", {"seq": seq}), "message")
                assert got["message"]["subject"] == engine.match(subject), (seq, got)

        run(after, timeout=120)
        c.restart(leader)

        async def rejoined() -> None:
            async with js_session(c.servers[leader].url) as s:
                deadline = asyncio.get_running_loop().time() + 60
                while True:       # the restarted server's replica catches up
                    info = await stream_info(s, "SK")
                    replicas = {r["name"]: r for r in info["cluster"].get("replicas", [])}
                    if info["cluster"].get("leader") and (leader == info["cluster"]["leader"] or (
                            replicas.get(leader, {}).get("current") and replicas[leader].get("lag", 0) == 0)):
                        break
                    assert asyncio.get_running_loop().time() < deadline, info
                    await asyncio.sleep(0.2)
                await check(s)

        run(rejoined, timeout=120)
