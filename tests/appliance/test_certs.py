"""The jetraft_cert action plugin (roles/jetraft_certs) that makes the cluster's CA and its
hosts' certificates on the controller: what it makes, when it changes nothing, when it
remakes a certificate (near expiry, names changed, another CA, a key that does not match),
the CA roll (stage, promote, retire), file modes; and the role run twice by Ansible."""

from __future__ import annotations

import datetime as dt
import importlib.util
import ssl
import stat
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from playbook import ROOT, run_playbook

_spec = importlib.util.spec_from_file_location(
    "jetraft_cert_plugin", ROOT / "roles" / "jetraft_certs" / "action_plugins" / "jetraft_cert.py")
pki = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = pki            # dataclasses look their module up
_spec.loader.exec_module(pki)

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SANS = ["n1", "n1.example.net", "10.0.0.1", "localhost", "127.0.0.1", "::1"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def make(tmp: Path, *, sans=SANS, now=NOW, **kw):
    pki.ensure_ca(tmp, common_name="jetraft C1 CA", now=now)
    return pki.ensure_cert(tmp, "n1", common_name="n1", sans=sans, now=now, **kw)


def test_the_ca_and_a_host_certificate_with_their_modes(tmp_path):
    ca = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", now=NOW)
    assert ca.changed and not ca.info["expires_soon"]
    assert mode(tmp_path) == 0o700 and mode(tmp_path / "hosts") == 0o700
    assert (mode(tmp_path / "ca.key"), mode(tmp_path / "ca.crt"), mode(tmp_path / "ca-bundle.crt")) == (0o600, 0o644, 0o644)
    ca_cert = cert(tmp_path / "ca.crt")
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW)
    assert out.changed and out.reasons == ["n1: new certificate: no certificate yet"]
    host = cert(tmp_path / "hosts" / "n1.crt")
    host.verify_directly_issued_by(ca_cert)
    assert (mode(tmp_path / "hosts" / "n1.key"), mode(tmp_path / "hosts" / "n1.crt")) == (0o600, 0o644)
    assert out.info["dns_names"] == ["localhost", "n1", "n1.example.net"]
    assert out.info["ip_addresses"] == ["10.0.0.1", "127.0.0.1", "::1"]
    eku = host.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH}
    assert host.not_valid_after_utc - NOW == dt.timedelta(days=365)


def test_python_ssl_accepts_the_pair_and_the_names(tmp_path):
    make(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "hosts" / "n1.crt", tmp_path / "hosts" / "n1.key")
    client = ssl.create_default_context(cafile=tmp_path / "ca-bundle.crt")
    assert client.check_hostname


def test_a_second_run_changes_nothing(tmp_path):
    make(tmp_path)
    before = (tmp_path / "hosts" / "n1.crt").read_bytes(), (tmp_path / "hosts" / "n1.key").read_bytes()
    again_ca = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", now=NOW + dt.timedelta(days=100))
    again = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=list(reversed(SANS)) + ["N1"],
                            now=NOW + dt.timedelta(days=100))
    assert not again_ca.changed and not again.changed, (again_ca.reasons, again.reasons)
    assert ((tmp_path / "hosts" / "n1.crt").read_bytes(), (tmp_path / "hosts" / "n1.key").read_bytes()) == before


@pytest.mark.parametrize("days_later, remade", [(334, False), (336, True), (400, True)])
def test_a_certificate_expiring_within_the_threshold_is_remade(tmp_path, days_later, remade):
    make(tmp_path)
    later = NOW + dt.timedelta(days=days_later)
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, renew_days=30, now=later)
    assert out.changed == remade, out.reasons
    if remade:
        assert "expires on 2027-01-01 (within 30 days)" in out.reasons[0]
        assert cert(tmp_path / "hosts" / "n1.crt").not_valid_after_utc == later + dt.timedelta(days=365)


def test_changed_names_remake_the_certificate_and_say_which(tmp_path):
    make(tmp_path)
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1",
                          sans=[s for s in SANS if s != "10.0.0.1"] + ["10.0.0.9"], now=NOW)
    assert out.changed
    assert out.reasons == ["n1: new certificate: its names changed: adds 10.0.0.9; drops 10.0.0.1"]
    assert "10.0.0.9" in out.info["ip_addresses"]


def test_a_certificate_of_another_ca_or_with_another_key_is_remade(tmp_path):
    make(tmp_path)
    other = tmp_path / "other"
    make(other)
    (tmp_path / "hosts" / "n1.crt").write_bytes((other / "hosts" / "n1.crt").read_bytes())
    (tmp_path / "hosts" / "n1.key").write_bytes((other / "hosts" / "n1.key").read_bytes())
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW)
    assert out.reasons == ["n1: new certificate: it is not signed by the current CA"]
    (tmp_path / "hosts" / "n1.key").write_bytes((other / "hosts" / "n1.key").read_bytes())
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW)
    assert out.reasons == ["n1: new certificate: the key does not match the certificate"]


def test_loose_modes_are_tightened_without_a_new_certificate(tmp_path):
    make(tmp_path)
    before = (tmp_path / "hosts" / "n1.crt").read_bytes()
    (tmp_path / "hosts" / "n1.key").chmod(0o644)
    (tmp_path / "ca.key").chmod(0o640)
    ca = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", now=NOW)
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW)
    assert ca.reasons == ["ca.key mode set to 0600"] and out.reasons == ["n1.key mode set to 0600"]
    assert mode(tmp_path / "hosts" / "n1.key") == 0o600 and mode(tmp_path / "ca.key") == 0o600
    assert (tmp_path / "hosts" / "n1.crt").read_bytes() == before


def test_force_makes_a_new_key(tmp_path):
    make(tmp_path)
    key = (tmp_path / "hosts" / "n1.key").read_bytes()
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW, force=True)
    assert out.changed and (tmp_path / "hosts" / "n1.key").read_bytes() != key


def test_a_ca_near_expiry_is_reported_never_replaced(tmp_path):
    pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", days=40, now=NOW)
    before = (tmp_path / "ca.crt").read_bytes()
    out = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", now=NOW + dt.timedelta(days=20))
    assert out.info["expires_soon"] and not out.changed
    assert (tmp_path / "ca.crt").read_bytes() == before


def test_a_ca_without_its_key_is_refused_with_what_to_do(tmp_path):
    pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", now=NOW)
    (tmp_path / "ca.key").unlink()
    with pytest.raises(pki.PkiError, match=r"ca\.crt is there but ca\.key is not: restore ca\.key"):
        pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", now=NOW)
    with pytest.raises(pki.PkiError, match="restore ca.key"):
        pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW)


def test_the_ca_roll_keeps_every_certificate_trusted_at_every_step(tmp_path):
    """stage: the bundle trusts old and new, old still signs; promote: new signs, old still
    trusted; retire: new alone."""
    make(tmp_path)
    old_ca = cert(tmp_path / "ca.crt")
    old_host = cert(tmp_path / "hosts" / "n1.crt")

    def bundle() -> list[x509.Certificate]:
        return x509.load_pem_x509_certificates((tmp_path / "ca-bundle.crt").read_bytes())

    staged = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", action="stage", now=NOW)
    assert staged.changed and staged.info["next"] is not None
    new_ca = cert(tmp_path / "ca-next.crt")
    assert [c.subject for c in bundle()] == [old_ca.subject, new_ca.subject]
    assert not pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW).changed
    assert not pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", action="stage", now=NOW).changed

    promoted = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", action="promote", now=NOW)
    assert promoted.changed and cert(tmp_path / "ca.crt") == new_ca
    assert not (tmp_path / "ca-next.key").exists() and (tmp_path / "ca-prev.crt").exists()
    assert [c.subject for c in bundle()] == [new_ca.subject, old_ca.subject]
    out = pki.ensure_cert(tmp_path, "n1", common_name="n1", sans=SANS, now=NOW)
    assert out.reasons == ["n1: new certificate: it is not signed by the current CA"]
    cert(tmp_path / "hosts" / "n1.crt").verify_directly_issued_by(new_ca)
    old_host.verify_directly_issued_by(bundle()[1])          # peers not yet reloaded

    retired = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", action="retire", now=NOW)
    assert retired.changed and [c.subject for c in bundle()] == [new_ca.subject]
    again = pki.ensure_ca(tmp_path, common_name="jetraft C1 CA", action="retire", now=NOW)
    assert not again.changed


def test_dry_run_writes_nothing(tmp_path):
    out = pki.ensure_ca(tmp_path / "p", common_name="jetraft C1 CA", now=NOW, dry_run=True)
    assert out.changed and not (tmp_path / "p").exists()


def test_the_role_twice_changes_nothing_the_second_time(tmp_path):
    """Through Ansible (deploy.yml, tag jetraft_certs): three hosts, CA once, a certificate
    each; the second run reports changed=0 and the files are the same bytes."""
    hosts = {f"n{k}": {"jetraft_server_address": f"10.1.0.{k}"} for k in (1, 2, 3)}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"jetraft": {"vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "jetraft_server_sys_password": "x", "jetraft_server_route_password": "y"},
        "hosts": hosts}}))
    first = run_playbook("deploy", inv, "jetraft_certs")
    assert first.returncode == 0, first.stdout[-3000:]
    files = {p: p.read_bytes() for p in (tmp_path / "pki").rglob("*") if p.is_file()}
    assert sorted(p.name for p in files) == sorted(
        ["ca.crt", "ca.key", "ca-bundle.crt"] + [f"n{k}.{e}" for k in (1, 2, 3) for e in ("crt", "key")])
    for k in (1, 2, 3):
        sans = cert(tmp_path / "pki" / "hosts" / f"n{k}.crt").extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
        assert f"10.1.0.{k}" in [str(a) for a in sans.get_values_for_type(x509.IPAddress)]
    for body in (p.read_text().splitlines()[1] for p in files if p.suffix == ".key"):
        assert body not in first.stdout + first.stderr
    second = run_playbook("deploy", inv, "jetraft_certs")
    assert second.returncode == 0, second.stdout[-3000:]
    recap = second.stdout.split("PLAY RECAP")[-1]
    assert recap.count("changed=0") == 3, recap
    assert {p: p.read_bytes() for p in files} == files
