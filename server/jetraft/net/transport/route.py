"""Routes: the full mesh of connections between the servers of one cluster.

:class:`RouteManager` listens on the ``cluster`` port, solicits every configured route, and
keeps at most one route per remote server. It follows nats-server server/route.go:

- **Handshake.** The soliciting side sends CONNECT (the route URL's credentials) and its
  INFO; the accepting side checks them and answers with its own INFO, or with an ERR frame
  and a ``route_refused`` event: a different cluster name (route.go processRouteInfo
  ClusterNameConflict), bad credentials when ``cluster { authorization { user, password } }``
  is set (processRouteConnect), a connection to itself (same server_id: DuplicateRoute, and
  the address is never dialled again, as nats-server's ``routesToSelf``), this server's own
  server_name (DuplicateServerName), or a protocol version it does not speak. Both sides
  must finish within ``cluster.authorization.timeout`` (``auth_timeout``) seconds.
- **Duplicates.** When two servers dial each other at once there are two connections between
  them. Both servers keep the same one, the connection solicited by the server with the lower
  server_id, and close the other with ERR ``superseded`` (route.go addRoute /
  handleDuplicateRoute, made deterministic). A route being replaced this way does not count
  as the peer going down: the peer stays in :attr:`RouteManager.peers` for up to
  :data:`SUPERSEDE_GRACE` seconds while the replacement connects. A second connection in the
  same direction is refused as ``duplicate`` and its address is not dialled again while the
  peer is connected. A server that comes back with a new server_id while its old route still
  looks alive replaces it: the old route is closed and the peer reported down, then up.
- **Implicit discovery.** Each INFO lists the route addresses the sender knows (its
  configured routes and the listen addresses of its peers); the receiver dials the ones it
  does not know. When a new peer registers, every other peer gets a fresh INFO (route.go
  forwardNewRouteInfoToKnownServers), so servers that each list one seed form a full mesh.
- **Reconnects.** A configured or discovered route that fails or dies is dialled again with
  exponential backoff from :data:`INITIAL_BACKOFF` to :data:`MAX_BACKOFF` seconds, each delay
  jittered to 50-100 % (route.go connectToRoute with connect_backoff, reConnectToRoute's
  random delay).
- **TLS.** With ``cluster { tls { ... } }`` every route, dialled or accepted, starts with a
  TLS handshake (within the block's ``timeout``) in which both sides present a certificate and
  verify the other's against ``ca_file``; the dialling side also checks that the certificate
  names the host it dialled (nats-server opts.go getTLSConfig requires client certificates on
  routes). A connection that fails it is closed and logged as ``route_refused``. With
  ``verify_and_map`` an accepted route's certificate must name the cluster's authorization user
  (e-mail, DNS name or subject, as for clients) instead of CONNECT's credentials. A SIGHUP
  reload reads the certificate, key and CA again for routes connected from then on.
- **Keepalive.** A PING every ``min(ping_interval, ROUTE_PING_INTERVAL)`` seconds; a route
  with ``ping_max`` PINGs unanswered is closed ("Stale Connection").
- **Interest.** Local subscriptions and the server's own interest are reference-counted and
  sent to every peer as SUB/UNSUB (SUBS/UNSUBS for many subjects at once); the interest a
  peer sent is kept until its route goes down (:mod:`jetraft.net.transport.route_interest`). The
  receiving side applies interest frames in slices of :data:`INTEREST_SLICE` subjects;
  between slices the reader lets other tasks run, and the frames after them on the same
  route wait (order is kept). A SUBS/UNSUBS frame tells the router
  (``Router.subscriptions_changed``, and through it JetStream) once, not once per subject.
- **Output.** Each route has an outbound queue drained by one sender task that writes
  everything queued in one ``send_all`` (many small frames coalesce into one write). Past
  half of ``max_pending`` bytes queued, APP frames of kind ``"raft"`` are dropped (RAFT
  retransmits); past ``max_pending`` or when a write takes longer than ``write_deadline``
  seconds, the route is closed as a slow consumer and the reason logged.

The public API used by other layers: :attr:`RouteManager.peers`, :meth:`~RouteManager.send_app`,
:meth:`~RouteManager.on_app`, :meth:`~RouteManager.on_peer_change`,
:meth:`~RouteManager.add_internal_interest`, :meth:`~RouteManager.remove_internal_interest`,
:meth:`~RouteManager.add_internal_interests`, :meth:`~RouteManager.remove_internal_interests`,
:meth:`~RouteManager.has_remote_interest`. Routed messages reach
``Router.publish_from_route`` (:mod:`jetraft.net.transport.router`) as one
:class:`~jetraft.protocol.message.Message`; :meth:`RouteManager.forward` sends one.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import trio

from jetraft.config import ClusterConfig, client_context, is_bcrypt, server_context
from jetraft.net.transport.client import accept_connections
from jetraft.net.transport.route_conn import (
    INTEREST_SLICE,
    WILDCARD_HOSTS,
    RouteConnection,
    format_addr,
    split_addr,
)
from jetraft.net.transport.route_interest import RemoteSub, RouteInterest
from jetraft.protocol import Match, Message
from jetraft.protocol import route as rp

if TYPE_CHECKING:
    from jetraft.net.ports import RouteHost

# RouteConnection and INTEREST_SLICE are defined in jetraft.net.transport.route_conn, RemoteSub in
# jetraft.net.transport.route_interest.
__all__ = ["INTEREST_SLICE", "RemoteSub", "RouteConnection", "RouteManager", "RoutePeer", "RouteTarget"]

#: First and largest delay (seconds) between attempts to dial a route.
INITIAL_BACKOFF = 0.05
MAX_BACKOFF = 2.0
#: Seconds a peer whose route was superseded stays registered while its replacement connects.
SUPERSEDE_GRACE = 2.0
#: Seconds to wait for a TCP connection to a route.
DIAL_TIMEOUT = 2.0
#: APP frames of this kind are dropped first when a route's output backs up.
DROPPABLE_KIND = "raft"
#: Accepted route connections that may be in their handshake at once; past it a new one is
#: closed at once. With :data:`~jetraft.protocol.route.MAX_HANDSHAKE_FRAME` this bounds what
#: strangers on the route port can make the server hold (128 x 64 KiB).
MAX_PENDING_ROUTES = 128


class RoutePeer:
    """A remote server reached through a route that finished its handshake.

    ``remote`` is the route's ``"ip:port"``, ``connected_ns`` when this server first
    registered it and ``last_seen_ns`` when a frame last arrived from it (both
    ``time.time_ns()``). ``listen`` is its route address as this server dials it,
    ``client_url`` its client ``"host:port"`` (or None). ``conn`` is the route connection to
    this peer, None while it is being replaced.
    """

    __slots__ = ("client_url", "cluster", "conn", "connected_ns", "jetstream", "last_seen_ns",
                 "listen", "remote", "server_id", "server_name", "tags")

    def __init__(self, conn: RouteConnection, info: rp.RouteInfo) -> None:
        self.server_name = info.server_name
        self.connected_ns = time.time_ns()
        self.last_seen_ns = self.connected_ns
        self.conn: RouteConnection | None = None
        self.attach(conn, info)

    def attach(self, conn: RouteConnection, info: rp.RouteInfo) -> None:
        """Make ``conn`` (whose INFO is ``info``) this peer's route."""
        self.conn = conn
        self.server_id = info.server_id
        self.cluster = info.cluster
        self.tags: tuple[str, ...] = tuple(info.tags)
        self.jetstream = info.jetstream
        self.remote = format_addr(conn.ip, conn.port)
        self.listen = conn.peer_addr(info.listen)
        self.client_url = conn.peer_addr(info.client_url) if info.client_url else None

    def __repr__(self) -> str:
        return (f"RoutePeer({self.server_name!r}, id={self.server_id[:8]}…, remote={self.remote}, "
                f"tags={self.tags}, jetstream={self.jetstream})")


class RouteTarget:
    """A route address this server dials: configured, or learnt from a peer's INFO."""

    __slots__ = ("addr", "configured", "host", "is_self", "password", "peer_name", "port", "user")

    def __init__(self, host: str, port: int, user: str | None, password: str | None,
                 configured: bool) -> None:
        self.host = host
        self.port = port
        self.addr = format_addr(host, port)
        self.user = user
        self.password = password
        self.configured = configured
        self.is_self = False
        self.peer_name: str | None = None  # learnt from the remote's INFO

    def url(self) -> str:
        """The route URL without its password, for the event log."""
        user = f"{self.user}:[REDACTED]@" if self.user else ""
        return f"nats-route://{user}{self.addr}"


class RouteManager:
    """The cluster side of one server (see the module docstring).

    Create it with the :class:`~jetraft.server.Server`; ``await nursery.start(manager.run)``
    binds the cluster listener (``cluster.host``/``cluster.port``; -1 or 0 for a random port)
    and returns once it listens, with the bound port in :attr:`port`. Raises ``OSError`` when
    the port cannot be bound.
    """

    def __init__(self, server: RouteHost) -> None:
        assert server.config.cluster is not None
        self.server = server
        self.cluster = server.config.cluster
        self.cluster_name = self.cluster.name or ""
        self.events = server.events
        self.max_pending = server.config.max_pending
        self.port: int | None = None
        #: Remote server_name -> peer, for routes that finished the handshake.
        self.peers: dict[str, RoutePeer] = {}
        self.connections: dict[int, RouteConnection] = {}
        self._next_rid = 0
        self._targets: dict[str, RouteTarget] = {}
        self._self_addrs: set[str] = set()
        self._app_handlers: dict[str, Callable[[str, bytes], None]] = {}
        self._peer_handlers: list[Callable[[str, bool], None]] = []
        #: What this server and its peers told each other they want (SUB/UNSUB frames).
        self.interest = RouteInterest(server, self.peers)
        self._changed = trio.Event()
        self._no_connections = trio.Event()
        self._no_connections.set()
        self._refusals: dict[tuple[str, str], float] = {}
        self._nursery: trio.Nursery | None = None
        self._accept_scope = trio.CancelScope()
        self._closing = False
        user = self.cluster.user
        password = self.cluster.password if user else None
        if user is None or (password and is_bcrypt(password)):
            # discovered routes reuse the credentials of a configured route (the cluster's own
            # password may be a bcrypt hash, useless to dial with)
            creds = next(((r.user, r.password) for r in self.cluster.routes if r.user), (None, None))
            user, password = creds
        self._implicit_creds = (user, password)
        #: (the cluster's TLSConfig, context for accepted routes, context for dialled ones),
        #: or None: plain TCP. Replaced by :meth:`reload_tls`.
        self.tls = self._tls_contexts(self.cluster)

    def next_rid(self) -> int:
        """A route id not given to any connection before (1, 2, ...: /routez ``rid``)."""
        self._next_rid += 1
        return self._next_rid

    def targets(self) -> list[RouteTarget]:
        """Every route address this server dials: configured, or learnt from peers."""
        return list(self._targets.values())

    @staticmethod
    def _tls_contexts(cluster: ClusterConfig) -> tuple | None:
        if cluster.tls is None:
            return None
        return (cluster.tls, server_context(cluster.tls, require_client_cert=True), client_context(cluster.tls))

    def reload_tls(self, cluster: ClusterConfig) -> None:
        """Read the cluster's certificate, key and CA again (SIGHUP): routes connected from
        now on use them; routes up stay as they are. Raises ConfigError (nothing changes)."""
        self.tls = self._tls_contexts(cluster)

    # ------------------------------------------------------------------ public API

    def send_app(self, server_name: str, kind: str, body: bytes) -> bool:
        """Queue an APP frame for ``server_name``; never blocks. False when there is no route
        to it (or, for kind ``"raft"``, when its route is backed up and the frame dropped)."""
        peer = self.peers.get(server_name)
        conn = peer.conn if peer is not None else None
        if conn is None:
            return False
        return conn.send(rp.encode_app(kind, body), droppable=kind == DROPPABLE_KIND)

    def on_app(self, kind: str, handler: Callable[[str, bytes], None]) -> None:
        """Call ``handler(src_server_name, body)`` for every APP frame of ``kind`` (one handler
        per kind; a later registration replaces it). A handler that raises closes the route
        it was called for (the body is taken to be malformed) and the error is logged."""
        self._app_handlers[kind] = handler

    def on_peer_change(self, handler: Callable[[str, bool], None]) -> None:
        """Call ``handler(server_name, connected)`` when a route comes up or goes down. A route
        replaced by another to the same server (duplicate resolution) is no change."""
        self._peer_handlers.append(handler)

    # Interest (jetraft.net.transport.route_interest): the manager's share of the public API.

    def add_internal_interest(self, account: str, subject: str, queue: str | None = None) -> None:
        """Interest held by this server itself: :meth:`RouteInterest.add_internal_interest`."""
        self.interest.add_internal_interest(account, subject, queue)

    def remove_internal_interest(self, account: str, subject: str, queue: str | None = None) -> None:
        """Drop one reference taken by :meth:`add_internal_interest`."""
        self.interest.remove_internal_interest(account, subject, queue)

    def add_internal_interests(self, account: str, subjects: Iterable[str]) -> None:
        """Many subjects at once: :meth:`RouteInterest.add_internal_interests`."""
        self.interest.add_internal_interests(account, subjects)

    def remove_internal_interests(self, account: str, subjects: Iterable[str]) -> None:
        """Drop one reference of each: :meth:`RouteInterest.remove_internal_interests`."""
        self.interest.remove_internal_interests(account, subjects)

    def local_interest(self, account: str, subject: str, queue: str | None, delta: int) -> None:
        """A local (un)subscription: :meth:`RouteInterest.local_interest`."""
        self.interest.local_interest(account, subject, queue, delta)

    def has_remote_interest(self, account: str, subject: str) -> bool:
        """Whether any peer has interest matching the literal ``subject``."""
        return self.interest.has_remote_interest(account, subject)

    def match_remote(self, account: str, subject: str) -> Match | None:
        """The peers' interest matching ``subject`` (items are :class:`RemoteSub`), or None."""
        return self.interest.match_remote(account, subject)

    def remote_subscription_count(self) -> int:
        """How many (account, subject, queue) interests all peers hold (for /varz, /routez)."""
        return self.interest.remote_subscription_count()

    def forward(self, account: str, msg: Message, targets: dict[RouteConnection, list[str]]) -> None:
        """Send ``msg`` as one MSG to each route in ``targets`` (route -> queue names it
        should deliver to). Routes without queues share one encoded frame."""
        subject, reply, headers, payload = msg.subject, msg.reply, msg.headers, msg.payload
        deliver_as = msg.deliver_as
        plain: bytes | None = None
        size = len(payload) + (len(headers) if headers else 0)
        for conn, queues in targets.items():
            if queues:
                frame = rp.encode_msg(account, subject, reply, headers, payload, queues, deliver_as)
            else:
                if plain is None:
                    plain = rp.encode_msg(account, subject, reply, headers, payload, (), deliver_as)
                frame = plain
            if conn.send(frame):
                conn.out_msgs += 1
                conn.out_bytes += size

    # ------------------------------------------------------------------ APP frames

    def app_received(self, conn: RouteConnection, frame: rp.AppFrame) -> None:
        """An APP frame from ``conn``'s peer, to the handler of its kind (see :meth:`on_app`);
        a handler that raises refuses the route."""
        handler = self._app_handlers.get(frame.kind)
        if handler is None:
            return
        try:
            handler(conn.peer.server_name, frame.body)
        except Exception as exc:  # noqa: BLE001 - a peer's bad body must not stop this server
            conn.refuse(rp.ERR_PROTOCOL, f"APP frame of kind {frame.kind!r} rejected: "
                                         f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ handshake

    def local_info(self) -> rp.RouteInfo:
        """This server's INFO: identity, route listener, known routes, client URL."""
        server = self.server
        cfg = server.config
        host = self.cluster.host
        listen = format_addr("" if host in WILDCARD_HOSTS else host, self.port or 0)
        client_url = None
        if server.client_port:
            client_url = format_addr("" if cfg.host in WILDCARD_HOSTS else cfg.host, server.client_port)
        known = {t.addr for t in self._targets.values() if not t.is_self}
        known.update(p.listen for p in self.peers.values())
        return rp.RouteInfo(
            server_name=server.server_name, server_id=server.server_id, cluster=self.cluster_name,
            tags=tuple(cfg.server_tags), jetstream=server.jetstream is not None, listen=listen,
            routes=tuple(sorted(known)), client_url=client_url, minor=rp.MINOR)

    def _validate(self, conn: RouteConnection, info: rp.RouteInfo) -> tuple[str, str] | None:
        server = self.server
        if info.version != rp.VERSION:
            return rp.ERR_PROTOCOL, f"route protocol version {info.version} is not {rp.VERSION}"
        if info.server_id == server.server_id:
            return rp.ERR_SELF, "route to self"
        if info.cluster != self.cluster_name:
            return (rp.ERR_CLUSTER, f"cluster name conflict: remote {info.server_name!r} is in "
                                    f"cluster {info.cluster!r}, this server in {self.cluster_name!r}")
        if info.server_name == server.server_name:
            return rp.ERR_NAME, f"remote server has a duplicate name: {info.server_name!r}"
        return None

    def _admit(self, conn: RouteConnection, info: rp.RouteInfo) -> tuple[str, str] | None:
        """None to register ``conn``; else why it is a duplicate of the peer's current route."""
        peer = self.peers.get(info.server_name)
        old = peer.conn if peer is not None else None
        if old is None or old is conn:
            return None
        if old.info.server_id != info.server_id:
            return None  # the server restarted (new id): its old route is stale
        if old.solicited == conn.solicited:
            return rp.ERR_DUPLICATE, f"already connected to {info.server_name!r}"
        # Two routes in opposite directions: both ends keep the one solicited by the lower id.
        keep_new = conn.solicited == (self.server.server_id < info.server_id)
        return None if keep_new else (rp.ERR_DUPLICATE, f"already connected to {info.server_name!r}")

    def handshake(self, conn: RouteConnection, info: rp.RouteInfo) -> None:
        """The first INFO on ``conn``: refuse it (ERR and ``route_refused``), or register it
        as its peer's route, answering an accepted connection with this server's INFO."""
        if not conn.connect_ok:
            conn.refuse(rp.ERR_PROTOCOL, "INFO before CONNECT")
            return
        conn.info = info
        if conn.target is not None:
            conn.target.peer_name = info.server_name
        refusal = self._validate(conn, info)
        if refusal is not None:
            code, reason = refusal
            if code == rp.ERR_SELF:
                conn.quiet = True
                if conn.target is not None:
                    self.route_to_self(conn.target)
                conn.refuse(code, reason, log=False)
                return
            conn.refuse(code, reason)
            return
        duplicate = self._admit(conn, info)
        if not conn.solicited:
            conn.send(rp.encode_info(self.local_info()))  # the answer: accepted (or see ERR)
        if duplicate is not None:
            conn.refuse(*duplicate, level="info")  # routine when two servers dial each other
            return
        self._register(conn, info)
        self.gossip_received(conn, info)

    def route_to_self(self, target: RouteTarget) -> None:
        """``target`` leads back to this server: never dial it again (nats-server routesToSelf)."""
        if not target.is_self:
            target.is_self = True
            self._self_addrs.add(target.addr)
            self.log_refused(target.addr, "route to self ignored", "info")

    def _register(self, conn: RouteConnection, info: rp.RouteInfo) -> None:
        name = info.server_name
        peer = self.peers.get(name)
        if peer is not None and peer.server_id != info.server_id:
            # The server restarted (a new id) while its old route looked alive: that route is
            # dead, and the peer went down and came back up.
            old = peer.conn
            if old is not None:
                self._detach(old)
                old.close("replaced: the remote server restarted with a new server id", flush=False)
            peer.conn = None
            self._unregister(peer)
            peer = None
        fresh = peer is None
        if fresh:
            peer = self.peers[name] = RoutePeer(conn, info)
        else:
            old = peer.conn
            if old is not None and old is not conn:
                self._detach(old)
                old.refuse(rp.ERR_SUPERSEDED, f"superseded by route {conn.rid} to the same server "
                                              f"({'solicited' if conn.solicited else 'accepted'} here)",
                           log=False)
            peer.attach(conn, info)
        conn.peer = peer
        conn.registered = True
        conn.parser.max_frame = rp.MAX_FRAME
        table = self.interest.table_for(conn)
        if table:
            conn.send(table)
        self.events.emit("route_connected", peer_name=name, peer_id=info.server_id, remote=conn.remote,
                         direction="solicited" if conn.solicited else "accepted",
                         tags=list(info.tags), jetstream=info.jetstream)
        self._signal_change()
        if fresh:
            self._update_connect_urls()
            for other in self.peers.values():  # tell everyone else about the newcomer
                if other is not peer and other.conn is not None:
                    other.conn.send(rp.encode_info(self.local_info()))
            for handler in list(self._peer_handlers):
                handler(name, True)

    def _detach(self, conn: RouteConnection) -> None:
        """``conn`` stops being its peer's route: forget the interest it brought."""
        if conn.registered:
            conn.registered = False
            self.interest.forget(conn)

    def connection_closed(self, conn: RouteConnection) -> None:
        """Called by every connection as it ends."""
        self.connections.pop(conn.rid, None)
        if not self.connections:
            self._no_connections.set()
        peer = conn.peer
        if not conn.quiet:
            name = peer.server_name if peer else (conn.info.server_name if conn.info else None)
            self.events.emit("route_closed", peer_name=name, remote=conn.remote,
                             reason=conn.close_reason)
        was_route = conn.registered
        self._detach(conn)
        if not was_route or peer is None or peer.conn is not conn:
            return
        peer.conn = None
        if conn.superseded_by_remote and self._nursery is not None:
            self._nursery.start_soon(self._grace, peer)
        else:
            self._unregister(peer)

    async def _grace(self, peer: RoutePeer) -> None:
        await trio.sleep(SUPERSEDE_GRACE)
        if peer.conn is None and self.peers.get(peer.server_name) is peer:
            self._unregister(peer)

    def _unregister(self, peer: RoutePeer) -> None:
        if self.peers.get(peer.server_name) is not peer:
            return
        del self.peers[peer.server_name]
        self._update_connect_urls()
        self._signal_change()
        for handler in list(self._peer_handlers):
            handler(peer.server_name, False)

    def _signal_change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def log_refused(self, remote: str, reason: str, level: str | None = None) -> None:
        """Emit ``route_refused``; the same (remote host, reason) at most every 30 s."""
        key = (remote.rpartition(":")[0], reason)
        now = time.monotonic()
        if now - self._refusals.get(key, -1e9) < 30.0:
            return
        self._refusals[key] = now
        self.events.emit("route_refused", level=level, remote=remote, reason=reason)

    # ------------------------------------------------------------------ discovery

    def gossip_received(self, conn: RouteConnection, info: rp.RouteInfo) -> None:
        """An INFO from a registered peer: dial the routes it knows that this server does not."""
        if not conn.registered:
            return
        if conn.info is not info:  # an update: refresh what the peer told us about itself
            conn.info = info
            conn.peer.attach(conn, info)
            self._update_connect_urls()
        for addr in info.routes:
            self._discover(addr)

    def _discover(self, addr: str) -> None:
        parts = split_addr(addr)
        if parts is None or self._nursery is None:
            return
        key = format_addr(*parts)
        if key in self._targets or key in self._self_addrs or self._closing:
            return
        if any(p.listen == key for p in self.peers.values()):
            return
        user, password = self._implicit_creds
        target = self._targets[key] = RouteTarget(parts[0], parts[1], user, password, configured=False)
        self._nursery.start_soon(self._solicit, target)

    def _update_connect_urls(self) -> None:
        server = self.server
        urls = []
        if server.client_port:
            host = server.config.host
            urls.append(format_addr("127.0.0.1" if host in WILDCARD_HOSTS else host, server.client_port))
        urls += [p.client_url for p in self.peers.values() if p.client_url]
        server.set_connect_urls(sorted(set(urls)) if self.peers else [])

    def _broadcast(self, frame: bytes) -> None:
        for peer in self.peers.values():
            if peer.conn is not None:
                peer.conn.send(frame)

    def refresh_info(self) -> None:
        """Send every peer this server's INFO again (its client URL became known, say)."""
        info = rp.encode_info(self.local_info())
        self._broadcast(info)
        self._update_connect_urls()

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, solicit the configured routes, serve routes until cancelled."""
        listeners = await trio.open_tcp_listeners(
            max(self.cluster.port, 0), host=self.cluster.host)
        self.port = listeners[0].socket.getsockname()[1]
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for listener in listeners:
                    nursery.start_soon(self._accept_on, listener)
                for route in self.cluster.routes:
                    target = RouteTarget(route.host, route.port, route.user, route.password, configured=True)
                    if target.addr in self._targets:
                        continue
                    self._targets[target.addr] = target
                    nursery.start_soon(self._solicit, target)
                task_status.started(self.port)
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()

    def close_all(self, reason: str = "Server Shutdown") -> None:
        """Stop accepting and dialling; close every route after flushing what is queued."""
        self._accept_scope.cancel()
        self._closing = True  # never dial again
        for conn in list(self.connections.values()):
            conn.close(reason)

    async def wait_closed(self) -> None:
        """Return once every route connection has ended."""
        await self._no_connections.wait()

    async def _accept_on(self, listener: trio.SocketListener) -> None:
        with self._accept_scope:
            await accept_connections(listener, self._accepted, self._accept_failed)

    def _accept_failed(self, exc: OSError) -> None:
        self.events.emit("config_warning", message=f"route accept failed: {exc}")

    def _accepted(self, stream: trio.SocketStream, ip: str, port: int) -> None:
        pending = sum(1 for c in self.connections.values() if not c.solicited and not c.registered)
        if pending >= MAX_PENDING_ROUTES:
            self.log_refused(format_addr(ip, port), f"{pending} route connections are in their "
                             f"handshake already (at most {MAX_PENDING_ROUTES})")
            self._nursery.start_soon(stream.aclose)
            return
        conn = RouteConnection(self, stream, ip, port, solicited=False)
        self.connections[conn.rid] = conn
        self._no_connections = trio.Event()
        self._nursery.start_soon(conn.run)

    async def _solicit(self, target: RouteTarget) -> None:
        """Dial ``target`` until it turns out to be this server; redial when its route ends."""
        delay = INITIAL_BACKOFF
        while not target.is_self and not self._closing:
            while target.peer_name is not None and target.peer_name in self.peers:
                await self._changed.wait()  # connected through another route: wait for it to go
            if target.is_self or self._closing:
                return
            try:
                with trio.fail_after(DIAL_TIMEOUT):
                    stream = await trio.open_tcp_stream(target.host, target.port)
                stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
                ip, port = stream.socket.getpeername()[:2]
            except (OSError, trio.TooSlowError) as exc:
                wait = delay * random.uniform(0.5, 1.0)
                self.events.emit("route_connect_failed", url=target.url(), error=_dial_error(exc),
                                 retry_in_s=round(wait, 3))
                await trio.sleep(wait)
                delay = min(delay * 2, MAX_BACKOFF)
                continue
            if self._closing:
                await stream.aclose()
                return
            conn = RouteConnection(self, stream, ip, port, solicited=True, target=target)
            self.connections[conn.rid] = conn
            self._no_connections = trio.Event()
            await conn.run()
            if conn.peer is not None:  # it was a working route: redial promptly
                delay = INITIAL_BACKOFF
            await trio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, MAX_BACKOFF)


def _dial_error(exc: BaseException) -> str:
    """The reason a dial failed (trio wraps the per-address errors in the OSError's cause)."""
    cause = exc.__cause__
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    return str(cause or exc) or type(exc).__name__
