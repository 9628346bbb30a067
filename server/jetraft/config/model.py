"""The typed server configuration: :class:`ServerConfig` and its parts (users, accounts,
``authorization``, ``jetstream``, ``cluster`` and its routes, logging), and
:func:`validate`, the cross-field checks run after loading and again after command-line
overrides.

Fields and defaults follow nats-server ``server/opts.go`` (``Options``, ``ClusterOpts``)
and ``server/const.go``; the checks, ``validateOptions`` in ``server/server.go``. The
configuration file is read into these types by :mod:`jetraft.config.builder`.

Units: every duration is a ``float`` number of SECONDS; every size is an ``int``
number of BYTES.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import COMMAND_LINE, ConfigError, Position
from .tls import TLSConfig
from .permissions import Permissions

__all__ = [
    "DEFAULT_SYSTEM_ACCOUNT",
    "GLOBAL_ACCOUNT",
    "AccountConfig",
    "AuthorizationConfig",
    "ClusterConfig",
    "JetStreamConfig",
    "LoggingConfig",
    "Origin",
    "RouteURL",
    "ServerConfig",
    "TLSConfig",
    "UserConfig",
    "is_bcrypt",
    "validate",
]

#: nats-server's system account name (server/const.go DEFAULT_SYSTEM_ACCOUNT).
DEFAULT_SYSTEM_ACCOUNT = "$SYS"
#: The global account, home of users with no account (server/const.go DEFAULT_GLOBAL_ACCOUNT).
GLOBAL_ACCOUNT = "$G"

_BCRYPT = re.compile(r"\$2[abxy]\$[0-9]{2}\$")  # server/auth.go validBcryptPrefix


def is_bcrypt(password: str) -> bool:
    """True if ``password`` is a bcrypt hash rather than plain text (nats-server
    server/auth.go isBcrypt: ``$2a$``, ``$2b$``, ``$2x$`` or ``$2y$`` and a 2-digit cost)."""
    return _BCRYPT.match(password) is not None


#: nats-server's default route port (server/const.go DEFAULT_ROUTE_PORT).
_DEFAULT_ROUTE_PORT = 6222


# -- the configuration -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserConfig:
    """A user: name, password (plain or bcrypt hash; None if absent), the name of
    the account it belongs to, and its effective ``permissions`` (its own, else its
    account's ``default_permissions``, or for a user of the ``authorization`` block that
    block's; None: no restriction; nats-server opts.go applyDefaultPermissions)."""

    user: str
    password: str | None = None
    account: str = GLOBAL_ACCOUNT
    permissions: Permissions | None = None

    @property
    def is_bcrypt(self) -> bool:
        """True if the password is a bcrypt hash (nats-server server/auth.go isBcrypt:
        ``^\\$2[abxy]\\$\\d{2}\\$``)."""
        return self.password is not None and is_bcrypt(self.password)


@dataclass(frozen=True, slots=True)
class AccountConfig:
    """An account: its users and whether its block enables JetStream for it
    (``jetstream: enabled``). See :meth:`ServerConfig.jetstream_accounts` for the
    accounts that actually get JetStream."""

    name: str
    users: tuple[UserConfig, ...] = ()
    jetstream: bool = False
    default_permissions: Permissions | None = None
    #: The account's JetStream limits as written, as (name, value) pairs named as
    #: nats-server's JetStreamAccountLimits JSON fields (``max_memory``, ``max_storage``,
    #: ``max_streams``, ``max_consumers``, ``max_bytes_required``,
    #: ``memory_max_stream_bytes``, ``storage_max_stream_bytes``), in the order written.
    jetstream_limits: tuple[tuple[str, int | bool], ...] = ()


@dataclass(frozen=True, slots=True)
class AuthorizationConfig:
    """The top-level ``authorization`` block: a single user/password or a token
    (its ``users`` go to account ``$G``), and ``timeout``, the seconds a client has to
    authenticate (nats-server default 2 s). ``default_permissions`` (also written
    ``permissions``) go to the block's ``users`` that have none of their own."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    timeout: float = 2.0
    default_permissions: Permissions | None = None


@dataclass(frozen=True, slots=True)
class JetStreamConfig:
    """JetStream settings (present only when JetStream is enabled).

    ``store_dir`` (None: the server chooses), ``max_memory_store`` and
    ``max_file_store`` in bytes (None: no explicit limit), ``sync_interval`` in
    seconds (None when not set: jetraft then fsyncs before every acknowledgement, where
    nats-server would sync every 2 minutes), ``sync_always`` (``sync: always``: fsync every write), ``unique_tag``
    (lower-cased tag prefix such as ``"az:"``; replicas of a stream go to servers
    whose tags with that prefix differ), ``domain``.

    Snapshots and RAFT log compaction (docs/cluster.md, "Snapshots, compaction and catch-up"): a
    stream group snapshots once ``stream_compact`` entries or ``stream_compact_size`` bytes
    were applied since its last snapshot, or ``stream_compact_interval`` seconds passed
    (jetraft's own keys; defaults nats-server's stream compaction constants); the meta
    group after ``meta_compact`` entries or ``meta_compact_size`` bytes (nats-server's keys).
    ``max_outstanding_catchup``: bytes one catching-up replica may have requested and not
    yet received (nats-server's key; its default is 64 MiB across a server, jetraft's
    2 MiB per catch-up).
    """

    store_dir: str | None = None
    max_memory_store: int | None = None
    max_file_store: int | None = None
    sync_interval: float | None = None
    sync_always: bool = False
    unique_tag: str | None = None
    domain: str | None = None
    stream_compact: int = 65536
    stream_compact_size: int = 8 << 20
    stream_compact_interval: float = 120.0
    meta_compact: int = 8192
    meta_compact_size: int = 8 << 20
    max_outstanding_catchup: int = 2 << 20

    @property
    def stream_compact_interval_ns(self) -> int:
        return int(self.stream_compact_interval * 1e9)


@dataclass(frozen=True, slots=True)
class RouteURL:
    """A route to another cluster member: ``nats://[user:pass@]host[:port]``
    (``nats-route://`` too). ``host`` has no IPv6 brackets; ``port`` defaults to 6222."""

    scheme: str
    host: str
    port: int = _DEFAULT_ROUTE_PORT
    user: str | None = None
    password: str | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}:[REDACTED]@" if self.user is not None else ""
        return f"{self.scheme}://{user}{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The ``cluster`` block: cluster ``name``, the route listener ``host``/``port``
    (-1: random port), ``routes`` to solicit, and the credentials routes must
    present (``authorization { user, password, timeout }``; ``auth_timeout`` in
    seconds). ``tls``: every route, accepted and solicited, is TLS with certificates
    verified both ways (nats-server opts.go getTLSConfig); None: plain TCP."""

    name: str | None = None
    host: str = "0.0.0.0"
    port: int = _DEFAULT_ROUTE_PORT
    routes: tuple[RouteURL, ...] = ()
    user: str | None = None
    password: str | None = None
    auth_timeout: float = 2.0
    tls: TLSConfig | None = None


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    """Top-level ``debug``, ``trace``, ``logtime``, ``logtime_utc``, ``log_file``/``logfile``,
    ``logfile_size_limit``/``log_size_limit`` (bytes; 0: no rotation) and
    ``logfile_max_num``/``log_max_num`` (files kept, the current one included; 0: all), as
    nats-server reads them (server/opts.go). ``syslog: true`` and ``remote_syslog`` are
    refused: jetraft writes no syslog."""

    debug: bool = False
    trace: bool = False
    logtime: bool = True
    logtime_utc: bool = False
    log_file: str | None = None
    log_size_limit: int = 0
    log_max_num: int = 0


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a setting was read and the value it had then; :func:`validate` reports
    an error at ``position`` only while the setting still has that value."""

    position: Position
    value: Any


def _default_accounts() -> Mapping[str, AccountConfig]:
    return types.MappingProxyType(
        {GLOBAL_ACCOUNT: AccountConfig(GLOBAL_ACCOUNT), DEFAULT_SYSTEM_ACCOUNT: AccountConfig(DEFAULT_SYSTEM_ACCOUNT)}
    )


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """A whole server configuration, with nats-server's defaults.

    Durations are float seconds, sizes int bytes. ``port`` -1 asks for a random
    port (nats-server RANDOM_PORT). ``http_port`` None means no monitoring
    listener; ``http_host`` defaults to ``host``, as in nats-server.
    ``max_connections`` -1 means no limit (``max_connections: 0`` in a file).
    ``accounts`` always holds ``$G`` and, when ``system_account`` is ``$SYS``, an
    (empty if undeclared) ``$SYS`` account. ``jetstream`` and ``cluster`` are None when
    absent or disabled. ``warnings`` are ``"file:line:col: message"`` strings.
    ``tls``: clients must speak TLS (the top-level ``tls`` block); ``https_port``: the
    monitoring listener serves HTTPS with that block's certificate (on ``http_host``).
    ``origins`` maps setting paths (``"port"``, ``"cluster"``,
    ``"accounts.A.jetstream"``) to where they were read, for :func:`validate`.
    """

    source: str | None = None
    server_name: str | None = None
    host: str = "0.0.0.0"
    port: int = 4222
    http_host: str = "0.0.0.0"
    http_port: int | None = None
    https_port: int | None = None
    tls: TLSConfig | None = None
    accounts: Mapping[str, AccountConfig] = field(default_factory=_default_accounts)
    system_account: str = DEFAULT_SYSTEM_ACCOUNT
    authorization: AuthorizationConfig | None = None
    no_auth_user: str | None = None
    jetstream: JetStreamConfig | None = None
    server_tags: tuple[str, ...] = ()
    cluster: ClusterConfig | None = None
    max_payload: int = 1048576
    max_connections: int = 65536
    max_control_line: int = 4096
    max_pending: int = 67108864
    write_deadline: float = 10.0
    ping_interval: float = 120.0
    ping_max: int = 2
    #: closed client connections /connz?state=closed keeps, the oldest dropped first
    #: (nats-server DEFAULT_MAX_CLOSED_CLIENTS; 0 in the file means this default)
    max_closed_clients: int = 10000
    lame_duck_duration: float = 120.0
    lame_duck_grace_period: float = 10.0
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    pid_file: str | None = None
    warnings: tuple[str, ...] = ()
    origins: Mapping[str, Origin] = field(default_factory=dict, repr=False, compare=False)

    def all_users(self) -> tuple[UserConfig, ...]:
        """Every user of every account, in account order."""
        return tuple(user for account in self.accounts.values() for user in account.users)

    def jetstream_accounts(self) -> tuple[str, ...]:
        """The accounts JetStream serves: none when JetStream is off; ``$G`` when no
        account but ``$G`` and the system account is configured (nats-server
        server/jetstream.go enableJetStreamAccounts); otherwise those whose block
        enables it."""
        if self.jetstream is None:
            return ()
        others = [name for name in self.accounts if name not in (GLOBAL_ACCOUNT, self.system_account)]
        if not others:
            return (GLOBAL_ACCOUNT,)
        return tuple(name for name in others if self.accounts[name].jetstream)


# -- validation ----------------------------------------------------------------------


def _where(config: ServerConfig, path: str, current: Any) -> Position:
    origin = config.origins.get(path)
    if origin is not None and origin.value == current:
        return origin.position
    return COMMAND_LINE


def validate(config: ServerConfig) -> None:
    """Cross-field checks, run after loading and again after command-line overrides.

    Checks (nats-server server/server.go validateOptions, server/jetstream.go
    validateJetStreamOptions, server/auth.go validateNoAuthUser, plus jetraft's
    own): server name without spaces; ports in range; a cluster has a name; a
    JetStream cluster has a ``server_name``; a ``system_account`` other than
    ``$SYS`` names a defined account, which must not enable JetStream;
    ``max_payload <= max_pending``; lame-duck grace period shorter than the
    duration; ``no_auth_user`` names a user; user names are unique; ``https_port`` needs
    the top-level ``tls`` block and excludes ``http_port`` (server.go StartMonitoring).

    Raises ConfigError at the file position of the offending setting when it still
    has the value read from the file, else at ``<command line>:0:0``.
    """

    def fail(path: str, current: Any, message: str) -> ConfigError:
        return ConfigError.at(_where(config, path, current), message)

    if config.server_name is not None and " " in config.server_name:
        raise fail("server_name", config.server_name, "server name cannot contain spaces")
    for path, port in (("port", config.port), ("http_port", config.http_port), ("https_port", config.https_port)):
        if port is not None and not -1 <= port <= 65535:
            raise fail(path, port, f"{path}: {port} is out of range (a port is 0 to 65535, or -1 for a random port)")
    if config.https_port is not None:  # nats-server server.go StartMonitoring
        if config.http_port is not None:
            raise fail("https_port", config.https_port,
                       f"can't specify both HTTP ({config.http_port}) and HTTPs ({config.https_port}) ports")
        if config.tls is None:
            raise fail("https_port", config.https_port, "TLS cert and key required for HTTPS (a top-level tls block)")
    cluster = config.cluster
    if cluster is not None:
        if not -1 <= cluster.port <= 65535:
            raise fail("cluster.port", cluster.port, f"cluster port {cluster.port} is out of range")
        if not cluster.name:
            raise fail("cluster", cluster, "cluster has no name: jetraft requires cluster { name: ... }")
        if config.jetstream is not None and not config.server_name:
            raise fail("jetstream", config.jetstream, "jetstream cluster requires `server_name` to be set")
    system = config.system_account
    if system not in config.accounts and system != DEFAULT_SYSTEM_ACCOUNT:
        raise fail("system_account", system, f"system account {system!r} is not defined in accounts")
    if system in config.accounts and config.accounts[system].jetstream:
        raise fail(f"accounts.{system}.jetstream", True, "jetstream can not be enabled on the system account")
    if config.max_payload > config.max_pending:
        raise fail(
            "max_payload",
            config.max_payload,
            f"max_payload ({config.max_payload}) cannot be higher than max_pending ({config.max_pending})",
        )
    if config.lame_duck_grace_period >= config.lame_duck_duration:
        raise fail(
            "lame_duck_grace_period",
            config.lame_duck_grace_period,
            f"lame duck grace period ({config.lame_duck_grace_period:g}s) should be strictly lower than "
            f"lame duck duration ({config.lame_duck_duration:g}s)",
        )
    users = config.all_users()
    names = [user.user for user in users]
    for user in users:
        if names.count(user.user) > 1:
            raise fail(f"users.{user.user}", user, f"duplicate user {user.user!r} detected")
    if config.no_auth_user is not None:
        if not users:
            raise fail("no_auth_user", config.no_auth_user, f"no_auth_user: {config.no_auth_user!r} present, but users are not defined")
        if config.no_auth_user not in names:
            raise fail(
                "no_auth_user",
                config.no_auth_user,
                f"no_auth_user: {config.no_auth_user!r} not present as user in authorization block or account configuration",
            )

