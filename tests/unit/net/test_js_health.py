"""jetraft.net.jetstream.health with small stand-ins for the server, its JetStream service and
its cluster: the answers of /healthz for states hard to reach on running servers."""

from __future__ import annotations

import time
from types import SimpleNamespace

from jetraft.jetstream.cluster import META_GROUP
from jetraft.net.jetstream.health import CONSUMER_GRACE_NS, HealthzOptions, healthz
from jetraft.net.monitoring.monitor import healthz as monitor_healthz

ELECTION_NS = 500_000_000


class Group:
    """A RaftGroup stand-in: this server follows ``leader``, heard ``heard_ago_s`` ago."""

    def __init__(self, peers=("a", "b", "c"), leader="b", heard_ago_s=0.1, applied=10, commit=10,
                 is_leader=False):
        self.peers, self.leader, self.is_leader = peers, leader, is_leader
        self.applied_index, self.commit_index = applied, commit
        self.closed, self.failed = False, None
        self.host = SimpleNamespace(election_timeout_ns=ELECTION_NS)
        self._heard = time.time_ns() - int(heard_ago_s * 1e9)

    def heard_ns(self, peer):
        return self._heard if peer == self.leader else None


def make(meta_group=None, streams=(), consumers=(), routed=True, failures=None, holding=False,
         replica_groups=None, on_replica=True):
    sas = {(sa.account, sa.name): sa for sa in streams}
    cas = {(ca.account, ca.stream, ca.name): ca for ca in consumers}
    entries = {sa.name: SimpleNamespace(consumers={ca.name: object() for ca in consumers
                                                   if ca.stream == sa.name and on_replica})
               for sa in streams}
    cluster = SimpleNamespace(
        server=SimpleNamespace(server_name="a"), meta_group=meta_group or Group(),
        storage_failures=failures or {}, routed_since_start=lambda: routed,
        meta=SimpleNamespace(streams=sas, consumers=cas),
        replicas={k: SimpleNamespace(holding=holding) for k in sas},
        groups=replica_groups if replica_groups is not None else {k: Group() for k in sas})
    service = SimpleNamespace(cluster=cluster, accounts={"APP": SimpleNamespace(streams=entries)})
    return SimpleNamespace(healthy=True, lame_duck_mode=False, config=SimpleNamespace(jetstream=object()),
                           jetstream=service)


def sa(name="S", replicas=3, peers=("a", "b", "c")):
    return SimpleNamespace(account="APP", name=name, config={"num_replicas": replicas}, group=f"S-{name}",
                           peers=peers, key=("APP", name))


def ca(name="C", stream="S", age_s=60.0):
    return SimpleNamespace(account="APP", stream=stream, name=name, peers=("a", "b", "c"),
                           created_ns=time.time_ns() - int(age_s * 1e9))


def test_a_follower_that_has_not_heard_its_meta_leader_lately_is_not_current():
    server = make(Group(heard_ago_s=5))
    assert healthz(server, HealthzOptions()) == (503, {
        "status": "unavailable", "error": "JetStream is not current with the meta leader"})
    assert healthz(make(Group(applied=10, commit=500)), HealthzOptions())[1]["error"] == \
        "JetStream is not current with the meta leader"
    assert healthz(make(Group(peers=("b", "c", "d"))), HealthzOptions())[1]["error"] == \
        "JetStream is not current with the meta leader"
    assert healthz(make(Group(leader=None)), HealthzOptions())[1]["error"] == \
        "JetStream has not established contact with a meta leader"
    assert healthz(make(routed=False), HealthzOptions())[1]["error"] == \
        "JetStream is still recovering meta layer"
    assert healthz(make(Group(heard_ago_s=5)), HealthzOptions(js_server_only=True)) == (200, {"status": "ok"})
    assert healthz(make(Group(heard_ago_s=5)), HealthzOptions(js_enabled_only=True)) == (200, {"status": "ok"})


def test_a_meta_storage_failure_is_a_meta_write_error():
    failure = SimpleNamespace(error=OSError(28, "No space left on device"))
    server = make(failures={META_GROUP: failure})
    assert healthz(server, HealthzOptions(details=True)) == (503, {"status": "error", "errors": [
        {"type": "JETSTREAM", "error": "JetStream meta layer write error: [Errno 28] No space left on device"}]})


def test_stream_replicas_catching_up_failed_or_unheard_are_not_current():
    s1, s2, s3, s4 = sa("A"), sa("B"), sa("C"), sa("D", replicas=1, peers=("a",))
    groups = {s1.key: Group(), s2.key: Group(heard_ago_s=5), s3.key: Group()}
    failure = SimpleNamespace(error=OSError(5, "Input/output error"))
    server = make(streams=[s1, s2, s3, s4], replica_groups=groups, failures={s3.group: failure})
    status, body = healthz(server, HealthzOptions(details=True))
    assert status == 503
    assert body["errors"] == [
        {"type": "STREAM", "account": "APP", "stream": "B",
         "error": "JetStream stream 'APP > B' is not current: group node unhealthy"},
        {"type": "STREAM", "account": "APP", "stream": "C",
         "error": "JetStream stream 'APP > C' is not current: node write error: [Errno 5] Input/output error"}]
    assert healthz(server, HealthzOptions()) == (503, {
        "status": "unavailable", "error": "JetStream stream 'APP > B' is not current: group node unhealthy"})
    holding = make(streams=[s1], holding=True)
    assert healthz(holding, HealthzOptions())[1]["error"] == \
        "JetStream stream 'APP > A' is not current: stream catching up"
    assert healthz(holding, HealthzOptions(js_meta_only=True)) == (200, {"status": "ok"})
    other = make(streams=[sa("E", peers=("b", "c", "d"))], replica_groups={})
    assert healthz(other, HealthzOptions()) == (200, {"status": "ok"}), "not a replica here: not checked"


def test_a_consumer_missing_from_its_replica_is_reported_after_its_grace():
    assert CONSUMER_GRACE_NS == 5_000_000_000
    missing = make(streams=[sa()], consumers=[ca()], on_replica=False)
    assert healthz(missing, HealthzOptions(account="APP", stream="S", consumer="C")) == (503, {
        "status": "unavailable", "error": "JetStream consumer 'APP > S > C' is not current: consumer not found"})
    young = make(streams=[sa()], consumers=[ca(age_s=1)], on_replica=False)
    assert healthz(young, HealthzOptions()) == (200, {"status": "ok"})
    assert healthz(make(streams=[sa()], consumers=[ca()]), HealthzOptions(account="APP", stream="S",
                                                                       consumer="X")) == (404, {
        "status": "unavailable", "error": 'JetStream consumer "X" not found for stream "S" on account "APP"'})


def test_a_check_that_raises_fails_closed():
    server = make()
    server.jetstream.cluster.meta_group = SimpleNamespace()     # no attributes at all
    status, body = monitor_healthz(server, {})
    assert status == 503 and body["status"] == "unavailable"
    assert body["error"].startswith("health check failed: AttributeError")
