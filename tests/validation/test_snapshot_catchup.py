"""Snapshots, log compaction and stream catch-up in the validation, on one small crafted run.

Each RAFT group of the run plays one case, so one Spark job decides them all:

- ``S-SNAP``: n3 installs a snapshot (index 8), then applies 9.. with the others;
- ``S-RESTART``: n1 snapshots at 6 and compacts, restarts and applies 7..10 again (same
  entries), then goes on;
- ``S-BADSNAP``: n3 installs a snapshot whose term is not the term the others applied at
  its index;
- ``S-BADTAIL``: n1 restarts after compacting and applies index 7 again with another hash;

and the stream catch-ups, one per (server, group): finished, failed then finished, never
finished while the server's log (only raft_applied lines there) goes on 200 s, unfinished
at the log's end, abandoned by the group's close, interrupted by a restart then finished,
started twice then finished.
"""

from __future__ import annotations

import json
import zlib

import pytest

from jetraft.events import SCHEMA_VERSION, rfc3339_ns
from jetraft.validation.job import validate

pytestmark = pytest.mark.timeout(300)

T0 = 1_798_761_600_000_000_000
S = 1_000_000_000


def h(group: str, index: int, term: int, salt: str = "") -> int:
    return zlib.crc32(f"{group}:{index}:{term}{salt}".encode())


class Logs:
    def __init__(self) -> None:
        self.lines: dict[str, list[tuple[int, str]]] = {}

    def emit(self, server: str, ns: int, event: str, **fields) -> None:
        line = {"ts": rfc3339_ns(ns), "v": SCHEMA_VERSION, "server_name": server, "level": "info",
                "event": event, **fields}
        self.lines.setdefault(server, []).append((ns, json.dumps(line, separators=(",", ":"))))

    def apply(self, server: str, ns: int, group: str, first: int, terms: list[int],
              hashes: list[int] | None = None) -> None:
        hashes = hashes or [h(group, first + i, t) for i, t in enumerate(terms)]
        self.emit(server, ns, "raft_applied", group=group, term=max(terms), first_index=first,
                  last_index=first + len(terms) - 1, terms=terms, hashes=hashes)

    def write(self, root) -> None:
        for server, lines in self.lines.items():
            (root / "logs" / server).mkdir(parents=True)
            (root / "logs" / server / "events.jsonl").write_text(
                "".join(line + "\n" for _, line in sorted(lines, key=lambda x: x[0])))


def crafted(logs: Logs) -> None:
    terms10 = [1] * 5 + [2] * 5
    for s in ("n1", "n2", "n3"):
        logs.emit(s, T0, "server_starting", server_id=s.upper(), cluster="C1", tags=[], pid=1)
        logs.emit(s, T0, "raft_became_follower", group="_meta_", term=1, leader="n1", index=0,
                  peers=["n1", "n2", "n3"], zone="a")
    # S-SNAP: n3 is away for 1..10, installs the snapshot at 8 and applies from 9
    for s in ("n1", "n2"):
        logs.apply(s, T0 + 1 * S, "S-SNAP", 1, terms10)
    logs.emit("n1", T0 + 2 * S, "raft_snapshot_taken", group="S-SNAP", index=8, term=2, bytes=512,
              reason="entries")
    logs.emit("n1", T0 + 2 * S, "raft_log_compacted", group="S-SNAP", index=8, entries=8, log_bytes=100)
    logs.emit("n3", T0 + 3 * S, "raft_snapshot_installed", group="S-SNAP", index=8, term=2)
    logs.apply("n3", T0 + 3 * S, "S-SNAP", 9, [2, 2])
    for s in ("n1", "n2", "n3"):
        logs.apply(s, T0 + 4 * S, "S-SNAP", 11, [3, 3])
    # S-RESTART: n1 compacts at 6, restarts, applies the tail 7..10 again, then 11..12
    for s in ("n1", "n2"):
        logs.apply(s, T0 + 1 * S, "S-RESTART", 1, terms10)
    logs.emit("n1", T0 + 2 * S, "raft_snapshot_taken", group="S-RESTART", index=6, term=2, bytes=64,
              reason="entries")
    logs.emit("n1", T0 + 2 * S, "raft_log_compacted", group="S-RESTART", index=6, entries=6, log_bytes=80)
    logs.emit("n1", T0 + 5 * S, "server_starting", server_id="N1", cluster="C1", tags=[], pid=2)
    logs.apply("n1", T0 + 6 * S, "S-RESTART", 7, [2, 2, 2, 2])
    for s in ("n1", "n2"):
        logs.apply(s, T0 + 7 * S, "S-RESTART", 11, [3, 3])
    # S-BADSNAP: the others applied index 10 in term 1, n3's snapshot says term 2
    for s in ("n1", "n2"):
        logs.apply(s, T0 + 1 * S, "S-BADSNAP", 1, [1] * 10)
    logs.emit("n3", T0 + 3 * S, "raft_snapshot_installed", group="S-BADSNAP", index=10, term=2)
    # S-BADTAIL: after its restart n1 applies another entry at 7 than before
    for s in ("n1", "n2"):
        logs.apply(s, T0 + 1 * S, "S-BADTAIL", 1, terms10)
    logs.emit("n1", T0 + 2 * S, "raft_snapshot_taken", group="S-BADTAIL", index=6, term=2, bytes=64,
              reason="bytes")
    logs.apply("n1", T0 + 6 * S, "S-BADTAIL", 7, [2, 2],
               [h("S-BADTAIL", 7, 2, "other"), h("S-BADTAIL", 8, 2)])

    def start(server, ns, group, reason="snapshot"):
        logs.emit(server, ns, "stream_catchup_started", group=group, account="$G", stream=group[2:],
                  snapshot_index=8, reason=reason, bytes_needed=4096, last_seq=8)

    def finish(server, ns, group, ok, duration_s, error=None):
        logs.emit(server, ns, "stream_catchup_finished", group=group, account="$G", stream=group[2:],
                  snapshot_index=8, ok=ok, bytes=4096 if ok else 0, chunks=3 if ok else 0,
                  duration_ns=int(duration_s * S), sources=["n2", "n1"], error=error)

    start("n3", T0 + 3 * S, "S-SNAP")                       # finished
    finish("n3", T0 + 5 * S, "S-SNAP", True, 2)
    start("n2", T0 + 10 * S, "S-ONE")                       # failed, then finished
    finish("n2", T0 + 11 * S, "S-ONE", False, 1, "peer n1 went away")
    finish("n2", T0 + 15 * S, "S-ONE", True, 5)
    logs.emit("n2", T0 + 9 * S, "stream_store_damaged", group="S-ONE", account="$G", stream="ONE",
              file="3.blk", offset=1024, kind="checksum_mismatch", detail="crc")
    start("n3", T0 + 20 * S, "S-STUCK")                     # n3 goes on applying for 200 s
    logs.apply("n3", T0 + 220 * S, "S-SNAP", 13, [3])
    start("n1", T0 + 210 * S, "S-LATE")                     # n1's log ends 10 s later
    logs.emit("n1", T0 + 220 * S, "raft_became_follower", group="_meta_", term=1, leader="n1",
              index=0, peers=["n1", "n2", "n3"], zone="a")
    start("n2", T0 + 30 * S, "S-GONE")                      # the stream is deleted meanwhile
    logs.emit("n2", T0 + 40 * S, "raft_group_closed", group="S-GONE", deleted=True)
    start("n1", T0 + 20 * S, "S-AGAIN")                     # n1 restarts, then finishes
    logs.emit("n1", T0 + 24 * S, "server_starting", server_id="N1", cluster="C1", tags=[], pid=3)
    start("n1", T0 + 25 * S, "S-AGAIN", "restart")
    finish("n1", T0 + 27 * S, "S-AGAIN", True, 2)
    start("n2", T0 + 50 * S, "S-TWICE")                     # started again, then finished
    start("n2", T0 + 52 * S, "S-TWICE")
    finish("n2", T0 + 53 * S, "S-TWICE", True, 1)
    logs.emit("n2", T0 + 230 * S, "raft_became_follower", group="_meta_", term=1, leader="n1",
              index=0, peers=["n1", "n2", "n3"], zone="a")


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("snapshots")
    logs = Logs()
    crafted(logs)
    logs.write(root)
    doc = validate(spark, str(root), root)
    return doc, (root / "report.md").read_text(), root


def test_snapshot_installs_and_restarts_after_compaction_are_not_violations(report):
    doc, _, _ = report
    c = doc["checks"]["log_matching"]
    found = {(e["group"], e["index"]) for e in c["examples"]}
    assert found == {("S-BADSNAP", 10), ("S-BADTAIL", 7)} and c["count"] == 2
    assert c["details"]["snapshot_indexes"] == 4
    assert doc["checks"]["term_monotonic"]["valid"] is True
    assert doc["checks"]["leader_completeness"]["valid"] is True


def test_a_snapshot_of_another_term_than_the_applied_entry_is_caught(report):
    doc, _, _ = report
    [ex] = [e for e in doc["checks"]["log_matching"]["examples"] if e["group"] == "S-BADSNAP"]
    assert {a["term"] for a in ex["applied"]} == {1}
    assert ex["snapshots"] == [{"server": "n3", "event": "raft_snapshot_installed", "term": 2}]


def test_another_entry_applied_again_after_a_restart_is_caught(report):
    doc, _, _ = report
    [ex] = [e for e in doc["checks"]["log_matching"]["examples"] if e["group"] == "S-BADTAIL"]
    assert {a["server"] for a in ex["applied"]} == {"n1", "n2"}
    assert len({a["hash"] for a in ex["applied"]}) == 2 and "snapshots" not in ex


def test_a_catch_up_that_never_finishes_while_the_log_goes_on_is_invalid(report):
    doc, _, _ = report
    c = doc["checks"]["stream_catchup"]
    assert c["valid"] is False and c["count"] == 1
    [ex] = c["examples"]
    assert (ex["server"], ex["group"], ex["problem"]) == ("n3", "S-STUCK", "catch-up never finished")
    assert ex["log_ends_s_after"] == 200.0


def test_every_catch_up_is_reported_with_its_outcome(report):
    doc, _, _ = report
    d = doc["checks"]["stream_catchup"]["details"]
    status = [(c["server"], c["group"], c["status"]) for c in d["catchups"]]
    assert status == [
        ("n3", "S-SNAP", "ok"),
        ("n2", "S-ONE", "failed"), ("n2", "S-ONE", "ok"),
        ("n1", "S-AGAIN", "interrupted"), ("n3", "S-STUCK", "stuck"),
        ("n1", "S-AGAIN", "ok"), ("n2", "S-GONE", "abandoned"),
        ("n2", "S-TWICE", "superseded"), ("n2", "S-TWICE", "ok"), ("n1", "S-LATE", "unfinished")]
    ok = next(c for c in d["catchups"] if c["group"] == "S-SNAP")
    assert ok == {"group": "S-SNAP", "account": "$G", "stream": "SNAP", "server": "n3",
                  "reason": "snapshot", "snapshot_index": 8, "started": rfc3339_ns(T0 + 3 * S),
                  "finished": rfc3339_ns(T0 + 5 * S), "bytes_needed": 4096, "bytes": 4096, "chunks": 3,
                  "duration_s": 2.0, "ok": True, "sources": ["n1", "n2"], "error": None, "status": "ok"}
    assert (d["count"], d["finished"], d["failed"], d["unfinished"]) == (10, 5, 1, 1)
    assert (d["duration_median_s"], d["duration_max_s"]) == (2.0, 5.0)
    assert d["damaged_stores"] == [{"ts": rfc3339_ns(T0 + 9 * S), "server": "n2", "group": "S-ONE",
                                    "account": "$G", "stream": "ONE", "file": "3.blk", "offset": 1024,
                                    "kind": "checksum_mismatch", "detail": "crc"}]


def test_the_readable_report_lists_catch_ups_and_damaged_stores(report):
    _, md, _ = report
    assert "## Stream catch-ups" in md and "## Damaged stores" in md
    # the stream first, its drill (none here), then the RAFT group id in its own column
    assert "| STUCK | - | S-STUCK | n3 | snapshot | 8 | - | - | - | - | - | stuck |" in md
    assert "| n2 | ONE | - | S-ONE | 3.blk | 1024 | checksum_mismatch |" in md
    assert "10 catch-ups, 5 finished (1 failed); duration median 2.000 s, max 5.000 s." in md


def test_a_stuck_catch_up_says_what_it_means_and_where_to_look(report):
    _, md, _ = report
    section = md.split("\n## stream_catchup\n", 1)[1].split("\n## ", 1)[0]
    assert "Verdict: **INVALID**, 1 offending." in section
    assert "What this means: a replica started fetching a stream's messages" in section
    assert "| problem | server | group | stream | drill |" in section
    assert "| catch-up never finished | n3 | S-STUCK | STUCK | - |" in section
    [step] = [x for x in section.splitlines() if x.startswith("- n3, group S-STUCK")]
    assert f"stream_catchup_started at {rfc3339_ns(T0 + 20 * S)}" in step
    assert "logs/n3/events*.jsonl" in step and "200.0 s" in step
    assert "```json" not in md


def test_a_longer_limit_leaves_the_catch_up_unfinished(spark, report):
    from jetraft.validation import checks, load

    inp = load.read(spark, str(report[2]))
    try:
        result = checks.check_stream_catchup(inp, 10, limit_s=300)
    finally:
        inp.unpersist()
    assert result.valid is True and result.count == 0
    [stuck] = [c for c in result.details["catchups"] if c["group"] == "S-STUCK"]
    assert stuck["status"] == "unfinished" and result.details["unfinished"] == 2
