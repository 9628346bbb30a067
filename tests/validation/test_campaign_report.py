"""``jetraft-validate`` on a fault campaign's run: the four campaign checks (queue,
node_divergence, linearizable, stale_reads) are in report.json with their figures and in
report.md as tables with the counterexample; a run without histories is validated exactly
as before; a check that cannot decide ("unknown") never makes a run invalid.
"""

from __future__ import annotations

import pytest

from jetraft.validation import guide, history, kvcheck, report, synthetic_history

pytestmark = pytest.mark.timeout(600)

#: The checks of a run without histories, in report order.
BEFORE = ["input", "topology", "election_safety", "term_monotonic", "log_matching", "leader_completeness",
          "availability", "replication", "stream_catchup", "ledger", "ttl", "counter"]
CAMPAIGN = ["queue", "node_divergence", "linearizable", "stale_reads"]


def queue_losing_one() -> tuple[list[dict], int]:
    """A queue history whose consumers and drain never saw one acknowledged value (the
    replicas' own copies still hold it); that value."""
    lines = synthetic_history.queue_history(600, seed=9)
    acked = [e["value"] for e in lines if e["f"] == "publish" and e["type"] == "ok"]
    lost = acked[300]
    return [e for e in lines if not (e["f"] in ("consume", "drain") and e["value"] == lost)], lost


def kv_with_a_stale_get() -> tuple[list[dict], dict]:
    """A KV history of keys k0, k1, k2 in which, after everything, a get of k1 returns an
    old write's value and revision; that get's line."""
    lines = synthetic_history.kv_history(3, 120, clients=6, seed=4)
    old = next(e for e in lines if e["key"] == "k1" and e["type"] == "ok" and e["f"] == "put")
    t = max(e["time_ns"] for e in lines)
    stale = synthetic_history.line("r", "kv", 999, "ok", "get", t + 200, key="k1", node="n3", value=old["value"],
                                   revision=old["revision"])
    lines += [synthetic_history.line("r", "kv", 999, "invoke", "get", t + 100, key="k1", node="n3"), stale]
    return lines, stale


@pytest.fixture(scope="module")
def invalid_campaign(campaign_run, jetraft_validate):
    """jetraft-validate on a campaign run with a lost value and a stale get:
    (exit code, stderr, report.json, report.md, the lost value, the stale get's line)."""
    queue, lost = queue_losing_one()
    kv, stale = kv_with_a_stale_get()
    root = campaign_run("campaign", queue=queue, kv=kv)
    code, stderr, doc = jetraft_validate(root, "--examples", "20")
    return code, stderr, doc, (root / "report.md").read_text(), lost, stale


def test_the_campaign_checks_are_in_report_json(invalid_campaign):
    code, stderr, doc, _, lost, stale = invalid_campaign
    assert code == 1, stderr[-3000:]
    assert list(doc["checks"]) == BEFORE + CAMPAIGN
    assert all(doc["checks"][name]["valid"] is True for name in BEFORE)
    for name in CAMPAIGN:
        assert doc["checks"][name]["meaning"] == guide.GUIDES[name].meaning
        assert "history/" in guide.GUIDES[name].unknown
    checks = doc["checks"]
    queue = checks["queue"]
    assert (queue["valid"], queue["count"]) == (False, 1)
    assert queue["details"]["lost"] == {"prefix": 0, "middle": 1, "postfix": 0}
    [example] = queue["examples"]
    assert (example["problem"], example["epoch"], example["value"]) == ("lost", "middle", lost)
    # the replicas still hold it: their copies disagree with the drain at its sequence
    nodes = checks["node_divergence"]
    assert nodes["valid"] is False and nodes["details"]["lost_on_node"] == {"n1": 0, "n2": 0, "n3": 0}
    assert nodes["details"]["divergent_kinds"] == {"not in the drain": 1}
    lin = checks["linearizable"]
    assert (lin["valid"], lin["count"]) == (False, 1)
    assert {k: v["valid"] for k, v in lin["details"]["keys"].items()} == {"k0": True, "k1": False, "k2": True}
    [bad] = lin["examples"]
    assert (bad["key"], bad["f"], bad["process"], bad["revision"]) == ("k1", "get", 999, stale["revision"])
    assert lin["details"]["counterexamples"]["k1"]["failed"]["complete_ns"] == stale["time_ns"]
    stale_reads = checks["stale_reads"]
    assert (stale_reads["valid"], stale_reads["count"], stale_reads["details"]["per_key"]) == (False, 1, {"k1": 1})
    assert stale_reads["examples"][0]["revision"] == stale["revision"]
    assert stale_reads["examples"][0]["write_revision"] > stale["revision"]


def test_the_terminal_names_the_histories_and_each_campaign_verdict(invalid_campaign):
    _, stderr, _, _, _, _ = invalid_campaign
    assert stderr.splitlines()[0].endswith(", histories kv, queue")
    for name in CAMPAIGN:
        assert f"  {name}: INVALID" in stderr


def test_report_md_shows_the_campaign_tables_and_the_counterexample(invalid_campaign):
    _, _, doc, md, lost, stale = invalid_campaign
    assert md.startswith("# jetraft validation: INVALID")
    queue = md.split("## Fault campaign: queue\n", 1)[1].split("\n## ", 1)[0]
    assert "| lost prefix | lost middle | lost postfix |" in queue and "\n| 0 | 1 | 0 | 0 | 0 | 0 |" in queue
    copies = md.split("## Fault campaign: each replica's own copy\n", 1)[1].split("\n## ", 1)[0]
    assert "| n2 | 0 | 0 | 0 | 0 |" in copies and "Divergent sequences: 1 (not in the drain 1)." in copies
    keys = md.split("## Fault campaign: KV keys\n", 1)[1].split("\n## ", 1)[0]
    assert "\n| k1 | **INVALID** |" in keys and "\n| k0 | valid |" in keys
    example = md.split("## Counterexample: key k1\n", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in example.splitlines() if r.startswith("| ") and r[2].isdigit()]
    assert rows[-1].startswith(f"| {len(rows)} | 999 | n3 | get | {stale['value']} | - | ok | {stale['revision']} |")
    assert rows[-1].endswith("| not linearizable from here |")
    # each campaign check's own section: what it means and where to look next
    section = md.split("\n## linearizable\n", 1)[1].split("\n## ", 1)[0]
    assert "Next steps" in section and "history/kv.jsonl" in section
    section = md.split("\n## queue\n", 1)[1].split("\n## ", 1)[0]
    assert f"value {lost}" in section and "history/queue.jsonl" in section


def test_a_run_without_histories_is_validated_as_before(campaign_run, jetraft_validate):
    root = campaign_run("plain")
    code, stderr, doc = jetraft_validate(root)
    assert code == 0, stderr[-3000:]
    assert doc["valid"] is True and list(doc["checks"]) == BEFORE
    assert all(c["valid"] is True for c in doc["checks"].values())
    assert "histories" not in stderr.splitlines()[0]
    md = (root / "report.md").read_text()
    assert md.startswith("# jetraft validation: VALID") and "Fault campaign" not in md


def test_a_campaign_run_with_a_valid_queue_and_no_kv_history_is_valid(campaign_run, jetraft_validate):
    root = campaign_run("queue-only", queue=synthetic_history.queue_history(400, seed=4))
    code, stderr, doc = jetraft_validate(root)
    assert code == 0, stderr[-3000:]
    verdicts = {name: doc["checks"][name]["valid"] for name in CAMPAIGN}
    assert verdicts == {"queue": True, "node_divergence": True, "linearizable": "unknown",
                        "stale_reads": "unknown"}
    assert doc["valid"] is True
    assert "linearizable: unknown (history/kv.jsonl holds no operation" in stderr


def test_a_key_whose_search_reaches_its_bound_is_unknown_and_not_a_failure(spark, tmp_path, kv_history):
    h = kv_history()
    for i in range(22):
        h.op(i, "put", i, None, value=i, key="x")
    h.op(99, "get", 100, 200, value=999, revision=50, key="x")
    lines = h.lines + synthetic_history.kv_history(1, 100, clients=3, seed=2)
    synthetic_history.write(tmp_path, lines, "kv")
    frame = history.read(spark, str(tmp_path))
    try:
        lin, stale = kvcheck.check_kv(frame, 10, max_steps=50_000)
    finally:
        frame.unpersist()
    assert lin.valid == "unknown" and lin.count == 0
    assert lin.details["unknown_keys"] == ["x"]
    assert lin.details["keys"]["x"]["bound"] == "steps" and lin.details["keys"]["k0"]["valid"] is True
    assert stale.valid is True and stale.details["gets"] > 0
    assert report.verdict([lin, stale]) is True


def test_a_campaign_run_without_event_logs_is_judged_on_its_histories(tmp_path, jetraft_validate):
    """nats-server, the campaign's control, writes no event log: its runs are checked on
    their histories alone, every other check unknown and saying why, and a lost value
    still makes the run invalid."""
    queue, lost = queue_losing_one()
    synthetic_history.write(tmp_path, queue, "queue")
    synthetic_history.write(tmp_path, synthetic_history.kv_history(3, 60, clients=4, seed=2), "kv")
    code, stderr, doc = jetraft_validate(tmp_path)
    assert code == 1, stderr[-3000:]
    assert "no event log (servers that write none, such as nats-server" in stderr.splitlines()[0]
    assert list(doc["checks"]) == BEFORE + CAMPAIGN
    for name in BEFORE:
        check = doc["checks"][name]
        assert check["valid"] == "unknown" and "no event log" in check["details"]["reason"], name
    assert (doc["checks"]["queue"]["valid"], doc["checks"]["queue"]["count"]) == (False, 1)
    assert doc["checks"]["queue"]["examples"][0]["value"] == lost
    assert doc["checks"]["linearizable"]["valid"] is True
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# jetraft validation: INVALID") and "## Fault campaign: queue" in md


def test_a_run_with_neither_event_logs_nor_histories_is_refused(tmp_path, jetraft_validate):
    (tmp_path / "notes.txt").write_text("nothing to validate")
    code, stderr, doc = jetraft_validate(tmp_path)
    assert code == 2 and doc is None
    assert "holds no logs/<host>/events.jsonl" in stderr
