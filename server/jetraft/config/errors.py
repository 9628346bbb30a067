"""Positions and the one exception type of :mod:`jetraft.config`.

Every error the configuration layer raises is a :class:`ConfigError` naming a
file, a line and a column, printed the way nats-server prints configuration
errors (``server/errors.go`` ``configErr``): ``"<file>:<line>:<column>: <message>"``.

Lines and columns are 1-based; a column counts characters (code points) from the
start of the line. nats-server counts columns from 0 and in bytes; jetraft uses
the convention editors and compilers use, so that ``file:line:col`` can be
followed by an editor.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMMAND_LINE", "ConfigError", "Position"]


@dataclass(frozen=True, slots=True)
class Position:
    """Where something was written: ``file`` (path as given, or a pseudo-name such as
    ``"<string>"``), 1-based ``line`` and ``column``; ``line == 0`` means "no line"
    (for instance :data:`COMMAND_LINE`)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


#: The position reported for a value that did not come from a file (a command-line
#: override, a default), as nats-server's flags do not have one either.
COMMAND_LINE = Position("<command line>", 0, 0)


class ConfigError(Exception):
    """A configuration that cannot be used: bad syntax, a wrong type, a contradiction.

    Attributes: ``message`` (what is wrong, without the location), ``file``, ``line``,
    ``column`` (see :class:`Position`). ``str(err)`` is ``f"{file}:{line}:{column}:
    {message}"``, the format of nats-server's ``configErr``.
    """

    def __init__(self, message: str, file: str = "<string>", line: int = 0, column: int = 0) -> None:
        super().__init__(message, file, line, column)
        self.message = message
        self.file = file
        self.line = line
        self.column = column

    @classmethod
    def at(cls, position: Position, message: str) -> ConfigError:
        """Build the error for ``message`` at ``position``."""
        return cls(message, position.file, position.line, position.column)

    @property
    def position(self) -> Position:
        """The location as a :class:`Position`."""
        return Position(self.file, self.line, self.column)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.message}"
