"""The file operations that change jetraft's stores, behind one seam: the storage layer.

Every write, truncation, fsync, rename, deletion and file or directory creation of the
data path (the RAFT logs of :mod:`jetraft.raft.storage`, the group commit of
:mod:`jetraft.storage.group_commit`, the stream file store and its metadata in
:mod:`jetraft.jetstream`, the snapshots, catch-ups and restores of :mod:`jetraft.net`) goes
through these functions (``tests/unit/test_disk_access.py`` holds the rule), so that tests can make any of them fail the way a full or
failing disk does (``OSError(ENOSPC)``, ``OSError(EIO)``, a short write) without a real
device: :func:`inject` installs a *fault*, a callable ``fault(op, path, size)`` called
before each operation with

- ``op``: "open" (a file created or opened for writing), "pwrite", "write" (an append),
  "ftruncate", "fdatasync" (a file), "fsync" (a directory), "unlink", "replace" or
  "rmtree" (a directory and all it holds);
- ``path``: the file's path (the directory's, for "fsync");
- ``size``: bytes to write ("pwrite"), the new length ("ftruncate"), else 0.

It returns None (the operation runs), raises an ``OSError`` (the operation fails with it,
having done nothing), or, for "pwrite" only, returns an int ``n`` smaller than ``size``:
only the first ``n`` bytes are written and ``n`` is returned (a short write, what
``write(2)`` does on a filling disk before it returns ENOSPC).

The functions look the ``os`` functions up at each call, so monkeypatching ``os`` (as the
crash simulator of the storage tests does) keeps working. Without a fault installed each
costs one attribute test on top of the system call.
"""

from __future__ import annotations

import errno as _errno
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["DIR_MODE", "FILE_MODE", "Fault", "errno_name", "fdatasync", "fsync_dir", "ftruncate", "inject",
           "make_dirs", "open_directory", "open_file", "pwrite", "pwrite_all", "remove_tree", "replace",
           "sync_directory", "unlink", "write_all"]

#: Mode of every store directory jetraft creates: owner only (nats-server
#: server/filestore.go defaultDirPerms). The process umask can only narrow it.
DIR_MODE = 0o700
#: Mode of every store file jetraft creates: owner read/write only (nats-server
#: server/filestore.go defaultFilePerms). The process umask can only narrow it.
FILE_MODE = 0o600

#: ``fault(op, path, size) -> None | int``, raising OSError to fail the operation.
Fault = Callable[[str, str, int], "int | None"]

_fault: Fault | None = None


@contextmanager
def inject(fault: Fault) -> Iterator[None]:
    """Install ``fault`` for the duration of the ``with`` block (process-wide: every thread
    and every store of the process sees it; filter on ``path`` to aim at one). Faults do
    not nest: the previous one comes back on exit."""
    global _fault
    previous, _fault = _fault, fault
    try:
        yield
    finally:
        _fault = previous


def _check(op: str, path: str, size: int = 0) -> int | None:
    fault = _fault
    return fault(op, path, size) if fault is not None else None


def open_file(path: str, flags: int, mode: int = FILE_MODE) -> int:
    """``os.open`` of a file to be written (``flags`` include O_RDWR or O_WRONLY); a file
    it creates gets ``mode`` (default :data:`FILE_MODE`, 0600) at creation, so that it is
    never readable by others, whatever the umask."""
    _check("open", path)
    return os.open(path, flags, mode)


def make_dirs(path: str | os.PathLike[str], mode: int = DIR_MODE) -> None:
    """Create directory ``path`` and every missing parent, each created with ``mode``
    (default :data:`DIR_MODE`, 0700) as ``mkdir(2)`` makes it, as Go's ``os.MkdirAll`` does
    (``os.makedirs`` creates the parents with 0777 less the umask). Existing directories
    are left as they are. Each directory created is durable before this returns: its
    parent is fsynced after the ``mkdir`` (a new directory entry survives a power cut only
    once its parent directory is fsynced: POSIX fsync(2), ext4 and XFS alike; without it a
    stream's whole directory can vanish with every message acknowledged in it). Raises
    OSError (FileExistsError when ``path`` or a parent is not a directory)."""
    path = os.path.normpath(os.fspath(path))
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        make_dirs(parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    sync_directory(parent or ".")


def pwrite(fd: int, data, offset: int, path: str) -> int:
    """One ``os.pwrite``; returns the bytes written (fewer than ``len(data)`` when short)."""
    short = _check("pwrite", path, len(data))
    if short is not None and 0 <= short < len(data):
        return os.pwrite(fd, memoryview(data)[:short], offset) if short else 0
    return os.pwrite(fd, data, offset)


def pwrite_all(fd: int, data, offset: int, path: str) -> None:
    """Write all of ``data`` at ``offset`` (bytes), looping on short writes. A write that
    makes no progress raises ``OSError(ENOSPC)``: a regular file that takes no more
    bytes is on a full device."""
    view = memoryview(data)
    while view:
        n = pwrite(fd, view, offset, path)
        if n <= 0:
            raise OSError(_errno.ENOSPC, os.strerror(_errno.ENOSPC), path)
        view = view[n:]
        offset += n


def ftruncate(fd: int, size: int, path: str) -> None:
    """``os.ftruncate`` to ``size`` bytes."""
    _check("ftruncate", path, size)
    os.ftruncate(fd, size)


def fdatasync(fd: int, path: str) -> None:
    """``os.fdatasync`` of a regular file."""
    _check("fdatasync", path)
    os.fdatasync(fd)


def fsync_dir(fd: int, path: str) -> None:
    """``os.fsync`` of the directory open as ``fd``."""
    _check("fsync", path)
    os.fsync(fd)


def sync_directory(path: str) -> None:
    """Open the directory ``path``, :func:`fsync_dir` it and close it (its created, renamed
    and removed entries are durable after). Raises OSError."""
    fd = open_directory(path)
    try:
        fsync_dir(fd, path)
    finally:
        os.close(fd)


def open_directory(path: str) -> int:
    """``os.open`` of directory ``path`` read-only, to fsync it (:func:`fsync_dir`); the
    caller closes the descriptor. Raises OSError."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def write_all(fd: int, data, path: str) -> None:
    """Append all of ``data`` (bytes) at the descriptor's position (``os.write``, looping on
    short writes); a write that makes no progress raises ``OSError(ENOSPC)``."""
    view = memoryview(data)
    while view:
        short = _check("write", path, len(view))
        n = os.write(fd, view[:short] if short is not None and 0 <= short < len(view) else view)
        if n <= 0:
            raise OSError(_errno.ENOSPC, os.strerror(_errno.ENOSPC), path)
        view = view[n:]


def remove_tree(path: str, *, ignore_errors: bool = True) -> None:
    """Delete directory ``path`` and everything in it (``shutil.rmtree``); with
    ``ignore_errors`` (the default) a failure, or a directory already gone, is ignored,
    otherwise it raises OSError. The parent directory is not fsynced here: a caller that
    needs the deletion durable fsyncs it (:func:`sync_directory`)."""
    try:
        _check("rmtree", path)
    except OSError:
        if ignore_errors:
            return
        raise
    shutil.rmtree(path, ignore_errors=ignore_errors)


def unlink(path: str) -> None:
    """``os.unlink``."""
    _check("unlink", path)
    os.unlink(path)


def replace(src: str, dst: str) -> None:
    """``os.replace`` (the fault sees ``dst``)."""
    _check("replace", dst)
    os.replace(src, dst)


def atomic_write(path: str, data) -> None:
    """Replace ``path`` with ``data`` durably: written to ``path + ".tmp"``, fdatasynced,
    renamed over ``path``, the directory fsynced, each step through this seam. A crash
    leaves the old file or the new one; a failed step removes the ``.tmp`` again. Raises
    OSError (FileNotFoundError when the directory is gone)."""
    tmp = path + ".tmp"
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        try:
            pwrite_all(fd, data, 0, tmp)
            fdatasync(fd, tmp)
        finally:
            os.close(fd)
        replace(tmp, path)
    except OSError:
        try:
            unlink(tmp)
        except OSError:
            pass
        raise
    sync_directory(os.path.dirname(path) or ".")


def errno_name(exc: BaseException | None) -> str | None:
    """The symbolic errno of an OSError (or of the OSError behind a storage error, found
    through ``errno`` attributes and ``__cause__``), e.g. "ENOSPC"; None if there is none."""
    seen = 0
    while exc is not None and seen < 8:
        code = getattr(exc, "errno", None)
        if isinstance(code, int):
            return _errno.errorcode.get(code, str(code))
        exc = exc.__cause__
        seen += 1
    return None
