"""Test certificates made with the ``cryptography`` package, for TLS tests.

:func:`make_pki` writes, into a directory, a certificate authority, a server certificate
(SANs ``localhost`` and ``127.0.0.1``, usable as a TLS server and as a TLS client, as route
certificates must be), client certificates, and the bad ones: a client certificate from
another CA, an expired client certificate, and a second server certificate from the same
CA (for reload tests). Every file is PEM; keys are EC P-256 and unencrypted.

Also: :func:`client_context` (an ``ssl.SSLContext`` for nats-py and raw sockets) and
:func:`spki_sha256` (the ``pinned_certs`` form of a certificate).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CertPair:
    """A certificate file and its key file."""

    cert: Path
    key: Path

    def pem(self) -> bytes:
        return self.cert.read_bytes()


@dataclass(frozen=True)
class PKI:
    """The files :func:`make_pki` wrote (see the module docstring)."""

    directory: Path
    ca: Path                 #: the CA certificate (PEM)
    server: CertPair         #: CN=server, SANs localhost/127.0.0.1, server and client auth
    server2: CertPair        #: same SANs, same CA, another key and CN=server-reloaded
    client: CertPair         #: CN=alice, email alice@example.com, DNS alice.example.com
    client_dn: CertPair      #: CN=bob,OU=eng,O=Acme (no SAN): mapped by its subject DN
    other_ca: Path           #: a second, unrelated CA
    other_client: CertPair   #: CN=alice from the other CA
    other_server: CertPair   #: a server/route certificate from the other CA
    expired_client: CertPair  #: CN=alice from the right CA, expired yesterday


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME}
    # RFC 4514 strings list the most specific first; the ASN.1 sequence is the reverse
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(list(parts.items()))])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _ca(directory: Path, stem: str, cn: str) -> tuple[Path, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    name = _name(CN=cn, O="jetraft tests")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    path = directory / f"{stem}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def _leaf(directory: Path, stem: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
          subject: x509.Name, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
          emails: tuple[str, ...] = (), server: bool = False, expired: bool = False) -> CertPair:
    ca_cert, ca_key = issuer
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = (now - 30 * _DAY, now - _DAY) if expired else (now - _DAY, now + 30 * _DAY)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    names += [x509.RFC822Name(e) for e in emails]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(directory / f"{stem}-cert.pem", directory / f"{stem}-key.pem")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pair.key, key)
    return pair


def make_pki(directory: Path) -> PKI:
    """Write the test PKI into ``directory`` (created if needed) and describe it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, ca_cert, ca_key = _ca(directory, "ca", "jetraft test CA")
    other_path, other_cert, other_key = _ca(directory, "other-ca", "another CA")
    ca, other = (ca_cert, ca_key), (other_cert, other_key)
    local = {"dns": ("localhost",), "ips": ("127.0.0.1",), "server": True}
    return PKI(
        directory=directory,
        ca=ca_path,
        server=_leaf(directory, "server", ca, _name(CN="server"), **local),
        server2=_leaf(directory, "server2", ca, _name(CN="server-reloaded"), **local),
        client=_leaf(directory, "client", ca, _name(CN="alice"), dns=("alice.example.com",),
                     emails=("alice@example.com",)),
        client_dn=_leaf(directory, "client-dn", ca, _name(CN="bob", OU="eng", O="Acme")),
        other_ca=other_path,
        other_client=_leaf(directory, "other-client", other, _name(CN="alice"),
                           emails=("alice@example.com",)),
        other_server=_leaf(directory, "other-server", other, _name(CN="server"), **local),
        expired_client=_leaf(directory, "expired-client", ca, _name(CN="alice"),
                             emails=("alice@example.com",), expired=True),
    )


def client_context(pki: PKI, cert: CertPair | None = None, *, ca: Path | None = None) -> ssl.SSLContext:
    """A client-side context trusting ``ca`` (default: the test CA), presenting ``cert``."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca or pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


def spki_sha256(cert: CertPair) -> str:
    """Hex SHA-256 of the certificate's DER SubjectPublicKeyInfo (nats-server pinned_certs)."""
    loaded = x509.load_pem_x509_certificate(cert.pem())
    spki = loaded.public_key().public_bytes(serialization.Encoding.DER,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).hexdigest()


def cert_serial(pem: bytes) -> int:
    """The serial number of a PEM certificate (to tell which certificate a server presented)."""
    return x509.load_pem_x509_certificate(pem).serial_number


def der_serial(der: bytes) -> int:
    """The serial number of a DER certificate (``SSLSocket.getpeercert(binary_form=True)``)."""
    return x509.load_der_x509_certificate(der).serial_number
