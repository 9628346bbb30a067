"""``jetraft server report connections|accounts``, ``server cluster ...`` (natscli's
spelling of ``server raft ...``) and ``$SYS.REQ.USER.INFO`` as users see them, against
jetraft and nats-server side by side.

The reports gather ``$SYS.REQ.SERVER.PING.CONNZ`` from every server; the connections they
show are held open by the test over raw sockets (CONNECT, SUBs, PUBs, then PING/PONG so the
server has processed them), so every figure in the tables is known in advance.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
from types import SimpleNamespace

import nats
import pytest

import servers
from cluster import Cluster
from polling import poll
from jetraft.config import config_from_text
from jetraft.net.monitoring.sysreq import USER_INFO, handle_user_info
from jetraft.server import Server
from test_admin_cli import BIN, Admin, assert_clean_error

#: A system account user (sys/sys); APP with a plain user (app) and a restricted one (lim).
ACCOUNTS = """
accounts {
  SYS { users [ { user: sys, password: sys } ] }
  APP {
    jetstream: enabled
    users [
      { user: app, password: app }
      { user: lim, password: lim, permissions: {
          publish: { allow: ["orders.>", "$SYS.REQ.USER.INFO"], deny: "orders.secret" }
          subscribe: { allow: "_INBOX.>", deny: "_INBOX.secret" }
          allow_responses: { max: 3, expires: "1m" } } }
    ]
  }
}
system_account: SYS
"""


@pytest.fixture
def both(tmp_path):
    """jetraft and nats-server side by side (not clustered), each with :data:`ACCOUNTS`."""
    started = {kind: servers.start_server(kind, tmp_path / kind, ACCOUNTS + f'server_name: "{kind}-srv"\n', name=kind)
               for kind in servers.KINDS}
    yield started
    for server in started.values():
        server.stop()


def hold(port: int, name: str, subs: int, pubs: int) -> socket.socket:
    """A client connection of user app named ``name`` with ``subs`` subscriptions that has
    published ``pubs`` 5-byte messages, all processed by the server (PONG seen)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.recv(65536)  # INFO
    lines = ['CONNECT {"user":"app","pass":"app","verbose":false,"name":"%s"}' % name]
    lines += [f"SUB {name}.{i} {i + 1}" for i in range(subs)]
    lines += ["PUB elsewhere 5\r\nhello"] * pubs + ["PING", ""]
    sock.sendall("\r\n".join(lines).encode())
    got = b""
    while b"PONG" not in got:
        chunk = sock.recv(65536)
        assert chunk, f"{name}: connection closed: {got!r}"
        got += chunk
    return sock


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the first table in ``text`` (header included)."""
    block = text.split("\n\n")[0]
    return [[c.strip() for c in line.strip().strip("│").split("│")] for line in block.splitlines()
            if line.startswith("│")]


def test_report_connections_like_nats_server(both, tmp_path):
    """Two held connections and the CLI's own: natscli's columns, ascending by --sort, the
    totals row, the per-server table; --top with -R keeps the largest; --json is every
    ConnInfo with its server under "server", with nats-server's keys; a user outside the
    system account is told why nothing answers."""
    as_json = {}
    for kind, server in both.items():
        held = [hold(server.port, "worker-a", 3, 2), hold(server.port, "worker-b", 1, 0)]
        try:
            admin = Admin(server.url, tmp_path, "--user", "sys", "--password", "sys")
            out = admin("server", "report", "connections").stdout
            assert out.startswith("Top 3 Connections out of 3 by subs\n"), out
            rows = table_rows(out)
            assert rows[0] == ["CID", "Name", "Server", "Cluster", "IP", "Account", "Uptime", "In Msgs",
                               "Out Msgs", "In Bytes", "Out Bytes", "Subs"]
            by_name = {r[1]: r for r in rows[1:]}
            assert [r[1] for r in rows[1:3]] == ["worker-b", "jetraft"] and rows[3][1] == "worker-a", rows
            a = by_name["worker-a"]
            assert (a[2], a[5], a[7], a[8], a[9], a[10], a[11]) == (f"{kind}-srv", "APP", "2", "0", "10 B", "0 B", "3")
            assert by_name["jetraft"][5] == "SYS"
            assert rows[4][1] == "Totals for 3 connections" and rows[4][11] == "5", rows
            assert re.search(rf"Connections per server\n.*\n.*\n.*\n│ {kind}-srv\s+│\s+│\s+3 │", out), out

            # the CLI's connection alone has received anything (the answers to its requests
            # before CONNZ); its in-bytes would race the server's accounting of the CONNZ
            # request itself, which nats-server may count after it builds the answer
            top = admin("server", "report", "connections", "--sort", "out-bytes", "--top", "1", "-R").stdout
            assert top.startswith("Top 1 Connections out of 3 by out-bytes\n"), top
            assert [r[1] for r in table_rows(top)[1:-1]] == ["jetraft"], top
            fewest = admin("server", "report", "connections", "--sort", "in-msgs", "--top", "1").stdout
            assert [r[1] for r in table_rows(fewest)[1:-1]] == ["worker-b"], fewest  # published nothing

            by_cid = table_rows(admin("server", "report", "conns", "--sort", "cid").stdout)[1:4]
            assert [int(r[0]) for r in by_cid] == sorted(int(r[0]) for r in by_cid)

            conns = json.loads(admin("server", "report", "connections", "--json").stdout)
            assert len(conns) == 3 and {c["name"] for c in conns} == {"worker-a", "worker-b", "jetraft"}
            as_json[kind] = next(c for c in conns if c["name"] == "worker-a")
            assert as_json[kind]["subscriptions_list"] == ["worker-a.0", "worker-a.1", "worker-a.2"] or \
                sorted(as_json[kind]["subscriptions_list"]) == ["worker-a.0", "worker-a.1", "worker-a.2"]
            assert as_json[kind]["server"]["name"] == f"{kind}-srv"

            only_app = json.loads(admin("server", "report", "connections", "--account", "APP", "--json").stdout)
            assert sorted(c["name"] for c in only_app) == ["worker-a", "worker-b"]

            # --subject: nats-server filters by subscription interest (within an account);
            # jetraft refuses the filter rather than ignore it
            filtered = admin("server", "report", "connections", "--account", "APP", "--subject", "worker-a.1",
                             "--json", code=None)
            if kind == "nats-server":
                assert [c["name"] for c in json.loads(filtered.stdout)] == ["worker-a"], filtered.stdout
            else:
                assert filtered.exit_code == 1
                assert_clean_error(filtered.stderr, "invalid response received from jetraft-srv",
                                   "filter_subject and mqtt_client are not supported by jetraft")

            refused = admin("server", "report", "connections", "--user", "app", "--password", "app", code=1)
            assert_clean_error(refused.stderr, "$SYS.REQ.SERVER.PING", "system account")
        finally:
            for sock in held:
                sock.close()
    ours, theirs = as_json["jetraft"], as_json["nats-server"]
    shown = {"cid", "kind", "ip", "port", "start", "uptime", "in_msgs", "out_msgs", "in_bytes", "out_bytes",
             "subscriptions", "subscriptions_list", "name", "account", "authorized_user", "server"}
    assert shown <= set(theirs), set(theirs)
    assert {k: type(ours.get(k)) for k in shown} == {k: type(theirs.get(k)) for k in shown}
    assert {k: ours[k] for k in ("in_msgs", "out_msgs", "in_bytes", "subscriptions", "account")} == \
        {k: theirs[k] for k in ("in_msgs", "out_msgs", "in_bytes", "subscriptions", "account")}


def test_report_connections_by_closed_reason(both, tmp_path):
    """--closed-reason keeps the closed connections whose reason, lower-cased, matches the
    expression; one matching nothing says so; a bad expression is one usage line."""
    for kind, server in both.items():
        admin = Admin(server.url, tmp_path, "--user", "sys", "--password", "sys")
        hold(server.port, f"gone-{kind}", 1, 0).close()

        def closed() -> list[dict]:
            out = admin("server", "report", "connections", "--state", "closed", "--json", code=None)
            return json.loads(out.stdout) if out.exit_code == 0 else []
        poll(lambda: any(c.get("name") == f"gone-{kind}" for c in closed()), f"{kind}: the closed connection", 15,
             retry_on=())
        out = admin("server", "report", "connections", "--state", "closed", "--closed-reason", "client", "--json")
        gone = [c for c in json.loads(out.stdout) if c.get("name") == f"gone-{kind}"]
        assert [c["reason"] for c in gone] == ["Client Closed"], out.stdout
        table = admin("server", "report", "connections", "--state", "closed", "--closed-reason", "^client cl").stdout
        assert any(r[1] == f"gone-{kind}" and r[-1] == "Client Closed" for r in table_rows(table)), table
        none = admin("server", "report", "connections", "--state", "closed", "--closed-reason", "^nothing$", code=1)
        assert_clean_error(none.stderr, "no connection matched")
        bad = admin("server", "report", "connections", "--closed-reason", "(", code=1)
        assert_clean_error(bad.stderr, "'--closed-reason'", "not a regular expression", "try --help")


def test_report_watch_shows_the_report_again_until_ctrl_c(both, tmp_path):
    """--watch 1 prints the report again every second; Ctrl-C ends it with status 0."""
    server = both["jetraft"]
    admin = Admin(server.url, tmp_path)
    watch = subprocess.Popen([str(BIN), "server", "report", "connections", "--watch", "1", "-s", server.url,
                              "--user", "sys", "--password", "sys"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=admin.env)
    try:
        titles = 0
        for line in watch.stdout:               # the pipe's EOF ends this if the watch dies
            titles += line.startswith("Top 1 Connections out of 1 by subs")
            if titles == 2:
                break
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=15)
    finally:
        watch.kill()
    assert titles == 2, err
    assert watch.returncode == 0 and "Traceback" not in err and "error" not in err, err


def test_report_accounts_like_nats_server(both, tmp_path):
    """Per account: connections, messages, bytes, subscriptions; ascending by --sort (-R:
    descending), --top keeping the largest either way; ACCOUNT --json is that account with its connections and servers;
    an account without connections is one clean line."""
    as_json = {}
    for kind, server in both.items():
        held = [hold(server.port, "worker-a", 3, 2), hold(server.port, "worker-b", 1, 0)]
        try:
            admin = Admin(server.url, tmp_path, "--user", "sys", "--password", "sys")
            out = admin("server", "report", "accounts").stdout
            assert out.startswith("2 Accounts Overview\n"), out
            rows = table_rows(out)
            assert rows[0] == ["Account", "Connections", "In Msgs", "Out Msgs", "In Bytes", "Out Bytes", "Subs"]
            assert [r[0] for r in rows[1:]] == ["SYS", "APP"], rows  # 1 subscription, then 4
            assert rows[2][:3] == ["APP", "2", "2"] and rows[2][4] == "10 B" and rows[2][6] == "4", rows

            top = table_rows(admin("server", "report", "accounts", "--sort", "conns", "--top", "1").stdout)
            assert [r[0] for r in top[1:]] == ["APP"], top
            # -R sorts descending; --top still keeps the largest (as natscli does)
            flipped = table_rows(admin("server", "report", "accounts", "--sort", "conns", "-R").stdout)
            assert [r[0] for r in flipped[1:]] == ["APP", "SYS"], flipped
            top_flipped = table_rows(admin("server", "report", "accounts", "--sort", "conns", "--top", "1", "-R").stdout)
            assert [r[0] for r in top_flipped[1:]] == ["APP"], top_flipped

            listed = json.loads(admin("server", "report", "acct", "--json").stdout)
            assert [a["account"] for a in listed] == ["SYS", "APP"]
            app = json.loads(admin("server", "report", "accounts", "APP", "--json").stdout)
            assert (app["account"], app["connections"], app["subscriptions"], app["in_bytes"]) == ("APP", 2, 4, 10)
            assert [s["name"] for s in app["server"]] == [f"{kind}-srv"]
            as_json[kind] = app

            conns = admin("server", "report", "accounts", "APP").stdout
            assert conns.startswith("Top 2 Connections out of 2 by subs\n"), conns

            none = admin("server", "report", "accounts", "NOPE", code=1)
            assert_clean_error(none.stderr, "account NOPE")
        finally:
            for sock in held:
                sock.close()
    ours, theirs = as_json["jetraft"], as_json["nats-server"]
    assert set(ours) == set(theirs) == {"account", "connections", "connection_info", "in_msgs", "out_msgs",
                                        "in_bytes", "out_bytes", "subscriptions", "server"}


# --------------------------------------------------------------------------- server cluster


@pytest.mark.slow
@pytest.mark.parametrize("kind", servers.KINDS)
def test_server_cluster_is_server_raft(kind, tmp_path):
    """``server cluster step-down`` (natscli's name) moves the meta leader as ``server raft
    step-down`` does; connections of three servers show in one report, per server."""
    with Cluster(kind, tmp_path / kind, 3, jetstream=True, extra=ACCOUNTS).start() as c:
        c.wait_formed()
        leader = c.wait_meta_leader()
        admin = Admin(",".join(c.urls()), tmp_path, "--user", "sys", "--password", "sys")
        out = admin("server", "cluster", "step-down").stdout
        assert f'Requesting leader step down of "{leader}" in a 3 peer RAFT group' in out, out
        new = re.search(r'New leader elected "(n\d)"', out)
        assert new and new.group(1) != leader, out
        assert admin("server", "cluster", "step-down", "--help").stdout == \
            admin("server", "raft", "step-down", "--help").stdout
        assert admin("server", "cluster", "peer-remove", "--help").stdout == \
            admin("server", "raft", "peer-remove", "--help").stdout

        held = [hold(c.members[name].port, f"on-{name}", 1, 0) for name in c.members]
        try:
            report = admin("server", "report", "connections", "--json").stdout
            names = {conn["name"]: conn["server"]["name"] for conn in json.loads(report)}
            assert {n: s for n, s in names.items() if n.startswith("on-")} == {f"on-{n}": n for n in c.members}
        finally:
            for sock in held:
                sock.close()


# --------------------------------------------------------------------------- $SYS.REQ.USER.INFO


def key_tree(value):
    """The shape of a JSON value: its keys, recursively (lists by their first item)."""
    if isinstance(value, dict):
        return {k: key_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [key_tree(value[0])] if value else []
    return type(value).__name__


async def _ask_user_info(url: str, user: str) -> dict:
    nc = await nats.connect(url, user=user, password=user, allow_reconnect=False, connect_timeout=5)
    try:
        return json.loads((await nc.request(USER_INFO, b"", timeout=5)).data)
    finally:
        await nc.close()


def jetraft_user_info(config: str, user: str) -> dict:
    """jetraft's answer to ``user`` (authenticated by jetraft's own Authenticator from
    ``config``) asking $SYS.REQ.USER.INFO, as :func:`handle_user_info` sends it."""
    server = Server(config_from_text(config))
    identity = server.auth.verify(user, user, None)
    sent = []
    server.route_internal = lambda account, msg: sent.append((account, msg))
    client = SimpleNamespace(identity=identity, account=server.account(identity.account))
    assert handle_user_info(server, client, USER_INFO, "_INBOX.reply") is True
    assert handle_user_info(server, client, "$SYS.REQ.USER.OTHER", "_INBOX.reply") is False
    [(account, msg)] = sent
    assert account == identity.account and msg.subject == "_INBOX.reply"
    return json.loads(msg.payload)


@pytest.mark.parametrize("user", ["sys", "app", "lim"])
def test_user_info_answer_like_nats_server(user, tmp_path):
    """The answer's keys, types and values as nats-server's, for a system user, a user
    without permissions and one with publish/subscribe allow and deny lists and
    allow_responses (its ``ttl`` in nanoseconds)."""
    server = servers.start_server("nats-server", tmp_path / "ns", ACCOUNTS)
    try:
        theirs = asyncio.run(_ask_user_info(server.url, user))
    finally:
        server.stop()
    ours = jetraft_user_info(ACCOUNTS, user)
    assert key_tree(ours["data"]) == key_tree(theirs["data"])
    assert set(theirs["server"]) - {"feature_flags"} <= set(ours["server"])
    for key in ("user", "account", "account_name"):
        assert ours["data"][key] == theirs["data"][key]
    if user == "lim":
        mine, real = ours["data"]["permissions"], theirs["data"]["permissions"]
        assert mine["responses"] == real["responses"] == {"max": 3, "ttl": 60_000_000_000}
        for part in ("publish", "subscribe"):
            assert {k: sorted(v) for k, v in mine[part].items()} == {k: sorted(v) for k, v in real[part].items()}
    else:
        assert "permissions" not in ours["data"]


def user_lines(text: str) -> list[str]:
    """The User, Account and Expires rows of an account info page."""
    return [line.strip() for line in text.splitlines() if re.match(r"\s+(User|Account|Expires): ", line)]


def test_account_info_shows_user_and_account_on_jetraft(tmp_path):
    """account info on jetraft shows the User, Account and Expires rows as on nats-server."""
    server = servers.start_server("jetraft", tmp_path / "jr", ACCOUNTS)
    try:
        text = Admin(server.url, tmp_path, "--user", "app", "--password", "app")("account", "info").stdout
    finally:
        server.stop()
    assert user_lines(text) == ["User: app", "Account: APP (APP)", "Expires: never"], text


def test_account_info_shows_user_and_permissions_on_nats_server(tmp_path):
    """What the jetraft test above expects, as nats-server's answer makes the CLI show it;
    a restricted user's permissions, sorted, and JetStream that does not answer it (its
    publish to $JS.API.INFO is denied) said so in the page."""
    server = servers.start_server("nats-server", tmp_path / "ns", ACCOUNTS)
    try:
        app = Admin(server.url, tmp_path, "--user", "app", "--password", "app")("account", "info").stdout
        lim = Admin(server.url, tmp_path, "--user", "lim", "--password", "lim")("--timeout", "1", "account",
                                                                                 "info").stdout
    finally:
        server.stop()
    assert user_lines(app) == ["User: app", "Account: APP (APP)", "Expires: never"], app
    assert "Connection Permissions:" not in app
    assert user_lines(lim) == ["User: lim", "Account: APP (APP)", "Expires: never"], lim
    section = lim.split("Connection Permissions:\n\n", 1)[1].split("   No response from JetStream server")[0]
    assert [line.strip() for line in section.splitlines() if line.strip()] == [
        "Publish:", "Allow: $SYS.REQ.USER.INFO", "orders.>", "Deny: orders.secret",
        "Subscribe:", "Allow: _INBOX.>", "Deny: _INBOX.secret"], lim
    assert "   No response from JetStream server" in lim, lim
