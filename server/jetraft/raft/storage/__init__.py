"""Durable RAFT log storage: segment files with chained checksums, on the storage layer
(:mod:`jetraft.storage`: the file operations and the group commit).

- :class:`GroupLog` — one group's log in its own directory; implements
  :class:`jetraft.raft.types.Storage` plus the write side (append, set_hard_state,
  apply_snapshot, create_snapshot, compact, close).
- :class:`~jetraft.storage.GroupCommit` (the storage layer) — one per server: batches the
  fsyncs of every group (``sync()``).
- :class:`LogDirectory` — maps group names to subdirectories of a server's store.
- :mod:`jetraft.storage.fileio` — the seam every write, truncation and fsync goes
  through (fault injection for tests: a full disk, an I/O error).

A failed write or fsync stops only the log (or store) it happened to: :class:`~jetraft.storage.SyncFailed`
names the owners of the files that failed, and ``GroupLog.rollback_to_durable`` puts a
failed log back to what is provably on disk before it is reopened.

File formats are in :mod:`.wal` (segments, records) and :mod:`.meta` (hard state,
snapshot). Why checksums, repair and fsync-before-ack: Jepsen's NATS 2.12.1 analysis
(nats-server #7549 bit flips, #7564 lazy fsync).
"""

from .directory import LogDirectory
from .group import GroupLog

__all__ = ["GroupLog", "LogDirectory"]
