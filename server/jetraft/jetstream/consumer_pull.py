"""Pull requests of a JetStream consumer: the ``$JS.API.CONSUMER.MSG.NEXT`` request body,
the waiting requests, and the statuses they are answered with (a mixin of
:class:`~jetraft.jetstream.consumer.Consumer`).

Behaviour follows nats-server ``server/consumer.go`` (``nextReqFromMsg``,
``processNextMsgRequest``, ``nextWaiting``, ``processWaiting``, ``waitingRequest``); the
statuses are listed in the docstring of :mod:`jetraft.jetstream.consumer`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jetraft import gofmt
from jetraft.protocol.client import status_headers

from . import gojson
from .consumer_priority import PriorityGroup, priority_of
from .outbound import Outbound

__all__ = ["PENDING_BYTES", "PENDING_MSGS"]

# Header names (nats-server server/consumer.go, server/stream.go).
PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"


def _status(code: int, text: str, pending: tuple[int, int] | None = None) -> bytes:
    extra = None if pending is None else {PENDING_MSGS: str(pending[0]),
                                          PENDING_BYTES: str(pending[1])}
    return status_headers(code, text, extra)


@dataclass(slots=True)
class _Waiting:
    """One waiting pull request (nats-server ``waitingRequest``): ``n`` messages still
    wanted, ``b`` bytes still allowed (0: no limit), ``expires``/``hbt`` ns (0: none),
    ``pg`` its priority fields (None for a plain request)."""

    reply: str
    n: int
    b: int
    expires: int
    hb: int
    hbt: int
    no_wait: bool
    d: int = 0
    pg: PriorityGroup | None = None


class _BadRequest(Exception):
    pass


#: JSApiConsumerGetNextRequest and its embedded PriorityGroup (nats-server jetstream_api.go,
#: consumer.go): each field's Go type.
_GO_TYPES = {"expires": "time.Duration", "batch": "int", "max_bytes": "int", "no_wait": "bool",
             "idle_heartbeat": "time.Duration", "group": "string", "min_pending": "int64",
             "min_ack_pending": "int64", "id": "string", "priority": "int"}
_INT64 = gojson.INT_RANGES["int64"]


def _parse_next_request(payload: bytes) -> tuple[int, int, int, bool, int, PriorityGroup | None]:
    """nats-server ``nextReqFromMsg``: ``(batch, expires ns, max_bytes, no_wait, hb ns,
    priority fields)``; the priority fields (``group``, ``min_pending``,
    ``min_ack_pending``, ``id``, ``priority``) of a JSON body, None for any other.

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
        return 1, 0, 0, False, 0, None
    if req[:1] != b"{":
        if _ATOI.fullmatch(req) and len(req) <= 20 and _INT64[0] <= int(req) <= _INT64[1]:
            return int(req), 0, 0, False, 0, None
        return 1, 0, 0, False, 0, None
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
    pg = PriorityGroup(vals.get("group", ""), vals.get("min_pending", 0),
                       vals.get("min_ack_pending", 0), vals.get("id", ""), vals.get("priority", 0))
    return (vals.get("batch", 0), expires, vals.get("max_bytes", 0),
            vals.get("no_wait", False), hb, pg)


_ATOI = re.compile(rb"[+-]?[0-9]+")


class _PullRequests:
    """The pull requests of a :class:`~jetraft.jetstream.consumer.Consumer` (its state is
    the consumer's ``_waiting`` list)."""

    def request_next(self, reply: str, payload: bytes, now_ns: int) -> list[Outbound]:
        """``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` with reply ``reply``.

        ``payload``: ``b""`` (one message), ``b"<n>"``, or JSON ``{"batch", "expires" (ns),
        "no_wait", "max_bytes", "idle_heartbeat" (ns), "group", "min_pending",
        "min_ack_pending", "id", "priority"}`` (the last five: priority groups, see
        :mod:`~jetraft.jetstream.consumer_priority`). Returns the refusal status, or
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
            batch, expires, max_bytes, no_wait, hb, pg = _parse_next_request(payload)
        except _BadRequest as exc:
            return err(400, f"Bad Request - {exc}")
        batch = max(batch, 1)
        if cfg.max_batch > 0 and batch > cfg.max_batch:
            return err(409, f"Exceeded MaxRequestBatch of {cfg.max_batch}")
        if expires > 0 and cfg.max_expires > 0 and expires > cfg.max_expires:
            return err(409, f"Exceeded MaxRequestExpires of {gofmt.duration(cfg.max_expires)}")
        if max_bytes > 0 and cfg.max_bytes > 0 and max_bytes > cfg.max_bytes:
            return err(409, f"Exceeded MaxRequestMaxBytes of {cfg.max_bytes}")
        refusal = self._priority_refusal(pg, now_ns)
        if refusal is not None:
            return err(*refusal)
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
        wr = _Waiting(reply, batch, max_bytes, now_ns + expires if expires else 0, hb,
                      now_ns + hb if hb else 0, no_wait, 0, pg)
        if cfg.priority_policy == "prioritized":
            self._insert_prioritized(wr)
        else:
            self._waiting.append(wr)
        self._last_request = now_ns
        out.extend(self.poll(now_ns))
        return out

    def _next_waiting(self, size: int, now: int, out: list[Outbound], *,
                      take: bool = True) -> _Waiting | None:
        """nats-server ``nextWaiting``: the request that takes a message of ``size`` bytes,
        consuming one from its batch (``take=False``: only finds it, moved to the front;
        :meth:`_take_waiting` consumes). Requests expired (408), holding a pin id that is
        not the pin (423), too small for the message (409) or without interest are dropped
        on the way; requests that must wait (no pin id while a pin is held, an overflow
        threshold not reached) go to the back. One pass over the waiting requests."""
        pinned = self.config.priority_policy == "pinned_client"
        overflow = self.config.priority_policy == "overflow"
        need_pin = pinned and not self._pin
        waiting = self._waiting
        skipped: list[_Waiting] = []
        chosen: _Waiting | None = None
        i = 0
        while i < len(waiting):
            wr = waiting[i]
            i += 1
            if wr.expires and now >= wr.expires:
                out.append(Outbound(wr.reply, None,
                                    _status(408, "Request Timeout", (wr.n, wr.b)), b""))
                continue
            assigned = False
            pg = wr.pg
            if need_pin:
                if pg is None or not pg.id:
                    self._assign_pin(pg, now)
                    assigned = True
                else:
                    out.append(Outbound(wr.reply, None, _status(
                        423, "Nats-Wrong-Pin-Id", (wr.n, wr.b)), b""))
                    continue
            elif self._pin:
                if pg is None or not pg.id:
                    skipped.append(wr)
                    continue
                if pg.id != self._pin:
                    out.append(Outbound(wr.reply, None, _status(
                        423, "Nats-Wrong-Pin-Id", (wr.n, wr.b)), b""))
                    continue
            if overflow and self._overflow_holds(pg):
                skipped.append(wr)
                continue
            if wr.b > 0 and size > wr.b:
                out.append(Outbound(wr.reply, None, _status(
                    409, "Message Size Exceeds MaxBytes", (wr.n, wr.b)), b""))
                if assigned:
                    self._unassign_pin()
                continue
            if not self.has_interest(wr.reply):
                continue
            chosen = wr
            break
        self._waiting = ([chosen] if chosen is not None else []) + waiting[i:] + skipped
        if chosen is not None and take:
            self._take_waiting(chosen, size)
        return chosen

    def _take_waiting(self, wr: _Waiting, size: int) -> None:
        """The first waiting request ``wr`` takes a message of ``size`` bytes; with more to
        take it goes to the back (prioritized: behind the requests of its priority)."""
        if wr.b > 0:
            wr.b -= size
            if wr.b == 0:
                wr.n = 1
        wr.d += 1
        wr.n -= 1
        self._waiting.pop(0)
        if wr.n > 0:
            if self.config.priority_policy == "prioritized":
                self._insert_prioritized(wr)
            else:
                self._waiting.append(wr)

    def _insert_prioritized(self, wr: _Waiting) -> None:
        """Put ``wr`` before the first waiting request of a higher priority number (behind
        those of its own: nats-server insertAtPosition)."""
        prio = priority_of(wr.pg)
        waiting = self._waiting
        pos = next((k for k, other in enumerate(waiting) if priority_of(other.pg) > prio),
                   len(waiting))
        waiting.insert(pos, wr)

    def _request_timer_due(self, now: int) -> bool:
        """Whether a waiting request's expiry or heartbeat is due at ``now`` (ns)."""
        return any((wr.expires and now >= wr.expires) or (wr.hbt and now >= wr.hbt) for wr in self._waiting)

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
