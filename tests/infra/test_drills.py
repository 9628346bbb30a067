"""The zone-loss drills (destructive: they crash and partition servers). Each asserts
what an operator needs: writes keep being acknowledged while any one zone is lost, the
meta group answers, no write is acknowledged with two zones lost, every replica is
current after healing, and nothing acknowledged is missing from the stream; an R3 mirror
and an R3 stream sourcing the drill's stream hold, once healed, each of its messages once
(the mirror at the same sequences); no message published with a 2 s TTL is served more than
1 s after its TTL passed, and a counter incremented throughout ends at the sum of its
acknowledged increments."""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import INVENTORY
from lab.drills import Drills, Nemesis, Target

pytestmark = [pytest.mark.drill, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def target():
    return Target.from_inventory(INVENTORY)


@pytest.fixture(scope="module")
def drills(target, run_dir):
    return Drills(target, run_dir)


@pytest.fixture(scope="module")
def results(run_dir):
    collected = []
    yield collected
    (run_dir / "drills.json").write_text(json.dumps([r.summary() for r in collected], indent=2))


def _run(drills, target, results, method, *args):
    async def go():
        nemesis = Nemesis(target)
        try:
            return await getattr(drills, method)(*args, nemesis)
        finally:
            nemesis.close()
    result = asyncio.run(go())
    results.append(result)
    return result


def assert_ledger(r) -> None:
    """The ledger on disk holds every attempt; every acknowledged one is marked present; the
    drained stream holds each message once, at the sequence its acknowledgement gave, and
    nothing that was never published."""
    assert (r.duplicates, r.unexpected, r.misplaced) == ([], [], []), (
        r.duplicates[:10], r.unexpected[:10], r.misplaced[:10])
    drained = [json.loads(line) for line in open(r.ledger.replace(".ledger.", ".stream."))]
    assert len({d["msg_id"] for d in drained}) == len(drained)
    rows = [json.loads(line) for line in open(r.ledger)]
    assert len(rows) == r.attempted
    acked = [row for row in rows if row["acked_ns"] is not None]
    assert len(acked) == r.acknowledged
    assert all(row["present"] for row in acked), [row["msg_id"] for row in acked if not row["present"]][:10]
    assert all(row["error"] for row in rows if row["acked_ns"] is None)


def assert_features(r) -> None:
    """The drill's messages with a TTL: acknowledged, and none served more than 1 s after its
    TTL passed; its counter, read back once healed, within the range its acknowledged
    increments and those of unknown outcome allow (their sum when none is unknown); both
    ledgers on disk, one line per message and per attempt (then the value read)."""
    assert r.ttl_acknowledged > 0 and r.ttl_outlived == [], (r.ttl_outlived[:10], r.ttl_ledger)
    assert len(open(r.ttl_ledger).readlines()) == r.ttl_published
    assert r.counter_acknowledged > 0 and r.counter_final is not None
    assert r.counter_low <= r.counter_final <= r.counter_high, (
        f"counter {r.counter_final}, allowed {r.counter_low}..{r.counter_high} (ledger {r.counter_ledger})")
    rows = [json.loads(line) for line in open(r.counter_ledger)]
    assert rows[-1]["kind"] == "final" and int(rows[-1]["val"]) == r.counter_final


@pytest.mark.parametrize("zone", ["a", "b", "c"])
def test_killing_a_zone_keeps_writes_and_the_meta_group_and_loses_nothing(drills, target, results, zone):
    r = _run(drills, target, results, "kill_zone", zone)
    assert_ledger(r)
    assert r.meta_answered
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"
    assert r.copy_problems == []
    assert_features(r)


def test_losing_two_zones_refuses_writes_and_healing_loses_nothing(drills, target, results):
    r = _run(drills, target, results, "lose_two_zones", ["a", "b"])
    assert r.acked_during_outage == 0
    assert_ledger(r)
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"
    assert r.copy_problems == []
    assert_features(r)


def test_partitioning_a_zone_keeps_writes_and_healing_loses_nothing(drills, target, results):
    r = _run(drills, target, results, "partition_zone", "a")
    assert r.client_server in {s.name for s in target.servers} - {s.name for s in target.zone("a")}
    assert_ledger(r)
    assert r.meta_answered
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"
    assert r.copy_problems == []
    assert_features(r)


def test_pausing_the_stream_leader_moves_the_leadership_and_loses_nothing(drills, target, results):
    r = _run(drills, target, results, "pause_leader")
    assert r.client_server in {s.name for s in target.servers}
    assert_ledger(r)
    assert r.meta_answered
    assert r.replicas_current
    assert r.lost == [], f"acknowledged but missing: {r.lost[:10]} (ledger {r.ledger})"
    assert r.copy_problems == []
    assert_features(r)
