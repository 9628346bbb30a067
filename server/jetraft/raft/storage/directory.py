"""LogDirectory: a server's RAFT store, one subdirectory per group.

Group names may hold any character (stream and consumer names, "/" included), so a
subdirectory is named ``g-`` + the name with every byte outside ``[A-Za-z0-9_.-]``
escaped as ``%XX`` (UTF-8), or ``h-`` + the name's SHA-256 when that is longer than 200
characters. Each subdirectory keeps the group's name in a ``group`` file, written
atomically before the group's log, and :meth:`LogDirectory.groups` reads it from there.
"""

from __future__ import annotations

import hashlib
import os
import re

from jetraft.storage import fileio
from jetraft.storage.group_commit import GroupCommit, StorageError

from . import meta
from .group import GroupLog

NAME_FILE = "group"
_SAFE = re.compile(rb"[A-Za-z0-9_.-]")
_MAX_DIR_NAME = 200


def group_dir_name(group: str) -> str:
    """The subdirectory name of ``group``: safe on any POSIX filesystem, unique per name."""
    raw = group.encode()
    escaped = "g-" + "".join(chr(b) if _SAFE.fullmatch(bytes([b])) else f"%{b:02X}"
                             for b in raw)
    if len(escaped) <= _MAX_DIR_NAME:
        return escaped
    return "h-" + hashlib.sha256(raw).hexdigest()


class LogDirectory:
    """``LogDirectory(root, sync)``: ``open(group, peers=(), **options) -> GroupLog`` (the
    same object while it is open; ``options`` go to GroupLog) and ``groups() -> list[str]``
    (sorted names of the groups stored under ``root``)."""

    def __init__(self, root: str | os.PathLike, sync: GroupCommit) -> None:
        self.root = os.fspath(root)
        self.sync = sync
        self._open: dict[str, GroupLog] = {}
        fileio.make_dirs(self.root)

    def open(self, group: str, peers: tuple[str, ...] = (), **options) -> GroupLog:
        log = self._open.get(group)
        if log is not None and not log.closed:
            return log
        path = os.path.join(self.root, group_dir_name(group))
        if meta.read_file(os.path.join(path, NAME_FILE)) is None:
            fileio.make_dirs(path)
            self.sync.fsync_dir_now(self.root)
            meta.write_atomic(path, NAME_FILE, group.encode(), self.sync)
        log = GroupLog(path, sync=self.sync, peers=tuple(peers), **options)
        self._open[group] = log
        return log

    def groups(self) -> list[str]:
        names = []
        for entry in os.listdir(self.root):
            raw = meta.read_file(os.path.join(self.root, entry, NAME_FILE))
            if raw is not None:
                names.append(raw.decode())
        return sorted(names)

    def close(self) -> None:
        """Close every group log opened through this directory (each one, even when
        another's close failed); raises the first StorageError or OSError met."""
        first: BaseException | None = None
        for log in self._open.values():
            try:
                log.close()
            except (OSError, StorageError) as exc:
                first = first or exc
        self._open.clear()
        if first is not None:
            raise first
