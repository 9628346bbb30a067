"""The fuzz targets of tests/fuzz, in the suite: a short, seeded, bounded pass.

For every target: its ``TestOneInput`` over each input of its checked-in corpus
(tests/fuzz/corpus/<target>), in this process; then a seeded libFuzzer run of a fixed number
of inputs (``-runs``, ``-seed``; bounded by ``-max_total_time``) in a subprocess, which reads
the corpus and writes nothing into it. Any crash fails the test, except one of the known,
reported crash classes (tests/fuzz/fuzz_support.py KNOWN_CRASHES): the seeded run goes on
past those and then ends as an xfail naming the symptom. Each crash reproducer under
tests/fuzz/crashes/<target>/ is replayed too: an xfail while its crash class is being
fixed, a plain regression test once its name no longer names a known class.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from jetraft.config import parser as config_parser

# tests/fuzz (pyproject.toml's pythonpath)
from fuzz_support import CORPUS, CRASHES, IGNORE_KNOWN_ENV, KNOWN_CRASHES, RSS_LIMIT_MB, chunks, frame, known_crash

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"


def _load(name: str):
    """tests/fuzz/<name>.py as module ``jetraft_fuzz_<name>`` (its own name could be taken)."""
    module_name = f"jetraft_fuzz_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, FUZZ / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


_run = _load("run")
SCRATCH_ENV, TARGETS, parse_output = _run.SCRATCH_ENV, _run.TARGETS, _run.parse_output

#: Inputs per seeded libFuzzer run: about a second of each target on one idle core.
RUNS = {
    "client_parser": 3_000,
    "route_frames": 30_000,
    "raft_wire": 30_000,
    "js_request": 25_000,
    "js_config": 12_000,
    "js_pull_request": 60_000,
    "js_direct_get": 25_000,
    "js_api": 400,
    "nats_config": 3_000,
    "restore_data": 1_200,
    "stream_snapshot": 800,
    "catchup_frames": 600,
}
SEED = 20_240_601
MAX_SECONDS = 15          # the bound of each seeded run (-max_total_time)
_BY_NAME = {k.name: k for k in KNOWN_CRASHES}


def _scratch_dir() -> str:
    """A directory for the JetStream targets' stores, on /dev/shm when there is one (their
    file stores fsync)."""
    shm = "/dev/shm"
    parent = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="jetraft-fuzz-test-", dir=parent)


@pytest.fixture(scope="module", autouse=True)
def scratch():
    """JetStream targets keep their stores in a directory of this test run; the
    configuration target's file sandbox (it replaces the parser's file reader) ends with
    this module, so tests that run later read files as usual."""
    previous = os.environ.get(SCRATCH_ENV)
    directory = _scratch_dir()
    os.environ[SCRATCH_ENV] = directory
    read_config_file = config_parser.read_config_file
    yield directory
    config_parser.read_config_file = read_config_file
    config_target = sys.modules.get("jetraft_fuzz_nats_config")
    if config_target is not None:
        config_target.sandbox = None
    shutil.rmtree(directory, ignore_errors=True)
    if previous is None:
        os.environ.pop(SCRATCH_ENV, None)
    else:
        os.environ[SCRATCH_ENV] = previous


def _target(name: str):
    return _load(name)


def _run_input(test_one_input, data: bytes, what: str) -> None:
    """Run one input; a known crash class is an xfail naming its symptom."""
    try:
        test_one_input(data)
    except Exception as exc:
        known = known_crash(exc)
        if known is not None:
            pytest.xfail(f"known crash {known.name}: {known.symptom} ({what})")
        raise


def test_every_target_has_a_corpus_and_a_test_one_input():
    assert sorted(p.stem for p in FUZZ.glob("*.py") if "\ndef TestOneInput(" in p.read_text()) == sorted(TARGETS)
    for name in TARGETS:
        assert callable(_target(name).TestOneInput)
        assert any((CORPUS / name).iterdir()), f"no corpus for {name}"
    size = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert size < 2_000_000, f"the checked-in corpus holds {size} bytes"


@pytest.mark.parametrize("name", TARGETS)
def test_corpus_replays_without_a_crash(name):
    test_one_input = _target(name).TestOneInput
    files = sorted(p for p in (CORPUS / name).iterdir() if p.is_file())
    for path in files:
        try:
            test_one_input(path.read_bytes())
        except Exception as exc:
            known = known_crash(exc)
            raise AssertionError(
                f"{path.relative_to(FUZZ.parent.parent)} crashes {name}"
                + (f" (known crash {known.name}: a crashing input must not be in the corpus)" if known else "")
            ) from exc


def _crash_files() -> list:
    params = []
    for path in sorted(CRASHES.glob("*/*")):
        if path.name.startswith(".") or path.suffix == ".md":
            continue
        target, klass = path.parent.name, path.name.split("--")[0]
        known = _BY_NAME.get(klass)
        marks = [pytest.mark.xfail(reason=f"known crash {known.name}: {known.symptom}", strict=False)] if known else []
        params.append(pytest.param(target, path, id=f"{target}/{path.name}", marks=marks))
    return params


@pytest.mark.parametrize(("name", "path"), _crash_files())
def test_crash_reproducer(name, path):
    """A reproducer named ``<known crash>--<what>`` still crashes with that class (xfail);
    once fixed, its input is an ordinary regression test."""
    test_one_input = _target(name).TestOneInput
    expected = _BY_NAME.get(path.name.split("--")[0])
    try:
        test_one_input(path.read_bytes())
    except Exception as exc:
        known = known_crash(exc)
        if expected is not None and known is not None and known.name != expected.name:
            pytest.fail(f"{path.name} now crashes as {known.name}, not as {expected.name}")
        raise


@pytest.mark.parametrize("name", TARGETS)
def test_seeded_fuzz_run(name, tmp_path, scratch):
    """``RUNS[name]`` inputs from libFuzzer with a fixed seed, starting from the corpus.

    The run goes on past the known crash classes (each reported once by the target); any
    other crash fails the test. A run that hit a known class ends as an xfail naming it.
    """
    new_inputs = tmp_path / "new"
    new_inputs.mkdir()
    env = _run.target_env(name, dict(os.environ, PYTHONHASHSEED="0"))
    env[IGNORE_KNOWN_ENV] = "1"
    env[SCRATCH_ENV] = scratch
    cmd = [sys.executable, str(FUZZ / f"{name}.py"), f"-runs={RUNS[name]}", f"-seed={SEED}",
           f"-max_total_time={MAX_SECONDS}", "-timeout=10", "-print_final_stats=1",
           f"-rss_limit_mb={_run.rss_limit_mb(name)}",
           f"-artifact_prefix={tmp_path}/", str(new_inputs), str(CORPUS / name)]
    proc = _run.run_target(cmd, env, timeout=MAX_SECONDS + 60)
    result = parse_output(name, proc.stderr + proc.stdout, proc.returncode)
    if result.crashed:
        if result.artifact:
            data = Path(result.artifact).read_bytes()
            _run_input(_target(name).TestOneInput, data, f"seeded run input {base64.b64encode(data)[:200]!r}")
        pytest.fail(f"libFuzzer exited with {proc.returncode}:\n{proc.stderr[-6000:]}")
    assert result.execs > 0 and result.cov > 0, proc.stderr[-3000:]
    if result.known:
        pytest.xfail("; ".join(f"known crash {k}: {_BY_NAME[k].symptom}" for k in result.known)
                     + f" (hit and tolerated in {result.execs} runs; no other crash)")


def test_a_target_starts_without_its_parents_peak_memory():
    """A target's libFuzzer measures its own peak RSS, not the peak of the process that
    started it (a pytest worker late in a run is far above RSS_LIMIT_MB)."""
    held = bytearray(4 * RSS_LIMIT_MB * 1024 * 1024)
    held[::4096] = b"\x01" * len(held[::4096])  # resident, not only reserved
    probe = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    proc = _run.run_target([sys.executable, "-c", probe], dict(os.environ), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) < RSS_LIMIT_MB, (proc.stdout, len(held))


def test_restore_data_decode_bomb_on_the_wire():
    """The brief's decode bomb as a client sends it, too big to check in: snapshot data whose
    header holds 12 million empty msgpack arrays in an unknown key, a few hundred KB once
    Snappy-framed (restore_data's ``wire`` mode, in one chunk)."""
    import make_seeds

    payload = make_seeds.restore_bomb_payloads()["header-unknown-key-12M-empty-arrays"]
    wire = make_seeds.restore_wire(payload)
    assert len(wire) < 1 << 20            # one chunk of at most max_payload
    _run_input(_target("restore_data").TestOneInput, frame(wire), "12M empty arrays on the wire")


def test_chunks_reads_back_what_frame_wrote():
    stream = b"PUB a 5\r\nhello\r\n"
    assert chunks(frame(stream)) == (0, [stream])
    assert chunks(frame(stream, (3, 0, 4), flags=5)) == (5, [b"PUB", b"", b" a 5", b"\r\nhello\r\n"])
    assert chunks(b"") == (0, [])
    assert chunks(bytes([2, 200, 5]) + b"abc") == (0, [b"abc", b"", b""])   # cuts past the end
    assert chunks(bytes([7, 1])) == (0, [b"", b""])                          # sizes past the end


def test_report_reads_libfuzzers_final_stats():
    out = ("#2\tINITED cov: 8 ft: 8 corp: 1/1b exec/s: 0 rss: 46Mb\n"
           "FUZZ: known crash json-invalid-utf8 hit (ignored): UnicodeEncodeError()\n"
           "#1944352\tDONE   cov: 87 ft: 225 corp: 72/1115b lim: 4096 exec/s: 92588 rss: 46Mb\n"
           "stat::number_of_executed_units: 1944352\nstat::average_exec_per_sec:     92588\n"
           "stat::new_units_added:          165\n")
    r = parse_output("route_frames", out, 0)
    assert (r.execs, r.exec_per_sec, r.cov, r.ft, r.corpus, r.new_units) == (1944352, 92588, 87, 225, 72, 165)
    assert not r.crashed and r.known == ["json-invalid-utf8"]
    crash = parse_output("raft_wire", "#5\tNEW cov: 3 ft: 3 corp: 2/2b\n"
                         "artifact_prefix='/b/'; Test unit written to /b/crash-81272c\n", 77)
    assert crash.crashed and crash.artifact == "/b/crash-81272c" and crash.verdict == "CRASH /b/crash-81272c"
