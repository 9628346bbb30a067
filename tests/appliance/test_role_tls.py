"""Five local servers (zones 2/2/1) started from the configuration and certificates the
role makes (playbooks/deploy.yml, tag jetraft_server_config: TLS on clients, routes and
monitoring), side by side for jetraft-server and the real nats-server: the cluster forms
over mutual-TLS routes, playbooks/verify.yml passes over https with the cluster's CA, and
what a client sees of the TLS (the certificate's names, plain text refused, a route with no
certificate refused, no plain http) is the same on both."""

from __future__ import annotations

import grp
import json
import os
import pwd
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from playbook import flat, run_playbook
from servers import KINDS, binary, free_port

from lab import tls_probe

pytestmark = pytest.mark.timeout(600)
HOSTS = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c"}


def write_inventory(tmp: Path, kind: str, ports: dict[str, dict[str, int]], *,
                    path: Path | None = None, **extra) -> Path:
    """The five hosts' inventory (their files under ``tmp``), written to ``path`` (default
    ``tmp``/hosts.yml: the PKI is made in ``tmp``/pki)."""
    zones: dict[str, dict] = {}
    for k, (host, zone) in enumerate(HOSTS.items(), start=1):
        zones.setdefault(f"zone_{zone}", {"hosts": {}, "vars": {"jetraft_zone": zone}})
        zones[f"zone_{zone}"]["hosts"][host] = {
            "jetraft_server_address": f"127.0.0.{k}",
            "jetraft_server_config_dir": str(tmp / host),
            "jetraft_server_store_dir": str(tmp / host / "store"),
            "jetraft_server_client_port": ports[host]["client"],
            "jetraft_server_cluster_port": ports[host]["cluster"],
            "jetraft_server_http_port": ports[host]["http"],
        }
    group_vars = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "jetraft_server_group": grp.getgrgid(os.getgid()).gr_name,
        "jetraft_server_user": pwd.getpwuid(os.getuid()).pw_name,
        "jetraft_server_binary": str(binary(kind)),
        "jetraft_server_python": sys.executable,
        "jetraft_server_sys_password": "sys-secret",
        "jetraft_server_route_password": "route-secret",
        "jetraft_server_accounts": {"APP": {"jetstream": True,
                                            "users": [{"user": "app", "password": "app-secret"}]}},
        **extra,
    }
    path = path or tmp / "hosts.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"jetraft": {"vars": group_vars, "children": zones}}))
    return path


class TlsCluster:
    """The five servers, each started from its templated file; stopped by PID."""

    def __init__(self, kind: str, tmp: Path):
        self.kind, self.tmp = kind, tmp
        self.procs: dict[str, subprocess.Popen] = {}
        self.new_ports()

    def new_ports(self) -> None:
        self.ports = {h: {"client": free_port(), "cluster": free_port(), "http": free_port()}
                      for h in HOSTS}
        self.inventory = write_inventory(self.tmp, self.kind, self.ports)

    def listening(self, timeout: float = 30.0) -> bool:
        """Every server accepts on its client port; False as soon as one has exited (its
        output says why)."""
        deadline = time.monotonic() + timeout
        waiting = set(HOSTS)
        while waiting and time.monotonic() < deadline:
            for host in sorted(waiting):
                if self.procs[host].poll() is not None:
                    return False
                try:
                    socket.create_connection(("127.0.0.1", self.ports[host]["client"]), timeout=0.5).close()
                    waiting.discard(host)
                except OSError:
                    pass
            time.sleep(0.1)
        return not waiting

    def configure(self) -> subprocess.CompletedProcess:
        return run_playbook("deploy", self.inventory, "jetraft_server_config")

    def start(self) -> None:
        for host in HOSTS:
            (self.tmp / host / "store").mkdir(parents=True, exist_ok=True)
            out = open(self.tmp / host / "output.log", "ab")
            self.procs[host] = subprocess.Popen(
                [str(binary(self.kind)), "-c", str(self.tmp / host / "jetraft.conf")],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.tmp / host)

    def stop(self, host: str | None = None) -> None:
        for name, proc in list(self.procs.items()):
            if host is not None and name != host:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            del self.procs[name]

    def output(self) -> str:
        return "\n".join(f"--- {h}\n" + (self.tmp / h / "output.log").read_text(errors="replace")[-3000:]
                         for h in HOSTS if (self.tmp / h / "output.log").exists())

    def files(self, host: str) -> tuple[str, tuple[str, str]]:
        tls = self.tmp / host / "tls"
        return str(tls / "ca.crt"), (str(tls / "server.crt"), str(tls / "server.key"))


@pytest.fixture(scope="module", params=KINDS)
def cluster(request, tmp_path_factory):
    c = TlsCluster(request.param, tmp_path_factory.mktemp(f"tls-{request.param}"))
    for attempt in range(3):               # a port taken meanwhile: new ports, once more
        configured = c.configure()
        assert configured.returncode == 0, configured.stdout[-4000:] + configured.stderr[-2000:]
        c.start()
        if c.listening():
            break
        output = c.output()
        c.stop()
        assert "address already in use" in output.lower() and attempt < 2, output
        c.new_ports()
    try:
        yield c
    finally:
        c.stop()


def test_verify_passes_over_https_with_the_cluster_ca(cluster):
    result = run_playbook("verify", cluster.inventory)
    assert result.returncode == 0, result.stdout[-4000:] + cluster.output()
    assert "failed=0" in result.stdout


def test_verify_refuses_a_server_the_ca_does_not_vouch_for(cluster, tmp_path):
    """The health checks really verify: with another CA's bundle named, they fail."""
    other = tmp_path / "other"
    made = run_playbook("deploy", write_inventory(other, cluster.kind, cluster.ports,
                                                  jetraft_server_manage_service=False),
                        "jetraft_certs")
    assert made.returncode == 0, made.stdout[-3000:]
    inv = write_inventory(cluster.tmp, cluster.kind, cluster.ports, path=tmp_path / "hosts.yml",
                          jetraft_server_tls_ca_file=str(other / "pki" / "ca-bundle.crt"),
                          jetraft_server_verify_retries=1, jetraft_server_verify_delay=1)
    result = run_playbook("verify", inv)
    out = flat(result)
    assert result.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in out or "certificate verify failed" in out, out[-3000:]


def test_clients_get_tls_with_the_hosts_names_and_plain_text_is_refused(cluster):
    for k, host in enumerate(HOSTS, start=1):
        ca, _ = cluster.files(host)
        port = cluster.ports[host]["client"]
        presented = _until(lambda: tls_probe.nats_handshake("127.0.0.1", port, ca))
        assert host in presented.dns_names and f"127.0.0.{k}" in presented.ip_addresses
        # the name routes and clients may use, verified for that name
        tls_probe.nats_handshake(f"127.0.0.{k}", port, ca, server_name=host)
        tls_probe.plaintext_client_refused("127.0.0.1", port)


def test_routes_need_a_certificate_from_the_cluster_ca(cluster):
    for host in HOSTS:
        ca, cert = cluster.files(host)
        port = cluster.ports[host]["cluster"]
        # with the host's own certificate (what a peer shows) the route's TLS is accepted
        # routes start with the handshake (no INFO before it), on both servers
        presented = tls_probe.nats_handshake("127.0.0.1", port, ca, cert=cert, info_first=False)
        assert host in presented.dns_names
        tls_probe.route_refused_without_certificate("127.0.0.1", port, ca)


def test_monitoring_answers_https_only(cluster):
    for host in HOSTS:
        ca, _ = cluster.files(host)
        port = cluster.ports[host]["http"]
        status, body = tls_probe.https_get("127.0.0.1", port, "/healthz", ca)
        assert (status, json.loads(body)) == (200, {"status": "ok"}), body
        tls_probe.plain_http_refused("127.0.0.1", port)


def _until(probe, timeout: float = 30.0):
    """``probe()``'s value once it stops raising (the server may still be starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return probe()
        except (OSError, tls_probe.ProbeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
