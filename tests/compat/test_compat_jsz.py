"""/jsz's query options (nats-server server/monitor.go HandleJsz, Jsz, AccountDetail,
StreamDetail), against jetraft and nats-server.

The single-server tests start the server under test beside a reference nats-server with
the same configuration and traffic, and compare what both answer: the keys and JSON types
of ``account_details`` and everything below it, and the values that follow from the
configuration and the traffic. The cluster tests run a three-server cluster of one kind
with an R3 stream and check what its stream leader, its followers and the meta leader
report.
"""

from __future__ import annotations

import json
import time

import nats
import pytest
import servers
from cluster import Cluster
from compat_support import json_type, run
from js_support import asked_again

GO_UINT64_MAX = (1 << 64) - 1
ACCOUNTS = ("A", "B", "C")


def shape(value):
    """Keys and JSON types of ``value``, recursively (a list by its first element)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return json_type(value)


def jsz(server, query: str) -> dict:
    return server.monitor("/jsz" + query)


def store(tmp_path, name: str) -> str:
    return f'jetstream {{ store_dir: "{tmp_path / name}" }}'


def make_stream(server, *, user: str | None = None, replicas: int = 1) -> None:
    """Stream S (subjects s.>) with one 2-byte message and durable consumer C. Each request
    is asked again while it goes unanswered: a cluster's first R3 stream and consumer can
    take nats-server longer than a request's timeout on a loaded machine. Creating the
    same stream or consumer again answers it; the message carries a Nats-Msg-Id, so a
    publish asked again is not stored twice."""
    async def scenario():
        options = {"user": user, "password": user} if user else {}
        nc = await nats.connect(server.url, **options)
        js = nc.jetstream(timeout=10)
        await asked_again(lambda: js.add_stream(name="S", subjects=["s.>"], num_replicas=replicas), "create S")
        await asked_again(lambda: js.publish("s.1", b"hi", headers={"Nats-Msg-Id": "m1"}), "publish to S")
        await asked_again(lambda: js.add_consumer("S", durable_name="C"), "create C")
        await nc.close()
    run(scenario)


def listed_config(server) -> dict:
    """Stream S's config as $JS.API.STREAM.LIST gives it."""
    listed: dict = {}

    async def scenario():
        nc = await nats.connect(server.url)
        msg = await nc.request("$JS.API.STREAM.LIST", b"{}", timeout=5)
        await nc.close()
        listed.update(json.loads(msg.data)["streams"][0]["config"])
    run(scenario)
    return listed


@pytest.fixture
def pair(start_server, tmp_path):
    """(server under test, reference nats-server), each with JetStream, stream S and
    consumer C."""
    ours = start_server(store(tmp_path, "ours"), http=True)
    ref = start_server(store(tmp_path, "ref"), http=True, kind="nats-server")
    for server in (ours, ref):
        make_stream(server)
    return ours, ref


FULL = "?accounts=true&streams=true&consumers=true&config=true"


def test_account_and_stream_details_match_nats_server(pair):
    """With every detail asked for, account_details, stream_detail, its cluster, state and
    consumer_detail have nats-server's keys and types; the values that follow from the
    configuration and the traffic are nats-server's, and the stream config is the one
    stream info gives (without the server's version metadata)."""
    ours, ref = pair
    got, want = jsz(ours, FULL), jsz(ref, FULL)
    assert shape(got["account_details"]) == shape(want["account_details"])
    assert got["total"] == want["total"] == 1
    # the server's API level (jetstream_versioning.go JSApiLevel), in /jsz and /varz alike
    assert got["api"]["level"] == want["api"]["level"] == 5
    assert ours.monitor("/varz")["jetstream"]["stats"]["api"]["level"] == \
        ref.monitor("/varz")["jetstream"]["stats"]["api"]["level"] == 5

    for doc, server in ((got, ours), (want, ref)):
        [account] = doc["account_details"]
        assert (account["name"], account["id"]) == ("$G", "$G")
        assert (account["reserved_memory"], account["reserved_storage"]) == (GO_UINT64_MAX, GO_UINT64_MAX)
        assert (account["accounts"], account["ha_assets"], account["api"]["level"]) == (0, 0, 0)
        assert account["api"]["total"] >= 2 and account["api"]["errors"] == 0
        [stream] = account["stream_detail"]
        assert stream["name"] == "S"
        assert stream["cluster"] == {"leader": server.monitor("/varz")["server_name"]}
        state = {k: stream["state"][k] for k in ("messages", "first_seq", "last_seq", "num_subjects",
                                                 "consumer_count")}
        assert state == {"messages": 1, "first_seq": 1, "last_seq": 1, "num_subjects": 1, "consumer_count": 1}
        [consumer] = stream["consumer_detail"]
        assert (consumer["stream_name"], consumer["name"], consumer["num_pending"]) == ("S", "C", 1)
        assert consumer["config"]["durable_name"] == "C"

        assert stream["config"] == listed_config(server)
        assert stream["config"]["num_replicas"] == 1
    assert got["account_details"][0]["stream_detail"][0]["state"]["bytes"] == \
        want["account_details"][0]["stream_detail"][0]["state"]["bytes"]


@pytest.mark.parametrize("query", [
    "", "?accounts=true", "?accounts=1&streams=0", "?streams=true", "?consumers=true",
    "?streams=true&config=true", "?acc=$G", "?acc=$G&streams=true", "?acc=NOPE", "?acc=NOPE&accounts=true",
    "?accounts=true&offset=1", "?accounts=true&limit=-1", "?accounts=t&limit=0&offset=-3",
    "?leader-only=true&accounts=true", "?stream-leader-only=true&streams=true", "?raft=true&streams=true",
    "?direct-consumers=true&consumers=true",
])
def test_which_details_each_query_adds_match_nats_server(pair, query):
    """Each query option adds (or leaves out) the same parts of the answer as nats-server:
    account_details and, inside, stream_detail, config and consumer_detail."""
    ours, ref = pair
    got, want = jsz(ours, query), jsz(ref, query)
    assert ("account_details" in got) == ("account_details" in want)
    assert shape(got.get("account_details")) == shape(want.get("account_details")), query
    for doc in (got, want):
        for account in doc.get("account_details", []):
            for stream in account.get("stream_detail", []):
                assert ("config" in stream) == ("config=true" in query)


@pytest.mark.parametrize("query", [
    "?accounts=maybe", "?streams=2", "?consumers=yes", "?config=on", "?leader-only=x",
    "?raft=no", "?stream-leader-only=0.5", "?direct-consumers=nope", "?offset=1.5", "?limit=x",
    "?accounts=true&limit=99999999999999999999", "?accounts=bad&limit=bad",
])
def test_a_bad_query_value_is_refused_as_nats_server_does(pair, query):
    """A value Go's strconv refuses is a 400 with nats-server's plain-text reason (the first
    bad parameter in nats-server's order)."""
    ours, ref = pair
    got, want = ours.http_get("/jsz" + query), ref.http_get("/jsz" + query)
    assert got == want, query
    assert got[0] == 400


def test_offset_and_limit_page_through_accounts_by_name(start_server, tmp_path):
    """offset and limit page over the JetStream accounts sorted by name (limit 0 is 1024,
    a negative limit is every account); acc= picks one account whatever the paging; total
    counts them all."""
    accounts = "accounts {\n" + "".join(
        f'  {a} {{ jetstream: enabled, users = [ {{ user: "{a.lower()}", password: "{a.lower()}" }} ] }}\n'
        for a in reversed(ACCOUNTS)) + "}"
    ours = start_server(store(tmp_path, "ours") + "\n" + accounts, http=True)
    ref = start_server(store(tmp_path, "ref") + "\n" + accounts, http=True, kind="nats-server")
    make_stream(ours, user="b")
    make_stream(ref, user="b")
    cases = {
        "?accounts=true": ["A", "B", "C"],
        "?accounts=true&offset=1&limit=1": ["B"],
        "?accounts=true&offset=2": ["C"],
        "?accounts=true&offset=3": None,
        "?accounts=true&limit=-1": ["A", "B", "C"],
        "?accounts=true&limit=2": ["A", "B"],
        "?acc=C&offset=0&limit=1": ["C"],
        "?acc=C": ["C"],
    }
    for server in (ours, ref):
        for query, names in cases.items():
            doc = jsz(server, query)
            assert doc["total"] == 3, (server.kind, query)
            got = [a["name"] for a in doc["account_details"]] if "account_details" in doc else None
            if "limit=-1" in query:     # unpaged: nats-server leaves them in its map's order
                got = sorted(got)
            assert got == names, (server.kind, query)
        doc = jsz(server, "?streams=true")
        assert {a["name"]: [s["name"] for s in a.get("stream_detail", [])] for a in doc["account_details"]} == \
            {"A": [], "B": ["S"], "C": []}, server.kind


def test_leader_only_on_a_single_server_answers_in_full(pair):
    """A single server is its own meta leader: leader-only=true changes nothing, and it
    leads every stream (stream-leader-only=true keeps S)."""
    for server in pair:
        doc = jsz(server, "?leader-only=true&stream-leader-only=true&streams=true")
        assert [s["name"] for s in doc["account_details"][0]["stream_detail"]] == ["S"]


def test_without_jetstream_leader_only_is_refused(start_server):
    """Without JetStream /jsz says disabled; with leader-only=true nats-server answers 400
    "filtered response: not leader"."""
    ours = start_server(http=True)
    ref = start_server(http=True, kind="nats-server")
    for server in (ours, ref):
        assert jsz(server, "?accounts=true")["disabled"] is True
        assert "account_details" not in jsz(server, "?accounts=true")
        assert server.http_get("/jsz?leader-only=true") == (400, b"filtered response: not leader")


# ---------------------------------------------------------------------- a 3-server cluster

@pytest.fixture(scope="module", params=servers.KINDS)
def three(request, formed_cluster):
    """A formed three-server JetStream cluster of one kind with an agreed meta leader and
    an R3 stream S (one message, consumer C)."""
    with formed_cluster(request.param, "jsz", 3, jetstream=True) as c:
        make_stream(c.servers["n1"], replicas=3)
        yield c


def stream_details(server, query: str) -> list[dict]:
    doc = jsz(server, query)
    return [s for a in doc.get("account_details", []) for s in a.get("stream_detail", [])]


def wait_stream_leader(c: Cluster, timeout: float = 30.0) -> tuple[str, dict]:
    """(name of S's leader, its stream detail with config) once the leader reports both
    other replicas current; fails after ``timeout`` with the last answer."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for name, server in c.servers.items():
            details = stream_details(server, "?streams=true&config=true")
            if details and details[0]["cluster"].get("leader") == name:
                last = details[0]
                replicas = last["cluster"].get("replicas", [])
                if len(replicas) == 2 and all(r["current"] for r in replicas):
                    return name, last
        time.sleep(0.05)
    raise AssertionError(f"no leader of S with two current replicas; last {last}")


def test_an_r3_streams_leader_reports_two_current_replicas(three):
    """Every server holds a replica of the R3 stream and lists it; its leader's cluster
    object names the two others, current, and its config says num_replicas 3."""
    leader, detail = wait_stream_leader(three)
    assert detail["config"]["num_replicas"] == 3
    assert detail["name"] == "S"
    assert detail["state"]["messages"] == 1
    others = sorted(n for n in three.servers if n != leader)
    assert [r["name"] for r in detail["cluster"]["replicas"]] == others
    for replica in detail["cluster"]["replicas"]:
        assert isinstance(replica["active"], int) and isinstance(replica["peer"], str)
    for name, server in three.servers.items():
        [seen] = stream_details(server, "?streams=true")
        assert seen["cluster"]["leader"] == leader and "config" not in seen, name


def test_leader_only_answers_on_the_meta_leader_alone(three):
    """leader-only=true: the meta leader answers in full; every other server answers 400
    "filtered response: not leader" (nats-server monitor.go Jsz)."""
    meta = three.wait_meta_leader()
    for name, server in three.servers.items():
        status, body = server.http_get("/jsz?leader-only=true&accounts=true")
        if name == meta:
            assert status == 200 and json.loads(body)["account_details"][0]["name"] == "$G"
        else:
            assert (status, body) == (400, b"filtered response: not leader"), name


def test_stream_leader_only_lists_a_stream_on_its_leader_alone(three):
    """stream-leader-only=true keeps a stream only in its leader's stream_detail; the
    followers still list the account."""
    leader, _ = wait_stream_leader(three)
    for name, server in three.servers.items():
        doc = jsz(server, "?streams=true&stream-leader-only=true")
        [account] = doc["account_details"]
        assert [s["name"] for s in account.get("stream_detail", [])] == (["S"] if name == leader else []), name


def test_raft_adds_the_streams_raft_group(three):
    """raft=true adds stream_raft_group, the same on every replica."""
    groups = set()
    for server in three.servers.values():
        [detail] = stream_details(server, "?streams=true&raft=true")
        groups.add(detail["stream_raft_group"])
        assert "stream_raft_group" not in stream_details(server, "?streams=true")[0]
    assert len(groups) == 1 and isinstance(groups.pop(), str)
