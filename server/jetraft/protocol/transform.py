"""Subject transforms: a source filter and a destination template, as nats-server maps
subjects for a stream's ``subject_transform``, a republish, and (later) mirrors, sources and
account mappings (nats-server ``server/subject_transform.go``, ``server/sublist.go``
``ValidateMapping``; docs: "Subject Mapping and Partitioning").

A destination is made of ``.``-separated tokens, each either literal or one mapping function
that is the whole token, ``{{name(args)}}`` (spaces allowed around the name, the parentheses
and each argument; the first letter of each word of the name may be upper case:
``{{SplitFromLeft(1,2)}}``):

- ``{{wildcard(i)}}`` (or the legacy ``$i``): the source token the i-th ``*`` of the source
  matched (1-based);
- ``{{partition(n)}}``: a partition number in [0, n) from the FNV-1a 32-bit hash of the whole
  subject (tokens joined with ``.``); ``{{partition(n,i,j,...)}}``: of the tokens of
  wildcards i, j, ... concatenated without a separator;
- ``{{splitFromLeft(i,p)}}`` / ``{{splitFromRight(i,p)}}``: wildcard i's token split in two
  ``p`` characters from its left / right end (unchanged unless 0 < p < its length);
- ``{{sliceFromLeft(i,n)}}`` / ``{{sliceFromRight(i,n)}}``: cut into tokens of ``n``
  characters from the left / right, the remainder last / first;
- ``{{split(i,delim)}}``: cut at each ``delim`` (no space, no ``.``), empty pieces dropped;
- ``{{left(i,n)}}`` / ``{{right(i,n)}}``: the first / last ``n`` characters;
- ``{{random(n)}}``: a number in [0, n).

A trailing ``>`` in the destination takes every source token from the source's ``>`` on.
Errors carry nats-server's words (:class:`MappingError`), which its API replies quote.
"""

from __future__ import annotations

import random as _random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jetraft.protocol.subjects import is_valid_literal_subject, subject_matches

__all__ = ["MappingError", "NoMatch", "SubjectTransform", "validate_mapping"]

INVALID_DESTINATION = "invalid mapping destination"
INVALID_TRANSFORM = f"{INVALID_DESTINATION}: invalid transform"
UNKNOWN_FUNCTION = f"{INVALID_DESTINATION}: unknown function"
INDEX_OUT_OF_RANGE = f"{INVALID_DESTINATION}: wildcard index out of range"
NOT_ENOUGH_ARGS = f"{INVALID_DESTINATION}: not enough arguments passed to the function"
INVALID_ARG = f"{INVALID_DESTINATION}: function argument is invalid or in the wrong format"
TOO_MANY_ARGS = f"{INVALID_DESTINATION}: too many arguments passed to the function"
NOT_ALL_WILDCARDS = f"{INVALID_DESTINATION}: not using all of the token wildcard(s)"
ONLY_WILDCARD = (f"{INVALID_DESTINATION}: the only mapping function allowed for import transforms "
                 "is {{Wildcard()}}")
BAD_SUBJECT = "invalid subject"

_INT32_MAX = 2**31 - 1


class MappingError(ValueError):
    """A source or destination nats-server refuses; ``str()`` is its error text (``"invalid
    subject"``, ``"invalid mapping destination: unknown function in {{f(1)}}"``)."""


class NoMatch(LookupError):
    """The subject is not one the transform's source takes ("no matching transforms
    available")."""


def _function(name: str) -> re.Pattern[str]:
    # Each word's first letter in either case, the rest as written (nats-server's patterns).
    words = re.findall(r"[A-Z]?[a-z]+", name[0].upper() + name[1:])
    body = "".join(f"[{w[0].lower()}{w[0].upper()}]{w[1:]}" for w in words)
    return re.compile(r"{{\s*" + body + r"\s*\((.*)\)\s*}}")


# In the order nats-server tries them: a token matching an earlier one is that function.
_WILDCARD, _PARTITION = _function("wildcard"), _function("partition")
_SPLIT_LEFT, _SPLIT_RIGHT = _function("splitFromLeft"), _function("splitFromRight")
_SLICE_LEFT, _SLICE_RIGHT = _function("sliceFromLeft"), _function("sliceFromRight")
_RIGHT, _LEFT = _function("right"), _function("left")
_SPLIT, _RANDOM = _function("split"), _function("random")
#: What a stream's or a source's transform may use (``ValidateMapping``): every function
#: (nats-server 2.15.1 takes left and right there too).
_VALIDATED = (_PARTITION, _WILDCARD, _SPLIT_LEFT, _SPLIT_RIGHT, _SLICE_LEFT, _SLICE_RIGHT,
              _SPLIT, _LEFT, _RIGHT, _RANDOM)
_INDEX_AND_INT = {"split_left": _SPLIT_LEFT, "split_right": _SPLIT_RIGHT,
                  "slice_left": _SLICE_LEFT, "slice_right": _SLICE_RIGHT,
                  "right": _RIGHT, "left": _LEFT}
_ARG_SEPARATOR = re.compile(r",\s*")
_GO_INT = re.compile(r"[+-]?[0-9]+")


def _is_function_token(token: str) -> bool:
    return len(token) > 4 and token.startswith("{{") and token.endswith("}}")


def _args(pattern: re.Pattern[str], token: str) -> list[str] | None:
    found = pattern.search(token)
    return _ARG_SEPARATOR.split(found.group(1)) if found else None


def _atoi(text: str, token: str, *, bits: int = 64) -> int:
    """Go's strconv.Atoi / ParseInt(..., 10, bits) of ``text`` with spaces trimmed."""
    text = text.strip(" ")
    if not _GO_INT.fullmatch(text) or not -(2 ** (bits - 1)) <= int(text) < 2 ** (bits - 1):
        raise MappingError(f"{INVALID_ARG} in {token}")
    return int(text)


@dataclass(frozen=True, slots=True)
class _Token:
    """One destination token: ``kind`` ("literal", "wildcard", "partition", "split_left",
    "split_right", "slice_left", "slice_right", "split", "left", "right", "random"), the
    wildcard numbers it reads (1-based), its number argument and its string argument."""

    kind: str
    text: str
    wildcards: tuple[int, ...] = ()
    number: int = -1
    delim: str = ""


def _two(args: list[str], token: str) -> None:
    """A function of two arguments was given two; MappingError otherwise."""
    if len(args) != 2:
        raise MappingError(f"{NOT_ENOUGH_ARGS if len(args) < 2 else TOO_MANY_ARGS} in {token}")


def _parse_token(token: str) -> _Token:
    """A destination token as nats-server's ``indexPlaceHolders`` reads it; MappingError."""
    if len(token) > 1 and token[0] == "$":
        rest = token[1:]
        if _GO_INT.fullmatch(rest):
            return _Token("wildcard", token, (int(rest),))
        return _Token("literal", token)        # other uses of $ are literal text
    if not _is_function_token(token):
        return _Token("literal", token)
    args = _args(_WILDCARD, token)
    if args is not None:
        if len(args) == 1 and args[0] == "":
            raise MappingError(f"{NOT_ENOUGH_ARGS} in {token}")
        if len(args) > 1:
            raise MappingError(f"{TOO_MANY_ARGS} in {token}")
        return _Token("wildcard", token, (_atoi(args[0], token),))
    args = _args(_PARTITION, token)
    if args is not None:
        count = _atoi(args[0], token)
        if count > _INT32_MAX:
            raise MappingError(f"{INVALID_ARG} in {token}")
        return _Token("partition", token, tuple(_atoi(a, token) for a in args[1:]), count)
    for kind, pattern in _INDEX_AND_INT.items():
        args = _args(pattern, token)
        if args is not None:
            _two(args, token)
            return _Token(kind, token, (_atoi(args[0], token),), _atoi(args[1], token, bits=32))
    args = _args(_SPLIT, token)
    if args is not None:
        _two(args, token)
        index = _atoi(args[0], token)
        if " " in args[1] or "." in args[1]:
            raise MappingError(f"{INVALID_ARG} in {token}")
        return _Token("split", token, (index,), -1, args[1])
    args = _args(_RANDOM, token)
    if args is not None:
        if len(args) != 1:
            raise MappingError(f"{NOT_ENOUGH_ARGS} in {token}")
        count = _atoi(args[0], token)
        if count > _INT32_MAX:
            raise MappingError(f"{INVALID_ARG} in {token}")
        return _Token("random", token, (), count)
    raise MappingError(f"{UNKNOWN_FUNCTION} in {token}")


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """(valid, tokens, number of ``*``, has ``>``) as nats-server's ``subjectInfo``."""
    if not subject:
        return False, [], 0, False
    tokens = subject.split(".")
    stars, full = 0, False
    for t in tokens:
        if not t or full:
            return False, [], 0, False
        if t == ">":
            full = True
        elif t == "*":
            stars += 1
    return True, tokens, stars, full


def _split(word: str, delim: str) -> str:
    """``{{split}}`` as nats-server writes it: the pieces between delimiters, a ``.`` before
    each non-empty piece but the first written (so ``--a`` split at ``-`` is ``.a``, as there)."""
    pieces = word.split(delim) if delim else list(word)
    out: list[str] = []
    for j, piece in enumerate(pieces):
        out.append(piece)
        if j < len(pieces) - 1 and pieces[j + 1] and not (j == 0 and not piece):
            out.append(".")
    return "".join(out)


def _fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


@dataclass(frozen=True, slots=True)
class SubjectTransform:
    """A parsed transform; build it with :meth:`parse`. ``src``: the source filter (``>``
    when given empty); ``dest``: the destination template."""

    src: str
    dest: str
    _src_tokens: tuple[str, ...]
    _dest: tuple[_Token, ...]
    #: For each destination token, the source token positions its wildcards read.
    _positions: tuple[tuple[int, ...], ...]

    @classmethod
    def parse(cls, src: str, dest: str, *, strict: bool = False) -> SubjectTransform | None:
        """The transform from ``src`` to ``dest``, or None when ``dest`` is empty (no
        transform). ``strict``: as an import's mapping (wildcard functions only, every
        ``*`` used). Raises MappingError with nats-server's words
        (``NewSubjectTransformWithStrict``)."""
        if not dest:
            return None
        src = src or ">"
        src_ok, src_tokens, stars, src_full = _subject_info(src)
        dest_ok, dest_tokens, dest_stars, dest_full = _subject_info(dest)
        if not src_ok or not dest_ok or dest_stars > 0 or src_full != dest_full:
            raise MappingError(BAD_SUBJECT)
        star_at = [i for i, t in enumerate(src_tokens) if t == "*"]     # wildcard n at star_at[n-1]
        parsed: list[_Token] = []
        positions: list[tuple[int, ...]] = []
        used = 0
        for text in dest_tokens:
            tok = _parse_token(text)
            if stars or src_full:
                if strict and tok.kind not in ("literal", "wildcard"):
                    raise MappingError(f"{ONLY_WILDCARD} in {text}")
                if tok.kind in ("literal", "random"):
                    positions.append(())
                else:
                    used += len(tok.wildcards)
                    for n in tok.wildcards:
                        if n > stars:
                            raise MappingError(f"{INDEX_OUT_OF_RANGE} in {text}: [{n}]")
                    # an index below 1 reads the first source token, as nats-server's lookup
                    # of a missing wildcard number does
                    positions.append(tuple(star_at[n - 1] if n >= 1 else 0 for n in tok.wildcards))
            else:
                if tok.kind not in ("literal", "random", "partition"):
                    raise MappingError(f"{INDEX_OUT_OF_RANGE} in {text}")
                tok = _Token(tok.kind, tok.text, (), tok.number) if tok.kind == "partition" else tok
                positions.append(())
            parsed.append(tok)
        if strict and (stars or src_full) and used < stars:
            raise MappingError(f"{NOT_ALL_WILDCARDS} in {dest}")
        return cls(src, dest, tuple(src_tokens), tuple(parsed), tuple(positions))

    def match(self, subject: str, rand: Callable[[int], int] | None = None) -> str:
        """``subject`` transformed. Raises MappingError ``"invalid subject"`` for a subject
        that is not a literal one, NoMatch when the source does not take it. ``rand(n)``
        gives ``{{random(n)}}`` its number in [0, n) (default: the process's generator)."""
        if self.src == ">" and self.dest == ">":
            return subject
        if not is_valid_literal_subject(subject):
            raise MappingError(BAD_SUBJECT)
        if self.src != ">" and not subject_matches(self.src, subject):
            raise NoMatch(subject)
        return self.transform_tokens(subject.split("."), rand)

    def transform_tokens(self, tokens: Sequence[str], rand: Callable[[int], int] | None = None) -> str:
        """The destination for a subject already split into ``tokens`` that the source
        takes (nats-server ``TransformTokenizedSubject``)."""
        out: list[str] = []
        for tok, at in zip(self._dest, self._positions):
            if tok.kind == "literal":
                if tok.text == ">":
                    break
                out.append(tok.text)
            else:
                out.append(self._apply(tok, at, tokens, rand))
        if self._dest[-1].text == ">":
            out.extend(tokens[len(self._src_tokens) - 1:])
        return ".".join(out)

    @staticmethod
    def _apply(tok: _Token, at: tuple[int, ...], tokens: Sequence[str],
               rand: Callable[[int], int] | None) -> str:
        kind, n = tok.kind, tok.number
        if kind == "partition":
            key = ".".join(tokens) if not at else "".join(tokens[i] for i in at)
            return "0" if n == 0 else str(_fnv1a32(key.encode()) % n)
        if kind == "random":
            if n == 0:
                return "0"
            return str(rand(n) if rand is not None else _random.randrange(2**31) % n)
        if kind == "wildcard":
            return tokens[at[0]] if at and at[0] < len(tokens) else ""
        word = tokens[at[0]]
        size = len(word)
        if kind == "split":
            return _split(word, tok.delim)
        if not 0 < n < size:
            return word
        if kind == "split_left":
            return f"{word[:n]}.{word[n:]}"
        if kind == "split_right":
            return f"{word[:size - n]}.{word[size - n:]}"
        if kind == "slice_left":
            return ".".join(word[i:i + n] for i in range(0, size, n))
        if kind == "slice_right":
            head = size % n
            return ".".join(([word[:head]] if head else []) + [word[i:i + n] for i in range(head, size, n)])
        if kind == "left":
            return word[:n]
        return word[size - n:]          # right


def validate_mapping(src: str, dest: str) -> None:
    """Raise MappingError unless ``src`` to ``dest`` is a transform nats-server's
    ``ValidateMapping`` takes (a stream's ``subject_transform``, a source's or a mirror's
    ``subject_transforms``): every function token one it knows, no token after ``>``, no white space in a literal token, then :meth:`SubjectTransform.parse`."""
    if not dest:
        return
    after_full = False
    for token in dest.split("."):
        if not token:
            raise MappingError(INVALID_TRANSFORM)
        if after_full:
            raise MappingError(f"{INVALID_TRANSFORM} in {token}")
        if _is_function_token(token):
            if not any(p.search(token) for p in _VALIDATED):
                raise MappingError(f"{UNKNOWN_FUNCTION} in {token}")
            continue
        if token == ">":
            after_full = True
        elif any(c in token for c in "\t\n\f\r "):
            raise MappingError(INVALID_TRANSFORM)
    SubjectTransform.parse(src, dest)
