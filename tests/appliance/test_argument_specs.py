"""Every role documents each of its variables in meta/argument_specs.yml (type and
description), the secrets are required and never logged, and every task that handles a
secret or a private key keeps it out of the output: ``no_log: true``, or one of the few
tasks whose output is built to show names only (listed below with why)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from playbook import ROOT

ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())


def specs(role: Path) -> dict:
    return yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_documented_with_a_type_and_a_description(role):
    options = specs(role)
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    assert sorted(k for k in defaults if not k.startswith("__") and k not in options) == []
    for name, option in options.items():
        assert option.get("type") and option.get("description"), name


def test_the_tls_variables_are_documented():
    server = specs(ROOT / "roles" / "jetraft_server")
    for name in ("jetraft_server_tls", "jetraft_server_tls_verify_clients", "jetraft_server_tls_timeout",
                 "jetraft_server_tls_dir", "jetraft_server_tls_cert_file", "jetraft_server_tls_key_file",
                 "jetraft_server_tls_ca_file", "jetraft_server_tls_pki_dir"):
        assert name in server, name
    assert server["jetraft_server_tls"]["default"] is True
    assert server["jetraft_server_tls_verify_clients"]["default"] is False
    certs = specs(ROOT / "roles" / "jetraft_certs")
    for name in ("jetraft_certs_dir", "jetraft_certs_days", "jetraft_certs_renew_days", "jetraft_certs_ca_days"):
        assert name in certs, name
    assert "jetraft_preflight_cert_min_days" in specs(ROOT / "roles" / "jetraft_preflight")


def test_the_secrets_are_required_and_never_logged():
    server = specs(ROOT / "roles" / "jetraft_server")
    for name in ("jetraft_server_sys_password", "jetraft_server_route_password"):
        assert server[name].get("required") is True, name
        assert server[name].get("no_log") is True, name
    assert server["jetraft_server_accounts"].get("no_log") is True      # the users' passwords


#: Words that mark a task as handling a secret: the passwords, the accounts (their users'
#: passwords), the private keys, and the action that writes them.
SECRET_MARKS = ("_password", "jetraft_server_accounts", "key_src", "tls_key_file", "jetraft_cert:",
                "jetraft_server_config_template")
#: Tasks that touch a secret without no_log, and why their output holds none.
SHOWN_ON_PURPOSE = {
    "The secrets are set": "an assert whose message lists account/user names only",
    "Account JetStream limits are numbers, sizes or booleans": "an assert whose message lists account.limit names only",
    "The configuration was refused (secrets masked)": "shows the server's words with every secret replaced",
    "TLS files newer than the running server's last start or reload": "prints file names (stat times)",
    "After the reload, the server is healthy and knows the meta leader: {{ __jetraft_server_reload_host }}": "a client key path",
    "The server answers /healthz": "a client key path",
    "The server knows the meta leader of a meta group of every server": "a client key path",
    "The meta leader sees every other server current": "a client key path",
    "The server's streams have a leader, and those it leads every replica, current, in distinct zones": "a client key path",
    "After the restart, the server is healthy and knows the meta leader: {{ __jetraft_server_restart_host }}": "a client key path",
    "Before the restart or reload, every other server answers /healthz: {{ __jetraft_server_gate_host }}": "a client key path",
    "Before the restart or reload, every other server knows the meta leader: {{ __jetraft_server_gate_host }}": "a client key path",
    "The controller has this host's certificate and key": "stat of paths",
    "The host's TLS files": "stat of paths",
}


def _tasks(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always"):
            yield from _tasks(item.get(key))


def _task_files():
    for role in ROLES:
        for path in sorted((role / "tasks").glob("*.yml")) + sorted((role / "handlers").glob("*.yml")):
            yield path
    yield from sorted((ROOT / "playbooks").glob("*.yml"))


def test_the_list_of_tasks_shown_on_purpose_names_real_tasks():
    names = {t.get("name") for path in _task_files()
             for play in yaml.safe_load(path.read_text()) or [] if isinstance(play, dict)
             for t in _tasks([play] + play.get("tasks", []) + play.get("handlers", []))}
    assert set(SHOWN_ON_PURPOSE) - names == set()


def test_every_task_handling_a_secret_is_no_log_or_shows_names_only():
    offenders = []
    for path in _task_files():
        data = yaml.safe_load(path.read_text()) or []
        plays = [p for p in data if isinstance(p, dict)]
        tasks = [t for play in plays for t in _tasks(play.get("tasks", []) + play.get("handlers", []))] \
            if any("hosts" in p for p in plays) else list(_tasks(plays))
        for task in tasks:
            if any(k in task for k in ("block", "import_tasks", "ansible.builtin.import_tasks",
                                        "include_tasks", "ansible.builtin.include_tasks",
                                        "ansible.builtin.include_role", "ansible.builtin.import_playbook")):
                continue
            text = yaml.safe_dump({k: v for k, v in task.items() if k != "name"})
            if any(mark in text for mark in SECRET_MARKS) and task.get("no_log") is not True \
                    and task.get("name") not in SHOWN_ON_PURPOSE:
                offenders.append(f"{path.relative_to(ROOT)}: {task.get('name')}")
    assert offenders == []


def test_the_key_and_certificate_tasks_are_no_log():
    names = {}
    for path in _task_files():
        for play in yaml.safe_load(path.read_text()) or []:
            for task in _tasks([play] if isinstance(play, dict) else []):
                names[task.get("name")] = task
    for name in ("The cluster's CA, on the controller", "This host's certificate, on the controller",
                 "The server's private key, readable by the service user alone",
                 "The configuration, validated before it is put in place"):
        assert names[name].get("no_log") is True, name
