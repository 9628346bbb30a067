"""Every ``jetraft`` command of daily work once more, against a live three-server jetraft
cluster with replicated streams and buckets, as an operator of the appliance runs them:
each succeeds and shows the cluster's view (leaders and replicas where the command has
them). The single-server and side-by-side tests of each command are in
test_cli_streams_daily.py, test_cli_kv_object.py, test_cli_server_check.py,
test_cli_server_reports.py, test_cli_contexts_accounts.py and test_stream_backup_restore.py.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from cluster import Cluster
from test_admin_cli import Admin, field

ACCOUNTS = """
accounts {
  $SYS { users [ { user: sys, password: sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
"""


@pytest.fixture(scope="module")
def cluster(formed_cluster):
    with formed_cluster("jetraft", "sweep", 3, jetstream=True, extra=ACCOUNTS, users=[("app", "app")]) as c:
        yield c


def admins(c: Cluster, tmp_path) -> tuple[Admin, Admin]:
    urls = ",".join(s.url for s in c.servers.values())
    return (Admin(urls, tmp_path / "app", "--user", "app", "--password", "app"),
            Admin(urls, tmp_path / "sys", "--user", "sys", "--password", "sys"))


def test_streams_and_consumers(cluster, tmp_path):
    app, _ = admins(cluster, tmp_path)
    app("stream", "add", "SW", "--subjects", "sw.>", "--replicas", "3")
    for i in range(1, 6):
        app("pub", f"sw.{i % 2}", f"m{i}", "-J")
    edited = app("stream", "edit", "SW", "--max-msgs", "100", "-f").stdout
    assert "Stream SW was updated" in edited and field(edited, "Maximum Messages") == ["100"]
    assert len(field(edited, "Replica")) == 2
    got = json.loads(app("stream", "get", "SW", "3", "--json").stdout)
    assert got["seq"] == 3 and got["subject"] == "sw.1"
    assert "m1" in app("stream", "view", "SW").stdout
    app("stream", "rmm", "SW", "2", "-f")
    info = json.loads(app("stream", "info", "SW", "--json").stdout)
    assert info["state"]["messages"] == 4 and info["state"]["num_deleted"] == 1
    report = app("stream", "report").stdout
    assert re.search(r"│ SW\s+│", report), report

    app("consumer", "add", "SW", "WORK", "--pull")
    edited = app("consumer", "edit", "SW", "WORK", "--description", "the workers", "-f").stdout
    assert field(edited, "Description") == ["the workers"]
    assert "Cluster Information:" in edited
    assert re.search(r"│ WORK\s+│", app("consumer", "report", "SW").stdout)


def test_kv_and_object_buckets(cluster, tmp_path):
    app, _ = admins(cluster, tmp_path)
    app("kv", "add", "SWKV", "--replicas", "3", "--history", "5")
    for value in ("one", "two"):
        app("kv", "put", "SWKV", "k", value)
    history = json.loads(app("--json", "kv", "history", "SWKV", "k").stdout)
    assert [e["revision"] for e in history] == [1, 2]
    assert app("kv", "ls", "SWKV").stdout.split() == ["k"]
    app("kv", "del", "SWKV", "k", "-f")
    app("kv", "get", "SWKV", "k", code=1)

    app("object", "add", "SWOBJ", "--replicas", "3")
    source = tmp_path / "blob.bin"
    source.write_bytes(os.urandom(300_000))
    app("object", "put", "SWOBJ", str(source), "--name", "blob")
    assert re.search(r"│ blob\s+│", app("object", "ls", "SWOBJ").stdout)
    assert field(app("object", "info", "SWOBJ").stdout, "Replicas") == ["3"]
    out = tmp_path / "back.bin"
    app("object", "get", "SWOBJ", "blob", "--output", str(out))
    assert out.read_bytes() == source.read_bytes()
    app("object", "rm", "SWOBJ", "blob", "-f")
    app("object", "get", "SWOBJ", "blob", "--output", str(tmp_path / "gone.bin"), code=1)


def test_servers_accounts_and_checks(cluster, tmp_path):
    app, sys_ = admins(cluster, tmp_path)
    app("stream", "add", "SWCHK", "--subjects", "swchk.>", "--replicas", "3")
    app("consumer", "add", "SWCHK", "C", "--pull")
    names = sorted(cluster.servers)
    assert sorted(re.findall(r"^(n\d) ", sys_("server", "ping").stdout, re.M)) == names
    assert "n1" in sys_("server", "info", "n1").stdout
    assert all(n in sys_("server", "list").stdout for n in names)
    assert "Connections per server" in sys_("server", "report", "connections").stdout
    accounts = sys_("server", "report", "accounts").stdout     # accounts with connections now
    assert "Accounts Overview" in accounts and re.search(r"│ \$SYS\s+│", accounts), accounts
    account = app("account", "info").stdout
    assert "Account: APP (APP)" in account and "Connected Cluster: C1" in account
    assert sys_("server", "check", "meta", "--expect", "3", "--lag-critical", "100",
                "--seen-critical", "5s").stdout.startswith("OK JetStream Meta Cluster OK:3 peers")
    assert app("server", "check", "stream", "--stream", "SWCHK", "--peer-expect", "3").stdout.startswith("OK")
    assert app("server", "check", "consumer", "--stream", "SWCHK", "--consumer", "C").stdout.startswith("OK")
    assert app("server", "check", "jetstream").stdout.startswith("OK")
    assert app("server", "check", "connection").stdout.startswith("OK")
