"""Overlap between sets of filters (stream subjects): the trie walks against the pairwise check.

``filters_overlap`` and ``first_overlapping_pair`` must give the answers of
``subjects_overlap`` applied to every pair, in the order nats-server's pairwise loops
(stream.go ``checkStreamCfg``, ``jsAccount.subjectsOverlap``) report them, while doing an
amount of work bounded by the size of the sets: a stream with 10,000 subjects must not
cost 50 million comparisons on the event loop.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jetraft.jetstream.api as js_api
import jetraft.jetstream.model.stream as js_model
import jetraft.protocol.subjects as subjects_mod
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import SUBJECTS_TOO_COMPLEX, ConsumerConfig, StreamConfig
from jetraft.protocol import (
    OVERLAP_STEPS_MIN,
    OVERLAP_STEPS_PER_NODE,
    OverlapWorkExceeded,
    SubjectIndex,
    filters_overlap,
    first_covered_filter,
    first_invalid_filter,
    first_overlapping_pair,
    is_valid_subject,
    subject_matches,
    subjects_overlap,
)

# Small alphabets so that random sets overlap about half the time; "a*" is a literal token
# (a `*` inside a longer token is an ordinary character); "" and " " make invalid filters.
TOKENS = st.sampled_from(["a", "b", "*", ">", "a*"])
FILTERS = st.lists(TOKENS, min_size=1, max_size=4).map(".".join)
ANY_FILTERS = st.one_of(FILTERS, FILTERS, FILTERS, st.sampled_from(["", "a..b", "a b", ">.a", "a.>.>", " "]))
SETS = st.lists(ANY_FILTERS, min_size=0, max_size=8)


_WHITESPACE = {" ": "\x01s", "\t": "\x01t", "\n": "\x01n", "\r": "\x01r", "\f": "\x01f"}


def collide(a: str, b: str) -> bool:
    """subjects_overlap, with whitespace an ordinary character (nats-server SubjectsCollide
    does not look for it): each whitespace character is swapped for printable ones."""
    for ch, stand_in in _WHITESPACE.items():
        a, b = a.replace(ch, stand_in), b.replace(ch, stand_in)
    return subjects_overlap(a, b)


def pairwise_overlap(a: list[str], b: list[str]) -> bool:
    return any(collide(x, y) for x in a for y in b)


def pairwise_first_pair(filters: list[str]) -> tuple[int, int] | None:
    """The loop of nats-server checkStreamCfg (and of jetraft before the trie walk)."""
    for i, subj in enumerate(filters):
        for j in range(i + 1, len(filters)):
            if collide(filters[j], subj):
                return i, j
    return None


@settings(deadline=None, max_examples=1000)
@given(SETS, SETS)
def test_filters_overlap_agrees_with_every_pair(a: list[str], b: list[str]) -> None:
    assert filters_overlap(a, b) is pairwise_overlap(a, b)
    assert filters_overlap(b, a) is pairwise_overlap(a, b)


@settings(deadline=None, max_examples=1000)
@given(SETS, SETS, st.lists(st.tuples(st.booleans(), ANY_FILTERS), max_size=6))
def test_filters_overlap_with_a_subject_index_agrees_with_every_pair(a, b, churn) -> None:
    """Against the account's SubjectIndex of stream subjects, after inserts and removes."""
    index: SubjectIndex[str] = SubjectIndex()
    held: list[tuple[str, str]] = []
    for n, f in enumerate(b):
        if is_valid_subject(f):
            index.insert(f, f"s{n}")
            held.append((f, f"s{n}"))
    for n, (remove, f) in enumerate(churn):       # removes prune the trie: still exact
        if not is_valid_subject(f):
            continue
        if remove and held:
            subject, item = held.pop(n % len(held))
            assert index.remove(subject, item)
        else:
            index.insert(f, f"c{n}")
            held.append((f, f"c{n}"))
    assert filters_overlap(a, index) is pairwise_overlap(a, [f for f, _ in held])
    assert index._nodes == count_nodes(index)  # noqa: SLF001 - the budget is sized from it


def count_nodes(index: SubjectIndex) -> int:
    count, stack = 0, [index._root]  # noqa: SLF001
    while stack:
        level = stack.pop()
        for node in [*level.nodes.values(), level.pwc, level.fwc]:
            if node is not None:
                count += 1
                if node.next is not None:
                    stack.append(node.next)
    return count


@settings(deadline=None, max_examples=2000)
@given(st.lists(ANY_FILTERS, min_size=0, max_size=10))
def test_first_overlapping_pair_is_the_pairwise_loops_first(filters: list[str]) -> None:
    assert first_overlapping_pair(filters) == pairwise_first_pair(filters)


@settings(deadline=None, max_examples=300)
@given(st.lists(ANY_FILTERS, min_size=0, max_size=10))
def test_first_invalid_filter(filters: list[str]) -> None:
    expected = next((i for i, f in enumerate(filters) if not is_valid_subject(f)), None)
    assert first_invalid_filter(filters) == expected


def pairwise_first_covered(filters: list[str]) -> int | None:
    """The loop of nats-server checkConsumerCfg over filter_subjects (and of jetraft before)."""
    for i, subj in enumerate(filters):
        if is_valid_subject(subj) and any(j != i and subject_matches(other, subj) for j, other in enumerate(filters)):
            return i
    return None


@settings(deadline=None, max_examples=1000)
@given(st.lists(ANY_FILTERS, min_size=0, max_size=10))
def test_first_covered_filter_is_the_pairwise_loops_first(filters: list[str]) -> None:
    assert first_covered_filter(filters) == pairwise_first_covered(filters)


@pytest.mark.parametrize(("filters", "pair"), [
    (["a.*", "b.*", "b.x", "a.x"], (0, 3)),     # not the first pair met going forward (1, 2)
    (["foo", "bar", "foo"], (0, 2)),             # a duplicate overlaps its copy
    (["a.>", "a"], None),                        # `>` takes one token or more
    (["a.>", "a.b.c", "a.b"], (0, 1)),
    (["*.b", "a.*"], (0, 1)),
    (["a*.b", "a.b"], None),                     # `a*` is a literal token
    (["a.b", "a b", "a.*"], (0, 2)),
    (["a.*", "a. b"], (0, 1)),                   # whitespace is a character (SubjectsCollide)
    (["a.*", "a..b", "a.>.b"], None),            # empty tokens, `>` inside: overlap nothing
    ([">", ">"], (0, 1)),
    ([], None),
])
def test_first_overlapping_pair_table(filters: list[str], pair) -> None:
    assert first_overlapping_pair(filters) == pair


# ------------------------------------------------------------ bounded work

def stream_subjects(prefix: str, n: int) -> list[str]:
    """Real-looking subjects: literals, with a `*` or `>` last token now and then."""
    return [f"{prefix}.{i}.{'*' if i % 20 == 0 else '>' if i % 20 == 1 else 'x'}" for i in range(n)]


class Counted:
    """subjects_overlap, counted; fails the test once it is called more than ``limit`` times."""

    def __init__(self, limit: int) -> None:
        self.calls = 0
        self.limit = limit

    def __call__(self, a: str, b: str) -> bool:
        self.calls += 1
        if self.calls > self.limit:
            raise AssertionError(f"subjects_overlap called more than {self.limit} times")
        return subjects_overlap(a, b)


@pytest.fixture
def counted(monkeypatch) -> Counted:
    """Every module that compares subjects pairwise, counted: at most 10 calls per subject."""
    counter = Counted(limit=10 * 20_000)
    monkeypatch.setattr(subjects_mod, "subjects_overlap", counter)
    monkeypatch.setattr(js_model, "_collide", counter)
    monkeypatch.setattr(js_api, "subjects_overlap", counter, raising=False)
    subjects_mod._TRIES.clear()  # noqa: SLF001 - no answer kept from another test
    return counter


def test_a_stream_with_10000_subjects_is_checked_without_pairwise_comparisons(counted) -> None:
    cfg = StreamConfig(name="BIG", subjects=stream_subjects("big", 10_000)).checked()
    assert len(cfg.subjects) == 10_000
    # Today's pairwise loop made 50 million calls here.
    assert counted.calls <= 10 * 10_000


def test_an_overlap_at_the_end_of_10000_subjects_is_found_and_named(counted) -> None:
    subs = [*stream_subjects("big", 10_000), "big.9999.*"]
    with pytest.raises(JSApiError) as exc:
        StreamConfig(name="BIG", subjects=subs).checked()
    assert exc.value.to_json() == {"code": 500, "err_code": 10052,
                                   "description": 'subject "big.9999.x" overlaps with "big.9999.*"'}


def test_two_streams_of_10000_subjects_are_checked_against_each_other_without_pairs(counted, tmp_path) -> None:
    events = type("Events", (), {"emit": lambda self, name, **fields: None})()
    acc = js_api.JetStreamAccount("$G", store_dir=None, sync=None, events=events,
                                  interest=lambda s: False, server_version="2.15.1")

    def create(name: str, subs: list[str]) -> dict:
        body = json.dumps({"name": name, "subjects": subs, "storage": "memory"}).encode()
        (reply,) = acc.handle_api(f"$JS.API.STREAM.CREATE.{name}", "_INBOX.r", None, body, 1)
        return json.loads(reply.out.data)

    assert "error" not in create("ONE", stream_subjects("one", 10_000))
    assert "error" not in create("TWO", stream_subjects("two", 10_000))
    overlapping = create("THREE", [*stream_subjects("three", 9_999), "two.7.x"])
    assert overlapping["error"] == {"code": 400, "err_code": 10065,
                                    "description": "subjects overlap with an existing stream"}
    # Today's loops made 10,000 x 10,000 calls for TWO and 20,000 x 10,000 for THREE.
    assert counted.calls <= 10 * 30_000


def test_a_consumer_with_10000_filter_subjects_is_checked_without_pairwise_matching(counted, monkeypatch) -> None:
    monkeypatch.setattr(js_model, "subject_matches", counted)
    stream = StreamConfig(name="BIG", subjects=["big.>"]).checked()
    filters = [f"big.{i}.{'*' if i % 20 == 0 else 'x'}" for i in range(10_000)]
    cfg = ConsumerConfig.decode({"durable_name": "C", "filter_subjects": filters}).checked(stream)
    assert cfg.filter_subjects == filters
    # Today's loop made 100 million subject_matches calls here.
    assert counted.calls <= 10 * 10_000
    with pytest.raises(JSApiError) as exc:
        ConsumerConfig.decode({"durable_name": "C", "filter_subjects": [*filters, "big.77.x"]}).checked(stream)
    assert exc.value.to_json()["err_code"] == 10138     # consumer subject filters cannot overlap


def quadratic_set(n: int, width: int = 12) -> list[str]:
    """Subjects built so that the `*` of each one meets the literals of most others level
    after level: no two overlap (each ends in a token of its own), but a trie walk pairs
    about n**2 / 4 levels before it can tell."""
    return ["h." + ".".join("x" if (i >> k) & 1 else "*" for k in range(width)) + f".u{i}" for i in range(n)]


def test_a_set_built_to_be_quadratic_is_refused_within_the_budget() -> None:
    subs = quadratic_set(4_000)
    assert pairwise_first_pair(subs[:200]) is None
    with pytest.raises(OverlapWorkExceeded) as exc:
        first_overlapping_pair(subs)
    nodes = subjects_mod._trie(subs).nodes  # noqa: SLF001
    assert exc.value.steps == OVERLAP_STEPS_MIN + OVERLAP_STEPS_PER_NODE * nodes
    with pytest.raises(JSApiError) as refused:
        StreamConfig(name="HOSTILE", subjects=subs).checked()
    assert refused.value.to_json() == {"code": 500, "err_code": 10052, "description": SUBJECTS_TOO_COMPLEX}
    # The same set as a consumer's filter_subjects: refused the same way.
    stream = StreamConfig(name="H", subjects=["h.>"]).checked()
    with pytest.raises(JSApiError) as refused:
        ConsumerConfig.decode({"durable_name": "C", "filter_subjects": subs}).checked(stream)
    assert refused.value.to_json() == {"code": 500, "err_code": 10052, "description": SUBJECTS_TOO_COMPLEX}


@pytest.mark.parametrize("shape", [
    [f"orders.{i}.created" for i in range(5_000)] + [f"orders.*.k{i}" for i in range(5_000)],
    [f"t{i % 100}.*.evt{i}" for i in range(5_000)] + [f"t{i % 100}.x{i}.cmd" for i in range(5_000)],
    [".".join(f"p{i}_{k}" for k in range(30)) for i in range(1_000)],
    [f"*.k{i}" for i in range(10_000)],
])
def test_real_shapes_stay_well_inside_the_budget(shape: list[str]) -> None:
    """Wildcards against many literals on the same level: three steps per node at most,
    well inside the budget (OVERLAP_STEPS_PER_NODE)."""
    assert OVERLAP_STEPS_PER_NODE >= 2 * 3
    trie = subjects_mod._Trie(tuple(shape))  # noqa: SLF001
    assert not subjects_mod._walk_tries(trie.root, trie.root, 3 * trie.nodes)  # noqa: SLF001
    assert first_overlapping_pair(shape) is None
