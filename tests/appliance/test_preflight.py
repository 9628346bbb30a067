"""playbooks/preflight.yml (role jetraft_preflight) against generated inventories.

Every host is this machine (``ansible_connection: local``): the inventory checks need no
host at all, and the host checks read this machine's facts. Each failing case asserts the
message an operator reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook import flat, local_inventory, run_playbook


def inventory(tmp_path: Path, zones: dict[str, list[str]], host_vars: dict | None = None,
              **group_vars) -> Path:
    """An inventory of local hosts: ``zones`` maps a zone letter to its hosts."""
    children = {f"zone_{z}": {"hosts": {h: dict((host_vars or {}).get(h, {})) for h in hosts},
                              "vars": {"jetraft_zone": z}} for z, hosts in zones.items()}
    return local_inventory(tmp_path / "hosts.yml", children=children, **group_vars)


def preflight(inv: Path, *tags: str) -> subprocess.CompletedProcess:
    return run_playbook("preflight", inv, *tags)


def fails_with(result: subprocess.CompletedProcess, text: str) -> None:
    out = flat(result)
    assert result.returncode != 0, out[-2000:]
    assert text in out, out[-3000:]


ZONES_221 = {"a": ["h1", "h2"], "b": ["h3", "h4"], "c": ["h5"]}


def test_five_servers_in_zones_2_2_1_pass(tmp_path):
    result = preflight(inventory(tmp_path, ZONES_221), "jetraft_preflight_inventory")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "failed=0" in result.stdout


def test_a_zone_holding_a_quorum_is_refused(tmp_path):
    inv = inventory(tmp_path, {"a": ["h1", "h2", "h3"], "b": ["h4"], "c": ["h5"]})
    fails_with(preflight(inv, "jetraft_preflight_inventory"),
               "zone 'a' holds 3 of 5 servers, a quorum (3): losing it would stop the cluster")


def test_an_even_number_of_servers_is_refused(tmp_path):
    inv = inventory(tmp_path, {"a": ["h1", "h2"], "b": ["h3"], "c": ["h4"]})
    fails_with(preflight(inv, "jetraft_preflight_inventory"),
               "group 'jetraft' holds 4 servers: a cluster needs an odd number, at least 3")


def test_fewer_than_three_zones_are_refused(tmp_path):
    inv = inventory(tmp_path, {"a": ["h1", "h2"], "b": ["h3"]})
    fails_with(preflight(inv, "jetraft_preflight_inventory"),
               "the servers are in 2 zone(s) (a, b); at least 3 are needed")


def test_a_duplicate_server_name_is_refused(tmp_path):
    inv = inventory(tmp_path, ZONES_221, host_vars={"h1": {"jetraft_server_name": "n1"},
                                                    "h3": {"jetraft_server_name": "n1"}})
    fails_with(preflight(inv, "jetraft_preflight_inventory"),
               "server name 'n1' is used by h1, h3; set a unique jetraft_server_name per host")


def test_a_server_without_a_zone_is_refused(tmp_path):
    inv = inventory(tmp_path, ZONES_221)
    data = yaml.safe_load(inv.read_text())
    data["jetraft"]["hosts"] = {"h6": {}, "h7": {}}
    inv.write_text(yaml.safe_dump(data))
    fails_with(preflight(inv, "jetraft_preflight_inventory"),
               "h6 has no jetraft_zone: put it in one zone group")


def test_host_checks_accept_a_named_non_rotational_disk_and_refuse_others(tmp_path, block_devices):
    devices = sorted(d for d in os.listdir("/sys/block")
                     if Path(f"/sys/block/{d}/queue/rotational").exists())
    rota = {d: Path(f"/sys/block/{d}/queue/rotational").read_text().strip() for d in devices}
    one = {"a": ["h1"], "b": ["h2"], "c": ["h3"]}
    missing = preflight(inventory(tmp_path, one, jetraft_storage_device="/dev/no-such-disk"),
                        "jetraft_preflight_host")
    fails_with(missing, "has no disk /dev/no-such-disk; set jetraft_storage_device to one of")
    spinning = next((d for d in devices if rota[d] == "1"), None)
    if spinning is not None:
        fails_with(preflight(inventory(tmp_path, one, jetraft_storage_device=f"/dev/{spinning}"),
                             "jetraft_preflight_host"),
                   f"/dev/{spinning} on h1 is rotational; use an SSD, or set "
                   "jetraft_storage_allow_rotational")
        ok = preflight(inventory(tmp_path, one, jetraft_storage_device=f"/dev/{spinning}",
                                 jetraft_storage_allow_rotational=True), "jetraft_preflight_host")
        assert ok.returncode == 0, ok.stdout[-3000:]
    solid = next((d for d in devices if rota[d] == "0"), None)
    if solid is None:
        pytest.skip("this machine has no non-rotational block device")
    ok = preflight(inventory(tmp_path, one, jetraft_storage_device=f"/dev/{solid}"),
                   "jetraft_preflight_host")
    assert ok.returncode == 0, ok.stdout[-3000:]


def test_an_unsupported_system_is_refused(tmp_path):
    inv = inventory(tmp_path, {"a": ["h1"], "b": ["h2"], "c": ["h3"]},
                    jetraft_preflight_supported_os=["Plan9 4"], jetraft_storage_allow_rotational=True,
                    jetraft_storage_device="/dev/no-such-disk")
    fails_with(preflight(inv, "jetraft_preflight_host"), "supported: Plan9 4.")


def test_tls_checks_pass_before_any_certificate_exists(tmp_path):
    inv = inventory(tmp_path, ZONES_221, jetraft_server_config_dir=str(tmp_path / "etc"))
    result = preflight(inv, "jetraft_preflight_tls")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "failed=0" in result.stdout


def _certs(inv: Path) -> None:
    """The jetraft_certs role's certificates for ``inv`` (deploy.yml, tag jetraft_certs)."""
    made = run_playbook("deploy", inv, "jetraft_certs")
    assert made.returncode == 0, made.stdout[-3000:]


def test_a_certificate_expiring_within_the_threshold_says_to_run_rotate_certs(tmp_path):
    inv = inventory(tmp_path, ZONES_221, jetraft_server_config_dir=str(tmp_path / "etc"),
                    jetraft_server_sys_password="x", jetraft_server_route_password="y",
                    jetraft_certs_days=10)
    _certs(inv)
    fails_with(preflight(inv, "jetraft_preflight_tls"),
               "the certificate of h1 on the controller "
               f"({tmp_path}/pki/hosts/h1.crt) expires on")
    fails_with(preflight(inv, "jetraft_preflight_tls"),
               "(9 days left; at least 30 are wanted): run ansible-playbook playbooks/rotate_certs.yml")
    # with a threshold below the certificates' life, they pass
    ok = preflight(inventory(tmp_path, ZONES_221, jetraft_server_config_dir=str(tmp_path / "etc"),
                             jetraft_preflight_cert_min_days=5), "jetraft_preflight_tls")
    assert ok.returncode == 0, ok.stdout[-3000:]


def test_a_host_missing_its_key_is_named(tmp_path):
    inv = inventory(tmp_path, {"a": ["h1"], "b": ["h2"], "c": ["h3"]},
                    jetraft_server_config_dir=str(tmp_path / "etc"))
    tls = tmp_path / "etc" / "tls"
    tls.mkdir(parents=True)
    (tls / "server.crt").write_text("")
    (tls / "ca.crt").write_text("")
    fails_with(preflight(inv, "jetraft_preflight_tls"),
               f"has {tls}/server.crt, {tls}/ca.crt but not {tls}/server.key: run "
               "ansible-playbook playbooks/rotate_certs.yml")


def test_a_ca_key_without_its_certificate_is_named(tmp_path):
    inv = inventory(tmp_path, ZONES_221, jetraft_server_config_dir=str(tmp_path / "etc"))
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.key").write_text("")
    fails_with(preflight(inv, "jetraft_preflight_tls"),
               f"{tmp_path}/pki holds ca.key but not ca.crt: restore it from a backup")
