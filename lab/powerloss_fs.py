"""powerloss_fs: the power-loss layer's filesystem, the operations mfusepy calls.

Part of the fault campaign's power-loss layer (powerloss.py), after Jepsen's lazyfs
(https://github.com/dsrhaslab/lazyfs). ``PowerLoss`` answers libfuse's path-based
operations (paths relative to the mount, starting with "/") on the store directory
underneath, reached through a descriptor opened before the mount (``root``). It passes
everything through but what a program has not made durable (POSIX fsync(2); Linux fsync(2),
fdatasync(2)): file data waits in an ``Overlay`` per inode (powerloss_overlay.py) until the
file is fsynced; a directory entry is changed at once, under an undo record in the
``Journal`` (powerloss_journal.py), and the record is dropped once the directories it
touched are fsynced.

Bounded memory: the unsynced bytes of all files together are capped by ``max_unsynced``
(--max-unsynced-bytes, default 256 MiB); a write that would pass the cap is refused with
ENOSPC and leaves everything else as it was (what was synced stays synced, what was pending
stays pending until the next fsync). The undo records of namespace changes not yet made
durable are kept in memory too (a few hundred bytes each).

A file removed while open: libfuse renames it to a hidden name (``.fuse_hidden`` and 16 hex
digits) and unlinks that name at the last close; here the rename is the removal (the entry
held) and the final unlink forgets the hidden name.

What it does not model: metadata other than names and sizes (chmod, chown, utimes are
applied at once and are durable; timestamps are the underlying file's until fsync);
extended attributes and fallocate (refused: EOPNOTSUPP); directory link counts.

The standard library only. Imported as lab.powerloss_fs, or as powerloss_fs beside
powerloss.py on a lab host (powerloss.py tells how).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import stat
import time

if __package__:  # lab.powerloss_fs; else a flat directory (powerloss.py tells why)
    from .powerloss_journal import _DIR_FLAGS, HELD, Journal, _join, _key, _lstat, _split
    from .powerloss_overlay import Overlay
else:
    from powerloss_journal import _DIR_FLAGS, HELD, Journal, _join, _key, _lstat, _split
    from powerloss_overlay import Overlay

RENAME_NOREPLACE = 1

#: The name libfuse gives a file removed while open (fuse.c hidden_name()).
_LIBFUSE_HIDDEN = re.compile(r"\.fuse_hidden[0-9a-f]{16}")

log = logging.getLogger("powerloss")


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


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
