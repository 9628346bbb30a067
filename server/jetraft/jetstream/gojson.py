"""Request bodies decoded the way Go's ``encoding/json`` decodes them for nats-server.

Every JSON body the JetStream API reads goes through this module (``$JS.API`` requests,
DIRECT.GET, pull requests, ``-NAK`` delays). It answers what nats-server 2.15 answers and
does bounded work on any input:

- **Nesting.** Go refuses a value nested deeper than 10,000 arrays/objects
  (``encoding/json`` ``maxNestingDepth``) with the syntax error ``exceeded max depth`` at
  the offset of the opening bracket that goes past it. Python's ``json`` recurses once per
  level, so jetraft decodes at most :data:`MAX_DEPTH` levels: a body nested deeper than
  that but no deeper than 10,000 is refused with the same error at the offset of the
  bracket that passes :data:`MAX_DEPTH` (nats-server would decode it), and a body nested
  deeper than 10,000 gets Go's offset. The depth is found before parsing by a scan made of
  C-speed bytes operations over blocks of the body (linear time, bounded memory); Python's
  parser then runs with enough recursion headroom for :data:`MAX_DEPTH` levels.
- **Numbers.** An integer literal decodes to its exact int (its text is the literal);
  one with a fraction or an exponent (``1.0``, ``1e2``, ``1e999``) or more than 4,000
  digits decodes to a :class:`GoNumber`, a float that keeps its literal, so that type
  errors quote it as Go does (``cannot unmarshal number 1e999 into ... of type int``);
  ``-0`` decodes to a :class:`GoInt` (Go's unsigned types refuse it). :func:`go_int`
  checks a value against a Go integer type's range. ``NaN`` and ``Infinity`` are syntax
  errors, as in Go.
- **Strings.** Invalid UTF-8 bytes and lone ``\\uD800``-style surrogate escapes inside
  strings decode to U+FFFD, as Go does; nothing else is changed.
- **Errors.** :class:`GoJSONError` carries Go's ``SyntaxError`` text and offset;
  :meth:`GoJSONError.stream_text` is what nats-server's ``unmarshalRequest`` reports (a
  ``json.Decoder``: ``... at offset N``, ``unexpected EOF``), :meth:`GoJSONError.unmarshal_text`
  what ``json.Unmarshal`` reports (pull requests: no offset, ``unexpected end of JSON
  input``). Nothing else is raised: no RecursionError, OverflowError or MemoryError.

Sources: Go ``encoding/json`` (scanner.go, decode.go, stream.go); nats-server
``server/jetstream_api.go`` ``unmarshalRequest``, ``server/stream.go``
``processDirectGetRequest``, ``server/consumer.go`` ``nextReqFromMsg`` and ``processNak``.
This module imports nothing of jetraft's.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import sys
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

__all__ = [
    "GO_MAX_DEPTH",
    "INT_RANGES",
    "MAX_DEPTH",
    "GoInt",
    "GoJSONError",
    "GoNumber",
    "NotAnObject",
    "go_int",
    "go_syntax",
    "iter_values",
    "json_kind",
    "merge_objects",
    "number_literal",
    "unmarshal",
    "with_headroom",
]

#: Go encoding/json ``maxNestingDepth``: arrays/objects nested deeper are a syntax error.
GO_MAX_DEPTH = 10_000
#: The deepest nesting jetraft decodes (Python's json recurses once per level).
MAX_DEPTH = 1_000

#: Go integer types by name, as their (min, max); ``time.Duration`` is an int64.
INT_RANGES: dict[str, tuple[int, int]] = {
    "int": (-(2**63), 2**63 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "time.Duration": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int8": (-(2**7), 2**7 - 1),
    "uint": (0, 2**64 - 1),
    "uint64": (0, 2**64 - 1),
    "uint32": (0, 2**32 - 1),
    "uint16": (0, 2**16 - 1),
    "uint8": (0, 2**8 - 1),
}
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


class GoJSONError(ValueError):
    """A body Go's encoding/json refuses as malformed.

    ``message``: Go's ``SyntaxError`` text (``invalid character 'x' looking for beginning of
    value``, ``exceeded max depth``); ``offset``: Go's ``SyntaxError.Offset`` (bytes read,
    the bad byte included); ``eof``: the body ended inside a value (``offset`` is then None).
    """

    def __init__(self, message: str, offset: int | None, *, eof: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.eof = eof

    def stream_text(self) -> str:
        """nats-server ``unmarshalRequest`` (a ``json.Decoder``): ``<message> at offset N``,
        or ``unexpected EOF``."""
        if self.eof:
            return "unexpected EOF"
        if self.offset is None:
            return self.message
        return f"{self.message} at offset {self.offset}"

    def unmarshal_text(self) -> str:
        """``json.Unmarshal``'s error text: ``<message>``, or ``unexpected end of JSON input``."""
        return "unexpected end of JSON input" if self.eof else self.message


class GoNumber(float):
    """A JSON number with a fraction or an exponent, or an integer of more than 4,000
    digits, with its ``literal`` as written (``1.0``, ``1e999``). Its float value may be
    ``inf``; Go's integer types refuse it, quoting the literal."""

    literal: str

    def __new__(cls, literal: str) -> GoNumber:
        obj = super().__new__(cls, literal)
        obj.literal = literal
        return obj


class GoInt(int):
    """An integer literal Go reads differently from its value: ``-0`` (signed types take
    it as 0, unsigned ones refuse it). ``literal`` as written."""

    literal: str

    def __new__(cls, literal: str) -> GoInt:
        obj = super().__new__(cls, int(literal))
        obj.literal = literal
        return obj


def number_literal(value: int | float) -> str:
    """The JSON text of a number as the client wrote it (for Go's error messages)."""
    literal = getattr(value, "literal", None)
    if literal is not None:
        return literal
    if isinstance(value, int):
        return str(int(value))
    return json.dumps(value)


def go_int(value: Any, gotype: str) -> int | None:
    """``value`` as a plain int when Go decodes it into a ``gotype`` (a key of
    :data:`INT_RANGES`, e.g. ``"uint64"``), else None: not a JSON integer literal, out of
    the type's range, or ``-0`` for an unsigned type (Go ``strconv.ParseInt``/``ParseUint``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    lo, hi = INT_RANGES[gotype]
    if not lo <= value <= hi:
        return None
    if lo == 0 and getattr(value, "literal", "").startswith("-"):
        return None
    return int(value)


def json_kind(value: Any) -> str:
    """Go's name for the JSON kind of a decoded value: ``number``, ``string``, ``bool``,
    ``array``, ``object`` or ``null`` (as in ``cannot unmarshal <kind> into ...``)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


# --- parsing -------------------------------------------------------------------------------

class _Constant(Exception):
    """Python's json met NaN/Infinity/-Infinity, which JSON (and Go) do not have."""


#: Integer literals longer than this are kept as GoNumber (Python refuses to convert more
#: than 4,300 digits; any of them is far outside every Go integer type).
_LONG_INT = 4_000


def _parse_int(literal: str) -> int:
    if literal == "-0":
        return GoInt(literal)
    if len(literal) > _LONG_INT:
        return GoNumber(literal)
    return int(literal)


def _reject_constant(name: str) -> Any:
    raise _Constant(name)


_DECODER = json.JSONDecoder(parse_float=GoNumber, parse_int=_parse_int,
                            parse_constant=_reject_constant, strict=True)
#: For bodies without a ``-0`` or a run of more than _LONG_INT digits: Python's own integer
#: parsing (C speed) gives each literal's exact value, and ``str(value)`` is the literal.
_PLAIN_INTS = json.JSONDecoder(parse_float=GoNumber, parse_constant=_reject_constant, strict=True)
_MINUS_ZERO = re.compile(rb"-0(?![0-9.eE])")
_DIGITS_ONLY = bytes(0x39 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"9" * (_LONG_INT + 1)


def _plain_ints(payload: bytes) -> bool:
    """Whether no integer literal of ``payload`` needs :func:`_parse_int` (C-speed checks)."""
    return not _MINUS_ZERO.search(payload) and _LONG_RUN not in payload.translate(_DIGITS_ONLY)


_WS = " \t\r\n"
_SKIP_WS = re.compile(r"[ \t\r\n]*").match
_WS_CHARS = frozenset(_WS)
#: Nesting up to this depth needs no extra recursion headroom.
_SHALLOW = 64


class NotAnObject(ValueError):
    """:func:`merge_objects` met a value that is neither an object nor null (``value``)."""

    def __init__(self, value: Any) -> None:
        super().__init__(json_kind(value))
        self.value = value


def merge_objects(payload: bytes) -> dict[str, Any] | None:
    """The JSON objects of ``payload`` merged, as Go's ``json.Decoder`` decodes a stream of
    concatenated values into one struct (nats-server ``unmarshalRequest``): keys of later
    objects replace earlier ones; ``null`` changes nothing; None for a blank body.

    Raises :class:`GoJSONError` for a malformed value and :class:`NotAnObject` for the first
    value that is neither an object nor null (Go: ``cannot unmarshal <kind> into Go value``),
    whichever comes first. One C-speed scan per value and nothing else.
    """
    body = _Body(payload)
    text, scan, skip, end = body.limited, body.scan, _SKIP_WS, len(body.text)
    merged: dict[str, Any] | None = None
    with _headroom(body.deep):
        pos = skip(text, 0).end()
        while pos < end:
            try:
                value, after = scan(text, pos)
            except StopIteration as stop:       # json's scanner: no value starts here
                raise body.failure(json.JSONDecodeError("Expecting value", text, stop.value)) from None
            except (json.JSONDecodeError, _Constant, RecursionError, MemoryError) as exc:
                raise body.failure(exc) from None
            if type(value) is dict:
                if merged is None:
                    merged = value
                else:
                    merged.update(value)
            elif value is not None:
                body.check_number_end(value, pos, after)
                raise NotAnObject(value)
            pos = skip(text, after).end() if text[after:after + 1] in _WS_CHARS else after
    return merged


def iter_values(payload: bytes) -> Iterator[Any]:
    """Each JSON value of ``payload`` in turn, as Go's ``json.Decoder`` reads a stream of
    concatenated values (nats-server ``unmarshalRequest``); nothing for a blank body.

    Raises :class:`GoJSONError` when reaching a malformed value (values before it are
    yielded first, as Go decodes them first).
    """
    body = _Body(payload)
    pos = 0
    while True:
        pos = body.skip_ws(pos)
        if pos >= len(body.text):
            return
        value, pos = body.parse(pos)
        yield value


def unmarshal(payload: bytes) -> Any:
    """The one JSON value of ``payload``, as Go's ``json.Unmarshal`` reads it (DIRECT.GET,
    pull requests, NAK delays). Raises :class:`GoJSONError` for a blank body (``eof``), a
    malformed value or anything but blanks after it (``invalid character 'x' after
    top-level value``)."""
    body = _Body(payload)
    pos = body.skip_ws(0)
    if pos >= len(body.text):
        raise GoJSONError("unexpected end of JSON input", None, eof=True)
    value, end = body.parse(pos)
    rest = body.skip_ws(end)
    if rest < len(body.text):
        raise GoJSONError(f"invalid character {_go_char(body.text[rest])} after top-level value",
                          body.offset(rest))
    return value


class _Body:
    """One request body being decoded: its text, the positions where its nesting passes
    jetraft's and Go's limits, and the text Python parses (strings cleaned)."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.text = payload.decode("utf-8", "surrogateescape")
        self.clean = _clean_strings(payload, self.text)
        self.shallow_byte, self.limit_byte, self.go_byte = _nesting_marks(
            payload, (_SHALLOW, MAX_DEPTH, GO_MAX_DEPTH))
        if self.limit_byte is None:
            self.limited = self.clean
            self.limit_char = None
        else:   # Python parses up to and including the bracket that nests too deep
            self.limit_char = self._char_index(self.limit_byte)
            self.limited = self.clean[: self.limit_char + 1]
        self.deep = self.shallow_byte is not None
        self.scan = (_PLAIN_INTS if _plain_ints(payload) else _DECODER).scan_once

    def _char_index(self, byte_index: int) -> int:
        if self.payload.isascii():
            return byte_index
        return len(self.payload[:byte_index].decode("utf-8", "surrogateescape"))

    def offset(self, char_index: int) -> int:
        """Go's offset of the character at ``char_index``: bytes up to and including it."""
        if self.payload.isascii():
            return char_index + 1
        return len(self.text[: char_index + 1].encode("utf-8", "surrogateescape"))

    def skip_ws(self, pos: int) -> int:
        return _SKIP_WS(self.text, pos).end()

    def parse(self, pos: int) -> tuple[Any, int]:
        """The value starting at ``pos`` and the index after it."""
        try:
            with _headroom(self.deep):
                value, end = self.scan(self.limited, pos)
        except StopIteration as stop:       # json's scanner: no value starts here
            raise self.failure(json.JSONDecodeError("Expecting value", self.limited, stop.value)) from None
        except (json.JSONDecodeError, _Constant, RecursionError, MemoryError) as exc:
            raise self.failure(exc) from None
        self.check_number_end(value, pos, end)
        return value, end

    def check_number_end(self, value: Any, pos: int, end: int) -> None:
        """Python ends a top-level number before a ``.`` or ``e`` it cannot take (``1.``);
        Go fails inside the number: raise its error then."""
        if end < len(self.text) and self.text[end] in ".eE" and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            found = _number_error(self.text, pos, end)
            if found is not None:
                message, index = found
                raise GoJSONError(message, None if index is None else self.offset(index),
                                  eof=index is None)

    def failure(self, exc: BaseException) -> GoJSONError:
        """Go's error for what Python's json raised while parsing this body."""
        if isinstance(exc, json.JSONDecodeError):
            if self.limit_char is not None and exc.pos > self.limit_char:
                return self._too_deep()
            message, offset, trim = go_syntax(self.text, exc)
            if offset is None:
                return GoJSONError(message, None, eof=True)
            return GoJSONError(message, self.offset(offset) - trim)
        if isinstance(exc, _Constant):
            return self._constant(str(exc))
        if isinstance(exc, RecursionError):     # the scan makes this unreachable; never let it out
            return self._too_deep()
        return GoJSONError("out of memory", None)

    def _too_deep(self) -> GoJSONError:
        where = self.go_byte if self.go_byte is not None else self.limit_byte
        if where is None:
            where = len(self.payload) - 1
        return GoJSONError("exceeded max depth", where + 1)

    def _constant(self, name: str) -> GoJSONError:
        """Go's error for the first NaN/Infinity/-Infinity outside strings."""
        masked = _mask_strings(self.payload, _BLANK_ALL)
        found = re.search(rb"-?Infinity|NaN", masked)
        at = found.start() if found else 0
        if masked[at:at + 1] == b"-":
            return GoJSONError("invalid character 'I' in numeric literal", at + 2)
        return GoJSONError(f"invalid character {_go_char(chr(masked[at]))} looking for beginning of value",
                           at + 1)


def with_headroom(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with the recursion limit raised, if needed, so that Python's
    json can descend :data:`MAX_DEPTH` + 1 levels below the current stack (to decode a
    body, or to encode a value decoded from one). The limit is restored afterwards."""
    with _headroom(True):
        return fn(*args, **kwargs)


@contextlib.contextmanager
def _headroom(needed: bool) -> Iterator[None]:
    """While inside, the recursion limit leaves :data:`MAX_DEPTH` + 64 levels below the
    current stack (only when ``needed``: a body nested deeper than 64 levels)."""
    if not needed:
        yield
        return
    depth = 0
    frame = inspect.currentframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    need = depth + MAX_DEPTH + 64
    old = sys.getrecursionlimit()
    if need <= old:
        yield
        return
    sys.setrecursionlimit(need)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


# --- the nesting scan ----------------------------------------------------------------------

_BLOCK = 4096
_ESCAPE = re.compile(rb"\\.", re.S)
_NEUTRAL = bytes.maketrans(b"[]{}", b"____")
_BLANK_ALL = bytes(b if b == 0x22 else 0x5F for b in range(256))
_DELTA = [0] * 256
for _c in b"[{":
    _DELTA[_c] = 1
for _c in b"]}":
    _DELTA[_c] = -1
_RDELTA = [-d for d in _DELTA]


def _mask_block(block: bytes, in_string: bool, table: bytes) -> tuple[bytes, bool]:
    """``block`` with the bytes inside strings translated by ``table`` (quotes kept), and
    whether the block ends inside a string. Escapes must already be neutralised."""
    parts = block.split(b'"')
    inside = parts[0 if in_string else 1::2]
    if inside:
        parts[0 if in_string else 1::2] = b'"'.join(inside).translate(table).split(b'"')
    return b'"'.join(parts), in_string ^ bool((len(parts) - 1) & 1)


def _mask_strings(payload: bytes, table: bytes) -> bytes:
    """``payload`` with every byte inside a string translated by ``table`` (same length)."""
    esc = _ESCAPE.sub(b"__", payload)
    out, in_string = [], False
    for start in range(0, len(esc), _BLOCK):
        block, in_string = _mask_block(esc[start:start + _BLOCK], in_string, table)
        out.append(block)
    return b"".join(out)


def _nesting_marks(payload: bytes, limits: tuple[int, ...]) -> list[int | None]:
    """For each of the ascending ``limits``: the index of the first byte (an ``[`` or ``{``
    outside strings) that opens a container nested deeper than it, or None.

    Exact up to the first syntax error of the body (Python's parser stops there). Work:
    a few C-speed passes per 4 KiB block (:func:`_rise_bound`); a per-byte running sum
    (C-level ``accumulate``) only over blocks where the nesting may cross a limit.
    """
    marks: list[int | None] = [None] * len(limits)
    if payload.count(b"[") + payload.count(b"{") <= limits[0]:
        return marks
    esc = _ESCAPE.sub(b"__", payload)
    depth, in_string, want = 0, False, 0
    for start in range(0, len(esc), _BLOCK):
        block, in_string = _mask_block(esc[start:start + _BLOCK], in_string, _NEUTRAL)
        opens = block.count(b"[") + block.count(b"{")
        if depth + opens > limits[want] and depth + _rise_bound(block) > limits[want]:
            run = list(accumulate(map(_DELTA.__getitem__, block), initial=depth))
            while want < len(limits):
                try:
                    i = run.index(limits[want] + 1, 1)
                except ValueError:
                    break
                marks[want] = start + i - 1
                want += 1
            if want == len(limits):
                return marks
            depth = run[-1]
        else:
            depth += opens - block.count(b"]") - block.count(b"}")
    return marks


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_PAIRS = (b"[]", b"{}", b"[}", b"{]")


def _rise_bound(block: bytes) -> int:
    """An upper bound of how far the nesting rises inside ``block`` (strings masked) above
    its level at the block's start. Each round of removing adjacent bracket pairs lowers
    the highest point by at most one, so the bound is the remainder's rise plus the rounds
    (up to three); exact when nothing is removed."""
    rest = block.translate(None, _NOT_BRACKETS)
    rounds = 0
    while rounds < 3:
        shorter = rest
        for pair in _PAIRS:
            shorter = shorter.replace(pair, b"")
        if shorter == rest:
            break
        rest, rounds = shorter, rounds + 1
    if not rest:
        return rounds
    return max(0, max(accumulate(map(_DELTA.__getitem__, rest)))) + rounds


# --- strings Go reads as U+FFFD --------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_HIGH = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")
_LONE_LOW = re.compile(r"(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_BAD_BYTES = {0xDC80 + i: 0xFFFD for i in range(128)}


def _clean_strings(payload: bytes, text: str) -> str:
    """``text`` with invalid UTF-8 bytes and lone surrogate escapes turned into U+FFFD
    (Go ``unquote``), same length and positions; ``text`` itself when there are none."""
    clean = text
    if not payload.isascii():
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            clean = clean.translate(_BAD_BYTES)
    if _SURROGATE_ESCAPE.search(payload) and "\x00" not in clean:
        marked = clean.replace("\\\\", "\x00\x00")     # escaped backslashes, restored below
        marked = _LONE_LOW.sub(r"\\ufffd", _LONE_HIGH.sub(r"\\ufffd", marked))
        clean = marked.replace("\x00\x00", "\\\\")
    return clean


# --- Go's syntax error texts -----------------------------------------------------------------

_DIGITS = frozenset("0123456789")


def _go_char(ch: str) -> str:
    """Go's ``quoteChar``: ``'x'``, ``'\\t'``, ``'\\xff'`` for a byte that is not UTF-8."""
    if 0xDC80 <= ord(ch) <= 0xDCFF:
        return f"'\\x{ord(ch) - 0xDC00:02x}'"
    if ch == "'":
        return "'\\''"
    if ch == '"':
        return "'\"'"
    if ch.isprintable():
        return f"'{ch}'"
    return "'" + repr(ch)[1:-1] + "'"


def _inside_object(text: str, pos: int) -> bool:
    """Whether ``pos`` is directly inside an object (else an array or the top level): the
    innermost bracket left open before ``pos``, found from the end in blocks."""
    masked = _mask_strings(text[:pos].encode("utf-8", "surrogateescape"), _NEUTRAL)
    need = 0        # closers met (from the end) not matched yet
    for end in range(len(masked), 0, -_BLOCK):
        block = masked[max(0, end - _BLOCK):end]
        opens = block.count(b"[") + block.count(b"{")
        if opens > need:
            run = list(accumulate(map(_RDELTA.__getitem__, reversed(block)), initial=need))
            try:
                k = run.index(-1, 1)
            except ValueError:
                need = run[-1]
                continue
            return block[len(block) - k] == 0x7B
        need += block.count(b"]") + block.count(b"}") - opens
    return False


def _number_error(text: str, start: int, pos: int) -> tuple[str, int | None] | None:
    """Go's scanner over the number starting at ``start``: its error when the number is
    malformed at or before ``pos`` (``(message, index)``, index None for EOF), else None."""
    i, n = start, len(text)

    def at(j: int) -> str:
        return text[j] if j < n else ""

    def digit_expected(j: int) -> tuple[str, int | None] | None:
        if at(j) == "":
            return "", None
        if at(j) not in _DIGITS:
            return f"invalid character {_go_char(at(j))} in numeric literal", j
        return None

    if at(i) == "-":
        i += 1
        if (bad := digit_expected(i)) is not None:
            return bad
    if at(i) == "0":
        i += 1
    else:
        while at(i) in _DIGITS and at(i):
            i += 1
    if at(i) == ".":
        i += 1
        if (bad := digit_expected(i)) is not None:
            return bad
        while at(i) in _DIGITS and at(i):
            i += 1
    if at(i) in ("e", "E"):
        i += 1
        if at(i) in ("+", "-"):
            i += 1
        if (bad := digit_expected(i)) is not None:
            return bad
    return None


def _go_escape_quote(seq: bytes) -> str:
    """Go's ``%#q`` of the bytes of a bad escape sequence: in backquotes when it can be (all
    printable ASCII, no backquote), else double-quoted with Go's escapes (``"\\\x92"``)."""
    if all(0x20 <= b < 0x7F for b in seq) and b"`" not in seq:
        return f"`{seq.decode()}`"
    out = []
    for b in seq:
        if b == 0x5C:
            out.append("\\\\")
        elif b == 0x22:
            out.append('\\"')
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(_GO_CONTROL.get(b) or f"\\x{b:02x}")
    return '"' + "".join(out) + '"'


_GO_CONTROL = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v"}


def go_syntax(text: str, exc: json.JSONDecodeError) -> tuple[str, int | None, int]:
    """Go's syntax error for the one Python's json found in ``text``: ``(message, index of
    the bad character, trim)``, index None when Go reports ``unexpected EOF``. Go's offset is
    the UTF-8 length of ``text`` through that character less ``trim`` bytes (Go reads a bad
    escape byte by byte: it stops at the first byte of a multi-byte character).

    Go reports the input ending early as EOF, ``invalid character 'c' in literal true
    (expecting 'u')`` inside a misspelt literal, ``invalid character '\\t' in string`` for a
    control character, ``invalid escape sequence `\\q` in string`` for a bad escape,
    ``invalid character 'c' in numeric literal`` inside a number, otherwise ``invalid
    character 'c' <context>`` (the texts of nats-server 2.15.1's Go, observed).
    """
    pos = exc.pos
    msg = exc.msg
    if not text[pos:].strip(_WS):
        return "", None, 0
    if msg.startswith("Invalid control character"):
        return f"invalid character {_go_char(text[pos])} in string", pos, 0
    if msg.startswith("Unterminated string"):
        return "", None, 0
    if msg.startswith(("Invalid \\escape", "Invalid \\uXXXX escape")):
        # Go (nats-server 2.15): "invalid escape sequence `\\q` in string" (%#q), at the end
        # of the sequence (a \\u escape: six characters; else the backslash and one byte);
        # Python's pos is the backslash or the u
        back = pos - 1 if text[pos] == "u" and pos > 0 and text[pos - 1] == "\\" else pos
        size = 6 if text[back + 1:back + 2] == "u" else 2
        if back + size > len(text):
            return "", None, 0
        seq = text[back:back + size].encode("utf-8", "surrogateescape")
        if size == 2:
            seq = seq[:2]
        return (f"invalid escape sequence {_go_escape_quote(seq)} in string", back + size - 1,
                len(text[back:back + size].encode("utf-8", "surrogateescape")) - len(seq))
    ch = text[pos]
    # a number Go refuses inside (Python stops at its last valid character instead)
    start = pos
    while start > 0 and text[start - 1] in "0123456789+-.eE":
        start -= 1
    if start < pos and text[start] in "-0123456789" or (ch == "-" and msg.startswith("Expecting value")):
        found = _number_error(text, start if start < pos else pos, pos)
        if found is not None:
            message, index = found
            return message, index, 0
    for literal in ("true", "false", "null"):
        if ch == literal[0] and msg.startswith(("Expecting value", "Extra data")):
            for i, want in enumerate(literal):
                if pos + i >= len(text):
                    return "", None, 0
                if text[pos + i] != want:
                    return (f"invalid character {_go_char(text[pos + i])} in literal {literal} "
                            f"(expecting {_go_char(want)})", pos + i, 0)
    if msg.startswith("Expecting property name"):
        ctx = "looking for beginning of object key string"
    elif msg.startswith("Expecting ':'"):
        ctx = "after object key"
    elif msg.startswith("Expecting ','"):
        ctx = "after object key:value pair" if _inside_object(text, pos) else "after array element"
    else:
        ctx = "looking for beginning of value"
    return f"invalid character {_go_char(ch)} {ctx}", pos, 0
