"""Log replication of :class:`~jetraft.raft.node.RaftNode` (Raft §5.3, §5.4.2; thesis §4.1
for membership): the follower side (AppendEntries, heartbeats, InstallSnapshot), the log
appends and the configuration changes they carry, and the leader side (probe/replicate/
snapshot progress, the inflight window, batched appends, the commit rule). A part of the
node over its state (the node's ``__slots__``); see :mod:`jetraft.raft.node` for the rules.
"""

from __future__ import annotations

from jetraft.raft.memory import apply_membership as _apply_membership
from jetraft.raft.progress import PROBE, REPLICATE, SNAPSHOT, Progress
from jetraft.raft.types import (
    CompactedError,
    CorruptRangeError,
    Entry,
    EntryType,
    Message,
    MessageType,
    Role,
    Snapshot,
    UnavailableError,
)

#: ``Message.context`` of a VOTE sent by a leadership-transfer target: voters grant it even
#: within the leader lease (etcd campaignTransfer).
TRANSFER_CONTEXT = b"jetraft:transfer"

_VOTE = MessageType.VOTE
_VOTE_RESP = MessageType.VOTE_RESPONSE
_PRE_VOTE = MessageType.PRE_VOTE
_PRE_VOTE_RESP = MessageType.PRE_VOTE_RESPONSE
_APPEND = MessageType.APPEND
_APPEND_RESP = MessageType.APPEND_RESPONSE
_HEARTBEAT = MessageType.HEARTBEAT
_HEARTBEAT_RESP = MessageType.HEARTBEAT_RESPONSE
_SNAPSHOT = MessageType.SNAPSHOT
_TIMEOUT_NOW = MessageType.TIMEOUT_NOW
_PROPOSE = MessageType.PROPOSE
_READ_INDEX = MessageType.READ_INDEX
_READ_INDEX_RESP = MessageType.READ_INDEX_RESPONSE
_TRANSFER = MessageType.TRANSFER_LEADER
_FORWARDED = (_PROPOSE, _READ_INDEX, _TRANSFER)
_FROM_LEADER = (_APPEND, _HEARTBEAT, _SNAPSHOT)
_CONFIG = EntryType.CONFIG_CHANGE
_NORMAL = EntryType.NORMAL


class Replication:
    """The node's replication: mixed into :class:`~jetraft.raft.node.RaftNode`."""

    __slots__ = ()

    # -- replication, follower side (Raft §5.3) ------------------------------------------

    def _handle_append(self, msg: Message) -> None:
        log = self._log
        if msg.index < log.committed:
            self._send(_APPEND_RESP, msg.src, index=log.committed)
            return
        if log.match_term(msg.index, msg.log_term):
            ents = msg.entries
            if ents:
                ci = log.find_conflict(ents)
                if ci:
                    if ci <= log.committed:
                        return  # would rewrite a committed entry: not from a valid leader
                    self._append(ents[ci - ents[0].index :])
            last_new = msg.index + len(ents)
            self._follower_commit(min(msg.commit, last_new))
            self._send(_APPEND_RESP, msg.src, index=last_new)
            return
        hint = min(msg.index, log.last_index())
        hint, hint_term = log.find_conflict_by_term(hint, msg.log_term)
        self._send(
            _APPEND_RESP,
            msg.src,
            index=msg.index,
            reject=True,
            reject_hint=hint,
            log_term=hint_term,
        )

    def _handle_heartbeat(self, msg: Message) -> None:
        """Commit what the leader says and we hold. A log that ends before the leader's
        commit answers with ``reject`` and its last index as ``reject_hint``: a leader
        that counted more of it (this log lost entries to corruption) probes it again
        (:meth:`_handle_heartbeat_response`)."""
        last = self._log.last_index()
        self._follower_commit(min(msg.commit, last))
        if last < msg.commit:
            self._send(_HEARTBEAT_RESP, msg.src, context=msg.context, reject=True, reject_hint=last)
        else:
            self._send(_HEARTBEAT_RESP, msg.src, context=msg.context)

    def _follower_commit(self, index: int) -> None:
        """Followers commit only what the leader says and they hold (Raft §5.3)."""
        if self._log.commit_to(index):
            self._committed()

    def _handle_snapshot(self, msg: Message) -> None:
        """InstallSnapshot (Raft §7). Answers with the last index now held."""
        snap = msg.snapshot
        if snap is None:
            return
        if self._restore(snap):
            self._send(_APPEND_RESP, msg.src, index=self._log.last_index())
        else:
            self._send(_APPEND_RESP, msg.src, index=self._log.committed)

    def _restore(self, snap: Snapshot) -> bool:
        """Install ``snap`` unless it is old (at or below our commit) or we already hold
        its last entry, in which case only the commit index moves (etcd raft.go restore)."""
        log = self._log
        if snap.index <= log.committed:
            return False
        if log.match_term(snap.index, snap.term):
            self._follower_commit(snap.index)
            return False
        log.restore(snap)
        self._peers = tuple(snap.peers)
        self._learners = tuple(snap.learners)
        self._conf_hist = [(snap.index, self._peers, self._learners)]
        self._emit("raft_snapshot_installed", index=snap.index, term=snap.term)
        self._committed()
        return True

    # -- log appends and membership (thesis §4.1) ----------------------------------------

    def _append(self, ents: list[Entry] | tuple[Entry, ...]) -> None:
        """Append ``ents`` to our log; configuration entries take effect now, and those of a
        truncated suffix are undone (thesis §4.1)."""
        log = self._log
        if ents[0].index <= log.last_index():
            self._undo_config_from(ents[0].index)
        log.append(ents)
        for e in ents:
            if e.type == _CONFIG:
                self._config_appended(e)

    def _append_as_leader(self, ents: list[Entry]) -> None:
        if not ents:
            return
        self._append(ents)
        self._bcast = True

    def _config_appended(self, e: Entry) -> None:
        old, old_l = self._peers, self._learners
        new, new_l = _apply_membership(old, old_l, e)
        if new == old and new_l == old_l:
            return
        self._peers, self._learners = new, new_l
        self._conf_hist.append((e.index, new, new_l))
        self._config_changed(old, old_l, e.index)

    def _undo_config_from(self, index: int) -> None:
        hist = self._conf_hist
        if hist[-1][0] < index:
            return
        old, old_l = self._peers, self._learners
        while len(hist) > 1 and hist[-1][0] >= index:
            hist.pop()
        _, self._peers, self._learners = hist[-1]
        self._config_changed(old, old_l, index)

    def _config_changed(self, old: tuple[str, ...], old_l: tuple[str, ...], index: int) -> None:
        """The configuration went from voters ``old`` and learners ``old_l`` to the current
        one: events, and the leader's progress trackers (a learner keeps its tracker when
        promoted or demoted)."""
        new, new_l = self._peers, self._learners
        leader = self._role is Role.LEADER
        for p in new + new_l:
            if p in old or p in old_l:
                if (p in new) != (p in old):
                    self._emit("raft_peer_promoted" if p in new else "raft_peer_demoted",
                               term=self._term, peer=p, index=index)
                continue
            self._emit("raft_peer_added", term=self._term, peer=p, index=index,
                       learner=p in new_l)
            if leader and p != self._id:
                pr = Progress(self._log.last_index() + 1, self._cfg.max_inflight)
                pr.recent_active = True
                self._prs[p] = pr
        for p in old + old_l:
            if p not in new and p not in new_l:
                self._emit("raft_peer_removed", term=self._term, peer=p, index=index,
                           learner=p in old_l)
                if leader:
                    self._prs.pop(p, None)
                    if self._transferee == p:
                        self._transferee = None
        if leader:
            self._pending_conf_index = max(self._pending_conf_index, index)
            self._maybe_commit()

    # -- replication, leader side --------------------------------------------------------

    def _self_match(self) -> int:
        return self._log.stable_index()

    def _may_commit(self, index: int) -> bool:
        """Raft §5.4.2: a leader commits by counting replicas only an entry of its own
        term (earlier entries are committed indirectly)."""
        return self._log.term(index) == self._term

    def _maybe_commit(self) -> bool:
        """Advance the commit index to the highest index held by a quorum of the current
        configuration, if _may_commit allows it (Raft §5.3, §5.4.2)."""
        peers = self._peers
        if not peers:
            return False
        me = self._id
        prs = self._prs
        matches = sorted(
            (self._self_match() if p == me else prs[p].match for p in peers), reverse=True
        )
        n = matches[self._quorum() - 1]
        log = self._log
        if n <= log.committed or not self._may_commit(n):
            return False
        log.commit_to(n)
        if self._cfg.commit_broadcast:
            self._bcast = self._bcast_empty = True
        self._committed()
        if self._read_only.waiting and self.commit_current:
            for ctx, src in self._read_only.take_waiting():
                self._leader_read(ctx, src)
        if me not in peers and self._pending_conf_index <= n:
            self._step_down_removed()
        return True

    def _committed(self) -> None:
        """Bookkeeping after the commit index moved: event, config history pruning."""
        c = self._log.committed
        hist = self._conf_hist
        if len(hist) > 1 and hist[1][0] <= c:
            i = 1
            while i + 1 < len(hist) and hist[i + 1][0] <= c:
                i += 1
            del hist[:i]
        self._emit("raft_commit_advanced", term=self._term, commit=c)

    def _step_down_removed(self) -> None:
        """thesis §4.2.2: a leader removed from the configuration steps down once that is
        committed; it hands over to the most up-to-date peer with TIMEOUT_NOW."""
        best = max(((p, pr) for p, pr in self._prs.items() if p in self._peers),
                   key=lambda kv: kv[1].match, default=None)
        if best is not None and best[1].match == self._log.last_index():
            self._send(_TIMEOUT_NOW, best[0])
        self._become_follower(self._term, None)

    def _send_append(self, to: str, pr: Progress, send_if_empty: bool = True) -> bool:
        """Send entries from pr.next (etcd raft.go maybeSendAppend): many per message up
        to max_entries_per_message / max_bytes_per_message; in replicate state ``next``
        advances optimistically and the message joins the inflight window. Falls back to a
        snapshot when the entries were compacted. Returns whether a message was sent."""
        if pr.is_paused():
            return False
        log = self._log
        nxt = pr.next
        last = log.last_index()
        try:
            prev_term = log.term(nxt - 1)
            if nxt <= last:
                cfg = self._cfg
                ents = log.slice(
                    nxt, min(last + 1, nxt + cfg.max_entries_per_message), cfg.max_bytes_per_message
                )
            else:
                ents = []
        except CompactedError:
            return self._send_snapshot(to, pr)
        except (CorruptRangeError, UnavailableError):
            return False  # not servable now; a later round retries
        if not ents and not send_if_empty:
            return False
        self._msgs.append(
            Message(
                _APPEND,
                self._group,
                self._id,
                to,
                self._term,
                prev_term,
                nxt - 1,
                tuple(ents),
                log.committed,
            )
        )
        if pr.state == REPLICATE:
            if ents:
                end = ents[-1].index
                pr.next = end + 1
                pr.inflights.add(end)
        else:
            pr.probe_sent = True
        return True

    def _send_snapshot(self, to: str, pr: Progress) -> bool:
        """InstallSnapshot (Raft §7) when the follower needs compacted entries; only to a
        recently active peer (etcd maybeSendSnapshot)."""
        if not pr.recent_active:
            return False
        snap = self._storage.snapshot()
        if snap.index == 0:
            return False
        pr.become_snapshot(snap.index)
        self._send(_SNAPSHOT, to, snapshot=snap)
        return True

    def _flush(self) -> None:
        """Send the appends that proposals and commit advances made due, batched: one
        message per peer for everything proposed since the last Ready."""
        if self._bcast:
            empty = self._bcast_empty
            self._bcast = self._bcast_empty = False
            if self._role is Role.LEADER:
                for p, pr in self._prs.items():
                    if self._send_append(p, pr, empty) and pr.state == REPLICATE:
                        while self._send_append(p, pr, False):
                            pass
        if self._forward:
            fwd, self._forward = self._forward, []
            if self._leader is not None and self._leader != self._id:
                self._send(_PROPOSE, self._leader, term=0, entries=tuple(fwd))

    def _handle_append_response(self, msg: Message, pr: Progress) -> None:
        """etcd raft.go stepLeader MsgAppResp: back off with the hint on reject, else
        advance match, switch to replicate, commit, and keep the pipe full."""
        if msg.reject:
            hint = msg.reject_hint
            if msg.log_term > 0:
                hint, _ = self._log.find_conflict_by_term(hint, msg.log_term)
            if pr.maybe_decr_to(msg.index, hint):
                if pr.state == REPLICATE:
                    pr.become_probe()
                self._send_append(msg.src, pr)
            return
        was_paused = pr.is_paused()
        if not pr.maybe_update(msg.index):
            return
        if pr.state == PROBE:
            pr.become_replicate()
        elif pr.state == SNAPSHOT:
            if pr.match + 1 >= self._log.first_index() or pr.match >= pr.pending_snapshot:
                pr.become_probe()
                pr.become_replicate()
        else:
            pr.inflights.free_le(msg.index)
        if not self._maybe_commit() and was_paused:
            self._send_append(msg.src, pr)
        if self._role is not Role.LEADER:
            return
        while self._send_append(msg.src, pr, False):
            pass
        if msg.src == self._transferee and pr.match == self._log.last_index():
            self._send(_TIMEOUT_NOW, msg.src)

    def _handle_heartbeat_response(self, msg: Message, pr: Progress) -> None:
        pr.recent_active = True
        pr.probe_sent = False
        if msg.reject and msg.reject_hint < pr.match and pr.state != SNAPSHOT:
            # The follower's log ends before entries it acknowledged (cut after damage on
            # restart): it no longer holds them, so stop counting them and probe from there.
            pr.match = msg.reject_hint
            pr.become_probe()
        if pr.state == REPLICATE and pr.inflights.full():
            pr.inflights.free_first_one()
        if pr.match < self._log.last_index():
            self._send_append(msg.src, pr)
        if msg.context:
            self._read_ack(msg.context, msg.src)

    def _bcast_heartbeat(self) -> None:
        ctx = self._read_only.last_context()
        commit = self._log.committed
        for p, pr in self._prs.items():
            self._send(_HEARTBEAT, p, commit=min(pr.match, commit), context=ctx)
