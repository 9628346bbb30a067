"""Rolling restarts (playbooks/rolling_restart.yml, the same tasks as the role's handler)
against the deployed cluster: destructive, so marked ``drill``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import INVENTORY, ROOT

pytestmark = [pytest.mark.drill, pytest.mark.timeout(600)]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}


def playbook(name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY),
                           f"playbooks/{name}.yml", *extra], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=540)


def service(host: str, *args: str) -> str:
    result = subprocess.run([str(BIN / "ansible"), "-i", str(INVENTORY), host, "-m",
                             "ansible.builtin.command", "-a", " ".join(args)], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.split(">>", 1)[-1].strip()


def started_at(host: str) -> str:
    return service(host, "systemctl show -p ActiveEnterTimestampMonotonic --value jetraft.service")


def hosts() -> list[str]:
    out = subprocess.run([str(BIN / "ansible"), "-i", str(INVENTORY), "jetraft", "--list-hosts"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines()[1:] if line.strip()]


def test_a_rolling_restart_refuses_to_start_while_a_server_is_down():
    names = hosts()
    down, first = names[-1], names[0]
    before = started_at(first)
    service(down, "systemctl stop jetraft.service")
    try:
        result = playbook("rolling_restart", "-e", "jetraft_server_verify_retries=3",
                          "-e", "jetraft_server_verify_delay=1")
        out = " ".join((result.stdout + result.stderr).split())
        assert result.returncode != 0
        assert f"Before the restart or reload, every other server answers /healthz: {first}" in out
        assert f"-> {down}" in out and "FAILED" in out
        assert started_at(first) == before, "a server was restarted while another was down"
    finally:
        service(down, "systemctl start jetraft.service")
    healthy = playbook("verify")
    assert healthy.returncode == 0, healthy.stdout[-3000:]


def test_a_rolling_restart_restarts_every_server_one_at_a_time_and_the_cluster_stays_healthy():
    names = hosts()
    before = {h: int(started_at(h)) for h in names}
    result = playbook("rolling_restart")
    assert result.returncode == 0, result.stdout[-4000:]
    after = {h: int(started_at(h)) for h in names}
    assert all(after[h] > before[h] for h in names), (before, after)
    order = sorted(names, key=after.get)
    assert order == names, f"restarted in the order {order}, not one after another as listed"
    healthy = playbook("verify")
    assert healthy.returncode == 0, healthy.stdout[-3000:]
