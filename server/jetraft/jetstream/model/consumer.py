"""A consumer's configuration (nats-server server/consumer.go ConsumerConfig): its defaults
and checks against its stream's configuration."""


from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jetraft import gofmt
from jetraft.jetstream import errors as E
from jetraft.jetstream.errors import JSApiError
from jetraft.protocol.subjects import is_valid_literal_subject, is_valid_subject
from jetraft.protocol.subjects import (
    OverlapWorkExceeded,
    filters_overlap,
    first_covered_filter,
)


from jetraft.jetstream.model.base import (
    DEFAULT_ACK_WAIT,
    DEFAULT_MAX_ACK_PENDING,
    DEFAULT_MAX_WAITING,
    DEFAULT_PINNED_TTL,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MILLISECOND,
    SOURCE_HEALTH_HB,
    SUBJECTS_TOO_COMPLEX,
    _GROUP_NAME,
    _Model,
    _go_fields,
    gofield,
    is_valid_asset_name,
)
from jetraft.jetstream.model.stream import (
    StreamConfig,
    _metadata_len,
)


# --- ConsumerConfig ---------------------------------------------------------------------

_DELIVER = ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject", "undefined")
_ACK = ("none", "all", "explicit", "flow_control")
_REPLAY = ("instant", "original")
_PRIORITY = ("none", "overflow", "pinned_client", "prioritized")


@_go_fields
@dataclass
class ConsumerConfig(_Model):
    """A consumer's configuration (server/consumer.go ConsumerConfig).

    Durations (``ack_wait``, ``backoff``, ``max_expires``, ``idle_heartbeat``,
    ``inactive_threshold``, ``priority_timeout``) are ns; ``opt_start_time`` and
    ``pause_until`` are ns since the epoch or None.
    """

    durable_name: str = gofield("str", omit=True)
    name: str = gofield("str", omit=True)
    description: str = gofield("str", omit=True)
    deliver_policy: str = gofield("enum", default="all", enum=_DELIVER, enum_error="quoted")
    opt_start_seq: int = gofield("uint64", omit=True)
    opt_start_time: int | None = gofield("time", omit=True)
    ack_policy: str = gofield("enum", default="none", enum=_ACK, enum_error="quoted")
    ack_wait: int = gofield("dur", omit=True)
    max_deliver: int = gofield("int", omit=True)
    backoff: list[int] = gofield("durlist", omit=True)
    filter_subject: str = gofield("str", omit=True)
    filter_subjects: list[str] = gofield("strlist", omit=True)
    replay_policy: str = gofield("enum", default="instant", enum=_REPLAY, enum_error="quoted")
    rate_limit_bps: int = gofield("uint64", omit=True)
    sample_freq: str = gofield("str", omit=True)
    max_waiting: int = gofield("int", omit=True)
    max_ack_pending: int = gofield("int", omit=True)
    flow_control: bool = gofield("bool", omit=True)
    headers_only: bool = gofield("bool", omit=True)
    max_batch: int = gofield("int", omit=True)
    max_expires: int = gofield("dur", omit=True)
    max_bytes: int = gofield("int", omit=True)
    deliver_subject: str = gofield("str", omit=True)
    deliver_group: str = gofield("str", omit=True)
    idle_heartbeat: int = gofield("dur", omit=True)
    inactive_threshold: int = gofield("dur", omit=True)
    num_replicas: int = gofield("int")
    mem_storage: bool = gofield("bool", omit=True)
    direct: bool = gofield("bool", omit=True)
    sourcing: bool = gofield("bool", omit=True)
    metadata: dict[str, str] | None = gofield("map", omit=True)
    pause_until: int | None = gofield("time", omit=True)
    priority_groups: list[str] = gofield("strlist", omit=True)
    priority_policy: str = gofield("enum", omit=True, default="none", enum=_PRIORITY,
                                   enum_error="raw:unknown priority policy: ")
    priority_timeout: int = gofield("dur", omit=True)

    _GO_NAME = "ConsumerConfig"

    @classmethod
    def decode(cls, data: dict[str, Any], *, path: str | None = None) -> ConsumerConfig:
        """Strict decode (see module doc); ``"undefined"`` deliver policy reads as ``"all"``.
        ``path`` names the config in type errors (CONSUMER.CREATE: ``CreateConsumerRequest.config``)."""
        cfg = super().decode(data, path=path)
        if cfg.deliver_policy == "undefined":
            cfg.deliver_policy = "all"
        return cfg

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.opt_start_time is None:
            out.pop("opt_start_time", None)
        if self.pause_until is None:
            out.pop("pause_until", None)
        if self.priority_policy == "none":
            out.pop("priority_policy", None)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], stream: StreamConfig | None = None, *, pedantic: bool = False) -> ConsumerConfig:
        """Decode (strict), then :meth:`checked` against ``stream`` (a default stream if None)."""
        stream = stream if stream is not None else StreamConfig(name="S").checked()
        return cls.decode(data).checked(stream, pedantic=pedantic)

    @property
    def is_durable(self) -> bool:
        """A durable consumer has ``durable_name`` set (nats-server ``isDurableConsumer``)."""
        return bool(self.durable_name)

    @property
    def is_push(self) -> bool:
        """Push consumers have a ``deliver_subject``."""
        return bool(self.deliver_subject)

    def with_defaults(self, stream: StreamConfig, *, pedantic: bool = False,
                      max_ack_pending_limit: int = 0, max_request_batch_limit: int = 0) -> ConsumerConfig:
        """A copy with nats-server's defaults (``setConsumerConfigDefaults``, server/consumer.go).

        max_deliver 0/<-1 -> -1; pull max_waiting 0 -> 512; ack_wait 0 -> 30 s for explicit/all;
        backoff[0] overrides ack_wait; max_ack_pending 0 -> stream limit or 1000 (unless ack none);
        inactive_threshold 0 -> stream consumer_limits; negative limits -> 0.
        Raises 10157 (pedantic) only.
        """
        c = self.copy()

        def pedantic_err(msg: str) -> JSApiError:
            return E.api_error("JSPedanticErrF", err=msg)

        if c.max_deliver == 0 or c.max_deliver < -1:
            if pedantic and c.max_deliver < -1:
                raise pedantic_err("max_deliver must be set to -1")
            c.max_deliver = -1
        for attr, msg in (("max_waiting", "max_waiting must not be negative"),):
            if getattr(c, attr) < 0:
                if pedantic:
                    raise pedantic_err(msg)
                setattr(c, attr, 0)
        if c.max_ack_pending < -1:
            if pedantic:
                raise pedantic_err("max_ack_pending must be set to -1")
            c.max_ack_pending = -1
        for attr, key in (("max_batch", "max_batch"), ("max_expires", "max_expires"), ("max_bytes", "max_bytes"),
                          ("idle_heartbeat", "idle_heartbeat"), ("inactive_threshold", "inactive_threshold"),
                          ("priority_timeout", "priority_timeout")):
            if getattr(c, attr) < 0:
                if pedantic:
                    raise pedantic_err(f"{key} must not be negative")
                setattr(c, attr, 0)
        if not c.deliver_subject and c.max_waiting == 0:
            c.max_waiting = DEFAULT_MAX_WAITING
        if c.ack_wait == 0 and c.ack_policy in ("explicit", "all"):
            c.ack_wait = DEFAULT_ACK_WAIT
        if c.backoff:
            if pedantic and c.ack_wait != c.backoff[0]:
                raise pedantic_err("first backoff value has to equal batch AckWait")
            c.ack_wait = c.backoff[0]
        limits = stream.consumer_limits
        if c.max_ack_pending == 0:
            if pedantic and limits.max_ack_pending > 0:
                raise pedantic_err("max_ack_pending must be set if it's configured in stream limits")
            c.max_ack_pending = limits.max_ack_pending
        if c.inactive_threshold == 0:
            if pedantic and limits.inactive_threshold > 0:
                raise pedantic_err("inactive_threshold must be set if it's configured in stream limits")
            c.inactive_threshold = limits.inactive_threshold
        if c.max_ack_pending == 0 and c.ack_policy != "none":
            pending = DEFAULT_MAX_ACK_PENDING
            if 0 < max_ack_pending_limit < pending:
                pending = max_ack_pending_limit
            c.max_ack_pending = pending
        if not c.deliver_subject and c.max_batch == 0 and max_request_batch_limit > 0:
            if pedantic:
                raise pedantic_err("max_request_batch must be set if it's JetStream limits are set")
            c.max_batch = max_request_batch_limit
        if c.priority_policy == "pinned_client" and c.priority_timeout == 0:
            c.priority_timeout = DEFAULT_PINNED_TTL
        if c.ack_policy == "flow_control" and not pedantic:
            c.flow_control = True
            c.idle_heartbeat = SOURCE_HEALTH_HB
        return c

    def checked(self, stream: StreamConfig, *, pedantic: bool = False,
                max_ack_pending_limit: int = 0, max_request_batch_limit: int = 0) -> ConsumerConfig:
        """Defaults (:meth:`with_defaults`) then nats-server ``checkConsumerCfg``; returns the result.

        ``stream`` is the parent stream's (checked) config. Raises JSApiError with
        nats-server's code for each refusal (10052 names/filters, 10126/10133/10134
        replicas, 10181/10182 policies, 10183/10184 negatives, 10116 backoff vs
        max_deliver, 10107 description, 10079/10112/10081/10080/10082/10083 push,
        10084/10086/10087/10088/10089/10114/10115/10125 pull, 10121/10153 limits,
        10090/10091 direct, 10136/10139/10138 filters, 10094 deliver policy, 10095
        sampling, 10108 flow control, 10132 name vs durable, 10135 metadata,
        10178/10159/10161/10162/10196/10197 priority groups).
        """
        c = self.with_defaults(stream, pedantic=pedantic, max_ack_pending_limit=max_ack_pending_limit,
                               max_request_batch_limit=max_request_batch_limit)
        bad = E.stream_invalid_config
        if c.name and not is_valid_asset_name(c.name):
            raise bad("consumer name can not contain '.', '*', '>', '\\', '/'")
        if c.durable_name and not is_valid_asset_name(c.durable_name):
            raise bad("consumer durable name can not contain '.', '*', '>', '\\', '/'")
        if c.num_replicas > 0 and c.num_replicas > stream.num_replicas:
            raise E.api_error("JSConsumerReplicasExceedsStream")
        if c.num_replicas < 0:
            raise E.replicas_count_negative()
        if stream.retention in ("interest", "workqueue") and c.num_replicas not in (0, stream.num_replicas):
            raise E.api_error("JSConsumerReplicasShouldMatchStream")
        if any(b < 0 for b in c.backoff):
            raise E.api_error("JSConsumerBackOffNegativeErr")
        if c.ack_wait < 0:
            raise E.api_error("JSConsumerAckWaitNegativeErr")
        if c.ack_policy == "flow_control":
            if not c.deliver_subject:
                raise E.api_error("JSConsumerAckFCRequiresPushErr")
            if not c.flow_control:
                raise E.api_error("JSConsumerAckFCRequiresFCErr")
            if c.idle_heartbeat != SOURCE_HEALTH_HB:
                raise bad("flow control ack policy heartbeat needs to be 1s")
            if c.max_ack_pending <= 0:
                raise E.api_error("JSConsumerAckFCRequiresMaxAckPendingErr")
            if c.ack_wait != 0 or c.backoff:
                raise E.api_error("JSConsumerAckFCRequiresNoAckWaitErr")
            if c.max_deliver > 0:
                raise E.api_error("JSConsumerAckFCRequiresNoMaxDeliverErr")
        if c.backoff and c.max_deliver != -1 and len(c.backoff) > c.max_deliver:
            raise E.api_error("JSConsumerMaxDeliverBackoffErr")
        if len(c.description.encode()) > MAX_DESCRIPTION_LEN:
            raise E.api_error("JSConsumerDescriptionTooLongErrF", max=MAX_DESCRIPTION_LEN)
        if c.deliver_subject:
            if not is_valid_subject(c.deliver_subject) and not _has_wildcard(c.deliver_subject):
                raise E.api_error("JSConsumerInvalidDeliverSubject")
            if _has_wildcard(c.deliver_subject):
                raise E.api_error("JSConsumerDeliverToWildcardsErr")
            if not is_valid_literal_subject(c.deliver_subject):
                raise E.api_error("JSConsumerInvalidDeliverSubject")
            if filters_overlap(stream.subjects, [c.deliver_subject]):    # the index is kept
                raise E.api_error("JSConsumerDeliverCycleErr")
            if c.max_waiting != 0:
                raise E.api_error("JSConsumerPushMaxWaitingErr")
            if c.max_ack_pending > 0 and c.ack_policy == "none":
                raise E.api_error("JSConsumerMaxPendingAckPolicyRequiredErr")
            if 0 < c.idle_heartbeat < 100 * MILLISECOND:
                raise E.api_error("JSConsumerSmallHeartbeatErr")
        else:
            if c.ack_policy == "none" and stream.retention == "workqueue":
                raise E.api_error("JSConsumerPullRequiresAckErr")
            if c.rate_limit_bps > 0:
                raise E.api_error("JSConsumerPullWithRateLimitErr")
            if c.max_waiting < 0:
                raise E.api_error("JSConsumerMaxWaitingNegativeErr")
            if c.idle_heartbeat > 0:
                raise E.api_error("JSConsumerHBRequiresPushErr")
            if c.flow_control:
                raise E.api_error("JSConsumerFCRequiresPushErr")
            if c.max_batch < 0:
                raise E.api_error("JSConsumerMaxRequestBatchNegativeErr")
            if c.max_expires != 0 and c.max_expires < MILLISECOND:
                raise E.api_error("JSConsumerMaxRequestExpiresTooSmall")
            if max_request_batch_limit > 0 and c.max_batch > max_request_batch_limit:
                raise E.api_error("JSConsumerMaxRequestBatchExceededF", limit=max_request_batch_limit)
        if max_ack_pending_limit > 0 and c.max_ack_pending > max_ack_pending_limit:
            raise E.api_error("JSConsumerMaxPendingAckExcessErrF", limit=max_ack_pending_limit)
        limits = stream.consumer_limits
        if limits.max_ack_pending > 0 and c.max_ack_pending > limits.max_ack_pending:
            raise E.api_error("JSConsumerMaxPendingAckExcessErrF", limit=limits.max_ack_pending)
        if limits.inactive_threshold > 0 and c.inactive_threshold > limits.inactive_threshold:
            raise E.api_error("JSConsumerInactiveThresholdExcess", limit=gofmt.duration(limits.inactive_threshold))
        if c.direct:
            if not c.deliver_subject:
                raise E.api_error("JSConsumerDirectRequiresPushErr")
            if c.is_durable:
                raise E.api_error("JSConsumerDirectRequiresEphemeralErr")
        if c.filter_subject and c.filter_subjects:
            raise E.api_error("JSConsumerDuplicateFilterSubjects")
        if c.filter_subject and not is_valid_subject(c.filter_subject):
            raise bad("invalid subject")
        if any(f == "" for f in c.filter_subjects):
            raise E.api_error("JSConsumerEmptyFilter")
        filters = [c.filter_subject] if c.filter_subject else list(c.filter_subjects)
        # The first filter another one covers, from an index of the filters (nats-server
        # compares every pair); the order of the refusals is the pairwise loop's.
        try:
            covered = first_covered_filter(filters) if len(filters) > 1 else None
        except OverlapWorkExceeded:
            covered = -1
        for i, subj in enumerate(filters):
            if not is_valid_subject(subj):
                raise bad("invalid subject")
            if i == covered:
                raise E.api_error("JSConsumerOverlappingSubjectFilters")
        if covered == -1:
            raise bad(SUBJECTS_TOO_COMPLEX)
        self._check_deliver_policy(c)
        if c.sample_freq:
            text = c.sample_freq[:-1] if c.sample_freq.endswith("%") else c.sample_freq
            if not re.fullmatch(r"[+-]?\d+", text) or int(text) < 0:
                err = f'strconv.Atoi: parsing {json.dumps(text)}: invalid syntax' if not re.fullmatch(
                    r"[+-]?\d+", text) else "<nil>"
                raise E.api_error("JSConsumerInvalidSamplingErrF", err=err)
        if c.flow_control and c.idle_heartbeat == 0:
            raise E.api_error("JSConsumerWithFlowControlNeedsHeartbeats")
        if c.durable_name and c.name and c.name != c.durable_name:
            raise E.api_error("JSConsumerCreateDurableAndNameMismatch")
        if _metadata_len(c.metadata) > MAX_METADATA_LEN:
            raise E.api_error("JSConsumerMetadataLengthErrF", limit=f"{MAX_METADATA_LEN // 1024}KB")
        if c.priority_policy != "none":
            if c.deliver_subject:
                raise E.api_error("JSConsumerPushWithPriorityGroupErr")
            if not c.priority_groups:
                raise E.api_error("JSConsumerPriorityPolicyWithoutGroup")
            for group in c.priority_groups:
                if group == "":
                    raise E.api_error("JSConsumerEmptyGroupName")
                if not _GROUP_NAME.match(group):
                    raise E.api_error("JSConsumerInvalidGroupNameErr")
        else:
            if c.priority_groups:
                raise E.api_error("JSConsumerPriorityGroupWithPolicyNone")
            if c.priority_timeout > 0:
                raise E.api_error("JSConsumerPinnedTTLWithoutPriorityPolicyNone")
        if stream.placement is not None and stream.placement.preferred:
            raise bad("preferred server not permitted in placement")
        if not c.name and c.durable_name:
            c.name = c.durable_name  # nats-server reports a durable's name (verified by the compat test)
        return c

    def unsupported(self) -> str | None:
        """The first setting of this consumer config that jetraft does not act on (named as
        in the JSON), or None. Refused: ``direct`` and ``sourcing`` (nats-server's own
        consumers for mirrors and sources). ``replay_policy: original`` and
        ``rate_limit_bps`` are served (jetstream/consumer_pacing.py), ``ack_policy:
        flow_control`` too (acked by the flow-control answers, jetstream/consumer_delivery.py),
        and priority groups (``priority_policy`` overflow, pinned_client, prioritized:
        jetstream/consumer_priority.py)."""
        if self.direct:
            return "direct"
        if self.sourcing:
            return "sourcing"
        return None

    def check_supported(self) -> None:
        """Refuse a consumer config with a setting jetraft does not act on (see
        :meth:`unsupported`): JSApiError 10012 (500, JSConsumerCreateErrF, nats-server's
        general consumer creation failure) ``"<setting> is not supported by jetraft"``.
        Call it after nats-server's own checks, before anything is stored or proposed."""
        what = self.unsupported()
        if what is not None:
            raise E.unsupported_consumer_setting(what)

    @staticmethod
    def _check_deliver_policy(c: ConsumerConfig) -> None:
        def bad_start(dp: str, start: str) -> JSApiError:
            return E.api_error("JSConsumerInvalidPolicyErrF",
                               err=f"consumer delivery policy is deliver {dp}, but optional start {start} is also set")

        def not_set(dp: str, what: str) -> JSApiError:
            return E.api_error("JSConsumerInvalidPolicyErrF",
                               err=f"consumer delivery policy is deliver {dp}, but optional {what} is not set")

        dp = c.deliver_policy
        words = {"all": "all", "last": "last", "last_per_subject": "last per subject", "new": "new"}
        if dp in words:
            if c.opt_start_seq > 0:
                raise bad_start(words[dp], "sequence")
            if c.opt_start_time is not None:
                raise bad_start(words[dp], "time")
            if dp == "last_per_subject" and not c.filter_subject and not c.filter_subjects:
                raise not_set("last per subject", "filter subject")
        elif dp == "by_start_sequence":
            if c.opt_start_seq == 0:
                raise not_set("by start sequence", "start sequence")
            if c.opt_start_time is not None:
                raise bad_start("by start sequence", "time")
        elif dp == "by_start_time":
            if c.opt_start_time is None:
                raise not_set("by start time", "start time")
            if c.opt_start_seq != 0:
                raise bad_start("by start time", "start sequence")


def _has_wildcard(subject: str) -> bool:
    return any(tok in ("*", ">") for tok in subject.split("."))
