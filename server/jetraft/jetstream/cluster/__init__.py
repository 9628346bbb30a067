"""Clustered JetStream's decisions, with no I/O: :class:`ClusterController` (its parts are
the modules of this package), the actions it returns and the view it reads
(:mod:`.actions`), and the meta group's state machine (:mod:`.meta_machine`)."""

from jetraft.jetstream.cluster.actions import (
    AppFrame,
    ChangePeer,
    CloseMeta,
    CloseReplica,
    ClusterView,
    Emit,
    Forward,
    ForwardedRequest,
    GroupView,
    Key,
    OpenMeta,
    OpenReplica,
    Propose,
    Read,
    Refusal,
    RemoveServer,
    RoutePeerView,
    Send,
    SetInterest,
    StepDown,
    ToMetaLeader,
    decode_forward,
    decode_reply_frame,
    encode_reply_frame,
)
from jetraft.jetstream.cluster.controller import ClusterController
from jetraft.jetstream.cluster.core import (
    BOOTSTRAP_SETTLE_NS,
    EXPIRY_CHECK_NS,
    MAX_HOPS,
    META_GROUP,
    RESTORE_LOST_NS,
    RESTORE_PROPOSED_NS,
    StartRestore,
    zone_of,
)
from jetraft.jetstream.cluster.meta_machine import MetaMachine
from jetraft.jetstream.cluster.sources import ANSWER_FRAME, FETCH_FRAME

__all__ = [
    "ANSWER_FRAME", "FETCH_FRAME", "BOOTSTRAP_SETTLE_NS", "EXPIRY_CHECK_NS", "MAX_HOPS", "META_GROUP", "RESTORE_LOST_NS",
    "RESTORE_PROPOSED_NS", "AppFrame", "ChangePeer", "CloseMeta", "CloseReplica", "ClusterController",
    "ClusterView", "Emit", "Forward", "ForwardedRequest", "GroupView", "Key", "MetaMachine",
    "OpenMeta", "OpenReplica", "Propose", "Read", "Refusal", "RemoveServer", "RoutePeerView",
    "Send", "SetInterest", "StartRestore", "StepDown", "ToMetaLeader", "decode_forward",
    "decode_reply_frame", "encode_reply_frame", "zone_of",
]
