"""The pace of a JetStream consumer's deliveries: ``replay_policy: original`` and
``rate_limit_bps`` (a mixin of :class:`~jetraft.jetstream.consumer.Consumer`).

Behaviour follows nats-server ``server/consumer.go`` ``loopAndGatherMsgs`` (``o.replay``,
``lts``, ``lseq``) and ``setRateLimit`` (golang.org/x/time/rate ``Limiter.ReserveN``):

- **replay original**: from the consumer's start (creation, or loading at a server's start)
  until its delivery loop, idle, has passed the stream's last sequence of that moment, each
  message goes out no sooner than the gap between its stored time and the previous
  delivered message's after that one went (a gap of 1 ms or less is not waited); the first
  goes at once. Once caught up, messages go as they come.
- **rate_limit_bps** (push only; bits per second): a token bucket of ``rate_limit_bps // 8``
  bytes per second holding at most the stream's ``max_msg_size`` bytes (else
  :data:`DEFAULT_RATE_BURST`), full at the start; each message takes its size (the stored
  subject, the ack subject, the headers and the payload: nats-server's ``sz``) and waits
  until the bucket has paid for it. ``rate_limit_bps`` under 8 is a rate of 0 bytes per
  second: what the full bucket holds goes, then nothing (as nats-server).

While a message waits its turn nothing else is delivered and, as nats-server's delivery
loop sleeps meanwhile, no heartbeat is sent and waiting pull requests are not looked at
(no 408, no heartbeat) until the message goes; acks and ack-wait redeliveries go on.

Deterministic and sans-IO, like the rest of the consumer: the waiting message is put back
where it was (:meth:`_undo_pick`) and :meth:`_pace_deadline` says when to poll again, so a
replica applying the same inputs at the same times delivers the same messages, and the
persisted state never holds a message picked but not sent.

Deviations from nats-server, by design:

- a message larger than the burst is sent once the bucket has paid for it (nats-server's
  limiter refuses such a reservation and the consumer waits for ever);
- the burst follows the stream's ``max_msg_size`` as it is now (nats-server takes it when
  the consumer starts), and without one is 1 MiB (nats-server: the account's or server's
  ``max_payload``), so that every replica of a clustered stream computes the same pace;
- a pull request that expires while its message waits out a replay gap is answered 408
  when the message's turn comes, and the message waits for the next request (nats-server
  hands the message to the expired request);
- in a cluster the replay and the bucket carry on across a leader change (nats-server's new
  leader starts both afresh);
- the waiting message is not taken yet: CONSUMER.INFO meanwhile counts it in
  ``num_pending``, and the pending count in its ack subject is the one when it goes
  (nats-server takes it, then sleeps).
"""

from __future__ import annotations

from typing import Any

from .store import StoredMessage

__all__ = ["DEFAULT_RATE_BURST", "NEVER"]

SECOND = 1_000_000_000
MILLISECOND = 1_000_000
#: The rate limiter's burst (bytes) for a stream without a max_msg_size: nats-server's
#: default max_payload (MAX_PAYLOAD_SIZE, server/const.go).
DEFAULT_RATE_BURST = 1024 * 1024
#: A wait that never ends (a rate of 0 bytes per second), in ns since the epoch.
NEVER = (1 << 63) - 1

#: ``_pace_stage`` values: what a message that waited its turn has done already.
_REPLAYED, _RESERVED = 1, 2


class _Pacing:
    """Replay original and the rate limit of a :class:`~jetraft.jetstream.consumer.Consumer`."""

    def _pace_init(self) -> None:
        """The pace of a consumer starting now (nats-server ``setLeader``: ``o.replay`` is set
        for a replay policy other than instant; ``lseq`` is the stream's last sequence)."""
        self._replay = self.config.replay_policy == "original"
        self._replay_lseq = self._store.state().last_seq if self._replay else 0
        self._replay_lts = 0            # stored time of the last message delivered (ns)
        self._pace_due = 0              # a message waits until then (ns; 0: none)
        self._pace_stage = 0            # what that message did already (_REPLAYED, _RESERVED)
        self._rl_credit = 0             # bytes x 1e9 in the bucket (negative: owed)
        self._rl_last: int | None = None    # when the bucket was last filled (None: full)

    def _pace_config(self, old: Any, new: Any) -> None:
        """A CONSUMER.UPDATE changed ``rate_limit_bps``: a new, full bucket (nats-server
        ``setRateLimit``); a message waiting to be paid for by the old one is paid for by the
        new one at the next poll."""
        if old.rate_limit_bps != new.rate_limit_bps:
            self._rl_credit, self._rl_last = 0, None
            if self._pace_stage == _RESERVED:
                self._pace_due, self._pace_stage = 0, _REPLAYED

    @property
    def paces(self) -> bool:
        """Whether this consumer has a pace to keep (replay original or a rate limit)."""
        return self.config.replay_policy == "original" or self.config.rate_limit_bps > 0

    def _holding(self, now: int) -> bool:
        """Whether a message is waiting its turn at ``now``."""
        return bool(self._pace_due) and now < self._pace_due

    def _pace_deadline(self) -> int | None:
        """When the waiting message may go (None: none waits, or it never will)."""
        return self._pace_due if self._pace_due and self._pace_due != NEVER else None

    def _pace_wait_over(self, now: int) -> bool:
        """Whether delivery may go on at ``now``: no message waits its turn, or its wait is
        over (what it waited for is kept in :attr:`_pace_stage` for the next pick)."""
        if self._pace_due and now >= self._pace_due:
            self._pace_due = 0
        return not self._pace_due

    def _pace(self, sm: StoredMessage, size: int, now: int) -> bool:
        """Whether ``sm`` (``size`` bytes as nats-server counts them) must wait its turn; if
        so, :attr:`_pace_due` says until when (the caller puts it back, and picks it again
        then). Otherwise it goes now: the replay's last stored time moves to it."""
        stage = self._pace_stage
        if stage < _REPLAYED and self._replay and self._replay_lts:
            delay = sm.ts - self._replay_lts
            if delay > MILLISECOND:
                self._pace_due, self._pace_stage = now + delay, _REPLAYED
                return True
        if stage < _RESERVED and self.config.rate_limit_bps > 0:
            delay = self._reserve(size, now)
            if delay:
                self._pace_due = NEVER if delay == NEVER else now + delay
                self._pace_stage = _RESERVED
                return True
        self._pace_stage = 0
        if self._replay:
            self._replay_lts = sm.ts
        return False

    def _reserve(self, size: int, now: int) -> int:
        """x/time/rate ``ReserveN(now, size)``: take ``size`` bytes from the bucket (it may
        go below empty) and return the ns until it has paid for them (0: at once,
        :data:`NEVER`: at a rate of 0). Integer arithmetic (bytes x 1e9), so that replicas
        agree to the ns."""
        rate = self.config.rate_limit_bps // 8
        burst = self.stream.config.max_msg_size
        cap = (burst if burst > 0 else DEFAULT_RATE_BURST) * SECOND
        if self._rl_last is None:
            credit = cap
        else:
            credit = min(self._rl_credit + rate * max(now - self._rl_last, 0), cap)
        credit -= size * SECOND
        self._rl_credit, self._rl_last = credit, now
        if credit >= 0:
            return 0
        if rate == 0:
            return NEVER
        return -(credit // rate)        # ceil(-credit / rate)

    def _replay_caught_up(self) -> None:
        """nats-server ``waitForMsgs``: once the delivery loop idles past the stream's last
        sequence of the consumer's start, the replay ends."""
        if self._replay and self._sseq > self._replay_lseq:
            self._replay = False

    def _undo_pick(self, sm: StoredMessage, dc: int) -> None:
        """Put back a message :meth:`_next_msg` picked but that is not sent now (nats-server
        ``loopAndGatherMsgs`` when no pull request takes it): the next pick is the same."""
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

    # --- a clustered replica's snapshot ---------------------------------------------------
    def pace_state(self) -> list:
        """``[replay, lseq, lts, due, stage, credit, last]`` for :meth:`replica_state`."""
        return [self._replay, self._replay_lseq, self._replay_lts, self._pace_due,
                self._pace_stage, self._rl_credit, self._rl_last]

    def restore_pace_state(self, state: list) -> None:
        """Take what :meth:`pace_state` returned (checked by replica_state.py)."""
        (self._replay, self._replay_lseq, self._replay_lts, self._pace_due,
         self._pace_stage, self._rl_credit, self._rl_last) = state
