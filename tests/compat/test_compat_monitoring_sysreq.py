"""``$SYS.REQ.SERVER.PING.<KIND>`` and ``$SYS.REQ.SERVER.<id>.<KIND>`` beside nats-server
(server/events.go: the monitoring services, zReq, ServerAPIResponse, the *EventOptions
request bodies): a user of the system account asks each kind, with and without options,
of the server under test and of a reference nats-server with the same accounts, and the
answers are compared key for key, type for type, and by the values the options select.
"""

from __future__ import annotations

import json
import time

import nats
import pytest
from cluster import Cluster
from compat_support import RawClient, run
from polling import apoll
from test_compat_monitoring_varz import differences

CONFIG = """
server_tags: ["az:a"]
accounts {
  A { users [ { user: a, password: a } ], jetstream: enabled }
  $SYS { users [ { user: sys, password: sys } ] }
}
jetstream { store_dir: "%s" }
"""

KINDS = ("STATSZ", "VARZ", "CONNZ", "SUBSZ", "ROUTEZ", "ACCOUNTZ", "JSZ", "HEALTHZ", "IDZ")

#: Paths nats-server may report that jetraft does not (see test_compat_monitoring_varz and
#: test_compat_monitoring_accountz): its server-wide JetStream limits and feature flags.
NOT_REPORTED = {
    "VARZ.data.git_commit", "VARZ.data.jetstream.limits", "VARZ.data.feature_flags.js_ack_fc_v2",
    "VARZ.data.feature_flags.js_api_reply_v2", "VARZ.data.feature_flags.js_raft_delete_range",
    "VARZ.data.feature_flags.js_snapshot_sources", "ACCOUNTZ.data.account_detail.imports",
    "JSZ.data.limits", "STATSZ.statsz.jetstream.limits",
    *(f"{kind}.server.feature_flags" for kind in KINDS),
}


@pytest.fixture
def pair(start_server, tmp_path):
    return (start_server(CONFIG % (tmp_path / "ours"), http=True),
            start_server(CONFIG % (tmp_path / "ref"), http=True, kind="nats-server"))


def ask(server, requests: list[tuple[str, object]], timeout: float = 5.0) -> list:
    """Each (subject, body) asked as the system user, ``<id>`` in a subject replaced by the
    server's id; the decoded answer, or None when none came within ``timeout``."""
    answers = []

    async def scenario():
        nc = await nats.connect(server.url, user="sys", password="sys")
        client = await nats.connect(server.url, user="a", password="a", name="watched")
        await client.subscribe("watched.>")
        await client.flush()
        server_id = server.monitor("/varz")["server_id"]
        for subject, body in requests:
            data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
            try:
                msg = await nc.request(subject.replace("<id>", server_id), data, timeout=timeout)
            except nats.errors.TimeoutError:
                answers.append(None)
            else:
                answers.append(json.loads(msg.data))
        await client.close()
        await nc.close()
    run(scenario)
    return answers


def test_every_kind_answers_as_nats_server(pair):
    """PING and the server's own id answer every kind with nats-server's shape: the
    ServerAPIResponse (``server`` and ``data``; STATSZ ``statsz``; IDZ the bare ServerID)."""
    requests = [(f"$SYS.REQ.SERVER.{target}.{kind}", None) for kind in KINDS for target in ("PING", "<id>")]
    requests.append(("$SYS.REQ.SERVER.PING", None))
    ours, ref = (ask(server, requests) for server in pair)
    problems = []
    for (subject, _), mine, theirs in zip(requests, ours, ref):
        kind = subject.rsplit(".", 1)[1].replace("PING", "STATSZ")
        assert theirs is not None and mine is not None, (pair[0].kind, subject)
        problems += differences(kind, mine, theirs, NOT_REPORTED)
    assert not problems, "differences from nats-server:\n" + "\n".join(problems)
    for answers in (ours, ref):
        by_subject = {subject: answer for (subject, _), answer in zip(requests, answers)}
        idz = by_subject["$SYS.REQ.SERVER.PING.IDZ"]
        assert by_subject["$SYS.REQ.SERVER.PING.VARZ"]["data"]["server_id"] == idz["id"]
        assert by_subject["$SYS.REQ.SERVER.<id>.VARZ"]["server"]["id"] == idz["id"]
        assert by_subject["$SYS.REQ.SERVER.PING.HEALTHZ"]["data"]["status"] == "ok"
        assert by_subject["$SYS.REQ.SERVER.PING.VARZ"]["server"]["tags"] == ["az:a"]
        # one version everywhere: ServerInfo ``ver`` is /varz ``version`` (and INFO's)
        varz = by_subject["$SYS.REQ.SERVER.PING.VARZ"]
        assert varz["server"]["ver"] == varz["data"]["version"] == by_subject["$SYS.REQ.SERVER.PING"]["server"]["ver"]


def test_request_options_select_as_nats_server(pair):
    """The request body carries the endpoint's options: CONNZ subscriptions and account,
    ACCOUNTZ one account, JSZ account details, SUBSZ subscriptions, HEALTHZ js-enabled-only."""
    requests = [
        ("$SYS.REQ.SERVER.PING.CONNZ", {"subscriptions": True, "acc": "A", "auth": True}),
        ("$SYS.REQ.SERVER.<id>.ACCOUNTZ", {"account": "A"}),
        ("$SYS.REQ.SERVER.PING.JSZ", {"accounts": True}),
        ("$SYS.REQ.SERVER.PING.SUBSZ", {"subscriptions": True, "account": "A", "test": "watched.x"}),
        ("$SYS.REQ.SERVER.PING.HEALTHZ", {"js-enabled-only": True}),
        ("$SYS.REQ.SERVER.PING.ROUTEZ", {"subscriptions": True}),
    ]
    for server in pair:
        connz, accountz, jsz, subsz, healthz, routez = ask(server, requests)
        assert [c.get("name") for c in connz["data"]["connections"]] == ["watched"], server.kind
        assert connz["data"]["connections"][0]["subscriptions_list"] == ["watched.>"]
        assert connz["data"]["connections"][0]["account"] == "A"
        assert accountz["data"]["account_detail"]["account_name"] == "A"
        assert [d["name"] for d in jsz["data"]["account_details"]] == ["A"]
        assert [s["subject"] for s in subsz["data"]["subscriptions_list"]] == ["watched.>"]
        assert healthz["data"] == {"status": "ok", "status_code": 200}
        assert routez["data"]["routes"] == []


def test_errors_and_filters_as_nats_server(pair):
    """A body that is not JSON is a 400 error, an unknown account a 500 naming it; a
    filter that does not match this server (name, tags) gets no answer, one that matches
    does."""
    requests = [
        ("$SYS.REQ.SERVER.PING.CONNZ", b"{not json"),
        ("$SYS.REQ.SERVER.PING.ACCOUNTZ", {"account": "NOPE"}),
        ("$SYS.REQ.SERVER.PING.VARZ", {"server_name": "no-such-server"}),
        ("$SYS.REQ.SERVER.PING.STATSZ", {"tags": ["az:b"]}),
        ("$SYS.REQ.SERVER.PING.VARZ", {"tags": ["az:a"]}),
    ]
    ours, ref = (ask(server, requests, timeout=1.0) for server in pair)
    for answers in (ours, ref):
        bad_json, unknown, by_name, by_tags, matching = answers
        assert bad_json["error"]["code"] == 400 and "data" not in bad_json
        assert unknown["error"] == {"code": 500, "description": "Account NOPE does not exist"}
        assert by_name is None and by_tags is None
        assert matching["data"]["tags"] == ["az:a"]
    assert set(ours[0]) == set(ref[0]) == {"server", "error"}


@pytest.mark.parametrize("kind", ["jetraft", "nats-server"])
def test_ping_reaches_every_server_of_a_cluster(kind, tmp_path):
    """In a three-server cluster, one PING.CONNZ, PING.IDZ or PING.SUBSZ from a system user
    is answered by every server, each naming itself; ``<id>.VARZ`` by that server alone."""
    system = "accounts { $SYS { users [ { user: sys, password: sys } ] } }\n"
    with Cluster(kind, tmp_path, 3, extra=system).start() as c:
        c.wait_formed()
        ids = {name: server.monitor("/varz")["server_id"] for name, server in c.servers.items()}
        got: dict[str, list] = {}

        async def scenario():
            nc = await nats.connect(c.servers["n1"].url, user="sys", password="sys")
            for probe in ("CONNZ", "IDZ", "SUBSZ", f"{ids['n2']}.VARZ"):
                inbox = nc.new_inbox()
                sub = await nc.subscribe(inbox)
                await nc.flush()
                subject = f"$SYS.REQ.SERVER.{probe}" if "." in probe else f"$SYS.REQ.SERVER.PING.{probe}"
                want = 1 if "." in probe else 3
                replies: list = []

                async def answered(sub=sub, replies=replies, want=want) -> bool:
                    try:
                        msg = await sub.next_msg(timeout=0.2)
                    except nats.errors.TimeoutError:
                        return False
                    replies.append(json.loads(msg.data))
                    return len({str(r.get("id") or r["server"]["id"]) for r in replies}) >= want

                # a PING is answered by every server whose interest has reached n1's routes:
                # asked again (replies of an earlier round still count) until all have answered
                async def ping_until_all(subject=subject, inbox=inbox, answered=answered) -> bool:
                    await nc.publish(subject, b"", reply=inbox)
                    try:
                        await apoll(answered, f"replies to {subject}", 2, retry_on=())
                    except AssertionError:
                        return False
                    return True
                await apoll(ping_until_all, f"{want} replies to {subject}", 20, retry_on=())
                got[probe] = list(replies)
                await sub.unsubscribe()
            await nc.close()
        run(scenario)
    for probe, replies in got.items():
        named = sorted({r["id"] if probe == "IDZ" else r["server"]["id"] for r in replies})
        expected = [ids["n2"]] if "." in probe else sorted(ids.values())
        assert named == expected, (probe, replies)


def test_statsz_counts_stale_connections_as_nats_server(start_server, server_kind, tmp_path):
    """A client that leaves the server's PINGs unanswered is closed as stale; STATSZ then
    has ``stale_connections`` and ``stale_connection_stats`` (omitted while zero: events.go
    ServerStats, omitempty)."""
    # one PING a second, closed at the second unanswered one: nats-py clients have a second
    # to answer each, the raw one is closed after about 2 s
    server = start_server(CONFIG % (tmp_path / "s") + 'ping_interval: "1s"\nping_max: 1\n', http=True)
    [before] = ask(server, [("$SYS.REQ.SERVER.PING.STATSZ", None)])
    assert "stale_connections" not in before["statsz"] and "stale_connection_stats" not in before["statsz"]
    with RawClient(server.address) as raw:
        raw.connect(user="a", **{"pass": "a"})
        assert raw.read_until_closed(timeout=10).endswith(b"-ERR 'Stale Connection'\r\n")
    poll_sync = time.monotonic() + 10
    while True:
        [after] = ask(server, [("$SYS.REQ.SERVER.PING.STATSZ", None)])
        if after["statsz"].get("stale_connections") or time.monotonic() > poll_sync:
            break
        time.sleep(0.05)
    assert after["statsz"]["stale_connections"] == 1
    assert after["statsz"]["stale_connection_stats"] == {"clients": 1, "routes": 0, "gateways": 0, "leafs": 0}
    assert "slow_consumer_stats" not in after["statsz"]
