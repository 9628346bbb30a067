"""Streams that feed streams: a stream's ``mirror`` or ``sources`` (nats-server 2.10,
server/stream.go), sans-IO.

nats-server has the sourcing stream's leader create a push consumer on each origin and
store what it delivers. jetraft's sourcing stream *fetches*: its leader asks the origin for
the next messages from a sequence (:class:`FetchRequest`, answered by
:func:`answer_fetch` on any server holding the origin: every replica's store is a prefix
of the committed stream) and asks again only once the answer is stored, so a link needs
no flow control, heartbeats or ack wait, and a leader change resumes from what the
replicated store holds. Nothing of this is visible to clients: there is no consumer on the
origin (nats-server's are hidden too, ``direct`` consumers).

- A **mirror** stores each message at the origin's sequence with the origin's time, the
  sequences between counting as deleted (nats-server ``skipMsgs``); it has no subjects of
  its own. Its next sequence is its own last sequence + 1.
- A **source** stores each message as a publish of its own (new sequence, its own time,
  ``Nats-Msg-Id`` dedupe, limits) with the header ``Nats-Stream-Source: <origin> <seq>
  <filters> <destinations> <original subject>`` (nats-server genSourceHeader, 2.10 form),
  by which each source's position is found again when the stream is opened
  (:func:`source_positions`, nats-server startingSequenceForSources).

Origins are streams of the same account; ``external`` (another account or domain) is
refused at create. An origin with workqueue or interest retention is not read (its messages
go when its consumers take them, and a read is not one): the link reports
:data:`RETENTION_REFUSED` in its ``error``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from jetraft import gofmt

from jetraft.protocol import headers as hdr
from jetraft.protocol.subjects import subject_matches
from jetraft.protocol.transform import MappingError, NoMatch, SubjectTransform

from . import errors as E
from .store import CorruptMessage, MessageNotFound

#: The most messages and bytes one fetch answers (one RAFT entry in a cluster).
FETCH_MAX_MSGS = 256
FETCH_MAX_BYTES = 1 << 20
#: Nanoseconds between fetches of a link that is caught up (a publish to an origin on
#: this server wakes its links at once).
IDLE_POLL_NS = 250_000_000
#: Nanoseconds before a failed link (origin missing, unreachable, a refused message) retries.
RETRY_NS = 1_000_000_000
#: Nanoseconds a fetch may go unanswered before it is given up and asked again.
FETCH_TIMEOUT_NS = 5_000_000_000
#: Messages scanned back from a stream's end for its sources' positions when it is opened.
POSITION_SCAN_MAX = 100_000
#: The header a sourced message carries (nats-server JSStreamSource).
SOURCE_HEADER = "Nats-Stream-Source"
#: nats-server's hash alphabet (accounts.go ``digits``) and its system hash length.
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: What a link to an origin with workqueue or interest retention reports.
RETENTION_REFUSED = "sourcing or mirroring a workqueue or interest stream is not supported by jetraft"


def stream_identity(created_ns: int) -> str:
    """A stream's identity: 8 characters of the SHA-256 of its creation time in RFC 3339
    (nats-server stream.go identity, events.go getHash), so that a source sees its origin
    deleted and created again."""
    digest = hashlib.sha256(gofmt.format_time(created_ns).encode()).digest()
    return "".join(_DIGITS[b % 62] for b in digest[:8])


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One ``mirror`` or ``sources`` entry of a stream's config, parsed.

    ``iname``: nats-server's index name (``composeIName``: ``"<name> <filters> <dests>"``,
    several joined by a form feed); ``filters``: (subject filter, transform or None) pairs
    in order (a message takes the first that matches); ``start_time`` in ns or None."""

    name: str
    iname: str
    mirror: bool
    start_seq: int
    start_time: int | None
    filter_subject: str
    transforms: tuple[tuple[str, str], ...]
    filters: tuple[tuple[str, SubjectTransform | None], ...] = field(compare=False)

    @classmethod
    def parse(cls, raw: dict[str, Any], *, mirror: bool) -> SourceSpec:
        """A spec from the config's JSON (already checked as a StreamSource)."""
        name = str(raw.get("name") or "")
        filter_subject = str(raw.get("filter_subject") or "")
        pairs = tuple((str(t.get("src") or ">"), str(t.get("dest") or ""))
                      for t in raw.get("subject_transforms") or () if isinstance(t, dict))
        if pairs:
            sources = "\f".join(src for src, _ in pairs)
            dests = "\f".join(dest or ">" for _, dest in pairs)
            filters = tuple((src, SubjectTransform.parse(src, dest) if dest else None) for src, dest in pairs)
        else:
            sources, dests = filter_subject or ">", ">"
            filters = ((filter_subject or ">", None),)
        start_time = raw.get("opt_start_time")
        if isinstance(start_time, str):          # the client's JSON: RFC 3339
            start_time = gofmt.parse_time(start_time)
        return cls(name=name, iname=f"{name} {sources} {dests}", mirror=mirror,
                   start_seq=int(raw.get("opt_start_seq") or 0),
                   start_time=start_time if isinstance(start_time, int) else None,
                   filter_subject=filter_subject, transforms=pairs, filters=filters)

    def transformed(self, subject: str) -> str | None:
        """The subject a message of the origin stored on ``subject`` is kept under here,
        or None when no filter takes it."""
        for filt, transform in self.filters:
            if subject_matches(filt, subject):
                if transform is None:
                    return subject
                try:
                    return transform.match(subject)
                except (MappingError, NoMatch):
                    return subject
        return None

    def header_value(self, seq: int, subject: str, ident: str) -> str:
        """``Nats-Stream-Source`` for the origin's message ``seq`` on ``subject``, its
        identity ``ident`` last (nats-server genSourceHeader)."""
        _, sources, dests = self.iname.split(" ", 2)
        return f"{self.name} {seq} {sources} {dests} {subject}" + (f" {ident}" if ident else "")

    def info_json(self, link: SourceLink | None, now_ns: int) -> dict[str, Any]:
        """StreamSourceInfo (nats-server stream.go sourceInfo): ``name``, ``lag``,
        ``active`` (ns since the origin last answered, -1 if never), ``error`` when the
        link failed, ``filter_subject`` and ``subject_transforms`` when configured."""
        out: dict[str, Any] = {"name": self.name, "lag": link.lag if link else 0,
                               "active": now_ns - link.active_ns if link and link.active_ns else -1}
        if link is not None and link.error is not None:
            out["error"] = link.error
        if self.filter_subject:
            out["filter_subject"] = self.filter_subject
        if self.transforms:
            out["subject_transforms"] = [{"src": s, "dest": d} for s, d in self.transforms]
        return out


def specs_of(config: Any) -> list[SourceSpec]:
    """The mirror, or the sources, of a checked StreamConfig (empty for neither)."""
    if config.mirror is not None:
        return [SourceSpec.parse(config.mirror, mirror=True)]
    return [SourceSpec.parse(s, mirror=False) for s in config.sources or () if isinstance(s, dict)]


@dataclass(slots=True)
class SourceLink:
    """A link's state on the server that runs it (the sourcing stream's leader).

    ``next_seq``: the origin sequence to ask from (0: not known yet); ``active_ns``: when
    the origin last answered (0: never); ``lag``: the origin's messages after the last one
    stored; ``error``: the ApiError JSON of the last failure, None while it works;
    ``due_ns``: when to fetch next; ``in_flight``: a fetch is out, since ``sent_ns``;
    ``start_time``: ask from this time (ns) while ``next_seq`` is not known; ``started``:
    its start was found; ``ident``: the origin's identity last seen; ``peer``: which of the
    origin's servers a cluster asks (turned on a timeout)."""

    spec: SourceSpec
    next_seq: int = 0
    active_ns: int = 0
    lag: int = 0
    error: dict[str, Any] | None = None
    due_ns: int = 0
    in_flight: bool = False
    start_time: int | None = None
    started: bool = False
    ident: str = ""
    sent_ns: int = 0
    peer: int = 0

    def request(self) -> FetchRequest:
        """The next fetch: from ``next_seq`` once known, else from the spec's
        ``opt_start_seq``, else its ``opt_start_time``, else from the start."""
        spec = self.spec
        if self.next_seq:
            return FetchRequest(spec.name, self.next_seq, None, tuple(f for f, _ in spec.filters), self.ident)
        start_time = self.start_time if self.start_time is not None else (
            spec.start_time if spec.start_seq == 0 else None)
        return FetchRequest(spec.name, max(spec.start_seq, 1), start_time, tuple(f for f, _ in spec.filters),
                            self.ident)

    def failed(self, error: E.JSApiError | dict[str, Any], now_ns: int) -> None:
        self.error = error.to_json() if isinstance(error, E.JSApiError) else error
        self.due_ns = now_ns + RETRY_NS
        self.in_flight = False


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Ask ``origin`` for its messages from ``start_seq`` (or, when ``start_time`` is set,
    from the first stored at or after it, ns) matching any of ``filters``; ``ident``: the
    origin's identity the asker knows ("" for none), to be answered with no messages when
    the origin is another stream of the same name now."""

    origin: str
    start_seq: int
    start_time: int | None
    filters: tuple[str, ...]
    ident: str = ""
    max_msgs: int = FETCH_MAX_MSGS
    max_bytes: int = FETCH_MAX_BYTES

    def to_wire(self) -> list[Any]:
        return [self.origin, self.start_seq, self.start_time, list(self.filters), self.ident,
                self.max_msgs, self.max_bytes]

    @classmethod
    def from_wire(cls, item: Any) -> FetchRequest:
        """Raises ValueError for anything but what :meth:`to_wire` makes."""
        if not isinstance(item, list) or len(item) != 7:
            raise ValueError("fetch request is not a 7-list")
        origin, start_seq, start_time, filters, ident, max_msgs, max_bytes = item
        if not (isinstance(origin, str) and isinstance(start_seq, int) and start_seq >= 0
                and isinstance(ident, str)
                and (start_time is None or isinstance(start_time, int))
                and isinstance(filters, list) and 0 < len(filters) <= 64
                and all(isinstance(f, str) and f for f in filters)
                and isinstance(max_msgs, int) and isinstance(max_bytes, int)):
            raise ValueError("fetch request has bad fields")
        return cls(origin, start_seq, start_time, tuple(filters), ident,
                   max(1, min(max_msgs, FETCH_MAX_MSGS)), max(1, min(max_bytes, FETCH_MAX_BYTES)))


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The origin's answer: ``msgs`` as (seq, subject, headers, data, ts ns), ascending;
    ``next_seq`` the sequence to ask from next; ``pending`` its matching messages after the
    last one given; ``error`` an ApiError JSON (origin missing or refused) instead;
    ``ident`` the origin's :func:`stream_identity`."""

    msgs: tuple[tuple[int, str, bytes | None, bytes, int], ...] = ()
    next_seq: int = 0
    pending: int = 0
    error: dict[str, Any] | None = None
    ident: str = ""

    def to_wire(self) -> list[Any]:
        return [[list(m) for m in self.msgs], self.next_seq, self.pending, self.error, self.ident]

    @classmethod
    def from_wire(cls, item: Any) -> FetchAnswer:
        """Raises ValueError for anything but what :meth:`to_wire` makes."""
        if not isinstance(item, list) or len(item) != 5:
            raise ValueError("fetch answer is not a 5-list")
        msgs, next_seq, pending, error, ident = item
        if not (isinstance(msgs, list) and isinstance(next_seq, int) and isinstance(pending, int)
                and (error is None or isinstance(error, dict)) and isinstance(ident, str)):
            raise ValueError("fetch answer has bad fields")
        out = []
        last = 0
        for m in msgs:
            if not (isinstance(m, list) and len(m) == 5 and isinstance(m[0], int) and m[0] > last
                    and isinstance(m[1], str) and m[1] and (m[2] is None or isinstance(m[2], bytes))
                    and isinstance(m[3], bytes) and isinstance(m[4], int)):
                raise ValueError("fetch answer has a bad message")
            last = m[0]
            out.append((m[0], m[1], m[2], m[3], m[4]))
        return cls(tuple(out), next_seq, pending, error, ident)


def answer_fetch(origin: Any, req: FetchRequest, created_ns: int = 0) -> FetchAnswer:
    """What the origin stream (a :class:`~jetraft.jetstream.stream.Stream`, or None when
    this server has no such stream; ``created_ns`` its creation time) answers: at most ``max_msgs`` messages and about
    ``max_bytes`` (at least one message) from ``start_seq``, in sequence order. Work is
    bounded by the answer's size: one indexed lookup per filter and message."""
    if origin is None:
        return FetchAnswer(error=E.stream_not_found().to_json())
    if origin.config.retention != "limits":
        return FetchAnswer(error=E.api_error("JSSourceConsumerSetupFailedErrF",
                                             err=RETENTION_REFUSED).to_json())
    ident = stream_identity(created_ns)
    if req.ident and req.ident != ident:     # another stream of that name: start again
        return FetchAnswer(ident=ident)
    store = origin.store
    seq = req.start_seq
    if req.start_time is not None:
        seq = store.seq_from_time(req.start_time)
    seq = max(seq, 1)
    msgs: list[tuple[int, str, bytes | None, bytes, int]] = []
    size = 0
    every = ">" in req.filters
    heads: dict[str, int] = {}      # filter -> the next sequence it matches (0: none)
    while len(msgs) < req.max_msgs and size < req.max_bytes:
        sm = None
        try:
            if every:
                sm = store.load_next(">", seq)
            else:
                best = 0
                for f in req.filters:
                    head = heads.get(f, -1)
                    if head != 0 and head < seq:
                        found = store.load_next(f, seq)
                        head = heads[f] = found.seq if found is not None else 0
                    if head and (best == 0 or head < best):
                        best = head
                sm = store.load(best) if best else None
        except CorruptMessage:
            return FetchAnswer(tuple(msgs), seq, 0, E.stream_general("corrupt message in the origin").to_json())
        except MessageNotFound:
            sm = None
        if sm is None:
            break
        msgs.append((sm.seq, sm.subject, sm.headers, sm.data, sm.ts))
        size += len(sm.subject) + len(sm.headers or b"") + len(sm.data)
        seq = sm.seq + 1
    last = store.state().last_seq
    pending = store.num_pending(req.filters if not every else (), seq, last) if seq <= last else 0
    return FetchAnswer(tuple(msgs), seq, pending, ident=ident)


def strip_source_headers(headers: bytes | None) -> bytes | None:
    """``headers`` without a previous Nats-Stream-Source (daisy chains) and the
    Nats-Expected-* and Nats-Batch-* headers (nats-server processInboundSourceMsg)."""
    if not headers:
        return headers
    lines = headers.split(b"\r\n")
    kept = [lines[0]]
    for line in lines[1:]:
        key = line.split(b":", 1)[0].strip().lower()
        if key == SOURCE_HEADER.lower().encode() or key.startswith(b"nats-expected-") \
                or key.startswith(b"nats-batch-"):
            continue
        kept.append(line)
    out = b"\r\n".join(kept)
    return out if out.strip() != lines[0].strip() else None


def parse_source_header(value: str) -> tuple[str, int, str] | None:
    """(index name, origin sequence, origin identity or "") of a ``Nats-Stream-Source``
    value, or None (nats-server streamAndSeq: ``<stream> <seq> <filters> <dests>
    [<subject> [<ident>]]``)."""
    fields = value.split(" ")
    if len(fields) < 4 or not fields[1].isdigit():
        return None
    return f"{fields[0]} {fields[2]} {fields[3]}", int(fields[1]), fields[5] if len(fields) > 5 else ""


def source_positions(store: Any, inames: set[str], *,
                     scan_max: int = POSITION_SCAN_MAX) -> dict[str, tuple[int, str]]:
    """(origin sequence, origin identity) of the last message stored from each source in ``inames``,
    read back from the stream's end through at most ``scan_max`` sequences (nats-server
    startingSequenceForSources); a source not found is missing from the answer."""
    found: dict[str, tuple[int, str]] = {}
    st = store.state()
    seq = st.last_seq
    scanned = 0
    while seq >= max(st.first_seq, 1) and scanned < scan_max and len(found) < len(inames):
        scanned += 1
        try:
            sm = store.load(seq)
        except (MessageNotFound, CorruptMessage):
            seq -= 1
            continue
        if sm.headers:
            value = hdr.parse(sm.headers).get(SOURCE_HEADER)
            parsed = parse_source_header(value) if value else None
            if parsed is not None and parsed[0] in inames and parsed[0] not in found:
                found[parsed[0]] = (parsed[1], parsed[2])
        seq -= 1
    return found
