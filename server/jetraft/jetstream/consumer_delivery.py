"""Delivery of a JetStream consumer: picking the next message, the ack wait, backoff and
max_deliver, the push flow control and idle heartbeats (a mixin of
:class:`~jetraft.jetstream.consumer.Consumer`), and :class:`Delivery`, the message it sends.

Behaviour follows nats-server ``server/consumer.go``: ``getNextMsg``,
``loopAndGatherMsgs``, ``deliverMsg``, ``updateDelivered``, ``trackPending``,
``convertToHeadersOnly``, ``checkPending``, ``hasMaxDeliveries``, ``needFlowControl``,
``sendFlowControl``, ``processFlowControl`` and ``sendIdleHeartbeat`` (see the docstring of
:mod:`jetraft.jetstream.consumer`, also for why a delivery is a :class:`Delivery`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jetraft.protocol import headers as hdr
from jetraft.protocol.client import status_headers

from . import advisories as adv
from .consumer_priority import pin_header
from .consumer_pull import _status
from .outbound import Outbound
from .store import CorruptMessage, MessageNotFound, StoredMessage

__all__ = ["CONSUMER_STALLED", "Delivery", "LAST_CONSUMER", "LAST_STREAM", "MSG_SIZE", "flow_control_last"]

# Header names (nats-server server/consumer.go, server/stream.go).
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
CONSUMER_STALLED = "Nats-Consumer-Stalled"
MSG_SIZE = "Nats-Msg-Size"

_FC_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


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


def flow_control_last(headers: bytes | None) -> tuple[int, int] | None:
    """``(stream seq, consumer seq)`` a flow-control answer reports stored
    (``Nats-Last-Stream``, ``Nats-Last-Consumer``; nats-server processFlowControl), or None
    when it carries no stream sequence. A malformed number counts as 0."""
    if not headers:
        return None
    try:
        fields = hdr.parse(headers)
    except hdr.HeaderError:
        return None

    def num(key: str) -> int:
        v = (fields.get(key) or "").strip()
        return int(v) if v.isascii() and v.isdigit() and len(v) <= 20 else 0
    sseq = num(LAST_STREAM)
    return (sseq, num(LAST_CONSUMER)) if sseq > 0 else None


def _headers_only(headers: bytes | None, data: bytes) -> bytes:
    """nats-server ``convertToHeadersOnly``: the headers plus ``Nats-Msg-Size``."""
    base = headers[:-2] if headers else b"NATS/1.0\r\n"
    return base + f"{MSG_SIZE}: {len(data)}\r\n\r\n".encode()


class _Delivering:
    """The delivery of a :class:`~jetraft.jetstream.consumer.Consumer`: its pending set,
    redelivery queue, advisories, flow control and heartbeats."""

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
        if not self._pace_wait_over(now):
            return False
        if self.config.deliver_subject:
            return self._active and not (self._maxpb > 0 and self._pbytes > self._maxpb)
        return bool(self._waiting)

    def _deliver_all(self, now: int, out: list[Outbound]) -> bool:
        """nats-server ``loopAndGatherMsgs``; returns whether it stopped at the end of the
        stream (not on max_ack_pending, nor on a message waiting its turn: see
        :mod:`~jetraft.jetstream.consumer_pacing`)."""
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
            wr = None
            if not cfg.deliver_subject:
                wr = self._next_waiting(size, now, out, take=False)
                if wr is None:
                    self._undo_pick(sm, dc)
                    self._pace_stage = 0    # picked again for a later request: paced again
                    return True
            if self._pace(sm, size, now):
                self._undo_pick(sm, dc)
                return False
            if wr is None:
                target = cfg.deliver_subject
            else:
                self._take_waiting(wr, size)
                target = wr.reply
                if cfg.priority_policy == "pinned_client":   # nats-server: after nextWaiting
                    headers = pin_header(headers, self._pin)
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
                # nats-server jsPubMsg.size(): the deliver subject, not the stored one
                psz = size - len(sm.subject) + len(target)
                self._pbytes += psz
                if not self._fcid and self._pbytes > self._maxpb // 2:
                    self._send_flow_control(out)
                elif self._fcid and self._pbytes - self._fcsz >= self._maxpb:
                    self._fcsz += psz
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

    def process_flow_control(self, subject: str, now_ns: int,
                             last: tuple[int, int] | None = None) -> list[Outbound]:
        """A client's answer on ``subject`` to the last flow-control request (nats-server
        ``processFlowControl``): the window doubles (up to 32 MiB), the answered bytes are
        released and delivery resumes. An answer to an older request is ignored. With
        ``ack_policy: flow_control`` the answer is the ack: ``last`` (its
        ``Nats-Last-Stream`` and ``Nats-Last-Consumer`` headers, :func:`flow_control_last`)
        acknowledges every message up to that stream sequence, as an ack of policy all."""
        if not self._fcid or subject != self._fcid:
            return []
        if self._maxpb < self._pblimit:
            self._maxpb = min(self._maxpb * 2, self._pblimit)
        self._pbytes = max(self._pbytes - self._fcsz, 0)
        self._fcid, self._fcsz = "", 0
        if self.config.ack_policy == "flow_control" and last is not None and last[0] > 0:
            self._ack(last[0], max(last[1], 0), now_ns)
        return self.poll(now_ns)

    def _flow_control_ack_due(self, out: list[Outbound]) -> None:
        """``ack_policy: flow_control`` acks only by flow-control answers, so one is asked
        for when delivery stops at ``max_ack_pending`` (nats-server needSendFlowControl)."""
        if self.config.ack_policy == "flow_control" and self._active and not self._fcid \
                and self._maxp > 0 and len(self._pending) >= self._maxp:
            self._send_flow_control(out)

    def _heartbeat(self, subject: str) -> Outbound:
        """nats-server ``sendIdleHeartbeat``."""
        extra = {LAST_CONSUMER: str(self._dseq - 1), LAST_STREAM: str(self._sseq - 1)}
        if self._fcid:
            extra[CONSUMER_STALLED] = self._fcid
        return Outbound(subject, None, status_headers(100, "Idle Heartbeat", extra), b"")
