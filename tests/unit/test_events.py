"""The JSON-lines event log: schema, levels, secrets, files."""

from __future__ import annotations

import io
import json

import pytest

from jetraft.events import EVENTS, SCHEMA_VERSION, EventLog, rfc3339_ns


def make(threshold: str = "info") -> tuple[EventLog, io.StringIO]:
    out = io.StringIO()
    return EventLog("n1", stream=out, threshold=threshold, clock=lambda: 1_700_000_000_123_456_789), out


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_one_json_object_per_line_with_the_common_keys():
    log, out = make()
    log.emit("listening", kind="client", host="127.0.0.1", port=4222)
    log.emit("server_ready")
    first, second = lines(out)
    assert first == {"ts": "2023-11-14T22:13:20.123456789Z", "v": SCHEMA_VERSION, "server_name": "n1",
                     "level": "info", "event": "listening", "kind": "client", "host": "127.0.0.1",
                     "port": 4222}
    assert second["event"] == "server_ready"


def test_levels_filter_debug_and_trace():
    log, out = make("info")
    log.emit("client_connected", cid=1, ip="127.0.0.1", port=1, name=None, lang=None,
             version=None, user=None, account="$G")
    assert out.getvalue() == ""
    log.threshold = "debug"
    log.emit("client_connected", cid=1, ip="127.0.0.1", port=1, name=None, lang=None,
             version=None, user=None, account="$G")
    assert lines(out)[0]["level"] == "debug"
    assert log.enabled("debug") and not log.enabled("trace")


def test_unknown_event_and_secret_fields_are_refused():
    log, out = make()
    with pytest.raises(ValueError, match="unknown event"):
        log.emit("no_such_event")
    with pytest.raises(ValueError, match="secret"):
        log.emit("auth_failed", cid=1, ip="x", port=1, user="u", reason="r", password="hunter2")
    assert "hunter2" not in out.getvalue()
    with pytest.raises(ValueError):
        log.threshold = "loud"


def test_file_receives_the_same_lines(tmp_path):
    log, out = make()
    path = tmp_path / "events.jsonl"
    log.open_file(path)
    log.emit("shutdown", reason="SIGTERM")
    log.close()
    assert path.read_text() == out.getvalue()


def test_a_closed_stdout_does_not_raise():
    out = io.StringIO()
    log = EventLog("n1", stream=out)
    out.close()
    log.emit("server_ready")  # must not raise


def test_every_event_documents_level_and_fields():
    for name, spec in EVENTS.items():
        assert spec.level in ("error", "warn", "info", "debug", "trace"), name
        assert spec.doc, name
        assert not {"ts", "v", "server_name", "level", "event"} & spec.fields.keys(), name


@pytest.mark.parametrize("ns,text", [
    (0, "1970-01-01T00:00:00.000000000Z"),
    (1_000_000_001, "1970-01-01T00:00:01.000000001Z"),
])
def test_rfc3339_ns(ns, text):
    assert rfc3339_ns(ns) == text


@pytest.mark.parametrize("event,fields", [
    ("raft_applied", {"group", "term", "first_index", "last_index", "terms", "hashes"}),
    ("raft_replica_current", {"group", "term", "peer", "lag", "offline", "behind_ns"}),
    ("raft_replica_lagging", {"group", "term", "peer", "lag", "offline"}),
    ("raft_group_closed", {"group", "deleted"}),
    ("raft_became_leader", {"group", "term", "leader", "index", "peers", "zone"}),
    ("server_starting", {"server_id", "cluster", "tags"}),
])
def test_the_events_the_validation_job_reads_are_documented(event, fields):
    spec = EVENTS[event]
    assert spec.level == "info"
    assert fields <= spec.fields.keys()
    if event == "raft_applied":     # the hash's definition, for a checker to recompute
        assert "zlib.crc32(bytes([type]) + data)" in spec.fields["hashes"]
