#!/usr/bin/env python3
"""powerloss: a FUSE layer over a store directory that loses what was not fsynced.

The fault campaign's power-loss nemesis, after Jepsen's lazyfs
(https://github.com/dsrhaslab/lazyfs; jepsen.nemesis.lazyfs). It mounts itself over
STORE_DIR (an over-mount: the directory is opened first, then FUSE is mounted on the same
path, and every operation reaches the real directory underneath through that descriptor),
passes everything through, and keeps in its own memory whatever a program has not yet made
durable. Killing the daemon (SIGKILL, or the host losing power) then loses exactly that.

What it models (POSIX fsync(2): data reaches stable storage only when the file is fsynced,
and "an explicit fsync() on a file descriptor for the directory is also needed" for the
directory entry; Linux fsync(2), fdatasync(2)):

- File data. A write() goes to an in-memory overlay of the file (byte extents plus a pending
  truncation and size), keyed by the underlying inode so that it follows the file through
  renames and hard links. Reads merge the underlying bytes with the overlay; stat() reports
  the overlay's size. fsync()/fdatasync() of the file, or a write through a descriptor opened
  with O_SYNC/O_DSYNC, applies the overlay to the underlying file, fsyncs it and drops the
  overlay. close() does not: a closed file keeps its unsynced bytes in memory.
  ftruncate(), truncate() and open(O_TRUNC) are unsynced changes of the same kind.
- Directory entries. create, mknod, mkdir, symlink, link, unlink, rmdir and rename (also over
  an existing target, and RENAME_NOREPLACE) are applied to the underlying directory at once,
  after an undo record is appended to the JOURNAL (a file outside STORE_DIR) and fdatasynced.
  A removed entry (unlink, rmdir, a target replaced by rename) is moved into the holding
  directory ``.powerloss-held`` at the top of the store, hidden from listings and lookups,
  so that it can be put back (a file removed while open stays usable through its open
  descriptors). fsync() of a directory D makes D's changes durable: a record
  is dropped from the journal once every directory it touched (both parents of a rename)
  has been fsynced, and a held entry is deleted for real once its record is dropped.
  The strict rule follows: a file created and fsynced whose directory was never fsynced is
  gone after a power cut.
- Recovery (at every mount, or ``recover``): the journal's records are undone newest first
  (created entries removed, renamed entries moved back, held entries restored), then the
  holding directory and the journal are emptied and the directories fsynced.
- Power cut: ``cut`` sends SIGKILL to the daemon and detaches the mount (umount -l).
  A clean stop (SIGTERM, SIGINT, umount) does not flush either, as lazyfs does not (its
  cache lives in the process and its destroy handler writes nothing back): the daemon drops
  its unsynced data and rolls the journal back before it exits, so the bare directory then
  holds what a power cut at that instant would have left.

What it does not model: the kernel's own page cache (writes leave the kernel at once, so a
crash of the machine running the daemon is not simulated beyond the daemon's memory);
sync(2) and syncfs(2), which do not reach a FUSE filesystem (only fsync counts here);
reordering or tearing within a file (an fsync applies all of the file's pending writes,
none of them is partly persisted, and nothing unsynced ever reaches the disk early);
metadata other than names and sizes (chmod, chown, utimes are applied at once and are
durable; timestamps are the underlying file's until fsync); extended attributes and
fallocate (refused: EOPNOTSUPP); directory link counts. The name ``.powerloss-held`` at the
top of the store is reserved.

Bounded memory: the unsynced bytes of all files together are capped by
``--max-unsynced-bytes`` (default 256 MiB); a write that would pass the cap is refused with
ENOSPC and leaves everything else as it was (what was synced stays synced, what was pending
stays pending until the next fsync). The undo records of namespace changes not yet made
durable are kept in memory too (a few hundred bytes each).

Usage (as root; Debian's fuse3 package and the mfusepy module; Python 3.11+):

    python3 powerloss.py mount STORE_DIR --journal JOURNAL_FILE [--pidfile FILE]
                               [--foreground] [--log FILE] [--max-unsynced-bytes N] [--debug]
    python3 powerloss.py cut STORE_DIR --pidfile FILE
    python3 powerloss.py recover STORE_DIR --journal JOURNAL_FILE

``mount`` recovers, then mounts with allow_other and default_permissions (a file or
directory created through the layer belongs to the uid and gid of the process that created
it), writes the pidfile once the mount answers, and returns then, leaving the daemon
detached (logging to --log); with --foreground it stays, logging to stderr. It exits 0 on
SIGTERM, SIGINT or umount. With --debug, one line per fsync, fsyncdir and deletion of a held
entry is logged.

This program stands alone: the standard library and mfusepy, nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from bisect import bisect_left, bisect_right

HELD = ".powerloss-held"
DEFAULT_MAX_UNSYNCED = 256 * 1024 * 1024

RENAME_NOREPLACE = 1
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
MNT_DETACH = 2

#: The name libfuse gives a file removed while open (fuse.c hidden_name()).
_LIBFUSE_HIDDEN = re.compile(r"\.fuse_hidden[0-9a-f]{16}")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

log = logging.getLogger("powerloss")


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _split(rel: str) -> tuple[str, str]:
    parent, _, name = rel.rpartition("/")
    return (parent or "."), name


def _join(parent: str, name: str) -> str:
    return name if parent == "." else f"{parent}/{name}"


def _lstat(root: int, rel: str) -> os.stat_result | None:
    try:
        return os.stat(rel, dir_fd=root, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _pwrite_all(fd: int, data: bytes | bytearray, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


# ---------------------------------------------------------------------------------------
# File data: the overlay of one inode


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


# ---------------------------------------------------------------------------------------
# Namespace: the journal of undo records


class Journal:
    """Undo records, one JSON object a line, appended and fdatasynced before each change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.size = os.fstat(self.fd).st_size

    def append(self, record: dict) -> int:
        line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        at = self.size
        view = memoryview(line)
        while view:
            view = view[os.write(self.fd, view):]
        os.fdatasync(self.fd)
        self.size += len(line)
        return at

    def cut_back(self, at: int) -> None:
        os.ftruncate(self.fd, at)
        os.fdatasync(self.fd)
        self.size = at

    def rewrite(self, records: list[dict]) -> None:
        """Replace the journal's contents with ``records`` atomically."""
        if not records:
            self.cut_back(0)
            return
        data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _pwrite_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        _fsync_dir(os.path.dirname(self.path) or ".")
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self.size = len(data)

    def close(self) -> None:
        os.close(self.fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_journal(path: str) -> list[dict]:
    """The journal's records; a torn last line (the daemon killed while appending it, so its
    change was never made) is ignored, anything else unreadable is an error."""
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return []
    records = []
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:  # no newline after it: torn while being appended
                break
            raise SystemExit(f"powerloss: {path}: line {i + 1} is not a journal record") from None
    return records


class _Dirs:
    """Find a directory of the store by its (dev, ino), trying the path it had first."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.index: dict[tuple[int, int], str] | None = None

    def find(self, hint: str, key: list[int]) -> str | None:
        want = (key[0], key[1])
        st = _lstat(self.root, hint)
        if st is not None and stat.S_ISDIR(st.st_mode) and _key(st) == want:
            return hint
        if self.index is None:
            self.index = {}
            for path, _dirs, _files, dfd in os.fwalk(".", dir_fd=self.root):
                self.index[_key(os.fstat(dfd))] = os.path.normpath(path)
        return self.index.get(want)

    def moved(self) -> None:
        self.index = None


def _undo(root: int, rec: dict, dirs: _Dirs, touched: set[str]) -> bool:
    """Undo one record; False when there was nothing to undo (the change never happened) or
    the names it needs are taken."""
    op = rec["op"]
    if op == "new":
        parent = dirs.find(rec["p"], rec["pk"])
        if parent is None:
            return False
        rel = _join(parent, rec["n"])
        st = _lstat(root, rel)
        if st is None:
            return False
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(rel, dir_fd=root)
            dirs.moved()
        else:
            os.unlink(rel, dir_fd=root)
        touched.add(parent)
        return True
    if op == "del":
        parent = dirs.find(rec["p"], rec["pk"])
        held = f"{HELD}/{rec['h']}"
        st = _lstat(root, held)
        if parent is None or st is None:
            return False
        rel = _join(parent, rec["n"])
        if _lstat(root, rel) is not None:
            log.warning("recovery: %s is taken, %s not restored", rel, rec["n"])
            return False
        os.rename(held, rel, src_dir_fd=root, dst_dir_fd=root)
        if stat.S_ISDIR(st.st_mode):
            dirs.moved()
        touched.add(parent)
        return True
    if op == "mv":
        sp = dirs.find(rec["sp"], rec["spk"])
        dp = dirs.find(rec["dp"], rec["dpk"])
        if sp is None or dp is None:
            return False
        src, dst = _join(sp, rec["sn"]), _join(dp, rec["dn"])
        done = False
        st = _lstat(root, dst)
        if st is not None and st.st_ino == rec["i"] and _lstat(root, src) is None:
            os.rename(dst, src, src_dir_fd=root, dst_dir_fd=root)
            if stat.S_ISDIR(st.st_mode):
                dirs.moved()
            done = True
        if rec.get("h"):
            held = f"{HELD}/{rec['h']}"
            hst = _lstat(root, held)
            if hst is not None and _lstat(root, dst) is None:
                os.rename(held, dst, src_dir_fd=root, dst_dir_fd=root)
                if stat.S_ISDIR(hst.st_mode):
                    dirs.moved()
                done = True
        touched.update((sp, dp))
        return done
    raise SystemExit(f"powerloss: unknown journal record {rec!r}")


def recover(root: int, journal: str) -> int:
    """Undo every namespace change the journal holds, newest first; empty the holding
    directory and the journal. Return the number of changes undone."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(journal + ".tmp")  # a rewrite cut short: the journal itself is intact
    records = read_journal(journal)
    dirs = _Dirs(root)
    touched: set[str] = {"."}
    undone = sum(_undo(root, rec, dirs, touched) for rec in reversed(records))
    if _lstat(root, HELD) is not None:
        shutil.rmtree(HELD, dir_fd=root)
    for rel in touched:
        try:
            fd = os.open(rel, _DIR_FLAGS, dir_fd=root)
        except OSError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(os.path.dirname(journal) or ".")
    if records:
        log.info("recovery: %d journal records, %d changes undone", len(records), undone)
    return undone


# ---------------------------------------------------------------------------------------
# The filesystem


class _Handle:
    __slots__ = ("append", "fd", "key", "sync")

    def __init__(self, fd: int, key: tuple[int, int], append: bool, sync: bool) -> None:
        self.fd = fd
        self.key = key
        self.append = append
        self.sync = sync


class _Pending:
    """An undo record in the journal and the directories still to be fsynced for it."""

    __slots__ = ("dirs", "rec")

    def __init__(self, rec: dict, dirs: set[tuple[int, int]]) -> None:
        self.rec = rec
        self.dirs = dirs


class PowerLoss:
    """The operations mfusepy calls (paths are relative to the mount, starting with "/")."""

    use_ns = True

    def __init__(self, root: int, journal: Journal, *, max_unsynced: int, debug: bool,
                 context, on_ready) -> None:
        self.root = root
        self.journal = journal
        self.max_unsynced = max_unsynced
        self.debug = debug
        self.context = context  # () -> (uid, gid, pid) of the calling process
        self.on_ready = on_ready
        self.pending: list[_Pending] = []
        self.overlays: dict[tuple[int, int], Overlay] = {}
        self.unsynced = 0
        self.handles: dict[int, _Handle] = {}
        self.opened: dict[tuple[int, int], int] = {}
        self.held_links: dict[tuple[int, int], int] = {}
        # libfuse renames a file removed while open to a hidden name of its directory and
        # removes that name once the file is closed; here the removal is done at the rename
        # (the entry held, the hidden name mapped to it) and the final unlink forgets it.
        self.hidden: dict[str, str] = {}
        self.purge_on_close: set[str] = set()
        self.next_fh = 1
        self.next_held = 0

    # -- helpers -----------------------------------------------------------------------

    def _rel(self, path: str | None) -> str:
        """The path below the store's descriptor; a name libfuse hid is its held entry."""
        if path is None:
            raise _err(errno.ENOENT)
        if path == "/":
            return "."
        rel = path[1:]
        if rel.startswith(HELD) and (len(rel) == len(HELD) or rel[len(HELD)] == "/"):
            raise _err(errno.ENOENT)
        if self.hidden:
            held = self.hidden.get(rel)
            if held is not None:
                return f"{HELD}/{held}"
        return rel

    def _dir(self, parent: str) -> tuple[tuple[int, int], os.stat_result]:
        st = os.stat(parent, dir_fd=self.root, follow_symlinks=False)
        return _key(st), st

    def _record(self, rec: dict, dirs: set[tuple[int, int]]) -> int:
        rec["d"] = sorted(dirs)
        at = self.journal.append(rec)
        self.pending.append(_Pending(rec, dirs))
        return at

    def _unrecord(self, at: int) -> None:
        self.pending.pop()
        self.journal.cut_back(at)

    def _owner(self, parent_st: os.stat_result) -> tuple[int, int]:
        uid, gid, _pid = self.context()
        if parent_st.st_mode & stat.S_ISGID:
            gid = -1  # the underlying directory gives its group, as setgid directories do
        return uid, gid

    def _new(self, rel: str, make) -> None:
        """Journal the creation of ``rel``, make it with ``make(rel)``, give it to the caller."""
        parent, name = _split(rel)
        pkey, pst = self._dir(parent)
        uid, gid = self._owner(pst)
        at = self._record({"op": "new", "p": parent, "pk": pkey, "n": name}, {pkey})
        try:
            make(rel)
        except OSError:
            self._unrecord(at)
            raise
        os.chown(rel, uid, gid, dir_fd=self.root, follow_symlinks=False)

    def _held_name(self) -> str:
        self.next_held += 1
        return str(self.next_held)

    def _hold(self, rel: str, name: str) -> None:
        """Move ``rel`` into the holding directory as ``name``."""
        os.rename(rel, f"{HELD}/{name}", src_dir_fd=self.root, dst_dir_fd=self.root)

    def _held_link(self, st: os.stat_result, n: int) -> None:
        if stat.S_ISDIR(st.st_mode):
            return
        key = _key(st)
        count = self.held_links.get(key, 0) + n
        if count > 0:
            self.held_links[key] = count
        else:
            self.held_links.pop(key, None)

    def _drop_overlay(self, key: tuple[int, int]) -> None:
        ov = self.overlays.pop(key, None)
        if ov is not None:
            self.unsynced -= ov.nbytes

    def _handle(self, fd: int, flags: int) -> int:
        key = _key(os.fstat(fd))
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = _Handle(fd, key, bool(flags & os.O_APPEND), bool(flags & os.O_DSYNC))
        self.opened[key] = self.opened.get(key, 0) + 1
        if flags & os.O_TRUNC:
            self.unsynced += self._overlay(key, fd).truncate(0)
        return fh

    def _overlay(self, key: tuple[int, int], fd: int | None = None, size: int | None = None) -> Overlay:
        ov = self.overlays.get(key)
        if ov is None:
            ov = self.overlays[key] = Overlay(os.fstat(fd).st_size if size is None else size)
        return ov

    def _sync(self, h: _Handle, datasync: bool) -> None:
        ov = self.overlays.pop(h.key, None)
        if ov is not None:
            try:
                ov.apply(h.fd)
            except OSError:
                self.overlays[h.key] = ov  # still pending; applying it again is harmless
                raise
            self.unsynced -= ov.nbytes
        if datasync:
            os.fdatasync(h.fd)
        else:
            os.fsync(h.fd)
        if self.debug:
            log.debug("fsync inode %d: %d bytes applied", h.key[1], ov.nbytes if ov is not None else 0)

    # -- lifecycle ---------------------------------------------------------------------

    def init(self, path: str) -> None:
        self.on_ready()

    # -- attributes --------------------------------------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> dict:
        h = self.handles.get(fh) if fh else None
        if h is not None:
            st = os.fstat(h.fd)
        else:
            st = os.stat(self._rel(path), dir_fd=self.root, follow_symlinks=False)
        attrs = {
            "st_mode": st.st_mode, "st_ino": st.st_ino, "st_nlink": st.st_nlink,
            "st_uid": st.st_uid, "st_gid": st.st_gid, "st_rdev": st.st_rdev,
            "st_size": st.st_size, "st_blocks": st.st_blocks, "st_blksize": st.st_blksize,
            "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns,
        }
        if self.overlays:
            ov = self.overlays.get(_key(st))
            if ov is not None:
                attrs["st_size"] = ov.size
                attrs["st_blocks"] = (ov.size + 511) // 512
        if self.held_links:
            attrs["st_nlink"] -= self.held_links.get(_key(st), 0)
        return attrs

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._rel(path), stat.S_IMODE(mode), dir_fd=self.root)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._rel(path), uid, gid, dir_fd=self.root, follow_symlinks=False)
        return 0

    def utimens(self, path: str | None, times, fh: int | None = None) -> int:
        """``times``: None for now, else (atime, mtime), each nanoseconds, "now" or None
        (left as it is)."""
        h = self.handles.get(fh) if fh else None
        target = h.fd if h is not None else self._rel(path)
        kw = {} if h is not None else {"dir_fd": self.root, "follow_symlinks": False}
        if times is None:
            os.utime(target, **kw)
            return 0
        st = os.stat(target, **kw)
        now = time.time_ns()
        a, m = times
        a = now if a == "now" else st.st_atime_ns if a is None else a
        m = now if m == "now" else st.st_mtime_ns if m is None else m
        os.utime(target, ns=(a, m), **kw)
        return 0

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        h = self.handles.get(fh) if fh else None
        if h is not None:
            ov = self._overlay(h.key, fd=h.fd)
        else:
            st = os.stat(self._rel(path), dir_fd=self.root, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise _err(errno.EINVAL)
            ov = self._overlay(_key(st), size=st.st_size)
        self.unsynced += ov.truncate(length)
        return 0

    def statfs(self, path: str) -> dict:
        sv = os.fstatvfs(self.root)
        return {k: getattr(sv, k) for k in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
            "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

    # -- files -------------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        rel = self._rel(path)
        try:
            fd = os.open(rel, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.root)
        except OSError as e:
            if e.errno not in (errno.EISDIR, errno.EACCES, errno.EPERM, errno.ETXTBSY, errno.EROFS):
                raise
            fd = os.open(rel, (flags & os.O_ACCMODE) | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.root)
        return self._handle(fd, flags)

    def create(self, path: str, mode: int, flags: int) -> int:
        rel = self._rel(path)
        fds: list[int] = []

        def make(rel: str) -> None:
            fds.append(os.open(rel, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                               stat.S_IMODE(mode), dir_fd=self.root))

        try:
            self._new(rel, make)
        except FileExistsError:
            if flags & os.O_EXCL:
                raise
            return self.open(path, flags)
        return self._handle(fds[0], flags & ~os.O_TRUNC)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        h = self.handles[fh]
        ov = self.overlays.get(h.key)
        if ov is None:
            return os.pread(h.fd, size, offset)
        return ov.read(h.fd, offset, size)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        h = self.handles[fh]
        n = len(data)
        if self.unsynced + n > self.max_unsynced:
            if self.debug:
                log.debug("write of %d bytes refused: %d unsynced bytes", n, self.unsynced)
            raise _err(errno.ENOSPC)
        ov = self.overlays.get(h.key)
        if ov is None:
            ov = self.overlays[h.key] = Overlay(os.fstat(h.fd).st_size)
        if h.append:
            offset = ov.size
        self.unsynced += ov.write(offset, data)
        if h.sync:
            self._sync(h, True)
        return n

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        self._sync(self.handles[fh], bool(datasync))
        return 0

    def release(self, path: str | None, fh: int) -> int:
        h = self.handles.pop(fh, None)
        if h is None:
            return 0
        left = self.opened[h.key] - 1
        if left:
            self.opened[h.key] = left
        else:
            del self.opened[h.key]
            if h.key in self.overlays and os.fstat(h.fd).st_nlink == 0:
                self._drop_overlay(h.key)  # the inode is gone for good
        os.close(h.fd)
        return 0

    # -- directories -------------------------------------------------------------------

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict, int]]:
        """The entries with their inode numbers (use_ino: an entry without one would read as
        inode 0, which readdir(3) skips) and file types."""
        rel = self._rel(path)
        fd = os.open(rel, _DIR_FLAGS, dir_fd=self.root)
        try:
            here = os.fstat(fd)
            up = here if rel == "." else os.stat(_split(rel)[0], dir_fd=self.root)
            out = [(".", {"st_ino": here.st_ino, "st_mode": stat.S_IFDIR}, 0),
                   ("..", {"st_ino": up.st_ino, "st_mode": stat.S_IFDIR}, 0)]
            with os.scandir(fd) as entries:
                for e in entries:
                    if rel == "." and e.name == HELD:
                        continue
                    kind = (stat.S_IFLNK if e.is_symlink()
                            else stat.S_IFDIR if e.is_dir(follow_symlinks=False)
                            else stat.S_IFREG if e.is_file(follow_symlinks=False) else 0)
                    out.append((e.name, {"st_ino": e.inode(), "st_mode": kind}, 0))
        finally:
            os.close(fd)
        return out

    def readlink(self, path: str) -> str:
        return os.readlink(self._rel(path), dir_fd=self.root)

    def mknod(self, path: str, mode: int, dev: int) -> int:
        self._new(self._rel(path), lambda rel: os.mknod(rel, mode, dev, dir_fd=self.root))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._new(self._rel(path), lambda rel: os.mkdir(rel, stat.S_IMODE(mode), dir_fd=self.root))
        return 0

    def symlink(self, target: str, source: str) -> int:
        """Make ``target`` a symbolic link whose contents are ``source``."""
        self._new(self._rel(target), lambda rel: os.symlink(source, rel, dir_fd=self.root))
        return 0

    def link(self, target: str, source: str) -> int:
        """Make ``target`` a new name of ``source``."""
        src = self._rel(source)
        parent, name = _split(self._rel(target))
        pkey, _pst = self._dir(parent)
        at = self._record({"op": "new", "p": parent, "pk": pkey, "n": name}, {pkey})
        try:
            os.link(src, _join(parent, name), src_dir_fd=self.root, dst_dir_fd=self.root,
                    follow_symlinks=False)
        except OSError:
            self._unrecord(at)
            raise
        return 0

    def _remove(self, rel: str, st: os.stat_result) -> str:
        """Journal the removal of ``rel`` and hold it; return its name in the holding
        directory."""
        parent, name = _split(rel)
        pkey, _pst = self._dir(parent)
        held = self._held_name()
        at = self._record({"op": "del", "p": parent, "pk": pkey, "n": name, "h": held}, {pkey})
        try:
            self._hold(rel, held)
        except OSError:
            self._unrecord(at)
            raise
        self._held_link(st, 1)
        return held

    def unlink(self, path: str) -> int:
        held = self.hidden.pop(path[1:], None) if self.hidden else None
        if held is not None:  # the last close of a file removed while open
            if held in self.purge_on_close:
                self.purge_on_close.discard(held)
                self._purge(held)
            return 0
        rel = self._rel(path)
        st = os.stat(rel, dir_fd=self.root, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise _err(errno.EISDIR)
        self._remove(rel, st)
        return 0

    def rmdir(self, path: str) -> int:
        rel = self._rel(path)
        if rel == ".":
            raise _err(errno.EBUSY)
        st = os.stat(rel, dir_fd=self.root, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            raise _err(errno.ENOTDIR)
        if self._has_entries(rel):
            raise _err(errno.ENOTEMPTY)
        self._remove(rel, st)
        return 0

    def _has_entries(self, rel: str) -> bool:
        fd = os.open(rel, _DIR_FLAGS, dir_fd=self.root)
        try:
            return bool(os.listdir(fd))
        finally:
            os.close(fd)

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if flags & ~RENAME_NOREPLACE:
            raise _err(errno.EINVAL)  # RENAME_EXCHANGE and RENAME_WHITEOUT are not offered
        src, dst = self._rel(old), self._rel(new)
        sst = os.stat(src, dir_fd=self.root, follow_symlinks=False)
        dst_st = _lstat(self.root, dst)
        if dst_st is None and _LIBFUSE_HIDDEN.fullmatch(_split(dst)[1]):
            self.hidden[dst] = self._remove(src, sst)  # libfuse hides a file removed while open
            return 0
        if dst_st is not None:
            if flags & RENAME_NOREPLACE:
                raise _err(errno.EEXIST)
            if _key(dst_st) == _key(sst):
                return 0  # two names of one file: rename(2) does nothing
            if stat.S_ISDIR(sst.st_mode):
                if not stat.S_ISDIR(dst_st.st_mode):
                    raise _err(errno.ENOTDIR)
                if self._has_entries(dst):
                    raise _err(errno.ENOTEMPTY)
            elif stat.S_ISDIR(dst_st.st_mode):
                raise _err(errno.EISDIR)
        sp, sn = _split(src)
        dp, dn = _split(dst)
        skey, _ = self._dir(sp)
        dkey = skey if dp == sp else self._dir(dp)[0]
        held = self._held_name() if dst_st is not None else None
        rec = {"op": "mv", "sp": sp, "spk": skey, "sn": sn, "dp": dp, "dpk": dkey, "dn": dn,
               "i": sst.st_ino, "h": held}
        at = self._record(rec, {skey, dkey})
        try:
            if held is not None:
                self._hold(dst, held)
            try:
                os.rename(src, dst, src_dir_fd=self.root, dst_dir_fd=self.root)
            except OSError:
                if held is not None:
                    os.rename(f"{HELD}/{held}", dst, src_dir_fd=self.root, dst_dir_fd=self.root)
                raise
        except OSError:
            self._unrecord(at)
            raise
        if dst_st is not None:
            self._held_link(dst_st, 1)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        fd = os.open(self._rel(path), _DIR_FLAGS, dir_fd=self.root)
        try:
            key = _key(os.fstat(fd))
            done = self._settle(key)
            os.fsync(fd)
        finally:
            os.close(fd)
        if self.debug:
            log.debug("fsyncdir inode %d: %d changes durable, %d pending", key[1], done, len(self.pending))
        return 0

    def _settle(self, key: tuple[int, int]) -> int:
        """The directory ``key`` has been fsynced: drop the records it completes, delete the
        entries they held; return how many records were dropped."""
        if not self.pending:
            return 0
        kept, done = [], []
        for p in self.pending:
            p.dirs.discard(key)
            (kept if p.dirs else done).append(p)
        if not done:
            return 0
        self.pending = kept
        self.journal.rewrite([p.rec for p in kept])
        for p in done:
            if p.rec.get("h"):
                self._purge(p.rec["h"])
        return len(done)

    def _purge(self, name: str) -> None:
        if self.hidden and name in self.hidden.values():
            self.purge_on_close.add(name)  # still open under its hidden name
            return
        rel = f"{HELD}/{name}"
        st = _lstat(self.root, rel)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(rel, dir_fd=self.root)
        else:
            os.unlink(rel, dir_fd=self.root)
            self._held_link(st, -1)
            if st.st_nlink <= 1 and _key(st) not in self.opened:
                self._drop_overlay(_key(st))
        if self.debug:
            log.debug("held entry %s deleted", name)


# ---------------------------------------------------------------------------------------
# Mounting


def _fuse_class():
    """mfusepy's FUSE, passing what its defaults leave out: rename's flags, the file handle of
    ftruncate(), and utimensat()'s UTIME_NOW and UTIME_OMIT."""
    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # libfuse3 even where libfuse2 is installed
    import mfusepy

    class Fuse(mfusepy.FUSE):
        def _path(self, path):
            return None if path is None else path.decode(self.encoding, self.errors)

        def rename_fuse_3(self, old, new, flags):
            return self.operations.rename(self._path(old), self._path(new), flags)

        def truncate_fuse_3(self, path, length, fip):
            return self.operations.truncate(self._path(path), length, fip.contents.fh if fip else None)

        def utimens_fuse_3(self, path, buf, fip):
            times = None
            if buf:
                times = tuple(
                    "now" if ts.tv_nsec == UTIME_NOW else None if ts.tv_nsec == UTIME_OMIT
                    else ts.tv_sec * 10**9 + ts.tv_nsec
                    for ts in (buf.contents.actime, buf.contents.modtime))
            return self.operations.utimens(self._path(path), times, fip.contents.fh if fip else None)

    return Fuse, mfusepy.fuse_get_context


def unavailable() -> str | None:
    """Why the layer cannot be mounted on this machine, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if not ctypes.util.find_library("fuse3"):
        return "no libfuse3 on this machine (Debian package fuse3)"
    return None


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fuse_mounted(path: str) -> bool:
    """Whether a FUSE filesystem is mounted at ``path`` (an absolute, resolved path)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) > 4 and _unescape(fields[4]) == path and right.startswith("fuse"):
                return True
    return False


def _write_pidfile(path: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _daemonize() -> tuple[int | None, int | None]:
    """Fork. The parent waits until the child says the mount is ready (or dies) and gets
    (exit code, None); the child gets (None, the pipe's end to say it on)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        ready = os.read(r, 1)
        os.close(r)
        if ready == b"1":
            return 0, None
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) or 1, None
    os.close(r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return None, w


def cmd_mount(args: argparse.Namespace) -> int:
    store = os.path.realpath(args.store)
    journal = os.path.abspath(args.journal)
    pidfile = os.path.abspath(args.pidfile) if args.pidfile else None
    logfile = os.path.abspath(args.log) if args.log else os.devnull  # libfuse changes to /
    if os.path.commonpath([store, os.path.realpath(journal)]) == store:
        raise SystemExit("powerloss: the journal must be outside the store directory")
    if fuse_mounted(store):
        raise SystemExit(f"powerloss: {store} is already a FUSE mount (cut or unmount it first)")
    ready_fd = None
    if not args.foreground:
        code, ready_fd = _daemonize()
        if code is not None:
            return code
    root = os.open(store, _DIR_FLAGS)
    recover(root, journal)
    os.umask(0)  # the modes the kernel passes are final
    os.mkdir(HELD, 0o700, dir_fd=root)
    Fuse, context = _fuse_class()
    mounted = False

    def ready() -> None:
        nonlocal ready_fd, mounted
        mounted = True
        if pidfile:
            _write_pidfile(pidfile)
        log.info("mounted over %s (journal %s)", store, journal)
        if ready_fd is not None:
            # Detached: the caller's stderr is let go (an ssh session or a pipe would wait
            # for it), the log goes to --log.
            fd = os.open(logfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(fd, 2)
            os.close(fd)
            os.write(ready_fd, b"1")
            os.close(ready_fd)
            ready_fd = None

    ops = PowerLoss(root, Journal(journal), max_unsynced=args.max_unsynced_bytes,
                    debug=args.debug, context=context, on_ready=ready)
    try:
        Fuse(ops, store, foreground=True, nothreads=True, allow_other=True,
             default_permissions=True, use_ino=True,
             fsname="powerloss", subtype="powerloss")
    except RuntimeError as e:
        # libfuse answers SIGTERM, SIGINT and SIGHUP with a non-zero result: a stop once
        # mounted, a failure before.
        if not mounted:
            raise SystemExit(f"powerloss: mounting {store} failed (libfuse: {e})") from None
    finally:
        # A clean stop is a power cut too: the unsynced data goes with this process, and the
        # namespace changes not made durable are rolled back.
        log.info("stopping: %d unsynced bytes dropped", ops.unsynced)
        ops.journal.close()
        recover(root, journal)
        os.close(root)
        if pidfile:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pidfile)
    return 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _is_daemon(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except FileNotFoundError:
        return False
    return any(a.endswith(b"powerloss.py") for a in argv) and b"mount" in argv


def detach(store: str) -> None:
    """umount -l: detach the mount at ``store`` now, whatever still uses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(store), MNT_DETACH) == 0:
        return
    code = ctypes.get_errno()
    helper = shutil.which("fusermount3")  # not root: the setuid helper may do it
    if code == errno.EPERM and helper and subprocess.run([helper, "-uz", store], check=False).returncode == 0:
        return
    raise SystemExit(f"powerloss: umount {store}: {os.strerror(code)}")


def cmd_cut(args: argparse.Namespace) -> int:
    store = os.path.realpath(args.store)
    try:
        with open(args.pidfile) as f:
            pid = int(f.read().strip())
    except FileNotFoundError:
        pid = None
    if pid is not None and _is_daemon(pid):
        os.kill(pid, 9)
        deadline = time.monotonic() + args.timeout
        while _alive(pid):
            if time.monotonic() > deadline:
                raise SystemExit(f"powerloss: daemon {pid} still alive {args.timeout} s after SIGKILL")
            time.sleep(0.01)
        log.info("daemon %d killed", pid)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.pidfile)
    if fuse_mounted(store):
        detach(store)
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    store = os.path.realpath(args.store)
    if fuse_mounted(store):
        raise SystemExit(f"powerloss: {store} is still mounted (cut it first)")
    root = os.open(store, _DIR_FLAGS)
    try:
        recover(root, os.path.abspath(args.journal))
    finally:
        os.close(root)
    return 0


def _size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    m = re.fullmatch(r"(\d+)\s*([kmg]?)(?:i?b)?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) * units[m.group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="powerloss.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("mount", help="recover, then mount the layer over STORE_DIR")
    p.add_argument("store", metavar="STORE_DIR")
    p.add_argument("--journal", required=True, help="undo journal (outside STORE_DIR)")
    p.add_argument("--pidfile", help="written with the daemon's pid once the mount is ready")
    p.add_argument("--foreground", action="store_true", help="do not detach")
    p.add_argument("--max-unsynced-bytes", type=_size, default=DEFAULT_MAX_UNSYNCED,
                   help="writes past this many unsynced bytes fail with ENOSPC (default 256MiB)")
    p.add_argument("--log", help="where a detached daemon logs once mounted (default: nowhere)")
    p.add_argument("--debug", action="store_true", help="log each fsync and fsyncdir")
    p.set_defaults(run=cmd_mount)
    p = sub.add_parser("cut", help="power cut: SIGKILL the daemon, then umount -l STORE_DIR")
    p.add_argument("store", metavar="STORE_DIR")
    p.add_argument("--pidfile", required=True)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the daemon to die")
    p.set_defaults(run=cmd_cut)
    p = sub.add_parser("recover", help="undo what the journal holds, without mounting")
    p.add_argument("store", metavar="STORE_DIR")
    p.add_argument("--journal", required=True)
    p.set_defaults(run=cmd_recover)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "debug", False) else logging.INFO,
                        format="powerloss[%(process)d] %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("fuse").setLevel(logging.WARNING)  # mfusepy: every callback and errno at debug
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
