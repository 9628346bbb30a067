"""The appliance tests run ansible-playbook (tens of seconds each alone, minutes on a machine
busy with the rest of the suite): each may take 300 s before pytest-timeout stops it, unless
it says otherwise (pyproject.toml's 120 s is for the rest of the suite)."""

from __future__ import annotations

import pytest

APPLIANCE_TIMEOUT_S = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "appliance" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(APPLIANCE_TIMEOUT_S))
