"""Both lab providers write the same inventory: five hosts in zone groups a, a, b, b, c at
the same addresses, each with its data disk, the zone variable and the lab's secrets, as
Ansible itself reads them (ansible-inventory --list)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from lab import topology, vagrant_inventory

INVENTORY_TOOL = Path(sys.executable).with_name("ansible-inventory")


def listed(directory: Path) -> dict:
    out = subprocess.run([str(INVENTORY_TOOL), "-i", str(directory / "hosts.yml"), "--list"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def shape(data: dict) -> dict:
    hostvars = data["_meta"]["hostvars"]
    return {
        "groups": {g: sorted(data[g].get("hosts", [])) for g in ("zone_a", "zone_b", "zone_c")},
        "children": sorted(data["jetraft"]["children"]),
        "hosts": {h: (v["ansible_host"], v["jetraft_zone"], bool(v["jetraft_storage_device"]),
                      bool(v["jetraft_server_sys_password"]), bool(v["jetraft_server_accounts"]),
                      v.get("jetraft_lab_suite"))
                  for h, v in hostvars.items()},
    }


def test_nspawn_and_vagrant_write_the_same_inventory(tmp_path):
    nspawn_dir, vagrant_dir = tmp_path / "nspawn", tmp_path / "vagrant"
    # as the nspawn lab writes it (NspawnLab.up): each host's Debian suite in a mixed lab
    topology.write_inventory(data_disks={h.name: f"/dev/loop{i}" for i, h in enumerate(topology.HOSTS)},
                             ssh_key=tmp_path / "key", known_hosts=tmp_path / "known_hosts",
                             directory=nspawn_dir,
                             host_vars=topology.suite_host_vars("mixed"))
    dot_vagrant = tmp_path / ".vagrant"
    dot_vagrant.mkdir()
    (dot_vagrant / "jetraft-secrets.yml").write_text(yaml.safe_dump({
        "jetraft_server_sys_password": "s", "jetraft_server_route_password": "r",
        "jetraft_server_accounts": {"APP": {"jetstream": True, "users": [{"user": "app", "password": "p"}]}}}))
    vagrant_inventory.write(directory=vagrant_dir, vagrant_dir=dot_vagrant)
    nspawn, vagrant = listed(nspawn_dir), listed(vagrant_dir)
    assert shape(nspawn) == shape(vagrant)
    assert shape(nspawn)["groups"] == {"zone_a": ["jr-a1", "jr-a2"], "zone_b": ["jr-b1", "jr-b2"],
                                       "zone_c": ["jr-c1"]}
    assert {h: v[-1] for h, v in shape(nspawn)["hosts"].items()} == {
        "jr-a1": "bookworm", "jr-a2": "bookworm", "jr-b1": "bookworm", "jr-b2": "bookworm",
        "jr-c1": "trixie"}
    for data, directory in ((nspawn, nspawn_dir), (vagrant, vagrant_dir)):
        a1 = data["_meta"]["hostvars"]["jr-a1"]
        assert a1["ansible_user"] == "root"     # the drills log in as root, host keys pinned
        # TLS by default; the CA and certificates site.yml makes beside the inventory
        assert a1.get("jetraft_server_tls", True) is True
        assert a1["jetraft_certs_dir"] == str(directory.resolve() / "pki")
        assert "StrictHostKeyChecking=yes" in a1["ansible_ssh_common_args"]


def test_retired_spares_leave_their_zone_groups_for_jetraft_retired(tmp_path):
    """Seven hosts with the spares retired (NspawnLab.retire, before playbooks/scale_down.yml):
    the zone groups hold the five that stay; ``jetraft_retired`` holds the spares, reachable
    as the others (address, SSH settings, zone) but no server of the group ``jetraft``."""
    disks = {h.name: f"/dev/loop{i}" for i, h in enumerate(topology.ALL_HOSTS)}
    topology.write_inventory(data_disks=disks, ssh_key=tmp_path / "key",
                             known_hosts=tmp_path / "known_hosts", directory=tmp_path,
                             retired=("jr-a3", "jr-c2"))
    data = listed(tmp_path)
    assert {g: sorted(data[g]["hosts"]) for g in ("zone_a", "zone_b", "zone_c")} == {
        "zone_a": ["jr-a1", "jr-a2"], "zone_b": ["jr-b1", "jr-b2"], "zone_c": ["jr-c1"]}
    assert sorted(data["jetraft_retired"]["hosts"]) == ["jr-a3", "jr-c2"]
    a3, a1 = data["_meta"]["hostvars"]["jr-a3"], data["_meta"]["hostvars"]["jr-a1"]
    assert (a3["ansible_host"], a3["jetraft_zone"]) == ("10.213.0.16", "a")
    for key in ("ansible_user", "ansible_ssh_private_key_file", "ansible_ssh_common_args",
                "ansible_python_interpreter"):
        assert a3[key] == a1[key], key
    assert "jetraft_server_sys_password" not in a3       # the cluster's secrets stay with its servers


def test_the_spare_of_the_package_installs_from_it_and_the_others_from_the_wheelhouse(tmp_path):
    """Seven hosts as a scale-out leaves them: jr-c2 (topology.PACKAGE_HOSTS) has
    ``jetraft_server_install: deb``; every other host keeps the role's default (the wheelhouse)."""
    disks = {h.name: f"/dev/loop{i}" for i, h in enumerate(topology.ALL_HOSTS)}
    topology.write_inventory(data_disks=disks, ssh_key=tmp_path / "key",
                             known_hosts=tmp_path / "known_hosts", directory=tmp_path,
                             host_vars=topology.suite_host_vars("mixed"))
    hostvars = listed(tmp_path)["_meta"]["hostvars"]
    assert {h: v.get("jetraft_server_install") for h, v in hostvars.items()} == {
        **{h.name: None for h in topology.ALL_HOSTS}, "jr-c2": "deb"}
