"""What every fuzz target in tests/fuzz shares: the input framing and the known crash classes.

A target is a script ``tests/fuzz/<target>.py`` with a ``TestOneInput(data: bytes)``; run as
``python tests/fuzz/<target>.py [libFuzzer flags] [corpus dirs]`` it fuzzes with atheris
(libFuzzer), imported (by the test suite) it only defines ``TestOneInput``. A
``TestOneInput`` returns normally for an input it accepts or refuses the documented way and
raises for anything else (an exception the API does not document, a broken invariant): an
exception is a crash to libFuzzer.

Imports nothing from jetraft, so that importing it never loads the code under test before
``atheris.instrument_imports()`` does.
"""

from __future__ import annotations

import os
import shlex
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CORPUS",
    "CRASHES",
    "KNOWN_CRASHES",
    "KnownCrash",
    "chunks",
    "known_crash",
    "main",
    "tolerate_known",
]

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
CRASHES = HERE / "crashes"

#: Set to 1 to let a target return normally on a known crash class (see KNOWN_CRASHES), so
#: that a long run keeps exploring past a crash that is already reported; the run driver
#: (tests/fuzz/run.py) sets it unless FUZZ_STRICT=1.
IGNORE_KNOWN_ENV = "JETRAFT_FUZZ_IGNORE_KNOWN"


def chunks(data: bytes, max_cuts: int = 7) -> tuple[int, list[bytes]]:
    """Split a target's input into a flags byte and the chunks to feed, at fuzzer-chosen points.

    Layout: ``flags`` (1 byte; its low 3 bits are the number of cuts ``k``, the other 5 bits
    are the target's own options), then ``k`` bytes each giving the length (0..255) of one
    chunk, then the stream itself; the stream after the last cut is the last chunk. An empty
    input gives ``(0, [])``. Joined, the chunks are the stream: ``b"".join(chunks)``.
    """
    if not data:
        return 0, []
    flags = data[0]
    k = min(flags & 7, max_cuts)
    sizes = data[1:1 + k]
    stream = data[1 + len(sizes):]
    out = []
    pos = 0
    for size in sizes:
        out.append(stream[pos:pos + size])
        pos += size
    out.append(stream[pos:])
    return flags >> 3, out


def frame(stream: bytes, cuts: tuple[int, ...] = (), flags: int = 0) -> bytes:
    """The input that :func:`chunks` reads back as ``stream`` cut into pieces of the
    sizes ``cuts`` (each 0..255, at most 7), with ``flags`` (0..31) as the target's options."""
    assert len(cuts) <= 7 and all(0 <= c <= 255 for c in cuts) and 0 <= flags < 32
    return bytes([flags << 3 | len(cuts), *cuts]) + stream


@dataclass(frozen=True)
class KnownCrash:
    """A crash class already reported and being fixed in the server code.

    ``name`` is short and stable (used in test ids), ``symptom`` says what a user would see,
    ``matches(exc, frames)`` recognises it from the exception and the names of the functions
    on its traceback (innermost last).
    """

    name: str
    symptom: str
    matches: Callable[[BaseException, list[str]], bool]


def _frames(exc: BaseException) -> list[str]:
    return [f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_tb(exc.__traceback__)]


#: Crash classes reported and being fixed. A crash that matches one is still a crash (the
#: suite marks it xfail naming the symptom); nothing else is tolerated. When a class is
#: fixed its entry goes, and its reproducers under tests/fuzz/crashes/ become regression
#: tests (fixed so far: raft-batch-unhashable-type, config-include-nul,
#: client-late-payload-end, json-nesting, direct-get-huge-number, json-invalid-utf8-in-string,
#: json-invalid-utf8, subject-invalid-utf8).
KNOWN_CRASHES: tuple[KnownCrash, ...] = ()


def known_crash(exc: BaseException) -> KnownCrash | None:
    """The known crash class ``exc`` belongs to, or None."""
    frames = _frames(exc)
    for known in KNOWN_CRASHES:
        if known.matches(exc, frames):
            return known
    return None


_seen: set[str] = set()


def tolerate_known(test_one_input: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """``test_one_input``, returning normally on a known crash class when
    ``JETRAFT_FUZZ_IGNORE_KNOWN=1`` (each class is reported once on stderr); any other
    exception propagates. Without the variable it is ``test_one_input`` unchanged."""
    if os.environ.get(IGNORE_KNOWN_ENV) != "1":
        return test_one_input

    def wrapper(data: bytes) -> None:
        try:
            test_one_input(data)
        except Exception as exc:
            known = known_crash(exc)
            if known is None:
                raise
            if known.name not in _seen:
                _seen.add(known.name)
                print(f"FUZZ: known crash {known.name} hit (ignored): {exc!r:.200}",
                      file=sys.stderr, flush=True)

    return wrapper


def main(test_one_input: Callable[[bytes], None]) -> None:
    """Fuzz ``test_one_input`` with atheris/libFuzzer, flags and corpus dirs from ``sys.argv``.

    libFuzzer runs its child processes (``-merge=1``, ``-fork``) through the shell as
    ``argv[0]``: that is made this interpreter and the script, so the script needs neither
    the executable bit nor a shebang.
    """
    import atheris

    argv = [f"{shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(sys.argv[0]))}", *sys.argv[1:]]
    atheris.Setup(argv, tolerate_known(test_one_input))
    atheris.Fuzz()
