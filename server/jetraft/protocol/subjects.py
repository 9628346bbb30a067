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
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "Match",
    "SubjectIndex",
    "is_valid_filter_tokens",
    "is_valid_literal_subject",
    "is_valid_subject",
    "subject_matches",
    "subjects_overlap",
]

T = TypeVar("T", bound=Hashable)

PWC = "*"
FWC = ">"
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

    __slots__ = ("_cache", "_cache_size", "_count", "_root")

    def __init__(self, *, cache_size: int = 1024) -> None:
        self._root = _Level()
        self._count = 0
        self._cache: dict[str, Match] = {}
        self._cache_size = cache_size

    def __len__(self) -> int:
        """Number of (subject, queue, item) subscriptions held."""
        return self._count

    def _invalidate(self, subject: str, tokens: list[str]) -> None:
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
        for tok in tokens:
            if level is None:
                level = node.next = _Level()  # type: ignore[union-attr]
            if tok == PWC:
                node = level.pwc
                if node is None:
                    node = level.pwc = _Node()
            elif tok == FWC:
                node = level.fwc
                if node is None:
                    node = level.fwc = _Node()
            else:
                node = level.nodes.get(tok)
                if node is None:
                    node = level.nodes[tok] = _Node()
            level = node.next
        assert node is not None
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
        self._invalidate(subject, tokens)
        for level, tok, node in reversed(path):
            if node.next is not None and node.next.is_empty():
                node.next = None
            if node.next is not None or _has_subs(node):
                break
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
        cached = self._cache.get(subject)
        if cached is not None:
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
            # FIFO eviction: dicts keep insertion order.
            del cache[next(iter(cache))]
        cache[subject] = result
        return result

    def has_interest(self, subject: str) -> bool:
        """Whether any subscription matches ``subject``; stops at the first one found."""
        cached = self._cache.get(subject)
        if cached is not None:
            return cached is not _EMPTY
        toks = subject.split(".")
        if "" in toks:
            return False
        return _any_level(self._root, toks, 0)

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
