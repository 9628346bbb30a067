"""Write inventories/lab/ for the Vagrant lab (run by lab/Vagrantfile after ``vagrant up``).

The same inventory the nspawn lab writes: the five hosts at their private-network
addresses in zone groups, each host's Vagrant SSH key (user vagrant, with become), the
data disk, and the secrets the provisioner used (.vagrant/jetraft-secrets.yml).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from lab import topology  # noqa: E402  (after the path is set for a run from lab/)


def write(directory: Path = topology.INVENTORY_DIR, vagrant_dir: Path = HERE / ".vagrant") -> Path:
    """Write the inventory into ``directory`` from ``vagrant_dir`` (keys, secrets)."""
    provider = os.environ.get("VAGRANT_DEFAULT_PROVIDER", "libvirt")
    disk = os.environ.get("JETRAFT_VAGRANT_DISK", "/dev/vdb" if provider == "libvirt" else "/dev/sdb")
    keys = {h.name: vagrant_dir / "machines" / h.name / provider / "private_key"
            for h in topology.HOSTS}
    secrets = yaml.safe_load((vagrant_dir / "jetraft-secrets.yml").read_text())
    return topology.write_inventory(directory=directory, 
        data_disks={h.name: disk for h in topology.HOSTS}, ssh_key=None, known_hosts=None,
        ssh_user="vagrant", lab_secrets=secrets,
        host_vars={name: {"ansible_ssh_private_key_file": str(key)} for name, key in keys.items()})


def main() -> None:
    print(f"inventory written to {write()}")


if __name__ == "__main__":
    main()
