"""The ``jetraft`` commands of daily stream and consumer work, as a user runs them.

The first part runs against one server of each kind (jetraft and nats-server, the
``js_server`` fixture): editing streams and consumers, reading and removing messages,
the reports, the credentials taken from the environment, and the JSON that scripts read,
compared key for key between the two servers. The second part runs against a three-server
jetraft cluster shared by its tests, which run in file order and end by stopping servers:
the Leader column of ``stream ls``, the consumer's cluster block and leader step-down,
placement errors, then what a user sees while a stream or the cluster has no leader.
"""

from __future__ import annotations

import json
import re

import pytest
from cluster import Cluster
from polling import poll
from test_admin_cli import Admin, assert_clean_error, field

# --------------------------------------------------------------------------- one server
from servers import js_config


def test_stream_edit_shows_the_difference_then_updates(js_server, tmp_path):
    """stream edit: the changed fields as -old/+new lines, 'Stream S was updated', the new info;
    nothing to change says so; without -f and without a terminal nothing is changed."""
    admin = Admin(js_server.url, tmp_path)
    admin("stream", "add", "ORDERS", "--subjects", "orders.>")
    out = admin("stream", "edit", "ORDERS", "--max-msgs", "100", "--max-bytes", "1MB", "--max-age", "1h",
                "--description", "daily orders", "--subjects", "orders.>,returns.>", "-f").stdout
    diff, _, rest = out.partition("Stream ORDERS was updated\n\n")
    assert diff.startswith("Differences (-old +new):\n"), out
    assert re.search(r'^-\s+"max_msgs": -1,?$', diff, re.M) and re.search(r'^\+\s+"max_msgs": 100,?$', diff, re.M)
    assert re.search(r'^\+\s+"max_bytes": 1048576,?$', diff, re.M)
    assert re.search(r'^\+\s+"description": "daily orders",?$', diff, re.M)
    assert "num_replicas" not in diff                      # unchanged fields are not listed
    assert rest.startswith("Information for Stream ORDERS created ")
    assert field(rest, "Maximum Messages") == ["100"] and field(rest, "Maximum Age") == ["1h0m0s"]
    assert field(rest, "Subjects") == ["orders.>, returns.>"]

    assert admin("stream", "edit", "ORDERS", "--max-msgs", "100", "-f").stdout == "No difference in configuration\n"
    refused = admin("stream", "edit", "ORDERS", "--max-msgs", "5", code=1)
    assert "Differences (-old +new):" in refused.stdout
    assert_clean_error(refused.stderr, "not confirmed", "-f")
    assert field(admin("stream", "info", "ORDERS").stdout, "Maximum Messages") == ["100"]
    dry = admin("stream", "edit", "ORDERS", "--max-msgs", "7", "--dry-run", code=1)
    assert re.search(r'^\+\s+"max_msgs": 7,?$', dry.stdout, re.M) and "was updated" not in dry.stdout
    assert field(admin("stream", "info", "ORDERS").stdout, "Maximum Messages") == ["100"]
    missing = admin("stream", "edit", "NOPE", "--max-msgs", "5", "-f", code=1)
    assert_clean_error(missing.stderr, "stream not found (err_code 10059)", "jetraft stream ls")


def test_consumer_edit_changes_the_editable_fields(js_server, tmp_path):
    """consumer edit: description, max deliveries, ack wait, max pending; the difference first."""
    admin = Admin(js_server.url, tmp_path)
    admin("stream", "add", "JOBS", "--subjects", "jobs.>")
    admin("consumer", "add", "JOBS", "WORKER", "--pull", "--max-deliver", "3")
    out = admin("consumer", "edit", "JOBS", "WORKER", "--max-deliver", "7", "--description", "the worker",
                "--wait", "45s", "--max-pending", "50", "-f").stdout
    assert out.startswith("Differences (-old +new):\n")
    assert re.search(r'^-\s+"max_deliver": 3,?$', out, re.M) and re.search(r'^\+\s+"max_deliver": 7,?$', out, re.M)
    info = out.partition("Consumer JOBS > WORKER was updated\n\n")[2]
    assert info.startswith("Information for Consumer JOBS > WORKER created ")
    assert field(info, "Maximum Deliveries") == ["7"] and field(info, "Ack Wait") == ["45s"]
    assert field(info, "Description") == ["the worker"] and field(info, "Max Ack Pending") == ["50"]
    same = admin("consumer", "edit", "JOBS", "WORKER", "--max-deliver", "7", "-f").stdout
    assert same == "No difference in configuration\n"
    ghost = admin("consumer", "edit", "JOBS", "GHOST", "--max-deliver", "2", "-f", code=1)
    assert_clean_error(ghost.stderr, "consumer not found (err_code 10014)", "jetraft consumer ls")


def test_stream_get_view_and_rmm(js_server, tmp_path):
    """stream get by sequence and --last-for, stream view of a page, stream rmm of one message."""
    admin = Admin(js_server.url, tmp_path)
    admin("stream", "add", "EVENTS", "--subjects", "events.>")
    admin("pub", "events.a", "first", "-J")
    admin("pub", "events.b", "second", "-J", "-H", "Trace:abc")
    admin("pub", "events.a", "third", "-J")

    got = admin("stream", "get", "EVENTS", "2").stdout
    assert re.match(r"Item: EVENTS#2 received .+ on Subject events\.b\n\n", got), got
    assert "Headers:\n  Trace: abc\n" in got and got.rstrip().endswith("second")
    last = admin("stream", "get", "EVENTS", "--last-for", "events.a").stdout
    assert last.startswith("Item: EVENTS#3 ") and last.rstrip().endswith("third")

    view = admin("stream", "view", "EVENTS").stdout
    assert re.findall(r"^\[(\d+)\] Subject: (\S+) Received: ", view, re.M) == [
        ("1", "events.a"), ("2", "events.b"), ("3", "events.a")]
    assert "  Trace: abc" in view and "first" in view and "third" in view
    page = admin("stream", "view", "EVENTS", "1", "--id", "2").stdout
    assert re.findall(r"^\[(\d+)\]", page, re.M) == ["2"]
    assert admin("stream", "view", "EVENTS", "--subject", "events.b", "--raw").stdout == "second\n"
    assert admin("stream", "view", "EVENTS", "--since", "1h", "--raw").stdout == "first\nsecond\nthird\n"
    later = admin("stream", "view", "EVENTS", "--since", "1ms")
    assert later.stdout == "" and "Reached apparent end of data" in later.stderr

    refused = admin("stream", "rmm", "EVENTS", "2", code=1)
    assert_clean_error(refused.stderr, "not confirmed", "-f")
    assert admin("stream", "rmm", "EVENTS", "2", "-f").stdout == ""
    gone = admin("stream", "get", "EVENTS", "2", code=1)
    assert_clean_error(gone.stderr, "no message found (err_code 10037)", "jetraft stream info EVENTS")
    neither = admin("stream", "get", "EVENTS", code=1)
    assert_clean_error(neither.stderr, "sequence", "--last-for")
    info = admin("stream", "info", "EVENTS").stdout
    assert field(info, "Messages") == ["2"] and field(info, "Deleted Messages") == ["1"]


def test_stream_and_consumer_reports(js_server, tmp_path):
    """stream report and consumer report: natscli's columns, one row per stream or consumer."""
    admin = Admin(js_server.url, tmp_path)
    admin("stream", "add", "A1", "--subjects", "a.>")
    admin("stream", "add", "B2", "--subjects", "b.>", "--storage", "memory")
    admin("pub", "a.x", "m{{Count}}", "--count", "4", "-J")
    admin("consumer", "add", "A1", "READER", "--pull")
    admin("consumer", "next", "A1", "READER", "--count", "1")

    report = admin("stream", "report").stdout
    assert report.startswith("Obtaining Stream stats\n\n")
    headers = ["Stream", "Storage", "Placement", "Consumers", "Messages", "Bytes", "Lost", "Deleted",
               "API Level", "Replicas"]
    assert re.search(r"│\s*" + r"\s*│\s*".join(headers) + r"\s*│", report), report
    assert re.search(r"│ A1\s+│ File\s+│\s+│\s+1 │\s+4 │", report), report
    assert re.search(r"│ B2\s+│ Memory\s+│", report), report

    creport = admin("consumer", "report", "A1").stdout
    assert creport.startswith("Consumer report for A1 with 1 consumers\n"), creport
    cheaders = ["Consumer", "Mode", "Ack Policy", "Ack Wait", "Ack Pending", "Redelivered", "Unprocessed",
                "Ack Floor", "API Level", "Cluster"]
    assert re.search(r"│\s*" + r"\s*│\s*".join(cheaders) + r"\s*│", creport), creport
    assert re.search(r"│ READER\s+│ Pull\s+│ Explicit\s+│ 30s\s+│\s+0 │\s+0 │\s+3 / 75% │\s+1 │", creport), creport

    as_json = json.loads(admin("stream", "report", "--json").stdout)
    assert sorted(s["config"]["name"] for s in as_json) == ["A1", "B2"]


def test_json_of_get_edit_and_report_matches_nats_server(start_server, tmp_path):
    """--json of stream get, stream edit, consumer edit and stream report: the same keys on
    jetraft as on nats-server."""
    shapes = {}
    for kind in ("jetraft", "nats-server"):
        server = start_server(js_config(tmp_path / f"store-{kind}"), kind=kind)
        admin = Admin(server.url, tmp_path / kind)
        admin("stream", "add", "S", "--subjects", "s.>")
        admin("pub", "s.one", "hello", "-J", "-H", "K:V")
        admin("consumer", "add", "S", "C", "--pull")
        got = json.loads(admin("stream", "get", "S", "1", "--json").stdout)
        edited = json.loads(admin("stream", "edit", "S", "--max-msgs", "9", "-f", "--json").stdout)
        cedited = json.loads(admin("consumer", "edit", "S", "C", "--max-deliver", "4", "-f", "--json").stdout)
        report = json.loads(admin("stream", "report", "--json").stdout)
        assert got["subject"] == "s.one" and got["seq"] == 1 and edited["config"]["max_msgs"] == 9
        assert cedited["config"]["max_deliver"] == 4
        shapes[kind] = {"get": sorted(got), "edit": sorted(edited), "edit.config": sorted(edited["config"]),
                        "cedit": sorted(cedited), "report": sorted(report[0])}
    assert set(shapes["jetraft"]["get"]) == set(shapes["nats-server"]["get"])
    for key in ("edit", "cedit", "report"):
        assert set(shapes["nats-server"][key]) - {"ts", "cluster"} <= set(shapes["jetraft"][key]), key


@pytest.fixture
def auth_server(start_server, tmp_path):
    return start_server(js_config(tmp_path / "store") + '\nauthorization { user: app, password: "app-pw" }\n')


def test_user_password_and_creds_from_the_environment(auth_server, tmp_path):
    """NATS_USER and NATS_PASSWORD log in; --user/--password win over them; NATS_CREDS is read."""
    admin = Admin(auth_server.url, tmp_path)
    admin.changes.update(NATS_USER="app", NATS_PASSWORD="app-pw", NATS_CREDS=None)
    assert "No streams defined" in admin("stream", "ls").stdout
    wrong = admin("stream", "ls", "--password", "nope", code=1)
    assert_clean_error(wrong.stderr, "authorization violation")
    admin.changes.update(NATS_USER=None, NATS_PASSWORD=None, NATS_CREDS=str(tmp_path / "missing.creds"))
    creds = admin("stream", "ls", code=1)
    assert_clean_error(creds.stderr, "missing.creds")


def test_a_bad_stream_name_is_one_line_with_the_rule(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    bad = admin("stream", "add", "BAD.NAME", "--subjects", "bad.>", code=1)
    assert_clean_error(bad.stderr, "BAD.NAME", "'.'")
    assert bad.stdout == ""


def test_stream_ls_names_the_server_of_a_single_server(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    admin("stream", "add", "HERE", "--subjects", "here.>")
    listing = admin("stream", "ls").stdout
    assert re.search(r"│ HERE\s+│.*│ \S+\s+│$", listing, re.M), listing


# --------------------------------------------------------------------------- a jetraft cluster


#: Clients without credentials land in APP; the system account's user runs server commands.
ACCOUNTS = """
accounts {
  $SYS { users [ { user: sys, password: sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
no_auth_user: app
"""


@pytest.fixture(scope="module")
def cluster(formed_cluster):
    with formed_cluster("jetraft", "daily", 3, jetstream=True, extra=ACCOUNTS) as c:
        yield c


def cluster_admin(c: Cluster, tmp_path, *names: str) -> Admin:
    urls = ",".join(c.servers[n].url for n in (names or c.servers) if c.servers[n].alive())
    return Admin(urls, tmp_path)


def test_stream_ls_names_the_server_of_an_r1_stream(cluster, tmp_path):
    admin = cluster_admin(cluster, tmp_path)
    admin("stream", "add", "SOLO", "--subjects", "solo.>", "--replicas", "1")
    leader = json.loads(admin("stream", "info", "SOLO", "--json").stdout)["cluster"]["leader"]
    assert leader in cluster.servers
    listing = admin("stream", "ls").stdout
    assert re.search(rf"│ SOLO\s+│.*│ {leader}\s+│", listing), listing


def test_consumer_info_has_the_cluster_block(cluster, tmp_path):
    admin = cluster_admin(cluster, tmp_path)
    admin("stream", "add", "TRIPLE", "--subjects", "triple.>", "--replicas", "3")
    admin("pub", "triple.x", "m", "-J")
    admin("consumer", "add", "TRIPLE", "DURABLE", "--pull")
    info = admin("consumer", "info", "TRIPLE", "DURABLE").stdout
    assert "Cluster Information:" in info
    assert field(info, "Name") == ["DURABLE", "C1"]
    (leader,) = field(info, "Leader")
    assert leader in cluster.servers
    replicas = field(info, "Replica")
    assert len(replicas) == 2 and all(", current, " in r for r in replicas), replicas


def test_consumer_report_and_cluster_step_down(cluster, tmp_path):
    admin = cluster_admin(cluster, tmp_path)
    (leader,) = field(admin("consumer", "info", "TRIPLE", "DURABLE").stdout, "Leader")
    creport = admin("consumer", "report", "TRIPLE").stdout
    assert re.search(rf"│ DURABLE .*│ (\S+, )*{leader}\*(, \S+)* +│$", creport, re.M), creport

    out = admin("consumer", "cluster", "step-down", "TRIPLE", "DURABLE").stdout
    assert re.search(rf'Requesting leader step down of "{leader}" in a 3 peer RAFT group', out), out
    (new,) = re.findall(r'New leader elected "(\S+)"', out)
    assert new != leader and new in cluster.servers
    assert field(admin("consumer", "info", "TRIPLE", "DURABLE").stdout, "Leader") == [new]


def test_placement_errors_say_why_and_what_to_do(cluster, tmp_path):
    admin = cluster_admin(cluster, tmp_path)
    too_many = admin("stream", "add", "WIDE", "--subjects", "wide.>", "--replicas", "5", code=1)
    assert_clean_error(too_many.stderr, "err_code 10005", "--replicas")
    peer = field(admin("stream", "info", "TRIPLE").stdout, "Leader")[0]
    remap = admin("stream", "cluster", "peer-remove", "TRIPLE", peer, code=1)
    assert_clean_error(remap.stderr, "err_code 10075", "add a server")


def test_publishing_to_a_stream_without_a_leader_says_retry(cluster, tmp_path):
    admin = cluster_admin(cluster, tmp_path)
    leader = json.loads(admin("stream", "info", "SOLO", "--json").stdout)["cluster"]["leader"]
    cluster.kill(leader)
    others = [n for n in cluster.servers if n != leader]
    admin = cluster_admin(cluster, tmp_path, *others)
    out = admin("pub", "solo.x", "kept?", "-J", code=1)
    assert_clean_error(out.stderr, "SOLO", "no leader", "retry")
    assert "without -J" not in out.stderr
    nowhere = admin("pub", "nowhere.x", "m", "-J", code=1)
    assert_clean_error(nowhere.stderr, "no stream stores", "nowhere.x")


def test_no_meta_leader_is_one_line_saying_retry(cluster, tmp_path):
    alive = [n for n in cluster.servers if cluster.servers[n].alive()]
    for name in alive[:-1]:
        cluster.kill(name)
    survivor = cluster.servers[alive[-1]]
    poll(lambda: not survivor.monitor("/jsz").get("meta_cluster", {}).get("leader"),
         "the survivor to see that the meta group has no leader", 30, retry_on=())
    admin = cluster_admin(cluster, tmp_path, alive[-1])
    out = admin("stream", "add", "LATE", "--subjects", "late.>", code=1)
    assert_clean_error(out.stderr, "err_code 10008", "meta leader", "retry")
    sys_user = Admin(survivor.url, tmp_path, "--user", "sys", "--password", "sys")
    down = sys_user("server", "raft", "step-down", code=1)
    assert_clean_error(down.stderr, "no leader", "retry")
    assert "None" not in down.stderr + down.stdout
