"""Authorization (user permissions) on the wire, against jetraft and nats-server.

Each test configures users with ``permissions`` / ``default_permissions`` and checks what
a client sees: the ``-ERR 'Permissions Violation ...'`` texts, that the connection stays
open, which messages arrive and which do not (nats-server server/client.go
processInboundClientMsg, processSubEx, deliverMsg, responseAllowed; server/reload.go;
server/server.go configureAccounts). A message that must not arrive is checked after a
PING/PONG round trip of the publisher and of the subscriber, never after a sleep.
"""

from __future__ import annotations

import json
import re
import signal
import time

import pytest
from compat_support import CRLF, RawClient, connect, run

import servers

#: A user that may do anything, to publish and observe beside the restricted ones.
OBSERVER = '{ user: obs, pass: obs }'


class Raw(RawClient):
    """A raw client whose :meth:`exchange` sends bytes, then PING, and returns every line
    (MSG/HMSG with their bodies) the server sent before the PONG."""

    def exchange(self, data: bytes = b"") -> list[bytes]:
        self.send(data + b"PING\r\n")
        lines: list[bytes] = []
        while True:
            line = self.readline()
            if line == b"PING\r\n":
                self.send(b"PONG\r\n")
                continue
            if line == b"PONG\r\n":
                return lines
            if line.startswith((b"MSG ", b"HMSG ")):
                line += self.read_exact(int(line.split()[-1]) + 2)
            lines.append(line)

    def wait_for(self, wanted: bytes, timeout: float = 10.0) -> list[bytes]:
        """Read lines until ``wanted`` arrives (answering PINGs); return the lines before it."""
        deadline = time.monotonic() + timeout
        seen: list[bytes] = []
        while True:
            line = self.readline(timeout=max(0.01, deadline - time.monotonic()))
            if line == wanted:
                return seen
            if line == b"PING\r\n":
                self.send(b"PONG\r\n")
                continue
            seen.append(line)


def user(server: servers.RunningServer, name: str, *, verbose: bool = False) -> Raw:
    """A connected raw client for ``name`` (password = name)."""
    raw = Raw(server.address)
    raw.connect(user=name, **{"pass": name}, verbose=verbose)
    return raw


def pub(subject: str, payload: bytes = b"x", reply: str | None = None) -> bytes:
    head = f"PUB {subject} {reply} {len(payload)}" if reply else f"PUB {subject} {len(payload)}"
    return head.encode() + CRLF + payload + CRLF


def err(text: str) -> bytes:
    return b"-ERR '" + text.encode() + b"'\r\n"


def msg_subjects(lines: list[bytes]) -> list[str]:
    """The subjects of the MSG/HMSG lines among ``lines``."""
    return [line.split()[1].decode() for line in lines if line.startswith((b"MSG ", b"HMSG "))]


def accounts(*users: str, extra: str = "") -> str:
    """One application account APP with ``users`` (map texts) and the observer."""
    body = ",\n    ".join((*users, OBSERVER))
    return f"""
accounts {{
  APP {{ {extra}
    users = [
    {body}
    ]
  }}
}}
"""


def test_publish_allow_and_deny_with_wildcards(start_server):
    """Allowed subjects pass (``*`` and ``>``), the deny list wins over the allow list, a
    refused PUB or HPUB gets the -ERR, no +OK, and is dropped; the connection stays."""
    server = start_server(accounts(
        '{ user: u, pass: u, permissions: { publish: { allow: ["orders.*", "audit.>"], deny: "orders.secret" } } }'))
    obs = user(server, "obs")
    obs.exchange(b"SUB > 1\r\n")
    u = user(server, "u", verbose=True)
    got = u.exchange(pub("orders.new") + pub("audit.a.b") + pub("orders.secret") + pub("orders.a.b")
                     + pub("other") + b"HPUB orders.secret 12 13\r\nNATS/1.0\r\n\r\nx\r\n" + pub("orders.last"))
    assert got == [
        b"+OK\r\n", b"+OK\r\n",
        err('Permissions Violation for Publish to "orders.secret"'),
        err('Permissions Violation for Publish to "orders.a.b"'),
        err('Permissions Violation for Publish to "other"'),
        err('Permissions Violation for Publish to "orders.secret"'),
        b"+OK\r\n",
    ]
    assert msg_subjects(obs.exchange()) == ["orders.new", "audit.a.b", "orders.last"]


def test_subscribe_allow_and_deny(start_server):
    """The issue's user: publishing denied everywhere, subscribing allowed to ``public.>``
    only, minus ``public.hidden.>``: refused SUBs get the -ERR and receive nothing."""
    server = start_server(accounts(
        '{ user: u, pass: u, permissions: { publish: { deny: ">" },'
        ' subscribe: { allow: "public.>", deny: "public.hidden.>" } } }'))
    u = user(server, "u")
    assert u.exchange(b"SUB private.secret 1\r\nSUB public.hidden.x 2\r\nSUB public.> 3\r\nSUB public.a 4\r\n"
                      + pub("forbidden.x")) == [
        err('Permissions Violation for Subscription to "private.secret"'),
        err('Permissions Violation for Subscription to "public.hidden.x"'),
        err('Permissions Violation for Publish to "forbidden.x"'),
    ]
    obs = user(server, "obs")
    obs.exchange(pub("private.secret") + pub("public.a") + pub("public.hidden.x"))
    assert sorted(msg_subjects(u.exchange())) == ["public.a", "public.a"]   # sids 3 and 4


def test_no_implicit_inbox_permissions(start_server):
    """nats-server adds no implicit ``_INBOX`` permission: a user allowed ``svc`` only
    can neither subscribe to nor publish on an inbox."""
    server = start_server(accounts('{ user: u, pass: u, permissions: { publish: "svc", subscribe: ["svc"] } }'))
    u = user(server, "u")
    assert u.exchange(b"SUB _INBOX.abc.* 1\r\n" + pub("_INBOX.abc.1") + pub("svc", reply="_INBOX.abc.2")) == [
        err('Permissions Violation for Subscription to "_INBOX.abc.*"'),
        err('Permissions Violation for Publish to "_INBOX.abc.1"'),
    ]


def test_queue_permissions(start_server):
    """``"subject queue"`` entries: only that queue group may subscribe; the error names
    the queue; the ``_sys_`` group is refused to everyone."""
    server = start_server(accounts(
        '{ user: u, pass: u, permissions: { subscribe: { allow: ["jobs.* workers", "open.>"],'
        ' deny: "open.closed spies" } } }'))
    u = user(server, "u")
    assert u.exchange(b"SUB jobs.a workers 1\r\nSUB jobs.a others 2\r\nSUB jobs.a 3\r\nSUB open.x 4\r\n"
                      b"SUB open.closed spies 5\r\nSUB open.closed friends 6\r\nSUB open.y _sys_ 7\r\n") == [
        err('Permissions Violation for Subscription to "jobs.a" using queue "others"'),
        err('Permissions Violation for Subscription to "jobs.a"'),
        err('Permissions Violation for Subscription to "open.closed" using queue "spies"'),
        err('Permissions Violation for Subscription to "open.y" using queue "_sys_"'),
    ]
    obs = user(server, "obs")
    obs.exchange(pub("jobs.a") + pub("open.closed"))
    got = u.exchange()
    assert sorted((line.split()[1], line.split()[2]) for line in got) == [
        (b"jobs.a", b"1"), (b"open.closed", b"6")]


def test_subscribe_deny_filters_deliveries(start_server):
    """A wildcard subscription wider than a deny entry is allowed, but messages on denied
    subjects are not delivered to it (nats-server checks deny at delivery), queue
    subscriptions included: another member of the group gets the message instead."""
    server = start_server(accounts(
        '{ user: u, pass: u, permissions: { subscribe: { deny: ["secret.>", "jobs.hidden"] } } }',
        '{ user: w, pass: w }'))
    u, w = user(server, "u"), user(server, "w")
    assert u.exchange(b"SUB > 1\r\nSUB jobs.* workers 2\r\n") == []
    w.exchange(b"SUB jobs.* workers 9\r\n")
    obs = user(server, "obs")
    obs.exchange(pub("secret.plans") + pub("open.news") + b"".join(pub("jobs.hidden") for _ in range(5)))
    got = u.exchange()
    assert msg_subjects(got) == ["open.news"]
    assert msg_subjects(w.exchange()) == ["jobs.hidden"] * 5


def test_allow_responses(start_server):
    """``allow_responses: true``: no publishing but one response to the reply subject of
    each request received; a second response to the same request is refused."""
    server = start_server(accounts('{ user: svc, pass: svc, permissions: { subscribe: "svc", allow_responses: true } }'))
    svc = user(server, "svc")
    svc.exchange(b"SUB svc 1\r\n")
    obs = user(server, "obs")
    obs.exchange(b"SUB _INBOX.r.* 1\r\n" + pub("svc", reply="_INBOX.r.1"))
    assert len(svc.exchange()) == 1
    assert svc.exchange(pub("_INBOX.r.1", b"one") + pub("_INBOX.r.1", b"two") + pub("_INBOX.r.2") + pub("svc")) == [
        err('Permissions Violation for Publish to "_INBOX.r.1"'),
        err('Permissions Violation for Publish to "_INBOX.r.2"'),
        err('Permissions Violation for Publish to "svc"'),
    ]
    got = obs.exchange()
    assert len(got) == 1 and got[0].endswith(b"\r\none\r\n")


def test_allow_responses_max(start_server):
    """``allow_responses { max: 2 }``: two responses per request, the third refused."""
    server = start_server(accounts(
        '{ user: svc, pass: svc, permissions: { subscribe: "svc", allow_responses: { max: 2 } } }'))
    svc = user(server, "svc")
    svc.exchange(b"SUB svc 1\r\n")
    obs = user(server, "obs")
    obs.exchange(b"SUB _INBOX.r.* 1\r\n" + pub("svc", reply="_INBOX.r.1"))
    svc.exchange()
    assert svc.exchange(pub("_INBOX.r.1") + pub("_INBOX.r.1") + pub("_INBOX.r.1")) == [
        err('Permissions Violation for Publish to "_INBOX.r.1"')]
    assert len(obs.exchange()) == 2


def test_allow_responses_expire(start_server):
    """``allow_responses { max: -1, expires: "300ms" }``: any number of responses until
    the permission expires; then they are refused (polled, with a deadline)."""
    server = start_server(accounts(
        '{ user: svc, pass: svc, permissions: { subscribe: "svc", allow_responses: { max: -1, expires: "300ms" } } }'))
    svc = user(server, "svc")
    svc.exchange(b"SUB svc 1\r\n")
    obs = user(server, "obs")
    obs.exchange(pub("svc", reply="_INBOX.r.1"))
    svc.exchange()
    assert svc.exchange(pub("_INBOX.r.1") + pub("_INBOX.r.1")) == []
    deadline = time.monotonic() + 10
    while (got := svc.exchange(pub("_INBOX.r.1"))) == []:
        assert time.monotonic() < deadline, "the response permission never expired"
    assert got == [err('Permissions Violation for Publish to "_INBOX.r.1"')]


def test_authorization_default_permissions(start_server):
    """The authorization block's ``default_permissions`` (alias ``permissions``) go to its
    users without permissions of their own."""
    server = start_server("""
authorization {
  default_permissions { publish: "allowed.>" }
  users = [ { user: a, pass: a }, { user: b, pass: b, permissions: { publish: "other" } } ]
}
""")
    a, b = user(server, "a"), user(server, "b")
    assert a.exchange(pub("allowed.x") + pub("other")) == [err('Permissions Violation for Publish to "other"')]
    assert b.exchange(pub("allowed.x") + pub("other")) == [err('Permissions Violation for Publish to "allowed.x"')]


def test_account_default_permissions(start_server):
    """An account's ``default_permissions`` go to its users without their own."""
    server = start_server(accounts(
        "{ user: a, pass: a }", '{ user: b, pass: b, permissions: { subscribe: ">" } }',
        extra='default_permissions: { subscribe: { allow: ["public.>"] } }'))
    a, b = user(server, "a"), user(server, "b")
    assert a.exchange(b"SUB private 1\r\nSUB public.x 2\r\n") == [
        err('Permissions Violation for Subscription to "private"')]
    assert b.exchange(b"SUB private 1\r\n") == []


def test_jetstream_api_is_governed_by_publish_permissions(start_server, tmp_path):
    """The JetStream API is a publish to ``$JS.API.>``: a user without that right gets the
    Permissions Violation and no stream is made; one with it creates streams."""
    server = start_server(f"""
jetstream {{ store_dir: "{tmp_path / 'js'}" }}
authorization {{ users = [
  {{ user: u, pass: u, permissions: {{ publish: ["orders.>"], subscribe: "_INBOX.>" }} }}
  {{ user: admin, pass: admin }}
] }}
""")
    u = user(server, "u")
    body = json.dumps({"name": "ORDERS", "subjects": ["orders.>"]}).encode()
    assert u.exchange(b"SUB _INBOX.js 1\r\n" + pub("$JS.API.STREAM.CREATE.ORDERS", body, reply="_INBOX.js")) == [
        err('Permissions Violation for Publish to "$JS.API.STREAM.CREATE.ORDERS"')]

    async def scenario():
        nc = await connect(server.url, user="admin", password="admin")
        jsm = nc.jsm()
        assert await jsm.streams_info() == []
        await jsm.add_stream(name="OTHER", subjects=["other.>"])
        assert [s.config.name for s in await jsm.streams_info()] == ["OTHER"]
        await nc.close()

    run(scenario)


SYS_ONLY = """
accounts { $SYS { users = [ { user: admin, pass: "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm" } ] } }
"""


def test_anonymous_clients_use_global_account_when_only_sys_has_users(start_server, tmp_path):
    """The seed's configuration (users only in $SYS): INFO says auth_required, yet a client
    without credentials gets in, in $G, where JetStream is served (``nats stream add``);
    the $SYS admin still logs in and bad credentials are still refused."""
    server = start_server(f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n' + SYS_ONLY)
    with Raw(server.address) as raw:
        assert raw.info.get("auth_required") is True
        raw.connect()
        assert raw.exchange(b"SUB a 1\r\n" + pub("a")) != []

    async def scenario():
        nc = await connect(server.url)
        jsm = nc.jsm()
        await jsm.add_stream(name="S", subjects=["s.>"])
        ack = await nc.jetstream().publish("s.1", b"kept")
        assert (ack.stream, ack.seq) == ("S", 1)
        await nc.close()
        admin = await connect(server.url, user="admin", password="a very long s3cr3t! password")
        await admin.close()

    run(scenario)
    with Raw(server.address) as raw:
        raw.send(b'CONNECT {"verbose":false,"user":"admin","pass":"wrong"}\r\n')
        assert raw.read_until_closed() == b"-ERR 'Authorization Violation'\r\n"


def test_system_account_is_not_served_jetstream(start_server, tmp_path):
    """The $SYS admin's JetStream API requests are answered 10039 "JetStream not enabled
    for account" (nats-server jetstream_api.go apiDispatch), while $SYS.REQ requests are
    served to it."""
    server = start_server(f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n' + SYS_ONLY)

    async def scenario():
        admin = await connect(server.url, user="admin", password="a very long s3cr3t! password")
        refusal = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
        info = json.loads((await admin.request("$JS.API.INFO", b"", timeout=5)).data)
        assert info == {"type": "io.nats.jetstream.api.v1.account_info_response", "error": refusal}
        body = json.dumps({"name": "S", "subjects": ["s.>"]}).encode()
        create = json.loads((await admin.request("$JS.API.STREAM.CREATE.S", body, timeout=5)).data)
        assert create == {"type": "io.nats.jetstream.api.v1.system_response", "error": refusal}
        varz = json.loads((await admin.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=5)).data)
        assert "server_id" in varz["data"] or "server_id" in varz.get("server", {})
        await admin.close()
        anonymous = await connect(server.url)       # $G, where JetStream is served: no stream S
        assert await anonymous.jsm().streams_info() == []
        await anonymous.close()

    run(scenario)


def test_no_auth_user_with_permissions(start_server):
    """A configured ``no_auth_user``: INFO does not say auth_required (nats-server), and
    a client without credentials has that user's permissions."""
    server = start_server(accounts('{ user: guest, pass: guest, permissions: { publish: "public.>" } }')
                          + 'no_auth_user: guest\n')
    with Raw(server.address) as raw:
        assert "auth_required" not in raw.info
        raw.connect()
        assert raw.exchange(pub("public.a") + pub("private")) == [
            err('Permissions Violation for Publish to "private"')]


def test_reload_applies_new_permissions_to_connected_clients(start_server):
    """SIGHUP with changed permissions: the connected client stays, loses the
    subscriptions no longer allowed (-ERR naming the sid) and is refused what is now
    denied (nats-server reload.go reloadAuthorization, client.go processSubsOnConfigReload)."""
    before = accounts('{ user: u, pass: u, permissions: { publish: ">" } }')
    after = accounts('{ user: u, pass: u, permissions: { publish: { deny: "x.>" }, subscribe: { deny: "x.>" } } }')
    server = start_server(before)
    u = user(server, "u")
    assert u.exchange(b"SUB x.> 1\r\nSUB y 2\r\n" + pub("x.1")) != []
    server.config_path.write_text(server.config_path.read_text().replace(before.strip(), after.strip()))
    server.proc.send_signal(signal.SIGHUP)
    u.wait_for(err('Permissions Violation for Subscription to "x.>" (sid "1")'))
    assert u.exchange(pub("x.1") + pub("y")) == [
        err('Permissions Violation for Publish to "x.1"'),
        b"MSG y 2 1\r\nx\r\n",
    ]


@pytest.mark.parametrize("permissions,problem", [
    ('{ publish: "foo bar" }', 'subject "foo bar" is not a valid subject'),
    ('{ publish: { deny: ["ok", "a..b"] } }', 'subject "a..b" is not a valid subject'),
    ('{ subscribe: "foo bar baz" }', 'subject "foo bar baz" is not a valid subject'),
    ('{ subscribe: { allow: "foo.>.bar" } }', 'subject "foo.>.bar" is not a valid subject'),
    ('{ subscribe: { deny: "foo a..b" } }', 'queue "a..b" is not a valid queue'),
    ('{ publish: ">", colour: red }', "colour"),
])
def test_invalid_permissions_refuse_to_start(start_server, server_kind, permissions, problem):
    """An invalid subject or queue, or an unknown key, in permissions: the server does not
    start and says why (nats-server refuses such a configuration too); jetraft names the
    file, line and column."""
    with pytest.raises(servers.ServerStartError) as info:
        start_server(accounts(f"{{ user: u, pass: u, permissions: {permissions} }}"))
    output = str(info.value).split("--- stdout:", 1)[1]   # what the server said, not its config
    assert problem in output
    if server_kind == "jetraft":
        assert re.search(r"\.conf:5:\d+: accounts\.APP\.users\[0\]\.permissions", output), output
