"""Parser for the NATS configuration format: tokens to a tree of positioned values.

Semantics follow nats-server ``conf/parse.go``:

* A document is a map. A key defined twice keeps its last value (and the position
  of that definition).
* Integers are 64-bit; a size suffix multiplies them: ``k``=10^3, ``kb``/``ki``/
  ``kib``=2^10, ``m``=10^6, ``mb``/``mi``/``mib``=2^20, and so on through ``g``,
  ``t``, ``p``, ``e`` (case-insensitive). ``2m`` is therefore the integer
  2000000, not two minutes. Floats are 64-bit; datetimes are UTC ``datetime``.
* ``$NAME`` (bare, never inside quotes) is looked up among the keys already
  defined in the enclosing maps, innermost first, then in the environment. An
  environment value is parsed as a configuration value (so ``"8222"`` becomes an
  integer), and a chain of environment variables that refers back to itself is an
  error. Bare ``$2a$11$...`` (a bcrypt hash) is a literal string, not a reference.
* ``include path`` parses another file, relative to the directory of the file that
  includes it, on its own (variables of the including file are not visible in
  it), and merges its keys at that point. Errors in it name the included file.

Deliberate differences from parse.go: an unknown size suffix (``1kbb``) and a
multiplied integer that overflows 64 bits are errors (parse.go drops or wraps
them); an absolute include path is used as is; include cycles are detected; a
UTF-8 byte order mark at the start of a file is ignored; every bcrypt prefix
``$2a$``, ``$2b$``, ``$2x$``, ``$2y$`` passes through (parse.go: ``$2a$`` only).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, Position
from .lexer import MAX_DEPTH, Token, TokenKind, tokenize

__all__ = [
    "MAX_INCLUDE_DEPTH",
    "Entry",
    "Value",
    "load_tree",
    "parse_text",
    "parse_tree",
    "read_config_file",
]

#: How deeply files may include one another.
MAX_INCLUDE_DEPTH = 32

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MULTIPLIERS = {"": 1}
for _i, _letter in enumerate("kmgtpe", start=1):
    _MULTIPLIERS[_letter] = 1000**_i
    for _tail in ("b", "i", "ib"):
        _MULTIPLIERS[_letter + _tail] = 1024**_i
_INTEGER = re.compile(r"(-?[0-9]+)(.*)", re.DOTALL)
_BCRYPT_REFERENCE = re.compile(r"2[abxy]\$")


@dataclass(slots=True, eq=False)
class Value:
    """A parsed value and where it was written.

    ``data`` is ``str``, ``int``, ``float``, ``bool``, ``datetime.datetime`` (UTC),
    ``list[Value]`` (an array) or ``dict[str, Entry]`` (a map, in definition order).
    ``raw`` is the source text of a number or boolean (``"2m"``, ``"On"``), so that
    callers can explain what a suffix did. ``used`` is set when a ``$variable`` referred to this value
    (nats-server does not report such keys as unknown). ``depth`` is the nesting
    depth (0 for a scalar).
    """

    data: Any
    position: Position
    raw: str | None = None
    used: bool = False
    depth: int = 0

    @property
    def kind(self) -> str:
        """``"string"``, ``"integer"``, ``"float"``, ``"boolean"``, ``"datetime"``,
        ``"array"`` or ``"map"``."""
        return _kind(self.data)

    def plain(self) -> Any:
        """The value with positions stripped: maps become ``dict``, arrays ``list``."""
        if isinstance(self.data, dict):
            return {key: entry.value.plain() for key, entry in self.data.items()}
        if isinstance(self.data, list):
            return [item.plain() for item in self.data]
        return self.data


@dataclass(slots=True, eq=False)
class Entry:
    """A map entry: the key as written, where the key starts, and its value."""

    key: str
    key_position: Position
    value: Value = field(repr=False)


def _kind(data: Any) -> str:
    if isinstance(data, bool):
        return "boolean"
    for cls, name in ((str, "string"), (int, "integer"), (float, "float"), (list, "array"), (dict, "map")):
        if isinstance(data, cls):
            return name
    return "datetime"


def read_config_file(path: str) -> str:
    """Read a configuration file as text (UTF-8, invalid bytes replaced, BOM dropped).

    Raises OSError as ``open`` does.
    """
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    return text[1:] if text.startswith("\ufeff") else text


class _VariableCycle(ConfigError):
    """A chain of environment variables that refers back to itself."""


class _Context:
    __slots__ = ("key", "key_position", "value")

    def __init__(self, value: Value) -> None:
        self.value = value
        self.key: str | None = None
        self.key_position: Position | None = None


class _Parser:
    def __init__(
        self,
        text: str,
        filename: str,
        env: Mapping[str, str],
        includes: tuple[str, ...] = (),
        env_chain: tuple[str, ...] = (),
    ) -> None:
        self.text = text
        self.filename = filename
        self.env = env
        self.includes = includes  # real paths of the files being parsed, outermost first
        self.env_chain = env_chain  # environment variables being expanded, outermost first

    def parse(self, value_only: str | None = None) -> Value:
        root = Value({}, Position(self.filename, 1, 1))
        stack = [_Context(root)]
        if value_only is not None:
            stack[0].key = value_only
            stack[0].key_position = root.position
        for token in tokenize(self.text, self.filename, value_only=value_only):
            ctx = stack[-1]
            kind = token.kind
            if kind is TokenKind.EOF:
                break
            if value_only is not None and len(stack) == 1 and kind in (TokenKind.KEY, TokenKind.INCLUDE):
                raise ConfigError.at(token.position, f"{value_only!r} must hold a single value")
            if kind is TokenKind.KEY:
                ctx.key, ctx.key_position = token.text, token.position
            elif kind is TokenKind.MAP_START:
                stack.append(_Context(Value({}, token.position)))
            elif kind is TokenKind.ARRAY_START:
                stack.append(_Context(Value([], token.position)))
            elif kind in (TokenKind.MAP_END, TokenKind.ARRAY_END):
                done = stack.pop().value
                self._store(stack[-1], done)
            elif kind is TokenKind.VARIABLE:
                self._store(ctx, self._variable(token, stack))
            elif kind is TokenKind.INCLUDE:
                for entry in self._include(token).data.values():
                    ctx.value.data.pop(entry.key, None)
                    ctx.value.data[entry.key] = entry
            else:
                self._store(ctx, self._scalar(token))
        if value_only is not None:
            return root.data[value_only].value
        return root

    def _store(self, ctx: _Context, value: Value) -> None:
        if value.depth >= MAX_DEPTH:
            raise ConfigError.at(value.position, f"nesting deeper than {MAX_DEPTH} levels")
        container = ctx.value
        container.depth = max(container.depth, value.depth + 1)
        if isinstance(container.data, list):
            container.data.append(value)
            return
        assert ctx.key is not None and ctx.key_position is not None
        container.data.pop(ctx.key, None)  # a redefined key moves to its last place
        container.data[ctx.key] = Entry(ctx.key, ctx.key_position, value)
        ctx.key = ctx.key_position = None

    # -- scalars -------------------------------------------------------------------

    def _scalar(self, token: Token) -> Value:
        text, pos = token.text, token.position
        if token.kind is TokenKind.STRING:
            return Value(text, pos)
        if token.kind is TokenKind.BOOL:
            return Value(text.lower() in ("true", "yes", "on"), pos, raw=text)
        if token.kind is TokenKind.INTEGER:
            return Value(_integer(text, pos), pos, raw=text)
        if token.kind is TokenKind.FLOAT:
            number = float(text)
            if math.isinf(number):
                raise ConfigError.at(pos, f"float {text!r} is out of range")
            return Value(number, pos, raw=text)
        try:  # the lexer guarantees the shape YYYY-MM-DDTHH:MM:SSZ
            fields = (text[0:4], text[5:7], text[8:10], text[11:13], text[14:16], text[17:19])
            stamp = _dt.datetime(*(int(f) for f in fields), tzinfo=_dt.timezone.utc)
        except ValueError as e:
            raise ConfigError.at(pos, f"invalid datetime {text!r}: {e}") from None
        return Value(stamp, pos, raw=text)

    # -- variables -----------------------------------------------------------------

    def _variable(self, token: Token, stack: list[_Context]) -> Value:
        name, pos = token.text, token.position
        if _BCRYPT_REFERENCE.match(name):
            return Value("$" + name, pos)
        for ctx in reversed(stack):
            if isinstance(ctx.value.data, dict) and name in ctx.value.data:
                found = ctx.value.data[name].value
                found.used = True
                return Value(found.data, pos, raw=found.raw, depth=found.depth)
        if name in self.env:
            return self._from_environment(name, pos)
        raise ConfigError.at(
            pos, f"undefined variable ${name}: no key {name!r} in an enclosing map and no environment variable {name!r}"
        )

    def _from_environment(self, name: str, pos: Position) -> Value:
        if name in self.env_chain:
            chain = " -> ".join("$" + n for n in (*self.env_chain, name))
            raise _VariableCycle.at(pos, f"variable reference cycle: {chain}")
        raw = self.env[name]
        if raw.strip(" \t") == "":
            return Value(raw, pos)
        sub = _Parser(raw, f"<environment variable {name}>", self.env, self.includes, (*self.env_chain, name))
        try:
            value = sub.parse(value_only=name)
        except _VariableCycle as e:
            raise _VariableCycle.at(pos, e.message) from None
        except ConfigError as e:
            raise ConfigError.at(pos, f"environment variable {name!r} (used as ${name}) is not a valid value: {e}") from None
        value.position = pos
        return value

    # -- includes ------------------------------------------------------------------

    def _include(self, token: Token) -> Value:
        path, pos = token.text, token.position
        if "\0" in path:  # no file system takes it (os functions raise ValueError)
            raise ConfigError.at(pos, f"cannot read include file {path!r}: a path cannot contain a NUL byte")
        full = os.path.join(os.path.dirname(self.filename), path)
        real = os.path.realpath(full)
        if real in self.includes:
            raise ConfigError.at(pos, f"include cycle: {path!r} is already being included")
        if len(self.includes) >= MAX_INCLUDE_DEPTH:
            raise ConfigError.at(pos, f"includes nested deeper than {MAX_INCLUDE_DEPTH} files")
        try:
            text = read_config_file(full)
        except OSError as e:
            raise ConfigError.at(pos, f"cannot read include file {path!r} ({full}): {e.strerror or e}") from None
        try:
            return _Parser(text, full, self.env, (*self.includes, real)).parse()
        except ConfigError as e:
            raise ConfigError(f"{e.message} (included from {pos})", e.file, e.line, e.column) from None


def _integer(text: str, pos: Position) -> int:
    """An integer lexeme with its optional size suffix (nats-server conf/parse.go)."""
    match = _INTEGER.fullmatch(text)
    if match is None:  # the lexer only produces digits with an optional '-' and suffix
        raise ConfigError.at(pos, f"expected an integer, found {text!r}")
    number = int(match.group(1))
    suffix = match.group(2).strip().lower()
    if suffix not in _MULTIPLIERS:
        raise ConfigError.at(
            pos, f"invalid size suffix {match.group(2)!r} in {text!r}: use k, kb, ki, kib, m, mb, ..., e, eb, ei, eib"
        )
    if not _INT64_MIN <= number <= _INT64_MAX or not _INT64_MIN <= number * _MULTIPLIERS[suffix] <= _INT64_MAX:
        raise ConfigError.at(pos, f"integer {text!r} is out of range (64-bit signed)")
    return number * _MULTIPLIERS[suffix]


def _environment(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def parse_tree(text: str, filename: str = "<string>", env: Mapping[str, str] | None = None) -> Value:
    """Parse configuration text into a map :class:`Value` that keeps every position.

    ``filename`` names the text in positions and anchors relative include paths (its
    directory; the current directory for pseudo-names such as ``"<string>"``).
    ``env`` replaces ``os.environ`` for ``$VAR`` lookups. Raises ConfigError.
    """
    includes = (os.path.realpath(filename),) if os.path.isfile(filename) else ()
    return _Parser(text, filename, _environment(env), includes).parse()


def load_tree(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Value:
    """Read and parse the configuration file at ``path`` (see :func:`parse_tree`).

    Raises ConfigError, also when the file cannot be read (at line 0, column 0).
    """
    name = os.fspath(path)
    try:
        text = read_config_file(name)
    except OSError as e:
        raise ConfigError(f"cannot read configuration file: {e.strerror or e}", name, 0, 0) from None
    return parse_tree(text, name, env)


def parse_text(text: str, filename: str = "<string>", env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Parse configuration text into plain Python values (``dict``, ``list``, ``str``,
    ``int``, ``float``, ``bool``, ``datetime``), positions stripped.

    Behaviour of nats-server conf/lex.go and conf/parse.go (see the module docs for
    the few deliberate differences). Raises ConfigError, and nothing else, for any
    input.
    """
    return parse_tree(text, filename, env).plain()
