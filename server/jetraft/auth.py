"""Client authentication: users in accounts, the ``authorization`` block, tokens.

Pure and synchronous; bcrypt checks cost tens to hundreds of milliseconds, so the server
calls :meth:`Authenticator.verify` from a worker thread. The rules follow nats-server
server/auth.go: a password that looks like bcrypt (``$2a$``, ``$2b$``, ``$2x$``, ``$2y$``
with a two-digit cost) is checked with bcrypt, anything else is compared as plain text in
constant time; ``no_auth_user`` binds clients that present no credentials.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

import bcrypt

from jetraft.config import ServerConfig, UserConfig, is_bcrypt

GLOBAL_ACCOUNT = "$G"


class AuthError(Exception):
    """Authentication failed. ``str()`` is a reason for the event log, never a secret."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a client authenticated as: ``user`` (None for token/anonymous) in ``account``."""

    user: str | None
    account: str


def check_password(stored: str, given: str) -> bool:
    """Compare ``given`` with ``stored`` (bcrypt hash or plain text) in constant time."""
    if is_bcrypt(stored):
        try:
            return bcrypt.checkpw(given.encode(), stored.encode())
        except ValueError:  # malformed hash in the configuration, or a >72-byte password
            return False
    return hmac.compare_digest(stored.encode(), given.encode())


class Authenticator:
    """Decides who a client is from its CONNECT options.

    Built from a :class:`~jetraft.config.ServerConfig`; rebuilt on SIGHUP reload.
    ``required`` is True when any user, the ``authorization`` user or a token is
    configured (nats-server then sends ``auth_required: true`` in INFO).
    """

    def __init__(self, config: ServerConfig) -> None:
        self.users: dict[str, UserConfig] = {}
        for account in config.accounts.values():
            for user in account.users:
                self.users[user.user] = user
        authz = config.authorization
        self.token = authz.token if authz else None
        if authz and authz.user:
            self.users[authz.user] = UserConfig(
                user=authz.user, password=authz.password, account=GLOBAL_ACCOUNT
            )
        self.no_auth_user = config.no_auth_user
        self.required = bool(self.users or self.token)
        self.timeout = authz.timeout if authz else 2.0

    def verify(self, user: str | None, password: str | None, token: str | None) -> Identity:
        """Return the client's identity or raise :class:`AuthError`.

        ``user``/``password``/``token`` are the CONNECT ``user``, ``pass`` and
        ``auth_token`` fields (None when absent). Blocking (bcrypt): call from a thread.
        """
        if not self.required:
            return Identity(user=None, account=GLOBAL_ACCOUNT)
        if self.token is not None and token is not None:
            if hmac.compare_digest(self.token.encode(), token.encode()):
                return Identity(user=None, account=GLOBAL_ACCOUNT)
            raise AuthError("bad token")
        if not user and not token and self.no_auth_user in self.users:
            entry = self.users[self.no_auth_user]
            return Identity(user=entry.user, account=entry.account)
        if not user:
            raise AuthError("no credentials")
        entry = self.users.get(user)
        if entry is None:
            raise AuthError("unknown user")
        if entry.password is not None and not check_password(entry.password, password or ""):
            raise AuthError("bad password")
        return Identity(user=entry.user, account=entry.account)

    def still_valid(self, identity: Identity, previous: Authenticator) -> bool:
        """After a reload: does a client authenticated under ``previous`` keep its access?"""
        if identity.user is None:
            return not self.required or (self.token is not None and self.token == previous.token)
        now, before = self.users.get(identity.user), previous.users.get(identity.user)
        return now is not None and before is not None and now == before
