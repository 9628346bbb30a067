"""Linearizability of a KV key (jetraft.validation.linearizable), without Spark: each
anomaly a NATS KV bucket could show is found, with the shortest prefix that shows it;
histories with overlapping operations and operations of unknown outcome are accepted when
some order explains them; a search that would explode stops at its bound with "unknown";
a large history from a simulated register is checked valid in a few seconds.

Times are in ns on the controller's clock; each history is one key, ``k``.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from jetraft.validation import linearizable, synthetic_history
from jetraft.validation.history import pair


def verdict(h) -> bool | str:
    return linearizable.check(h.ops()).valid


# --------------------------------------------------------------------------- pairing


def test_invocations_pair_with_their_completions_per_process(kv_history):
    h = (kv_history().op(0, "put", 0, 30, value=1, revision=1)
         .op(1, "get", 10, 20, value=None, revision=None)
         .op(2, "update", 40, 50, "fail", value=2, expect=7)
         .op(3, "delete", 60, None))
    ops, problems = pair(h.lines)
    assert problems == []
    assert [(op.process, op.f, op.type, op.invoke_ns, op.complete_ns) for op in ops] == [
        (0, "put", "ok", 0, 30), (1, "get", "ok", 10, 20), (2, "update", "fail", 40, 50),
        (3, "delete", "info", 60, None)]          # never completed: unknown, as in Jepsen
    assert ops[2].expect == 7 and ops[2].revision is None


def test_lines_that_do_not_pair_are_reported():
    from jetraft.validation.synthetic_history import line

    lines = [line("r", "kv", 0, "invoke", "put", 0, key="k", value=1),
             line("r", "kv", 0, "invoke", "put", 5, key="k", value=2),      # 0 had one outstanding
             line("r", "kv", 1, "ok", "get", 7, key="k", value=1, revision=1),   # never invoked
             line("r", "kv", 0, "ok", "put", 9, key="k", value=2, revision=1)]
    ops, problems = pair(lines)
    assert [p.problem for p in problems] == [
        "invoked while another operation of its process was outstanding", "completed without an invocation"]
    assert [(op.value, op.type) for op in ops] == [(1, "info"), (2, "ok")]


def test_queue_reads_are_operations_of_their_own():
    from jetraft.validation.synthetic_history import line

    ops, problems = pair([line("r", "queue", 4, "ok", "drain", 100, value=9, revision=3, node="n1")])
    assert problems == [] and len(ops) == 1
    assert (ops[0].f, ops[0].value, ops[0].revision, ops[0].invoke_ns, ops[0].complete_ns) == ("drain", 9, 3, 100, 100)


# --------------------------------------------------------------------------- anomalies


def test_a_stale_get(kv_history):
    h = (kv_history().op(0, "put", 0, 10, value=1, revision=1).op(0, "put", 20, 30, value=2, revision=2)
         .op(1, "get", 40, 50, value=1, revision=1))
    assert verdict(h) is False
    [stale] = linearizable.stale_reads(h.ops())
    assert (stale["revision"], stale["write_revision"], stale["write_f"]) == (1, 2, "put")


def test_a_lost_write(kv_history):
    h = kv_history().op(0, "put", 0, 10, value=1, revision=1).op(1, "get", 20, 30, value=None, revision=None)
    assert verdict(h) is False
    assert len(linearizable.stale_reads(h.ops())) == 1


def test_two_creates_that_both_succeed(kv_history):
    h = kv_history().op(0, "create", 0, 10, value=1, revision=1).op(1, "create", 5, 15, value=2, revision=2)
    assert verdict(h) is False
    # with a delete that may fall between them, both may win
    h.op(2, "delete", 1, 12, revision=3)
    assert verdict(h) is False        # revision 3 must come before the second create's 2
    h2 = (kv_history().op(0, "create", 0, 10, value=1, revision=1).op(2, "delete", 1, 12, revision=2)
          .op(1, "create", 5, 15, value=2, revision=3))
    assert verdict(h2) is True


def test_an_update_accepted_on_a_wrong_expected_revision(kv_history):
    h = kv_history().op(0, "put", 0, 10, value=1, revision=5).op(0, "update", 20, 30, value=2, expect=3, revision=6)
    assert verdict(h) is False
    right = kv_history().op(0, "put", 0, 10, value=1, revision=5).op(0, "update", 20, 30, value=2, expect=5,
                                                                     revision=6)
    assert verdict(right) is True


def test_a_revision_that_goes_backwards(kv_history):
    h = kv_history().op(0, "put", 0, 10, value=1, revision=5).op(0, "put", 20, 30, value=2, revision=3)
    assert verdict(h) is False


def test_a_get_of_the_right_value_at_the_wrong_revision(kv_history):
    h = kv_history().op(0, "put", 0, 10, value=1, revision=5).op(1, "get", 20, 30, value=1, revision=4)
    assert verdict(h) is False


def test_a_failed_write_that_took_effect(kv_history):
    h = kv_history().op(0, "put", 0, 10, "fail", value=1).op(1, "get", 20, 30, value=1, revision=1)
    assert verdict(h) is False


# --------------------------------------------------------------------------- valid histories


def test_overlapping_writes_and_reads_in_either_order(kv_history):
    # two puts overlap; gets during and after them see either order, consistently
    h = (kv_history().op(0, "put", 0, 100, value=1, revision=2).op(1, "put", 10, 90, value=2, revision=1)
         .op(2, "get", 20, 30, value=2, revision=1).op(3, "get", 40, 120, value=1, revision=2)
         .op(4, "get", 130, 140, value=1, revision=2))
    assert verdict(h) is True
    # a get concurrent with a write may see the old value: linearizable, and not stale
    h2 = (kv_history().op(0, "put", 0, 10, value=1, revision=1).op(0, "put", 20, 60, value=2, revision=2)
          .op(1, "get", 30, 40, value=1, revision=1))
    assert verdict(h2) is True and linearizable.stale_reads(h2.ops()) == []


def test_a_create_race_one_wins_one_fails(kv_history):
    h = (kv_history().op(0, "create", 0, 50, value=1, revision=1).op(1, "create", 10, 40, "fail", value=2)
         .op(2, "get", 60, 70, value=1, revision=1))
    assert verdict(h) is True


def test_deleted_and_never_written_keys_read_as_absent(kv_history):
    h = (kv_history().op(0, "get", 0, 5, value=None, revision=None)
         .op(0, "put", 10, 20, value=1, revision=3).op(0, "delete", 30, 40, revision=4)
         .op(1, "get", 50, 60, value=None, revision=4).op(1, "update", 70, 80, value=2, expect=4, revision=7)
         .op(2, "get", 90, 95, value=2, revision=7))
    assert verdict(h) is True


def test_an_unknown_write_that_must_have_taken_effect(kv_history):
    base = kv_history().op(0, "put", 0, 10, value=1, revision=1).op(2, "get", 40, 50, value=2, revision=3)
    assert verdict(base) is False            # value 2 was never written
    base.op(1, "put", 20, None, value=2)        # ... unless this timed-out put took effect
    assert verdict(base) is True
    # an unknown update takes effect only on the revision it expected
    h = (kv_history().op(0, "put", 0, 10, value=1, revision=4).op(1, "update", 20, 30, "info", value=2, expect=4)
         .op(2, "get", 40, 50, value=2, revision=6).op(2, "update", 60, 70, value=3, expect=6, revision=8))
    assert verdict(h) is True
    wrong = (kv_history().op(0, "put", 0, 10, value=1, revision=4)
             .op(1, "update", 20, 30, "info", value=2, expect=3).op(2, "get", 40, 50, value=2, revision=6))
    assert verdict(wrong) is False


def test_an_unknown_write_cannot_take_effect_before_its_invocation(kv_history):
    h = (kv_history().op(0, "put", 0, 10, value=1, revision=1).op(2, "get", 20, 30, value=2, revision=3)
         .op(1, "put", 40, None, value=2))
    assert verdict(h) is False


def test_an_unknown_write_may_never_take_effect(kv_history):
    h = (kv_history().op(0, "put", 0, 10, value=1, revision=1).op(1, "put", 20, 30, "info", value=2)
         .op(2, "get", 40, 50, value=1, revision=1).op(3, "get", 60, 70, value=1, revision=1))
    assert verdict(h) is True


# --------------------------------------------------------------------------- bound


def test_a_search_that_explodes_stops_at_its_bound_with_unknown(kv_history):
    # 22 concurrent puts of unknown outcome, then a get of a value none wrote: every subset
    # of them, in every order, would have to be tried before the history is found wanting
    h = kv_history()
    for i in range(22):
        h.op(i, "put", i, None, value=i)
    h.op(99, "get", 100, 200, value=999, revision=50)
    started = time.monotonic()
    result = linearizable.check(h.ops(), max_steps=100_000)
    assert (result.valid, result.bound) == ("unknown", "steps") and result.steps == 100_001
    assert time.monotonic() - started < 30
    timed = linearizable.check(h.ops(), max_steps=10**12, max_seconds=0.5)
    assert (timed.valid, timed.bound) == ("unknown", "seconds")
    key = linearizable.check_key("k", h.lines, max_steps=100_000)
    assert key["valid"] == "unknown" and key["counterexample"] is None


# --------------------------------------------------------------------------- at scale


@pytest.fixture(scope="module")
def generated():
    """10 keys x about 500 operations, 50 clients (about 5 at once on a key), 2% of
    unknown outcome, from a simulated register: {key: lines}."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    for e in synthetic_history.kv_history(10, 500, clients=50, seed=7):
        by_key[e["key"]].append(e)
    return dict(by_key)


def test_a_large_generated_history_is_linearizable_within_seconds(generated):
    started = time.monotonic()
    results = [linearizable.check_key(k, lines) for k, lines in generated.items()]
    seconds = time.monotonic() - started
    assert [r["valid"] for r in results] == [True] * 10
    assert sum(r["ops"] for r in results) == 5000
    assert all(r["info"] > 0 and r["fail"] > 0 for r in results)    # unknown and failed ones in it
    overlapping = _max_overlap(generated["k0"])
    assert overlapping >= 4, overlapping
    assert seconds < 10, seconds
    assert all(r["stale"] == [] for r in results)


def _max_overlap(lines: list[dict]) -> int:
    ops = [op for op in pair(lines)[0] if op.complete_ns is not None]
    edges = sorted([(op.invoke_ns, 1) for op in ops] + [(op.complete_ns, -1) for op in ops])
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def test_the_counterexample_is_the_shortest_failing_prefix(generated):
    lines = list(generated["k3"])
    ops, _ = pair(lines)
    writes = [op for op in ops if op.type == "ok" and op.f in ("put", "create", "update")]
    old, new = writes[10], writes[-1]
    # a stale get: after the last write completed, a get returns an old write's value
    t = max(e["time_ns"] for e in lines) + 1000
    lines += [synthetic_history.line("r", "kv", 9999, "invoke", "get", t, key="k3", node="n2"),
              synthetic_history.line("r", "kv", 9999, "ok", "get", t + 500, key="k3", node="n2",
                                     value=old.value, revision=old.revision)]
    result = linearizable.check_key("k3", lines)
    assert result["valid"] is False
    example = result["counterexample"]
    failed = example["failed"]
    assert (failed["f"], failed["process"], failed["value"], failed["revision"]) == ("get", 9999, old.value,
                                                                                    old.revision)
    assert example["ops"][-1]["failed"] is True and len(example["ops"]) == linearizable.COUNTEREXAMPLE_OPS
    assert example["prefix_ops"] == example["omitted"] + len(example["ops"])
    # the stale read is also listed as one
    [stale] = result["stale"]
    assert stale["write_revision"] >= new.revision and stale["revision"] == old.revision


def test_the_counterexample_stops_at_the_first_completion_that_breaks_the_history(kv_history):
    h = (kv_history().op(0, "put", 0, 10, value=1, revision=1).op(0, "put", 20, 30, value=2, revision=2)
         .op(1, "get", 40, 50, value=1, revision=1)                  # stale: not linearizable from here
         .op(0, "put", 60, 70, value=3, revision=3).op(1, "get", 80, 90, value=3, revision=3))
    example = linearizable.counterexample(h.ops())
    assert example["prefix_ops"] == 3 and example["omitted"] == 0
    assert [(op["f"], op["value"], op["failed"]) for op in example["ops"]] == [
        ("put", 1, False), ("put", 2, False), ("get", 1, True)]
    assert example["ops"][0]["invoke_ns"] == 0 and example["ops"][2]["complete_ns"] == 50
    # one completion fewer is linearizable: the prefix is the shortest
    placed = linearizable.searchable(h.ops())
    assert linearizable.check(linearizable.prefix(placed, 2)).valid is True
