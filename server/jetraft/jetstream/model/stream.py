"""A stream's configuration (nats-server server/stream.go StreamConfig) and the small types
it is made of: placement, subject transform, republish, consumer limits, sources."""


from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from jetraft import gofmt
from jetraft.gofmt import go_hash
from jetraft.jetstream import errors as E
from jetraft.protocol.subjects import is_valid_subject, subject_matches
from jetraft.protocol.transform import MappingError, validate_mapping
from jetraft.protocol.transform import SubjectTransform as Transform
from jetraft.protocol.subjects import (
    OverlapWorkExceeded,
    filters_overlap,
    first_invalid_filter,
    first_overlapping_pair,
)
from jetraft.protocol.subjects import subjects_overlap as _collide


from jetraft.jetstream.model.base import (
    API_LEVEL,
    DEFAULT_DUPLICATE_WINDOW,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    META_REQUIRED_LEVEL,
    META_SERVER_LEVEL,
    META_SERVER_VERSION,
    MILLISECOND,
    SECOND,
    STREAM_MAX_REPLICAS,
    SUBJECTS_TOO_COMPLEX,
    _API_HEADS,
    _Model,
    _go_fields,
    gofield,
    is_valid_asset_name,
)


# --- small nested types ---------------------------------------------------------------


@_go_fields
@dataclass
class Placement(_Model):
    """``{"cluster","tags","preferred"}`` all omitempty (server/jetstream_cluster.go Placement)."""

    cluster: str = gofield("str", omit=True)
    tags: list[str] = gofield("strlist", omit=True)
    preferred: str = gofield("str", omit=True)

    _GO_NAME = "Placement"

    def is_empty(self) -> bool:
        """True for ``{}`` -- nats-server drops such a placement (checkStreamCfg)."""
        return not (self.cluster or self.tags or self.preferred)


@_go_fields
@dataclass
class SubjectTransform(_Model):
    """``{"src","dest"}`` (SubjectTransformConfig; neither omitempty)."""

    src: str = gofield("str")
    dest: str = gofield("str")

    _GO_NAME = "SubjectTransformConfig"


@_go_fields
@dataclass
class RePublish(_Model):
    """``{"src"?, "dest", "headers_only"?}`` (server/stream.go RePublish)."""

    src: str = gofield("str", omit=True)
    dest: str = gofield("str")
    headers_only: bool = gofield("bool", omit=True)

    _GO_NAME = "RePublish"


@_go_fields
@dataclass
class ConsumerLimits(_Model):
    """``{"inactive_threshold"? (ns), "max_ack_pending"?}`` (StreamConsumerLimits)."""

    inactive_threshold: int = gofield("dur", omit=True)
    max_ack_pending: int = gofield("int", omit=True)

    _GO_NAME = "StreamConsumerLimits"


@_go_fields
@dataclass
class ExternalStream(_Model):
    """``{"api", "deliver"}`` (server/stream.go ExternalStream; neither omitempty)."""

    api: str = gofield("str")
    deliver: str = gofield("str")

    _GO_NAME = "ExternalStream"


@_go_fields
@dataclass
class StreamConsumerSource(_Model):
    """``{"name"?, "deliver_subject"?}`` (server/stream.go StreamConsumerSource)."""

    name: str = gofield("str", omit=True)
    deliver_subject: str = gofield("str", omit=True)

    _GO_NAME = "StreamConsumerSource"


@_go_fields
@dataclass
class StreamSource(_Model):
    """A mirror or source (server/stream.go StreamSource). jetraft keeps mirrors and
    sources as the client's JSON; this type only checks them as nats-server decodes them
    (unknown keys, types, integer ranges)."""

    name: str = gofield("str")
    opt_start_seq: int = gofield("uint64", omit=True)
    opt_start_time: int | None = gofield("time", omit=True)
    filter_subject: str = gofield("str", omit=True)
    subject_transforms: list[SubjectTransform | None] = gofield("objlist:SubjectTransform", omit=True)
    external: ExternalStream | None = gofield("obj:ExternalStream", omit=True)
    consumer: StreamConsumerSource | None = gofield("obj:StreamConsumerSource", omit=True)

    _GO_NAME = "StreamSource"


def _index_name(src: dict[str, Any]) -> str:
    """nats-server StreamSource.composeIName: ``"<name> <filters> <dests>"`` (several joined
    by a form feed; an external source's name carries its API prefix)."""
    name = str(src.get("name") or "")
    ext = src.get("external")
    if isinstance(ext, dict):
        name += ":" + str(ext.get("api") or "")
    consumer = src.get("consumer")
    if isinstance(consumer, dict):
        name += ":C=" + go_hash(str(consumer.get("name") or ""))
    transforms = [t for t in src.get("subject_transforms") or () if isinstance(t, dict)]
    if not transforms:
        return f"{name} {src.get('filter_subject') or '>'} >"
    sources = "\f".join(str(t.get("src") or ">") for t in transforms)
    dests = "\f".join(str(t.get("dest") or ">") for t in transforms)
    return f"{name} {sources} {dests}"


def _is_subset(a: str, b: str) -> bool:
    """Whether every subject ``a`` matches is matched by ``b`` (nats-server subjectIsSubsetMatch)."""
    ta, tb = a.split("."), b.split(".")
    for i, t in enumerate(tb):
        if t == ">":
            return True
        if i >= len(ta):
            return False
        if t == "*":
            if ta[i] == ">":
                return False
            continue
        if ta[i] != t:
            return False
    return len(ta) == len(tb)


def _check_source(src: dict[str, Any], *, mirror: bool, marker_ttl: int = 0,
                  cnames: set[str] | None = None) -> None:
    """nats-server checkStreamCfg's checks of one mirror or source (its errors, in its
    order); the checks that need the other streams are in jetstream/validate.py."""
    kind = "Mirror" if mirror else "Source"
    transforms = [t for t in src.get("subject_transforms") or () if isinstance(t, dict)]
    consumer = src.get("consumer")
    if mirror:
        if isinstance(consumer, dict):
            _check_source_consumer(src, consumer, "JSMirrorDurableConsumerCfgInvalid")
        if src.get("filter_subject") and transforms:
            raise E.api_error("JSMirrorMultipleFiltersNotAllowed")
        if marker_ttl > 0:
            raise E.stream_invalid_config("subject delete markers forbidden on mirrors")
    elif src.get("filter_subject") and transforms:
        raise E.api_error("JSSourceMultipleFiltersNotAllowed")
    for i, t in enumerate(transforms):
        tsrc, tdest = str(t.get("src") or ""), str(t.get("dest") or "")
        if tsrc and not is_valid_subject(tsrc):
            raise E.api_error(f"JS{kind}InvalidSubjectFilter", err=f"invalid subject {tsrc}")
        try:
            validate_mapping(tsrc, tdest)
        except MappingError as exc:
            raise E.api_error(f"JS{kind}InvalidTransformDestination", err=str(exc)) from None
        if mirror:
            for j, other in enumerate(transforms):
                if i != j and _collide(tsrc or ">", str(other.get("src") or ">")):
                    raise E.api_error("JSMirrorOverlappingSubjectFilters")
    if not mirror:
        for i, t in enumerate(transforms):
            for j, other in enumerate(transforms):
                if i != j and _is_subset(str(t.get("src") or ""), str(other.get("src") or "")):
                    raise E.api_error("JSSourceOverlappingSubjectFilters")
        if isinstance(consumer, dict):
            _check_source_consumer(src, consumer, "JSSourceDurableConsumerCfgInvalid")
            cname = f"{src.get('name')} {consumer.get('name') or ''}"
            if cnames is not None:
                if cname in cnames:
                    raise E.api_error("JSSourceDurableConsumerDuplicateDetected")
                cnames.add(cname)
    if mirror and src.get("external") is None and not is_valid_asset_name(str(src.get("name") or "")):
        raise E.api_error("JSMirrorInvalidStreamName")


def _check_source_consumer(src: dict[str, Any], consumer: dict[str, Any], error: str) -> None:
    deliver = str(consumer.get("deliver_subject") or "")
    if not is_valid_asset_name(str(consumer.get("name") or "")):
        raise E.api_error(error)
    if not deliver or any(c in deliver for c in "*>") or not is_valid_subject(deliver):
        raise E.api_error(error)
    if src.get("opt_start_seq") or src.get("opt_start_time") is not None or src.get("filter_subject"):
        raise E.api_error(error)


# --- StreamConfig -----------------------------------------------------------------------

_RETENTION = ("limits", "interest", "workqueue")
_STORAGE = ("file", "memory")
_DISCARD = ("old", "new")
_COMPRESSION = ("none", "s2")
_PERSIST = ("default", "async")


@_go_fields
@dataclass
class StreamConfig(_Model):
    """A stream's configuration (server/stream.go StreamConfig).

    Zero values are Go's; ``checked()`` turns them into nats-server's defaults
    (``max_*`` 0 -> -1, ``duplicate_window`` 0 -> 2 min (or max_age if smaller),
    ``num_replicas`` 0 -> 1, ``storage`` -> file, ``subjects`` [] -> [name]).
    ``mirror`` and ``sources`` are kept as raw JSON objects; jetraft neither mirrors nor
    sources, and refuses them with every other setting it does not act on
    (:meth:`check_supported`, called by the API after ``checked()``).
    ``pedantic`` is the request flag (StreamConfigRequest), never written.
    """

    name: str = gofield("str")
    description: str = gofield("str", omit=True)
    subjects: list[str] = gofield("strlist", omit=True)
    retention: str = gofield("enum", default="limits", enum=_RETENTION, enum_error="quoted")
    max_consumers: int = gofield("int")
    max_msgs: int = gofield("int64")
    max_bytes: int = gofield("int64")
    max_age: int = gofield("dur")
    max_msgs_per_subject: int = gofield("int64")
    max_msg_size: int = gofield("int32", omit=True)
    discard: str = gofield("enum", default="old", enum=_DISCARD, enum_error="lower")
    storage: str = gofield("enum", enum=_STORAGE, enum_error="quoted")
    num_replicas: int = gofield("int")
    no_ack: bool = gofield("bool", omit=True)
    duplicate_window: int = gofield("dur", omit=True)
    placement: Placement | None = gofield("obj:Placement", omit=True)
    mirror: dict[str, Any] | None = gofield("source", omit=True)
    sources: list[dict[str, Any]] | None = gofield("sourcelist", omit=True)
    compression: str = gofield("enum", default="none", enum=_COMPRESSION, enum_error="unknown compression algorithm")
    first_seq: int = gofield("uint64", omit=True)
    subject_transform: SubjectTransform | None = gofield("obj:SubjectTransform", omit=True)
    republish: RePublish | None = gofield("obj:RePublish", omit=True)
    allow_direct: bool = gofield("bool")
    mirror_direct: bool = gofield("bool")
    discard_new_per_subject: bool = gofield("bool", omit=True)
    sealed: bool = gofield("bool")
    deny_delete: bool = gofield("bool")
    deny_purge: bool = gofield("bool")
    allow_rollup_hdrs: bool = gofield("bool")
    consumer_limits: ConsumerLimits = gofield("obj:ConsumerLimits", factory=ConsumerLimits)
    allow_msg_ttl: bool = gofield("bool")
    subject_delete_marker_ttl: int = gofield("dur", omit=True)
    allow_msg_counter: bool = gofield("bool", omit=True)
    allow_atomic: bool = gofield("bool", omit=True)
    allow_msg_schedules: bool = gofield("bool", omit=True)
    persist_mode: str = gofield("enum", omit=True, enum=("default", "async", ""), enum_error="quoted")
    allow_batched: bool = gofield("bool", omit=True)
    metadata: dict[str, str] | None = gofield("map", omit=True)
    pedantic: bool = False

    _GO_NAME = "StreamConfigRequest"
    _IGNORED: ClassVar[dict[str, str]] = {"pedantic": "bool"}

    @classmethod
    def decode(cls, data: dict[str, Any], *, path: str | None = None) -> StreamConfig:
        """Strict decode of a STREAM.CREATE/UPDATE body (StreamConfigRequest); see module doc.
        ``mirror`` and ``sources`` are checked as StreamSource structs and kept as given."""
        cfg = super().decode(data, path=path)
        if isinstance(data, dict):
            if "consumer_limits" in data and data["consumer_limits"] is None:
                cfg.consumer_limits = ConsumerLimits()
            cfg.pedantic = bool(data.get("pedantic"))
        return cfg

    @classmethod
    def from_json(cls, data: dict[str, Any], *, pedantic: bool | None = None, max_duplicates: int = 0) -> StreamConfig:
        """Decode (strict) then :meth:`checked`; ``pedantic`` defaults to the body's flag."""
        cfg = cls.decode(data)
        return cfg.checked(pedantic=cfg.pedantic if pedantic is None else pedantic, max_duplicates=max_duplicates)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.persist_mode == "":
            out.pop("persist_mode", None)
        return out

    def checked(self, *, pedantic: bool = False, max_duplicates: int = 0) -> StreamConfig:
        """Return a normalized copy, as nats-server ``checkStreamCfg`` (server/stream.go).

        ``max_duplicates`` is the server's ``JetStreamLimits.Duplicates`` (ns; 0 = none).
        Raises JSApiError: 10052 (500) with checkStreamCfg's message for each refusal,
        10133 for negative replicas, 10157 in pedantic mode, 10034/10031/10143/... for
        mirror misuse. Cross-stream checks are not made here.
        """
        bad = E.stream_invalid_config
        if not is_valid_asset_name(self.name):
            raise bad("stream name is required and can not contain '.', '*', '>', '\\', '/'")
        if len(self.name.encode()) > MAX_NAME_LEN:
            raise bad(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
        if len(self.description.encode()) > MAX_DESCRIPTION_LEN:
            raise bad(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
        if _metadata_len(self.metadata) > MAX_METADATA_LEN:
            raise bad(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")
        cfg = self.copy()
        if cfg.placement is not None:
            cfg.placement = cfg.placement.copy()
        if not cfg.storage:
            cfg.storage = "file"
        if cfg.num_replicas == 0:
            cfg.num_replicas = 1
        if cfg.num_replicas > STREAM_MAX_REPLICAS:
            raise bad(f"maximum replicas is {STREAM_MAX_REPLICAS}")
        if cfg.num_replicas < 0:
            raise E.replicas_count_negative()
        for attr in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
            value = getattr(cfg, attr)
            if value == 0 or value < -1:
                if pedantic and value < -1:
                    name = "max_msgs_per_subject" if attr == "max_msgs_per_subject" else attr
                    raise E.api_error("JSPedanticErrF", err=f"{name} must be set to -1")
                setattr(cfg, attr, -1)
        if cfg.max_age < 0:
            raise bad("max age can not be negative")
        if cfg.max_age != 0 and cfg.max_age < 100 * MILLISECOND:
            raise bad("max age needs to be >= 100ms")
        if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
            window = DEFAULT_DUPLICATE_WINDOW
            if max_duplicates > 0 and window > max_duplicates:
                if pedantic:
                    raise E.api_error("JSPedanticErrF", err="duplicate window limits are higher than current limits")
                window = max_duplicates
            if cfg.max_age != 0 and cfg.max_age < window:
                if pedantic:
                    raise E.api_error("JSPedanticErrF", err="duplicate window cannot be bigger than max age")
                cfg.duplicate_window = cfg.max_age
            else:
                cfg.duplicate_window = window
        if cfg.duplicate_window < 0:
            raise bad("duplicates window can not be negative")
        if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
            raise bad("duplicates window can not be larger then max age")
        if max_duplicates > 0 and cfg.duplicate_window > max_duplicates:
            raise bad(f"duplicates window can not be larger then server limit of {gofmt.duration(max_duplicates)}")
        if 0 < cfg.duplicate_window < 100 * MILLISECOND:
            raise bad("duplicates window needs to be >= 100ms")
        if cfg.deny_purge and cfg.allow_rollup_hdrs:
            raise bad("roll-ups require the purge permission")
        if cfg.allow_msg_counter:
            if cfg.discard == "new":
                raise bad("counter stream cannot use discard new")
            if cfg.allow_msg_ttl:
                raise bad("counter stream cannot use message TTLs")
            if cfg.allow_msg_schedules:
                raise bad("counter stream cannot use message schedules")
            if cfg.retention != "limits":
                raise bad("counter stream can only use limits retention")
        if cfg.discard_new_per_subject:
            if cfg.discard != "new":
                raise bad("discard new per subject requires discard new policy to be set")
            if cfg.max_msgs_per_subject <= 0:
                raise bad("discard new per subject requires max msgs per subject > 0")
        if cfg.subject_delete_marker_ttl > 0:
            if cfg.subject_delete_marker_ttl < SECOND:
                raise bad("subject delete marker TTL must be at least 1 second")
            if not cfg.allow_msg_ttl:
                if pedantic:
                    raise bad("subject delete marker cannot be set if message TTLs are disabled")
                cfg.allow_msg_ttl = True
            if not cfg.allow_rollup_hdrs:
                if pedantic:
                    raise bad("subject delete marker cannot be set if roll-ups are disabled")
                cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
        elif cfg.subject_delete_marker_ttl < 0:
            raise bad("subject delete marker TTL must not be negative")
        if cfg.allow_msg_schedules:
            if cfg.discard == "new":
                raise bad("message scheduling cannot use discard new")
            if not cfg.allow_rollup_hdrs:
                if pedantic:
                    raise bad("message scheduling cannot be set if roll-ups are disabled")
                cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
        if cfg.persist_mode == "async":
            if cfg.storage != "file":
                raise bad("async persist mode is only supported on file storage")
            if cfg.num_replicas > 1:
                raise bad("async persist mode is not supported on replicated streams")
            if cfg.allow_atomic:
                raise bad("async persist mode is not supported with atomic batch publish")
        if cfg.mirror is not None:
            if cfg.first_seq > 0:
                raise E.api_error("JSMirrorWithFirstSeqErr")
            if cfg.subjects:
                raise E.api_error("JSMirrorWithSubjectsErr")
            if cfg.sources:
                raise E.api_error("JSMirrorWithSourcesErr")
            if cfg.allow_msg_counter:
                raise E.api_error("JSMirrorWithCountersErr")
            if cfg.allow_atomic:
                raise E.api_error("JSMirrorWithAtomicPublishErr")
            if cfg.allow_batched:
                raise E.api_error("JSMirrorWithBatchPublishErr")
            if cfg.allow_msg_schedules:
                raise E.api_error("JSMirrorWithMsgSchedulesErr")
            _check_source(cfg.mirror, mirror=True, marker_ttl=cfg.subject_delete_marker_ttl)
        if cfg.sources and cfg.allow_msg_schedules:
            raise E.api_error("JSSourceWithMsgSchedulesErr")
        inames: set[str] = set()
        cnames: set[str] = set()
        for src in cfg.sources or ():
            if not isinstance(src, dict) or not is_valid_asset_name(str(src.get("name") or "")):
                raise E.api_error("JSSourceInvalidStreamName")
            iname = _index_name(src)
            if iname in inames:
                raise E.api_error("JSSourceDuplicateDetected")
            inames.add(iname)
            _check_source(src, mirror=False, cnames=cnames)
        if not cfg.subjects:
            if cfg.mirror is None and not cfg.sources:
                cfg.subjects = [cfg.name]
        else:
            # The first overlapping pair as nats-server's pairwise loop finds it, from a trie
            # walk (protocol/subjects.py); the per-subject checks below keep their order.
            try:
                pair = first_overlapping_pair(cfg.subjects)
            except OverlapWorkExceeded:
                pair = None
                too_complex = True
            else:
                too_complex = False
            invalid = first_invalid_filter(cfg.subjects)
            seen: set[str] = set()
            for i, subj in enumerate(cfg.subjects):
                if i == invalid:
                    raise bad("invalid subject")
                if subj in seen:
                    raise bad("duplicate subjects detected")
                if subj == ">":
                    if not cfg.no_ack:
                        raise bad("capturing all subjects requires no-ack to be true")
                    if cfg.num_replicas != 1:
                        raise bad("capturing all subjects requires replicas of 1")
                if not cfg.no_ack and subj[0] in "$*>" and subj.split(".", 1)[0] in _API_HEADS:
                    for namespace in ("$JS.>", "$JSC.>", "$NRG.>"):
                        if _collide(subj, namespace) and not subject_matches("$JS.EVENT.>", subj):
                            raise bad("subjects that overlap with jetstream api require no-ack to be true")
                    if _collide(subj, "$SYS.>") and not subject_matches("$SYS.ACCOUNT.>", subj):
                        raise bad("subjects that overlap with system api require no-ack to be true")
                if pair is not None and pair[0] == i:
                    other = cfg.subjects[pair[1]]
                    raise bad(f"subject {json.dumps(subj)} overlaps with {json.dumps(other)}")
                seen.add(subj)
            if too_complex:
                raise bad(SUBJECTS_TOO_COMPLEX)
        if not cfg.subjects and not cfg.sources and cfg.mirror is None:
            raise bad("stream needs at least one configured subject or be a source/mirror")
        st = cfg.subject_transform
        if st is not None:
            if st.src and not is_valid_subject(st.src):
                raise E.api_error("JSStreamTransformInvalidSource", err=f"invalid subject {st.src}")
            try:
                validate_mapping(st.src, st.dest)
            except MappingError as exc:
                raise E.api_error("JSStreamTransformInvalidDestination", err=str(exc)) from None
        if cfg.republish is not None:
            rp = cfg.republish = cfg.republish.copy()
            if not rp.src:
                if pedantic:
                    raise E.api_error("JSPedanticErrF", err="republish source can not be empty")
                rp.src = ">"
            # ">" to ">" with a transform of the stream's one subject: republish what the
            # transform stores (stream.go checkStreamCfg)
            if (rp.dest == ">" and rp.src == ">" and st is not None and len(cfg.subjects) == 1
                    and st.src == cfg.subjects[0]):
                if pedantic:
                    raise E.api_error("JSPedanticErrF",
                                      err="implicit republish based on subject transform")
                rp.src = rp.dest = st.dest
            if filters_overlap(cfg.subjects, [rp.dest]):     # the subjects' index is kept
                raise bad("stream configuration for republish destination forms a cycle")
            try:
                Transform.parse(rp.src, rp.dest)
            except MappingError:
                raise bad(f"stream configuration for republish with transform from '{rp.src}' "
                          f"to '{rp.dest}' not valid") from None
        if cfg.placement is not None and cfg.placement.is_empty():
            cfg.placement = None
        if cfg.placement is not None and cfg.placement.preferred:
            raise bad("preferred server not permitted in placement")
        cfg.pedantic = False
        return cfg

    def unsupported(self) -> str | None:
        """The first setting of this (checked) config that jetraft does not act on, named as
        in the JSON (``"mirror external"``, ``"allow_batched"``), or None when every setting is one
        jetraft enforces.

        Refused (each when set to anything but its default): a mirror or source with
        ``external`` (another account or domain),
        ``persist_mode`` async, ``allow_batched`` (fast batch
        publish, nats-server 2.14). ``allow_msg_schedules`` is acted on (jetstream/schedule.py). ``allow_atomic`` is acted on (jetstream/batch.py).
        ``allow_msg_ttl`` is acted on: a message with a ``Nats-TTL`` header is removed when
        its TTL passes (jetstream/ttl.py); ``allow_msg_counter`` too (jetstream/counter.py).
        ``compression`` s2 is acted on: a file stream's sealed blocks are compressed
        (jetstream/store_compress.py); a memory stream ignores it, as nats-server's does.
        Every other field is enforced (docs/jetstream.md).
        """
        for src in ([self.mirror] if self.mirror is not None else []) + list(self.sources or ()):
            kind = "mirror" if src is self.mirror else "source"
            if isinstance(src, dict) and src.get("external") is not None:
                return f"{kind} external"
        if self.persist_mode == "async":
            return "persist_mode async (nats-server 2.12)"
        if self.allow_batched:
            return "allow_batched (fast batch publish, nats-server 2.14)"
        return None

    def check_supported(self) -> None:
        """Refuse a config with a setting jetraft does not act on (see :meth:`unsupported`):
        JSApiError 10052 (500, JSStreamInvalidConfigF, the error nats-server gives for an
        invalid stream configuration) ``"<setting> is not supported by jetraft"``. Call it
        after nats-server's own checks, before anything is stored or proposed."""
        what = self.unsupported()
        if what is not None:
            raise E.unsupported_stream_setting(what)

    def create_request_checks(self, subject_name: str) -> None:
        """The checks STREAM.CREATE makes before checkStreamCfg (jetstream_api.go jsStreamCreateRequest).

        ``subject_name`` is the stream name token of ``$JS.API.STREAM.CREATE.<name>``.
        Raises 10056 (name mismatch), 10128 (path separators), 10052 (sealed on create,
        mirror_direct without mirror).
        """
        if subject_name != self.name:
            raise E.stream_name_mismatch()
        if "\\" in subject_name or "/" in subject_name:
            raise E.stream_name_contains_path_separators()
        if self.sealed:
            raise E.stream_invalid_config("stream configuration for create can not be sealed")
        if self.mirror_direct and self.mirror is None:
            raise E.stream_invalid_config("stream has no mirror but does have mirror direct")

    @staticmethod
    def update_check(old: StreamConfig, new: StreamConfig, *, clustered: bool = False) -> StreamConfig:
        """Check ``new`` (checked or not) as an update of ``old`` (already checked).

        nats-server ``configUpdateCheck`` (server/stream.go): returns the normalized new
        config; raises 10052 for a changed name, storage type, retention to/from
        workqueue, unsealing, cancelling deny_delete/deny_purge, disabling TTLs or
        schedules, changing counters or persist mode, and (jetraft) a changed
        ``first_seq``; 10055 for a changed mirror; 10074
        for replicas > 1 on a single server (``clustered=False``).
        """
        cfg = new.checked(pedantic=new.pedantic)
        bad = E.stream_invalid_config
        if cfg.name != old.name:
            raise bad("stream configuration name must match original")
        if not clustered and cfg.num_replicas > 1:
            raise E.stream_replicas_not_supported()
        if cfg.storage != old.storage:
            raise bad("stream configuration update can not change storage type")
        # nats-server takes a new first_seq and acts on it only when its file store next
        # starts (purging every message below it); jetraft refuses the change instead
        if cfg.first_seq != old.first_seq:
            raise bad("stream configuration update can not change first sequence")
        if cfg.retention != old.retention and "workqueue" in (cfg.retention, old.retention):
            raise bad("stream configuration update can not change retention policy to/from workqueue")
        if not cfg.sealed and old.sealed:
            raise bad("stream configuration update can not unseal a sealed stream")
        if not cfg.deny_delete and old.deny_delete:
            raise bad("stream configuration update can not cancel deny message deletes")
        if not cfg.deny_purge and old.deny_purge:
            raise bad("stream configuration update can not cancel deny purge")
        if cfg.mirror is not None and cfg.mirror != old.mirror:
            raise E.stream_mirror_not_updatable()
        if old.allow_msg_ttl and not cfg.allow_msg_ttl:
            raise bad("message TTL status can not be disabled")
        if cfg.allow_msg_counter != old.allow_msg_counter:
            raise bad("stream configuration update can not change message counter setting")
        if old.allow_msg_schedules and not cfg.allow_msg_schedules:
            raise bad("message schedules can not be disabled")
        if (old.persist_mode or "default") != (cfg.persist_mode or "default"):
            raise bad("stream configuration update can not change persist mode")
        if cfg.sealed:
            cfg.max_age = 0
            cfg.discard = "new"
            cfg.deny_delete = cfg.deny_purge = True
            cfg.allow_rollup_hdrs = False
        return cfg

    def with_static_metadata(self) -> StreamConfig:
        """Copy with ``_nats.req.level`` set as nats-server stores it (setStaticStreamMetadata)."""
        level = 0
        if self.allow_msg_ttl or self.subject_delete_marker_ttl > 0:
            level = max(level, 1)
        if self.allow_msg_counter or self.allow_atomic or self.allow_msg_schedules or self.persist_mode == "async":
            level = max(level, 2)
        if self.allow_batched:
            level = max(level, 4)
        meta = {k: v for k, v in (self.metadata or {}).items() if k not in (META_SERVER_VERSION, META_SERVER_LEVEL)}
        meta[META_REQUIRED_LEVEL] = str(level)
        return self.copy(metadata=meta)

    def to_response_json(self, server_version: str) -> dict[str, Any]:
        """``to_json()`` with ``_nats.ver``/``_nats.level`` added to metadata (setDynamicStreamMetadata)."""
        out = self.to_json()
        out["metadata"] = {**(self.metadata or {}), META_SERVER_VERSION: server_version,
                           META_SERVER_LEVEL: str(API_LEVEL)}
        return out


def _metadata_len(metadata: dict[str, str] | None) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in (metadata or {}).items())
