"""Subject rules and SubjectIndex, against tables from nats-server's sublist tests and a naive model."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.protocol import (
    Match,
    SubjectIndex,
    is_valid_literal_subject,
    is_valid_subject,
    subject_matches,
    subjects_overlap,
)

# ------------------------------------------------------------ validity

# (subject, is_valid_subject, is_valid_literal_subject); most rows from nats-server's
# sublist_test.go TestSublistValidSubjects / TestSublistValidLiteralSubjects.
VALIDITY = [
    ("foo", True, True), ("foo.bar", True, True), ("_INBOX.x.y", True, True), ("$JS.API.>", True, False),
    ("foo.bar.*", True, False), ("foo.bar.>", True, False), ("*", True, False), (">", True, False),
    ("*.*.>", True, False), ("foo.*.bar", True, False), ("_INBOX.abc.*", True, False),
    # `*` and `>` inside a longer token are ordinary characters.
    ("foo*", True, True), ("foo**", True, True), ("foo.**", True, True), ("foo*bar", True, True),
    ("foo.*bar", True, True), ("foo*.bar", True, True), ("*bar", True, True), ("foo>", True, True),
    ("foo>>", True, True), ("foo.>>", True, True), ("foo>bar", True, True), ("foo.>bar", True, True),
    ("foo>.bar", True, True), (">bar", True, True), ("caf\u00e9.\udcff", True, True),
    ("", False, False), (".", False, False), (".foo", False, False), ("foo.", False, False),
    ("foo..bar", False, False), (">.bar", False, False), ("foo.>.bar", False, False), ("a.>.>", False, False),
    ("foo bar", False, False), ("foo\tbar", False, False), ("foo.\r", False, False), ("\n", False, False),
    ("a\x0cb", False, False), (" ", False, False),
]


@pytest.mark.parametrize(("subject", "valid", "literal"), VALIDITY)
def test_validity(subject: str, valid: bool, literal: bool) -> None:
    assert is_valid_subject(subject) is valid
    assert is_valid_literal_subject(subject) is literal


# ------------------------------------------------------------ matching


def ref_match(filter_tokens: list[str], subject_tokens: list[str]) -> bool:
    """Naive reference: `*` takes one token, a final `>` one or more, the rest compare equal."""
    if not filter_tokens:
        return not subject_tokens
    head = filter_tokens[0]
    if head == ">":
        return len(filter_tokens) == 1 and len(subject_tokens) >= 1
    if not subject_tokens:
        return False
    return (head == "*" or head == subject_tokens[0]) and ref_match(filter_tokens[1:], subject_tokens[1:])


MATCHES = [
    ("foo", "foo", True), ("bar", "foo", False), ("*", "foo", True), (">", "foo", True),
    (">", "foo.bar", True), ("foo.>", "foo.bar", True), ("bar.>", "foo.bar", False),
    ("stats.>", "stats.test.22", True), ("stats.*.*", "stats.test.22", True), ("foo", "foo.bar", False),
    ("stats.test.foos", "stats.test.foos", True), ("stats.test.foo", "stats.test.foos", False),
    ("stats.test.*", "stats.test", False), ("stats.*", "stats.test.foos", False),
    ("stats.*.*.foos", "stats.test.foos", False), ("foo.>", "foo", False), ("*.>", "a", False),
    ("*.>", "a.b", True), ("*bar", "*bar", True), ("foo*", "foo*", True), ("foo*", "fooX", False),
    ("foo.***.bar", "foo.***.bar", True), (">bar", ">bar", True), ("foo>bar", "foo>bar", True),
    # A subject is taken literally: its `*` is just a token for the filter's wildcards.
    ("foo.*", "foo.*", True), ("foo.>", "foo.*", True), ("foo.bar", "foo.*", False),
    # Bad subjects or filters match nothing.
    ("foo.*", "foo..bar", False), ("foo..bar", "foo..bar", False), ("*", "", False), ("a.>.b", "a.x.b", False),
]


@pytest.mark.parametrize(("filt", "subject", "expected"), MATCHES)
def test_subject_matches_table(filt: str, subject: str, expected: bool) -> None:
    assert subject_matches(filt, subject) is expected


@pytest.mark.parametrize(("filt", "subject", "expected"), MATCHES)
def test_index_matches_table(filt: str, subject: str, expected: bool) -> None:
    index: SubjectIndex[str] = SubjectIndex()
    if not is_valid_subject(filt):
        with pytest.raises(ValueError):
            index.insert(filt, "s")
        return
    index.insert(filt, "s")
    assert index.match(subject).plain == (("s",) if expected else ())
    assert index.has_interest(subject) is expected


TOKENS = st.sampled_from(["a", "b", "c", "*", ">"])
FILTERS = st.lists(TOKENS, min_size=1, max_size=4).map(".".join).filter(is_valid_subject)
SUBJECTS = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=5).map(".".join)
ANY_SUBJECTS = st.lists(st.sampled_from(["a", "b", "", "*", ">"]), min_size=1, max_size=4).map(".".join)


@settings(deadline=None, max_examples=300)
@given(FILTERS, SUBJECTS)
def test_subject_matches_agrees_with_reference(filt: str, subject: str) -> None:
    assert subject_matches(filt, subject) is ref_match(filt.split("."), subject.split("."))


# ------------------------------------------------------------ overlap

OVERLAPS = [
    ("foo", "foo", True), ("foo", "bar", False), ("foo.*", "foo.bar", True), ("foo.*", "foo.*.bar.>", False),
    ("foo.*.bar.>", "foo.*", False), ("foo.*", "*.foo", True), ("foo.bar.>", "*.bar.foo", True),
    ("foo.>", "foo", False), (">", "a.b.c", True), ("a.>", "*", False), ("a.*.>", "a.>", True),
    ("*.*", "*", False), ("a.b", "a.b.c", False), ("*.b", "a.*", True), ("a.*", "b.*", False),
    ("foo*", "foo.*", False), ("foo..bar", "foo.*.bar", False), ("", ">", False),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAPS)
def test_subjects_overlap_table(a: str, b: str, expected: bool) -> None:
    assert subjects_overlap(a, b) is expected
    assert subjects_overlap(b, a) is expected


def brute_force_overlap(a: str, b: str) -> bool:
    """Is there a literal subject both match? Literal tokens of a and b plus a fresh one suffice."""
    ta, tb = a.split("."), b.split(".")
    alphabet = sorted({t for t in ta + tb if t not in ("*", ">")} | {"fresh"})
    for length in range(1, max(len(ta), len(tb)) + 2):
        for candidate in itertools.product(alphabet, repeat=length):
            if ref_match(ta, list(candidate)) and ref_match(tb, list(candidate)):
                return True
    return False


@settings(deadline=None, max_examples=300)
@given(FILTERS, FILTERS)
def test_subjects_overlap_agrees_with_brute_force(a: str, b: str) -> None:
    assert subjects_overlap(a, b) is brute_force_overlap(a, b)


# ------------------------------------------------------------ SubjectIndex


class Model:
    """The naive reference: a set of (filter, queue, item); matching scans all of it."""

    def __init__(self) -> None:
        self.subs: set[tuple[str, str | None, int]] = set()

    def match(self, subject: str) -> tuple[Counter, dict[str, Counter]]:
        plain: Counter = Counter()
        queues: dict[str, Counter] = {}
        tokens = subject.split(".")
        if "" in tokens:
            return plain, queues
        for filt, queue, item in self.subs:
            if ref_match(filt.split("."), tokens):
                if queue is None:
                    plain[item] += 1
                else:
                    queues.setdefault(queue, Counter())[item] += 1
        return plain, queues


def as_counters(match: Match) -> tuple[Counter, dict[str, Counter]]:
    names = [name for name, _ in match.queues]
    assert len(names) == len(set(names)), "one entry per queue group"
    return Counter(match.plain), {name: Counter(members) for name, members in match.queues}


OPS = st.lists(
    st.tuples(st.booleans(), FILTERS, st.integers(0, 5), st.sampled_from([None, "q1", "q2"])),
    min_size=1, max_size=40,
)


@settings(deadline=None, max_examples=150)
@given(OPS, st.lists(ANY_SUBJECTS, min_size=1, max_size=12), st.sampled_from([0, 1, 4, 1024]))
def test_index_agrees_with_naive_model(ops: list, probes: list[str], cache_size: int) -> None:
    index: SubjectIndex[int] = SubjectIndex(cache_size=cache_size)
    model = Model()
    for is_insert, filt, item, queue in ops:
        key = (filt, queue, item)
        if is_insert:
            index.insert(filt, item, queue)
            model.subs.add(key)
        else:
            assert index.remove(filt, item, queue) is (key in model.subs)
            model.subs.discard(key)
        # Probing after every change keeps earlier results in the cache, so a
        # missed invalidation shows up as a stale answer here.
        for subject in probes:
            expected = model.match(subject)
            assert as_counters(index.match(subject)) == expected, subject
            assert index.has_interest(subject) is bool(expected[0] or expected[1]), subject
        assert len(index) == len(model.subs)
        assert index.subjects() == sorted({f for f, _, _ in model.subs})


def test_match_shape() -> None:
    index: SubjectIndex[str] = SubjectIndex()
    index.insert("orders.*", "p1")
    index.insert("orders.>", "p2")
    index.insert("orders.new", "w1", "workers")
    index.insert("orders.*", "w2", "workers")
    index.insert("orders.new", "a1", "audit")
    match = index.match("orders.new")
    assert sorted(match.plain) == ["p1", "p2"]
    queues = dict(match.queues)
    assert set(queues) == {"workers", "audit"}
    assert sorted(queues["workers"]) == ["w1", "w2"]
    assert queues["audit"] == ("a1",)
    assert index.match("nothing") == Match((), ())


def test_insert_twice_is_a_no_op_and_queue_and_plain_are_distinct() -> None:
    index: SubjectIndex[str] = SubjectIndex()
    index.insert("a", "s")
    index.insert("a", "s")
    index.insert("a", "s", "q")
    assert len(index) == 2
    assert index.remove("a", "s") is True
    assert index.remove("a", "s") is False
    assert index.match("a") == Match((), (("q", ("s",)),))
    assert index.remove("a", "s", "other") is False
    assert index.remove("a", "s", "q") is True
    assert len(index) == 0


def test_remove_of_unknown_or_invalid_subject_is_false() -> None:
    index: SubjectIndex[str] = SubjectIndex()
    index.insert("a.b", "s")
    for subject in ("a", "a.b.c", "a.*", "", "a..b", "x"):
        assert index.remove(subject, "s") is False
    assert len(index) == 1


@pytest.mark.parametrize("subject", ["", "a..b", ".a", "a.", "a.>.b", ">.>"])
def test_insert_refuses_invalid_subjects(subject: str) -> None:
    index: SubjectIndex[str] = SubjectIndex()
    with pytest.raises(ValueError):
        index.insert(subject, "s")
    assert len(index) == 0


def test_remove_prunes_the_trie() -> None:
    index: SubjectIndex[int] = SubjectIndex()
    subjects = [f"a.b.{i}.x" for i in range(50)] + ["a.*.>", "a.>", "*.b"]
    for i, subject in enumerate(subjects):
        index.insert(subject, i)
    assert index.num_levels() == 4  # a.b.<i>.x
    for i, subject in enumerate(subjects):
        assert index.remove(subject, i)
    assert len(index) == 0
    assert index.subjects() == []
    assert index.num_levels() == 0  # nothing left behind: memory does not grow with churn


class TestCache:
    def test_literal_insert_and_remove_update_cached_results(self) -> None:
        index: SubjectIndex[str] = SubjectIndex()
        assert index.match("a.b").plain == ()
        index.insert("a.b", "s1")
        assert index.match("a.b").plain == ("s1",)
        index.remove("a.b", "s1")
        assert index.match("a.b").plain == ()
        assert not index.has_interest("a.b")

    def test_wildcard_insert_and_remove_update_cached_results(self) -> None:
        index: SubjectIndex[str] = SubjectIndex()
        for subject in ("a.b", "a.c", "x.y"):
            assert index.match(subject).plain == ()
        index.insert("a.*", "w")
        assert index.match("a.b").plain == ("w",)
        assert index.match("a.c").plain == ("w",)
        assert index.match("x.y").plain == ()
        index.insert(">", "all", "q")
        assert index.match("x.y").queues == (("q", ("all",)),)
        index.remove("a.*", "w")
        assert index.match("a.b").plain == ()
        assert index.has_interest("a.b")  # still the queue on ">"
        index.remove(">", "all", "q")
        assert not index.has_interest("a.b")

    def test_cached_results_are_reused(self) -> None:
        index: SubjectIndex[str] = SubjectIndex()
        index.insert("a.*", "w")
        assert index.match("a.b") is index.match("a.b")

    def test_cache_is_bounded(self) -> None:
        index: SubjectIndex[str] = SubjectIndex(cache_size=8)
        index.insert(">", "s")
        first = index.match("s.0")
        for i in range(1, 100):
            assert index.match(f"s.{i}").plain == ("s",)
        assert index.stats().cache == 8
        assert index.match("s.0") == first and index.match("s.0") is not first  # evicted, recomputed

    def test_literal_change_does_not_disturb_other_cached_subjects(self) -> None:
        index: SubjectIndex[str] = SubjectIndex()
        index.insert("a.*", "w")
        cached = index.match("a.b")
        index.insert("a.c", "lit")
        assert index.match("a.b") is cached
        assert sorted(index.match("a.c").plain) == ["lit", "w"]


def test_subjects_lists_each_subscribed_subject_once() -> None:
    index: SubjectIndex[int] = SubjectIndex()
    for i, subject in enumerate(["b.>", "a", "a", "a.*", "*", "b.>"]):
        index.insert(subject, i, None if i % 2 else "q")
    assert index.subjects() == ["*", "a", "a.*", "b.>"]


def test_many_subscriptions() -> None:
    index: SubjectIndex[int] = SubjectIndex()
    n = 20_000
    for i in range(n):
        index.insert(f"svc.{i % 100}.node{i}", i)
    index.insert("svc.7.*", -1)
    assert len(index) == n + 1
    assert index.match("svc.7.node7").plain == (7, -1)
    assert index.match("svc.7.node8").plain == (-1,)
    for i in range(0, n, 2):
        index.remove(f"svc.{i % 100}.node{i}", i)
    assert len(index) == n // 2 + 1
    assert index.match("svc.7.node7").plain == (7, -1)
    assert index.match("svc.8.node8").plain == ()
