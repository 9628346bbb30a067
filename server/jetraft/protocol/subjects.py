"""NATS subjects: validity, matching, overlap, and the subscription index.

A subject is a ``.``-separated list of tokens. In a *filter* (a subscription
subject) the whole-token ``*`` matches exactly one token and a final
whole-token ``>`` matches one or more tokens. A ``*`` or ``>`` inside a longer
token (``foo*``) is an ordinary character, as in nats-server.

Subjects are ``str``; the wire parser decodes them with ``utf-8`` +
``surrogateescape`` so that arbitrary bytes round-trip.

Behaviour follows nats-server ``server/sublist.go`` (``IsValidSubject``,
``Sublist.Insert``, ``Sublist.Match``, ``matchLevel``, ``SubjectsCollide``).
Stdlib only, no I/O.

Overlap between *sets* of filters (a stream's subjects against each other and
against every other stream's: :func:`first_overlapping_pair`,
:func:`filters_overlap`) is answered by walking two tries side by side instead of
comparing every pair as nats-server does, with a step budget proportional to the
size of the tries (:class:`OverlapWorkExceeded`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "OVERLAP_STEPS_MIN",
    "OVERLAP_STEPS_PER_NODE",
    "Match",
    "OverlapWorkExceeded",
    "SubjectIndex",
    "SublistStats",
    "filters_overlap",
    "first_covered_filter",
    "first_invalid_filter",
    "first_overlapping_pair",
    "is_valid_filter_tokens",
    "is_valid_literal_subject",
    "is_valid_subject",
    "subject_matches",
    "subjects_overlap",
]

T = TypeVar("T", bound=Hashable)

PWC = "*"
FWC = ">"

#: An overlap walk (:func:`filters_overlap`, :func:`first_overlapping_pair`) may take
#: ``OVERLAP_STEPS_MIN + OVERLAP_STEPS_PER_NODE * (trie nodes)`` steps (a step: one pair
#: of trie levels, or one child looked at), then raises OverlapWorkExceeded. The subjects
#: of real streams (literals, ``*``/``>`` under literal prefixes, ``*`` against literals
#: on the same level) take one to two steps per node; only sets built to pair many ``*``
#: with many literals level after level take more. (Deciding whether two sets of filters
#: overlap is as hard as the orthogonal-vectors problem: no algorithm is sub-quadratic on
#: every input, hence the bound.)
OVERLAP_STEPS_PER_NODE = 8
OVERLAP_STEPS_MIN = 100_000


class OverlapWorkExceeded(Exception):
    """An overlap check would take more steps than its budget (see ``OVERLAP_STEPS_PER_NODE``).

    ``steps``: the budget that was used up. The caller refuses the filters.
    """

    def __init__(self, steps: int) -> None:
        super().__init__(f"subject overlap check needs more than {steps} steps")
        self.steps = steps


# The whitespace nats-server rejects inside a subject token (sublist.go isValidSubject).
_WHITESPACE = (" ", "\t", "\n", "\r", "\f")


def is_valid_filter_tokens(tokens: list[str]) -> bool:
    """Whether ``tokens`` (a subject split on ``.``) can be subscribed to.

    This is the check nats-server's ``Sublist.Insert`` makes (sublist.go): no
    token is empty and nothing follows a ``>`` token. It does *not* look for
    whitespace, because the wire protocol already split it away; a SUB that
    fails it is answered with ``-ERR 'Invalid Subject'``.
    """
    if "" in tokens:
        return False
    if FWC in tokens:
        return tokens.index(FWC) == len(tokens) - 1
    return True


def is_valid_subject(subject: str) -> bool:
    """Whether ``subject`` is a valid subject or filter (nats-server ``IsValidSubject``).

    Valid: non-empty, every token non-empty, no space, tab, CR, LF or form feed,
    and a whole-token ``>`` only as the last token. Never raises.
    """
    if not subject:
        return False
    for ch in _WHITESPACE:
        if ch in subject:
            return False
    return is_valid_filter_tokens(subject.split("."))


def is_valid_literal_subject(subject: str) -> bool:
    """Whether ``subject`` is valid (see :func:`is_valid_subject`) and has no wildcard token."""
    if not is_valid_subject(subject):
        return False
    tokens = subject.split(".")
    return PWC not in tokens and FWC not in tokens


def subject_matches(filter: str, subject: str) -> bool:  # noqa: A002 - the public name
    """Whether the filter ``filter`` (may hold ``*``/``>``) matches ``subject``.

    ``subject`` is taken literally: a ``*`` token in it is matched by a ``*``
    or ``>`` in the filter like any other token, exactly as
    :meth:`SubjectIndex.match` does. Returns False if either has an empty
    token or the filter has a token after ``>``. Never raises.
    """
    ftoks = filter.split(".")
    stoks = subject.split(".")
    if "" in stoks or "" in ftoks:
        return False
    nsub = len(stoks)
    last = len(ftoks) - 1
    for i, tok in enumerate(ftoks):
        if tok == FWC:
            return i == last and i < nsub
        if i >= nsub:
            return False
        if tok != PWC and tok != stoks[i]:
            return False
    return last + 1 == nsub


def subjects_overlap(a: str, b: str) -> bool:
    """Whether some literal subject is matched by both filters ``a`` and ``b``.

    Used to refuse streams whose subjects overlap (nats-server
    ``SubjectsCollide``; unlike it, a ``*`` inside a longer token is literal).
    Returns False if either is not a valid subject. Never raises.
    """
    if not (is_valid_subject(a) and is_valid_subject(b)):
        return False
    ta = a.split(".")
    tb = b.split(".")
    for x, y in zip(ta, tb):
        if x == FWC or y == FWC:
            return True
        if x != y and x != PWC and y != PWC:
            return False
    return len(ta) == len(tb)


@dataclass(frozen=True, slots=True)
class Match:
    """The subscriptions interested in one subject.

    ``plain``: the non-queue items, tuple in trie visiting order.
    ``queues``: ``((queue_name, (member, ...)), ...)``, one entry per queue
    group name, members merged across all matching filters (the server picks
    one member per group, as nats-server does with ``SublistResult.qsubs``).
    """

    plain: tuple
    queues: tuple[tuple[str, tuple], ...]


_EMPTY = Match((), ())


@dataclass(frozen=True, slots=True)
class SublistStats:
    """One or more subject indexes' figures (nats-server sublist.go SublistStats): counts,
    cache hits, and the fan-out summed (``total_fanout``) and at most (``max_fanout``) over
    the ``cache`` cached results. Add two with ``+``; :attr:`report` gives /subsz's keys."""

    subscriptions: int = 0
    cache: int = 0
    inserts: int = 0
    removes: int = 0
    matches: int = 0
    cache_hits: int = 0
    total_fanout: int = 0
    max_fanout: int = 0

    def __add__(self, other: SublistStats) -> SublistStats:
        return SublistStats(self.subscriptions + other.subscriptions, self.cache + other.cache,
                            self.inserts + other.inserts, self.removes + other.removes,
                            self.matches + other.matches, self.cache_hits + other.cache_hits,
                            self.total_fanout + other.total_fanout, max(self.max_fanout, other.max_fanout))

    @property
    def report(self) -> dict[str, int | float]:
        """/subsz's SublistStats keys: ``cache_hit_rate`` is hits over matches (0 without
        matches), ``avg_fanout`` the mean fan-out of the cached results (0 without any)."""
        return {"num_subscriptions": self.subscriptions, "num_cache": self.cache, "num_inserts": self.inserts,
                "num_removes": self.removes, "num_matches": self.matches,
                "cache_hit_rate": self.cache_hits / self.matches if self.matches else 0,
                "max_fanout": self.max_fanout,
                "avg_fanout": self.total_fanout / self.cache if self.total_fanout else 0}


class _Node:
    __slots__ = ("next", "psubs", "qsubs")

    def __init__(self) -> None:
        self.next: _Level | None = None
        self.psubs: dict = {}
        self.qsubs: dict[str, dict] | None = None


class _Level:
    __slots__ = ("fwc", "nodes", "pwc")

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None

    def is_empty(self) -> bool:
        return not self.nodes and self.pwc is None and self.fwc is None


def _collect(node: _Node, plain: list, queues: dict[str, list]) -> None:
    if node.psubs:
        plain.extend(node.psubs)
    if node.qsubs:
        for name, members in node.qsubs.items():
            group = queues.get(name)
            if group is None:
                queues[name] = list(members)
            else:
                group.extend(members)


def _match_level(level: _Level | None, toks: list[str], i: int, plain: list, queues: dict) -> None:
    # Mirrors nats-server sublist.go matchLevel: at each level the `>` node
    # matches the rest, the `*` node recurses one token down, the literal node
    # continues the walk.
    node = pwc = None
    ntoks = len(toks)
    while i < ntoks:
        if level is None:
            return
        if level.fwc is not None:
            _collect(level.fwc, plain, queues)
        pwc = level.pwc
        if pwc is not None:
            _match_level(pwc.next, toks, i + 1, plain, queues)
        node = level.nodes.get(toks[i])
        level = node.next if node is not None else None
        i += 1
    if node is not None:
        _collect(node, plain, queues)
    if pwc is not None:
        _collect(pwc, plain, queues)


def _has_subs(node: _Node) -> bool:
    return bool(node.psubs or node.qsubs)


def _any_level(level: _Level | None, toks: list[str], i: int) -> bool:
    node = pwc = None
    ntoks = len(toks)
    while i < ntoks:
        if level is None:
            return False
        if level.fwc is not None and _has_subs(level.fwc):
            return True
        pwc = level.pwc
        if pwc is not None and _any_level(pwc.next, toks, i + 1):
            return True
        node = level.nodes.get(toks[i])
        level = node.next if node is not None else None
        i += 1
    return (node is not None and _has_subs(node)) or (pwc is not None and _has_subs(pwc))


class SubjectIndex(Generic[T]):
    """A trie of subscriptions keyed by subject tokens (nats-server ``Sublist``).

    Each level has a dict of literal tokens plus separate ``*`` and ``>``
    nodes, so :meth:`match` costs time proportional to the number of tokens
    in the subject (and the number of wildcard branches that apply), not to
    the number of subscriptions; :meth:`insert` and :meth:`remove` are
    O(tokens). Match results are cached per subject in a bounded FIFO cache
    of ``cache_size`` entries; inserting or removing a literal subject drops
    that subject's entry, a wildcard subject clears the cache.

    Items are hashable (the server's subscription objects). An item appears
    at most once per (subject, queue); inserting it again is a no-op.
    Not thread-safe: the server uses it from one trio thread.
    """

    __slots__ = ("_cache", "_cache_hits", "_cache_size", "_count", "_inserts", "_matches", "_nodes", "_removes",
                 "_root")

    def __init__(self, *, cache_size: int = 1024) -> None:
        self._root = _Level()
        self._count = 0
        self._nodes = 0
        # FIFO: an OrderedDict drops its oldest entry in O(1); a dict's first key after many
        # deletions from its front is found by skipping every deleted slot (unique reply
        # subjects, one per request, turn the cache over all the time)
        self._cache: OrderedDict[str, Match] = OrderedDict()
        self._cache_size = cache_size
        # nats-server Sublist's counters (sublist.go inserts, removes, matches, cacheHits):
        # only ever incremented, read by stats()
        self._inserts = self._removes = self._matches = self._cache_hits = 0

    def __len__(self) -> int:
        """Number of (subject, queue, item) subscriptions held."""
        return self._count

    def _invalidate(self, subject: str, tokens: list[str]) -> None:
        if not self._cache:
            return
        if PWC in tokens or FWC in tokens:
            self._cache.clear()
        else:
            self._cache.pop(subject, None)

    def insert(self, subject: str, item: T, queue: str | None = None) -> None:
        """Subscribe ``item`` to ``subject`` (a filter), in queue group ``queue`` if given.

        Raises ValueError if ``subject`` has an empty token or a token after
        ``>`` (nats-server ``Sublist.Insert`` returns ErrInvalidSubject).
        """
        tokens = subject.split(".")
        if not is_valid_filter_tokens(tokens):
            raise ValueError(f"invalid subject: {subject!r}")
        level = self._root
        node: _Node | None = None
        made = 0
        for tok in tokens:
            if level is None:
                level = node.next = _Level()  # type: ignore[union-attr]
            if tok == PWC:
                node = level.pwc
                if node is None:
                    node = level.pwc = _Node()
                    made += 1
            elif tok == FWC:
                node = level.fwc
                if node is None:
                    node = level.fwc = _Node()
                    made += 1
            else:
                node = level.nodes.get(tok)
                if node is None:
                    node = level.nodes[tok] = _Node()
                    made += 1
            level = node.next
        assert node is not None
        self._nodes += made
        if queue is None:
            members = node.psubs
        else:
            if node.qsubs is None:
                node.qsubs = {}
            members = node.qsubs.get(queue)
            if members is None:
                members = node.qsubs[queue] = {}
        if item in members:
            return
        members[item] = None
        self._count += 1
        self._inserts += 1
        self._invalidate(subject, tokens)

    def remove(self, subject: str, item: T, queue: str | None = None) -> bool:
        """Unsubscribe ``item`` from (``subject``, ``queue``); prune emptied trie nodes.

        Returns True if it was subscribed, False otherwise (including for an
        invalid subject). Never raises.
        """
        tokens = subject.split(".")
        path: list[tuple[_Level, str, _Node]] = []
        level: _Level | None = self._root
        for tok in tokens:
            if level is None:
                return False
            if tok == PWC:
                node = level.pwc
            elif tok == FWC:
                node = level.fwc
            else:
                node = level.nodes.get(tok)
            if node is None:
                return False
            path.append((level, tok, node))
            level = node.next
        node = path[-1][2]
        if queue is None:
            members = node.psubs
        else:
            members = node.qsubs.get(queue) if node.qsubs else None
            if members is None:
                return False
        if item not in members:
            return False
        del members[item]
        if queue is not None and not members:
            del node.qsubs[queue]  # type: ignore[index]
            if not node.qsubs:
                node.qsubs = None
        self._count -= 1
        self._removes += 1
        self._invalidate(subject, tokens)
        for level, tok, node in reversed(path):
            if node.next is not None and node.next.is_empty():
                node.next = None
            if node.next is not None or _has_subs(node):
                break
            self._nodes -= 1
            if tok == PWC:
                level.pwc = None
            elif tok == FWC:
                level.fwc = None
            else:
                del level.nodes[tok]
        return True

    def match(self, subject: str) -> Match:
        """All subscriptions whose filter matches the literal ``subject``.

        A subject with an empty token matches nothing (nats-server
        ``Sublist.Match``). The result is shared and cached: do not mutate.
        """
        self._matches += 1
        cached = self._cache.get(subject)
        if cached is not None:
            self._cache_hits += 1
            return cached
        toks = subject.split(".")
        if "" in toks:
            return _EMPTY
        plain: list = []
        queues: dict[str, list] = {}
        _match_level(self._root, toks, 0, plain, queues)
        if plain or queues:
            result = Match(tuple(plain), tuple((name, tuple(members)) for name, members in queues.items()))
        else:
            result = _EMPTY
        cache = self._cache
        if len(cache) >= self._cache_size:
            if not cache:               # cache_size 0: nothing is kept
                return result
            cache.popitem(last=False)
        cache[subject] = result
        return result

    def has_interest(self, subject: str) -> bool:
        """Whether any subscription matches ``subject``; stops at the first one found. A
        cached answer counts as a cache hit but not as a match, as in nats-server
        (sublist.go hasInterest)."""
        cached = self._cache.get(subject)
        if cached is not None:
            self._cache_hits += 1
            return cached is not _EMPTY
        toks = subject.split(".")
        if "" in toks:
            return False
        return _any_level(self._root, toks, 0)

    def stats(self) -> SublistStats:
        """This index's figures as nats-server's ``Sublist.Stats`` computes them (sublist.go):
        subscriptions, cached subjects, inserts, removes and matches since creation, cache
        hits, and the fan-out of the cached results (plain subscriptions plus queue groups
        each). O(cached subjects), at most ``cache_size``."""
        total = largest = 0
        for result in self._cache.values():
            fanout = len(result.plain) + len(result.queues)
            total += fanout
            if fanout > largest:
                largest = fanout
        return SublistStats(subscriptions=self._count, cache=len(self._cache), inserts=self._inserts,
                            removes=self._removes, matches=self._matches, cache_hits=self._cache_hits,
                            total_fanout=total, max_fanout=largest)

    def num_levels(self) -> int:
        """The depth of the trie in levels (tokens), found by walking it (nats-server
        sublist.go ``numLevels``): 0 when no node is left, as after every subscription was
        removed and the trie pruned. O(trie nodes)."""
        deepest = 0
        stack: list[tuple[_Level, int]] = [(self._root, 0)]
        while stack:
            level, depth = stack.pop()
            nodes = [*level.nodes.values(), level.pwc, level.fwc]
            if not any(node is not None for node in nodes):
                continue
            depth += 1
            deepest = max(deepest, depth)
            for node in nodes:
                if node is not None and node.next is not None:
                    stack.append((node.next, depth))
        return deepest

    def subjects(self) -> list[str]:
        """The distinct subjects that have at least one subscription, sorted (for /subsz)."""
        found: list[str] = []
        stack: list[tuple[_Level, str]] = [(self._root, "")]
        while stack:
            level, prefix = stack.pop()
            children = list(level.nodes.items())
            if level.pwc is not None:
                children.append((PWC, level.pwc))
            if level.fwc is not None:
                children.append((FWC, level.fwc))
            for tok, node in children:
                subject = prefix + tok
                if _has_subs(node):
                    found.append(subject)
                if node.next is not None:
                    stack.append((node.next, subject + "."))
        found.sort()
        return found


# ------------------------------------------------------------ overlap between sets of filters
#
# A set of filters is indexed as a trie of plain dicts: a level maps each token (a whole
# "*" or ">" token being the wildcard) to the next level, and a level where some filters
# end holds their items (positions in the set) under the key "" (never a token of a valid
# filter). Two tries are walked side by side: each stack entry is a pair of levels reached
# by the same number of tokens along paths that could still match a common subject.

_END = ""
_NOT_LITERAL = frozenset((_END, PWC, FWC))


class _Trie:
    """The filters of one set, indexed: ``root`` (see above), ``nodes`` (levels made),
    ``valid`` (per position, :func:`is_valid_subject`), ``indexed`` (per position: in the
    trie; a filter with an empty token or a ``>`` before its end is left out, it overlaps
    nothing, while whitespace is an ordinary character here as in nats-server's
    ``SubjectsCollide``) and ``pair``, the answer of :func:`first_overlapping_pair` once
    computed."""

    __slots__ = ("filters", "indexed", "nodes", "pair", "root", "valid")

    def __init__(self, filters: tuple[str, ...]) -> None:
        self.filters = filters
        self.root: dict = {}
        self.nodes = 0
        # False: not computed yet; an OverlapWorkExceeded: the walk was cut off.
        self.pair: tuple[int, int] | None | bool | OverlapWorkExceeded = False
        self.valid = valid = [False] * len(filters)
        self.indexed = indexed = [False] * len(filters)
        root = self.root
        nodes = 0
        for i, f in enumerate(filters):
            # is_valid_subject, inlined: this loop is the cost of indexing a big set.
            toks = f.split(".")
            if "" in toks or (FWC in toks and toks.index(FWC) != len(toks) - 1):
                continue
            indexed[i] = True
            valid[i] = not (" " in f or "\t" in f or "\n" in f or "\r" in f or "\f" in f)
            level = root
            for tok in toks:
                nxt = level.get(tok)
                if nxt is None:
                    nxt = level[tok] = {}
                    nodes += 1
                level = nxt
            ends = level.get(_END)
            if ends is None:
                level[_END] = [i]
            else:
                ends.append(i)
        self.nodes = nodes


_TRIES: dict[tuple[str, ...], _Trie] = {}
_TRIES_KEPT = 2


def _trie(filters: Iterable[str]) -> _Trie:
    # The last few sets indexed are kept: one STREAM.CREATE checks its subjects several
    # times (checkStreamCfg more than once, then against the other streams).
    key = tuple(filters)
    trie = _TRIES.get(key)
    if trie is None:
        trie = _Trie(key)
        if len(_TRIES) >= _TRIES_KEPT:
            del _TRIES[next(iter(_TRIES))]
        _TRIES[key] = trie
    return trie


def _budget(nodes: int) -> int:
    return OVERLAP_STEPS_MIN + OVERLAP_STEPS_PER_NODE * nodes


def _has_children(level: dict) -> bool:
    return len(level) > (1 if _END in level else 0)


def _walk_tries(a_root: dict, b_root: dict, budget: int) -> bool:
    """Whether a filter of trie ``a`` overlaps one of trie ``b``; ``a_root is b_root``: two
    different entries of one trie (a filter entered twice counts, one alone does not)."""
    stack: list[tuple[dict, dict, bool]] = [(a_root, b_root, a_root is b_root)]
    steps = 0
    while stack:
        a, b, same = stack.pop()
        steps += 1
        fa = a.get(FWC)
        if fa is not None:
            # `p.>` overlaps every filter below p (one or more tokens); itself only twice.
            if same:
                if len(b) - (_END in b) > 1 or len(fa[_END]) > 1:
                    return True
            elif _has_children(b):
                return True
        if not same and FWC in b and _has_children(a):
            return True
        pairs: list[tuple[dict, dict]] = []
        if same:
            steps += len(a)
            for tok, child in a.items():
                if tok == _END or tok == FWC:
                    continue
                ends = child.get(_END)
                if ends is not None and len(ends) > 1:
                    return True
                if len(child) > (ends is not None):
                    stack.append((child, child, True))
            pa = a.get(PWC)
            if pa is not None:
                # `*` against each literal of the same level (once: overlap is symmetric).
                pairs.extend((pa, child) for tok, child in a.items() if tok not in _NOT_LITERAL)
        else:
            small, large, swapped = (a, b, False) if len(a) <= len(b) else (b, a, True)
            steps += len(small)
            for tok, child in small.items():
                if tok == _END or tok == FWC:
                    continue
                other = large.get(tok)
                if other is not None:       # equal literals, or `*` with `*`
                    pairs.append((other, child) if swapped else (child, other))
            pa, pb = a.get(PWC), b.get(PWC)
            if pa is not None:
                steps += len(b)
                pairs.extend((pa, child) for tok, child in b.items() if tok not in _NOT_LITERAL)
            if pb is not None:
                steps += len(a)
                pairs.extend((child, pb) for tok, child in a.items() if tok not in _NOT_LITERAL)
        for x, y in pairs:
            if _END in x and _END in y:
                return True
            if _has_children(x) and _has_children(y):
                stack.append((x, y, False))
        if steps > budget:
            raise OverlapWorkExceeded(budget)
    return False


def _walk_index(a_root: dict, b_root: _Level, budget: int) -> bool:
    """Whether a filter of trie ``a`` overlaps a subscription of a SubjectIndex level."""
    stack: list[tuple[dict, _Level]] = [(a_root, b_root)]
    steps = 0
    while stack:
        a, b = stack.pop()
        steps += 1
        if FWC in a and not b.is_empty():
            return True
        fb = b.fwc
        if fb is not None and _has_subs(fb) and _has_children(a):
            return True
        pairs: list[tuple[dict, _Node]] = []
        bn = b.nodes
        if len(a) <= len(bn):
            steps += len(a)
            for tok, child in a.items():
                if tok not in _NOT_LITERAL:
                    node = bn.get(tok)
                    if node is not None:
                        pairs.append((child, node))
        else:
            steps += len(bn)
            for tok, node in bn.items():     # literal tokens only: `*`, `>` have their own nodes
                child = a.get(tok)
                if child is not None:
                    pairs.append((child, node))
        pa, pb = a.get(PWC), b.pwc
        if pa is not None:
            steps += len(bn)
            pairs.extend((pa, node) for node in bn.values())
            if pb is not None:
                pairs.append((pa, pb))
        if pb is not None:
            steps += len(a)
            pairs.extend((child, pb) for tok, child in a.items() if tok not in _NOT_LITERAL)
        for x, node in pairs:
            if _END in x and _has_subs(node):
                return True
            if node.next is not None and _has_children(x):
                stack.append((x, node.next))
        if steps > budget:
            raise OverlapWorkExceeded(budget)
    return False


def _query_trie(root: dict, toks: list[str], me: int, budget: int) -> int:
    """-1 when the filter ``toks`` overlaps a filter of the trie at a position other than
    ``me``, else the number of steps taken. Raises OverlapWorkExceeded past ``budget``."""
    last = len(toks) - 1
    stack: list[tuple[dict, int]] = [(root, 0)]
    steps = 0
    while stack:
        level, i = stack.pop()
        steps += 1
        fwc = level.get(FWC)
        if fwc is not None and any(j != me for j in fwc[_END]):
            return -1
        tok = toks[i]
        if tok == FWC:
            # Anything below this level but the filter itself (its `>`, just above).
            if len(level) - (_END in level) - (fwc is not None) > 0:
                return -1
            continue
        if tok == PWC:
            steps += len(level)
            nexts = [child for t, child in level.items() if t != _END and t != FWC]
        else:
            nexts = [child for child in (level.get(tok), level.get(PWC)) if child is not None]
        for child in nexts:
            if i == last:
                ends = child.get(_END)
                if ends is not None and any(j != me for j in ends):
                    return -1
            elif _has_children(child):
                stack.append((child, i + 1))
        if steps > budget:
            raise OverlapWorkExceeded(budget)
    return steps


def _tokens_overlap(ta: list[str], tb: list[str]) -> bool:
    # subjects_overlap on two split filters already known to be indexable.
    for x, y in zip(ta, tb):
        if x == FWC or y == FWC:
            return True
        if x != y and x != PWC and y != PWC:
            return False
    return len(ta) == len(tb)


def filters_overlap(a: Iterable[str], b: Iterable[str] | SubjectIndex) -> bool:
    """Whether some filter of ``a`` overlaps some filter of ``b`` (see :func:`subjects_overlap`).

    ``b`` may be a SubjectIndex holding the other filters (items are ignored). The answer
    of :func:`subjects_overlap` over every pair (as nats-server stream.go
    ``jsAccount.subjectsOverlap`` compares them), except that whitespace in a token is an
    ordinary character, as in nats-server's ``SubjectsCollide``: ``a. b`` overlaps ``a.*``.
    A filter with an empty token or a ``>`` before its end overlaps nothing. Found by
    walking two tries side by side: O(total tokens) to index, then, for real sets of
    subjects, about one step per trie node. Raises OverlapWorkExceeded past
    ``OVERLAP_STEPS_MIN + OVERLAP_STEPS_PER_NODE * (nodes of both tries)`` steps.
    """
    left = _trie(a)
    if not left.root:
        return False
    if isinstance(b, SubjectIndex):
        if not len(b):
            return False
        return _walk_index(left.root, b._root, _budget(left.nodes + b._nodes))  # noqa: SLF001
    right = _Trie(tuple(b))
    if not right.root:
        return False
    return _walk_tries(left.root, right.root, _budget(left.nodes + right.nodes))


def first_invalid_filter(filters: Sequence[str]) -> int | None:
    """The position of the first filter that is not a valid subject (:func:`is_valid_subject`), or None.

    Kept with the index of ``filters`` that :func:`first_overlapping_pair` builds, so a
    caller checking both goes over the filters once.
    """
    valid = _trie(filters).valid
    try:
        return valid.index(False)
    except ValueError:
        return None


def first_overlapping_pair(filters: Sequence[str]) -> tuple[int, int] | None:
    """The first pair ``(i, j)``, ``i < j``, of overlapping filters, or None.

    "First" as nats-server's loop finds it (stream.go ``checkStreamCfg``: for each ``i`` in
    order, each later subject in order): the smallest ``i`` that overlaps some later
    filter, then the smallest such ``j``. A filter listed twice overlaps its copy.
    Overlap as :func:`filters_overlap` decides it (whitespace is an ordinary character, so
    ``["a.*", "a. b"]`` gives ``(0, 1)``, as nats-server reports it; the caller refuses
    ``a. b`` itself as invalid when it comes first).

    Cost: O(total tokens) to index, then a walk of the trie against itself (about one step
    per trie node for real sets of subjects); when some pair overlaps, one query per
    filter up to ``i`` and a scan of the filters after ``i``. Raises OverlapWorkExceeded
    when the walk, or then the queries, take more than ``OVERLAP_STEPS_MIN +
    OVERLAP_STEPS_PER_NODE * (trie nodes)`` steps. The answers for the last sets asked
    about are kept.
    """
    trie = _trie(filters)
    if trie.pair is False:
        try:
            trie.pair = _first_pair(trie)
        except OverlapWorkExceeded as exc:
            trie.pair = exc
    if isinstance(trie.pair, OverlapWorkExceeded):
        raise OverlapWorkExceeded(trie.pair.steps)
    return trie.pair  # type: ignore[return-value]


def _first_pair(trie: _Trie) -> tuple[int, int] | None:
    budget = _budget(trie.nodes)
    if not _walk_tries(trie.root, trie.root, budget):
        return None
    # Some pair overlaps: the first i is the smallest position overlapping any other
    # filter (a partner before it would be a smaller such position).
    filters = trie.filters
    total = budget
    for i, f in enumerate(filters):
        if not trie.indexed[i]:
            continue
        try:
            steps = _query_trie(trie.root, f.split("."), i, budget)
        except OverlapWorkExceeded:
            raise OverlapWorkExceeded(total) from None
        if steps >= 0:
            budget -= steps
            continue
        for j in range(i + 1, len(filters)):
            if trie.indexed[j] and _tokens_overlap(filters[j].split("."), f.split(".")):
                return i, j
    raise AssertionError("the trie walk found an overlap that no query found")


def first_covered_filter(filters: Sequence[str]) -> int | None:
    """The position of the first valid filter that another filter of the set matches, or None.

    "Matches" as :func:`subject_matches` with ``filters[i]`` taken literally (``a.*`` is
    matched by ``*.*``, by ``a.>`` and by a second ``a.*``, not by ``a.b``): the check of a
    consumer's ``filter_subjects`` (nats-server consumer.go ``checkConsumerCfg`` compares
    every pair with ``subjectIsSubsetMatch``). Invalid filters match nothing.

    Cost: one walk of a SubjectIndex of the set per filter, O(total tokens) for real sets.
    Raises OverlapWorkExceeded past ``OVERLAP_STEPS_MIN + OVERLAP_STEPS_PER_NODE * (index
    nodes)`` steps in all.
    """
    index: SubjectIndex[int] = SubjectIndex(cache_size=0)
    valid = [is_valid_subject(f) for f in filters]
    for i, f in enumerate(filters):
        if valid[i]:
            index.insert(f, i)
    budget = total = _budget(index._nodes)  # noqa: SLF001
    for i, f in enumerate(filters):
        if valid[i]:
            try:
                steps = _matched_by_other(index._root, f.split("."), i, budget)  # noqa: SLF001
            except OverlapWorkExceeded:
                raise OverlapWorkExceeded(total) from None
            if steps < 0:
                return i
            budget -= steps
    return None


def _matched_by_other(root: _Level, toks: list[str], me: int, budget: int) -> int:
    # -1 when an entry other than ``me`` matches the literal subject ``toks`` (as
    # _match_level does), else the steps taken. Raises OverlapWorkExceeded past ``budget``.
    last = len(toks) - 1
    stack: list[tuple[_Level, int]] = [(root, 0)]
    steps = 0
    while stack:
        level, i = stack.pop()
        steps += 1
        if level.fwc is not None and _has_other(level.fwc, me):
            return -1
        for node in (level.nodes.get(toks[i]), level.pwc):
            if node is None:
                continue
            if i == last:
                if _has_other(node, me):
                    return -1
            elif node.next is not None:
                stack.append((node.next, i + 1))
        if steps > budget:
            raise OverlapWorkExceeded(budget)
    return steps


def _has_other(node: _Node, item: Hashable) -> bool:
    for member in node.psubs:
        if member != item:
            return True
    return False
