"""powerloss_journal: the power-loss layer's directory entries, journalled, and their undo at
recovery.

Part of the fault campaign's power-loss layer (powerloss.py, after Jepsen's lazyfs,
https://github.com/dsrhaslab/lazyfs). POSIX fsync(2): "an explicit fsync() on a file
descriptor for the directory is also needed" for a directory entry to be durable.

Directory entries. create, mknod, mkdir, symlink, link, unlink, rmdir and rename (also over
an existing target, and RENAME_NOREPLACE) are applied to the underlying directory at once
(by powerloss_fs.py), after an undo record is appended to the JOURNAL (a file outside
STORE_DIR) and fdatasynced. A removed entry (unlink, rmdir, a target replaced by rename) is
moved into the holding directory ``.powerloss-held`` (HELD) at the top of the store, hidden
from listings and lookups, so that it can be put back (a file removed while open stays
usable through its open descriptors). fsync() of a directory D makes D's changes durable: a
record is dropped from the journal once every directory it touched (both parents of a
rename) has been fsynced, and a held entry is deleted for real once its record is dropped.
The strict rule follows: a file created and fsynced whose directory was never fsynced is
gone after a power cut.

Recovery (``recover``: at every mount, at a clean stop, and the ``recover`` command): the
journal's records are undone newest first (created entries removed, renamed entries moved
back, held entries restored), then the holding directory and the journal are emptied and
the directories fsynced.

The journal: one JSON object a line. A torn last line (the daemon killed while appending
it) is a change that was never made. A record names each directory it touched by its path
below the store ("." for the top) and by its (st_dev, st_ino) as a two-item list, by which
recovery finds it again if it was renamed since; ``"d"`` lists the (st_dev, st_ino) of the
directories whose fsync the record waits for:

- ``{"op": "new", "p": parent, "pk": [dev, ino], "n": name, "d": [...]}``: ``p/n`` was
  created (create, mknod, mkdir, symlink, link); undone by removing it, a directory with
  all below it.
- ``{"op": "del", "p", "pk", "n", "h": held name, "d"}``: ``p/n`` was moved to ``HELD/h``
  (unlink, rmdir); undone by moving it back.
- ``{"op": "mv", "sp", "spk", "sn", "dp", "dpk", "dn", "i": inode, "h": held name or
  null, "d"}``: ``sp/sn``, inode ``i``, was renamed ``dp/dn``, a target it replaced held as
  ``HELD/h``; undone by renaming it back and restoring the target.

Also the helpers for paths below the store's directory descriptor that the layer's
operations share. The standard library only. Imported as lab.powerloss_journal, or as
powerloss_journal beside powerloss.py on a lab host (powerloss.py tells how).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat

if __package__:  # lab.powerloss_journal; else a flat directory (powerloss.py tells why)
    from .powerloss_overlay import _pwrite_all
else:
    from powerloss_overlay import _pwrite_all

HELD = ".powerloss-held"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

log = logging.getLogger("powerloss")


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
