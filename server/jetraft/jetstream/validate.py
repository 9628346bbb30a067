"""STREAM.CREATE / STREAM.UPDATE and CONSUMER.CREATE request checks.

One validator for both places that decide on a stream request: a single server's
:class:`~jetraft.jetstream.api.JetStreamAccount` and a cluster's meta leader
(:mod:`jetraft.jetstream.cluster`). Pure functions: the caller hands in what they need to know of
the account (the other streams' subjects, the stream as it is) and acts on the answer.
Each raises :class:`~jetraft.jetstream.errors.JSApiError` with nats-server's code and text
(errors.json) for the first check that fails, in nats-server's order
(jetstream_api.go jsStreamCreateRequest / jsStreamUpdateRequest, stream.go
checkStreamCfg and configUpdateCheck, jetstream_cluster.go jsClusteredStreamRequest /
jsClusteredStreamUpdateRequest).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jetraft.protocol.subjects import OverlapWorkExceeded, SubjectIndex, filters_overlap, subjects_overlap

from . import errors as E
from .model import (
    META_REQUIRED_LEVEL,
    META_SERVER_LEVEL,
    META_SERVER_VERSION,
    SUBJECTS_TOO_COMPLEX,
    ConsumerConfig,
    StreamConfig,
)
from .requests import consumer_create_request, decode_request

__all__ = ["EPHEMERAL_INACTIVE_THRESHOLD", "MAX_CONSUMER_NAME_LEN", "check_consumer_create", "static_consumer_metadata",
           "check_consumer_update", "check_new_consumer", "check_stream_create", "check_stream_update", "check_subjects_overlap",
           "consumer_filters_unique", "same_consumer_config"]

#: The other streams' subjects: a plain list, or a SubjectIndex of several streams'.
Subjects = Iterable[str] | SubjectIndex


def check_subjects_overlap(subjects: Iterable[str], others: Subjects) -> None:
    """Refuse ``subjects`` when one overlaps one of ``others`` (the account's other streams'
    subjects; a stream without subjects counts with its name): JSApiError 10065
    ``subjects overlap with an existing stream``.

    Same answer as nats-server's pairwise ``SubjectsCollide`` loop (stream.go
    ``jsAccount.subjectsOverlap``, jetstream_cluster.go ``jetStream.subjectsOverlap``), from a
    trie walk in O(total tokens) for real configurations. Raises JSApiError 10052
    ``subjects too complex to check for overlap`` when the walk exceeds its bound
    (protocol/subjects.py).
    """
    try:
        overlap = filters_overlap(subjects, others)
    except OverlapWorkExceeded:
        raise E.stream_invalid_config(SUBJECTS_TOO_COMPLEX) from None
    if overlap:
        raise E.subjects_overlap()


def check_stream_create(payload: bytes, subject_name: str, others: Subjects, *,
                        existing: Callable[[str], dict[str, Any] | None], clustered: bool,
                        unloaded: Mapping[str, str] | None = None) -> tuple[StreamConfig, bool]:
    """Check a ``$JS.API.STREAM.CREATE.<subject_name>`` request body ``payload``.

    Returns ``(config, exists)``: the checked config with its static metadata, and whether
    a stream of that name with that very config exists already (the create is then
    answered with that stream and changes nothing). ``others``: the subjects of the
    account's streams (looked at only when no stream of that name exists);
    ``existing(name)``: the config JSON of the account's stream ``name``, or None.

    Checks, in this order: the request's JSON (10025), the config's decoding, the
    create-only checks (10056 name mismatch, 10128 path separators, 10052 sealed or
    mirror_direct), checkStreamCfg (``pedantic`` honoured); then 10074 for replicas > 1
    when not ``clustered``; 10052 for a setting jetraft does not act on; then, for a
    single server only (``unloaded``: streams on disk but not loaded, name -> why),
    10049 for such a name; 10058 for a stream of that name with another config; 10065
    for subjects that overlap the other streams'. A cluster's meta leader passes
    ``clustered=True`` and no ``unloaded`` (its assignments have no files).
    """
    req = decode_request(payload, "StreamConfigRequest") or {}
    pedantic = bool(req.get("pedantic"))
    cfg = StreamConfig.decode(req)
    cfg.create_request_checks(subject_name)
    cfg = cfg.checked(pedantic=pedantic).with_static_metadata()
    if cfg.num_replicas > 1 and not clustered:
        raise E.stream_replicas_not_supported()
    cfg.check_supported()       # refused before anything is stored or proposed
    check_sources(cfg, existing, pedantic=pedantic)
    if unloaded and cfg.name in unloaded:
        raise E.stream_create(f"stream {cfg.name} is on disk but not loaded "
                              f"({unloaded[cfg.name]})")
    current = existing(cfg.name)
    if current is not None:
        if current != cfg.to_json():
            raise E.stream_name_exist()
        return cfg, True
    check_subjects_overlap(cfg.subjects, others)
    return cfg, False


def check_stream_update(payload: bytes, subject_name: str, current: Callable[[str], StreamConfig],
                        others: Subjects, *, clustered: bool,
                        meta_leader: bool = False,
                        existing: Callable[[str], dict[str, Any] | None] | None = None) -> StreamConfig:
    """Check a ``$JS.API.STREAM.UPDATE.<subject_name>`` request body ``payload``; returns
    the new config.

    ``current(name)``: the stream's config as it is (raises JSApiError 10059 stream not
    found when there is none); ``others``: the subjects of the account's other streams.

    A single server (``meta_leader=False``; nats-server jsStreamUpdateRequest) checks, in
    this order: the request's JSON (10025), checkStreamCfg with ``pedantic`` honoured,
    10056 for a name that is not ``subject_name``, 10059 for an unknown stream,
    configUpdateCheck against the current config (10052, 10055; 10074 for replicas > 1
    when not ``clustered``), 10052 for a setting jetraft does not act on, 10065 for
    subjects that overlap the other streams'. The returned config carries its static
    metadata.

    A cluster's meta leader (``meta_leader=True``; nats-server
    jsClusteredStreamUpdateRequest) checks what needs the whole cluster's view before it
    proposes the new config: the request's JSON, checkStreamCfg without ``pedantic``,
    10056 for a name that is not ``subject_name`` (jsStreamUpdateRequest checks it before
    the clustered path), 10052 for a setting jetraft does not act on, 10059 for an unknown
    stream, 10061 for a replica count that differs from the assignment's (``replicas can not be updated``), then
    10065 for overlapping subjects. The stream's replicas then apply the update through
    their log with every single-server check, and answer it.
    """
    req = decode_request(payload, "StreamConfigRequest") or {}
    new = StreamConfig.decode(req).checked(pedantic=bool(req.get("pedantic")) and not meta_leader)
    if subject_name != new.name:
        raise E.stream_name_mismatch()
    if meta_leader:
        new.check_supported()   # refused before the meta group stores the new config
    old = current(subject_name)
    if meta_leader:
        if new.num_replicas != old.num_replicas:
            raise E.stream_replicas_not_updatable()
        cfg = new
    else:
        cfg = StreamConfig.update_check(old, new, clustered=clustered).with_static_metadata()
        cfg.check_supported()
    if existing is not None:
        check_sources(cfg, existing, pedantic=bool(req.get("pedantic")) and not meta_leader)
    check_subjects_overlap(cfg.subjects, others)
    return cfg


def check_sources(cfg: StreamConfig, existing: Callable[[str], dict[str, Any] | None], *,
                  pedantic: bool = False) -> None:
    """The checks of a mirror and sources that need the account's other streams
    (``existing(name)``: a stream's config JSON or None), nats-server checkStreamCfg: 10030
    / 10046 for a max_msg_size below the origin's; ``mirror_direct`` taken from the
    origin's ``allow_direct`` (10157 with ``pedantic`` when they differ); 10052 "detected
    cycle" when the streams' mirrors and sources lead back to this one (through sources,
    only where the subjects overlap). An origin that does not exist yet is allowed."""
    if cfg.mirror is not None:
        origin = existing(str(cfg.mirror.get("name") or ""))
        if origin is not None:
            limit = int(origin.get("max_msg_size") or 0)
            if cfg.max_msg_size > 0 and limit > 0 and cfg.max_msg_size < limit:
                raise E.api_error("JSMirrorMaxMessageSizeTooBigErr")
            direct = bool(origin.get("allow_direct"))
            if pedantic and cfg.mirror_direct != direct:
                raise E.api_error("JSPedanticErrF", err="origin stream has direct get set, mirror has it disabled")
            cfg.mirror_direct = direct
    for src in cfg.sources or ():
        origin = existing(str(src.get("name") or ""))
        if origin is not None:
            limit = int(origin.get("max_msg_size") or 0)
            if cfg.max_msg_size > 0 and limit > 0 and cfg.max_msg_size < limit:
                raise E.api_error("JSSourceMaxMessageSizeTooBigErr")
    _check_cycle(cfg, existing)


def _check_cycle(cfg: StreamConfig, existing: Callable[[str], dict[str, Any] | None]) -> None:
    """nats-server checkStreamCfg's cycle check: a breadth-first walk of mirrors and sources
    from ``cfg``, bounded by the account's streams (each visited once)."""
    to_visit: list[dict[str, Any]] = [cfg.to_json()]
    visited: set[str] = set()
    while to_visit:
        current = to_visit.pop(0)
        if str(current.get("name") or "") in visited:
            continue
        visited.add(str(current.get("name") or ""))
        subjects = [str(x) for x in current.get("subjects") or ()]
        for src in current.get("sources") or ():
            if not isinstance(src, dict) or src.get("external") is not None:
                continue
            name = str(src.get("name") or "")
            filt = str(src.get("filter_subject") or "")
            if name in visited:
                if not filt or any(subjects_overlap(subj, filt) for subj in subjects):
                    raise E.stream_invalid_config("detected cycle")
            elif (other := existing(name)) is not None:
                to_visit.append(other)
        mirror = current.get("mirror")
        if isinstance(mirror, dict) and mirror.get("external") is None:
            name = str(mirror.get("name") or "")
            if name in visited:
                raise E.stream_invalid_config("detected cycle")
            if (other := existing(name)) is not None:
                to_visit.append(other)


_FIXED_CONSUMER_FIELDS = (
    ("deliver_policy", "deliver policy can not be updated"),
    ("mem_storage", "storage type can not be updated"),
    ("direct", "direct can not be updated"),
    ("sourcing", "sourcing can not be updated"),
    ("opt_start_seq", "start sequence can not be updated"),
    ("opt_start_time", "start time can not be updated"),
    ("ack_policy", "ack policy can not be updated"),
    ("replay_policy", "replay policy can not be updated"),
    ("idle_heartbeat", "heart beats can not be updated"),
    ("flow_control", "flow control can not be updated"),
)


def check_consumer_update(old: ConsumerConfig, new: ConsumerConfig) -> None:
    """nats-server consumer.go checkNewConsumerConfig: raises ValueError with its text for
    the first setting of ``old`` that ``new`` may not change."""
    for attr, text in _FIXED_CONSUMER_FIELDS:
        if getattr(old, attr) != getattr(new, attr):
            raise ValueError(text)
    if old.deliver_subject and not new.deliver_subject:
        raise ValueError("can not update push consumer to pull based")
    if not old.deliver_subject and new.deliver_subject:
        raise ValueError("can not update pull consumer to push based")
    if old.max_waiting != new.max_waiting:
        raise ValueError("max waiting can not be updated")


#: nats-server JSMaxNameLen: the longest consumer name.
MAX_CONSUMER_NAME_LEN = 255
#: ns an ephemeral consumer without an inactive_threshold lives unused (nats-server
#: JsDeleteWaitTimeDefault).
EPHEMERAL_INACTIVE_THRESHOLD = 5_000_000_000


def check_consumer_create(tokens: list[str], payload: bytes, stream_config: Callable[[str], StreamConfig], *,
                          clustered: bool, max_ack_pending_limit: int = 0) -> tuple[str, ConsumerConfig, str]:
    """Check a CONSUMER.CREATE request (``tokens``: its subject split on dots; ``payload``:
    its body) by itself (nats-server jetstream_api.go jsConsumerCreateRequest, then
    checkConsumerCfg, then ``ConsumerConfig.check_supported``). Returns the stream's name,
    the checked config (static metadata set, an ephemeral's inactive threshold defaulted)
    and the action (``create``, ``update`` or ""). ``stream_config(name)``: the stream's
    config, raising JSApiError 10059 when there is none; ``clustered``: replicas > 1 are
    accepted (else 10074); ``max_ack_pending_limit``: the account's ``max_ack_pending``
    (> 0: the default ``max_ack_pending`` at most, and above it 10121). Raises JSApiError;
    changes nothing."""
    req = decode_request(payload, "CreateConsumerRequest")
    if req is None:
        raise E.invalid_json("unexpected end of JSON input")
    cfg = consumer_create_request(req)
    stream_name = req.get("stream_name") or ""
    action = req.get("action") or ""
    pedantic = bool(req.get("pedantic"))
    n = len(tokens)
    filtered = ""
    if tokens[3] == "DURABLE":
        if n != 7:
            raise E.api_error("JSConsumerDurableNameNotInSubjectErr")
        sname, cname = tokens[5], tokens[6]
        legacy = "durable"
    elif n == 5:
        sname, cname, legacy = tokens[4], cfg.name, "ephemeral"
    else:
        sname, cname, legacy = tokens[4], tokens[5], ""
        if n > 6:
            filtered = ".".join(tokens[6:])
    if sname != stream_name:
        raise E.stream_name_mismatch()
    if cname and ("\\" in cname or "/" in cname):
        raise E.api_error("JSConsumerNameContainsPathSeparatorsErr")
    if legacy == "durable":
        if not cfg.durable_name:
            raise E.api_error("JSConsumerDurableNameNotSetErr")
        if cname != cfg.durable_name:
            raise E.api_error("JSConsumerDurableNameNotMatchSubjectErr")
    if legacy == "":
        if cfg.durable_name and cname != cfg.durable_name:
            raise E.api_error("JSConsumerDurableNameNotMatchSubjectErr")
        cfg.name = cname
    if legacy == "ephemeral" and cfg.durable_name:
        raise E.api_error("JSConsumerEphemeralWithDurableNameErr")
    if filtered and cfg.filter_subjects:
        raise E.api_error("JSConsumerMultipleFiltersNotAllowed")
    if filtered and cfg.filter_subject != filtered:
        raise E.api_error("JSConsumerCreateFilterSubjectMismatchErr")
    if cfg.num_replicas > 1 and not clustered:
        raise E.stream_replicas_not_supported()
    stream = stream_config(sname)
    if len(cname or cfg.durable_name) > MAX_CONSUMER_NAME_LEN:
        raise E.consumer_name_too_long(MAX_CONSUMER_NAME_LEN)
    cfg = cfg.checked(stream, pedantic=pedantic, max_ack_pending_limit=max(max_ack_pending_limit, 0))
    cfg.check_supported()
    cfg.metadata = static_consumer_metadata(cfg)
    if not cfg.durable_name and cfg.inactive_threshold <= 0:
        cfg.inactive_threshold = EPHEMERAL_INACTIVE_THRESHOLD   # consumer.go updateInactiveThreshold
    return sname, cfg, action


def static_consumer_metadata(cfg: ConsumerConfig) -> dict[str, str]:
    """The stored metadata: the user's, without server keys, plus ``_nats.req.level``
    (nats-server jetstream_versioning.go setStaticConsumerMetadata)."""
    level = 0
    if cfg.pause_until or cfg.priority_policy != "none" or cfg.priority_groups:
        level = 1
    if cfg.ack_policy == "flow_control":
        level = 4
    meta = {k: v for k, v in (cfg.metadata or {}).items()
            if k not in (META_SERVER_VERSION, META_SERVER_LEVEL)}
    meta[META_REQUIRED_LEVEL] = str(level)
    return meta


def same_consumer_config(a: ConsumerConfig, b: ConsumerConfig) -> bool:
    """Whether two consumer configs are the same but for their metadata (a create of an
    existing consumer with the same config changes nothing)."""
    return _comparable(a) == _comparable(b)


def _comparable(cfg: ConsumerConfig) -> dict[str, Any]:
    out = cfg.to_json()
    out.pop("metadata", None)
    return out


def consumer_filters_unique(name: str, cfg: ConsumerConfig, others: Mapping[str, ConsumerConfig]) -> bool:
    """Whether a work-queue consumer's filters overlap no other consumer's (nats-server
    stream.go isFilteredMatch over every pair): ``others`` maps the stream's consumers'
    names to their configs (``name``'s own entry is skipped). One trie walk over all the
    others' filters, not every pair. A set too complex to check counts as overlapping."""
    mine = [cfg.filter_subject] if cfg.filter_subject else list(cfg.filter_subjects)
    theirs: list[str] = []
    for other_name, other in others.items():
        if other_name == name:
            continue
        filters = [other.filter_subject] if other.filter_subject else list(other.filter_subjects)
        if not filters or not mine:
            return False
        theirs.extend(filters)
    try:
        return not theirs or not filters_overlap(mine, theirs)
    except OverlapWorkExceeded:
        return False


def check_new_consumer(stream: StreamConfig, consumers: Mapping[str, ConsumerConfig], name: str,
                       cfg: ConsumerConfig) -> None:
    """Check a consumer ``name`` (checked config ``cfg``; "" for an ephemeral not yet named)
    that does not exist yet against its stream (nats-server consumer.go
    addConsumerWithAssignment): ``consumers`` maps the stream's consumers' names to their
    configs. Raises JSApiError JSMaximumConsumersLimitErr when the stream has its
    max_consumers; on a work-queue stream JSConsumerWQRequiresExplicitAckErr,
    JSConsumerWQConsumerNotDeliverAllErr, JSConsumerWQMultipleUnfilteredErr (an unfiltered
    consumer beside others) or JSConsumerWQConsumerNotUniqueErr (filters overlapping
    another consumer's)."""
    if stream.max_consumers > 0 and len(consumers) >= stream.max_consumers:
        raise E.maximum_consumers_limit()
    if stream.retention == "workqueue":
        if cfg.ack_policy not in ("explicit", "flow_control"):
            raise E.api_error("JSConsumerWQRequiresExplicitAckErr")
        if cfg.deliver_policy != "all":
            raise E.api_error("JSConsumerWQConsumerNotDeliverAllErr")
        if consumers:
            if not cfg.filter_subject and not cfg.filter_subjects:
                raise E.api_error("JSConsumerWQMultipleUnfilteredErr")
            if not consumer_filters_unique(name, cfg, consumers):
                raise E.api_error("JSConsumerWQConsumerNotUniqueErr")
