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
refused at create.

A **durable link** (nats-server 2.14, ADR-60) reads an origin with workqueue or interest
retention, or any origin through the durable consumer its ``consumer`` block names: the
link's position is a consumer of the origin with ``ack_policy: flow_control``
(``JS_MIRROR_<hash>`` or ``JS_SRC_<hash>``, created on the first fetch, when no
``consumer`` is named). Its fetches go to the origin's leader (:func:`origin_answer`);
a fetch from sequence N acknowledges every message before N (the link asks again only
once the previous answer is stored, so a message leaves a workqueue origin only once the
sourcing stream holds it) and the messages answered count as delivered
(:class:`LinkStep`, replicated in the origin's group). The link's identity of the origin
must be known before anything is acknowledged: an origin deleted and created again is
never acknowledged on the old one's sequences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jetraft import gofmt
from jetraft.gofmt import go_hash

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
#: The reply subject of the CONSUMER.CREATE and DELETE requests jetraft makes for a link's
#: consumer: their answers are dropped, never sent (an API request without a reply is not
#: handled, as nats-server's).
LINK_REPLY = "$JS.LINK.REPLY"
#: The heartbeat a link's consumer is created with, ns (nats-server sourceHealthHB).
LINK_HEARTBEAT_NS = 1_000_000_000


def stream_identity(created_ns: int) -> str:
    """A stream's identity: :func:`go_hash` of its creation time in RFC 3339 (nats-server
    stream.go identity), so that a source sees its origin deleted and created again."""
    return go_hash(gofmt.format_time(created_ns))


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
    #: the durable consumer of the origin the ``consumer`` block names ("" for none)
    consumer: str = ""

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
        block = raw.get("consumer")
        consumer = str(block.get("name") or "") if isinstance(block, dict) else ""
        head = f"{name}:C={go_hash(consumer)}" if consumer else name     # composeIName
        return cls(name=name, iname=f"{head} {sources} {dests}", mirror=mirror,
                   start_seq=int(raw.get("opt_start_seq") or 0),
                   start_time=start_time if isinstance(start_time, int) else None,
                   filter_subject=filter_subject, transforms=pairs, filters=filters,
                   consumer=consumer)

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
        head, sources, dests = self.iname.split(" ", 2)
        return f"{head} {seq} {sources} {dests} {subject}" + (f" {ident}" if ident else "")

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


def link_consumer(stream: str, account: str, spec: SourceSpec, specs: list[SourceSpec],
                  domain: str = "") -> tuple[str, bool]:
    """``(consumer name, named)``: the durable consumer of the origin a link of stream
    ``stream`` keeps its position in: the ``consumer`` block's (named), else nats-server's
    stable name (createStableConsumerHash, createSourcingConsumerHash): ``JS_MIRROR_`` or
    ``JS_SRC_`` and the hash of ``"<stream> <account>[ <domain>]"`` (and the source's index
    name when the stream sources that origin more than once)."""
    if spec.consumer:
        return spec.consumer, True
    ident = f"{stream} {account}" + (f" {domain}" if domain else "")
    if spec.mirror:
        return f"JS_MIRROR_{go_hash(ident)}", False
    if sum(1 for other in specs if other.name == spec.name) > 1:
        ident = f"{go_hash(ident)} {spec.iname}"
        return f"JS_SRC_{go_hash(ident)}", False
    return f"JS_SRC_{go_hash(go_hash(ident))}", False


def link_consumer_config(name: str, filters: tuple[str, ...], *, mirror: bool, stream: str,
                         account: str) -> dict[str, Any]:
    """The CONSUMER.CREATE config of a link's consumer made on the first fetch
    (nats-server's sourcing consumer, upgraded to durable for an interest or workqueue
    origin in jsConsumerCreateRequest): flow-control acks, a 1 s heartbeat, the link's
    filters; its deliver subject is never subscribed (the link fetches)."""
    kind = "mirror" if mirror else "src"
    cfg: dict[str, Any] = {"durable_name": name, "name": name, "deliver_policy": "all",
                           "ack_policy": "flow_control", "deliver_subject": f"$JS.{'M' if mirror else 'S'}.{go_hash('deliver ' + name)}",
                           "flow_control": True, "idle_heartbeat": LINK_HEARTBEAT_NS,
                           "metadata": {f"_nats.{kind}.stream": stream, f"_nats.{kind}.acc": account}}
    if filters and ">" not in filters:
        if len(filters) == 1:
            cfg["filter_subject"] = filters[0]
        else:
            cfg["filter_subjects"] = list(filters)
    return cfg


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
    #: the origin's consumer a durable link keeps its position in (:func:`link_consumer`),
    #: whether the config named it, and the sourcing stream's name
    consumer: str = ""
    named: bool = False
    asker: str = ""
    #: the link lagged its origin by fewer than 10 messages once (a mirror with
    #: mirror_direct answers the origin's direct gets from then on, nats-server
    #: subscribeToMirrorDirect)
    caught_up: bool = False

    def request(self) -> FetchRequest:
        """The next fetch: from ``next_seq`` once known, else from the spec's
        ``opt_start_seq``, else its ``opt_start_time``, else from the start."""
        spec = self.spec
        durable = (self.consumer, self.named, spec.mirror, self.asker)
        filters = tuple(f for f, _ in spec.filters)
        if self.next_seq:
            return FetchRequest(spec.name, self.next_seq, None, filters, self.ident, FETCH_MAX_MSGS,
                                FETCH_MAX_BYTES, *durable)
        start_time = self.start_time if self.start_time is not None else (
            spec.start_time if spec.start_seq == 0 else None)
        return FetchRequest(spec.name, max(spec.start_seq, 1), start_time, filters, self.ident,
                            FETCH_MAX_MSGS, FETCH_MAX_BYTES, *durable)

    def failed(self, error: E.JSApiError | dict[str, Any], now_ns: int) -> None:
        self.error = error.to_json() if isinstance(error, E.JSApiError) else error
        self.due_ns = now_ns + RETRY_NS
        self.in_flight = False


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Ask ``origin`` for its messages from ``start_seq`` (or, when ``start_time`` is set,
    from the first stored at or after it, ns) matching any of ``filters``; ``ident``: the
    origin's identity the asker knows ("" for none), to be answered with no messages when
    the origin is another stream of the same name now. ``consumer``: the origin's consumer
    of a durable link (``named``: the config named it, else it is made when missing);
    ``mirror``: the asker is a mirror; ``asker``: the sourcing stream's name."""

    origin: str
    start_seq: int
    start_time: int | None
    filters: tuple[str, ...]
    ident: str = ""
    max_msgs: int = FETCH_MAX_MSGS
    max_bytes: int = FETCH_MAX_BYTES
    consumer: str = ""
    named: bool = False
    mirror: bool = False
    asker: str = ""

    def durable(self, retention: str) -> bool:
        """Whether the fetch goes through the origin's consumer: one named in the config,
        or an origin whose messages go when consumed (workqueue, interest)."""
        return bool(self.consumer) and (self.named or retention != "limits")

    def to_wire(self) -> list[Any]:
        return [self.origin, self.start_seq, self.start_time, list(self.filters), self.ident,
                self.max_msgs, self.max_bytes, self.consumer, self.named, self.mirror, self.asker]

    @classmethod
    def from_wire(cls, item: Any) -> FetchRequest:
        """Raises ValueError for anything but what :meth:`to_wire` makes."""
        if not isinstance(item, list) or len(item) != 11:
            raise ValueError("fetch request is not an 11-list")
        origin, start_seq, start_time, filters, ident, max_msgs, max_bytes, consumer, named, mirror, asker = item
        if not (isinstance(origin, str) and isinstance(start_seq, int) and start_seq >= 0
                and isinstance(ident, str)
                and (start_time is None or isinstance(start_time, int))
                and isinstance(filters, list) and 0 < len(filters) <= 64
                and all(isinstance(f, str) and f for f in filters)
                and isinstance(max_msgs, int) and isinstance(max_bytes, int)
                and isinstance(consumer, str) and isinstance(named, bool) and isinstance(mirror, bool)
                and isinstance(asker, str)):
            raise ValueError("fetch request has bad fields")
        return cls(origin, start_seq, start_time, tuple(filters), ident,
                   max(1, min(max_msgs, FETCH_MAX_MSGS)), max(1, min(max_bytes, FETCH_MAX_BYTES)),
                   consumer, named, mirror, asker)


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


def answer_fetch(origin: Any, req: FetchRequest, created_ns: int = 0, min_seq: int = 1) -> FetchAnswer:
    """What the origin stream (a :class:`~jetraft.jetstream.stream.Stream`, or None when
    this server has no such stream; ``created_ns`` its creation time) answers: at most
    ``max_msgs`` messages and about ``max_bytes`` (at least one message) from ``start_seq``
    (not below ``min_seq``), in sequence order. Work is bounded by the answer's size: one
    indexed lookup per filter and message."""
    if origin is None:
        return FetchAnswer(error=E.stream_not_found().to_json())
    ident = stream_identity(created_ns)
    if req.ident and req.ident != ident:     # another stream of that name: start again
        return FetchAnswer(ident=ident)
    store = origin.store
    seq = req.start_seq
    if req.start_time is not None:
        seq = store.seq_from_time(req.start_time)
    seq = max(seq, min_seq, 1)
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


@dataclass(frozen=True, slots=True)
class LinkStep:
    """What a durable link's fetch did to its consumer of the origin, replicated in the
    origin's group: every message up to ``ack_seq`` acknowledged (0: none), then ``seqs``
    (ascending stream sequences) delivered."""

    consumer: str
    ack_seq: int
    seqs: tuple[int, ...]


def origin_answer(origin: Any, consumers: Any, req: FetchRequest, created_ns: int, account: str = ""
                  ) -> tuple[FetchAnswer, dict[str, Any] | None, LinkStep | None]:
    """The origin's side of a fetch (``origin``: the stream or None; ``consumers``: its
    consumers by name; ``account``: their account's name): ``(answer, create, step)``. ``create``: the CONSUMER.CREATE config
    of a durable link's missing consumer (the link asks again once it exists); ``step``:
    the durable link's acks and deliveries (see the module docstring). A durable fetch is
    answered by the origin's leader only. A named consumer that is missing answers 10014;
    one whose ack policy is not flow_control, 10214 (mirror) or 10217 (source)."""
    if origin is None or not req.durable(origin.config.retention):
        return answer_fetch(origin, req, created_ns), None, None
    consumer = consumers.get(req.consumer)
    if consumer is None:
        if req.named:
            return FetchAnswer(error=E.consumer_not_found().to_json()), None, None
        cfg = link_consumer_config(req.consumer, req.filters, mirror=req.mirror, stream=req.asker,
                                   account=account)
        return FetchAnswer(next_seq=req.start_seq, ident=stream_identity(created_ns)), cfg, None
    if consumer.config.ack_policy != "flow_control":
        return FetchAnswer(error=E.api_error("JSMirrorConsumerRequiresAckFCErr" if req.mirror
                                             else "JSSourceConsumerRequiresAckFCErr").to_json()), None, None
    answer = answer_fetch(origin, req, created_ns, min_seq=consumer.ack_floor_seq + 1)
    if answer.error is not None or (req.ident and answer.ident != req.ident):
        return answer, None, None
    # nothing is acknowledged before the asker knows which origin it holds messages of
    ack_seq = req.start_seq - 1 if req.ident and req.start_time is None else 0
    step = LinkStep(req.consumer, ack_seq, tuple(m[0] for m in answer.msgs))
    return answer, None, (step if step.ack_seq > 0 or step.seqs else None)


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
