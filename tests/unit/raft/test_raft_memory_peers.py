"""MemoryStorage's configuration after a snapshot taken without compaction."""

from jetraft.raft.memory import MemoryStorage
from jetraft.raft.types import ConfigChange, ConfigChangeType, Entry, EntryType


def config_entry(index: int, kind: ConfigChangeType, peer: str) -> Entry:
    return Entry(1, index, EntryType.CONFIG_CHANGE, ConfigChange(kind, peer).encode())


def test_snapshot_without_compaction_counts_each_change_once():
    storage = MemoryStorage(peers=("a", "b", "c"))
    storage.append([Entry(1, 1), config_entry(2, ConfigChangeType.ADD_PEER, "d"), Entry(1, 3),
                    config_entry(4, ConfigChangeType.REMOVE_PEER, "a")])
    storage.create_snapshot(3, b"state", ("a", "b", "c", "d"))
    # The ADD at index 2 is inside the snapshot; only the REMOVE at 4 applies on top of it.
    assert sorted(storage.initial_state()[1]) == ["b", "c", "d"]
    storage.compact(3)
    assert sorted(storage.initial_state()[1]) == ["b", "c", "d"]
