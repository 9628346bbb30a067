"""What every fuzz target in tests/fuzz shares: the input framing and the known crash classes.

A target is a script ``tests/fuzz/<target>.py`` with a ``TestOneInput(data: bytes)``; run as
``python tests/fuzz/<target>.py [libFuzzer flags] [corpus dirs]`` it fuzzes with atheris
(libFuzzer), imported (by the test suite) it only defines ``TestOneInput``. A
``TestOneInput`` returns normally for an input it accepts or refuses the documented way and
raises for anything else (an exception the API does not document, a broken invariant): an
exception is a crash to libFuzzer.

The targets of the store's doors also hold each input to the resource rules (bounded work
on the event loop, bounded memory): :func:`bounded` makes their ``TestOneInput``, raising
:class:`Stall` or :class:`MemoryExceeded` for an input over them.

Imports nothing from jetraft, so that importing it never loads the code under test before
``atheris.instrument_imports()`` does.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CORPUS",
    "CRASHES",
    "IDLE_SERVER_RSS_MB",
    "KNOWN_CRASHES",
    "MEMORY_ALLOWANCE_MB",
    "RSS_LIMIT_MB",
    "STALL_SECONDS",
    "KnownCrash",
    "MemoryExceeded",
    "Stall",
    "Work",
    "bounded",
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


# --- resource bounds (the store targets) ---------------------------------------------------

#: Resident memory of an idle ``jetraft-server -js -sd <empty directory>``: VmRSS in
#: /proc/<pid>/status once it logged ``server_ready`` (this project's venv, Python 3.11,
#: on the 2-core development machine, 2026-12-05: 55,440 kB, the same 5 s later).
IDLE_SERVER_RSS_MB = 54
#: libFuzzer's ``-rss_limit_mb`` for the targets in run.py's ``RSS_BOUNDED``: twice an
#: idle server (the fuzzing process itself starts at about 65 MB: atheris, libFuzzer).
RSS_LIMIT_MB = 2 * IDLE_SERVER_RSS_MB
#: What one input may add to the process's resident memory at its peak (:func:`bounded`):
#: what takes an idle server to RSS_LIMIT_MB. Under libFuzzer, at most what is left below
#: its ``-rss_limit_mb`` too, so that the target reports the input (and its phase) before
#: libFuzzer's once-a-second check ends the process.
MEMORY_ALLOWANCE_MB = RSS_LIMIT_MB - IDLE_SERVER_RSS_MB
#: Address space one input may add before allocations fail with MemoryError (RLIMIT_AS,
#: for the input only): not the rule, which is MEMORY_ALLOWANCE_MB, but what keeps a decode
#: bomb from taking gigabytes (and seconds) when the test suite replays it.
ADDRESS_SPACE_CAP_MB = 256
#: Wall time one input may take in the code under test (bounded work on the event loop);
#: $JETRAFT_FUZZ_STALL_MS overrides it (a slow or crowded machine).
STALL_SECONDS = float(os.environ.get("JETRAFT_FUZZ_STALL_MS") or 100) / 1000
#: Runs of an input over STALL_SECONDS before it is a stall: the first runs of libFuzzer, a
#: garbage collection, or another process on a busy machine can slow one or two runs.
STALL_RUNS = 3
#: CPU seconds after which an input still running is stopped and reported as a stall
#: (SIGVTALRM; libFuzzer's own -timeout uses SIGALRM and wall time): so that a runaway
#: loop is reported with its phase, and the test suite's replay of a stall ends.
WATCHDOG_SECONDS = 1.0

_rss_limit_mb: int | None = None      # libFuzzer's -rss_limit_mb, set by main()


class Stall(AssertionError):
    """An input kept the code under test busy for more than STALL_SECONDS, STALL_RUNS times
    in a row, or the watchdog stopped it. ``phase``: the phase (see :class:`Work`) that
    took longest, or the one the watchdog stopped."""

    def __init__(self, message: str, phase: str | None) -> None:
        super().__init__(message)
        self.phase = phase


class MemoryExceeded(AssertionError):
    """An input made the process's resident memory grow by more than its allowance at its
    peak, or made an allocation fail (MemoryError). ``phase``: the first phase (see
    :class:`Work`) after which the peak was over the allowance, or the one that failed."""

    def __init__(self, message: str, phase: str | None) -> None:
        super().__init__(message)
        self.phase = phase


def _status_kb(field: bytes) -> int:
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    """Make VmHWM (the peak resident set) the current VmRSS (Linux 4.0+; best effort)."""
    try:
        with open("/proc/self/clear_refs", "wb") as f:
            f.write(b"5")
    except OSError:
        pass


class Work:
    """The calls into the code under test of one input, timed and their memory peak
    checked by phase: ``with work("build"):`` around each (phases are not nested; a phase
    entered again adds up). ``seconds``: phase -> time; ``over``: the first phase after
    which the process's peak resident memory was more than ``allowance_kb`` above where it
    was when the Work was made (None: not over)."""

    def __init__(self, allowance_kb: int | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.over: str | None = None
        self.grown_kb = 0
        self.allowance_kb = allowance_kb
        if allowance_kb is not None:
            _reset_peak()
            self._base_kb = _status_kb(b"VmHWM:")

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self.current = phase
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
            if sys.exc_info()[0] is None:
                self.current = None     # (kept when the phase raised: it names where)
            if self.allowance_kb is not None:
                self.grown_kb = max(self.grown_kb, _status_kb(b"VmHWM:") - self._base_kb)
                if self.over is None and self.grown_kb > self.allowance_kb:
                    self.over = phase

    def total(self) -> float:
        return sum(self.seconds.values())

    def slowest(self) -> str | None:
        return max(self.seconds, key=self.seconds.__getitem__) if self.seconds else None

    def describe(self) -> str:
        return ", ".join(f"{p} {s * 1000:.1f} ms" for p, s in self.seconds.items())


@contextlib.contextmanager
def _address_space_cap() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _status_kb(b"VmSize:") * 1024 + ADDRESS_SPACE_CAP_MB * (1 << 20)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _allowance_kb() -> int:
    allowance = MEMORY_ALLOWANCE_MB
    if _rss_limit_mb:
        allowance = min(allowance, max(8, _rss_limit_mb - _status_kb(b"VmRSS:") // 1024 - 4))
    return allowance * 1024


class _Runaway(BaseException):
    """Raised into the code under test by the watchdog (a BaseException, so that its
    ``except Exception`` safety nets let it through)."""


_armed = False


def _on_watchdog(signum: int, frame: object) -> None:
    if _armed:
        raise _Runaway()


@contextlib.contextmanager
def _watchdog() -> Iterator[None]:
    global _armed
    if signal.getsignal(signal.SIGVTALRM) is not _on_watchdog:
        signal.signal(signal.SIGVTALRM, _on_watchdog)
    _armed = True
    signal.setitimer(signal.ITIMER_VIRTUAL, WATCHDOG_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        _armed = False


def _caught(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` is a ``kind`` or an exception group holding one (trio's nurseries)."""
    if isinstance(exc, kind):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_caught(e, kind) for e in exc.exceptions)
    return False


def _measured(run: Callable[[Any, Work], None], data: Any) -> Work:
    work = Work(_allowance_kb())
    try:
        with _address_space_cap(), _watchdog():
            run(data, work)
    except BaseException as exc:
        if _caught(exc, _Runaway):
            raise Stall(f"stall: still running after {WATCHDOG_SECONDS:.0f} s of CPU, stopped, in "
                        f"{work.current} (budget {STALL_SECONDS * 1000:.0f} ms): {work.describe()}",
                        work.current) from None
        if _caught(exc, MemoryError):
            raise MemoryExceeded(f"memory: an allocation failed in {work.current} (more than "
                                 f"{ADDRESS_SPACE_CAP_MB} MB of address space for one input)",
                                 work.current) from exc
        raise
    if work.over is not None:
        raise MemoryExceeded(f"memory: the process grew by {work.grown_kb // 1024} MB at its peak "
                             f"(allowance {work.allowance_kb // 1024} MB), first over it after "
                             f"{work.over} ({work.describe()})", work.over)
    return work


def bounded(run: Callable[[Any, Work], None], seconds_of: Callable[[Work], float] = Work.total,
            prepare: Callable[[bytes], Any] | None = None) -> Callable[[bytes], None]:
    """A ``TestOneInput`` that runs ``run(prepare(data), work)`` (``prepare``: the target's
    own reading of the input, outside the measures; by default the input as it is) and
    holds it to the resource rules: at most STALL_SECONDS in the code under test
    (``seconds_of(work)``, by default every phase's time summed), else it runs the input
    again after a garbage collection, and raises :class:`Stall` when STALL_RUNS runs in a
    row were over (or at once when the watchdog stopped a run after WATCHDOG_SECONDS of
    CPU); and at most the memory allowance (:data:`MEMORY_ALLOWANCE_MB`), else
    :class:`MemoryExceeded` (no second run). Phases are what ``run`` times with ``work``;
    the target's own checks are not counted in the time, but what they hold counts in the
    memory."""

    def test_one_input(data: bytes) -> None:
        prepared = data if prepare is None else prepare(data)
        for _ in range(STALL_RUNS):
            work = _measured(run, prepared)
            spent = seconds_of(work)
            if spent <= STALL_SECONDS:
                return
            gc.collect()
        raise Stall(f"stall: {spent * 1000:.0f} ms in the code under test, {STALL_RUNS} runs in a row "
                    f"over the budget of {STALL_SECONDS * 1000:.0f} ms: {work.describe()}", work.slowest())

    return test_one_input


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
#: json-invalid-utf8, subject-invalid-utf8, restore-message-unchecked, restore-seq-overflow,
#: restore-gap-stall, restore-decode-bomb, snapshot-decode-bomb, catchup-decode-bomb,
#: snapshot-config-unchecked, catchup-answer-unchecked).
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

    global _rss_limit_mb
    for arg in sys.argv[1:]:
        if arg.startswith("-rss_limit_mb="):
            _rss_limit_mb = int(arg.partition("=")[2]) or None
    argv = [f"{shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(sys.argv[0]))}", *sys.argv[1:]]
    atheris.Setup(argv, tolerate_known(test_one_input))
    atheris.Fuzz()
