"""JetStream API errors, as nats-server answers them.

Every error nats-server defines in ``server/errors.json`` is in :data:`ERRORS`
(constant name, HTTP-like ``code``, ``err_code``, description template),
transcribed from nats-server 2.15 (the protocol's data, not its code).
:class:`JSApiError` is one such error with its template filled in the way
nats-server's generated constructors do (``server/jetstream_errors_generated.go``:
each ``{name}`` placeholder is replaced by the argument's text; a Go ``error``
contributes its message, a ``time.Duration`` its Go ``String()``).

On the wire an error is ``{"code": int, "err_code": int, "description": str}``
inside a response's ``"error"`` key (``ApiError``, server/jetstream_errors.go).
nats-py builds ``APIError(**err)`` from it, so :meth:`JSApiError.to_json`
never emits any other key.

The response ``type`` strings of ``server/jetstream_api.go`` are constants at
the end of this module.

Pure Python, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ERRORS",
    "JSApiError",
    "UnsupportedSetting",
    "api_error",
]

#: (constant, code, err_code, description template), sorted by err_code.
#: Source: nats-server server/errors.json (all 226 entries).
ERRORS: tuple[tuple[str, int, int, str], ...] = (
    ('JSAccountResourcesExceededErr', 400, 10002, "resource limits exceeded for account"),
    ('JSBadRequestErr', 400, 10003, "bad request"),
    ('JSClusterIncompleteErr', 503, 10004, "incomplete results"),
    ('JSClusterNoPeersErrF', 400, 10005, "{err}"),
    ('JSClusterNotActiveErr', 500, 10006, "JetStream not in clustered mode"),
    ('JSClusterNotAssignedErr', 500, 10007, "JetStream cluster not assigned to this server"),
    ('JSClusterNotAvailErr', 503, 10008, "JetStream system temporarily unavailable"),
    ('JSClusterNotLeaderErr', 500, 10009, "JetStream cluster can not handle request"),
    ('JSClusterRequiredErr', 503, 10010, "JetStream clustering support required"),
    ('JSClusterTagsErr', 400, 10011, "tags placement not supported for operation"),
    ('JSConsumerCreateErrF', 500, 10012, "{err}"),
    ('JSConsumerNameExistErr', 400, 10013, "consumer name already in use"),
    ('JSConsumerNotFoundErr', 404, 10014, "consumer not found"),
    ('JSSnapshotDeliverSubjectInvalidErr', 400, 10015, "deliver subject not valid"),
    ('JSConsumerDurableNameNotInSubjectErr', 400, 10016, "consumer expected to be durable but no durable name set in subject"),
    ('JSConsumerDurableNameNotMatchSubjectErr', 400, 10017, "consumer name in subject does not match durable name in request"),
    ('JSConsumerDurableNameNotSetErr', 400, 10018, "consumer expected to be durable but a durable name was not set"),
    ('JSConsumerEphemeralWithDurableInSubjectErr', 400, 10019, "consumer expected to be ephemeral but detected a durable name set in subject"),
    ('JSConsumerEphemeralWithDurableNameErr', 400, 10020, "consumer expected to be ephemeral but a durable name was set in request"),
    ('JSStreamExternalApiOverlapErrF', 400, 10021, "stream external api prefix {prefix} must not overlap with {subject}"),
    ('JSStreamExternalDelPrefixOverlapsErrF', 400, 10022, "stream external delivery prefix {prefix} overlaps with stream subject {subject}"),
    ('JSInsufficientResourcesErr', 503, 10023, "insufficient resources"),
    ('JSStreamInvalidExternalDeliverySubjErrF', 400, 10024, "stream external delivery prefix {prefix} must not contain wildcards"),
    ('JSInvalidJSONErr', 400, 10025, "invalid JSON: {err}"),
    ('JSMaximumConsumersLimitErr', 400, 10026, "maximum consumers limit reached"),
    ('JSMaximumStreamsLimitErr', 400, 10027, "maximum number of streams reached"),
    ('JSMemoryResourcesExceededErr', 500, 10028, "insufficient memory resources available"),
    ('JSMirrorConsumerSetupFailedErrF', 500, 10029, "{err}"),
    ('JSMirrorMaxMessageSizeTooBigErr', 400, 10030, "stream mirror must have max message size >= source"),
    ('JSMirrorWithSourcesErr', 400, 10031, "stream mirrors can not also contain other sources"),
    ('JSMirrorWithStartSeqAndTimeErr', 400, 10032, "stream mirrors can not have both start seq and start time configured"),
    ('JSMirrorWithSubjectFiltersErr', 400, 10033, "stream mirrors can not contain filtered subjects"),
    ('JSMirrorWithSubjectsErr', 400, 10034, "stream mirrors can not contain subjects"),
    ('JSNoAccountErr', 503, 10035, "account not found"),
    ('JSClusterUnSupportFeatureErr', 503, 10036, "not currently supported in clustered mode"),
    ('JSNoMessageFoundErr', 404, 10037, "no message found"),
    ('JSNotEmptyRequestErr', 400, 10038, "expected an empty request payload"),
    ('JSNotEnabledForAccountErr', 503, 10039, "JetStream not enabled for account"),
    ('JSClusterPeerNotMemberErr', 400, 10040, "peer not a member"),
    ('JSRaftGeneralErrF', 500, 10041, "{err}"),
    ('JSRestoreSubscribeFailedErrF', 500, 10042, "JetStream unable to subscribe to restore snapshot {subject}: {err}"),
    ('JSSequenceNotFoundErrF', 400, 10043, "sequence {seq} not found"),
    ('JSClusterServerNotMemberErr', 400, 10044, "server is not a member of the cluster"),
    ('JSSourceConsumerSetupFailedErrF', 500, 10045, "{err}"),
    ('JSSourceMaxMessageSizeTooBigErr', 400, 10046, "stream source must have max message size >= target"),
    ('JSStorageResourcesExceededErr', 500, 10047, "insufficient storage resources available"),
    ('JSStreamAssignmentErrF', 500, 10048, "{err}"),
    ('JSStreamCreateErrF', 500, 10049, "{err}"),
    ('JSStreamDeleteErrF', 500, 10050, "{err}"),
    ('JSStreamGeneralErrorF', 500, 10051, "{err}"),
    ('JSStreamInvalidConfigF', 500, 10052, "{err}"),
    ('JSStreamLimitsErrF', 500, 10053, "{err}"),
    ('JSStreamMessageExceedsMaximumErr', 400, 10054, "message size exceeds maximum allowed"),
    ('JSStreamMirrorNotUpdatableErr', 400, 10055, "stream mirror configuration can not be updated"),
    ('JSStreamMismatchErr', 400, 10056, "stream name in subject does not match request"),
    ('JSStreamMsgDeleteFailedF', 500, 10057, "{err}"),
    ('JSStreamNameExistErr', 400, 10058, "stream name already in use with a different configuration"),
    ('JSStreamNotFoundErr', 404, 10059, "stream not found"),
    ('JSStreamNotMatchErr', 400, 10060, "expected stream does not match"),
    ('JSStreamReplicasNotUpdatableErr', 400, 10061, "Replicas configuration can not be updated"),
    ('JSStreamRestoreErrF', 500, 10062, "restore failed: {err}"),
    ('JSStreamSequenceNotMatchErr', 503, 10063, "expected stream sequence does not match"),
    ('JSStreamSnapshotErrF', 500, 10064, "snapshot failed: {err}"),
    ('JSStreamSubjectOverlapErr', 400, 10065, "subjects overlap with an existing stream"),
    ('JSStreamTemplateCreateErrF', 500, 10066, "{err}"),
    ('JSStreamTemplateDeleteErrF', 500, 10067, "{err}"),
    ('JSStreamTemplateNotFoundErr', 404, 10068, "template not found"),
    ('JSStreamUpdateErrF', 500, 10069, "{err}"),
    ('JSStreamWrongLastMsgIDErrF', 400, 10070, "wrong last msg ID: {id}"),
    ('JSStreamWrongLastSequenceErrF', 400, 10071, "wrong last sequence: {seq}"),
    ('JSTempStorageFailedErr', 500, 10072, "JetStream unable to open temp storage for restore"),
    ('JSTemplateNameNotMatchSubjectErr', 400, 10073, "template name in subject does not match request"),
    ('JSStreamReplicasNotSupportedErr', 500, 10074, "replicas > 1 not supported in non-clustered mode"),
    ('JSPeerRemapErr', 503, 10075, "peer remap failed"),
    ('JSNotEnabledErr', 503, 10076, "JetStream not enabled"),
    ('JSStreamStoreFailedF', 503, 10077, "{err}"),
    ('JSConsumerConfigRequiredErr', 400, 10078, "consumer config required"),
    ('JSConsumerDeliverToWildcardsErr', 400, 10079, "consumer deliver subject has wildcards"),
    ('JSConsumerPushMaxWaitingErr', 400, 10080, "consumer in push mode can not set max waiting"),
    ('JSConsumerDeliverCycleErr', 400, 10081, "consumer deliver subject forms a cycle"),
    ('JSConsumerMaxPendingAckPolicyRequiredErr', 400, 10082, "consumer requires ack policy for max ack pending"),
    ('JSConsumerSmallHeartbeatErr', 400, 10083, "consumer idle heartbeat needs to be >= 100ms"),
    ('JSConsumerPullRequiresAckErr', 400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream"),
    ('JSConsumerPullNotDurableErr', 400, 10085, "consumer in pull mode requires a durable name"),
    ('JSConsumerPullWithRateLimitErr', 400, 10086, "consumer in pull mode can not have rate limit set"),
    ('JSConsumerMaxWaitingNegativeErr', 400, 10087, "consumer max waiting needs to be positive"),
    ('JSConsumerHBRequiresPushErr', 400, 10088, "consumer idle heartbeat requires a push based consumer"),
    ('JSConsumerFCRequiresPushErr', 400, 10089, "consumer flow control requires a push based consumer"),
    ('JSConsumerDirectRequiresPushErr', 400, 10090, "consumer direct requires a push based consumer"),
    ('JSConsumerDirectRequiresEphemeralErr', 400, 10091, "consumer direct requires an ephemeral consumer"),
    ('JSConsumerOnMappedErr', 400, 10092, "consumer direct on a mapped consumer"),
    ('JSConsumerFilterNotSubsetErr', 400, 10093, "consumer filter subject is not a valid subset of the interest subjects"),
    ('JSConsumerInvalidPolicyErrF', 400, 10094, "{err}"),
    ('JSConsumerInvalidSamplingErrF', 400, 10095, "failed to parse consumer sampling configuration: {err}"),
    ('JSStreamInvalidErr', 500, 10096, "stream not valid"),
    ('JSStreamHeaderExceedsMaximumErr', 400, 10097, "header size exceeds maximum allowed of 64k"),
    ('JSConsumerWQRequiresExplicitAckErr', 400, 10098, "workqueue stream requires explicit ack"),
    ('JSConsumerWQMultipleUnfilteredErr', 400, 10099, "multiple non-filtered consumers not allowed on workqueue stream"),
    ('JSConsumerWQConsumerNotUniqueErr', 400, 10100, "filtered consumer not unique on workqueue stream"),
    ('JSConsumerWQConsumerNotDeliverAllErr', 400, 10101, "consumer must be deliver all on workqueue stream"),
    ('JSConsumerNameTooLongErrF', 400, 10102, "consumer name is too long, maximum allowed is {max}"),
    ('JSConsumerBadDurableNameErr', 400, 10103, "durable name can not contain '.', '*', '>'"),
    ('JSConsumerStoreFailedErrF', 500, 10104, "error creating store for consumer: {err}"),
    ('JSConsumerExistingActiveErr', 400, 10105, "consumer already exists and is still active"),
    ('JSConsumerReplacementWithDifferentNameErr', 400, 10106, "consumer replacement durable config not the same"),
    ('JSConsumerDescriptionTooLongErrF', 400, 10107, "consumer description is too long, maximum allowed is {max}"),
    ('JSConsumerWithFlowControlNeedsHeartbeats', 400, 10108, "consumer with flow control also needs heartbeats"),
    ('JSStreamSealedErr', 400, 10109, "invalid operation on sealed stream"),
    ('JSStreamPurgeFailedF', 500, 10110, "{err}"),
    ('JSStreamRollupFailedF', 500, 10111, "{err}"),
    ('JSConsumerInvalidDeliverSubject', 400, 10112, "invalid push consumer deliver subject"),
    ('JSStreamMaxBytesRequired', 400, 10113, "account requires a stream config to have max bytes set"),
    ('JSConsumerMaxRequestBatchNegativeErr', 400, 10114, "consumer max request batch needs to be > 0"),
    ('JSConsumerMaxRequestExpiresTooSmall', 400, 10115, "consumer max request expires needs to be >= 1ms"),
    ('JSConsumerMaxDeliverBackoffErr', 400, 10116, "max deliver is required to be > length of backoff values"),
    ('JSStreamInfoMaxSubjectsErr', 500, 10117, "subject details would exceed maximum allowed"),
    ('JSStreamOfflineErr', 500, 10118, "stream is offline"),
    ('JSConsumerOfflineErr', 500, 10119, "consumer is offline"),
    ('JSNoLimitsErr', 400, 10120, "no JetStream default or applicable tiered limit present"),
    ('JSConsumerMaxPendingAckExcessErrF', 400, 10121, "consumer max ack pending exceeds system limit of {limit}"),
    ('JSStreamMaxStreamBytesExceeded', 400, 10122, "stream max bytes exceeds account limit max stream bytes"),
    ('JSStreamMoveAndScaleErr', 400, 10123, "can not move and scale a stream in a single update"),
    ('JSStreamMoveInProgressErr', 400, 10124, "stream move already in progress"),
    ('JSConsumerMaxRequestBatchExceededF', 400, 10125, "consumer max request batch exceeds server limit of {limit}"),
    ('JSConsumerReplicasExceedsStream', 400, 10126, "consumer config replica count exceeds parent stream"),
    ('JSConsumerNameContainsPathSeparatorsErr', 400, 10127, "Consumer name can not contain path separators"),
    ('JSStreamNameContainsPathSeparatorsErr', 400, 10128, "Stream name can not contain path separators"),
    ('JSStreamReconfigureNotInProgressErr', 400, 10129, "stream reconfiguration not in progress"),
    ('JSStreamNameExistRestoreFailedErr', 400, 10130, "stream name already in use, cannot restore"),
    ('JSConsumerCreateFilterSubjectMismatchErr', 400, 10131, "Consumer create request did not match filtered subject from create subject"),
    ('JSConsumerCreateDurableAndNameMismatch', 400, 10132, "Consumer Durable and Name have to be equal if both are provided"),
    ('JSReplicasCountCannotBeNegative', 400, 10133, "replicas count cannot be negative"),
    ('JSConsumerReplicasShouldMatchStream', 400, 10134, "consumer config replicas must match interest retention stream's replicas"),
    ('JSConsumerMetadataLengthErrF', 400, 10135, "consumer metadata exceeds maximum size of {limit}"),
    ('JSConsumerDuplicateFilterSubjects', 400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified"),
    ('JSConsumerMultipleFiltersNotAllowed', 400, 10137, "consumer with multiple subject filters cannot use subject based API"),
    ('JSConsumerOverlappingSubjectFilters', 400, 10138, "consumer subject filters cannot overlap"),
    ('JSConsumerEmptyFilter', 400, 10139, "consumer filter in FilterSubjects cannot be empty"),
    ('JSSourceDuplicateDetected', 400, 10140, "duplicate source configuration detected"),
    ('JSSourceInvalidStreamName', 400, 10141, "sourced stream name is invalid"),
    ('JSMirrorInvalidStreamName', 400, 10142, "mirrored stream name is invalid"),
    ('JSMirrorWithFirstSeqErr', 400, 10143, "stream mirrors can not have first sequence configured"),
    ('JSSourceMultipleFiltersNotAllowed', 400, 10144, "source with multiple subject transforms cannot also have a single subject filter"),
    ('JSSourceInvalidSubjectFilter', 400, 10145, "source transform source: {err}"),
    ('JSSourceInvalidTransformDestination', 400, 10146, "source transform: {err}"),
    ('JSSourceOverlappingSubjectFilters', 400, 10147, "source filters can not overlap"),
    ('JSConsumerAlreadyExists', 400, 10148, "consumer already exists"),
    ('JSConsumerDoesNotExist', 400, 10149, "consumer does not exist"),
    ('JSMirrorMultipleFiltersNotAllowed', 400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter"),
    ('JSMirrorInvalidSubjectFilter', 400, 10151, "mirror transform source: {err}"),
    ('JSMirrorOverlappingSubjectFilters', 400, 10152, "mirror subject filters can not overlap"),
    ('JSConsumerInactiveThresholdExcess', 400, 10153, "consumer inactive threshold exceeds system limit of {limit}"),
    ('JSMirrorInvalidTransformDestination', 400, 10154, "mirror transform: {err}"),
    ('JSStreamTransformInvalidSource', 400, 10155, "stream transform source: {err}"),
    ('JSStreamTransformInvalidDestination', 400, 10156, "stream transform: {err}"),
    ('JSPedanticErrF', 400, 10157, "pedantic mode: {err}"),
    ('JSStreamDuplicateMessageConflict', 409, 10158, "duplicate message id is in process"),
    ('JSConsumerPriorityPolicyWithoutGroup', 400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set"),
    ('JSConsumerInvalidPriorityGroupErr', 400, 10160, "Provided priority group does not exist for this consumer"),
    ('JSConsumerEmptyGroupName', 400, 10161, "Group name cannot be an empty string"),
    ('JSConsumerInvalidGroupNameErr', 400, 10162, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters"),
    ('JSStreamExpectedLastSeqPerSubjectNotReady', 503, 10163, "expected last sequence per subject temporarily unavailable"),
    ('JSStreamWrongLastSequenceConstantErr', 400, 10164, "wrong last sequence"),
    ('JSMessageTTLInvalidErr', 400, 10165, "invalid per-message TTL"),
    ('JSMessageTTLDisabledErr', 400, 10166, "per-message TTL is disabled"),
    ('JSStreamTooManyRequests', 429, 10167, "too many requests"),
    ('JSMessageIncrDisabledErr', 400, 10168, "message counters is disabled"),
    ('JSMessageIncrMissingErr', 400, 10169, "message counter increment is missing"),
    ('JSMessageIncrPayloadErr', 400, 10170, "message counter has payload"),
    ('JSMessageIncrInvalidErr', 400, 10171, "message counter increment is invalid"),
    ('JSMessageCounterBrokenErr', 400, 10172, "message counter is broken"),
    ('JSMirrorWithCountersErr', 400, 10173, "stream mirrors can not also calculate counters"),
    ('JSAtomicPublishDisabledErr', 400, 10174, "atomic publish is disabled"),
    ('JSAtomicPublishMissingSeqErr', 400, 10175, "atomic publish sequence is missing"),
    ('JSAtomicPublishIncompleteBatchErr', 400, 10176, "atomic publish batch is incomplete"),
    ('JSAtomicPublishUnsupportedHeaderBatchErr', 400, 10177, "atomic publish unsupported header used: {header}"),
    ('JSConsumerPushWithPriorityGroupErr', 400, 10178, "priority groups can not be used with push consumers"),
    ('JSAtomicPublishInvalidBatchIDErr', 400, 10179, "atomic publish batch ID is invalid"),
    ('JSStreamMinLastSeqErr', 412, 10180, "min last sequence"),
    ('JSConsumerAckPolicyInvalidErr', 400, 10181, "consumer ack policy invalid"),
    ('JSConsumerReplayPolicyInvalidErr', 400, 10182, "consumer replay policy invalid"),
    ('JSConsumerAckWaitNegativeErr', 400, 10183, "consumer ack wait needs to be positive"),
    ('JSConsumerBackOffNegativeErr', 400, 10184, "consumer backoff needs to be positive"),
    ('JSRequiredApiLevelErr', 412, 10185, "JetStream minimum api level required"),
    ('JSMirrorWithMsgSchedulesErr', 400, 10186, "stream mirrors can not also schedule messages"),
    ('JSSourceWithMsgSchedulesErr', 400, 10187, "stream source can not also schedule messages"),
    ('JSMessageSchedulesDisabledErr', 400, 10188, "message schedules is disabled"),
    ('JSMessageSchedulesPatternInvalidErr', 400, 10189, "message schedules pattern is invalid"),
    ('JSMessageSchedulesTargetInvalidErr', 400, 10190, "message schedules target is invalid"),
    ('JSMessageSchedulesTTLInvalidErr', 400, 10191, "message schedules invalid per-message TTL"),
    ('JSMessageSchedulesRollupInvalidErr', 400, 10192, "message schedules invalid rollup"),
    ('JSStreamExpectedLastSeqPerSubjectInvalid', 400, 10193, "missing sequence for expected last sequence per subject"),
    ('JSStreamOfflineReasonErrF', 500, 10194, "stream is offline: {err}"),
    ('JSConsumerOfflineReasonErrF', 500, 10195, "consumer is offline: {err}"),
    ('JSConsumerPriorityGroupWithPolicyNone', 400, 10196, "consumer can not have priority groups when policy is none"),
    ('JSConsumerPinnedTTLWithoutPriorityPolicyNone', 400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none"),
    ('JSMirrorWithAtomicPublishErr', 400, 10198, "stream mirrors can not also use atomic publishing"),
    ('JSAtomicPublishTooLargeBatchErrF', 400, 10199, "atomic publish batch is too large: {size}"),
    ('JSAtomicPublishInvalidBatchCommitErr', 400, 10200, "atomic publish batch commit is invalid"),
    ('JSAtomicPublishContainsDuplicateMessageErr', 400, 10201, "atomic publish batch contains duplicate message id"),
    ('JSClusterServerMemberChangeInflightErr', 400, 10202, "cluster member change is in progress"),
    ('JSMessageSchedulesSourceInvalidErr', 400, 10203, "message schedules source is invalid"),
    ('JSConsumerInvalidResetErr', 400, 10204, "invalid reset: {err}"),
    ('JSBatchPublishDisabledErr', 400, 10205, "batch publish is disabled"),
    ('JSBatchPublishInvalidPatternErr', 400, 10206, "batch publish pattern is invalid"),
    ('JSBatchPublishInvalidBatchIDErr', 400, 10207, "batch publish ID is invalid"),
    ('JSBatchPublishUnknownBatchIDErr', 400, 10208, "batch publish ID unknown"),
    ('JSMirrorWithBatchPublishErr', 400, 10209, "stream mirrors can not also use batch publishing"),
    ('JSAtomicPublishTooManyInflight', 429, 10210, "atomic publish too many inflight"),
    ('JSBatchPublishTooManyInflight', 429, 10211, "batch publish too many inflight"),
    ('JSMessageSchedulesSchedulerInvalidErr', 400, 10212, "message schedules invalid scheduler"),
    ('JSMirrorDurableConsumerCfgInvalid', 400, 10213, "stream mirror consumer config is invalid"),
    ('JSMirrorConsumerRequiresAckFCErr', 400, 10214, "stream mirror consumer requires flow control ack policy"),
    ('JSSourceDurableConsumerCfgInvalid', 400, 10215, "stream source consumer config is invalid"),
    ('JSSourceDurableConsumerDuplicateDetected', 400, 10216, "duplicate stream source consumer detected"),
    ('JSSourceConsumerRequiresAckFCErr', 400, 10217, "stream source consumer requires flow control ack policy"),
    ('JSConsumerAckFCRequiresPushErr', 400, 10218, "flow control ack policy requires a push based consumer"),
    ('JSConsumerAckFCRequiresFCErr', 400, 10219, "flow control ack policy requires flow control"),
    ('JSConsumerAckFCRequiresMaxAckPendingErr', 400, 10220, "flow control ack policy requires max ack pending"),
    ('JSConsumerAckFCRequiresNoAckWaitErr', 400, 10221, "flow control ack policy requires unset ack wait"),
    ('JSConsumerAckFCRequiresNoMaxDeliverErr', 400, 10222, "flow control ack policy requires unset max deliver"),
    ('JSMessageSchedulesTimeZoneInvalidErr', 400, 10223, "message schedules time zone is invalid"),
    ('JSClusterRescueErr', 400, 10224, "JetStream system rescue not applied: {err}"),
    ('JSConsumerStreamIdentityMismatchF', 400, 10225, "consumer's stream identity does not match: {msg}"),
    ('JSStreamReconfigureInProgressErr', 400, 10226, "stream reconfiguration already in progress"),
    ('JSMessageSourceHdrNotAllowedErr', 400, 10227, "message stream source header is not allowed"),
)

_BY_CONSTANT: dict[str, tuple[int, int, str]] = {c: (code, ec, d) for c, code, ec, d in ERRORS}
_BY_ERR_CODE: dict[int, tuple[str, int, str]] = {ec: (c, code, d) for c, code, ec, d in ERRORS}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")

_GO_UNITS = (("h", 3600 * 10**9), ("m", 60 * 10**9))


def _text(value: Any) -> str:
    """The text nats-server substitutes for a placeholder argument (Go ``%v``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseException):
        return str(value)
    return str(value)


class JSApiError(Exception):
    """One JetStream API error: ``code`` (HTTP-like), ``err_code``, ``description``.

    ``constant`` is nats-server's name for it (e.g. ``"JSStreamNotFoundErr"``),
    or ``""`` when built from a bare triple. ``str(err)`` is
    ``"<description> (<err_code>)"`` as nats-server's ``ApiError.Error()``.
    """

    def __init__(self, code: int, err_code: int, description: str, constant: str = "") -> None:
        super().__init__(f"{description} ({err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description
        self.constant = constant

    def to_json(self) -> dict[str, Any]:
        """``{"code", "err_code", "description"}`` -- exactly these keys (nats-py ``APIError(**err)``)."""
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JSApiError:
        """Read an ``ApiError`` object (e.g. a response's ``"error"``); unknown keys are ignored."""
        code = int(data.get("code", 0))
        err_code = int(data.get("err_code", 0))
        constant = _BY_ERR_CODE.get(err_code, ("", 0, ""))[0]
        return cls(code, err_code, str(data.get("description", "")), constant)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JSApiError):
            return NotImplemented
        return self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash((self.code, self.err_code, self.description))

    def __repr__(self) -> str:
        return f"JSApiError({self.code}, {self.err_code}, {self.description!r})"


def api_error(constant: str, **args: Any) -> JSApiError:
    """Build nats-server's error ``constant`` with its placeholders filled from ``args``.

    ``api_error("JSStreamWrongLastSequenceErrF", seq=5)`` ->
    ``JSApiError(400, 10071, "wrong last sequence: 5")``. A placeholder without an
    argument is left as is, as Go's ``strings.Replacer`` does. Raises ``KeyError``
    for an unknown constant.
    """
    code, err_code, template = _BY_CONSTANT[constant]
    if args:
        texts = {k: _text(v) for k, v in args.items()}
        template = _PLACEHOLDER.sub(lambda m: texts.get(m.group(1), m.group(0)), template)
    return JSApiError(code, err_code, template, constant)


def by_err_code(err_code: int, **args: Any) -> JSApiError:
    """Build the error whose ``err_code`` is ``err_code`` (see :func:`api_error`); ``KeyError`` if unknown."""
    return api_error(_BY_ERR_CODE[err_code][0], **args)


# --- Named constructors for the errors jetraft answers most -------------------------
# Each returns a fresh JSApiError; the source name is nats-server's constant.


def bad_request() -> JSApiError:
    """10003 (400) "bad request" -- JSBadRequestErr."""
    return api_error("JSBadRequestErr")


def invalid_json(err: Any) -> JSApiError:
    """10025 (400) "invalid JSON: <err>" -- JSInvalidJSONErr (``err`` is the decoder's message)."""
    return api_error("JSInvalidJSONErr", err=err)


def not_empty_request() -> JSApiError:
    """10038 (400) "expected an empty request payload" -- JSNotEmptyRequestErr."""
    return api_error("JSNotEmptyRequestErr")


def not_enabled() -> JSApiError:
    """10076 (503) "JetStream not enabled" -- JSNotEnabledErr."""
    return api_error("JSNotEnabledErr")


def not_enabled_for_account() -> JSApiError:
    """10039 (503) "JetStream not enabled for account" -- JSNotEnabledForAccountErr."""
    return api_error("JSNotEnabledForAccountErr")


def insufficient_resources() -> JSApiError:
    """10023 (503) "insufficient resources" -- JSInsufficientResourcesErr."""
    return api_error("JSInsufficientResourcesErr")


def storage_resources_exceeded() -> JSApiError:
    """10047 (500) "insufficient storage resources available" -- JSStorageResourcesExceededErr."""
    return api_error("JSStorageResourcesExceededErr")


def memory_resources_exceeded() -> JSApiError:
    """10028 (500) "insufficient memory resources available" -- JSMemoryResourcesExceededErr."""
    return api_error("JSMemoryResourcesExceededErr")


def account_resources_exceeded() -> JSApiError:
    """10002 (400) "resource limits exceeded for account" -- JSAccountResourcesExceededErr."""
    return api_error("JSAccountResourcesExceededErr")


def maximum_streams_limit() -> JSApiError:
    """10027 (400) "maximum number of streams reached" -- JSMaximumStreamsLimitErr."""
    return api_error("JSMaximumStreamsLimitErr")


def maximum_consumers_limit() -> JSApiError:
    """10026 (400) "maximum consumers limit reached" -- JSMaximumConsumersLimitErr."""
    return api_error("JSMaximumConsumersLimitErr")


def no_limits() -> JSApiError:
    """10120 (400) "no JetStream default or applicable tiered limit present" -- JSNoLimitsErr."""
    return api_error("JSNoLimitsErr")


# Streams


def stream_not_found() -> JSApiError:
    """10059 (404) "stream not found" -- JSStreamNotFoundErr."""
    return api_error("JSStreamNotFoundErr")


def stream_name_exist() -> JSApiError:
    """10058 (400) "stream name already in use with a different configuration" -- JSStreamNameExistErr."""
    return api_error("JSStreamNameExistErr")


def stream_name_mismatch() -> JSApiError:
    """10056 (400) "stream name in subject does not match request" -- JSStreamMismatchErr."""
    return api_error("JSStreamMismatchErr")


def stream_name_contains_path_separators() -> JSApiError:
    """10128 (400) "Stream name can not contain path separators" -- JSStreamNameContainsPathSeparatorsErr."""
    return api_error("JSStreamNameContainsPathSeparatorsErr")


def subjects_overlap() -> JSApiError:
    """10065 (400) "subjects overlap with an existing stream" -- JSStreamSubjectOverlapErr."""
    return api_error("JSStreamSubjectOverlapErr")


class UnsupportedSetting(JSApiError):
    """The refusal of a stream or consumer setting jetraft does not act on (never stored
    and ignored): nats-server's error for an invalid configuration, its description
    ``"<setting> is not supported by jetraft"``. On the wire a plain :class:`JSApiError`."""


#: The end of an :class:`UnsupportedSetting` description.
UNSUPPORTED = "is not supported by jetraft"


def unsupported_stream_setting(what: str) -> UnsupportedSetting:
    """10052 (500) "<what> is not supported by jetraft" -- JSStreamInvalidConfigF, as
    nats-server's checkStreamCfg refuses an invalid stream configuration."""
    err = api_error("JSStreamInvalidConfigF", err=f"{what} {UNSUPPORTED}")
    return UnsupportedSetting(err.code, err.err_code, err.description, err.constant)


def unsupported_consumer_setting(what: str) -> UnsupportedSetting:
    """10012 (500) "<what> is not supported by jetraft" -- JSConsumerCreateErrF,
    nats-server's consumer creation failure."""
    err = api_error("JSConsumerCreateErrF", err=f"{what} {UNSUPPORTED}")
    return UnsupportedSetting(err.code, err.err_code, err.description, err.constant)


def stream_invalid_config(err: Any) -> JSApiError:
    """10052 (500) "<err>" -- JSStreamInvalidConfigF (checkStreamCfg's refusals)."""
    return api_error("JSStreamInvalidConfigF", err=err)


def stream_create(err: Any) -> JSApiError:
    """10049 (500) "<err>" -- JSStreamCreateErrF."""
    return api_error("JSStreamCreateErrF", err=err)


def stream_update(err: Any) -> JSApiError:
    """10069 (500) "<err>" -- JSStreamUpdateErrF."""
    return api_error("JSStreamUpdateErrF", err=err)


def stream_delete(err: Any) -> JSApiError:
    """10050 (500) "<err>" -- JSStreamDeleteErrF."""
    return api_error("JSStreamDeleteErrF", err=err)


def stream_general(err: Any) -> JSApiError:
    """10051 (500) "<err>" -- JSStreamGeneralErrorF."""
    return api_error("JSStreamGeneralErrorF", err=err)


def stream_purge_failed(err: Any) -> JSApiError:
    """10110 (500) "<err>" -- JSStreamPurgeFailedF."""
    return api_error("JSStreamPurgeFailedF", err=err)


def stream_msg_delete_failed(err: Any) -> JSApiError:
    """10057 (500) "<err>" -- JSStreamMsgDeleteFailedF."""
    return api_error("JSStreamMsgDeleteFailedF", err=err)


def stream_store_failed(err: Any) -> JSApiError:
    """10077 (503) "<err>" -- JSStreamStoreFailedF."""
    return api_error("JSStreamStoreFailedF", err=err)


def stream_replicas_not_supported() -> JSApiError:
    """10074 (500) "replicas > 1 not supported in non-clustered mode" -- JSStreamReplicasNotSupportedErr."""
    return api_error("JSStreamReplicasNotSupportedErr")


def stream_replicas_not_updatable() -> JSApiError:
    """10061 (400) "Replicas configuration can not be updated" -- JSStreamReplicasNotUpdatableErr."""
    return api_error("JSStreamReplicasNotUpdatableErr")


def replicas_count_negative() -> JSApiError:
    """10133 (400) "replicas count cannot be negative" -- JSReplicasCountCannotBeNegative."""
    return api_error("JSReplicasCountCannotBeNegative")


def stream_mirror_not_updatable() -> JSApiError:
    """10055 (400) "stream mirror configuration can not be updated" -- JSStreamMirrorNotUpdatableErr."""
    return api_error("JSStreamMirrorNotUpdatableErr")


def stream_sealed() -> JSApiError:
    """10109 (400) "invalid operation on sealed stream" -- JSStreamSealedErr."""
    return api_error("JSStreamSealedErr")


def stream_offline() -> JSApiError:
    """10118 (500) "stream is offline" -- JSStreamOfflineErr."""
    return api_error("JSStreamOfflineErr")


def stream_max_bytes_required() -> JSApiError:
    """10113 (400) "account requires a stream config to have max bytes set" -- JSStreamMaxBytesRequired."""
    return api_error("JSStreamMaxBytesRequired")


def stream_max_stream_bytes_exceeded() -> JSApiError:
    """10122 (400) "stream max bytes exceeds account limit max stream bytes" -- JSStreamMaxStreamBytesExceeded."""
    return api_error("JSStreamMaxStreamBytesExceeded")


# Messages and publish expectations


def no_message_found() -> JSApiError:
    """10037 (404) "no message found" -- JSNoMessageFoundErr."""
    return api_error("JSNoMessageFoundErr")


def sequence_not_found(seq: int) -> JSApiError:
    """10043 (400) "sequence <seq> not found" -- JSSequenceNotFoundErrF."""
    return api_error("JSSequenceNotFoundErrF", seq=seq)


def message_exceeds_maximum() -> JSApiError:
    """10054 (400) "message size exceeds maximum allowed" -- JSStreamMessageExceedsMaximumErr."""
    return api_error("JSStreamMessageExceedsMaximumErr")


def header_exceeds_maximum() -> JSApiError:
    """10097 (400) "header size exceeds maximum allowed of 64k" -- JSStreamHeaderExceedsMaximumErr."""
    return api_error("JSStreamHeaderExceedsMaximumErr")


def stream_not_match() -> JSApiError:
    """10060 (400) "expected stream does not match" -- JSStreamNotMatchErr (Nats-Expected-Stream)."""
    return api_error("JSStreamNotMatchErr")


def wrong_last_sequence(seq: int) -> JSApiError:
    """10071 (400) "wrong last sequence: <seq>" -- JSStreamWrongLastSequenceErrF."""
    return api_error("JSStreamWrongLastSequenceErrF", seq=seq)


def wrong_last_sequence_constant() -> JSApiError:
    """10164 (400) "wrong last sequence" -- JSStreamWrongLastSequenceConstantErr."""
    return api_error("JSStreamWrongLastSequenceConstantErr")


def wrong_last_msg_id(msg_id: str) -> JSApiError:
    """10070 (400) "wrong last msg ID: <id>" -- JSStreamWrongLastMsgIDErrF."""
    return api_error("JSStreamWrongLastMsgIDErrF", id=msg_id)


def duplicate_message_conflict() -> JSApiError:
    """10158 (409) "duplicate message id is in process" -- JSStreamDuplicateMessageConflict."""
    return api_error("JSStreamDuplicateMessageConflict")


def message_ttl_invalid() -> JSApiError:
    """10165 (400) "invalid per-message TTL" -- JSMessageTTLInvalidErr."""
    return api_error("JSMessageTTLInvalidErr")


def message_ttl_disabled() -> JSApiError:
    """10166 (400) "per-message TTL is disabled" -- JSMessageTTLDisabledErr."""
    return api_error("JSMessageTTLDisabledErr")


# Consumers


def consumer_not_found() -> JSApiError:
    """10014 (404) "consumer not found" -- JSConsumerNotFoundErr."""
    return api_error("JSConsumerNotFoundErr")


def consumer_name_exist() -> JSApiError:
    """10013 (400) "consumer name already in use" -- JSConsumerNameExistErr."""
    return api_error("JSConsumerNameExistErr")


def consumer_already_exists() -> JSApiError:
    """10148 (400) "consumer already exists" -- JSConsumerAlreadyExists (action create)."""
    return api_error("JSConsumerAlreadyExists")


def consumer_does_not_exist() -> JSApiError:
    """10149 (400) "consumer does not exist" -- JSConsumerDoesNotExist (action update)."""
    return api_error("JSConsumerDoesNotExist")


def consumer_create(err: Any) -> JSApiError:
    """10012 (500) "<err>" -- JSConsumerCreateErrF."""
    return api_error("JSConsumerCreateErrF", err=err)


def consumer_config_required() -> JSApiError:
    """10078 (400) "consumer config required" -- JSConsumerConfigRequiredErr."""
    return api_error("JSConsumerConfigRequiredErr")


def consumer_name_too_long(max_len: int) -> JSApiError:
    """10102 (400) "consumer name is too long, maximum allowed is <max>" -- JSConsumerNameTooLongErrF."""
    return api_error("JSConsumerNameTooLongErrF", max=max_len)


def consumer_existing_active() -> JSApiError:
    """10105 (400) "consumer already exists and is still active" -- JSConsumerExistingActiveErr."""
    return api_error("JSConsumerExistingActiveErr")


def consumer_offline() -> JSApiError:
    """10119 (500) "consumer is offline" -- JSConsumerOfflineErr."""
    return api_error("JSConsumerOfflineErr")


# Cluster, placement, peers


def cluster_not_available() -> JSApiError:
    """10008 (503) "JetStream system temporarily unavailable" -- JSClusterNotAvailErr."""
    return api_error("JSClusterNotAvailErr")


def cluster_not_leader() -> JSApiError:
    """10009 (500) "JetStream cluster can not handle request" -- JSClusterNotLeaderErr."""
    return api_error("JSClusterNotLeaderErr")


def cluster_not_active() -> JSApiError:
    """10006 (500) "JetStream not in clustered mode" -- JSClusterNotActiveErr."""
    return api_error("JSClusterNotActiveErr")


def cluster_not_assigned() -> JSApiError:
    """10007 (500) "JetStream cluster not assigned to this server" -- JSClusterNotAssignedErr."""
    return api_error("JSClusterNotAssignedErr")


def cluster_required() -> JSApiError:
    """10010 (503) "JetStream clustering support required" -- JSClusterRequiredErr."""
    return api_error("JSClusterRequiredErr")


def cluster_incomplete() -> JSApiError:
    """10004 (503) "incomplete results" -- JSClusterIncompleteErr."""
    return api_error("JSClusterIncompleteErr")


def cluster_tags() -> JSApiError:
    """10011 (400) "tags placement not supported for operation" -- JSClusterTagsErr."""
    return api_error("JSClusterTagsErr")


def cluster_no_peers(err: Any) -> JSApiError:
    """10005 (400) "<err>" -- JSClusterNoPeersErrF, e.g. "no suitable peers for placement"."""
    return api_error("JSClusterNoPeersErrF", err=err)


def cluster_peer_not_member() -> JSApiError:
    """10040 (400) "peer not a member" -- JSClusterPeerNotMemberErr."""
    return api_error("JSClusterPeerNotMemberErr")


def cluster_server_not_member() -> JSApiError:
    """10044 (400) "server is not a member of the cluster" -- JSClusterServerNotMemberErr."""
    return api_error("JSClusterServerNotMemberErr")


def cluster_member_change_inflight() -> JSApiError:
    """10202 (400) "cluster member change is in progress" -- JSClusterServerMemberChangeInflightErr."""
    return api_error("JSClusterServerMemberChangeInflightErr")


def cluster_unsupported_feature() -> JSApiError:
    """10036 (503) "not currently supported in clustered mode" -- JSClusterUnSupportFeatureErr."""
    return api_error("JSClusterUnSupportFeatureErr")


def raft_general(err: Any) -> JSApiError:
    """10041 (500) "<err>" -- JSRaftGeneralErrF."""
    return api_error("JSRaftGeneralErrF", err=err)


def peer_remap(reason: str = "") -> JSApiError:
    """10075 (503) "peer remap failed" -- JSPeerRemapErr; with ``reason``, the description
    is ``"peer remap failed: <reason>"`` (nats-server answers the bare text; jetraft says
    why, in the words of JSClusterNoPeersErrF's placement reasons)."""
    err = api_error("JSPeerRemapErr")
    if reason:
        err = JSApiError(err.code, err.err_code, f"{err.description}: {reason}", err.constant)
    return err


def stream_assignment(err: Any) -> JSApiError:
    """10048 (500) "<err>" -- JSStreamAssignmentErrF."""
    return api_error("JSStreamAssignmentErrF", err=err)


def no_account() -> JSApiError:
    """10035 (503) "account not found" -- JSNoAccountErr."""
    return api_error("JSNoAccountErr")


# --- Response ``type`` strings (server/jetstream_api.go ``JSApi*ResponseType``) -----

_TYPE_PREFIX = "io.nats.jetstream.api.v1."
SYSTEM_RESPONSE = _TYPE_PREFIX + "system_response"
ACCOUNT_INFO_RESPONSE = _TYPE_PREFIX + "account_info_response"
ACCOUNT_PURGE_RESPONSE = _TYPE_PREFIX + "account_purge_response"
STREAM_CREATE_RESPONSE = _TYPE_PREFIX + "stream_create_response"
STREAM_UPDATE_RESPONSE = _TYPE_PREFIX + "stream_update_response"
STREAM_DELETE_RESPONSE = _TYPE_PREFIX + "stream_delete_response"
STREAM_INFO_RESPONSE = _TYPE_PREFIX + "stream_info_response"
STREAM_NAMES_RESPONSE = _TYPE_PREFIX + "stream_names_response"
STREAM_LIST_RESPONSE = _TYPE_PREFIX + "stream_list_response"
STREAM_PURGE_RESPONSE = _TYPE_PREFIX + "stream_purge_response"
STREAM_MSG_DELETE_RESPONSE = _TYPE_PREFIX + "stream_msg_delete_response"
STREAM_MSG_GET_RESPONSE = _TYPE_PREFIX + "stream_msg_get_response"
STREAM_SNAPSHOT_RESPONSE = _TYPE_PREFIX + "stream_snapshot_response"
STREAM_RESTORE_RESPONSE = _TYPE_PREFIX + "stream_restore_response"
STREAM_REMOVE_PEER_RESPONSE = _TYPE_PREFIX + "stream_remove_peer_response"
STREAM_LEADER_STEPDOWN_RESPONSE = _TYPE_PREFIX + "stream_leader_stepdown_response"
CONSUMER_CREATE_RESPONSE = _TYPE_PREFIX + "consumer_create_response"
CONSUMER_DELETE_RESPONSE = _TYPE_PREFIX + "consumer_delete_response"
CONSUMER_INFO_RESPONSE = _TYPE_PREFIX + "consumer_info_response"
CONSUMER_NAMES_RESPONSE = _TYPE_PREFIX + "consumer_names_response"
CONSUMER_LIST_RESPONSE = _TYPE_PREFIX + "consumer_list_response"
CONSUMER_PAUSE_RESPONSE = _TYPE_PREFIX + "consumer_pause_response"
CONSUMER_UNPIN_RESPONSE = _TYPE_PREFIX + "consumer_unpin_response"
CONSUMER_RESET_RESPONSE = _TYPE_PREFIX + "consumer_reset_response"
CONSUMER_LEADER_STEPDOWN_RESPONSE = _TYPE_PREFIX + "consumer_leader_stepdown_response"
META_LEADER_STEPDOWN_RESPONSE = _TYPE_PREFIX + "meta_leader_stepdown_response"
META_SERVER_REMOVE_RESPONSE = _TYPE_PREFIX + "meta_server_remove_response"
META_RESCUE_RESPONSE = _TYPE_PREFIX + "meta_rescue_response"


def error_response(type_: str, err: JSApiError) -> dict[str, Any]:
    """An error reply: ``{"type": type_, "error": err.to_json()}`` (ApiResponse with Error set)."""
    return {"type": type_, "error": err.to_json()}
