"""Configuration keys jetraft does not implement are refused, not ignored (fail closed),
side by side with nats-server: the same file that nats-server accepts (it implements the
key) makes ``jetraft-server -t`` exit non-zero naming the key and its file:line:col, and
the operator-mode file without JWTs the issue describes makes both servers refuse to start
(jetraft used to start it with no authentication at all)."""

from __future__ import annotations

import base64
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from servers import binary, free_port

REFUSED = "not supported by jetraft"


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum of an nkey (nats-io/nkeys crc16.go)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


def user_nkey() -> str:
    """A fresh public user nkey ("U..."), as nats-io/nkeys encodes one: prefix byte
    20 << 3, the ed25519 public key, CRC-16 little-endian, base32 without padding."""
    public = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    raw = bytes([20 << 3]) + public
    raw += _crc16(raw).to_bytes(2, "little")
    return base64.b32encode(raw).decode().rstrip("=")


def check(kind: str, conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary(kind)), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)


#: (case id, configuration, the key jetraft names, its line:column in jetraft's 1-based columns)
CASES = [
    ("resolver", "resolver: MEMORY\n", "resolver", "1:1"),
    ("leafnodes", "leafnodes { port: -1 }\n", "leafnodes", "1:1"),
    ("gateway", "gateway { name: g, port: -1 }\n", "gateway", "1:1"),
    ("websocket", "websocket { port: -1, no_tls: true }\n", "websocket", "1:1"),
    ("mqtt", "server_name: s\njetstream { store_dir: @STORE@ }\nmqtt { port: -1 }\n", "mqtt", "3:1"),
    ("nkey-user", "accounts { A { users: [ { nkey: @NKEY@ } ] } }\n", "accounts.A.users[0].nkey", "1:27"),
    ("account-exports", 'accounts {\n  A { exports: [ { stream: "a.>" } ] }\n}\n', "accounts.A.exports", "2:7"),
    ("account-imports",
     'accounts {\n  B { imports: [ { stream: { account: A, subject: "a.>" } } ] }\n  A { exports: [ { stream: "a.>" } ] }\n}\n',
     "accounts.B.imports", "2:7"),
    ("jetstream-key", 'jetstream {\n  store_dir: @STORE@\n  key: "s3cr3t"\n}\n', "jetstream.key", "3:3"),
    ("jetstream-cipher", 'jetstream {\n  store_dir: @STORE@\n  key: "s3cr3t"\n  cipher: aes\n}\n', "jetstream.", None),
    ("cluster-pool-size", "server_name: s\ncluster { name: c, port: -1, pool_size: 5 }\n", "cluster.pool_size", "2:30"),
]


# no_server: both binaries only check the file (-t) and exit; make check runs it.
@pytest.mark.no_server
@pytest.mark.parametrize(("text", "key", "where"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_key_nats_server_implements_is_refused_by_jetraft(tmp_path, text, key, where):
    conf = tmp_path / "server.conf"
    conf.write_text(text.replace("@STORE@", str(tmp_path / "store")).replace("@NKEY@", user_nkey()))

    nats = check("nats-server", conf)
    assert nats.returncode == 0, f"nats-server should accept this file: {nats.stdout}{nats.stderr}"

    jetraft = check("jetraft", conf)
    assert jetraft.returncode != 0
    first = jetraft.stderr.strip().splitlines()[0]
    assert REFUSED in first
    if where is None:
        assert re.search(rf"{re.escape(str(conf))}:\d+:\d+: '{re.escape(key)}", first), first
    else:
        assert f"{conf}:{where}: '{key}'" in first, first


@pytest.mark.no_server
def test_unknown_top_level_key_is_refused_by_both(tmp_path):
    """nats-server refuses an unknown top-level key (opts.go unknownConfigFieldErr); so
    does jetraft: a misspelt ``authorization`` must not leave the server open."""
    conf = tmp_path / "server.conf"
    conf.write_text("port: 4222\nauthorisation { user: u, password: p }\n")
    nats, jetraft = check("nats-server", conf), check("jetraft", conf)
    assert nats.returncode != 0 and 'unknown field "authorisation"' in nats.stderr
    assert jetraft.returncode != 0 and f"{conf}:2:1: unknown field 'authorisation'" in jetraft.stderr


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _start_and_wait_for_exit(kind: str, conf: Path, port: int, deadline_s: float = 20.0) -> tuple[int, str, bool]:
    """Start ``kind`` with ``conf``; return (exit code, stderr, whether the client port
    ever accepted a connection) once it exits. Fails if it still runs at the deadline."""
    proc = subprocess.Popen([str(binary(kind)), "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    served = False
    try:
        deadline = time.monotonic() + deadline_s
        while proc.poll() is None and time.monotonic() < deadline:
            served = served or _listening(port)
            time.sleep(0.02)
        if proc.poll() is None:
            pytest.fail(f"{kind} started with an operator and no JWT (serving: {served})")
        return proc.returncode, proc.stderr.read() if proc.stderr else "", served
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.parametrize("kind", ["nats-server", "jetraft"])
def test_operator_without_jwt_refuses_to_start(tmp_path, kind):
    """The issue's file: operator mode with a resolver but no operator JWT. nats-server
    refuses to start; jetraft used to start and answer an anonymous client's PING."""
    port = free_port()
    conf = tmp_path / "server.conf"
    conf.write_text(f"listen: 127.0.0.1:{port}\noperator: {tmp_path / 'op.jwt'}\nresolver: MEMORY\n")
    code, stderr, served = _start_and_wait_for_exit(kind, conf, port)
    assert code != 0
    assert not served
    if kind == "nats-server":
        assert "error parsing operator JWT" in stderr
    else:
        assert f"{conf}:2:1: 'operator' is {REFUSED}" in stderr
