"""Every host runs jetraft on its own Debian's Python (3.11 on Debian 12, 3.13 on Debian 13),
installed from the one wheelhouse the controller built; in the lab, each host runs the Debian
release the lab gave it (the default lab is mixed: jr-c1 on Debian 13)."""

from __future__ import annotations

import pytest

from conftest import INVENTORY
from lab import topology

testinfra_hosts = [f"ansible://jetraft?ansible_inventory={INVENTORY}"]

VENV = "/opt/jetraft"


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


def _python_version(host, python: str) -> str:
    cmd = host.run(f"{python} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'")
    assert cmd.rc == 0, cmd.stderr
    return cmd.stdout.strip()


def test_the_host_runs_the_debian_release_the_lab_gave_it(host, hostvars):
    suite = hostvars.get("jetraft_lab_suite")
    if suite is None:
        pytest.skip("not a lab host (no jetraft_lab_suite)")
    assert host.system_info.distribution == "debian"
    assert host.system_info.codename == suite
    assert host.file("/etc/debian_version").content_string.split(".")[0] == topology.DEBIAN_SUITES[suite]


def test_the_virtualenv_is_made_with_the_hosts_python(host, hostvars):
    system = _python_version(host, "/usr/bin/python3")
    assert _python_version(host, f"{VENV}/bin/python") == system
    suite = hostvars.get("jetraft_lab_suite")
    if suite is not None:
        assert system == topology.DEBIAN_PYTHON[suite]


def test_the_running_server_is_that_python_with_the_wheelhouses_jetraft(host):
    pid = host.check_output("systemctl show --property MainPID --value jetraft")
    assert pid.isdigit() and int(pid) > 0, pid
    exe = host.check_output(f"readlink /proc/{pid}/exe")
    system = _python_version(host, "/usr/bin/python3")
    assert exe == f"/usr/bin/python{system}"
    installed = host.check_output(f"{VENV}/bin/python -m pip list --format freeze --no-index")
    assert "jetraft==" in installed
    assert host.file(f"{VENV}/lib/python{system}/site-packages/jetraft").is_directory
