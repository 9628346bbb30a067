"""Which configuration changes a SIGHUP reload refuses (jetraft.server.reload_refusals):
nats-server's (server/reload.go diffOptions) and jetraft's own, where a change would be
accepted and not acted on."""

from __future__ import annotations

from jetraft.config import config_from_text, validate
from jetraft.server import reload_refusals

JS = 'jetstream { store_dir: "/tmp/x" }\n'
CLUSTER = "server_name: s1\ncluster { name: c, listen: 127.0.0.1:6222, routes: [nats://127.0.0.1:6223] }\n"
ACCOUNTS = ("accounts {{ A {{ jetstream: {a}, users = [ {{ user: a, pass: a }} ] }}, "
            "B {{ jetstream: {b}, users = [ {{ user: b, pass: b }} ] }} }}\n")


def cfg(text: str):
    config = config_from_text(text, "s.conf")
    validate(config)
    return config


def refusals(before: str, after: str) -> list[str]:
    return reload_refusals(cfg(before), cfg(after))


def test_options_nats_server_cannot_reload_are_refused_with_both_values():
    assert refusals("max_pending: 10MB", "max_pending: 20MB") == [
        "config reload not supported for max_pending: old=10485760, new=20971520"]
    assert refusals("max_closed_clients: 10", "max_closed_clients: 5") == [
        "config reload not supported for max_closed_clients: old=10, new=5"]
    assert refusals("lame_duck_duration: 30s", "lame_duck_duration: 60s") == [
        "config reload not supported for lame_duck_duration: old=30.0, new=60.0"]
    assert refusals("", "max_payload: 2000\nmax_connections: 5\nping_interval: 5s") == []


def test_no_auth_user_may_only_go_with_its_user():
    users = 'authorization { users = [ { user: a, pass: a }, { user: b, pass: b } ] }\n'
    only_b = 'authorization { users = [ { user: b, pass: b } ] }\n'
    assert refusals(users + "no_auth_user: a", only_b) == []
    assert refusals(users + "no_auth_user: a", users) == [
        "config reload not supported for no_auth_user: old=a, new="]
    assert refusals(users + "no_auth_user: a", users + "no_auth_user: b") == [
        "config reload not supported for no_auth_user: old=a, new=b"]
    assert refusals(users, users + "no_auth_user: b") == [
        "config reload not supported for no_auth_user: old=, new=b"]


def test_the_accounts_jetstream_serves_cannot_change_without_a_restart():
    [why] = refusals(JS + ACCOUNTS.format(a="enabled", b="disabled"),
                     JS + ACCOUNTS.format(a="enabled", b="enabled"))
    assert why.startswith("config reload not supported for the accounts JetStream serves: old=A, new=A,B")
    [why] = refusals(JS + ACCOUNTS.format(a="enabled", b="disabled"),
                     JS + ACCOUNTS.format(a="disabled", b="disabled"))
    assert "old=A, new=- " in why
    # users and permissions of those accounts still reload
    assert refusals(JS + ACCOUNTS.format(a="enabled", b="disabled"),
                    JS + ACCOUNTS.format(a="enabled", b="disabled").replace("pass: b", "pass: c")) == []


def test_server_tags_are_fixed_in_a_jetstream_cluster_only():
    assert refusals('server_tags: ["az:a"]', 'server_tags: ["az:b"]') == []
    assert refusals(JS + 'server_tags: ["az:a"]', JS + 'server_tags: ["az:b"]') == []
    [why] = refusals(JS + CLUSTER + 'server_tags: ["az:a"]', JS + CLUSTER + 'server_tags: ["az:b"]')
    assert why.startswith("config reload not supported for server_tags in a JetStream cluster: "
                          "old=['az:a'], new=['az:b']")


def test_every_reason_is_given_at_once():
    assert len(refusals("max_pending: 10MB\nlame_duck_duration: 30s",
                        "max_pending: 20MB\nlame_duck_duration: 60s")) == 2


def test_account_jetstream_limits_need_a_restart():
    """Limits are read when the account's JetStream starts: a reload that changes them would
    be accepted and not acted on."""
    assert refusals(JS + ACCOUNTS.format(a="{ max_streams: 2 }", b="enabled"),
                    JS + ACCOUNTS.format(a="{ max_streams: 3 }", b="enabled")) == [
        "config reload not supported for the JetStream limits of account A: "
        "old={'max_streams': 2}, new={'max_streams': 3} (restart the server to change them)"]
    assert refusals(JS + ACCOUNTS.format(a="enabled", b="enabled"),
                    JS + ACCOUNTS.format(a="enabled", b="{ max_bytes_required: true }")) == [
        "config reload not supported for the JetStream limits of account B: "
        "old={}, new={'max_bytes_required': True} (restart the server to change them)"]
    same = JS + ACCOUNTS.format(a="{ max_consumers: 4 }", b="enabled")
    assert refusals(same, same) == []
