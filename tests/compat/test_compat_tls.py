"""TLS as nats-py and raw sockets see it, against jetraft and nats-server side by side.

Certificates come from tests/tls_support.py (a CA, a server certificate for localhost and
127.0.0.1, client certificates, and bad ones: another CA's, an expired one). Each test
runs on both servers and asserts what a client sees: INFO fields, a working connection,
a refused one (the exception nats-py raises, or the socket closing), the certificate the
server presents.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import time
import urllib.error
import urllib.request

import pytest
from compat_support import assert_usable, close_all, connect, run, server_info
from servers import free_port
from tls_support import PKI, CertPair, client_context, der_serial, cert_serial, spki_sha256


def tls_block(pki: PKI, cert: CertPair | None = None, **options: object) -> str:
    """A top-level ``tls`` block with the server certificate and the test CA."""
    cert = cert or pki.server
    lines = [f"  cert_file: {json.dumps(str(cert.cert))}", f"  key_file: {json.dumps(str(cert.key))}",
             f"  ca_file: {json.dumps(str(pki.ca))}"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in options.items()]
    return "tls {\n" + "\n".join(lines) + "\n}\n"


def raw_info(address: tuple[str, int]) -> tuple[socket.socket, dict]:
    """Connect a plain socket and read the INFO line (INFO is sent before TLS)."""
    sock = socket.create_connection(address, timeout=10)
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        assert chunk, f"closed before INFO; got {buf!r}"
        buf += chunk
    op, _, body = buf.partition(b" ")
    assert op == b"INFO", buf
    return sock, json.loads(body)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (10 s deadline per read)."""
    out = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def tls_socket(address: tuple[str, int], ctx: ssl.SSLContext, *, first: bool = False) -> ssl.SSLSocket:
    """A TLS socket to the server: INFO read in plain text first unless ``first``."""
    if first:
        sock = socket.create_connection(address, timeout=10)
    else:
        sock, _ = raw_info(address)
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def test_nats_py_over_tls(start_server, pki):
    """nats-py connects with the CA, publishes and subscribes over TLS; INFO says tls_required."""
    srv = start_server(tls_block(pki))

    async def scenario():
        nc = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki))
        assert server_info(nc).get("tls_required") is True
        assert "tls_verify" not in server_info(nc)
        await assert_usable(nc)
        await nc.close()

    run(scenario)


@pytest.mark.parametrize("verify", [False, True], ids=["tls", "verify"])
def test_info_fields(start_server, pki, verify):
    """INFO, sent before the handshake: tls_required true, tls_verify only with verify,
    never tls_available (no allow_non_tls)."""
    srv = start_server(tls_block(pki, verify=verify))
    sock, info = raw_info(srv.address)
    sock.close()
    assert info.get("tls_required") is True
    assert info.get("tls_verify") is (True if verify else None)
    assert "tls_available" not in info


def test_plaintext_client_is_closed(start_server, pki):
    """A client that answers INFO with plain CONNECT and PING gets nothing more: the
    connection is closed without -ERR or PONG (Go's TLS layer rejects the first record)."""
    srv = start_server(tls_block(pki))
    sock, _ = raw_info(srv.address)
    sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
    assert read_until_closed(sock) == b""
    sock.close()


def test_unfinished_handshake_is_closed(start_server, pki):
    """A client that reads INFO and never starts (or finishes) the handshake is closed once
    the TLS timeout passes; nothing but INFO was ever sent to it."""
    srv = start_server(tls_block(pki, timeout=0.5))
    sock, _ = raw_info(srv.address)
    sock.sendall(b"\x16\x03\x01")  # the start of a TLS record, never finished
    assert read_until_closed(sock) == b""
    sock.close()


def test_tls_first(start_server, pki):
    """handshake_first: nats-py with tls_handshake_first=True connects and INFO comes over
    TLS; a client that speaks plain text first is closed without any INFO."""
    srv = start_server(tls_block(pki, handshake_first=True))

    async def scenario():
        nc = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki), tls_handshake_first=True)
        assert server_info(nc).get("tls_required") is True
        await assert_usable(nc)
        await nc.close()

    run(scenario)
    sock = socket.create_connection(srv.address, timeout=10)
    sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
    assert read_until_closed(sock) == b""
    sock.close()
    with tls_socket(srv.address, client_context(pki), first=True) as tls:
        assert tls.recv(4096).startswith(b"INFO ")


def test_tls_first_with_fallback(start_server, pki):
    """handshake_first with a fallback delay: a TLS-first client connects at once, and a
    client that waits gets INFO in plain text after the delay, then does the handshake."""
    srv = start_server(tls_block(pki, handshake_first="100ms"))

    async def scenario():
        first = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki), tls_handshake_first=True)
        later = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki))
        assert server_info(later).get("tls_required") is True
        await assert_usable(first)
        await assert_usable(later)
        await close_all(first, later)

    run(scenario)


def test_mutual_tls_with_a_good_certificate(start_server, pki):
    """verify: a client presenting a certificate from the CA connects and works."""
    srv = start_server(tls_block(pki, verify=True))

    async def scenario():
        nc = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki, pki.client))
        assert server_info(nc).get("tls_verify") is True
        await assert_usable(nc)
        await nc.close()

    run(scenario)


@pytest.mark.parametrize("which", ["none", "other_client", "expired_client"])
def test_mutual_tls_refuses_a_bad_certificate(start_server, pki, which):
    """verify: no client certificate, one from another CA, or an expired one: the handshake
    fails and the client never gets a usable connection."""
    srv = start_server(tls_block(pki, verify=True))
    cert = None if which == "none" else getattr(pki, which)
    ctx = client_context(pki, cert)
    sock, _ = raw_info(srv.address)
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            # TLS 1.3: the server judges the client certificate after the client's last
            # flight, so the refusal shows on the first read
            tls.sendall(b"PING\r\n")
            data = tls.recv(4096)
            if not data:
                raise ConnectionResetError("closed")
    sock.close()

    async def scenario():
        with pytest.raises(Exception):  # nats-py's error depends on where TLS broke
            nc = await connect(f"tls://127.0.0.1:{srv.port}", tls=ctx)
            await nc.flush(timeout=2)
            await nc.close()

    run(scenario)


def test_server_certificate_verified_by_the_client(start_server, pki):
    """A client trusting another CA refuses the server: the server's certificate is its
    configured one, not any other."""
    srv = start_server(tls_block(pki))
    sock, _ = raw_info(srv.address)
    with pytest.raises(ssl.SSLCertVerificationError):
        client_context(pki, ca=pki.other_ca).wrap_socket(sock, server_hostname="127.0.0.1")
    sock.close()


MAP_USERS = """
accounts {
  A { users = [ { user: "alice@example.com" } ] }
  B { users = [ { user: "CN=bob,OU=eng,O=Acme" }, { user: "carol", password: "carol-pw" } ] }
}
"""


def test_verify_and_map(start_server, pki):
    """verify_and_map: the client certificate names the user (its e-mail SAN for alice, its
    subject DN for bob), with no password; users land in their accounts; a certificate that
    names no user is refused with Authorization Violation, whatever CONNECT says."""
    srv = start_server(tls_block(pki, verify_and_map=True) + MAP_USERS)
    url = f"tls://127.0.0.1:{srv.port}"

    async def scenario():
        alice = await connect(url, tls=client_context(pki, pki.client))
        alice2 = await connect(url, tls=client_context(pki, pki.client))
        bob = await connect(url, tls=client_context(pki, pki.client_dn))
        seen_by_bob = await bob.subscribe("mapped")
        seen_by_alice = await alice2.subscribe("mapped")
        await bob.flush()
        await alice2.flush()
        await alice.publish("mapped", b"from alice")
        await alice.flush()
        msg = await seen_by_alice.next_msg(timeout=5)
        assert msg.data == b"from alice"
        await bob.flush()
        assert seen_by_bob.pending_msgs == 0  # other account
        await close_all(alice, alice2, bob)
        with pytest.raises(Exception, match="Authorization Violation"):
            nc = await connect(url, tls=client_context(pki, pki.server), user="carol", password="carol-pw")
            await nc.close()

    run(scenario)


def test_pinned_certs(start_server, pki):
    """pinned_certs: a verified client certificate whose key is not pinned is closed; the
    pinned one works."""
    pins = [spki_sha256(pki.client)]
    srv = start_server(tls_block(pki, verify=True, pinned_certs=pins))

    async def scenario():
        nc = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki, pki.client))
        await assert_usable(nc)
        await nc.close()
        with pytest.raises(Exception):
            nc = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki, pki.client_dn))
            await nc.flush(timeout=2)
            await nc.close()

    run(scenario)


def test_https_monitoring(start_server, pki):
    """https: monitoring over HTTPS with the tls block's certificate and no client
    certificate asked for; /varz says https_port; plain HTTP on that port gets no page."""
    port = free_port()
    srv = start_server(tls_block(pki, verify=True) + f"https: 127.0.0.1:{port}\n")
    ctx = client_context(pki)
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/varz", context=ctx, timeout=5) as resp:
                varz = json.loads(resp.read())
                break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert varz["https_port"] == port
    assert varz["http_port"] == 0
    assert varz["tls_required"] is True
    assert varz["tls_verify"] is True
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=5) as resp:
        assert resp.status == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, http_client_errors())):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5).read()


def http_client_errors() -> type[Exception]:
    import http.client

    return http.client.HTTPException


def presented_serial(address: tuple[str, int], pki: PKI) -> int:
    """The serial number of the certificate a new TLS connection is shown."""
    with tls_socket(address, client_context(pki)) as tls:
        return der_serial(tls.getpeercert(binary_form=True))


def test_reload_swaps_the_certificate(start_server, pki, server_kind):
    """SIGHUP with the tls block naming another certificate: new connections get it. A
    reload naming a missing file is refused, the server keeps serving the certificate it
    had, and (jetraft) reports the error as config_reload_failed."""
    srv = start_server(tls_block(pki))
    first, second = cert_serial(pki.server.pem()), cert_serial(pki.server2.pem())
    assert presented_serial(srv.address, pki) == first
    base = srv.config_path.read_text().split("tls {")[0]
    srv.config_path.write_text(base + tls_block(pki, pki.server2))
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while presented_serial(srv.address, pki) != second:
        assert time.monotonic() < deadline, "the reloaded certificate was never presented"
        time.sleep(0.05)
    missing = CertPair(pki.directory / "missing-cert.pem", pki.directory / "missing-key.pem")
    srv.config_path.write_text(base + tls_block(pki, missing))
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "missing-cert.pem" not in srv.output():
        assert time.monotonic() < deadline, "the failed reload was never reported"
        time.sleep(0.05)
    assert srv.alive()
    assert presented_serial(srv.address, pki) == second
    if server_kind == "jetraft":
        failures = [json.loads(line) for line in srv.output().splitlines()
                    if line.startswith("{") and '"config_reload_failed"' in line]
        assert failures and "missing-cert.pem" in failures[-1]["error"]

    async def scenario():
        nc = await connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(pki))
        await assert_usable(nc)
        await nc.close()

    run(scenario)
