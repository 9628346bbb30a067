"""The lab's command line says what is wrong, without touching anything, when a host or
zone does not exist or the lab is not up (state in a directory of the test's own)."""

from __future__ import annotations

import subprocess

from playbook import run_lab


def lab(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return run_lab(tmp_path / "state", *args)


def test_an_unknown_host_is_named_with_the_known_ones(tmp_path):
    result = lab(tmp_path, "kill", "jr-z9")
    assert result.returncode == 1
    assert "no lab host 'jr-z9'; the hosts are jr-a1, jr-a2, jr-b1, jr-b2, jr-c1" in result.stderr


def test_an_unknown_zone_is_named(tmp_path):
    result = lab(tmp_path, "partition", "zone:q")
    assert result.returncode == 1
    assert "no zone 'q'; the zones are a, b, c" in result.stderr


def test_a_fault_on_a_lab_that_is_not_up_says_how_to_bring_it_up(tmp_path):
    result = lab(tmp_path, "kill", "zone:a")
    assert result.returncode == 1
    assert "the lab is not up (no jr-a1): run `python -m lab up`" in " ".join(result.stderr.split())


def test_status_of_a_lab_that_is_not_up_lists_every_host_stopped(tmp_path):
    result = lab(tmp_path, "status")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "jr-" in line]
    assert len(rows) == 5 and all(" no " in row for row in rows)


def test_status_names_each_hosts_debian_zone_c_on_trixie_by_default(tmp_path):
    result = lab(tmp_path, "status")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if "jr-" in line}
    assert " trixie " in rows["jr-c1"]
    assert all(" bookworm " in rows[h] for h in ("jr-a1", "jr-a2", "jr-b1", "jr-b2"))


def test_an_unknown_suite_is_refused_naming_the_suites(tmp_path):
    result = lab(tmp_path, "up", "--suite", "buster")
    assert result.returncode == 2
    assert "'buster' is not one of 'mixed', 'bookworm', 'trixie'" in " ".join(result.stderr.split())
    assert not (tmp_path / "state").exists()


def test_up_and_run_default_to_the_mixed_lab(tmp_path):
    for command in ("up", "run"):
        result = lab(tmp_path, command, "--help")
        assert result.returncode == 0, result.stderr
        assert "[default: mixed]" in " ".join(result.stdout.split())
