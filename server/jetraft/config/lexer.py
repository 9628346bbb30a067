"""Tokenizer for the NATS configuration format.

The lexical rules are those of nats-server ``conf/lex.go``; this is a separate
implementation with a different shape (a loop over an explicit stack of open
containers instead of state functions) and more precise error messages.

What a token is depends on where it stands, so the lexer tracks structure:

* Top level (optionally wrapped in ``{ }``) and maps hold ``key value`` entries.
  A key is bare (up to whitespace, ``=`` or ``:``), ``"double"`` or ``'single'``
  quoted (no escapes in keys). Between key and value: ``=``, ``:`` or whitespace.
  After a bare key, blank space and new lines may come before the separator; after
  the separator the value must start on the same line at the top level (lex.go
  ``lexValue``), while inside a map it may start on a later line.
* An entry ends at a new line, ``;``, ``,``, a comment (``#`` or ``//``), the end
  of the file (top level) or ``}`` (map). Arrays ``[ ]`` separate elements with
  ``,`` or new lines and may hold comments; a trailing ``,`` is allowed.
* ``include <path>`` (bare key ``include``, any case, followed by whitespace) names
  a file; the path is bare, ``'single'`` or ``"double"`` quoted, never escaped.
* Values: ``"double-quoted"`` strings (escapes ``\\t \\n \\r \\" \\\\ \\xHH``),
  ``'single-quoted'`` raw strings, ``( ... )`` raw block strings ending at a ``)``
  alone on a line, maps, arrays, and bare words. A bare word that starts with a
  digit or ``-`` is a number when it is one: an integer with an optional size
  suffix (``k kb ki kib m mb ... e eb``, case-insensitive), a float, a Zulu
  datetime ``YYYY-MM-DDTHH:MM:SSZ``; ``127.0.0.1:4222`` and ``5s`` are strings.
  Other bare words are booleans (``true false yes no on off``, any case), variable
  references (``$NAME``) or strings (escapes apply in bare words too).

Deliberate differences from lex.go, all of them stricter or clearer where lex.go
silently accepts a broken file, or accepting what lex.go rejects by accident:
a missing value (lex.go reads ``""``), an unclosed top-level ``{``, a stray ``}``,
a quoted key cut by the end of the file and a key starting with a single ``/``
(lex.go drops the ``/`` inside maps) are errors; ``]`` ends a number (lex.go makes
``[1, 2]`` an error); an array element or an include path may start with ``/`` or
a digit; nested top-level blocks ``{ {a: 1} b: 2 }`` are transparent.
"""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import ConfigError, Position

__all__ = ["MAX_DEPTH", "Token", "TokenKind", "tokenize"]

#: The deepest nesting of maps, arrays and top-level braces accepted; deeper input
#: is rejected with a ConfigError rather than exhausting the interpreter's stack.
MAX_DEPTH = 128


class TokenKind(enum.Enum):
    """The kinds of token (the ``item`` types of lex.go, minus comments)."""

    KEY = "key"
    STRING = "string"
    BOOL = "bool"
    INTEGER = "integer"
    FLOAT = "float"
    DATETIME = "datetime"
    VARIABLE = "variable"
    INCLUDE = "include"
    ARRAY_START = "array start"
    ARRAY_END = "array end"
    MAP_START = "map start"
    MAP_END = "map end"
    EOF = "end of file"


@dataclass(frozen=True, slots=True)
class Token:
    """One token. ``text`` is the key, the decoded string, the lexeme of a number,
    boolean or datetime (``"10kb"``, ``"On"``), the variable name without ``$`` or the
    include path; empty for structure tokens. ``position`` is where it starts."""

    kind: TokenKind
    text: str
    position: Position


# Go's unicode.IsSpace: ASCII/Latin-1 spaces plus the Unicode White_Space set.
_SPACES = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_BLANKS = frozenset(" \t")
_NEWLINES = frozenset("\n\r")
_DIGITS = frozenset("0123456789")
_SIZE_SUFFIXES = frozenset("kKmMgGtTpPeE")
_SIZE_SUFFIX_TAILS = frozenset("bBiI")
_BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off"})
# Characters that end a bare word (lex.go lexString) and an integer (lex.go
# lexNumberOrDateOrStringOrIP, plus ']' so that [1, 2] works).
_VALUE_END = frozenset("\n\r;,]} \t")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_HEX2 = re.compile(r"[0-9A-Fa-f]{2}")
_DATETIME_TAIL = "-00-00T00:00:00Z"  # after YYYY; '0' stands for a digit


def describe(text: str, i: int) -> str:
    """How to name the character at ``text[i]`` in a message ("end of file" past the end)."""
    if i >= len(text):
        return "end of file"
    c = text[i]
    if c == "\n":
        return "a new line"
    if c == "\r":
        return "a carriage return"
    return repr(c)


class _Frame:
    """One open container: the top level, a top-level ``{`` block, a map or an array."""

    __slots__ = ("after_value", "kind", "last", "opened")

    def __init__(self, kind: str, opened: int) -> None:
        self.kind = kind  # "top", "block", "map", "array"
        self.opened = opened  # index of the opening bracket
        self.after_value = False  # a value was just read; a separator must follow
        self.last = ""  # what the last value was, for messages ("the value of 'port'")


class _Lexer:
    def __init__(self, text: str, filename: str) -> None:
        self.text = text
        self.filename = filename
        self.i = 0
        self.out: list[Token] = []
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    # -- positions and errors ----------------------------------------------------

    def position(self, i: int) -> Position:
        line = bisect.bisect_right(self._line_starts, i)
        return Position(self.filename, line, i - self._line_starts[line - 1] + 1)

    def error(self, i: int, message: str) -> ConfigError:
        return ConfigError.at(self.position(i), message)

    def emit(self, kind: TokenKind, text: str, start: int) -> None:
        self.out.append(Token(kind, text, self.position(start)))

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.text[j] if j < len(self.text) else ""

    # -- skipping --------------------------------------------------------------

    def at_comment(self) -> bool:
        c = self.peek()
        return c == "#" or (c == "/" and self.peek(1) == "/")

    def skip_comment(self) -> None:
        """Skip to (not over) the end of the line."""
        n = len(self.text)
        while self.i < n and self.text[self.i] not in _NEWLINES:
            self.i += 1

    def skip(self, chars: frozenset[str], comments: bool) -> None:
        n = len(self.text)
        while self.i < n:
            if self.text[self.i] in chars:
                self.i += 1
            elif comments and self.at_comment():
                self.skip_comment()
            else:
                return

    # -- driver ------------------------------------------------------------------

    def tokens(self, value_only: str | None) -> Iterator[Token]:
        stack = [_Frame("top", 0)]
        if value_only is not None:
            self.skip(_BLANKS, comments=False)
            self.value(stack, value_only)
        while True:
            frame = stack[-1]
            if frame.kind == "array":
                done = self.array_step(stack, frame)
            elif frame.after_value:
                done = self.entry_end(stack, frame)
            else:
                done = self.entry_start(stack, frame)
            yield from self.out
            self.out.clear()
            if done:
                return

    def push(self, stack: list[_Frame], kind: str) -> None:
        if len(stack) > MAX_DEPTH:
            raise self.error(self.i, f"nesting deeper than {MAX_DEPTH} levels")
        stack.append(_Frame(kind, self.i))
        self.i += 1

    def unterminated(self, frame: _Frame) -> ConfigError:
        what = {"block": ("top-level block", "}"), "map": ("map", "}"), "array": ("array", "]")}
        name, closer = what[frame.kind]
        opener = self.text[frame.opened]
        return self.error(frame.opened, f"unterminated {name}: '{opener}' has no matching '{closer}'")

    # -- entries (top level, top-level blocks, maps) -----------------------------

    def entry_start(self, stack: list[_Frame], frame: _Frame) -> bool:
        self.skip(_SPACES, comments=True)
        c = self.peek()
        if c == "":
            if frame.kind == "top":
                self.emit(TokenKind.EOF, "", self.i)
                return True
            raise self.unterminated(frame)
        if c == "}":
            return self.close_brace(stack, frame)
        if c == "{" and frame.kind != "map":
            self.push(stack, "block")
            return False
        if c in "=:":
            raise self.error(self.i, f"unexpected key separator {c!r}: a key is missing")
        if c == "]":
            raise self.error(self.i, "unexpected ']' where a key was expected")
        if c == "/":
            raise self.error(self.i, "unexpected '/': comments start with '#' or '//'")
        start = self.i
        if c in "\"'":
            key = self.raw_quoted("quoted key")
        else:
            n = len(self.text)
            while self.i < n and self.text[self.i] not in _SPACES and self.text[self.i] not in "=:":
                self.i += 1
            key = self.text[start : self.i]
            if key.lower() == "include" and self.peek() in _SPACES:
                self.include(frame)
                return False
        self.emit(TokenKind.KEY, key, start)
        self.after_key(stack, frame, key)
        return False

    def close_brace(self, stack: list[_Frame], frame: _Frame) -> bool:
        if frame.kind == "top":
            raise self.error(self.i, "unexpected '}' with no '{' to close")
        if frame.kind == "map":
            self.emit(TokenKind.MAP_END, "", self.i)
        stack.pop()
        self.i += 1
        if frame.kind == "map":
            stack[-1].after_value = True
        return False

    def after_key(self, stack: list[_Frame], frame: _Frame, key: str) -> None:
        self.skip(_SPACES, comments=False)
        if self.peek() in ("=", ":"):
            self.i += 1
            # A value may follow the separator on a later line only inside a map.
            self.skip(_SPACES if frame.kind == "map" else _BLANKS, comments=False)
        self.value(stack, key)

    def include(self, frame: _Frame) -> None:
        self.skip(_BLANKS, comments=False)
        start = self.i
        c = self.peek()
        if c in ("'", '"'):
            path = self.raw_quoted("quoted include path")
        elif c == "" or c in _NEWLINES or c in "[{(\\;}":
            raise self.error(start, f"include needs a file name, found {describe(self.text, start)}")
        else:
            n = len(self.text)
            while self.i < n and self.text[self.i] not in "\n\r;} \t'":
                self.i += 1
            path = self.text[start : self.i]
        self.emit(TokenKind.INCLUDE, path, start)
        frame.after_value = True
        frame.last = f"include {path!r}"

    def separator(self, frame: _Frame, separators: str) -> str | None:
        """After a value: skip blanks and a comment, then take a new line or one of
        ``separators`` (returning None), or return the next character ("" at the end)."""
        self.skip(_BLANKS, comments=False)
        if self.at_comment():
            self.skip_comment()
        c = self.peek()
        if c and (c in _NEWLINES or c in separators):
            self.i += 1
            frame.after_value = False
            return None
        return c

    def entry_end(self, stack: list[_Frame], frame: _Frame) -> bool:
        c = self.separator(frame, ";,")
        if c is None:
            return False
        if c == "" and frame.kind == "top":
            frame.after_value = False
            return False
        if c == "":
            raise self.unterminated(frame)
        if c == "}":
            frame.after_value = False
            return self.close_brace(stack, frame)
        ends = "a new line, ';' or ','" if frame.kind == "top" else "a new line, ';', ',' or '}'"
        raise self.error(self.i, f"expected {ends} after {frame.last}, found {describe(self.text, self.i)}")

    # -- arrays ------------------------------------------------------------------

    def array_step(self, stack: list[_Frame], frame: _Frame) -> bool:
        if frame.after_value:
            c = self.separator(frame, ",")
            if c is None:
                return False
            if c not in ("]", ""):
                raise self.error(
                    self.i,
                    f"expected ',', a new line or ']' after an array element, found {describe(self.text, self.i)}",
                )
        self.skip(_SPACES, comments=True)
        c = self.peek()
        if c == "":
            raise self.unterminated(frame)
        if c == "]":
            self.emit(TokenKind.ARRAY_END, "", self.i)
            self.i += 1
            stack.pop()
            return False
        if c == ",":
            raise self.error(self.i, "unexpected ',' in array: an element is missing")
        self.value(stack, None)
        return False

    # -- values ------------------------------------------------------------------

    def value(self, stack: list[_Frame], key: str | None) -> None:
        """Read one value at self.i for the innermost frame (``key`` names it in messages)."""
        frame = stack[-1]
        frame.after_value = True
        frame.last = "an array element" if key is None else f"the value of {key!r}"
        start = self.i
        c = self.peek()
        if c == "" or c in _NEWLINES or c in ";,}]":
            what = "missing array element" if key is None else f"missing value for key {key!r}"
            raise self.error(start, f"{what}: found {describe(self.text, start)}")
        if c == "[":
            self.emit(TokenKind.ARRAY_START, "", start)
            self.push(stack, "array")
        elif c == "{":
            self.emit(TokenKind.MAP_START, "", start)
            self.push(stack, "map")
        elif c == '"':
            self.emit(TokenKind.STRING, self.double_quoted(), start)
        elif c == "'":
            self.emit(TokenKind.STRING, self.raw_quoted("single-quoted string"), start)
        elif c == "(":
            self.emit(TokenKind.STRING, self.block(), start)
        elif c == "-" or c in _DIGITS:
            self.number()
        elif c == ".":
            raise self.error(start, "floats must start with a digit, found '.'")
        else:
            self.bare_word(start)

    def raw_quoted(self, what: str) -> str:
        """The text between the quote at self.i and the next same quote, taken as is."""
        start = self.i
        quote = self.text[start]
        end = self.text.find(quote, start + 1)
        if end < 0:
            raise self.error(start, f"unterminated {what}: missing closing {quote}")
        self.i = end + 1
        return self.text[start + 1 : end]

    def double_quoted(self) -> str:
        start = self.i
        self.i += 1
        parts: list[str | bytes] = []
        n = len(self.text)
        while True:
            j = self.i
            while j < n and self.text[j] not in '"\\':
                j += 1
            parts.append(self.text[self.i : j])
            self.i = j
            if j >= n:
                raise self.error(start, 'unterminated double-quoted string: missing closing "')
            if self.text[j] == '"':
                self.i += 1
                return _join(parts)
            parts.append(self.escape())

    def escape(self) -> str | bytes:
        """Decode the escape sequence at self.i (a backslash); lex.go lexStringEscape."""
        start = self.i
        c = self.peek(1)
        if c == "x":
            digits = self.text[start + 2 : start + 4]
            if any(d in _NEWLINES for d in digits) or len(digits) < 2:
                raise self.error(start, "expected two hexadecimal digits after '\\x', found the end of the line")
            if not _HEX2.fullmatch(digits):
                raise self.error(start, f"expected two hexadecimal digits after '\\x', found {digits!r}")
            self.i += 4
            return bytes.fromhex(digits)
        if c in _ESCAPES:
            self.i += 2
            return _ESCAPES[c]
        found = "the end of the file" if c == "" else describe(self.text, start + 1)
        raise self.error(
            start, f"invalid escape '\\' followed by {found}: only \\xHH, \\t, \\n, \\r, \\\" and \\\\ are allowed"
        )

    def block(self) -> str:
        """A ``( ... )`` raw string: up to a ``)`` alone on its line (lex.go lexBlock)."""
        start = self.i
        search = start + 1
        n = len(self.text)
        while True:
            end = self.text.find("\n)", search)
            if end < 0:
                raise self.error(start, "unterminated block string: '(' needs a ')' alone on a line")
            after = end + 2
            if after >= n or self.text[after] in _NEWLINES:
                self.i = after
                return self.text[start + 1 : end + 1]
            search = end + 1

    def number(self) -> None:
        """An integer, float, datetime, IP address or a bare word starting like a number."""
        text, n, start = self.text, len(self.text), self.i
        j = start + 1 if text[start] == "-" else start
        if j >= n or text[j] not in _DIGITS:
            if j < n and text[j] == ".":
                raise self.error(j, "floats must start with a digit, found '.'")
            raise self.error(j, f"expected a digit after '-', found {describe(text, j)}")
        while j < n and text[j] in _DIGITS:
            j += 1
        c = text[j] if j < n else ""
        if c == "-" and text[start] != "-":
            self.datetime(start, j)
        elif c == ".":
            self.float_or_address(start, j + 1)
        elif c and c in _SIZE_SUFFIXES:
            k = j + 1
            while k < n and text[k] in _SIZE_SUFFIX_TAILS:
                k += 1
            if k >= n or text[k] in _VALUE_END or text[k] in _DIGITS:
                self.i = k
                self.emit(TokenKind.INTEGER, text[start:k], start)
            else:
                self.bare_word(start)
        elif text[start] == "-" or c == "" or c in _VALUE_END:
            # lex.go ends a negative integer at any non-digit; what follows must be a separator.
            self.i = j
            self.emit(TokenKind.INTEGER, text[start:j], start)
        else:
            self.bare_word(start)

    def datetime(self, start: int, dash: int) -> None:
        if dash - start != 4:
            raise self.error(dash, "'-' in a number: datetimes must be in full Zulu form YYYY-MM-DDTHH:MM:SSZ")
        for offset, want in enumerate(_DATETIME_TAIL):
            j = dash + offset
            got = self.text[j] if j < len(self.text) else ""
            if want == "0" and (got == "" or got not in _DIGITS):
                raise self.error(j, f"expected a digit in datetime (YYYY-MM-DDTHH:MM:SSZ), found {describe(self.text, j)}")
            if want != "0" and got != want:
                raise self.error(j, f"expected {want!r} in datetime (YYYY-MM-DDTHH:MM:SSZ), found {describe(self.text, j)}")
        self.i = dash + len(_DATETIME_TAIL)
        self.emit(TokenKind.DATETIME, self.text[start : self.i], start)

    def float_or_address(self, start: int, j: int) -> None:
        text, n = self.text, len(self.text)
        if j >= n or text[j] not in _DIGITS:
            raise self.error(j, f"a float needs a digit after '.', found {describe(text, j)}")
        while j < n and text[j] in _DIGITS:
            j += 1
        if j < n and text[j] == ".":  # a second dot: an IP address, maybe with :port
            while j < n and (text[j] in _DIGITS or text[j] in ".:-"):
                j += 1
            self.i = j
            self.emit(TokenKind.STRING, text[start:j], start)
            return
        self.i = j
        self.emit(TokenKind.FLOAT, text[start:j], start)

    def bare_word(self, start: int) -> None:
        text, n = self.text, len(self.text)
        self.i = start
        parts: list[str | bytes] = []
        escaped = False
        while True:
            j = self.i
            while j < n and text[j] not in _VALUE_END and text[j] not in "\\'":
                j += 1
            parts.append(text[self.i : j])
            self.i = j
            if j < n and text[j] == "\\":
                parts.append(self.escape())
                escaped = True
                continue
            break
        word = _join(parts)
        if escaped:
            self.emit(TokenKind.STRING, word, start)
        elif word.lower() in _BOOLEANS:
            self.emit(TokenKind.BOOL, word, start)
        elif word.startswith("$"):
            self.emit(TokenKind.VARIABLE, word[1:], start)
        else:
            self.emit(TokenKind.STRING, word, start)


def _join(parts: list[str | bytes]) -> str:
    """Join string pieces; runs of ``\\xHH`` bytes are decoded as UTF-8 (U+FFFD if invalid)."""
    out: list[str] = []
    pending = bytearray()
    for part in parts:
        if isinstance(part, bytes):
            pending += part
            continue
        if part and pending:
            out.append(pending.decode("utf-8", "replace"))
            pending.clear()
        out.append(part)
    if pending:
        out.append(pending.decode("utf-8", "replace"))
    return "".join(out)


def tokenize(text: str, filename: str = "<string>", *, value_only: str | None = None) -> Iterator[Token]:
    """Yield the tokens of ``text`` lazily, ending with one ``EOF`` token.

    ``filename`` is used in positions only. With ``value_only=name`` the text is a
    single value (as an environment variable's value is, nats-server conf/parse.go
    ``lookupVariable``) and ``name`` is what messages call it.

    Raises ConfigError at the first lexical error (when the iterator reaches it).
    """
    return _Lexer(text, filename).tokens(value_only)
