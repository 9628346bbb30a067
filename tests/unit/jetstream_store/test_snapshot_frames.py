"""The Snappy framing of a snapshot's bytes (jetraft.jetstream.snapshot_frames): what a
restore is given back in chunks of any size is what the snapshot read, and data that is not
a jetraft backup is refused with a reason."""

from __future__ import annotations

import io
import os

import pytest
import snappy

from jetraft.jetstream.snapshot_frames import (
    RAW_PIECE,
    S2_IDENTIFIER,
    STREAM_IDENTIFIER,
    FrameError,
    FramedReader,
    Unframer,
)

RAW = os.urandom(70_000) + b"jetraft " * 90_000 + os.urandom(3)


def framed(raw: bytes, n: int) -> list[bytes]:
    reader, out = FramedReader(io.BytesIO(raw)), []
    while chunk := reader.read(n):
        out.append(chunk)
    return out


@pytest.mark.parametrize("n", [1024, 7777, 128 * 1024, 1 << 20])
def test_round_trip_in_chunks_of_any_size(n):
    chunks = framed(RAW, n)
    assert all(len(c) == n for c in chunks[:-1]) and 0 < len(chunks[-1]) <= n
    data = b"".join(chunks)
    assert data.startswith(STREAM_IDENTIFIER)
    assert len(data) < len(RAW)                      # the repeated text compresses
    assert snappy.StreamDecompressor().decompress(data) == RAW     # a standard Snappy stream
    unframer = Unframer()
    # fed in pieces that cut the identifier and frames anywhere
    pieces = [data[i:i + 333] for i in range(0, len(data), 333)]
    assert b"".join(unframer.feed(p) for p in pieces) == RAW
    unframer.finish()


def test_an_empty_snapshot_frames_to_nothing():
    assert framed(b"", 1024) == []
    Unframer().finish()


def test_the_reader_holds_one_raw_piece_at_a_time():
    class Counting(io.BytesIO):
        asked: list[int] = []

        def read(self, n=-1):
            self.asked.append(n)
            return super().read(n)

    source = Counting(RAW)
    FramedReader(source).read(1024)
    assert source.asked == [RAW_PIECE]


def test_an_s2_stream_is_refused_as_a_nats_server_backup():
    with pytest.raises(FrameError, match="s2 stream, as nats-server's backups are"):
        Unframer().feed(S2_IDENTIFIER + b"\x00" * 40)


def test_data_that_is_no_snappy_stream_is_refused():
    with pytest.raises(FrameError, match="not a jetraft backup"):
        Unframer().feed(b"JRSNAP\x00\x01" + b"\x00" * 40)


@pytest.mark.parametrize("cut", [5, len(STREAM_IDENTIFIER) + 3, -1])
def test_a_cut_stream_is_refused_at_its_end(cut):
    data = b"".join(framed(RAW, 1 << 20))
    unframer = Unframer()
    unframer.feed(data[:cut])
    with pytest.raises(FrameError, match="truncated: it ends inside"):
        unframer.finish()


def test_a_damaged_frame_is_refused():
    data = bytearray(b"".join(framed(RAW, 1 << 20)))
    data[len(STREAM_IDENTIFIER) + 10] ^= 0xFF          # inside the first frame's data
    with pytest.raises(FrameError, match="corrupt: a frame does not decompress"):
        Unframer().feed(bytes(data))
