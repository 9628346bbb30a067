"""TLS on trio streams: the server-side and client-side handshakes, and what a peer's
certificate says (its key pin, the user it maps to).

A handshake is bounded by the TLS ``timeout`` (nats-server client.go doTLSHandshake: the
connection is closed when it has not finished); a peer whose first byte is not a TLS
handshake record (0x16) is closed without a byte sent, as Go's crypto/tls does with a record
it cannot read. Every failure is a :class:`HandshakeFailed` carrying a reason for the event
log; the caller closes that connection alone.

The user a client certificate maps to (``verify_and_map``) is looked up as nats-server
server/auth.go checkClientTLSCertSubject does: the e-mail addresses of the certificate,
then its DNS names, then its URIs; then its subject as a distinguished name equal to a
user name read as an RFC 4514 DN (the same attributes in the same order, then in any
order); then the subject in RFC 2253 form as Go prints it (``CN=alice,OU=eng,O=Acme``),
with the certificate's domain components appended when it has some, then without them.
"""

from __future__ import annotations

import hashlib
import os
import ssl
from collections import Counter
from collections.abc import Iterable, Mapping

import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

__all__ = [
    "HandshakeFailed",
    "PrefixedStream",
    "certificate_user",
    "client_handshake",
    "first_bytes",
    "peer_certificate",
    "server_handshake",
    "spki_sha256",
]

_TLS_HANDSHAKE_RECORD = 0x16
#: Go's pkix attribute names (crypto/x509/pkix attributeTypeNames); other types print as dotted OIDs.
_GO_NAMES = {
    NameOID.COUNTRY_NAME: "C",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.COMMON_NAME: "CN",
    NameOID.SERIAL_NUMBER: "SERIALNUMBER",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.POSTAL_CODE: "POSTALCODE",
}
_DC = NameOID.DOMAIN_COMPONENT


class HandshakeFailed(Exception):
    """The TLS handshake did not complete; ``str()`` is the reason for the event log."""


class PrefixedStream(trio.abc.Stream):
    """``transport`` with ``prefix`` (bytes already read from it) put back in front: what
    nats-server's tlsMixConn does with the bytes it sniffed."""

    def __init__(self, transport: trio.SocketStream, prefix: bytes) -> None:
        self.transport = transport
        self._prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        return await self.transport.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self.transport.send_eof()

    async def aclose(self) -> None:
        """Close the socket gracefully: FIN, then read (discarding) until the peer closes or
        half a second passes, so that the kernel does not answer unread input with RST and
        the peer gets what was sent last (close_notify, an alert)."""
        with trio.move_on_after(0.5):
            try:
                await self.transport.send_eof()
                while await self.transport.receive_some(65536):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
                pass
        await self.transport.aclose()


async def first_bytes(stream: trio.SocketStream) -> bytes:
    """The first bytes the peer sends (at least one); raises HandshakeFailed when it closes."""
    try:
        data = await stream.receive_some(4096)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise HandshakeFailed(f"connection lost before the TLS handshake: {exc}") from None
    if not data:
        raise HandshakeFailed("connection closed before the TLS handshake")
    return data


async def server_handshake(stream: trio.SocketStream, context: ssl.SSLContext,
                           prefix: bytes = b"") -> trio.SSLStream:
    """Server side of a TLS handshake on ``stream`` (``prefix``: bytes already read from it).
    The caller bounds the time (the TLS ``timeout``). Returns the encrypted stream.
    Raises HandshakeFailed (nothing is sent to a peer that does not start with a TLS
    handshake record)."""
    data = prefix or await first_bytes(stream)
    if data[0] != _TLS_HANDSHAKE_RECORD:
        raise HandshakeFailed("first record does not look like a TLS handshake")
    tls = trio.SSLStream(PrefixedStream(stream, data), context, server_side=True)
    await _handshake(tls)
    return tls


async def client_handshake(stream: trio.SocketStream, context: ssl.SSLContext, host: str) -> trio.SSLStream:
    """Client side of a TLS handshake (a solicited route), verifying the server's certificate
    for ``host``. The caller bounds the time. Raises HandshakeFailed."""
    tls = trio.SSLStream(PrefixedStream(stream, b""), context, server_hostname=host)
    await _handshake(tls)
    return tls


async def _handshake(tls: trio.SSLStream) -> None:
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        cause = exc.__cause__
        reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause or exc)
        raise HandshakeFailed(f"TLS handshake error: {reason}") from None
    except (trio.ClosedResourceError, OSError) as exc:
        raise HandshakeFailed(f"TLS handshake error: {exc}") from None


# -- writing without awaiting ------------------------------------------------------------------
#
# The server writes latency-critical output (AppendEntries, acks) to sockets synchronously
# before it blocks the event loop on an fsync (Server.flush_outbound). A TLS connection can do
# the same when trio's SSLStream is idle: the plaintext is encrypted by the stream's own
# ssl.SSLObject into its own outgoing memory buffer, and that ciphertext is written to the
# socket. This uses trio.SSLStream's internals (checked once, and only on the trio releases in
# _TRIO_TESTED; otherwise every write goes
# through the connection's writer task, which is correct but slower): the stream must have
# finished its handshake, hold no ciphertext (its outgoing buffer empty, no delayed handshake
# output, its inner send lock free: trio holds that lock whenever it has taken ciphertext it has
# not yet sent), so that TLS records leave in the order they were made. Ciphertext the socket
# does not take is put back in the stream's outgoing buffer, which trio sends first with its
# next write; :func:`send_backlog` sends it when nothing else is to be written.

_INTERNALS = ("_ssl_object", "_outgoing", "_inner_send_lock", "_inner_recv_lock", "_delayed_outgoing", "_handshook",
              "_check_status")
#: trio releases whose SSLStream internals these functions were written against and tested
#: with (major, minor), inclusive; any other release takes the writer task's path.
_TRIO_TESTED = ((0, 25), (0, 35))
_direct_ok: bool | None = None

#: direct_write results
NOT_NOW, WRITTEN, BACKLOG = 0, 1, 2


def _trio_release() -> tuple[int, int] | None:
    """trio's (major, minor) version, or None when it does not read as numbers."""
    parts = trio.__version__.split(".")[:2]
    return (int(parts[0]), int(parts[1])) if len(parts) == 2 and all(p.isdigit() for p in parts) else None


def _has_internals(tls: trio.SSLStream) -> bool:
    global _direct_ok
    if _direct_ok is None:
        _direct_ok = (_trio_release() is not None and _TRIO_TESTED[0] <= _trio_release() <= _TRIO_TESTED[1]
                      and all(hasattr(tls, name) for name in _INTERNALS) and hasattr(tls._handshook, "done"))
    return _direct_ok


def direct_write(tls: trio.SSLStream, fd: int, data: bytes | bytearray) -> int:
    """Encrypt ``data`` and write it to the socket ``fd`` now, without awaiting (see above).

    Returns NOT_NOW when the stream is busy or in an unusual state (nothing was consumed:
    the caller queues ``data`` for its writer), WRITTEN when every byte left, BACKLOG when
    ciphertext remains in the stream's buffer (the caller wakes its writer, which calls
    :func:`send_backlog`). Never raises."""
    if not _has_internals(tls):
        return NOT_NOW
    try:
        tls._check_status()
        if (not tls._handshook.done or tls._delayed_outgoing is not None or tls._inner_send_lock.locked()
                or tls._outgoing.pending):
            return NOT_NOW
        tls._ssl_object.write(data)
    except Exception:  # noqa: BLE001 - closed, broken, or wants a read: the writer task deals with it
        return NOT_NOW
    out = tls._outgoing.read()
    try:
        n = os.write(fd, out)
    except OSError:  # EAGAIN, or an error the writer will meet
        n = 0
    if n < len(out):
        tls._outgoing.write(out[n:])
        return BACKLOG
    return WRITTEN


def has_backlog(tls: trio.SSLStream) -> bool:
    """Whether ciphertext a direct write left is waiting in the stream's buffer."""
    return bool(_direct_ok) and tls._outgoing.pending > 0


async def send_backlog(tls: trio.SSLStream) -> None:
    """Send the ciphertext waiting in the stream's buffer, as trio's own sends do (under its
    inner send lock). Raises trio.BrokenResourceError / ClosedResourceError / OSError."""
    async with tls._inner_send_lock:
        data = tls._outgoing.read()
        if data:
            await tls.transport_stream.send_all(data)


def read_buffered(tls: trio.SSLStream, limit: int) -> bytes:
    """Up to ``limit`` bytes of plaintext from the complete TLS records the stream has already
    received, without waiting; empty when there are none. An SSLStream's receive_some returns
    one record at a time; a reader that handles a whole socket read at once (one pass over its
    operations, one flush, one RAFT proposal batch) calls this after it to get the rest of what
    arrived. Uses trio.SSLStream's internals as :func:`direct_write` does (empty without them,
    or while another task is in the middle of a TLS read). Never raises: an error is left for
    the next receive_some to report."""
    if not _has_internals(tls) or not tls._handshook.done or tls._inner_recv_lock.locked():
        return b""
    parts: list[bytes] = []
    total = 0
    while total < limit:
        try:
            chunk = tls._ssl_object.read(limit - total)
        except Exception:  # noqa: BLE001 - wants more bytes (a partial record), closed or broken
            break
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


def socket_fd(tls: trio.SSLStream) -> int:
    """The file descriptor under a stream made by :func:`server_handshake` or
    :func:`client_handshake`."""
    return tls.transport_stream.transport.socket.fileno()


def peer_certificate(tls: trio.SSLStream) -> bytes | None:
    """The DER certificate the peer presented, or None."""
    try:
        return tls.getpeercert(binary_form=True)
    except (ValueError, ssl.SSLError):
        return None


def spki_sha256(der: bytes) -> str:
    """Lower-case hex SHA-256 of the certificate's DER SubjectPublicKeyInfo: the form of
    ``pinned_certs`` (nats-server client.go matchesPinnedCert)."""
    key = x509.load_der_x509_certificate(der).public_key()
    return hashlib.sha256(key.public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


def pinned(der: bytes | None, pins: frozenset[str]) -> bool:
    """Whether a peer certificate passes ``pinned_certs`` (an empty set passes everything;
    no certificate fails a non-empty set)."""
    if not pins:
        return True
    return der is not None and spki_sha256(der) in pins


def _go_value(value: str) -> str:
    """An attribute value escaped as Go's pkix (RFC 2253) does."""
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in " #") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _go_rdn_string(name: x509.Name) -> str:
    """Go's pkix.RDNSequence.String(): RDNs last first, attributes joined with ``+``."""
    parts = []
    for rdn in reversed(list(name.rdns)):
        attrs = []
        for attr in reversed(list(rdn)):
            label = _GO_NAMES.get(attr.oid, attr.oid.dotted_string)
            value = attr.value if isinstance(attr.value, str) else attr.value.hex()
            attrs.append(f"{label}={_go_value(value)}")
        parts.append("+".join(attrs))
    return ",".join(parts)


def _dn(name: x509.Name) -> list[frozenset[tuple[str, str]]] | None:
    """The RDNs of ``name`` as sets of (OID, value); None when a value is not a string."""
    rdns = []
    for rdn in name.rdns:
        attrs = []
        for attr in rdn:
            if not isinstance(attr.value, str):
                return None
            attrs.append((attr.oid.dotted_string, attr.value))
        rdns.append(frozenset(attrs))
    return rdns


def _user_dn(text: str) -> list[frozenset[tuple[str, str]]] | None:
    try:
        return _dn(x509.Name.from_rfc4514_string(text))
    except (ValueError, TypeError):
        return None


def certificate_user(der: bytes, users: Mapping[str, object] | Iterable[str]) -> str | None:
    """The user name ``der`` (a client certificate) maps to among ``users`` (names), or
    None (nats-server server/auth.go checkClientTLSCertSubject; the order is in the module
    docstring)."""
    names = set(users)
    cert = x509.load_der_x509_certificate(der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        for kind in (x509.RFC822Name, x509.DNSName, x509.UniformResourceIdentifier):
            for value in san.get_values_for_type(kind):
                if value in names:
                    return value
    subject = cert.subject
    dn = _dn(subject)
    if dn is not None:
        candidates = [(name, _user_dn(name)) for name in sorted(names)]
        candidates = [(name, parsed) for name, parsed in candidates if parsed]
        for name, parsed in candidates:  # go-ldap DN.Equal: same RDNs, same order
            if parsed == dn:
                return name
        for name, parsed in candidates:  # go-ldap RDNsMatch: the same RDNs in any order
            if Counter(parsed) == Counter(dn):
                return name
    rdn = _go_rdn_string(subject)
    dcs = [attr.value for attr in subject if attr.oid == _DC and isinstance(attr.value, str)]
    if dcs:
        with_dcs = ",".join([rdn, *(f"DC={dc}" for dc in dcs)])
        if with_dcs in names:
            return with_dcs
    return rdn if rdn in names else None
