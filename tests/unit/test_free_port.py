"""tests/servers.py hands each pytest-xdist worker of a run its own ports."""

from __future__ import annotations

import pytest

import servers


def worker_env(index: int, count: int) -> dict[str, str]:
    return {"PYTEST_XDIST_WORKER": f"gw{index}", "PYTEST_XDIST_WORKER_COUNT": str(count)}


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_the_workers_of_a_run_take_disjoint_slices_of_the_range(count):
    slices = [servers.worker_range(20768, 32768, worker_env(i, count)) for i in range(count)]
    ports = [set(range(*s)) for s in slices]
    assert all(len(p) == 12000 // count for p in ports)
    assert len(set().union(*ports)) == sum(map(len, ports))
    assert all(20768 <= low < high <= 32768 for low, high in slices)


@pytest.mark.parametrize("env", [{}, {"PYTEST_XDIST_WORKER": "master"},
                                 {"PYTEST_XDIST_WORKER": "gw2", "PYTEST_XDIST_WORKER_COUNT": "2"}])
def test_outside_a_worker_the_whole_range(env):
    assert servers.worker_range(20768, 32768, env) == (20768, 32768)


def test_free_port_stays_in_this_process_range_and_never_repeats():
    low, high = servers.PORT_RANGE
    ports = [servers.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(low <= p < high for p in ports)
