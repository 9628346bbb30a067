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
  ``Nats-Last-Consumer``/``Nats-Last-Stream``) and ``409 Consumer Deleted``. A waiting
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
  (2 MiB, doubling on each answer up to 32 MiB) is unanswered; ``Nats-Consumer-Stalled``
  on heartbeats while stalled.

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
- ``replay_policy: original``, ``rate_limit_bps``, ``sample_freq``, priority groups, ack
  policy ``flow_control``, ``direct`` and ``sourcing`` are refused when the consumer is
  created (model.py ``ConsumerConfig.check_supported``), so never reach this class; no
  advisories are emitted;
- a message removed from the stream while pending is dropped from the pending set (as a
  term of that one message, whatever the ack policy; nats-server's ack-all consumer
  acknowledges everything below it then);
- ``is_inactive`` follows nats-server ``deleteNotActive``: it applies to any consumer with
  ``inactive_threshold`` > 0 and to ephemerals without one (nats-server's 5 s default).

Store access: the counts of messages still to deliver come from the store's
``num_pending(filters, start, last)``, and subjects of pending messages from its
``subject_of(seq)`` (both answered from the store's index, without I/O).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jetraft.config.durations import parse_duration
from jetraft import gofmt
from jetraft.protocol.client import status_headers
from jetraft.protocol.subjects import subject_matches

from . import advisories as adv
from . import gojson
from .model import ConsumerConfig, ConsumerInfo, SequenceInfo
from .outbound import Outbound
from .store import CorruptMessage, MessageNotFound, StoredMessage

__all__ = ["Consumer", "Delivery", "parse_ack_subject"]

SECOND = 1_000_000_000
#: nats-server JsDeleteWaitTimeDefault: an ephemeral's inactive threshold when unset.
EPHEMERAL_INACTIVE_DEFAULT = 5 * SECOND

# Header names (nats-server server/consumer.go, server/stream.go).
PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
CONSUMER_STALLED = "Nats-Consumer-Stalled"
MSG_SIZE = "Nats-Msg-Size"

ACK_TERM_REASON_REMOVED = "Unacknowledged message was deleted"

_FC_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_MAX_STATE_VERSION = 1


def parse_ack_subject(subject: str) -> tuple[int, int, int, int, int]:
    """``(stream seq, consumer seq, delivery count, ts ns, pending)`` from an ack subject,
    nats-server ``ackReplyInfo``: 9 tokens (``$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<cseq>.
    <ts>.<pending>``) or 11+ (``$JS.ACK.<domain>.<acchash>.<stream>...``). A malformed
    subject gives all zeros; a non-numeric token gives 0."""
    toks = subject.split(".")
    if (len(toks) != 9 and len(toks) < 11) or toks[0] != "$JS" or toks[1] != "ACK":
        return 0, 0, 0, 0, 0
    off = 4 if len(toks) >= 11 else 2

    def num(i: int) -> int:
        t = toks[off + i]
        return int(t) if t.isascii() and t.isdigit() else 0

    return num(3), num(4), num(2), num(5), num(6)


class Delivery(Outbound):
    """A delivered stream message: routed to ``subject`` (the pull request's reply or the
    push deliver subject) and written to the subscriber with ``msg_subject`` (the stored
    message's subject) as the MSG/HMSG subject; ``reply`` is the ack subject.
    ``deliver_as`` holds ``msg_subject`` when it differs from ``subject``, else None."""

    __slots__ = ()

    def __init__(self, subject: str, reply: str | None, headers: bytes | None, payload: bytes,
                 msg_subject: str = "") -> None:
        self.subject = subject
        self.reply = reply
        self.headers = headers
        self.payload = payload
        self.deliver_as = msg_subject if msg_subject and msg_subject != subject else None

    @property
    def msg_subject(self) -> str:
        """The subject written on the wire."""
        return self.deliver_as or self.subject


def _status(code: int, text: str, pending: tuple[int, int] | None = None) -> bytes:
    extra = None if pending is None else {PENDING_MSGS: str(pending[0]),
                                          PENDING_BYTES: str(pending[1])}
    return status_headers(code, text, extra)


@dataclass(slots=True)
class _Waiting:
    """One waiting pull request (nats-server ``waitingRequest``): ``n`` messages still
    wanted, ``b`` bytes still allowed (0: no limit), ``expires``/``hbt`` ns (0: none)."""

    reply: str
    n: int
    b: int
    expires: int
    hb: int
    hbt: int
    no_wait: bool
    d: int = 0


class _BadRequest(Exception):
    pass


#: JSApiConsumerGetNextRequest and its embedded PriorityGroup (nats-server jetstream_api.go,
#: consumer.go): each field's Go type.
_GO_TYPES = {"expires": "time.Duration", "batch": "int", "max_bytes": "int", "no_wait": "bool",
             "idle_heartbeat": "time.Duration", "group": "string", "min_pending": "int64",
             "min_ack_pending": "int64", "id": "string", "priority": "int"}
_INT64 = gojson.INT_RANGES["int64"]


def _parse_next_request(payload: bytes) -> tuple[int, int, int, bool, int]:
    """nats-server ``nextReqFromMsg``: ``(batch, expires ns, max_bytes, no_wait, hb ns)``.

    A body starting with ``{`` is read as Go's ``json.Unmarshal`` reads it (unknown keys
    ignored; see :mod:`jetraft.jetstream.gojson` for nesting and number limits); any other
    body is a batch size when it is a decimal int64 (``strconv.Atoi``), else a batch of 1.
    Raises _BadRequest with nats-server's reason (``Bad Request - <reason>``): Go's error for
    malformed JSON (``invalid character ...``, ``unexpected end of JSON input``, ``exceeded
    max depth``) or a mistyped field (``json: cannot unmarshal number 1e999 into Go struct
    field .batch of type int``), or ``heartbeat value too large``.
    """
    req = payload.strip()     # Go bytes.TrimSpace (ASCII white space)
    if not req:
        return 1, 0, 0, False, 0
    if req[:1] != b"{":
        if _ATOI.fullmatch(req) and len(req) <= 20 and _INT64[0] <= int(req) <= _INT64[1]:
            return int(req), 0, 0, False, 0
        return 1, 0, 0, False, 0
    try:
        body = gojson.unmarshal(req)
    except gojson.GoJSONError as exc:
        raise _BadRequest(exc.unmarshal_text()) from None
    vals: dict[str, Any] = {}
    for key, raw in body.items():
        gotype = _GO_TYPES.get(key)
        if gotype is None or raw is None:
            continue
        if gotype in gojson.INT_RANGES:
            value = gojson.go_int(raw, gotype)
            ok = value is not None
        else:
            value = raw
            ok = isinstance(raw, bool) if gotype == "bool" else isinstance(raw, str)
        if not ok:
            kind = gojson.json_kind(raw)
            if kind == "number" and gotype in gojson.INT_RANGES:
                kind = f"number {gojson.number_literal(raw)}"
            raise _BadRequest(f"json: cannot unmarshal {kind} into Go struct field .{key} "
                              f"of type {gotype}")
        vals[key] = value
    expires, hb = vals.get("expires", 0), vals.get("idle_heartbeat", 0)
    if hb > 0 and hb * 2 > expires:
        raise _BadRequest("heartbeat value too large")
    return (vals.get("batch", 0), expires, vals.get("max_bytes", 0),
            vals.get("no_wait", False), hb)


_ATOI = re.compile(rb"[+-]?[0-9]+")


def _headers_only(headers: bytes | None, data: bytes) -> bytes:
    """nats-server ``convertToHeadersOnly``: the headers plus ``Nats-Msg-Size``."""
    base = headers[:-2] if headers else b"NATS/1.0\r\n"
    return base + f"{MSG_SIZE}: {len(data)}\r\n\r\n".encode()


class Consumer:
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
        self._pcheck: int | None = None             # earliest ack-wait deadline (or before)
        self._pcheck_stale = False
        self._last_request = created_ns             # pull activity (nats-server waiting.last)
        self._no_interest_since: int | None = created_ns
        self._active = False
        self._hb_next = created_ns + config.idle_heartbeat if config.idle_heartbeat else 0
        self._fc_init()
        self._fc_count = 0
        self._apply_config(config)
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
        last = self._store.state().last_seq
        if last > self._seen_last:
            start = max(self._seen_last + 1, self._sseq)
            if self._lss is not None:
                start = max(self._seen_last + 1, self._lss_resume + 1)
            self._npc += self._count_matching(start, last)
            self._seen_last = last

    # --- starting point / persistence -----------------------------------------------------
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
        ``has_interest``, and what :meth:`_apply_config` derives from the config."""
        return {
            "sseq": self._sseq, "dseq": self._dseq, "adflr": self._adflr, "asflr": self._asflr,
            "st_dc": self._st_dc, "st_ds": self._st_ds, "st_ac": self._st_ac, "st_as": self._st_as,
            "pending": [[s, p[0], p[1]] for s, p in self._pending.items()],
            "rdc": [[s, n] for s, n in self._rdc.items()],
            "rdq": list(self._rdq),
            "waiting": [[w.reply, w.n, w.b, w.expires, w.hb, w.hbt, w.no_wait, w.d]
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
        self._waiting = [_Waiting(reply, n, b, expires, hb, hbt, no_wait, d)
                         for reply, n, b, expires, hb, hbt, no_wait, d in state["waiting"]]
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

    # --- pull requests --------------------------------------------------------------------
    def request_next(self, reply: str, payload: bytes, now_ns: int) -> list[Outbound]:
        """``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` with reply ``reply``.

        ``payload``: ``b""`` (one message), ``b"<n>"``, or JSON ``{"batch", "expires" (ns),
        "no_wait", "max_bytes", "idle_heartbeat" (ns)}``. Returns the refusal status, or
        whatever becomes deliverable (messages for this and other waiting requests)."""
        out: list[Outbound] = []
        if self._closed or not reply:
            return out

        def err(code: int, text: str) -> list[Outbound]:
            out.append(Outbound(reply, None, _status(code, text), b""))
            return out

        cfg = self.config
        if cfg.deliver_subject:
            return err(409, "Consumer is push based")
        try:
            batch, expires, max_bytes, no_wait, hb = _parse_next_request(payload)
        except _BadRequest as exc:
            return err(400, f"Bad Request - {exc}")
        batch = max(batch, 1)
        if cfg.max_batch > 0 and batch > cfg.max_batch:
            return err(409, f"Exceeded MaxRequestBatch of {cfg.max_batch}")
        if expires > 0 and cfg.max_expires > 0 and expires > cfg.max_expires:
            return err(409, f"Exceeded MaxRequestExpires of {gofmt.duration(cfg.max_expires)}")
        if max_bytes > 0 and cfg.max_bytes > 0 and max_bytes > cfg.max_bytes:
            return err(409, f"Exceeded MaxRequestMaxBytes of {cfg.max_bytes}")
        self._sync_new()
        if len(self._waiting) >= cfg.max_waiting > 0:
            self._process_waiting(now_ns, False, out)
        if no_wait:
            msgs_pending = self._npc + len(self._rdq)
            if msgs_pending == 0 and expires == 0:
                self._last_request = now_ns
                return err(404, "No Messages")
            if msgs_pending > 0:
                batch_pending = sum(w.n for w in self._waiting)
                if msgs_pending < batch_pending:
                    self._last_request = now_ns
                    return err(408, "Requests Pending")
        if len(self._waiting) >= cfg.max_waiting > 0:
            return out if hb else err(409, "Exceeded MaxWaiting")
        self._waiting.append(_Waiting(
            reply, batch, max_bytes, now_ns + expires if expires else 0, hb,
            now_ns + hb if hb else 0, no_wait))
        self._last_request = now_ns
        out.extend(self.poll(now_ns))
        return out

    def _next_waiting(self, size: int, now: int, out: list[Outbound]) -> _Waiting | None:
        """nats-server ``nextWaiting`` (no priority groups): the request that takes a
        message of ``size`` bytes, consuming one from its batch."""
        while self._waiting:
            wr = self._waiting[0]
            if wr.expires and now >= wr.expires:
                out.append(Outbound(wr.reply, None,
                                    _status(408, "Request Timeout", (wr.n, wr.b)), b""))
                self._waiting.pop(0)
                continue
            if wr.b > 0:
                if size <= wr.b:
                    wr.b -= size
                    if wr.b == 0:
                        wr.n = 1
                else:
                    out.append(Outbound(wr.reply, None, _status(
                        409, "Message Size Exceeds MaxBytes", (wr.n, wr.b)), b""))
                    self._waiting.pop(0)
                    continue
            if not self.has_interest(wr.reply):
                self._waiting.pop(0)
                continue
            wr.d += 1
            wr.n -= 1
            self._waiting.pop(0)
            if wr.n > 0:
                self._waiting.append(wr)
            return wr
        return None

    def _process_waiting(self, now: int, eos: bool, out: list[Outbound]) -> None:
        """nats-server ``processWaiting``: expiries (408), one-shot no_wait requests at the
        end of the stream (404), lost interest (dropped), heartbeats (100)."""
        keep: list[_Waiting] = []
        for wr in self._waiting:
            expired = bool(wr.expires) and now >= wr.expires
            if expired:
                out.append(Outbound(wr.reply, None,
                                    _status(408, "Request Timeout", (wr.n, wr.b)), b""))
                continue
            if eos and wr.no_wait and (not wr.expires or wr.d > 0):
                out.append(Outbound(wr.reply, None, _status(404, "No Messages"), b""))
                continue
            if not self.has_interest(wr.reply):
                continue
            if wr.hbt and now >= wr.hbt:
                out.append(self._heartbeat(wr.reply))
                wr.hbt = now + wr.hb
            keep.append(wr)
        self._waiting = keep

    def _heartbeat(self, subject: str) -> Outbound:
        """nats-server ``sendIdleHeartbeat``."""
        extra = {LAST_CONSUMER: str(self._dseq - 1), LAST_STREAM: str(self._sseq - 1)}
        if self._fcid:
            extra[CONSUMER_STALLED] = self._fcid
        return Outbound(subject, None, status_headers(100, "Idle Heartbeat", extra), b"")

    # --- delivery -------------------------------------------------------------------------
    def _deadline(self, seq: int) -> int:
        """When pending ``seq`` is due for redelivery (nats-server ``checkPending``)."""
        p = self._pending[seq]
        backoff = self.config.backoff
        if backoff:
            return p[1] + backoff[min(max(self._rdc.get(seq, 0), 0), len(backoff) - 1)]
        return p[1] + self.config.ack_wait

    def _touch(self, seq: int, ts: int) -> None:
        self._pending[seq][1] = ts
        d = self._deadline(seq)
        if self._pcheck is None or d < self._pcheck:
            self._pcheck = d

    def _advise(self, build: Callable[..., Outbound], *args: Any) -> None:
        """Queue the advisory ``build(*args)`` (see :mod:`~jetraft.jetstream.advisories`)
        when a subscription in the account listens on its subject. Fault isolation: one
        that fails to build is left out; the consumer goes on."""
        listening = self.advisory_interest
        if listening is None:
            return
        try:
            out = build(self.stream.config.name, self.name, *args,
                        domain=getattr(self.stream, "domain", "") or "")
            if listening(out.subject):
                self._advisories.append(out)
        except Exception:  # noqa: BLE001 - an advisory never stops the consumer
            return

    def _take_advisories(self) -> list[Outbound]:
        out, self._advisories = self._advisories, []
        return out

    def _has_max_deliveries(self, seq: int, now: int) -> bool:
        """nats-server ``hasMaxDeliveries``: a message delivered max_deliver times leaves
        the pending set (its redelivery count stays, for interest retention); the
        ``max_deliver`` advisory goes out once, when the count reaches max_deliver."""
        maxdc = self.config.max_deliver
        if maxdc <= 0:
            return False
        dc = max(self._rdc.get(seq, 0), 1)
        if dc < maxdc:
            return False
        if dc == maxdc:
            self._advise(adv.max_deliver, seq, dc, now)
        p = self._pending.pop(seq, None)
        if p is not None:
            self._move_ack_floor(p[0], seq)
        self._rdc[seq] = dc
        self.dirty = True
        return True

    def _check_pending(self, now: int) -> None:
        """nats-server ``checkPending``: queue the messages whose ack wait expired."""
        if self._pcheck is None or now < self._pcheck or not self.config.ack_wait:
            return
        first = self._store.state().first_seq
        expired: list[int] = []
        nxt: int | None = None
        for seq in sorted(self._pending):
            p = self._pending.get(seq)
            if p is None:
                continue
            if seq < first or seq <= self._asflr:
                del self._pending[seq]
                self._rdc.pop(seq, None)
                self._rdq_remove(seq)
                self._asflr = max(self._asflr, seq)
                self._adflr = max(self._adflr, p[0])
                self.dirty = True
                continue
            deadline = self._deadline(seq)
            if now >= deadline:
                if seq not in self._rdq and not self._has_max_deliveries(seq, now):
                    expired.append(seq)
            elif nxt is None or deadline < nxt:
                nxt = deadline
        if expired:
            self._rdq.extend(expired)
            off = now - self._pending[expired[0]][1]
            for seq in expired:
                self._pending[seq][1] += off
        if not self._pending:
            self._rdq = []
            self._adflr, self._asflr = self._dseq - 1, self._sseq - 1
        self._pcheck = nxt
        for seq in expired:    # they are due again only after being redelivered
            if seq in self._pending and seq not in self._rdq:
                self._touch(seq, self._pending[seq][1])

    def _rdq_remove(self, seq: int) -> None:
        if seq in self._rdq:
            self._rdq.remove(seq)

    def _next_msg(self, now: int) -> tuple[StoredMessage | None, int, bool]:
        """nats-server ``getNextMsg``: ``(message, delivery count, stalled on
        max_ack_pending)``; (None, 0, False) at the end of the stream."""
        maxdc = self.config.max_deliver
        while self._rdq:
            seq = self._rdq.pop(0)
            dc = self._rdc.get(seq, 0) + 1 + 1
            self._rdc[seq] = dc - 1
            if maxdc > 0 and dc > maxdc:
                self._advise(adv.max_deliver, seq, dc - 1, now)
                p = self._pending.pop(seq, None)
                if p is not None:
                    self._move_ack_floor(p[0], seq)
                continue
            try:
                return self._store.load(seq), dc, False
            except (MessageNotFound, CorruptMessage):
                self._rdc[seq] = dc - 2
                if self._rdc[seq] <= 0:
                    del self._rdc[seq]
                if seq in self._pending:
                    self._ack_one(seq, self._pending[seq][0], now, record=False)
        if self._maxp and len(self._pending) >= self._maxp:
            return None, 0, True
        while self._lss:
            seq = self._lss.pop(0)
            self._lss_undo = (seq, self._sseq)
            if not self._lss:
                self._sseq = self._lss_resume + 1
                self._lss = None
            else:
                self._sseq = seq + 1
            try:
                return self._store.load(seq), 1, False
            except (MessageNotFound, CorruptMessage):
                self._npc = max(self._npc - 1, 0)
                continue
        self._lss = None
        sm, _ = self._scan_next(self._sseq)
        if sm is None:
            self._sseq = max(self._sseq, self._store.state().last_seq + 1)
            return None, 0, False
        self._sseq = sm.seq + 1
        return sm, 1, False

    def _can_deliver(self, now: int) -> bool:
        pause = self.config.pause_until
        if pause is not None and now < pause:
            return False
        if self.config.deliver_subject:
            return self._active and not (self._maxpb > 0 and self._pbytes > self._maxpb)
        return bool(self._waiting)

    def _deliver_all(self, now: int, out: list[Outbound]) -> bool:
        """nats-server ``loopAndGatherMsgs``; returns whether it stopped at the end of the
        stream (not on max_ack_pending)."""
        cfg = self.config
        while self._can_deliver(now):
            self._lss_undo = None
            sm, dc, stalled = self._next_msg(now)
            if sm is None:
                return not stalled
            if dc == 1:
                self._npc = max(self._npc - 1, 0)
            ack = (f"{self._ack_prefix}{dc}.{sm.seq}.{self._dseq}.{sm.ts}."
                   f"{max(self._npc, 0)}")
            headers, data = sm.headers or None, sm.data
            if cfg.headers_only:
                headers, data = _headers_only(headers, data), b""
            size = len(sm.subject) + len(ack) + len(headers or b"") + len(data)
            if cfg.deliver_subject:
                target = cfg.deliver_subject
                wr = None
            else:
                wr = self._next_waiting(size, now, out)
                if wr is None:
                    if self._lss_undo is not None and self._lss_undo[0] == sm.seq:
                        self._lss = [sm.seq] + (self._lss or [])
                        self._sseq = self._lss_undo[1]
                        self._npc += 1
                    elif dc == 1 and sm.seq == self._sseq - 1:
                        self._sseq -= 1
                        self._npc += 1
                    elif sm.seq not in self._rdq:
                        self._rdc[sm.seq] = self._rdc.get(sm.seq, 0) - 1
                        if self._rdc[sm.seq] <= 0:
                            del self._rdc[sm.seq]
                        self._rdq.insert(0, sm.seq)
                    return True
                target = wr.reply
                if wr.n > 0 and wr.hb:
                    wr.hbt = now + wr.hb
            self._deliver(sm, dc, target, ack, headers, data, size, now, out)
            if wr is not None and wr.n <= 0 and wr.b > 0:
                out.append(Outbound(target, None,
                                    _status(409, "Batch Completed", (wr.n, wr.b)), b""))
        return False

    def _deliver(self, sm: StoredMessage, dc: int, target: str, ack: str,
                 headers: bytes | None, data: bytes, size: int, now: int,
                 out: list[Outbound]) -> None:
        """nats-server ``deliverMsg`` + ``updateDelivered`` + ``trackPending``."""
        cfg = self.config
        dseq = self._dseq
        self._dseq += 1
        seq = sm.seq
        if cfg.ack_policy == "none":
            self._adflr, self._asflr = dseq, seq
            if dseq > self._st_dc:
                self._st_dc = self._st_ac = dseq
            if seq > self._st_ds:
                self._st_ds = self._st_as = seq
            if self.stream.config.retention != "limits":
                self._acked.append(seq)
        else:
            if seq in self._pending:
                self._touch(seq, now)
            else:
                self._pending[seq] = [dseq, now]
                self._touch(seq, now)
            self._st_dc = max(self._st_dc, dseq)
            self._st_ds = max(self._st_ds, seq)
        self._ldt = now
        self.dirty = True
        out.append(Delivery(target, ack, headers, data, sm.subject))
        if cfg.deliver_subject:
            if cfg.idle_heartbeat:
                self._hb_next = now + cfg.idle_heartbeat
            if self._maxpb > 0:
                self._pbytes += size
                if not self._fcid and self._pbytes > self._maxpb // 2:
                    self._send_flow_control(out)
                elif self._fcid and self._pbytes - self._fcsz >= self._maxpb:
                    self._fcsz += size
        else:
            self._last_request = now

    def _send_flow_control(self, out: list[Outbound]) -> None:
        """nats-server ``sendFlowControl``: ``100 FlowControl Request`` to the deliver
        subject, answered on ``$JS.FC.<stream>.<consumer>.<4 chars>``."""
        self._fc_count += 1
        n, token = self._fc_count, ""
        for _ in range(4):
            token += _FC_DIGITS[n % 62]
            n //= 62
        self._fcid = f"$JS.FC.{self.stream.config.name}.{self.name}.{token}"
        self._fcsz = self._pbytes
        out.append(Outbound(self.config.deliver_subject, self._fcid,
                            status_headers(100, "FlowControl Request"), b""))

    def process_flow_control(self, subject: str, now_ns: int) -> list[Outbound]:
        """A client's answer on ``subject`` to the last flow-control request (nats-server
        ``processFlowControl``): the window doubles (up to 32 MiB), the answered bytes are
        released and delivery resumes. An answer to an older request is ignored."""
        if not self._fcid or subject != self._fcid:
            return []
        if self._maxpb < self._pblimit:
            self._maxpb = min(self._maxpb * 2, self._pblimit)
        self._pbytes = max(self._pbytes - self._fcsz, 0)
        self._fcid, self._fcsz = "", 0
        return self.poll(now_ns)

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
        eos = self._deliver_all(now_ns, out)
        if self._advisories:
            out.extend(self._take_advisories())
        if cfg.deliver_subject:
            if cfg.idle_heartbeat and self._hb_next and now_ns >= self._hb_next:
                if self._active:
                    out.append(self._heartbeat(cfg.deliver_subject))
                self._hb_next = now_ns + cfg.idle_heartbeat
        else:
            self._process_waiting(now_ns, eos, out)
        return out

    def next_deadline(self) -> int | None:
        """ns since the epoch when :meth:`poll` must next run for a timer (ack wait,
        backoff, NAK delay, request expiry, heartbeats, pause end, inactivity), or None."""
        if self._closed:
            return None
        times: list[int] = []
        if self._pcheck is not None and self.config.ack_policy != "none" and self._pending:
            if self._pcheck_stale:     # acks may have removed the earliest deadline
                due = [self._deadline(s) for s in self._pending if s not in self._rdq]
                self._pcheck = min(due) if due else None
                self._pcheck_stale = False
            if self._pcheck is not None:
                times.append(self._pcheck)
        for wr in self._waiting:
            if wr.expires:
                times.append(wr.expires)
            if wr.hbt:
                times.append(wr.hbt)
        if self.config.deliver_subject and self.config.idle_heartbeat and self._hb_next:
            times.append(self._hb_next)
        pause = self.config.pause_until
        if pause is not None:
            times.append(pause)
        threshold = self._inactive_threshold()
        if threshold:
            if self.config.deliver_subject:
                if self._no_interest_since is not None:
                    times.append(self._no_interest_since + threshold)
            elif not self._waiting:
                times.append(self._last_request + threshold)
        return min(times) if times else None

    # --- acks -----------------------------------------------------------------------------
    def process_ack(self, ack_subject: str, payload: bytes, reply: str | None,
                    now_ns: int) -> list[Outbound]:
        """A message on an ack subject (nats-server ``processAck``).

        ``payload``: ``b""``/``+ACK``/``+OK`` ack; ``-NAK`` (optionally `` {"delay": ns}``
        or `` <Go duration>``); ``+WPI`` progress; ``+NXT`` (ack, then a pull request
        whose body follows, answered on ``reply``); ``+TERM`` (optionally `` reason``).
        With ``reply`` (a double ack), an empty message goes to ``reply`` once the ack
        is processed. Returns that reply, deliveries made possible, and the like."""
        out: list[Outbound] = []
        if self._closed:
            return out
        sseq, dseq, dc, _ts, _pending = parse_ack_subject(ack_subject)
        send_reply = sseq != 0
        msg = payload
        self._sync_new()
        if msg in (b"", b"+ACK", b"+OK"):
            self._sample_ack(sseq, dseq, dc, now_ns)
            send_reply = self._ack(sseq, dseq, now_ns) and send_reply
        elif msg.startswith(b"+NXT"):
            self._sample_ack(sseq, dseq, dc, now_ns)
            self._ack(sseq, dseq, now_ns)
            out.extend(self.request_next(reply or "", msg[4:], now_ns))
            out.extend(self._take_advisories())
            return out
        elif msg.startswith(b"-NAK"):
            self._nak(sseq, dseq, msg[4:], now_ns)
        elif msg == b"+WPI":
            if sseq in self._pending:
                self._touch(sseq, now_ns)
                self._pcheck_stale = True
                self._ldt = now_ns
                self.dirty = True
        elif msg.startswith(b"+TERM"):
            pending = sseq in self._pending
            send_reply = self._ack(sseq, dseq, now_ns) and send_reply
            if pending and sseq not in self._pending:
                reason = msg[5:].strip().decode("utf-8", "replace")
                self._advise(adv.terminated, dseq, sseq, dc, reason, now_ns)
        if reply and send_reply:
            out.append(Outbound(reply, None, None, b""))
        out.extend(self.poll(now_ns))
        return out

    def _sample_ack(self, sseq: int, dseq: int, dc: int, now: int) -> None:
        """nats-server ``sampleAck``: an ack of pending ``sseq`` is published as a
        ``consumer_ack`` metric for ``sample_freq`` percent of acks (``ack_time``: ns since
        its delivery)."""
        freq = self._sfreq
        if freq <= 0 or self.advisory_interest is None or self.config.ack_policy == "none":
            return
        p = self._pending.get(sseq)
        if p is None or (freq < 100 and secrets.randbelow(100) > freq):
            return
        self._advise(adv.consumer_ack_metric, dseq, sseq, max(0, now - p[1]), dc, now)

    def _ack(self, sseq: int, dseq: int, now: int) -> bool:
        """nats-server ``processAckMsg``; returns whether the ack is answered."""
        policy = self.config.ack_policy
        if sseq >= self._sseq and not self.config.flow_control:
            return False
        if policy == "none":
            return self.stream.config.retention != "limits"
        if policy == "explicit":
            p = self._pending.get(sseq)
            if p is not None:
                self._ack_one(sseq, p[0], now)
            else:
                self._rdc.pop(sseq, None)
                self._rdq_remove(sseq)
                self._lat = now
            return True
        # all (and flow_control)
        if dseq <= self._adflr or sseq <= self._asflr:
            return True
        store_had = sseq in self._pending
        self._adflr, self._asflr = dseq, sseq
        self._pcheck_stale = True
        for seq in sorted(s for s in self._pending if s <= sseq):
            del self._pending[seq]
            self._rdc.pop(seq, None)
            self._rdq_remove(seq)
            self._acked.append(seq)
        for seq in [s for s in self._rdc if s <= sseq]:
            del self._rdc[seq]
        if store_had and dseq > self._st_ac:
            self._st_ac, self._st_as = dseq, sseq
        self._lat = now
        self.dirty = True
        return True

    def _ack_one(self, sseq: int, dseq: int, now: int, record: bool = True) -> None:
        """Remove pending ``sseq`` (delivered as ``dseq``) as acknowledged: working floor
        (nats-server ``moveAckFloor``) and store floor (``memstore.go UpdateAcks``)."""
        del self._pending[sseq]
        self._pcheck_stale = True
        self._rdc.pop(sseq, None)
        self._rdq_remove(sseq)
        self._move_ack_floor(dseq, sseq)
        if dseq > self._st_ac:
            if not self._pending:
                self._st_ac, self._st_as = self._st_dc, self._st_ds
            elif dseq == self._st_ac + 1:
                self._st_ac, self._st_as = dseq, sseq
                above = [s for s in self._pending if sseq < s <= self._st_ds]
                if above and self._st_dc > dseq:
                    low = min(above)
                    self._st_ac, self._st_as = self._pending[low][0] - 1, low - 1
        if record:
            self._acked.append(sseq)
        self._lat = now
        self.dirty = True

    def _move_ack_floor(self, dseq: int, sseq: int) -> None:
        if not self._pending:
            self._adflr, self._asflr = self._dseq - 1, self._sseq - 1
        elif dseq == self._adflr + 1:
            self._adflr, self._asflr = dseq, sseq
            above = [s for s in self._pending if s > sseq]
            if above:
                low = min(above)
                self._adflr, self._asflr = self._pending[low][0] - 1, low - 1

    def _nak(self, sseq: int, dseq: int, arg: bytes, now: int) -> None:
        """nats-server ``processNak``: redeliver now, or after the given delay."""
        if dseq <= self._adflr or dseq > self._dseq or sseq not in self._pending:
            return
        text = arg.strip()
        if text:
            delay: int | None = None
            try:
                if text[:1] == b"{":    # ConsumerNakOptions, read as Go's json.Unmarshal does
                    body = gojson.unmarshal(text)
                    value = body.get("delay") if isinstance(body, dict) else None
                    delay = 0 if value is None else gojson.go_int(value, "time.Duration")
                else:
                    delay = round(parse_duration(text.decode()) * SECOND)
                    if not _INT64[0] <= delay <= _INT64[1]:
                        delay = None
            except (ValueError, UnicodeDecodeError, OverflowError):
                delay = None
            if delay is not None:
                self._rdq_remove(sseq)
                self._touch(sseq, now - self.config.ack_wait + delay)
                self._pcheck_stale = True
                self._ldt = now
                self.dirty = True
                return
        if sseq not in self._rdq:
            self._rdq.append(sseq)

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
        num_pending, push_bound (push with interest), paused/pause_remaining, ts."""
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
            ts=now_ns)
        return info.to_json()
