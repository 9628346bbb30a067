"""playbooks/deploy.yml, tag jetraft_server_unit: the systemd unit the role writes, checked
offline by systemd itself (``systemd-analyze verify`` and ``security --offline``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook import run_playbook

JETRAFT_SERVER = Path(sys.executable).with_name("jetraft-server")
pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                reason="systemd-analyze is not installed")


@pytest.fixture(scope="module")
def unit(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("unit")
    path = tmp / "jetraft.service"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "jetraft_zone": "b", "jetraft_server_binary": str(JETRAFT_SERVER),
            "jetraft_server_unit_path": str(path), "jetraft_server_lame_duck_duration": 45,
            "jetraft_server_store_dir": "/srv/jetraft",
            # required by the role's argument specification, whatever the tags
            "jetraft_server_sys_password": "unused", "jetraft_server_route_password": "unused"}
    inv = tmp / "hosts.yml"
    inv.write_text(yaml.safe_dump({"jetraft": {"hosts": {"n3": host}}}))
    result = run_playbook("deploy", inv, "jetraft_server_unit")
    assert result.returncode == 0, result.stdout[-3000:]
    return path


def setting(text: str, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", text, re.M)


def test_the_unit_runs_the_server_as_its_user_with_lame_duck_on_stop(unit):
    text = unit.read_text()
    assert setting(text, "User") == ["jetraft"]
    assert setting(text, "ExecStart")[0].startswith(f"{JETRAFT_SERVER} -c /etc/jetraft/jetraft.conf")
    assert setting(text, "KillSignal") == ["SIGUSR2"]
    assert int(setting(text, "TimeoutStopSec")[0]) > 45
    assert setting(text, "Restart") == ["on-failure"]
    assert setting(text, "ReadWritePaths") == ["/srv/jetraft"]
    assert setting(text, "RequiresMountsFor") == ["/srv/jetraft"]
    assert setting(text, "ProtectSystem") == ["strict"]
    assert setting(text, "NoNewPrivileges") == ["yes"]
    assert int(setting(text, "LimitNOFILE")[0]) >= 65536


def test_systemd_accepts_the_unit_and_rates_it_hardened(unit):
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, timeout=60)
    assert verify.returncode == 0, verify.stderr
    security = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                               str(unit)], capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for jetraft\.service: ([0-9.]+)", security.stdout)
    assert found, security.stdout[-2000:] + security.stderr
    assert float(found.group(1)) <= 2.0, security.stdout[-3000:]
