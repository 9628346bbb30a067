"""`make wheelhouse` (tools/wheelhouse.py): one wheelhouse from which every supported host's
Python (Debian 12: CPython 3.11, Debian 13: CPython 3.13) installs jetraft with no package
index; a second run changes nothing; an incomplete wheelhouse is named, with what to run.

The wheels come from the package index through pip (and its cache), as `make wheelhouse`
gets them."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import platform
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename

from lab import topology

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "wheelhouse.py"
TARGETS = {"3.11": "cp311", "3.13": "cp313"}


def wheelhouse(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)


def offline_install(wheels: Path, version: str) -> subprocess.CompletedProcess:
    """What a host of ``version`` installs from ``wheels`` alone (pip's own resolution, as
    the role runs it: --no-index --find-links), as a dry run with pip's JSON report."""
    env = {"PIP_CONFIG_FILE": "/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PATH": "/usr/bin:/bin"}
    platforms = [a for m in range(36, 16, -1) for a in ("--platform", f"manylinux_2_{m}_x86_64")]
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
         "--find-links", str(wheels), "--only-binary=:all:", "--python-version", version,
         "--implementation", "cp", "--abi", TARGETS[version], *platforms,
         "--quiet", "--report", "-", "jetraft"],
        capture_output=True, text=True, timeout=300, env=env)


def digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`make wheelhouse`'s command into a fresh directory: (directory, its output)."""
    out = tmp_path_factory.mktemp("wheels") / "wheelhouse"
    result = wheelhouse("--wheelhouse", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result.stdout


@pytest.mark.skipif(platform.machine() != "x86_64",
                    reason="the offline resolution below names x86_64 platforms")
@pytest.mark.parametrize("version", sorted(TARGETS))
def test_every_host_python_installs_jetraft_from_the_wheelhouse_alone(built, version):
    wheels, _ = built
    result = offline_install(wheels, version)
    assert result.returncode == 0, result.stderr[-3000:]
    installs = {item["metadata"]["name"].lower(): Path(item["download_info"]["url"]).name
                for item in json.loads(result.stdout)["install"]}
    assert {"jetraft", "trio", "msgpack", "bcrypt", "cryptography", "hypercorn"} <= set(installs)
    # the compiled dependencies are this Python's (or the stable ABI), never another's
    for name in ("msgpack", "cffi", "bcrypt", "cryptography"):
        _, _, _, tags = parse_wheel_filename(installs[name])
        assert {t.abi for t in tags} & {TARGETS[version], "abi3"}, installs[name]
        assert all(t.platform.startswith("manylinux") and t.platform.endswith("x86_64")
                   for t in tags), installs[name]


def test_the_jetraft_wheel_is_pure_python_and_admits_both_host_pythons(built):
    wheels, output = built
    (jetraft,) = wheels.glob("jetraft-*.whl")
    assert jetraft.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(jetraft) as z:
        metadata = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    requires = next(line.split(":", 1)[1].strip() for line in metadata.splitlines()
                    if line.startswith("Requires-Python:"))
    assert all(v in SpecifierSet(requires) for v in ("3.11", "3.13"))
    assert "for CPython 3.11, CPython 3.13" in output


def test_a_second_run_fetches_nothing_and_changes_no_file(built):
    wheels, _ = built
    before = digests(wheels)
    again = wheelhouse("--wheelhouse", str(wheels))
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("0 wheel(s) fetched") == len(TARGETS), again.stdout
    assert "removing 0 wheel(s)" in again.stdout
    assert digests(wheels) == before


def test_a_wheel_no_host_uses_any_more_is_removed(built):
    wheels, _ = built
    (sniffio,) = wheels.glob("sniffio-*.whl")
    old = wheels / "sniffio-1.0.0-py3-none-any.whl"
    old.write_bytes(sniffio.read_bytes())
    result = wheelhouse("--wheelhouse", str(wheels))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "removing 1 wheel(s) no target uses\n  sniffio-1.0.0-py3-none-any.whl" in result.stdout
    assert not old.exists() and sniffio.exists()


def test_check_names_the_host_python_a_wheelhouse_lacks(built, tmp_path):
    """A wheelhouse of the controller's Python only (what `make wheelhouse` used to make)
    cannot serve a Debian 13 host: --check says so and what to run."""
    wheels, _ = built
    only_311 = tmp_path / "only-311"
    only_311.mkdir()
    for wheel in wheels.iterdir():
        if "cp313" not in wheel.name:
            (only_311 / wheel.name).write_bytes(wheel.read_bytes())
    result = wheelhouse("--check", "--wheelhouse", str(only_311))
    assert result.returncode == 1
    assert "for CPython 3.13" in result.stderr and "Debian 13 (trixie)" in result.stderr
    assert "run `make wheelhouse`" in result.stderr
    assert wheelhouse("--check", "--wheelhouse", str(wheels)).returncode == 0


def test_the_supported_systems_their_pythons_and_the_lab_agree():
    """Preflight's supported systems, the wheelhouse's Pythons, the package's
    requires-python and classifiers, and the lab's Debian suites name the same releases."""
    supported = yaml.safe_load((ROOT / "roles/jetraft_preflight/defaults/main.yml").read_text())[
        "jetraft_preflight_supported_os"]
    assert supported == ["Debian 12", "Debian 13"]
    assert [f"Debian {v}" for v in topology.DEBIAN_SUITES.values()] == supported
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pythons = sorted(topology.DEBIAN_PYTHON.values())
    assert pythons == sorted(TARGETS)
    spec = importlib.util.spec_from_file_location("wheelhouse_tool", TOOL)
    tool = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(tool)
    assert sorted(tool.HOST_PYTHONS) == pythons
    assert all(v in SpecifierSet(project["requires-python"]) for v in pythons)
    assert all(f"Programming Language :: Python :: {v}" in project["classifiers"] for v in pythons)
