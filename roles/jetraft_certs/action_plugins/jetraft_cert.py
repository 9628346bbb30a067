"""``jetraft_cert``: the cluster's certificate authority and its hosts' certificates, made
and kept on the controller with the ``cryptography`` package (no community.crypto, no
openssl binary, no network).

An action plugin: it runs in the controller's ansible-playbook process (whatever host the
task names) and only reads and writes files under ``dir`` on the controller:

    dir/ca.crt, ca.key          the CA that signs (key 0600, directory 0700)
    dir/ca-next.crt, .key       a new CA staged by a rotation, trusted but not yet signing
    dir/ca-prev.crt             the CA a rotation replaced, still trusted until retired
    dir/ca-bundle.crt           what hosts trust: ca.crt, then ca-next.crt, then ca-prev.crt
    dir/hosts/<name>.crt, .key  one host's certificate (server and client auth) and key

``kind: ca`` with ``ca_action``:
  - ``ensure``: make the CA when there is none; never replace one (a CA expiring within
    ``renew_days`` is reported as ``expires_soon``: replacing it is a rotation);
  - ``stage``: make ca-next (once) so that it is trusted everywhere before it signs;
  - ``promote``: ca-next becomes the CA that signs, the old one becomes ca-prev (its key is
    removed); nothing to do without a ca-next;
  - ``retire``: ca-prev is no longer trusted.
Each action rewrites ca-bundle.crt when its content would change.

``kind: cert`` makes ``hosts/<name>.crt`` and ``.key`` (ECDSA P-256, a new key each time)
when there is none, or when the one there: does not match its key, is not signed by the
current CA, has other subject alternative names than ``sans`` (DNS names and IP addresses,
compared as sets), is not yet valid, expires within ``renew_days``, or ``force`` is set.
Otherwise it changes nothing but file modes. Certificates carry serverAuth and clientAuth:
routes use the same certificate both ways (nats-server server/opts.go forces mutual
verification on cluster TLS).

Errors (the task fails with the message): a CA certificate without its key or the
reverse, a key that does not match its certificate, a CA file that cannot be read.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

try:                                   # importable without Ansible for the unit tests
    from ansible.plugins.action import ActionBase
except ImportError:                    # pragma: no cover
    ActionBase = object

CA_CRT, CA_KEY = "ca.crt", "ca.key"
NEXT_CRT, NEXT_KEY = "ca-next.crt", "ca-next.key"
PREV_CRT, PREV_KEY = "ca-prev.crt", "ca-prev.key"
BUNDLE = "ca-bundle.crt"
HOSTS = "hosts"


class PkiError(Exception):
    """The PKI directory is in a state this plugin will not repair on its own."""


@dataclass
class Outcome:
    """What one call did: ``changed``, why (``reasons``), and facts for the caller."""

    changed: bool = False
    reasons: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def note(self, reason: str) -> None:
        self.changed = True
        self.reasons.append(reason)


# ---- files ---------------------------------------------------------------------------------

def _write(path: Path, data: bytes, mode: int, dry_run: bool) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, then rename) with ``mode``."""
    if dry_run:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mode(path: Path, mode: int, out: Outcome, dry_run: bool) -> None:
    if path.exists() and stat.S_IMODE(path.stat().st_mode) != mode:
        out.note(f"{path.name} mode set to {mode:04o}")
        if not dry_run:
            path.chmod(mode)


def _directory(directory: Path, out: Outcome, dry_run: bool) -> None:
    for d in (directory, directory / HOSTS):
        if not d.is_dir():
            out.note(f"{d} made")
            if not dry_run:
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
        _mode(d, 0o700, out, dry_run)


def _load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise PkiError(f"cannot read the certificate {path}: {exc}") from None


def _load_key(path: Path):
    try:
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise PkiError(f"cannot read the private key {path}: {exc}") from None


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _same_key(cert: x509.Certificate, key) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt)


# ---- certificates --------------------------------------------------------------------------

def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _new_ca(common_name: str, days: int, now: _dt.datetime):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "jetraft")])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5))
            .not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def split_sans(sans: list[str]) -> tuple[list[str], list[str]]:
    """``sans`` -> (DNS names, IP addresses), each normalised (lower case, canonical
    address), without duplicates, sorted. Empty entries are dropped."""
    dns: set[str] = set()
    ips: set[str] = set()
    for raw in sans:
        text = str(raw).strip()
        if not text:
            continue
        try:
            ips.add(str(ipaddress.ip_address(text)))
        except ValueError:
            dns.add(text.lower().rstrip("."))
    return sorted(dns), sorted(ips, key=lambda a: (ipaddress.ip_address(a).version, ipaddress.ip_address(a)))


def cert_sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    """The certificate's subject alternative names as (DNS names, IP addresses)."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return split_sans(ext.get_values_for_type(x509.DNSName)
                      + [str(a) for a in ext.get_values_for_type(x509.IPAddress)])


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _new_leaf(ca_cert, ca_key, common_name: str, dns: list[str], ips: list[str], days: int,
              now: _dt.datetime):
    key = ec.generate_private_key(ec.SECP256R1())
    alt = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "jetraft")]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - _dt.timedelta(minutes=5))
               .not_valid_after(min(now + _dt.timedelta(days=days), ca_cert.not_valid_after_utc))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=False,
                                            crl_sign=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def describe(cert: x509.Certificate, now: _dt.datetime | None = None) -> dict:
    """Facts about ``cert`` for the caller: subject, issuer, serial, not_before/not_after
    (ISO 8601, UTC), days_left (whole days, negative when expired), dns_names,
    ip_addresses, sha256 fingerprint (hex)."""
    now = now or _now()
    dns, ips = cert_sans(cert)
    left = cert.not_valid_after_utc - now
    return {"subject": cert.subject.rfc4514_string(), "issuer": cert.issuer.rfc4514_string(),
            "serial": format(cert.serial_number, "x"),
            "not_before": cert.not_valid_before_utc.isoformat(),
            "not_after": cert.not_valid_after_utc.isoformat(),
            "days_left": left.days, "dns_names": dns, "ip_addresses": ips,
            "sha256": cert.fingerprint(hashes.SHA256()).hex()}


# ---- the CA --------------------------------------------------------------------------------

def _pair(directory: Path, crt: str, key: str) -> tuple[bool, bool]:
    return (directory / crt).exists(), (directory / key).exists()


def _check_pair(directory: Path, crt: str, key: str) -> None:
    has_crt, has_key = _pair(directory, crt, key)
    if has_crt != has_key:
        there, missing = (crt, key) if has_crt else (key, crt)
        raise PkiError(f"{directory / there} is there but {missing} is not: restore {missing}, "
                       f"or move both away to make a new CA (then every host needs new "
                       f"certificates: run playbooks/rotate_certs.yml)")
    if has_crt and not _same_key(_load_cert(directory / crt), _load_key(directory / key)):
        raise PkiError(f"{directory / key} is not the key of {directory / crt}")


def write_bundle(directory: Path, out: Outcome, dry_run: bool) -> None:
    """ca-bundle.crt: the current CA, then a staged one, then a replaced one."""
    parts = [directory / n for n in (CA_CRT, NEXT_CRT, PREV_CRT) if (directory / n).exists()]
    data = b"".join(_pem(_load_cert(p)) for p in parts)
    bundle = directory / BUNDLE
    if not bundle.exists() or bundle.read_bytes() != data:
        out.note(f"{BUNDLE} holds {', '.join(p.name for p in parts)}")
        _write(bundle, data, 0o644, dry_run)
    _mode(bundle, 0o644, out, dry_run)


def ensure_ca(directory: Path, *, common_name: str, days: int = 3650, renew_days: int = 30,
              action: str = "ensure", now: _dt.datetime | None = None,
              dry_run: bool = False) -> Outcome:
    """Apply ``action`` (ensure, stage, promote, retire; see the module docstring) to the CA
    in ``directory``. Raises PkiError for a CA file without its pair or a key that does not
    match. ``info`` holds the CA's facts (``ca``), the staged one's (``next``) and
    ``expires_soon`` (the CA's days_left is below ``renew_days``)."""
    now = now or _now()
    out = Outcome()
    _directory(directory, out, dry_run)
    for crt, key in ((CA_CRT, CA_KEY), (NEXT_CRT, NEXT_KEY)):
        _check_pair(directory, crt, key)
    stamp = now.strftime("%Y%m%d%H%M%S")
    if not (directory / CA_CRT).exists():
        cert, key = _new_ca(f"{common_name} {stamp}", days, now)
        out.note(f"a new CA {cert.subject.rfc4514_string()}")
        _write(directory / CA_KEY, _key_pem(key), 0o600, dry_run)
        _write(directory / CA_CRT, _pem(cert), 0o644, dry_run)
    if action == "stage" and not (directory / NEXT_CRT).exists():
        cert, key = _new_ca(f"{common_name} {stamp}n", days, now)
        out.note(f"a new CA staged (trusted, not yet signing): {cert.subject.rfc4514_string()}")
        _write(directory / NEXT_KEY, _key_pem(key), 0o600, dry_run)
        _write(directory / NEXT_CRT, _pem(cert), 0o644, dry_run)
    elif action == "promote" and (directory / NEXT_CRT).exists():
        out.note("the staged CA now signs; the replaced one stays trusted as ca-prev.crt")
        if not dry_run:
            os.replace(directory / CA_CRT, directory / PREV_CRT)
            (directory / CA_KEY).unlink()
            os.replace(directory / NEXT_KEY, directory / CA_KEY)
            os.replace(directory / NEXT_CRT, directory / CA_CRT)
    elif action == "retire" and (directory / PREV_CRT).exists():
        out.note("the replaced CA (ca-prev.crt) is no longer trusted")
        if not dry_run:
            (directory / PREV_CRT).unlink()
            (directory / PREV_KEY).unlink(missing_ok=True)
    elif action not in ("ensure", "stage", "promote", "retire"):
        raise PkiError(f"unknown ca_action {action!r}: ensure, stage, promote or retire")
    for key in (CA_KEY, NEXT_KEY):
        _mode(directory / key, 0o600, out, dry_run)
    for crt in (CA_CRT, NEXT_CRT, PREV_CRT):
        _mode(directory / crt, 0o644, out, dry_run)
    if dry_run and not (directory / CA_CRT).exists():
        out.info = {"ca": None, "next": None, "expires_soon": False}
        return out
    write_bundle(directory, out, dry_run)
    ca = describe(_load_cert(directory / CA_CRT), now)
    nxt = describe(_load_cert(directory / NEXT_CRT), now) if (directory / NEXT_CRT).exists() else None
    out.info = {"ca": ca, "next": nxt, "expires_soon": ca["days_left"] < renew_days,
                "ca_file": str(directory / CA_CRT), "bundle": str(directory / BUNDLE)}
    return out


# ---- a host's certificate ------------------------------------------------------------------

def ensure_cert(directory: Path, name: str, *, common_name: str, sans: list[str],
                days: int = 365, renew_days: int = 30, force: bool = False,
                now: _dt.datetime | None = None, dry_run: bool = False) -> Outcome:
    """Make or keep ``hosts/<name>.crt`` and ``.key`` in ``directory`` (see the module
    docstring for when it is remade). Raises PkiError when there is no CA (run with
    ``kind: ca`` first). ``info`` holds the certificate's facts and the file paths."""
    now = now or _now()
    out = Outcome()
    if "/" in name or name.startswith(".") or not name:
        raise PkiError(f"{name!r} cannot name a certificate file")
    _check_pair(directory, CA_CRT, CA_KEY)
    if not (directory / CA_CRT).exists():
        raise PkiError(f"no CA in {directory}: the CA is made first (kind: ca)")
    ca_cert, ca_key = _load_cert(directory / CA_CRT), _load_key(directory / CA_KEY)
    dns, ips = split_sans(sans)
    crt_path, key_path = directory / HOSTS / f"{name}.crt", directory / HOSTS / f"{name}.key"
    why = None
    if force:
        why = "a new certificate was asked for"
    elif not (crt_path.exists() and key_path.exists()):
        why = "no certificate yet"
    else:
        cert = _load_cert(crt_path)
        have = cert_sans(cert)
        left = cert.not_valid_after_utc - now
        if not _same_key(cert, _load_key(key_path)):
            why = "the key does not match the certificate"
        elif not _signed_by(cert, ca_cert):
            why = "it is not signed by the current CA"
        elif have != (dns, ips):
            gone = sorted(set(have[0] + have[1]) - set(dns + ips))
            new = sorted(set(dns + ips) - set(have[0] + have[1]))
            why = "its names changed" + (f": adds {', '.join(new)}" if new else "") + (
                f"; drops {', '.join(gone)}" if gone else "")
        elif cert.not_valid_before_utc > now:
            why = "it is not valid yet"
        elif left < _dt.timedelta(days=renew_days):
            why = f"it expires on {cert.not_valid_after_utc:%Y-%m-%d} (within {renew_days} days)"
    if why is not None:
        cert, key = _new_leaf(ca_cert, ca_key, common_name, dns, ips, days, now)
        out.note(f"{name}: new certificate: {why}")
        _directory(directory, Outcome(), dry_run)
        _write(key_path, _key_pem(key), 0o600, dry_run)
        _write(crt_path, _pem(cert), 0o644, dry_run)
    _mode(key_path, 0o600, out, dry_run)
    _mode(crt_path, 0o644, out, dry_run)
    out.info = {**describe(cert, now), "cert_file": str(crt_path), "key_file": str(key_path),
                "ca_file": str(directory / CA_CRT), "bundle": str(directory / BUNDLE)}
    return out


# ---- Ansible -------------------------------------------------------------------------------

ARGUMENT_SPEC = {
    "kind": {"type": "str", "required": True, "choices": ["ca", "cert"]},
    "dir": {"type": "path", "required": True},
    "ca_action": {"type": "str", "default": "ensure",
                  "choices": ["ensure", "stage", "promote", "retire"]},
    "common_name": {"type": "str", "required": True},
    "name": {"type": "str"},
    "sans": {"type": "list", "elements": "str", "default": []},
    "days": {"type": "int", "default": 365},
    "renew_days": {"type": "int", "default": 30},
    "force": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    """The task's arguments are ARGUMENT_SPEC's; see the module docstring."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC,
                                              required_if=[("kind", "cert", ("name",))])
        directory = Path(args["dir"]).expanduser()
        dry_run = bool(self._task.check_mode)
        try:
            if args["kind"] == "ca":
                out = ensure_ca(directory, common_name=args["common_name"], days=args["days"],
                                renew_days=args["renew_days"], action=args["ca_action"],
                                dry_run=dry_run)
            else:
                out = ensure_cert(directory, args["name"], common_name=args["common_name"],
                                  sans=args["sans"], days=args["days"],
                                  renew_days=args["renew_days"], force=args["force"],
                                  dry_run=dry_run)
        except PkiError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(changed=out.changed, reasons=out.reasons, **out.info)
        if out.reasons:
            result["msg"] = "; ".join(out.reasons)
        return result
