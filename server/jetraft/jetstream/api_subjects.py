"""What a ``$JS.API`` subject names: its kind, the stream it is about, its response type.

Shared by the single server (``net/jetstream/service.py``) and the cluster controller
(:mod:`jetraft.jetstream.cluster`). Subjects as nats-server's jetstream_api.go defines them.
"""

from __future__ import annotations

import hashlib

from jetraft.jetstream import errors as E

__all__ = ["ack_stream", "api_kind", "domain_api_subject", "peer_hash", "response_type", "stream_of"]

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def peer_hash(name: str) -> str:
    """nats-server's 8-character peer id of a server name (events.go getHash: the first 8
    bytes of its SHA-256, each mapped onto 62 digits)."""
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(_DIGITS[b % 62] for b in digest[:8])


#: The API areas a JetStream domain's prefix reaches: ``$JS.<domain>.API.<area>.>`` is
#: mapped to ``$JS.API.<area>.>`` (nats-server jetstream_api.go generateJSMappingTable).
_DOMAIN_API_AREAS = frozenset(("STREAM", "CONSUMER", "DIRECT", "META", "SERVER", "ACCOUNT"))


def domain_api_subject(subject: str, domain: str) -> str | None:
    """The subject that ``subject``, published in an account JetStream serves, is mapped to
    when the server's JetStream domain is ``domain``; None when it is not mapped. As the
    account mappings nats-server adds (jetstream.go enableAllJetStreamServiceImportsAndMappings,
    jetstream_api.go generateJSMappingTable): ``$JS.<domain>.API.INFO`` -> ``$JS.API.INFO``,
    ``$JS.<domain>.API.<area>.>`` -> ``$JS.API.<area>.>`` for STREAM, CONSUMER, DIRECT, META,
    SERVER and ACCOUNT, and ``$JS.<domain>.API.$KV.>`` / ``$OBJ.>`` -> ``$KV.>`` / ``$OBJ.>``
    (the domain-qualified prefix of nats clients' ``jetstream(domain=...)``). Anything else
    under ``$JS.<domain>.API.`` is left as it is (delivered to its own subscribers only)."""
    prefix = f"$JS.{domain}.API."
    if not domain or not subject.startswith(prefix):
        return None
    rest = subject[len(prefix):]
    if rest == "INFO":
        return "$JS.API.INFO"
    area, dot, tail = rest.partition(".")
    if not dot or not tail:
        return None
    if area in _DOMAIN_API_AREAS:
        return "$JS.API." + rest
    if area in ("$KV", "$OBJ"):
        return rest
    return None


def ack_stream(subject: str) -> str:
    """The stream named by an ack or flow-control subject: ``$JS.ACK.<stream>.<consumer>...``
    (v1), ``$JS.ACK.<domain>.<account hash>.<stream>...`` (v2) or ``$JS.FC.<stream>...``."""
    ack = subject.startswith("$JS.ACK.")
    rel = subject[len("$JS.ACK." if ack else "$JS.FC."):].split(".")
    if ack and len(rel) >= 9 and len(rel) != 7:
        return rel[2]
    return rel[0]


def api_kind(tokens: list[str]) -> str:
    """``AREA.OP`` of an API subject split on dots; ``STREAM.MSG.GET``/``STREAM.MSG.DELETE``
    keep the verb (``["$JS", "API", "STREAM", "INFO", "s"]`` -> ``"STREAM.INFO"``)."""
    if tokens[2:4] == ["STREAM", "MSG"] and len(tokens) > 4:
        return ".".join(tokens[2:5])
    return ".".join(tokens[2:4])


def stream_of(tokens: list[str]) -> str | None:
    """The stream an API subject (split on dots) is about, or None."""
    kind = api_kind(tokens)
    n = len(tokens)
    if kind in ("STREAM.MSG.GET", "STREAM.MSG.DELETE") and n == 6:
        return tokens[5]
    if kind in ("CONSUMER.MSG",) and n == 7:
        return tokens[5]
    if kind == "CONSUMER.DURABLE" and n >= 6:
        return tokens[5]
    if kind == "CONSUMER.LEADER" and n == 7:
        return tokens[5]
    if kind == "STREAM.LEADER" and n == 6:
        return tokens[5]
    if kind == "STREAM.PEER" and n == 6:
        return tokens[5]
    if n >= 5 and tokens[2] in ("STREAM", "CONSUMER", "DIRECT"):
        return tokens[4]
    return None


_RESPONSE_TYPES = {
    "STREAM.CREATE": E.STREAM_CREATE_RESPONSE, "STREAM.UPDATE": E.STREAM_UPDATE_RESPONSE,
    "STREAM.DELETE": E.STREAM_DELETE_RESPONSE, "STREAM.INFO": E.STREAM_INFO_RESPONSE,
    "STREAM.NAMES": E.STREAM_NAMES_RESPONSE, "STREAM.LIST": E.STREAM_LIST_RESPONSE,
    "STREAM.PURGE": E.STREAM_PURGE_RESPONSE, "STREAM.PEER": E.STREAM_REMOVE_PEER_RESPONSE,
    "STREAM.LEADER": E.STREAM_LEADER_STEPDOWN_RESPONSE,
    "CONSUMER.CREATE": E.CONSUMER_CREATE_RESPONSE, "CONSUMER.DURABLE": E.CONSUMER_CREATE_RESPONSE,
    "CONSUMER.DELETE": E.CONSUMER_DELETE_RESPONSE, "CONSUMER.INFO": E.CONSUMER_INFO_RESPONSE,
    "CONSUMER.NAMES": E.CONSUMER_NAMES_RESPONSE, "CONSUMER.LIST": E.CONSUMER_LIST_RESPONSE,
    "CONSUMER.LEADER": E.CONSUMER_LEADER_STEPDOWN_RESPONSE, "CONSUMER.RESET": E.CONSUMER_RESET_RESPONSE,
    "CONSUMER.PAUSE": E.CONSUMER_PAUSE_RESPONSE, "CONSUMER.UNPIN": E.CONSUMER_UNPIN_RESPONSE,
}


def response_type(tokens: list[str]) -> str:
    """The ``type`` of the response to an API subject split on dots (nats-server's
    ``io.nats.jetstream.api.v1.*_response`` names); the generic one when unknown."""
    kind = api_kind(tokens)
    if kind in ("STREAM.MSG.GET", "STREAM.MSG.DELETE") and len(tokens) == 6:
        return E.STREAM_MSG_GET_RESPONSE if tokens[4] == "GET" else E.STREAM_MSG_DELETE_RESPONSE
    if tokens[2:3] == ["INFO"]:
        return E.ACCOUNT_INFO_RESPONSE
    return _RESPONSE_TYPES.get(kind, E.SYSTEM_RESPONSE)
