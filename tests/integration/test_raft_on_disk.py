"""RAFT nodes on the real log storage: a corrupt record is never served and peers repair it.

Three RaftNodes, each on its own GroupLog (one GroupCommit, synced before any message is
delivered: persistence before send). A follower's segment file gets a flipped byte in the
middle of its log; on restart the follower must report the corruption, refuse the range,
catch up from the leader, end with the leader's log, and reopen clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from raft_pump import GROUP, Cluster  # tests/unit/raft (pyproject.toml's pythonpath)

from jetraft.raft import Ready
from jetraft.raft.storage import GroupLog, LogDirectory
from jetraft.storage import GroupCommit
from jetraft.raft.types import Config, CorruptRangeError

ELECTION_TICKS = Config("n", "g").election_ticks  # the pump uses the defaults


class DiskCluster(Cluster):
    """The unit-test pump with GroupLog storage in ``root/<node>``."""

    def __init__(self, ids, root: Path, **cfg) -> None:
        self.root = root
        self.group_commit = GroupCommit()
        super().__init__(ids, **cfg)

    def add(self, node_id, peers=()):
        node = super().add(node_id, peers)  # creates a MemoryStorage we replace at once
        self.storages[node_id] = self.open_log(node_id, peers)
        return self.start(node_id, peers)

    def open_log(self, node_id: str, peers=()) -> GroupLog:
        return LogDirectory(self.root / node_id, self.group_commit).open(GROUP, peers=tuple(peers))

    def handle(self, node_id: str) -> Ready:
        ready = super().handle(node_id)
        self.group_commit.sync()  # before deliver() hands any of ready.messages to a peer
        return ready


def flip_middle_byte(directory: Path) -> Path:
    segments = sorted(directory.rglob("*.log"))
    assert segments, f"no segment files under {directory}"
    path = segments[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def log_of(log: GroupLog) -> list[tuple[int, int, bytes]]:
    return [(e.index, e.term, e.data) for e in log.entries(log.first_index(), log.last_index() + 1)]


def test_corrupt_follower_record_is_refused_then_repaired_by_the_leader(tmp_path):
    cluster = DiskCluster(["a", "b", "c"], tmp_path)
    cluster.elect("a")
    cluster.commit("a", 60, prefix=b"msg-")
    leader_log = log_of(cluster.storages["a"])
    assert len(leader_log) == 61  # the leader's no-op and 60 proposals
    assert log_of(cluster.storages["c"]) == leader_log

    cluster.storages["c"].close()
    flip_middle_byte(tmp_path / "c")
    reopened = cluster.open_log("c")
    kinds = [r["kind"] for r in reopened.recovery_report]
    assert "checksum_mismatch" in kinds, reopened.recovery_report
    bad_from = reopened.last_index() + 1
    assert bad_from < 61, "the log must stop before the corrupt record"
    with pytest.raises(CorruptRangeError):
        reopened.entries(bad_from, bad_from + 1)
    assert reopened.initial_state()[0].commit <= reopened.last_index()

    cluster.storages["c"] = reopened
    cluster.restart("c")
    cluster.commit("a", 5, prefix=b"after-")  # the leader probes c and re-sends what it lacks
    cluster.tick(n=3)

    assert log_of(cluster.storages["c"]) == log_of(cluster.storages["a"])
    applied = [(e.index, e.data) for e in cluster.applied["c"] if e.data]
    expected = [(i, d) for i, _t, d in log_of(cluster.storages["a"]) if d]
    assert applied[-len(expected):] == expected
    cluster.storages["c"].close()
    clean = cluster.open_log("c")
    assert clean.recovery_report == []
    assert log_of(clean) == log_of(cluster.storages["a"])


def test_a_node_that_lost_committed_entries_does_not_elect_a_leader_without_them(tmp_path):
    """Entries committed on {a, c} while b lagged; c's copy is corrupted and a is down.

    Without a guard, c (its log cut back by the corruption) would vote for b, and b would
    become leader without the committed entries and overwrite them. c must refuse until it
    is repaired; when a returns, a leads and every committed entry survives everywhere.
    """
    cluster = DiskCluster(["a", "b", "c"], tmp_path)
    cluster.elect("a")
    cluster.isolate("b")
    cluster.commit("a", 60, prefix=b"acked-")
    committed = [d for _i, _t, d in log_of(cluster.storages["a"]) if d]
    assert len(committed) == 60 and cluster.nodes["a"].commit_index == 61

    cluster.storages["c"].close()
    flip_middle_byte(tmp_path / "c")
    cluster.storages["c"] = cluster.open_log("c")
    assert cluster.storages["c"].commit_watermark() == 61
    assert cluster.storages["c"].last_index() < 61

    cluster.heal()
    cluster.isolate("a")  # a is down
    cluster.restart("c")
    for _ in range(5):  # several election timeouts: b keeps trying
        cluster.nodes["b"].campaign()
        cluster.pump()
        cluster.tick(["b", "c"], n=ELECTION_TICKS * 2)
        assert cluster.nodes["b"].role.name != "LEADER", "b was elected without committed entries"

    cluster.heal()  # a is back
    cluster.tick(n=ELECTION_TICKS * 4)
    leaders = cluster.leaders()
    assert leaders == ["a"], leaders
    cluster.commit("a", 1, prefix=b"later-")
    for node in ("a", "b", "c"):
        data = [d for _i, _t, d in log_of(cluster.storages[node]) if d]
        assert data[:60] == committed, f"{node} lost committed entries"
    assert cluster.storages["c"].commit_watermark() == 0  # repaired, guard lifted
