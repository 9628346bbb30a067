"""The ``jetraft`` admin CLI against servers that require TLS, side by side for jetraft and
nats-server: the ``nats`` CLI's --tlsca, --tlscert/--tlskey, --tlsfirst (and NATS_CA,
NATS_CERT, NATS_KEY, a context's ca/cert/key/tls_first), as a user runs them, and the one
clean error line each mistake gets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from jetraft.cli.admin import cli
from jetraft.cli.admin.groups import GLOBAL_FLAGS, GLOBAL_VALUED, hoist_global_options
from tls_support import PKI

BIN = Path(sys.executable).parent / "jetraft"


def tls_block(pki: PKI, **options: object) -> str:
    lines = [f"  cert_file: {json.dumps(str(pki.server.cert))}",
             f"  key_file: {json.dumps(str(pki.server.key))}",
             f"  ca_file: {json.dumps(str(pki.ca))}"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in options.items()]
    return "tls {\n" + "\n".join(lines) + "\n}\n"


def env(tmp_path: Path, **extra: str | None) -> dict[str, str | None]:
    return {"NATS_URL": None, "NATS_CONTEXT": None, "NATS_CA": None, "NATS_CERT": None,
            "NATS_KEY": None, "XDG_CONFIG_HOME": str(tmp_path / "config"), **extra}


def run(tmp_path: Path, *args: str, **extra: str | None):
    argv = hoist_global_options(["--timeout", "5", *args], GLOBAL_VALUED, GLOBAL_FLAGS)
    return CliRunner().invoke(cli, argv, env=env(tmp_path, **extra), catch_exceptions=False)


def error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("nats: error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_tlsca_verifies_the_server_and_without_it_the_error_says_so(start_server, pki, tmp_path):
    srv = start_server(tls_block(pki))
    ok = run(tmp_path, "-s", srv.url, "--tlsca", str(pki.ca), "pub", "t.1", "hi")
    assert ok.exit_code == 0 and 'Published 2 bytes to "t.1"' in ok.stdout, ok.stderr
    # options after the command, as with the nats CLI
    after = run(tmp_path, "pub", "t.2", "hi", "-s", srv.url, "--tlsca", str(pki.ca))
    assert after.exit_code == 0, after.stderr
    by_env = run(tmp_path, "-s", srv.url, "pub", "t.3", "hi", NATS_CA=str(pki.ca))
    assert by_env.exit_code == 0, by_env.stderr
    untrusted = run(tmp_path, "-s", srv.url, "--tlsca", str(pki.other_ca), "pub", "t.4", "hi")
    assert untrusted.exit_code == 1
    assert "TLS: the server's certificate is not trusted" in error_line(untrusted.stderr)


def test_a_server_that_requires_client_certificates_gets_tlscert_and_tlskey(start_server, pki, tmp_path):
    srv = start_server(tls_block(pki, verify=True))
    ca = ["-s", srv.url, "--tlsca", str(pki.ca)]
    ok = run(tmp_path, *ca, "--tlscert", str(pki.client.cert), "--tlskey", str(pki.client.key),
             "pub", "t.1", "hi")
    assert ok.exit_code == 0, ok.stderr
    by_env = run(tmp_path, *ca, "pub", "t.2", "hi", NATS_CERT=str(pki.client.cert),
                 NATS_KEY=str(pki.client.key))
    assert by_env.exit_code == 0, by_env.stderr
    without = run(tmp_path, *ca, "pub", "t.3", "hi")
    assert without.exit_code == 1
    # TLS 1.3: the server's refusal may come during the connect or just after it
    line = error_line(without.stderr)
    assert (line.startswith(f"nats: error: could not connect to {srv.url}")
            or line == "nats: error: the connection to the server was closed"), line
    half = run(tmp_path, *ca, "--tlscert", str(pki.client.cert), "pub", "t.4", "hi")
    assert half.exit_code == 1
    assert "give both --tlscert and --tlskey" in error_line(half.stderr)


def test_tlsfirst_for_a_server_that_wants_the_handshake_first(start_server, pki, tmp_path):
    srv = start_server(tls_block(pki, handshake_first=True))
    ok = run(tmp_path, "-s", srv.url, "--tlsca", str(pki.ca), "--tlsfirst", "pub", "t.1", "hi")
    assert ok.exit_code == 0 and 'Published 2 bytes to "t.1"' in ok.stdout, ok.stderr


def test_a_context_gives_ca_cert_key_and_tls_first(start_server, pki, tmp_path):
    srv = start_server(tls_block(pki, verify=True, handshake_first=True))
    ctx = {"url": srv.url, "ca": str(pki.ca), "cert": str(pki.client.cert),
           "key": str(pki.client.key), "tls_first": True}
    path = tmp_path / "ctx.json"
    path.write_text(json.dumps(ctx))
    ok = run(tmp_path, "--context-file", str(path), "pub", "t.1", "hi")
    assert ok.exit_code == 0, ok.stderr
    # a flag wins over the context
    wrong_ca = run(tmp_path, "--context-file", str(path), "--tlsca", str(pki.other_ca), "pub", "t.2", "hi")
    assert wrong_ca.exit_code == 1
    assert "TLS: the server's certificate is not trusted" in error_line(wrong_ca.stderr)


def test_a_missing_file_is_named_before_connecting(tmp_path):
    result = subprocess.run([str(BIN), "--tlsca", str(tmp_path / "nope.pem"), "stream", "ls"],
                            capture_output=True, text=True, timeout=30,
                            env={k: v for k, v in env(tmp_path).items() if v is not None}
                            | {"PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    line = error_line(result.stderr)
    assert "--tlsca" in line and "does not exist" in line and line.endswith(", try --help"), line


def test_the_help_lists_the_nats_cli_tls_flags():
    text = CliRunner().invoke(cli, ["--help"]).stdout
    for flag in ("--tlscert", "--tlskey", "--tlsca", "--tlsfirst"):
        assert flag in text
