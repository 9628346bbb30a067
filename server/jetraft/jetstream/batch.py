"""Atomic batch publish (``allow_atomic``, ADR-50, API level 2): messages published with
``Nats-Batch-Id`` / ``Nats-Batch-Sequence`` are staged on the stream's leader and stored
all together when the one with ``Nats-Batch-Commit`` arrives, or not at all.

Sans-IO and deterministic. Behaviour follows nats-server ``server/stream.go``
``processJetStreamAtomicBatchMsg`` (staging, limits, the commit) and
``server/jetstream_batching.go`` ``checkMsgHeadersPreClusteredProposal`` (the checks of
the whole batch before any of it is stored):

- ``Nats-Batch-Id`` (1 to 64 bytes) names a batch; ``Nats-Batch-Sequence`` numbers its
  messages from 1 without gaps; ``Nats-Batch-Commit: 1`` on the last one commits the batch
  with it, ``Nats-Batch-Commit: eob`` commits what was staged before it (the ``eob``
  message itself is not stored; the last stored message gets ``Nats-Batch-Commit: 1``).
  The headers are stored with the messages;
- a staged message is answered with an empty message (flow control: the publisher
  waits for it before the next); the commit with the PubAck of the batch's last message,
  plus ``"batch": "<id>"`` and ``"count": <messages stored>``;
- refused: ``Nats-Batch-Id`` on a stream without ``allow_atomic`` (10174), an id longer
  than 64 bytes (10179), no or no numeric ``Nats-Batch-Sequence`` (10175), a commit value
  other than ``1``/``eob`` (10200, the batch is abandoned), a sequence that does not
  follow the last staged one or a batch that is not staged here (10176 "atomic publish
  batch is incomplete"; the batch is abandoned), more than :data:`MAX_BATCH_SIZE`
  messages (10199), a new batch when :data:`MAX_INFLIGHT_PER_STREAM` batches of the stream
  or :data:`MAX_INFLIGHT_TOTAL` of the server are staged (429, 10210), a
  ``Nats-Required-Api-Level`` above the server's (10185, the batch is abandoned; the header
  is not stored otherwise);
- a batch that gets no message for :data:`BATCH_TIMEOUT_NS` is abandoned when that time is
  up (the server's timers call :meth:`AtomicBatches.expire` at
  :meth:`AtomicBatches.next_expiry`), and so are the batches of a stream whose leader
  changes (a clustered stream's staging is on its leader only): their commit is refused as
  incomplete;
- an abandonment nats-server advises (``$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>``,
  ``sendStreamBatchAbandonedAdvisory``) is named with its reason: :attr:`Staging.abandoned`
  for the batch of the message being staged (``incomplete``: a gap or an ``eob`` first
  message; ``large``: past :data:`MAX_BATCH_SIZE`; ``unsupported``: a required API level
  too high), :meth:`AtomicBatches.take_abandoned` for those that timed out (``timeout``).
  Not advised, as by nats-server: a bad commit value, a refusal at the commit, a message
  of a batch that is not staged, a stream deleted or created again, a leader change;
- at the commit, every message is checked against the stream as it was before the batch
  (:func:`check_batch`): ``Nats-Expected-Last-Msg-Id`` is refused (10177), a
  ``Nats-Msg-Id`` seen before or twice in the batch is refused (10201: the batch is not
  stored, no duplicate PubAck), ``Nats-Expected-Last-Sequence`` is allowed on the first
  message only (10164 on a later one), ``Nats-Expected-Last-Subject-Sequence`` not on a
  subject an earlier message of the batch wrote (10164), a subject rollup only on a
  subject's first message of the batch and a stream rollup on the first message
  (10111), and ``discard: new`` limits count the whole batch (10077). Any refusal refuses
  the whole batch.

Memory: a stream stages at most :data:`MAX_INFLIGHT_PER_STREAM` batches of at most
:data:`MAX_BATCH_SIZE` messages, each within the server's ``max_payload``. jetraft also
bounds the bytes a batch stages (:data:`MAX_BATCH_BYTES`, so that a committed batch fits in
one RAFT entry and one route frame; over it: 10199 with the messages staged so far) and
the bytes all batches of the server stage (:data:`MAX_STAGED_BYTES`; over it: 10210), and
advises those as ``large`` and ``incomplete``. The staging is in memory on the leader: a
batch not committed before the leader restarts is abandoned.

Time: ``now_ns`` is the wall clock. The staged batches are kept in the order of their last
message, so the next expiry and each expired batch cost O(1); a clock that steps back may
make a batch expire late by as much, never early.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from jetraft import gofmt
from jetraft.protocol.headers import append_lines, get_header

from . import counter, schedule
from . import errors as E
from .requests import REQUIRED_API_LEVEL_HEADER, required_level_met
from .stream import ERR_MAX_BYTES, ERR_MAX_MSGS, ERR_MAX_MSGS_PER_SUBJECT, parse_message_ttl

__all__ = [
    "BATCH_COMMIT", "BATCH_ID", "BATCH_SEQ", "BATCH_TIMEOUT_NS", "INCOMPLETE", "LARGE", "MAX_BATCH_BYTES",
    "MAX_BATCH_ID", "MAX_BATCH_SIZE", "MAX_INFLIGHT_PER_STREAM", "MAX_INFLIGHT_TOTAL", "MAX_STAGED_BYTES",
    "TIMEOUT", "UNSUPPORTED", "Abandoned", "AtomicBatches", "Committed", "Staging", "batch_id", "check_batch",
]

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQ = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"

#: Longest batch id, bytes (nats-server processJetStreamAtomicBatchMsg).
MAX_BATCH_ID = 64
#: Messages a batch may hold (nats-server streamDefaultMaxAtomicBatchSize; its
#: ``jetstream { limits { batch { max_msgs } } }`` option is refused by jetraft's config).
MAX_BATCH_SIZE = 1000
#: Batches staged at once per stream (streamDefaultMaxAtomicBatchInflightPerStream).
MAX_INFLIGHT_PER_STREAM = 50
#: Batches staged at once per server (streamDefaultMaxAtomicBatchInflightTotal).
MAX_INFLIGHT_TOTAL = 1000
#: A batch with no message for this long is abandoned, ns (streamDefaultMaxBatchTimeout).
BATCH_TIMEOUT_NS = 10_000_000_000
#: Bytes (subjects, headers, payloads) one batch may stage: a committed batch is one RAFT
#: entry, which must fit in one route frame (64 MiB, protocol/route.py) with room to spare.
MAX_BATCH_BYTES = 32 * 1024 * 1024
#: Bytes every batch of the server may stage together.
MAX_STAGED_BYTES = 256 * 1024 * 1024

# Why a batch was abandoned, as its advisory says (nats-server BatchAbandonReason).
TIMEOUT = "timeout"
LARGE = "large"
INCOMPLETE = "incomplete"
UNSUPPORTED = "unsupported"

# Headers the commit checks read (nats-server server/stream.go constants).
_MSG_ID = "Nats-Msg-Id"
_EXPECTED_STREAM = "Nats-Expected-Stream"
_EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
_EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
_EXPECTED_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
_EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
_ROLLUP = "Nats-Rollup"
_MSG_TTL = "Nats-TTL"
_MAX_HEADER_BYTES = 65535
_U64 = (1 << 64) - 1

#: One message of a batch: (subject as published, headers or None, payload).
Msg = tuple[str, "bytes | None", bytes]


def batch_id(headers: bytes | None) -> str:
    """The message's ``Nats-Batch-Id``, "" when it has none (an empty one is none too:
    the message is an ordinary publish, as nats-server getBatchId)."""
    return get_header(headers, BATCH_ID) or "" if headers else ""


def _parse_seq(text: str | None) -> int | None:
    """nats-server parseUint64: ASCII digits that fit in 64 bits, else None."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    n = int(text) if len(text) <= 20 else _U64 + 1
    return n if n <= _U64 else None


def _without(headers: bytes, key: str) -> bytes:
    """``headers`` without its ``key:`` lines (nats-server removeHeaderIfPresent)."""
    lines = headers.split(b"\r\n")
    prefix = key.encode() + b":"
    return b"\r\n".join(ln for i, ln in enumerate(lines) if i == 0 or not ln.startswith(prefix))


@dataclass(slots=True)
class _Staged:
    """One batch being staged: the stream entry it is for (a stream deleted and created
    again is another), its messages, their bytes, when its last message arrived (ns)."""

    owner: Any
    msgs: list[Msg] = field(default_factory=list)
    size: int = 0
    last_ns: int = 0


@dataclass(frozen=True, slots=True)
class Committed:
    """A batch whose commit arrived: ``id``, its messages in order (``eob`` dropped, the
    last one carrying ``Nats-Batch-Commit: 1``)."""

    id: str
    msgs: tuple[Msg, ...]


@dataclass(frozen=True, slots=True)
class Staging:
    """What staging one message gives: ``error`` (answer it, nothing more), or the batch
    ``committed`` (store it), or neither (staged: answer with an empty message).
    ``abandoned``: the reason the message's batch was abandoned, when nats-server advises
    it (see the module docstring)."""

    error: E.JSApiError | None = None
    committed: Committed | None = None
    abandoned: str | None = None


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A batch abandoned without a message of it at hand (it timed out): stream ``key``
    (account, stream), its ``id``, the stream entry it was staged for (``owner``) and
    ``reason``."""

    key: tuple[str, str]
    id: str
    owner: Any
    reason: str


class AtomicBatches:
    """The batches staged on one server, by (account, stream) then batch id; bounded by the
    module's limits (given to the constructor for tests). An idle batch is dropped by
    :meth:`expire` (the server's timers call it at :meth:`next_expiry`), or when its stream
    or the server's limits are next looked at; either way it waits in :meth:`take_abandoned`
    (at most :attr:`total` of them) for its advisory."""

    def __init__(self, *, max_size: int = MAX_BATCH_SIZE, per_stream: int = MAX_INFLIGHT_PER_STREAM,
                 total: int = MAX_INFLIGHT_TOTAL, timeout_ns: int = BATCH_TIMEOUT_NS,
                 max_batch_bytes: int = MAX_BATCH_BYTES, max_staged_bytes: int = MAX_STAGED_BYTES) -> None:
        self.max_size = max_size
        self.per_stream = per_stream
        self.total = total
        self.timeout_ns = timeout_ns
        self.max_batch_bytes = max_batch_bytes
        self.max_staged_bytes = max_staged_bytes
        self._streams: dict[tuple[str, str], dict[str, _Staged]] = {}
        #: every staged batch, in the order of its last message (the oldest first)
        self._order: OrderedDict[tuple[tuple[str, str], str], _Staged] = OrderedDict()
        #: batches that timed out, waiting for their advisory
        self._abandoned: deque[Abandoned] = deque(maxlen=total)
        self._count = 0
        self._bytes = 0

    # ------------------------------------------------------------------ bookkeeping

    def inflight(self, key: tuple[str, str] | None = None) -> int:
        """Batches staged for stream ``key`` (None: on the server)."""
        if key is None:
            return self._count
        return len(self._streams.get(key, ()))

    @property
    def staged_bytes(self) -> int:
        """Bytes staged by every batch of the server."""
        return self._bytes

    def _drop(self, key: tuple[str, str], bid: str) -> None:
        batches = self._streams.get(key)
        if batches is None:
            return
        b = batches.pop(bid, None)
        if b is not None:
            self._count -= 1
            self._bytes -= b.size
            self._order.pop((key, bid), None)
        if not batches:
            del self._streams[key]

    def drop_stream(self, key: tuple[str, str]) -> int:
        """Abandon every batch of stream ``key`` (its leader changed, it was deleted);
        returns how many."""
        batches = self._streams.pop(key, None)
        if not batches:
            return 0
        self._count -= len(batches)
        self._bytes -= sum(b.size for b in batches.values())
        for bid in batches:
            self._order.pop((key, bid), None)
        return len(batches)

    def _time_out(self, key: tuple[str, str], bid: str, b: _Staged) -> None:
        self._drop(key, bid)
        self._abandoned.append(Abandoned(key, bid, b.owner, TIMEOUT))

    def _expire_stream(self, key: tuple[str, str], owner: Any, now_ns: int) -> None:
        """Drop the batches of stream ``key`` staged for another stream entry (it was
        deleted and created again: no advisory) and those idle for :attr:`timeout_ns`."""
        batches = self._streams.get(key)
        if not batches:
            return
        for bid, b in list(batches.items()):
            if b.owner is not owner:
                self._drop(key, bid)
            elif now_ns - b.last_ns >= self.timeout_ns:
                self._time_out(key, bid, b)

    def next_expiry(self) -> int | None:
        """When :meth:`expire` has work next (ns; the oldest batch's timeout, or 0 when timed
        out batches wait in :meth:`take_abandoned`), None when nothing is staged."""
        if self._abandoned:
            return 0
        for b in self._order.values():
            return b.last_ns + self.timeout_ns
        return None

    def expire(self, now_ns: int, limit: int | None = None) -> int:
        """Abandon the batches idle for :attr:`timeout_ns` at ``now_ns`` (at most ``limit``
        of them, oldest first), to be taken with :meth:`take_abandoned`; returns how many."""
        n = 0
        while self._order and (limit is None or n < limit):
            (key, bid), b = next(iter(self._order.items()))
            if now_ns - b.last_ns < self.timeout_ns:
                break
            self._time_out(key, bid, b)
            n += 1
        return n

    def take_abandoned(self, limit: int | None = None) -> list[Abandoned]:
        """The batches that timed out since the last call (at most ``limit``, oldest first),
        for their advisories."""
        out: list[Abandoned] = []
        while self._abandoned and (limit is None or len(out) < limit):
            out.append(self._abandoned.popleft())
        return out

    # ------------------------------------------------------------------ staging

    def stage(self, key: tuple[str, str], owner: Any, config: Any, subject: str,
              headers: bytes, data: bytes, now_ns: int) -> Staging:
        """Stage one message of a batch for stream ``key`` (``owner``: its StreamEntry,
        ``config``: its StreamConfig) at ``now_ns``. The message must carry a
        ``Nats-Batch-Id`` (:func:`batch_id`). The stream's own publish refusals (sealed,
        account limits, ``max_msg_size``) are the caller's, before this."""
        bid = batch_id(headers)
        if not config.allow_atomic:
            return Staging(E.api_error("JSAtomicPublishDisabledErr"))
        if len(bid.encode("utf-8", "surrogateescape")) > MAX_BATCH_ID:
            return Staging(E.api_error("JSAtomicPublishInvalidBatchIDErr"))
        seq = _parse_seq(get_header(headers, BATCH_SEQ))
        if seq is None:
            return Staging(E.api_error("JSAtomicPublishMissingSeqErr"))
        commit_value = get_header(headers, BATCH_COMMIT)
        commit = commit_value is not None
        eob = commit_value == "eob"
        size = seq - 1 if eob else seq
        self._expire_stream(key, owner, now_ns)
        batches = self._streams.get(key)
        b = batches.get(bid) if batches is not None else None
        if b is None:
            if seq != 1:
                if size > self.max_size:
                    return Staging(E.api_error("JSAtomicPublishTooLargeBatchErrF", size=self.max_size))
                return Staging(E.api_error("JSAtomicPublishIncompleteBatchErr"))
            if batches is not None and len(batches) >= self.per_stream:
                return Staging(E.api_error("JSAtomicPublishTooManyInflight"))
            if self._count >= self.total:
                self.expire(now_ns)
                if self._count >= self.total:
                    return Staging(E.api_error("JSAtomicPublishTooManyInflight"))
            b = _Staged(owner, last_ns=now_ns)
            self._streams.setdefault(key, {})[bid] = b
            self._order[(key, bid)] = b
            self._count += 1
        if commit and not eob and commit_value != "1":
            self._drop(key, bid)        # nats-server: no advisory
            return Staging(E.api_error("JSAtomicPublishInvalidBatchCommitErr"))
        if get_header(headers, REQUIRED_API_LEVEL_HEADER) is not None:
            if not required_level_met(headers):
                self._drop(key, bid)
                return Staging(E.api_error("JSRequiredApiLevelErr"), abandoned=UNSUPPORTED)
            headers = _without(headers, REQUIRED_API_LEVEL_HEADER)
        if seq != len(b.msgs) + 1 or (seq == 1 and eob):
            self._drop(key, bid)
            return Staging(E.api_error("JSAtomicPublishIncompleteBatchErr"), abandoned=INCOMPLETE)
        if size > self.max_size:
            self._drop(key, bid)
            return Staging(E.api_error("JSAtomicPublishTooLargeBatchErrF", size=self.max_size), abandoned=LARGE)
        b.last_ns = now_ns
        self._order.move_to_end((key, bid))
        if not eob:
            need = len(subject) + len(headers) + len(data)
            if b.size + need > self.max_batch_bytes:
                staged = len(b.msgs)
                self._drop(key, bid)
                return Staging(E.api_error("JSAtomicPublishTooLargeBatchErrF", size=staged), abandoned=LARGE)
            if self._bytes + need > self.max_staged_bytes:
                self._drop(key, bid)
                return Staging(E.api_error("JSAtomicPublishTooManyInflight"), abandoned=INCOMPLETE)
            b.msgs.append((subject, headers, data))
            b.size += need
            self._bytes += need
        if not commit:
            return Staging()
        msgs = b.msgs
        self._drop(key, bid)
        if eob:
            last_subject, last_headers, last_data = msgs[-1]
            msgs[-1] = (last_subject, append_lines(last_headers, f"{BATCH_COMMIT}: 1\r\n"), last_data)
        return Staging(committed=Committed(bid, tuple(msgs)))


# ---------------------------------------------------------------------- the commit's checks

def _u64(text: str) -> int:
    """nats-server ``parseInt64`` cast to uint64: digits only, else 2**64 - 1."""
    if not text or not text.isascii() or not text.isdigit() or len(text) > 19:
        return _U64
    return int(text)


def check_batch(stream: Any, msgs: tuple[Msg, ...] | list[Msg], now_ns: int) -> None:
    """Check a committed batch against ``stream`` (a :class:`~jetraft.jetstream.stream.Stream`)
    as it is before any of it is stored, each message in order as nats-server's
    ``checkMsgHeadersPreClusteredProposal`` does, with what the earlier messages of the
    batch would change staged; raises the first refusal's JSApiError. A batch that passes
    is stored whole by :meth:`Stream.publish_prechecked` (see the module docstring)."""
    cfg = stream.config
    if cfg.sealed:
        raise E.stream_sealed()
    store = stream.store
    msg_ids: set[str] = set()
    inflight: dict[str, list[int]] = {}        # subject -> [messages, bytes] of the batch
    expected: dict[str, int] = {}              # subject -> its last sequence, as checked
    state = store.state() if cfg.discard == "new" else None
    batch_msgs = batch_bytes = 0                # the batch so far, in all
    counters: dict[str, tuple[bytes | None, bytes]] = {}    # subject -> its counter message, as staged
    stream.prune_dedupe(now_ns)
    for i, (published, headers, data) in enumerate(msgs):
        subject = stream.stored_subject(published, now_ns)
        headers = headers or None
        if headers:     # what publish_message checks and changes of a schedule (schedule.py)
            headers = schedule.check_publish(headers, subject, cfg, sourced=False, parse_ttl=parse_message_ttl,
                                             last_on=stream.last_headers)
        hlen = len(headers) if headers else 0
        if cfg.max_msg_size >= 0 and (hlen > cfg.max_msg_size or len(data) > cfg.max_msg_size - hlen):
            raise E.message_exceeds_maximum()
        rollup = ""
        incr = None
        if headers:
            if get_header(headers, _EXPECTED_LAST_MSG_ID):
                raise E.api_error("JSAtomicPublishUnsupportedHeaderBatchErr", header=_EXPECTED_LAST_MSG_ID)
            if hlen > _MAX_HEADER_BYTES:
                raise E.header_exceeds_maximum()
            incr = counter.check_increment(headers, data, counter=cfg.allow_msg_counter, sourced=False)
            name = get_header(headers, _EXPECTED_STREAM)
            if name and name != cfg.name:
                raise E.stream_not_match()
            _check_ttl(cfg, get_header(headers, _MSG_TTL) or "")
            msg_id = get_header(headers, _MSG_ID)
            if msg_id:
                if msg_id in msg_ids or stream.seen_msg_id(msg_id) is not None:
                    raise E.api_error("JSAtomicPublishContainsDuplicateMessageErr")
                msg_ids.add(msg_id)
        if cfg.allow_msg_counter and incr is None:
            raise E.api_error("JSMessageIncrMissingErr")
        if cfg.allow_msg_counter and incr is not None:    # a broken or too large value refuses the batch
            last = counters[subject] if subject in counters else stream.last_on_subject(subject)
            update = counter.apply_increment(incr, headers, data, subject, last, "")
            counters[subject] = (update.headers, update.data)
        if headers:
            last_text = get_header(headers, _EXPECTED_LAST_SEQ)
            if last_text:
                have = stream.last_seq + i
                if _u64(last_text) != have:
                    raise E.wrong_last_sequence(have)
                if inflight:
                    raise E.wrong_last_sequence_constant()
            subj_seq_text = get_header(headers, _EXPECTED_LAST_SUBJ_SEQ)
            override = get_header(headers, _EXPECTED_LAST_SUBJ_SEQ_SUBJ)
            if subj_seq_text:
                on = override or subject
                if on in inflight:
                    raise E.wrong_last_sequence_constant()
                want = _u64(subj_seq_text)
                have = expected.get(on)
                if have is None:
                    have = store.last_seq_for_subject(on)
                if have != want:
                    raise E.wrong_last_sequence(have)
                expected[on] = have
            elif override:
                raise E.api_error("JSStreamExpectedLastSeqPerSubjectInvalid")
            rollup = get_header(headers, _ROLLUP) or ""
            if rollup:
                if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                    raise E.api_error("JSStreamRollupFailedF", err="rollup not permitted")
                if rollup == "sub":
                    if subject in inflight:
                        raise E.api_error("JSStreamRollupFailedF", err="batch rollup sub invalid")
                elif rollup == "all":
                    if inflight:
                        raise E.api_error("JSStreamRollupFailedF", err="batch rollup all invalid")
                else:
                    raise E.api_error("JSStreamRollupFailedF", err=f"rollup value invalid: {gofmt.quote(rollup)}")
        size = store.msg_size(subject, headers, data)
        totals = inflight.setdefault(subject, [0, 0])
        totals[0] += 1
        totals[1] += size
        batch_msgs, batch_bytes = batch_msgs + 1, batch_bytes + size
        if state is not None:
            _check_discard_new(stream, state.messages + batch_msgs, state.bytes + batch_bytes,
                               subject, totals[0], bool(rollup))


def _check_ttl(cfg: Any, text: str) -> None:
    """A ``Nats-TTL`` on a stream without ``allow_msg_ttl`` (10166) or invalid (10165)."""
    if not text:
        return
    ttl, invalid = parse_message_ttl(text)
    if ttl != 0 or invalid:
        if not cfg.allow_msg_ttl:
            raise E.message_ttl_disabled()
        if invalid:
            raise E.message_ttl_invalid()


def _check_discard_new(stream: Any, msgs: int, size: int, subject: str, ops: int, rollup: bool) -> None:
    """``discard: new`` limits with the whole batch so far counted (``msgs``/``size``: the
    stream's and the batch's so far; ``ops``: the batch's messages on ``subject``; nats-server
    checkMsgHeadersPreClusteredProposal): 10077 at a limit."""
    cfg = stream.config
    if cfg.max_msgs > 0 or cfg.max_bytes > 0:
        if cfg.max_msgs > 0 and msgs > cfg.max_msgs:
            raise E.stream_store_failed(ERR_MAX_MSGS)
        if cfg.max_bytes > 0 and size > cfg.max_bytes:
            raise E.stream_store_failed(ERR_MAX_BYTES)
    if cfg.discard_new_per_subject and cfg.max_msgs_per_subject > 0 and not rollup:
        have = stream.store.subjects_state(subject).get(subject, 0)
        if have + ops > cfg.max_msgs_per_subject:
            raise E.stream_store_failed(ERR_MAX_MSGS_PER_SUBJECT)
