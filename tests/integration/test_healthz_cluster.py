"""/healthz, /jsz and ``jetraft server report jetstream`` on a JetStream cluster whose
servers stop, start and fall behind, as a load balancer and an operator see them.

Where nats-server has the case the test runs against both (``server_kind``); a replica
completing a catch-up slowly enough to be watched needs jetraft's
``max_outstanding_catchup``, so that one runs on jetraft only.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nats
import nats.js.errors
import pytest
from cluster import Cluster
from js_support import asked_again
from polling import poll

NAMES = ("n1", "n2", "n3")
SYS_USERS = """
accounts {
  SYS { users [ { user: sys, password: sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
system_account: SYS
"""
CLI = Path(sys.executable).parent / "jetraft"


def health(server, query: str = "") -> tuple[int, dict]:
    try:
        status, body = server.http_get("/healthz" + query)
    except OSError as exc:
        return 0, {"unreachable": str(exc)}
    return status, json.loads(body)


def meta_leader(c: Cluster) -> str:
    def agreed():
        leaders = {c.servers[n].monitor("/jsz").get("meta_cluster", {}).get("leader")
                   for n in NAMES if c.servers[n].alive()}
        return leaders.pop() if len(leaders) == 1 and None not in leaders else None
    return poll(agreed, "one meta leader seen by every server", 30, retry_on=())


@pytest.fixture
def three(server_kind, formed_cluster):
    # Formed with a meta leader, but without the $JS.API.INFO probe of each server: after it,
    # nats-server 2.15.1's follower sometimes did not show a stopped server offline within 60 s
    # (2 runs in 8 here; 18 in 18 passed without the probe; the cause is not known).
    with formed_cluster(server_kind, "three", 3, jetstream=True, extra=SYS_USERS,
                        users=[]) as c:
        yield c


@pytest.mark.timeout(240)
def test_a_stopped_server_is_shown_offline_in_jsz_and_the_report(three):
    """Every live server's /jsz ``meta_cluster.replicas`` shows a stopped server
    ``offline: true`` (a follower's too, not current), and ``jetraft server report
    jetstream`` shows it not online."""
    c = three
    leader = meta_leader(c)
    victim, follower = (n for n in NAMES if n != leader)
    c.stop_one(victim)

    def seen_offline(name):
        def check():
            meta = c.servers[name].monitor("/jsz").get("meta_cluster") or {}
            peer = next((r for r in meta.get("replicas") or [] if r.get("name") == victim), None)
            return peer if peer and peer.get("offline") else None
        return check

    # a follower learns it from the system account's events, which a loaded machine delays
    poll(seen_offline(leader), f"{leader} sees {victim} offline", 60, retry_on=())
    peer = poll(seen_offline(follower), f"{follower} sees {victim} offline", 60, retry_on=())
    assert peer["current"] is False
    result = subprocess.run(
        [str(CLI), "--server", c.servers[follower].url, "--user", "sys", "--password", "sys",
         "server", "report", "jetstream", "--expect", "2"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines()
               if re.search(rf"\b{victim}\b", line) and ("true" in line or "false" in line))
    cells = re.findall(r"\b(true|false)\b", row)
    assert cells[:2] == ["false", "false"], f"current and online of {victim}: {row!r}\n{result.stdout}"


def test_losing_the_meta_leader_is_unhealthy(three):
    """The two other servers stop: the one left has no meta leader to hear from (503);
    js-server-only still passes."""
    c = three
    meta_leader(c)
    assert health(c.servers["n1"]) == (200, {"status": "ok"})
    c.stop_one("n2")
    c.stop_one("n3")
    texts = ("JetStream has not established contact with a meta leader",
             "JetStream is not current with the meta leader")
    status, body = poll(lambda: (lambda h: h if h[0] == 503 else None)(health(c.servers["n1"])),
                        "n1 unhealthy without a meta leader", 60, retry_on=())
    assert body["status"] == "unavailable" and body["error"] in texts, body
    assert health(c.servers["n1"], "?js-server-only=true") == (200, {"status": "ok"})


# ----------------------------------------------------------------------------- jetraft only


@pytest.fixture
def slow_catchup(formed_cluster):
    with formed_cluster("jetraft", "slow", 3, jetstream=True,
                        jetstream_extra="stream_compact: 300\nmax_outstanding_catchup: 512") as c:
        yield c


def test_a_restarted_replica_is_unhealthy_until_it_caught_up(slow_catchup):
    """A replica stopped while ~8 MiB were published is started again: its /healthz says
    503 "JetStream stream '$G > S' is not current: ..." while it completes the snapshot
    (the leader's says 200 meanwhile), then 200 once it caught up."""
    c = slow_catchup

    async def setup() -> tuple[str, str]:
        nc = await nats.connect(servers=[c.servers[n].url for n in NAMES], max_reconnect_attempts=-1,
                                reconnect_time_wait=0.1)
        js = nc.jetstream(timeout=10)
        await asked_again(lambda: js.add_stream(name="S", subjects=["s.>"], num_replicas=3), "create S")
        si = await asked_again(lambda: js.stream_info("S"), "info of S")
        leader = si.cluster.leader
        behind = next(r.name for r in si.cluster.replicas)
        await nc.close()
        nc = await nats.connect(servers=[c.servers[n].url for n in NAMES if n != behind],
                                max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        js = nc.jetstream(timeout=10)
        c.stop_one(behind)
        payload = os.urandom(4096)
        for i in range(2000):
            await js.publish("s.x", payload, headers={"Nats-Msg-Id": str(i)})
        await nc.close()
        return leader, behind

    leader, behind = asyncio.run(asyncio.wait_for(setup(), 180))
    c.start([behind])
    server = c.servers[behind]
    prefix = "JetStream stream '$G > S' is not current: "

    def stream_not_current():
        status, body = health(server, "?details=true")
        errors = body.get("errors") or []
        return body if status == 503 and any(e.get("type") == "STREAM" and e.get("stream") == "S"
                                             and e["error"].startswith(prefix) for e in errors) else None

    poll(stream_not_current, f"{behind} reports the stream not current", 60, retry_on=())
    assert health(c.servers[leader])[0] == 200
    assert poll(lambda: (lambda h: h if h[0] == 200 else None)(health(server)),
                f"{behind} healthy once caught up", 180, retry_on=())[1] == {"status": "ok"}
