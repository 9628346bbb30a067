"""Per-peer replication progress kept by a jetraft leader (etcd tracker/progress.go,
tracker/inflights.go, in our own shape).

A leader tracks, for every other peer of its configuration, the highest index known to
match (``match``) and the next index to send (``next``), in one of three states:

* ``probe``: the leader does not know where the follower's log ends; it sends one
  AppendEntries at a time and waits for the answer (or a heartbeat response) before the
  next (Raft §5.3 "decrement nextIndex and retry", done one probe per round trip);
* ``replicate``: the follower accepted an append; the leader streams entries optimistically,
  advancing ``next`` as it sends, bounded by the inflight window (flow control);
* ``snapshot``: the entries the follower needs were compacted; an InstallSnapshot (Raft §7)
  is on its way and nothing else is sent until the follower answers.
"""

from __future__ import annotations

from collections import deque

PROBE = "probe"
REPLICATE = "replicate"
SNAPSHOT = "snapshot"


class Inflights:
    """The AppendEntries in flight to one follower, as the last index each carried.

    At most ``size`` messages are outstanding; an accepted index frees every message up to
    it (etcd tracker/inflights.go FreeLE). A heartbeat response frees the oldest one so a
    lost append cannot stall a follower forever (etcd raft.go stepLeader MsgHeartbeatResp).
    """

    __slots__ = ("size", "_q")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("max_inflight must be at least 1")
        self.size = size
        self._q: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def full(self) -> bool:
        return len(self._q) >= self.size

    def add(self, last_index: int) -> None:
        """Record one more message whose last entry is ``last_index``.

        Raises RuntimeError when the window is full (callers check :meth:`full` first)."""
        if len(self._q) >= self.size:
            raise RuntimeError("inflight window overflow")
        self._q.append(last_index)

    def free_le(self, index: int) -> None:
        """Forget every message whose last index is <= ``index`` (they were accepted)."""
        q = self._q
        while q and q[0] <= index:
            q.popleft()

    def free_first_one(self) -> None:
        if self._q:
            self._q.popleft()

    def reset(self) -> None:
        self._q.clear()


class Progress:
    """One follower's replication progress as seen by the leader (etcd tracker.Progress).

    ``match``/``next`` are log indexes; ``probe_sent`` pauses a probing peer until it
    answers; ``recent_active`` is set by any message from the peer and cleared by the
    leader's check-quorum round (thesis §6.2); ``pending_snapshot`` is the index of the
    snapshot in flight; ``snapshot_stale`` marks a snapshot send older than one check-quorum
    round (then the leader falls back to probing, as etcd's ReportSnapshot failure would).
    """

    __slots__ = (
        "match",
        "next",
        "state",
        "probe_sent",
        "recent_active",
        "inflights",
        "pending_snapshot",
        "snapshot_stale",
    )

    def __init__(self, next_index: int, max_inflight: int, *, match: int = 0) -> None:
        self.match = match
        self.next = next_index
        self.state = PROBE
        self.probe_sent = False
        self.recent_active = False
        self.inflights = Inflights(max_inflight)
        self.pending_snapshot = 0
        self.snapshot_stale = False

    def become_probe(self) -> None:
        """Back to probing; after a snapshot, resume after it (etcd BecomeProbe)."""
        if self.state == SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflights.reset()

    def become_replicate(self) -> None:
        self.state = REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflights.reset()

    def become_snapshot(self, index: int) -> None:
        self.state = SNAPSHOT
        self.pending_snapshot = index
        self.snapshot_stale = False
        self.probe_sent = False
        self.inflights.reset()

    def is_paused(self) -> bool:
        """Whether the leader must not send entries now (etcd Progress.IsPaused)."""
        state = self.state
        if state == REPLICATE:
            return len(self.inflights) >= self.inflights.size
        if state == PROBE:
            return self.probe_sent
        return True

    def maybe_update(self, index: int) -> bool:
        """An append up to ``index`` was accepted. Returns whether ``match`` grew."""
        updated = False
        if self.match < index:
            self.match = index
            self.probe_sent = False
            updated = True
        if self.next < index + 1:
            self.next = index + 1
        return updated

    def maybe_decr_to(self, rejected: int, hint: int) -> bool:
        """An append with previous index ``rejected`` was refused; the follower suggests
        ``hint`` as the last index that may match (fast backtracking, Raft §5.3 end and
        etcd Progress.MaybeDecrTo). Returns False for a stale rejection.

        A rejection of the follower's own acknowledged match with a hint below it means the
        follower lost entries it had stored: its log had a corrupt range, which the storage
        refuses to serve and which must be repaired from the leader. etcd treats this as
        stale and would re-send the same append forever; we lower ``match`` to the hint and
        probe from there. Lowering ``match`` can only delay commits, never undo one.
        """
        if rejected == self.match and hint < self.match:
            self.match = hint
            self.next = hint + 1
            self.probe_sent = False
            return True
        if self.state == REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def as_dict(self) -> dict:
        return {
            "match": self.match,
            "next": self.next,
            "state": self.state,
            "recent_active": self.recent_active,
            "inflight": len(self.inflights),
        }
