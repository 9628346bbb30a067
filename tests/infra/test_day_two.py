"""The day-two playbooks drilled on the lab while a client publishes (destructive, and they
change the lab: marked ``day_two`` and run after the zone-loss drills, in this order):
a host power-cut and replaced by a new machine with an empty disk, the cluster scaled from
five servers to seven and back to five (the spares retired), and a rolling upgrade of the
five to a new wheel and back to the lab's own (last: the other playbooks install the lab's
wheelhouse, and the lab ends on it, as site.yml deploys it). Each asserts what an operator
needs: the playbook passes (its verify step: every server a current voter, every stream
whole), every replica is current afterwards and nothing acknowledged is lost. The longest
time between acknowledgements is reported in drills.json (a figure, not an assert)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest

from conftest import INVENTORY
from lab import topology
from lab.day_two import DayTwo, run_playbook
from lab.nspawn import NspawnLab
from test_drills import assert_ledger

sys.path.insert(0, str(topology.ROOT / "tools"))
import deb  # noqa: E402  (tools/deb.py: make deb)

ROOT = topology.ROOT

pytestmark = [pytest.mark.day_two, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def lab() -> NspawnLab:
    lab = NspawnLab()
    if not lab.running_suite():
        pytest.skip("the day-two drills make new machines: they need the nspawn lab (python -m lab up)")
    return NspawnLab(suite=lab.running_suite())


@pytest.fixture(scope="module")
def results(run_dir):
    collected = []
    yield collected
    if collected:
        DayTwo(INVENTORY, run_dir).record(collected)


def _run(run_dir, lab, results, method, *args):
    day_two = DayTwo(INVENTORY, run_dir, machines=lab)
    result = asyncio.run(getattr(day_two, method)(*args))
    results.append(result)
    return result


def _versions(run_dir):
    import jetraft
    return f"{jetraft.__version__}+lab.{run_dir.name.replace('-', '.')}"


def test_a_host_power_cut_and_replaced_with_an_empty_disk_rejoins_and_loses_nothing(run_dir, lab, results):
    # zone c's only server: its replicas can only come back on the new machine
    victim = topology.zone_hosts("c")[0].name
    r = _run(run_dir, lab, results, "replace_host", victim)
    assert_ledger(r)
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"


def test_scaling_five_servers_to_seven_while_publishing_loses_nothing(run_dir, lab, results):
    r = _run(run_dir, lab, results, "scale", [h.name for h in topology.SPARE_HOSTS])
    assert_ledger(r)
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"


@pytest.mark.parametrize("host", topology.PACKAGE_HOSTS)
def test_a_spare_installed_from_the_debian_package_runs_it_and_a_rerun_changes_nothing(run_dir, lab, host):
    """The spare the role installed from `make deb`'s package (jetraft_server_install: deb)
    during the scale-out above: dpkg has this tree's package installed, the server runs from
    the package's virtualenv under the role's unit, the policy-rc.d that held the package's
    first start back is gone, the operator's `jetraft` lists the streams, and deploy.yml run
    again on the host changes nothing."""
    import jetraft

    def ssh(command: str) -> str:
        done = subprocess.run(lab.ssh_argv(host, command), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout.strip()

    status = ssh("dpkg-query --show --showformat='${db:Status-Status} ${Version}' jetraft")
    assert status == f"installed {deb.debian_version(jetraft.__version__)}"
    assert ssh("readlink -f /opt/jetraft/bin") == f"/opt/jetraft/venvs/{jetraft.__version__}/bin"
    assert ssh("systemctl is-active jetraft") == "active"
    assert ssh("systemctl show --property FragmentPath --value jetraft") == "/etc/systemd/system/jetraft.service"
    assert ssh("test -e /usr/sbin/policy-rc.d || echo gone") == "gone"
    assert ssh("sh -lc 'jetraft stream ls --names'")        # the drills' streams, at least one

    def deploy(name: str) -> tuple[str, str]:
        """deploy.yml on the host alone: (its log, its PLAY RECAP line)."""
        log = run_dir / f"deb-{name}-{host}.ansible.log"
        asyncio.run(run_playbook("playbooks/deploy.yml", INVENTORY,
                                 ["--limit", host, "-e", f"jetraft_server_deb_dir={run_dir / 'deb'}"], log))
        text = log.read_text()
        recap = re.search(rf"^{re.escape(host)}\s*:.*$", text.split("PLAY RECAP")[-1], re.M)
        assert recap, text[-3000:]
        return text, recap.group(0) + " "

    text, recap = deploy("rerun")
    assert " changed=0 " in recap, text[-3000:]
    # the host's Python gone from under the package's virtualenv, as after an upgrade of
    # Debian: the role has the package's postinst make it again, and the server restarted
    venv = f"/opt/jetraft/venvs/{jetraft.__version__}"
    ssh(f"rm -f {venv}/bin/python {venv}/bin/python3 {venv}/bin/python3.*; "
        f"! /opt/jetraft/bin/jetraft-server --version")
    text, recap = deploy("python-gone")
    assert re.search(r"The package's virtualenv is made again for the host's Python\] \**\n"
                     rf"changed: \[{re.escape(host)}\]", text), text[-4000:]
    assert jetraft.__version__ in ssh("/opt/jetraft/bin/jetraft-server --version")
    assert ssh("systemctl is-active jetraft") == "active"
    text, recap = deploy("again")
    assert " changed=0 " in recap, text[-3000:]


def test_scaling_seven_servers_back_to_five_while_publishing_loses_nothing(run_dir, lab, results):
    r = _run(run_dir, lab, results, "scale_in", [h.name for h in topology.SPARE_HOSTS])
    assert_ledger(r)
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"


def test_a_rolling_upgrade_while_publishing_loses_nothing(run_dir, lab, results):
    import jetraft
    r = _run(run_dir, lab, results, "upgrade", _versions(run_dir), jetraft.__version__)
    assert_ledger(r)
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"


def test_the_debian_package_on_a_new_host_runs_under_systemd_and_its_removal_keeps_the_store(
        lab, tmp_path):
    """`make deb`'s package on a new machine (a spare booted empty, out of the cluster):
    dpkg -i gives a server running under systemd with the package's single-server
    configuration (JetStream answers on 127.0.0.1), and `apt-get remove` stops it and leaves
    the store and the configuration; the machine is thrown away after (the lab ends with
    its five servers)."""
    spare = topology.SPARE_HOSTS[0].name
    in_lab = {s.host.name for s in lab.status()}
    retired = [h.name for h in topology.SPARE_HOSTS if h.name in in_lab]
    if retired:
        lab.remove(retired)         # the scale drills' spares, out of the cluster already
    package = deb.build(ROOT / "build" / "wheelhouse", tmp_path)
    lab.add([spare])
    try:
        def ssh(command: str, stdin=None) -> subprocess.CompletedProcess:
            return subprocess.run(lab.ssh_argv(spare, command), stdin=stdin, capture_output=True,
                                  timeout=600)

        with package.open("rb") as data:
            copied = ssh(f"cat > /root/{package.name}", stdin=data)
        assert copied.returncode == 0, copied.stderr
        installed = ssh(f"dpkg -i /root/{package.name}")
        assert installed.returncode == 0, (installed.stdout[-2000:] + installed.stderr[-2000:]).decode()
        # the server answers a JetStream request once systemd started it (polled, 60 s)
        answered = ssh("for i in $(seq 60); do systemctl is-active --quiet jetraft && "
                       "jetraft --server nats://127.0.0.1:4222 account info >/dev/null 2>&1 && exit 0; "
                       "sleep 1; done; systemctl status jetraft --no-pager; exit 1")
        assert answered.returncode == 0, answered.stdout[-3000:].decode()
        stored = ssh("jetraft --server nats://127.0.0.1:4222 kv add DEB >/dev/null && "
                     "jetraft --server nats://127.0.0.1:4222 kv put DEB k kept")
        assert stored.returncode == 0, (stored.stdout[-2000:] + stored.stderr[-2000:]).decode()
        removed = ssh("apt-get remove -y jetraft")
        assert removed.returncode == 0, (removed.stdout[-2000:] + removed.stderr[-2000:]).decode()
        state = ssh("systemctl is-active jetraft")
        assert state.stdout.decode().strip() != "active", "the server still runs after apt-get remove"
        kept = ssh("ls /var/lib/jetraft/jetstream/*/streams/ && cat /etc/jetraft/jetraft.conf >/dev/null")
        assert kept.returncode == 0 and b"KV_DEB" in kept.stdout, (kept.stdout + kept.stderr).decode()
    finally:
        lab.remove([spare])
