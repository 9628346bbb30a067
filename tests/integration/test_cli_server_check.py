"""``jetraft server check ...`` as a monitoring system runs it, against jetraft and nats-server.

Each check prints one Nagios line (``STATUS NAME Crit:... Warn:... OK:... | perfdata``) and
exits 0 OK, 1 WARNING, 2 CRITICAL; the tests set thresholds so that every outcome comes
from what the server really holds (e.g. 10 messages against --msgs-critical 20).
"""

from __future__ import annotations

import json
import re
import time

import pytest

import servers
from test_admin_cli import Admin
from servers import js_config

OK, WARNING, CRITICAL = 0, 1, 2


@pytest.fixture
def admin(start_server, tmp_path) -> Admin:
    """jetraft commands against the server under test (JetStream enabled)."""
    return Admin(start_server(js_config(tmp_path / "store")).url, tmp_path)


def perf(line: str) -> dict[str, str]:
    """The perfdata after ``|``: name -> ``value[unit][;warn][;crit]``."""
    assert " | " in line, line
    return dict(item.split("=", 1) for item in line.split(" | ", 1)[1].split())


# --------------------------------------------------------------------------- connection


def test_connection_ok_warning_critical(admin):
    """Defaults: OK with the connect, rtt and request times; thresholds below any real
    time give WARNING, then CRITICAL; JSON carries the same verdict."""
    ok = admin("server", "check", "connection", code=OK).stdout.strip()
    assert re.fullmatch(r"OK Connection OK:connected to nats://127\.0\.0\.1:\d+ in \S+ OK:rtt time \S+ "
                        r"OK:round trip took [0-9.]+s \| .*", ok), ok
    data = perf(ok)
    assert re.fullmatch(r"[0-9.]+s;0\.5000;1\.0000", data["connect_time"]), data
    assert set(data) == {"connect_time", "rtt", "request_time"}

    warn = admin("server", "check", "conn", "--connect-warn", "1ns",
                 "--req-warn", "1ns", code=WARNING).stdout.strip()
    assert warn.startswith("WARNING Connection Warn:connected to nats://127.0.0.1:"), warn
    assert "connect time exceeded 1e-09 Warn:round trip request took " in warn
    assert "OK:rtt time " in warn

    crit = admin("server", "check", "connection", "--connect-critical", "1ns", "--rtt-critical", "1ns",
                 code=CRITICAL).stdout.strip()
    assert crit.startswith("CRITICAL Connection Crit:connected to nats://127.0.0.1:"), crit
    assert "Crit:rtt time exceeded 1e-09" in crit and "OK:round trip took" in crit

    as_json = json.loads(admin("server", "check", "--format", "json", "connection", "--req-critical", "1ns",
                               code=CRITICAL).stdout)
    assert as_json["status"] == "CRITICAL" and as_json["check_suite"] == "connections"
    assert as_json["check_name"] == "Connection" and as_json["critical"][0].startswith("round trip request took")
    assert [p["name"] for p in as_json["perf_data"]] == ["connect_time", "rtt", "request_time"]


def test_connection_unreachable_is_critical(tmp_path):
    """Nothing listening: a CRITICAL line naming the failure, exit 2, no traceback."""
    res = Admin("nats://127.0.0.1:1", tmp_path)("server", "check", "connection", code=CRITICAL)
    assert res.stdout.startswith("CRITICAL Connection Crit:connection failed: could not connect to "
                                 "nats://127.0.0.1:1: connection refused"), res.stdout
    assert "Traceback" not in res.stderr


# --------------------------------------------------------------------------- stream


@pytest.fixture
def orders(admin) -> Admin:
    """A stream ORDERS holding 10 messages (each acknowledged by the server)."""
    admin("stream", "add", "ORDERS", "--subjects", "orders.*", "--defaults")
    admin.proc("pub", "orders.new", "order {{Count}}", "--count", "10", "-J")
    return admin


def test_stream_messages_ok_warning_critical(orders):
    """10 messages: OK above both thresholds, WARNING at or under --msgs-warn, CRITICAL
    at or under --msgs-critical; the sources count is always reported."""
    assert orders("server", "check", "stream", "--stream", "ORDERS").stdout == \
        "OK ORDERS OK:0 sources | sources=0\n"
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--msgs-warn", "5",
                  "--msgs-critical", "2").stdout == \
        "OK ORDERS OK:10 messages OK:0 sources | messages=10;5;2 sources=0\n"
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--msgs-warn", "20", "--msgs-critical", "5",
                  code=WARNING).stdout == \
        "WARNING ORDERS Warn:10 messages OK:0 sources | messages=10;20;5 sources=0\n"
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--msgs-critical", "20",
                  code=CRITICAL).stdout == \
        "CRITICAL ORDERS Crit:10 messages OK:0 sources | messages=10;;20 sources=0\n"


def test_stream_subjects_sources_peers(orders):
    """One subject against --subjects-warn/--subjects-critical; too few sources; a
    replica count expected of a stream that is not clustered."""
    orders.proc("pub", "orders.old", "x", "-J")
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--subjects-warn", "2",
                  "--subjects-critical", "5", code=WARNING).stdout == \
        "WARNING ORDERS Warn:2 subjects OK:0 sources | subjects=2;2;5 sources=0\n"
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--subjects-warn", "3",
                  "--subjects-critical", "5").stdout == \
        "OK ORDERS OK:2 subjects OK:0 sources | subjects=2;3;5 sources=0\n"
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--min-sources", "2",
                  code=CRITICAL).stdout == "CRITICAL ORDERS Crit:0 sources | sources=0;2\n"
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--peer-expect", "3",
                  code=CRITICAL).stdout == "CRITICAL ORDERS Crit:Stream is not clustered OK:0 sources | sources=0\n"
    assert orders("server", "check", "stream", "--stream", "ORDERS", "--lag-critical", "10",
                  code=CRITICAL).stdout.startswith("CRITICAL ORDERS Crit:not mirrored OK:0 sources")


def test_stream_missing_is_critical(admin):
    """A stream that does not exist: CRITICAL with the server's reason; --stream is required."""
    res = admin("server", "check", "stream", "--stream", "NOPE", code=CRITICAL)
    assert res.stdout.startswith("CRITICAL NOPE Crit:could not load info: stream not found"), res.stdout
    missing = admin("server", "check", "stream", code=None)
    assert missing.exit_code != 0 and "--stream" in missing.stderr and "Traceback" not in missing.stderr


# --------------------------------------------------------------------------- consumer


@pytest.fixture
def jobs(admin) -> Admin:
    """Stream JOBS with 5 messages and a pull consumer WORKER (explicit acks) yet to read them."""
    admin("stream", "add", "JOBS", "--subjects", "jobs.>", "--defaults")
    admin.proc("pub", "jobs.a", "job {{Count}}", "--count", "5", "-J")
    admin("consumer", "add", "JOBS", "WORKER", "--pull", "--ack", "explicit", "--deliver", "all", "--defaults")
    return admin


def consumer_check(admin: Admin, *flags: str, code: int) -> str:
    return admin("server", "check", "consumer", "--stream", "JOBS", "--consumer", "WORKER", *flags,
                 code=code).stdout


def test_consumer_unprocessed_ok_critical(jobs):
    """5 unprocessed messages: OK under --unprocessed-critical 10, CRITICAL at 5; no
    delivery yet is CRITICAL for --last-delivery-critical, no ack for --last-ack-critical."""
    assert consumer_check(jobs, code=OK) == \
        "OK JOBS_WORKER | ack_pending=0 pull_waiting=0 pending=5 redelivered=0\n"
    assert consumer_check(jobs, "--unprocessed-critical", "10", code=OK) == \
        "OK JOBS_WORKER OK:Unprocessed Messages: 5 | ack_pending=0 pull_waiting=0 pending=5;;10 redelivered=0\n"
    assert consumer_check(jobs, "--unprocessed-critical", "5", code=CRITICAL) == \
        "CRITICAL JOBS_WORKER Crit:Unprocessed Messages: 5 | ack_pending=0 pull_waiting=0 pending=5;;5 redelivered=0\n"
    crit = consumer_check(jobs, "--last-delivery-critical", "1h", "--last-ack-critical", "1h", code=CRITICAL)
    assert crit.startswith("CRITICAL JOBS_WORKER Crit:No deliveries Crit:No acks | "), crit


def test_consumer_outstanding_acks_and_deliveries(jobs):
    """Two messages fetched and not acknowledged: 2 acks outstanding is OK under 3 and
    CRITICAL at 2; a delivery just made is within --last-delivery-critical 1h."""
    jobs.proc("consumer", "next", "JOBS", "WORKER", "--count", "2", "--no-ack", "--raw")
    assert consumer_check(jobs, "--outstanding-ack-critical", "3", code=OK).startswith(
        "OK JOBS_WORKER OK:Ack Pending: 2 | ack_pending=2;;3 pull_waiting=0 pending=3 redelivered=0 last_delivery=")
    assert consumer_check(jobs, "--outstanding-ack-critical", "2", code=CRITICAL).startswith(
        "CRITICAL JOBS_WORKER Crit:Ack Pending: 2 | ack_pending=2;;2 ")
    ok = consumer_check(jobs, "--last-delivery-critical", "1h", code=OK)
    assert re.match(r"OK JOBS_WORKER OK:Last delivery \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", ok), ok
    assert re.search(r" last_delivery=[0-9.]+s;;3600\.0000\n$", ok), ok
    as_json = json.loads(jobs("server", "check", "--format", "json", "consumer", "--stream", "JOBS",
                              "--consumer", "WORKER", "--outstanding-ack-critical", "1", code=CRITICAL).stdout)
    assert as_json["status"] == "CRITICAL" and as_json["check_name"] == "JOBS_WORKER"
    assert as_json["critical"] == ["Ack Pending: 2"] and as_json["check_suite"] == "consumer"


def test_consumer_missing_is_critical(jobs):
    res = jobs("server", "check", "consumer", "--stream", "JOBS", "--consumer", "NOPE", code=CRITICAL)
    assert res.stdout.startswith("CRITICAL JOBS_NOPE Crit:could not load info: consumer not found"), res.stdout


# --------------------------------------------------------------------------- jetstream

#: An account whose JetStream allows 4 streams and 10 consumers (nats-server only: jetraft
#: has no account JetStream limits, so its usage is never a share of one).
LIMITED = """
accounts {
  APP { jetstream { max_streams: 4, max_consumers: 10 }, users [ { user: app, password: app } ] }
}
"""


def test_jetstream_ok_and_invalid_thresholds(orders):
    """An account without limits, one R1 stream: OK with every metric; a warning
    threshold not below its critical one is CRITICAL."""
    ok = orders("server", "check", "jetstream", code=OK).stdout.strip()
    assert re.fullmatch(r"OK JetStream \| memory=0B memory_pct=0%;75;90 storage=\d+B storage_pct=0%;75;90 "
                        r"streams=1 streams_pct=0%;-1;-1 consumers=0 consumers_pct=0%;-1;-1 replicas_ok=1 "
                        r"replicas_no_leader=0 replicas_missing_replicas=0 replicas_lagged=0;;200 "
                        r"replicas_not_seen=0\.0000s;;5\.0000 replicas_fail=0", ok), ok
    bad = orders("server", "check", "js", "--consumers-warn", "50", "--consumers-critical", "50",
                 code=CRITICAL).stdout
    assert bad.startswith("CRITICAL JetStream Crit:consumers: invalid thresholds | "), bad
    plain = orders("server", "check", "jetstream", "--no-replicas", code=OK).stdout
    assert "replicas_ok" not in plain


@pytest.fixture
def limited(tmp_path):
    """nats-server, user app of an account limited to 4 streams, holding one stream (25%)."""
    server = servers.start_server("nats-server", tmp_path / "limited", js_config(tmp_path / "store") + LIMITED)
    admin = Admin(server.url, tmp_path, "--user", "app", "--password", "app")
    admin("stream", "add", "ORDERS", "--subjects", "orders.*", "--defaults")
    yield admin
    server.stop()


def test_jetstream_streams_ok_warning_critical_nats_server_only(limited):
    """1 of 4 streams (25%): OK under 50%, WARNING over 20%, CRITICAL over 20% as the
    critical threshold."""
    ok = limited("server", "check", "jetstream", "--streams-warn", "50", "--streams-critical", "80",
                 code=OK).stdout
    assert ok.startswith("OK JetStream | ") and " streams=1 streams_pct=25%;50;80 " in ok, ok
    warn = limited("server", "check", "js", "--streams-warn", "20", "--streams-critical", "50",
                   code=WARNING).stdout
    assert warn.startswith("WARNING JetStream Warn:25% streams | "), warn
    crit = limited("server", "check", "jetstream", "--streams-warn", "10", "--streams-critical", "20",
                   code=CRITICAL).stdout
    assert crit.startswith("CRITICAL JetStream Crit:25% streams | "), crit
    as_json = json.loads(limited("server", "check", "--format", "json", "jetstream", "--streams-warn", "20",
                                 "--streams-critical", "50", code=WARNING).stdout)
    assert as_json["warning"] == ["25% streams"] and as_json["check_suite"] == "jetstream"
    assert {p["name"]: p["value"] for p in as_json["perf_data"]}["streams_pct"] == 25


# --------------------------------------------------------------------------- meta

#: A system account user (sys/sys) beside JetStream in the APP account.
SYS_ACCOUNTS = """
accounts {
  SYS { users [ { user: sys, password: sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
system_account: SYS
"""

META = ("server", "check", "meta", "--expect", "3", "--lag-critical", "1000", "--seen-critical", "5s")


@pytest.fixture(params=servers.KINDS)
def meta_cluster(request, formed_cluster, tmp_path):
    """Three servers (n1..n3) of one kind with JetStream, formed with an agreed meta leader;
    yields (cluster, leader name, Admin of the system user over every URL)."""
    with formed_cluster(request.param, "metacheck", 3, jetstream=True, extra=SYS_ACCOUNTS,
                        users=[("app", "app")]) as c:
        yield c, c.wait_meta_leader(), Admin(",".join(c.urls()), tmp_path, "--user", "sys", "--password", "sys")


def poll_check(admin: Admin, args: tuple[str, ...], code: int, timeout: float = 30) -> str:
    """Run the check until it exits ``code`` (the cluster's view settles asynchronously);
    fail with the last output after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        res = admin(*args, code=None)
        if res.exit_code == code:
            return res.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"check never exited {code}: {res.exit_code} {res.stdout} {res.stderr}")
        time.sleep(0.2)


@pytest.mark.slow
def test_meta_ok_then_critical_when_a_server_stops(meta_cluster):
    """3 servers up: OK naming the leader, peers=3 against --expect 3; --expect 5 is
    CRITICAL; a stopped follower is CRITICAL (offline) with the same perfdata names; JSON
    and Prometheus carry the verdict. The meta check has no WARNING outcome (natscli's
    CheckJetstreamMeta reports every finding as critical)."""
    cluster, leader, admin = meta_cluster
    ok = poll_check(admin, META, OK).strip()
    assert ok == (f"OK JetStream Meta Cluster OK:3 peers led by {leader} | peers=3;3;3 peer_offline=0 "
                  "peer_not_current=0 peer_inactive=0 peer_lagged=0"), ok
    assert admin("server", "check", "raft", *META[3:], code=OK).stdout.strip() == ok

    five = admin("server", "check", "meta", "--expect", "5", "--lag-critical", "1000", "--seen-critical", "5s",
                 code=CRITICAL).stdout.strip()
    assert five.startswith("CRITICAL JetStream Meta Cluster Crit:3 peers of expected 5 | peers=3;5;5 "), five

    victim = next(name for name in cluster.members if name != leader)
    cluster.stop_one(victim)
    crit = poll_check(admin, META, CRITICAL)
    assert crit.startswith("CRITICAL JetStream Meta Cluster Crit:"), crit
    assert "Crit:1 offline" in crit and "OK:" not in crit, crit
    data = perf(crit)
    assert data["peers"] == "3;3;3" and data["peer_offline"] == "1", data
    assert set(data) == {"peers", "peer_offline", "peer_not_current", "peer_inactive", "peer_lagged"}

    as_json = json.loads(admin("server", "check", "--format", "json", *META[2:], code=CRITICAL).stdout)
    assert as_json["status"] == "CRITICAL" and as_json["check_suite"] == "meta"
    assert as_json["check_name"] == "JetStream Meta Cluster" and "1 offline" in as_json["critical"]
    prom = admin("server", "check", "--format", "prometheus", *META[2:], code=0).stdout
    assert 'natscli_meta_peer_offline{item="JetStream Meta Cluster"} 1' in prom, prom
    assert 'natscli_meta_status_code{item="JetStream Meta Cluster",status="CRITICAL"} 2' in prom, prom


def test_meta_needs_system_user_and_its_flags(meta_cluster_single):
    """A user outside the system account gets CRITICAL naming the request; a server that
    is not clustered has no meta group (CRITICAL, as nats-server's); a missing required
    flag is a usage error naming it, without a traceback."""
    app, sys_user = meta_cluster_single
    refused = app(*META, code=CRITICAL).stdout
    assert refused.startswith("CRITICAL JetStream Meta Cluster Crit:JSZ API request failed: no responders for "
                              "$SYS.REQ.SERVER.PING.JSZ"), refused
    assert sys_user(*META, code=CRITICAL).stdout == "CRITICAL JetStream Meta Cluster Crit:no cluster information\n"
    missing = sys_user("server", "check", "meta", "--expect", "3", code=None)
    assert missing.exit_code != 0 and "--lag-critical" in missing.stderr and "Traceback" not in missing.stderr


@pytest.fixture
def meta_cluster_single(start_server, tmp_path):
    """One server under test (not clustered) with JetStream and the SYS/APP accounts:
    (Admin as app, Admin as sys)."""
    server = start_server(js_config(tmp_path / "store") + SYS_ACCOUNTS)
    return (Admin(server.url, tmp_path, "--user", "app", "--password", "app"),
            Admin(server.url, tmp_path, "--user", "sys", "--password", "sys"))
