"""What a person running ``jetraft-validate`` sees: a run without event logs refused at once,
before Spark starts; progress from the first line; streams named by name and drill in the
reports, the group id beside; a timeline whose leader colours cannot be taken for the fault
shading; and every invalid check explained, with its evidence as a table and where to look
next.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from jetraft.validation import guide, job, report, synthetic

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def no_spark(monkeypatch):
    """jetraft-validate's Spark session, replaced: the list of the sessions asked for."""
    asked: list[tuple] = []

    def refuse(master, driver_memory):
        asked.append((master, driver_memory))
        raise AssertionError("Spark was started")
    monkeypatch.setattr(job, "spark_session", refuse)
    return asked


def _missing(root):
    return root / "nowhere", f"{root / 'nowhere'} does not exist"


def _empty(root):
    root.mkdir()
    return root, f"{root} is empty"


def _no_logs(root):
    (root / "logs" / "n1").mkdir(parents=True)
    (root / "logs" / "n1" / "journal.jsonl").write_text("{}\n")
    (root / "drills.json").write_text("[]\n")
    return root, f"{root} holds no logs/<host>/events.jsonl"


def _empty_logs(root):
    (root / "logs" / "n1").mkdir(parents=True)
    (root / "logs" / "n1" / "events.jsonl").write_text("")
    return root, "the 1 event log there are empty"


@pytest.mark.parametrize("make", [_missing, _empty, _no_logs, _empty_logs])
def test_a_run_without_event_logs_is_refused_before_spark_starts(tmp_path, no_spark, make):
    run, why = make(tmp_path / "run")
    result = CliRunner().invoke(job.main, [str(run), "--master", "local[1]"])
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()                     # one line, not wrapped
    assert line == (f"jetraft-validate: no event log at {run}/logs/*/events*.jsonl: {why} "
                    f"(collect the logs first: ansible-playbook playbooks/collect_logs.yml)")
    assert result.stdout == ""
    assert no_spark == []


def test_a_glob_matching_no_event_log_is_refused_before_spark_starts(tmp_path, no_spark):
    result = CliRunner().invoke(job.main, [str(tmp_path / "*.jsonl")])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"jetraft-validate: no event log at {tmp_path}/*.jsonl: no file matches it")
    assert no_spark == []


def test_the_help_names_the_exit_statuses_and_where_the_logs_are_expected():
    result = CliRunner().invoke(job.main, ["--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "2 RUN cannot be read: missing, empty, or without any event log (logs/*/events*.jsonl)" in text
    assert "1 a check is invalid" in text and "0 no check is invalid" in text


class _Kept:
    """The tests' shared Spark session, which jetraft-validate's ``stop()`` leaves running."""

    def __init__(self, spark):
        self._spark = spark

    def __getattr__(self, name):
        return getattr(self._spark, name)

    def stop(self):
        pass


@pytest.fixture(scope="module")
def invalid_run(spark, tmp_path_factory):
    """jetraft-validate on a synthetic run with two leaders in one term and a lost
    acknowledged message: (CliRunner result, run directory)."""
    root = tmp_path_factory.mktemp("invalid")
    synthetic.generate(root, events=3000, groups=3, seed=7, anomalies={"two_leaders", "lost_ack"})
    mp = pytest.MonkeyPatch()
    mp.setattr(job, "spark_session", lambda master, memory: _Kept(spark))
    try:
        result = CliRunner().invoke(job.main, [str(root), "--master", "local[2]"])
    finally:
        mp.undo()
    return result, root


def test_progress_is_printed_from_the_first_line_and_each_check_as_it_ends(invalid_run):
    result, root = invalid_run
    assert result.exit_code == 1, result.output[-3000:]
    lines = result.stderr.splitlines()
    size = sum(p.stat().st_size for p in (root / "logs").glob("*/events*.jsonl")) / 1e6
    assert lines[0] == (f"reading {root}: 5 event logs ({size:.1f} MB) from 5 hosts, 1 ledger, "
                        f"1 TTL ledger, 1 counter ledger, drills.json, topology.json")
    assert lines[1] == "starting Spark (local[2]; this can take 30 s)..."
    assert lines[2].startswith("Spark ready (")
    assert lines[3].startswith("reading the event logs")
    checks = [x.strip() for x in lines if x.startswith("  ") and ": " in x and x.strip().endswith(" s)")]
    names = [x.split(":")[0] for x in checks]
    assert names == list(json.loads((root / "report.json").read_text())["checks"])
    verdicts = {x.split(":")[0]: x.split(": ", 1)[1].rsplit(" (", 1)[0] for x in checks}
    assert verdicts["election_safety"] == "INVALID, 1 offending"
    assert verdicts["ledger"] == "INVALID, 1 offending"
    assert verdicts["input"] == "valid"
    # every check's line comes before the verdict table
    last_check = max(i for i, x in enumerate(lines) if x.strip() in checks)
    assert last_check < next(i for i, x in enumerate(lines) if "jetraft validation" in x)


def test_the_terminal_explains_an_invalid_check_and_says_where_to_look(invalid_run):
    result, root = invalid_run
    out = result.stderr
    section = out.split("election_safety INVALID (1 offending): ", 1)[1].split("\nledger INVALID", 1)[0]
    assert section.startswith("two servers led one RAFT group in the same term")
    assert "ORDERS_2" in section and "S-R3F-g2" in section         # evidence: stream and group id
    assert "Next:" in section
    step = section.split("Next:", 1)[1]
    assert "group S-R3F-g2 (ORDERS_2)" in step and "raft_vote_granted" in step
    assert "logs/n" in step
    ledger = out.split("ledger INVALID (1 offending): ", 1)[1]
    assert "kill-zone-a.ledger.jsonl" in ledger and "kill-zone-a.stream.jsonl" in ledger
    assert out.rstrip().splitlines()[-2].startswith("INVALID (report.md")


def test_report_md_names_streams_and_drills_with_the_group_id_in_its_own_column(invalid_run):
    _, root = invalid_run
    md = (root / "report.md").read_text()
    groups = md.split("## Streams and RAFT groups\n", 1)[1].split("\n## ", 1)[0]
    assert "| stream | drill | account | RAFT group |" in groups
    assert "| meta group | - | - | _meta_ |" in groups
    assert "| KILL_ZONE_A | kill-zone-a | $G | S-R3F-g1 |" in groups
    assert "| ORDERS_2 | - | $G | S-R3F-g2 |" in groups
    doc = json.loads((root / "report.json").read_text())
    assert doc["groups"]["S-R3F-g1"] == {"account": "$G", "stream": "KILL_ZONE_A", "consumer": None,
                                         "drill": "kill-zone-a"}


def test_report_md_explains_each_invalid_check_with_a_table_and_next_steps(invalid_run):
    _, root = invalid_run
    md = (root / "report.md").read_text()
    doc = json.loads((root / "report.json").read_text())
    election = md.split("\n## election_safety\n", 1)[1].split("\n## ", 1)[0]
    assert "Verdict: **INVALID**, 1 offending." in election
    assert "What this means: two servers led one RAFT group in the same term" in election
    assert "| group | stream | drill | term | leaders | first_ts |" in election
    [ex] = doc["checks"]["election_safety"]["examples"]
    assert (f"| S-R3F-g2 | ORDERS_2 | - | {ex['term']} | {', '.join(ex['leaders'])} | {ex['first_ts']} |"
            in election)
    steps = [x for x in election.splitlines() if x.startswith("- ")]
    assert steps and f"term {ex['term']}" in steps[0] and ex["first_ts"] in steps[0]
    assert all(f"logs/{s}/events*.jsonl" in steps[0] for s in ex["leaders"])
    assert "report.json, `checks.election_safety.examples`" in election
    # a valid check says what it checks and what a failure would mean
    valid = md.split("\n## term_monotonic\n", 1)[1].split("\n## ", 1)[0]
    assert "Verdict: valid." in valid and "Were it invalid: a server's term in a group went back" in valid
    assert "```json" not in md                       # raw JSON is report.json's
    assert doc["checks"]["ledger"]["examples"][0]["problem"] == "lost"


def test_every_check_has_a_meaning_and_an_unknown_reason(invalid_run):
    _, root = invalid_run
    doc = json.loads((root / "report.json").read_text())
    # the fault campaign's four checks are only in a run with histories (test_campaign_report)
    campaign = {"queue", "node_divergence", "linearizable", "stale_reads"}
    assert set(doc["checks"]) == set(guide.GUIDES) - campaign
    for name, c in doc["checks"].items():
        assert c["meaning"] == guide.GUIDES[name].meaning and len(c["meaning"]) > 40


def _hsv(colour: str) -> tuple[float, float, float]:
    from matplotlib.colors import rgb_to_hsv, to_rgb

    h, sat, v = rgb_to_hsv(to_rgb(colour))
    return h * 360, sat, v


def test_no_leader_colour_can_be_taken_for_the_fault_shading():
    servers = [f"n{i}" for i in range(1, 14)]
    colours = report.server_colours(servers)
    assert len(set(colours.values())) == len(servers)             # 13 servers, 13 colours
    assert report.FAULT_COLOUR not in colours.values()
    assert _hsv(report.FAULT_COLOUR)[1] < 0.05 and report.FAULT_HATCH     # grey, hatched
    for c in colours.values():
        hue, saturation, _ = _hsv(c)
        assert saturation >= 0.2, c                                # no grey
        assert 20 < hue < 340, c                                   # no red


def test_the_timeline_names_streams_drills_group_ids_servers_and_the_shading():
    from matplotlib.colors import to_hex

    t0 = 1_798_761_600_000_000_000
    elections = [{"group": "_meta_", "server_name": "n1", "ns": t0},
                 {"group": "S-R3F-abc", "server_name": "n2", "ns": t0 + 10**9},
                 {"group": "S-R3F-abc", "server_name": "n3", "ns": t0 + 5 * 10**9}]
    names = {"_meta_": {"meta": True}, "S-R3F-abc": {"account": "$G", "stream": "KILL_ZONE_A",
                                                      "consumer": None, "drill": "kill-zone-a"}}
    faults = [{"name": "kill-zone-a", "fault_ns": t0 + 3 * 10**9, "repair_ns": t0 + 6 * 10**9}]
    fig = report.timeline_figure(elections, faults, t0 + 9 * 10**9, names=names)
    try:
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["meta group", "KILL_ZONE_A (kill-zone-a)"]
        right = ax.child_axes                       # the secondary axis on the right
        assert [t.get_text() for t in right[0].get_yticklabels()] == ["_meta_", "S-R3F-abc"]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend[:3] == ["n1", "n2", "n3"] and "drill fault\n(fault to repair)" in legend
        bars = {to_hex(c) for coll in ax.collections for c in coll.get_facecolors()}
        assert bars and to_hex(report.FAULT_COLOUR) not in bars
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_the_survey_line_counts_logs_ledgers_and_names_what_is_missing(tmp_path):
    from jetraft.validation import survey

    root = tmp_path / "run"
    synthetic.generate(root, events=500, groups=2, seed=1)
    (root / "topology.json").unlink()
    found = survey.survey(str(root))
    assert found.line().startswith(f"reading {root}: 5 event logs (")
    assert found.line().endswith("from 5 hosts, 1 ledger, 1 TTL ledger, 1 counter ledger, drills.json "
                                 "(no topology.json)")
    for ledger in (*root.glob("*.ttl.jsonl"), *root.glob("*.counter.jsonl")):
        ledger.unlink()             # a run whose drills had neither: not named
    assert survey.survey(str(root)).line().endswith("from 5 hosts, 1 ledger, drills.json (no topology.json)")
    assert survey.survey("hdfs:///runs/r1") is None
