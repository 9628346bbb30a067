"""playbooks/deploy.yml, tag jetraft_server_config: the configuration the role templates
for five local hosts in zones 2/2/1, checked as an operator would, and accepted by both
jetraft-server -t and the real nats-server -t."""

from __future__ import annotations

import grp
import os
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
    assert "set jetraft_server_sys_password (the $SYS user's password)" in out, out[-2000:]
