"""playbooks/deploy.yml, tag jetraft_server_config: the configuration the role templates
for five local hosts in zones 2/2/1 (TLS on clients, routes and monitoring by default, with
certificates the jetraft_certs role makes on the controller), checked as an operator would,
and accepted by both jetraft-server -t and the real nats-server -t."""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest
import yaml
from playbook import flat, run_playbook
from servers import binary

JETRAFT_SERVER = Path(sys.executable).with_name("jetraft-server")
HOSTS = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c"}
SYS_PASSWORD = "a very long s3cr3t! password"
APP_PASSWORD = "app-pa$$/word"


def write_inventory(tmp_path: Path, **extra) -> Path:
    zones: dict[str, dict] = {}
    for k, (host, zone) in enumerate(HOSTS.items(), start=1):
        zones.setdefault(f"zone_{zone}", {"hosts": {}, "vars": {"jetraft_zone": zone}})
        zones[f"zone_{zone}"]["hosts"][host] = {
            "jetraft_server_address": f"127.0.0.{k}",
            "jetraft_server_config_dir": str(tmp_path / host),
            "jetraft_server_store_dir": str(tmp_path / host / "store"),
        }
    group_vars = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "jetraft_server_group": grp.getgrgid(os.getgid()).gr_name,
        "jetraft_server_user": pwd.getpwuid(os.getuid()).pw_name,
        "jetraft_server_binary": str(JETRAFT_SERVER),
        "jetraft_server_sys_password": SYS_PASSWORD,
        "jetraft_server_route_password": "route-secret",
        "jetraft_server_accounts": {"APP": {"jetstream": True,
                                            "users": [{"user": "app", "password": APP_PASSWORD}]}},
        **extra,
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"jetraft": {"vars": group_vars, "children": zones}}))
    return path


def deploy(inv: Path) -> subprocess.CompletedProcess:
    return run_playbook("deploy", inv, "jetraft_server_config")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deploy")
    inv = write_inventory(tmp)
    first = deploy(inv)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    return tmp, inv, first


def conf(tmp: Path, host: str) -> str:
    return (tmp / host / "jetraft.conf").read_text()


def test_each_server_gets_its_name_zone_and_routes_to_the_other_four(deployed):
    tmp, _, _ = deployed
    names = set()
    for k, (host, zone) in enumerate(HOSTS.items(), start=1):
        text = conf(tmp, host)
        names.add(re.search(r'^server_name: "(.*)"$', text, re.M).group(1))
        assert f'server_tags: ["az:{zone}"]' in text
        assert 'unique_tag: "az:"' in text
        routes = set(re.findall(r"nats://route:route-secret@(127\.0\.0\.\d):6222", text))
        assert routes == {f"127.0.0.{i}" for i in range(1, 6)} - {f"127.0.0.{k}"}
    assert names == set(HOSTS)


def test_passwords_are_bcrypt_hashes_with_a_salt_per_host(deployed):
    tmp, _, _ = deployed
    hashes = []
    for host in HOSTS:
        text = conf(tmp, host)
        assert SYS_PASSWORD not in text and APP_PASSWORD not in text
        sys_hash = re.search(r'user: "admin", password: "(\$2b\$[^"]+)"', text).group(1)
        app_hash = re.search(r'user: "app", password: "(\$2b\$[^"]+)"', text).group(1)
        assert bcrypt.checkpw(SYS_PASSWORD.encode(), sys_hash.encode())
        assert bcrypt.checkpw(APP_PASSWORD.encode(), app_hash.encode())
        hashes.append(sys_hash)
    assert len(set(hashes)) == len(HOSTS)


def test_the_file_is_0640_in_a_0750_directory(deployed):
    tmp, _, _ = deployed
    for host in HOSTS:
        assert stat.S_IMODE((tmp / host / "jetraft.conf").stat().st_mode) == 0o640
        assert stat.S_IMODE((tmp / host).stat().st_mode) == 0o750


def test_both_servers_accept_the_configuration(deployed):
    tmp, _, _ = deployed
    for host in HOSTS:
        path = tmp / host / "jetraft.conf"
        for exe in (JETRAFT_SERVER, binary("nats-server")):
            result = subprocess.run([str(exe), "-t", "-c", str(path)], capture_output=True,
                                    text=True, timeout=60)
            assert result.returncode == 0, f"{exe}: {result.stdout}{result.stderr}"


def test_a_second_run_changes_nothing(deployed):
    _, inv, first = deployed
    assert "changed=0" not in first.stdout.split("PLAY RECAP")[-1]
    again = deploy(inv)
    assert again.returncode == 0, again.stdout[-3000:]
    recap = again.stdout.split("PLAY RECAP")[-1]
    assert recap.count("changed=0") == len(HOSTS), recap


def test_a_configuration_the_server_refuses_is_not_put_in_place(deployed, tmp_path):
    tmp, _, _ = deployed
    before = conf(tmp, "n1")
    bad = write_inventory(tmp, jetraft_server_client_port=99999)
    result = deploy(bad)
    out = flat(result)
    assert result.returncode != 0
    assert "failed to validate" in out and "listen: 99999 is out of range" in out, out[-3000:]
    assert conf(tmp, "n1") == before
    assert SYS_PASSWORD not in out and "route-secret" not in out


def test_missing_secrets_are_named(tmp_path):
    inv = write_inventory(tmp_path)
    data = yaml.safe_load(inv.read_text())
    del data["jetraft"]["vars"]["jetraft_server_sys_password"]
    inv.write_text(yaml.safe_dump(data))
    result = deploy(inv)
    out = flat(result)
    assert result.returncode != 0
    # the role's argument specification requires it
    assert "missing required arguments: jetraft_server_sys_password" in out, out[-2000:]


def test_an_account_user_without_a_password_is_named_and_no_password_is_shown(tmp_path):
    inv = write_inventory(tmp_path, jetraft_server_accounts={
        "APP": {"jetstream": True, "users": [{"user": "app", "password": APP_PASSWORD},
                                             {"user": "nopass"}]}})
    result = deploy(inv)
    out = flat(result)
    assert result.returncode != 0
    assert "a password for every user of jetraft_server_accounts (none for APP/nopass)" in out, out[-2000:]
    assert SYS_PASSWORD not in out and APP_PASSWORD not in out and "route-secret" not in out


def test_a_refused_configuration_is_shown_with_every_secret_masked(deployed, tmp_path):
    """A validator that prints the file it is given (as an error would quote it) and refuses
    it: the operator reads its words with the route password masked."""
    tmp, _, _ = deployed
    echo = tmp_path / "echo-and-refuse"
    echo.write_text('#!/bin/sh\ncat "$3"; exit 1\n')
    echo.chmod(0o755)
    result = deploy(write_inventory(tmp, jetraft_server_binary=str(echo),
                                    jetraft_server_lame_duck_duration=7))
    out = flat(result)
    assert result.returncode != 0
    assert "failed to validate" in out and "nats://route:********@127.0.0.2:6222" in out, out[-3000:]
    assert "route-secret" not in out and SYS_PASSWORD not in out and APP_PASSWORD not in out


def _block(text: str, opener: str) -> str:
    """The text of the ``opener {`` block (first one) up to its closing brace."""
    start = text.index(opener + " {")
    depth, i = 0, start
    while True:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1


def test_tls_on_clients_routes_and_monitoring_by_default(deployed):
    tmp, _, _ = deployed
    for host in HOSTS:
        text = conf(tmp, host)
        tls_dir = tmp / host / "tls"
        assert re.search(r'^https: "0\.0\.0\.0:8222"$', text, re.M)
        assert not re.search(r"^http:", text, re.M)
        client = _block(text, "\ntls")
        cluster_tls = _block(_block(text, "cluster"), "tls")
        for block in (client, cluster_tls):
            assert f'cert_file: "{tls_dir}/server.crt"' in block
            assert f'key_file: "{tls_dir}/server.key"' in block
            assert f'ca_file: "{tls_dir}/ca.crt"' in block
        assert "verify: false" in client
        assert "verify" not in cluster_tls        # routes always verify both ways
        assert 'listen: "0.0.0.0:4222"' in text and 'listen: "0.0.0.0:6222"' in text


def test_each_host_gets_its_certificate_key_and_the_ca_with_their_modes(deployed):
    from cryptography import x509

    tmp, _, _ = deployed
    pki = tmp / "pki"
    assert stat.S_IMODE(pki.stat().st_mode) == 0o700
    assert stat.S_IMODE((pki / "ca.key").stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    for k, host in enumerate(HOSTS, start=1):
        tls_dir = tmp / host / "tls"
        modes = {p.name: (stat.S_IMODE(p.stat().st_mode), p.stat().st_uid)
                 for p in tls_dir.iterdir() if not p.name.startswith(".")}
        assert modes == {"ca.crt": (0o644, 0), "server.crt": (0o644, 0),
                         "server.key": (0o600, os.getuid())}
        assert stat.S_IMODE(tls_dir.stat().st_mode) == 0o750
        assert (tls_dir / "ca.crt").read_bytes() == (pki / "ca-bundle.crt").read_bytes()
        cert = x509.load_pem_x509_certificate((tls_dir / "server.crt").read_bytes())
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {host, "localhost"} <= set(san.get_values_for_type(x509.DNSName))
        assert {f"127.0.0.{k}", "127.0.0.1"} <= {str(a) for a in san.get_values_for_type(x509.IPAddress)}
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert {u.dotted_string for u in usages} == {"1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"}
        assert b"PRIVATE KEY" in (tls_dir / "server.key").read_bytes()
        assert (tls_dir / "server.key").read_bytes() == (pki / "hosts" / f"{host}.key").read_bytes()


def test_no_key_reaches_the_output(deployed):
    tmp, _, first = deployed
    out = first.stdout + first.stderr
    for key in (tmp / "pki").rglob("*.key"):
        body = key.read_text().splitlines()[1]
        assert body not in out


@pytest.mark.parametrize("extra, expect", [
    ({"jetraft_server_tls": False}, "plain"),
    ({"jetraft_server_tls_verify_clients": True}, "verify"),
])
def test_tls_off_or_client_certificates_required_are_accepted_by_both_servers(tmp_path, extra, expect):
    inv = write_inventory(tmp_path, **extra)
    result = deploy(inv)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    text = conf(tmp_path, "n1")
    if expect == "plain":
        assert re.search(r'^http: "0\.0\.0\.0:8222"$', text, re.M)
        assert "tls {" not in text and "https" not in text
        assert not (tmp_path / "pki").exists() and not (tmp_path / "n1" / "tls").exists()
    else:
        assert "verify: true" in _block(text, "\ntls")
    for exe in (JETRAFT_SERVER, binary("nats-server")):
        checked = subprocess.run([str(exe), "-t", "-c", str(tmp_path / "n1" / "jetraft.conf")],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, f"{exe}: {checked.stdout}{checked.stderr}"


def test_an_accounts_jetstream_limits_are_written_and_checked_by_the_server(tmp_path):
    """jetstream as a map: each limit in the account's jetstream block, unquoted, and the
    server's own check of the file accepts it."""
    inv = write_inventory(tmp_path, jetraft_server_accounts={
        "APP": {"jetstream": {"max_file": "100G", "max_mem": "1G", "max_streams": 20,
                              "max_bytes_required": True},
                "users": [{"user": "app", "password": APP_PASSWORD}]}})
    result = deploy(inv)
    assert result.returncode == 0, flat(result)[-3000:]
    block = _block(_block(conf(tmp_path, "n1"), "APP"), "jetstream")
    assert block.split("\n")[1:-1] == ["      max_bytes_required: true", "      max_file: 100G",
                                       "      max_mem: 1G", "      max_streams: 20"], block


@pytest.mark.parametrize(("limits", "named"), [
    ({"max_file": '1G }\n  EVIL { jetstream: enabled'}, "APP.max_file"),
    ({"max_file": "lots"}, "APP.max_file"),
    ({"max_file": 1.5}, "APP.max_file"),
    ({"max file": 1}, "APP.max file"),
])
def test_an_account_limit_that_is_not_a_number_size_or_boolean_is_refused_before_writing(tmp_path, limits, named):
    inv = write_inventory(tmp_path, jetraft_server_accounts={
        "APP": {"jetstream": limits, "users": [{"user": "app", "password": APP_PASSWORD}]}})
    result = deploy(inv)
    out = flat(result)
    assert result.returncode != 0
    assert "a JetStream limit must be a number, a size such as 100G or a boolean" in out, out[-2000:]
    assert f"not so: {named}" in out, out[-2000:]
    assert not (tmp_path / "n1" / "jetraft.conf").exists()
    assert APP_PASSWORD not in out and SYS_PASSWORD not in out


def test_an_account_limit_the_server_does_not_know_is_refused_by_the_servers_check(tmp_path):
    inv = write_inventory(tmp_path, jetraft_server_accounts={
        "APP": {"jetstream": {"max_bogus": 10}, "users": [{"user": "app", "password": APP_PASSWORD}]}})
    result = deploy(inv)
    out = flat(result)
    assert result.returncode != 0
    assert "failed to validate" in out and "accounts.APP.jetstream.max_bogus" in out, out[-3000:]
    assert APP_PASSWORD not in out and SYS_PASSWORD not in out


def test_the_admin_cli_on_each_host_has_root_only_contexts_for_the_accounts_and_the_system(tmp_path):
    """Tag jetraft_server_cli: root's contexts (here under each host's own home), the first
    account with JetStream selected, 0600 in 0700 directories; `jetraft context info` reads
    them as written; a second run changes nothing."""
    inv = write_inventory(tmp_path, jetraft_server_cli_home="{{ jetraft_server_config_dir }}/home",
                          jetraft_server_cli_links=[], jetraft_cluster_name="Lab")
    first = run_playbook("deploy", inv, "jetraft_server_cli")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert APP_PASSWORD not in first.stdout + first.stderr and SYS_PASSWORD not in first.stdout
    for k, host in enumerate(HOSTS, start=1):
        nats = tmp_path / host / "home" / ".config" / "nats"
        for d in (nats.parent, nats, nats / "context"):
            assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
        assert sorted(p.name for p in (nats / "context").iterdir()) == ["lab-app.json", "lab-system.json"]
        assert (nats / "context.txt").read_text() == "lab-app"
        for name, user, password in (("lab-app", "app", APP_PASSWORD), ("lab-system", "admin", SYS_PASSWORD)):
            path = nats / "context" / f"{name}.json"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            ctx = yaml.safe_load(path.read_text())
            assert (ctx["url"], ctx["user"], ctx["password"], ctx["ca"]) == (
                f"tls://127.0.0.{k}:4222", user, password, str(tmp_path / host / "tls" / "ca.crt"))
        shown = subprocess.run([str(JETRAFT_SERVER.with_name("jetraft")), "context", "info"],
                               env={**os.environ, "XDG_CONFIG_HOME": str(nats.parent)},
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert f"tls://127.0.0.{k}:4222" in shown.stdout and "app" in shown.stdout
        assert APP_PASSWORD not in shown.stdout
    second = run_playbook("deploy", inv, "jetraft_server_cli")
    assert second.returncode == 0, second.stdout[-4000:]
    assert second.stdout.split("PLAY RECAP")[-1].count("changed=0") == len(HOSTS), second.stdout[-3000:]
