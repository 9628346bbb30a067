"""Monitoring over HTTP on the ``http``/``-m`` port (or HTTPS on ``https``/``-ms``): /healthz,
/varz, /connz, /subsz, /routez, /jsz, /accountz.

Served by hypercorn (ASGI on trio). Field names, types and units follow nats-server
server/monitor.go: durations are integer nanoseconds, times RFC 3339 UTC, uptime a Go-style
duration string. Query parameters as nats-server: ``/connz?subs=1&offset=0&limit=1024``,
``/subsz?subs=1&offset=0&limit=1024``, ``/routez?subs=1``,
``/jsz?accounts=true&streams=true&consumers=true&config=true&acc=A&offset=0&limit=1024``,
``/accountz?acc=A``
(and ``leader-only``, ``stream-leader-only``, ``raft``: :class:`JszOptions`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import ssl
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from jetraft import NATS_COMPAT_VERSION, __version__
from jetraft import gofmt
from jetraft.events import rfc3339_ns
from jetraft.jetstream.model import API_LEVEL
from jetraft.net.jetstream.health import HealthzOptions
from jetraft.net.jetstream.health import healthz as js_healthz
from jetraft.net.transport.client import ClosedClient, closed_clients
from jetraft.protocol.subjects import SublistStats, is_valid_literal_subject, subject_matches

if TYPE_CHECKING:
    from jetraft.net.ports import MonitorHost

NS = 1_000_000_000
DEFAULT_LIMIT = 1024


def _ns(seconds: float) -> int:
    return int(seconds * NS)


def healthz(server: MonitorHost, params: dict[str, list[str]] | None = None) -> tuple[int, dict[str, Any]]:
    """``/healthz``: 200 ``{"status":"ok"}``, or 503 (400, 404) with the reason; the
    checks and the query (``js-enabled-only``, ``js-server-only``, ``js-meta-only``,
    ``account``, ``stream``, ``consumer``, ``details``) are described in
    :mod:`jetraft.net.jetstream.health` (nats-server server/monitor.go HandleHealthz). Raises
    QueryError for a boolean nats-server refuses."""
    params = params or {}
    flags = {key: _flag(params, key) for key in ("js-enabled", "js-enabled-only", "js-server-only",
                                                 "js-meta-only", "details")}
    opts = HealthzOptions(
        js_enabled_only=flags["js-enabled-only"] or flags["js-enabled"],
        js_server_only=flags["js-server-only"], js_meta_only=flags["js-meta-only"],
        account=params.get("account", [""])[0], stream=params.get("stream", [""])[0],
        consumer=params.get("consumer", [""])[0], details=flags["details"])
    try:
        return js_healthz(server, opts)
    except Exception as exc:  # noqa: BLE001 - fail closed: a check that broke is not a pass
        return 503, {"status": "unavailable", "error": f"health check failed: {exc!r}"}


def varz(server: MonitorHost) -> dict[str, Any]:
    """``/varz``: identity, limits, process figures and counters, key for key as nats-server
    2.15 answers (server/monitor.go Varz); JSON numbers throughout, durations in ns.

    ``version`` is the version clients see in INFO (:data:`jetraft.NATS_COMPAT_VERSION`,
    e.g. ``"2.12.1+jetraft.0.1.0"``); ``go`` names jetraft's release too
    (``"jetraft 0.1.0"``), where nats-server names its build toolchain. ``mem`` is the
    resident set in bytes and ``cpu`` the percent of one core used since the previous
    sample (:func:`process_figures`). ``jetstream`` is nats-server's JetStreamVarz
    (:func:`jetstream_varz`; ``{}`` without JetStream). ``connect_urls`` (in a cluster) are
    the client URLs of the cluster's servers, as in INFO. ``in_client_*`` count what
    clients published (``in_*`` adds what routes brought in); ``out_*`` counts deliveries to
    clients. jetraft has no leaf nodes, gateways, MQTT or websocket listeners (their blocks
    are empty, their counters 0), none of nats-server's ``feature_flags`` and no disk I/O
    semaphore (``disk_io_wait_stats`` is all 0); it leaves out ``git_commit``.
    ``stale_connections`` counts the clients closed for unanswered PINGs; stalled clients
    are not counted (0), nor slow or stale route connections. ``total_connections`` counts
    every client connection accepted: the open ones (``connections``) and the closed ones,
    the last ``max_closed_clients`` of which /connz?state=closed lists."""
    cfg, stats = server.config, server.stats
    now = rfc3339_ns(time.time_ns())
    mem, cpu = process_figures()
    routes = server.routes
    peers = list(routes.peers.values()) if routes is not None else []
    route_in_msgs = sum(p.conn.in_msgs for p in peers if p.conn is not None)
    route_in_bytes = sum(p.conn.in_bytes for p in peers if p.conn is not None)
    out: dict[str, Any] = {
        "server_id": server.server_id,
        "server_name": server.server_name,
        "version": NATS_COMPAT_VERSION,
        "proto": 1,
        "go": f"jetraft {__version__}",
        "host": cfg.host,
        "port": server.client_port,
    }
    if server.auth.required:  # omitempty
        out["auth_required"] = True
    if cfg.tls is not None:  # monitor.go Varz: tls_required, tls_verify (omitempty)
        out["tls_required"] = True
        if cfg.tls.verify:
            out["tls_verify"] = True
    out.update({
        "max_connections": cfg.max_connections,
        "ping_interval": _ns(cfg.ping_interval),
        "ping_max": cfg.ping_max,
        "http_host": cfg.http_host,
        "http_port": server.monitor_port if cfg.https_port is None else 0,
        "http_base_path": "",
        "https_port": server.monitor_port if cfg.https_port is not None else 0,
        "auth_timeout": server.auth.timeout,
        "max_control_line": cfg.max_control_line,
        "max_payload": cfg.max_payload,
        "max_pending": cfg.max_pending,
        "cluster": _cluster_varz(server),
        "gateway": {}, "leaf": {}, "mqtt": {}, "websocket": {},
        "jetstream": jetstream_varz(server),
        "tls_timeout": cfg.tls.timeout if cfg.tls is not None else 2.0,
        "write_deadline": _ns(cfg.write_deadline),
        "start": rfc3339_ns(server.start_ns),
        "now": now,
        "uptime": server.uptime(),
        "mem": mem,
        "cores": os.cpu_count() or 1,
        "gomaxprocs": usable_cpus(),
        "cpu": cpu,
        "connections": len(server.clients),
        "total_connections": stats.total_connections,
        "routes": len(peers),
        "remotes": len(peers),
        "leafnodes": 0,
        "in_msgs": stats.in_msgs,
        "in_bytes": stats.in_bytes,
        "in_client_msgs": max(0, stats.in_msgs - route_in_msgs),
        "in_client_bytes": max(0, stats.in_bytes - route_in_bytes),
        "out_msgs": stats.out_msgs,
        "out_bytes": stats.out_bytes,
        "out_client_msgs": stats.out_msgs,
        "out_client_bytes": stats.out_bytes,
        "slow_consumers": stats.slow_consumers,
        "stale_connections": closed_clients(server).stale,
        "stalled_clients": 0,
        "subscriptions": sum(len(a.sublist) for a in server.accounts.values()),
        "http_req_stats": dict(_http_req_stats(server)),
        "config_load_time": rfc3339_ns(server.config_load_ns),
        "config_digest": _config_digest(cfg),
        "feature_flags": {},
    })
    if cfg.server_tags:  # omitempty
        out["tags"] = list(cfg.server_tags)
    if cfg.system_account:
        out["system_account"] = cfg.system_account
    connect_urls = getattr(server, "connect_urls", None)  # Server keeps INFO's connect_urls
    if connect_urls:
        out["connect_urls"] = list(connect_urls)
    out["slow_consumer_stats"] = {"clients": stats.slow_consumers, "routes": 0, "gateways": 0, "leafs": 0}
    out["stale_connection_stats"] = {"clients": closed_clients(server).stale, "routes": 0, "gateways": 0,
                                     "leafs": 0}
    out["disk_io_wait_stats"] = {"waiters": 0, "waits": 0, "wait_time": 0, "max_wait_time": 0}
    return out


def _cluster_varz(server: MonitorHost) -> dict[str, Any]:
    """nats-server ClusterOptsVarz (``{}`` without a cluster block)."""
    cfg = server.config
    if cfg.cluster is None:
        return {}
    routes = server.routes
    out: dict[str, Any] = {
        "name": cfg.cluster.name, "addr": cfg.cluster.host,
        "cluster_port": routes.port if routes is not None and routes.port else cfg.cluster.port,
        "auth_timeout": cfg.cluster.auth_timeout,
        "urls": [f"{r.host}:{r.port}" for r in cfg.cluster.routes],
    }
    if cfg.cluster.tls is not None:  # routes always verify certificates (opts.go getTLSConfig)
        out.update(tls_timeout=cfg.cluster.tls.timeout, tls_required=True, tls_verify=True)
    return out


def jetstream_varz(server: MonitorHost) -> dict[str, Any]:
    """nats-server JetStreamVarz: ``config`` (:func:`_js_config`), ``stats`` (usage in
    bytes, reserved bytes, JetStream accounts, HA assets, API counters) and, in a cluster
    with a known meta group, ``meta`` (MetaClusterInfo as /jsz ``meta_cluster``). ``{}``
    without JetStream. jetraft has no server-wide JetStream ``limits`` block, so none is
    reported (server/monitor.go Varz, JetStreamVarz)."""
    service = server.jetstream
    if service is None:
        return {}
    usage = _js_usage(service)
    out: dict[str, Any] = {"config": _js_config(service), "stats": {
        "memory": usage["memory"], "storage": usage["storage"], "reserved_memory": 0, "reserved_storage": 0,
        "accounts": len(service.accounts), "ha_assets": usage["ha_assets"],
        "api": {"level": API_LEVEL, "total": usage["api_total"], "errors": usage["api_errors"]}}}
    if service.cluster is not None:
        meta = service.cluster.meta_cluster_info()
        if meta is not None:
            out["meta"] = meta
    return out


def _js_config(service: Any) -> dict[str, Any]:
    """nats-server JetStreamConfig: limits in bytes (-1: none set; jetraft computes no
    default quota), ``store_dir``, ``sync_interval`` in ns (0: fsync before each
    acknowledgement), ``sync_always`` (omitempty), ``strict`` (jetraft refuses unknown
    fields in API requests, as nats-server's strict mode does)."""
    cfg = service.config
    out: dict[str, Any] = {"max_memory": cfg.max_memory_store or -1, "max_storage": cfg.max_file_store or -1,
                           "store_dir": service.store_dir, "sync_interval": 0 if service.sync_always
                           else int((cfg.sync_interval or 0) * 1e9)}
    if cfg.sync_always:
        out["sync_always"] = True
    out["strict"] = True
    if cfg.domain:
        out["domain"] = cfg.domain
    return out


def _js_usage(service: Any) -> dict[str, int]:
    """Totals over this server's streams (replicas included): ``streams``, ``consumers``,
    ``messages``, ``bytes``, ``memory``/``storage`` bytes, API counters, and the streams and
    consumers this server leads (``leaders``, ``consumer_leaders``; ``ha_assets``: the
    streams it leads in a cluster, 0 on a single server, whose assets are not replicated).
    Proportional to the
    streams and consumers, never to their messages."""
    cluster = service.cluster
    usage = dict.fromkeys(("streams", "consumers", "messages", "bytes", "memory", "storage", "api_total",
                           "api_errors", "leaders", "consumer_leaders"), 0)
    for acc in service.accounts.values():
        usage["api_total"] += acc.api_total
        usage["api_errors"] += acc.api_errors
        m, f = acc.usage()
        usage["memory"] += m
        usage["storage"] += f
        for name, entry in acc.streams.items():
            usage["streams"] += 1
            usage["consumers"] += len(entry.consumers)
            st = entry.stream.store.state()
            usage["messages"] += st.messages
            usage["bytes"] += st.bytes
            group = cluster.groups.get((acc.name, name)) if cluster is not None else None
            if group is None or group.is_leader:
                usage["leaders"] += 1
                usage["consumer_leaders"] += len(entry.consumers)
    usage["ha_assets"] = usage["leaders"] if cluster is not None else 0
    return usage


class _CpuSample:
    """The process's CPU use as nats-server's ``cpu``: percent of one core over the time
    since the previous sample (at least a second apart; the first sample covers the time
    since this module was loaded)."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.percent = time.monotonic(), time.process_time(), 0.0

    def read(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        if wall - self.wall >= 1.0:
            self.percent = round(100.0 * (cpu - self.cpu) / (wall - self.wall), 1)
            self.wall, self.cpu = wall, cpu
        return max(self.percent, 0.0)


_CPU = _CpuSample()


def process_figures() -> tuple[int, float]:
    """(resident memory in bytes from /proc/self/statm, 0 where unreadable; CPU percent of
    one core, :class:`_CpuSample`) for this process (nats-server server/pse)."""
    return rss_bytes(), _CPU.read()


def rss_bytes() -> int:
    """This process's resident set size in bytes (0 where /proc is unreadable)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def usable_cpus() -> int:
    """The CPUs this process may run on (nats-server ``gomaxprocs``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_DIGEST: list[Any] = [None, ""]


def _config_digest(cfg: Any) -> str:
    """``sha256:<hex>`` of the configuration in force (its parsed form), computed once per
    loaded configuration."""
    if _DIGEST[0] is not cfg:
        _DIGEST[:] = [cfg, "sha256:" + hashlib.sha256(repr(cfg).encode()).hexdigest()]
    return _DIGEST[1]


_HTTP_REQ_STATS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()


def _http_req_stats(server: MonitorHost) -> dict[str, int]:
    """Requests answered per monitoring endpoint path on ``server`` (``http_req_stats``)."""
    return _HTTP_REQ_STATS.setdefault(server, {})


@dataclass(frozen=True)
class JszOptions:
    """``/jsz``'s query (nats-server server/monitor.go JSzOptions and HandleJsz).

    ``account`` (``acc=``): the one account to detail, whatever the paging; ``accounts``:
    add ``account_details``; ``streams``: add each account's ``stream_detail`` (implies
    ``accounts`` when no ``account`` is named); ``consumers``: add each stream's
    ``consumer_detail`` (implies ``streams``); ``direct_consumers``: accepted (jetraft has
    no direct consumers, so nothing is added); ``config``: add the stream and consumer
    configs; ``leader_only``: answer only on the meta leader; ``offset``/``limit``: page
    over the accounts sorted by name (a limit of 0 is 1024, a negative one every account);
    ``raft``: add ``stream_raft_group``; ``stream_leader_only``: list only the streams this
    server leads."""

    account: str = ""
    accounts: bool = False
    streams: bool = False
    consumers: bool = False
    direct_consumers: bool = False
    config: bool = False
    leader_only: bool = False
    offset: int = 0
    limit: int = 0
    raft: bool = False
    stream_leader_only: bool = False

    @classmethod
    def from_query(cls, params: dict[str, list[str]]) -> JszOptions:
        """The options of a parsed query string, read in nats-server's order (the first bad
        value is the one reported). Raises QueryError for a value Go's strconv refuses."""
        flags = {key: _flag(params, key) for key in ("accounts", "streams", "consumers",
                                                     "direct-consumers", "config")}
        offset, limit = _query_int(params, "offset"), _query_int(params, "limit")
        leader_only, raft = _flag(params, "leader-only"), _flag(params, "raft")
        stream_leader_only = _flag(params, "stream-leader-only")
        return cls(account=params.get("acc", [""])[0], accounts=flags["accounts"], streams=flags["streams"],
                   consumers=flags["consumers"], direct_consumers=flags["direct-consumers"],
                   config=flags["config"], leader_only=leader_only, offset=offset, limit=limit, raft=raft,
                   stream_leader_only=stream_leader_only)


#: nats-server's /jsz answer to ``leader-only=true`` on a server that is not the meta
#: leader (or has no JetStream): errSkipZreq wrapped, server/monitor.go Jsz.
NOT_LEADER = "filtered response: not leader"
_UINT64 = (1 << 64) - 1


def jsz(server: MonitorHost, opts: JszOptions | None = None) -> dict[str, Any]:
    """nats-server JSInfo: totals over this server's streams (replicas included), ``total``
    (the JetStream accounts), in a cluster ``meta_cluster`` with the meta leader and every
    peer's state, and the ``account_details`` ``opts`` asks for (:func:`account_detail`).

    The work is proportional to the accounts, streams and consumers on this server, never
    to their messages. Raises QueryError (answered 400) for ``leader_only`` on a server
    that is not the meta leader (nats-server server/monitor.go Jsz)."""
    opts = opts or JszOptions()
    now = time.time_ns()
    service = server.jetstream
    out: dict[str, Any] = {"server_id": server.server_id, "now": gofmt.format_time(now)}
    if service is None:
        if opts.leader_only:
            raise QueryError(NOT_LEADER)
        out.update({"disabled": True, "streams": 0, "consumers": 0, "messages": 0, "bytes": 0,
                    "total": 0})
        return out
    cluster = service.cluster
    if opts.leader_only and cluster is not None and not (
            cluster.meta_group is not None and cluster.meta_group.is_leader):
        raise QueryError(NOT_LEADER)
    out["config"] = _js_config(service)
    usage = _js_usage(service)
    out.update({"memory": usage["memory"], "storage": usage["storage"], "reserved_memory": 0,
                "reserved_storage": 0, "accounts": len(service.accounts), "ha_assets": usage["ha_assets"],
                "api": {"level": API_LEVEL, "total": usage["api_total"], "errors": usage["api_errors"]}})
    out["streams"] = usage["streams"]
    if cluster is not None:
        out["streams_leader"] = usage["leaders"]
    out["consumers"] = usage["consumers"]
    if cluster is not None:
        out["consumers_leader"] = usage["consumer_leaders"]
    out["messages"] = usage["messages"]
    out["bytes"] = usage["bytes"]
    if cluster is not None:
        meta = cluster.meta_cluster_info()
        if meta is not None:
            out["meta_cluster"] = meta
    details = [account_detail(server, service.accounts[name], opts, now)
               for name in _detailed_accounts(list(service.accounts), opts)]
    if details:
        out["account_details"] = details
    out["total"] = len(service.accounts)
    return out


def _detailed_accounts(names: list[str], opts: JszOptions) -> list[str]:
    """The accounts ``opts`` asks to detail: ``acc`` when it names one of ``names``;
    otherwise with ``accounts`` (or ``streams``/``consumers``) the page ``offset``/``limit``
    of them sorted by name; otherwise none (nats-server server/monitor.go Jsz)."""
    streams = opts.streams or opts.consumers
    if opts.account in names:
        return [opts.account]
    if not (opts.accounts or (streams and not opts.account)):
        return []
    names = sorted(names)
    limit = DEFAULT_LIMIT if opts.limit == 0 else opts.limit
    if limit < 0:
        return names
    offset = max(0, opts.offset)
    return names[offset:offset + limit]


def account_detail(server: MonitorHost, acc: Any, opts: JszOptions, now_ns: int) -> dict[str, Any]:
    """nats-server AccountDetail for one JetStream account (``JetStreamAccount``): name,
    id, usage in bytes, the reserved memory and storage (the account's limits as Go's
    uint64 reads them: -1, unlimited, is 2^64-1), API counters (level 0, as nats-server
    reports per account) and, with ``streams``, ``stream_detail``: one nats-server
    StreamDetail per stream with a replica on this server, sorted by name (server/monitor.go
    accountDetail)."""
    mem, store = acc.usage()
    out: dict[str, Any] = {
        "name": acc.name, "id": acc.name, "memory": mem, "storage": store,
        "reserved_memory": acc.limits.max_memory & _UINT64, "reserved_storage": acc.limits.max_storage & _UINT64,
        "accounts": 0, "ha_assets": 0, "api": {"level": 0, "total": acc.api_total, "errors": acc.api_errors}}
    if not (opts.streams or opts.consumers):
        return out
    details = []
    for name in sorted(acc.streams):
        detail = _stream_detail(server, acc, name, opts, now_ns)
        if detail is not None:
            details.append(detail)
    if details:
        out["stream_detail"] = details
    return out


def _stream_detail(server: MonitorHost, acc: Any, name: str, opts: JszOptions,
                   now_ns: int) -> dict[str, Any] | None:
    """One StreamDetail: name, created, cluster (stream info's ClusterInfo: on a single
    server just this server as leader), config (with ``config``), state (as stream info),
    consumer_detail (with ``consumers``: consumer info objects, their config only with
    ``config``), stream_raft_group (with ``raft``, in a cluster). None when
    ``stream_leader_only`` and another server leads it."""
    entry = acc.streams[name]
    cluster = acc.cluster_info(name) if acc.cluster_info is not None else None
    cluster = cluster or {"leader": server.server_name}
    if opts.stream_leader_only and cluster.get("leader") != server.server_name:
        return None
    info = entry.stream.info(now_ns, consumer_count=len(entry.consumers))
    out: dict[str, Any] = {"name": name, "created": info["created"], "cluster": cluster}
    if opts.config:
        out["config"] = info["config"]
    out["state"] = info["state"]
    if opts.consumers:
        consumers = []
        for cname in sorted(entry.consumers):
            consumer = entry.consumers[cname].info(now_ns)
            if not opts.config:
                consumer.pop("config", None)
            consumers.append(consumer)
        if consumers:
            out["consumer_detail"] = consumers
    for key in ("mirror", "sources"):
        if info.get(key):
            out[key] = info[key]
    cluster_js = server.jetstream.cluster
    group = cluster_js.groups.get((acc.name, name)) if opts.raft and cluster_js is not None else None
    if group is not None:
        out["stream_raft_group"] = group.name
    return out


def accountz(server: MonitorHost, account: str = "") -> dict[str, Any]:
    """``/accountz`` (nats-server server/monitor.go Accountz): ``accounts``, the names of
    every account this server has (sorted; ``$G`` and the system account included), or with
    ``account`` (``?acc=``) ``account_detail``, that account's AccountInfo
    (:func:`account_info`). ``system_account`` names the system account. Raises QueryError
    (answered 400) for an account the server does not have."""
    out: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339_ns(time.time_ns())}
    system = server.config.system_account
    if system:
        out["system_account"] = system
    if not account:
        out["accounts"] = sorted(server.accounts)
    else:
        out["account_detail"] = account_info(server, account)
    return out


def account_info(server: MonitorHost, name: str) -> dict[str, Any]:
    """nats-server AccountInfo for account ``name``: ``update_time`` (when the configuration
    defining it was loaded), ``is_system`` (omitempty), ``expired`` and ``complete`` (jetraft
    accounts come from the configuration, never from JWTs: false and true),
    ``jetstream_enabled``, the local client and leaf node (0) connections, ``subscriptions``
    and ``sublist_stats`` (jetraft counts subscriptions only: inserts, removes, matches,
    cache and fan-out figures are 0). No imports, exports or mappings: jetraft has none.
    Work proportional to the connections (bounded by ``max_connections``). Raises
    QueryError when there is no such account."""
    acc = server.accounts.get(name)
    if acc is None:
        raise QueryError(f"Account {name} does not exist")
    service = server.jetstream
    subs = len(acc.sublist)
    out: dict[str, Any] = {"account_name": name, "update_time": rfc3339_ns(server.config_load_ns)}
    if name == server.config.system_account:
        out["is_system"] = True
    out.update({
        "expired": False, "complete": True,
        "jetstream_enabled": service is not None and name in service.accounts,
        "leafnode_connections": 0,
        "client_connections": sum(1 for c in server.clients.values()
                                  if c.account is not None and c.account.name == name),
        "subscriptions": subs, "name_tag": name,
        "sublist_stats": {"num_subscriptions": subs, "num_cache": 0, "num_inserts": 0, "num_removes": 0,
                          "num_matches": 0, "cache_hit_rate": 0, "max_fanout": 0, "avg_fanout": 0},
    })
    return out


def routez(server: MonitorHost, params: dict[str, list[str]]) -> dict[str, Any]:
    """``/routez``: one entry per route, by remote server name (nats-server
    server/monitor.go Routez, RouteInfo); ``subs=1`` adds each route's
    ``subscriptions_list`` (the subjects the peer has interest in). ``rtt`` is ``"0s"``
    (jetraft does not measure round trips) and ``compression`` ``"off"`` (jetraft does not
    compress routes). Raises QueryError for a ``subs`` value nats-server refuses."""
    subs = _flag(params, "subs")
    now = time.time_ns()
    routes = []
    manager = server.routes
    peers = sorted(manager.peers.values(), key=lambda p: p.server_name) if manager is not None else []
    for peer in peers:
        conn = peer.conn
        if conn is None:  # being replaced by another route to the same server
            continue
        entry: dict[str, Any] = {
            "rid": conn.rid, "remote_id": peer.server_id, "remote_name": peer.server_name,
            "did_solicit": conn.solicited,
            "is_configured": bool(conn.target is not None and conn.target.configured),
            "ip": conn.ip, "port": conn.port,
            "start": rfc3339_ns(conn.start_ns), "last_activity": rfc3339_ns(conn.last_activity_ns),
            "rtt": "0s",
            "uptime": f"{(now - conn.start_ns) // NS}s", "idle": f"{(now - conn.last_activity_ns) // NS}s",
            "pending_size": conn.pending_bytes, "in_msgs": conn.in_msgs, "out_msgs": conn.out_msgs,
            "in_bytes": conn.in_bytes, "out_bytes": conn.out_bytes,
            "subscriptions": len(conn.interest),
        }
        if subs and conn.interest:
            entry["subscriptions_list"] = sorted(subject for _acc, subject, _q in conn.interest)
        entry["compression"] = "off"
        routes.append(entry)
    return {"server_id": server.server_id, "server_name": server.server_name, "now": rfc3339_ns(now),
            "num_routes": len(routes), "routes": routes}


class QueryError(ValueError):
    """A query parameter nats-server would refuse: answered 400 with ``str(self)`` as the
    plain-text body (nats-server monitor.go decodeInt/decodeBool/decodeUint64)."""


_GO_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_GO_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))
_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _query_int(params: dict[str, list[str]], key: str) -> int:
    """``key`` as Go's strconv.Atoi reads it; 0 when absent or empty. Raises QueryError."""
    text = params.get(key, [""])[0]
    if not text:
        return 0
    if not _INT_RE.fullmatch(text):
        raise QueryError(f"Error decoding int for '{key}': strconv.Atoi: parsing {gofmt.quote(text)}: "
                         "invalid syntax")
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise QueryError(f"Error decoding int for '{key}': strconv.Atoi: parsing {gofmt.quote(text)}: "
                         "value out of range")
    return value


def _page(params: dict[str, list[str]]) -> tuple[int, int]:
    """``offset`` and ``limit`` (a limit of 0 or less is the default). Raises QueryError."""
    offset = max(0, _query_int(params, "offset"))
    limit = _query_int(params, "limit")
    return offset, limit if limit > 0 else DEFAULT_LIMIT


def _flag(params: dict[str, list[str]], key: str) -> bool:
    """A boolean parameter as Go's strconv.ParseBool reads it (``subs`` also takes
    ``detail``); False when absent or empty. Raises QueryError."""
    text = params.get(key, [""])[0]
    if not text or text in _GO_FALSE:
        return False
    if text in _GO_TRUE or (key == "subs" and text.lower() == "detail"):
        return True
    raise QueryError(f"Error decoding boolean for '{key}': strconv.ParseBool: parsing "
                     f"{gofmt.quote(text)}: invalid syntax")


class _Row:
    """One /connz entry before paging: an open connection or a kept closed one, with the
    figures the sort options order by (ns since the epoch for times)."""

    __slots__ = ("cid", "closed", "conn", "in_bytes", "in_msgs", "last", "out_bytes", "out_msgs", "pending",
                 "reason", "rtt", "start", "stop", "subs")

    def __init__(self, conn: Any, closed: ClosedClient | None) -> None:
        self.conn, self.closed = conn, closed
        if closed is None:
            c = conn
            self.cid, self.start, self.last, self.stop, self.reason = c.cid, c.start_ns, c.last_activity, 0, ""
            self.rtt, self.subs, self.pending = c.rtt_ns, len(c.subs), c.pending_bytes
            self.in_msgs, self.out_msgs, self.in_bytes, self.out_bytes = c.in_msgs, c.out_msgs, c.in_bytes, c.out_bytes
        else:
            info = closed.info
            self.cid, self.start, self.last, self.stop = closed.cid, closed.start_ns, closed.last_ns, closed.stop_ns
            self.reason, self.rtt, self.subs, self.pending = info["reason"], closed.rtt_ns, len(closed.subs), \
                info["pending_bytes"]
            self.in_msgs, self.out_msgs = info["in_msgs"], info["out_msgs"]
            self.in_bytes, self.out_bytes = info["in_bytes"], info["out_bytes"]


#: /connz ``sort`` values: (key, descending) (nats-server server/monitor.go Connz and
#: monitor_sort_opts.go: ``start`` orders as ``cid``, ``uptime`` ascending up to the stop of a
#: closed connection, ``idle`` up to now). ``stop`` and ``reason`` need ``state=closed``.
_CONNZ_SORT: dict[str, tuple[Any, bool]] = {
    "cid": (lambda r, now: r.cid, False), "start": (lambda r, now: r.cid, False),
    "subs": (lambda r, now: r.subs, True), "pending": (lambda r, now: r.pending, True),
    "msgs_to": (lambda r, now: r.out_msgs, True), "msgs_from": (lambda r, now: r.in_msgs, True),
    "bytes_to": (lambda r, now: r.out_bytes, True), "bytes_from": (lambda r, now: r.in_bytes, True),
    "last": (lambda r, now: r.last, True), "idle": (lambda r, now: now - r.last, True),
    "uptime": (lambda r, now: (r.stop or now) - r.start, False), "stop": (lambda r, now: r.stop, True),
    "reason": (lambda r, now: r.reason, False), "rtt": (lambda r, now: r.rtt, True),
}


def connz(server: MonitorHost, params: dict[str, list[str]]) -> dict[str, Any]:
    """``/connz``: the client connections (nats-server server/monitor.go Connz, ConnInfo).

    Query: ``sort`` (:data:`_CONNZ_SORT`; by ``cid`` ascending by default), ``auth`` (add
    ``authorized_user``, ``account`` unless ``$G``, ``name_tag``), ``subs`` (1: add
    ``subscriptions_list``; ``detail``: ``subscriptions_list_detail``), ``offset``/``limit``
    (default 1024), ``cid`` (that connection alone), ``state`` (``open``, the default;
    ``closed``: the last ``max_closed_clients`` closed connections, each with ``stop`` and
    ``reason``; ``any``/``all``: both), ``acc`` and ``user`` (only the connections of that
    account, that user; a closed connection of the global account has no account, as in
    nats-server). ``rtt`` is the last round trip measured with a PING (a Go duration
    string, "0s" until one is: asking /connz starts one for a client that gave its
    ``lang``, :meth:`~jetraft.net.transport.client.ClientConnection.request_rtt`). Work is
    O(c log c) for c connections, open (bounded by ``max_connections``) and kept closed
    (bounded by ``max_closed_clients``). Raises QueryError for a parameter nats-server
    refuses."""
    sort = params.get("sort", [""])[0] or "cid"
    auth = _flag(params, "auth")
    detail = params.get("subs", [""])[0].lower() == "detail"
    subs = _flag(params, "subs") and not detail
    offset, limit = _page(params)
    cid = _query_uint(params, "cid")
    state = params.get("state", [""])[0].lower()
    if state and state not in ("open", "closed", "any", "all"):
        raise QueryError(f"Error decoding state for {params['state'][0]}")
    if sort not in _CONNZ_SORT:
        raise QueryError(f"invalid sorting option: {sort}")
    if sort in ("stop", "reason") and state != "closed":
        raise QueryError(f"sort by {sort} only valid on closed connections")
    account, user = params.get("acc", [""])[0], params.get("user", [""])[0]
    now = time.time_ns()
    clients = [] if state == "closed" else list(server.clients.values())
    if account:
        clients = [c for c in clients if c.account is not None and c.account.name == account]
    if user:
        clients = [c for c in clients if c.identity is not None and c.identity.user == user]
    closed = closed_clients(server).snapshot() if state in ("closed", "any", "all") else []
    if account:
        closed = [cc for cc in closed if cc.account == account]
    if user:
        closed = [cc for cc in closed if cc.user == user]
    if cid:  # an open connection first, else the closed one (Connz "Search by individual CID")
        clients = [c for c in clients if c.cid == cid]
        closed = [] if clients else [cc for cc in closed if cc.cid == cid][:1]
        offset, limit = 0, 1
    rows = [_Row(c, None) for c in clients] + [_Row(None, cc) for cc in closed]
    rows.sort(key=lambda r: r.cid)
    if sort != "cid":  # stable, so ties stay in cid order
        key, descending = _CONNZ_SORT[sort]
        rows.sort(key=lambda r: key(r, now), reverse=descending)
    conns = [_conn_info(r.conn, now, auth=auth, subs=subs, detail=detail) if r.closed is None
             else _closed_info(r.closed, auth=auth, subs=subs, detail=detail)
             for r in rows[offset:offset + limit]]
    return {"server_id": server.server_id, "now": rfc3339_ns(now), "num_connections": len(conns),
            "total": len(rows), "offset": offset, "limit": limit, "connections": conns}


def _conn_info(c: Any, now: int, *, auth: bool, subs: bool, detail: bool) -> dict[str, Any]:
    """nats-server ConnInfo for open client connection ``c`` (see :func:`connz`); then asks a
    round trip of a client with none measured (its PING is not in this ``pending_bytes``)."""
    entry = c.conn_info(now)
    if not c.rtt_ns:
        c.request_rtt()
    if c.subs and subs:
        entry["subscriptions_list"] = sorted(s.subject for s in c.subs.values())
    if c.subs and detail:
        entry["subscriptions_list_detail"] = [_sub_detail(s, c.cid) for s in c.subs.values()]
    if auth and c.identity is not None:
        if c.identity.user:
            entry["authorized_user"] = c.identity.user
        if c.identity.account != "$G":
            entry["account"] = c.identity.account
        entry["name_tag"] = c.identity.account
    return entry


def _closed_info(cc: ClosedClient, *, auth: bool, subs: bool, detail: bool) -> dict[str, Any]:
    """nats-server ConnInfo for a kept closed connection (monitor.go Connz "Closed Clients"):
    its subscriptions as of the close (with their account in the detail), and with ``auth``
    the user it authenticated or tried to authenticate as, and its account unless the global
    one."""
    entry = dict(cc.info)
    if cc.subs and detail:
        entry["subscriptions_list_detail"] = [_closed_sub_detail(sub, cc) for sub in cc.subs]
    elif cc.subs and subs:
        entry["subscriptions_list"] = [sub[0] for sub in cc.subs]
    if auth:
        if cc.user:
            entry["authorized_user"] = cc.user
        if cc.account:
            entry["account"] = entry["name_tag"] = cc.account
    return entry


def _closed_sub_detail(sub: tuple[str, str | None, str, int, int | None], cc: ClosedClient) -> dict[str, Any]:
    """nats-server newSubDetail for one subscription a closed connection had."""
    subject, queue, sid, delivered, max_msgs = sub
    out: dict[str, Any] = {"account": cc.account_name, "account_tag": cc.account_name, "subject": subject}
    if queue:
        out["qgroup"] = queue
    out.update(sid=sid, msgs=delivered)
    if max_msgs:
        out["max"] = max_msgs
    out["cid"] = cc.cid
    return out


def _sub_detail(sub: Any, cid: int, account: str | None = None) -> dict[str, Any]:
    """nats-server SubDetail: ``account`` and ``account_tag`` (in /subsz), subject, queue
    group (omitempty), sid, messages delivered, ``max`` (an auto-unsubscribe limit), cid."""
    out: dict[str, Any] = {"account": account, "account_tag": account} if account else {}
    out["subject"] = sub.subject
    if sub.queue:
        out["qgroup"] = sub.queue
    out.update(sid=sub.sid, msgs=sub.delivered)
    if sub.max_msgs:
        out["max"] = sub.max_msgs
    out["cid"] = cid
    return out


def subsz(server: MonitorHost, params: dict[str, list[str]]) -> dict[str, Any]:
    """``/subsz`` (nats-server server/monitor.go Subsz, SublistStats): the subject indexes'
    figures summed over every account (``acc=``: that account's alone) as nats-server's
    Sublist.Stats (:meth:`jetraft.protocol.SubjectIndex.stats`): subscriptions, cached
    subjects, inserts, removes and matches since the start, ``cache_hit_rate`` (cache hits
    over matches), ``max_fanout``/``avg_fanout`` over the cached results; with ``subs=1``,
    the client subscriptions themselves (one SubDetail each; ``test=<subject>`` keeps those
    a message on that subject would reach), paged by ``offset``/``limit``. Work is
    proportional to the accounts and their cached subjects (at most 1024 each), and with
    ``subs=1`` to the subscriptions. Raises QueryError for a parameter nats-server
    refuses."""
    detail = _flag(params, "subs")
    offset, limit = _page(params)
    test = params.get("test", [""])[0]
    if test and not is_valid_literal_subject(test):
        raise QueryError(f"invalid test subject, must be valid publish subject: {test}")
    account = params.get("acc", [""])[0]
    stats = SublistStats()
    for acc in server.accounts.values():
        if not account or acc.name == account:
            stats += acc.sublist.stats()
    out: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339_ns(time.time_ns()), **stats.report,
                           "total": 0, "offset": offset, "limit": limit}
    if detail:
        subs = []
        for client in sorted(server.clients.values(), key=lambda c: c.cid):
            acc = client.account
            if acc is None or (account and acc.name != account):
                continue
            subs.extend(_sub_detail(s, client.cid, acc.name) for s in client.subs.values()
                        if not test or subject_matches(s.subject, test))
        out.update(total=len(subs), subscriptions_list=subs[offset:offset + limit])
    return out


def _query_uint(params: dict[str, list[str]], key: str) -> int:
    """``key`` as Go's strconv.ParseUint reads it; 0 when absent. Raises QueryError."""
    text = params.get(key, [""])[0]
    if not text:
        return 0
    if not text.isdigit() or not text.isascii():
        raise QueryError(f"Error decoding uint64 for '{key}': strconv.ParseUint: parsing "
                         f"{gofmt.quote(text)}: invalid syntax")
    value = int(text)
    if value > _UINT64:
        raise QueryError(f"Error decoding uint64 for '{key}': strconv.ParseUint: parsing "
                         f"{gofmt.quote(text)}: value out of range")
    return value


#: The paths answered (``http_req_stats`` counts requests to these alone).
ENDPOINTS = ("/", "/healthz", "/varz", "/connz", "/subsz", "/subscriptionsz", "/routez", "/jsz", "/accountz")


def make_app(server: MonitorHost):
    """The ASGI application answering the monitoring endpoints for ``server``."""

    async def app(scope: dict, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope["path"].rstrip("/") or "/"
        if path == "/metrics":      # the Prometheus text format, not JSON (net/monitoring/metrics.py)
            from jetraft.net.monitoring.metrics import serve_metrics
            await serve_metrics(server, scope, send)
            return
        params = parse_qs(scope.get("query_string", b"").decode("utf-8", "replace"),
                          keep_blank_values=True)
        try:
            status, body = _answer(path, scope["method"], params)
        except QueryError as exc:
            text = str(exc).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                    (b"content-length", str(len(text)).encode())]})
            await send({"type": "http.response.body", "body": text})
            return
        data = json.dumps(body, indent=2).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    def _answer(path: str, method: str, params: dict[str, list[str]]) -> tuple[int, Any]:
        status = 200
        if method not in ("GET", "HEAD"):
            return 405, {"error": "method not allowed"}
        if path in ENDPOINTS:  # counted before answering, as nats-server does
            counts = _http_req_stats(server)
            counts[path] = counts.get(path, 0) + 1
        if path == "/healthz":
            status, body = healthz(server, params)
        elif path == "/varz":
            body = varz(server)
        elif path == "/connz":
            body = connz(server, params)
        elif path == "/subsz" or path == "/subscriptionsz":
            body = subsz(server, params)
        elif path == "/routez":
            body = routez(server, params)
        elif path == "/jsz":
            body = jsz(server, JszOptions.from_query(params))
        elif path == "/accountz":
            body = accountz(server, params.get("acc", [""])[0])
        elif path == "/":
            body = {"endpoints": [p for p in ENDPOINTS if p not in ("/", "/subscriptionsz")]}
        else:
            return 404, {"error": f"no such endpoint {path}"}
        return status, body

    return app


class _HTTPSConfig(HypercornConfig):
    """Hypercorn's configuration serving HTTPS with a context the server owns (and reloads in
    place on SIGHUP) instead of one hypercorn builds from file names."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context
        self.certfile = self.keyfile = "<the server's tls block>"  # makes ssl_enabled true

    def create_ssl_context(self) -> ssl.SSLContext:
        return self._context


async def serve_monitor(server: MonitorHost, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the monitoring endpoints until cancelled; reports the bound port.

    With ``https_port`` the listener speaks HTTPS with the top-level ``tls`` block's
    certificate and asks for no client certificate (nats-server server.go startMonitoring
    sets ClientAuth to NoClientCert); a handshake is bounded by that block's ``timeout``."""
    cfg = server.config
    if cfg.https_port is not None and server.monitor_tls is not None:
        hc = _HTTPSConfig(server.monitor_tls)
        hc.ssl_handshake_timeout = cfg.tls.timeout
        port = max(cfg.https_port, 0)
    else:
        hc = HypercornConfig()
        port = max(cfg.http_port, 0)
    host = cfg.http_host
    hc.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("jetraft.monitor")
    hc.errorlog.propagate = False
    hc.errorlog.addHandler(logging.NullHandler())

    await serve(make_app(server), hc, task_status=_PortStatus(task_status))


class _PortStatus:
    """Adapts hypercorn's ``started(["http://host:port"])`` to ``started(port)``."""

    def __init__(self, outer: trio.TaskStatus[int]) -> None:
        self._outer = outer

    def started(self, binds: list[str]) -> None:
        self._outer.started(int(binds[0].rsplit(":", 1)[1]))
