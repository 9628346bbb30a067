"""The lab's five hosts in three zones (and two spares for growing it to seven), and the
Ansible inventory every provider writes.

Both providers (systemd-nspawn here, Vagrant with a hypervisor) build the same hosts with
the same names, zones and addresses, and write the same inventory, so that site.yml, the
testinfra suite and the drills cannot tell them apart.
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
INVENTORY_DIR = ROOT / "inventories" / "lab"
ARTIFACTS_DIR = ROOT / "lab" / "artifacts"

#: The lab's private network: the controller is .1 on the lab's bridge, hosts .11 upwards.
NETWORK = ipaddress.ip_network("10.213.0.0/24")
CONTROLLER_ADDRESS = ipaddress.ip_address("10.213.0.1")


@dataclass(frozen=True)
class LabHost:
    """One lab host: its name (also its server_name), its zone (a, b or c) and address."""

    name: str
    zone: str
    address: str


#: Zones a, a, b, b, c: losing any one zone leaves three of five servers (a quorum).
HOSTS: tuple[LabHost, ...] = (
    LabHost("jr-a1", "a", "10.213.0.11"),
    LabHost("jr-a2", "a", "10.213.0.12"),
    LabHost("jr-b1", "b", "10.213.0.13"),
    LabHost("jr-b2", "b", "10.213.0.14"),
    LabHost("jr-c1", "c", "10.213.0.15"),
)
ZONES: tuple[str, ...] = ("a", "b", "c")
#: Hosts a lab can grow by (``python -m lab add``; playbooks/scale.yml): with them the
#: cluster is seven servers in zones a, a, a, b, b, c, c (3/2/2), and losing any zone still
#: leaves a quorum (four of seven).
SPARE_HOSTS: tuple[LabHost, ...] = (
    LabHost("jr-a3", "a", "10.213.0.16"),
    LabHost("jr-c2", "c", "10.213.0.17"),
)
ALL_HOSTS: tuple[LabHost, ...] = HOSTS + SPARE_HOSTS
#: The hosts the jetraft_server role installs from the Debian package (``make deb``;
#: ``jetraft_server_install: deb``) rather than the wheelhouse: a spare, so that every scale-out
#: joins a server of the package to servers of the wheelhouse.
PACKAGE_HOSTS: tuple[str, ...] = ("jr-c2",)

#: The Debian releases a lab host can run: suite name -> major version (preflight's
#: "Debian 12", "Debian 13"), and the Python 3 each ships (the hosts' virtualenvs use it).
DEBIAN_SUITES: dict[str, str] = {"bookworm": "12", "trixie": "13"}
DEBIAN_PYTHON: dict[str, str] = {"bookworm": "3.11", "trixie": "3.13"}
#: A lab is all bookworm, all trixie, or mixed: zone c's one host (jr-c1) on trixie and the
#: others on bookworm, so that every R3 stream (one replica per zone) has a replica on
#: Debian 13 and every zone-loss drill runs with both releases in the cluster.
LAB_SUITES: tuple[str, ...] = ("mixed", "bookworm", "trixie")
DEFAULT_LAB_SUITE = "mixed"
MIXED_TRIXIE_HOSTS: tuple[str, ...] = ("jr-c1",)


def host(name: str) -> LabHost:
    """The lab host (or spare) called ``name``; raises KeyError naming the known hosts."""
    for h in ALL_HOSTS:
        if h.name == name:
            return h
    raise KeyError(f"no lab host {name!r}; the hosts are {', '.join(h.name for h in ALL_HOSTS)}")


def zone_hosts(zone: str, hosts: tuple[LabHost, ...] | list[LabHost] = HOSTS) -> list[LabHost]:
    """The hosts of ``zone`` among ``hosts`` (the first five by default); raises KeyError for
    an unknown zone."""
    if zone not in ZONES:
        raise KeyError(f"no zone {zone!r}; the zones are {', '.join(ZONES)}")
    return [h for h in hosts if h.zone == zone]


def host_suites(lab_suite: str = DEFAULT_LAB_SUITE) -> dict[str, str]:
    """The Debian suite of each host (name -> suite) in a lab of ``lab_suite`` (one of
    LAB_SUITES); raises KeyError naming the lab suites."""
    if lab_suite == "mixed":
        return {h.name: "trixie" if h.name in MIXED_TRIXIE_HOSTS else "bookworm"
                for h in ALL_HOSTS}
    if lab_suite in DEBIAN_SUITES:
        return {h.name: lab_suite for h in ALL_HOSTS}
    raise KeyError(f"no lab suite {lab_suite!r}; the lab suites are {', '.join(LAB_SUITES)}")


def suite_host_vars(lab_suite: str = DEFAULT_LAB_SUITE) -> dict[str, dict[str, str]]:
    """The inventory's per-host variables in a lab of ``lab_suite``, as both providers write
    them: ``jetraft_lab_suite`` (the host's Debian suite; testinfra checks each host runs it)
    and, for PACKAGE_HOSTS, ``jetraft_server_install: deb``."""
    return {name: {"jetraft_lab_suite": suite,
                   **({"jetraft_server_install": "deb"} if name in PACKAGE_HOSTS else {})}
            for name, suite in host_suites(lab_suite).items()}


def write_inventory(*, data_disks: dict[str, str], ssh_key: Path | None, known_hosts: Path | None,
                    directory: Path = INVENTORY_DIR, ssh_user: str = "root",
                    host_vars: dict[str, dict] | None = None,
                    lab_secrets: dict | None = None, retired: tuple[str, ...] = ()) -> Path:
    """Write ``directory``/hosts.yml and group_vars for the lab and return hosts.yml's path.

    ``data_disks`` maps the name of each host in the lab (the first five, and any spares
    added) to its data disk's device path (``jetraft_storage_device``). The hosts named in
    ``retired`` are in the group ``jetraft_retired`` instead of their zone group (the
    servers playbooks/scale_down.yml takes out of the cluster).
    Hosts are reached as ``ssh_user`` (with become when not root) with ``ssh_key``;
    their host keys are pinned in ``known_hosts`` (None: not checked, for Vagrant boxes);
    ``host_vars`` adds variables per host. The cluster's PKI (CA, certificates; made by
    site.yml) is ``directory``/pki (``jetraft_certs_dir``). The lab's secrets (the `$SYS`
    and route passwords, and the APP account's user ``app`` that clients and drills use)
    are ``lab_secrets`` when given,
    else made once per inventory directory (kept across ``up``/``down``); lab-only.
    """
    directory.mkdir(parents=True, exist_ok=True)
    group_vars = directory / "group_vars"
    group_vars.mkdir(exist_ok=True)
    members = [h for h in ALL_HOSTS if h.name in data_disks and h.name not in retired]

    def entry(h: LabHost) -> dict:
        return {"ansible_host": h.address, "jetraft_storage_device": data_disks[h.name],
                **(host_vars or {}).get(h.name, {})}

    children = {f"zone_{zone}": {"hosts": {h.name: entry(h) for h in zone_hosts(zone, members)}}
                for zone in ZONES}
    group_vars_ssh = {"ansible_user": ssh_user}
    if ssh_key is not None:
        group_vars_ssh["ansible_ssh_private_key_file"] = str(ssh_key)
    group_vars_ssh["ansible_ssh_common_args"] = (
        f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes -o ConnectTimeout=5"
        " -o ServerAliveInterval=5 -o ServerAliveCountMax=3"
        if known_hosts is not None else
        "-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o ConnectTimeout=5")
    if ssh_user != "root":
        group_vars_ssh["ansible_become"] = True
    host_group_vars = {**group_vars_ssh, "ansible_python_interpreter": "/usr/bin/python3"}
    inventory = {"jetraft": {"children": children, "vars": host_group_vars}}
    if retired:
        inventory["jetraft_retired"] = {
            "hosts": {h.name: {**entry(h), "jetraft_zone": h.zone}
                      for h in ALL_HOSTS if h.name in retired and h.name in data_disks},
            "vars": host_group_vars}
    hosts_file = directory / "hosts.yml"
    hosts_file.write_text("# Written by the lab (python -m lab up); do not edit.\n"
                          + yaml.safe_dump(inventory, sort_keys=False))
    for zone in ZONES:
        (group_vars / f"zone_{zone}.yml").write_text(f"---\njetraft_zone: {zone}\n")
    jetraft_vars = group_vars / "jetraft"
    jetraft_vars.mkdir(exist_ok=True)
    (jetraft_vars / "lab.yml").write_text(
        "---\n# The lab's cluster (written by the lab on every up): TLS everywhere (the role's\n"
        "# default), with the CA and certificates site.yml makes in pki/ beside this inventory.\n"
        + yaml.safe_dump({"jetraft_cluster_name": "jetraft-lab",
                          "jetraft_certs_dir": str(directory.resolve() / "pki")}, sort_keys=False))
    secrets_file = jetraft_vars / "secrets.yml"
    if lab_secrets is not None:
        secrets_file.write_text("---\n# The lab's own secrets (not in git).\n"
                                + yaml.safe_dump(lab_secrets, sort_keys=False))
        secrets_file.chmod(0o600)
    elif not secrets_file.exists():
        secrets_file.write_text(
            "---\n# The lab's own secrets, made once per inventory directory (not in git).\n"
            + yaml.safe_dump({
                "jetraft_server_sys_password": secrets.token_urlsafe(18),
                "jetraft_server_route_password": secrets.token_urlsafe(18),
                "jetraft_server_accounts": {"APP": {"jetstream": True, "users": [
                    {"user": "app", "password": secrets.token_urlsafe(18)}]}},
            }, sort_keys=False))
        secrets_file.chmod(0o600)
    return hosts_file
