"""jetraft-server's TLS flags, as nats-server's (main.go usage, opts.go ConfigureOptions and
overrideTLS): ``--tls``, ``--tlscert``, ``--tlskey``, ``--tlscacert``, ``--tlsverify`` build
the client TLS block from the flags; ``--tls=false`` turns the file's block off;
``-ms``/``--https_port`` serves monitoring over HTTPS."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tls_support import PKI

from jetraft.cli.server import cli, load


def files(pki: PKI) -> dict:
    return {"tlscert": str(pki.server.cert), "tlskey": str(pki.server.key)}


def test_flags_build_the_block(pki):
    cfg, _ = load(None, {"tls": "true", **files(pki), "tlscacert": str(pki.ca), "tlsverify": "true"})
    assert (cfg.tls.cert_file, cfg.tls.key_file, cfg.tls.ca_file) == (str(pki.server.cert), str(pki.server.key),
                                                                       str(pki.ca))
    assert cfg.tls.verify and cfg.tls.timeout == 2.0


def test_a_cert_flag_alone_enables_tls(pki):
    cfg, _ = load(None, files(pki))
    assert cfg.tls is not None and not cfg.tls.verify


def test_flags_replace_the_files_block_but_keep_its_timeout(pki, tmp_path):
    conf = tmp_path / "s.conf"
    conf.write_text(f"tls {{ cert_file: {json.dumps(str(pki.server2.cert))}, key_file: "
                    f"{json.dumps(str(pki.server2.key))}, timeout: 5, verify: true }}\n")
    cfg, _ = load(str(conf), files(pki))
    assert cfg.tls.cert_file == str(pki.server.cert) and cfg.tls.timeout == 5.0 and not cfg.tls.verify


def test_tls_false_turns_the_block_off(pki, tmp_path):
    conf = tmp_path / "s.conf"
    conf.write_text(f"tls {{ cert_file: {json.dumps(str(pki.server.cert))}, "
                    f"key_file: {json.dumps(str(pki.server.key))} }}\n")
    cfg, _ = load(str(conf), {"tls": "false"})
    assert cfg.tls is None


@pytest.mark.parametrize(("args", "message"), [
    (["--tls"], "TLS Server certificate must be present and valid"),
    (["--tlscert", "c.pem"], "TLS Server private key must be present and valid"),
    (["--tlsverify=maybe", "--tlscert", "c.pem", "--tlskey", "k.pem"], "invalid boolean value 'maybe' for -tlsverify"),
    (["--tlscert", "nope.pem", "--tlskey", "nope-key.pem"],
     "<command line>:0:0: error parsing X509 certificate/key pair: open nope.pem: no such file or directory"),
    (["-ms", "8443"], "<command line>:0:0: TLS cert and key required for HTTPS (a top-level tls block)"),
])
def test_bad_flags(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["-t", *args])
    assert result.exit_code == 1
    assert result.output.strip() == f"jetraft-server: {message}"


@pytest.mark.parametrize("spelling", [["-tls"], ["--tls"], ["-tls=true"], ["--tls=1"]])
def test_go_style_spellings(pki, spelling):
    result = CliRunner().invoke(cli, ["-t", *spelling, "-tlscert", str(pki.server.cert),
                                      "-tlskey", str(pki.server.key), "-ms", "8443"])
    assert result.exit_code == 0, result.output
    assert "is valid" in result.output


def test_https_port_flag(pki):
    cfg, _ = load(None, {**files(pki), "https_port": 8443})
    assert cfg.https_port == 8443
