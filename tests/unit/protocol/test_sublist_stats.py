"""SubjectIndex.stats: nats-server Sublist.Stats figures (server/sublist.go) from jetraft's
subject index, and their sum over accounts as /subsz reports it."""

from __future__ import annotations

import pytest

from jetraft.protocol import SubjectIndex, SublistStats


def test_counters_follow_inserts_removes_and_matches():
    index: SubjectIndex[str] = SubjectIndex()
    index.insert("orders.*", "a")
    index.insert("orders.1", "b")
    index.insert("orders.1", "c", "workers")
    index.insert("orders.1", "b")            # already there: not an insert
    assert index.remove("orders.1", "c", "workers")
    assert not index.remove("orders.1", "nobody")
    for _ in range(4):
        index.match("orders.1")
    index.match("other")
    stats = index.stats()
    assert (stats.subscriptions, stats.inserts, stats.removes, stats.matches, stats.cache_hits) == (2, 3, 1, 5, 3)
    report = stats.report
    assert report["num_cache"] == 2                       # orders.1 and other
    assert report["cache_hit_rate"] == pytest.approx(3 / 5)
    assert report["max_fanout"] == 2                      # orders.* and orders.1
    assert report["avg_fanout"] == pytest.approx(1.0)     # (2 + 0) / 2 cached subjects


def test_queue_groups_count_once_in_the_fanout():
    index: SubjectIndex[str] = SubjectIndex()
    for member in ("m1", "m2", "m3"):
        index.insert("work", member, "workers")
    index.insert("work", "plain")
    index.match("work")
    assert index.stats().max_fanout == 2  # one plain subscription, one queue group


def test_a_cached_interest_check_is_a_hit_but_not_a_match():
    """sublist.go hasInterest counts the cache hit, not a match."""
    index: SubjectIndex[str] = SubjectIndex()
    index.insert("a", "x")
    index.match("a")
    assert index.has_interest("a")
    stats = index.stats()
    assert (stats.matches, stats.cache_hits) == (1, 1)


def test_empty_index_reports_zeros():
    assert SubjectIndex().stats().report == {
        "num_subscriptions": 0, "num_cache": 0, "num_inserts": 0, "num_removes": 0, "num_matches": 0,
        "cache_hit_rate": 0, "max_fanout": 0, "avg_fanout": 0}


def test_sum_over_accounts_as_nats_server_adds_them():
    """SublistStats.add: counts summed, the largest fan-out kept, rates from the sums."""
    a = SublistStats(subscriptions=1, cache=1, inserts=1, matches=4, cache_hits=3, total_fanout=1, max_fanout=1)
    b = SublistStats(subscriptions=2, cache=3, inserts=2, removes=1, matches=6, cache_hits=1, total_fanout=9,
                     max_fanout=5)
    report = (SublistStats() + a + b).report
    assert report == {"num_subscriptions": 3, "num_cache": 4, "num_inserts": 3, "num_removes": 1, "num_matches": 10,
                      "cache_hit_rate": pytest.approx(0.4), "max_fanout": 5, "avg_fanout": pytest.approx(2.5)}
