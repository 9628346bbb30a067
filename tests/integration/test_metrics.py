"""``/metrics`` on the monitoring port, as a Prometheus server and a Grafana user see it.

A scrape is parsed with prometheus_client's own text parser; the values asserted are the
ones a user reads off a dashboard: message counts, a stream's messages, a consumer's
pending counts, one RAFT leader per group, the fsync histogram. The Grafana dashboard
shipped with jetraft must only query metrics a server exposes.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import nats
import pytest
from polling import poll
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.parser import text_string_to_metric_families
from servers import start_server

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "jetraft-dashboard.json"
NAMES = ("n1", "n2", "n3")


def scrape(server, path: str = "/metrics") -> tuple[int, str, str]:
    """GET ``path`` on ``server``'s monitoring port: (status, content type, body text)."""
    url = f"http://127.0.0.1:{server.http_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


class Samples:
    """One scrape's samples, looked up by sample name and labels."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples = [s for f in self.families.values() for s in f.samples]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def all(self, name: str, **labels: str) -> list:
        return [s for s in self.samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        found = self.all(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples: {found}"
        return found[0].value


def metrics_of(server) -> Samples:
    status, ctype, text = scrape(server)
    assert status == 200, text[:500]
    assert ctype == CONTENT_TYPE_PLAIN_0_0_4   # what a scraper without an Accept header gets
    return Samples(text)


# ------------------------------------------------------------------ one server


@pytest.fixture
def single(tmp_path):
    store = tmp_path / "store"
    server = start_server("jetraft", tmp_path, f'jetstream {{ store_dir: "{store}" }}', http=True)
    try:
        yield server
    finally:
        server.stop()


async def _orders(url: str, replicas: int = 1) -> None:
    """Stream ORDERS with 5 messages; pull consumer C1 fetched 2 of them, acknowledged none."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"], num_replicas=replicas)
        for i in range(5):
            await js.publish(f"orders.{i}", b"x" * 100)
        sub = await js.pull_subscribe("orders.>", durable="C1", stream="ORDERS")
        msgs = await sub.fetch(2, timeout=5)
        assert len(msgs) == 2
    finally:
        await nc.close()


def test_a_scrape_shows_the_servers_streams_and_consumers(single):
    asyncio.run(asyncio.wait_for(_orders(single.url), 60))
    m = metrics_of(single)
    # the server: what it received, one connection made at least (ours, now closed)
    assert m.value("jetraft_in_msgs_total") >= 5
    assert m.value("jetraft_in_bytes_total") >= 500
    assert m.value("jetraft_out_msgs_total") >= 2
    assert m.value("jetraft_connections_accepted_total") >= 1
    assert m.value("jetraft_connections") == 0
    assert m.value("jetraft_slow_consumers_total") == 0
    assert m.value("jetraft_routes") == 0
    assert m.value("jetraft_server_info", server_name=single_name(m)) == 1
    assert m.value("jetraft_jetstream_enabled") == 1
    # the stream
    s = {"account": "$G", "stream": "ORDERS"}
    assert m.value("jetraft_stream_messages", **s) == 5
    assert m.value("jetraft_stream_bytes", **s) > 500
    assert m.value("jetraft_stream_first_seq", **s) == 1
    assert m.value("jetraft_stream_last_seq", **s) == 5
    assert m.value("jetraft_stream_consumers", **s) == 1
    # the consumer: 2 delivered and unacknowledged, 3 still to deliver
    c = {**s, "consumer": "C1"}
    assert m.value("jetraft_consumer_num_pending", **c) == 3
    assert m.value("jetraft_consumer_num_ack_pending", **c) == 2
    assert m.value("jetraft_consumer_num_redelivered", **c) == 0
    assert m.value("jetraft_consumer_delivered_stream_seq", **c) == 2
    assert m.value("jetraft_consumer_delivered_consumer_seq", **c) == 2
    assert m.value("jetraft_consumer_ack_floor_stream_seq", **c) == 0
    # every publish was acknowledged after an fsync (jetraft's default)
    count = m.value("jetraft_fsync_duration_seconds_count")
    assert count >= 5
    assert m.value("jetraft_fsync_duration_seconds_bucket", le="+Inf") == count
    assert m.value("jetraft_fsync_duration_seconds_sum") > 0
    assert m.value("jetraft_fsyncs_total") >= count
    # every part of the scrape was collected
    for part in ("server", "jetstream", "raft", "storage"):
        assert m.value("jetraft_scrape_collector_up", collector=part) == 1


def single_name(m: Samples) -> str:
    (info,) = m.all("jetraft_server_info")
    assert info.labels["server_id"]
    return info.labels["server_name"]


def test_metrics_answers_only_get(single):
    req = urllib.request.Request(f"http://127.0.0.1:{single.http_port}/metrics", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 405


def test_a_server_without_jetstream_says_so(tmp_path):
    server = start_server("jetraft", tmp_path, "", http=True)
    try:
        m = metrics_of(server)
        assert m.value("jetraft_jetstream_enabled") == 0
        assert not m.all("jetraft_stream_messages")
        assert not m.all("jetraft_raft_term")
    finally:
        server.stop()


# ------------------------------------------------------------------ a cluster of three


@pytest.fixture(scope="module")
def cluster(formed_cluster):
    with formed_cluster("jetraft", "metrics", 3, jetstream=True) as c:
        asyncio.run(asyncio.wait_for(_orders(c.servers["n1"].url, replicas=3), 90))
        yield c


def test_a_cluster_shows_one_leader_per_group_and_current_replicas(cluster):
    def settled():
        scrapes = {n: metrics_of(cluster.servers[n]) for n in NAMES}
        groups = {s.labels["group"] for m in scrapes.values() for s in m.all("jetraft_raft_term")}
        stream_groups = {s.labels["group"] for m in scrapes.values()
                         for s in m.all("jetraft_raft_term", account="$G", stream="ORDERS")}
        assert len(groups) == 2 and len(stream_groups) == 1, groups   # the meta group, ORDERS
        for g in groups:
            leaders = [n for n, m in scrapes.items() if m.value("jetraft_raft_is_leader", group=g) == 1]
            assert len(leaders) == 1, (g, leaders)
            leader = scrapes[leaders[0]]
            lags = leader.all("jetraft_raft_replica_lag", group=g)
            assert sorted(s.labels["peer"] for s in lags) == sorted(set(NAMES) - set(leaders))
            assert all(s.value == 0 for s in lags), lags
            assert all(s.value == 1 for s in leader.all("jetraft_raft_replica_current", group=g))
            for n, m in scrapes.items():
                assert m.value("jetraft_raft_term", group=g) >= 1
                assert m.value("jetraft_raft_leader_changes_total", group=g) >= 1
                assert m.value("jetraft_raft_applied_index", group=g) == m.value(
                    "jetraft_raft_commit_index", group=g) >= 1
                if n != leaders[0]:
                    assert not m.all("jetraft_raft_replica_lag", group=g)
        for m in scrapes.values():  # every replica holds the 5 messages and the consumer
            assert m.value("jetraft_stream_messages", account="$G", stream="ORDERS") == 5
            assert m.value("jetraft_consumer_num_ack_pending", account="$G", stream="ORDERS",
                           consumer="C1") == 2
            assert m.value("jetraft_routes") == 2
            assert m.value("jetraft_fsync_duration_seconds_count") > 0
        return scrapes
    poll(settled, "one leader per group, replicas current, every replica's metrics", 30,
         retry_on=(AssertionError,))


# ------------------------------------------------------------------ the Grafana dashboard


def _exprs(panels: list[dict]) -> list[str]:
    out = []
    for panel in panels:
        out += [t["expr"] for t in panel.get("targets", [])]
        out += _exprs(panel.get("panels", []))     # rows may hold panels
    return out


def test_the_grafana_dashboard_queries_only_exposed_metrics(cluster):
    dash = json.loads(DASHBOARD.read_text())
    assert isinstance(dash["schemaVersion"], int) and dash["title"]
    assert dash["panels"]
    for panel in dash["panels"]:
        assert {"id", "type", "title", "gridPos"} <= panel.keys(), panel
    exprs = _exprs(dash["panels"])
    assert exprs
    exposed: set[str] = set()
    for n in NAMES:
        exposed |= poll(lambda n=n: metrics_of(cluster.servers[n]).names(), "a scrape", 10,
                        retry_on=(AssertionError,))
    for expr in exprs:
        used = set(re.findall(r"\bjetraft_[a-z0-9_]+", expr))
        assert used, f"panel query without a jetraft metric: {expr}"
        assert used <= exposed, f"{expr}: not exposed: {sorted(used - exposed)}"


# ------------------------------------------------------------------ a part that breaks


def test_a_part_that_cannot_be_read_is_reported_down_and_the_rest_still_shown():
    """The JetStream state raises when read: the scrape still answers, with the server's
    counters, and ``jetraft_scrape_collector_up{collector="jetstream"}`` 0 instead of an
    empty (seemingly healthy) stream list."""
    from types import SimpleNamespace

    from jetraft.net.monitoring.metrics import ServerMetrics

    class BrokenAccounts:
        def values(self):
            raise RuntimeError("store unreadable")

    stats = SimpleNamespace(in_msgs=7, in_bytes=70, out_msgs=3, out_bytes=30, slow_consumers=0,
                            total_connections=2)
    host = SimpleNamespace(
        server_id="NID", server_name="n1", config=SimpleNamespace(cluster=None), stats=stats,
        clients={}, routes=None, accounts={}, start_ns=1_700_000_000 * 10**9,
        jetstream=SimpleNamespace(accounts=BrokenAccounts(), cluster=None, commit=None))
    body, ctype = ServerMetrics(host).exposition()
    m = Samples(body.decode())
    assert m.value("jetraft_scrape_collector_up", collector="jetstream") == 0
    for part in ("server", "raft", "storage"):
        assert m.value("jetraft_scrape_collector_up", collector=part) == 1
    assert m.value("jetraft_in_msgs_total") == 7
    assert m.value("jetraft_start_time_seconds") == 1_700_000_000
    assert not m.all("jetraft_stream_messages")
