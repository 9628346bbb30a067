"""An account's JetStream limits (``accounts { A { jetstream { ... } } }``), as unmodified
nats-py sees them, on jetraft and nats-server side by side: on one server, and in a
three-server cluster where the meta leader and the streams' leaders enforce them.

Enforced: ``max_streams`` (10027), ``max_consumers`` (10026: a stream's own
``max_consumers`` above it, and a new consumer beyond it), ``max_bytes_required`` (10113),
``mem_max_stream_bytes`` / ``disk_max_stream_bytes`` (10122), on stream create, update and
consumer create, in nats-server's order (jetstream_api.go jsNonClusteredStreamLimitsCheck,
jetstream_cluster.go jsClusteredStreamLimitsCheck and jsClusteredConsumerRequest, stream.go
checkStreamCfg); ``max_ack_pending``, a consumer's default and upper bound (10121; consumer.go
setConsumerConfigDefaults, checkConsumerCfg). ``$JS.API.INFO`` reports them. nats.py's own
account-limits test (its tests/conf/js-limits.conf: every limit, a JetStream domain, a
no_auth_user) runs here as it runs there, through the domain's API prefix too. Every answer
is compared as nats-server gives it; nothing is timed (a cluster's answers are asked again
while it elects leaders).
"""

from __future__ import annotations

import json

import nats.js.api
import pytest
import servers
from cluster import Cluster
from compat_support import connect, round_trip, run
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import BadRequestError
from polling import apoll

#: The limits under test (unquoted sizes are powers of ten).
LIMITS = ("max_streams: 2, max_consumers: 2, max_bytes_required: true, "
          "mem_max_stream_bytes: 1000, disk_max_stream_bytes: 100000")
#: Accounts B's and C's byte limits: 10,000 bytes of memory streams, 20,000 of file streams.
#: A cluster's servers learn an account's bytes from each other's reports, so the cases of
#: different replicas use different accounts: a deleted stream's bytes still counted by a
#: late report cannot touch the next case.
BYTES = "max_mem: 10K, max_file: 20K"
ACCOUNTS = f"""
accounts {{
  A {{ users [ {{ user: a, password: a }} ], jetstream {{ {LIMITS} }} }}
  B {{ users [ {{ user: b, password: b }} ], jetstream {{ {BYTES} }} }}
  C {{ users [ {{ user: c, password: c }} ], jetstream {{ {BYTES} }} }}
  D {{ users [ {{ user: d, password: d }} ], jetstream {{ max_ack_pending: 100 }} }}
  $SYS {{ users [ {{ user: sys, password: sys }} ] }}
}}
"""
#: nats-server's JetStreamAccountLimits for LIMITS.
REPORTED = {"max_memory": -1, "max_storage": -1, "max_streams": 2, "max_consumers": 2,
            "max_ack_pending": -1, "memory_max_stream_bytes": 1000,
            "storage_max_stream_bytes": 100000, "max_bytes_required": True}


def error(reply: dict) -> tuple[int, int, str] | None:
    """(code, err_code, description) of an API reply, None for a success."""
    e = reply.get("error")
    return (e["code"], e["err_code"], e["description"]) if e else None


MAX_BYTES_REQUIRED = (400, 10113, "account requires a stream config to have max bytes set")
MAX_STREAM_BYTES = (400, 10122, "stream max bytes exceeds account limit max stream bytes")
MAX_STREAMS = (400, 10027, "maximum number of streams reached")
MAX_CONSUMERS = (400, 10026, "maximum consumers limit reached")
NO_MEMORY = (500, 10028, "insufficient memory resources available")
NO_STORAGE = (500, 10047, "insufficient storage resources available")
ACCOUNT_FULL = (400, 10002, "resource limits exceeded for account")


def stream(name: str, **cfg) -> dict:
    return {"name": name, "subjects": [f"{name.lower()}.>"], **cfg}


def asker(nc):
    """``api(subject, body=None, headers=None)``: a JSON request's answer, asked again while a
    cluster answers 10008 (no meta or stream leader yet) or no server answers yet."""
    async def api(subject: str, body: dict | bytes | None = None, headers: dict | None = None) -> dict:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""

        async def answered() -> dict:
            reply = json.loads((await nc.request(subject, raw, timeout=5, headers=headers)).data)
            assert (reply.get("error") or {}).get("err_code") != 10008, reply
            return reply
        # no-responders: a stream created a moment ago whose subject interest has not reached
        # this server yet (nats-server propagates it over the routes); a publish asked again
        # carries its Nats-Msg-Id, so it is stored once
        return await apoll(answered, subject, 30, retry_on=(AssertionError, NoRespondersError))
    return api


async def scenario(url: str, replicas: int) -> None:
    """The account's limits from create to update, asked through ``url``."""
    nc = await connect(url, user="a", password="a")
    api = asker(nc)

    def create(name: str, **cfg) -> dict:
        return api(f"$JS.API.STREAM.CREATE.{name}", stream(name, num_replicas=replicas, **cfg))

    try:
        info = await api("$JS.API.INFO")
        assert info["limits"] == REPORTED, info
        # stream.go checkStreamCfg: max_bytes required, and at most the storage's limit
        assert error(await create("S1")) == MAX_BYTES_REQUIRED
        assert error(await create("S1", max_bytes=100001)) == MAX_STREAM_BYTES
        assert error(await create("S1", max_bytes=1001, storage="memory")) == MAX_STREAM_BYTES
        # jetstream.go checkLimits: a stream's max_consumers above the account's
        assert error(await create("S1", max_bytes=1000, max_consumers=3)) == MAX_CONSUMERS
        first = await create("S1", max_bytes=100000)
        assert error(first) is None and first["did_create"] is True, first
        assert error(await create("S2", max_bytes=1000, storage="memory")) is None
        # the same create again is not a third stream; another is
        assert error(await create("S1", max_bytes=100000)) is None
        assert error(await create("S3", max_bytes=10)) == MAX_STREAMS
        # updates keep to the same limits
        update = "$JS.API.STREAM.UPDATE.S1"
        assert error(await api(update, stream("S1", num_replicas=replicas))) == MAX_BYTES_REQUIRED
        assert error(await api(update, stream("S1", num_replicas=replicas, max_bytes=200000))) == MAX_STREAM_BYTES
        assert error(await api(update, stream("S1", num_replicas=replicas, max_bytes=500,
                                              max_consumers=5))) == MAX_CONSUMERS
        assert error(await api(update, stream("S1", num_replicas=replicas, max_bytes=500))) is None
        # consumers: two on the stream, a third refused; an existing one is updated
        for name in ("C1", "C2"):
            reply = await api(f"$JS.API.CONSUMER.CREATE.S1.{name}",
                              {"stream_name": "S1", "config": {"durable_name": name, "ack_policy": "explicit"}})
            assert error(reply) is None, reply
        assert error(await api("$JS.API.CONSUMER.CREATE.S1.C3", {
            "stream_name": "S1", "config": {"durable_name": "C3", "ack_policy": "explicit"}})) == MAX_CONSUMERS
        assert error(await api("$JS.API.CONSUMER.CREATE.S1", {
            "stream_name": "S1", "config": {"ack_policy": "explicit"}})) == MAX_CONSUMERS
        updated = await api("$JS.API.CONSUMER.CREATE.S1.C1", {
            "stream_name": "S1", "config": {"durable_name": "C1", "ack_policy": "explicit",
                                            "description": "updated"}})
        assert error(updated) is None and updated["config"]["description"] == "updated", updated
        # another stream's consumers are counted on their own (the limit is per stream)
        assert error(await api("$JS.API.CONSUMER.CREATE.S2.C1", {
            "stream_name": "S2", "config": {"durable_name": "C1", "ack_policy": "explicit"}})) is None
        # a deleted consumer or stream frees its place
        assert (await api("$JS.API.CONSUMER.DELETE.S1.C2"))["success"] is True
        assert error(await api("$JS.API.CONSUMER.CREATE.S1.C3", {
            "stream_name": "S1", "config": {"durable_name": "C3", "ack_policy": "explicit"}})) is None
        assert (await api("$JS.API.STREAM.DELETE.S2"))["success"] is True
        assert error(await create("S3", max_bytes=10)) is None
    finally:
        await nc.close()


async def bytes_scenario(url: str, replicas: int, user: str = "b") -> None:
    """Account B's max_mem and max_file: what its streams reserve when created or updated
    (jetstream.go checkBytesLimits), then what its publishes store (wouldExceedLimits). A
    stream's bytes count once per replica. In a cluster a stream's leader learns the other
    servers' bytes from their reports: a publish is refused once they arrived, never before
    the account's bytes reach the limit."""
    nc = await connect(url, user=user, password=user)
    api = asker(nc)

    def create(name: str, **cfg) -> dict:
        return api(f"$JS.API.STREAM.CREATE.{name}", stream(name, num_replicas=replicas, **cfg))

    def update(name: str, **cfg) -> dict:
        return api(f"$JS.API.STREAM.UPDATE.{name}", stream(name, num_replicas=replicas, **cfg))

    def publish(n: int) -> dict:
        return api("m.x", b"x" * 1000, headers={"Nats-Msg-Id": f"id-{n:04d}"})

    try:
        limits = (await api("$JS.API.INFO"))["limits"]
        assert (limits["max_memory"], limits["max_storage"], limits["max_bytes_required"]) == (10000, 20000, False)
        assert error(await create("BM", storage="memory", max_bytes=10000 // replicas + 1)) == NO_MEMORY
        half = 20000 // replicas // 2
        assert error(await create("F1", max_bytes=half)) is None
        assert error(await create("F2", max_bytes=half)) is None
        assert error(await create("F3")) == NO_STORAGE           # 1 byte per replica is over
        assert error(await update("F1", max_bytes=half + 1)) == NO_STORAGE
        assert error(await update("F1", max_bytes=half - 1)) is None
        assert error(await create("F3", max_bytes=1)) is None
        for name in ("F1", "F2", "F3"):
            assert (await api(f"$JS.API.STREAM.DELETE.{name}"))["success"] is True
        # publishes: a memory stream without max_bytes stores until the account is full
        assert error(await create("M", storage="memory")) is None
        assert error(await publish(1)) is None
        size = (await api("$JS.API.STREAM.INFO.M"))["state"]["bytes"]      # one message, one replica
        fits = 10000 // (size * replicas)
        for n in range(2, fits + 1):
            assert error(await publish(n)) is None, n
        if replicas > 1:
            # the last message again (nothing more is stored: a duplicate) until the stream's
            # leader has the other servers' bytes; the limit is checked before duplicates
            async def refused() -> dict:
                reply = await publish(fits)
                assert error(reply) == ACCOUNT_FULL, reply
                return reply
            await apoll(refused, "the account's bytes reported by every server", 20, retry_on=(AssertionError,))
        assert error(await publish(fits + 1)) == ACCOUNT_FULL
        state = (await api("$JS.API.STREAM.INFO.M"))["state"]
        assert (state["messages"], state["bytes"]) == (fits, fits * size), state
    finally:
        await nc.close()


def test_account_limits_on_one_server(start_server, tmp_path):
    server = start_server(ACCOUNTS + f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n')
    run(lambda: scenario(server.url, 1), timeout=60)


def test_account_byte_limits_on_one_server(start_server, tmp_path):
    server = start_server(ACCOUNTS + f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n')
    run(lambda: bytes_scenario(server.url, 1), timeout=60)


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    """A formed three-server cluster of one kind with account A's limits."""
    with formed_cluster(request.param, "acclimits", 3, jetstream=True, extra=ACCOUNTS,
                        users=[("a", "a"), ("b", "b"), ("c", "c"), ("d", "d")]) as c:
        yield c


@pytest.mark.parametrize("replicas", [3, 1])
def test_account_limits_in_a_cluster(cluster, replicas):
    """The meta leader counts the account's streams, each stream's leader its consumers;
    asked through a server that may lead neither. Each case deletes what it made."""
    try:
        run(lambda: scenario(cluster.servers["n2"].url, replicas), timeout=120)
    finally:
        run(lambda: clean(cluster, "a", ("S1", "S2", "S3")), timeout=60)


@pytest.mark.parametrize("replicas", [3, 1])
def test_account_byte_limits_in_a_cluster(cluster, replicas):
    """max_mem / max_file over the whole cluster: an R3 stream's bytes count three times."""
    user = "b" if replicas == 3 else "c"
    try:
        run(lambda: bytes_scenario(cluster.servers["n2"].url, replicas, user), timeout=120)
    finally:
        run(lambda: clean(cluster, user, ("F1", "F2", "F3", "M")), timeout=60)


@pytest.mark.parametrize("replicas", [3, 1])
def test_account_max_ack_pending_in_a_cluster(cluster, replicas):
    """max_ack_pending: the stream's leader refuses a consumer above it before proposing and
    gives the default it sets to every replica: the consumer keeps it under a new leader."""
    try:
        run(lambda: max_ack_pending_scenario(cluster.servers["n2"].url, replicas), timeout=120)
    finally:
        run(lambda: clean(cluster, "d", ("P",)), timeout=60)


async def max_ack_pending_scenario(url: str, replicas: int) -> None:
    nc = await connect(url, user="d", password="d")
    api = asker(nc)

    def create(name: str, **cfg) -> dict:
        return api(f"$JS.API.CONSUMER.CREATE.P.{name}",
                   {"stream_name": "P", "config": {"durable_name": name, "ack_policy": "explicit", **cfg}})

    try:
        assert (await api("$JS.API.INFO"))["limits"]["max_ack_pending"] == 100
        assert error(await api("$JS.API.STREAM.CREATE.P", stream("P", num_replicas=replicas))) is None
        first = await create("C1")
        assert error(first) is None and first["config"]["max_ack_pending"] == 100, first
        assert error(await create("C2", max_ack_pending=101)) == ACK_PENDING_EXCESS
        assert error(await create("C1", max_ack_pending=101)) == ACK_PENDING_EXCESS     # an update too
        assert error(await create("C1", max_ack_pending=100, description="x")) is None
        if replicas > 1:
            # the stream's (and so its consumers') leadership moves: the config was replicated
            step = await api("$JS.API.STREAM.LEADER.STEPDOWN.P")
            assert step.get("success") is True, step
        # the consumer's new leader answers once elected; no server answers before that
        info = await apoll(lambda: api("$JS.API.CONSUMER.INFO.P.C1"), "C1's info after a step-down",
                           30, retry_on=(NatsTimeoutError,))
        assert error(info) is None and info["config"]["max_ack_pending"] == 100, info
    finally:
        await nc.close()


#: nats.py's tests/conf/js-limits.conf (its AccountLimitsTest), with the test's store.
NATS_PY_JS_LIMITS = """
no_auth_user: "foo"
accounts: {
  A {
    users: [{ user: "foo" }]
    jetstream: {
      max_mem: 64MB,
      max_file: 32MB,
      max_streams: 10,
      max_consumers: 20,
      max_ack_pending: 100,
      memory_max_stream_bytes: 2048,
      store_max_stream_bytes: 4096,
      max_stream_bytes: true
    }
  }
}
"""
ACK_PENDING_EXCESS = (400, 10121, "consumer max ack pending exceeds system limit of 100")


def test_nats_py_account_limits_test_on_one_server(start_server, tmp_path):
    """nats.py's AccountLimitsTest.test_account_limits: jetraft refused max_ack_pending (the
    server did not start: the test timed out connecting) and did not answer the domain's
    API prefix (``$JS.test-domain.API.>``: no responders)."""
    server = start_server(NATS_PY_JS_LIMITS + f'jetstream {{ store_dir: "{tmp_path / "js"}", '
                                              'domain: "test-domain" }\n')
    run(lambda: nats_py_scenario(server.url), timeout=60)


async def nats_py_scenario(url: str) -> None:
    nc = await connect(url)
    js = nc.jetstream()
    try:
        # as nats.py's test_account_limits
        with pytest.raises(BadRequestError) as err:
            await js.add_stream(name="limits", subjects=["limits"])
        assert (err.value.err_code, err.value.description) == MAX_BYTES_REQUIRED[1:]
        with pytest.raises(BadRequestError) as err:
            await js.add_stream(name="limits", subjects=["limits"], max_bytes=65536)
        assert (err.value.err_code, err.value.description) == MAX_STREAM_BYTES[1:]
        si = await js.add_stream(name="limits", subjects=["limits"], max_bytes=128)
        assert si.config.max_bytes == 128
        await js.publish("limits", b"A" * 55)
        assert (await js.stream_info("limits")).state.messages == 1
        for _ in range(5):
            await js.publish("limits", b"A")
        info = await js.account_info()
        assert (info.memory, info.storage, info.streams, info.consumers) == (0, 111, 1, 0)
        assert info.limits == nats.js.api.AccountLimits(
            max_memory=64 * 1024 * 1024, max_storage=32 * 1024 * 1024, max_streams=10, max_consumers=20,
            max_ack_pending=100, memory_max_stream_bytes=2048, storage_max_stream_bytes=4096,
            max_bytes_required=True)
        assert (info.api.total, info.api.errors) == (4, 2)
        assert info.domain == "test-domain" and info.tiers is None
        # the domain's API prefix reaches the same account (the messages are limited)
        assert (await nc.jetstream(domain="test-domain").stream_info("limits")).state.messages == 3

        # max_ack_pending: the default explicit/all-ack consumers get, and their upper bound
        def consumer(name: str, **cfg) -> dict:
            return api(f"$JS.API.CONSUMER.CREATE.limits.{name}",
                       {"stream_name": "limits", "config": {"durable_name": name, **cfg}})

        async def api(subject: str, body: dict | None = None) -> dict:
            raw = json.dumps(body).encode() if body is not None else b""
            return json.loads((await nc.request(subject, raw, timeout=5)).data)

        created = await consumer("C1", ack_policy="explicit")
        assert error(created) is None and created["config"]["max_ack_pending"] == 100, created
        assert error(await consumer("C2", ack_policy="explicit", max_ack_pending=101)) == ACK_PENDING_EXCESS
        assert error(await consumer("C1", ack_policy="explicit", max_ack_pending=200)) == ACK_PENDING_EXCESS
        exact = await consumer("C3", ack_policy="all", max_ack_pending=100)
        assert exact["config"]["max_ack_pending"] == 100, exact
        unlimited = await consumer("C4", ack_policy="explicit", max_ack_pending=-1)
        assert unlimited["config"]["max_ack_pending"] == -1, unlimited
        none = await consumer("C5", ack_policy="none")
        assert error(none) is None and "max_ack_pending" not in none["config"], none
        # a stream's consumer_limits come first
        assert error(await api("$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l"], "max_bytes": 100,
                                                          "consumer_limits": {"max_ack_pending": 50}})) is None
        lower = await api("$JS.API.CONSUMER.CREATE.L.C", {"stream_name": "L", "config": {
            "durable_name": "C", "ack_policy": "explicit"}})
        assert lower["config"]["max_ack_pending"] == 50, lower

        # the domain's prefix is mapped where it names the API (nats-server
        # generateJSMappingTable): subscribers see the mapped subject, others keep theirs
        seen: list[str] = []

        async def saw(msg) -> None:
            seen.append(msg.subject)
        for subject in ("$JS.test-domain.API.>", "$JS.API.STREAM.INFO.>", "$KV.>"):
            await nc.subscribe(subject, cb=saw)
        domain_info = await api("$JS.test-domain.API.INFO")
        assert domain_info["domain"] == "test-domain" and domain_info["streams"] == 2, domain_info
        assert (await api("$JS.test-domain.API.STREAM.INFO.limits"))["state"]["messages"] == 3
        await js.add_stream(name="KV_b", subjects=["$KV.b.>"], max_bytes=1000)
        ack = await api("$JS.test-domain.API.$KV.b.k")
        assert ack == {"stream": "KV_b", "domain": "test-domain", "seq": 1}, ack
        for unmapped in ("$JS.test-domain.API.STREAM", "$JS.other.API.INFO"):
            await nc.publish(unmapped, b"")
        with pytest.raises(NoRespondersError):
            await nc.request("$JS.other.API.STREAM.INFO.limits", b"", timeout=5)
        await round_trip(nc)
        assert sorted(seen) == ["$JS.API.STREAM.INFO.limits", "$JS.test-domain.API.STREAM", "$KV.b.k"], seen
    finally:
        await nc.close()


async def clean(c: Cluster, user: str, streams: tuple[str, ...]) -> None:
    """Delete ``streams`` of ``user``'s account (those that are not there answer 10059)."""
    nc = await connect(c.servers["n1"].url, user=user, password=user)
    try:
        for name in streams:
            await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=10)
    finally:
        await nc.close()
