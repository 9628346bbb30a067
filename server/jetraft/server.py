"""Wiring: a :class:`~jetraft.config.ServerConfig` becomes a running trio nursery.

:class:`Server` owns the client listener, the monitoring listener, the signal handler and
one task group per client connection; it builds the :class:`~jetraft.net.transport.router.Router`
(accounts and message routing), the cluster's routes and JetStream, and starts, reloads,
drains (lame duck) and stops them. The ``net`` modules see it through the Protocols of
:mod:`jetraft.net.ports`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
import signal
import time
from collections.abc import Callable
from typing import Any

import trio

from jetraft import NATS_COMPAT_VERSION, __version__
from jetraft.auth import GLOBAL_ACCOUNT, Authenticator
from jetraft.config import ConfigError, ServerConfig, TLSConfig, load_config, server_context, validate
from jetraft.events import EventLog, HumanLog
from jetraft.net.transport.client import ClientConnection, accept_connections
from jetraft.net.jetstream.service import JetStreamService
from jetraft.net.monitoring.monitor import serve_monitor
from jetraft.net.transport.route import RouteManager
from jetraft.net.transport.route_interest import JS_API_QUEUE, JS_API_SUBJECT
from jetraft.net.transport.router import Router
from jetraft.net.monitoring.sysreq import PING_SUBJECTS, SystemService
from jetraft.protocol import encode_err, encode_info

_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

#: Options a SIGHUP reload cannot change (nats-server server/reload.go refuses them too:
#: diffOptions has no case for them, or refuses the change).
NOT_RELOADABLE = ("host", "port", "http_host", "http_port", "https_port", "server_name", "cluster", "jetstream",
                  "max_pending", "max_closed_clients", "lame_duck_duration", "lame_duck_grace_period",
                  "system_account")
#: Of those, the blocks whose values a refusal does not show (the others show ``old=...,
#: new=...``, as reload.go).
_BLOCKS = ("cluster", "jetstream")


def write_pid_file(path: str) -> None:
    """Write this process's id to ``path``. A file it creates is mode 0600 whatever the
    umask, as nats-server's (server/server.go logPid, defaultFilePerms). Raises OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")


def reload_refusals(old: ServerConfig, new: ServerConfig) -> list[str]:
    """Why a reload from ``old`` to ``new`` cannot be applied (empty: it can), one reason
    per option, each ``config reload not supported for <option>...``.

    nats-server's rules (server/reload.go diffOptions): the options of
    :data:`NOT_RELOADABLE`; ``no_auth_user`` may only be removed together with its user.
    jetraft's own, where it would otherwise accept a change and not act on it (fail
    closed): the accounts JetStream serves (their stores and, in a cluster, their RAFT
    groups are opened at start), their JetStream limits (read at start) and, in a JetStream
    cluster, ``server_tags`` (placement and the server's zone are read at start). A restart
    applies any of them."""
    out = []
    for name in NOT_RELOADABLE:
        before, after = _reload_key(old, name), _reload_key(new, name)
        if before != after:
            shown = "" if name in _BLOCKS else f": old={before}, new={after}"
            out.append(f"config reload not supported for {name}{shown}")
    if old.no_auth_user != new.no_auth_user:
        removed_with_user = (old.no_auth_user and not new.no_auth_user
                             and old.no_auth_user not in {u.user for u in new.all_users()})
        if not removed_with_user:
            out.append(f"config reload not supported for no_auth_user: old={old.no_auth_user or ''}, "
                       f"new={new.no_auth_user or ''}")
    if old.jetstream_accounts() != new.jetstream_accounts():
        out.append("config reload not supported for the accounts JetStream serves: old="
                   f"{','.join(old.jetstream_accounts()) or '-'}, new={','.join(new.jetstream_accounts()) or '-'} "
                   "(restart the server to change them)")
    for name in new.jetstream_accounts():
        before, after = _account_limits(old, name), _account_limits(new, name)
        if name in old.jetstream_accounts() and before != after:
            out.append(f"config reload not supported for the JetStream limits of account {name}: "
                       f"old={before}, new={after} (restart the server to change them)")
    if (old.jetstream is not None and old.cluster is not None
            and tuple(old.server_tags) != tuple(new.server_tags)):
        out.append(f"config reload not supported for server_tags in a JetStream cluster: "
                   f"old={list(old.server_tags)}, new={list(new.server_tags)} (restart the server "
                   "to change them)")
    return out


def _account_limits(config: ServerConfig, name: str) -> dict[str, int | bool]:
    """Account ``name``'s JetStream limits as configured (none for ``$G`` served alone)."""
    account = config.accounts.get(name)
    return dict(account.jetstream_limits) if account is not None else {}


def _reload_key(config: ServerConfig, name: str) -> Any:
    """What a reload compares for option ``name``: the cluster's TLS files may change (they
    are read again), turning cluster TLS on or off may not (the mesh would split)."""
    value = getattr(config, name)
    if name == "cluster" and value is not None:
        return dataclasses.replace(value, tls=value.tls is not None)
    return value


def client_tls_context(config: ServerConfig) -> tuple[TLSConfig, Any] | None:
    """(the ``tls`` block, a server-side ``ssl.SSLContext`` with its files read now), or
    None without TLS. Raises ConfigError when a file cannot be loaded."""
    if config.tls is None:
        return None
    origin = config.origins.get("tls")
    return config.tls, (server_context(config.tls, origin.position) if origin is not None
                        else server_context(config.tls))


def new_server_id() -> str:
    """A 56-character server id shaped like nats-server's (an 'N' public nkey)."""
    return "N" + "".join(secrets.choice(_B32) for _ in range(55))


@dataclasses.dataclass(slots=True)
class Stats:
    """Server-wide counters reported by /varz (messages, bytes, connections)."""

    in_msgs: int = 0
    in_bytes: int = 0
    out_msgs: int = 0
    out_bytes: int = 0
    slow_consumers: int = 0
    total_connections: int = 0


class Server:
    """A jetraft server. Create it, then ``await server.serve()`` inside trio.

    ``overrides`` re-applies command-line options after a SIGHUP reload re-reads the file.
    ``handle_signals`` installs SIGTERM/SIGINT/SIGHUP/SIGUSR2 handling (main thread only).
    After ``serve`` has started (``await nursery.start(server.serve)``), ``client_port`` and
    ``monitor_port`` hold the bound ports (useful with port -1 or 0).
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        events: EventLog | None = None,
        overrides: Callable[[ServerConfig], ServerConfig] | None = None,
        handle_signals: bool = False,
    ) -> None:
        self.config = config
        self.server_id = new_server_id()
        self.server_name = config.server_name or self.server_id
        self.events = events or EventLog(self.server_name)
        self._overrides = overrides or (lambda c: c)
        self._handle_signals = handle_signals
        self.auth = Authenticator(config)
        #: (TLSConfig, ssl.SSLContext) new client connections use; None: plain TCP. A SIGHUP
        #: reload replaces it (certificate, key and CA read again).
        self.client_tls = client_tls_context(config)
        #: the monitoring listener's context with ``https_port`` (mutated in place on reload:
        #: hypercorn holds it)
        self.monitor_tls = (server_context(config.tls, require_client_cert=False)
                            if config.https_port is not None and config.tls is not None else None)
        self.stats = Stats()
        #: accounts and message routing
        self.router = Router(self)
        #: account name -> Account (the router's)
        self.accounts = self.router.accounts
        #: the router's methods JetStream and the ``$SYS`` handler send through
        self.account = self.router.account
        self.route_internal = self.router.route_internal
        for name in config.accounts:
            self.account(name)
        self.account(GLOBAL_ACCOUNT)
        #: the ``seq`` of this server's answers to ``$SYS.REQ.SERVER`` requests
        self.sys_seq = 0
        self.clients: dict[int, ClientConnection] = {}
        #: connections (clients and routes) with output queued since the last flush_outbound
        self.outbound_queued: set = set()
        #: called by after_read() before flushing (the RAFT host's pass_now)
        self.after_read_hooks: list[Callable[[], None]] = []
        #: a read is being processed (no await until after_read): writers are not woken
        self.in_read = False
        self.start_ns = time.time_ns()
        self.config_load_ns = self.start_ns
        self.client_port: int | None = None
        self.monitor_port: int | None = None
        self.lame_duck_mode = False
        self.connect_urls: list[str] = []
        self._next_cid = 0
        self._nursery: trio.Nursery | None = None
        self._accept_scope = trio.CancelScope()
        self._listeners: list[trio.SocketListener] = []
        self._stopping = trio.Event()
        self._no_clients = trio.Event()
        self._no_clients.set()
        self._base_info: dict[str, Any] = {}
        #: The cluster's routes; None without a ``cluster`` block.
        self.routes: RouteManager | None = RouteManager(self) if config.cluster is not None else None
        self.jetstream: JetStreamService | None = JetStreamService(self) if config.jetstream else None
        self.router.routes = self.routes
        self.router.jetstream = self.jetstream
        self.router.system = SystemService(self)

    # ------------------------------------------------------------------ serving

    async def serve(self, *, task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind the listeners and serve until :meth:`shutdown` (or a signal) stops it.

        Raises ``OSError`` when a listener cannot bind (e.g. the port is in use).
        """
        cfg = self.config
        self.events.emit("server_starting", server_id=self.server_id, version=__version__,
                         nats_version=NATS_COMPAT_VERSION, config=cfg.source, pid=os.getpid(),
                         cluster=cfg.cluster.name if cfg.cluster is not None else None,
                         tags=list(cfg.server_tags))
        for warning in cfg.warnings:
            self.events.emit("config_warning", message=warning)
        bind_error: OSError | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._handle_signals:  # before binding: a signal to a listening server is handled
                    await nursery.start(self._signal_loop)
                if self.jetstream is not None:  # recover every stream before serving clients
                    await nursery.start(self.jetstream.run)
                try:
                    if self.routes is not None:  # after JetStream has registered its handlers
                        for subject in (*PING_SUBJECTS, f"$SYS.REQ.SERVER.{self.server_id}.*"):
                            self.routes.add_internal_interest(cfg.system_account, subject)
                        if self.jetstream is not None:
                            # servers without JetStream send $JS.API requests to one of us:
                            # each JetStream account's, and the system account's (server
                            # remove, meta step-down)
                            for account in dict.fromkeys((*self.jetstream.accounts, cfg.system_account)):
                                self.routes.add_internal_interest(account, JS_API_SUBJECT, JS_API_QUEUE)
                        await nursery.start(self.routes.run)
                        self.events.emit("listening", kind="cluster", host=cfg.cluster.host,
                                         port=self.routes.port)
                    listeners = self._listeners = await trio.open_tcp_listeners(
                        max(cfg.port, 0), host=cfg.host)
                except OSError as exc:  # re-raised below, unwrapped, for the CLI's message
                    bind_error = exc
                    nursery.cancel_scope.cancel()
                    return
                self.client_port = listeners[0].socket.getsockname()[1]
                self._update_base_info()
                self.events.emit("listening", kind="client", host=cfg.host, port=self.client_port)
                if self.routes is not None:
                    self.routes.refresh_info()  # the peers learn our client URL
                nursery.start_soon(self._accept_loop, listeners)
                if cfg.http_port is not None or cfg.https_port is not None:
                    self.monitor_port = await nursery.start(serve_monitor, self)
                    self.events.emit("listening", kind="monitor", host=cfg.http_host,
                                     port=self.monitor_port)
                self.events.emit("server_ready")
                task_status.started(self)
                await self._stopping.wait()
                await self._close_listeners()
                for client in list(self.clients.values()):
                    client.close("Server Shutdown")
                with trio.move_on_after(2):
                    await self._no_clients.wait()
                if self.routes is not None:
                    self.routes.close_all("Server Shutdown")
                    with trio.move_on_after(1):
                        await self.routes.wait_closed()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._close_listeners()
            if bind_error is not None:
                raise bind_error
            self.events.emit("server_stopped")

    async def _close_listeners(self) -> None:
        """Stop accepting and close the listening sockets: new clients are refused."""
        self._accept_scope.cancel()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            await listener.aclose()

    async def _accept_loop(self, listeners: list[trio.SocketListener]) -> None:
        with self._accept_scope:
            async with trio.open_nursery() as nursery:
                for listener in listeners:
                    nursery.start_soon(self._accept_on, listener)

    async def _accept_on(self, listener: trio.SocketListener) -> None:
        await accept_connections(listener, self._accepted, self._accept_failed)

    def _accept_failed(self, exc: OSError) -> None:  # EMFILE and friends: back off, keep serving
        self.events.emit("config_warning", message=f"accept failed: {exc}")

    def _accepted(self, stream: trio.SocketStream, ip: str, port: int) -> None:
        if len(self.clients) >= self.config.max_connections:
            self.events.emit("max_connections", ip=ip, limit=self.config.max_connections)
            self._nursery.start_soon(self._refuse, stream, ip, "maximum connections exceeded")
            return
        self._next_cid += 1
        client = ClientConnection(self, stream, self._next_cid, ip, port)
        self.clients[client.cid] = client
        self._no_clients = trio.Event()
        self.stats.total_connections += 1
        self._nursery.start_soon(client.run)

    async def _refuse(self, stream: trio.SocketStream, ip: str, text: str) -> None:
        """INFO, then -ERR, then close: what nats-server sends past max_connections."""
        info = dict(self._base_info, client_id=0, client_ip=ip)
        with trio.move_on_after(1):
            try:
                await stream.send_all(encode_info(info) + encode_err(text))
            except (trio.BrokenResourceError, OSError):
                pass
        await stream.aclose()

    def client_closed(self, client: ClientConnection) -> None:
        """Called by a connection as it ends: forget its subscriptions and itself."""
        if client.account is not None:
            client.remove_all_subscriptions()
        self.clients.pop(client.cid, None)
        self.events.emit("client_closed", cid=client.cid, ip=client.ip, port=client.port,
                         reason=client.close_reason, in_msgs=client.in_msgs,
                         out_msgs=client.out_msgs)
        if not self.clients:
            self._no_clients.set()

    def _update_base_info(self) -> None:
        cfg = self.config
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": f"jetraft {__version__}",
            "host": cfg.host,
            "port": self.client_port,
            "headers": True,
            "max_payload": cfg.max_payload,
        }
        if self.auth.advertise_auth:  # server.go: not with a configured no_auth_user
            info["auth_required"] = True
        if cfg.tls is not None:  # server.go NewServer: tls_required, tls_verify
            info["tls_required"] = True
            if cfg.tls.verify:
                info["tls_verify"] = True
        if cfg.cluster is not None:
            info["cluster"] = cfg.cluster.name
        self._base_info = info

    def client_info(self, client: ClientConnection) -> dict[str, Any]:
        """The INFO object for ``client`` (nats-server server/server.go Info)."""
        info = dict(self._base_info)
        info["client_id"] = client.cid
        info["client_ip"] = client.ip
        if self.connect_urls:
            info["connect_urls"] = list(self.connect_urls)
        if self.lame_duck_mode:
            info["ldm"] = True
        return info

    # ------------------------------------------------------------------ output

    def flush_outbound(self) -> None:
        """Write every connection's queued output to its socket now, non-blocking (see
        :meth:`jetraft.net.transport.client.StreamConnection.flush_now`). For code about to block the
        event loop, or whose output is latency-critical."""
        queued = self.outbound_queued
        if queued:
            self.outbound_queued = set()
            for conn in queued:
                conn.flush_now()

    def after_read(self) -> None:
        """End of one read's processing (a client's or a route's): run the hooks (a RAFT pass
        for what the read proposed or delivered), then flush_outbound, so that what the read
        caused leaves in one write per connection without waiting for other tasks."""
        self.in_read = True
        try:
            for hook in self.after_read_hooks:
                hook()
            self.flush_outbound()
        finally:
            self.in_read = False

    def set_connect_urls(self, urls: list[str]) -> None:
        """The cluster's client URLs changed: send connected clients a new INFO (nats-server
        server.go sendAsyncInfoToClients)."""
        if urls == self.connect_urls:
            return
        self.connect_urls = urls
        for client in list(self.clients.values()):
            if client.connected:
                client.send_info()

    # ------------------------------------------------------------------ control

    def shutdown(self, reason: str = "requested") -> None:
        """Stop serving: close listeners, flush and close clients, end :meth:`serve`."""
        if not self._stopping.is_set():
            self.events.emit("shutdown", reason=reason)
            self._stopping.set()

    async def lame_duck(self) -> None:
        """Lame duck mode (nats-server server.go lameDuckMode).

        Stop accepting clients, send every client an INFO with ``ldm: true``, wait
        ``lame_duck_grace_period`` seconds, then close the clients spread over what is left
        of ``lame_duck_duration`` (at most one second apart), then shut down.
        """
        if self.lame_duck_mode or self._stopping.is_set():
            return
        self.lame_duck_mode = True
        await self._close_listeners()
        await self._hand_over_leadership()
        cfg = self.config
        clients = list(self.clients.values())
        grace = min(cfg.lame_duck_grace_period, cfg.lame_duck_duration)
        self.events.emit("lame_duck_started", clients=len(clients),
                         duration_s=cfg.lame_duck_duration, grace_period_s=grace)
        for client in clients:
            client.send_info(ldm=True)
        with trio.move_on_after(grace):
            await self._no_clients.wait()
        clients = list(self.clients.values())
        if clients:
            interval = min((cfg.lame_duck_duration - grace) / len(clients), 1.0)
            for client in clients:
                client.close("Server Shutdown")
                if interval > 0:
                    await trio.sleep(interval)
        self.shutdown("lame duck mode complete")

    async def _hand_over_leadership(self, timeout: float = 5.0) -> None:
        """Lame duck, clustered: move every RAFT leadership this server holds to a peer
        (leadership transfer, thesis §3.10) and wait, polling up to ``timeout`` seconds,
        until it leads nothing, so that stopping costs no election timeout."""
        cluster = self.jetstream.cluster if self.jetstream is not None else None
        if cluster is None:
            return
        with trio.move_on_after(timeout):
            while cluster.leaderships():
                cluster.transfer_all_leadership()
                await trio.sleep(0.1)

    def reload(self) -> bool:
        """Re-read the configuration file (SIGHUP). Returns whether it was applied.

        Applies users, accounts, authorization, limits and logging; refuses the whole reload
        (and logs ``config_reload_failed``) when the file is broken or changes an option in
        :data:`NOT_RELOADABLE`. Clients whose credentials no longer hold are disconnected;
        clients whose user's permissions changed get them, and lose the subscriptions they
        no longer allow (each with an -ERR).
        """
        old = self.config
        if old.source is None:
            self.events.emit("config_reload_failed", config=None, error="no configuration file")
            return False
        try:
            new = self._overrides(load_config(old.source))
            validate(new)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the running config intact
            self.events.emit("config_reload_failed", config=old.source, error=str(exc))
            return False
        refused = reload_refusals(old, new)
        if refused:
            self.events.emit("config_reload_failed", config=old.source, error="; ".join(refused))
            return False
        try:  # certificates, keys and CAs are read again: new connections use them
            client_tls = client_tls_context(new)
            monitor_tls = server_context(new.tls, require_client_cert=False) if self.monitor_tls else None
            if self.routes is not None:
                self.routes.reload_tls(new.cluster)
        except ConfigError as exc:
            self.events.emit("config_reload_failed", config=old.source, error=str(exc))
            return False
        self.client_tls = client_tls
        if monitor_tls is not None:
            self.monitor_tls.load_cert_chain(new.tls.cert_file, new.tls.key_file)
        changed = [f.name for f in dataclasses.fields(new)
                   if f.compare and f.name not in ("warnings", "source")
                   and getattr(new, f.name) != getattr(old, f.name)]
        previous_auth = self.auth
        self.config = new
        self.config_load_ns = time.time_ns()
        self.auth = Authenticator(new, previous_auth)
        for name in new.accounts:
            self.account(name)
        self.events.threshold = log_threshold(new)
        if new.pid_file and new.pid_file != old.pid_file:     # reload.go pidFileOption
            try:
                write_pid_file(new.pid_file)
            except OSError as exc:
                self.events.emit("config_warning", message=f"{new.source}: pid_file: {exc}")
        try:
            configure_human_log(self.events, new)
        except OSError as exc:  # the previous human log goes on
            self.events.emit("config_warning", message=f"{new.source}: log_file: {exc}")
        self._update_base_info()
        for client in list(self.clients.values()):
            client.parser.max_payload = new.max_payload
            client.parser.max_control_line = new.max_control_line
            if client.identity is not None and not self.auth.still_valid(client.identity, previous_auth):
                client.send(encode_err("Authorization Violation"))
                client.close("Authentication Failure")
            elif client.identity is not None:
                # permissions changed: applied to the connection, which stays (reload.go)
                identity = self.auth.refresh(client.identity)
                if identity is not client.identity:
                    client.update_identity(identity)
        self.events.emit("config_reloaded", config=old.source, changed=changed)
        return True

    async def _signal_loop(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        wanted = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2)
        with trio.open_signal_receiver(*wanted) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGHUP:
                    self.reload()
                elif signum == signal.SIGUSR2:
                    self._nursery.start_soon(self.lame_duck)
                elif signum == signal.SIGINT:
                    self.shutdown("SIGINT")
                elif not self.lame_duck_mode:  # SIGTERM waits for lame duck, as nats-server
                    self.shutdown("SIGTERM")

    # ------------------------------------------------------------------ introspection

    def uptime(self) -> str:
        """Uptime as nats-server formats it (``1d2h3m4s``)."""
        secs = math.floor((time.time_ns() - self.start_ns) / 1e9)
        days, secs = divmod(secs, 86400)
        hours, secs = divmod(secs, 3600)
        mins, secs = divmod(secs, 60)
        out = f"{days}d" if days else ""
        if days or hours:
            out += f"{hours}h"
        if days or hours or mins:
            out += f"{mins}m"
        return out + f"{secs}s"

    @property
    def healthy(self) -> bool:
        return not self.lame_duck_mode and not self._stopping.is_set()


def configure_human_log(events: EventLog, config: ServerConfig) -> None:
    """Point ``events``' human log (nats-server's format) at ``log_file`` with the
    configuration's logtime, logtime_utc, size limit and file count; none without a
    ``log_file``. An unchanged setting keeps the open file. Raises OSError when a new
    file cannot be opened."""
    lg = config.logging
    if not lg.log_file:
        events.set_human(None)
        return
    wanted = (lg.log_file, lg.logtime, lg.logtime_utc, max(lg.log_size_limit, 0), max(lg.log_max_num, 0))
    if events.human is not None and events.human.settings() == wanted:
        return
    events.set_human(HumanLog(lg.log_file, logtime=lg.logtime, utc=lg.logtime_utc,
                              size_limit=lg.log_size_limit, max_num=lg.log_max_num))


def log_threshold(config: ServerConfig) -> str:
    """The event-log level that ``debug``/``trace`` settings select."""
    if config.logging.trace:
        return "trace"
    if config.logging.debug:
        return "debug"
    return "info"
