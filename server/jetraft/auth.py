"""Client authentication and authorization: users in accounts, the ``authorization``
block, tokens, and what each user may publish and subscribe to.

Pure and synchronous; bcrypt checks cost tens to hundreds of milliseconds, so the server
calls :meth:`Authenticator.verify` from a worker thread. The rules follow nats-server
server/auth.go: a password that looks like bcrypt (``$2a$``, ``$2b$``, ``$2x$``, ``$2y$``
with a two-digit cost) is checked with bcrypt, anything else is compared as plain text in
constant time; ``no_auth_user`` binds clients that present no credentials; when the only
account besides ``$G`` is the system account and there is neither an ``authorization``
block nor a ``no_auth_user``, clients without credentials go to ``$G`` as a hidden user
(nats-server server/server.go configureAccounts, ``sysAccOnlyNoAuthUser``).

Permissions (:class:`ClientPermissions`) follow nats-server server/client.go
(setPermissions, pubAllowedFullCheck, canSubscribe, checkDenySub, responseAllowed): an
allow list admits what matches it, a deny list then refuses what matches it; subscribe
entries may name a queue group; a subscribe deny also filters deliveries to wildcard and
queue subscriptions that overlap it; ``allow_responses`` lets a client publish to the
reply subject of a message it received. Every check is cached per subject per connection
in bounded caches, as nats-server does.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

import bcrypt

from jetraft.config import Permissions, ServerConfig, UserConfig, is_bcrypt
from jetraft.protocol import Match, SubjectIndex, subjects_overlap

GLOBAL_ACCOUNT = "$G"

#: Bounds of the per-connection caches (nats-server client.go maxPermCacheSize,
#: maxDenyPermCacheSize, pruneSize): past the bound, ``PRUNE_SIZE`` entries are dropped.
PUB_CACHE_SIZE = 128
DENY_CACHE_SIZE = 256
PRUNE_SIZE = 32
#: Reply permissions are pruned (used up or expired ones dropped) after this many new
#: ones or this many seconds, whichever first (client.go replyPermLimit, replyPruneTime).
REPLY_PRUNE_COUNT = 4096
REPLY_PRUNE_SECONDS = 1.0
#: The queue group name no client may use (nats-server client.go sysGroup).
SYSTEM_QUEUE_GROUP = "_sys_"


class AuthError(Exception):
    """Authentication failed. ``str()`` is a reason for the event log, never a secret."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a client authenticated as: ``user`` (None for token/anonymous) in ``account``,
    with the user's effective ``permissions`` (None: no restriction)."""

    user: str | None
    account: str
    permissions: Permissions | None = None


def check_password(stored: str, given: str) -> bool:
    """Compare ``given`` with ``stored`` (bcrypt hash or plain text) in constant time."""
    if is_bcrypt(stored):
        try:
            return bcrypt.checkpw(given.encode(), stored.encode())
        except ValueError:  # malformed hash in the configuration, or a >72-byte password
            return False
    return hmac.compare_digest(stored.encode(), given.encode())


def _split_queue(entry: str) -> tuple[str, str | None]:
    """``"subject"`` or ``"subject queue"`` (client.go splitSubjectQueue)."""
    parts = entry.split()
    return (parts[0], parts[1]) if len(parts) == 2 else (parts[0], None)


def _index(entries: tuple[str, ...], queues: bool) -> SubjectIndex[str]:
    index: SubjectIndex[str] = SubjectIndex(cache_size=256)
    for entry in entries:
        subject, queue = _split_queue(entry) if queues else (entry, None)
        index.insert(subject, entry, queue)
    return index


def _queue_is_subset(queue: str, pattern: str) -> bool:
    """Whether every subject ``queue`` matches is matched by ``pattern`` (nats-server
    sublist.go subjectIsSubsetMatch)."""
    qt, pt = queue.split("."), pattern.split(".")
    for i, p in enumerate(pt):
        if i >= len(qt):
            return False
        if p == ">":
            return True
        if p == "*":
            if qt[i] == ">":
                return False
        elif p != qt[i]:
            return False
    return len(qt) == len(pt)


def _queue_matches(queue: str, queues: tuple[tuple[str, tuple], ...]) -> bool:
    """client.go queueMatches: ``queue`` is one of the matched entries' queue names, or
    covered by one with wildcards."""
    if not queues:
        return True
    for name, _ in queues:
        if queue == name or (("*" in name.split(".") or ">" in name.split(".")) and _queue_is_subset(queue, name)):
            return True
    return False


class CompiledPermissions:
    """A :class:`~jetraft.config.Permissions` as subject indexes, shared by every
    connection of users with the same permissions (read-only once built)."""

    __slots__ = ("deny_subjects", "pub_allow", "pub_deny", "responses", "sub_allow", "sub_deny")

    def __init__(self, perms: Permissions) -> None:
        pub, sub = perms.publish, perms.subscribe
        # client.go setPermissions: an empty publish allow list allows nothing, an empty
        # subscribe allow list restricts nothing; empty deny lists deny nothing.
        self.pub_allow = _index(pub.allow, False) if pub is not None and pub.allow is not None else None
        self.pub_deny = _index(pub.deny, False) if pub is not None and pub.deny else None
        self.sub_allow = _index(sub.allow, True) if sub is not None and sub.allow else None
        self.sub_deny = _index(sub.deny, True) if sub is not None and sub.deny else None
        self.deny_subjects = tuple(_split_queue(e)[0] for e in sub.deny) if sub is not None and sub.deny else ()
        self.responses = perms.allow_responses

    def publish_allowed(self, subject: str) -> bool:
        """The static publish check (allow, then deny), without reply permissions."""
        if self.pub_allow is not None and not self.pub_allow.has_interest(subject):
            return False
        return self.pub_deny is None or not self.pub_deny.has_interest(subject)

    def subscribe_allowed(self, subject: str, queue: str | None) -> bool:
        """client.go canSubscribeInternal: the SUB subject's tokens are matched literally
        against the allow then the deny entries; entries with a queue decide for queue
        subscriptions."""
        if self.sub_allow is not None:
            r = self.sub_allow.match(subject)
            allowed = bool(r.plain)
            if queue and r.queues:
                allowed = _queue_matches(queue, r.queues)
            if not allowed:
                return False
        if self.sub_deny is not None:
            r = self.sub_deny.match(subject)
            if r.plain:
                return False
            if queue and r.queues and _queue_matches(queue, r.queues):
                return False
        return True

    def delivery_denied(self, subject: str, queue: str | None) -> bool:
        """client.go checkDenySub: whether a message on ``subject`` must not be delivered
        to a subscription (in ``queue``) because of the subscribe deny list."""
        r: Match = self.sub_deny.match(subject)
        if r.plain:
            return True
        return bool(queue and r.queues and _queue_matches(queue, r.queues))


class ClientPermissions:
    """The permissions of one connection: the shared :class:`CompiledPermissions` plus
    this connection's caches and reply permissions (nats-server client.perms, mperms,
    replies). Times (``now``) are monotonic seconds."""

    __slots__ = ("_deny_cache", "_last_prune", "_pub_cache", "_replies", "_since_prune", "compiled",
                 "filters_delivery", "restricts_publish", "tracks_replies")

    def __init__(self, compiled: CompiledPermissions) -> None:
        self.compiled = compiled
        #: publishing is checked at all (an allow or a deny list)
        self.restricts_publish = compiled.pub_allow is not None or compiled.pub_deny is not None
        #: deliveries are checked against the subscribe deny list: set once a wildcard or
        #: queue subscription overlaps it (client.go loadMsgDenyFilterIfNeeded)
        self.filters_delivery = False
        #: reply subjects of delivered messages are recorded (``allow_responses``)
        self.tracks_replies = compiled.responses is not None
        self._pub_cache: dict[str, bool] = {}
        self._deny_cache: dict[tuple[str, str | None], bool] = {}
        self._replies: dict[str, list] = {}        # reply -> [delivered at, responses sent]
        self._since_prune = 0
        self._last_prune = 0.0

    @property
    def pub_cache_size(self) -> int:
        """Subjects in this connection's publish cache (client.go ``perms.pcache``); pruned
        once past :data:`PUB_CACHE_SIZE`."""
        return len(self._pub_cache)

    @property
    def deny_cache_size(self) -> int:
        """(subject, queue) pairs in this connection's delivery deny cache (client.go
        ``mperms.dcache``); pruned once past :data:`DENY_CACHE_SIZE`."""
        return len(self._deny_cache)

    @property
    def reply_count(self) -> int:
        """Reply subjects this connection holds a response permission for (client.go
        ``replies``): each delivered message's reply it may not publish to otherwise, until
        the next prune after it is used up or expired (every :data:`REPLY_PRUNE_COUNT`
        deliveries or :data:`REPLY_PRUNE_SECONDS` seconds)."""
        return len(self._replies)

    def can_publish(self, subject: str, now: float) -> bool:
        """client.go pubAllowedFullCheck: the static check (cached), then, when it
        refuses and ``allow_responses`` is on, the reply permissions (one use each)."""
        allowed = self._pub_cache.get(subject)
        if allowed is None:
            allowed = self.compiled.publish_allowed(subject)
            if allowed or not self.tracks_replies:
                cache = self._pub_cache
                cache[subject] = allowed
                if len(cache) > PUB_CACHE_SIZE:
                    _prune(cache)
        if not allowed and self.tracks_replies:
            return self._use_reply(subject, now)
        return allowed

    def _use_reply(self, subject: str, now: float) -> bool:
        """client.go responseAllowed."""
        entry = self._replies.get(subject)
        if entry is None:
            return False
        resp = self.compiled.responses
        entry[1] += 1
        if (resp.max_msgs > 0 and entry[1] > resp.max_msgs) or (resp.expires > 0 and now - entry[0] > resp.expires):
            del self._replies[subject]
            return False
        return True

    def can_subscribe(self, subject: str, queue: str | None) -> bool:
        """client.go canSubscribe; an allowed wildcard or queue subscription that overlaps
        the deny list turns on delivery filtering."""
        compiled = self.compiled
        if not compiled.subscribe_allowed(subject, queue):
            return False
        if not self.filters_delivery and compiled.deny_subjects and (queue or _has_wildcard(subject)):
            # bounded by the configured deny list
            self.filters_delivery = any(subjects_overlap(d, subject) for d in compiled.deny_subjects)
        return True

    def delivery_denied(self, subject: str, queue: str | None) -> bool:
        """Whether a delivery must be dropped (only meaningful with ``filters_delivery``);
        cached per (subject, queue)."""
        key = (subject, queue)
        denied = self._deny_cache.get(key)
        if denied is None:
            denied = self.compiled.delivery_denied(subject, queue)
            cache = self._deny_cache
            cache[key] = denied
            if len(cache) > DENY_CACHE_SIZE:
                _prune(cache)
        return denied

    def note_delivery(self, reply: str, now: float) -> None:
        """A message with ``reply`` was delivered to this client: unless it may publish
        there anyway, it may now respond (client.go deliverMsg, pruneReplyPerms)."""
        if self.can_publish(reply, now):
            return
        self._replies[reply] = [now, 0]
        self._since_prune += 1
        if self._since_prune > REPLY_PRUNE_COUNT or now - self._last_prune > REPLY_PRUNE_SECONDS:
            self._prune_replies(now)

    def _prune_replies(self, now: float) -> None:
        resp = self.compiled.responses
        self._replies = {
            reply: entry for reply, entry in self._replies.items()
            if not (resp.max_msgs > 0 and entry[1] >= resp.max_msgs)
            and not (resp.expires > 0 and now - entry[0] > resp.expires)
        }
        self._since_prune = 0
        self._last_prune = now


def _has_wildcard(subject: str) -> bool:
    tokens = subject.split(".")
    return "*" in tokens or ">" in tokens


def _prune(cache: dict) -> None:
    """Drop ``PRUNE_SIZE`` + 1 entries (the oldest: nats-server drops arbitrary ones)."""
    for key in list(_take(cache, PRUNE_SIZE + 1)):
        del cache[key]


def _take(cache: dict, n: int):
    for i, key in enumerate(cache):
        if i >= n:
            return
        yield key


class Authenticator:
    """Decides who a client is from its CONNECT options, and with which permissions.

    Built from a :class:`~jetraft.config.ServerConfig`; rebuilt on SIGHUP reload (pass
    the running one as ``previous``: the hidden no-auth user keeps its name, so its
    clients stay connected). ``required`` is True when any user, the ``authorization``
    user or a token is configured; ``advertise_auth`` is what INFO's ``auth_required``
    says (nats-server server.go: false when a configured ``no_auth_user`` lets clients in
    without credentials, true for the hidden user). ``hidden_user`` is the name of the
    hidden no-auth user (None when there is none).
    """

    def __init__(self, config: ServerConfig, previous: Authenticator | None = None) -> None:
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
        self.hidden_user: str | None = None
        if _system_account_only(config):
            name = previous.hidden_user if previous is not None and previous.hidden_user else _hidden_user_name()
            self.users[name] = UserConfig(user=name, account=GLOBAL_ACCOUNT)  # never given: see verify
            self.no_auth_user = self.hidden_user = name
        self.required = bool(self.users or self.token)
        self.advertise_auth = self.required and (self.no_auth_user is None or self.hidden_user is not None)
        self.timeout = authz.timeout if authz else 2.0
        self._compiled: dict[Permissions, CompiledPermissions] = {}

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
            return Identity(user=entry.user, account=entry.account, permissions=entry.permissions)
        if not user:
            raise AuthError("no credentials")
        entry = self.users.get(user)
        if entry is None or user == self.hidden_user:
            raise AuthError("unknown user")
        if entry.password is not None and not check_password(entry.password, password or ""):
            raise AuthError("bad password")
        return Identity(user=entry.user, account=entry.account, permissions=entry.permissions)

    def still_valid(self, identity: Identity, previous: Authenticator) -> bool:
        """After a reload: does a client authenticated under ``previous`` keep its access?

        A user keeps it while it exists with the same password in the same account (its
        permissions may change: :meth:`refresh` gives the new ones; nats-server reload.go
        reloadAuthorization re-registers the user rather than disconnecting it)."""
        if identity.user is None:
            return not self.required or (self.token is not None and self.token == previous.token)
        now, before = self.users.get(identity.user), previous.users.get(identity.user)
        return (now is not None and before is not None and now.password == before.password
                and now.account == before.account)

    def refresh(self, identity: Identity) -> Identity:
        """``identity`` with the permissions this configuration gives its user (for a
        client that :meth:`still_valid` keeps)."""
        entry = self.users.get(identity.user) if identity.user is not None else None
        permissions = entry.permissions if entry is not None else None
        if permissions == identity.permissions:
            return identity
        return Identity(identity.user, identity.account, permissions)

    def client_permissions(self, identity: Identity | None) -> ClientPermissions | None:
        """A new connection's permission state for ``identity`` (None: unrestricted). The
        subject indexes are built once per distinct permissions and shared."""
        perms = identity.permissions if identity is not None else None
        if perms is None:
            return None
        compiled = self._compiled.get(perms)
        if compiled is None:
            compiled = self._compiled[perms] = CompiledPermissions(perms)
        return ClientPermissions(compiled)


def _system_account_only(config: ServerConfig) -> bool:
    """nats-server server.go configureAccounts: no ``authorization`` block, no
    ``no_auth_user``, and the system account (with users) the only account but ``$G``."""
    if config.authorization is not None or config.no_auth_user is not None:
        return False
    system = config.system_account
    others = [name for name in config.accounts if name != GLOBAL_ACCOUNT]
    return others == [system] and bool(config.accounts[system].users)


def _hidden_user_name() -> str:
    """``nats-`` and eight random base-62 digits, as nats-server names it."""
    return "nats-" + "".join(secrets.choice(_BASE62) for _ in range(8))


_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
