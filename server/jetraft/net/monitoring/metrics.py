"""``/metrics`` on the monitoring port: the server's state in the Prometheus text format.

Each server has its own :class:`~prometheus_client.CollectorRegistry` (nothing is put in
prometheus_client's global one) holding one :class:`JetraftCollector`, which reads the
server's state through :class:`~jetraft.net.ports.MonitorHost` when it is scraped, as
``/varz`` and ``/jsz`` do. A scrape runs on the event loop; its work is proportional to the
server's streams, consumers and RAFT groups, never to their messages.

What a scrape shows (labels in braces; the exposition adds ``_total`` to counters and
``_bucket``/``_count``/``_sum`` to the histogram):

- the server (``/varz``): ``jetraft_server_info{server_id,server_name,version,cluster}``
  (always 1), ``jetraft_connections`` (client connections open now),
  ``jetraft_connections_accepted_total``, ``jetraft_in_msgs_total``, ``jetraft_out_msgs_total``,
  ``jetraft_in_bytes_total``, ``jetraft_out_bytes_total``, ``jetraft_slow_consumers_total``,
  ``jetraft_routes`` (routes to other servers), ``jetraft_subscriptions``,
  ``jetraft_start_time_seconds`` (Unix time), ``jetraft_jetstream_enabled`` (1 or 0);
- JetStream, per stream replica on this server (``/jsz?streams=true``), labels
  ``{account,stream}``: ``jetraft_stream_messages``, ``jetraft_stream_bytes``,
  ``jetraft_stream_first_seq``, ``jetraft_stream_last_seq``, ``jetraft_stream_consumers``;
  per consumer, labels ``{account,stream,consumer}``, as CONSUMER.INFO answers:
  ``jetraft_consumer_num_pending`` (messages still to deliver),
  ``jetraft_consumer_num_ack_pending``, ``jetraft_consumer_num_redelivered``,
  ``jetraft_consumer_delivered_consumer_seq``, ``jetraft_consumer_delivered_stream_seq``,
  ``jetraft_consumer_ack_floor_stream_seq``;
- RAFT, per group this server is a member of (the meta group ``_meta_``, with empty
  ``account`` and ``stream``, and one group per replicated stream), labels
  ``{group,account,stream}``: ``jetraft_raft_term``, ``jetraft_raft_commit_index``,
  ``jetraft_raft_applied_index``, ``jetraft_raft_is_leader`` (1 or 0),
  ``jetraft_raft_failed`` (1: stopped here by a storage failure),
  ``jetraft_raft_leader_changes_total`` (leaders this server learned of since it opened the
  group); on the group's leader only, per other member (``peer`` label added):
  ``jetraft_raft_replica_lag`` (log entries behind the leader's last index) and
  ``jetraft_raft_replica_current`` (1: online and at most
  :data:`~jetraft.net.raft.group.CURRENT_LAG` entries behind);
- storage: ``jetraft_fsync_duration_seconds`` (histogram of the wall time of each
  durability pass that fsynced at least one file: a group commit's fdatasync of every
  dirty file then fsync of every dirty directory, or one immediate fsync), and
  ``jetraft_fsyncs_total`` (files and directories fsynced);
- ``jetraft_scrape_collector_up{collector}`` for ``server``, ``jetstream``, ``raft`` and
  ``storage``: 1 when that part was read whole, 0 when reading it raised (its metrics are
  then left out, partly or wholly; the error is logged): a part that cannot be read is
  never shown as empty.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from jetraft import NATS_COMPAT_VERSION, __version__
from jetraft.net.jetstream.durability import TimedGroupCommit

if TYPE_CHECKING:
    from jetraft.net.ports import MonitorHost

__all__ = ["JetraftCollector", "ServerMetrics", "metrics_for", "serve_metrics"]

log = logging.getLogger(__name__)

#: Per stream: (field of its state, help); the metric is ``jetraft_stream_<field>``.
_STREAM_FIELDS = (
    ("messages", "Messages in the stream"),
    ("bytes", "Bytes the stream's messages take"),
    ("first_seq", "Sequence of the stream's first message"),
    ("last_seq", "Sequence of the stream's last message"),
    ("consumers", "Consumers of the stream"),
)
#: Per consumer: (path in its CONSUMER.INFO answer, help); the metric is
#: ``jetraft_consumer_<path joined by _>``.
_CONSUMER_FIELDS = (
    (("num_pending",), "Messages of the stream matching the consumer not delivered yet"),
    (("num_ack_pending",), "Messages delivered and not acknowledged yet"),
    (("num_redelivered",), "Messages delivered more than once and not acknowledged yet"),
    (("delivered", "consumer_seq"), "Deliveries made (redeliveries included)"),
    (("delivered", "stream_seq"), "Stream sequence of the last message delivered"),
    (("ack_floor", "stream_seq"), "Stream sequence up to which every message is acknowledged"),
)

_STREAM = ("account", "stream")
_CONSUMER = ("account", "stream", "consumer")
_GROUP = ("group", "account", "stream")
_REPLICA = ("group", "account", "stream", "peer")


class JetraftCollector(Collector):
    """A prometheus_client custom collector reading ``host`` (a
    :class:`~jetraft.net.ports.MonitorHost`) at each scrape; see the module docstring for
    the metrics. Each part (server, jetstream, raft, storage) is read on its own: one that
    raises is reported by ``jetraft_scrape_collector_up`` 0 and does not stop the others."""

    def __init__(self, host: MonitorHost) -> None:
        self.host = host

    def describe(self) -> Iterable[Metric]:
        return []       # the metrics depend on the streams and groups of the moment

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("jetraft_scrape_collector_up",
                               "1 when this part of the scrape was read whole, 0 when reading it failed",
                               labels=["collector"])
        for name, part in (("server", self._server), ("jetstream", self._jetstream),
                           ("raft", self._raft), ("storage", self._storage)):
            metrics: list[Metric] = []
            ok = 1
            try:
                ok = part(metrics)
            except Exception:  # noqa: BLE001 - one part's failure is reported, not raised
                log.exception("/metrics: reading the %s metrics failed", name)
                ok = 0
            yield from metrics
            up.add_metric([name], ok)
        yield up

    # -- the server (/varz) -------------------------------------------------------------

    def _server(self, out: list[Metric]) -> int:
        host = self.host
        stats = host.stats
        cfg = host.config
        info = GaugeMetricFamily("jetraft_server_info",
                                 "This server: its id, name, NATS version and cluster (value 1)",
                                 labels=["server_id", "server_name", "version", "jetraft_version",
                                         "cluster"])
        info.add_metric([host.server_id, host.server_name, NATS_COMPAT_VERSION, __version__,
                         cfg.cluster.name if cfg.cluster is not None and cfg.cluster.name else ""], 1)
        out.append(info)
        out.append(GaugeMetricFamily("jetraft_connections", "Client connections open now",
                                     value=len(host.clients)))
        for name, doc, value in (
                ("jetraft_connections_accepted", "Client connections accepted since start", stats.total_connections),
                ("jetraft_in_msgs", "Messages received from clients and routes", stats.in_msgs),
                ("jetraft_out_msgs", "Messages sent to clients and routes", stats.out_msgs),
                ("jetraft_in_bytes", "Payload bytes received from clients and routes", stats.in_bytes),
                ("jetraft_out_bytes", "Payload bytes sent to clients and routes", stats.out_bytes),
                ("jetraft_slow_consumers", "Connections closed or marked as slow consumers",
                 stats.slow_consumers)):
            out.append(CounterMetricFamily(name, doc, value=value))
        routes = host.routes
        out.append(GaugeMetricFamily("jetraft_routes", "Routes to other servers of the cluster",
                                     value=len(routes.peers) if routes is not None else 0))
        out.append(GaugeMetricFamily("jetraft_subscriptions", "Client subscriptions, every account",
                                     value=sum(len(a.sublist) for a in host.accounts.values())))
        out.append(GaugeMetricFamily("jetraft_start_time_seconds", "When the server started, Unix time",
                                     value=host.start_ns / 1e9))
        out.append(GaugeMetricFamily("jetraft_jetstream_enabled", "1 when JetStream runs on this server",
                                     value=0 if host.jetstream is None else 1))
        return 1

    # -- JetStream: streams and consumers (/jsz) ------------------------------------------

    def _jetstream(self, out: list[Metric]) -> int:
        service = self.host.jetstream
        if service is None:
            return 1
        streams = [(GaugeMetricFamily(f"jetraft_stream_{field}", doc, labels=_STREAM), field)
                   for field, doc in _STREAM_FIELDS]
        consumers = [(GaugeMetricFamily(f"jetraft_consumer_{'_'.join(path)}", doc, labels=_CONSUMER), path)
                     for path, doc in _CONSUMER_FIELDS]
        ok = 1
        now = time.time_ns()
        for acc in service.accounts.values():
            for name, entry in list(acc.streams.items()):
                try:
                    st = entry.stream.store.state()
                    infos = [(cname, c.info(now)) for cname, c in list(entry.consumers.items())]
                except Exception:  # noqa: BLE001 - this stream is left out, the scrape goes on
                    log.exception("/metrics: reading stream %s > %s failed", acc.name, name)
                    ok = 0
                    continue
                state = {"messages": st.messages, "bytes": st.bytes, "first_seq": st.first_seq,
                         "last_seq": st.last_seq, "consumers": len(infos)}
                for family, field in streams:
                    family.add_metric([acc.name, name], state[field])
                for cname, info in infos:
                    for family, path in consumers:
                        value = info
                        for key in path:
                            value = value.get(key) or {}
                        family.add_metric([acc.name, name, cname], value or 0)
        out.extend(family for family, _ in streams)
        out.extend(family for family, _ in consumers)
        return ok

    # -- RAFT groups ----------------------------------------------------------------------

    def _raft(self, out: list[Metric]) -> int:
        service = self.host.jetstream
        cluster = service.cluster if service is not None else None
        if cluster is None:
            return 1
        groups: list[tuple[list[str], Any]] = []
        if cluster.meta_group is not None:
            groups.append(([cluster.meta_group.name, "", ""], cluster.meta_group))
        for (account, stream), group in list(cluster.groups.items()):
            groups.append(([group.name, account, stream], group))
        term = GaugeMetricFamily("jetraft_raft_term", "The group's current term on this server", labels=_GROUP)
        commit = GaugeMetricFamily("jetraft_raft_commit_index", "Index of the last entry known committed",
                                   labels=_GROUP)
        applied = GaugeMetricFamily("jetraft_raft_applied_index", "Index of the last entry applied here",
                                    labels=_GROUP)
        leader = GaugeMetricFamily("jetraft_raft_is_leader", "1 when this server leads the group", labels=_GROUP)
        failed = GaugeMetricFamily("jetraft_raft_failed", "1 when the group was stopped here by a storage failure",
                                   labels=_GROUP)
        changes = CounterMetricFamily("jetraft_raft_leader_changes",
                                      "Leaders (a new server or a new term) this server learned of since it "
                                      "opened the group", labels=_GROUP)
        lag = GaugeMetricFamily("jetraft_raft_replica_lag",
                                "On the leader: log entries the peer is behind the leader's last index",
                                labels=_REPLICA)
        current = GaugeMetricFamily("jetraft_raft_replica_current",
                                    "On the leader: 1 when the peer is online and current", labels=_REPLICA)
        ok = 1
        now = time.time_ns()
        for labels, group in groups:
            if group.closed:
                continue
            try:
                values = (group.term, group.commit_index, group.applied_index, int(group.is_leader),
                          int(group.failed is not None), group.leader_changes)
                replicas = group.replicas(now)
            except Exception:  # noqa: BLE001 - this group is left out, the scrape goes on
                log.exception("/metrics: reading RAFT group %s failed", labels[0])
                ok = 0
                continue
            for family, value in zip((term, commit, applied, leader, failed, changes), values):
                family.add_metric(labels, value)
            for r in replicas:
                lag.add_metric([*labels, r["name"]], r["lag"])
                current.add_metric([*labels, r["name"]], int(r["current"]))
        out.extend((term, commit, applied, leader, failed, changes, lag, current))
        return ok

    # -- storage --------------------------------------------------------------------------

    def _storage(self, out: list[Metric]) -> int:
        service = self.host.jetstream
        commit = getattr(service, "commit", None) if service is not None else None
        if commit is None:
            return 1
        out.append(CounterMetricFamily("jetraft_fsyncs", "Files and directories fsynced", value=commit.fsyncs))
        if isinstance(commit, TimedGroupCommit):
            out.extend(commit.fsync_seconds.collect())
        return 1


class ServerMetrics:
    """One server's registry (``registry``) holding its :class:`JetraftCollector`."""

    def __init__(self, host: MonitorHost) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(JetraftCollector(host))

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) of a scrape, in the format ``accept`` (the request's
        Accept header) asks for: the Prometheus text format 0.0.4 by default, OpenMetrics
        when asked."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


#: Each server's metrics, for as long as the server object lives.
_METRICS: weakref.WeakKeyDictionary[Any, ServerMetrics] = weakref.WeakKeyDictionary()


def metrics_for(host: MonitorHost) -> ServerMetrics:
    """The :class:`ServerMetrics` of ``host``, made at its first scrape. (A host that
    cannot be weakly referenced gets new ones each time: they hold no state of their own,
    the fsync histogram lives in the server's :class:`TimedGroupCommit`.)"""
    try:
        found = _METRICS.get(host)
    except TypeError:
        return ServerMetrics(host)
    if found is None:
        found = _METRICS[host] = ServerMetrics(host)
    return found


async def serve_metrics(host: MonitorHost, scope: dict, send: Callable[[dict], Any]) -> None:
    """Answer one ASGI HTTP request for ``/metrics``: 200 with a scrape (GET; HEAD without
    the body), 405 for any other method, 500 (text) when the scrape itself fails."""
    method = scope.get("method", "GET")
    if method not in ("GET", "HEAD"):
        status, body, ctype = 405, b"method not allowed\n", "text/plain; charset=utf-8"
    else:
        accept = None
        for key, value in scope.get("headers", []):
            if key.lower() == b"accept":
                accept = value.decode("latin-1")
        try:
            status = 200
            body, ctype = metrics_for(host).exposition(accept)
        except Exception as exc:  # noqa: BLE001 - the scrape fails, the monitor goes on
            log.exception("/metrics: the scrape failed")
            status, body, ctype = 500, f"scrape failed: {exc!r}\n".encode(), "text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
