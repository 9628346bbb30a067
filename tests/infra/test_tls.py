"""TLS as a client, a would-be route and a monitoring user meet it on every host, probed
from the controller at the host's address with the cluster's CA bundle (made by site.yml
in the inventory's jetraft_certs_dir), and the files on the host."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from conftest import INVENTORY
from lab import tls_probe

testinfra_hosts = [f"ansible://jetraft?ansible_inventory={INVENTORY}"]

TLS = "/etc/jetraft/tls"


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def pki(hostvars) -> Path:
    path = Path(hostvars.get("jetraft_certs_dir") or INVENTORY.parent / "pki")
    assert (path / "ca-bundle.crt").is_file(), f"no CA bundle in {path}: site.yml makes it"
    return path


def _address(hostvars) -> str:
    return hostvars.get("jetraft_server_address") or hostvars["ansible_host"]


def test_a_client_handshake_with_the_ca_succeeds_and_names_the_host(hostvars, pki):
    address = _address(hostvars)
    presented = tls_probe.nats_handshake(address, 4222, str(pki / "ca-bundle.crt"))
    assert hostvars["inventory_hostname"] in presented.dns_names
    assert address in presented.ip_addresses
    # a client that dials the host by its name verifies that name too
    tls_probe.nats_handshake(address, 4222, str(pki / "ca-bundle.crt"),
                             server_name=hostvars["inventory_hostname"])


def test_a_plain_text_client_is_refused(hostvars):
    how = tls_probe.plaintext_client_refused(_address(hostvars), 4222)
    assert how


def test_a_route_without_a_client_certificate_is_refused(hostvars, pki):
    address, name = _address(hostvars), hostvars["inventory_hostname"]
    ca = str(pki / "ca-bundle.crt")
    # what a peer does: its certificate from the cluster's CA is accepted
    peer = tls_probe.nats_handshake(address, 6222, ca, info_first=False,
                                    cert=(str(pki / "hosts" / f"{name}.crt"),
                                          str(pki / "hosts" / f"{name}.key")))
    assert name in peer.dns_names
    assert tls_probe.route_refused_without_certificate(address, 6222, ca)


def test_monitoring_answers_over_https_and_not_over_http(hostvars, pki):
    address = _address(hostvars)
    status, body = tls_probe.https_get(address, 8222, "/healthz", str(pki / "ca-bundle.crt"))
    assert status == 200, body
    assert tls_probe.plain_http_refused(address, 8222)


def test_the_host_has_the_controllers_certificate_and_bundle(host, hostvars, pki):
    name = hostvars["inventory_hostname"]
    for remote, local in ((f"{TLS}/server.crt", pki / "hosts" / f"{name}.crt"),
                          (f"{TLS}/ca.crt", pki / "ca-bundle.crt")):
        assert host.file(remote).sha256sum == hashlib.sha256(local.read_bytes()).hexdigest()


def test_the_key_is_0600_owned_by_the_service_user_and_the_ca_key_never_leaves(host):
    key = host.file(f"{TLS}/server.key")
    assert (key.mode, key.user, key.group) == (0o600, "jetraft", "jetraft")
    assert not host.file(f"{TLS}/ca.key").exists
    found = host.run("find /etc /opt /var/lib/jetraft -name 'ca*.key' -print")
    assert found.stdout.strip() == ""
