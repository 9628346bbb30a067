"""Seeded random runs of a jetraft RAFT group in the simulator (see raftsim_random).

``JETRAFT_SIM_SEEDS`` (default 500) runs; each run is at least ``JETRAFT_SIM_STEPS``
(default 5000) events of a 3-node (even seeds) or 5-node (odd seeds) group under a
nemesis of partitions (clean and one-way), crashes losing unsynced writes (some with a
torn append), restarts, message loss / duplication / reordering, leadership transfers,
snapshots with compaction, and (seeds = 3 mod 4) membership changes. Safety invariants
are checked after every event; liveness at random heal points and at the end.

A failure prints the seed, the invariant and the last events; replay one seed with
``JETRAFT_SIM_REPLAY=<seed> .venv/bin/pytest tests/sim -k replay -s`` (it prints the
whole trace as it goes when ``JETRAFT_SIM_VERBOSE=1``).
"""

from __future__ import annotations

import os

import pytest
from raftsim import InvariantViolation
from raftsim_random import RandomSim, SimParams

SEEDS = int(os.environ.get("JETRAFT_SIM_SEEDS", "500"))
STEPS = int(os.environ.get("JETRAFT_SIM_STEPS", "5000"))
FIRST = int(os.environ.get("JETRAFT_SIM_FIRST_SEED", "0"))
CHUNK = 25  # seeds per test item: keeps the item count (and pytest overhead) small


def _run(seed: int) -> RandomSim:
    sim = RandomSim(seed, SimParams.for_seed(seed, steps=STEPS))
    try:
        return sim.run()
    except InvariantViolation as exc:
        pytest.fail(f"RAFT invariant violated ({exc.invariant})\n{exc.detail}", pytrace=False)


def _chunks():
    for lo in range(FIRST, FIRST + SEEDS, CHUNK):
        hi = min(lo + CHUNK, FIRST + SEEDS)
        yield pytest.param(lo, hi, id=f"seeds{lo}-{hi - 1}")


@pytest.mark.timeout(0)
@pytest.mark.parametrize("lo,hi", list(_chunks()))
def test_sim_random_seeds(lo: int, hi: int) -> None:
    for seed in range(lo, hi):
        sim = _run(seed)
        assert sim.steps >= STEPS
        # the run did something: entries were committed, and the final liveness check ran
        assert len(sim.cluster.checker.applied) > 1, f"seed {seed}: nothing was ever committed"
        assert sim.liveness_checks >= 1


@pytest.mark.skipif("JETRAFT_SIM_REPLAY" not in os.environ, reason="set JETRAFT_SIM_REPLAY=<seed>")
def test_sim_replay() -> None:
    """Replays one seed; with JETRAFT_SIM_VERBOSE=1 prints every event."""
    seed = int(os.environ["JETRAFT_SIM_REPLAY"])
    sim = RandomSim(seed, SimParams.for_seed(seed, steps=STEPS))
    if os.environ.get("JETRAFT_SIM_VERBOSE"):
        sim.cluster.trace = _Printer()
    try:
        sim.run()
    except InvariantViolation as exc:
        pytest.fail(f"RAFT invariant violated ({exc.invariant})\n{exc.detail}", pytrace=False)
    print(f"seed {seed}: {sim.steps} events, virtual time {sim.cluster.now}, {sim.stats}")


def test_sim_is_deterministic() -> None:
    """The same seed gives the same run, event for event."""
    a = RandomSim(7, SimParams.for_seed(7, steps=600)).run()
    b = RandomSim(7, SimParams.for_seed(7, steps=600)).run()
    assert a.cluster.format_trace() == b.cluster.format_trace()
    assert a.stats == b.stats
    assert a.cluster.checker.applied == b.cluster.checker.applied


class _Printer(list):
    """A trace sink that prints each event as it happens (replay with JETRAFT_SIM_VERBOSE)."""

    maxlen = None

    def append(self, item) -> None:  # type: ignore[override]
        now, what, args = item
        from raftsim import describe_msg

        if what == "deliver":
            print(f"{now:>8} deliver {describe_msg(args[0])}")
        else:
            print(f"{now:>8} {what} {' '.join(str(a) for a in args)}")
