"""Acks of a JetStream consumer: the ack subject, ``+ACK``, ``-NAK``, ``+WPI``, ``+NXT`` and
``+TERM``, and the ack floors (a mixin of :class:`~jetraft.jetstream.consumer.Consumer`).

Behaviour follows nats-server ``server/consumer.go`` (``ackReplyInfo``, ``processAck``,
``processAckMsg``, ``processNak``, ``processTerm``, ``progressUpdate``, ``sampleAck``,
``moveAckFloor``) and, for the floor reported by INFO and persisted, ``server/memstore.go``
(``UpdateAcks``): see the docstring of :mod:`jetraft.jetstream.consumer`.
"""

from __future__ import annotations

import secrets

from jetraft.config.durations import parse_duration

from . import advisories as adv
from . import gojson
from .consumer_pull import _INT64
from .outbound import Outbound

__all__ = ["parse_ack_subject"]

SECOND = 1_000_000_000

ACK_TERM_REASON_REMOVED = "Unacknowledged message was deleted"
#: The most messages below a reset's sequence an interest stream checks for release at once.
RESET_RELEASE_MAX = 10_000


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


class _Acking:
    """The acks of a :class:`~jetraft.jetstream.consumer.Consumer`."""

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

    @property
    def ack_floor_seq(self) -> int:
        """The stream sequence of the ack floor (every message up to it is acknowledged)."""
        return self._asflr

    def link_step(self, ack_seq: int, seqs: tuple[int, ...], now_ns: int) -> None:
        """A durable link's fetch answered from this consumer (jetstream/sourcing.py
        LinkStep, ``ack_policy: flow_control``): every message up to ``ack_seq`` is
        acknowledged, as a flow-control answer acknowledges (nats-server
        processFlowControl), then ``seqs`` (ascending) are delivered once each; one
        answered again (its answer was lost) stays pending. Work is bounded by the
        pending messages and ``seqs``."""
        if self._closed:
            return
        if ack_seq > self._asflr:
            below = [p[0] for s, p in self._pending.items() if s <= ack_seq]
            if below:
                self._ack(ack_seq, max(below), now_ns)
        for seq in seqs:
            if seq < self._sseq or seq <= self._asflr:
                continue
            dseq = self._dseq
            self._dseq += 1
            self._pending[seq] = [dseq, now_ns]
            self._st_dc = max(self._st_dc, dseq)
            self._st_ds = max(self._st_ds, seq)
            self._sseq = seq + 1
            self._npc = max(self._npc - 1, 0)
            self._ldt = now_ns
            self.dirty = True

    def reset_start(self, seq: int) -> int:
        """``$JS.API.CONSUMER.RESET`` (nats-server 2.14 resetStartingSeqLocked and
        resetLocalStartingSeq): deliver from stream sequence ``seq`` on (0: the ack floor
        + 1) as if nothing was delivered before it: pending and redelivery state dropped,
        every message below it acknowledged. Returns the sequence reset to. Raises
        ValueError ``"below start seq"``, ``"below start time"`` or ``"not allowed"``
        (deliver policies last, last per subject and new) before changing anything. On an
        interest stream the first RESET_RELEASE_MAX messages below it that no consumer needs
        any more are removed at once (bounded work); any further ones stay until another
        consumer's ack or a purge takes them."""
        cfg = self.config
        if seq == 0:
            seq = self._asflr + 1
        elif cfg.deliver_policy == "all":
            pass
        elif cfg.deliver_policy == "by_start_sequence":
            if seq < cfg.opt_start_seq:
                raise ValueError("below start seq")
        elif cfg.deliver_policy == "by_start_time" and cfg.opt_start_time is not None:
            if seq < self._store.seq_from_time(cfg.opt_start_time):
                raise ValueError("below start time")
        else:
            raise ValueError("not allowed")
        seq = max(seq, 1)
        old_floor = self._asflr
        self._pending.clear()
        self._rdc.clear()
        self._rdq = []
        self._sseq, self._dseq = seq, 1
        self._adflr, self._asflr = 0, seq - 1
        self._st_dc, self._st_ds = 0, seq - 1
        self._st_ac, self._st_as = 0, seq - 1
        self._ldt = self._lat = None
        self._lss = None
        self._pcheck = None
        if self.stream.config.retention == "interest" and seq - 1 > old_floor:
            first = max(old_floor + 1, self._store.state().first_seq)
            self._acked.extend(range(first, min(seq, first + RESET_RELEASE_MAX)))
        self._recount()
        self.dirty = True
        return seq

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
                low = self._lowest_pending_above(sseq, self._st_ds)
                if low is not None and self._st_dc > dseq:
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
            low = self._lowest_pending_above(sseq)
            if low is not None:
                self._adflr, self._asflr = self._pending[low][0] - 1, low - 1

    def _lowest_pending_above(self, sseq: int, upto: int | None = None) -> int | None:
        """The lowest pending stream sequence above ``sseq`` (and at most ``upto``), or None.
        O(1) when it is ``sseq + 1`` (acks in delivery order), else one pass over the pending
        messages (at most max_ack_pending)."""
        pending = self._pending
        if sseq + 1 in pending:
            return sseq + 1 if upto is None or sseq + 1 <= upto else None
        above = [s for s in pending if s > sseq and (upto is None or s <= upto)]
        return min(above) if above else None

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
