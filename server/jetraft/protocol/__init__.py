"""Sans-IO codecs for the NATS client protocol, and the subject index.

Stdlib only; imports nothing else from jetraft; does no I/O. See
:mod:`jetraft.protocol.client` (parser and encoders) and
:mod:`jetraft.protocol.subjects` (subject rules and ``SubjectIndex``).
"""

from jetraft.protocol.client import (
    ERR_INVALID_PUBLISH_SUBJECT,
    ERR_INVALID_SUBJECT,
    ERR_MAX_CONTROL_LINE,
    ERR_MAX_PAYLOAD,
    ERR_UNKNOWN_OP,
    NO_RESPONDERS_HEADERS,
    OK,
    PING,
    PONG,
    ClientParser,
    Command,
    Connect,
    Ping,
    Pong,
    ProtocolViolation,
    Pub,
    Sub,
    Unsub,
    encode_err,
    encode_info,
    encode_msg,
    no_responders_headers,
    status_headers,
)
from jetraft.protocol.subjects import (
    Match,
    SubjectIndex,
    is_valid_literal_subject,
    is_valid_subject,
    subject_matches,
    subjects_overlap,
)

__all__ = [
    "ERR_INVALID_PUBLISH_SUBJECT",
    "ERR_INVALID_SUBJECT",
    "ERR_MAX_CONTROL_LINE",
    "ERR_MAX_PAYLOAD",
    "ERR_UNKNOWN_OP",
    "NO_RESPONDERS_HEADERS",
    "OK",
    "PING",
    "PONG",
    "ClientParser",
    "Command",
    "Connect",
    "Match",
    "Ping",
    "Pong",
    "ProtocolViolation",
    "Pub",
    "Sub",
    "SubjectIndex",
    "Unsub",
    "encode_err",
    "encode_info",
    "encode_msg",
    "is_valid_literal_subject",
    "is_valid_subject",
    "no_responders_headers",
    "status_headers",
    "subject_matches",
    "subjects_overlap",
]
