"""The JetStream domain's API prefix: with ``jetstream { domain: D }``, a client of an account
JetStream serves reaches the API as ``$JS.D.API.>`` too (nats clients' ``jetstream(domain=D)``).
nats-server adds account mappings for it (jetstream.go enableAllJetStreamServiceImportsAndMappings,
jetstream_api.go generateJSMappingTable); the router maps the subject where the client published.
Side by side with nats-server: tests/compat/test_compat_account_limits.py (nats.py's test)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jetraft.jetstream.api_subjects import domain_api_subject
from jetraft.net.transport.router import Router
from jetraft.protocol import Message


@pytest.mark.parametrize(("subject", "mapped"), [
    ("$JS.hub.API.INFO", "$JS.API.INFO"),
    ("$JS.hub.API.STREAM.INFO.s", "$JS.API.STREAM.INFO.s"),
    ("$JS.hub.API.CONSUMER.CREATE.s.c", "$JS.API.CONSUMER.CREATE.s.c"),
    ("$JS.hub.API.DIRECT.GET.s", "$JS.API.DIRECT.GET.s"),
    ("$JS.hub.API.META.LEADER.STEPDOWN", "$JS.API.META.LEADER.STEPDOWN"),
    ("$JS.hub.API.SERVER.REMOVE", "$JS.API.SERVER.REMOVE"),
    ("$JS.hub.API.ACCOUNT.PURGE.A", "$JS.API.ACCOUNT.PURGE.A"),
    ("$JS.hub.API.$KV.b.k", "$KV.b.k"),
    ("$JS.hub.API.$OBJ.b.c", "$OBJ.b.c"),
    # not in nats-server's table: left alone
    ("$JS.hub.API.STREAM", None),         # STREAM.> needs a token more
    ("$JS.hub.API.INFO.x", None),
    ("$JS.hub.API.FOO.BAR", None),
    ("$JS.other.API.INFO", None),
    ("$JS.API.INFO", None),
    ("$JS.ACK.s.c.1.1.1.1.0", None),
])
def test_the_mapping_table(subject, mapped):
    assert domain_api_subject(subject, "hub") == mapped
    assert domain_api_subject(subject, "") is None


class JetStream:
    def __init__(self) -> None:
        self.handled: list[tuple[str, str]] = []

    def handle(self, account, msg, *, routed=False, client=None) -> bool:
        self.handled.append((account, msg.subject))
        return msg.subject.startswith("$JS.API.")

    def with_client_info(self, msg, client):
        return msg

    def interest_changed(self, account) -> None:
        pass


class Client:
    def __init__(self, router: Router, account: str) -> None:
        self.account = router.account(account)
        self.echo = True
        self.no_responders = False
        self.got: list[tuple[str, str]] = []

    def deliver(self, sub, msg: Message) -> bool:
        self.got.append((sub.sid, msg.subject))
        return True


class Sub:
    def __init__(self, client: Client, sid: str) -> None:
        self.client, self.sid, self.queue = client, sid, None


def router(domain: str | None) -> tuple[Router, JetStream]:
    js = SimpleNamespace(domain=domain)
    config = SimpleNamespace(system_account="$SYS", jetstream=js, jetstream_accounts=lambda: ("A",))
    r = Router(SimpleNamespace(stats=SimpleNamespace(in_msgs=0, in_bytes=0), config=config))
    r.jetstream = JetStream()
    return r, r.jetstream


def subscribe(client: Client, subject: str, sid: str) -> None:
    client.account.sublist.insert(subject, Sub(client, sid), None)


def test_a_request_through_the_domain_prefix_reaches_jetstream_and_subscribers_as_mapped():
    r, js = router("hub")
    client = Client(r, "A")
    subscribe(client, "$JS.hub.API.>", "domain")
    subscribe(client, "$JS.API.STREAM.INFO.>", "api")
    subscribe(client, "$KV.>", "kv")
    for subject in ("$JS.hub.API.STREAM.INFO.s", "$JS.hub.API.$KV.b.k", "$JS.hub.API.STREAM"):
        r.publish(client, Message(subject, "_INBOX.r", None, b""))
    assert js.handled == [("A", "$JS.API.STREAM.INFO.s"), ("A", "$KV.b.k"), ("A", "$JS.hub.API.STREAM")]
    assert client.got == [("api", "$JS.API.STREAM.INFO.s"), ("kv", "$KV.b.k"), ("domain", "$JS.hub.API.STREAM")]


def test_no_mapping_without_a_domain_or_in_an_account_jetstream_does_not_serve():
    r, js = router(None)
    r.publish(Client(r, "A"), Message("$JS.hub.API.INFO", "_INBOX.r", None, b""))
    r, js2 = router("hub")
    r.publish(Client(r, "B"), Message("$JS.hub.API.INFO", "_INBOX.r", None, b""))
    assert js.handled == [("A", "$JS.hub.API.INFO")] and js2.handled == [("B", "$JS.hub.API.INFO")]
