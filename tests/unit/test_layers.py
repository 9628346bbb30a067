"""The layers of server/jetraft are a test: import-linter's contracts in pyproject.toml.

What the contracts ([tool.importlinter] in pyproject.toml) cover:

- ``layers``: cli > server > net > auth | jetstream | validation > config | protocol | raft |
  events > gofmt | storage. A module imports only from the layers below it (directly or through a chain);
  modules of one layer joined by ``|`` import nothing of each other, so config/, protocol/,
  raft/ and events.py import nothing of ours outside themselves, and auth, jetstream/ and
  validation/ import only those four. ``exhaustive``: a new top-level module must be placed.
  net/ sees the server through the typing Protocols of net/ports.py, never jetraft.server.
- ``io``: only net/, server.py and cli/ import trio, socket or hypercorn (directly or
  through a chain of our modules).
- ``publish-path``: the client connection, the router and the routes import nothing of the
  monitoring (net/monitoring/monitor.py, net/monitoring/sysreq.py, net/monitoring/metrics.py), directly or through a chain:
  the router is handed the ``$SYS.REQ`` requests (ports.SystemRequests) as it is handed
  JetStream (ports.JetStreamHandler).
- ``acyclic``: no import cycle between the sibling modules of any package of jetraft
  (import-linter's ``acyclic_siblings``: each package's children, their own children
  folded in, form no cycle). No import is let through.
  Not covered: a cycle between a package's ``__init__`` and its own submodules (say
  jetraft/config/__init__.py importing .model and model.py importing ``jetraft.config``),
  as no two siblings are in it; import-linter 2.17 has no whole-graph acyclic contract.

Imports under ``if TYPE_CHECKING:`` and inside functions count. Run by hand with
``lint-imports`` from the project root.

Also here, in server/jetraft, tests/ (the tests, their helpers, the fuzz targets and the bench
scripts), lab/ and tools/: no attribute starting with ``_`` is read outside its own class (ruff's
SLF001), and no name is used that is defined nowhere (F821: in a drill that runs only on the lab,
such a slip fails only there); configured in pyproject.toml, ``ruff check server/jetraft tests lab
tools`` by hand. A module that needs another's state uses a public name or method; a test asserts
through public behaviour or a documented read-only accessor, and a test helper's names used
elsewhere are public.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(cwd: Path, source_root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on cwd's pyproject.toml, with jetraft imported from source_root."""
    env = {**os.environ, "PYTHONPATH": str(source_root), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", LINT, "--config", "pyproject.toml", "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )


def test_the_layers_hold():
    result = lint_imports(ROOT, ROOT / "server")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 5 kept, 0 broken." in result.stdout, result.stdout


#: What the lint rules cover: the server, tests/ whole (tests, helpers, fuzz targets, benches),
#: the lab and the build tools.
RUFF_PATHS = ("server/jetraft", "tests", "lab", "tools")


def ruff(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``ruff check server/jetraft tests lab tools`` with cwd's pyproject.toml."""
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
         *RUFF_PATHS],
        cwd=cwd, env={**os.environ, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=60,
    )


def test_no_private_attribute_is_read_outside_its_class():
    result = ruff(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def python_only(directory: str, names: list[str]) -> list[str]:
    """A copytree ``ignore``: everything but directories and Python files (tests/fuzz's
    corpora are most of tests/ and nothing ruff reads)."""
    return [n for n in names if n == "__pycache__"
            or not (n.endswith(".py") or os.path.isdir(os.path.join(directory, n)))]


# Planted in a copy of the tree, each named by its rule: a private attribute read from outside
# its class (SLF001) in a module of the server, in a test and in a fuzz target (outside pytest's
# test paths); a name defined nowhere (F821, which otherwise fails only when the line runs) in
# the lab's drills and in a build tool.
PLANTS = {
    "server module": ("server/jetraft/net/monitoring/monitor.py",
                      "\n\ndef _peek(service):\n    return service._queue\n", "SLF001"),
    "test": ("tests/unit/test_auth.py",
             "\n\ndef test_peek():\n    assert perms_for('{}')._replies == {}\n", "SLF001"),
    "fuzz target": ("tests/fuzz/catchup_frames.py",
                    "\n\ndef _peek():\n    return server().catchup._inbox\n", "SLF001"),
    "lab drill": ("lab/day_two.py", "\n\ndef _spares():\n    return topologie.SPARE_HOSTS\n", "F821"),
    "build tool": ("tools/deb.py", "\n\ndef _name():\n    return debian_versoin('1')\n", "F821"),
}


@pytest.mark.parametrize("case", list(PLANTS))
def test_a_planted_lint_violation_fails_the_suite(tmp_path, case):
    shutil.copytree(ROOT / "server" / "jetraft", tmp_path / "server" / "jetraft",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for tree in ("tests", "lab", "tools"):
        shutil.copytree(ROOT / tree, tmp_path / tree, ignore=python_only)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert ruff(tmp_path).returncode == 0, "the copy is clean before the plant"
    path, code, rule = PLANTS[case]
    target = tmp_path / path
    target.write_text(target.read_text() + code)

    result = ruff(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{path}:" in result.stdout and rule in result.stdout, result.stdout


# One import that breaks one contract, and what lint-imports says about it.
BREAKS = {
    "protocol imports raft": (
        "protocol/subjects.py", "from jetraft.raft import types as _types\n",
        "jetraft.protocol is not allowed to import jetraft.raft"),
    "events imports jetstream": (
        "events.py", "from jetraft.jetstream import gojson as _gojson\n",
        "jetraft.events is not allowed to import jetraft.jetstream"),
    "jetstream imports auth": (
        "jetstream/gojson.py", "from jetraft import auth as _auth\n",
        "jetraft.jetstream is not allowed to import jetraft.auth"),
    "jetstream imports net": (
        "jetstream/gojson.py", "import jetraft.net.transport.tls\n",
        "jetraft.jetstream is not allowed to import jetraft.net"),
    "the storage layer imports raft": (
        "storage/group_commit.py", "from jetraft.raft import types as _types\n",
        "jetraft.storage is not allowed to import jetraft.raft"),
    "raft does I/O with trio": (
        "raft/types.py", "import trio\n",
        "jetraft.raft.types -> trio"),
    "auth opens sockets": (
        "auth.py", "import socket\n",
        "jetraft.auth -> socket"),
    "validation serves HTTP": (
        "validation/report.py", "import hypercorn\n",
        "jetraft.validation.report -> hypercorn"),
    "config modules import each other in a cycle": (
        "config/durations.py", "from jetraft.config import model as _model\n",
        "No cycles are allowed in jetraft.config"),
    "the router imports the monitoring": (
        "net/transport/router.py", "from jetraft.net.monitoring import sysreq as _sysreq\n",
        "jetraft.net.transport.router -> jetraft.net.monitoring.sysreq"),
    "a route imports the JetStream glue": (
        "net/transport/route_interest.py", "from jetraft.net.jetstream import service as _js\n",
        "jetraft.net.transport is not allowed to import jetraft.net.jetstream"),
    "the JetStream glue imports the monitoring": (
        "net/jetstream/service.py", "from jetraft.net.monitoring import metrics as _metrics\n",
        "jetraft.net.jetstream is not allowed to import jetraft.net.monitoring"),
    "the RAFT runtime imports the transport": (
        "net/raft/host.py", "from jetraft.net.transport import route as _route\n",
        "jetraft.net.raft is not allowed to import jetraft.net.transport"),
    "a new top-level module outside every layer": (
        "extra.py", "",
        "jetraft.extra"),
}


@pytest.mark.parametrize("case", list(BREAKS))
def test_a_broken_contract_fails_with_its_report(tmp_path, case):
    path, line, report = BREAKS[case]
    shutil.copytree(ROOT / "server" / "jetraft", tmp_path / "server" / "jetraft",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "server" / "jetraft" / path
    target.write_text((target.read_text() if target.exists() else "") + line)

    result = lint_imports(tmp_path, tmp_path / "server")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout and report in result.stdout, result.stdout
