"""RouteConnection: one route socket between two servers of a cluster.

A connection owns what happens on its socket (nats-server server/route.go, for one route):
the TLS handshake of ``cluster { tls }``, CONNECT and the check of the cluster's credentials
on the accepting side, the outbound queue and its slow-consumer limits, the reader that
turns frames into routed messages and interest, the keepalive PINGs and the handshake
deadline. What concerns the cluster as a whole (which connection is a peer's route,
duplicates, interest tables, discovery, dialling) is the route manager's
(:class:`~jetraft.net.transport.route.RouteManager`, described in :mod:`jetraft.net.transport.route`); a
connection reaches it through the :class:`RouteLink` protocol and never imports it.
"""

from __future__ import annotations

import ssl
import time
from typing import Any, Protocol

import trio

from jetraft.auth import check_password
from jetraft.config import ClusterConfig, TLSConfig, is_bcrypt
from jetraft.net.transport.client import StreamConnection, report_connection_error
from jetraft.net.ports import RouteHost
from jetraft.net.transport.tls import (
    HandshakeFailed,
    certificate_user,
    client_handshake,
    peer_certificate,
    pinned,
    server_handshake,
    socket_fd,
)
from jetraft.protocol import route as rp

__all__ = [
    "INTEREST_SLICE",
    "READ_SIZE",
    "ROUTE_PING_INTERVAL",
    "WILDCARD_HOSTS",
    "DialTarget",
    "PeerInterest",
    "RouteConnection",
    "RouteLink",
    "format_addr",
    "split_addr",
]

#: Largest keepalive interval (seconds) for routes, whatever the client ``ping_interval``.
ROUTE_PING_INTERVAL = 5.0
#: Bytes a route's reader asks the socket for at once.
READ_SIZE = 262144
#: Hosts that mean "every address": an advertised address with one of them is reached at the
#: connection's remote IP instead.
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
#: Subjects of interest (SUB/UNSUB frames, or subjects of SUBS/UNSUBS frames) a route's reader
#: applies before it lets other tasks run (bounded work on the loop): about 1 ms of work on an
#: idle core, 5-8 ms on a busy one.
INTEREST_SLICE = 500


def format_addr(host: str, port: int) -> str:
    """``"host:port"``, IPv6 hosts in brackets, lower case (the key of a route address)."""
    host = host.strip("[]").lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_addr(addr: str) -> tuple[str, int] | None:
    """``"host:port"`` -> (host without brackets, port), None when malformed."""
    host, _, port = addr.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        return None
    if not 0 < number < 65536:
        return None
    return host.strip("[]"), number


class DialTarget(Protocol):
    """The route address a soliciting connection dialled (``jetraft.net.transport.route.RouteTarget``):
    the host its TLS certificate must name, CONNECT's credentials, and the remote's
    server_name once its INFO arrived."""

    host: str
    user: str | None
    password: str | None
    peer_name: str | None


class PeerInterest(Protocol):
    """Where a connection's reader puts the interest its peer sends
    (:class:`~jetraft.net.transport.route_interest.RouteInterest`). Each is called for a registered
    connection only; ``remote_subs``/``remote_unsubs`` take part of a SUBS/UNSUBS frame and
    return whether any interest changed (the connection tells the router once per frame), the
    others tell the router themselves. An invalid subject refuses the connection."""

    def remote_sub(self, conn: RouteConnection, frame: rp.RouteSub) -> None: ...

    def remote_unsub(self, conn: RouteConnection, frame: rp.RouteUnsub) -> None: ...

    def remote_subs(self, conn: RouteConnection, account: str, subjects: tuple[str, ...]) -> bool: ...

    def remote_unsubs(self, conn: RouteConnection, account: str, subjects: tuple[str, ...]) -> bool: ...


class RouteLink(Protocol):
    """What a :class:`RouteConnection` needs of its route manager
    (:class:`~jetraft.net.transport.route.RouteManager`). ``handshake``, ``gossip_received`` and
    ``app_received`` are called by the connection's reader for each frame of that kind."""

    server: RouteHost
    cluster: ClusterConfig
    #: Bytes a route may have queued before it is closed as a slow consumer.
    max_pending: int
    #: (the cluster's TLSConfig, context for accepted routes, context for dialled ones), or None.
    tls: tuple[TLSConfig, ssl.SSLContext, ssl.SSLContext] | None
    #: SUB/UNSUB/SUBS/UNSUBS frames from registered connections go here.
    interest: PeerInterest

    def next_rid(self) -> int:
        """A route id not given to any connection before."""
        ...

    def local_info(self) -> rp.RouteInfo:
        """This server's INFO."""
        ...

    def log_refused(self, remote: str, reason: str, level: str | None = None) -> None:
        """Emit ``route_refused`` (rate-limited)."""
        ...

    def connection_closed(self, conn: RouteConnection) -> None:
        """``conn`` ended (called once, whatever the reason)."""
        ...

    def route_to_self(self, target: DialTarget) -> None:
        """``target`` leads back to this server: never dial it again."""
        ...

    def handshake(self, conn: RouteConnection, info: rp.RouteInfo) -> None:
        """The first INFO on ``conn``: validate, admit and register, or refuse."""
        ...

    def gossip_received(self, conn: RouteConnection, info: rp.RouteInfo) -> None:
        """A later INFO on ``conn``."""
        ...

    def app_received(self, conn: RouteConnection, frame: rp.AppFrame) -> None:
        """An APP frame on a registered ``conn``."""
        ...


class RouteConnection(StreamConnection):
    """One route socket: a reader, a sender draining the outbound queue, a pinger.

    ``solicited`` is True on the side that dialled. ``info`` is the remote's INFO once
    received, ``peer`` the :class:`~jetraft.net.transport.route.RoutePeer` while this connection is its
    route.
    """

    def __init__(self, manager: RouteLink, stream: trio.SocketStream, ip: str, port: int,
                 *, solicited: bool, target: DialTarget | None = None) -> None:
        super().__init__()
        self.rid = manager.next_rid()
        self.manager = manager
        self.server = manager.server
        self.stream = stream
        self.ip = ip
        self.port = port
        self.solicited = solicited
        self.target = target
        # An accepted connection is a stranger until its handshake is done: its frames are
        # bounded by MAX_HANDSHAKE_FRAME until then (memory before authentication).
        self.parser = rp.RouteParser(rp.MAX_FRAME if solicited else rp.MAX_HANDSHAKE_FRAME)
        self.info: rp.RouteInfo | None = None
        #: the manager's :class:`~jetraft.net.transport.route.RoutePeer` while this is its route
        self.peer: Any = None
        self.registered = False
        self.connect_ok = solicited  # the accepting side needs CONNECT first
        #: (account, subject, queue) -> the RemoteSub of the interest the peer sent
        self.interest: dict[tuple[str, str, str | None], Any] = {}
        self.superseded_by_remote = False
        self.refused = False
        self.quiet = False  # its end was logged as route_refused (or it was a route to self)
        self.start_ns = time.time_ns()
        self.last_activity_ns = self.start_ns
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.dropped_frames = 0
        self.pings_out = 0
        self.interest_work = 0  # subjects of interest applied since the reader last yielded
        self._out: list[bytes] = []
        self._pending = 0
        if manager.tls is not None:
            self.direct_writes = False

    @property
    def remote(self) -> str:
        return format_addr(self.ip, self.port)

    @property
    def reads_batches(self) -> bool:
        """Whether the remote reads SUBS/UNSUBS frames (its INFO announces minor >= 1)."""
        return self.info is not None and self.info.minor >= 1

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet handed to the socket."""
        return self._pending

    def peer_addr(self, advertised: str) -> str:
        """The address ``advertised`` (``host:port``) as seen from here: a wildcard or empty
        host is replaced with this connection's remote IP (route.go processRouteInfo info.IP)."""
        parts = split_addr(advertised)
        if parts is None:
            return advertised
        host, port = parts
        return format_addr(self.ip if host in WILDCARD_HOSTS else host, port)

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serve the route until it closes; the manager is told in every case. Never raises
        (but for cancellation): an exception while handling the route's input closes this
        route alone and is written to the event log as ``connection_error`` (it is redialled
        like any route that ended)."""
        try:
            if self.manager.tls is not None and not await self._start_tls():
                return
            if self.solicited:
                t = self.target
                self.send(rp.encode_connect(t.user if t else None, t.password if t else None)
                          + rp.encode_info(self.manager.local_info()))
            await self._serve([self._handshake_timer, self._pinger], "Remote Closed")
        except* Exception as group:
            report_connection_error(self.server, "route", group.exceptions[0], ip=self.ip,
                                    port=self.port,
                                    peer_name=self.peer.server_name if self.peer else None)
            if self.close_reason is None:
                self.close_reason = "Internal Server Error"
        finally:
            if self.close_reason is None:
                self.close_reason = "Server Shutdown"
            self.manager.connection_closed(self)
            await self._linger_close()

    async def _start_tls(self) -> bool:
        """``cluster { tls }``: the TLS handshake, before any route frame, within the block's
        ``timeout``. Both sides present a certificate and verify the other's against
        ``ca_file`` (nats-server opts.go getTLSConfig: RequireAndVerifyClientCert on routes);
        the dialling side also checks the certificate names the host it dialled. A failure
        is logged as ``route_refused`` and closes this connection alone (a configured route
        is dialled again later). Returns False when the connection is to be closed."""
        tls, accept_ctx, dial_ctx = self.manager.tls
        raw = self.stream
        try:
            with trio.CancelScope() as self._setup_scope:
                with trio.fail_after(tls.timeout):
                    if self.solicited:
                        stream = await client_handshake(raw, dial_ctx, self.target.host)
                    else:
                        stream = await server_handshake(raw, accept_ctx)
                self.stream = stream
                self.tls_fd = socket_fd(stream)
                if not pinned(peer_certificate(stream), tls.pinned_certs):
                    raise HandshakeFailed("peer certificate not in pinned_certs")
            if self._setup_scope.cancelled_caught:
                return False
        except (HandshakeFailed, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError,
                OSError) as exc:
            reason = "TLS handshake timeout" if isinstance(exc, trio.TooSlowError) else str(exc)
            self.refused = self.quiet = True
            self.manager.log_refused(self.remote, f"TLS handshake failed: {reason}")
            if self.close_reason is None:
                self.close_reason = f"refused: TLS handshake failed: {reason}"
            return False
        finally:
            self._setup_scope = None
        return True

    def refuse(self, code: str, reason: str, *, log: bool = True, level: str | None = None) -> None:
        """Send ERR ``code`` and close; ``route_refused`` is logged (at ``level``, default
        the event's) unless ``log`` is False."""
        if self.close_reason is not None:
            return
        self.refused = True
        if log:
            self.quiet = True
            self.manager.log_refused(self.remote, reason, level)
        self.send(rp.encode_err(code, reason))
        self.close(reason if code == rp.ERR_SUPERSEDED else f"refused: {reason}")

    # ------------------------------------------------------------------ output

    def send(self, data: bytes, *, droppable: bool = False) -> bool:
        """Queue one or more encoded frames. False when dropped or the route is closing."""
        if self.close_reason is not None:
            return False
        limit = self.manager.max_pending
        if droppable and self._pending > limit // 2:
            self.dropped_frames += 1
            return False
        self._out.append(data)
        self._pending += len(data)
        if self._pending > limit:
            self._slow(f"{self._pending} bytes pending exceed max_pending {limit}")
            return False
        self._queued()
        return True

    def _slow(self, why: str) -> None:
        self.server.stats.slow_consumers += 1
        self._out = []
        self._pending = 0
        self.close(f"Slow Consumer: {why}", flush=False)

    def _take(self) -> bytes:
        chunks = self._out
        if not chunks:
            return b""
        self._out = []
        self._pending = 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _put_back(self, rest: bytes) -> None:
        self._out.insert(0, rest)
        self._pending += len(rest)

    def _write_timed_out(self, size: int) -> None:
        self._slow(f"a write of {size} bytes took longer than write_deadline "
                   f"{self.server.config.write_deadline}s")

    # ------------------------------------------------------------------ input

    async def _reader(self) -> None:
        parser, server = self.parser, self.server
        router = server.router
        while self.close_reason is None:
            data = await self._read_some(READ_SIZE)
            if not data:
                return
            now = time.time_ns()
            self.last_activity_ns = now
            if self.peer is not None:
                self.peer.last_seen_ns = now
            self.interest_work = 0
            try:
                frames = parser.feed(data)
            except rp.RouteProtocolError as exc:
                reason = str(exc)
                if self.info is None and data[:4] in (b"INFO", b"CONN", b"PING"):
                    reason = "the remote speaks nats-server's text route protocol, not jetraft's"
                self.refuse(rp.ERR_PROTOCOL, reason)
                return
            server.in_read = True           # output is flushed by after_read, not by writers
            try:
                for frame in frames:
                    if self.close_reason is not None:
                        return
                    kind = type(frame)
                    if kind is rp.RouteMsg and self.registered:
                        self.in_msgs += 1
                        self.in_bytes += len(frame.payload) + (len(frame.headers) if frame.headers else 0)
                        # the frame is the Message (protocol.route.RouteMsg), routed as is
                        router.publish_from_route(self.peer.server_name, frame.account, frame, frame.queues)
                    elif kind is rp.RouteConnect:
                        server.after_read()             # before yielding to other tasks
                        await self._on_connect(frame)
                        server.in_read = True
                    elif (kind is rp.RouteSubs or kind is rp.RouteUnsubs) and self.registered:
                        await self._interest_batch(frame)
                    else:
                        self._control(frame)
                        if self.interest_work >= INTEREST_SLICE:
                            await self._yield_to_loop()
            finally:
                server.after_read()         # RAFT work and output of this read, at once

    async def _yield_to_loop(self) -> None:
        """Let other tasks run in the middle of a read (its output and RAFT work go first)."""
        server = self.server
        server.after_read()
        await trio.sleep(0)
        server.in_read = True
        self.interest_work = 0

    async def _interest_batch(self, frame: rp.RouteSubs | rp.RouteUnsubs) -> None:
        """Apply a SUBS/UNSUBS frame, :data:`INTEREST_SLICE` subjects at a time, yielding to
        other tasks between slices; the frames after it wait. The server is told once."""
        interest = self.manager.interest
        apply = interest.remote_subs if type(frame) is rp.RouteSubs else interest.remote_unsubs
        account, subjects = frame.account, frame.subjects
        changed = False
        start, total = 0, len(subjects)
        while start < total:
            if self.interest_work >= INTEREST_SLICE:
                await self._yield_to_loop()
                if not self.registered or self.close_reason is not None:
                    break  # the route was closed or replaced: its interest is forgotten
            end = min(total, start + INTEREST_SLICE - self.interest_work)
            changed |= apply(self, account, subjects[start:end])
            self.interest_work += end - start
            start = end
            if self.close_reason is not None:
                break
        if changed:
            self.server.router.subscriptions_changed(account)

    def _control(self, frame: rp.Frame) -> None:
        kind = type(frame)
        manager = self.manager
        if kind is rp.RoutePing:
            self.send(rp.PONG)
        elif kind is rp.RoutePong:
            self.pings_out = 0
        elif kind is rp.RouteErr:
            self._on_err(frame)
        elif kind is rp.RouteInfo:
            if self.info is None:
                manager.handshake(self, frame)
            else:
                manager.gossip_received(self, frame)
        elif not self.registered:
            self.refuse(rp.ERR_PROTOCOL, f"{kind.__name__} before the handshake finished")
        elif kind is rp.AppFrame:
            manager.app_received(self, frame)
        elif kind is rp.RouteSub:
            self.interest_work += 1
            manager.interest.remote_sub(self, frame)
        elif kind is rp.RouteUnsub:
            self.interest_work += 1
            manager.interest.remote_unsub(self, frame)

    async def _on_connect(self, frame: rp.RouteConnect) -> None:
        if self.solicited or self.connect_ok or self.info is not None:
            self.refuse(rp.ERR_PROTOCOL, "unexpected CONNECT")
            return
        cluster = self.manager.cluster
        tls = self.manager.tls
        if tls is not None and tls[0].verify_and_map:
            # the route's certificate must name the cluster's authorization user; CONNECT's
            # credentials are not used (nats-server auth.go isRouterAuthorized with TLSMap)
            der = peer_certificate(self.stream) if isinstance(self.stream, trio.SSLStream) else None
            if der is None or cluster.user is None or certificate_user(der, [cluster.user]) is None:
                self.refuse(rp.ERR_AUTH, "authorization violation: the route's certificate does not name "
                            "the cluster's authorization user (verify_and_map)")
                return
        elif cluster.user is not None:
            stored = cluster.password or ""
            given = frame.password or ""
            if frame.user != cluster.user:
                ok = False
            elif is_bcrypt(stored):
                ok = await trio.to_thread.run_sync(check_password, stored, given)
            else:
                ok = check_password(stored, given)
            if not ok:
                self.refuse(rp.ERR_AUTH, "authorization violation: bad cluster credentials"
                            + (f" for user {frame.user!r}" if frame.user else " (none given)"))
                return
        self.connect_ok = True

    def _on_err(self, frame: rp.RouteErr) -> None:
        if frame.code == rp.ERR_SUPERSEDED:
            self.superseded_by_remote = True
            self.close(f"superseded by the remote: {frame.text}", flush=False)
            return
        self.refused = True
        if frame.code == rp.ERR_SELF:
            self.quiet = True
            if self.target is not None:
                self.manager.route_to_self(self.target)
        else:
            self.quiet = True
            self.manager.log_refused(self.remote, f"refused by the remote: {frame.text}",
                                     "info" if frame.code == rp.ERR_DUPLICATE else None)
        self.close(f"refused by the remote: {frame.text}", flush=False)

    # ------------------------------------------------------------------ timers

    async def _handshake_timer(self) -> None:
        await trio.sleep(self.manager.cluster.auth_timeout)
        if not self.registered and self.close_reason is None:
            self.refuse(rp.ERR_PROTOCOL, f"handshake not finished within "
                                         f"{self.manager.cluster.auth_timeout}s")

    async def _pinger(self) -> None:
        cfg = self.manager.server.config
        interval = min(cfg.ping_interval, ROUTE_PING_INTERVAL)
        while True:
            await trio.sleep(interval)
            if self.pings_out + 1 > cfg.ping_max:
                self.close("Stale Connection", flush=False)
                return
            self.pings_out += 1
            self.send(rp.PING)


