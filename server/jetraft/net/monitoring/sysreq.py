"""System-account requests (``$SYS.REQ.SERVER...``): the monitoring endpoints over NATS.

nats-server answers these from every server of a cluster (server/events.go: each server
subscribes ``$SYS.REQ.SERVER.PING[.<kind>]`` and ``$SYS.REQ.SERVER.<id>.<kind>`` in the
system account), so a requester that waits for several replies sees the whole cluster:
``nats server list`` and ``nats server report jetstream`` work that way. jetraft does the
same: the route layer propagates this server's interest in the PING subjects, and every
server answers with a ``ServerAPIResponse``-shaped body::

    {"server": ServerInfo, "statsz": ServerStats}        PING, PING.STATSZ, <id>.STATSZ
    {"server": ServerInfo, "data": <the endpoint's body>} VARZ CONNZ SUBSZ ROUTEZ ACCOUNTZ JSZ HEALTHZ
    {"server": ServerInfo, "error": {"code", "description"}}   a bad request body (400) or
                                                         options the endpoint refuses (500)
    {"name", "host", "id"}                               IDZ (ServerID, no wrapper)
    {"server": ServerInfo, "data": UserInfo}             $SYS.REQ.USER.INFO (any account)

The request body, when not empty, is a JSON object of the endpoint's options under
nats-server's names (:data:`OPTIONS`; e.g. ``{"subscriptions": true}`` for CONNZ, ``{"account":
"A"}`` for ACCOUNTZ, the JSzOptions for JSZ, the HealthzOptions for HEALTHZ) and the filter
of EventFilterOptions (``server_name``, ``cluster``, ``host``, ``exact_match``, ``tags``,
``domain``): a server the filter excludes does not answer. Shapes: nats-server
server/events.go ServerInfo, ServerStats, ServerAPIResponse, *EventOptions; the data as the
HTTP endpoints of :mod:`jetraft.net.monitoring.monitor`. Times are RFC 3339 strings, durations in ns.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from jetraft import NATS_COMPAT_VERSION
from jetraft.gofmt import format_time
from jetraft.net.transport.client import closed_clients
from jetraft.net.monitoring.monitor import (
    NOT_LEADER,
    JszOptions,
    QueryError,
    accountz,
    connz,
    healthz,
    jetstream_varz,
    jsz,
    process_figures,
    routez,
    subsz,
    usable_cpus,
    varz,
)
from jetraft.protocol import Message

if TYPE_CHECKING:
    from jetraft.auth import Identity
    from jetraft.config.permissions import Permissions
    from jetraft.net.ports import MonitorHost, SysreqHost

PING = "$SYS.REQ.SERVER.PING"
#: Who am I: answered by the server the requesting client is connected to, in the client's
#: own account (nats-server imports it into every account; its interest is not routed).
USER_INFO = "$SYS.REQ.USER.INFO"
#: Subjects every server holds interest in (in the system account) to hear cluster-wide pings.
PING_SUBJECTS = (PING, PING + ".*")
_JS_ENABLED = 1       # nats-server ServerCapability JetStreamEnabled


def server_info(server: MonitorHost, seq: int = 0) -> dict[str, Any]:
    """nats-server ServerInfo for this server. ``ver`` is the NATS version of INFO and /varz
    (:data:`jetraft.NATS_COMPAT_VERSION`), not jetraft's release: nats-server and the
    ``nats`` CLI compare it as a nats-server version to decide what a peer supports, and
    /varz ``go`` names jetraft's release."""
    cfg = server.config
    info: dict[str, Any] = {"name": server.server_name, "host": cfg.host, "id": server.server_id}
    if cfg.cluster is not None and cfg.cluster.name:
        info["cluster"] = cfg.cluster.name
    if cfg.jetstream is not None and cfg.jetstream.domain:
        info["domain"] = cfg.jetstream.domain
    info["ver"] = NATS_COMPAT_VERSION
    if cfg.server_tags:
        info["tags"] = list(cfg.server_tags)
    js = server.jetstream is not None
    info["jetstream"] = js
    info["flags"] = _JS_ENABLED if js else 0
    info["seq"] = seq
    info["time"] = format_time(time.time_ns())
    return info


def statsz(server: MonitorHost) -> dict[str, Any]:
    """nats-server ServerStats: process figures (``mem`` bytes, ``cpu`` percent), connections,
    subscriptions, messages and bytes ``sent``/``received`` (routes included) and
    ``sent_to_clients``/``received_from_clients``, slow consumers, one RouteStat per route
    (its own counters), ``slow_consumer_stats``, ``stale_connections`` and
    ``stale_connection_stats`` once non-zero (clients closed for unanswered PINGs), ``active_servers`` (this server and its peers) and, with JetStream,
    ``jetstream`` (JetStreamVarz, as /varz, without the store directory). Route counters are those of the current route
    connections."""
    st = server.stats
    routes = getattr(server, "routes", None)
    peers = sorted((p for p in routes.peers.values() if p.conn is not None), key=lambda p: p.server_name) \
        if routes is not None else []
    conns = [p.conn for p in peers]
    route_in = (sum(c.in_msgs for c in conns), sum(c.in_bytes for c in conns))
    route_out = (sum(c.out_msgs for c in conns), sum(c.out_bytes for c in conns))
    mem, cpu = process_figures()
    out: dict[str, Any] = {
        "start": format_time(server.start_ns),
        "mem": mem,
        "cores": os.cpu_count() or 1,
        "cpu": cpu,
        "connections": len(server.clients),
        "total_connections": st.total_connections,
        "active_accounts": len({c.account.name for c in server.clients.values() if c.account}),
        "subscriptions": sum(len(c.subs) for c in server.clients.values()),
        "sent": {"msgs": st.out_msgs + route_out[0], "bytes": st.out_bytes + route_out[1]},
        "sent_to_clients": {"msgs": st.out_msgs, "bytes": st.out_bytes},
        "received": {"msgs": st.in_msgs, "bytes": st.in_bytes},
        "received_from_clients": {"msgs": max(0, st.in_msgs - route_in[0]),
                                  "bytes": max(0, st.in_bytes - route_in[1])},
        "slow_consumers": st.slow_consumers,
    }
    # nats-server's omitempty: the breakdowns only once something was counted
    if st.slow_consumers:
        out["slow_consumer_stats"] = {"clients": st.slow_consumers, "routes": 0, "gateways": 0, "leafs": 0}
    stale = closed_clients(server).stale
    if stale:
        out["stale_connections"] = stale
        out["stale_connection_stats"] = {"clients": stale, "routes": 0, "gateways": 0, "leafs": 0}
    if peers:
        out["routes"] = [{"rid": p.conn.rid, "name": p.server_name,
                          "sent": {"msgs": p.conn.out_msgs, "bytes": p.conn.out_bytes},
                          "received": {"msgs": p.conn.in_msgs, "bytes": p.conn.in_bytes},
                          "pending": p.conn.pending_bytes} for p in peers]
    out["active_servers"] = len(peers) + 1
    if server.jetstream is not None:
        out["jetstream"] = js = jetstream_varz(server)
        js["config"].pop("store_dir", None)  # not broadcast (nats-server sendStatsz)
    out["gomaxprocs"] = usable_cpus()
    return out


#: The request body's options per kind (nats-server server/events.go *EventOptions, the
#: option structs of server/monitor.go): JSON name -> Go type. IDZ reads no body.
_FILTER: dict[str, str] = {"server_name": "string", "cluster": "string", "host": "string",
                           "exact_match": "bool", "tags": "[]string", "domain": "string"}
OPTIONS: dict[str, dict[str, str]] = {
    "STATSZ": {},
    "VARZ": {},
    "CONNZ": {"sort": "string", "auth": "bool", "subscriptions": "bool", "subscriptions_detail": "bool",
              "offset": "int", "limit": "int", "cid": "uint64", "mqtt_client": "string", "state": "int",
              "user": "string", "acc": "string", "filter_subject": "string"},
    "SUBSZ": {"offset": "int", "limit": "int", "subscriptions": "bool", "account": "string", "test": "string"},
    "ROUTEZ": {"subscriptions": "bool", "subscriptions_detail": "bool"},
    "ACCOUNTZ": {"account": "string"},
    "JSZ": {"account": "string", "accounts": "bool", "streams": "bool", "consumer": "bool",
            "direct_consumer": "bool", "config": "bool", "leader_only": "bool", "offset": "int", "limit": "int",
            "raft": "bool", "stream_leader_only": "bool"},
    "HEALTHZ": {"js-enabled": "bool", "js-enabled-only": "bool", "js-server-only": "bool",
                "js-meta-only": "bool", "account": "string", "stream": "string", "consumer": "string",
                "details": "bool"},
}
_JSON_TYPE = {bool: "bool", str: "string", int: "number", float: "number", list: "array", dict: "object"}


class BadOptions(ValueError):
    """A request body Go's encoding/json would not decode into the kind's options (400)."""


def decode_options(kind: str, payload: bytes) -> dict[str, Any]:
    """The options and filter of a request body for ``kind`` (defaults for an empty body),
    checked as Go's encoding/json decodes them: unknown names are ignored, ``null`` leaves
    the default, a value of another type is refused. Raises BadOptions."""
    fields = {**OPTIONS[kind], **_FILTER}
    if not payload.strip():
        return {}
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadOptions(f"invalid JSON: {exc}") from None
    struct = f"{kind.capitalize()}EventOptions"
    if not isinstance(doc, dict):
        got = "null" if doc is None else _JSON_TYPE.get(type(doc), "value")
        raise BadOptions(f"json: cannot unmarshal {got} into Go value of type server.{struct}")
    out: dict[str, Any] = {}
    for name, value in doc.items():
        want = fields.get(name)
        if want is None or value is None:
            continue
        if not _is_go_type(value, want):
            got = _JSON_TYPE.get(type(value), "value")
            if got == "number":
                got = f"number {value}"
            raise BadOptions(f"json: cannot unmarshal {got} into Go struct field {struct}.{name} of type {want}")
        out[name] = value
    return out


def _is_go_type(value: Any, want: str) -> bool:
    if want == "bool":
        return isinstance(value, bool)
    if want == "string":
        return isinstance(value, str)
    if want == "[]string":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return 0 <= value < 1 << 64 if want == "uint64" else -(1 << 63) <= value < 1 << 63


def filtered_out(server: MonitorHost, opts: dict[str, Any]) -> bool:
    """True when the request's EventFilterOptions exclude this server: ``server_name``,
    ``host`` and ``cluster`` must be contained in this server's (equal with
    ``exact_match``), every one of ``tags`` must be this server's, ``domain`` its JetStream
    domain (nats-server server/events.go filterRequest)."""
    cfg = server.config
    cluster = cfg.cluster.name if cfg.cluster is not None and cfg.cluster.name else ""
    mine = {"server_name": server.server_name, "host": cfg.host, "cluster": cluster}
    for key, have in mine.items():
        want = opts.get(key, "")
        if want and (want != have if opts.get("exact_match") else want not in have):
            return True
    tags = {t.lower() for t in cfg.server_tags}
    if any(t.lower() not in tags for t in opts.get("tags", [])):
        return True
    domain = cfg.jetstream.domain if cfg.jetstream is not None and cfg.jetstream.domain else ""
    return bool(opts.get("domain")) and opts["domain"] != domain


def _true(flag: Any) -> list[str]:
    return ["true" if flag else ""]


def endpoint_data(server: MonitorHost, kind: str, opts: dict[str, Any]) -> Any:
    """The ``data`` of a ``kind`` request with options ``opts``: what the HTTP endpoint
    answers for the same options. Raises QueryError for options it refuses."""
    if kind == "VARZ":
        return varz(server)
    if kind == "CONNZ":
        if opts.get("filter_subject") or opts.get("mqtt_client"):
            # refused, never ignored: an ignored filter would answer every connection
            raise QueryError("filter_subject and mqtt_client are not supported by jetraft: leave them out")
        subs = "detail" if opts.get("subscriptions_detail") else "true" if opts.get("subscriptions") else ""
        return connz(server, {
            "sort": [opts.get("sort", "")], "auth": _true(opts.get("auth")), "subs": [subs],
            "offset": [str(opts.get("offset", 0))], "limit": [str(opts.get("limit", 0))],
            "cid": [str(opts.get("cid") or "")], "state": [{1: "closed", 2: "any"}.get(opts.get("state", 0), "open")],
            "user": [opts.get("user", "")], "acc": [opts.get("acc", "")]})
    if kind == "SUBSZ":
        return subsz(server, {"subs": _true(opts.get("subscriptions")), "offset": [str(opts.get("offset", 0))],
                              "limit": [str(opts.get("limit", 0))], "acc": [opts.get("account", "")],
                              "test": [opts.get("test", "")]})
    if kind == "ROUTEZ":
        return routez(server, {"subs": _true(opts.get("subscriptions") or opts.get("subscriptions_detail"))})
    if kind == "ACCOUNTZ":
        return accountz(server, opts.get("account", ""))
    if kind == "JSZ":
        return jsz(server, JszOptions(
            account=opts.get("account", ""), accounts=bool(opts.get("accounts")), streams=bool(opts.get("streams")),
            consumers=bool(opts.get("consumer")), direct_consumers=bool(opts.get("direct_consumer")),
            config=bool(opts.get("config")), leader_only=bool(opts.get("leader_only")),
            offset=opts.get("offset", 0), limit=opts.get("limit", 0), raft=bool(opts.get("raft")),
            stream_leader_only=bool(opts.get("stream_leader_only"))))
    if kind == "HEALTHZ":
        params = {key: _true(opts.get(key)) for key in ("js-enabled", "js-enabled-only", "js-server-only",
                                                         "js-meta-only", "details")}
        params.update({key: [opts.get(key, "")] for key in ("account", "stream", "consumer")})
        status, body = healthz(server, params)
        return {"status": body.get("status"), "status_code": status,
                **{k: v for k, v in body.items() if k != "status"}}
    raise ValueError(f"no such kind {kind}")


def answer(server: SysreqHost, kind: str, payload: bytes) -> dict[str, Any] | None:
    """The reply to a ``kind`` request with body ``payload``, or None when it is not this
    server's to answer (a filter excludes it; JSZ ``leader_only`` on a server that does not
    lead). An exception while answering becomes a 500 error reply (fault isolation)."""
    if kind == "IDZ":
        return {"name": server.server_name, "host": server.config.host, "id": server.server_id}
    try:
        opts = decode_options(kind, payload)
    except BadOptions as exc:
        server.sys_seq += 1
        return {"server": server_info(server, server.sys_seq), "error": {"code": 400, "description": str(exc)}}
    if filtered_out(server, opts):
        return None
    body: dict[str, Any] = {}
    try:
        if kind == "STATSZ":
            body["statsz"] = statsz(server)
        else:
            body["data"] = endpoint_data(server, kind, opts)
    except QueryError as exc:
        if str(exc) == NOT_LEADER:
            return None
        body = {"error": {"code": 500, "description": str(exc)}}
    except Exception as exc:  # noqa: BLE001 - one request's failure is answered, never raised
        body = {"error": {"code": 500, "description": f"internal error: {exc!r}"}}
    server.sys_seq += 1
    return {"server": server_info(server, server.sys_seq), **body}


def handle_system_request(server: SysreqHost, subject: str, reply: str | None, payload: bytes) -> bool:
    """Answer ``$SYS.REQ.SERVER.PING[.<kind>]`` and ``$SYS.REQ.SERVER.<our id>.<kind>`` in the
    system account for the kinds of :data:`OPTIONS` and IDZ (:func:`answer`). Returns True
    when the subject is one this server answers (the reply, if any, goes to ``reply``
    through ``server.route_internal``)."""
    tokens = subject.split(".")
    if len(tokens) < 4 or len(tokens) > 5 or tokens[:3] != ["$SYS", "REQ", "SERVER"]:
        return False
    target = tokens[3]
    kind = tokens[4] if len(tokens) > 4 else "STATSZ"
    if (target != "PING" and target != server.server_id) or (kind not in OPTIONS and kind != "IDZ"):
        return False
    body = answer(server, kind, payload) if reply else None
    if body is not None:
        account = server.config.system_account or "$SYS"
        data = json.dumps(body, separators=(",", ":")).encode()
        server.route_internal(account, Message(reply, None, None, data))
    return True


def _subject_permission(part: Any) -> dict[str, list[str]]:
    """nats-server SubjectPermission: ``allow`` and ``deny`` lists, each only when not empty."""
    out: dict[str, list[str]] = {}
    if part is not None:
        for key in ("allow", "deny"):
            subjects = getattr(part, key)
            if subjects:
                out[key] = list(subjects)
    return out


def public_permissions(permissions: Permissions | None) -> dict[str, Any] | None:
    """A user's permissions as nats-server shows them to the user (client.go
    publicPermissions): ``{"publish": {"allow", "deny"}, "subscribe": {...}, "responses":
    {"max", "ttl"}}`` (``ttl`` in nanoseconds; ``responses`` only with
    ``allow_responses``), or None for a user without permissions."""
    if permissions is None:
        return None
    out: dict[str, Any] = {"publish": _subject_permission(permissions.publish),
                           "subscribe": _subject_permission(permissions.subscribe)}
    responses = permissions.allow_responses
    if responses is not None:
        out["responses"] = {"max": responses.max_msgs, "ttl": int(round(responses.expires * 1e9))}
    return out


def user_info(identity: Identity | None) -> dict[str, Any]:
    """nats-server UserInfo of a connection's ``identity``: ``user`` ("" for a token or an
    anonymous client), ``account`` and ``account_name``, ``permissions`` when the user has
    any. ``expires`` (nanoseconds until the credentials expire) is never set: jetraft has no
    credentials that expire (nats-server omits it as zero for the same users)."""
    if identity is None:
        return {"user": "", "account": ""}
    out: dict[str, Any] = {"user": identity.user or "", "account": identity.account,
                           "account_name": identity.account}
    perms = public_permissions(identity.permissions)
    if perms is not None:
        out["permissions"] = perms
    return out


def handle_user_info(server: SysreqHost, client: Any, subject: str, reply: str | None) -> bool:
    """Answer ``$SYS.REQ.USER.INFO`` published by ``client`` (a connection with
    ``identity`` and ``account``) in any account, as nats-server events.go userInfoReq
    does: ``{"server": ServerInfo, "data": UserInfo}`` (:func:`user_info`) to ``reply``,
    in the client's account. Returns True when ``subject`` is that request (answered
    when it has a reply subject). Never raises: a failure is answered with a 500 error."""
    if subject != USER_INFO:
        return False
    account = getattr(client, "account", None)
    if not reply or account is None:
        return True
    try:
        body: dict[str, Any] = {"data": user_info(getattr(client, "identity", None))}
    except Exception as exc:  # noqa: BLE001 - one request's failure is answered, never raised
        body = {"error": {"code": 500, "description": f"internal error: {exc!r}"}}
    server.sys_seq += 1
    data = json.dumps({"server": server_info(server, server.sys_seq), **body}, separators=(",", ":")).encode()
    server.route_internal(account.name, Message(reply, None, None, data))
    return True


class SystemService:
    """The system requests of ``host``'s server, as the router hands them over
    (:class:`~jetraft.net.ports.SystemRequests`): ``$SYS.REQ.SERVER...`` in the system
    account (:func:`handle_system_request`) and ``$SYS.REQ.USER.INFO`` in any account
    (:func:`handle_user_info`)."""

    def __init__(self, host: SysreqHost) -> None:
        self._host = host

    def request(self, account: str, msg: Message) -> bool:
        """Answer ``msg`` when it is a ``$SYS.REQ.SERVER`` request in the system account;
        True when answered."""
        if account != self._host.config.system_account or not msg.subject.startswith("$SYS.REQ.SERVER."):
            return False
        return handle_system_request(self._host, msg.subject, msg.reply, msg.payload)

    def user_info(self, client: Any, subject: str, reply: str | None) -> bool:
        """Answer ``$SYS.REQ.USER.INFO`` from ``client``; True when ``subject`` is it."""
        return handle_user_info(self._host, client, subject, reply)
