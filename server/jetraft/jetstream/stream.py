"""The jetraft stream state machine for the publish path (one stream, one store).

Deterministic and sans-IO: the only I/O is the message store's; time is passed in as
``now_ns`` (ns since the epoch); nothing here starts a timer. Behaviour follows
nats-server ``server/stream.go processJetStreamMsg`` (publish checks, dedupe, rollups),
``server/memstore.go storeRawMsg`` / ``enforce*Limit`` / ``expireMsgs`` (limits),
``server/jetstream_api.go`` (STREAM.PURGE, STREAM.MSG.GET, STREAM.MSG.DELETE).

Publish checks, in nats-server's order (each raises :class:`JSApiError`):

1. sealed stream -> 10109;
2. ``Nats-Expected-Stream`` not this stream -> 10060 "expected stream does not match";
3. a valid ``Nats-TTL`` (a number of seconds, a Go duration of at least 1 s, ``never``) on
   a stream without ``allow_msg_ttl`` -> 10166 "per-message TTL is disabled";
4. ``Nats-Expected-Last-Subject-Sequence`` (optionally on the subject named by
   ``Nats-Expected-Last-Subject-Sequence-Subject``; that header alone -> 10193) not the
   last sequence on the subject -> 10071 "wrong last sequence: <actual>";
5. ``Nats-Expected-Last-Sequence`` not the stream's last sequence -> 10071;
6. ``Nats-Msg-Id`` seen within ``duplicate_window`` -> no error: the ack of the original
   with ``"duplicate": true``;
7. ``Nats-Expected-Last-Msg-Id`` not the last message's id -> 10070;
8. ``Nats-Rollup`` when ``allow_rollup_hdrs`` is false or ``deny_purge`` true -> 10111
   "rollup not permitted"; a value other than ``sub``/``all`` -> 10111
   ``rollup value invalid: "<v>"``;
9. headers + data over ``max_msg_size`` -> 10054; headers over 65535 bytes -> 10097;
9b. an invalid ``Nats-TTL`` (``0``, under 1 s, not a number) -> 10165 "invalid per-message
    TTL"; a valid one (the stream has ``allow_msg_ttl``) is stored and the message removed
    when its TTL passes (:meth:`Stream.expire`, jetstream/ttl.py; ``never`` outlives
    ``max_age``);
10. ``discard: new`` at a limit -> 10077 (503) "maximum messages per subject exceeded"
    (only with ``discard_new_per_subject``; a rollup passes), "maximum messages exceeded",
    "maximum bytes exceeded".

Durability is the caller's: after :meth:`Stream.publish` returns, call the store's
``sync()`` (batched with others) before sending the ack.

Retention: only ``limits`` is enforced here. ``interest`` and ``workqueue`` streams are
accepted and stored like ``limits`` streams; removing acknowledged messages needs consumers
and will go through :meth:`Stream.ack_floor_for_retention` (not called by anything yet).
"""

from __future__ import annotations

import base64
import random
from collections.abc import Sequence
from typing import Any

from jetraft import gofmt
from jetraft.config.durations import parse_duration
from jetraft.protocol.headers import append_lines, get_header
from jetraft.protocol.message import Message
from jetraft.protocol.subjects import is_valid_literal_subject
from jetraft.protocol.transform import MappingError, NoMatch, SubjectTransform

from . import errors as E
from . import counter, schedule, sourcing
from .model import LostStreamData, StreamConfig, StreamInfo, StreamState
from .store import MAX_SUBJECT_DETAILS, CorruptMessage, MessageNotFound, StoredMessage
from .schedule import ScheduleIndex
from .ttl import TtlIndex

__all__ = ["Stream", "parse_message_ttl"]

#: The most messages whose TTL passed one expiry removes (bounded work per timer).
TTL_EXPIRE_MAX = 10_000

# Header names (nats-server server/stream.go constants).
MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
MSG_TTL = "Nats-TTL"
#: Why a subject delete marker was stored (nats-server JSMarkerReason).
MARKER_REASON = "Nats-Marker-Reason"

MAX_HEADER_BYTES = 65535

# Store errors nats-server answers as JSStreamStoreFailedF (server/store.go).
ERR_MAX_MSGS = "maximum messages exceeded"
ERR_MAX_BYTES = "maximum bytes exceeded"
ERR_MAX_MSGS_PER_SUBJECT = "maximum messages per subject exceeded"

_U64 = (1 << 64) - 1


def _hdr(headers: bytes | None, key: str) -> str:
    """nats-server's getHeader: "" when absent or empty."""
    return get_header(headers, key) or ""


def _parse_u64(text: str) -> int:
    """nats-server ``parseInt64`` cast to uint64: digits only, else -1 (= 2**64 - 1)."""
    if not text or not text.isascii() or not text.isdigit() or len(text) > 19:
        return _U64
    return int(text)


def parse_message_ttl(text: str) -> tuple[int, bool]:
    """A ``Nats-TTL`` header value as nats-server reads it (stream.go parseMessageTTL):
    ``(seconds, invalid)``. ``"never"`` (any case) is -1; a Go duration of at least 1 s is
    its whole seconds; else a string of ASCII digits is seconds (``"00"`` is 0: no TTL,
    Go's parseInt64 wraps past 2**63). A duration under 1 s (``"0"``, ``"500ms"``) or
    anything else is ``(0, True)``, answered 10165 "invalid per-message TTL". ``""``
    (no header) is ``(0, False)``."""
    if not text:
        return 0, False
    if text.lower() == "never":
        return -1, False
    try:
        seconds = parse_duration(text)
    except ValueError:
        pass
    else:
        if seconds < 1:
            return 0, True
        return int(seconds), False
    if not text.isascii() or not text.isdigit():
        return 0, True
    n = int(text) % (1 << 64)
    n = n - (1 << 64) if n >= 1 << 63 else n
    return (0, True) if n < 0 else (n, False)


class Stream:
    """One stream: its checked config, its store and the publish-path state.

    ``Stream(config, store, *, created_ns=0, domain="", now_ns=None)``. ``config`` is passed
    through ``StreamConfig.checked()`` (nats-server defaults; JSApiError 10052 if invalid).
    ``store``: a MemoryStore or FileStore, possibly holding messages (reopened). The
    dedupe map is rebuilt from the messages stored within ``duplicate_window`` of
    ``now_ns`` (default: the last message's timestamp), as nats-server ``rebuildDedupe``.
    ``created_ns``: creation time reported by :meth:`info`; ``domain``: the JetStream
    domain, added to every PubAck when not empty. ``rebuild_dedupe`` False: leave the map
    empty (a clustered replica restores it from a snapshot instead).
    """

    #: Set by :meth:`publish_prechecked` while it stores a message of an atomic batch.
    _prechecked = False

    def __init__(self, config: StreamConfig, store: Any, *, created_ns: int = 0,
                 domain: str = "", now_ns: int | None = None, rebuild_dedupe: bool = True,
                 ttl_state: bytes | None = None) -> None:
        self._ttl_state = ttl_state         # the saved TTL index, read when the config wants one
        self.ttls: TtlIndex | None = None   # allow_msg_ttl: the TTL'd messages (jetstream/ttl.py)
        self.schedules: ScheduleIndex | None = None     # allow_msg_schedules (jetstream/schedule.py)
        self._transform: SubjectTransform | None = None     # subject_transform, parsed
        self._source_seqs: dict[str, int] | None = None     # sources' positions, read when first asked
        self._republish: SubjectTransform | None = None     # republish src -> dest, parsed
        self.store = store
        self.config = config.checked()
        self.created_ns = created_ns
        self.domain = domain
        st = store.state()
        self.last_seq = st.last_seq          # nats-server mset.lseq
        self.last_msg_id = ""                # nats-server mset.lmsgId
        self._dedupe: dict[str, tuple[int, int]] = {}   # msg id -> (seq, ts ns), by ts
        if rebuild_dedupe:
            self._rebuild_dedupe(st, st.last_ts if now_ns is None else now_ns)

    # --- dedupe ------------------------------------------------------------------------
    def _rebuild_dedupe(self, st: Any, now_ns: int) -> None:
        window = self.config.duplicate_window
        if window <= 0 or st.messages == 0:
            return
        found: list[tuple[str, int, int]] = []
        # the stored sequences only: a gap of 10**12 (a restore) is not walked
        for seq in self.store.stored_seqs(st.first_seq, st.last_seq, descending=True):
            try:
                sm = self.store.load(seq)
            except (MessageNotFound, CorruptMessage):
                continue
            if now_ns - sm.ts >= window:
                break
            msg_id = _hdr(sm.headers, MSG_ID)
            if seq == st.last_seq:
                self.last_msg_id = msg_id
            if msg_id:
                found.append((msg_id, sm.seq, sm.ts))
        for msg_id, seq, ts in reversed(found):
            self._dedupe[msg_id] = (seq, ts)

    def prune_dedupe(self, now_ns: int) -> int:
        """Forget message ids older than ``duplicate_window`` at ``now_ns`` (nats-server
        ``purgeMsgIds``: an entry goes when ``now - ts >= window``); returns how many."""
        window = self.config.duplicate_window
        doomed = []
        for msg_id, (_seq, ts) in self._dedupe.items():   # insertion order = ts order
            if now_ns - ts < window:
                break
            doomed.append(msg_id)
        for msg_id in doomed:
            del self._dedupe[msg_id]
        return len(doomed)

    def _remember_msg_id(self, msg_id: str, seq: int, ts: int) -> None:
        if self.config.duplicate_window <= 0:
            return
        self._dedupe.pop(msg_id, None)
        self._dedupe[msg_id] = (seq, ts)

    def forget_msg_ids_after(self, seq: int) -> int:
        """Forget the message ids of sequences after ``seq`` (the store rolled them back
        after a storage failure: they were never acknowledged), so that a retry is stored
        again instead of answered as a duplicate; returns how many were forgotten."""
        doomed = [k for k, (s, _ts) in self._dedupe.items() if s > seq]
        for k in doomed:
            del self._dedupe[k]
        if self.last_seq > seq:
            self.last_msg_id = ""
        return len(doomed)

    def dedupe_entries(self) -> list[tuple[str, int, int]]:
        """The dedupe window, oldest first: ``(msg id, seq, ts ns)``."""
        return [(msg_id, seq, ts) for msg_id, (seq, ts) in self._dedupe.items()]

    def set_dedupe_entries(self, entries: list[tuple[str, int, int]]) -> None:
        """Replace the dedupe window with ``entries`` (as :meth:`dedupe_entries` gives
        them, oldest first; a later duplicate id replaces an earlier one)."""
        self._dedupe = {}
        for msg_id, seq, ts in entries:
            self._dedupe.pop(msg_id, None)
            self._dedupe[msg_id] = (seq, ts)

    @property
    def config(self) -> StreamConfig:
        """The stream's checked config; setting it (an update) parses its
        ``subject_transform`` and ``republish`` again."""
        return self._config

    @config.setter
    def config(self, cfg: StreamConfig) -> None:
        self._config = cfg
        self._source_seqs = None        # its sources may have changed: read back again
        self.store.set_compression(cfg.compression)     # s2: sealed blocks compressed
        st, rp = cfg.subject_transform, cfg.republish
        self._transform = SubjectTransform.parse(st.src, st.dest) if st is not None else None
        self._republish = SubjectTransform.parse(rp.src or ">", rp.dest) if rp is not None else None
        if cfg.allow_msg_ttl and self.ttls is None:
            self.ttls = self._open_ttls()
        elif not cfg.allow_msg_ttl:
            self.ttls = None
        if cfg.allow_msg_schedules and self.schedules is None:
            self.schedules = ScheduleIndex()
            self.schedules.scan(self.store)
        elif not cfg.allow_msg_schedules:
            self.schedules = None

    def _open_ttls(self) -> TtlIndex:
        """The TTL index: the saved one (``ttl_state``) when it reads back, else a new one;
        then the messages stored after what it covers are read for their ``Nats-TTL``."""
        index = TtlIndex()
        if self._ttl_state:
            try:
                index = TtlIndex.from_bytes(self._ttl_state, self.store.state().last_seq)
            except ValueError:
                index = TtlIndex()
        self._ttl_state = None
        index.scan(self.store, parse_message_ttl)
        return index

    def _index_ttl(self, seq: int, headers: bytes | None, ts: int, ttl: int | None = None) -> None:
        """Message ``seq`` stored at ``ts`` goes into the TTL index (its ``Nats-TTL``:
        ``ttl`` seconds, or read from ``headers``)."""
        if self.ttls is None:
            return
        if ttl is None:
            ttl, invalid = parse_message_ttl(_hdr(headers, MSG_TTL)) if headers else (0, False)
            ttl = 0 if invalid else ttl
        self.ttls.add(seq, ttl, ts)

    def stored_subject(self, subject: str, now_ns: int) -> str:
        """The subject a message published on ``subject`` is stored under: the stream's
        ``subject_transform`` applied where its source takes the subject, else ``subject``
        (nats-server stream.go processJetStreamMsg). ``{{random(n)}}`` draws from a
        generator seeded with ``now_ns``, so that every replica applying the same entry
        stores the same subject."""
        if self._transform is None:
            return subject
        try:
            return self._transform.match(subject, random.Random(now_ns).randrange)
        except (MappingError, NoMatch):
            return subject

    # --- publish -----------------------------------------------------------------------
    def _ack(self, seq: int, duplicate: bool = False) -> dict[str, Any]:
        ack: dict[str, Any] = {"stream": self.config.name}
        if self.domain:
            ack["domain"] = self.domain
        ack["seq"] = seq
        if duplicate:
            ack["duplicate"] = True
        return ack

    def publish(self, subject: str, headers: bytes | None, data: bytes,
                now_ns: int) -> dict[str, Any]:
        """Store one published message; returns the PubAck JSON dict nats-server sends:
        ``{"stream": name[, "domain": d], "seq": n[, "duplicate": true]}``.

        ``headers``: the raw header block or None; ``data``: the payload; ``now_ns``: the
        message timestamp (ns since the epoch). Raises :class:`JSApiError` for a refused
        message (see the module docstring for the checks and their codes), in the order
        of nats-server ``server/stream.go processJetStreamMsg``. A refused message changes
        nothing. :meth:`publish_message` also gives the message to republish.
        """
        return self.publish_message(subject, headers, data, now_ns)[0]

    def publish_message(self, subject: str, headers: bytes | None, data: bytes,
                        now_ns: int, *, sourced: bool = False) -> tuple[dict[str, Any], Message | None]:
        """:meth:`publish`, and the message the stream's ``republish`` sends for it (None
        without one, for a duplicate, or when its source does not take the stored subject):
        on the destination subject, the stored headers followed by Nats-Stream, Nats-Subject
        (the stored subject), Nats-Sequence, Nats-Time-Stamp and Nats-Last-Sequence (the
        subject's previous sequence, 0 for none); with ``headers_only``, Nats-Msg-Size (the
        payload's bytes) and no payload (nats-server stream.go processJetStreamMsg).
        ``sourced``: the message comes from one of the stream's sources (its increment is
        not checked, jetstream/counter.py)."""
        subject = self.stored_subject(subject, now_ns)
        cfg = self.config
        if cfg.sealed:
            raise E.stream_sealed()
        headers = headers or None
        msg_id = ""
        rollup = ""
        ttl, ttl_invalid = 0, False
        incr = None
        if headers:
            incr = counter.check_increment(headers, data, counter=cfg.allow_msg_counter, sourced=sourced)
            expected = _hdr(headers, EXPECTED_STREAM)
            if expected and expected != cfg.name:
                raise E.stream_not_match()
            ttl, ttl_invalid = parse_message_ttl(_hdr(headers, MSG_TTL))
            if ttl != 0 and not cfg.allow_msg_ttl:
                raise E.message_ttl_disabled()
            subj_seq_text = _hdr(headers, EXPECTED_LAST_SUBJ_SEQ)
            subj_override = _hdr(headers, EXPECTED_LAST_SUBJ_SEQ_SUBJ)
            if subj_seq_text and not self._prechecked:
                want = _parse_u64(subj_seq_text)
                have = self.store.last_seq_for_subject(subj_override or subject)
                if have != want:
                    raise E.wrong_last_sequence(have)
            elif subj_override:
                raise E.api_error("JSStreamExpectedLastSeqPerSubjectInvalid")
            last_text = _hdr(headers, EXPECTED_LAST_SEQ)
            if last_text and _parse_u64(last_text) != self.last_seq:
                raise E.wrong_last_sequence(self.last_seq)
            headers = schedule.check_publish(headers, subject, cfg, sourced=sourced,
                                             parse_ttl=parse_message_ttl, last_on=self.last_headers)
            msg_id = _hdr(headers, MSG_ID)
            if msg_id:
                self.prune_dedupe(now_ns)
                seen = self._dedupe.get(msg_id)
                if seen is not None:
                    return self._ack(seen[0], duplicate=True), None
            last_id = _hdr(headers, EXPECTED_LAST_MSG_ID)
            if last_id and last_id != self.last_msg_id:
                raise E.wrong_last_msg_id(self.last_msg_id)
            raw_rollup = _hdr(headers, ROLLUP)
            if raw_rollup:
                if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                    raise E.api_error("JSStreamRollupFailedF", err="rollup not permitted")
                rollup = raw_rollup.lower()
                if rollup not in ("sub", "all"):
                    raise E.api_error("JSStreamRollupFailedF",
                                      err=f"rollup value invalid: {gofmt.quote(rollup)}")
        value = None
        if cfg.allow_msg_counter:
            if incr is None:
                raise E.api_error("JSMessageIncrMissingErr")
            last = self.last_on_subject(subject)
            update = counter.apply_increment(incr, headers, data, subject, last,
                                             _hdr(headers, sourcing.SOURCE_HEADER))
            headers, data, value = update.headers, update.data, update.value
        hlen = len(headers) if headers else 0
        if cfg.max_msg_size >= 0 and (hlen > cfg.max_msg_size or
                                      len(data) > cfg.max_msg_size - hlen):
            raise E.message_exceeds_maximum()
        if hlen > MAX_HEADER_BYTES:
            raise E.header_exceeds_maximum()
        if ttl_invalid:
            raise E.message_ttl_invalid()
        self._check_discard_new(subject, headers, data)
        destination, previous = self._republish_target(subject)

        seq = self.store.store(subject, headers, data, now_ns)
        self._index_ttl(seq, headers, now_ns, ttl)
        self.last_seq = seq
        self.last_msg_id = msg_id
        if msg_id:
            self._remember_msg_id(msg_id, seq, now_ns)
        if rollup == "sub":
            self.store.purge(subject, keep=1)
        elif rollup == "all":
            self.store.purge(None, keep=1)
        if self.schedules is not None:
            purged = self.schedules.observe(seq, subject, headers, now_ns)
            if purged is not None:      # a schedule's last copy: the schedule goes
                self.store.purge(purged)
        self.enforce_limits(subject)
        republished = None
        if destination is not None:
            lines = (f"Nats-Stream: {cfg.name}\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
                     f"Nats-Time-Stamp: {gofmt.format_time(now_ns)}\r\nNats-Last-Sequence: {previous}\r\n")
            body = data
            if cfg.republish is not None and cfg.republish.headers_only:
                lines += f"Nats-Msg-Size: {len(data)}\r\n"
                body = b""
            republished = Message(destination, None, append_lines(headers, lines), body)
        ack = self._ack(seq)
        if value is not None:
            ack["val"] = value
        return ack, republished

    def last_headers(self, subject: str) -> bytes | None | bool:
        """The headers of the last message on ``subject``: None when there is none, False
        when it has none."""
        last = self.last_on_subject(subject, broken=False)
        return None if last is None else (last[0] or False)

    def last_on_subject(self, subject: str, broken: bool = True) -> tuple[bytes | None, bytes] | None:
        """(headers, payload) of the last message on ``subject``, or None."""
        seq = self.store.last_seq_for_subject(subject)
        if not seq:
            return None
        try:
            sm = self.store.load(seq)
        except MessageNotFound:
            return None
        except CorruptMessage:
            if broken:
                raise E.api_error("JSMessageCounterBrokenErr") from None
            return None
        return sm.headers, sm.data

    # --- message schedules (jetstream/schedule.py) ---------------------------------------
    def set_schedules(self, items: list[list[Any]]) -> None:
        """The schedule index a replica's snapshot state holds (``[[subject, seq, due ns],
        ...]``); raises ValueError for another shape."""
        self.schedules = ScheduleIndex.from_state(items)

    def fire_schedules(self, now_ns: int) -> tuple[int, list[Message]]:
        """Store the copy of every schedule due at ``now_ns`` (at most SCHEDULE_FIRE_MAX),
        as a sourced publish (nats-server scheduler.go getScheduledMessages, stream.go
        RegisterProcessJetStreamMsg); returns (how many were stored, what ``republish``
        sends for them). A schedule whose message is gone or no longer a schedule is
        forgotten; one whose copy is refused (a limit) is tried again RETRY_NS later."""
        index = self.schedules
        if index is None:
            return 0, []
        stored, again = 0, []
        for subject, seq, due in index.due(now_ns, schedule.SCHEDULE_FIRE_MAX):
            try:
                sm = self.store.load(seq)
            except (MessageNotFound, CorruptMessage):
                sm = None
            if sm is None or sm.subject != subject:
                index.remove(subject)
                continue
            copy = schedule.fired_copy(subject, sm.headers, sm.data, due, now_ns,
                                       self._last_on_subject_quiet, parse_message_ttl)
            if copy is None:
                index.remove(subject)
                continue
            try:
                _ack, republished = self.publish_message(copy.target, copy.headers, copy.data, now_ns,
                                                         sourced=True)
            except E.JSApiError:
                index.update(subject, now_ns + schedule.RETRY_NS)
                continue
            stored += 1
            if republished is not None:
                again.append(republished)
        return stored, again

    def _last_on_subject_quiet(self, subject: str) -> tuple[bytes | None, bytes] | None:
        return self.last_on_subject(subject, broken=False)

    def seen_msg_id(self, msg_id: str) -> int | None:
        """The sequence stored with ``msg_id`` within the duplicate window, or None."""
        seen = self._dedupe.get(msg_id)
        return seen[0] if seen is not None else None

    def publish_prechecked(self, subject: str, headers: bytes | None, data: bytes,
                           now_ns: int) -> tuple[dict[str, Any], Message | None]:
        """:meth:`publish_message` for one message of a committed atomic batch that
        :func:`jetraft.jetstream.batch.check_batch` checked against the stream as it was
        before the batch: its ``Nats-Expected-Last-Subject-Sequence`` is not checked again
        (an earlier message of the batch may have rolled up or pushed out that subject's
        last message; nats-server checks a batch once, before it stores any of it)."""
        self._prechecked = True
        try:
            return self.publish_message(subject, headers, data, now_ns)
        finally:
            self._prechecked = False

    # --- mirror and sources (jetstream/sourcing.py) --------------------------------------
    def source_positions(self) -> dict[str, tuple[int, str]]:
        """(origin sequence, origin identity) of the last message stored from each source,
        by index name, read back from the store when first asked and kept up to date by
        :meth:`store_sourced`."""
        if self._source_seqs is None:
            inames = {spec.iname for spec in sourcing.specs_of(self.config) if not spec.mirror}
            self._source_seqs = sourcing.source_positions(self.store, inames) if inames else {}
        return self._source_seqs

    def store_mirrored(self, msgs: Sequence[tuple[int, str, bytes | None, bytes, int]],
                       spec: sourcing.SourceSpec) -> int:
        """Store the origin's messages ``(seq, subject, headers, data, ts)`` at their own
        sequences and times, the sequences between counting as deleted; those at or below
        the last sequence are already here and skipped (nats-server processInboundMirrorMsg).
        Returns how many were stored."""
        stored = 0
        for seq, subject, headers, data, ts in msgs:
            if seq <= self.last_seq:
                continue
            subject = spec.transformed(subject) or subject
            self.store.store_at(seq, subject, headers or None, data, ts)
            self._index_ttl(seq, headers, ts)
            self.last_seq = seq
            self.enforce_limits(subject)
            stored += 1
        return stored

    def store_sourced(self, msgs: Sequence[tuple[int, str, bytes | None, bytes, int]],
                      spec: sourcing.SourceSpec, now_ns: int, ident: str = "",
                      republished: list[Message] | None = None) -> tuple[int, E.JSApiError | None]:
        """Store the messages of source ``spec`` ``(seq, subject, headers, data, ts)`` as
        publishes of this stream with their Nats-Stream-Source header, skipping those at or
        below the source's position (from the start when the origin's identity ``ident``
        is not the one stored last: it was deleted and created again, nats-server issue
        6206); a duplicate ``Nats-Msg-Id`` counts as stored
        (nats-server processInboundSourceMsg). Stops at the first message refused (a
        discard-new limit, say) and returns (how many were taken, that refusal or None):
        the link asks for it again later. What ``republish`` sends for them is appended to
        ``republished``."""
        positions = self.source_positions()
        done, known = positions.get(spec.iname, (0, ""))
        if ident and known and ident != known:
            done = 0
        taken = 0
        for seq, subject, headers, data, _ts in msgs:
            if seq <= done:
                continue
            target = spec.transformed(subject)
            if target is None:
                continue
            headers = append_lines(sourcing.strip_source_headers(headers),
                                   f"{sourcing.SOURCE_HEADER}: {spec.header_value(seq, subject, ident)}\r\n")
            try:
                _ack, again = self.publish_message(target, headers, data, now_ns, sourced=True)
            except E.JSApiError as err:
                return taken, err
            if again is not None and republished is not None:
                republished.append(again)
            positions[spec.iname] = (seq, ident)
            done = seq
            taken += 1
        return taken, None

    def _republish_target(self, subject: str) -> tuple[str | None, int]:
        """(the republish destination of a message stored on ``subject``, the subject's
        last sequence before it), or (None, 0) when nothing is republished."""
        if self._republish is None:
            return None, 0
        try:
            destination = self._republish.match(subject)
        except (MappingError, NoMatch):
            return None, 0
        if not is_valid_literal_subject(destination):
            return None, 0
        return destination, self.store.last_seq_for_subject(subject)

    def _check_discard_new(self, subject: str, headers: bytes | None, data: bytes) -> None:
        """nats-server ``memstore.go storeRawMsg`` discard-new checks (10077 on refusal)."""
        cfg = self.config
        if cfg.discard != "new":
            return
        per_subject = 0
        at_subject_limit = False
        if cfg.max_msgs_per_subject > 0:
            per_subject = self.store.subjects_state(subject).get(subject, 0)
            at_subject_limit = per_subject >= cfg.max_msgs_per_subject
        if at_subject_limit and cfg.discard_new_per_subject and \
                get_header(headers, ROLLUP) is None:
            raise E.stream_store_failed(ERR_MAX_MSGS_PER_SUBJECT)
        st = self.store.state()
        if 0 < cfg.max_msgs <= st.messages and not at_subject_limit:
            raise E.stream_store_failed(ERR_MAX_MSGS)
        size = self.store.msg_size(subject, headers, data)
        if cfg.max_bytes > 0 and st.bytes + size > cfg.max_bytes:
            if not at_subject_limit:
                raise E.stream_store_failed(ERR_MAX_BYTES)
            first = self.store.load_next(subject, 0)
            if first is None or self.store.msg_size(first.subject, first.headers, first.data) < size:
                raise E.stream_store_failed(ERR_MAX_BYTES)

    def enforce_limits(self, subject: str) -> int:
        """After a store, as nats-server memstore: per-subject limit (always discards the
        subject's oldest), then, with ``discard: old``, max_msgs then max_bytes (oldest
        first). Returns the number of messages removed."""
        cfg, store = self.config, self.store
        removed = 0
        if cfg.max_msgs_per_subject > 0:
            excess = store.subjects_state(subject).get(subject, 0) - cfg.max_msgs_per_subject
            for _ in range(max(excess, 0)):
                first = store.load_next(subject, 0)
                if first is None or not store.remove(first.seq):
                    break
                removed += 1
        if cfg.discard != "old":
            return removed
        if cfg.max_msgs > 0:
            removed += self._remove_oldest(lambda st: st.messages > cfg.max_msgs)
        if cfg.max_bytes > 0:
            removed += self._remove_oldest(lambda st: st.bytes > cfg.max_bytes)
        return removed

    def _remove_oldest(self, over) -> int:
        n = 0
        while over(self.store.state()):
            first = self.store.load_next(">", 0)
            if first is None or not self.store.remove(first.seq):
                break
            n += 1
        return n

    # --- retention / age ---------------------------------------------------------------
    def expire(self, now_ns: int) -> int:
        """Remove the messages older than ``max_age`` at ``now_ns`` (nats-server
        ``memstore.go expireMsgs``: timestamp <= now - max_age; a message whose
        ``Nats-TTL`` is ``never`` stays) and those whose TTL passed (at most
        TTL_EXPIRE_MAX a call: the next call takes the rest), and prune the dedupe map;
        returns how many messages were removed. Call it from a timer."""
        self.prune_dedupe(now_ns)
        n = 0
        if self.config.max_age > 0:
            cutoff = now_ns - self.config.max_age
            seq = 0
            while True:
                try:
                    sm = self.store.load_next(">", seq)
                except CorruptMessage:
                    break
                if sm is None or sm.ts > cutoff:
                    break
                if not (self.ttls is not None and self.ttls.never(sm.seq)):
                    n += self._drop_expired(sm, now_ns)
                seq = sm.seq + 1
        if self.ttls is not None:
            for seq, ts in self.ttls.due(now_ns, TTL_EXPIRE_MAX):
                try:
                    sm = self.store.load(seq)
                except (MessageNotFound, CorruptMessage):
                    continue
                if sm.ts == ts:
                    n += self._drop_expired(sm, now_ns)
        return n

    def _drop_expired(self, sm: StoredMessage, now_ns: int) -> int:
        """Remove expired message ``sm``; returns 1 if it was stored. With
        ``subject_delete_marker_ttl``, the last message of its subject (not a marker itself)
        is replaced by a marker, a message of the subject with ``Nats-Marker-Reason:
        MaxAge``, ``Nats-TTL`` the marker TTL and ``Nats-Rollup: sub`` and no payload, stored
        at ``now_ns`` (nats-server memstore.go handleRemovalOrSdm); one the stream refuses
        (a limit) leaves a plain removal."""
        marker_ttl = self.config.subject_delete_marker_ttl
        if marker_ttl > 0 and not _hdr(sm.headers, MARKER_REASON) and \
                self.store.subjects_state(sm.subject).get(sm.subject, 0) == 1:
            marker = (f"NATS/1.0\r\n{MARKER_REASON}: MaxAge\r\n{MSG_TTL}: {gofmt.duration(marker_ttl)}\r\n"
                      f"{ROLLUP}: sub\r\n\r\n").encode()
            try:
                self.publish_message(sm.subject, marker, b"", now_ns)
                return 1
            except E.JSApiError:
                pass
        return 1 if self.store.remove(sm.seq) else 0

    def next_expiry(self) -> int | None:
        """When (ns) the next message's TTL passes, or None."""
        times = [t for t in (self.ttls.next_expiry() if self.ttls is not None else None,
                             self.schedules.next_due() if self.schedules is not None else None)
                 if t is not None]
        return min(times) if times else None

    def ack_floor_for_retention(self, floor_seq: int) -> int:
        """HOOK, NOT YET USED: for ``interest``/``workqueue`` retention, remove every message
        up to ``floor_seq`` (the sequence every interested consumer has acknowledged). The
        consumer state machine will call it; nothing does today. Returns messages removed;
        0 for ``limits`` retention."""
        if self.config.retention == "limits" or floor_seq <= 0:
            return 0
        return self.store.compact_to(floor_seq + 1)

    # --- API requests ------------------------------------------------------------------
    def purge(self, request: dict[str, Any] | None) -> dict[str, Any]:
        """STREAM.PURGE: ``request`` ``{"filter": subj, "seq": n, "keep": n}`` (all optional;
        None or {} purges everything). Returns ``{"success": true, "purged": n}``.
        Raises 10003 (``seq`` and ``keep`` both set), 10109 (sealed), 10110 "stream purge
        not permitted" (``deny_purge``). Source: nats-server jetstream_api.go
        jsStreamPurgeRequest, stream.go purgeLocked."""
        request = request or {}
        seq, keep = int(request.get("seq") or 0), int(request.get("keep") or 0)
        if seq > 0 and keep > 0:
            raise E.bad_request()
        if self.config.sealed:
            raise E.stream_sealed()
        if self.config.deny_purge:
            raise E.stream_purge_failed("stream purge not permitted")
        purged = self.store.purge(request.get("filter") or None, seq=seq or None,
                                  keep=keep or None)
        self.last_seq = max(self.last_seq, self.store.state().last_seq)
        return {"success": True, "purged": purged}

    def get_message(self, request: dict[str, Any]) -> dict[str, Any]:
        """STREAM.MSG.GET: ``request`` one of ``{"seq": n}``, ``{"last_by_subj": s}``,
        ``{"next_by_subj": s[, "seq": n]}`` (optional ``"no_hdrs": true``). Returns
        ``{"message": {"subject", "seq", "hdrs"?, "data"?, "time"}}`` (hdrs/data base64,
        omitted when empty; time RFC 3339 UTC with ns), as nats-server jsMsgGetRequest.
        Raises 10003 for conflicting or missing selectors or ``batch``/``max_bytes``,
        10037 "no message found" when nothing matches."""
        seq = int(request.get("seq") or 0)
        last_for = request.get("last_by_subj") or ""
        next_for = request.get("next_by_subj") or ""
        if request.get("batch") or request.get("max_bytes"):
            raise E.bad_request()
        if (seq > 0 and last_for) or (seq == 0 and not last_for and not next_for) or \
                (last_for and next_for):
            raise E.bad_request()
        try:
            if next_for:
                sm = self.store.load_next(next_for, seq)
            elif seq > 0:
                sm = self.store.load(seq)
            else:
                sm = self.store.load_last(last_for)
        except (MessageNotFound, CorruptMessage):
            sm = None
        if sm is None:
            raise E.no_message_found()
        return {"message": message_json(sm, with_headers=not request.get("no_hdrs"))}

    def delete_message(self, seq: int) -> dict[str, Any]:
        """STREAM.MSG.DELETE of ``seq``: ``{"success": true}``. Raises 10109 (sealed), 10057
        "message delete not permitted" (``deny_delete``), 10043 "sequence <seq> not found".
        jetraft does not overwrite the bytes (nats-server's erase); the record is tombstoned."""
        if self.config.sealed:
            raise E.stream_sealed()
        if self.config.deny_delete:
            raise E.stream_msg_delete_failed("message delete not permitted")
        if not self.store.remove(seq):
            raise E.sequence_not_found(seq)
        return {"success": True}

    def info(self, now_ns: int, *, subjects_filter: str | None = None,
             deleted_details: bool = False, consumer_count: int = 0, subjects_offset: int = 0,
             subjects_limit: int = MAX_SUBJECT_DETAILS) -> dict[str, Any]:
        """STREAM.INFO body (without ``type``): ``{"config", "created", "state", "ts"}`` plus
        ``domain`` when set; ``ts`` is ``now_ns``.

        ``deleted_details``: ``state.deleted`` lists the lowest
        :data:`~jetraft.jetstream.store.MAX_DELETED_DETAILS` (100,000) deleted sequences,
        ascending; ``state.num_deleted`` stays the true count, so a shorter list is partial
        (nats-server lists them all). ``subjects_filter``: ``state.subjects`` is the page of
        at most ``subjects_limit`` matching subjects from the ``subjects_offset``-th in
        sorted order, and the body starts with nats-server's paging fields ``"total"``
        (matching subjects), ``"offset"`` (as asked, negative as 0) and ``"limit"``
        (``subjects_limit``), all 0 when no subject matches (nats-server
        server/jetstream_api.go ``jsStreamInfoRequest``)."""
        st = self.store.state(with_deleted=deleted_details, subjects_filter=subjects_filter,
                              subjects_offset=subjects_offset, subjects_limit=subjects_limit)
        state = StreamState(
            messages=st.messages, bytes=st.bytes, first_seq=st.first_seq if st.last_seq else 0,
            first_ts=st.first_ts if st.messages else None, last_seq=st.last_seq,
            last_ts=st.last_ts if st.last_seq else None, num_subjects=st.num_subjects,
            subjects=st.subjects or None, num_deleted=st.num_deleted,
            deleted=st.deleted or None,
            lost=LostStreamData(msgs=list(st.lost)) if st.lost else None,
            consumer_count=consumer_count)
        info = StreamInfo(config=self.config, created=self.created_ns, state=state,
                          domain=self.domain, ts=now_ns).to_json()
        if subjects_filter is None:
            return info
        total = st.subjects_total
        paging = {"total": total, "offset": max(subjects_offset, 0) if total else 0,
                  "limit": subjects_limit if total else 0}
        return {**paging, **info}


def message_json(sm: StoredMessage, *, with_headers: bool = True) -> dict[str, Any]:
    """nats-server ``StoredMsg`` JSON: subject, seq, hdrs (base64, omitted when empty),
    data (base64, omitted when empty), time (RFC 3339 UTC, ns)."""
    out: dict[str, Any] = {"subject": sm.subject, "seq": sm.seq}
    if with_headers and sm.headers:
        out["hdrs"] = base64.b64encode(sm.headers).decode("ascii")
    if sm.data:
        out["data"] = base64.b64encode(sm.data).decode("ascii")
    out["time"] = gofmt.format_time(sm.ts)
    return out
