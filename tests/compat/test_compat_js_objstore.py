"""JetStream object stores as unmodified nats-py sees them, against jetraft and nats-server.

nats-py keeps a bucket ``O`` in the stream ``OBJ_O`` (subjects ``$O.O.C.>`` for chunks,
``$O.O.M.>`` for metadata, ``allow_rollup_hdrs``, ``allow_direct``, ``discard: new``).
A put publishes the chunks to ``$O.O.C.<nuid>``, then the JSON ObjectInfo to
``$O.O.M.<base64url(name)>`` with ``Nats-Rollup: sub``, then purges the previous
version's chunks (``STREAM.PURGE`` with ``{"filter": ...}``).  A get reads the metadata
(``STREAM.MSG.GET`` ``{"last_by_subj": ...}``), asks ``STREAM.NAMES`` ``{"subject": ...}``
for the chunk subject's stream, and reads the chunks through an ordered push consumer,
checking the SHA-256 digest.  A list is an ordered consumer over ``$O.O.M.>`` with
``deliver_policy: last_per_subject``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io

import pytest
from compat_support import connect, run
from nats.js.api import ObjectMeta, ObjectMetaOptions, StorageType
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError, ObjectNotFoundError


def payload(size: int, seed: int = 0) -> bytes:
    """``size`` bytes that differ per offset and per seed (a misplaced chunk shows)."""
    block = hashlib.sha256(f"seed {seed}".encode()).digest()
    out = bytearray()
    i = 0
    while len(out) < size:
        out += hashlib.sha256(block + i.to_bytes(8, "little")).digest()
        i += 1
    return bytes(out[:size])


def digest_of(data: bytes) -> str:
    """The digest string nats-py stores in ObjectInfo."""
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


def chunked(name: str, chunk_size: int) -> ObjectMeta:
    return ObjectMeta(name=name, options=ObjectMetaOptions(max_chunk_size=chunk_size))


@contextlib.asynccontextmanager
async def object_store(url: str, bucket: str = "O"):
    """A connection, its JetStream context and a fresh object store (file storage)."""
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=5)
        obs = await js.create_object_store(bucket=bucket, storage=StorageType.FILE)
        yield js, obs
    finally:
        await nc.close()


def obs_test(start_server, tmp_path, body):
    """Run ``body(js, obs)`` against a fresh object store on a fresh JetStream server."""
    srv = start_server(f'jetstream {{ store_dir: "{tmp_path / "objstore"}" }}')

    async def scenario():
        async with object_store(srv.url) as (js, obs):
            await body(js, obs)

    run(scenario, timeout=30)


def test_create_object_store_stream(start_server, tmp_path):
    """create_object_store makes the OBJ_<bucket> stream with nats-py's settings."""

    async def body(js, obs):
        cfg = (await js.stream_info("OBJ_O")).config
        assert cfg.subjects == ["$O.O.C.>", "$O.O.M.>"]
        assert cfg.allow_rollup_hdrs is True
        assert cfg.allow_direct is True
        assert cfg.discard == "new"
        assert cfg.storage == StorageType.FILE
        # nats-py sends "max_consumers": 0; nats-server stores it as -1 (unlimited)
        assert cfg.max_consumers == -1
        status = await obs.status()
        assert status.bucket == "O"
        assert status.stream_info.state.messages == 0

    obs_test(start_server, tmp_path, body)


def test_put_and_get_small_object(start_server, tmp_path):
    """A few KiB in one chunk: info carries size, chunks, digest; get returns the bytes."""
    data = payload(5000)

    async def body(js, obs):
        info = await obs.put("small.bin", data)
        assert (info.name, info.bucket, info.size, info.chunks) == ("small.bin", "O", 5000, 1)
        assert info.digest == digest_of(data)
        got = await obs.get("small.bin")
        assert got.data == data
        assert (got.info.size, got.info.chunks, got.info.digest) == (5000, 1, digest_of(data))
        state = (await js.stream_info("OBJ_O")).state
        assert (state.messages, state.last_seq) == (2, 2)  # one chunk, one meta

    obs_test(start_server, tmp_path, body)


def test_put_and_get_chunked_object(start_server, tmp_path):
    """About 300 KiB in 8 KiB chunks comes back byte for byte."""
    data = payload(300 * 1024 + 123, seed=1)
    chunks = -(-len(data) // 8192)

    async def body(js, obs):
        info = await obs.put("big", data, meta=chunked("big", 8192))
        assert (info.size, info.chunks) == (len(data), chunks)
        got = await obs.get("big")
        assert len(got.data) == len(data)
        assert got.data == data
        assert got.info.options.max_chunk_size == 8192
        state = (await js.stream_info("OBJ_O")).state
        assert state.messages == chunks + 1
        assert state.bytes > len(data)

    obs_test(start_server, tmp_path, body)


def test_get_into_a_writer(start_server, tmp_path):
    """get(writeinto=...) streams the chunks into a file-like object."""
    data = payload(20_000, seed=2)

    async def body(js, obs):
        await obs.put("w", data, meta=chunked("w", 4096))
        sink = io.BytesIO()
        await obs.get("w", writeinto=sink)
        assert sink.getvalue() == data

    obs_test(start_server, tmp_path, body)


def test_empty_object(start_server, tmp_path):
    """An empty object has size 0, no chunks, and reads back empty."""

    async def body(js, obs):
        info = await obs.put("empty", b"")
        assert (info.size, info.chunks) == (0, 0)
        got = await obs.get("empty")
        assert got.data == b""
        assert (await js.stream_info("OBJ_O")).state.messages == 1

    obs_test(start_server, tmp_path, body)


def test_info_and_list(start_server, tmp_path):
    """get_info describes one object; list() describes every object in the bucket."""
    objects = {"a": payload(100, 3), "b/c.txt": payload(3000, 4), "ünï": payload(10, 5)}

    async def body(js, obs):
        with pytest.raises(NotFoundError):
            await obs.list()  # nats-py: an empty bucket lists as NotFoundError
        for name, data in objects.items():
            await obs.put(name, data, meta=ObjectMeta(name=name, description=f"about {name}",
                                                      options=ObjectMetaOptions(max_chunk_size=1024)))
        info = await obs.get_info("b/c.txt")
        assert (info.name, info.size, info.chunks, info.description) == ("b/c.txt", 3000, 3,
                                                                         "about b/c.txt")
        assert info.digest == digest_of(objects["b/c.txt"])
        listed = {i.name: (i.size, i.digest) for i in await obs.list()}
        assert listed == {n: (len(d), digest_of(d)) for n, d in objects.items()}

    obs_test(start_server, tmp_path, body)


def test_replace_object_purges_old_chunks(start_server, tmp_path):
    """Putting a name again serves the new bytes and purges the old version's chunks."""
    old, new = payload(10_000, 6), payload(2500, 7)

    async def body(js, obs):
        first = await obs.put("doc", old, meta=chunked("doc", 1000))
        second = await obs.put("doc", new, meta=chunked("doc", 1000))
        assert first.nuid != second.nuid
        assert (await obs.get("doc")).data == new
        state = (await js.stream_info("OBJ_O")).state
        # 3 new chunks + the latest meta (the rollup removed the first meta)
        assert state.messages == 4
        assert state.last_seq == 10 + 1 + 3 + 1

    obs_test(start_server, tmp_path, body)


def test_delete_object(start_server, tmp_path):
    """After delete, get and get_info raise ObjectNotFoundError; the chunks are purged."""
    data = payload(4096, 8)

    async def body(js, obs):
        await obs.put("gone", data, meta=chunked("gone", 1024))
        await obs.put("kept", b"kept")
        await obs.delete("gone")
        with pytest.raises(ObjectNotFoundError):
            await obs.get("gone")
        with pytest.raises(ObjectNotFoundError):
            await obs.get_info("gone")
        tomb = await obs.get_info("gone", show_deleted=True)
        assert (tomb.deleted, tomb.size, tomb.chunks) == (True, 0, 0)
        assert [i.name for i in await obs.list(ignore_deletes=True)] == ["kept"]
        assert (await obs.get("kept")).data == b"kept"
        state = (await js.stream_info("OBJ_O")).state
        assert state.messages == 3  # kept's chunk and meta, gone's delete marker

    obs_test(start_server, tmp_path, body)


def test_missing_object(start_server, tmp_path):
    """get/get_info/delete of a name never stored raise ObjectNotFoundError."""

    async def body(js, obs):
        await obs.put("present", b"x")
        for call in (obs.get, obs.get_info, obs.delete):
            with pytest.raises(ObjectNotFoundError):
                await call("absent")
        assert (await obs.get("present")).data == b"x"

    obs_test(start_server, tmp_path, body)


def test_object_store_lookup_and_delete(start_server, tmp_path):
    """object_store() binds an existing bucket; delete_object_store removes the stream."""
    srv = start_server(f'jetstream {{ store_dir: "{tmp_path / "objstore"}" }}')

    async def scenario():
        async with object_store(srv.url, "files") as (js, obs):
            await obs.put("f", b"content")
            bound = await js.object_store("files")
            assert (await bound.get("f")).data == b"content"
            assert await js.delete_object_store("files") is True
            with pytest.raises(BucketNotFoundError):
                await js.object_store("files")
            assert [s.config.name for s in await js.streams_info()] == []

    run(scenario, timeout=30)


def test_update_meta_changes_description(start_server, tmp_path):
    """update_meta rewrites the metadata (rolled up: one meta message) and keeps the bytes."""
    data = payload(3000, 9)

    async def body(js, obs):
        await obs.put("doc", data, meta=ObjectMeta(name="doc", description="v1",
                                                   options=ObjectMetaOptions(max_chunk_size=1024)))
        await obs.update_meta("doc", ObjectMeta(name="doc", description="v2"))
        info = await obs.get_info("doc")
        assert (info.description, info.size, info.chunks) == ("v2", 3000, 3)
        assert (await obs.get("doc")).data == data
        state = (await js.stream_info("OBJ_O")).state
        assert (state.messages, state.last_seq) == (4, 5)

    obs_test(start_server, tmp_path, body)


def test_sealed_store_refuses_writes(start_server, tmp_path):
    """seal() (a STREAM.UPDATE with sealed: true) keeps reads working and refuses puts."""

    async def body(js, obs):
        await obs.put("a", b"before seal")
        await obs.seal()
        assert (await obs.status()).sealed is True
        with pytest.raises(APIError) as exc:
            await obs.put("b", b"after seal")
        # nats-server: 400 / 10109 "invalid operation on sealed stream"
        assert (exc.value.code, exc.value.err_code) == (400, 10109)
        assert exc.value.description == "invalid operation on sealed stream"
        assert (await obs.get("a")).data == b"before seal"
        assert [i.name for i in await obs.list()] == ["a"]

    obs_test(start_server, tmp_path, body)
