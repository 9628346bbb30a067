"""Priority groups of a pull consumer (ADR-42, API level 1): the ``priority_policy``
``overflow``, ``pinned_client`` and ``prioritized`` (a mixin of
:class:`~jetraft.jetstream.consumer.Consumer`).

Behaviour follows nats-server 2.15 ``server/consumer.go`` (re-implemented, checked against a
running nats-server 2.15.1):

- a pull request's priority fields (``PriorityGroup``, read by ``nextReqFromMsg``):
  ``group``, ``min_pending``, ``min_ack_pending``, ``id``, ``priority``. A JSON request
  carries them (all zero when absent); a plain one (empty or a batch number) carries none.
  ``processNextMsgRequest`` answers, in this order: ``400 Bad Request - Not a Overflow
  Priority consumer`` (min_pending/min_ack_pending to another policy), ``400 Bad Request -
  Not a Pinned Client Priority consumer`` (an id to another policy), ``400 Bad Request -
  Priority must be between 0 and 9``; then, for a consumer with a policy, ``400 Bad
  Request - Priority Group missing``, ``400 Bad Request - Invalid Priority Group`` (not one
  of ``priority_groups``) and ``423 Nats-Pin-Id mismatch`` (an id other than the current
  pin). A request with the current pin id restarts the pin's timer.
- ``nextWaiting``: with ``pinned_client`` and no pin, the first waiting request without an
  id gets a new pin id (22 characters), written back into the request, with the
  ``$JS.EVENT.ADVISORY.CONSUMER.PINNED.<stream>.<consumer>`` advisory; a waiting request
  with an id that is not the pin is answered ``423 Nats-Wrong-Pin-Id`` (with
  ``Nats-Pending-Messages``/``Nats-Pending-Bytes``) and dropped; while a pin is held,
  requests without an id wait their turn (they are cycled to the back). With
  ``overflow``, a request with ``min_pending`` and/or ``min_ack_pending`` is served only
  while the consumer's num_pending (counting the message being delivered) reaches
  ``min_pending`` or its ack pending count reaches ``min_ack_pending``; else it waits.
  With ``prioritized``, waiting requests are kept in ``priority`` order (0 first; a plain
  request last), first come first served within one priority.
- every message delivered by a ``pinned_client`` consumer carries ``Nats-Pin-Id: <pin>``.
- the pin ends (``unassignPinId``) after ``priority_timeout`` (ns; default two minutes)
  without a request carrying it (``setPinnedTimer``: the
  ``$JS.EVENT.ADVISORY.CONSUMER.UNPINNED`` advisory, reason ``timeout``), on
  ``$JS.API.CONSUMER.UNPIN`` (reason ``admin``), and, without an advisory, when the
  consumer's leader changes (``setLeader``) or its server restarts: nats-server keeps the
  pin on its leader only. In a jetraft cluster every replica applies the same entries, so
  the pin is part of the replicated state, tagged with the RAFT term it was given in; the
  first entry of a later term ends it on every replica (:meth:`_Priority.on_term`).
- CONSUMER.INFO's ``priority_groups``: ``[{"group": <first group>, "pinned_client_id"?,
  "pinned_ts"}]`` (``pinned_ts`` Go's zero time when unpinned, as nats-server writes it).

Pin ids are nats-server's nuid shape (22 base-62 characters). Every replica must derive the
same one, so jetraft takes it from a hash of the stream, consumer, creation time, a counter
and the entry's time, not from a random source; a pin id is no secret (CONSUMER.INFO and
the advisories show it to anyone who may read them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from jetraft import gofmt

from . import advisories as adv

__all__ = ["PIN_ID_HEADER", "PriorityGroup"]

#: nats-server JSPullRequestNatsPinId: the header naming the pin on each delivery.
PIN_ID_HEADER = "Nats-Pin-Id"
#: A plain pull request's place in a prioritized queue (nats-server math.MaxInt32).
_LAST = (1 << 31) - 1

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(slots=True)
class PriorityGroup:
    """A pull request's priority fields (nats-server ``PriorityGroup``): ``group``,
    ``min_pending`` and ``min_ack_pending`` (counts), ``id`` (a pin id; set by the consumer
    when it pins the request) and ``priority`` (0-9, lower first)."""

    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    id: str = ""
    priority: int = 0

    def to_state(self) -> list[Any]:
        return [self.group, self.min_pending, self.min_ack_pending, self.id, self.priority]


def priority_of(pg: PriorityGroup | None) -> int:
    """A waiting request's place in a prioritized queue (nats-server insertAtPosition)."""
    return _LAST if pg is None else pg.priority


def pin_header(headers: bytes | None, pin: str) -> bytes:
    """``headers`` (a ``NATS/1.0`` block or None) with ``Nats-Pin-Id: <pin>`` added last
    (nats-server genHeader)."""
    base = headers[:-2] if headers and len(headers) > 2 else b"NATS/1.0\r\n"
    return base + f"{PIN_ID_HEADER}: {pin}\r\n\r\n".encode()


class _Priority:
    """The priority-group state of a :class:`~jetraft.jetstream.consumer.Consumer`: the
    pin (id, when given, its timer, its group, the term it was given in)."""

    def _priority_init(self) -> None:
        self._pin = ""                  # nats-server currentPinId
        self._pin_ts: int | None = None  # nats-server pinnedTS (ns)
        self._pin_due = 0               # when the pin's timer fires (ns; 0: no timer)
        self._pin_group = ""            # the group the timer's advisory names
        self._pin_term = 0              # the RAFT term the pin was given in
        self._pin_seq = 0               # pins given so far (for the next id)
        self._term = 0                  # the latest RAFT term applied (0: one server)

    # --- requests --------------------------------------------------------------------------
    def _priority_refusal(self, pg: PriorityGroup | None, now: int) -> tuple[int, str] | None:
        """nats-server processNextMsgRequest's checks of a request's priority fields: the
        status to answer, or None (a request with the current pin restarts its timer)."""
        if pg is None:
            return None
        policy = self.config.priority_policy
        if (pg.min_pending or pg.min_ack_pending) and policy != "overflow":
            return 400, "Bad Request - Not a Overflow Priority consumer"
        if pg.id and policy != "pinned_client":
            return 400, "Bad Request - Not a Pinned Client Priority consumer"
        if not 0 <= pg.priority <= 9:
            return 400, "Bad Request - Priority must be between 0 and 9"
        if policy == "none":
            return None
        if not pg.group:
            return 400, "Bad Request - Priority Group missing"
        if pg.group not in self.config.priority_groups:
            return 400, "Bad Request - Invalid Priority Group"
        if self._pin:
            if pg.id == self._pin:
                self._pin_due = now + self.config.priority_timeout
            elif pg.id:
                return 423, "Nats-Pin-Id mismatch"
        return None

    def _overflow_holds(self, pg: PriorityGroup | None) -> bool:
        """Whether an overflow request waits: it names a threshold and neither num_pending
        (the message being delivered counted) nor the ack pending count reaches it."""
        if pg is None or not (pg.min_pending > 0 or pg.min_ack_pending > 0):
            return False
        return not ((pg.min_pending > 0 and pg.min_pending <= self._npc + 1) or
                    (pg.min_ack_pending > 0 and pg.min_ack_pending <= len(self._pending)))

    # --- the pin ---------------------------------------------------------------------------
    def _new_pin_id(self, now: int) -> str:
        self._pin_seq += 1
        seed = f"{self.stream.config.name}\0{self.name}\0{self.created_ns}\0{self._pin_seq}\0{now}"
        digest = hashlib.sha256(seed.encode()).digest()
        return "".join(_DIGITS[b % 62] for b in digest[:22])

    def _assign_pin(self, pg: PriorityGroup | None, now: int) -> None:
        """nats-server assignNewPinId: ``pg``'s request becomes the pinned one."""
        if pg is None or not pg.group:
            return
        self._pin = self._new_pin_id(now)
        self._pin_ts = now
        self._pin_term = self._term
        pg.id = self._pin
        self._pin_group = pg.group
        self._pin_due = now + self.config.priority_timeout
        self.dirty = True
        self._advise(adv.consumer_group_pinned, getattr(self, "account_name", ""), pg.group,
                     self._pin, now)

    def _unassign_pin(self) -> None:
        """nats-server unassignPinId."""
        self._pin, self._pin_ts, self._pin_due = "", None, 0
        self.dirty = True

    def _pin_expired(self, now: int) -> None:
        """The pin's timer (nats-server setPinnedTimer's function): the pin ends, advised."""
        if self._pin_due and now >= self._pin_due:
            self._pin_due = 0
            if self._pin:
                group = self._pin_group
                self._unassign_pin()
                self._advise(adv.consumer_group_unpinned, getattr(self, "account_name", ""),
                             group, "timeout", now)

    def unpin(self, group: str, now_ns: int) -> list:
        """``$JS.API.CONSUMER.UNPIN`` for ``group`` (one of ``priority_groups``, checked by
        the caller): the pin ends, the unpinned advisory (reason ``admin``) is sent, whatever
        the policy (nats-server jsConsumerUnpinRequest). Returns what :meth:`poll` then
        sends (a waiting request may take the next pin)."""
        self._unassign_pin()
        self._advise(adv.consumer_group_unpinned, getattr(self, "account_name", ""), group,
                     "admin", now_ns)
        return self.poll(now_ns)

    def on_term(self, term: int) -> None:
        """Entries of RAFT term ``term`` are applied from now on (a term other than the
        last one seen): a pin given in another term ends, without an advisory (nats-server
        drops the pin when the consumer's leader changes)."""
        if term == self._term:
            return
        self._term = term
        if self._pin and self._pin_term != term:
            self._unassign_pin()

    @property
    def pinned_id(self) -> str:
        """The current pin id ("" when none)."""
        return self._pin

    # --- info and state --------------------------------------------------------------------
    def _priority_info(self) -> list[dict[str, Any]] | None:
        groups = self.config.priority_groups
        if not groups:
            return None
        state: dict[str, Any] = {"group": groups[0]}
        if self._pin:
            state["pinned_client_id"] = self._pin
        state["pinned_ts"] = gofmt.format_time(self._pin_ts)
        return [state]

    def priority_state(self) -> list[Any]:
        """``[pin, pinned ts|None, timer due, group, pin term, pins given, term]``."""
        return [self._pin, self._pin_ts, self._pin_due, self._pin_group, self._pin_term,
                self._pin_seq, self._term]

    def restore_priority_state(self, state: list[Any]) -> None:
        (self._pin, self._pin_ts, self._pin_due, self._pin_group, self._pin_term,
         self._pin_seq, self._term) = state
