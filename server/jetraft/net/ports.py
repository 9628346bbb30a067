"""What the ``net`` modules need from the server around them, as typing Protocols.

The connections, the router, monitoring, the ``$SYS`` request handler and JetStream each
name the few attributes and methods of their owner they use; :class:`jetraft.server.Server`
(and :class:`jetraft.net.transport.router.Router`) provide them. No module of ``net`` imports
``jetraft.server``, so each can be driven in a test by a small stand-in. Objects of other
``net`` modules (route manager, JetStream service, client connections) are typed ``Any``
here: naming their classes would make this module import the modules that import it.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from jetraft.auth import Authenticator
from jetraft.config import ServerConfig, TLSConfig
from jetraft.events import EventLog
from jetraft.protocol import Message, SubjectIndex

__all__ = [
    "AccountView",
    "ClientHost",
    "ClientRouter",
    "ConnectionHost",
    "Counters",
    "JetStreamHandler",
    "JetStreamHost",
    "MonitorHost",
    "RouteHost",
    "RouteRouter",
    "RouterHost",
    "SysreqHost",
    "SystemRequests",
]


class Counters(Protocol):
    """Server-wide message, byte and connection counters (/varz, ``$SYS`` STATSZ)."""

    in_msgs: int
    in_bytes: int
    out_msgs: int
    out_bytes: int
    slow_consumers: int
    total_connections: int


class AccountView(Protocol):
    """An account: its name and its subject index of client subscriptions."""

    name: str
    sublist: SubjectIndex[Any]


class ClientRouter(Protocol):
    """What a client connection asks of the router."""

    def account(self, name: str) -> AccountView: ...

    def publish(self, client: Any, msg: Message) -> None: ...

    def subscription_added(self, account: str, subject: str, queue: str | None) -> None: ...

    def subscription_removed(self, account: str, subject: str, queue: str | None) -> None: ...


class RouteRouter(Protocol):
    """What a route connection asks of the router."""

    def publish_from_route(self, src: str, account: str, msg: Message,
                           queues: tuple[str, ...] = ()) -> None: ...

    def subscriptions_changed(self, account: str) -> None: ...


class ConnectionHost(Protocol):
    """What every connection (client or route) needs: configuration, event log, counters,
    and the flush-once-per-read bookkeeping (see ``Server.after_read``)."""

    config: ServerConfig
    events: EventLog
    #: connections with output queued since the last flush
    outbound_queued: set[Any]
    #: a read is being processed: writers are not woken
    in_read: bool

    @property
    def stats(self) -> Counters: ...

    def after_read(self) -> None: ...


class ClientHost(ConnectionHost, Protocol):
    """What a client connection needs from the server."""

    auth: Authenticator
    #: (TLSConfig, ssl.SSLContext) for new client connections; None: plain TCP
    client_tls: tuple[TLSConfig, ssl.SSLContext] | None

    @property
    def router(self) -> ClientRouter: ...

    def client_info(self, client: Any) -> dict[str, Any]: ...

    def client_closed(self, client: Any) -> None: ...


class RouteHost(ConnectionHost, Protocol):
    """What the cluster's route manager and its connections need from the server."""

    server_id: str
    server_name: str
    client_port: int | None
    #: the JetStream service (``jetraft.net.jetstream.service.JetStreamService``), or None
    jetstream: Any

    @property
    def router(self) -> RouteRouter: ...

    def set_connect_urls(self, urls: list[str]) -> None: ...


class JetStreamHost(Protocol):
    """What the JetStream service (and its cluster controller) needs from the server."""

    config: ServerConfig
    events: EventLog
    server_name: str
    #: the cluster's route manager (``jetraft.net.transport.route.RouteManager``), or None
    routes: Any
    #: called by ``after_read`` before flushing
    after_read_hooks: list[Callable[[], None]]
    in_read: bool

    def account(self, name: str) -> AccountView: ...

    def route_internal(self, account: str, msg: Message) -> None: ...

    def flush_outbound(self) -> None: ...


class MonitorHost(Protocol):
    """What the monitoring endpoints read."""

    config: ServerConfig
    auth: Authenticator
    server_id: str
    server_name: str
    start_ns: int
    config_load_ns: int
    #: cid -> ``jetraft.net.transport.client.ClientConnection``
    clients: dict[int, Any]
    #: ``jetraft.net.transport.route.RouteManager`` or None
    routes: Any
    #: ``jetraft.net.jetstream.service.JetStreamService`` or None
    jetstream: Any
    client_port: int | None
    monitor_port: int | None
    monitor_tls: ssl.SSLContext | None
    lame_duck_mode: bool

    @property
    def stats(self) -> Counters: ...

    @property
    def accounts(self) -> Mapping[str, AccountView]: ...

    @property
    def healthy(self) -> bool: ...

    def uptime(self) -> str: ...


class SysreqHost(MonitorHost, Protocol):
    """What the ``$SYS.REQ.SERVER`` handler needs: the monitoring view, a sequence number
    for its answers, and a way to send them."""

    sys_seq: int

    def route_internal(self, account: str, msg: Message) -> None: ...


class RouterHost(Protocol):
    """What the router needs from the server: the running configuration (read on every
    use) and the counters."""

    config: ServerConfig

    @property
    def stats(self) -> Counters: ...


class JetStreamHandler(Protocol):
    """What the router hands to JetStream (net/jetstream/service.py's JetStreamService)."""

    def handle(self, account: str, msg: Message, *, routed: bool = False,
               client: Any = None) -> bool:
        """Give JetStream an inbound message; True when JetStream answers it."""
        ...

    def with_client_info(self, msg: Message, client: Any) -> Message:
        """A ``$JS.API`` request with the publishing client's info in its header."""
        ...

    def interest_changed(self, account: str) -> None:
        """A subscription was added or removed in ``account``."""
        ...


class SystemRequests(Protocol):
    """The system requests the router hands over, as it hands ``$JS.API`` to JetStream
    (net/monitoring/sysreq.py's SystemService): each returns True when it answered the message."""

    def request(self, account: str, msg: Message) -> bool:
        """``$SYS.REQ.SERVER...`` published in ``account`` (answered in the system account)."""
        ...

    def user_info(self, client: Any, subject: str, reply: str | None) -> bool:
        """``$SYS.REQ.USER.INFO`` published by ``client``, in any account."""
        ...
