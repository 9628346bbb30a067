"""``jetraft context``, ``account info``, ``server ping`` and ``server info`` as a user runs them.

Contexts live where the ``nats`` CLI keeps them (``$XDG_CONFIG_HOME/nats/context/NAME.json``
and ``nats/context.txt`` for the selection); every test gets its own XDG_CONFIG_HOME.
Commands that talk to a server run against jetraft and nats-server alike (``start_server``).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from jetraft.cli.admin import cli
from jetraft.cli.admin.groups import GLOBAL_FLAGS, GLOBAL_VALUED, hoist_global_options
from test_admin_cli import assert_clean_error, env_changes, field, js_config


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
