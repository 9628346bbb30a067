"""Message routing: accounts, their subject indexes, and where each message goes.

Each account has its own subject index, so users in different accounts never see each
other's messages (nats-server server/accounts.go). Behaviour follows nats-server
server/client.go processInboundClientMsg: plain subscribers each get a copy, each queue
group gets one copy for a member picked at random, a request that reaches nobody gets a
503 no-responders status when the client asked for it.

With a ``cluster`` block (:attr:`Router.routes`, a :class:`~jetraft.net.transport.route.RouteManager`)
messages cross the full mesh as in nats-server client.go processMsgResults: a message goes
to every local plain subscriber and once to each peer with matching interest; each queue
group gets one copy in the whole cluster, for a member picked at random among the local
members and the peers' members (a peer weighs as many members as it has), and a peer picked
for a queue is told which queue(s) to deliver to. A routed message is delivered locally
only, never forwarded again (the mesh is full).

Every message travels as one :class:`~jetraft.protocol.message.Message`, never taken apart.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

from jetraft.jetstream.api_subjects import domain_api_subject
from jetraft.jetstream.errors import not_enabled_for_account
from jetraft.net.ports import JetStreamHandler, RouterHost, SystemRequests
from jetraft.net.transport.route_interest import JS_API_QUEUE
from jetraft.protocol import Match, Message, SubjectIndex, encode_msg, no_responders_headers

if TYPE_CHECKING:
    from jetraft.net.transport.client import ClientConnection, Subscription
    from jetraft.net.transport.route import RouteConnection, RouteManager

__all__ = ["Account", "Router"]

#: JetStream API subjects of the system account itself (jetstream_api.go apiDispatch).
_SYSTEM_JS_SUBJECTS = frozenset(("$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE",
                                 "$JS.API.SERVER.EVACUATE", "$JS.API.META.RESCUE"))


class Account:
    """An isolated subject space: its own subject index of
    :class:`~jetraft.net.transport.client.Subscription`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sublist: SubjectIndex[Subscription] = SubjectIndex()


class Router:
    """Routes messages within accounts, locally and (with :attr:`routes`) to the peers.

    ``host`` gives the running configuration (read on every use: a reload replaces it) and
    the server-wide counters. The wiring sets :attr:`routes`, :attr:`jetstream` and
    :attr:`system` (``$SYS.REQ`` requests, net/monitoring/sysreq.py) once they exist.
    """

    def __init__(self, host: RouterHost) -> None:
        self._host = host
        self.stats = host.stats
        self.accounts: dict[str, Account] = {}
        #: The cluster's routes; None without a ``cluster`` block.
        self.routes: RouteManager | None = None
        #: JetStream, which has the first look at every message; None without it.
        self.jetstream: JetStreamHandler | None = None
        #: The system requests (``$SYS.REQ.SERVER...``, ``$SYS.REQ.USER.INFO``); None: none
        #: answered.
        self.system: SystemRequests | None = None

    def account(self, name: str) -> Account:
        """The account named ``name``, created on first use."""
        acc = self.accounts.get(name)
        if acc is None:
            acc = self.accounts[name] = Account(name)
        return acc

    # ------------------------------------------------------------------ inbound

    def publish(self, client: ClientConnection, msg: Message) -> None:
        """Route one message ``client`` published within its account, locally and to the
        peers."""
        stats = self.stats
        stats.in_msgs += 1
        headers = msg.headers
        stats.in_bytes += len(msg.payload) + (len(headers) if headers else 0)
        account = client.account
        jetstream = self.jetstream
        if jetstream is not None and msg.subject.startswith("$JS."):
            if not msg.subject.startswith("$JS.API."):
                msg = self._domain_mapped(account.name, msg)
            if msg.subject.startswith("$JS.API."):
                msg = jetstream.with_client_info(msg, client)
        subject = msg.subject
        reply = msg.reply
        # $SYS.REQ.USER.INFO is answered by the client's own server only (nats-server events.go)
        system = self.system
        delivered = system is not None and system.user_info(client, subject, reply)
        delivered = (system is not None and system.request(account.name, msg)) or delivered
        if jetstream is not None and jetstream.handle(account.name, msg, client=client):
            delivered = True
        elif (jetstream is not None and reply and subject.startswith("$JS.API.")
              and account.name == self._host.config.system_account):
            delivered = self._system_account_js_refusal(subject, reply) or delivered
        if self.deliver(account, msg, sender=client, echo=client.echo, forward=self.routes is not None):
            delivered = True
        if not delivered and reply and client.no_responders:
            self._no_responders(client, subject, reply)

    def _domain_mapped(self, account: str, msg: Message) -> Message:
        """``msg``, published by a client of ``account``, with the subject the JetStream
        domain's mapping gives it (:func:`~jetraft.jetstream.api_subjects.domain_api_subject`:
        ``$JS.<domain>.API.STREAM.INFO.s`` -> ``$JS.API.STREAM.INFO.s``) when the server has
        a domain and JetStream serves the account; ``msg`` otherwise. Applied where the
        client published, as nats-server applies an account's mappings (client.go
        selectMappedSubject): a peer gets the mapped subject."""
        config = self._host.config
        domain = config.jetstream.domain if config.jetstream is not None else None
        if not domain or not msg.subject.startswith(f"$JS.{domain}.API."):
            return msg
        mapped = domain_api_subject(msg.subject, domain)
        if mapped is None or account not in config.jetstream_accounts():
            return msg
        return Message(mapped, msg.reply, msg.headers, msg.payload)

    def publish_from_route(self, src: str, account: str, msg: Message, queues: tuple[str, ...] = ()) -> None:
        """A message a peer (server_name ``src``) routed here (nats-server route.go
        processInboundRoutedMsg): JetStream has the first look, as in :meth:`publish`, then
        every local plain subscriber gets it and, for each queue name in ``queues``, one local
        member of that group. Never forwarded again. A ``$JS.API`` request for which a server
        without JetStream picked this one (``queues`` names
        :data:`~jetraft.net.transport.route_interest.JS_API_QUEUE`) is JetStream's as if a local client
        had sent it, a request of the system account included (refused as in :meth:`publish`
        when JetStream does not serve it)."""
        acc = self.accounts.get(account)
        if acc is None:  # an account this server does not have (client.go "Unknown account")
            return
        stats = self.stats
        stats.in_msgs += 1
        headers = msg.headers
        stats.in_bytes += len(msg.payload) + (len(headers) if headers else 0)
        if self.system is not None:
            self.system.request(account, msg)
        jetstream = self.jetstream
        if jetstream is not None:
            picked = JS_API_QUEUE in queues
            if (not jetstream.handle(account, msg, routed=not picked) and picked and msg.reply
                    and account == self._host.config.system_account
                    and msg.subject.startswith("$JS.API.")):
                self._system_account_js_refusal(msg.subject, msg.reply)
        self.deliver(acc, msg, queues=queues)

    def route_internal(self, account: str, msg: Message) -> None:
        """Deliver a message JetStream (or this server) produced within ``account``: every
        plain subscriber, one member of each queue group, in the whole cluster (a reply's
        inbox may be on another server)."""
        self.deliver(self.account(account), msg, forward=self.routes is not None)

    def _system_account_js_refusal(self, subject: str, reply: str) -> bool:
        """A JetStream API request from a client of the system account, which JetStream does
        not serve: answered 10039 "JetStream not enabled for account" (an account_info_response
        for ``$JS.API.INFO``, a system_response otherwise), but for the system-level subjects
        (meta step-down, server remove/evacuate, meta rescue, ``$JS.API.ACCOUNT.``), which get
        no answer here (nats-server jetstream_api.go apiDispatch). True when answered."""
        if subject in _SYSTEM_JS_SUBJECTS or subject.startswith("$JS.API.ACCOUNT."):
            return False
        kind = "account_info_response" if subject == "$JS.API.INFO" else "system_response"
        body = {"type": f"io.nats.jetstream.api.v1.{kind}", "error": not_enabled_for_account().to_json()}
        self.route_internal(self._host.config.system_account,
                            Message(reply, None, None, json.dumps(body, separators=(",", ":")).encode()))
        return True

    # ------------------------------------------------------------------ delivery

    def deliver(self, account: Account, msg: Message, *, sender: ClientConnection | None = None,
                echo: bool = True, queues: tuple[str, ...] | None = None, forward: bool = False) -> bool:
        """Deliver ``msg`` (matched on its ``subject``) to the local subscribers of
        ``account`` and, with ``forward``, to the peers; True if anyone got it.

        ``sender``/``echo``: the publishing client and whether it gets its own messages.
        ``queues``: for a routed message, the only queue groups to deliver to (None: all).
        """
        match = account.sublist.match(msg.subject)
        delivered = False
        for sub in match.plain:
            target = sub.client
            if target is sender and not echo:
                continue
            if target.deliver(sub, msg):
                delivered = True
        if forward:
            remote = self.routes.match_remote(account.name, msg.subject)
            if remote is not None:
                return self._deliver_in_cluster(account.name, match, remote, msg, sender, echo) or delivered
        exclude = None if echo else sender
        for name, members in match.queues:
            if queues is not None and name not in queues:
                continue
            if _deliver_to_one(members, msg, exclude=exclude):
                delivered = True
        return delivered

    def _deliver_in_cluster(self, account: str, match: Match, remote: Match, msg: Message,
                            sender: ClientConnection | None, echo: bool) -> bool:
        """The queue groups and peers of a message some peers have interest in (local plain
        subscribers are served already): each queue group picks one member among the local
        ones and the peers' (a peer weighs its member count, nats-server sublist.go
        addNodeToResults), then each interested peer gets one MSG naming its queues."""
        delivered = False
        targets: dict[RouteConnection, list[str]] = {}
        for rsub in remote.plain:
            targets.setdefault(rsub.conn, [])
        local = dict(match.queues)
        for name, rmembers in remote.queues:
            members = local.pop(name, ())
            if not echo:
                members = [m for m in members if m.client is not sender]
            n = len(members)
            remote_weight = sum(r.weight for r in rmembers)
            pick = random.randrange(n + remote_weight)
            if pick < n:
                if _deliver_to_one(members, msg, pick):
                    delivered = True
                    continue
                if not remote_weight:
                    continue
                pick = n + random.randrange(remote_weight)  # every local member refused it
            pick -= n
            for rsub in rmembers:
                if pick < rsub.weight:
                    targets.setdefault(rsub.conn, []).append(name)
                    break
                pick -= rsub.weight
        exclude = None if echo else sender
        for members in local.values():  # groups with local members only
            if _deliver_to_one(members, msg, exclude=exclude):
                delivered = True
        if targets:
            self.routes.forward(account, msg, targets)
            delivered = True
        return delivered

    def _no_responders(self, client: ClientConnection, subject: str, reply: str) -> None:
        """Send the 503 status to the requester's own plain subscription to the reply subject
        (client.go processInboundClientMsg: queue subscriptions get none)."""
        for sub in client.account.sublist.match(reply).plain:
            if sub.client is client:
                client.send(encode_msg(reply, sub.sid, None, b"", no_responders_headers(subject)))
                return

    # ------------------------------------------------------------------ interest

    def subscription_added(self, account: str, subject: str, queue: str | None) -> None:
        """A client subscribed: tell the peers (when clustered) and JetStream."""
        if self.routes is not None:
            self.routes.local_interest(account, subject, queue, 1)
        self.subscriptions_changed(account)

    def subscription_removed(self, account: str, subject: str, queue: str | None) -> None:
        """A client unsubscribed (or went away): tell the peers (when clustered) and JetStream."""
        if self.routes is not None:
            self.routes.local_interest(account, subject, queue, -1)
        self.subscriptions_changed(account)

    def subscriptions_changed(self, account: str) -> None:
        """Interest in ``account`` changed, here or on a peer (push consumers watch interest)."""
        if self.jetstream is not None:
            self.jetstream.interest_changed(account)


def _deliver_to_one(members: Any, msg: Message, start: int | None = None, *,
                    exclude: ClientConnection | None = None) -> bool:
    """Deliver to one member of a queue group, starting at ``start`` (random if None) and
    trying the next ones when a member's permissions refuse the subject (nats-server
    client.go processMsgResults); members of client ``exclude`` (a publisher without echo)
    are passed over. True if one took it."""
    if exclude is not None:
        members = [m for m in members if m.client is not exclude]
    n = len(members)
    if not n:
        return False
    first = (random.randrange(n) if n > 1 else 0) if start is None else start
    for i in range(n):
        sub = members[(first + i) % n]
        if sub.client.deliver(sub, msg):
            return True
    return False
