"""The jetraft JetStream consumer state machine (one consumer of one stream).

Deterministic and sans-IO: the only I/O is the stream store's reads; time is passed in as
``now_ns`` (ns since the epoch); nothing here starts a timer. Every method returns the
:class:`~jetraft.jetstream.outbound.Outbound` messages to route; the server calls
:meth:`Consumer.poll` after every publish to the stream, after acks, and when
:meth:`Consumer.next_deadline` is reached.

Behaviour follows nats-server ``server/consumer.go`` (re-implemented, checked against a
running nats-server 2.15.1):

- delivery (``getNextMsg``, ``loopAndGatherMsgs``, ``deliverMsg``): redeliveries first,
  then ``max_ack_pending``, then the ``last_per_subject`` skip list, then the next stream
  message matching ``filter_subject``/``filter_subjects``. A delivered message keeps the
  stored subject and headers; its reply is the ack subject
  ``$JS.ACK.<stream>.<consumer>.<delivery count>.<stream seq>.<consumer seq>.<ts ns>.<pending>``
  (also with ack policy none, as nats-server). ``headers_only`` drops the payload and adds
  ``Nats-Msg-Size: <payload bytes>`` (``convertToHeadersOnly``).
- pull requests (``nextReqFromMsg``, ``processNextMsgRequest``, ``nextWaiting``,
  ``processWaiting``): statuses ``409 Consumer is push based``, ``400 Bad Request - <why>``,
  ``409 Exceeded MaxRequestBatch of N``, ``409 Exceeded MaxRequestExpires of <Go duration>``,
  ``409 Exceeded MaxRequestMaxBytes of N``, ``409 Exceeded MaxWaiting``,
  ``404 No Messages``, ``408 Requests Pending``, ``408 Request Timeout`` /
  ``409 Message Size Exceeds MaxBytes`` / ``409 Batch Completed`` (these three with
  ``Nats-Pending-Messages`` and ``Nats-Pending-Bytes``), ``100 Idle Heartbeat`` (with
  ``Nats-Last-Consumer``/``Nats-Last-Stream``), ``409 Consumer Deleted``, and for priority
  groups the ``400``s of a request's priority fields, ``423 Nats-Pin-Id mismatch`` and
  ``423 Nats-Wrong-Pin-Id`` (:mod:`~jetraft.jetstream.consumer_priority`). A waiting
  request whose reply subject lost its interest (``has_interest``) is dropped silently.
- acks (``processAck``, ``processAckMsg``, ``processNak``, ``processTerm``,
  ``progressUpdate``), ack floors (``moveAckFloor`` for the working floor; the floor
  reported by INFO and persisted follows the consumer store, ``memstore.go UpdateAcks``:
  with nothing pending it equals the last delivered pair).
- ack wait / backoff / max_deliver (``checkPending``, ``hasMaxDeliveries``): the n-th
  redelivery of a message waits ``backoff[min(n-1, len-1)]`` after the previous delivery.
- push flow control and heartbeats (``needFlowControl``, ``sendFlowControl``,
  ``processFlowControl``, ``sendIdleHeartbeat``): ``100 FlowControl Request`` with reply
  ``$JS.FC.<stream>.<consumer>.<4 chars>``; delivery stalls while more than the window
  (2 MiB, doubling on each answer up to 32 MiB; a message counts its deliver subject, ack
  subject, headers and payload) is unanswered; ``Nats-Consumer-Stalled`` on heartbeats
  while stalled. A push heartbeat goes ``idle_heartbeat`` after the last delivery or
  heartbeat, when the deliver subject has interest.
- the pace (``loopAndGatherMsgs``'s replay and rate limiter): ``replay_policy: original``
  and ``rate_limit_bps`` (:mod:`~jetraft.jetstream.consumer_pacing`).

Contract addition -- :class:`Delivery`: a delivered stream message is routed to the pull
request's reply subject or the push deliver subject, yet the client must see the stored
message's subject in its MSG/HMSG line (nats-server ``deliverMsg`` routes by ``dsubj`` and
writes the original subject; nats-py KV watchers read keys from it). An ``Outbound`` has one
subject, so deliveries are :class:`Delivery` (an ``Outbound`` subclass): ``subject`` is
where to route (inbox / deliver subject; a dispatcher unaware of the subclass still routes
correctly), ``msg_subject`` is the subject to write on the wire (the message's
``deliver_as`` when it differs). Every other message
(statuses, heartbeats, flow control, ack replies) is a plain ``Outbound`` whose subject is
both.

Deviations from nats-server, by design:

- a pull request body that is neither JSON nor an integer is a request for one message, as
  nats-server ``nextReqFromMsg`` does (not a 400: nats-server sends nothing else);
- ``direct`` and ``sourcing`` are refused when the consumer is created (model.py
  ``ConsumerConfig.check_supported``), so never reach this class;
- a message removed from the stream while pending is dropped from the pending set (as a
  term of that one message, whatever the ack policy; nats-server's ack-all consumer
  acknowledges everything below it then);
- ``is_inactive`` follows nats-server ``deleteNotActive``: it applies to any consumer with
  ``inactive_threshold`` > 0 and to ephemerals without one (nats-server's 5 s default).

Store access: the counts of messages still to deliver come from the store's
``num_pending(filters, start, last)``, and subjects of pending messages from its
``subject_of(seq)`` (both answered from the store's index, without I/O).

The consumer's concerns are modules beside this one, mixed into :class:`Consumer` (which
keeps its state, configuration, store reads, timer, lifecycle and INFO):
:mod:`~jetraft.jetstream.consumer_state` (starting point, persisted and replica state),
:mod:`~jetraft.jetstream.consumer_pull` (pull requests),
:mod:`~jetraft.jetstream.consumer_priority` (priority groups: overflow, pinned client,
prioritized),
:mod:`~jetraft.jetstream.consumer_delivery` (delivery, ack wait, flow control, heartbeats;
:class:`Delivery`), :mod:`~jetraft.jetstream.consumer_pacing` (``replay_policy: original``,
``rate_limit_bps``) and :mod:`~jetraft.jetstream.consumer_acks` (acks;
:func:`parse_ack_subject`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jetraft.protocol.subjects import subject_matches

from . import advisories as adv
from .consumer_acks import SECOND, _Acking, parse_ack_subject
from .consumer_delivery import Delivery, _Delivering
from .consumer_pacing import _Pacing
from .consumer_priority import _Priority
from .consumer_pull import _PullRequests, _status, _Waiting
from .consumer_state import _ConsumerState
from .model import ConsumerConfig, ConsumerInfo, SequenceInfo
from .outbound import Outbound
from .store import CorruptMessage, MessageNotFound, StoredMessage

__all__ = ["Consumer", "Delivery", "parse_ack_subject"]

#: nats-server JsDeleteWaitTimeDefault: an ephemeral's inactive threshold when unset.
EPHEMERAL_INACTIVE_DEFAULT = 5 * SECOND


class Consumer(_ConsumerState, _PullRequests, _Delivering, _Pacing, _Acking, _Priority):
    """One consumer: its config, its delivery/ack state, its waiting pull requests.

    ``stream``: the parent :class:`~jetraft.jetstream.stream.Stream` (its ``store`` is read,
    never written); ``name``: the consumer name; ``config``: a checked
    :class:`ConsumerConfig`; ``created_ns``: creation time; ``state``: what
    :meth:`state_to_json` returned before a restart (None: a new consumer, whose starting
    sequence follows ``deliver_policy`` as nats-server ``selectStartingSeqNo``);
    ``has_interest(subject)``: whether a subscription matches ``subject`` (push: the
    deliver subject; pull: a request's reply subject).
    """

    #: nats-server JsFlowControlMaxPending; the first window is 1/16 of it.
    FLOW_CONTROL_MAX_PENDING = 32 * 1024 * 1024

    def __init__(self, stream: Any, name: str, config: ConsumerConfig, *, created_ns: int,
                 state: dict | None = None,
                 has_interest: Callable[[str], bool] = lambda s: True) -> None:
        self.stream = stream
        self.name = name
        self.config = config
        self.created_ns = created_ns
        self.has_interest = has_interest
        self.dirty = False
        self._closed = False
        # working state (nats-server o.sseq, o.dseq, o.adflr, o.asflr)
        self._sseq = 1
        self._dseq = 1
        self._adflr = 0
        self._asflr = 0
        # the consumer store's state (reported by INFO, persisted)
        self._st_dc = self._st_ds = self._st_ac = self._st_as = 0
        self._pending: dict[int, list[int]] = {}    # sseq -> [dseq, ts ns]
        self._rdc: dict[int, int] = {}              # sseq -> redeliveries so far
        self._rdq: list[int] = []
        self._waiting: list[_Waiting] = []
        self._lss: list[int] | None = None          # last_per_subject skip list
        self._lss_resume = 0
        self._lss_undo: tuple[int, int] | None = None
        self._npc = 0
        self._seen_last = 0
        self._npc_stale = False
        self._ldt: int | None = None
        self._lat: int | None = None
        self._acked: list[int] = []
        #: advisories raised since the last poll or ack (sent with their output)
        self._advisories: list[Outbound] = []
        #: whether a subscription listens on an advisory subject (set by the account);
        #: None: no advisories
        self.advisory_interest: Callable[[str], bool] | None = None
        #: the account's name, for the advisories that carry it (set by the account)
        self.account_name = ""
        self._pcheck: int | None = None             # earliest ack-wait deadline (or before)
        self._pcheck_stale = False
        self._last_request = created_ns             # pull activity (nats-server waiting.last)
        self._no_interest_since: int | None = created_ns
        self._active = False
        self._hb_next = created_ns + config.idle_heartbeat if config.idle_heartbeat else 0
        self._unpause_due = False    # a pause set by an update: its end is advised
        self._priority_init()
        self._fc_init()
        self._fc_count = 0
        self._apply_config(config)
        self._pace_init()
        if state:
            self._restore(state)
        else:
            self._select_start()
        self._recount()

    # --- configuration ------------------------------------------------------------------
    def _apply_config(self, config: ConsumerConfig) -> None:
        self.config = config
        filters = list(config.filter_subjects) or (
            [config.filter_subject] if config.filter_subject else [])
        self._filters = [] if ">" in filters else filters
        # sample_freq "N%" or "N" (checked on create): the share of acks sent as metrics
        freq = config.sample_freq.rstrip("%")
        self._sfreq = int(freq) if freq.lstrip("+-").isdigit() else 0
        self._maxp = config.max_ack_pending if (
            config.ack_policy != "none" and config.max_ack_pending > 0) else 0
        self._ack_prefix = f"$JS.ACK.{self.stream.config.name}.{self.name}."

    def _fc_init(self) -> None:
        self._pbytes = 0
        self._fcid = ""
        self._fcsz = 0
        if self.config.flow_control and self.config.deliver_subject:
            self._pblimit = self.FLOW_CONTROL_MAX_PENDING
            self._maxpb = max(self._pblimit // 16, 1)
        else:
            self._pblimit = self._maxpb = 0

    def update_config(self, config: ConsumerConfig, now_ns: int) -> list[Outbound]:
        """Apply an allowed CONSUMER.UPDATE (checked by the caller, nats-server
        ``updateConfig``): limits, ack wait, backoff, filters (pending counts are
        recounted), deliver subject, heartbeats. Returns what :meth:`poll` then sends."""
        old = self.config
        self._apply_config(config)
        if old.deliver_subject != config.deliver_subject or \
                old.flow_control != config.flow_control:
            self._fc_init()
        if old.idle_heartbeat != config.idle_heartbeat:
            self._hb_next = now_ns + config.idle_heartbeat if config.idle_heartbeat else 0
        if old.pause_until != config.pause_until:      # nats-server updateConfig, updatePauseState
            pause = config.pause_until
            self._unpause_due = pause is not None and now_ns < pause
            self._advise(adv.consumer_pause, self._unpause_due, pause, now_ns)
        self._pace_config(old, config)
        self._recount()
        self._pcheck = now_ns if self._pending else None
        self.dirty = True
        return self.poll(now_ns)

    # --- store helpers --------------------------------------------------------------------
    @property
    def _store(self) -> Any:
        return self.stream.store

    def _matches(self, subject: str) -> bool:
        return not self._filters or any(subject_matches(f, subject) for f in self._filters)

    def _subject_at(self, seq: int) -> str | None:
        return self._store.subject_of(seq)

    def _count_matching(self, start: int, last: int) -> int:
        """Messages with seq in [start, last] matching the filters."""
        return self._store.num_pending(self._filters, start, last)

    def _scan_next(self, start: int) -> tuple[StoredMessage | None, int]:
        """The next matching, readable message at or after ``start`` and the sequence a
        later scan may resume from; corrupt messages are skipped (never delivered)."""
        store = self._store
        try:
            if len(self._filters) <= 1:
                return store.load_next(self._filters[0] if self._filters else ">", start), 0
            found = [m for m in (store.load_next(f, start) for f in self._filters) if m]
            return (min(found, key=lambda m: m.seq) if found else None), 0
        except CorruptMessage:
            pass
        self._npc_stale = True
        last = store.state().last_seq
        for seq in store.stored_seqs(start, last):     # never every sequence of a gap
            try:
                sm = store.load(seq)
            except (MessageNotFound, CorruptMessage):
                continue
            if self._matches(sm.subject):
                return sm, 0
        return None, 0

    def _recount(self) -> None:
        """Recompute num_pending from the store (nats-server ``streamNumPending``)."""
        last = self._store.state().last_seq
        if self._lss is not None:
            self._npc = len(self._lss) + self._count_matching(self._lss_resume + 1, last)
        else:
            self._npc = self._count_matching(self._sseq, last)
        self._seen_last = last
        self._npc_stale = False

    def _sync_new(self) -> None:
        """Count the messages stored since the last look (nats-server
        ``processStreamSignal``)."""
        if self._npc_stale:
            self._recount()
            return
        last = self._store.last_sequence()
        if last > self._seen_last:
            start = max(self._seen_last + 1, self._sseq)
            if self._lss is not None:
                start = max(self._seen_last + 1, self._lss_resume + 1)
            self._npc += self._count_matching(start, last)
            self._seen_last = last

    # --- the timer / delivery pump -------------------------------------------------------
    def poll(self, now_ns: int) -> list[Outbound]:
        """Everything to send at ``now_ns``: new and due-again messages for waiting pull
        requests or the push deliver subject (push: only while ``has_interest``), 408 for
        expired requests, 404 for finished no_wait requests, heartbeats, flow control."""
        out: list[Outbound] = []
        if self._closed:
            return out
        cfg = self.config
        self._sync_new()
        if cfg.ack_policy != "none":
            self._check_pending(now_ns)
        if cfg.deliver_subject:
            self._active = bool(self.has_interest(cfg.deliver_subject))
            if self._active:
                self._no_interest_since = None
            elif self._no_interest_since is None:
                self._no_interest_since = now_ns
        if self._unpause_due and now_ns >= (cfg.pause_until or 0):
            self._unpause_due = False       # nats-server's unpause timer: the pause ended
            self._advise(adv.consumer_pause, False, cfg.pause_until, now_ns)
        if self._pin_due:
            self._pin_expired(now_ns)
        eos = self._deliver_all(now_ns, out)
        self._flow_control_ack_due(out)
        if self._advisories:
            out.extend(self._take_advisories())
        if self._holding(now_ns):
            return out      # nats-server's delivery loop sleeps: no heartbeat, no 408
        self._replay_caught_up()
        if cfg.deliver_subject:
            if cfg.idle_heartbeat and self._hb_next and now_ns >= self._hb_next:
                if self._active:
                    out.append(self._heartbeat(cfg.deliver_subject))
                    # flow_control acks: what was delivered since the last answer is asked
                    # for at the heartbeat too (nats-server loopAndGatherMsgs, hbc)
                    if cfg.ack_policy == "flow_control" and self._pending and not self._fcid:
                        self._send_flow_control(out)
                self._hb_next = now_ns + cfg.idle_heartbeat
        else:
            # nats-server's delivery loop, woken by its waiting requests' timer (the next
            # expiry or heartbeat), runs processWaiting(true): a no_wait request that got
            # messages and is held by max_ack_pending is then finished with a 404
            self._process_waiting(now_ns, eos or self._request_timer_due(now_ns), out)
        return out

    def next_deadline(self) -> int | None:
        """ns since the epoch when :meth:`poll` must next run for a timer (ack wait,
        backoff, NAK delay, request expiry, heartbeats, pause end, inactivity, the turn of
        a message that waits for its replay gap or the rate limit), or None. While a
        message waits, request expiries and heartbeats wait with it."""
        if self._closed:
            return None
        times: list[int] = []
        holding = bool(self._pace_due)
        pace = self._pace_deadline()
        if pace is not None:
            times.append(pace)
        if self._pcheck is not None and self.config.ack_policy != "none" and self._pending:
            if self._pcheck_stale:     # acks may have removed the earliest deadline
                due = [self._deadline(s) for s in self._pending if s not in self._rdq]
                self._pcheck = min(due) if due else None
                self._pcheck_stale = False
            if self._pcheck is not None:
                times.append(self._pcheck)
        for wr in [] if holding else self._waiting:
            if wr.expires:
                times.append(wr.expires)
            if wr.hbt:
                times.append(wr.hbt)
        if self.config.deliver_subject and self.config.idle_heartbeat and self._hb_next \
                and not holding:
            times.append(self._hb_next)
        pause = self.config.pause_until
        if pause is not None:
            times.append(pause)
        if self._pin_due:
            times.append(self._pin_due)
        threshold = self._inactive_threshold()
        if threshold:
            if self.config.deliver_subject:
                if self._no_interest_since is not None:
                    times.append(self._no_interest_since + threshold)
            elif not self._waiting:
                times.append(self._last_request + threshold)
        return min(times) if times else None

    # --- stream changes, lifecycle --------------------------------------------------------
    def on_messages_removed(self, now_ns: int) -> list[Outbound]:
        """After a purge, a delete or limits removed stream messages (nats-server
        ``purge`` and ``decStreamPending``): skip the gone range, drop removed messages
        from the pending set (acked as terminated), recount num_pending. Returns what
        :meth:`poll` then sends."""
        if self._closed:
            return []
        st = self._store.state()
        first = st.first_seq
        if self._sseq < first:
            self._sseq = first
        if self._lss is not None:
            self._lss = [s for s in self._lss if s >= first] or None
            if self._lss is None:
                self._sseq = max(self._sseq, self._lss_resume + 1)
        purged = any(s < first for s in self._pending)
        if self._asflr < first - 1:
            self._asflr = first - 1
        for seq in sorted(self._pending):
            p = self._pending.get(seq)
            if p is None:
                continue
            if seq < first:
                self._adflr = max(self._adflr, p[0])
                self._ack_one(seq, p[0], now_ns, record=False)
            elif self._subject_at(seq) is None:
                self._ack_one(seq, p[0], now_ns, record=False)
        for seq in [s for s in self._rdc if s < first or
                    (s not in self._pending and self._subject_at(s) is None)]:
            del self._rdc[seq]
        self._rdq = [s for s in self._rdq if s in self._pending]
        if not self._pending:
            self._adflr, self._asflr = self._dseq - 1, self._sseq - 1
        if purged:
            self._st_dc, self._st_ds = self._dseq - 1, self._sseq - 1
            self._st_ac, self._st_as = self._adflr, self._asflr
        self._recount()
        self.dirty = True
        return self.poll(now_ns)

    def stop(self) -> list[Outbound]:
        """The consumer is deleted: ``409 Consumer Deleted`` to every waiting request."""
        out = [Outbound(wr.reply, None, _status(409, "Consumer Deleted"), b"")
               for wr in self._waiting]
        self._waiting = []
        self._closed = True
        return out

    def drain_acked(self) -> list[int]:
        """Stream sequences acknowledged (ack, term, ack-all range; ack none: delivered on
        a non-limits stream) since the last call, for interest/workqueue retention."""
        acked, self._acked = self._acked, []
        return acked

    def needs_ack(self, seq: int) -> bool:
        """Whether this consumer still holds stream message ``seq`` (nats-server
        ``needAck``): it matches the filters and is above the ack floor and, for explicit
        acks, not yet delivered or still pending; or it ran out of deliveries."""
        subject = self._subject_at(seq)
        if subject is not None and not self._matches(subject):
            return False
        if subject is None and self._filters:
            return False
        need = False
        if seq > self._asflr:
            if self.config.ack_policy == "explicit":
                need = seq >= self._sseq or seq in self._pending or bool(
                    self._lss and seq in self._lss)
            else:
                need = True
        return need or seq in self._rdc

    def _inactive_threshold(self) -> int:
        cfg = self.config
        if cfg.inactive_threshold > 0:
            return cfg.inactive_threshold
        return 0 if cfg.durable_name else EPHEMERAL_INACTIVE_DEFAULT

    def is_inactive(self, now_ns: int) -> bool:
        """Whether the consumer should be deleted for inactivity (nats-server
        ``deleteNotActive``): push: no interest on the deliver subject for the threshold;
        pull: no waiting request and none received or served for the threshold, and no
        pending ack that may still come (last ack deadline + threshold passed)."""
        threshold = self._inactive_threshold()
        if not threshold or self._closed:
            return False
        cfg = self.config
        if cfg.deliver_subject:
            if self.has_interest(cfg.deliver_subject):
                self._no_interest_since = None
                return False
            if self._no_interest_since is None:
                self._no_interest_since = now_ns
            return now_ns - self._no_interest_since >= threshold
        if now_ns - self._last_request < threshold:
            return False
        if any((not wr.expires or now_ns < wr.expires) and self.has_interest(wr.reply)
               for wr in self._waiting):
            return False
        return all(self._deadline(s) + threshold <= now_ns for s in self._pending)

    def waiting_replies(self) -> list[str]:
        """The reply subjects of the waiting pull requests, oldest first."""
        return [wr.reply for wr in self._waiting]

    # --- info -----------------------------------------------------------------------------
    def info(self, now_ns: int) -> dict:
        """CONSUMER.INFO body without ``type`` (nats-server ``infoWithSnapAndReply``):
        stream_name, name, created, config, delivered and ack_floor (``last_active`` when
        known), num_ack_pending, num_redelivered (0 with max_deliver 1), num_waiting,
        num_pending, push_bound (push with interest), paused/pause_remaining, ts,
        priority_groups (:mod:`~jetraft.jetstream.consumer_priority`)."""
        self._sync_new()
        last = self._store.state().last_seq
        npc = 0 if self._sseq > last and self._lss is None else self._npc
        cfg = self.config
        pause = cfg.pause_until
        paused = pause is not None and now_ns < pause
        info = ConsumerInfo(
            stream_name=self.stream.config.name, name=self.name, created=self.created_ns,
            config=cfg,
            delivered=SequenceInfo(self._st_dc, self._st_ds, self._ldt),
            ack_floor=SequenceInfo(self._st_ac, self._st_as, self._lat),
            num_ack_pending=len(self._pending),
            num_redelivered=0 if cfg.max_deliver == 1 else len(self._rdc),
            num_waiting=sum(1 for wr in self._waiting
                            if not wr.expires or now_ns < wr.expires),
            num_pending=npc,
            push_bound=bool(cfg.deliver_subject) and bool(
                self.has_interest(cfg.deliver_subject)),
            paused=paused, pause_remaining=pause - now_ns if paused else 0,
            ts=now_ns, priority_groups=self._priority_info())
        return info.to_json()
