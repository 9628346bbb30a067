"""``jetraft context``, ``account info``, ``server ping`` and ``server info`` as a user runs them.

Contexts live where the ``nats`` CLI keeps them (``$XDG_CONFIG_HOME/nats/context/NAME.json``
and ``nats/context.txt`` for the selection); every test gets its own XDG_CONFIG_HOME.
Commands that talk to a server run against jetraft and nats-server alike (``start_server``).
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

import servers
from jetraft.cli.admin import cli
from jetraft.cli.admin.groups import GLOBAL_FLAGS, GLOBAL_VALUED, hoist_global_options
from test_admin_cli import assert_clean_error, env_changes, field
from servers import js_config


def jetraft(tmp_path: Path, *args: str, code: int | None = 0):
    """Run ``jetraft ARGS`` (options anywhere, as users write them) with contexts under tmp_path."""
    argv = hoist_global_options(list(args), GLOBAL_VALUED, GLOBAL_FLAGS)
    result = CliRunner().invoke(cli, argv, env=env_changes(tmp_path), catch_exceptions=False)
    if code is not None:
        assert result.exit_code == code, (args, result.exit_code, result.stdout, result.stderr)
    return result


def nats_dir(tmp_path: Path) -> Path:
    return Path(env_changes(tmp_path)["XDG_CONFIG_HOME"]) / "nats"


# --------------------------------------------------------------------------- contexts


@pytest.fixture
def auth_server(start_server, tmp_path):
    """The server under test with JetStream and one user (app/app-pw)."""
    return start_server(js_config(tmp_path / "store") + '\nauthorization { user: app, password: "app-pw" }\n')


def test_context_add_select_ls_then_commands_use_it(auth_server, tmp_path):
    """add writes a nats CLI context (0600 in a 0700 directory) and --select selects it;
    ls marks the selected one; a command without -s then reaches the server as that user."""
    added = jetraft(tmp_path, "context", "add", "lab", "--server", auth_server.url, "--user", "app",
                    "--password", "app-pw", "--description", "The lab", "--select")
    assert 'NATS Configuration Context "lab"' in added.stdout
    assert field(added.stdout, "Server URLs") == [auth_server.url]
    assert field(added.stdout, "Password") == ["******"]
    assert "app-pw" not in added.stdout

    base = nats_dir(tmp_path)
    file = base / "context" / "lab.json"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    saved = json.loads(file.read_text())
    assert {k: saved[k] for k in ("description", "url", "user", "password")} == {
        "description": "The lab", "url": auth_server.url, "user": "app", "password": "app-pw"}
    assert (base / "context.txt").read_text().strip() == "lab"
    assert stat.S_IMODE((base / "context.txt").stat().st_mode) == 0o600

    jetraft(tmp_path, "context", "add", "other", "--server", "nats://127.0.0.1:1", "--description", "Elsewhere")
    listing = jetraft(tmp_path, "context", "ls").stdout
    assert "Known Contexts" in listing
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in listing.splitlines() if "│" in line]
    assert rows == [["Name", "Description"], ["lab*", "The lab"], ["other", "Elsewhere"]]

    which = jetraft(tmp_path, "context", "select").stdout
    assert 'NATS Configuration Context "lab"' in which

    assert "No streams defined" in jetraft(tmp_path, "stream", "ls").stdout
    jetraft(tmp_path, "stream", "add", "ORDERS", "--subjects", "orders.>")
    assert "ORDERS" in jetraft(tmp_path, "stream", "ls").stdout

    # The selection moves; a command then uses the other context (nothing listens there).
    jetraft(tmp_path, "context", "select", "other")
    assert (base / "context.txt").read_text().strip() == "other"
    refused = jetraft(tmp_path, "stream", "ls", code=1)
    assert_clean_error(refused.stderr, "nats://127.0.0.1:1")
    assert "ORDERS" in jetraft(tmp_path, "--context", "lab", "stream", "ls").stdout


def test_context_files_are_shared_with_the_nats_cli(tmp_path):
    """A context written by the nats CLI (every field, indented) is read and updated in
    place, its other fields kept; info shows it; rm removes it, but not the selected one."""
    base = nats_dir(tmp_path)
    (base / "context").mkdir(parents=True)
    natscli = {"description": "From natscli", "url": "nats://n1:4222,nats://n2:4222", "socks_proxy": "",
               "token": "", "user": "sys", "password": "secret", "creds": "", "nkey": "", "cert": "", "key": "",
               "ca": "", "nsc": "", "jetstream_domain": "hub", "jetstream_api_prefix": "",
               "jetstream_event_prefix": "", "inbox_prefix": "_INBOX.me", "user_jwt": "",
               "color_scheme": "cyan", "tls_first": False}
    (base / "context" / "ops.json").write_text(json.dumps(natscli, indent=2))
    (base / "context.txt").write_text("ops")

    info = jetraft(tmp_path, "context", "info").stdout
    assert 'NATS Configuration Context "ops"' in info
    assert field(info, "Server URLs") == ["nats://n1:4222,nats://n2:4222"]
    assert field(info, "Username") == ["sys"]
    assert field(info, "JS Domain") == ["hub"]
    assert field(info, "Inbox Prefix") == ["_INBOX.me"]
    assert field(info, "Path") == [str(base / "context" / "ops.json")]
    shown = json.loads(jetraft(tmp_path, "context", "show", "ops", "--json").stdout)
    assert shown == natscli

    jetraft(tmp_path, "context", "add", "ops", "--description", "Operations", "--js-domain", "spoke")
    updated = json.loads((base / "context" / "ops.json").read_text())
    assert updated == {**natscli, "description": "Operations", "jetstream_domain": "spoke"}

    jetraft(tmp_path, "context", "add", "lab", "--server", "127.0.0.1:4222")
    assert json.loads((base / "context" / "lab.json").read_text())["url"] == "127.0.0.1:4222"
    kept = jetraft(tmp_path, "context", "rm", "ops", "-f", code=1)
    assert_clean_error(kept.stderr, "ops", "selected", "context select")
    assert "lab" in jetraft(tmp_path, "ctx", "ls", "--names").stdout.split()   # natscli's alias
    jetraft(tmp_path, "context", "rm", "lab", "-f")
    assert not (base / "context" / "lab.json").exists()
    assert json.loads(jetraft(tmp_path, "context", "ls", "--json").stdout)[0]["description"] == "Operations"


def test_context_errors_are_one_line(tmp_path):
    """Unknown names, bad names and nothing selected: one line saying what to do."""
    none = jetraft(tmp_path, "context", "info", code=1)
    assert_clean_error(none.stderr, "no context is selected", "context select")
    assert "No known contexts" in jetraft(tmp_path, "context", "ls").stdout
    nothing = jetraft(tmp_path, "context", "select", "nope", code=1)
    assert_clean_error(nothing.stderr, "no context defined", "jetraft context add NAME")
    jetraft(tmp_path, "context", "add", "lab")
    unknown = jetraft(tmp_path, "context", "select", "nope", code=1)
    assert_clean_error(unknown.stderr, "unknown context 'nope'", "context ls")
    bad = jetraft(tmp_path, "context", "add", "../evil", code=1)
    assert_clean_error(bad.stderr, "invalid context name '../evil'")
    missing = jetraft(tmp_path, "context", "rm", "nope", "-f", code=1)
    assert_clean_error(missing.stderr, "unknown context 'nope'")


# --------------------------------------------------------------------------- account and servers

#: JetStream in an APP account (app/app) and a system account user (sys/sys).
ACCOUNTS = """
accounts {
  SYS { users [ { user: sys, password: sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
system_account: SYS
"""


@pytest.fixture
def both(tmp_path):
    """jetraft and nats-server side by side, each with JetStream, APP and SYS accounts."""
    started = {kind: servers.start_server(kind, tmp_path / kind, js_config(tmp_path / f"{kind}-store") + ACCOUNTS
                                          + f'server_name: "{kind}-srv"\n', name=kind)
               for kind in servers.KINDS}
    yield started
    for server in started.values():
        server.stop()


def key_tree(value):
    """The shape of a JSON value: its keys, recursively (lists by their first item)."""
    if isinstance(value, dict):
        return {k: key_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [key_tree(value[0])] if value else []
    return type(value).__name__ if not isinstance(value, (int, float)) or isinstance(value, bool) else "number"


def test_account_info_like_nats_server(both, tmp_path):
    """account info: connection, JetStream usage and limits in the nats CLI's layout;
    --json is the $JS.API.INFO answer, the same shape and figures as nats-server's."""
    answers = {}
    for kind, server in both.items():
        app = ["-s", server.url, "--user", "app", "--password", "app"]
        jetraft(tmp_path, *app, "stream", "add", "ORDERS", "--subjects", "orders.>")
        jetraft(tmp_path, *app, "pub", "orders.1", "hello", "-J")
        text = jetraft(tmp_path, *app, "account", "info").stdout
        for heading in ("Connection Information:", "JetStream Account Information:", "Account Usage:",
                        "Account Limits:", "Tier: Default", "Stream Resource Usage Limits:"):
            assert heading in text, (kind, heading, text)
        assert field(text, "Connected URL") == [server.url], text
        assert field(text, "Maximum Payload") == ["1.0 MiB"]
        assert field(text, "TLS Connection") == ["no"]
        assert field(text, "Streams") == ["1", "1 of Unlimited"], text
        assert field(text, "Consumers") == ["0", "0 of Unlimited"], text
        assert field(text, "Memory") == ["0 B", "0 B of Unlimited"], text
        assert field(text, "Max Message Payload") == ["1.0 MiB"]
        answers[kind] = json.loads(jetraft(tmp_path, *app, "account", "info", "--json").stdout)
    ours, theirs = answers["jetraft"], answers["nats-server"]
    assert theirs["type"] == "io.nats.jetstream.api.v1.account_info_response"
    assert key_tree(ours) == key_tree(theirs)
    for key in ("type", "memory", "streams", "consumers", "limits"):
        assert ours[key] == theirs[key], key


def test_account_info_without_jetstream_says_so(both, tmp_path):
    """A user of an account without JetStream: the connection part, then a line saying so
    where the usage would be (as the nats CLI does: it is information, not a failure)."""
    for server in both.values():
        res = jetraft(tmp_path, "-s", server.url, "--user", "sys", "--password", "sys", "account", "info")
        assert "Connection Information:" in res.stdout and "Account Usage:" not in res.stdout
        assert "JetStream is not supported in this account" in res.stdout
        assert res.stderr == ""


LIMITED = """
accounts {
  APP { jetstream { max_streams: 1, max_consumers: 1, max_bytes_required: true, disk_max_stream_bytes: 10M },
        users [ { user: app, password: app } ] }
}
"""


def test_account_limits_in_account_info_and_errors_with_what_to_do(start_server, tmp_path):
    """An account with JetStream limits: account info shows them as the nats CLI does, and
    each refusal is one line with the server's reason and what to do (exit status 1)."""
    server = start_server(js_config(tmp_path / "store") + LIMITED)
    app = ["-s", server.url, "--user", "app", "--password", "app"]
    text = jetraft(tmp_path, *app, "account", "info").stdout
    assert field(text, "Stream Requires Max Bytes Set") == ["true"], text
    assert field(text, "Storage Per Stream") == ["9.5 MiB"], text
    assert field(text, "Streams") == ["0", "0 of 1"], text
    assert field(text, "Consumers") == ["0", "0 of 1"], text
    refused = jetraft(tmp_path, *app, "stream", "add", "ORDERS", "--subjects", "orders.>", code=1)
    assert_clean_error(refused.stderr, "account requires a stream config to have max bytes set (err_code 10113)",
                       "give one with --max-bytes")
    refused = jetraft(tmp_path, *app, "stream", "add", "ORDERS", "--subjects", "orders.>", "--max-bytes", "11M",
                      code=1)
    assert_clean_error(refused.stderr, "(err_code 10122)", "give a smaller --max-bytes")
    jetraft(tmp_path, *app, "stream", "add", "ORDERS", "--subjects", "orders.>", "--max-bytes", "1M")
    refused = jetraft(tmp_path, *app, "stream", "add", "OTHER", "--subjects", "other.>", "--max-bytes", "1M",
                      code=1)
    assert_clean_error(refused.stderr, "maximum number of streams reached (err_code 10027)",
                       "remove one (jetraft stream rm)")
    jetraft(tmp_path, *app, "consumer", "add", "ORDERS", "first", "--pull")
    refused = jetraft(tmp_path, *app, "consumer", "add", "ORDERS", "second", "--pull", code=1)
    assert_clean_error(refused.stderr, "maximum consumers limit reached (err_code 10026)",
                       "remove one (jetraft consumer rm)")
    text = jetraft(tmp_path, *app, "account", "info").stdout
    assert field(text, "Streams") == ["1", "1 of 1"] and field(text, "Consumers") == ["1", "1 of 1"], text


def ping_lines(text: str) -> list[tuple[str, str]]:
    """The (server name, rtt) of every answer line of ``server ping``."""
    return re.findall(r"^(\S+) +rtt=(\d[\d.]*(?:ns|µs|ms|s))$", text, re.M)


def test_server_ping_one_line_per_answer(both, tmp_path):
    """server ping: NAME rtt=DURATION per answer, then the statistics; --count pings
    again; fewer answers than --expect is a clean error; a user outside $SYS is told why."""
    for kind, server in both.items():
        sys_user = ["-s", server.url, "--user", "sys", "--password", "sys"]
        out = jetraft(tmp_path, *sys_user, "server", "ping").stdout
        assert [name for name, _ in ping_lines(out)] == [f"{kind}-srv"], out
        assert "---- ping statistics ----" in out
        assert re.search(r"^1 replies max: \d+\.\d\d min: \d+\.\d\d avg: \d+\.\d\d$", out, re.M), out

        three = jetraft(tmp_path, *sys_user, "server", "ping", "--count", "3").stdout
        assert [name for name, _ in ping_lines(three)] == [f"{kind}-srv"] * 3, three
        assert re.search(r"^3 replies max: ", three, re.M), three

        missing = jetraft(tmp_path, *sys_user, "--timeout", "0.5", "server", "ping", "--expect", "2", code=1)
        assert len(ping_lines(missing.stdout)) == 1 and "1 replies" in missing.stdout
        assert_clean_error(missing.stderr, "1 of 2 servers answered")
        assert len(ping_lines(jetraft(tmp_path, *sys_user, "server", "ping", "1").stdout)) == 1

        refused = jetraft(tmp_path, "-s", server.url, "--user", "app", "--password", "app", "server", "ping",
                          code=1)
        assert_clean_error(refused.stderr, "$SYS.REQ.SERVER.PING", "system account")


def test_server_info_like_nats_server(both, tmp_path):
    """server info [SERVER]: the nats CLI's page of one server's VARZ, by name or id;
    --json is the VARZ data, with nats-server's fields; an unknown server is one line."""
    varz = {}
    for kind, server in both.items():
        sys_user = ["-s", server.url, "--user", "sys", "--password", "sys"]
        page = jetraft(tmp_path, *sys_user, "server", "info").stdout
        head = re.match(r"Server information for (\S+) \((N[A-Z0-9]{55})\)\n", page)
        assert head and head.group(1) == f"{kind}-srv", page
        for section in ("Process Details:", "Connection Details:", "JetStream:", "Limits:", "Statistics:"):
            assert section in page, (section, page)
        assert field(page, "Storage Directory") == [str(tmp_path / f"{kind}-store" / "jetstream")] or \
            field(page, "Storage Directory") == [str(tmp_path / f"{kind}-store")], page
        assert field(page, "Max Payload") == ["1.0 MiB"]
        assert field(page, "Host") == [f"0.0.0.0:{server.port}"] or field(page, "Host")[0].endswith(
            f":{server.port}"), page
        assert field(page, "Auth Required") == ["true"]

        by_id = jetraft(tmp_path, *sys_user, "server", "info", head.group(2)).stdout
        assert by_id.splitlines()[0] == page.splitlines()[0]
        by_name = jetraft(tmp_path, *sys_user, "server", "info", f"{kind}-srv").stdout
        assert by_name.splitlines()[0] == page.splitlines()[0]
        unknown = jetraft(tmp_path, *sys_user, "--timeout", "0.5", "server", "info", "nope", code=1)
        assert_clean_error(unknown.stderr, "no server named nope answered", "server list")
        varz[kind] = json.loads(jetraft(tmp_path, *sys_user, "server", "info", "--json").stdout)
    ours, theirs = varz["jetraft"], varz["nats-server"]
    assert theirs["server_name"] == "nats-server-srv" and ours["server_name"] == "jetraft-srv"
    shown = ("server_id", "server_name", "version", "go", "host", "port", "auth_required", "max_payload",
             "max_connections", "connections", "subscriptions", "in_msgs", "out_msgs", "start", "uptime")
    assert {k: type(ours.get(k)) for k in shown} == {k: type(theirs.get(k)) for k in shown}
