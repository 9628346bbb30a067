"""/accountz beside nats-server (server/monitor.go Accountz, AccountInfo): the account
list, one account's detail (``?acc=``), and the 400 for an account the server does not
have. The server under test and a reference nats-server start with the same accounts and
see the same clients.
"""

from __future__ import annotations

import nats
import pytest
from compat_support import run
from polling import apoll
from test_compat_monitoring_varz import differences

ACCOUNTS = """
accounts {
  A { users [ { user: a, password: a } ], jetstream: enabled }
  B { users [ { user: b, password: b } ] }
  $SYS { users [ { user: sys, password: sys } ] }
}
jetstream { store_dir: "%s" }
"""

#: nats-server lists its internal service imports (``$SYS.REQ.ACCOUNT...``, ``$JS.API.>``
#: from $SYS); jetraft has no account imports, so reports none (omitempty).
NOT_REPORTED = {"accountz.account_detail.imports"}


@pytest.fixture
def pair(start_server, tmp_path):
    """(server under test, reference nats-server) with accounts A (JetStream), B, $SYS."""
    return (start_server(ACCOUNTS % (tmp_path / "ours"), http=True),
            start_server(ACCOUNTS % (tmp_path / "ref"), http=True, kind="nats-server"))


def test_accountz_lists_the_accounts(pair):
    """/accountz names every account, ``$G`` and the system account included, and the
    system account; ``unused`` changes nothing (nats-server reads only ``acc``)."""
    ours, ref = pair
    seen = [server.monitor("/accountz") for server in pair]
    assert differences("accountz", *seen) == []
    for doc in seen:
        assert sorted(doc["accounts"]) == ["$G", "$SYS", "A", "B"]
        assert doc["system_account"] == "$SYS"
    for server in pair:
        assert sorted(server.monitor("/accountz?unused=1")["accounts"]) == ["$G", "$SYS", "A", "B"]


def test_accountz_account_detail(pair):
    """``?acc=A`` details account A as nats-server does: same keys and types, JetStream
    enabled, and the connections and subscriptions its clients add."""

    async def scenario(server):
        base = server.monitor("/accountz?acc=A")["account_detail"]
        nc = await nats.connect(server.url, user="a", password="a")
        await nc.subscribe("one")
        await nc.subscribe("two.>", queue="q")
        await nc.flush()

        async def counted() -> bool:
            detail = server.monitor("/accountz?acc=A")["account_detail"]
            return (detail["client_connections"], detail["subscriptions"]) == (1, base["subscriptions"] + 2)

        await apoll(counted, f"{server.kind} /accountz?acc=A to count the client", 10, retry_on=())
        detail = server.monitor("/accountz?acc=A")
        await nc.close()
        return detail

    docs = []
    for server in pair:
        docs.append(run_for(scenario, server))
    assert differences("accountz", *docs, NOT_REPORTED) == []
    for doc in docs:
        detail = doc["account_detail"]
        assert (detail["account_name"], detail["jetstream_enabled"], detail["expired"], detail["complete"]) == (
            "A", True, False, True)
        assert detail["sublist_stats"]["num_subscriptions"] == detail["subscriptions"]
        assert "is_system" not in detail


def test_accountz_system_account_and_global(pair):
    """``?acc=$SYS`` is marked ``is_system``; ``$G`` has no JetStream here."""
    for server in pair:
        sys_detail = server.monitor("/accountz?acc=%24SYS")["account_detail"]
        assert sys_detail["is_system"] is True and sys_detail["jetstream_enabled"] is False
        g_detail = server.monitor("/accountz?acc=%24G")["account_detail"]
        assert g_detail["account_name"] == "$G" and g_detail["jetstream_enabled"] is False


def test_accountz_unknown_account_is_400(pair):
    """An account the server does not have is a 400 naming it, as plain text."""
    answers = [server.http_get("/accountz?acc=NOPE") for server in pair]
    assert answers[0] == answers[1] == (400, b"Account NOPE does not exist")


def run_for(scenario, server):
    out = []

    async def one():
        out.append(await scenario(server))
    run(one)
    return out[0]
