"""The ``$JS.API`` dispatch of one account: which handler answers which subject, with which
response type; an answer with nats-server's ``error`` object for a refused request and an
internal error for a failed one (fault isolation); the API counters and the ``api_audit``
advisory of each answer; ``$JS.API.INFO``; the paging of NAMES and LIST requests.

As nats-server server/jetstream_api.go (its subjects, handlers and response types,
JSApiNamesLimit and JSApiListLimit paging, jsAccountInfoRequest).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream.api.core import AccountCore, Reply
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import API_LEVEL, AccountInfo, APIStats
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.requests import (
    ERROR_EXTRAS,
    PAGING_TYPES,
    decode_fields,
    decode_request,
    int_field,
    internal_error,
    json_bytes,
    request_info,
    required_level_met,
    str_field,
)
from jetraft.protocol.client import status_headers
from jetraft.protocol.subjects import is_valid_subject, subjects_overlap


class ApiDispatch(AccountCore):
    """Requests on ``$JS.API.>`` dispatched to their handlers (see the module docstring)."""

    def handle_api(self, subject: str, reply: str | None, headers: bytes | None, payload: bytes,
                   now_ns: int, client: dict[str, Any] | None = None) -> list[Reply] | None:
        """Answer one ``$JS.API.>`` request; returns the replies, or None when nothing on
        this server listens on ``subject`` (the requester then gets no-responders, as from
        nats-server: DIRECT.GET of a stream without ``allow_direct``, MSG.NEXT of an
        unknown consumer). Requests without a reply subject are ignored, as nats-server
        does; an unknown API subject gets no answer.

        Fault isolation: an unexpected exception while handling the request answers it
        with :func:`internal_error` for its response type (a ``500`` status for DIRECT.GET
        and pull requests) and is reported as ``api_request_failed``; it never propagates.

        Advisories: every answer is followed by an ``api_audit`` on ``$JS.EVENT.ADVISORY.API``
        (``client``: the requester's client info, see
        :func:`~jetraft.jetstream.advisories.api_audit`; without it, the one the
        ``Nats-Request-Info`` header carries, which in a cluster the requester's server sets),
        stream and consumer changes by their ``stream_action``/``consumer_action`` (see
        :meth:`advise`).
        """
        try:
            if client is None:
                client = request_info(headers)
            if headers and reply and not required_level_met(headers) and \
                    ".".join(subject.split(".")[2:4]) not in ("DIRECT.GET", "CONSUMER.MSG"):
                return self._level_refused(subject, reply, payload, now_ns, client)
            return self._handle_api(subject, reply, payload, now_ns, client)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not reach the server
            return self.api_failed(subject, reply, exc)

    def _level_refused(self, subject: str, reply: str, payload: bytes, now_ns: int,
                       client: dict[str, Any] | None) -> list[Reply]:
        """A request whose ``Nats-Required-Api-Level`` this server does not reach: 10185
        (412) for its response type, nothing done (nats-server errorOnRequiredApiLevel)."""
        tokens = subject.split(".")
        rtype = E.ACCOUNT_INFO_RESPONSE if subject == "$JS.API.INFO" else (self._route(tokens)[1]
                                                                          or E.SYSTEM_RESPONSE)
        self.api_errors += 1
        self.api_total += 1
        body = {**E.error_response(rtype, E.api_error("JSRequiredApiLevelErr")), **ERROR_EXTRAS.get(rtype, {})}
        response = self._respond(reply, body)
        return response + self.audit(subject, payload, response[0].out.data, client, now_ns)

    def api_failed(self, subject: str, reply: str | None, exc: BaseException) -> list[Reply]:
        """Report an exception raised while handling the request on ``subject``
        (``api_request_failed``, with its traceback) and return the answer to send: the
        response type's :func:`internal_error`, or a ``500`` status for DIRECT.GET and
        pull requests; nothing without a reply subject."""
        self.events.emit("api_request_failed", account=self.name, subject=subject,
                         error=repr(exc), traceback="".join(traceback.format_exception(exc)))
        if not reply:
            return []
        tokens = subject.split(".")
        if ".".join(tokens[2:4]) in ("DIRECT.GET", "CONSUMER.MSG"):
            return [Reply(Outbound(reply, None, status_headers(500, "Internal Server Error"), b""))]
        rtype = E.ACCOUNT_INFO_RESPONSE if subject == "$JS.API.INFO" else (self._route(tokens)[1]
                                                                          or E.SYSTEM_RESPONSE)
        self.api_errors += 1
        self.api_total += 1
        return self._respond(reply, {**E.error_response(rtype, internal_error(rtype)),
                                     **ERROR_EXTRAS.get(rtype, {})})

    def _handle_api(self, subject: str, reply: str | None, payload: bytes,
                    now_ns: int, client: dict[str, Any] | None = None) -> list[Reply] | None:
        tokens = subject.split(".")
        kind = ".".join(tokens[2:4])
        if kind == "DIRECT.GET" and len(tokens) >= 5:
            return self._direct_get(tokens, reply, payload)
        if kind == "CONSUMER.MSG" and len(tokens) == 7 and tokens[4] == "NEXT":
            return self._msg_next(tokens[5], tokens[6], reply, payload, now_ns)
        if not reply:
            return []
        if kind == "CONSUMER.RESET" and not self.has_consumer(tokens):
            return []       # nats-server: the consumer itself listens on it; nothing answers
        if subject == "$JS.API.INFO":
            handler, rtype = self._api_info, E.ACCOUNT_INFO_RESPONSE
        else:
            handler, rtype = self._route(tokens)
            if handler is None:
                return []
        extra: list[Reply] = []
        try:
            body = handler(tokens, payload, now_ns)
        except JSApiError as err:
            if getattr(err, "counted", True):
                self.api_errors += 1
            body = {**E.error_response(rtype, err), **ERROR_EXTRAS.get(rtype, {})}
        else:
            if isinstance(body, tuple):
                body, extra = body
            body = {"type": rtype, **body}
        self.api_total += 1       # counted once answered (an INFO does not count itself)
        response = self._respond(reply, body)
        return response + extra + self.audit(subject, payload, response[0].out.data, client, now_ns)

    def audit(self, subject: str, request: bytes, response: bytes, client: dict[str, Any] | None,
              now_ns: int) -> list[Reply]:
        """The ``api_audit`` advisory of one answered request, when someone listens (also
        for the answers the cluster's meta leader sends: jetstream/cluster/)."""
        if not self._listening(adv.API_AUDIT):
            return []
        return self.advise(adv.api_audit, self.server_name, client, subject, request, response, now_ns)

    def _respond(self, reply: str, body: dict[str, Any]) -> list[Reply]:
        return [Reply(Outbound(reply, None, None, json_bytes(body)), needs_sync=True)]

    def _route(self, tokens: list[str]) -> tuple[Callable[..., Any] | None, str]:
        n = len(tokens)
        area = tokens[2] if n > 2 else ""
        op = tokens[3] if n > 3 else ""
        if area == "STREAM":
            if op == "LEADER" and n == 6 and tokens[4] == "STEPDOWN":
                return self._cluster_required, E.STREAM_LEADER_STEPDOWN_RESPONSE
            if op == "PEER" and n == 6 and tokens[4] == "REMOVE":
                return self._cluster_required, E.STREAM_REMOVE_PEER_RESPONSE
            if op in ("NAMES", "LIST") and n == 4:
                return ((self._api_stream_names, E.STREAM_NAMES_RESPONSE) if op == "NAMES"
                        else (self._api_stream_list, E.STREAM_LIST_RESPONSE))
            if op == "MSG" and n == 6:
                if tokens[4] == "GET":
                    return self._api_msg_get, E.STREAM_MSG_GET_RESPONSE
                if tokens[4] == "DELETE":
                    return self._api_msg_delete, E.STREAM_MSG_DELETE_RESPONSE
                return None, ""
            if n != 5:
                return None, ""
            table = {
                "CREATE": (self._api_stream_create, E.STREAM_CREATE_RESPONSE),
                "UPDATE": (self._api_stream_update, E.STREAM_UPDATE_RESPONSE),
                "INFO": (self._api_stream_info, E.STREAM_INFO_RESPONSE),
                "DELETE": (self._api_stream_delete, E.STREAM_DELETE_RESPONSE),
                "PURGE": (self._api_stream_purge, E.STREAM_PURGE_RESPONSE),
            }
            return table.get(op, (None, ""))
        if area == "CONSUMER":
            if op == "LEADER" and n == 7 and tokens[4] == "STEPDOWN":
                return self._cluster_required, E.CONSUMER_LEADER_STEPDOWN_RESPONSE
            if op == "CREATE" and n >= 5:
                return self._api_consumer_create, E.CONSUMER_CREATE_RESPONSE
            if op == "DURABLE" and n >= 5 and tokens[4] == "CREATE":
                return self._api_consumer_create, E.CONSUMER_CREATE_RESPONSE
            if op in ("NAMES", "LIST") and n == 5:
                return ((self._api_consumer_names, E.CONSUMER_NAMES_RESPONSE) if op == "NAMES"
                        else (self._api_consumer_list, E.CONSUMER_LIST_RESPONSE))
            if op == "RESET" and n == 6:
                return self._api_consumer_reset, E.CONSUMER_RESET_RESPONSE
            if op == "PAUSE" and n == 6:
                return self._api_consumer_pause, E.CONSUMER_PAUSE_RESPONSE
            if op == "UNPIN" and n == 6:
                return self._api_consumer_unpin, E.CONSUMER_UNPIN_RESPONSE
            if op in ("INFO", "DELETE") and n == 6:
                return ((self._api_consumer_info, E.CONSUMER_INFO_RESPONSE) if op == "INFO"
                        else (self._api_consumer_delete, E.CONSUMER_DELETE_RESPONSE))
        return None, ""

    def _cluster_required(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        """Leader step-down and peer-remove need a cluster (10010 on a single server)."""
        raise E.cluster_required()

    # ------------------------------------------------------------------ account

    def _api_info(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        return self.account_info(payload, now_ns)

    def account_info(self, payload: bytes, now_ns: int) -> dict[str, Any]:
        """The ``$JS.API.INFO`` body (nats-server JSApiAccountInfoResponse without its type):
        usage in bytes, stream and consumer counts, limits, API level and counters."""
        mem, file = self.usage()
        info = AccountInfo(memory=mem, storage=file, streams=len(self.streams),
                           consumers=sum(len(e.consumers) for e in self.streams.values()),
                           limits=self.limits, domain=self.domain,
                           api=APIStats(level=API_LEVEL, total=self.api_total, errors=self.api_errors))
        return info.to_json()

    # ------------------------------------------------------------------ NAMES and LIST pages

    def names_request(self, payload: bytes, go_type: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        """A NAMES/LIST request's object (``{}`` when the body is not one), its ``allowed``
        keys (``offset``, ``subject``) checked as Go decodes them (JSApiError 10025)."""
        text = payload.lstrip()
        if not text or text[:1] not in (b"{", b"["):
            return {}           # nats-server: only a JSON object or array is read
        req = decode_request(payload, go_type) or {}
        decode_fields(req, go_type, {key: PAGING_TYPES[key] for key in allowed})
        return req

    def _page(self, payload: bytes, go_type: str, stream: str | None, limit: int) -> tuple[list[str], int, list[str]]:
        """A NAMES/LIST request's names (the account's streams, filtered by its ``subject``;
        or, with ``stream``, that stream's consumers: JSApiError 10059 when there is none),
        its ``offset`` (clamped to the names) and the page of at most ``limit`` names."""
        if stream is None:
            req = self.names_request(payload, go_type, ("offset", "subject"))
            offset = max(int_field(req, "offset", go_type, "int"), 0)
            subject = str_field(req, "subject", go_type)
            names = self._filtered_streams(subject)
            if not subject and self.unloaded:       # offline streams are listed too
                names = sorted(names + [n for n in self.unloaded if n not in self.streams])
        else:
            req = self.names_request(payload, go_type, ("offset",))
            offset = max(int_field(req, "offset", go_type, "int"), 0)
            names = sorted(self._entry(stream).consumers)
        offset = min(offset, len(names))
        return names, offset, names[offset:offset + limit]

    def _filtered_streams(self, subject: str) -> list[str]:
        names = []
        for name, entry in self.streams.items():
            if not subject or any(subjects_overlap(subject, s) for s in entry.stream.config.subjects):
                names.append(name)
        return sorted(names)


def is_api_subject(subject: str) -> bool:
    """Whether ``subject`` is one the JetStream layer consumes itself."""
    return subject.startswith(("$JS.API.", "$JS.ACK.", "$JS.FC.")) and is_valid_subject(subject)
