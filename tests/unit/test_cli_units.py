"""The admin CLI's sizes read as natscli prints them (go-humanize v1.0.1 ``IBytes``; the
expected strings are go-humanize's own published examples and natscli's pages)."""

from __future__ import annotations

import pytest

from jetraft.cli.admin.units import format_bytes

KIB, MIB, GIB = 1024, 1024 ** 2, 1024 ** 3


@pytest.mark.parametrize(("size", "shown"), [
    (0, "0 B"), (None, "0 B"), (1, "1 B"), (9, "9 B"), (10, "10 B"), (803, "803 B"), (1023, "1023 B"),
    (KIB, "1.0 KiB"), (1536, "1.5 KiB"), (100 * KIB, "100 KiB"), (300_000, "293 KiB"),
    (MIB - 1, "1024 KiB"), (MIB, "1.0 MiB"), (3 * MIB, "3.0 MiB"), (82_854_982, "79 MiB"),
    (GIB - KIB, "1024 MiB"), (int(5.5 * GIB), "5.5 GiB"), (1024 ** 6, "1.0 EiB"),
    (12.0 * MIB, "12 MiB"), (-2048, "-2.0 KiB"),
])
def test_sizes_read_as_natscli_prints_them(size, shown):
    assert format_bytes(size) == shown
