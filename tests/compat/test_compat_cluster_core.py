"""Core NATS across a 3-server cluster, as unmodified nats-py sees it, on jetraft and nats-server.

One cluster per server kind serves the whole module (every test uses its own subjects). Each
server runs two accounts, A and B, with one user each. Interest travels between servers
asynchronously, so before a test relies on a subscription made on another server it waits
for it with :func:`await_interest` (a probe request that succeeds once the probe
subscription, made after the others on the same connection, is known where the request is
published: routes keep each connection's subscriptions in order).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import servers
from cluster import Cluster
from compat_support import close_all, connect, run
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

ACCOUNTS = """
accounts {
  A { users = [ { user: "a", password: "a-secret" } ] }
  B { users = [ { user: "b", password: "b-secret" } ] }
}
"""
USERS = {"A": ("a", "a-secret"), "B": ("b", "b-secret")}

#: Seconds allowed for interest to reach another server, or for a route to settle.
PROPAGATION = 10.0


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    """A running, formed 3-server cluster of one kind (n1, n2, n3) for the whole module."""
    with formed_cluster(request.param, "cluster", 3, extra=ACCOUNTS) as c:
        yield c
        if crashed := [n for n, s in c.servers.items() if not s.alive()]:
            pytest.fail(f"{request.param} servers exited during the tests: {crashed}\n{c.outputs()}")


@pytest.fixture(autouse=True)
def _show_outputs_on_failure(request, cluster):
    yield
    report = getattr(request.node, "_compat_report_call", None)
    if report is not None and report.failed:
        print(cluster.outputs())


def url(cluster: Cluster, name: str, account: str = "A") -> str:
    user, password = USERS[account]
    return f"nats://{user}:{password}@127.0.0.1:{cluster.members[name].port}"


async def connect_all(cluster: Cluster, account: str = "A") -> list[Client]:
    """One nats-py connection to each of n1, n2, n3."""
    return [await connect(url(cluster, name, account)) for name in ("n1", "n2", "n3")]


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


async def await_interest(subscriber: Client, *publishers: Client) -> None:
    """Return once every subscription ``subscriber`` has made is known to the servers the
    ``publishers`` are connected to (a request from each reaches a probe made after them)."""
    probe = unique("probe")

    async def answer(msg) -> None:
        await msg.respond(b"")

    sub = await subscriber.subscribe(probe, cb=answer)
    await subscriber.flush()
    deadline = time.monotonic() + PROPAGATION
    for nc in publishers:
        while True:
            try:
                await nc.request(probe, b"", timeout=1)
                break
            except (NoRespondersError, NatsTimeoutError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"interest from another server not seen in {PROPAGATION}s") from None
                await asyncio.sleep(0.02)
    await sub.unsubscribe()


async def collect(sub, count: int, timeout: float = PROPAGATION) -> list:
    """Exactly ``count`` messages from ``sub``, each awaited with a deadline."""
    return [await sub.next_msg(timeout=timeout) for _ in range(count)]


def test_pub_on_one_server_reaches_subscribers_on_the_others_once(cluster):
    """A publishes; subscribers on B and C each get every message once, in order, headers
    intact, and B gets no second copy through C (routed messages are not forwarded again)."""

    async def scenario():
        a, b, c = await connect_all(cluster)
        subject = unique("greet")
        sub_b = await b.subscribe(subject)
        sub_c = await c.subscribe(subject)
        await await_interest(b, a, c)
        await await_interest(c, a)
        sent = [f"m{i}".encode() for i in range(50)]
        for i, data in enumerate(sent):
            await a.publish(subject, data, headers={"X-Seq": str(i), "X-Origin": "n1"} if i % 2 else None)
        await a.publish(subject, b"a-done")
        got_c = await collect(sub_c, 51)
        assert [m.data for m in got_c] == [*sent, b"a-done"]
        # C has routed everything it would ever forward before it publishes its own marker,
        # and B reads C's route in order: any copy forwarded through C arrives before it.
        # (A's and C's routes to B are separate connections: their messages interleave.)
        await c.publish(subject, b"c-done")
        got_b = []
        while b"c-done" not in [m.data for m in got_b] or len(got_b) < 52:
            got_b.append(await sub_b.next_msg(timeout=PROPAGATION))
        from_a = [m for m in got_b if m.data != b"c-done"]
        assert [m.data for m in from_a] == [*sent, b"a-done"]
        assert [m.data for m in got_b].count(b"c-done") == 1
        for i, msg in enumerate(from_a[:50]):
            assert msg.subject == subject
            if i % 2:
                assert msg.headers == {"X-Seq": str(i), "X-Origin": "n1"}
            else:
                assert not msg.headers
        await close_all(a, b, c)

    run(scenario)


def test_queue_group_members_on_three_servers_get_each_message_once_in_total(cluster):
    """Two members of one queue group on each server: every message published on A or B is
    delivered to exactly one member in the whole cluster; a plain subscriber on C still
    gets all of them."""

    async def scenario():
        conns = await connect_all(cluster)
        a, b, c = conns
        subject = unique("work")
        marker = unique("marker")
        received: dict[str, list[bytes]] = {}
        members = []
        for server, nc in zip(("n1", "n2", "n3"), conns):
            for k in range(2):
                member = f"{server}.{k}"
                received[member] = []
                members.append((member, await nc.subscribe(subject, queue="workers")))
        plain = await c.subscribe(subject)
        markers = [await nc.subscribe(marker) for nc in conns]
        for nc in conns:
            await await_interest(nc, a, b)
        total = 300
        for i in range(total):
            await (a if i % 3 else b).publish(subject, f"job-{i}".encode())
        # markers after the jobs, from both publishers, reach every server after any copy
        await a.publish(marker, b"a")
        await b.publish(marker, b"b")
        assert len(await collect(plain, total)) == total
        for sub in markers:
            assert sorted(m.data for m in await collect(sub, 2)) == [b"a", b"b"]
        for member, sub in members:
            while sub.pending_msgs:
                received[member].append((await sub.next_msg(timeout=1)).data)
        everything = [data for datas in received.values() for data in datas]
        assert len(everything) == total, {m: len(d) for m, d in received.items()}
        assert sorted(everything) == sorted(f"job-{i}".encode() for i in range(total))
        per_server = {s: sum(len(d) for m, d in received.items() if m.startswith(s))
                      for s in ("n1", "n2", "n3")}
        assert sum(1 for n in per_server.values() if n) >= 2, per_server
        await close_all(*conns)

    run(scenario)


def test_request_reply_across_servers(cluster):
    """A requester on A and a responder on C: every request answered, headers both ways."""

    async def scenario():
        a, _b, c = await connect_all(cluster)
        subject = unique("svc")

        async def respond(msg) -> None:
            await c.publish(msg.reply, msg.data.upper(), headers={"X-Served-By": "n3", **(msg.headers or {})})

        await c.subscribe(subject, cb=respond)
        await await_interest(c, a)
        for i in range(20):
            reply = await a.request(subject, f"req {i}".encode(), timeout=5, headers={"X-Req": str(i)})
            assert reply.data == f"REQ {i}".encode()
            assert reply.headers == {"X-Served-By": "n3", "X-Req": str(i)}
        await close_all(a, c, _b)

    run(scenario)


def test_no_responders_across_servers(cluster):
    """A request nobody in the cluster subscribes to fails fast with NoRespondersError, even
    while other servers have interest in neighbouring subjects."""

    async def scenario():
        a, b, c = await connect_all(cluster)
        base = unique("lonely")
        await b.subscribe(f"{base}.other")
        await c.subscribe(f"{base}.*.deeper")
        await await_interest(b, a)
        await await_interest(c, a)
        started = time.monotonic()
        with pytest.raises(NoRespondersError):
            await a.request(f"{base}.nobody", b"anyone?", timeout=5)
        assert time.monotonic() - started < 2.5  # the 503, not the 5 s timeout
        await close_all(a, b, c)

    run(scenario)


def test_interest_is_removed_after_unsubscribe(cluster):
    """Once B unsubscribes, A stops routing the subject to B: a request from A that B used to
    answer gets NoRespondersError, and B's other subscriptions keep working."""

    async def scenario():
        a, b, c = await connect_all(cluster)
        subject = unique("gone")
        keep = unique("kept")

        async def answer(msg) -> None:
            await msg.respond(b"here")

        sub = await b.subscribe(subject, cb=answer)
        kept = await b.subscribe(keep)
        await await_interest(b, a)
        assert (await a.request(subject, b"?", timeout=5)).data == b"here"
        await sub.unsubscribe()
        await await_interest(b, a)  # B's UNSUB went to A's server before this probe
        with pytest.raises(NoRespondersError):
            await a.request(subject, b"?", timeout=5)
        await a.publish(subject, b"after unsubscribe")
        await a.publish(keep, b"still routed")
        assert (await kept.next_msg(timeout=PROPAGATION)).data == b"still routed"
        await close_all(a, b, c)

    run(scenario)


def test_accounts_stay_isolated_across_servers(cluster):
    """A subscriber in account B on C never sees account A's messages published on A, on the
    same subject; account B's own messages reach it."""

    async def scenario():
        a_on_n1 = await connect(url(cluster, "n1", "A"))
        b_on_n1 = await connect(url(cluster, "n1", "B"))
        b_on_n3 = await connect(url(cluster, "n3", "B"))
        a_on_n3 = await connect(url(cluster, "n3", "A"))
        subject = unique("shared")
        sub_b = await b_on_n3.subscribe(subject)
        sub_a = await a_on_n3.subscribe(subject)
        await b_on_n3.subscribe(f"{subject}.b-only")
        await await_interest(b_on_n3, b_on_n1)
        await await_interest(a_on_n3, a_on_n1)
        await a_on_n1.publish(subject, b"for A")
        await b_on_n1.publish(subject, b"for B")
        assert (await sub_a.next_msg(timeout=PROPAGATION)).data == b"for A"
        assert (await sub_b.next_msg(timeout=PROPAGATION)).data == b"for B"
        # B's interest in <subject>.b-only has reached n1, yet A's request there finds nobody
        with pytest.raises(NoRespondersError):
            await a_on_n1.request(f"{subject}.b-only", b"", timeout=5)
        # and nothing of A's leaked to B: the next message B sees is B's own
        await b_on_n1.publish(subject, b"B again")
        assert (await sub_b.next_msg(timeout=PROPAGATION)).data == b"B again"
        await close_all(a_on_n1, b_on_n1, b_on_n3, a_on_n3)

    run(scenario)
