"""The fault campaign's driver without a lab: its command line, the workloads' history lines
and outcome rules, and how a run's figures come out of jetraft-validate's report."""

from __future__ import annotations

import json
import subprocess

import nats.errors
import nats.js.errors
import pytest

from lab.campaign import RunResult, anomaly_ns, apply_report, first_fault_before, result_table
from lab.workloads import History, outcome
from playbook import run_lab


def lab(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return run_lab(tmp_path / "state", *args)


def test_the_campaign_command_names_its_options_and_flavours(tmp_path):
    result = lab(tmp_path, "campaign", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for option in ("--runs", "--minutes", "--seed", "--flavour", "--every-kind", "--hosts",
                   "--inventory"):
        assert option in text
    assert "jetraft|nats-server|nats-server-always" in text


def test_an_unknown_flavour_is_refused_before_anything_runs(tmp_path):
    result = lab(tmp_path, "campaign", "--flavour", "etcd")
    assert result.returncode == 2
    assert "'etcd' is not one of 'jetraft', 'nats-server', 'nats-server-always'" in " ".join(
        result.stderr.split())
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("args, says", [
    (["--hosts", "6"], "'6' is not one of '5', '7'"),
    (["--hosts", "7", "-i", "{inventory}"], "--hosts 7 boots the lab's spares: leave out --inventory"),
])
def test_a_layout_the_lab_cannot_make_is_refused_before_anything_runs(tmp_path, args, says):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("jetraft:\n  hosts:\n    n1: {}\n")
    result = lab(tmp_path, "campaign", *[a.format(inventory=inventory) for a in args])
    assert result.returncode != 0
    assert says in " ".join((result.stderr + result.stdout).split())
    assert not (tmp_path / "state").exists()


def test_a_seven_host_run_replays_with_its_layout(tmp_path):
    from lab.campaign import Campaign
    c = Campaign(runs=1, minutes=5, seed=9, flavour="jetraft", hosts=7, artifacts=tmp_path)
    assert c.replay_command(9) == ("python -m lab campaign --runs 1 --minutes 5 --seed 9 "
                                   "--flavour jetraft --hosts 7")


def test_a_history_line_has_every_field_of_the_operation_map(tmp_path):
    history = History(tmp_path / "history" / "queue.jsonl", "run-1", "queue")
    p = history.new_process()
    history.record(p, "invoke", "publish", value=7, node="jr-a1")
    history.record(p, "ok", "publish", value=7, revision=3, node="jr-a1")
    q = history.new_process()
    history.close()
    lines = [json.loads(line) for line in (tmp_path / "history" / "queue.jsonl").read_text().splitlines()]
    assert [(e["process"], e["type"], e["value"], e["revision"]) for e in lines] == [
        (0, "invoke", 7, None), (0, "ok", 7, 3)]
    assert q == 1
    assert set(lines[0]) == {"run", "workload", "process", "type", "f", "key", "value", "revision",
                             "expect", "node", "time_ns", "wall_ns", "error"}
    assert lines[0]["time_ns"] <= lines[1]["time_ns"]
    assert history.counts == {"invoke": 1, "ok": 1, "fail": 0, "info": 0}


@pytest.mark.parametrize("exc, expected", [
    (nats.js.errors.APIError(code=400, err_code=10071, description="wrong last sequence"), "fail"),
    (nats.errors.NoRespondersError(), "fail"),
    (nats.errors.TimeoutError(), "info"),
    (nats.js.errors.ServiceUnavailableError(code=503), "info"),
    (ConnectionResetError("reset by peer"), "info"),
])
def test_only_an_answer_that_says_not_done_is_a_failure(exc, expected):
    assert outcome(exc) == expected


def _report(**checks) -> dict:
    return {"checks": {name: {"valid": True, "count": 0, "examples": [], "details": {}}
                       for name in ("election_safety", "term_monotonic", "log_matching",
                                    "leader_completeness")} | checks}


def test_a_clean_report_makes_a_valid_run():
    result = RunResult(1, "jetraft", 5, 3.0, "d", "replay")
    apply_report(result, _report(
        queue={"valid": True, "count": 0, "examples": [],
               "details": {"lost": {"prefix": 0, "middle": 0, "postfix": 0}, "unexpected": 0,
                           "duplicated": 0, "recovered": 4}},
        node_divergence={"valid": True, "count": 0, "examples": [], "details": {}},
        linearizable={"valid": True, "count": 0, "examples": [], "details": {}}))
    assert result.valid and result.raft is True and result.recovered == 4
    assert result.divergent == 0 and result.linearizable is True


def test_a_lost_message_makes_the_run_invalid_and_names_the_fault_before_it():
    result = RunResult(1, "jetraft", 5, 3.0, "d", "replay")
    report = _report(queue={"valid": False, "count": 1,
                            "examples": [{"value": 17, "wall_ns": 2_500}],
                            "details": {"lost": {"prefix": 0, "middle": 1, "postfix": 0},
                                        "unexpected": 0, "duplicated": 0}},
                     linearizable={"valid": True, "count": 0, "examples": [], "details": {}})
    apply_report(result, report)
    assert not result.valid and result.lost_total == 1 and result.validation is False
    faults = [{"kind": "kill", "applied_ns": 1_000}, {"kind": "power-loss", "applied_ns": 2_000},
              {"kind": "pause", "applied_ns": 3_000}]
    assert first_fault_before(faults, anomaly_ns(report))["kind"] == "power-loss"
    assert first_fault_before(faults, None) is None


def test_an_unknown_linearizability_verdict_is_not_a_pass():
    result = RunResult(1, "jetraft", 5, 3.0, "d", "replay")
    apply_report(result, _report(linearizable={"valid": "unknown", "count": 0, "examples": [],
                                               "details": {}}))
    assert result.linearizable == "unknown" and not result.valid


def test_a_run_without_event_logs_has_no_raft_verdict_and_is_judged_on_its_histories():
    """nats-server writes no event log: jetraft-validate reports its RAFT checks unknown for
    that reason; the run's RAFT column is "-" and it is valid when its histories are."""
    from jetraft.validation.checks import NO_EVENT_LOG

    unknown = {"valid": "unknown", "count": 0, "examples": [], "details": {"reason": NO_EVENT_LOG}}
    result = RunResult(1, "nats-server", 5, 3.0, "d", "replay")
    apply_report(result, _report(
        election_safety=unknown, term_monotonic=unknown, log_matching=unknown,
        leader_completeness=unknown,
        node_divergence={"valid": "unknown", "count": 0, "examples": [], "details": {"nodes": []}},
        queue={"valid": True, "count": 0, "examples": [],
               "details": {"lost": {"prefix": 0, "middle": 0, "postfix": 0}}},
        linearizable={"valid": True, "count": 0, "examples": [], "details": {}}))
    assert result.raft is None and result.validation is True and result.valid
    assert result.divergent is None         # no replica's copy was read: not measured
    result = RunResult(1, "jetraft", 5, 3.0, "d", "replay")
    apply_report(result, _report(election_safety={**unknown, "details": {}},
                                 linearizable={"valid": True, "count": 0, "examples": [], "details": {}}))
    assert result.raft == "unknown" and not result.valid


def test_the_table_totals_the_runs():
    runs = [RunResult(i, "jetraft", i, 3.0, "d", "r", attempted=10 * i, acknowledged=9 * i,
                      linearizable=True, raft=True, validation=True) for i in (1, 2)]
    table = result_table(runs, "campaign", total=True)
    assert table.row_count == 3
    cells = [list(column.cells) for column in table.columns]
    assert cells[4][-1] == "30" and cells[5][-1] == "27"


def test_asyncios_tls_eof_warning_is_dropped_and_its_other_warnings_kept(caplog):
    import logging

    from lab.drills import SSL_EOF_NOISE
    log = logging.getLogger("asyncio")
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        log.warning(SSL_EOF_NOISE)
        log.warning("Executing %s took %.3f seconds", "<Task>", 0.2)
    assert [r.getMessage() for r in caplog.records] == ["Executing <Task> took 0.200 seconds"]


def test_a_cluster_that_does_not_recover_is_still_read_back_and_the_run_keeps_its_figures(tmp_path, monkeypatch):
    """The cluster not recovering (a server that never answers again) and a stream that
    cannot be drained are what a run measured, not the end of it: the figures stay, each
    error is named, and what can be read is read."""
    import asyncio

    import lab.nemesis
    import lab.workloads
    from lab.campaign import CampaignError, Exercise

    calls = []

    class Queue:
        def __init__(self, target, history, **kw):
            self.stream, self.acknowledged = kw.get("stream", "CAMPAIGN"), 7

        async def setup(self, replica_on=None):
            calls.append("setup")

        async def start(self):
            calls.append("start")

        async def stop(self):
            pass

        async def drain(self):
            calls.append("drain")
            raise RuntimeError("stream info for the drain: no leader")

        async def close(self):
            pass

    class KV(Queue):
        ok = 3

        def __init__(self, target, history, seed):
            pass

    class Nemesis:
        def __init__(self, *a, **kw):
            pass

        async def heal_all(self):
            calls.append("heal_all")

        def close(self):
            pass

    async def not_recovered(self, queue, streams):
        raise CampaignError("the cluster did not recover within 180 s: jr-a2 /healthz: refused")

    monkeypatch.setattr(lab.workloads, "QueueWorkload", Queue)
    monkeypatch.setattr(lab.workloads, "KVWorkload", KV)
    monkeypatch.setattr(lab.nemesis, "CampaignNemesis", Nemesis)
    monkeypatch.setattr(Exercise, "_recovered", not_recovered)
    target = type("T", (), {"servers": [object()] * 5})()
    exercise = Exercise(target, [], tmp_path, seed=1, minutes=0.001, flavour="nats-server",
                        progress=lambda text: None)
    asyncio.run(exercise.run())
    assert exercise.errors == ["the cluster did not recover within 180 s: jr-a2 /healthz: refused",
                               "the drain of CAMPAIGN stopped: stream info for the drain: no leader"]
    assert (exercise.acknowledged, exercise.kv_ok) == (7, 3)
    assert calls == ["setup", "setup", "start", "start", "drain", "heal_all"]
    assert (tmp_path / "faults.json").exists()
