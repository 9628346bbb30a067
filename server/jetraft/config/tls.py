"""The ``tls { ... }`` block: :class:`TLSConfig`, its reader, and the ``ssl`` contexts built
from it.

Keys, defaults and error texts follow nats-server server/opts.go (``parseTLS``,
``GenTLSConfig``, ``getTLSConfig``, ``parseTLSVersion``) and server/ciphersuites.go:

- ``cert_file``, ``key_file`` (both or neither), ``ca_file``: PEM files, read (and checked
  with Python's :mod:`ssl`) when the configuration is loaded, again at every SIGHUP reload.
  A path is relative to the working directory, as in nats-server. jetraft needs a
  certificate: a block without one is an error (nats-server accepts it at ``-t`` and
  fails every handshake).
- ``verify``: require and verify a client certificate (mutual TLS) against ``ca_file``
  (the system's CAs without it, as Go's nil ClientCAs).
- ``verify_and_map``: ``verify``, and the client's certificate names the user it
  authenticates as (nats-server server/auth.go checkClientTLSCertSubject).
- ``timeout``: seconds the TLS handshake may take (a number or a duration string; 0 or
  absent: 2 s, nats-server's TLS_TIMEOUT).
- ``handshake_first`` (aliases ``first``, ``immediate``): true/false/on/off, ``auto``
  (TLS first, falling back to INFO first after 50 ms without client bytes) or a duration
  (that fallback delay).
- ``min_version``: ``"1.2"`` or ``"1.3"``; lower versions are refused as nats-server
  refuses them (TLS 1.2 is always the floor).
- ``cipher_suites``: Go's names (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` ...), mapped to
  OpenSSL's; Go's insecure ones need ``allow_insecure_cipher_suites`` and only those
  OpenSSL still offers are accepted. As in Go, TLS 1.3 suites are always enabled and a
  list naming only TLS 1.3 suites disables TLS 1.2.
- ``curve_preferences``: Go's names (``X25519``, ``CurveP256``, ``CurveP384``,
  ``CurveP521``); Python's :mod:`ssl` can set one group, so one curve is honoured and a
  longer list, or a post-quantum hybrid, is refused.
- ``pinned_certs``: hex SHA-256 digests of the peer's DER SubjectPublicKeyInfo; a peer
  whose certificate is not among them is closed after the handshake.

Refused with a ConfigError naming the key ("not supported by jetraft"), because ignoring
them would weaken or change what the operator configured: ``insecure: true``,
``ocsp_peer`` (but ``false``), ``cert_store``, ``cert_match_by``, ``cert_match``,
``ca_certs_match``, ``cert_match_skip_invalid``, ``certs``/``certificates``,
``connection_rate_limit``, and ``verify_cert_and_check_known_urls: true`` (nats-server
itself refuses it outside ``cluster``/``gateway``). A key nats-server does not know is an
error too (``error parsing tls config, unknown field "x"``).

Units: ``timeout`` and ``handshake_first_fallback`` are float seconds.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Any

from .durations import parse_duration
from .errors import ConfigError, Position
from .parser import Value

__all__ = [
    "DEFAULT_HANDSHAKE_FIRST_FALLBACK",
    "TLS_TIMEOUT",
    "TLSConfig",
    "client_context",
    "read_tls",
    "server_context",
]

#: Seconds a TLS handshake may take by default (nats-server server/const.go TLS_TIMEOUT).
TLS_TIMEOUT = 2.0
#: ``handshake_first: auto``: seconds without client bytes before INFO is sent first
#: (nats-server DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY).
DEFAULT_HANDSHAKE_FIRST_FALLBACK = 0.05

#: Go crypto/tls cipher suites of TLS 1.0-1.2 (tls.CipherSuites()) -> OpenSSL names.
_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
#: Go's TLS 1.3 suites: always enabled, in Go as in OpenSSL.
_TLS13_CIPHERS = frozenset(("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"))
#: Go's tls.InsecureCipherSuites() -> OpenSSL name, or None where OpenSSL no longer offers it.
_INSECURE_CIPHERS: dict[str, str | None] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_RC4_128_SHA": None,
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": None,
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": None,
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": None,
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": None,
}
#: Go curve names (nats-server curvePreferenceMap) -> OpenSSL group names (None: not available).
_CURVES: dict[str, str | None] = {
    "X25519": "X25519",
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519MLKEM768": None,
    "SecP256r1MLKEM768": None,
    "SecP384r1MLKEM1024": None,
}
_PIN = re.compile(r"[A-Fa-f0-9]{64}")
#: Keys nats-server knows that jetraft refuses (see the module docstring), with what
#: value, if any, is harmless (the feature off).
_REFUSED: dict[str, Any] = {
    "insecure": False,
    "ocsp_peer": False,
    "cert_store": None,
    "cert_match_by": None,
    "cert_match": None,
    "ca_certs_match": None,
    "cert_match_skip_invalid": None,
    "certs": None,
    "certificates": None,
    "connection_rate_limit": 0,
    "verify_cert_and_check_known_urls": False,
}


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """A ``tls`` block (see the module docstring). Paths as written; ``cipher_suites`` and
    ``curve_preferences`` in Go's names (empty: OpenSSL's defaults); ``min_version`` is
    ``"1.2"`` or ``"1.3"``; ``pinned_certs`` lower-case hex digests. ``verify_and_map``
    implies ``verify``."""

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    verify: bool = False
    verify_and_map: bool = False
    timeout: float = TLS_TIMEOUT
    handshake_first: bool = False
    handshake_first_fallback: float = 0.0
    min_version: str = "1.2"
    cipher_suites: tuple[str, ...] = ()
    allow_insecure_cipher_suites: bool = False
    curve_preferences: tuple[str, ...] = ()
    pinned_certs: frozenset[str] = frozenset()


# -- reading -----------------------------------------------------------------------------


def _fail(position: Position, message: str) -> ConfigError:
    return ConfigError.at(position, message)


def _strings(value: Value, label: str, key: str) -> list[tuple[str, Position]]:
    if value.kind != "array":
        raise _fail(value.position, f"error parsing tls config, expected '{key}' to be an array of strings")
    items = []
    for item in value.data:
        if item.kind != "string":
            raise _fail(item.position, f"error parsing tls config, expected '{key}' to hold strings")
        items.append((item.data, item.position))
    if not items:
        raise _fail(value.position, f"error parsing tls config, '{key}' cannot be empty")
    return items


def _seconds(value: Value, key: str) -> float:
    if value.kind in ("integer", "float"):
        return float(value.data)
    if value.kind == "string":
        try:
            return parse_duration(value.data)
        except ValueError as e:
            raise _fail(value.position, f"error parsing tls config, '{key}' {e}") from None
    raise _fail(value.position, f"error parsing tls config, '{key}' wrong type")


def _handshake_first(value: Value, key: str) -> tuple[bool, float]:
    """opts.go parseTLS handshake_first: a boolean, on/off, auto/auto_fallback, or a
    duration (the fallback delay)."""
    if value.kind == "boolean":
        return value.data, 0.0
    if value.kind != "string":
        raise _fail(value.position, f"field {key!r} should be a boolean or a string, got {value.kind}")
    word = value.data.lower()
    if word in ("true", "on"):
        return True, 0.0
    if word in ("false", "off"):
        return False, 0.0
    if word in ("auto", "auto_fallback"):
        return True, DEFAULT_HANDSHAKE_FIRST_FALLBACK
    try:
        return True, parse_duration(value.data)
    except ValueError:
        raise _fail(value.position, f'field "{key}"\'s value "{value.data}" is invalid') from None


def _min_version(value: Value) -> str:
    """opts.go parseTLSVersion: a string "1.0".."1.3"; below 1.2 is refused."""
    if value.kind != "string":
        raise _fail(value.position, f"error parsing tls config: 'min_version' wrong type: {value.raw or value.data}")
    if value.data in ("1.0", "1.1"):
        raise _fail(value.position, f"error parsing tls config: unsupported TLS version: TLS {value.data}")
    if value.data not in ("1.2", "1.3"):
        raise _fail(value.position, f"error parsing tls config: unknown version: {value.data}")
    return value.data


def read_tls(value: Value, label: str, *, client_context: bool) -> TLSConfig:
    """Read a ``tls`` map (nats-server opts.go parseTLS) and check its files (GenTLSConfig).

    ``label`` is the block's dotted name (``"tls"``, ``"cluster.tls"``) for messages;
    ``client_context`` is True for the client listener's block (where
    ``verify_cert_and_check_known_urls`` is refused by nats-server too).
    Raises ConfigError at the offending key or value, or at the block for a file that
    cannot be loaded.
    """
    if value.kind != "map":
        raise _fail(value.position, f"{label}: expected a map, got {value.kind}")
    settings: dict[str, Any] = {}
    insecure_names: list[str] = []
    for entry in value.data.values():
        key, v, where = entry.key.lower(), entry.value, entry.key_position
        if key in ("cert_file", "key_file", "ca_file"):
            if v.kind != "string":
                raise _fail(v.position, f"error parsing tls config, expected '{key}' to be filename")
            settings[key] = v.data
        elif key in ("verify", "verify_and_map", "allow_insecure_cipher_suites"):
            if v.kind != "boolean":
                raise _fail(v.position, f"error parsing tls config, expected '{key}' to be a boolean")
            settings[key] = settings.get(key, False) or v.data
            if key == "verify_and_map" and v.data:
                settings["verify"] = True
        elif key == "timeout":
            settings["timeout"] = _seconds(v, key) or TLS_TIMEOUT
        elif key in ("handshake_first", "first", "immediate"):
            settings["handshake_first"], settings["handshake_first_fallback"] = _handshake_first(v, entry.key)
        elif key == "min_version":
            settings["min_version"] = _min_version(v)
        elif key == "cipher_suites":
            names = []
            for name, position in _strings(v, label, key):
                if name not in _CIPHERS and name not in _TLS13_CIPHERS and name not in _INSECURE_CIPHERS:
                    raise _fail(position, f"unrecognized cipher {name}")
                if name in _INSECURE_CIPHERS:
                    insecure_names.append(name)
                names.append(name)
            settings["cipher_suites"] = tuple(names)
        elif key == "curve_preferences":
            curves = []
            for name, position in _strings(v, label, key):
                if name not in _CURVES:
                    raise _fail(position, f"unrecognized curve preference {name}")
                if _CURVES[name] is None:
                    raise _fail(position, f"{label}.curve_preferences: {name} is not supported by jetraft "
                                          f"(its OpenSSL {ssl.OPENSSL_VERSION.split()[1]} has no such group)")
                curves.append(name)
            if len(curves) > 1:
                raise _fail(v.position, f"{label}.curve_preferences: jetraft can honour one curve only "
                                        "(Python's ssl module sets a single group); refused rather than ignored")
            settings["curve_preferences"] = tuple(curves)
        elif key == "pinned_certs":
            if v.kind != "array":
                raise _fail(v.position, "error parsing tls config, expected 'pinned_certs' to be a list of "
                                        "hex-encoded sha256 of DER encoded SubjectPublicKeyInfo")
            pins = set()
            for item in v.data:
                text = item.data.lower() if item.kind == "string" else str(item.data)
                if item.kind != "string" or not _PIN.fullmatch(text):
                    raise _fail(item.position, f"error parsing tls config, 'pinned_certs' key {text} does not look "
                                               "like hex-encoded sha256 of DER encoded SubjectPublicKeyInfo")
                pins.add(text)
            settings["pinned_certs"] = frozenset(pins)
        elif key in _REFUSED:
            harmless = _REFUSED[key]
            if harmless is not None and v.kind in ("boolean", "integer") and v.data == harmless:
                continue
            if key == "verify_cert_and_check_known_urls" and client_context:
                raise _fail(where, "verify_cert_and_check_known_urls not supported in this context")
            raise _fail(where, f"'{label}.{entry.key}' is not supported by jetraft; refused rather than ignored "
                               "(it matters for security)")
        elif not v.used:
            raise _fail(where, f'error parsing tls config, unknown field "{entry.key}"')
    if insecure_names and not settings.get("allow_insecure_cipher_suites"):
        raise _fail(value.position, "insecure cipher suites configured without 'allow_insecure_cipher_suites' "
                                    f"option set: {', '.join(insecure_names)}")
    for name in insecure_names:
        if _INSECURE_CIPHERS[name] is None:
            raise _fail(value.position, f"{label}.cipher_suites: {name} is not supported by jetraft "
                                        "(OpenSSL no longer offers it); refused rather than ignored")
    config = TLSConfig(**settings)
    check_files(config, value.position)
    return config


# -- contexts ----------------------------------------------------------------------------


def check_files(config: TLSConfig, position: Position) -> None:
    """Load the certificate, key and CA of ``config`` (opts.go GenTLSConfig) and discard
    them. Raises ConfigError at ``position`` with nats-server's wording when a file is
    missing, unreadable or not what it should be."""
    server_context(config, position)


def _base_context(config: TLSConfig, purpose: ssl.Purpose, position: Position) -> ssl.SSLContext:
    if config.cert_file and not config.key_file:
        raise _fail(position, "missing 'key_file' in TLS configuration")
    if config.key_file and not config.cert_file:
        raise _fail(position, "missing 'cert_file' in TLS configuration")
    if not config.cert_file:
        raise _fail(position, "TLS requires 'cert_file' and 'key_file': jetraft has no other source of "
                              "certificates (no 'cert_store')")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if purpose is ssl.Purpose.CLIENT_AUTH else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if config.min_version == "1.3" else ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION
    if config.cipher_suites:
        legacy = [_CIPHERS.get(n) or _INSECURE_CIPHERS.get(n) for n in config.cipher_suites if n not in _TLS13_CIPHERS]
        if legacy:
            try:
                ctx.set_ciphers(":".join(name for name in legacy if name))
            except ssl.SSLError as e:
                raise _fail(position, f"cipher_suites: OpenSSL refuses {legacy}: {e}") from None
        else:  # only TLS 1.3 suites named: Go then has no TLS 1.2 suite left
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if config.curve_preferences:
        ctx.set_ecdh_curve(_CURVES[config.curve_preferences[0]])
    for path in (config.cert_file, config.key_file):
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            reason = "no such file or directory" if isinstance(e, FileNotFoundError) else (e.strerror or str(e))
            raise _fail(position, f"error parsing X509 certificate/key pair: open {path}: {reason}") from None
    try:
        ctx.load_cert_chain(config.cert_file, config.key_file)
    except ssl.SSLError as e:
        text = str(e)
        if "KEY_VALUES_MISMATCH" in text:
            text = "private key does not match public key"
        elif "PEM" in text:
            text = f"{config.cert_file} and {config.key_file} are not a PEM certificate and its PEM private key ({text})"
        raise _fail(position, f"error parsing X509 certificate/key pair: {text}") from None
    except OSError as e:
        raise _fail(position, f"error parsing X509 certificate/key pair: {e.strerror or e}") from None
    if config.ca_file:
        try:
            with open(config.ca_file, "rb") as f:
                pem = f.read()
        except FileNotFoundError:
            raise _fail(position, f"open {config.ca_file}: no such file or directory") from None
        except OSError as e:
            raise _fail(position, f"open {config.ca_file}: {e.strerror or e}") from None
        try:
            ctx.load_verify_locations(cadata=pem.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError):
            raise _fail(position, "failed to parse root ca certificate") from None
    else:
        ctx.load_default_certs(purpose)
    return ctx


def server_context(config: TLSConfig, position: Position = Position("<tls>", 0, 0), *,
                   require_client_cert: bool | None = None) -> ssl.SSLContext:
    """A server-side context from ``config``, its files read now: TLS 1.2 or
    ``min_version`` at least, the ciphers and curve asked for, client certificates
    required and verified against ``ca_file`` when ``verify`` is set (or when
    ``require_client_cert`` says so: routes always require them, nats-server
    opts.go getTLSConfig). Raises ConfigError at ``position``."""
    ctx = _base_context(config, ssl.Purpose.CLIENT_AUTH, position)
    required = config.verify if require_client_cert is None else require_client_cert
    ctx.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_NONE
    return ctx


def client_context(config: TLSConfig, position: Position = Position("<tls>", 0, 0)) -> ssl.SSLContext:
    """A client-side context for a solicited route: presents ``cert_file`` and verifies the
    server's certificate and host name against ``ca_file`` (nats-server getTLSConfig sets
    RootCAs to the ClientCAs pool). Raises ConfigError at ``position``."""
    ctx = _base_context(config, ssl.Purpose.SERVER_AUTH, position)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = True
    return ctx
