"""Each check on crafted runs: a valid run passes every check; each anomaly is detected by
its check, with the offending group, term, index, server or message in the report.

The runs come from jetraft.validation.synthetic (the files a lab run leaves, from a model of
RAFT groups). A Spark job takes seconds, so the anomalies are injected in two runs, each
anomaly of a run aimed at a different check: every other check must stay valid.
"""

from __future__ import annotations

import json
import re

import pytest

from jetraft.validation import synthetic
from jetraft.validation.job import validate

pytestmark = pytest.mark.timeout(300)


def run(spark, root, *anomalies: str) -> dict:
    synthetic.generate(root, events=3000, groups=3, seed=7, anomalies=set(anomalies))
    doc = validate(spark, str(root), root)
    assert json.loads((root / "report.json").read_text()) == json.loads(json.dumps(doc, default=str))
    return doc


#: Two runs with anomalies, and the checks each must find invalid.
RUNS = {
    "first": ({"two_leaders", "divergent_entry", "lost_ack", "replica_never_current", "corrupt_line",
               "foreign_server", "ttl_outlived", "counter_missing"},
              {"election_safety", "log_matching", "ledger", "replication", "input", "topology", "ttl",
               "counter"}),
    "second": ({"term_backwards", "stale_leader", "duplicate", "unexpected", "leaderless_fault",
                "counter_extra"},
               {"term_monotonic", "leader_completeness", "ledger", "availability", "counter"}),
}


@pytest.fixture(scope="module")
def reports(spark, tmp_path_factory):
    out = {}
    for name, (anomalies, _) in RUNS.items():
        out[name] = run(spark, tmp_path_factory.mktemp(name), *sorted(anomalies))
    return out


def verdicts(doc: dict) -> dict[str, object]:
    return {name: c["valid"] for name, c in doc["checks"].items()}


def test_a_valid_run_passes_every_check(spark, tmp_path):
    doc = run(spark, tmp_path / "run")
    assert doc["valid"] is True
    assert verdicts(doc) == dict.fromkeys(doc["checks"], True)
    checks = doc["checks"]
    assert checks["topology"]["details"]["zones"] == {"a": 2, "b": 2, "c": 1}
    assert checks["log_matching"]["details"]["applied_more_than_once"] > 100
    fault = checks["availability"]["details"]["faults"][0]
    assert fault["drill"] == "kill-zone-a" and fault["keeps_quorum"]
    # the fault took both leaders: each was elected again off zone a, before the repair
    for group in fault["groups"].values():
        assert group["leader_at_fault"] in ("n1", "n2")
        assert group["leader_after"] not in ("n1", "n2") and group["seconds_to_leader"] > 0
    assert checks["replication"]["details"]["catch_ups"] >= 2
    # zone a's replicas installed snapshots on the repair; its stream replicas caught up
    assert checks["log_matching"]["details"]["snapshot_indexes_also_applied"] >= 3
    catchups = checks["stream_catchup"]["details"]
    assert catchups["count"] >= 3 and catchups["failed"] == 1 and catchups["unfinished"] == 0
    assert len(catchups["damaged_stores"]) == 1
    assert checks["ledger"]["details"]["lost"] == 0
    # the drill's TTL'd messages were each seen gone 0.25 s after their expiry; its counter
    # holds the acknowledged sum, one increment of unknown outcome allowing 3 more
    ttl = checks["ttl"]["details"]["per_drill"]["kill-zone-a"]
    assert (ttl["acknowledged"], ttl["seen_gone"], ttl["never_seen_gone"]) == (11, 11, 0)
    assert ttl["gone_after_expiry_max_s"] == 0.254
    counter = checks["counter"]["details"]["per_drill"]["kill-zone-a"]
    assert (counter["final"], counter["low"], counter["high"]) == (22, 22, 25)
    assert (counter["acknowledged"], counter["unknown"], counter["failed"]) == (14, 1, 1)
    report = (tmp_path / "run" / "report.md").read_text()
    assert report.startswith("# jetraft validation: VALID")
    assert "| kill-zone-a | KILL_ZONE_A_COUNTER | 14 | 1 | 1 | 2 | 22 | 22..25 | 22 | 14 |" in report
    assert (tmp_path / "run" / "timeline.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", RUNS)
def test_each_run_with_anomalies_is_invalid_in_exactly_their_checks(reports, name):
    doc = reports[name]
    assert doc["valid"] is False
    assert {n for n, v in verdicts(doc).items() if v is False} == RUNS[name][1]
    assert (doc["checks"]["ledger"]["count"], doc["checks"]["input"]["count"]) == (
        (1, 1) if name == "first" else (2, 0))


def examples(reports, name: str, check: str, problem: str | None = None) -> list[dict]:
    c = reports[name]["checks"][check]
    assert c["valid"] is False and c["count"] >= 1
    return [e for e in c["examples"] if problem is None or e.get("problem") == problem]


def test_two_leaders_in_one_term(reports):
    [ex] = examples(reports, "first", "election_safety")
    assert ex["group"] == "S-R3F-g2" and len(ex["leaders"]) == 2


def test_a_term_going_backwards(reports):
    [ex] = examples(reports, "second", "term_monotonic")
    assert ex["group"] == "S-R3F-g2" and ex["term"] == ex["term_before"] - 1


def test_two_different_entries_at_one_index(reports):
    [ex] = examples(reports, "first", "log_matching")
    assert ex["group"] == "S-R3F-g2"
    assert len({a["hash"] for a in ex["applied"]}) == 2 and len({a["term"] for a in ex["applied"]}) == 1


def test_a_leader_missing_committed_entries(reports):
    [ex] = examples(reports, "second", "leader_completeness")
    assert ex["group"] == "S-R3F-g2" and ex["committed_before"] == ex["last_index"] + 3


def test_a_missing_acknowledged_message(reports):
    [ex] = examples(reports, "first", "ledger", "lost")
    assert ex["drill"] == "kill-zone-a" and ex["acked_seq"] >= 1
    assert reports["first"]["checks"]["ledger"]["details"]["lost"] == 1


def test_a_duplicate(reports):
    [ex] = examples(reports, "second", "ledger", "duplicate")
    assert ex["problem"] == "duplicate" and ex["msg_id"] == "kill-zone-a-1"
    assert len(ex["stored_seqs"]) == 2


def test_a_message_never_published(reports):
    [ex] = examples(reports, "second", "ledger", "unexpected")
    assert (ex["problem"], ex["msg_id"]) == ("unexpected", "kill-zone-a-never-sent")


def test_a_message_served_3_s_after_its_ttl_passed(reports):
    [ex] = examples(reports, "first", "ttl")
    assert (ex["drill"], ex["stream"], ex["msg_id"], ex["stream_seq"]) == (
        "kill-zone-a", "KILL_ZONE_A_TTL", "kill-zone-a-ttl-7", 6)
    assert ex["ttl_s"] == 2.0 and ex["expires_ns"] == ex["stored_ns"] + 2_000_000_000
    assert ex["seen_s_after_expiry"] == 3.252 and ex["late_gets"] == 5
    assert reports["first"]["checks"]["ttl"]["details"]["outlived"] == 1


def test_a_counter_missing_an_acknowledged_increment(reports):
    [ex] = examples(reports, "first", "counter")
    assert (ex["problem"], ex["final"], ex["low"], ex["high"], ex["off_by"]) == (
        "acknowledged increments missing", 20, 22, 25, -2)
    # the stream had acknowledged the value 22 at the sequence it was read at
    assert (ex["final_seq"], ex["last_acked_seq"], ex["last_acked_val"]) == (14, 14, 22)


def test_a_counter_with_one_increment_too_many(reports):
    [ex] = examples(reports, "second", "counter")
    assert (ex["problem"], ex["final"], ex["high"], ex["off_by"]) == ("more than its increments", 27, 25, 2)
    assert reports["second"]["checks"]["ttl"]["valid"] is True


def test_a_replica_never_current(reports):
    [ex] = examples(reports, "first", "replication")
    assert ex["group"] == "S-R3F-g2" and ex["lag"] == 40 and ex["offline"] is True


def test_a_stream_left_without_a_leader_by_a_single_zone_loss(reports):
    [ex] = examples(reports, "second", "availability")
    assert ex["drill"] == "kill-zone-a" and ex["leaderless_groups"] == ["S-R3F-g1"]


def test_a_corrupt_line_is_reported_and_the_rest_still_checked(reports):
    [ex] = examples(reports, "first", "input")
    assert ex["problem"] == "not a JSON object of an event" and ex["host"] == "n1"
    assert reports["first"]["checks"]["log_matching"]["details"]["entries"] > 0


def test_a_server_outside_the_inventory(reports):
    found = examples(reports, "first", "topology")
    assert {"problem": "seen, not in the inventory", "server": "n99"} in found


def test_the_command_exits_by_the_verdict_and_names_a_missing_run(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    cli = Path(sys.executable).parent / "jetraft-validate"
    missing = subprocess.run([str(cli), str(tmp_path / "nowhere"), "--master", "local[1]"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2
    assert "no event log at" in missing.stderr and "collect_logs.yml" in missing.stderr
    root = tmp_path / "run"
    synthetic.generate(root, events=2000, groups=2, seed=3, anomalies={"lost_ack"})
    bad = subprocess.run([str(cli), str(root), "--master", "local[1]", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1, bad.stderr[-2000:]
    assert "INVALID" in bad.stderr + bad.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["checks"]["ledger"]["details"]["lost"] == 1


def test_meta_membership_changes_are_listed_once_each_in_the_report_and_the_timeline(spark, tmp_path):
    root = tmp_path / "run"
    synthetic.generate(root, events=2000, groups=2, seed=5)
    last = json.loads((root / "logs" / "n1" / "events.jsonl").read_text().splitlines()[-1])
    base = last["ts"][:19]

    def line(server: str, second: int, event: str, **fields) -> str:
        return json.dumps({"ts": f"{base}.{second:09d}Z", "v": last["v"], "server_name": server,
                           "level": "info", "event": event, **fields})
    meta = {"group": "_meta_", "term": 9}
    with (root / "logs" / "n5" / "events.jsonl").open("a") as f:
        f.write(line("n5", 100, "jetstream_meta_store_replaced", store="a", mine="b") + "\n")
    for server in ("n1", "n2", "n3"):       # each change logged by three members: listed once
        with (root / "logs" / server / "events.jsonl").open("a") as f:
            f.write(line(server, 200, "raft_peer_removed", peer="n5", index=70, learner=False, **meta) + "\n")
            f.write(line(server, 300, "raft_peer_added", peer="n5", index=71, learner=True, **meta) + "\n")
            f.write(line(server, 400, "raft_peer_promoted", peer="n5", index=72, **meta) + "\n")
    doc = validate(spark, str(root), root)
    assert doc["checks"]["topology"]["valid"] is True
    rows = [(m["server"], m["change"], m["index"], m["seen_by"])
            for m in doc["checks"]["topology"]["details"]["membership"]]
    assert rows == [("n5", "came back with another store (a new member)", None, 1),
                    ("n5", "removed", 70, 3), ("n5", "added as a learner", 71, 3),
                    ("n5", "promoted to voter", 72, 3)]
    text = (root / "report.md").read_text()
    assert "## Meta group membership" in text
    assert "| n5 | added as a learner | 71 | 3 |" in text.replace(f"{base}.000000300Z | ", "")


def test_a_replaced_machines_log_is_read_and_its_successor_starts_its_terms_anew(spark, tmp_path):
    """A host whose machine was replaced (a new store, a new RAFT identity) has two event
    logs: the old machine's (events.replaced-*.jsonl) and the new one's. Both are read; the
    new one's terms start again from 0 without a term_monotonic violation, while the same
    decrease within one log is one, unless the server deleted its replica of the group in
    between (``raft_group_closed`` with ``deleted``)."""
    root = tmp_path / "run"
    synthetic.generate(root, events=2000, groups=2, seed=11)
    logs = root / "logs" / "n5"
    old = (logs / "events.jsonl").read_text().splitlines()
    last = json.loads(old[-1])
    group = next(json.loads(x)["group"] for x in old if '"raft_became_follower"' in x
                 and json.loads(x).get("group", "").startswith("S-"))
    later = json.dumps({"ts": last["ts"][:19] + ".999999999Z", "v": last["v"], "server_name": "n5",
                        "level": "info", "event": "raft_became_follower", "group": group,
                        "term": 0, "leader": None, "index": 0, "peers": [], "zone": "c"})
    (logs / "events.replaced-1.jsonl").write_text("\n".join(old) + "\n")
    (logs / "events.jsonl").write_text(later + "\n")
    doc = validate(spark, str(root), root)
    assert doc["checks"]["term_monotonic"]["valid"] is True
    assert doc["checks"]["topology"]["valid"] is True
    assert doc["checks"]["log_matching"]["details"]["entries"] > 0

    (logs / "events.replaced-1.jsonl").unlink()
    (logs / "events.jsonl").write_text("\n".join(old) + "\n" + later + "\n")
    doc = validate(spark, str(root), root / "one-log")
    assert doc["checks"]["term_monotonic"]["valid"] is False

    # the server's replica of the group was deleted in between (removed from the stream,
    # placed there again later): a new member of the group, with a new log
    closed = json.dumps({"ts": last["ts"][:19] + ".999999998Z", "v": last["v"], "server_name": "n5",
                         "level": "info", "event": "raft_group_closed", "group": group,
                         "deleted": True, "index": 0, "peers": [], "leader": None, "zone": "c"})
    (logs / "events.jsonl").write_text("\n".join(old) + "\n" + closed + "\n" + later + "\n")
    doc = validate(spark, str(root), root / "deleted-between")
    assert doc["checks"]["term_monotonic"]["valid"] is True


#: A path in the run directory that each check's next steps point to.
LOOK_AT = {"input": "logs/n1/events.jsonl", "topology": "logs/*/events*.jsonl",
           "election_safety": "logs/", "term_monotonic": "logs/", "log_matching": "logs/",
           "leader_completeness": "logs/", "availability": "kill-zone-a.ledger.jsonl",
           "replication": "logs/", "ledger": "kill-zone-a.stream.jsonl", "ttl": "kill-zone-a.ttl.jsonl",
           "counter": "kill-zone-a.counter.jsonl"}


@pytest.mark.parametrize("name", RUNS)
def test_every_invalid_check_says_what_it_means_shows_its_evidence_and_where_to_look(reports, name, tmp_path):
    from jetraft.validation import guide, report

    doc = reports[name]
    report.write_markdown(tmp_path / "report.md", doc, None)
    md = (tmp_path / "report.md").read_text()
    assert "```json" not in md
    for check in RUNS[name][1]:
        c = doc["checks"][check]
        section = md.split(f"\n## {check}\n", 1)[1].split("\n## ", 1)[0]
        assert f"Verdict: **INVALID**, {c['count']} offending." in section
        assert f"What this means: {guide.GUIDES[check].meaning}." in section
        header = "| " + " | ".join(guide.evidence(c["examples"], doc["groups"])[0]) + " |"
        table = section.split(header + "\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert len(table) == 1 + min(len(c["examples"]), report.MD_EXAMPLES)   # the rule, then rows
        steps = section.split("Next steps (paths in the run directory):\n\n", 1)[1].split("\n\n", 1)[0]
        assert steps.startswith("- ") and LOOK_AT[check] in steps, (check, steps)


def test_a_retired_servers_log_is_read_and_only_the_inventorys_servers_are_expected(spark, tmp_path):
    """A server taken out of the cluster (playbooks/scale_down.yml: the inventory's group
    ``jetraft_retired``) is listed in topology.json's ``retired``: its event log is read
    and it is no stranger, while the servers that stay are the inventory. Left out of
    ``retired``, its log makes it a server seen that is not in the inventory."""
    root = tmp_path / "run"
    synthetic.generate(root, events=2000, groups=2, seed=11)
    topology = json.loads((root / "topology.json").read_text())
    gone = topology["servers"].pop()
    (root / "topology.json").write_text(json.dumps({**topology, "retired": [gone]}))
    doc = validate(spark, str(root), root)
    topo = doc["checks"]["topology"]
    assert topo["valid"] is True, topo["examples"]
    assert topo["details"]["inventory"]["retired"] == [gone["server_name"]]
    assert topo["details"]["inventory"]["servers"] == 4

    (root / "topology.json").write_text(json.dumps(topology))
    doc = validate(spark, str(root), root / "not-retired")
    assert {"problem": "seen, not in the inventory", "server": gone["server_name"]} \
        in doc["checks"]["topology"]["examples"]


def test_without_a_unique_tag_a_servers_zone_is_its_az_tag(spark, tmp_path):
    """A server without ``unique_tag`` (``jetraft_server_unique_zones: false``) logs no zone
    in its RAFT events: its zone is then its ``az:<zone>`` server tag (``server_starting``),
    still held against the inventory's."""
    root = tmp_path / "run"
    synthetic.generate(root, events=2000, groups=2, seed=12)
    for log in (root / "logs").glob("*/events.jsonl"):
        log.write_text(re.sub(r',"zone":"[a-z]+"', "", log.read_text()))
    doc = validate(spark, str(root), root)
    topo = doc["checks"]["topology"]
    assert topo["valid"] is True, topo["examples"]
    assert sum(topo["details"]["zones"].values()) == 5 and "None" not in topo["details"]["zones"]

    topology = json.loads((root / "topology.json").read_text())
    moved = topology["servers"][0]
    elsewhere = "b" if moved["zone"] != "b" else "a"
    (root / "topology.json").write_text(json.dumps(
        {**topology, "servers": [{**moved, "zone": elsewhere}, *topology["servers"][1:]]}))
    doc = validate(spark, str(root), root / "moved")
    assert {"problem": "another zone than the inventory's", "server": moved["server_name"],
            "inventory": elsewhere, "seen": moved["zone"]} in doc["checks"]["topology"]["examples"]
