"""The configuration file read into a :class:`~jetraft.config.model.ServerConfig`: the
:class:`_Builder` that types a parsed tree block by block (top level, ``authorization``,
``accounts`` and ``users``, ``jetstream``, ``cluster`` and its ``routes``), and the entry
points that load, build and validate (:func:`load_config`, :func:`config_from_text`,
:func:`build_config`, :func:`parse_route_url`).

Keys, aliases, defaults and checks follow nats-server ``server/opts.go``
(``processConfigFileLine``, ``parseCluster``, ``parseJetStream``,
``parseAuthorization``, ``parseAccounts``, ``parseUsers``). Key names are matched
case-insensitively, as there.

Units: every duration is a ``float`` number of SECONDS; every size is an ``int``
number of BYTES. A duration is written as a Go duration string (``"2s"``,
``"100ms"``, ``"1h30m"``); a bare integer is read as seconds with a warning, as
nats-server does (beware: unquoted ``2m`` is the integer 2000000, see
:mod:`jetraft.config.parser`).

Fail closed: a key nats-server knows but jetraft does not implement is a
:class:`~jetraft.config.errors.ConfigError` when it matters for security,
clustering or data retention (``operator``, ``resolver``, ``leafnodes``,
``gateway``, ``websocket``, ``mqtt``, nkey users, account ``imports``/``exports``,
JetStream encryption ``key``, ...; see the ``_UNSUPPORTED_*`` tables of
:mod:`jetraft.config.unsupported`), and a warning, collected in
:attr:`ServerConfig.warnings`, when it only changes logging, profiling or tuning. A key
nats-server does not know either is an error (``unknown field``), as in nats-server
(server/opts.go unknownConfigFieldErr), except a key whose value a ``$variable`` used (a
variable definition). Wrong types, out-of-range values and contradictions are
ConfigErrors too; every ConfigError names the file, line and column of the offending key
or value.
"""

from __future__ import annotations

import os
import types
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from .errors import COMMAND_LINE, ConfigError, Position
from .model import (
    _DEFAULT_ROUTE_PORT,
    DEFAULT_SYSTEM_ACCOUNT,
    GLOBAL_ACCOUNT,
    AccountConfig,
    AuthorizationConfig,
    ClusterConfig,
    JetStreamConfig,
    LoggingConfig,
    Origin,
    RouteURL,
    ServerConfig,
    UserConfig,
    validate,
)
from .parser import Entry, Value, load_tree, parse_tree
from .permissions import Permissions, read_permissions
from .tls import read_tls
from .unsupported import (
    _ACCOUNT_JETSTREAM_ENFORCED,
    _ACCOUNT_JETSTREAM_LIMITS,
    _UNSUPPORTED_ACCOUNT,
    _UNSUPPORTED_AUTHORIZATION,
    _UNSUPPORTED_CLUSTER,
    _UNSUPPORTED_JETSTREAM,
    _UNSUPPORTED_TOP_LEVEL,
    _UNSUPPORTED_USER,
    _Unsupported,
)
from .values import _bool, _duration_string, _expect, _int, _listen, _port, _storage_size, _string

__all__ = [
    "build_config",
    "config_from_text",
    "load_config",
    "parse_route_url",
]

_MAX_INT32 = 2**31 - 1
_ROUTE_SCHEMES = ("nats", "nats-route")


# -- the builder -------------------------------------------------------------------------


class _Builder:
    """Turns the parsed tree into a ServerConfig, collecting warnings and origins."""

    def __init__(self, root: Value, source: str | None) -> None:
        self.root = root
        self.source = source
        self.warnings: list[str] = []
        self.origins: dict[str, Origin] = {}
        self.fields: dict[str, Any] = {}
        self.logging: dict[str, Any] = {}
        self.authorization: AuthorizationConfig | None = None
        self.global_users: list[tuple[UserConfig, Position]] = []
        self.accounts: dict[str, tuple[AccountConfig, Position]] = {}
        self.account_users: list[tuple[UserConfig, Position]] = []
        self.system_account: dict[str, tuple[str, Position]] = {}
        self.store_dir: tuple[str, Position] | None = None
        self.jetstream: tuple[bool, dict[str, Any], Entry] | None = None
        self.cluster: tuple[ClusterConfig, Entry] | None = None
        self.http_host: str | None = None

    # -- helpers ---------------------------------------------------------------------

    def warn(self, position: Position, message: str) -> None:
        self.warnings.append(f"{position}: {message}")

    def ignore(self, entry: Entry, label: str, known: _Unsupported | frozenset[str]) -> None:
        """A key this block has no handler for: a warning when ``known`` tolerates it
        (it changes nothing of security, clustering or data retention), else a
        ConfigError at the key, whether nats-server knows it (``refused``; a bare
        frozenset is all refused) or not (unknown field). nats-server skips keys whose
        value a $variable used: they are variable definitions (opts.go
        IsUsedVariable), and so does jetraft.

        Raises ConfigError ("'<label>' is not supported by jetraft ..." or
        "unknown field '<label>'") at the key's file:line:col."""
        key = entry.key.lower()
        tolerated = known.tolerated if isinstance(known, _Unsupported) else frozenset()
        refused = known.refused if isinstance(known, _Unsupported) else known
        if key in tolerated:
            self.warn(entry.key_position, f"{label!r} is not supported by jetraft, ignored")
        elif key in refused:
            raise ConfigError.at(
                entry.key_position,
                f"{label!r} is not supported by jetraft; refused rather than ignored "
                "(it matters for security, clustering or data retention)",
            )
        elif not entry.value.used:
            raise ConfigError.at(entry.key_position, f"unknown field {label!r}")

    def entries(self, value: Value, label: str) -> Iterator[tuple[str, Entry, str]]:
        """(lower-cased key, entry, dotted label) for each entry of a map value."""
        data: dict[str, Entry] = _expect(value, label, "map")
        for entry in data.values():
            yield entry.key.lower(), entry, f"{label}.{entry.key}" if label else entry.key

    def set(self, name: str, value: Any, position: Position) -> None:
        self.fields[name] = value
        self.origins[name] = Origin(position, value)

    def duration(self, value: Value, label: str) -> float:
        """A Go duration string, or an integer number of seconds with a warning
        (nats-server opts.go parseDuration)."""
        data = _expect(value, label, "string", "integer")
        if isinstance(data, str):
            return _duration_string(value, label)
        message = f"{label}: {data} should be a duration string such as \"{data}s\"; read as {data} seconds"
        if value.raw is not None and value.raw != str(data):
            message = (
                f"{label}: unquoted {value.raw} is the number {data} (size suffix), read as {data} seconds; "
                f'write "{value.raw}" for a duration'
            )
        self.warn(value.position, message)
        return float(data)

    # -- the top level -----------------------------------------------------------------

    def build(self) -> ServerConfig:
        if not self.root.data:
            self.warn(self.root.position, "config has no values or is empty")
        handlers = self._top_level_handlers()
        for key, entry, label in self.entries(self.root, ""):
            handler = handlers.get(key)
            if handler is None:
                self.ignore(entry, label, _UNSUPPORTED_TOP_LEVEL)
            else:
                handler(entry, label)
        return self._assemble()

    def _top_level_handlers(self) -> dict[str, Callable[[Entry, str], None]]:
        Reader = Callable[[Value, str], Any]

        def setting(name: str, read: Reader) -> Callable[[Entry, str], None]:
            return lambda e, label: self.set(name, read(e.value, label), e.value.position)

        def logging(name: str, read: Reader) -> Callable[[Entry, str], None]:
            return lambda e, label: self.logging.__setitem__(name, read(e.value, label))

        def at_least(low: int, high: int | None = None) -> Reader:
            return lambda v, label: _int(v, label, low, high)

        table: dict[str, Callable[[Entry, str], None]] = {
            "listen": self._listen,
            "port": setting("port", lambda v, label: _port(v, label) or 4222),  # 0: the default
            "host": setting("host", _string),
            "net": setting("host", _string),
            "server_name": self._server_name,
            "debug": logging("debug", _bool),
            "trace": logging("trace", _bool),
            "logtime": logging("logtime", _bool),
            "logtime_utc": logging("logtime_utc", _bool),
            "log_file": logging("log_file", _string),
            "log_size_limit": logging("log_size_limit", _int),
            "log_max_num": logging("log_max_num", _int),
            "syslog": self._syslog,
            "remote_syslog": self._syslog,
            "pid_file": setting("pid_file", _string),
            "http": self._http,
            "http_port": setting("http_port", lambda v, label: _port(v, label) or None),  # 0: no monitoring
            "tls": lambda e, label: self.set("tls", read_tls(e.value, label, client_context=True), e.key_position),
            "https": self._https,
            "https_port": setting("https_port", lambda v, label: _port(v, label) or None),
            "accounts": self._accounts,
            "authorization": self._authorization,
            "no_auth_user": setting("no_auth_user", _string),
            "system_account": self._system_account,
            "jetstream": self._jetstream,
            "store_dir": self._store_dir,
            "server_tags": self._server_tags,
            "cluster": self._cluster,
            "max_payload": setting("max_payload", at_least(1, _MAX_INT32)),
            "max_control_line": setting("max_control_line", at_least(1, _MAX_INT32)),
            "max_pending": setting("max_pending", at_least(1)),
            "max_connections": setting("max_connections", lambda v, label: _int(v, label) if _int(v, label) > 0 else -1),
            "ping_interval": setting("ping_interval", self.duration),
            "write_deadline": setting("write_deadline", self.duration),
            "ping_max": setting("ping_max", lambda v, label: _int(v, label, 0) or 2),  # 0: the default
            # 0: the default (opts.go setBaselineOptions); a negative size, on which nats-server
            # fails at start, is refused
            "max_closed_clients": setting("max_closed_clients", lambda v, label: _int(v, label, 0) or 10000),
            "lame_duck_duration": self._lame_duck_duration,
            "lame_duck_grace_period": self._lame_duck_grace_period,
        }
        aliases = {"logfile": "log_file", "logfile_size_limit": "log_size_limit", "logfile_max_num": "log_max_num",
                   "pidfile": "pid_file", "monitor_port": "http_port", "system": "system_account",
                   "storedir": "store_dir", "max_conn": "max_connections"}  # fmt: skip
        for alias, name in aliases.items():
            table[alias] = table[name]
        return table

    def _syslog(self, entry: Entry, label: str) -> None:
        """``syslog``/``remote_syslog``: only ``syslog: false`` (or an empty
        ``remote_syslog``) is accepted; jetraft writes no syslog. Raises ConfigError."""
        on = _bool(entry.value, label) if entry.key.lower() == "syslog" else bool(_string(entry.value, label))
        if on:
            raise ConfigError.at(entry.key_position, f"{label!r} is not supported by jetraft: it writes no syslog; "
                                 "refused rather than ignored (use log_file, or the journal of its service)")

    def _listen(self, entry: Entry, label: str) -> None:
        host, port = _listen(entry.value, label)
        if host is not None:
            self.set("host", host, entry.value.position)
        self.set("port", port or 4222, entry.value.position)

    def _http(self, entry: Entry, label: str) -> None:
        host, port = _listen(entry.value, label)
        if host is not None:
            self.http_host = host
        self.set("http_port", port or None, entry.value.position)

    def _https(self, entry: Entry, label: str) -> None:
        host, port = _listen(entry.value, label)
        if host is not None:
            self.http_host = host
        self.set("https_port", port or None, entry.value.position)

    def _server_name(self, entry: Entry, label: str) -> None:
        name = _string(entry.value, label)
        if " " in name:
            raise ConfigError.at(entry.value.position, f"{label}: server name cannot contain spaces")
        self.set("server_name", name, entry.value.position)

    def _system_account(self, entry: Entry, label: str) -> None:
        # nats-server reads system_account in preference to its alias system.
        self.system_account[entry.key.lower()] = (_string(entry.value, label), entry.value.position)

    def _lame_duck_duration(self, entry: Entry, label: str) -> None:
        seconds = self.duration(entry.value, label)
        if seconds < 30:
            raise ConfigError.at(entry.value.position, f"{label}: invalid lame_duck_duration of {seconds:g}s, minimum is 30 seconds")
        self.set("lame_duck_duration", seconds, entry.value.position)

    def _lame_duck_grace_period(self, entry: Entry, label: str) -> None:
        seconds = self.duration(entry.value, label)
        if seconds < 0:
            raise ConfigError.at(entry.value.position, f"{label}: invalid lame_duck_grace_period, needs to be positive")
        self.set("lame_duck_grace_period", seconds, entry.value.position)

    def _server_tags(self, entry: Entry, label: str) -> None:
        data = _expect(entry.value, label, "string", "array")
        items = [entry.value] if isinstance(data, str) else data
        tags: list[str] = []
        for i, item in enumerate(items):
            tag = _string(item, f"{label}[{i}]" if isinstance(data, list) else label).strip().lower()
            if tag and tag not in tags:  # nats jwt TagList.Add: lower-cased, trimmed, unique
                tags.append(tag)
        self.set("server_tags", tuple(tags), entry.value.position)

    def _store_dir(self, entry: Entry, label: str) -> None:
        self._claim_store_dir(_string(entry.value, label), entry.value.position)

    def _claim_store_dir(self, path: str, position: Position) -> None:
        if self.store_dir is not None:
            raise ConfigError.at(position, f"duplicate 'store_dir' configuration (first set at {self.store_dir[1]})")
        self.store_dir = (path, position)

    # -- authorization, accounts, users ----------------------------------------------------

    def _users(self, value: Value, label: str, account: str) -> list[tuple[UserConfig, Position]]:
        """A ``users`` array (nats-server opts.go parseUsers). An nkey user is a
        ConfigError: jetraft cannot authenticate it, and skipping it would leave the
        operator believing the account is reachable only with that key."""
        users = []
        for i, item in enumerate(_expect(value, label, "array")):
            item_label = f"{label}[{i}]"
            name: tuple[str, Position] | None = None
            password: str | None = None
            permissions: Permissions | None = None
            for key, entry, entry_label in self.entries(item, item_label):
                if key in ("user", "username"):
                    name = (_string(entry.value, entry_label), entry.value.position)
                elif key in ("pass", "password"):
                    password = _string(entry.value, entry_label)
                elif key in ("permission", "permissions", "authorization"):  # opts.go parseUsers
                    permissions = read_permissions(entry.value, entry_label)
                elif key == "nkey":
                    raise ConfigError.at(
                        entry.key_position, f"{entry_label!r}: nkey users are not supported by jetraft (use user and password)"
                    )
                else:
                    self.ignore(entry, entry_label, _UNSUPPORTED_USER)
            if name is None:
                raise ConfigError.at(item.position, f"{item_label}: user entry requires a user")
            users.append((UserConfig(name[0], password, account, permissions), name[1]))
        return users

    @staticmethod
    def _with_defaults(
        users: list[tuple[UserConfig, Position]], defaults: Permissions | None
    ) -> list[tuple[UserConfig, Position]]:
        """Users without permissions of their own get ``defaults`` (opts.go
        applyDefaultPermissions)."""
        if defaults is None:
            return users
        return [(u if u.permissions is not None else replace(u, permissions=defaults), p) for u, p in users]

    def _authorization(self, entry: Entry, label: str) -> None:
        user = password = token = None
        timeout = 2.0
        users: list[tuple[UserConfig, Position]] | None = None
        defaults: Permissions | None = None
        for key, item, item_label in self.entries(entry.value, label):
            if key in ("user", "username"):
                user = _string(item.value, item_label)
            elif key in ("pass", "password"):
                password = _string(item.value, item_label)
            elif key == "token":
                token = _string(item.value, item_label)
            elif key == "timeout":
                timeout = self._auth_timeout(item.value, item_label)
            elif key == "users":
                users = self._users(item.value, item_label, GLOBAL_ACCOUNT)
            elif key in ("default_permission", "default_permissions", "permissions"):  # opts.go parseAuthorization
                defaults = read_permissions(item.value, item_label)
            else:
                self.ignore(item, item_label, _UNSUPPORTED_AUTHORIZATION)
        if (user or password) and token:
            raise ConfigError.at(entry.key_position, f"{label}: cannot have a user/pass and a token")
        if users is not None and user:
            raise ConfigError.at(entry.key_position, f"{label}: cannot have a single user/pass and a users array")
        if users is not None and token:
            raise ConfigError.at(entry.key_position, f"{label}: cannot have a token and a users array")
        self.authorization = AuthorizationConfig(user, password, token, timeout, defaults)
        self.global_users = self._with_defaults(users or [], defaults)

    def _auth_timeout(self, value: Value, label: str) -> float:
        """Authorization ``timeout``: seconds as a number, or a duration string."""
        data = _expect(value, label, "integer", "float", "string")
        seconds = _duration_string(value, label) if isinstance(data, str) else float(data)
        if seconds > 60:
            self.warn(
                value.position,
                f"{label}: timeout of {seconds:g} seconds is high, consider keeping it under 60 seconds "
                "(an unquoted 1m is 1000000; write '1m')",
            )
        return seconds

    def _accounts(self, entry: Entry, label: str) -> None:
        data = _expect(entry.value, label, "map", "array")
        if isinstance(data, list):  # accounts: [A, B]
            for i, item in enumerate(data):
                self._add_account(AccountConfig(_string(item, f"{label}[{i}]")), item.position)
            return
        for _, account, account_label in self.entries(entry.value, label):
            if account.value.used:  # a variable definition, not an account (opts.go parseAccounts)
                continue
            name = account.key
            _expect(account.value, account_label, "map")
            users: list[tuple[UserConfig, Position]] = []
            jetstream = False
            limits: tuple[tuple[str, int | bool], ...] = ()
            defaults: Permissions | None = None
            for key, item, item_label in self.entries(account.value, account_label):
                if key == "users":
                    users = self._users(item.value, item_label, name)
                elif key == "jetstream":
                    jetstream, limits = self._account_jetstream(item.value, item_label)
                    if jetstream:
                        self.origins[f"accounts.{name}.jetstream"] = Origin(item.key_position, True)
                elif key == "default_permissions":  # opts.go parseAccounts
                    defaults = read_permissions(item.value, item_label)
                else:
                    self.ignore(item, item_label, _UNSUPPORTED_ACCOUNT)
            users = self._with_defaults(users, defaults)
            self._add_account(
                AccountConfig(name, tuple(u for u, _ in users), jetstream, defaults, limits),
                account.key_position,
            )
            self.account_users.extend(users)

    def _add_account(self, account: AccountConfig, position: Position) -> None:
        if account.name == GLOBAL_ACCOUNT:
            raise ConfigError.at(position, f"{GLOBAL_ACCOUNT!r} is a reserved account")
        if account.name in self.accounts:
            raise ConfigError.at(position, f"duplicate account {account.name!r} (first at {self.accounts[account.name][1]})")
        self.accounts[account.name] = (account, position)

    def _account_jetstream(self, value: Value, label: str) -> tuple[bool, tuple[tuple[str, int | bool], ...]]:
        """An account's ``jetstream``: a boolean, ``enabled``/``disabled`` or a map of
        limits (opts.go parseJetStreamForAccount); ``(enabled, limits)``. A map enables
        JetStream. The limits jetraft enforces (:data:`_ACCOUNT_JETSTREAM_ENFORCED`) are
        returned under their JSON names; any other limit with a value other than
        nats-server's "no limit" default (``-1``; ``system`` for ``cluster_traffic``) is a
        ConfigError, as is an unknown key or a value of the wrong kind."""
        data = _expect(value, label, "boolean", "string", "map")
        if isinstance(data, str):
            return self._enabled_word(value, label), ()
        if not isinstance(data, dict):
            return data, ()
        limits: dict[str, int | bool] = {}
        for key, item, item_label in self.entries(value, label):
            default = _ACCOUNT_JETSTREAM_LIMITS.get(key)
            if default is None:
                if not item.value.used:
                    raise ConfigError.at(item.key_position, f"unknown field {item_label!r}")
                continue
            kind, no_limit = default
            if item.value.kind != kind:
                _expect(item.value, item_label, kind)
            enforced = _ACCOUNT_JETSTREAM_ENFORCED.get(key)
            if enforced is not None:
                limits[enforced] = item.value.data
            elif item.value.data not in no_limit:
                raise ConfigError.at(
                    item.key_position,
                    f"{item_label!r}: this account JetStream limit is not supported by jetraft "
                    f"(only {no_limit[0]!r}, no limit, is accepted; jetraft enforces "
                    f"{', '.join(sorted(set(_ACCOUNT_JETSTREAM_ENFORCED.values())))})",
                )
        return True, tuple(limits.items())

    def _enabled_word(self, value: Value, label: str) -> bool:
        word = value.data.lower()
        if word in ("enabled", "enable"):
            return True
        if word in ("disabled", "disable"):
            return False
        raise ConfigError.at(value.position, f"{label}: expected 'enabled' or 'disabled', got {value.data!r}")

    # -- jetstream -----------------------------------------------------------------------

    def _jetstream(self, entry: Entry, label: str) -> None:
        """opts.go parseJetStream: a boolean, ``enabled``/``disabled`` or a map."""
        value = entry.value
        data = _expect(value, label, "boolean", "string", "map")
        settings: dict[str, Any] = {}
        if isinstance(data, bool):
            self.jetstream = (data, settings, entry)
            return
        if isinstance(data, str):
            self.jetstream = (self._enabled_word(value, label), settings, entry)
            return
        enabled = True
        for key, item, item_label in self.entries(value, label):
            v = item.value
            if key in ("enabled", "enable"):
                enabled = _bool(v, item_label)
            elif key in ("store", "store_dir", "storedir"):
                self._claim_store_dir(_string(v, item_label), v.position)
            elif key in ("sync", "sync_interval"):
                if v.kind == "string" and v.data.lower() == "always":
                    settings["sync_always"] = True
                else:
                    settings["sync_interval"] = self.duration(v, item_label)
            elif key in ("max_memory_store", "max_mem_store", "max_mem"):
                settings["max_memory_store"] = _storage_size(v, item_label)
            elif key in ("max_file_store", "max_file"):
                settings["max_file_store"] = _storage_size(v, item_label)
            elif key == "domain":
                settings["domain"] = self._domain(v, item_label)
            elif key == "unique_tag":
                settings["unique_tag"] = _string(v, item_label).strip().lower() or None
            elif key in ("stream_compact", "meta_compact"):
                settings[key] = _int(v, item_label, low=1)
            elif key in ("stream_compact_size", "meta_compact_size", "max_outstanding_catchup"):
                size = _storage_size(v, item_label)
                if not size:
                    raise ConfigError.at(v.position, f"{item_label}: must be a positive size, got {v.data!r}")
                settings[key] = size
            elif key == "stream_compact_interval":
                seconds = self.duration(v, item_label)
                if seconds <= 0:
                    raise ConfigError.at(v.position, f"{item_label}: must be a positive duration")
                settings[key] = seconds
            else:
                self.ignore(item, item_label, _UNSUPPORTED_JETSTREAM)
        self.jetstream = (enabled, settings, entry)

    def _domain(self, value: Value, label: str) -> str:
        domain = _string(value, label)
        if any(c in domain for c in ".*>") or any(c.isspace() for c in domain):
            raise ConfigError.at(value.position, f"{label}: invalid domain name: may not contain ., * or > or spaces")
        return domain

    # -- cluster -------------------------------------------------------------------------

    def _cluster(self, entry: Entry, label: str) -> None:
        """opts.go parseCluster."""
        settings: dict[str, Any] = {}
        for key, item, item_label in self.entries(entry.value, label):
            v = item.value
            if key == "name":
                name = _string(v, item_label)
                if " " in name:
                    raise ConfigError.at(v.position, f"{item_label}: cluster name cannot contain spaces")
                settings["name"] = name
            elif key == "listen":
                host, port = _listen(v, item_label)
                if host is not None:
                    settings["host"] = host
                settings["port"] = port
                self.origins["cluster.port"] = Origin(v.position, port)
            elif key == "port":
                settings["port"] = _port(v, item_label)
                self.origins["cluster.port"] = Origin(v.position, settings["port"])
            elif key in ("host", "net"):
                settings["host"] = _string(v, item_label)
            elif key == "authorization":
                settings.update(self._cluster_authorization(item, item_label))
            elif key == "routes":
                settings["routes"] = self._routes(v, item_label)
            elif key == "tls":
                settings["tls"] = read_tls(v, item_label, client_context=False)
            else:
                self.ignore(item, item_label, _UNSUPPORTED_CLUSTER)
        if settings.get("port") == 0:
            settings["port"] = _DEFAULT_ROUTE_PORT
        self.cluster = (ClusterConfig(**settings), entry)

    def _cluster_authorization(self, entry: Entry, label: str) -> dict[str, Any]:
        settings: dict[str, Any] = {}
        for key, item, item_label in self.entries(entry.value, label):
            if key in ("user", "username"):
                settings["user"] = _string(item.value, item_label)
            elif key in ("pass", "password"):
                settings["password"] = _string(item.value, item_label)
            elif key == "timeout":
                settings["auth_timeout"] = self._auth_timeout(item.value, item_label)
            elif key == "users":
                raise ConfigError.at(item.key_position, f"{item_label}: cluster authorization does not allow multiple users")
            elif key == "token":
                raise ConfigError.at(item.key_position, f"{item_label}: cluster authorization does not support tokens")
            else:
                self.ignore(item, item_label, _UNSUPPORTED_AUTHORIZATION)
        return settings

    def _routes(self, value: Value, label: str) -> tuple[RouteURL, ...]:
        routes: list[RouteURL] = []
        seen: set[str] = set()
        for i, item in enumerate(_expect(value, label, "array")):
            text = _string(item, f"{label}[{i}]").strip()
            if text in seen:
                self.warn(item.position, f"{label}[{i}]: duplicate route entry {text!r} detected, ignored")
                continue
            seen.add(text)
            routes.append(_route(text, f"{label}[{i}]", item.position))
        return tuple(routes)

    # -- assembly ---------------------------------------------------------------------------

    def _assemble(self) -> ServerConfig:
        fields = self.fields
        system = self.system_account.get("system_account") or self.system_account.get("system")
        if system is not None:
            self.set("system_account", system[0], system[1])
        system_name = fields.get("system_account", DEFAULT_SYSTEM_ACCOUNT)
        fields["http_host"] = self.http_host or fields.get("host", "0.0.0.0")
        if self.http_host is not None:  # http: "host:port" in the file; the -a flag does not move it (nats-server)
            where = self.origins["http_port"].position if "http_port" in self.origins else self.root.position
            self.origins["http_host"] = Origin(where, self.http_host)
        fields["logging"] = LoggingConfig(**self.logging)
        fields["authorization"] = self.authorization
        self._check_users()
        accounts: dict[str, AccountConfig] = {
            GLOBAL_ACCOUNT: AccountConfig(GLOBAL_ACCOUNT, tuple(u for u, _ in self.global_users))
        }
        accounts.update((name, account) for name, (account, _) in self.accounts.items())
        if system_name == DEFAULT_SYSTEM_ACCOUNT:
            accounts.setdefault(DEFAULT_SYSTEM_ACCOUNT, AccountConfig(DEFAULT_SYSTEM_ACCOUNT))
        fields["accounts"] = types.MappingProxyType(accounts)
        if self.jetstream is not None:
            enabled, settings, entry = self.jetstream
            config = JetStreamConfig(**settings, store_dir=self.store_dir[0] if self.store_dir else None) if enabled else None
            fields["jetstream"] = config
            self.origins["jetstream"] = Origin(entry.key_position, config)
        if fields.get("jetstream") is None and self.store_dir is not None:
            self.warn(self.store_dir[1], "store_dir is set but JetStream is not enabled, ignored")
        if self.cluster is not None:
            cluster, entry = self.cluster
            fields["cluster"] = cluster
            self.origins["cluster"] = Origin(entry.key_position, cluster)
        return ServerConfig(source=self.source, warnings=tuple(self.warnings), origins=self.origins, **fields)

    def _check_users(self) -> None:
        """Users must be unique across all accounts, and account users exclude a single
        authorization user or token (opts.go parseAccounts/parseAuthorization)."""
        auth = self.authorization
        if auth is not None and self.account_users and (auth.user or auth.token):
            what = "a single user/pass" if auth.user else "a token"
            raise ConfigError.at(self.account_users[0][1], f"cannot have {what} in authorization and users in accounts")
        seen: dict[str, Position] = {}
        for user, position in (*self.global_users, *self.account_users):
            if user.user in seen:
                raise ConfigError.at(position, f"duplicate user {user.user!r} detected (first at {seen[user.user]})")
            seen[user.user] = position
            self.origins[f"users.{user.user}"] = Origin(position, user)


def _route(text: str, label: str, position: Position) -> RouteURL:
    """A route URL (nats-server opts.go parseURL), as a RouteURL."""
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ConfigError.at(position, f"{label}: invalid route URL {text!r}: {e}") from None
    scheme = parts.scheme.lower()
    if scheme not in _ROUTE_SCHEMES:
        raise ConfigError.at(position, f"{label}: invalid route URL {text!r}: expected nats://host:port or nats-route://host:port")
    if not parts.hostname:
        raise ConfigError.at(position, f"{label}: invalid route URL {text!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError.at(position, f"{label}: invalid route URL {text!r}: unexpected path, query or fragment")
    user = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return RouteURL(scheme, parts.hostname, _DEFAULT_ROUTE_PORT if port is None else port, user, password)


# -- entry points ----------------------------------------------------------------------


def build_config(tree: Value, source: str | None = None) -> ServerConfig:
    """Type a parsed tree (:func:`jetraft.config.parser.parse_tree`) into a
    ServerConfig, without :func:`validate`. Raises ConfigError."""
    return _Builder(tree, source).build()


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> ServerConfig:
    """Read, parse, type and validate the configuration file at ``path``.

    ``env`` replaces ``os.environ`` for ``$VAR`` references. Returns a ServerConfig
    whose ``source`` is ``path``. Raises ConfigError (also when the file cannot be
    read).
    """
    config = build_config(load_tree(path, env), os.fspath(path))
    validate(config)
    return config


def config_from_text(text: str, filename: str = "<string>", env: Mapping[str, str] | None = None) -> ServerConfig:
    """:func:`load_config` for configuration text; ``filename`` names it in errors and
    anchors relative includes. ``source`` is None. Raises ConfigError."""
    config = build_config(parse_tree(text, filename, env), None)
    validate(config)
    return config


def parse_route_url(text: str) -> RouteURL:
    """Parse one route URL given on the command line (``--routes``).

    ``nats://[user:pass@]host[:port]`` or ``nats-route://...``; the port defaults to 6222.
    Raises :class:`ConfigError` (file ``<command line>``) when it does not parse.
    """
    return _route(text.strip(), "--routes", COMMAND_LINE)
