"""The ``tls`` blocks (top level and ``cluster``), ``https``/``https_port``, and the ssl
contexts built from them: keys, defaults and error texts as nats-server server/opts.go
parseTLS/GenTLSConfig reads them; keys jetraft cannot honour refused by name; files that
are missing or wrong are errors when the configuration is loaded."""

from __future__ import annotations

import json
import ssl

import pytest
from tls_support import PKI

from jetraft.config import ConfigError, ServerConfig, TLSConfig, client_context, config_from_text, server_context


def block(pki: PKI, extra: str = "", *, cert=None, key=None, ca=None) -> str:
    cert = pki.server.cert if cert is None else cert
    key = pki.server.key if key is None else key
    files = f"cert_file: {json.dumps(str(cert))}, key_file: {json.dumps(str(key))}"
    if ca is not False:
        files += f", ca_file: {json.dumps(str(pki.ca if ca is None else ca))}"
    return f"tls {{ {files}{', ' + extra if extra else ''} }}"


def cfg(text: str) -> ServerConfig:
    return config_from_text(text, "s.conf")


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        cfg(text)
    return e.value


# -- reading -------------------------------------------------------------------------------


def test_defaults(pki):
    tls = cfg(block(pki)).tls
    assert tls == TLSConfig(cert_file=str(pki.server.cert), key_file=str(pki.server.key), ca_file=str(pki.ca))
    assert tls.timeout == 2.0 and tls.min_version == "1.2" and not tls.verify and not tls.handshake_first


def test_no_tls_block_means_plain_tcp():
    config = cfg("port: 4222")
    assert config.tls is None and config.https_port is None


def test_every_implemented_key(pki):
    tls = cfg(block(pki, 'verify: true, timeout: "1.5s", min_version: "1.3", handshake_first: true, '
                         'cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256], curve_preferences: [X25519], '
                         f'pinned_certs: ["{"AB" * 32}"]')).tls
    assert tls.verify and tls.timeout == 1.5 and tls.min_version == "1.3" and tls.handshake_first
    assert tls.handshake_first_fallback == 0.0
    assert tls.cipher_suites == ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",)
    assert tls.curve_preferences == ("X25519",)
    assert tls.pinned_certs == frozenset({"ab" * 32})


def test_verify_and_map_implies_verify(pki):
    tls = cfg(block(pki, "verify_and_map: true")).tls
    assert tls.verify and tls.verify_and_map


@pytest.mark.parametrize(("text", "seconds"), [("3", 3.0), ("0.25", 0.25), ('"500ms"', 0.5), ("0", 2.0)])
def test_timeout(pki, text, seconds):
    assert cfg(block(pki, f"timeout: {text}")).tls.timeout == seconds


@pytest.mark.parametrize(("text", "first", "fallback"), [
    ("true", True, 0.0), ("false", False, 0.0), ('"on"', True, 0.0), ('"off"', False, 0.0),
    ('"auto"', True, 0.05), ('"auto_fallback"', True, 0.05), ('"300ms"', True, 0.3),
])
def test_handshake_first(pki, text, first, fallback):
    tls = cfg(block(pki, f"handshake_first: {text}")).tls
    assert (tls.handshake_first, tls.handshake_first_fallback) == (first, fallback)


@pytest.mark.parametrize("alias", ["first", "immediate"])
def test_handshake_first_aliases(pki, alias):
    assert cfg(block(pki, f"{alias}: true")).tls.handshake_first


def test_handshake_first_invalid(pki):
    assert error(block(pki, 'handshake_first: "nope"')).message == 'field "handshake_first"\'s value "nope" is invalid'


@pytest.mark.parametrize(("text", "message"), [
    ('"1.1"', "error parsing tls config: unsupported TLS version: TLS 1.1"),
    ('"1.0"', "error parsing tls config: unsupported TLS version: TLS 1.0"),
    ('"2.0"', "error parsing tls config: unknown version: 2.0"),
    ("1.3", "error parsing tls config: 'min_version' wrong type: 1.3"),
])
def test_min_version_below_tls12_is_refused(pki, text, message):
    assert error(block(pki, f"min_version: {text}")).message == message


@pytest.mark.parametrize(("extra", "message"), [
    ("cipher_suites: [TLS_NOPE]", "unrecognized cipher TLS_NOPE"),
    ("cipher_suites: []", "error parsing tls config, 'cipher_suites' cannot be empty"),
    ("cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]",
     "insecure cipher suites configured without 'allow_insecure_cipher_suites' option set: TLS_RSA_WITH_AES_128_CBC_SHA"),
    ("cipher_suites: [TLS_RSA_WITH_RC4_128_SHA], allow_insecure_cipher_suites: true",
     "tls.cipher_suites: TLS_RSA_WITH_RC4_128_SHA is not supported by jetraft (OpenSSL no longer offers it); "
     "refused rather than ignored"),
    ("curve_preferences: [CurveP999]", "unrecognized curve preference CurveP999"),
    ("curve_preferences: [X25519, CurveP256]",
     "tls.curve_preferences: jetraft can honour one curve only (Python's ssl module sets a single group); "
     "refused rather than ignored"),
    ('pinned_certs: ["abc"]', "error parsing tls config, 'pinned_certs' key abc does not look like hex-encoded "
                              "sha256 of DER encoded SubjectPublicKeyInfo"),
    ("verify: 1", "error parsing tls config, expected 'verify' to be a boolean"),
    ("cert_store: WindowsCurrentUser", "'tls.cert_store' is not supported by jetraft; refused rather than ignored "
                                       "(it matters for security)"),
    ("bogus: 1", 'error parsing tls config, unknown field "bogus"'),
])
def test_bad_values(pki, extra, message):
    assert error(block(pki, extra)).message == message


def test_post_quantum_curve_is_refused(pki):
    message = error(block(pki, "curve_preferences: [X25519MLKEM768]")).message
    assert message.startswith("tls.curve_preferences: X25519MLKEM768 is not supported by jetraft")


def test_tls13_only_ciphers_disable_tls12(pki):
    tls = cfg(block(pki, "cipher_suites: [TLS_AES_128_GCM_SHA256]")).tls
    assert server_context(tls).minimum_version == ssl.TLSVersion.TLSv1_3


def test_insecure_cipher_with_permission(pki):
    tls = cfg(block(pki, "cipher_suites: [TLS_RSA_WITH_AES_128_GCM_SHA256], allow_insecure_cipher_suites: true")).tls
    names = {c["name"] for c in server_context(tls).get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"AES128-GCM-SHA256"}


@pytest.mark.parametrize("key", [
    "insecure: true", "ocsp_peer: true", "ocsp_peer { verify: true }", "cert_store: x", "cert_match_by: subject",
    "cert_match: x", "ca_certs_match: [x]", "cert_match_skip_invalid: true", "certs: []", "certificates: []",
    "connection_rate_limit: 10",
])
def test_keys_jetraft_cannot_honour_are_refused(pki, key):
    name = key.split(":")[0].split(" ")[0]
    e = error(block(pki, key))
    assert e.message == f"'tls.{name}' is not supported by jetraft; refused rather than ignored (it matters for security)"
    assert e.line == 1 and e.column > 1


@pytest.mark.parametrize("key", ["insecure: false", "ocsp_peer: false", "connection_rate_limit: 0",
                                 "verify_cert_and_check_known_urls: false"])
def test_refused_keys_set_to_off_are_accepted(pki, key):
    assert cfg(block(pki, key)).tls is not None


def test_verify_cert_and_check_known_urls(pki):
    assert error(block(pki, "verify_cert_and_check_known_urls: true")).message == \
        "verify_cert_and_check_known_urls not supported in this context"
    text = "cluster { name: c, " + block(pki, "verify_cert_and_check_known_urls: true") + " }"
    assert error(text).message == ("'cluster.tls.verify_cert_and_check_known_urls' is not supported by jetraft; "
                                   "refused rather than ignored (it matters for security)")


# -- files -----------------------------------------------------------------------------------


def test_missing_cert_file(pki, tmp_path):
    e = error(block(pki, cert=tmp_path / "nope.pem"))
    assert e.message == f"error parsing X509 certificate/key pair: open {tmp_path / 'nope.pem'}: no such file or directory"
    assert (e.file, e.line, e.column) == ("s.conf", 1, 5)


def test_missing_key_file(pki, tmp_path):
    e = error(block(pki, key=tmp_path / "nope.pem"))
    assert e.message == f"error parsing X509 certificate/key pair: open {tmp_path / 'nope.pem'}: no such file or directory"


def test_unreadable_key_file(tmp_path, pki):
    key = tmp_path / "key.pem"
    key.mkdir()  # cannot be read whoever runs the test (root reads a mode-0 file)
    assert error(block(pki, key=key)).message == \
        f"error parsing X509 certificate/key pair: open {key}: Is a directory"


def test_key_of_another_certificate(pki):
    assert error(block(pki, key=pki.client.key)).message == \
        "error parsing X509 certificate/key pair: private key does not match public key"


def test_certificate_that_is_not_pem(pki, tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    assert error(block(pki, cert=junk)).message.startswith("error parsing X509 certificate/key pair: ")


def test_missing_and_bad_ca_file(pki, tmp_path):
    assert error(block(pki, ca=tmp_path / "ca.pem")).message == f"open {tmp_path / 'ca.pem'}: no such file or directory"
    assert error(block(pki, ca=pki.server.key)).message == "failed to parse root ca certificate"


@pytest.mark.parametrize(("text", "message"), [
    ('tls { cert_file: "x.pem" }', "missing 'key_file' in TLS configuration"),
    ('tls { key_file: "x.pem" }', "missing 'cert_file' in TLS configuration"),
    ("tls { verify: true }", "TLS requires 'cert_file' and 'key_file': jetraft has no other source of certificates "
                             "(no 'cert_store')"),
])
def test_certificate_and_key_go_together(text, message):
    assert error(text).message == message


def test_files_are_read_at_load_not_kept(pki, tmp_path):
    """The configuration holds paths: a context built later reads the files as they are then."""
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_bytes(pki.server.cert.read_bytes())
    key.write_bytes(pki.server.key.read_bytes())
    tls = cfg(block(pki, cert=cert, key=key)).tls
    key.unlink()
    with pytest.raises(ConfigError, match="no such file or directory"):
        server_context(tls)


# -- contexts ----------------------------------------------------------------------------------


def test_server_context(pki):
    plain = server_context(cfg(block(pki)).tls)
    assert plain.verify_mode == ssl.CERT_NONE and plain.minimum_version == ssl.TLSVersion.TLSv1_2
    verify = server_context(cfg(block(pki, "verify: true")).tls)
    assert verify.verify_mode == ssl.CERT_REQUIRED
    assert server_context(cfg(block(pki)).tls, require_client_cert=True).verify_mode == ssl.CERT_REQUIRED


def test_client_context_for_routes(pki):
    ctx = client_context(cfg(block(pki)).tls)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


# -- where the blocks go -------------------------------------------------------------------------


def test_cluster_tls(pki):
    config = cfg("cluster { name: c, port: 6222, " + block(pki, "timeout: 3") + " }")
    assert config.cluster.tls.timeout == 3.0 and config.tls is None


def test_https(pki):
    config = cfg(block(pki) + "\nhttps: 127.0.0.5:8443")
    assert (config.https_port, config.http_host, config.http_port) == (8443, "127.0.0.5", None)
    assert cfg(block(pki) + "\nhttps_port: 8443").https_port == 8443


def test_https_needs_tls():
    e = error("https_port: 8443")
    assert e.message == "TLS cert and key required for HTTPS (a top-level tls block)"
    assert (e.line, e.column) == (1, 13)


def test_http_and_https_exclude_each_other(pki):
    assert error(block(pki) + "\nhttp_port: 8222\nhttps_port: 8443").message == \
        "can't specify both HTTP (8222) and HTTPs (8443) ports"


def test_tls_is_not_a_warning(pki):
    assert cfg(block(pki)).warnings == ()
