"""The zone drills' ``ttl`` and ``counter`` checks on ledgers written by hand, line by line
as lab/features.py writes them: what counts as a message outliving its TTL (a get that
found it, sent more than 1 s after its stored time plus its TTL; not an unanswered get,
not one within the second), and the range a counter's final value may take (a retried
increment counted once, one of unknown outcome either way, a refused one never)."""

from __future__ import annotations

import json

import pytest

from jetraft.validation import feature_checks, schema
from jetraft.validation.load import Inputs
from jetraft.validation.result import UNKNOWN

pytestmark = pytest.mark.timeout(300)

SECOND = 1_000_000_000
T0 = 1_798_761_600 * SECOND          # 2027-01-01T00:00:00Z


def inputs(spark, tmp_path, ttl: list[dict] | None = None, counter: list[dict] | None = None) -> Inputs:
    """Inputs holding only the given TTL and counter ledger lines (drill kill-zone-a)."""
    frames = {}
    for name, lines, struct in (("ttl", ttl, schema.TTL_LEDGER), ("counter", counter, schema.COUNTER_LEDGER)):
        if lines is None:
            continue
        path = tmp_path / f"kill-zone-a.{name}.jsonl"
        path.write_text("".join(json.dumps({"drill": "kill-zone-a", **line}) + "\n" for line in lines))
        frames[name] = spark.read.schema(struct).json(str(path))
    return Inputs(str(tmp_path), "", None, None, None, None, None, None, **frames)


def message(seq: int, *gets: tuple[float, bool | None], stored: float | None = 0.001, ttl_s: int = 2) -> dict:
    """A TTL'd message acknowledged at T0 + 3 ms (stored at T0 + ``stored`` s), and its
    gets: (seconds after T0 it was sent, found)."""
    return {"stream": "T", "subject": "t", "msg_id": f"m{seq}", "ttl_ns": ttl_s * SECOND, "sent_ns": T0,
            "acked_ns": T0 + 3_000_000, "stream_seq": seq, "error": None,
            "stored_ns": None if stored is None else T0 + int(stored * SECOND),
            "observations": [{"ns": T0 + int(at * SECOND), "answered_ns": None if found is None else T0 + int(at * SECOND) + 1,
                              "found": found, "error": "TimeoutError" if found is None else None}
                             for at, found in gets]}


def test_a_message_seen_3_s_after_its_ttl_is_the_evidence_and_an_unanswered_get_is_none(spark, tmp_path):
    lines = [message(1, (0.5, True), (1.9, True), (2.9, True), (3.5, False)),     # within the second
             message(2, (0.5, True), (4.0, None), (6.0, None)),                    # no answer: no evidence
             message(3, (0.5, True), (3.0, True), (5.001, True), (5.5, False)),    # 3 s after its expiry
             {**message(4), "acked_ns": None, "stream_seq": None, "error": "TimeoutError", "stored_ns": None}]
    result = feature_checks.check_ttl(inputs(spark, tmp_path, ttl=lines), 10)
    assert (result.valid, result.count) == (False, 1)
    [ex] = result.examples
    assert (ex["msg_id"], ex["stream_seq"], ex["ttl_s"]) == ("m3", 3, 2.0)
    assert ex["expires_ns"] == T0 + 2_001_000_000 and ex["last_seen_ns"] == T0 + 5_001_000_000
    assert (ex["seen_s_after_expiry"], ex["late_gets"]) == (3.0, 1)
    drill = result.details["per_drill"]["kill-zone-a"]
    assert (drill["published"], drill["acknowledged"], drill["seen_gone"], drill["never_seen_gone"]) == (4, 3, 2, 1)
    # allowing the hosts' clocks 3 s of skew, that get is within the grace
    assert feature_checks.check_ttl(inputs(spark, tmp_path, ttl=lines), 10, skew_ns=3 * SECOND).valid is True


def test_without_a_stored_time_a_ttl_counts_from_the_acknowledgement(spark, tmp_path):
    late = message(1, (3.002, True), stored=None)       # acked at 3 ms: expires at 2.003 s
    assert feature_checks.check_ttl(inputs(spark, tmp_path, ttl=[late]), 10).valid is True
    late = message(1, (3.004, True), stored=None)
    assert feature_checks.check_ttl(inputs(spark, tmp_path, ttl=[late]), 10).count == 1


def test_no_ttl_ledger_or_no_answered_get_is_unknown(spark, tmp_path):
    assert feature_checks.check_ttl(inputs(spark, tmp_path), 10).valid == UNKNOWN
    unanswered = [message(1, (1.0, None), (3.5, None))]
    assert feature_checks.check_ttl(inputs(spark, tmp_path, ttl=unanswered), 10).valid == UNKNOWN


def attempt(msg_id: str, incr: int, outcome: str, n: int = 1, *, seq: int | None = None, val: str | None = None,
            duplicate: bool | None = None) -> dict:
    return {"stream": "C", "subject": "c", "kind": "increment", "msg_id": msg_id, "incr": incr, "attempt": n,
            "sent_ns": T0, "acked_ns": T0 + 1 if outcome == "ok" else None, "stream_seq": seq, "val": val,
            "duplicate": duplicate, "outcome": outcome, "error": None if outcome == "ok" else "TimeoutError"}


def final(value: str, seq: int | None = 3) -> dict:
    return {"stream": "C", "subject": "c", "kind": "final", "msg_id": None, "incr": None, "attempt": None,
            "sent_ns": T0 + 5 * SECOND, "acked_ns": T0 + 5 * SECOND + 1, "stream_seq": seq, "val": value,
            "duplicate": None, "outcome": "ok", "error": None}


#: 1 acknowledged; 2 acknowledged on its retry (duplicate: counted once); 4 of unknown outcome
#: (two timeouts); -1 acknowledged; 10 refused: the final value may be 2..6.
HISTORY = [attempt("a", 1, "ok", seq=1, val="1"),
           attempt("b", 2, "info"), attempt("b", 2, "ok", 2, seq=2, duplicate=True),
           attempt("c", 4, "info"), attempt("c", 4, "info", 2),
           attempt("d", -1, "ok", seq=3, val="2"),
           attempt("e", 10, "fail")]


@pytest.mark.parametrize("value, valid", [("2", True), ("6", True), ("1", False), ("7", False)])
def test_the_final_value_may_be_anywhere_the_unknown_increments_allow(spark, tmp_path, value, valid):
    result = feature_checks.check_counter(inputs(spark, tmp_path, counter=HISTORY + [final(value)]), 10)
    assert result.valid is valid
    row = result.details["per_drill"]["kill-zone-a"]
    assert (row["acked_sum"], row["low"], row["high"], row["final"]) == (2, 2, 6, int(value))
    assert (row["acknowledged"], row["unknown"], row["failed"], row["retried"]) == (3, 1, 1, 2)
    assert (row["last_acked_seq"], row["last_acked_val"]) == (3, 2)
    if not valid:
        [ex] = result.examples
        assert ex["problem"] == ("acknowledged increments missing" if value == "1" else "more than its increments")
        assert ex["off_by"] == (-1 if value == "1" else 1)


def test_a_counter_never_read_back_is_not_decided(spark, tmp_path):
    result = feature_checks.check_counter(inputs(spark, tmp_path, counter=HISTORY), 10)
    assert result.valid == UNKNOWN and result.details["unread"] == ["kill-zone-a"]
    garbled = feature_checks.check_counter(inputs(spark, tmp_path, counter=HISTORY + [final("two")]), 10)
    assert garbled.valid is False and garbled.examples[0]["problem"] == "final value 'two' is not an integer"
