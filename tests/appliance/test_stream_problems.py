"""The role's ``jetraft_stream_problems`` filter: what the health gate of verify.yml and the
day-two playbooks reads from a server's /jsz?accounts=true&streams=true&config=true."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

_PATH = Path(__file__).resolve().parents[2] / "roles/jetraft_server/filter_plugins/jetraft_streams.py"
_spec = importlib.util.spec_from_file_location("jetraft_streams", _PATH)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
problems = _mod.jetraft_stream_problems

ZONES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c"}
MEMBERS = list(ZONES)


def jsz(*streams: dict) -> dict:
    return {"server_id": "NABC", "streams": len(streams),
            "account_details": [{"name": "APP", "stream_detail": list(streams)}]}


def stream(name: str, leader: str | None, replicas: list[tuple[str, bool]], num: int = 3) -> dict:
    cluster = {"name": "c"}
    if leader:
        cluster["leader"] = leader
    cluster["replicas"] = [{"name": n, "current": cur, "active": 1} for n, cur in replicas]
    return {"name": name, "cluster": cluster, "config": {"name": name, "num_replicas": num}}


def test_a_whole_r3_stream_led_here_has_no_problem():
    assert problems(jsz(stream("S", "n1", [("n3", True), ("n5", True)])), "n1", ZONES, MEMBERS) == []


def test_a_stream_short_of_replicas_is_named_with_its_peers():
    assert problems(jsz(stream("S", "n1", [("n3", True)])), "n1", ZONES, MEMBERS) == [
        "APP > S: 2 of 3 replicas (n1, n3)"]


def test_a_replica_behind_or_offline_is_named():
    lagging = stream("S", "n1", [("n3", False), ("n5", True)])
    lagging["cluster"]["replicas"][1]["offline"] = True
    assert problems(jsz(lagging), "n1", ZONES, MEMBERS) == ["APP > S: not current on n3, n5"]


def test_a_stream_without_a_leader_is_named_by_every_server_holding_it():
    assert problems(jsz(stream("S", None, [])), "n4", ZONES, MEMBERS) == ["APP > S: no leader"]


def test_a_stream_led_elsewhere_is_left_to_its_leader():
    assert problems(jsz(stream("S", "n2", [("n3", False)])), "n1", ZONES, MEMBERS) == []


def test_two_replicas_in_one_zone_break_the_zone_rule():
    out = problems(jsz(stream("S", "n1", [("n2", True), ("n5", True)])), "n1", ZONES, MEMBERS)
    assert out == ["APP > S: two replicas in one zone (n1 in a, n2 in a, n5 in c)"]


def test_without_unique_zones_two_replicas_may_share_a_zone():
    out = problems(jsz(stream("S", "n1", [("n2", True), ("n5", True)])), "n1", ZONES, MEMBERS, False)
    assert out == []


def test_more_replicas_than_zones_need_not_be_in_distinct_zones():
    s = stream("S", "n1", [("n2", True), ("n3", True), ("n4", True), ("n5", True)], num=5)
    assert problems(jsz(s), "n1", ZONES, MEMBERS) == []


def test_a_replica_on_a_removed_server_is_named():
    s = stream("S", "n1", [("old-b2", True), ("n5", True)])
    assert problems(jsz(s), "n1", {**ZONES, "old-b2": "b"}, MEMBERS) == [
        "APP > S: replicas on servers outside the cluster: old-b2"]


def test_a_server_without_jetstream_has_nothing_to_report():
    assert problems({"server_id": "N", "disabled": True}, "n1", ZONES, MEMBERS) == []


@pytest.mark.parametrize("answer", [None, "text", {"streams": 1}])
def test_an_answer_that_is_no_jsz_is_refused(answer):
    with pytest.raises(AnsibleFilterError, match="not a /jsz answer"):
        problems(answer, "n1")


def test_streams_without_account_details_are_refused_with_the_query_to_use():
    with pytest.raises(AnsibleFilterError, match="accounts=true&streams=true&config=true"):
        problems({"server_id": "N", "streams": 2}, "n1")
