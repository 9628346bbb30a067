"""Interest between the servers of a cluster: what this server tells its peers it wants, and
what each peer told it (nats-server server/route.go updateRouteSubscriptionMap).

Subscriptions of local clients and interest held by the server itself
(:meth:`RouteInterest.add_internal_interest`) are reference-counted per (account, subject)
and per (account, subject, queue); the first subscriber sends SUB to every peer, the last
UNSUB; a queue group's SUB carries its member count as weight (``RS+ account subject queue
weight``). A route that comes up gets the whole table (:meth:`RouteInterest.table_for`); the
interest a peer sent is forgotten when its route goes down (:meth:`RouteInterest.forget`).
Many subjects at once (a stream leader's interest in its stream's subjects:
:meth:`RouteInterest.add_internal_interests`) go as SUBS/UNSUBS frames, a few per batch, to
peers whose INFO announces protocol minor 1, and as one SUB/UNSUB per subject to older
peers. The interest peers sent is held per account in a
:class:`~jetraft.protocol.SubjectIndex` of :class:`RemoteSub`; the route connection's reader
feeds it (:mod:`jetraft.net.transport.route_conn`, in slices of ``INTEREST_SLICE`` subjects).

The route manager (:class:`~jetraft.net.transport.route.RouteManager`) owns one :class:`RouteInterest`
and offers its public methods to the other layers under the same names.

A cluster may mix servers with and without JetStream (nats-server serves ``$JS.API`` through
a server without JetStream: the account's ``$JS.API.>`` service import, answered by one
JetStream server, jetstream_api.go). Each JetStream server holds internal interest in
:data:`JS_API_SUBJECT` in queue group :data:`JS_API_QUEUE` for every account it serves and
for the system account (where nats-server serves ``$JS.API.SERVER.REMOVE`` and the meta
step-down), so a server without JetStream sends each ``$JS.API`` request of its clients to
exactly one JetStream server (a queue group gets one copy in the whole cluster; each
server weighs 1) in one route forward, and a request that no JetStream server can take (none reachable)
meets no interest and gets the 503 no-responders status at once, as from nats-server. A
JetStream server answers its own clients' requests itself: it never indexes that interest
of its peers (:meth:`RouteInterest.remote_sub`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from jetraft.protocol import Match, SubjectIndex
from jetraft.protocol import route as rp

if TYPE_CHECKING:
    from jetraft.net.ports import RouteHost
    from jetraft.net.transport.route_conn import RouteConnection

__all__ = ["JS_API_QUEUE", "JS_API_SUBJECT", "PeerRoute", "RemoteSub", "RouteInterest"]

#: The subject of a JetStream server's interest in the JetStream API of an account.
JS_API_SUBJECT = "$JS.API.>"
#: The queue group of that interest: one JetStream server gets each request; a routed
#: message that names it was picked for this server as if its own client had sent it.
JS_API_QUEUE = "_jetraft_jsapi"


class PeerRoute(Protocol):
    """A peer as the interest table sees it (``jetraft.net.transport.route.RoutePeer``)."""

    #: Its route connection; None while it is being replaced.
    conn: RouteConnection | None


class RemoteSub:
    """Interest a peer sent: its route ``conn``, the ``subject`` filter, ``queue`` and ``weight``
    (the peer's member count in that queue group). Held in :class:`RouteInterest`'s per-account index."""

    __slots__ = ("conn", "queue", "subject", "weight")

    def __init__(self, conn: RouteConnection, subject: str, queue: str | None, weight: int) -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        self.weight = weight


class RouteInterest:
    """The interest tables of one server's routes (see the module docstring).

    ``server`` gives the router told of every change of the peers' interest
    (``Router.subscriptions_changed``); ``peers`` (server_name -> peer, kept up to date by the
    route manager) are the routes each change of local interest is sent on.
    """

    def __init__(self, server: RouteHost, peers: Mapping[str, PeerRoute]) -> None:
        self.server = server
        self.peers = peers
        self._remote: dict[str, SubjectIndex[RemoteSub]] = {}
        self._plain: dict[tuple[str, str], int] = {}
        self._queues: dict[tuple[str, str, str], int] = {}

    def add_internal_interest(self, account: str, subject: str, queue: str | None = None) -> None:
        """Interest held by this server itself, propagated to peers like a client subscription
        (reference-counted: each add needs one remove). Matching messages published on other
        servers arrive through ``Router.publish_from_route``."""
        self.local_interest(account, subject, queue, 1)

    def remove_internal_interest(self, account: str, subject: str, queue: str | None = None) -> None:
        """Drop one reference taken by :meth:`add_internal_interest`."""
        self.local_interest(account, subject, queue, -1)

    def add_internal_interests(self, account: str, subjects: Iterable[str]) -> None:
        """:meth:`add_internal_interest` (plain, no queue) for each of ``subjects``, in order,
        with the same effect on every peer; the subjects that gain their first reference go
        to each peer as SUBS frames (one per :data:`~jetraft.protocol.route.BATCH_SUBJECTS`)
        or, to a peer of protocol minor 0, as one SUB each. O(len(subjects)), no per-subject
        frame: for a stream's thousands of subjects."""
        plain = self._plain
        new: list[str] = []
        for subject in subjects:
            key = (account, subject)
            count = plain.get(key, 0) + 1
            plain[key] = count
            if count == 1:
                new.append(subject)
        if new:
            self._broadcast_plain(account, new, add=True)

    def remove_internal_interests(self, account: str, subjects: Iterable[str]) -> None:
        """Drop one reference of each of ``subjects`` taken by :meth:`add_internal_interests`
        (or :meth:`add_internal_interest`), in order; the interest that disappears goes to the
        peers as UNSUBS frames (UNSUB each for a peer of minor 0)."""
        plain = self._plain
        gone: list[str] = []
        for subject in subjects:
            key = (account, subject)
            count = plain.get(key)
            if count is None:
                continue
            if count > 1:
                plain[key] = count - 1
            else:
                del plain[key]
                gone.append(subject)
        if gone:
            self._broadcast_plain(account, gone, add=False)

    def has_remote_interest(self, account: str, subject: str) -> bool:
        """Whether any peer has interest (plain or queue) matching the literal ``subject``."""
        index = self._remote.get(account)
        return index is not None and index.has_interest(subject)

    def match_remote(self, account: str, subject: str) -> Match | None:
        """The peers' interest matching ``subject`` (items are :class:`RemoteSub`), or None."""
        index = self._remote.get(account)
        if index is None:
            return None
        match = index.match(subject)
        return match if (match.plain or match.queues) else None

    # ------------------------------------------------------------------ local interest

    def local_interest(self, account: str, subject: str, queue: str | None, delta: int) -> None:
        """A local subscription (``delta`` +1) or unsubscription (-1): tell the peers when the
        interest appears, disappears, or a queue group's member count changes."""
        if queue is None:
            key = (account, subject)
            count = self._plain.get(key, 0) + delta
            if count > 0:
                self._plain[key] = count
                if count == 1 and delta > 0:
                    self._broadcast(rp.encode_sub(account, subject))
            else:
                if self._plain.pop(key, None) is not None:
                    self._broadcast(rp.encode_unsub(account, subject))
            return
        qkey = (account, subject, queue)
        count = self._queues.get(qkey, 0) + delta
        if count > 0:
            self._queues[qkey] = count
            self._broadcast(rp.encode_sub(account, subject, queue, count))
        elif self._queues.pop(qkey, None) is not None:
            self._broadcast(rp.encode_unsub(account, subject, queue))

    def _broadcast(self, frame: bytes) -> None:
        """``frame`` to every peer's route."""
        for peer in self.peers.values():
            if peer.conn is not None:
                peer.conn.send(frame)

    def _broadcast_plain(self, account: str, subjects: list[str], *, add: bool) -> None:
        """Plain interest in ``subjects`` appeared (``add``) or disappeared: SUBS/UNSUBS
        frames to the peers that read them, one SUB/UNSUB per subject to the others (each
        encoding made once, shared by the peers)."""
        batch = single = None
        for peer in self.peers.values():
            conn = peer.conn
            if conn is None:
                continue
            if conn.reads_batches:
                if batch is None:
                    batch = (rp.encode_subs if add else rp.encode_unsubs)(account, subjects)
                conn.send(batch)
            else:
                if single is None:
                    encode = rp.encode_sub if add else rp.encode_unsub
                    single = b"".join([encode(account, subject) for subject in subjects])
                conn.send(single)

    def table_for(self, conn: RouteConnection) -> bytes:
        """Every local interest, for ``conn`` that just came up: plain interest as SUBS
        frames per account (SUB frames for a peer of minor 0), queue groups as SUB frames."""
        if conn.reads_batches:
            accounts: dict[str, list[str]] = {}
            for account, subject in self._plain:
                accounts.setdefault(account, []).append(subject)
            out = [rp.encode_subs(account, subjects) for account, subjects in accounts.items()]
        else:
            out = [rp.encode_sub(account, subject) for account, subject in self._plain]
        out += [rp.encode_sub(a, s, q, n) for (a, s, q), n in self._queues.items()]
        return b"".join(out)

    # ------------------------------------------------------------------ remote interest

    def remote_sub(self, conn: RouteConnection, frame: rp.RouteSub) -> None:
        """SUB from ``conn``'s peer: add its interest (or update a queue group's weight) and
        tell the router. An invalid subject refuses the route. A peer's :data:`JS_API_QUEUE`
        interest is ignored on a server with JetStream (it answers its clients itself)."""
        if frame.queue == JS_API_QUEUE and self.server.jetstream is not None:
            return
        key = (frame.account, frame.subject, frame.queue)
        rsub = conn.interest.get(key)
        if rsub is not None:
            rsub.weight = frame.weight
            return
        index = self._remote.get(frame.account)
        if index is None:
            index = self._remote[frame.account] = SubjectIndex()
        rsub = RemoteSub(conn, frame.subject, frame.queue, frame.weight)
        try:
            index.insert(frame.subject, rsub, frame.queue)
        except ValueError:
            conn.refuse(rp.ERR_PROTOCOL, f"invalid subject in SUB: {frame.subject!r}")
            return
        conn.interest[key] = rsub
        self.server.router.subscriptions_changed(frame.account)

    def remote_subs(self, conn: RouteConnection, account: str, subjects: tuple[str, ...]) -> bool:
        """Plain interest of ``conn``'s peer in each of ``subjects`` (part of a SUBS frame), as
        :meth:`remote_sub` without telling the server. True when any interest was added. An
        invalid subject refuses the route (what came before it stays until the route closes)."""
        index = self._remote.get(account)
        if index is None:
            index = self._remote[account] = SubjectIndex()
        interest = conn.interest
        insert = index.insert
        changed = False
        for subject in subjects:
            key = (account, subject, None)
            if key in interest:
                continue  # plain interest again: its weight stays 1
            rsub = RemoteSub(conn, subject, None, 1)
            try:
                insert(subject, rsub)
            except ValueError:
                conn.refuse(rp.ERR_PROTOCOL, f"invalid subject in SUBS: {subject!r}")
                return changed
            interest[key] = rsub
            changed = True
        return changed

    def remote_unsubs(self, conn: RouteConnection, account: str, subjects: tuple[str, ...]) -> bool:
        """Plain interest in each of ``subjects`` withdrawn (part of an UNSUBS frame), as
        :meth:`remote_unsub` without telling the server. True when any was removed."""
        index = self._remote.get(account)
        if index is None:
            return False
        interest = conn.interest
        changed = False
        for subject in subjects:
            rsub = interest.pop((account, subject, None), None)
            if rsub is not None:
                index.remove(subject, rsub)
                changed = True
        return changed

    def remote_unsub(self, conn: RouteConnection, frame: rp.RouteUnsub) -> None:
        """UNSUB from ``conn``'s peer: drop that interest, if held, and tell the router."""
        rsub = conn.interest.pop((frame.account, frame.subject, frame.queue), None)
        if rsub is not None:
            self._remote[frame.account].remove(frame.subject, rsub, frame.queue)
            self.server.router.subscriptions_changed(frame.account)

    def forget(self, conn: RouteConnection) -> None:
        """``conn`` stopped being its peer's route: drop the interest it brought and tell the
        router, once per account."""
        accounts = set()
        for (account, subject, queue), rsub in conn.interest.items():
            self._remote[account].remove(subject, rsub, queue)
            accounts.add(account)
        conn.interest.clear()
        for account in sorted(accounts):
            self.server.router.subscriptions_changed(account)

    def remote_subscription_count(self, account: str | None = None) -> int:
        """How many (account, subject, queue) interests all peers hold (for /varz, /routez);
        those of ``account`` only when given."""
        if account is not None:
            index = self._remote.get(account)
            return len(index) if index is not None else 0
        return sum(len(index) for index in self._remote.values())

    def local_subscription_count(self, account: str | None = None) -> int:
        """How many (account, subject) plain interests this server holds and announces to
        its peers (client subscriptions and internal interest, each counted once however
        many references it has; queue groups not counted); those of ``account`` only when
        given. O(plain interests) with ``account``."""
        if account is None:
            return len(self._plain)
        return sum(1 for acc, _subject in self._plain if acc == account)
