"""The storage layer, below :mod:`jetraft.raft` and :mod:`jetraft.jetstream`: the one seam
every change to the disk goes through (:mod:`.fileio`: writes, truncations, fsyncs, renames,
deletions, with fault injection for tests) and the group commit that makes a batch of writes
durable with one fsync per dirty file (:mod:`.group_commit`). The file formats stay with
their owners: the RAFT log's segments in :mod:`jetraft.raft.storage`, a stream's blocks in
:mod:`jetraft.jetstream.store_format`.
"""

from jetraft.storage.group_commit import (
    GroupCommit,
    StorageError,
    SyncFailed,
    SyncFailure,
    SyncFile,
    storage_error,
)

__all__ = ["GroupCommit", "StorageError", "SyncFailed", "SyncFailure", "SyncFile", "storage_error"]
