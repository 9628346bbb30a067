"""System-account requests (``$SYS.REQ.SERVER...``) and the JetStream monitoring body (/jsz).

nats-server answers these from every server of a cluster (server/events.go: each server
subscribes ``$SYS.REQ.SERVER.PING[.<kind>]`` and ``$SYS.REQ.SERVER.<id>.<kind>`` in the
system account), so a requester that waits for several replies sees the whole cluster:
``nats server list`` and ``nats server report jetstream`` work that way. jetraft does the
same: the route layer propagates this server's interest in the PING subjects, and every
server answers with a ``ServerAPIResponse``-shaped body::

    {"server": ServerInfo, "statsz": ServerStats}        $SYS.REQ.SERVER.PING[.STATSZ]
    {"server": ServerInfo, "data": JSInfo}               $SYS.REQ.SERVER.PING.JSZ

Shapes: nats-server server/events.go ServerInfo/ServerStats, server/monitor.go JSInfo and
MetaClusterInfo. Times are RFC 3339 strings, durations in ns.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from jetraft import NATS_COMPAT_VERSION
from jetraft.jetstream.model import format_time
from jetraft.net.monitor import jsz, process_figures, varz
from jetraft.protocol import Message

if TYPE_CHECKING:
    from jetraft.net.ports import MonitorHost, SysreqHost

PING = "$SYS.REQ.SERVER.PING"
#: Subjects every server holds interest in (in the system account) to hear cluster-wide pings.
PING_SUBJECTS = (PING, PING + ".*")
_JS_ENABLED = 1       # nats-server ServerCapability JetStreamEnabled


def server_info(server: MonitorHost, seq: int = 0) -> dict[str, Any]:
    """nats-server ServerInfo for this server."""
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
    """nats-server ServerStats (the subset jetraft measures)."""
    st = server.stats
    routes = getattr(server, "routes", None)
    peers = list(routes.peers.values()) if routes is not None else []
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
        "sent": {"msgs": st.out_msgs, "bytes": st.out_bytes},
        "received": {"msgs": st.in_msgs, "bytes": st.in_bytes},
        "slow_consumers": st.slow_consumers,
    }
    if peers:
        out["routes"] = [{"rid": i + 1, "name": p.server_name, "sent": {"msgs": 0, "bytes": 0},
                          "received": {"msgs": 0, "bytes": 0}, "pending": 0}
                         for i, p in enumerate(sorted(peers, key=lambda p: p.server_name))]
        out["active_servers"] = len(peers) + 1
    return out


def handle_system_request(server: SysreqHost, subject: str, reply: str | None, payload: bytes) -> bool:
    """Answer ``$SYS.REQ.SERVER.PING[.STATSZ|.JSZ]`` and ``$SYS.REQ.SERVER.<our id>.<kind>``
    in the system account. Returns True when the subject is one this server answers (the
    reply goes to ``reply`` through ``server.route_internal``)."""
    tokens = subject.split(".")
    if len(tokens) < 4 or tokens[:3] != ["$SYS", "REQ", "SERVER"]:
        return False
    target = tokens[3]
    kind = tokens[4] if len(tokens) > 4 else "STATSZ"
    if target != "PING" and target != server.server_id:
        return False
    if len(tokens) > 5:
        return False
    server.sys_seq += 1
    body: dict[str, Any] = {"server": server_info(server, server.sys_seq)}
    if kind == "STATSZ":
        body["statsz"] = statsz(server)
    elif kind == "JSZ":
        body["data"] = jsz(server)
    elif kind == "VARZ":
        body["data"] = varz(server)
    else:
        return False
    if reply:
        account = server.config.system_account or "$SYS"
        data = json.dumps(body, separators=(",", ":")).encode()
        server.route_internal(account, Message(reply, None, None, data))
    return True
