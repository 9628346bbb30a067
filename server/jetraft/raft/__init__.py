"""jetraft's RAFT layer: the pure consensus core (:class:`RaftNode`), its contract
(:mod:`.types`) and the in-memory storage (:class:`MemoryStorage`). Sans-IO: no sockets,
no clocks, no trio; the driver persists, sends and ticks."""

from .log import RaftLog
from .memory import MemoryStorage
from .node import TRANSFER_CONTEXT, RaftNode
from .progress import Inflights, Progress
from .types import (
    CompactedError,
    Config,
    ConfigChange,
    ConfigChangeType,
    CorruptRangeError,
    Entry,
    EntryType,
    EventHook,
    HardState,
    Message,
    MessageType,
    NotLeaderError,
    ProposalDroppedError,
    RaftError,
    ReadState,
    Ready,
    Role,
    Snapshot,
    Storage,
    UnavailableError,
)

__all__ = [
    "TRANSFER_CONTEXT",
    "CompactedError",
    "Config",
    "ConfigChange",
    "ConfigChangeType",
    "CorruptRangeError",
    "Entry",
    "EntryType",
    "EventHook",
    "HardState",
    "Inflights",
    "MemoryStorage",
    "Message",
    "MessageType",
    "NotLeaderError",
    "Progress",
    "ProposalDroppedError",
    "RaftError",
    "RaftLog",
    "RaftNode",
    "ReadState",
    "Ready",
    "Role",
    "Snapshot",
    "Storage",
    "UnavailableError",
]
