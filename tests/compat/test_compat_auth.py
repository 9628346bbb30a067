"""Authentication and account isolation as nats-py sees them, against jetraft and nats-server."""

from __future__ import annotations

import pytest
from compat_support import (
    RawClient,
    assert_usable,
    close_all,
    connect,
    payloads,
    round_trip,
    run,
    server_info,
    take,
)
from nats.errors import Error as NatsError

#: The seed's $SYS admin (bcrypt) plus two application accounts with plain passwords.
AUTH_CONFIG = """
accounts {
  $SYS { users = [ { user: "admin", pass: "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm" } ] }
  APP_A { users = [ { user: "alice", pass: "alice-pw" }, { user: "amos", pass: "amos-pw" } ] }
  APP_B { users = [ { user: "bob", pass: "bob-pw" } ] }
}
"""
ADMIN_PASSWORD = "a very long s3cr3t! password"


@pytest.fixture
def auth_server(start_server):
    """The server under test with the accounts above."""
    return start_server(AUTH_CONFIG)


def test_admin_with_bcrypt_password(auth_server):
    """The $SYS admin connects with the password behind the bcrypt hash and can pub/sub."""

    async def scenario():
        nc = await connect(auth_server.url, user="admin", password=ADMIN_PASSWORD)
        assert nc.is_connected
        assert server_info(nc).get("auth_required") is True
        await assert_usable(nc)
        await nc.close()

    run(scenario)


@pytest.mark.parametrize(
    "credentials",
    [
        pytest.param({"user": "admin", "password": "wrong password"}, id="wrong-password"),
        pytest.param({"user": "nobody", "password": ADMIN_PASSWORD}, id="unknown-user"),
        pytest.param({}, id="no-credentials"),
    ],
)
def test_rejected_credentials(auth_server, credentials):
    """Bad or missing credentials fail the connect with 'Authorization Violation'."""

    async def scenario():
        with pytest.raises(NatsError, match="Authorization Violation"):
            nc = await connect(auth_server.url, **credentials)
            await nc.close()

    run(scenario)


def test_raw_authorization_violation(auth_server):
    """On the wire: INFO says auth_required; a bad CONNECT gets the -ERR, then a close."""
    with RawClient(auth_server.address) as raw:
        assert raw.info.get("auth_required") is True
        raw.send(b'CONNECT {"verbose":false,"pedantic":false,"user":"admin","pass":"nope"}\r\n')
        assert raw.read_until_closed() == b"-ERR 'Authorization Violation'\r\n"


def test_accounts_isolate_subjects(auth_server):
    """Users in different accounts never see each other's messages; same account does."""

    async def scenario():
        alice = await connect(auth_server.url, user="alice", password="alice-pw")
        amos = await connect(auth_server.url, user="amos", password="amos-pw")
        bob = await connect(auth_server.url, user="bob", password="bob-pw")
        clients = (alice, amos, bob)
        subs = [await nc.subscribe("shared.>") for nc in clients]
        await round_trip(*clients)
        await alice.publish("shared.news", b"from A")
        await bob.publish("shared.news", b"from B")
        await round_trip(*clients)
        got = [payloads(await take(s)) for s in subs]
        assert got == [[b"from A"], [b"from A"], [b"from B"]]

        # Requests do not cross accounts either: B has no responder for A's service.
        async def serve(msg):
            await msg.respond(b"A answers")

        await amos.subscribe("svc", cb=serve)
        await round_trip(amos)
        assert (await alice.request("svc", b"", timeout=5)).data == b"A answers"
        with pytest.raises(NatsError):  # NoRespondersError
            await bob.request("svc", b"", timeout=5)
        await close_all(*clients)

    run(scenario)
