"""``/healthz``: whether this server can serve, and whether its JetStream is current.

The checks, their order, the status codes, the JSON fields and the error texts are
nats-server's (server/monitor.go ``healthz``, ``HealthzOptions``, ``HealthStatus``;
server/jetstream_cluster.go ``isStreamHealthy``/``isConsumerHealthy``; server/raft.go
``isCurrent``), with one difference: in lame duck mode and while shutting down jetraft
answers 503 with the reason, where nats-server answers 500 "failed to be ready for
connections" (its client listener is closed then).

1. ``stream`` without ``account``, or ``consumer`` without ``stream``: 400.
2. Lame duck mode or shutting down: 503 (every option).
3. ``js-server-only``: 200 (nats-server 2.11+ checks nothing more).
4. JetStream not configured: 200. Configured but not running: 503 "JetStream not enabled
   (10076)". ``js-enabled-only`` (or the deprecated ``js-enabled``): 200 from here.
5. Clustered: the meta group. 503 "JetStream is still recovering meta layer" until the
   meta group is open and a route has come up since start (or the group is this server
   alone), "JetStream has not established
   contact with a meta leader" without a known leader, "JetStream is not current with the
   meta leader" when the leader was not heard within :data:`CONTACT_TIMEOUTS` election
   timeouts or what it committed is not applied here, "JetStream meta layer write error:
   ..." when the meta group was stopped by a storage failure. ``js-meta-only``: 200 from here.
6. Every stream (and its consumers) with a replica on this server: 503 "JetStream stream
   '<account> > <stream>' is not current: <why>" (why: "stream not found", "node write
   error: ...", "group node missing", "stream catching up" while the replica completes a
   snapshot from its peers, "group node unhealthy" when its leader was not heard lately or
   committed entries are not applied yet). ``account``/``stream``/``consumer`` restrict the
   check (404 when not assigned here). Single server: 404 for an account, stream or
   consumer that does not exist.

``details=true`` lists every problem in ``errors`` (``type``: CONNECTION, BAD_REQUEST,
JETSTREAM, ACCOUNT, STREAM, CONSUMER) with ``status`` "error"; without it the first
problem is ``error`` with ``status`` "unavailable".

Bounded work: one pass over the meta state's assignments and this server's replicas; no
message is read (the answer is O(streams + consumers), never O(messages)).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jetraft.jetstream.cluster import META_GROUP

if TYPE_CHECKING:
    from jetraft.net.ports import MonitorHost

__all__ = ["CONTACT_TIMEOUTS", "HealthzOptions", "healthz"]

#: A follower that heard nothing from its group's leader for this many election timeouts
#: is not current (nats-server raft.go isCurrent: twice its 1 s heartbeat interval; ours is
#: 0.1 s with a 0.5 s election timeout, so 3 timeouts leave room for a loaded loop).
CONTACT_TIMEOUTS = 3

#: Committed entries a follower may have left to apply and still be current: the pass that
#: received them applies them next (nats-server allows forward progress within 10 ms).
APPLY_SLACK = 32

#: A consumer assigned this long ago and still not on its replica is reported missing
#: (nats-server jetstream_cluster.go isConsumerHealthy: 5 s).
CONSUMER_GRACE_NS = 5_000_000_000

_OK, _BAD_REQUEST, _NOT_FOUND, _UNAVAILABLE = 200, 400, 404, 503
_NA = "unavailable"


@dataclass(frozen=True, slots=True)
class HealthzOptions:
    """The query of ``/healthz`` (nats-server monitor.go HealthzOptions)."""

    js_enabled_only: bool = False
    js_server_only: bool = False
    js_meta_only: bool = False
    account: str = ""
    stream: str = ""
    consumer: str = ""
    details: bool = False


class _Answer:
    """Collects the problems; ``first`` answers at the first one without ``details``."""

    def __init__(self, details: bool) -> None:
        self.details = details
        self.errors: list[dict[str, str]] = []
        self.status = 0

    def add(self, kind: str, error: str, **names: str) -> bool:
        """Record a problem; True when the answer is complete (no ``details``)."""
        self.errors.append({"type": kind, **{k: v for k, v in names.items() if v}, "error": error})
        return not self.details

    def only(self, status: int, kind: str, error: str, **names: str) -> tuple[int, dict[str, Any]]:
        """Answer ``status`` with this one problem (the 400s and 404s of nats-server)."""
        self.errors = []
        self.add(kind, error, **names)
        self.status = status
        return self.result()

    def result(self) -> tuple[int, dict[str, Any]]:
        status = self.status or (_UNAVAILABLE if self.errors else _OK)
        if self.details:
            body: dict[str, Any] = {"status": "error" if self.errors else "ok"}
            if self.errors:
                body["errors"] = self.errors
            return status, body
        if not self.errors:
            return status, {"status": "ok"}
        return status, {"status": "error" if status == _BAD_REQUEST else _NA,
                        "error": self.errors[0]["error"]}


def healthz(server: MonitorHost, opts: HealthzOptions) -> tuple[int, dict[str, Any]]:
    """``/healthz`` for ``opts``: (HTTP status, JSON body) as described in the module
    docstring (nats-server server/monitor.go ``healthz``). Never raises for a state of
    the server; work is bounded by the streams and consumers assigned to it."""
    ans = _Answer(opts.details)
    if opts.stream and not opts.account:
        return ans.only(_BAD_REQUEST, "BAD_REQUEST", '"account" must not be empty when checking stream health')
    if opts.consumer and not opts.stream:
        return ans.only(_BAD_REQUEST, "BAD_REQUEST", '"stream" must not be empty when checking consumer health')
    if not server.healthy:
        ans.add("CONNECTION", "lame duck mode" if server.lame_duck_mode else "server shutting down")
        return ans.result()
    if opts.js_server_only or server.config.jetstream is None:
        return ans.result()
    service = server.jetstream
    if service is None:
        ans.add("JETSTREAM", "JetStream not enabled (10076)")
        return ans.result()
    if opts.js_enabled_only:
        return ans.result()
    cluster = service.cluster
    if cluster is None:
        return _single(service, opts, ans)
    meta_problem = _meta_problem(cluster, time.time_ns())
    if meta_problem is not None:
        ans.add("JETSTREAM", meta_problem)
        return ans.result()
    if opts.js_meta_only:
        return ans.result()
    return _assets(service, cluster, opts, ans)


# ---------------------------------------------------------------------- single server

def _single(service: Any, opts: HealthzOptions, ans: _Answer) -> tuple[int, dict[str, Any]]:
    """A single server: every stream was recovered when JetStream started; only the asked
    account, stream and consumer must exist (an account exists once it holds a stream)."""
    if not opts.account:
        return ans.result()
    acc = service.accounts.get(opts.account)
    if acc is None or not acc.streams:
        return ans.only(_NOT_FOUND, "ACCOUNT", f'JetStream account "{opts.account}" not found',
                        account=opts.account)
    if opts.stream:
        entry = acc.streams.get(opts.stream)
        if entry is None:
            return ans.only(_NOT_FOUND, "STREAM",
                            f'JetStream stream "{opts.stream}" not found on account "{opts.account}"',
                            account=opts.account, stream=opts.stream)
        if opts.consumer and opts.consumer not in entry.consumers:
            return ans.only(_NOT_FOUND, "CONSUMER",
                            f'JetStream consumer "{opts.consumer}" not found for stream '
                            f'"{opts.stream}" on account "{opts.account}"',
                            account=opts.account, stream=opts.stream, consumer=opts.consumer)
    return ans.result()


# ---------------------------------------------------------------------- clustered

def _heard_lately(group: Any, now_ns: int) -> bool:
    """This server leads ``group`` (a leader without a quorum steps down: check-quorum), or
    heard from its leader within CONTACT_TIMEOUTS election timeouts and applied what it
    committed."""
    if group.is_leader:
        return True
    leader = group.leader
    if leader is None:
        return False
    seen = group.heard_ns(leader)
    window = CONTACT_TIMEOUTS * group.host.election_timeout_ns
    if seen is None or now_ns - seen > window:
        return False
    return group.applied_index + APPLY_SLACK >= group.commit_index


def _meta_problem(cluster: Any, now_ns: int) -> str | None:
    """Why the meta layer is not healthy on this server (nats-server's texts), or None."""
    failure = cluster.storage_failures.get(META_GROUP)
    if failure is not None:
        return f"JetStream meta layer write error: {failure.error}"
    group = cluster.meta_group
    alone = group is not None and tuple(group.peers) == (cluster.server.server_name,)
    if group is None or group.closed or not (alone or cluster.routed_since_start()):
        return "JetStream is still recovering meta layer"
    if group.failed is not None:
        return f"JetStream meta layer write error: {group.failed}"
    if group.leader is None:
        return "JetStream has not established contact with a meta leader"
    if cluster.server.server_name not in group.peers or not _heard_lately(group, now_ns):
        return "JetStream is not current with the meta leader"
    return None


def _assets(service: Any, cluster: Any, opts: HealthzOptions,
            ans: _Answer) -> tuple[int, dict[str, Any]]:
    """Every stream and consumer assigned to this server (or the ones asked for)."""
    me = cluster.server.server_name
    meta = cluster.meta
    streams = meta.streams
    if opts.account:
        if not any(key[0] == opts.account for key in streams):
            return ans.only(_NOT_FOUND, "ACCOUNT", f'JetStream account "{opts.account}" not found',
                            account=opts.account)
        if opts.stream:
            sa = streams.get((opts.account, opts.stream))
            if sa is None or me not in sa.peers:
                return ans.only(_NOT_FOUND, "STREAM",
                                f'JetStream stream "{opts.stream}" not found on account "{opts.account}"',
                                account=opts.account, stream=opts.stream)
            keys = [sa.key]
            if opts.consumer:
                ca = meta.consumers.get((opts.account, opts.stream, opts.consumer))
                if ca is None or me not in ca.peers:
                    return ans.only(_NOT_FOUND, "CONSUMER",
                                    f'JetStream consumer "{opts.consumer}" not found for stream '
                                    f'"{opts.stream}" on account "{opts.account}"',
                                    account=opts.account, stream=opts.stream, consumer=opts.consumer)
        else:
            keys = sorted(k for k, sa in streams.items() if k[0] == opts.account and me in sa.peers)
    else:
        keys = sorted(k for k, sa in streams.items() if me in sa.peers)
    consumers: dict[tuple[str, str], list[Any]] = {}
    wanted = set(keys)
    for ckey, ca in meta.consumers.items():
        if (ckey[0], ckey[1]) in wanted and me in ca.peers and (not opts.consumer or ckey[2] == opts.consumer):
            consumers.setdefault((ckey[0], ckey[1]), []).append(ca)
    now_ns = time.time_ns()
    for key in keys:
        account, stream = key
        why = _stream_problem(service, cluster, streams[key], now_ns)
        if why is not None:
            if ans.add("STREAM", f"JetStream stream '{account} > {stream}' is not current: {why}",
                       account=account, stream=stream):
                return ans.result()
            continue
        for ca in sorted(consumers.get(key, ()), key=lambda c: c.name):
            cwhy = _consumer_problem(service, cluster, ca, now_ns)
            if cwhy is not None and ans.add(
                    "CONSUMER", f"JetStream consumer '{account} > {stream} > {ca.name}' is not current: {cwhy}",
                    account=account, stream=stream, consumer=ca.name):
                return ans.result()
    return ans.result()


def _replicas(config: dict[str, Any]) -> int:
    try:
        return int(config.get("num_replicas") or 1)
    except (TypeError, ValueError):
        return 1


def _stream_problem(service: Any, cluster: Any, sa: Any, now_ns: int) -> str | None:
    """Why this server's replica of ``sa`` is not current (nats-server isStreamHealthy)."""
    failure = cluster.storage_failures.get(sa.group)
    acc = service.accounts.get(sa.account)
    replica = cluster.replicas.get(sa.key)
    if replica is None or acc is None or sa.name not in acc.streams:
        if failure is not None:
            return f"node write error: {failure.error}"
        return "stream not found"
    if _replicas(sa.config) <= 1:
        return None
    group = cluster.groups.get(sa.key)
    if group is None or group.closed:
        return "group node missing"
    if failure is not None or group.failed is not None:
        return f"node write error: {failure.error if failure is not None else group.failed}"
    if replica.holding:
        return "stream catching up"
    if not _heard_lately(group, now_ns):
        return "group node unhealthy"
    return None


def _consumer_problem(service: Any, cluster: Any, ca: Any, now_ns: int) -> str | None:
    """Why this server's copy of consumer ``ca`` is not current (nats-server
    isConsumerHealthy). Consumers are replicated in their stream's group here, so the
    group's state was checked with the stream's."""
    acc = service.accounts.get(ca.account)
    entry = acc.streams.get(ca.stream) if acc is not None else None
    if entry is None:
        return "stream missing"
    if ca.name not in entry.consumers and now_ns - ca.created_ns >= CONSUMER_GRACE_NS:
        return "consumer not found"
    return None
