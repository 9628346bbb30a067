"""One client connection: a reader, a writer with a bounded outbound buffer, a pinger.

The connection owns a nursery of three tasks (trio structured concurrency): the reader
feeds bytes to the sans-IO :class:`~jetraft.protocol.ClientParser` and hands each operation
to the server; the writer drains the outbound buffer to the socket; the pinger sends PINGs
every ``ping_interval`` seconds and closes a connection that leaves ``ping_max`` of them
unanswered ("Stale Connection", nats-server server/client.go processPingTimer).

Writes that cannot wait: code about to block the event loop (the RAFT host's fsync) or
whose output is latency-critical (an AppendEntries, a PubAck) calls
the server's ``flush_outbound``, which writes every connection's queued bytes to its
socket at once, non-blocking, instead of waiting for the writer tasks to be scheduled; what the
socket does not take stays queued for the writer (nats-server flushes the same way at the
end of a read loop, server/client.go flushClients).

Slow consumers (nats-server server/client.go queueOutbound / flushOutbound): the outbound
buffer is bounded by ``max_pending`` bytes and a write may take at most ``write_deadline``
seconds; past either, the connection is closed without waiting for it and every other
client is unaffected.

Round trip time (nats-server client.go sendPing / processPong): a PONG answering one of the
server's PINGs sets ``rtt_ns``, measured from that PING. The pinger sends a PING at its first
tick even to a busy client while no round trip is measured (and hourly after that), and
/connz asks one of a client that gave its ``lang`` in CONNECT when none is measured yet
(:meth:`ClientConnection.request_rtt`); nothing is done per message.

Closed connections (nats-server server.go saveClosedClient, ring.go): as a client
connection ends, :class:`ClosedClient` keeps what /connz?state=closed shows of it, in the
server's :class:`ClosedClients` ring of the last ``max_closed_clients``.

TLS (a top-level ``tls`` block): INFO, then the handshake (or the handshake first), bounded by
the TLS ``timeout``, before any client byte is parsed (:meth:`ClientConnection._start_tls`,
:mod:`jetraft.net.transport.tls`); the reader and writer then work on the encrypted stream.

:class:`StreamConnection` (the task layout, the writer, closing with or without a flush, the
lingering close) and :func:`accept_connections` are shared with the cluster's route
connections (:mod:`jetraft.net.transport.route`).
"""

from __future__ import annotations

import json
import os
import time
import socket
import traceback
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from jetraft.auth import SYSTEM_QUEUE_GROUP, AuthError, ClientPermissions, Identity
from jetraft import gofmt
from jetraft.events import rfc3339_ns
from jetraft.net.transport.tls import (
    BACKLOG,
    NOT_NOW,
    HandshakeFailed,
    certificate_user,
    direct_write,
    first_bytes,
    has_backlog,
    peer_certificate,
    pinned,
    read_buffered,
    send_backlog,
    server_handshake,
    socket_fd,
)
from jetraft.protocol import (
    ERR_AUTHORIZATION_VIOLATION,
    ERR_INVALID_SUBJECT,
    OK,
    PING,
    PONG,
    ClientParser,
    Connect,
    Message,
    Ping,
    Pong,
    ProtocolViolation,
    Pub,
    Sub,
    Unsub,
    encode_err,
    encode_info,
    encode_msg,
)

if TYPE_CHECKING:
    from jetraft.net.ports import AccountView, ClientHost, ConnectionHost

READ_SIZE = 65536
#: The -ERR a client gets when handling its input failed inside the server (the connection is
#: closed; the failure and its traceback are in the event log as ``connection_error``).
ERR_INTERNAL = "Internal Server Error"


def report_connection_error(server: ConnectionHost, kind: str, exc: BaseException, **who: object) -> None:
    """Write ``connection_error`` (with the traceback) for an exception that ended one
    connection of ``kind`` ("client" or "route"); ``who`` names it (cid, ip, port...)."""
    server.events.emit("connection_error", kind=kind, error=repr(exc),
                       traceback="".join(traceback.format_exception(exc)), **who)


class Subscription:
    """A client's interest in a subject: ``sid`` is the client's id for it."""

    __slots__ = ("client", "subject", "queue", "sid", "max_msgs", "delivered")

    def __init__(self, client: ClientConnection, subject: str, queue: str | None, sid: str) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.max_msgs: int | None = None
        self.delivered = 0


#: How often a client's round trip is measured again (nats-server
#: DEFAULT_RTT_MEASUREMENT_INTERVAL), in nanoseconds.
RTT_MEASUREMENT_INTERVAL_NS = 3600 * 1_000_000_000
#: /connz asks a round trip of a client that has not sent its first PING yet only this long
#: after it connected (nats-server client.go maxNoRTTPingBeforeFirstPong), in nanoseconds.
NO_RTT_PING_BEFORE_FIRST_PONG_NS = 2 * 1_000_000_000

#: jetraft's close reasons that nats-server names otherwise (server/monitor.go
#: ClosedState.String); a parser error that ends the connection is a "Protocol Violation"
#: there (client.go readLoop), as every other fatal parser error is here.
_NATS_CLOSE_REASONS = {
    "TLS Handshake Error": "TLS Handshake Failure",
    "maximum control line exceeded": "Maximum Control Line Exceeded",
    "Maximum Payload Violation": "Maximum Message Payload Exceeded",
    "invalid client protocol": "Bad Client Protocol Version",
    "no responders requires headers support": "No Responders Requires Headers",
}
_KEPT_CLOSE_REASONS = frozenset((
    "Client Closed", "Authentication Timeout", "Authentication Failure", "Slow Consumer (Pending Bytes)",
    "Slow Consumer (Write Deadline)", "Write Error", "Read Error", "Parse Error", "Stale Connection",
    "Protocol Violation", "Server Shutdown", "Maximum Connections Exceeded", ERR_INTERNAL,
))


def nats_close_reason(reason: str | None) -> str:
    """The reason /connz shows for a connection closed for jetraft's ``reason``, as
    nats-server's ClosedState strings ("Client Closed", "Authentication Failure",
    "Stale Connection", "Slow Consumer (Pending Bytes)"...); a fatal protocol error is a
    "Protocol Violation". jetraft's own "Internal Server Error" (a failure handling the
    client's input) has no nats-server counterpart and is shown as it is."""
    if reason is None:
        return "Client Closed"
    if reason in _KEPT_CLOSE_REASONS:
        return reason
    return _NATS_CLOSE_REASONS.get(reason, "Protocol Violation")


class ClosedClient:
    """What /connz keeps of a closed client connection (nats-server ring.go closedClient):
    ``info``, its ConnInfo as of the close (``stop`` and ``reason`` included; ``uptime`` and
    ``idle`` up to the close); ``start_ns``, ``last_ns``, ``stop_ns`` (ns since the epoch)
    and ``rtt_ns`` for sorting; its subscriptions as (subject, queue, sid, delivered, max)
    tuples in ``account_name``; the user it authenticated or tried to authenticate as
    (``user``, "" for none) and its account unless the global one (``account``, "" for
    none)."""

    __slots__ = ("account", "account_name", "cid", "info", "last_ns", "rtt_ns", "start_ns", "stop_ns", "subs",
                 "user")

    def __init__(self, client: ClientConnection, stop_ns: int, reason: str) -> None:
        self.cid = client.cid
        self.info = client.conn_info(stop_ns, stop=stop_ns, reason=reason)
        self.start_ns, self.last_ns, self.stop_ns, self.rtt_ns = client.start_ns, client.last_activity, stop_ns, client.rtt_ns
        self.subs = tuple((s.subject, s.queue, s.sid, s.delivered, s.max_msgs) for s in client.subs.values())
        connected = client.connected
        self.user = (client.identity.user if connected and client.identity is not None else client.tried_user) or ""
        self.account_name = client.account.name if client.account is not None else ""
        self.account = "" if not connected or self.account_name == "$G" else self.account_name


class ClosedClients:
    """The ring of the last closed client connections (nats-server ring.go
    closedRingBuffer): at most ``max_closed_clients`` of the server's configuration (read at
    each close, so a reload resizes it, the newest kept), the oldest dropped first; ``total``
    counts every connection ever added, ``stale`` those closed as "Stale Connection" (/varz
    ``stale_connections``, nats-server client.go staleStats)."""

    def __init__(self) -> None:
        self._ring: deque[ClosedClient] = deque(maxlen=1)
        self.total = 0
        self.stale = 0

    def append(self, closed: ClosedClient, size: int) -> None:
        if self._ring.maxlen != size:
            self._ring = deque(self._ring, maxlen=size)
        self._ring.append(closed)
        self.total += 1
        if closed.info["reason"] == "Stale Connection":
            self.stale += 1

    def __len__(self) -> int:
        return len(self._ring)

    def snapshot(self) -> list[ClosedClient]:
        """The kept connections, oldest first (a copy)."""
        return list(self._ring)


_CLOSED: weakref.WeakKeyDictionary[Any, ClosedClients] = weakref.WeakKeyDictionary()


def closed_clients(server: object) -> ClosedClients:
    """``server``'s ring of closed client connections (empty until one closes)."""
    ring = _CLOSED.get(server)
    if ring is None:
        ring = _CLOSED[server] = ClosedClients()
    return ring


async def accept_connections(listener: trio.SocketListener,
                             handle: Callable[[trio.SocketStream, str, int], None],
                             on_error: Callable[[OSError], None]) -> None:
    """Accept on ``listener`` until it is closed (or the caller is cancelled).

    Each connection gets TCP_NODELAY and is passed to ``handle(stream, ip, port)``; a socket
    that is gone before its peer address is read is closed and skipped. An accept error
    (EMFILE and friends) goes to ``on_error`` and accepting resumes 0.1 s later.
    """
    while True:
        try:
            stream = await listener.accept()
        except trio.ClosedResourceError:
            return
        except OSError as exc:
            on_error(exc)
            await trio.sleep(0.1)
            continue
        try:
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            ip, port = stream.socket.getpeername()[:2]
        except OSError:
            await stream.aclose()
            continue
        handle(stream, ip, port)


class StreamConnection:
    """The tasks of one connection: a reader (``_reader``, the subclass's), a writer draining
    what :meth:`_take` returns in one ``send_all`` each, and helper tasks (timers).

    ``close(reason)`` ends it; with ``flush`` the writer first sends what is queued (a write
    still bounded by ``write_deadline`` seconds, past which :meth:`_write_timed_out` is
    called). Subclasses set ``server`` and ``stream`` and implement ``_reader``, ``_take``,
    ``_write_timed_out``.
    """

    server: ConnectionHost
    stream: trio.SocketStream | trio.SSLStream

    def __init__(self) -> None:
        self.close_reason: str | None = None
        #: False for a TLS connection: flush_now encrypts through its SSLStream (when that is
        #: idle, see jetraft.net.transport.tls.direct_write) instead of writing the socket directly
        self.direct_writes = True
        #: the socket under a TLS connection once its handshake is done (None before)
        self.tls_fd: int | None = None
        self._writer_parked = False
        self._writing = False           # the writer holds taken bytes (inside send_all)
        self._lot = trio.lowlevel.ParkingLot()
        self._flush_then_close = False
        self._scope: trio.CancelScope | None = None
        #: the scope of a TLS handshake in progress; close() abandons the handshake
        self._setup_scope: trio.CancelScope | None = None
        #: reading failed (a reset rather than the peer's orderly close)
        self.read_failed = False

    async def _serve(self, tasks: list[Callable[[], Awaitable[None]]], closed_reason: str) -> None:
        """Run the reader, the writer and ``tasks`` until the connection closes;
        ``closed_reason`` is the close reason when the peer hung up."""
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                for task in tasks:
                    nursery.start_soon(task)
                await self._reader()
                if self.close_reason is None:
                    self.close_reason = closed_reason
                if not self._flush_then_close:
                    nursery.cancel_scope.cancel()
                # else the writer sends what is queued (bounded by write_deadline), then ends

    async def _linger_close(self) -> None:
        """Close the socket gracefully: send FIN and read (discarding) until the peer closes
        or half a second passes. Closing with unread input would make the kernel send RST,
        and the peer would lose the last error we sent (e.g. -ERR after a rejected CONNECT).
        A TLS stream sends close_notify first; its transport (:class:`~jetraft.net.transport.tls.PrefixedStream`)
        lingers the same way when closed."""
        if isinstance(self.stream, trio.SSLStream):
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    await self.stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
                    pass
            with trio.CancelScope(shield=True):
                await self.stream.transport_stream.aclose()
            return
        with trio.move_on_after(0.5) as cs:
            cs.shield = True
            try:
                await self.stream.send_eof()
                while await self.stream.receive_some(READ_SIZE):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
                pass
        with trio.CancelScope(shield=True):
            await self.stream.aclose()

    def close(self, reason: str, *, flush: bool = True) -> None:
        """End the connection; with ``flush`` the writer first sends what is queued. During
        a TLS handshake the handshake is abandoned."""
        if self.close_reason is not None:
            return
        if self._setup_scope is not None:
            self._setup_scope.cancel()
        self.close_reason = reason
        if flush and self._scope is not None:
            self._flush_then_close = True
            self._wake_writer()
        elif self._scope is not None:
            self._scope.cancel()

    @property
    def writing(self) -> bool:
        """True while the writer task is inside a write of bytes it took from the queue:
        :meth:`flush_now` writes nothing then (the writer's bytes go first)."""
        return self._writing

    @property
    def writer_parked(self) -> bool:
        """True while the writer task waits for output and nothing has woken it: output
        queued during a read (``Server.in_read``) leaves it parked, the read's flush writes."""
        return self._writer_parked

    def _wake_writer(self) -> None:
        self._writer_parked = False
        self._lot.unpark_all()

    async def _reader(self) -> None:
        raise NotImplementedError

    async def _read_some(self, size: int = READ_SIZE) -> bytes:
        """Up to ``size`` bytes from the peer; empty once it closed or the socket failed. On a
        TLS connection, every complete record already received (not just the first)."""
        try:
            data = await self.stream.receive_some(size)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.read_failed = True
            return b""
        if data and self.tls_fd is not None and len(data) < size:
            more = read_buffered(self.stream, size - len(data))
            if more:
                data += more
        return data

    def _take(self) -> bytes | bytearray:
        """Everything queued (emptying the queue); empty when nothing is."""
        raise NotImplementedError

    def _put_back(self, rest: bytes) -> None:
        """Queue ``rest`` (bytes a direct write left unsent) ahead of anything queued."""
        raise NotImplementedError

    def _queued(self) -> None:
        """Output was queued: have the next :meth:`Server.flush_outbound` write it at once,
        and wake the writer unless a read is being processed (``Server.in_read``: its
        :meth:`Server.after_read` flushes, and wakes a writer only for what a socket did not
        take)."""
        server = self.server
        server.outbound_queued.add(self)
        if self._writer_parked and not server.in_read:
            self._wake_writer()

    def flush_now(self) -> None:
        """Write what is queued to the socket now, without blocking, unless the writer
        task is in the middle of a write (order is kept: its bytes go first). What the socket
        does not take stays queued for the writer; a socket error is left for the writer to
        find. Never raises. A TLS connection's writer is woken instead."""
        if self._writing or self.close_reason is not None:
            return
        if not self.direct_writes:
            self._flush_tls_now()
            return
        data = self._take()
        if not data:
            return
        try:
            n = os.write(self.stream.socket.fileno(), data)
        except OSError:                 # EAGAIN, or an error the writer will meet too
            n = 0
        if n < len(data):
            self._put_back(bytes(memoryview(data)[n:]))
            self._wake_writer()

    def _flush_tls_now(self) -> None:
        """flush_now for a TLS connection: encrypt and write now when its SSLStream is idle,
        else leave the bytes to the writer."""
        if self.tls_fd is None:
            self._wake_writer()
            return
        data = self._take()
        if not data:
            return
        result = direct_write(self.stream, self.tls_fd, data)
        if result == NOT_NOW:
            self._put_back(bytes(data))
            self._wake_writer()
        elif result == BACKLOG:
            self._wake_writer()

    def _write_timed_out(self, size: int) -> None:
        """A write of ``size`` bytes took longer than ``write_deadline``."""
        raise NotImplementedError

    async def _writer(self) -> None:
        deadline = self.server.config.write_deadline
        while True:
            data = self._take()
            if not data and self.tls_fd is not None and has_backlog(self.stream):
                data = b""  # ciphertext a direct write left: sent below, ahead of anything else
            elif not data:
                if self._flush_then_close:
                    self._scope.cancel()
                    return
                self._writer_parked = True
                await self._lot.park()
                continue
            self._writing = True
            self.server.outbound_queued.discard(self)
            with trio.move_on_after(deadline) as cs:
                try:
                    if data:
                        await self.stream.send_all(data)
                    else:
                        await send_backlog(self.stream)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self.close("Write Error", flush=False)
                    return
                finally:
                    self._writing = False
            if cs.cancelled_caught:
                self._write_timed_out(len(data))
                return


class ClientConnection(StreamConnection):
    """State and tasks of one client. Created by the server for every accepted socket."""

    server: ClientHost

    def __init__(self, server: ClientHost, stream: trio.SocketStream, cid: int, ip: str, port: int) -> None:
        super().__init__()
        cfg = server.config
        self.server = server
        #: where the client's messages and subscriptions go
        self.router = server.router
        self.stream = stream
        self.cid = cid
        self.ip = ip
        self.port = port
        self.parser = ClientParser(max_control_line=cfg.max_control_line, max_payload=cfg.max_payload)
        self.subs: dict[str, Subscription] = {}
        #: None until the client may publish and subscribe: after CONNECT when the server
        #: requires authentication, from the start otherwise (see :meth:`_bind_anonymous`).
        self.account: AccountView | None = None
        self.identity: Identity | None = None
        #: what the identity may publish and subscribe to; None: no restriction
        self.perms: ClientPermissions | None = None
        self.connected = False
        # nats-server's defaults until CONNECT says otherwise (client.go defaultOpts)
        self.verbose = True
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.name: str | None = None
        self.lang: str | None = None
        self.version: str | None = None
        self.start_ns = time.time_ns()
        self.last_activity = self.start_ns
        #: when the client last sent a message, a subscription change or a PING (ns): the
        #: pinger sends no PING within ``ping_interval`` of it (nats-server client.go lastIn)
        self.last_in = self.start_ns
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.pings_out = 0
        #: the last measured round trip in ns (0: none yet): a PONG answering the server's PING
        self.rtt_ns = 0
        #: time.monotonic_ns() of the server's last PING (0: none sent)
        self._rtt_start = 0
        #: the server answered a PING after CONNECT (nats-server client.go firstPongSent)
        self._first_pong_sent = False
        #: the user a failed CONNECT named (shown for the closed connection)
        self.tried_user: str | None = None
        self._out = bytearray()
        #: (TLSConfig, SSLContext) when clients must speak TLS, as the server had them when
        #: this connection was accepted (a reload changes them for later connections only)
        self.tls = server.client_tls
        #: the DER certificate the client presented in its TLS handshake, or None
        self.peer_cert: bytes | None = None
        if self.tls is not None:
            self.direct_writes = False
        self._bind_anonymous()

    def _bind_anonymous(self) -> None:
        """Without required authentication (or with ``no_auth_user``) a client may publish and
        subscribe before its CONNECT, in the account anonymous clients get (nats-server
        client.go registers it with the global account; parser.go lets no_auth_user clients
        start with another command). Otherwise the parser refuses anything but CONNECT first."""
        auth = self.server.auth
        try:
            identity = auth.verify(None, None, None) if not auth.required or auth.no_auth_user else None
        except AuthError:
            identity = None
        if identity is None:
            self.parser.awaiting_auth = True
            return
        self.identity = identity
        self.perms = auth.client_permissions(identity)
        self.account = self.router.account(identity.account)

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serve the connection until it closes. Never raises (but for cancellation): an
        exception while serving it closes this connection alone and is written to the event
        log as ``connection_error`` with its traceback (fault isolation)."""
        try:
            if self.tls is None:
                self.send(encode_info(self.server.client_info(self)))
            elif not await self._start_tls():
                return
            tasks = [self._pinger, self._auth_timer] if self.server.auth.required else [self._pinger]
            await self._serve(tasks, "Client Closed")
        except* Exception as group:
            self._failed(group.exceptions[0])
        finally:
            # keep what /connz shows of it, forget the client, then close the socket gracefully
            with trio.CancelScope(shield=True):
                self._keep_closed()
                self.server.client_closed(self)
                await self._linger_close()

    async def _start_tls(self) -> bool:
        """INFO (``tls_required: true``) then the TLS handshake, or with ``handshake_first``
        the handshake then INFO; the handshake within the TLS ``timeout`` (nats-server
        server.go createClientEx, client.go doTLSHandshake). With a fallback delay
        (``handshake_first: auto`` or a duration) a client silent for that long gets INFO
        first and then the handshake. The authentication timer starts after it, as there.
        Returns False when the connection is to be closed: a failed or timed-out handshake
        (``tls_handshake_failed`` event, close reason "TLS Handshake Error"), a certificate
        not in ``pinned_certs``, or :meth:`close` meanwhile."""
        tls, context = self.tls
        raw = self.stream
        prefix = b""
        try:
            with trio.CancelScope() as self._setup_scope:
                first = tls.handshake_first
                if first and tls.handshake_first_fallback > 0:
                    with trio.move_on_after(tls.handshake_first_fallback):
                        prefix = await first_bytes(raw)
                    first = bool(prefix)
                with trio.fail_after(tls.timeout):
                    if not first:
                        await raw.send_all(encode_info(self.server.client_info(self)))
                    stream = await server_handshake(raw, context, prefix)
                    self.peer_cert = peer_certificate(stream)
                if not pinned(self.peer_cert, tls.pinned_certs):
                    self.stream = stream
                    raise HandshakeFailed("peer certificate not in pinned_certs")
            if self._setup_scope.cancelled_caught:  # closed meanwhile (server shutdown)
                return False
        except (HandshakeFailed, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError,
                OSError) as exc:
            reason = "TLS handshake timeout" if isinstance(exc, trio.TooSlowError) else str(exc)
            self.server.events.emit("tls_handshake_failed", kind="client", cid=self.cid, ip=self.ip,
                                    port=self.port, reason=reason)
            if self.close_reason is None:
                self.close_reason = "TLS Handshake Error"
            return False
        finally:
            self._setup_scope = None
        self.stream = stream
        self.tls_fd = socket_fd(stream)
        if first:
            self.send(encode_info(self.server.client_info(self)))
        return True

    def _keep_closed(self) -> None:
        """Add this connection, as it closes, to the server's :class:`ClosedClients`. Never
        raises: a failure is reported as ``connection_error`` and the record skipped."""
        try:
            closed = ClosedClient(self, time.time_ns(), nats_close_reason(self.close_reason))
            closed_clients(self.server).append(closed, self.server.config.max_closed_clients)
        except Exception as exc:  # noqa: BLE001 - fault isolation: the close goes on
            report_connection_error(self.server, "client", exc, cid=self.cid, ip=self.ip, port=self.port)

    def conn_info(self, now: int, *, stop: int | None = None, reason: str | None = None) -> dict[str, Any]:
        """The ConnInfo keys every /connz entry has (nats-server server/monitor.go ConnInfo
        fill), as of ``now`` (ns since the epoch): times RFC 3339, ``uptime`` and ``idle``
        as nats-server's myUptime (:func:`jetraft.gofmt.uptime`), ``rtt`` a Go duration string ("0s"
        until measured), counts in messages and bytes; ``name``, ``lang``, ``version`` when
        given; ``stop`` (ns since the epoch) and ``reason`` for a closed connection."""
        entry: dict[str, Any] = {
            "cid": self.cid, "kind": "Client", "type": "nats", "ip": self.ip, "port": self.port,
            "start": rfc3339_ns(self.start_ns), "last_activity": rfc3339_ns(self.last_activity),
        }
        if stop is not None:
            entry["stop"] = rfc3339_ns(stop)
            entry["reason"] = reason
        entry.update({
            "rtt": gofmt.duration(self.rtt_ns), "uptime": gofmt.uptime(now - self.start_ns),
            "idle": gofmt.uptime(now - self.last_activity), "pending_bytes": self.pending_bytes,
            "in_msgs": self.in_msgs, "out_msgs": self.out_msgs, "in_bytes": self.in_bytes,
            "out_bytes": self.out_bytes, "subscriptions": len(self.subs),
        })
        for key in ("name", "lang", "version"):
            value = getattr(self, key)
            if value:
                entry[key] = value
        return entry

    def request_rtt(self) -> None:
        """/connz found no round trip measured: send a PING to measure one, if the client
        named its ``lang`` in CONNECT and either was answered a PING already or connected
        at least two seconds ago (nats-server monitor.go getRTT, client.go
        sendRTTPingLocked). At most one PING per call."""
        if (self.rtt_ns == 0 and self.lang and self.close_reason is None
                and (self._first_pong_sent
                     or time.time_ns() - self.start_ns > NO_RTT_PING_BEFORE_FIRST_PONG_NS)):
            self._send_ping()

    def _send_ping(self) -> None:
        """A PING whose PONG measures the round trip (nats-server client.go sendPing)."""
        self._rtt_start = time.monotonic_ns()
        self.pings_out += 1
        self.send(PING)

    def _failed(self, exc: BaseException) -> None:
        """Handling this client's input raised ``exc``: report it, tell the client, close."""
        report_connection_error(self.server, "client", exc, cid=self.cid, ip=self.ip, port=self.port)
        if self.close_reason is None:
            self._out += encode_err(ERR_INTERNAL)
            self.flush_now()
            self.close_reason = ERR_INTERNAL

    # ------------------------------------------------------------------ output

    @property
    def pending_bytes(self) -> int:
        """Bytes queued for the client and not yet written to its socket."""
        return len(self._out)

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the client; a buffer past ``max_pending`` cuts the client off."""
        if self.close_reason is not None:
            return
        out = self._out
        out += data
        if len(out) > self.server.config.max_pending:
            self._slow_consumer("max_pending exceeded", len(out))
            return
        self._queued()

    def _slow_consumer(self, why: str, pending: int) -> None:
        self.server.stats.slow_consumers += 1
        self.server.events.emit("slow_consumer", cid=self.cid, ip=self.ip, port=self.port,
                                pending_bytes=pending, reason=why)
        self._out = bytearray()
        self.close("Slow Consumer (Pending Bytes)" if why.startswith("max") else "Slow Consumer (Write Deadline)",
                   flush=False)

    def _take(self) -> bytearray:
        data = self._out
        if data:
            self._out = bytearray()
        return data

    def _put_back(self, rest: bytes) -> None:
        self._out[:0] = rest

    def _write_timed_out(self, size: int) -> None:
        self._slow_consumer("write_deadline exceeded", size + len(self._out))

    # ------------------------------------------------------------------ input

    async def _reader(self) -> None:
        parser = self.parser
        while self.close_reason is None:
            data = await self._read_some()
            if not data:
                if self.read_failed and self.close_reason is None:
                    self.close_reason = "Read Error"    # client.go closedStateForErr: not EOF
                return
            self.last_activity = time.time_ns()
            server = self.server
            router = self.router
            server.in_read = True           # output is flushed by after_read, not by writers
            try:
                for op in parser.feed(data):
                    if self.close_reason is not None:
                        return
                    if type(op) is Pub:
                        if self.account is None:
                            self._auth_violation("command before CONNECT")
                            return
                        if op.headers is not None and not self.headers:
                            # HPUB from a client that did not ask for headers: nats-server
                            # closes the connection, without an -ERR
                            server.events.emit("protocol_error", cid=self.cid, fatal=True,
                                               error="HPUB without headers in CONNECT")
                            self.close("Protocol Violation")
                            return
                        self.last_in = self.last_activity
                        self.in_msgs += 1
                        self.in_bytes += len(op.payload) + (len(op.headers) if op.headers else 0)
                        perms = self.perms
                        if (perms is not None and perms.restricts_publish
                                and not perms.can_publish(op.subject, time.monotonic())):
                            # before +OK and before anything, JetStream's $JS.API included,
                            # sees the message (client.go processInboundClientMsg)
                            self._publish_violation(op.subject)
                            continue
                        if self.verbose:  # +OK precedes delivery (nats-server client.go processPub)
                            self.send(OK)
                        router.publish(self, op)
                    else:
                        server.after_read()             # before yielding to other tasks
                        await self._control(op)
                        server.in_read = True
            finally:
                server.after_read()         # RAFT work and output of this read, at once

    async def _control(self, op: object) -> None:
        if type(op) is Connect:
            await self._connect(op.options)
            return
        if type(op) is ProtocolViolation:
            if op.message == ERR_AUTHORIZATION_VIOLATION:
                self._auth_violation("command before CONNECT")
                return
            if op.sid is not None and op.sid in self.subs:   # a taken sid: ignored (client.go)
                if self.verbose:
                    self.send(OK)
                return
            self.server.events.emit("protocol_error", cid=self.cid, error=op.message, fatal=op.fatal)
            if op.send_err:
                self.send(encode_err(op.message))
            if op.fatal:
                self.close(op.message)
            return
        if self.account is None:
            self._auth_violation("command before CONNECT")
            return
        if type(op) is Ping:
            self.last_in = time.time_ns()
            self.send(PONG)
            if self.connected:
                self._first_pong_sent = True
        elif type(op) is Pong:
            self.pings_out = 0
            if self._rtt_start:     # client.go processPong computeRTT: at least 1ns
                self.rtt_ns = max(1, time.monotonic_ns() - self._rtt_start)
        elif type(op) is Sub:
            self.last_in = time.time_ns()
            self._subscribe(op)
        elif type(op) is Unsub:
            self._unsubscribe(op)

    async def _connect(self, options: dict) -> None:
        if not isinstance(options, dict):
            options = {}
        if self.connected:      # a later CONNECT changes the options, not who the client is
            self._apply_options(options)
            if self.verbose:
                self.send(OK)
            return
        try:
            if self.tls is not None and self.tls[0].verify_and_map and self.server.auth.required:
                identity = self._certificate_identity()
            elif self.server.auth.required:
                identity = await trio.to_thread.run_sync(
                    self.server.auth.verify,
                    _str_or_none(options.get("user")),
                    _str_or_none(options.get("pass")),
                    _str_or_none(options.get("auth_token")),
                )
            else:
                identity = self.server.auth.verify(None, None, None)
        except AuthError as exc:
            # nats-server has read CONNECT's options before it checks them: the closed
            # connection shows the name, lang, version and user the client gave
            self.tried_user = _str_or_none(options.get("user"))
            self.name = _str_or_none(options.get("name"))
            self.lang = _str_or_none(options.get("lang"))
            self.version = _str_or_none(options.get("version"))
            self._auth_violation(str(exc), user=self.tried_user)
            return
        if self.close_reason is not None:
            return
        self._apply_options(options)
        account = self.router.account(identity.account)
        if self.account is not None and account is not self.account:
            # credentials moved a no_auth_user client to another account: what it subscribed
            # to before CONNECT was in the other account's subject space
            self.remove_all_subscriptions()
        self.identity = identity
        self.perms = self.server.auth.client_permissions(identity)
        self.account = account
        self.connected = True
        self.server.events.emit("client_connected", cid=self.cid, ip=self.ip, port=self.port,
                                name=self.name, lang=self.lang, version=self.version,
                                user=identity.user, account=identity.account)
        if self.verbose:
            self.send(OK)

    def _certificate_identity(self) -> Identity:
        """``verify_and_map``: the user the client certificate names is who the client is;
        CONNECT's user and password are not used (nats-server auth.go
        processClientOrLeafAuthentication with tlsMap). Raises AuthError."""
        auth = self.server.auth
        users = {name: user for name, user in auth.users.items() if name != auth.hidden_user}
        name = certificate_user(self.peer_cert, users) if self.peer_cert is not None else None
        if name is None:
            raise AuthError("no user found for the client certificate (verify_and_map)")
        entry = users[name]
        return Identity(user=entry.user, account=entry.account, permissions=entry.permissions)

    def _apply_options(self, options: dict) -> None:
        """The CONNECT options the server acts on; every CONNECT applies them again, as
        nats-server's processConnect does."""
        self.verbose = bool(options.get("verbose", True))  # nats-server default
        self.parser.pedantic = bool(options.get("pedantic", False))
        self.echo = bool(options.get("echo", True))
        self.headers = bool(options.get("headers", False))
        self.no_responders = bool(options.get("no_responders", False))
        self.name = _str_or_none(options.get("name"))
        self.lang = _str_or_none(options.get("lang"))
        self.version = _str_or_none(options.get("version"))

    def _auth_violation(self, reason: str, user: str | None = None) -> None:
        self.server.events.emit("auth_failed", cid=self.cid, ip=self.ip, port=self.port,
                                user=user, reason=reason)
        self.send(encode_err("Authorization Violation"))
        self.close("Authentication Failure")

    def _publish_violation(self, subject: str) -> None:
        """client.go pubPermissionViolation: -ERR, the message dropped, the connection kept."""
        self.server.events.emit("permissions_violation", cid=self.cid, user=self.identity.user,
                                kind="publish", subject=subject)
        self.send(encode_err(f"Permissions Violation for Publish to {gofmt.quote(subject)}"))

    def _subscription_violation(self, subject: str, queue: str | None, sid: str | None = None) -> None:
        """client.go subPermissionViolation (``sid``: processSubsOnConfigReload's form)."""
        text = f"Permissions Violation for Subscription to {gofmt.quote(subject)}"
        if queue is not None:
            text += f" using queue {gofmt.quote(queue)}"
        if sid is not None:
            text += f" (sid {gofmt.quote(sid)})"
        self.server.events.emit("permissions_violation", cid=self.cid, user=self.identity.user,
                                kind="subscribe", subject=subject, queue=queue)
        self.send(encode_err(text))

    def update_identity(self, identity: Identity) -> None:
        """After a reload: the client's user now has ``identity``'s permissions. Its
        subscriptions are checked again; those no longer allowed are removed, each with an
        -ERR (nats-server client.go processSubsOnConfigReload). The connection stays."""
        self.identity = identity
        self.perms = perms = self.server.auth.client_permissions(identity)
        if perms is None:
            return
        for sub in list(self.subs.values()):
            if not perms.can_subscribe(sub.subject, sub.queue):
                self.remove_subscription(sub)
                self._subscription_violation(sub.subject, sub.queue, sub.sid)

    def _subscribe(self, op: Sub) -> None:
        perms = self.perms
        if ((op.queue is not None and op.queue == SYSTEM_QUEUE_GROUP)
                or (perms is not None and not perms.can_subscribe(op.subject, op.queue))):
            self._subscription_violation(op.subject, op.queue)   # client.go processSubEx
            return
        if op.sid in self.subs:
            if self.verbose:
                self.send(OK)
            return
        sub = Subscription(self, op.subject, op.queue, op.sid)
        self.subs[op.sid] = sub
        self.account.sublist.insert(op.subject, sub, op.queue)
        self.router.subscription_added(self.account.name, op.subject, op.queue)
        if self.verbose:
            self.send(OK)

    def _unsubscribe(self, op: Unsub) -> None:
        sub = self.subs.get(op.sid)
        if sub is not None:
            if op.max_msgs and sub.delivered < op.max_msgs:
                sub.max_msgs = op.max_msgs
            else:
                self.remove_subscription(sub)
        if self.verbose:
            self.send(OK)

    def remove_subscription(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.account.sublist.remove(sub.subject, sub, sub.queue)
            self.router.subscription_removed(self.account.name, sub.subject, sub.queue)

    def remove_all_subscriptions(self) -> None:
        for sub in list(self.subs.values()):
            self.remove_subscription(sub)

    # ------------------------------------------------------------------ delivery

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        """Queue ``msg`` for ``sub`` as a MSG/HMSG on its ``deliver_as`` subject, else its
        ``subject``; honours UNSUB max (nats-server client.go deliverMsg).

        Returns False, delivering nothing, when the client's subscribe deny list refuses that
        subject (client.go checkDenySub). With ``allow_responses``, the client may then
        publish to the message's ``reply``."""
        subject = msg.deliver_as or msg.subject
        reply = msg.reply
        headers = msg.headers
        payload = msg.payload
        perms = self.perms
        if perms is not None:
            if perms.filters_delivery and perms.delivery_denied(subject, sub.queue):
                return False
            if reply and perms.tracks_replies:
                perms.note_delivery(reply, time.monotonic())
        if not self.headers:
            headers = None
        self.send(encode_msg(subject, sub.sid, reply, payload, headers))
        self.out_msgs += 1
        size = len(payload) + (len(headers) if headers else 0)
        self.out_bytes += size
        stats = self.server.stats
        stats.out_msgs += 1
        stats.out_bytes += size
        sub.delivered += 1
        if sub.max_msgs is not None and sub.delivered >= sub.max_msgs:
            self.remove_subscription(sub)
        return True

    # ------------------------------------------------------------------ timers

    async def _pinger(self) -> None:
        """Every ``ping_interval``: no PING when the client sent a message, a subscription or a
        PING within the interval (its traffic shows it alive) unless a round trip is to be
        measured (none sent yet, or the last over an hour ago); else a PING, or "Stale
        Connection" once ``ping_max`` are unanswered (nats-server client.go processPingTimer).
        Both are read for each interval: a reload changes them for every connection."""
        while True:
            await trio.sleep(self.server.config.ping_interval)
            cfg = self.server.config
            start = self._rtt_start
            need_rtt = not start or time.monotonic_ns() - start > RTT_MEASUREMENT_INTERVAL_NS
            if not need_rtt and time.time_ns() - self.last_in < cfg.ping_interval * 1e9:
                continue
            if self.pings_out + 1 > cfg.ping_max:
                self.server.events.emit("stale_connection", cid=self.cid, ip=self.ip, port=self.port)
                self.send(encode_err("Stale Connection"))
                self.close("Stale Connection")
                return
            self._send_ping()

    async def _auth_timer(self) -> None:
        await trio.sleep(self.server.auth.timeout)
        if not self.connected and self.close_reason is None:
            self.server.events.emit("auth_failed", cid=self.cid, ip=self.ip, port=self.port,
                                    user=None, reason="authentication timeout")
            self.send(encode_err("Authentication Timeout"))
            self.close("Authentication Timeout")

    def send_info(self, **changes: object) -> None:
        """Send an updated INFO (e.g. ``ldm=True`` in lame duck mode)."""
        info = self.server.client_info(self)
        info.update(changes)
        self.send(encode_info(info))


def _str_or_none(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)
