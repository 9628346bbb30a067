"""Write inventories/lab/ for the Vagrant lab (lab/Vagrantfile runs it before site.yml).

The same inventory the nspawn lab writes (lab/topology.py's write_inventory): the five hosts
at their private-network addresses in zone groups, each with its data disk, reached as root
with the lab's one SSH key (the drills log in as root with the first host's key, as on the
nspawn lab), their host keys pinned (the Vagrantfile makes them and installs them), and the
secrets the Vagrantfile gave site.yml. From the repository's root:

    python -m lab.vagrant_inventory --data-disk /dev/vdb    # VirtualBox: /dev/sdb
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from lab import topology

HERE = Path(__file__).resolve().parent

#: What lab/Vagrantfile keeps in Vagrant's directory (.vagrant/ or VAGRANT_DOTFILE_PATH).
SSH_KEY = "jetraft-lab-key"
KNOWN_HOSTS = "jetraft-known-hosts"
SECRETS = "jetraft-secrets.yml"
SECRET_KEYS = ("jetraft_server_sys_password", "jetraft_server_route_password",
               "jetraft_server_accounts")


def write(directory: Path = topology.INVENTORY_DIR, vagrant_dir: Path = HERE / ".vagrant",
          data_disk: str = "/dev/vdb", suite: str = topology.DEFAULT_LAB_SUITE) -> Path:
    """Write the inventory into ``directory`` from the lab's key, known_hosts and secrets in
    ``vagrant_dir``; every host's data disk is ``data_disk``, its Debian suite that of a
    lab of ``suite`` (the Vagrantfile's boxes). Returns hosts.yml's path.
    Raises ValueError when the secrets file lacks one of SECRET_KEYS."""
    secrets_file = vagrant_dir / SECRETS
    lab_secrets = yaml.safe_load(secrets_file.read_text()) or {}
    missing = [k for k in SECRET_KEYS if k not in lab_secrets]
    if missing:
        raise ValueError(f"{secrets_file} has no {', '.join(missing)}")
    return topology.write_inventory(
        directory=directory, data_disks={h.name: data_disk for h in topology.HOSTS},
        ssh_key=(vagrant_dir / SSH_KEY).resolve(),
        known_hosts=(vagrant_dir / KNOWN_HOSTS).resolve(), ssh_user="root",
        lab_secrets={k: lab_secrets[k] for k in SECRET_KEYS},
        host_vars=topology.suite_host_vars(suite))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.vagrant_inventory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-disk", default="/dev/vdb",
                        help="every host's data disk as the guest names it (default: %(default)s)")
    parser.add_argument("--vagrant-dir", type=Path, default=HERE / ".vagrant",
                        help=f"where the Vagrantfile keeps {SSH_KEY}, {KNOWN_HOSTS} and {SECRETS} "
                             "(default: %(default)s)")
    parser.add_argument("--suite", choices=topology.LAB_SUITES, default=topology.DEFAULT_LAB_SUITE,
                        help="the hosts' Debian, as in the Vagrantfile (default: %(default)s)")
    parser.add_argument("--directory", type=Path, default=topology.INVENTORY_DIR,
                        help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        hosts_file = write(args.directory, args.vagrant_dir, args.data_disk, args.suite)
    except (OSError, ValueError) as e:
        parser.exit(1, f"lab.vagrant_inventory: {e}\n")
    print(f"inventory written to {hosts_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
