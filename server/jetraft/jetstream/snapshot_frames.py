"""A stream snapshot's bytes on the wire and in a backup's ``stream.tar.s2``: Snappy's
framing format around jetraft's snapshot data (:mod:`jetraft.jetstream.snapshot`).

nats-server sends a snapshot as an s2 stream, and natscli (jsm.go ``SnapshotToDirectory``)
decompresses what it receives to count the bytes it was sent: a stream it cannot decompress
stalls its backup. s2's reader also reads Snappy's framing format
(``framing_format.txt``, stream identifier ``sNaPpY``), which python-snappy writes and reads
a chunk at a time, so a jetraft snapshot is framed that way: natscli can back it up, and the
data is compressed on the wire and on disk. What the frames carry stays jetraft's own
format: a nats-server backup does not restore into jetraft, nor the other way round.

- :class:`FramedReader` turns the snapshot's raw bytes (any ``read(n)`` source) into framed
  bytes, ``read(n)`` at a time; it holds at most one raw piece (:data:`RAW_PIECE` bytes)
  and its compressed frames beyond what was asked.
- :class:`Unframer` takes the framed bytes of a restore in chunks of any size and returns
  the raw bytes; it refuses, with :class:`FrameError`, data that is not a Snappy stream (an
  s2 stream, which is what nats-server's backups are, is named as such). It holds at most
  one incomplete frame (a frame is at most 16 MiB long: a 3-byte length).
"""

from __future__ import annotations

from typing import Protocol

import snappy

__all__ = ["RAW_PIECE", "S2_IDENTIFIER", "STREAM_IDENTIFIER", "FrameError", "FramedReader", "Unframer"]

#: The stream identifier frame that starts a Snappy framed stream (framing_format.txt §4.1).
STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
#: The one that starts an s2 stream (klauspost/compress s2), as nats-server's snapshots do.
S2_IDENTIFIER = b"\xff\x06\x00\x00S2sTwO"
#: Raw bytes compressed at a time (Snappy frames hold at most 64 KiB of data each).
RAW_PIECE = 64 * 1024


class FrameError(ValueError):
    """Restore data that is not a Snappy framed stream of a jetraft snapshot."""


class _Source(Protocol):
    def read(self, n: int) -> bytes: ...


class FramedReader:
    """``read(n)``: up to ``n`` bytes of the framed stream of ``source``'s bytes (fewer only
    at its end; ``b""`` after it). The first bytes are :data:`STREAM_IDENTIFIER`."""

    def __init__(self, source: _Source) -> None:
        self._source = source
        self._compressor = snappy.StreamCompressor()
        self._buffer = bytearray()
        self._eof = False

    def read(self, n: int) -> bytes:
        while len(self._buffer) < n and not self._eof:
            raw = self._source.read(RAW_PIECE)
            if not raw:
                self._eof = True
                break
            self._buffer += self._compressor.add_chunk(raw)
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out


class Unframer:
    """The raw bytes of a framed stream fed in chunks of any size (:meth:`feed`);
    :meth:`finish` checks that it ended on a frame boundary.

    Raises :class:`FrameError` for a stream that does not start with
    :data:`STREAM_IDENTIFIER` (nats-server's s2 backups named as such), a frame that does
    not decompress, or (``finish``) a stream cut inside a frame."""

    def __init__(self) -> None:
        self._head = b""
        self._decompressor: snappy.StreamDecompressor | None = None
        self._fed = 0

    def feed(self, data: bytes) -> bytes:
        self._fed += len(data)
        if self._decompressor is None:
            self._head += data
            if len(self._head) < len(STREAM_IDENTIFIER):
                return b""
            start = self._head[:len(STREAM_IDENTIFIER)]
            if start == S2_IDENTIFIER:
                raise FrameError("snapshot data is an s2 stream, as nats-server's backups are; "
                                 "jetraft restores only backups of jetraft streams")
            if start != STREAM_IDENTIFIER:
                raise FrameError("snapshot data is not a jetraft backup (no Snappy stream "
                                 "identifier at its start)")
            self._decompressor = snappy.StreamDecompressor()
            data, self._head = self._head, b""
        try:
            return self._decompressor.decompress(data)
        except Exception as exc:  # noqa: BLE001 - cramjam's errors name no type of their own
            raise FrameError(f"snapshot data is corrupt: a frame does not decompress (byte {self._fed}): {exc}") from exc

    def finish(self) -> None:
        """The stream ended: refuse one cut inside its identifier or a frame."""
        if self._decompressor is None:
            if self._fed:
                raise FrameError(f"snapshot data is truncated: it ends inside its stream identifier, after {self._fed} bytes")
            return
        if self._decompressor.remains:
            raise FrameError(f"snapshot data is truncated: it ends inside a frame, after {self._fed} bytes")
