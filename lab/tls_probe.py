"""What a client, a would-be route and a monitoring user meet on a server that requires TLS,
seen from outside with the standard library (no NATS client): used by tests/infra (on the
lab's hosts) and tests/appliance (on servers configured by the role).

A NATS server sends its INFO in plain text first; a client then upgrades the same
connection to TLS (nats-server server/client.go, ``tls_required`` in INFO). On the route
port with cluster TLS the handshake comes first, before any INFO (nats-server 2.15 and
jetraft alike: ``info_first=False``), and the server asks the route for a certificate
signed by the cluster's CA (mutual TLS; nats-server server/opts.go forces it on cluster
TLS).

Every function takes a deadline in seconds and raises ProbeError when what it looks for
does not happen.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from dataclasses import dataclass


class ProbeError(AssertionError):
    """The server did not behave as the probe expected; the message says what it did."""


@dataclass
class Presented:
    """The certificate a server presented: its DNS names and IP addresses."""

    dns_names: list[str]
    ip_addresses: list[str]
    subject: str


def _info(sock: socket.socket, deadline: float) -> dict:
    """Read the server's plain-text INFO line; its JSON."""
    data = b""
    while not data.endswith(b"\r\n"):
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        chunk = sock.recv(4096)
        if not chunk:
            raise ProbeError(f"the server closed the connection before its INFO: {data[:200]!r}")
        data += chunk
        if len(data) > 1 << 20:
            raise ProbeError("no INFO line within 1 MiB")
    if not data.startswith(b"INFO "):
        raise ProbeError(f"the server's first line is not INFO: {data[:200]!r}")
    return json.loads(data[5:].strip())


def _context(ca_file: str, cert: tuple[str, str] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def _presented(tls: ssl.SSLSocket) -> Presented:
    peer = tls.getpeercert() or {}
    sans = peer.get("subjectAltName", ())
    subject = ", ".join(f"{k}={v}" for rdn in peer.get("subject", ()) for k, v in rdn)
    return Presented(sorted(v for k, v in sans if k == "DNS"),
                     sorted(v.rstrip("\n") for k, v in sans if k == "IP Address"), subject)


def nats_handshake(address: str, port: int, ca_file: str, *, server_name: str | None = None,
                   cert: tuple[str, str] | None = None, info_first: bool = True,
                   timeout: float = 10.0) -> Presented:
    """Connect, read INFO (which must say ``tls_required``) unless not ``info_first``,
    upgrade to TLS verifying the server against ``ca_file`` for ``server_name`` (default
    ``address``), optionally showing ``cert`` (certificate file, key file); returns what the
    server presented. Raises ProbeError (or ssl.SSLCertVerificationError for a server the CA
    does not vouch for)."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((address, port), timeout=timeout) as sock:
        if info_first:
            info = _info(sock, deadline)
            if not info.get("tls_required"):
                raise ProbeError(f"{address}:{port} does not require TLS: INFO {info}")
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        with _context(ca_file, cert).wrap_socket(sock, server_hostname=server_name or address) as tls:
            return _presented(tls)


def plaintext_client_refused(address: str, port: int, *, timeout: float = 10.0) -> str:
    """A client that ignores ``tls_required`` and sends CONNECT and PING in plain text must
    never get PONG: returns what it got instead (an -ERR line, or the connection closed).
    Raises ProbeError on PONG or when the server neither answers nor closes in time."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((address, port), timeout=timeout) as sock:
        _info(sock, deadline)
        sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false}\r\nPING\r\n')
        got = b""
        while time.monotonic() < deadline:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = sock.recv(4096)
            except (ConnectionResetError, BrokenPipeError) as exc:
                return f"connection reset ({exc.__class__.__name__}) after {got[:200]!r}"
            except socket.timeout:
                break
            if not chunk:
                return f"closed after {got[:200]!r}"
            got += chunk
            if b"PONG" in got:
                raise ProbeError(f"{address}:{port} answered a plain-text client: {got[:200]!r}")
        raise ProbeError(f"{address}:{port} neither refused nor closed a plain-text client "
                         f"within {timeout:g} s: {got[:200]!r}")


def route_refused_without_certificate(address: str, port: int, ca_file: str, *,
                                      info_first: bool = False, timeout: float = 10.0) -> str:
    """A route that upgrades to TLS without a client certificate must be refused: the
    handshake fails, or the server's first record is an alert or the end of the connection.
    Returns how it was refused; raises ProbeError when the connection stays usable for
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((address, port), timeout=timeout) as sock:
        if info_first:
            _info(sock, deadline)
        ctx = _context(ca_file, None)
        ctx.check_hostname = False          # the route URL may not be a name in the cert
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            tls = ctx.wrap_socket(sock, server_hostname=address)
        except (ssl.SSLError, OSError) as exc:
            return f"handshake failed: {exc}"
        with tls:
            # TLS 1.3: the server judges the client's (empty) certificate after the
            # client's handshake is done; its verdict is the next record.
            try:
                tls.sendall(b"PING\r\n")
                while time.monotonic() < deadline:
                    tls.settimeout(max(0.05, deadline - time.monotonic()))
                    if not tls.recv(4096):
                        return "closed after the handshake"
            except ssl.SSLError as exc:
                return f"alert after the handshake: {exc}"
            except socket.timeout:
                pass
            except OSError as exc:
                return f"connection ended: {exc}"
        raise ProbeError(f"{address}:{port} kept a route with no client certificate open for "
                         f"{timeout:g} s")


def https_get(address: str, port: int, path: str, ca_file: str, *,
              cert: tuple[str, str] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET ``path`` over https, verifying the server against ``ca_file`` for ``address``
    (a name or an address the certificate must carry); (status, body)."""
    import http.client

    conn = http.client.HTTPSConnection(address, port, context=_context(ca_file, cert),
                                       timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def plain_http_refused(address: str, port: int, path: str = "/healthz", *,
                       timeout: float = 10.0) -> str:
    """A plain http GET must get no monitoring answer: returns what it got instead (a TLS
    alert, the connection closed or reset, or an HTTP error status as Go's https server
    gives: 400 "Client sent an HTTP request to an HTTPS server"). Raises ProbeError on a
    2xx or 3xx answer."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((address, port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n".encode())
        got = b""
        while time.monotonic() < deadline:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = sock.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                return f"connection reset after {got[:60]!r}"
            except socket.timeout:
                break
            if not chunk:
                break
            got += chunk
        if got.startswith(b"HTTP/"):
            status = got.split(b" ", 2)[1] if got.count(b" ") >= 1 else b"?"
            if not (status.isdigit() and int(status) >= 400):
                raise ProbeError(f"{address}:{port} answered plain http: {got[:200]!r}")
            return f"HTTP {status.decode()}: {got[:120]!r}"
        return f"no HTTP answer: {got[:60]!r}"
