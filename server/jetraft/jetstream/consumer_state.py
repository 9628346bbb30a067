"""Where a JetStream consumer starts, and the state it persists and hands to a replica (a
mixin of :class:`~jetraft.jetstream.consumer.Consumer`).

Behaviour follows nats-server ``server/consumer.go`` (``selectStartingSeqNo``,
``applyState``) and ``server/store.go`` (``GetSeqFromTime``); the replica state is jetraft's
own (checked by :func:`jetraft.jetstream.replica_state.check_consumer_state`).
"""

from __future__ import annotations

from .consumer_priority import PriorityGroup
from .consumer_pull import _Waiting
from .store import CorruptMessage

_MAX_STATE_VERSION = 1


class _ConsumerState:
    """The starting point and the persisted and replica state of a
    :class:`~jetraft.jetstream.consumer.Consumer`."""

    def _select_start(self) -> None:
        """nats-server ``selectStartingSeqNo``."""
        cfg, store = self.config, self._store
        st = store.state()
        sseq = 0
        if cfg.opt_start_seq:
            sseq = cfg.opt_start_seq
        elif cfg.deliver_policy == "all":
            sseq = st.first_seq
        elif cfg.deliver_policy == "last":
            if not self._filters:
                sseq = st.last_seq
            else:
                sseq = max(store.last_seq_for_subject(f) for f in self._filters)
        elif cfg.deliver_policy == "last_per_subject":
            if self.stream.config.max_msgs_per_subject == 1:
                sseq = st.first_seq
            else:
                names: set[str] = set()
                for f in self._filters or [">"]:
                    names.update(store.subjects_state(f))
                seqs = sorted(store.last_seq_for_subject(s) for s in names)
                self._lss_resume = st.last_seq
                if seqs:
                    sseq = seqs[0]
                    self._lss = seqs
                else:
                    sseq = st.last_seq
        elif cfg.opt_start_time is not None:
            sseq = self._seq_from_time(cfg.opt_start_time, st.last_seq)
        else:   # new
            sseq = st.last_seq + 1
        if st.last_seq == 0 and not cfg.opt_start_seq:
            sseq = 1
        elif sseq > st.last_seq and not cfg.opt_start_seq:
            sseq = st.last_seq + 1
        elif sseq < st.first_seq:
            sseq = st.first_seq
        self._sseq = sseq
        self._dseq = 1
        self._adflr, self._asflr = 0, sseq - 1
        self._st_dc, self._st_ds = 0, sseq - 1
        self._st_ac, self._st_as = 0, sseq - 1

    def _seq_from_time(self, ts: int, last: int) -> int:
        """First sequence stored at or after ``ts`` (nats-server ``GetSeqFromTime``)."""
        seq = 0
        while True:
            try:
                sm = self._store.load_next(">", seq)
            except CorruptMessage:
                seq += 1
                continue
            if sm is None:
                return last + 1
            if sm.ts >= ts:
                return sm.seq
            seq = sm.seq + 1

    def state_to_json(self) -> dict:
        """The persistent state as a JSON-safe dict; clears :attr:`dirty`. Shape:
        ``{"version": 1, "delivered": {"consumer_seq","stream_seq"}, "ack_floor": {...},
        "next": {...}, "floor": {...}, "pending": [[sseq, cseq, ts ns], ...],
        "redelivered": [[sseq, count], ...], "last_per_subject": {"resume", "seqs"}|None,
        "last_delivered": ns|None, "last_ack": ns|None}``."""
        self.dirty = False
        return {
            "version": _MAX_STATE_VERSION,
            "delivered": {"consumer_seq": self._st_dc, "stream_seq": self._st_ds},
            "ack_floor": {"consumer_seq": self._st_ac, "stream_seq": self._st_as},
            "next": {"consumer_seq": self._dseq, "stream_seq": self._sseq},
            "floor": {"consumer_seq": self._adflr, "stream_seq": self._asflr},
            "pending": [[s, p[0], p[1]] for s, p in sorted(self._pending.items())],
            "redelivered": [[s, n] for s, n in sorted(self._rdc.items())],
            "last_per_subject": None if self._lss is None else
            {"resume": self._lss_resume, "seqs": list(self._lss)},
            "last_delivered": self._ldt,
            "last_ack": self._lat,
        }

    # --- a clustered replica's snapshot (jetstream/replica_state.py) ----------------------
    def replica_state(self) -> dict:
        """The consumer's whole working state, beyond :meth:`state_to_json`: everything its
        later inputs depend on (waiting pull requests, the redelivery queue in order, flow
        control, heartbeat and inactivity clocks, cached pending counts). Made of dict,
        list, int, str, bool and None only; the shape is checked by
        :func:`jetraft.jetstream.replica_state.check_consumer_state`, which lists its keys.
        Not included: ``stream``, ``name``, ``config``, ``created_ns`` (the caller's) and
        ``has_interest``, and what :meth:`_apply_config` derives from the config. A consumer
        that keeps a pace (replay original, a rate limit) adds ``pace``
        (:meth:`~jetraft.jetstream.consumer_pacing._Pacing.pace_state`); one with priority
        groups, a pin or a RAFT term seen adds ``priority``
        (:meth:`~jetraft.jetstream.consumer_priority._Priority.priority_state`); a waiting
        request with priority fields has them as a ninth item."""
        state = {
            "sseq": self._sseq, "dseq": self._dseq, "adflr": self._adflr, "asflr": self._asflr,
            "st_dc": self._st_dc, "st_ds": self._st_ds, "st_ac": self._st_ac, "st_as": self._st_as,
            "pending": [[s, p[0], p[1]] for s, p in self._pending.items()],
            "rdc": [[s, n] for s, n in self._rdc.items()],
            "rdq": list(self._rdq),
            "waiting": [[w.reply, w.n, w.b, w.expires, w.hb, w.hbt, w.no_wait, w.d]
                        + ([] if w.pg is None else [w.pg.to_state()])
                        for w in self._waiting],
            "lss": None if self._lss is None else list(self._lss),
            "lss_resume": self._lss_resume,
            "lss_undo": None if self._lss_undo is None else list(self._lss_undo),
            "npc": self._npc, "seen_last": self._seen_last, "npc_stale": self._npc_stale,
            "ldt": self._ldt, "lat": self._lat,
            "acked": list(self._acked),
            "pcheck": self._pcheck, "pcheck_stale": self._pcheck_stale,
            "last_request": self._last_request,
            "no_interest_since": self._no_interest_since,
            "active": self._active, "hb_next": self._hb_next,
            "pbytes": self._pbytes, "fcid": self._fcid, "fcsz": self._fcsz,
            "pblimit": self._pblimit, "maxpb": self._maxpb, "fc_count": self._fc_count,
            "dirty": self.dirty, "closed": self._closed,
        }
        if self.paces:
            state["pace"] = self.pace_state()
        state["unpause_due"] = self._unpause_due
        if self.config.priority_groups or self._pin or self._term:
            state["priority"] = self.priority_state()
        return state

    def restore_replica_state(self, state: dict) -> None:
        """Take the working state :meth:`replica_state` returned, as checked (and copied)
        by :func:`jetraft.jetstream.replica_state.check_consumer_state`; it must be of a
        consumer with this config on a stream holding the same messages. Never raises
        for a checked state."""
        self._sseq, self._dseq = state["sseq"], state["dseq"]
        self._adflr, self._asflr = state["adflr"], state["asflr"]
        self._st_dc, self._st_ds = state["st_dc"], state["st_ds"]
        self._st_ac, self._st_as = state["st_ac"], state["st_as"]
        self._pending = {s: [d, t] for s, d, t in state["pending"]}
        self._rdc = {s: n for s, n in state["rdc"]}
        self._rdq = list(state["rdq"])
        self._waiting = [_Waiting(*w[:8], PriorityGroup(*w[8]) if len(w) > 8 else None)
                         for w in state["waiting"]]
        self._lss = None if state["lss"] is None else list(state["lss"])
        self._lss_resume = state["lss_resume"]
        undo = state["lss_undo"]
        self._lss_undo = None if undo is None else (undo[0], undo[1])
        self._npc, self._seen_last = state["npc"], state["seen_last"]
        self._npc_stale = state["npc_stale"]
        self._ldt, self._lat = state["ldt"], state["lat"]
        self._acked = list(state["acked"])
        self._pcheck, self._pcheck_stale = state["pcheck"], state["pcheck_stale"]
        self._last_request = state["last_request"]
        self._no_interest_since = state["no_interest_since"]
        self._active, self._hb_next = state["active"], state["hb_next"]
        self._pbytes, self._fcid, self._fcsz = state["pbytes"], state["fcid"], state["fcsz"]
        self._pblimit, self._maxpb = state["pblimit"], state["maxpb"]
        self._fc_count = state["fc_count"]
        self.dirty, self._closed = state["dirty"], state["closed"]
        if state.get("pace") is not None:
            self.restore_pace_state(state["pace"])
        self._unpause_due = bool(state.get("unpause_due", False))
        if state.get("priority") is not None:
            self.restore_priority_state(state["priority"])

    def _restore(self, state: dict) -> None:
        """nats-server ``applyState`` (plus the working sequences jetraft also keeps)."""
        d, a = state.get("delivered") or {}, state.get("ack_floor") or {}
        self._st_dc, self._st_ds = int(d.get("consumer_seq", 0)), int(d.get("stream_seq", 0))
        self._st_ac, self._st_as = int(a.get("consumer_seq", 0)), int(a.get("stream_seq", 0))
        nxt = state.get("next") or {"consumer_seq": self._st_dc + 1,
                                    "stream_seq": self._st_ds + 1}
        flr = state.get("floor") or a
        self._dseq, self._sseq = int(nxt["consumer_seq"]), int(nxt["stream_seq"])
        self._adflr = int(flr.get("consumer_seq", 0))
        self._asflr = int(flr.get("stream_seq", 0))
        self._pending = {int(s): [int(c), int(t)] for s, c, t in state.get("pending") or []}
        self._rdc = {int(s): int(n) for s, n in state.get("redelivered") or []}
        lss = state.get("last_per_subject")
        if lss:
            self._lss = [int(s) for s in lss["seqs"]] or None
            self._lss_resume = int(lss["resume"])
        self._ldt = state.get("last_delivered")
        self._lat = state.get("last_ack")
        if self._pending:
            self._pcheck = min(self._deadline(s) for s in self._pending)
