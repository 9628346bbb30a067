"""Message schedules (``allow_msg_schedules``, ADR-51, API level 2), sans-IO: a message
published with ``Nats-Schedule`` is a schedule; when it is due the stream stores a copy of
it on ``Nats-Schedule-Target``.

Patterns (nats-server ``server/scheduler.go`` ``parseMsgSchedule``):

- ``@at <RFC 3339>``: once, then the schedule is purged (the copy carries
  ``Nats-Schedule-Next: purge``);
- ``@every <Go duration of at least 1 s>``: again and again; the copy carries the next time
  (``Nats-Schedule-Next: <RFC 3339>``), from the due time rounded to the second plus the
  interval, or from the firing time when that has already passed (a stopped stream fires
  once, not once per missed interval);
- cron patterns (``@hourly``, ``0 30 * * * *``...) and ``Nats-Schedule-Time-Zone`` came with
  nats-server 2.14 and are refused (10189, 10223) with that said in the error.

A copy is the schedule message (or, with ``Nats-Schedule-Source``, the last message on that
subject) without its ``Nats-Schedule*``, ``Nats-Expected-*``, ``Nats-Msg-Id``,
``Nats-TTL`` and ``Nats-Rollup`` headers, with ``Nats-Scheduler: <schedule subject>``,
``Nats-Schedule-Next``, and the schedule's ``Nats-Schedule-TTL`` as ``Nats-TTL`` and
``Nats-Schedule-Rollup`` as ``Nats-Rollup``. A client may publish ``Nats-Schedule-Next:
purge`` with ``Nats-Scheduler: <schedule subject>`` to remove a schedule.

Exactly once: the schedules are fired by the stream's timer (in a cluster, the leader's
replicated tick, with its time), so whether a schedule fires, and the copy it stores, are
decided by the log alone and every replica stores the same copy once, across leader
changes. The :class:`ScheduleIndex` is part of a replica's snapshot state; a stream opened
from its own files reads it back from the stored schedules (:meth:`ScheduleIndex.scan`),
none lost across a restart.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jetraft import gofmt
from jetraft.config.durations import parse_duration
from jetraft.protocol.headers import append_lines, get_header
from jetraft.protocol.subjects import is_valid_literal_subject, subject_matches

from . import errors as E
from .store import CorruptMessage, MessageNotFound

__all__ = ["SCHEDULE", "SCHEDULER", "SCHEDULE_FIRE_MAX", "SCHEDULE_NEXT", "ScheduleIndex", "check_publish",
           "fired_copy", "parse_pattern"]

SCHEDULE = "Nats-Schedule"
SCHEDULE_TIME_ZONE = "Nats-Schedule-Time-Zone"
SCHEDULE_TTL = "Nats-Schedule-TTL"
SCHEDULE_ROLLUP = "Nats-Schedule-Rollup"
SCHEDULE_TARGET = "Nats-Schedule-Target"
SCHEDULE_SOURCE = "Nats-Schedule-Source"
SCHEDULER = "Nats-Scheduler"
SCHEDULE_NEXT = "Nats-Schedule-Next"
PURGE = "purge"
#: The most schedules one timer fires (bounded work per tick; the next tick takes the rest).
SCHEDULE_FIRE_MAX = 1_000
#: How long a schedule whose copy was refused (a full stream, say) waits to be tried again, ns.
RETRY_NS = 1_000_000_000
_SECOND = 1_000_000_000
_CRON = "cron schedules (nats-server 2.14) are not supported by jetraft"
_TIME_ZONE = "schedule time zones (nats-server 2.14) are not supported by jetraft"


@dataclass(frozen=True, slots=True)
class Pattern:
    """A parsed ``Nats-Schedule``: ``at`` (ns since the epoch) for ``@at``, ``every``
    (ns, at least 1 s) for ``@every``."""

    at: int = 0
    every: int = 0

    def first_due(self, ts: int) -> int:
        """When a schedule stored at ``ts`` (ns) is first due, ns."""
        return self.at if not self.every else self.next_after(ts, ts)

    def next_after(self, due: int, now_ns: int) -> int:
        """``@every``: the next due time after the one at ``due``, fired at ``now_ns``."""
        nxt = _round_second(due) + self.every
        return nxt if nxt >= now_ns else _round_second(now_ns) + self.every


def _round_second(ns: int) -> int:
    """Go ``time.Round(time.Second)``: halves away from zero."""
    return (ns + _SECOND // 2) // _SECOND * _SECOND


def parse_pattern(text: str) -> Pattern | None:
    """A ``Nats-Schedule`` value: None when empty (no schedule, also Go's zero time after
    ``@at``). Raises JSApiError 10189 when it is not a pattern, or a cron pattern (refused,
    named as nats-server 2.14's)."""
    if not text:
        return None
    if text.startswith("@at "):
        try:
            at = gofmt.parse_time(text[4:])
        except ValueError:
            raise E.api_error("JSMessageSchedulesPatternInvalidErr") from None
        return None if at is None else Pattern(at=at)
    if text.startswith("@every "):
        try:
            seconds = parse_duration(text[7:])
        except ValueError:
            raise E.api_error("JSMessageSchedulesPatternInvalidErr") from None
        if seconds < 1:
            raise E.api_error("JSMessageSchedulesPatternInvalidErr")
        return Pattern(every=round(seconds * _SECOND))
    err = E.api_error("JSMessageSchedulesPatternInvalidErr")
    raise E.JSApiError(err.code, err.err_code, f"{err.description}: {_CRON}", err.constant)


def _pattern_of(headers: bytes | None) -> Pattern | None:
    """The schedule a header block holds (``Nats-Schedule-Time-Zone`` refused first)."""
    if not headers:
        return None
    if get_header(headers, SCHEDULE_TIME_ZONE) is not None:
        err = E.api_error("JSMessageSchedulesTimeZoneInvalidErr")
        raise E.JSApiError(err.code, err.err_code, f"{err.description}: {_TIME_ZONE}", err.constant)
    return parse_pattern(get_header(headers, SCHEDULE) or "")


def _ttl_valid(text: str, parse_ttl: Callable[[str], tuple[int, bool]]) -> bool:
    return not text or not parse_ttl(text)[1]


def check_publish(headers: bytes | None, subject: str, cfg: Any, *, sourced: bool,
                  parse_ttl: Callable[[str], tuple[int, bool]],
                  last_on: Callable[[str], bytes | None | bool]) -> bytes | None:
    """The schedule checks of a publish to ``subject`` of the stream with config ``cfg``,
    in nats-server's order (server/stream.go processJetStreamMsg); returns the headers to
    store (a schedule gets ``Nats-Rollup: sub`` when it has no rollup). Errors: 10188
    (schedules disabled), 10189 (pattern), 10191 (``Nats-Schedule-TTL``), 10192 (rollup),
    10166 (a schedule TTL without ``allow_msg_ttl``), 10190 (target: missing, not a
    subject, the schedule's own, or not one of the stream's), 10203 (source: likewise),
    10212 (``Nats-Schedule-Next``/``Nats-Scheduler`` other than a purge of a schedule),
    10223 (a time zone). ``last_on(subject)``: the headers of the last message on a
    subject (None: none; False: one without headers). A sourced message is not checked."""
    if not headers or sourced or b"Nats-Schedule" not in headers:    # covers Nats-Scheduler too
        return headers
    allowed = cfg.allow_msg_schedules
    try:
        pattern = _pattern_of(headers)
    except E.JSApiError:
        if not allowed:
            raise E.api_error("JSMessageSchedulesDisabledErr") from None
        raise
    if pattern is not None:
        if not allowed:
            raise E.api_error("JSMessageSchedulesDisabledErr")
        ttl = get_header(headers, SCHEDULE_TTL) or ""
        if not _ttl_valid(ttl, parse_ttl):
            raise E.api_error("JSMessageSchedulesTTLInvalidErr")
        rollup = get_header(headers, SCHEDULE_ROLLUP) or ""
        if rollup and rollup != "sub":
            raise E.api_error("JSMessageSchedulesRollupInvalidErr")
        if ttl and not cfg.allow_msg_ttl:
            raise E.message_ttl_disabled()
        target = get_header(headers, SCHEDULE_TARGET) or ""
        if not target or not is_valid_literal_subject(target) or target == subject:
            raise E.api_error("JSMessageSchedulesTargetInvalidErr")
        source = get_header(headers, SCHEDULE_SOURCE) or ""
        if source and (source in (target, subject) or not is_valid_literal_subject(source)):
            raise E.api_error("JSMessageSchedulesSourceInvalidErr")
        subjects = cfg.subjects or ()
        if not any(subject_matches(s, target) for s in subjects):
            raise E.api_error("JSMessageSchedulesTargetInvalidErr")
        if source and not any(subject_matches(s, source) for s in subjects):
            raise E.api_error("JSMessageSchedulesSourceInvalidErr")
        own_rollup = get_header(headers, "Nats-Rollup")
        if not own_rollup:
            headers = append_lines(headers, "Nats-Rollup: sub\r\n")
        elif own_rollup.lower() != "sub":
            raise E.api_error("JSMessageSchedulesRollupInvalidErr")
    nxt = get_header(headers, SCHEDULE_NEXT)
    if nxt:
        if nxt != PURGE:
            raise E.api_error("JSMessageSchedulesSchedulerInvalidErr")
        scheduler = get_header(headers, SCHEDULER) or ""
        if not scheduler or scheduler == subject or not is_valid_literal_subject(scheduler):
            raise E.api_error("JSMessageSchedulesSchedulerInvalidErr")
        if not allowed:
            raise E.api_error("JSMessageSchedulesDisabledErr")
        last = last_on(scheduler)
        if last is not None and not (last and get_header(last, SCHEDULE)):
            raise E.api_error("JSMessageSchedulesSchedulerInvalidErr")
    elif get_header(headers, SCHEDULER):
        raise E.api_error("JSMessageSchedulesSchedulerInvalidErr")
    return headers


def _without(headers: bytes | None, *, prefixes: tuple[str, ...], keys: tuple[str, ...]) -> bytes | None:
    """``headers`` without the lines whose key starts with one of ``prefixes`` or is one of
    ``keys`` (nats-server removeHeaderIfPrefixPresent, removeHeaderIfPresent); None when
    nothing is left."""
    if not headers:
        return None
    lines = headers.split(b"\r\n")
    kept = [lines[0]]
    bprefixes = tuple(p.encode() for p in prefixes)
    bkeys = tuple(k.encode() + b":" for k in keys)
    for line in lines[1:]:
        if line.startswith(bprefixes) or line.startswith(bkeys):
            continue
        kept.append(line)
    out = b"\r\n".join(kept)
    return out if out.strip() != lines[0].strip() else None


@dataclass(frozen=True, slots=True)
class Copy:
    """What a due schedule stores: on ``target``, ``headers`` and ``data``; ``next_due``:
    an ``@every`` schedule's next time (ns), None for ``@at``."""

    target: str
    headers: bytes
    data: bytes
    next_due: int | None


def fired_copy(schedule_subject: str, sm_headers: bytes | None, sm_data: bytes, due: int, now_ns: int,
               load_last: Callable[[str], tuple[bytes | None, bytes] | None],
               parse_ttl: Callable[[str], tuple[int, bool]]) -> Copy | None:
    """The copy schedule message (``sm_headers``, ``sm_data``) on ``schedule_subject``
    stores when fired at ``now_ns`` for the time ``due``; None when its headers no longer
    make a schedule (the caller forgets it, as nats-server getScheduledMessages).
    ``load_last(subject)``: (headers, data) of the last message on a subject, or None."""
    try:
        pattern = _pattern_of(sm_headers)
    except E.JSApiError:
        return None
    ttl = get_header(sm_headers, SCHEDULE_TTL) or ""
    target = get_header(sm_headers, SCHEDULE_TARGET) or ""
    if pattern is None or not _ttl_valid(ttl, parse_ttl) or not target:
        return None
    rollup = get_header(sm_headers, SCHEDULE_ROLLUP) or ""
    source = get_header(sm_headers, SCHEDULE_SOURCE) or ""
    headers, data = sm_headers, sm_data
    if source:
        last = load_last(source)
        if last is not None:
            headers, data = last
    headers = _without(headers, prefixes=(SCHEDULE, "Nats-Expected-"),
                       keys=("Nats-Msg-Id", "Nats-TTL", "Nats-Rollup"))
    next_due = pattern.next_after(due, now_ns) if pattern.every else None
    lines = f"{SCHEDULER}: {schedule_subject}\r\n"
    lines += f"{SCHEDULE_NEXT}: {PURGE if next_due is None else gofmt.format_time(next_due)}\r\n"
    if ttl:
        lines += f"Nats-TTL: {ttl}\r\n"
    if rollup:
        lines += f"Nats-Rollup: {rollup}\r\n"
    return Copy(target, append_lines(headers, lines), data, next_due)


class ScheduleIndex:
    """The schedules of one stream: ``subject -> (seq, due ns)`` (one schedule a subject:
    a schedule is stored with ``Nats-Rollup: sub``), with a heap of due times."""

    def __init__(self) -> None:
        self._by_subject: dict[str, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, str]] = []

    def __len__(self) -> int:
        return len(self._by_subject)

    def add(self, subject: str, seq: int, due: int) -> None:
        """Message ``seq`` on ``subject`` is a schedule due at ``due`` (replacing any)."""
        self._by_subject[subject] = (seq, due)
        heapq.heappush(self._heap, (due, seq, subject))

    def update(self, subject: str, due: int) -> None:
        """The schedule on ``subject`` is due next at ``due`` (a repeating one fired)."""
        entry = self._by_subject.get(subject)
        if entry is not None:
            self.add(subject, entry[0], due)

    def remove(self, subject: str) -> None:
        """``subject`` holds no schedule any more."""
        self._by_subject.pop(subject, None)

    def _live(self, item: tuple[int, int, str]) -> bool:
        return self._by_subject.get(item[2]) == (item[1], item[0])

    def next_due(self) -> int | None:
        """The earliest due time (ns), or None."""
        heap = self._heap
        while heap and not self._live(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now_ns: int, limit: int) -> list[tuple[str, int, int]]:
        """Up to ``limit`` schedules due at ``now_ns``: ``(subject, seq, due)``, earliest
        first (still indexed: firing one updates or removes it)."""
        out: list[tuple[str, int, int]] = []
        heap = self._heap
        while heap and len(out) < limit:
            item = heapq.heappop(heap)
            if not self._live(item):
                continue
            if item[0] > now_ns:
                heapq.heappush(heap, item)
                break
            out.append((item[2], item[1], item[0]))
        for subject, seq, due in out:       # back in, for what firing them decides
            heapq.heappush(heap, (due, seq, subject))
        return out

    def to_state(self) -> list[list[Any]]:
        """``[[subject, seq, due], ...]`` sorted by subject (a replica's snapshot state)."""
        return [[s, seq, due] for s, (seq, due) in sorted(self._by_subject.items())]

    @classmethod
    def from_state(cls, items: Iterable[Any]) -> ScheduleIndex:
        """The index :meth:`to_state` gave. Raises ValueError for another shape."""
        out = cls()
        for item in items:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                    and isinstance(item[1], int) and isinstance(item[2], int)):
                raise ValueError(f"schedule index entry {item!r} is not [subject, seq, due]")
            out.add(item[0], item[1], item[2])
        return out

    def scan(self, store: Any) -> None:
        """Index the schedules ``store`` holds, in sequence order: a schedule message adds
        its subject (first due from its timestamp), a copy with a ``Nats-Schedule-Next``
        time moves its schedule on. Corrupt records are passed by."""
        st = store.state()
        for seq in store.stored_seqs(st.first_seq, st.last_seq):
            try:
                sm = store.load(seq)
            except (MessageNotFound, CorruptMessage):
                continue
            self.observe(seq, sm.subject, sm.headers, sm.ts)

    def observe(self, seq: int, subject: str, headers: bytes | None, ts: int) -> str | None:
        """Message ``seq`` on ``subject`` (stored at ``ts``) was stored: index a schedule,
        forget the one it replaced, move a fired schedule on. Returns the subject of the
        schedule a stored purge copy (``Nats-Schedule-Next: purge``) removes, for the
        caller to purge, or None."""
        if not headers or b"Nats-Schedule" not in headers:
            self.remove(subject)        # a message without a schedule replaces one
            return None
        try:
            pattern = _pattern_of(headers)
        except E.JSApiError:
            pattern = None
        scheduler = get_header(headers, SCHEDULER)
        if pattern is not None:
            self.add(subject, seq, pattern.first_due(ts))
        elif not scheduler:
            self.remove(subject)
        nxt = get_header(headers, SCHEDULE_NEXT) if headers else None
        if not nxt or not scheduler:
            return None
        if nxt == PURGE:
            self.remove(scheduler)
            return scheduler
        try:
            when = gofmt.parse_time(nxt)
        except ValueError:
            return None
        if when is not None:
            self.update(scheduler, when)
        return None
