"""The campaign's queue checks (jetraft.validation.queueset) on synthetic histories: each
anomaly injected into a valid history is found, with the value, sequence or node involved;
a valid history, with publishes that failed or timed out, passes both checks.

The histories come from jetraft.validation.synthetic_history (3 publishers, consumers, the
drain, the copies of n1, n2 and n3); the anomalies are edits of their lines.
"""

from __future__ import annotations

import pytest

from jetraft.validation import history, queueset, synthetic_history

pytestmark = pytest.mark.timeout(300)

LIMIT = 50
NEVER_SENT = 10**9


def checks(spark, root, lines):
    synthetic_history.write(root, lines, "queue")
    frame = history.read(spark, str(root))
    try:
        return queueset.check_queue(frame, LIMIT), queueset.check_node_divergence(frame, LIMIT)
    finally:
        frame.unpersist()


def published(lines) -> dict[int, dict]:
    """value -> {invoke_ns, outcome, seq} of every publish."""
    out: dict[int, dict] = {}
    for e in lines:
        if e["f"] == "publish":
            p = out.setdefault(e["value"], {})
            if e["type"] == "invoke":
                p["invoke_ns"] = e["time_ns"]
            else:
                p["outcome"], p["seq"] = e["type"], e["revision"]
    return out


def drained(lines) -> list[tuple[int, int]]:
    return [(e["revision"], e["value"]) for e in lines if e["f"] == "drain"]


@pytest.fixture(scope="module")
def valid(spark, tmp_path_factory):
    lines = synthetic_history.queue_history(3000, seed=5, info=0.02, fail=0.02)
    return lines, checks(spark, tmp_path_factory.mktemp("valid"), lines)


def test_a_valid_history_passes_both_checks(valid):
    lines, (queue, nodes) = valid
    pubs = published(lines)
    stored = {v for _, v in drained(lines)}
    assert (queue.valid, queue.count, nodes.valid, nodes.count) == (True, 0, True, 0)
    d = queue.details
    assert d["attempted"] == 3000
    assert d["acknowledged"] == sum(1 for p in pubs.values() if p["outcome"] == "ok")
    assert d["failed"] == sum(1 for p in pubs.values() if p["outcome"] == "fail") > 0
    # a publish that timed out and was stored anyway is recovered, not offending
    recovered = sum(1 for v, p in pubs.items() if p["outcome"] == "info" and v in stored)
    assert d["recovered"] == recovered > 0 and d["recovered_after_fail"] == 0
    assert d["lost"] == {"prefix": 0, "middle": 0, "postfix": 0}
    assert d["drained"] == len(stored) and d["consumed"] > 0
    assert nodes.details["nodes"] == ["n1", "n2", "n3"]
    assert nodes.details["lost_on_node"] == {"n1": 0, "n2": 0, "n3": 0} and nodes.details["divergent"] == 0


@pytest.fixture(scope="module")
def anomalous(spark, tmp_path_factory):
    """The valid history with: the first two and last three stored values (in invocation
    order) and one in the middle never read; a value read that was never published and a
    payload that is not a value; an acknowledged value twice in the drain; a consumer
    reading a value at another sequence than acknowledged."""
    lines = synthetic_history.queue_history(3000, seed=5, info=0.02, fail=0.02)
    pubs = published(lines)
    stored = sorted((v for _, v in drained(lines)), key=lambda v: pubs[v]["invoke_ns"])
    acked = [v for v in stored if pubs[v]["outcome"] == "ok"]
    prefix, postfix = stored[:2], stored[-3:]
    middle = [acked[len(acked) // 2]]
    assert all(pubs[v]["outcome"] == "ok" for v in prefix + postfix)
    gone = set(prefix + middle + postfix)
    lines = [e for e in lines if not (e["f"] in ("consume", "drain") and e["value"] in gone)]
    top = max(seq for seq, _ in drained(lines))
    end = max(e["time_ns"] for e in lines)
    dup = acked[100]
    lines.append(synthetic_history.line("r", "queue", 900, "ok", "drain", end + 1, value=NEVER_SENT,
                                        revision=top + 1, node="n1"))
    lines.append(synthetic_history.line("r", "queue", 900, "ok", "consume", end + 2, value=None,
                                        revision=top + 2, node="n2"))
    lines.append(synthetic_history.line("r", "queue", 900, "ok", "drain", end + 3, value=dup,
                                        revision=top + 3, node="n1"))
    misplaced = next(e for e in lines if e["f"] == "consume" and e["value"] == acked[200])
    misplaced["revision"] += 7
    facts = {"prefix": prefix, "middle": middle, "postfix": postfix, "dup": dup, "misplaced": acked[200],
             "pubs": pubs}
    return facts, checks(spark, tmp_path_factory.mktemp("anomalous"), lines)[0]


def found(queue, problem: str) -> list[dict]:
    return [e for e in queue.examples if e["problem"] == problem]


def test_the_history_with_anomalies_is_invalid_with_each_counted(anomalous):
    _, queue = anomalous
    assert queue.valid is False
    d = queue.details
    assert d["lost"] == {"prefix": 2, "middle": 1, "postfix": 3}
    assert (d["unexpected"], d["duplicated"], d["misplaced"]) == (2, 1, 1)
    assert queue.count == 6 + 2 + 1 + 1


@pytest.mark.parametrize("epoch", ["prefix", "middle", "postfix"])
def test_lost_values_by_epoch(anomalous, epoch):
    facts, queue = anomalous
    lost = [e for e in found(queue, "lost") if e["epoch"] == epoch]
    assert sorted(e["value"] for e in lost) == sorted(facts[epoch])
    for e in lost:
        p = facts["pubs"][e["value"]]
        assert (e["outcome"], e["ack_seq"], e["read_seqs"]) == ("ok", p["seq"], None)
        assert e["wall_ns"] == e["ack_wall_ns"] > e["invoke_wall_ns"] > 10**18


def test_a_value_read_but_never_published(anomalous):
    _, queue = anomalous
    assert sorted((e["value"] is None, e["value"]) for e in found(queue, "unexpected")) == [
        (False, NEVER_SENT), (True, None)]


def test_a_value_stored_twice(anomalous):
    facts, queue = anomalous
    [dup] = found(queue, "duplicated")
    assert dup["value"] == facts["dup"] and len(dup["drain_seqs"]) == 2
    assert facts["pubs"][facts["dup"]]["seq"] in dup["drain_seqs"]


def test_a_value_read_at_another_sequence_than_acknowledged(anomalous):
    facts, queue = anomalous
    [e] = found(queue, "misplaced")
    seq = facts["pubs"][facts["misplaced"]]["seq"]
    assert e["value"] == facts["misplaced"] and e["ack_seq"] == seq and seq + 7 in e["read_seqs"]


def test_the_examples_show_one_of_each_problem_before_more_of_any(anomalous):
    _, queue = anomalous
    assert [e["problem"] for e in queue.examples[:5]] == ["lost", "misplaced", "duplicated", "unexpected", "lost"]


@pytest.fixture(scope="module")
def diverged(spark, tmp_path_factory):
    """The valid history, but n2's own copy lacks an acknowledged value and n3 holds another
    value than the others (and the drain) at one sequence."""
    lines = synthetic_history.queue_history(3000, seed=5, info=0.02, fail=0.02)
    pubs = published(lines)
    acked = sorted((v for v, p in pubs.items() if p["outcome"] == "ok"), key=lambda v: pubs[v]["invoke_ns"])
    on_n2, on_n3 = acked[1000], acked[2000]
    lines = [e for e in lines if not (e["f"] == "read-node" and e["node"] == "n2" and e["value"] == on_n2)]
    swapped = next(e for e in lines if e["f"] == "read-node" and e["node"] == "n3" and e["value"] == on_n3)
    swapped["value"] = NEVER_SENT
    facts = {"n2": on_n2, "n3": on_n3, "pubs": pubs}
    return facts, checks(spark, tmp_path_factory.mktemp("diverged"), lines)


def test_a_value_lost_on_one_node_and_a_divergent_sequence(diverged):
    facts, (queue, nodes) = diverged
    assert queue.valid is True          # the drain and the consumers saw everything
    assert nodes.valid is False
    d = nodes.details
    assert d["lost_on_node"] == {"n1": 0, "n2": 1, "n3": 1}
    assert d["lost_on_node_epochs"]["n2"] == {"prefix": 0, "middle": 1, "postfix": 0}
    assert d["divergent"] == 2
    assert d["divergent_kinds"] == {"missing on a node": 1, "nodes hold different values": 1,
                                    "differs from the drain": 1}
    assert nodes.count == 2 + 2
    lost = {e["node"]: e for e in nodes.examples if e["problem"] == "lost on node"}
    assert (lost["n2"]["value"], lost["n2"]["ack_seq"]) == (facts["n2"], facts["pubs"][facts["n2"]]["seq"])
    assert lost["n3"]["value"] == facts["n3"]
    div = {e["seq"]: e for e in nodes.examples if e["problem"] == "divergent"}
    s2, s3 = facts["pubs"][facts["n2"]]["seq"], facts["pubs"][facts["n3"]]["seq"]
    assert div[s2]["kinds"] == ["missing on n2"] and div[s2]["copies"] == {"n1": facts["n2"], "n3": facts["n2"]}
    assert div[s3]["kinds"] == ["nodes hold different values", "differs from the drain"]
    assert div[s3]["copies"] == {"n1": facts["n3"], "n2": facts["n3"], "n3": NEVER_SENT}
    assert div[s3]["drained"] == [facts["n3"]]


def test_without_any_replica_read_divergence_is_unknown(spark, tmp_path):
    lines = [e for e in synthetic_history.queue_history(200, seed=2) if e["f"] != "read-node"]
    queue, nodes = checks(spark, tmp_path, lines)
    assert queue.valid is True and nodes.valid == "unknown" and nodes.details["nodes"] == []


def two_streams() -> list[dict]:
    """An R3 stream's history (CAMPAIGN on n1-n3) beside an R5 stream's (CAMPAIGN5 on n1-n5,
    its values and processes apart), as a run on seven servers records them."""
    r3 = synthetic_history.queue_history(600, seed=7)
    r5 = synthetic_history.queue_history(600, seed=8, nodes=("n1", "n2", "n3", "n4", "n5"))
    for e in r3:
        e["key"] = "CAMPAIGN"
    for e in r5:
        e.update(key="CAMPAIGN5", process=e["process"] + 1000,
                 value=None if e["value"] is None else e["value"] + 10_000_000)
    return sorted(r3 + r5, key=lambda e: e["time_ns"])


def test_two_streams_are_judged_each_on_its_own_replicas(spark, tmp_path):
    queue, nodes = checks(spark, tmp_path, two_streams())
    assert (queue.valid, queue.count, queue.details["attempted"]) == (True, 0, 1200)
    # n4 and n5 hold no replica of CAMPAIGN: not missing its values
    assert (nodes.valid, nodes.count) == (True, 0), nodes.examples[:3]
    assert nodes.details["nodes"] == ["n1", "n2", "n3", "n4", "n5"]
    assert nodes.details["streams"]["CAMPAIGN"]["nodes"] == ["n1", "n2", "n3"]
    assert nodes.details["streams"]["CAMPAIGN5"]["nodes"] == ["n1", "n2", "n3", "n4", "n5"]


def test_a_value_lost_on_a_replica_of_the_second_stream_names_that_stream(spark, tmp_path):
    lines = two_streams()
    copy = next(e for e in lines if e["f"] == "read-node" and e["node"] == "n4")
    lines.remove(copy)
    _, nodes = checks(spark, tmp_path, lines)
    assert nodes.valid is False
    assert nodes.details["streams"]["CAMPAIGN5"]["lost_on_node"] == 1
    assert nodes.details["streams"]["CAMPAIGN"]["lost_on_node"] == 0
    assert nodes.details["lost_on_node"]["n4"] == 1
    lost = [e for e in nodes.examples if e["problem"] == "lost on node"]
    assert [(e["stream"], e["node"], e["value"]) for e in lost] == [("CAMPAIGN5", "n4", copy["value"])]
