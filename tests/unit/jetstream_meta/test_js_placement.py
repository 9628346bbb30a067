"""jetraft.jetstream.placement: nats-server's selectPeerGroup rules and its 10005 texts.

Every error text below was read from nats-server 2.15.1 (five servers on 127.0.0.1,
``unique_tag: "az:"``, STREAM.CREATE replies), unless a test says otherwise.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.placement import (
    NO_SUITABLE_PEERS,
    PeerInfo,
    PlacementError,
    placement_error_body,
    select_peers,
)

SEEDS = range(40)

#: Zones 2/2/1, as the production inventory.
ZONES = [
    PeerInfo("n1", ("az:a",)),
    PeerInfo("n2", ("az:a",)),
    PeerInfo("n3", ("az:b",)),
    PeerInfo("n4", ("az:b",)),
    PeerInfo("n5", ("az:c",)),
]
ZONE_OF = {p.name: p.tags[0] for p in ZONES}


def _with(peers: list[PeerInfo], name: str, **changes) -> list[PeerInfo]:
    """``peers`` with the one named ``name`` changed."""
    out = []
    for p in peers:
        if p.name == name:
            p = PeerInfo(**{**p.__dict__, **changes})
        out.append(p)
    return out


def _error(peers, replicas, **kw) -> PlacementError:
    with pytest.raises(PlacementError) as info:
        select_peers(peers, replicas, **kw)
    return info.value


# --- unique_tag over zones 2/2/1


def test_r3_gets_one_peer_per_zone():
    for seed in SEEDS:
        got = select_peers(ZONES, 3, unique_tag="az:", seed=seed)
        assert len(got) == 3
        assert sorted(ZONE_OF[n] for n in got) == ["az:a", "az:b", "az:c"]


@pytest.mark.parametrize("replicas", [4, 5])
def test_more_replicas_than_zones_fails_with_nats_server_text(replicas):
    err = _error(ZONES, replicas, unique_tag="az:", seed=1)
    assert str(err) == "no suitable peers for placement, server tag not unique"
    assert err.description == str(err)
    assert err.reason == "server tag not unique"
    assert err.unique_tag and not err.offline
    assert placement_error_body(err) == {
        "code": 400, "err_code": 10005,
        "description": "no suitable peers for placement, server tag not unique",
    }


def test_r5_without_unique_tag_uses_every_server():
    for seed in SEEDS:
        assert sorted(select_peers(ZONES, 5, seed=seed)) == ["n1", "n2", "n3", "n4", "n5"]


def test_unique_tag_prefix_is_case_insensitive_on_both_sides():
    peers = [PeerInfo("x", ("AZ:A",)), PeerInfo("y", (" az:a ",)), PeerInfo("z", ("Az:B",))]
    for seed in SEEDS:
        got = select_peers(peers, 2, unique_tag="AZ:", seed=seed)
        assert "z" in got and len(got) == 2
    assert _error(peers, 3, unique_tag="az:").reason == "server tag not unique"


def test_peer_without_the_unique_tag_is_not_eligible():
    # nats-server checkUniqueTag: "default requires the unique prefix to be present".
    peers = ZONES[:4] + [PeerInfo("bare", ("rack:1",))]
    err = _error(peers, 3, unique_tag="az:")
    assert str(err) == "no suitable peers for placement, server tag not unique"
    assert "bare" not in select_peers(peers, 2, unique_tag="az:", seed=3)


def test_placement_tag_with_the_unique_prefix_turns_uniqueness_off():
    # nats-server 2.15.1: R2 with placement tags ["az:a"] lands on both az:a servers.
    for seed in SEEDS:
        assert sorted(select_peers(ZONES, 2, unique_tag="az:", placement_tags=("az:a",), seed=seed)) == ["n1", "n2"]
        got = select_peers(ZONES, 2, unique_tag="az:", placement_tags=("!az:a", "!az:c"), seed=seed)
        assert sorted(got) == ["n3", "n4"]


# --- offline servers


def test_never_heard_from_peer_is_not_selectable():
    peers = _with(ZONES, "n5", online=False)
    for seed in SEEDS:
        assert "n5" not in select_peers(peers, 1, unique_tag="az:", seed=seed)
        assert "n5" not in select_peers(peers, 3, seed=seed)
    err = _error(peers, 3, unique_tag="az:", seed=1)
    assert str(err) == "no suitable peers for placement, peer offline, server tag not unique"


def test_offline_peer_ranks_last_but_may_complete_a_quorate_group():
    # nats-server keeps a server that went away (nodeInfo.offline) as a candidate, sorted last.
    peers = _with(ZONES, "n5", online=False, offline_since_ns=1_000)
    for seed in SEEDS:
        assert select_peers(peers, 1, seed=seed) != ["n5"]
        assert "n5" not in select_peers(peers, 3, seed=seed)
        got = select_peers(peers, 3, unique_tag="az:", seed=seed)
        assert "n5" in got and sorted(ZONE_OF[n] for n in got) == ["az:a", "az:b", "az:c"]


def test_group_without_an_online_quorum_fails_as_peer_offline():
    # nats-server 2.15.1: az:b servers stopped, R1/R2 with placement tags ["az:b"].
    peers = _with(_with(ZONES, "n3", online=False, offline_since_ns=5), "n4", online=False, offline_since_ns=5)
    for replicas in (1, 2):
        err = _error(peers, replicas, unique_tag="az:", placement_tags=("az:b",))
        assert str(err) == "no suitable peers for placement, peer offline, tags not matched ['az:b']"
    # R2 with zone uniqueness: one online az:a, one offline az:b -> no online quorum of 2.
    err = _error(peers[:4], 2, unique_tag="az:")
    assert str(err) == "no suitable peers for placement, peer offline, server tag not unique"
    three = [PeerInfo("a"), PeerInfo("b", online=False, offline_since_ns=1), PeerInfo("c", online=False, offline_since_ns=1)]
    assert str(_error(three, 3)) == "no suitable peers for placement, peer offline"
    assert select_peers(three, 1, seed=0) == ["a"]


# --- placement tags, clusters, exclusions


def test_placement_tags_filter_and_report_the_first_missing_tag():
    peers = [PeerInfo("s0", ("AZ:A", "rack:1")), *ZONES[1:]]
    assert select_peers(peers, 1, placement_tags=("rack:1",)) == ["s0"]
    assert select_peers(peers, 1, placement_tags=("RACK:1", "az:A")) == ["s0"]
    err = _error(peers, 1, unique_tag="az:", placement_tags=("rack:1", "foo", "bar"))
    assert str(err) == "no suitable peers for placement, tags not matched ['rack:1', 'foo']"
    err = _error(peers, 3, unique_tag="az:", placement_tags=("az:x",))
    assert str(err) == "no suitable peers for placement, tags not matched ['az:x']"
    assert err.no_match_tags == ("az:x",)
    # Reported as given, not lowercased (nats-server 2.15.1: 'AZ:X').
    assert str(_error(peers, 1, placement_tags=("AZ:X",))) == "no suitable peers for placement, tags not matched ['AZ:X']"


def test_excluded_tags_are_reported():
    err = _error(ZONES, 4, unique_tag="az:", placement_tags=("!az:a",))
    assert str(err) == "no suitable peers for placement, tags excluded ['az:a']"
    err = _error(ZONES, 3, unique_tag="az:", placement_tags=("!az:a", "!az:b"))
    assert str(err) == "no suitable peers for placement, tags excluded ['az:a', 'az:b']"


def test_exclude_placement_server_tag():
    peers = ZONES[:4] + [PeerInfo("t4", ("rack:9", "!JetStream"))]
    err = _error(peers, 3, unique_tag="az:")
    assert str(err) == "no suitable peers for placement, exclude tag set, server tag not unique"
    assert "t4" not in select_peers(peers, 4, seed=2)


def test_placement_cluster():
    peers = [PeerInfo("a", cluster="C1"), PeerInfo("b", cluster="C2"), PeerInfo("c", cluster="C2")]
    assert sorted(select_peers(peers, 2, placement_cluster="C2")) == ["b", "c"]
    err = _error(peers, 1, placement_cluster="X")
    assert str(err) == NO_SUITABLE_PEERS and err.reason == ""


def test_no_jetstream_servers():
    err = _error([PeerInfo("a", jetstream=False)], 1)
    assert str(err) == "no suitable peers for placement, jetstream not enabled in cluster"
    assert select_peers([PeerInfo("a", jetstream=False), PeerInfo("b")], 1) == ["b"]


def test_replicas_out_of_range():
    for bad in (0, 6, -1, True, 2.0):
        with pytest.raises(ValueError):
            select_peers(ZONES, bad)


# --- replacement after peer removal


def test_replacement_keeps_zone_uniqueness_and_excludes_the_removed_peer():
    # The stream was on n1 (az:a), n3 (az:b), n5 (az:c); n1 is peer-removed.
    for seed in SEEDS:
        got = select_peers(ZONES, 3, unique_tag="az:", existing=("n3", "n5"), exclude=("n1",), seed=seed)
        assert got == ["n3", "n5", "n2"]
    # Without n1 excluded, either az:a server may come back, never an az:b or az:c one.
    for seed in SEEDS:
        got = select_peers(ZONES, 3, unique_tag="az:", existing=("n3", "n5"), seed=seed)
        assert got[:2] == ["n3", "n5"] and got[2] in ("n1", "n2")


def test_replacement_fails_when_the_only_server_of_a_zone_is_removed():
    err = _error(ZONES, 3, unique_tag="az:", existing=("n1", "n3"), exclude=("n5",))
    assert str(err) == "no suitable peers for placement, server tag not unique"


def test_existing_covering_the_replicas_is_returned_as_is():
    assert select_peers(ZONES, 2, existing=("n4", "n3", "n1")) == ["n4", "n3"]


# --- choice


def test_less_loaded_peers_are_preferred():
    load = {"n1": 5, "n2": 0, "n3": 3, "n4": 0, "n5": 0}
    for seed in SEEDS:
        assert sorted(select_peers(ZONES, 3, load=load, seed=seed)) == ["n2", "n4", "n5"]
    # Within a zone too: the less loaded server of each zone is the one chosen.
    load = {"n1": 9, "n2": 0, "n3": 0, "n4": 9, "n5": 4}
    for seed in SEEDS:
        assert sorted(select_peers(ZONES, 3, unique_tag="az:", load=load, seed=seed)) == ["n2", "n3", "n5"]


def test_seed_makes_the_choice_deterministic_and_seeds_spread_it():
    picks = {tuple(select_peers(ZONES, 3, unique_tag="az:", seed=s)) for s in SEEDS}
    assert all(select_peers(ZONES, 3, unique_tag="az:", seed=s) == select_peers(ZONES, 3, unique_tag="az:", seed=s)
               for s in SEEDS)
    assert {n for p in picks for n in p} == {"n1", "n2", "n3", "n4", "n5"}


# --- property


_peer_rows = st.lists(
    st.tuples(
        st.sampled_from(["az:a", "az:b", "az:c", "az:d", None]),
        st.sampled_from(["online", "offline", "never"]),
        st.booleans(),  # jetstream
    ),
    max_size=9,
)


@settings(max_examples=400, deadline=None)
@given(rows=_peer_rows, replicas=st.integers(1, 5), unique=st.booleans(), seed=st.integers(0, 2**32))
def test_property_result_is_valid_and_found_whenever_possible(rows, replicas, unique, seed):
    peers = [
        PeerInfo(f"p{i}", (zone,) if zone else ("rack:x",), online=state == "online", jetstream=js,
                 offline_since_ns=7 if state == "offline" else None)
        for i, (zone, state, js) in enumerate(rows)
    ]
    by_name = {p.name: p for p in peers}
    usable = [p for p in peers if p.jetstream and p.selectable and (not unique or p.tags[0].startswith("az:"))]
    online_usable = [p for p in usable if p.online]
    if unique:
        possible = len({p.tags[0] for p in online_usable}) >= replicas
    else:
        possible = len(online_usable) >= replicas
    try:
        got = select_peers(peers, replicas, unique_tag="az:" if unique else None, seed=seed)
    except PlacementError as err:
        assert not possible
        assert str(err).startswith(NO_SUITABLE_PEERS)
        return
    assert len(got) == replicas == len(set(got))
    assert all(by_name[n] in usable for n in got)
    assert sum(by_name[n].online for n in got) >= replicas // 2 + 1
    if unique:
        assert len({by_name[n].tags[0] for n in got}) == replicas
