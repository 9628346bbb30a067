"""powerloss_overlay: the unsynced data of one file, held in the power-loss layer's memory.

Part of the fault campaign's power-loss layer (powerloss.py, after Jepsen's lazyfs,
https://github.com/dsrhaslab/lazyfs). A write() through the layer goes to an in-memory
overlay of the file, not to the file: byte extents plus a pending truncation and size. The
layer's operations (powerloss_fs.py) key the overlays by the underlying inode, (st_dev,
st_ino), so that one follows its file through renames and hard links. Reads merge the
underlying bytes with the overlay; stat() reports the overlay's size. fsync()/fdatasync() of
the file, or a write through a descriptor opened with O_SYNC/O_DSYNC, applies the overlay to
the underlying file (``Overlay.apply``), fsyncs it and drops the overlay. close() does not: a
closed file keeps its unsynced bytes in memory. ftruncate(), truncate() and open(O_TRUNC)
are unsynced changes of the same kind.

Shapes and units: offsets, sizes and lengths are bytes. An overlay holds ``base`` (how much
of the underlying file stays visible, lowered by pending truncations), ``size`` (the file's
size as the layer reports it) and sorted, disjoint extents of written bytes (``starts[i]``,
``datas[i]``); ``nbytes``, their total length, is what the layer counts against its cap
(--max-unsynced-bytes).

What it does not model: reordering or tearing within a file (an fsync applies all of the
file's pending writes, none of them is partly persisted, and nothing unsynced ever reaches
the disk early).

The standard library only. Imported as lab.powerloss_overlay, or as powerloss_overlay beside
powerloss.py on a lab host (powerloss.py tells how).
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right


def _pwrite_all(fd: int, data: bytes | bytearray, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


class Overlay:
    """The unsynced state of one file: the visible length of the underlying bytes (``base``,
    lowered by pending truncations), the file's size, and sorted, disjoint extents of
    written bytes (``starts[i]``, ``datas[i]``). ``nbytes`` is the extents' total length."""

    __slots__ = ("base", "datas", "nbytes", "size", "starts")

    def __init__(self, size: int) -> None:
        self.base = size
        self.size = size
        self.starts: list[int] = []
        self.datas: list[bytearray] = []
        self.nbytes = 0

    def write(self, offset: int, data: bytes) -> int:
        """Record ``data`` at ``offset``; return the growth of ``nbytes``."""
        n = len(data)
        starts, datas = self.starts, self.datas
        if not starts:
            starts.append(offset)
            datas.append(bytearray(data))
            delta = n
        else:
            last_end = starts[-1] + len(datas[-1])
            if offset == last_end:  # an append: the common case
                datas[-1] += data
                delta = n
            elif offset > last_end:
                starts.append(offset)
                datas.append(bytearray(data))
                delta = n
            else:
                delta = self._merge(offset, data)
        self.nbytes += delta
        if offset + n > self.size:
            self.size = offset + n
        return delta

    def _merge(self, offset: int, data: bytes) -> int:
        starts, datas = self.starts, self.datas
        end = offset + len(data)
        i = bisect_right(starts, offset) - 1
        lo = i if i >= 0 and starts[i] + len(datas[i]) >= offset else i + 1
        hi = lo
        while hi < len(starts) and starts[hi] <= end:
            hi += 1
        if lo == hi:
            starts.insert(lo, offset)
            datas.insert(lo, bytearray(data))
            return len(data)
        new_start = min(offset, starts[lo])
        new_end = max(end, starts[hi - 1] + len(datas[hi - 1]))
        buf = bytearray(new_end - new_start)
        old = 0
        for k in range(lo, hi):
            at = starts[k] - new_start
            buf[at:at + len(datas[k])] = datas[k]
            old += len(datas[k])
        buf[offset - new_start:end - new_start] = data
        starts[lo:hi] = [new_start]
        datas[lo:hi] = [buf]
        return len(buf) - old

    def truncate(self, length: int) -> int:
        """Set the size to ``length``; return the change of ``nbytes`` (zero or less)."""
        delta = 0
        if length < self.size:
            self.base = min(self.base, length)
            starts, datas = self.starts, self.datas
            i = bisect_left(starts, length)
            for d in datas[i:]:
                delta -= len(d)
            del starts[i:], datas[i:]
            if starts and starts[-1] + len(datas[-1]) > length:
                keep = length - starts[-1]
                delta -= len(datas[-1]) - keep
                del datas[-1][keep:]
        self.size = length
        self.nbytes += delta
        return delta

    def read(self, fd: int, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        out = bytearray()
        if offset < self.base:
            out += os.pread(fd, min(end, self.base) - offset, offset)
        if len(out) < end - offset:
            out.extend(bytes(end - offset - len(out)))
        starts, datas = self.starts, self.datas
        for k in range(max(bisect_right(starts, offset) - 1, 0), len(starts)):
            s = starts[k]
            if s >= end:
                break
            e = s + len(datas[k])
            if e <= offset:
                continue
            a, b = max(s, offset), min(e, end)
            out[a - offset:b - offset] = memoryview(datas[k])[a - s:b - s]
        return bytes(out)

    def apply(self, fd: int) -> None:
        """Write the overlay into the underlying file open as ``fd`` (not fsynced)."""
        if self.base < os.fstat(fd).st_size:
            os.ftruncate(fd, self.base)
        for s, d in zip(self.starts, self.datas, strict=True):
            _pwrite_all(fd, d, s)
        end = self.base
        if self.starts:
            end = max(end, self.starts[-1] + len(self.datas[-1]))
        if end != self.size:
            os.ftruncate(fd, self.size)
