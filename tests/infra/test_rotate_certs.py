"""playbooks/rotate_certs.yml against the deployed cluster with a new CA (it reloads every
server, so marked ``drill``): every server ends up presenting a new certificate from the
new CA, the old CA is trusted nowhere, the cluster stays healthy throughout (the playbook's
own checks before each reload, and verify.yml at its end), and site.yml's roles then find
nothing to change."""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import INVENTORY, ROOT

pytestmark = [pytest.mark.drill, pytest.mark.timeout(900)]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}


def playbook(name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY),
                           f"playbooks/{name}.yml", *extra], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=840)


def servers() -> dict[str, str]:
    data = yaml.safe_load(INVENTORY.read_text())
    return {name: hv["ansible_host"] for zone in data["jetraft"]["children"].values()
            for name, hv in zone["hosts"].items()}


def pki() -> Path:
    lab = INVENTORY.parent / "group_vars" / "jetraft" / "lab.yml"
    certs_dir = (yaml.safe_load(lab.read_text()) or {}).get("jetraft_certs_dir") if lab.exists() else None
    return Path(certs_dir or INVENTORY.parent / "pki")


def served(address: str) -> str:
    """The SHA-256 of the certificate the monitoring port presents (no verification)."""
    pem = ssl.get_server_certificate((address, 8222), timeout=10)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def verifies(address: str, ca_file: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with socket.create_connection((address, 8222), timeout=10) as sock:
            with ctx.wrap_socket(sock, server_hostname=address):
                return True
    except ssl.SSLCertVerificationError:
        return False


def test_a_new_ca_is_rolled_in_and_the_old_one_out_with_the_cluster_healthy(tmp_path):
    hosts = servers()
    old_ca = tmp_path / "old-ca.crt"
    old_ca.write_bytes((pki() / "ca.crt").read_bytes())
    before = {h: served(a) for h, a in hosts.items()}
    assert all(verifies(a, old_ca) for a in hosts.values())

    result = playbook("rotate_certs", "-e", "jetraft_certs_new_ca=true")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    out = result.stdout
    # three rolls, each reloading every server after the checks of the others
    assert out.count("Reload (SIGHUP): ") >= 3 * len(hosts), out[-4000:]

    after = {h: served(a) for h, a in hosts.items()}
    assert all(after[h] != before[h] for h in hosts), (before, after)
    bundle = pki() / "ca-bundle.crt"
    assert bundle.read_bytes() == (pki() / "ca.crt").read_bytes()     # the new CA alone
    assert (pki() / "ca.crt").read_bytes() != old_ca.read_bytes()
    assert not (pki() / "ca-prev.crt").exists() and not (pki() / "ca-next.crt").exists()
    for address in hosts.values():
        assert verifies(address, bundle)
        assert not verifies(address, old_ca)

    again = playbook("deploy")
    assert again.returncode == 0, again.stdout[-4000:]
    recap = again.stdout.split("PLAY RECAP")[-1]
    assert recap.count("changed=0") == len(hosts), recap
    checked = playbook("preflight")
    assert checked.returncode == 0, checked.stdout[-3000:]
