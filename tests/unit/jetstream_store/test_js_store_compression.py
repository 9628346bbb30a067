"""FileStore with ``compression: s2``: sealed blocks compressed on disk (store_compress.py).

What a compressed store must keep: the same messages, sizes and answers as a plain one
(side by side with a plain store fed the same operations), the same plain bytes for
catch-up (``manifest``/``read_block``), every record's checksums (a flipped bit is
reported and never served), acknowledged messages through a crash at any point of a
compression, and bounded reads (a message decompresses only the chunks it lies in).
"""

from __future__ import annotations

import errno
import json
import os
import random
import zlib

import pytest
from js_store_helpers import CrashFS, Faults, blocks, flip_bit, open_file_store, snapshot

from jetraft.jetstream import store_compress as pack
from jetraft.jetstream import store_format as fmt
from jetraft.jetstream.catchup import StreamSnapshot, align_store
from jetraft.jetstream.store import CorruptMessage, MemoryStore
from jetraft.storage import fileio

BLOCK = 64 << 10


def payload(i: int) -> bytes:
    """A compressible message: a JSON reading, as a sensor or an order would send."""
    return json.dumps({"id": i, "sensor": f"sensor-{i % 17}", "reading": i * 0.25,
                       "status": "ok", "note": "nominal " * (1 + i % 4)}).encode()


def populate(fs, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        fs.store(f"s.{i % 5}", b"NATS/1.0\r\nK: v\r\n\r\n" if i % 3 == 0 else None, payload(i),
                 1_000 + i)


def packed_names(path) -> list[str]:
    out = []
    for name in blocks(path):
        with open(os.path.join(path, name), "rb") as f:
            if pack.is_packed(f.read(8)):
                out.append(name)
    return out


def disk_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in blocks(path))


def test_sealed_blocks_are_compressed_and_the_store_answers_as_a_plain_one(tmp_path):
    plain = open_file_store(tmp_path / "plain", block_bytes=BLOCK)
    comp = open_file_store(tmp_path / "s2", block_bytes=BLOCK, compression="s2")
    for fs in (plain, comp):
        populate(fs, 3000)
        fs.remove(10)
        fs.purge("s.1", seq=200)
        fs.sync()
    names = blocks(tmp_path / "s2")
    assert len(names) > 4 and names == blocks(tmp_path / "plain")
    assert packed_names(tmp_path / "s2") == names[:-1]         # every block but the last
    assert comp.pack_error is None
    assert snapshot(comp) == snapshot(plain)
    assert comp.state().bytes == plain.state().bytes            # message sizes, not the file
    ratio = disk_bytes(tmp_path / "s2") / disk_bytes(tmp_path / "plain")
    assert ratio < 0.35, ratio
    # catch-up serves the plain bytes: the same on a replica that compresses and one that does not
    assert comp.manifest() == plain.manifest()
    for start, size in plain.manifest():
        for off in (0, 5, BLOCK // 3, size - 7):
            assert comp.read_block(start, off, 70_000) == plain.read_block(start, off, 70_000)
    plain.close()
    comp.close()


def test_compressed_store_survives_restart_from_index_files_and_by_walking(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    populate(fs, 2000)
    fs.remove(3)
    fs.sync()
    before = snapshot(fs)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    # every sealed block from its index file, without decompressing; the last one (it
    # holds the tombstone of 3) is walked
    assert fs.recovery_report == [] and fs.blocks_walked == 1
    assert snapshot(fs) == before
    fs.close()
    for name in os.listdir(tmp_path):
        if name.endswith(".idx"):
            os.unlink(tmp_path / name)
    fs = open_file_store(tmp_path, block_bytes=BLOCK)             # compression off: read as before
    assert fs.recovery_report == [] and fs.blocks_walked == len(blocks(tmp_path))
    assert snapshot(fs) == before
    assert fs.store("z", None, b"after", 5) == 2001
    fs.close()


def test_reading_a_message_decompresses_only_its_chunks(tmp_path, monkeypatch):
    fs = open_file_store(tmp_path, block_bytes=200_000, compression="s2")
    big = (b"0123456789abcdef" * 8192)                           # 128 KiB: spans three chunks
    for i in range(40):
        fs.store("s", None, payload(i) if i != 20 else big, 1 + i)
    populate(fs, 1000, start=100)                                 # a second block: the first is sealed
    assert packed_names(tmp_path) == blocks(tmp_path)[:1]
    fs.sync()
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=200_000, compression="s2")
    decoded: list[int] = []
    real = pack.decode_chunk

    def counting(pb, i, stored):
        out = real(pb, i, stored)
        decoded.append(len(out))
        return out

    monkeypatch.setattr(pack, "decode_chunk", counting)
    assert fs.load(5).data == payload(4)
    assert decoded and len(decoded) <= 2 and max(decoded) <= pack.CHUNK_BYTES
    decoded.clear()
    assert fs.load(21).data == big
    assert 2 <= len(decoded) <= 4 and max(decoded) <= pack.CHUNK_BYTES
    decoded.clear()
    assert fs.load(21).data == big and decoded == []              # cached
    fs.close()


@pytest.mark.parametrize("where", ["chunk", "table"])
def test_flipped_byte_in_a_compressed_block_is_reported_and_never_served(tmp_path, where):
    fs = open_file_store(tmp_path, block_bytes=BLOCK * 4, compression="s2")
    populate(fs, 4000)
    fs.sync()
    expected = {m.seq: m for m in snapshot(fs)[1]}
    fs.close()
    first = os.path.join(tmp_path, blocks(tmp_path)[0])
    with open(first, "rb") as f:
        buf = f.read()
    pb = pack.read_packed(buf)
    assert pb is not None and pb.chunks >= 3
    victim = 1
    if where == "chunk":
        flip_bit(first, pb.offs[victim] + pack.stored_len(pb, victim) // 2, 4)
    else:
        flip_bit(first, pack.PACK_HEADER_SIZE + 8 * victim + 5, 1)   # the chunk table's crc
    fs = open_file_store(tmp_path, block_bytes=BLOCK * 4, compression="s2")
    rep = fs.recovery_report
    if where == "table":
        # the header and table are one checksum: the block is set aside, nothing in it served
        assert [r["kind"] for r in rep] == ["checksum_mismatch"]
        assert "compressed block header" in rep[0]["detail"]
        assert os.path.exists(first + ".corrupt") and not os.path.exists(first)
        gone = {s for s in expected if fs.subject_of(s) is None}
        assert gone and min(gone) == 1
    else:
        assert rep and {r["kind"] for r in rep} == {"checksum_mismatch"}
        assert any("compressed block: chunk 1" in r["detail"] for r in rep)
        a, b = pb.plain_range(victim)
        # the messages whose records overlap the chunk's plain bytes
        plain, bad = pack.unpack(buf, pb)
        assert bad == []
        hit = {r.seq for r in fmt.scan_block(plain, False).records
               if r.rtype == fmt.REC_MSG and r.off < b and r.off + r.size > a}
        assert hit
        st = fs.state()
        assert set(st.lost) == hit and st.messages == len(expected) - len(hit)
        for seq in hit:
            with pytest.raises(CorruptMessage):
                fs.load(seq)
        gone = hit
    for seq, msg in expected.items():
        if seq not in gone:
            assert fs.load(seq) == msg
    assert fs.store("new", None, b"fresh", 1) == 4001            # no sequence used twice
    fs.close()


def test_flipped_byte_after_open_is_detected_by_load(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    populate(fs, 600)
    fs.sync()
    first = os.path.join(tmp_path, blocks(tmp_path)[0])
    with open(first, "rb") as f:
        pb = pack.read_packed(f.read())
    flip_bit(first, pb.offs[0] + 40)
    with pytest.raises(CorruptMessage):
        fs.load(2)
    with pytest.raises(OSError):                                  # never served to a peer either
        fs.read_block(1, 0, 4096)
    last = fs.state().last_seq
    assert fs.load(last).seq == last
    fs.close()


def test_crash_before_the_rename_is_durable_keeps_every_synced_message(tmp_path, monkeypatch):
    """The compressed file is fdatasynced under its own name, renamed, and the rename is made
    durable by the next sync: a crash before it finds the plain block, whole."""
    crash = CrashFS(monkeypatch)
    d = tmp_path / "s"
    fs = open_file_store(d, block_bytes=BLOCK, compression="s2")
    populate(fs, 300)
    fs.sync()
    durable = snapshot(fs)
    n = len(blocks(d))
    populate(fs, 400, start=300)                # rolls: earlier blocks compressed, nothing synced
    assert len(packed_names(d)) >= n
    fs.close()
    crash.crash(d)
    assert not [x for x in os.listdir(d) if x.endswith(".tmp")]
    fs = open_file_store(d, block_bytes=BLOCK, compression="s2")
    assert snapshot(fs) == durable
    assert fs.store("a", None, b"x", 1) == 301
    fs.sync()
    fs.close()


def test_crash_after_a_sync_keeps_the_compressed_blocks(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    d = tmp_path / "s"
    fs = open_file_store(d, block_bytes=BLOCK, compression="s2")
    populate(fs, 1500)
    fs.sync()
    durable = snapshot(fs)
    packed = packed_names(d)
    populate(fs, 5, start=1500)                 # not synced: may be lost
    fs.close()
    crash.crash(d)
    assert packed_names(d) == packed
    fs = open_file_store(d, block_bytes=BLOCK, compression="s2")
    assert fs.recovery_report == [] and snapshot(fs) == durable
    fs.close()


@pytest.mark.parametrize("op", ["open", "pwrite", "fdatasync", "replace"])
def test_a_failed_compression_leaves_the_block_plain_and_is_tried_again(tmp_path, op):
    faults = Faults().fail(op, ".blk.tmp" if op != "replace" else ".blk", errno.ENOSPC, times=1)
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    with fileio.inject(faults):
        populate(fs, 700)                       # the first roll's compression fails once
    assert fs.pack_error is not None and fs.pack_error.errno == errno.ENOSPC
    assert fs.failed is None                    # the store goes on: its data is intact
    assert not [x for x in os.listdir(tmp_path) if x.endswith(".tmp")]
    populate(fs, 600, start=300)                # later rolls compress it too
    fs.sync()
    assert packed_names(tmp_path) == blocks(tmp_path)[:-1]
    before = snapshot(fs)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    assert fs.recovery_report == [] and snapshot(fs) == before
    fs.close()


def test_leftovers_of_a_cut_compression_are_removed_on_open(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    populate(fs, 400)
    fs.sync()
    before = snapshot(fs)
    fs.close()
    first = blocks(tmp_path)[0]
    (tmp_path / (first + ".tmp")).write_bytes(b"JRCMP\n half a compressed block")
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    assert fs.recovery_report == [] and snapshot(fs) == before
    assert not (tmp_path / (first + ".tmp")).exists()
    fs.close()


def test_a_compressed_last_block_is_written_back_plain(tmp_path):
    """The block after it was never made durable (a crash right after it was started):
    the compressed block is the last one again, and records are appended to it."""
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    populate(fs, 700)
    fs.sync()
    fs.close()
    names = blocks(tmp_path)
    last_start = int(names[-1][:20])
    os.unlink(tmp_path / names[-1])
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    assert fs.recovery_report == []
    assert blocks(tmp_path)[-1] not in packed_names(tmp_path)
    assert fs.state().last_seq == last_start - 1
    assert fs.store("n", None, b"next", 1) == last_start
    fs.sync()
    before = snapshot(fs)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    assert fs.recovery_report == [] and snapshot(fs) == before
    fs.close()


def test_compression_switched_on_and_off(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=BLOCK)
    populate(fs, 1200)
    assert packed_names(tmp_path) == []
    old = blocks(tmp_path)[:-1]
    fs.set_compression("s2")                    # an update: old sealed blocks one per new block
    populate(fs, 600, start=1200)
    sealed = blocks(tmp_path)[:-1]
    assert set(packed_names(tmp_path)) == set(sealed) and set(old) <= set(sealed)
    fs.set_compression("none")
    populate(fs, 600, start=1800)
    now = blocks(tmp_path)
    assert set(packed_names(tmp_path)) == set(sealed) and len(now) > len(sealed) + 1
    fs.sync()
    before = snapshot(fs)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=BLOCK)
    assert fs.recovery_report == [] and snapshot(fs) == before
    with pytest.raises(ValueError):
        fs.set_compression("zip")
    fs.close()


def test_incompressible_chunks_are_stored_as_they_are(tmp_path):
    rnd = random.Random(7)
    fs = open_file_store(tmp_path, block_bytes=BLOCK, compression="s2")
    datas = [rnd.randbytes(900) for _ in range(300)]
    for i, d in enumerate(datas):
        fs.store("r", None, d, i + 1)
    fs.sync()
    first = os.path.join(tmp_path, blocks(tmp_path)[0])
    with open(first, "rb") as f:
        pb = pack.read_packed(f.read())
    assert pb is not None and os.path.getsize(first) <= pb.plain_len + 64
    assert [fs.load(i + 1).data for i in range(300)] == datas
    fs.close()


def test_a_chunk_claiming_more_than_its_length_is_never_decompressed():
    plain = fmt.encode_block_header() + b"x" * 100_000
    data = bytearray(pack.pack_block(plain))
    pb = pack.read_packed(data)
    forged = bytes(pack.pack_block(fmt.encode_block_header() + b"y" * 200_000))
    fpb = pack.read_packed(forged)
    # chunk 0 of another block (its crc made to match) decompresses to 64 KiB, but chunk 1
    # of this one holds fewer plain bytes: refused before decompressing
    stored = forged[fpb.offs[0]:fpb.offs[0] + pack.stored_len(fpb, 0)]
    pb.lens[1], pb.crcs[1] = len(stored), fpb.crcs[0]
    with pytest.raises(pack.ChunkDamaged):
        pack.decode_chunk(pb, 1, stored)
    head = bytearray(data[:pack.PACK_HEADER_SIZE + 8 * pb.chunks])
    head[6] = 9                                  # a format version this code does not know
    table = bytes(head[pack.PACK_HEADER_SIZE:])
    head[32:36] = zlib.crc32(table, zlib.crc32(bytes(head[:32]))).to_bytes(4, "little")
    with pytest.raises(ValueError, match="version 9"):
        pack.read_packed(bytes(head) + bytes(data[len(head):]))
    head[7] ^= 1                                 # damaged: read as damaged, not as a version
    assert pack.read_packed(bytes(head) + bytes(data[len(head):])) is None


def test_align_store_counts_a_compressed_block_by_its_plain_bytes(tmp_path):
    d = tmp_path / "msgs"
    fs = open_file_store(d, block_bytes=BLOCK, compression="s2")
    populate(fs, 1200)
    fs.sync()
    manifest = fs.manifest()
    st = fs.state()
    fs.close()
    snap = StreamSnapshot("S", 0, BLOCK, manifest, st.first_seq, st.last_seq, st.messages, st.bytes)
    packed = packed_names(d)
    out = align_store(str(d), snap, expect_complete=True)
    assert out.missing == [] and out.damage == [] and packed_names(d) == packed   # kept compressed
    (first_start, first_size), (second_start, _size2) = manifest[0], manifest[1]
    second = d / fmt.block_name(second_start)
    flip_bit(second, 20)                         # its header: nothing in it can be trusted
    out = align_store(str(d), snap, expect_complete=True, cuts={first_start: 1000})
    assert [(m.first_seq, m.have, m.want) for m in out.missing] == [
        (first_start, 1000, first_size), (second_start, 0, manifest[1][1])]
    assert fmt.block_name(first_start) not in packed_names(d)       # written back plain, cut
    assert os.path.getsize(d / fmt.block_name(first_start)) == 1000
    assert os.path.getsize(second) == 0


def test_memory_store_keeps_the_setting_and_compresses_nothing():
    ms = MemoryStore()
    ms.set_compression("s2")
    assert ms.compression == "s2"
    assert ms.store("a", None, b"x" * 100, 1) == 1 and ms.load(1).data == b"x" * 100
