"""The NATS configuration format for jetraft: lexer, parser, typed ServerConfig, validation.

The format and its semantics are nats-server's (``conf/lex.go``, ``conf/parse.go``,
``server/opts.go``). This package imports nothing from the rest of jetraft.

Entry points:

* :func:`parse_text` - configuration text to plain Python values.
* :func:`load_config` / :func:`config_from_text` - a file or text to a validated
  :class:`ServerConfig` (durations in float seconds, sizes in int bytes).
* :func:`validate` - the cross-field checks, to re-run after command-line overrides.
* :func:`parse_route_url` - one ``--routes`` URL, checked as the ``routes`` key is.
* :func:`dumps` - plain values back to configuration text.
* :func:`server_context` / :func:`client_context` - ``ssl.SSLContext`` objects from a
  :class:`TLSConfig`, its certificate, key and CA files read at the call.
* :class:`Permissions` (:class:`SubjectPermission`, :class:`ResponsePermission`) - a
  user's publish/subscribe permissions, in :attr:`UserConfig.permissions`.

Every failure is a :class:`ConfigError` with ``message``, ``file``, ``line`` and
``column``; ``str(err)`` is ``"file:line:column: message"``.
"""

from .builder import config_from_text, load_config, parse_route_url
from .errors import ConfigError, Position
from .model import (
    AccountConfig,
    AuthorizationConfig,
    ClusterConfig,
    JetStreamConfig,
    LoggingConfig,
    RouteURL,
    ServerConfig,
    UserConfig,
    is_bcrypt,
    validate,
)
from .parser import parse_text
from .tls import TLSConfig, client_context, server_context
from .permissions import Permissions, ResponsePermission, SubjectPermission
from .writer import dumps

__all__ = [
    "AccountConfig",
    "AuthorizationConfig",
    "ClusterConfig",
    "ConfigError",
    "JetStreamConfig",
    "LoggingConfig",
    "Permissions",
    "Position",
    "ResponsePermission",
    "RouteURL",
    "ServerConfig",
    "SubjectPermission",
    "UserConfig",
    "client_context",
    "config_from_text",
    "dumps",
    "is_bcrypt",
    "load_config",
    "parse_route_url",
    "parse_text",
    "server_context",
    "validate",
]
