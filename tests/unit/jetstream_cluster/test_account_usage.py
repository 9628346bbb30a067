"""The cluster's account usage reports (jetraft.jetstream.usage) and the stream leader's
max_mem / max_file check before it proposes a publish (ClusterController)."""

from __future__ import annotations

import msgpack
import pytest
from controller_world import T0, World

from jetraft.jetstream.model import AccountLimits
from jetraft.jetstream.usage import (
    USAGE_CHANGE_NS,
    USAGE_REPORT_NS,
    AccountUsage,
    decode_usage,
    encode_usage,
)

KEY = ("$G", "S")
FULL = {"code": 400, "err_code": 10002, "description": "resource limits exceeded for account"}


def test_a_report_round_trips_keeping_only_the_accounts_served_here():
    body = encode_usage({"A": (10, 20), "OTHER": (1, 2)})
    assert decode_usage(body, ["A", "B"]) == {"A": (10, 20)}


@pytest.mark.parametrize("body", [
    pytest.param(b"\xc1", id="undecodable"),
    pytest.param(msgpack.packb([1, 2]), id="not-a-map"),
    pytest.param(msgpack.packb({"A": [1]}), id="one-count"),
    pytest.param(msgpack.packb({"A": [1, -1]}), id="negative"),
    pytest.param(msgpack.packb({"A": [1, 1 << 63]}), id="past-int64"),
    pytest.param(msgpack.packb({"A": [1, 2.5]}), id="float"),
    pytest.param(msgpack.packb({"A": [True, 2]}), id="bool"),
    pytest.param(msgpack.packb({1: [1, 2]}, strict_types=False), id="key-not-a-string"),
])
def test_a_malformed_report_is_refused(body):
    with pytest.raises(ValueError):
        decode_usage(body, ["A"])


def test_reports_go_on_a_change_at_most_every_250ms_and_every_second_anyway():
    u = AccountUsage()
    assert u.due(0, {"A": (0, 0)}) is True
    assert u.due(USAGE_CHANGE_NS - 1, {"A": (0, 5)}) is False        # changed, too soon
    assert u.due(USAGE_CHANGE_NS, {"A": (0, 5)}) is True
    assert u.due(USAGE_CHANGE_NS + USAGE_REPORT_NS - 1, {"A": (0, 5)}) is False   # unchanged
    assert u.due(USAGE_CHANGE_NS + USAGE_REPORT_NS, {"A": (0, 5)}) is True


def test_only_members_reports_count_and_a_newer_report_replaces_the_older():
    u = AccountUsage()
    u.received("n2", {"A": (1, 10)})
    u.received("n3", {"A": (2, 20)})
    u.received("gone", {"A": (100, 100)})
    assert u.others("A", ["n2", "n3"]) == (3, 30)
    u.received("n2", {})
    assert u.others("A", ["n2", "n3"]) == (2, 20)
    assert u.others("B", ["n2", "n3"]) == (0, 0)


def world(max_memory: int) -> World:
    """n1 leads the R3 memory stream S (on n1-n3) of an account limited to ``max_memory``."""
    w = World({"n1": (), "n2": (), "n3": ()})
    w.meta_leader("n1", peers=("n1", "n2", "n3"))
    w.accounts["$G"].limits = AccountLimits(max_memory=max_memory)
    w.assign("S", leader="n1", storage="memory")
    return w


def publish(w: World, n: int) -> dict | None:
    """Publish 100 bytes on s.a; the answer, or None while it is proposed unanswered."""
    w.take_replies()
    w.request("s.a", b"x" * 100, reply=f"_INBOX.p{n}")
    replies = w.take_replies()
    return replies[0][1] if replies else None


def test_the_leader_refuses_a_publish_the_cluster_has_no_room_for_unproposed():
    """A message counts its stored size (memory record: subject + data + 16 = 119 bytes)
    times the stream's 3 replicas; the other servers' reported bytes are added to ours."""
    w = world(max_memory=119 * 3 * 2)
    assert publish(w, 1) is None                  # 357 of 714: proposed
    w.apply(KEY)
    assert w.accounts["$G"].usage() == (119, 0)
    # n2 and n3 store it too: their reports bring the account to 357; one more fits
    assert w.c.usage_received("n2", encode_usage({"$G": (119, 0)})) == []
    assert w.c.usage_received("n3", encode_usage({"$G": (119, 0)})) == []
    assert publish(w, 2) is None
    w.apply(KEY)
    w.c.usage_received("n2", encode_usage({"$G": (238, 0)}))
    w.c.usage_received("n3", encode_usage({"$G": (238, 0)}))
    assert publish(w, 3) == {"error": FULL, "stream": "S", "seq": 0}
    assert w.groups[KEY].proposals == []         # nothing proposed for it
    # before the reports came, the same publish was proposed (the leader counts what it knew)
    w.c.usage.remote.clear()
    assert publish(w, 4) is None and len(w.groups[KEY].proposals) == 1


def test_reports_of_a_server_that_left_the_meta_group_stop_counting():
    w = world(max_memory=1000)
    w.c.usage_received("n4", encode_usage({"$G": (10_000, 0)}))     # not a member
    assert publish(w, 1) is None
    w.c.usage_received("n2", encode_usage({"$G": (10_000, 0)}))     # a member
    assert publish(w, 2) == {"error": FULL, "stream": "S", "seq": 0}


def test_a_malformed_report_is_told_and_dropped():
    w = world(max_memory=1000)
    actions = w.c.usage_received("n2", b"\x93\x01")
    w.run(actions)
    assert any("malformed jsusage frame from n2" in f["message"] for f in w.events_named("config_warning"))
    assert w.c.usage.remote == {}


def test_the_report_names_only_byte_limited_accounts():
    w = World({"n1": (), "n2": ()}, accounts=("A", "B"))
    assert w.c.usage_report(T0) is None                    # no limits: nothing sent
    w.accounts["A"].limits = AccountLimits(max_memory=10)
    assert decode_usage(w.c.usage_report(T0), ["A", "B"]) == {"A": (0, 0)}
    assert w.c.usage_report(T0 + 1) is None                 # unchanged, not a second yet
