"""The fault campaign's schedule (lab/schedule.py): the same seed draws the same faults on
any machine and whatever the inventory's order, in Jepsen's shape (fault windows, quiet
windows, a quiet end), and no two faults meet on a host unless composed on purpose."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab import topology
from lab.schedule import (
    DEFAULT_KINDS,
    FILE_CLASSES,
    FILE_KINDS,
    KINDS,
    MEMBERSHIP,
    MEMBERSHIP_ACTIONS,
    PARTITION_SHAPES,
    Fault,
    ScheduleError,
    digest,
    draw,
)

LAB = [(h.name, h.zone) for h in topology.HOSTS]
ZONES = {h.name: h.zone for h in topology.HOSTS}

#: Seed 20240601, ten minutes, the lab's five servers: drawn once and written down. A
#: change here changes every campaign's replay command; make it on purpose.
EXPECTED_DIGEST = "49a1428fbf58929b35a08c655ab1beec9884b4b9f96c2ac11e8c92f4ccfdd663"


def clusters() -> st.SearchStrategy[list[tuple[str, str]]]:
    """Three to seven servers in one to four zones, names unique."""
    return st.integers(3, 7).flatmap(lambda n: st.lists(
        st.sampled_from("abcd"), min_size=n, max_size=n).map(
            lambda zones: [(f"s{i}-{z}", z) for i, z in enumerate(zones)]))


kinds_subsets = st.sets(st.sampled_from(sorted(KINDS)), min_size=1)


def test_a_seed_draws_the_schedule_written_down():
    faults = draw(20240601, 10, LAB)
    assert digest(faults) == EXPECTED_DIGEST
    assert faults[0] == Fault("power-loss", ("jr-c1",), 15.3, 32.4,
                              {"scope": "zone", "zone": "c"})


def test_inventory_order_does_not_change_the_schedule():
    shuffled = [LAB[3], LAB[0], LAB[4], LAB[2], LAB[1]]
    assert draw(99, 8, shuffled) == draw(99, 8, LAB)


def test_another_seed_draws_another_schedule():
    assert digest(draw(1, 10, LAB)) != digest(draw(2, 10, LAB))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**64), minutes=st.floats(0.6, 40), servers=clusters(),
       kinds=st.one_of(st.none(), kinds_subsets))
def test_invariants_hold_for_any_seed_length_cluster_and_kinds(seed, minutes, servers, kinds):
    faults = draw(seed, minutes, servers, kinds=kinds)
    assert faults == draw(seed, minutes, list(reversed(servers)), kinds=kinds)
    check_invariants(faults, minutes, servers, DEFAULT_KINDS if kinds is None else kinds)


def check_invariants(faults: list[Fault], minutes: float, servers, kinds) -> None:
    names = {n for n, _ in servers}
    zones: dict[str, set[str]] = {}
    for n, z in servers:
        zones.setdefault(z, set()).add(n)
    last = minutes * 60 - 30
    assert faults == sorted(faults, key=lambda f: (f.start_s, f.end_s, f.kind))
    for f in faults:
        assert f.kind in kinds
        assert 0 < f.start_s < f.end_s <= last + 1e-9, f      # healed before the quiet end
        assert set(f.targets) <= names and len(set(f.targets)) == len(f.targets)
        if f.kind != MEMBERSHIP:
            assert f.targets, f
        scope = f.param("scope")
        if scope == "zone":
            assert set(f.targets) == zones[f.param("zone")] != names
        if scope == "majority" or f.param("shape") == "majority":
            assert len(f.targets) == len(names) // 2 + 1
        if scope == "one" or f.param("shape") == "one":
            assert len(f.targets) == 1
        if f.kind == "partition":
            assert f.param("shape") in PARTITION_SHAPES
            if f.param("shape") == "majorities-ring":
                assert sorted(f.param("ring")) == sorted(names) == sorted(f.targets)
        if f.kind in FILE_KINDS:
            assert f.param("file_class") in FILE_CLASSES and isinstance(f.param("seed"), int)
        if f.kind == MEMBERSHIP:
            assert f.param("action") in MEMBERSHIP_ACTIONS
            assert 120 - 1e-9 <= f.end_s - f.start_s <= 240 + 1e-9
        elif f.param("flap_s") is not None:
            assert f.end_s - f.start_s == pytest.approx(f.param("flap_s"))
        elif f.param("composed") == "membership-part":
            assert 0 < f.end_s - f.start_s <= 25 + 1e-9, f    # cut short by the window's end
        elif f.param("composed") is None or f.kind != "kill":
            assert 5 - 1e-9 <= f.end_s - f.start_s <= 25 + 1e-9, f
    # the faults that touch files hit one host, the same all run long
    assert len({f.targets for f in faults if f.kind in FILE_KINDS}) <= 1
    assert all(len(f.targets) == 1 for f in faults if f.kind in FILE_KINDS)
    # overlaps only inside a deliberate composition
    for i, a in enumerate(faults):
        for b in faults[i + 1:]:
            if b.start_s >= a.end_s:
                continue
            composed = a.param("composed")
            assert composed is not None and composed == b.param("composed"), (a, b)
            if composed == "membership-part":
                change, cut = (a, b) if a.kind == MEMBERSHIP else (b, a)
                assert (change.kind, cut.kind, cut.param("shape")) == (MEMBERSHIP, "partition", "one")
                assert change.start_s < cut.start_s < cut.end_s <= change.end_s
                if change.param("action") in ("replace-host", "peer-remove-readd"):
                    assert not set(cut.targets) & set(change.targets), "the replaced host cut off"
                continue
            outer, kill = (a, b) if b.kind == "kill" else (b, a)
            assert kill.kind == "kill"
            assert outer.start_s < kill.start_s < kill.end_s < outer.end_s
            if composed == "part-kill":
                assert outer.kind == "partition"
            else:
                assert composed == "pause-kill" and outer.kind == "pause"
                assert not set(kill.targets) & set(outer.targets), "a paused host killed"
    # quiet windows of 10 s at least between windows (a flapping partition's own gaps aside)
    windows = _windows(faults)
    for (_, end, ka), (start, _, kb) in zip(windows, windows[1:]):
        gap = start - end
        if gap < 10 - 1e-9:
            assert ka == kb and ka.param("flap_s") == pytest.approx(gap), (ka, kb)
    if windows:
        assert windows[0][0] >= 10 - 1e-9


def _windows(faults: list[Fault]) -> list[tuple[float, float, Fault]]:
    """Intervals of faults in force, overlapping faults merged: (start, end, first fault)."""
    out: list[tuple[float, float, Fault]] = []
    for f in faults:
        if out and f.start_s < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], f.end_s), out[-1][2])
        else:
            out.append((f.start_s, f.end_s, f))
    return [(s, e, _same_partition(f)) for s, e, f in out]


def _same_partition(f: Fault) -> Fault:
    """Compare flapping partitions by their cut, not their times."""
    return Fault(f.kind, f.targets, 0, 1, f.params) if f.param("flap_s") else f


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_every_kind_fits_a_three_minute_run(seed):
    faults = draw(seed, 3, LAB, every_kind=True)
    assert {f.kind for f in faults} == set(DEFAULT_KINDS)
    check_invariants(faults, 3, LAB, DEFAULT_KINDS)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_every_kind_with_membership_when_asked_and_long_enough(seed):
    faults = draw(seed, 8, LAB, kinds=set(KINDS), every_kind=True)
    assert {f.kind for f in faults} == set(KINDS)
    check_invariants(faults, 8, LAB, set(KINDS))


def test_a_run_too_short_for_every_kind_says_how_long_it_must_be():
    with pytest.raises(ScheduleError, match=r"2 minutes is too short for every kind of fault"
                                            r" .*: at least 2\.5 minutes"):
        draw(1, 2, LAB, every_kind=True)
    with pytest.raises(ScheduleError, match=r"at least 4\.7 minutes"):
        draw(1, 3, LAB, kinds=set(KINDS), every_kind=True)


def test_membership_is_drawn_only_when_asked_for():
    assert MEMBERSHIP not in DEFAULT_KINDS
    assert not [f for s in range(20) for f in draw(s, 10, LAB) if f.kind == MEMBERSHIP]
    alone = draw(5, 10, LAB, kinds={MEMBERSHIP})
    assert alone and {f.kind for f in alone} == {MEMBERSHIP}


def test_a_membership_change_under_a_partition_when_both_are_asked_for():
    """Jepsen's membership changes under partitions (nats-server issue 7545): with both
    kinds, each change has one other server cut off in its middle."""
    faults = draw(3, 6, LAB, kinds={MEMBERSHIP, "partition"}, every_kind=True)
    changes = [f for f in faults if f.kind == MEMBERSHIP]
    assert changes and all(f.param("composed") == "membership-part" for f in changes)
    for change in changes:
        cuts = [f for f in faults if f.kind == "partition" and f.param("composed") == "membership-part"
                and change.start_s < f.start_s < change.end_s]
        assert len(cuts) == 1 and not (len(change.targets) == 1 and cuts[0].targets == change.targets)
    check_invariants(faults, 6, LAB, {MEMBERSHIP, "partition"})


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_is_reachable_alone(kind):
    faults = draw(11, 10, LAB, kinds={kind})
    assert faults and {f.kind for f in faults} == {kind}


def test_every_shape_composition_scope_and_flap_is_reachable():
    faults = [f for seed in range(40) for f in draw(seed, 10, LAB)]
    assert {f.param("shape") for f in faults if f.kind == "partition"} == set(PARTITION_SHAPES)
    assert {f.param("composed") for f in faults} == {None, "part-kill", "pause-kill"}
    assert any(f.param("flap_s") for f in faults)
    assert {f.param("scope") for f in faults if f.kind == "kill"} == {"one", "zone", "majority"}
    assert {f.param("scope") for f in faults if f.kind == "power-loss"} == {"one", "zone", "all"}
    assert {f.param("file_class") for f in faults if f.kind in FILE_KINDS} == set(FILE_CLASSES)
    assert {f.param("direction") for f in faults if f.kind == "packet-loss"} == {"one-way", "both"}


def test_the_corruption_host_is_drawn_from_the_seed():
    hosts = {draw(seed, 10, LAB, kinds=set(FILE_KINDS))[0].targets for seed in range(30)}
    assert len(hosts) > 1


def test_faults_round_trip_through_json():
    faults = draw(3, 10, LAB, kinds=set(KINDS))
    text = json.dumps([f.as_dict() for f in faults])
    back = [Fault.from_dict(d) for d in json.loads(text)]
    assert back == faults and digest(back) == digest(faults)
    ring = next(f for s in range(40) for f in draw(s, 10, LAB)
                if f.param("shape") == "majorities-ring")
    assert Fault.from_dict(json.loads(json.dumps(ring.as_dict()))) == ring
    assert isinstance(ring.as_dict()["params"]["ring"], list)


def test_params_given_as_a_mapping_or_pairs_are_the_same_fault():
    a = Fault("kill", ["jr-a1"], 1.0, 2.0, {"scope": "one", "composed": "part-kill"})
    b = Fault("kill", ("jr-a1",), 1.0, 2.0, (("scope", "one"), ("composed", "part-kill")))
    assert a == b and hash(a) == hash(b)
    assert a.param("scope") == "one" and a.param("missing", 3) == 3


def test_unknown_kinds_and_small_clusters_are_refused():
    with pytest.raises(ScheduleError, match="no kind of fault 'flood': the kinds are kill, pause"):
        draw(1, 10, LAB, kinds={"kill", "flood"})
    with pytest.raises(ScheduleError, match="at least three servers, not 2"):
        draw(1, 10, LAB[:2])
    with pytest.raises(ScheduleError, match="server names repeat"):
        draw(1, 10, LAB + [("jr-a1", "c")])
    with pytest.raises(ScheduleError, match="positive number of minutes"):
        draw(1, 0, LAB)


def test_each_kind_has_a_one_line_description():
    assert set(KINDS) == set(DEFAULT_KINDS) | {MEMBERSHIP}
    for kind, text in KINDS.items():
        assert text and "\n" not in text, kind
