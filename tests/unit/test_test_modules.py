"""The test tree's own rule: test modules are imported by their file name alone (the test
folders are not packages), so two files of one name in different folders stop the whole
run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_file_name():
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"test modules sharing a name: {shared}"
