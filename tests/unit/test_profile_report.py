"""make profile's reading of py-spy's collapsed stacks (tests/bench/profile.py)."""

from __future__ import annotations

from tests.bench.profile import function_of, read_stacks, top_frames


def test_a_frame_is_named_by_its_function_and_file_without_the_line():
    assert function_of("_parse (jetraft/protocol/client.py:437)") == "_parse (jetraft/protocol/client.py)"
    assert function_of("<module> (jetraft-server:6)") == "<module> (jetraft-server)"
    assert function_of("process 12:\"python\"") == "process 12:\"python\""


def test_self_and_total_time_from_collapsed_stacks(tmp_path):
    raw = tmp_path / "sync-leader.txt"
    raw.write_text(
        "process 1;main (jetraft/cli/server.py:10);run (jetraft/net/raft/host.py:5);fdatasync (jetraft/storage/fileio.py:9) 6\n"
        "process 1;main (jetraft/cli/server.py:10);run (jetraft/net/raft/host.py:7);packb (msgpack/__init__.py:3) 3\n"
        "process 1;main (jetraft/cli/server.py:10);feed (jetraft/protocol/route.py:1) 1\n"
        "not a line of py-spy's\n")
    stacks = read_stacks(raw)
    assert sum(stacks.values()) == 10
    own, total, samples = top_frames(stacks, top=2)
    assert samples == 10
    assert own == [("fdatasync (jetraft/storage/fileio.py)", 60.0), ("packb (msgpack/__init__.py)", 30.0)]
    # two lines of one function count once per sample; the entry point and others' code are left out
    assert total == [("run (jetraft/net/raft/host.py)", 90.0), ("fdatasync (jetraft/storage/fileio.py)", 60.0)]


def test_bytes_that_are_not_utf8_in_a_frame_do_not_stop_the_report(tmp_path):
    raw = tmp_path / "tls-leader.txt"
    raw.write_bytes(b"process 1;read (ssl.py:1) 2\nprocess 1;f\xfe (x.py:3) 1\n")
    assert sum(read_stacks(raw).values()) == 3


def test_no_samples_no_frames(tmp_path):
    assert top_frames(read_stacks(tmp_path / "absent.txt"), top=5) == ([], [], 0)
