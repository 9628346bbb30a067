"""jetraft.net.transport.tls: handshakes on trio streams, writing through a TLS stream without
awaiting (records in order, a partial write's rest sent first), reading every record already
received, and the user a client certificate maps to (nats-server auth.go
checkClientTLSCertSubject order)."""

from __future__ import annotations

import socket

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from tls_support import PKI

from jetraft.config import TLSConfig, client_context, server_context
from jetraft.net.transport.tls import (
    BACKLOG,
    NOT_NOW,
    WRITTEN,
    HandshakeFailed,
    certificate_user,
    client_handshake,
    direct_write,
    has_backlog,
    read_buffered,
    send_backlog,
    server_handshake,
    socket_fd,
)


def tls_config(pki: PKI, **options) -> TLSConfig:
    return TLSConfig(cert_file=str(pki.server.cert), key_file=str(pki.server.key), ca_file=str(pki.ca), **options)


async def pair(pki: PKI, *, sndbuf: int | None = None) -> tuple[trio.SSLStream, trio.SSLStream]:
    """(server side, client side) of a TLS connection over a socket pair."""
    a, b = trio.socket.socketpair()
    if sndbuf is not None:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
    config = tls_config(pki)
    out: dict[str, trio.SSLStream] = {}

    async def serve():
        out["server"] = await server_handshake(trio.SocketStream(a), server_context(config))

    async def dial():
        out["client"] = await client_handshake(trio.SocketStream(b), client_context(config), "localhost")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(dial)
    return out["server"], out["client"]


async def receive_exactly(stream: trio.SSLStream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = await stream.receive_some(65536)
        assert chunk, f"closed after {len(data)} of {n} bytes"
        data += chunk
    return data


async def test_direct_write_keeps_records_in_order(pki):
    server, client = await pair(pki)
    fd = socket_fd(server)
    # TLS 1.3: the server's session tickets wait for its first send; until then, not now
    assert direct_write(server, fd, b"early") == NOT_NOW
    await server.send_all(b"first ")
    assert direct_write(server, fd, b"second ") == WRITTEN
    await server.send_all(b"third")
    assert await receive_exactly(client, 18) == b"first second third"


async def test_a_partial_direct_write_is_finished_first(pki):
    server, client = await pair(pki, sndbuf=4096)
    await server.send_all(b"x")
    assert await receive_exactly(client, 1) == b"x"
    fd = socket_fd(server)
    big = bytes(range(256)) * 4096  # 1 MiB: more than the socket takes at once
    assert direct_write(server, fd, big) == BACKLOG
    assert has_backlog(server)
    assert direct_write(server, fd, b"later") == NOT_NOW  # never ahead of the backlog

    async def sender():
        await send_backlog(server)
        await server.send_all(b"after")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        received = await receive_exactly(client, len(big) + 5)
    assert received == big + b"after"
    assert not has_backlog(server)


async def test_read_buffered_returns_every_complete_record(pki):
    server, client = await pair(pki)
    await server.send_all(b"!")  # the tickets out of the way
    await receive_exactly(client, 1)
    for part in (b"one ", b"two ", b"three"):
        await client.send_all(part)  # a record each
    first = await server.receive_some(65536)
    while len(first) < 4:
        first += await server.receive_some(65536)
    rest = b""
    with trio.fail_after(5):
        while len(first + rest) < 13:
            rest += read_buffered(server, 65536) or await server.receive_some(65536)
    assert first + rest == b"one two three"
    assert read_buffered(server, 65536) == b""  # nothing more: returns at once


async def test_plain_text_is_refused_without_a_byte_sent(pki):
    a, b = trio.socket.socketpair()
    await b.send(b"CONNECT {}\r\n")
    raw = trio.SocketStream(a)
    with pytest.raises(HandshakeFailed, match="does not look like a TLS handshake"):
        await server_handshake(raw, server_context(tls_config(pki)))
    await raw.aclose()
    assert await b.recv(100) == b""  # closed, and nothing (no alert) was sent before


async def test_client_certificate_required(pki):
    a, b = trio.socket.socketpair()
    config = tls_config(pki)
    failures = []

    async def serve():
        raw = trio.SocketStream(a)
        try:
            await server_handshake(raw, server_context(config, require_client_cert=True))
        except HandshakeFailed as e:
            failures.append(str(e))
        await raw.aclose()

    async def dial():
        try:
            tls = await client_handshake(trio.SocketStream(b), client_context(
                TLSConfig(cert_file=str(pki.other_client.cert), key_file=str(pki.other_client.key),
                          ca_file=str(pki.ca))), "localhost")
            await tls.receive_some(10)  # TLS 1.3: the refusal arrives after the handshake
        except (HandshakeFailed, trio.BrokenResourceError):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(dial)
    assert failures and "unable to get local issuer certificate" in failures[0]


def der(pair_) -> bytes:
    return x509.load_pem_x509_certificate(pair_.pem()).public_bytes(serialization.Encoding.DER)


def test_mapping_order_email_then_dns_then_subject(pki):
    cert = der(pki.client)  # CN=alice, e-mail alice@example.com, DNS alice.example.com
    assert certificate_user(cert, ["CN=alice", "alice.example.com", "alice@example.com"]) == "alice@example.com"
    assert certificate_user(cert, ["CN=alice", "alice.example.com"]) == "alice.example.com"
    assert certificate_user(cert, ["CN=alice"]) == "CN=alice"
    assert certificate_user(cert, ["alice", "CN=bob"]) is None


def test_mapping_by_distinguished_name(pki):
    cert = der(pki.client_dn)  # CN=bob, OU=eng, O=Acme (RFC 2253 order)
    assert certificate_user(cert, ["CN=bob,OU=eng,O=Acme"]) == "CN=bob,OU=eng,O=Acme"
    assert certificate_user(cert, ["O=Acme,OU=eng,CN=bob"]) == "O=Acme,OU=eng,CN=bob"  # reordered RDNs
    assert certificate_user(cert, ["CN=bob,OU=eng"]) is None


async def test_an_untested_trio_release_takes_the_writers_path(pki, monkeypatch):
    import jetraft.net.transport.tls as tls_module

    monkeypatch.setattr(tls_module, "_direct_ok", None)
    monkeypatch.setattr(trio, "__version__", "9.1.0")
    server, client = await pair(pki)
    await server.send_all(b"first ")
    # trio's internals are not touched: every write is the caller's (its writer task's)
    assert direct_write(server, socket_fd(server), b"second ") == NOT_NOW
    await client.send_all(b"one")
    assert await receive_exactly(server, 3) == b"one"
    assert read_buffered(server, 65536) == b""
    await server.send_all(b"second")
    assert await receive_exactly(client, 12) == b"first second"
