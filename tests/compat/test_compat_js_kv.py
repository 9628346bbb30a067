"""JetStream key-value buckets as unmodified nats-py sees them, against jetraft and nats-server.

nats-py builds KV on plain JetStream: a bucket ``B`` is the stream ``KV_B`` on
``$KV.B.>``; a put is a publish to ``$KV.B.<key>``; ``update``/``create`` add the header
``Nats-Expected-Last-Subject-Sequence``; a delete publishes an empty message with
``KV-Operation: DEL``, a purge one with ``KV-Operation: PURGE`` and ``Nats-Rollup: sub``;
``get`` is ``$JS.API.STREAM.MSG.GET.KV_B`` with ``{"last_by_subj": ...}`` (or ``{"seq": n}``
for a revision); ``history``/``keys``/``watch`` are ephemeral push consumers (flow control,
idle heartbeats, ``mem_storage``) followed by a ``CONSUMER.INFO``.
"""

from __future__ import annotations

import contextlib

import pytest
from compat_support import connect, run
from js_support import listed
from nats.js.api import StorageType
from nats.js.errors import (
    APIError,
    BadRequestError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)
from polling import apoll

NS = 1_000_000_000


def kv_config(tmp_path) -> str:
    """JetStream enabled, its store in the test's own directory."""
    return f'jetstream {{ store_dir: "{tmp_path / "kvstore"}" }}'


@contextlib.asynccontextmanager
async def bucket(url: str, name: str = "B", **params):
    """A connection, its JetStream context and a fresh bucket ``name`` (file storage)."""
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=5)
        params.setdefault("storage", StorageType.FILE)
        kv = await js.create_key_value(bucket=name, **params)
        yield js, kv
    finally:
        await nc.close()


def kv_test(start_server, tmp_path, body, **params):
    """Run ``body(js, kv)`` against a fresh bucket on a fresh JetStream server."""
    srv = start_server(kv_config(tmp_path))

    async def scenario():
        async with bucket(srv.url, **params) as (js, kv):
            await body(js, kv)

    run(scenario, timeout=30)


def test_create_bucket_maps_options_to_stream(start_server, tmp_path):
    """history/ttl/max_value_size become the KV_<bucket> stream's limits."""

    async def body(js, kv):
        status = await kv.status()
        assert status.bucket == "B"
        assert status.values == 0
        assert status.history == 5
        assert status.ttl == 60
        cfg = (await js.stream_info("KV_B")).config
        assert cfg.subjects == ["$KV.B.>"]
        assert cfg.max_msgs_per_subject == 5
        assert cfg.max_age == 60
        assert cfg.max_msg_size == 1024
        assert cfg.deny_delete is True
        assert cfg.allow_rollup_hdrs is True
        assert cfg.discard == "new"
        assert cfg.storage == StorageType.FILE

    kv_test(start_server, tmp_path, body, history=5, ttl=60, max_value_size=1024)


def test_put_get_and_revisions(start_server, tmp_path):
    """Each put returns the next revision; get returns the latest, or a given revision."""

    async def body(js, kv):
        assert await kv.put("k1", b"one") == 1
        assert await kv.put("k2", b"two") == 2
        assert await kv.put("k1", b"uno") == 3
        e = await kv.get("k1")
        assert (e.key, e.value, e.revision, e.bucket) == ("k1", b"uno", 3, "B")
        assert (await kv.get("k1", revision=1)).value == b"one"
        assert (await kv.get("k2")).value == b"two"
        with pytest.raises(KeyNotFoundError):
            await kv.get("k1", revision=2)  # revision 2 holds k2, not k1
        with pytest.raises(KeyNotFoundError):
            await kv.get("nope")
        assert (await kv.status()).values == 3

    kv_test(start_server, tmp_path, body, history=5)


def test_dotted_keys_and_empty_values(start_server, tmp_path):
    """Keys may contain dots (extra subject tokens); an empty value is a value."""

    async def body(js, kv):
        await kv.put("a.b.c", b"")
        await kv.put("a.b", b"ab")
        # nats-server leaves "data" out of an empty message's STREAM.MSG.GET reply, so
        # nats-py hands back None, not b"", for an empty value
        assert (await kv.get("a.b.c")).value is None
        assert (await kv.get("a.b")).value == b"ab"
        assert sorted(await listed(kv.keys)) == ["a.b", "a.b.c"]

    kv_test(start_server, tmp_path, body)


def test_update_with_last_revision(start_server, tmp_path):
    """update(last=current) succeeds; a stale revision raises KeyWrongLastSequenceError."""

    async def body(js, kv):
        r1 = await kv.put("k", b"v1")
        r2 = await kv.update("k", b"v2", last=r1)
        assert r2 == r1 + 1
        with pytest.raises(KeyWrongLastSequenceError) as exc:
            await kv.update("k", b"stale", last=r1)
        # nats-server: 400 / 10071 "wrong last sequence: 2"
        assert exc.value.description == "wrong last sequence: 2"
        e = await kv.get("k")
        assert (e.value, e.revision) == (b"v2", r2)
        # another key's writes do not move this key's revision
        await kv.put("other", b"x")
        assert await kv.update("k", b"v3", last=r2) == r2 + 2

    kv_test(start_server, tmp_path, body)


def test_create_only_when_absent(start_server, tmp_path):
    """create() of an existing key fails; after a delete the key can be created again."""

    async def body(js, kv):
        assert await kv.create("k", b"first") == 1
        with pytest.raises(KeyWrongLastSequenceError) as exc:
            await kv.create("k", b"second")
        assert exc.value.description == "wrong last sequence: 1"
        assert (await kv.get("k")).value == b"first"
        await kv.delete("k")
        # nats-py retries create() with last=<the delete marker's revision>
        assert await kv.create("k", b"again") == 3
        assert (await kv.get("k")).value == b"again"

    kv_test(start_server, tmp_path, body)


def test_delete_and_purge_hide_the_key(start_server, tmp_path):
    """After delete or purge, get raises KeyNotFoundError carrying the marker's operation."""

    async def body(js, kv):
        await kv.put("d", b"1")
        await kv.put("p", b"1")
        await kv.put("p", b"2")
        assert await kv.delete("d") is True
        assert await kv.purge("p") is True
        with pytest.raises(KeyNotFoundError) as exc:
            await kv.get("d")
        assert exc.value.op == "DEL"
        with pytest.raises(KeyNotFoundError) as exc:
            await kv.get("p")
        assert exc.value.op == "PURGE"
        # the purge rolled up every earlier value of "p": only its marker is left
        hist = await listed(lambda: kv.history("p"))
        assert [(e.operation, e.value) for e in hist] == [("PURGE", b"")]
        # the delete keeps history: the value, then the marker
        hist = await listed(lambda: kv.history("d"))
        assert [(e.operation, e.value) for e in hist] == [(None, b"1"), ("DEL", b"")]
        with pytest.raises(NoKeysError):
            await kv.keys()
        state = (await js.stream_info("KV_B")).state
        assert (state.messages, state.last_seq) == (3, 5)

    kv_test(start_server, tmp_path, body, history=10)


def test_delete_with_last_revision(start_server, tmp_path):
    """delete(last=n) is conditional, like update."""

    async def body(js, kv):
        r = await kv.put("k", b"v")
        await kv.put("k", b"w")
        # nats-py maps the wrong-last-sequence error to KeyWrongLastSequenceError only in
        # update/create; delete(last=) raises the plain BadRequestError
        with pytest.raises(BadRequestError) as exc:
            await kv.delete("k", last=r)
        assert (exc.value.err_code, exc.value.description) == (10071, "wrong last sequence: 2")
        assert (await kv.get("k")).value == b"w"
        assert await kv.delete("k", last=r + 1) is True
        with pytest.raises(KeyNotFoundError):
            await kv.get("k")

    kv_test(start_server, tmp_path, body)


def test_history_is_bounded_by_bucket_history(start_server, tmp_path):
    """history() returns the last `history` values of a key, oldest first."""

    async def body(js, kv):
        for i in range(6):
            await kv.put("k", f"v{i}".encode())
            await kv.put("other", f"o{i}".encode())
        hist = await listed(lambda: kv.history("k"))
        assert [e.value for e in hist] == [b"v3", b"v4", b"v5"]
        assert [e.revision for e in hist] == [7, 9, 11]
        assert all(e.key == "k" and e.operation is None for e in hist)
        # delta: the values still to come after each entry
        assert [e.delta for e in hist] == [2, 1, 0]
        with pytest.raises(NoKeysError):
            await kv.history("never")
        assert (await kv.status()).values == 6

    kv_test(start_server, tmp_path, body, history=3)


def test_keys_lists_live_keys(start_server, tmp_path):
    """keys() lists each live key once; an empty bucket raises NoKeysError."""

    async def body(js, kv):
        with pytest.raises(NoKeysError):
            await kv.keys()
        for key in ["x", "y", "z", "x", "y"]:
            await kv.put(key, b"v")
        await kv.delete("z")
        assert sorted(await listed(kv.keys)) == ["x", "y"]

    kv_test(start_server, tmp_path, body, history=5)


def test_watchall_initial_values_then_live_updates(start_server, tmp_path):
    """watchall: the last value of each key, a None marker, then live puts and a delete."""

    async def body(js, kv):
        await kv.put("a", b"a1")
        await kv.put("b", b"b1")
        await kv.put("a", b"a2")
        w = await kv.watchall()
        try:
            initial = [await w.updates(timeout=5) for _ in range(3)]
            if initial[0] is None:
                # nats-py's early marker (see js_support.listed): the same three, None first
                initial = [*initial[1:], None]
            assert [(e.key, e.value, e.revision) for e in initial[:2]] == [("b", b"b1", 2), ("a", b"a2", 3)]
            assert initial[2] is None
            await kv.put("c", b"c1")
            await kv.delete("a")
            e = await w.updates(timeout=5)
            assert (e.key, e.value, e.revision, e.operation) == ("c", b"c1", 4, None)
            e = await w.updates(timeout=5)
            assert (e.key, e.value, e.revision, e.operation) == ("a", b"", 5, "DEL")
            await kv.purge("b")
            e = await w.updates(timeout=5)
            assert (e.key, e.revision, e.operation) == ("b", 6, "PURGE")
        finally:
            await w.stop()

    kv_test(start_server, tmp_path, body, history=5)


def test_watch_on_empty_bucket_and_filtered(start_server, tmp_path):
    """A watch on an empty bucket yields None first; a key filter sees only its keys."""

    async def body(js, kv):
        w = await kv.watch("job.*")
        try:
            assert await w.updates(timeout=5) is None
            await kv.put("other", b"o")
            await kv.put("job.1", b"j1")
            e = await w.updates(timeout=5)
            assert (e.key, e.value, e.revision) == ("job.1", b"j1", 2)
        finally:
            await w.stop()

    kv_test(start_server, tmp_path, body)


def test_value_above_max_value_size_is_refused(start_server, tmp_path):
    """A value above max_value_size is refused by the server and not stored."""

    async def body(js, kv):
        await kv.put("k", b"x" * 64)
        with pytest.raises(APIError) as exc:
            await kv.put("k", b"x" * 65)
        # nats-server: 400 / 10054 "message size exceeds maximum allowed"
        assert (exc.value.code, exc.value.err_code) == (400, 10054)
        assert exc.value.description == "message size exceeds maximum allowed"
        e = await kv.get("k")
        assert (e.value, e.revision) == (b"x" * 64, 1)

    kv_test(start_server, tmp_path, body, max_value_size=64)


def test_ttl_expires_values(start_server, tmp_path):
    """With a bucket ttl a value disappears once it is older than the ttl."""

    async def body(js, kv):
        await kv.put("k", b"short-lived")
        assert (await kv.get("k")).value == b"short-lived"

        async def gone():
            try:
                await kv.get("k")
            except KeyNotFoundError:
                return True
            return False

        await apoll(gone, "the value to expire", 10, retry_on=())
        assert (await kv.status()).values == 0

    kv_test(start_server, tmp_path, body, ttl=1)


def test_status_counts_values_and_bytes(start_server, tmp_path):
    """status() reflects the stream: values, bytes, history, ttl, bucket name."""

    async def body(js, kv):
        for i in range(4):
            await kv.put(f"k{i}", b"v" * 10)
        status = await kv.status()
        assert status.values == 4
        # nats-server counts each message as 22 + subject + data + 8 bytes
        assert status.stream_info.state.bytes == 4 * (22 + len("$KV.B.k0") + 10 + 8)
        assert (status.history, status.ttl) == (1, 0.0)  # no ttl: max_age 0
        assert status.bucket == "B"

    kv_test(start_server, tmp_path, body)


def test_bucket_lookup_listing_and_delete(start_server, tmp_path):
    """key_value() binds an existing bucket; buckets list as KV_ streams; delete removes one."""
    srv = start_server(kv_config(tmp_path))

    async def scenario():
        async with bucket(srv.url, "one") as (js, one):
            await js.create_key_value(bucket="two", storage=StorageType.FILE)
            await one.put("k", b"v")
            bound = await js.key_value("one")
            assert (await bound.get("k")).value == b"v"
            names = sorted(si.config.name for si in await js.streams_info())
            assert names == ["KV_one", "KV_two"]
            assert await js.delete_key_value("two") is True
            with pytest.raises(BucketNotFoundError):
                await js.key_value("two")
            names = [si.config.name for si in await js.streams_info()]
            assert names == ["KV_one"]
            # nats-py maps a missing stream to NotFoundError (404 / 10059) in delete too
            with pytest.raises(APIError) as exc:
                await js.delete_key_value("two")
            assert (exc.value.code, exc.value.err_code) == (404, 10059)
            assert exc.value.description == "stream not found"

    run(scenario, timeout=30)


def test_recreate_bucket_same_and_different_config(start_server, tmp_path):
    """Creating an existing bucket with the same options is a no-op; other options fail."""
    srv = start_server(kv_config(tmp_path))

    async def scenario():
        async with bucket(srv.url, "B", history=2) as (js, kv):
            await kv.put("k", b"v")
            again = await js.create_key_value(bucket="B", history=2, storage=StorageType.FILE)
            assert (await again.get("k")).value == b"v"
            with pytest.raises(BadRequestError) as exc:
                await js.create_key_value(bucket="B", history=3, storage=StorageType.FILE)
            # nats-server: 400 / 10058 "stream name already in use with a different configuration"
            assert exc.value.err_code == 10058
            assert exc.value.description == "stream name already in use with a different configuration"
            assert (await kv.status()).history == 2

    run(scenario, timeout=30)


def test_watch_with_history_and_ignore_deletes(start_server, tmp_path):
    """include_history replays every kept revision; ignore_deletes hides the markers."""

    async def body(js, kv):
        await kv.put("a", b"1")
        await kv.put("a", b"2")
        await kv.put("b", b"1")
        await kv.delete("b")
        w = await kv.watchall(include_history=True)
        try:
            seen = [await w.updates(timeout=5) for _ in range(5)]
            assert [(e.key, e.revision, e.operation) for e in seen[:4]] == [
                ("a", 1, None), ("a", 2, None), ("b", 3, None), ("b", 4, "DEL")]
            assert seen[4] is None
        finally:
            await w.stop()
        w = await kv.watchall(ignore_deletes=True)
        try:
            e = await w.updates(timeout=5)
            assert (e.key, e.value, e.revision) == ("a", b"2", 2)
            assert await w.updates(timeout=5) is None
        finally:
            await w.stop()

    kv_test(start_server, tmp_path, body, history=5)


def test_purge_deletes_removes_markers(start_server, tmp_path):
    """purge_deletes(olderthan=0) purges each deleted key's subject (STREAM.PURGE with a
    filter): the markers and the values behind them go, live keys stay."""

    async def body(js, kv):
        await kv.put("live", b"v")
        await kv.put("dead", b"v1")
        await kv.put("dead", b"v2")
        await kv.delete("dead")
        assert await kv.purge_deletes(olderthan=0) is True
        # nats-server may answer the purge before its stream info shows it (seen under load)
        async def purged():
            si = await js.stream_info("KV_B")
            assert si.state.messages == 1, si.state
            return si
        state = await apoll(purged, "the purge shows in stream info", 10, retry_on=(AssertionError,))
        assert (state.state.messages, state.state.last_seq) == (1, 4)
        with pytest.raises(NoKeysError):
            await kv.history("dead")
        assert await listed(kv.keys) == ["live"]

    kv_test(start_server, tmp_path, body, history=5)
