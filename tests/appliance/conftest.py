"""The appliance tests run ansible-playbook (tens of seconds each alone, minutes on a machine
busy with the rest of the suite): each may take 300 s before pytest-timeout stops it, unless
it says otherwise (pyproject.toml's 120 s is for the rest of the suite)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lab import powerloss

APPLIANCE_TIMEOUT_S = 300

#: lab/powerloss.py, the power-loss layer, run as a program as on the lab's hosts.
POWERLOSS = Path(powerloss.__file__)
#: How long the layer may take to mount, stop or die.
POWERLOSS_READY_S = 20
_LOG_TAIL = 6000


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory):
    """`make wheelhouse`'s command (wheels for every supported host's Python), into a
    temporary directory, once per test session (per xdist worker)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    root = Path(__file__).resolve().parents[2]
    build = subprocess.run([sys.executable, str(root / "tools" / "wheelhouse.py"), "--wheelhouse",
                            str(out)], capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return out


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "appliance" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(APPLIANCE_TIMEOUT_S))


class PowerLossLayer:
    """lab/powerloss.py mounted over a store directory of its own, the daemon a child of the
    test (--foreground), its journal and log beside the store. ``cut()`` is a power cut
    (the ``cut`` command: SIGKILL, then umount -l), ``stop()`` a clean stop (SIGTERM);
    ``mount()`` again recovers and mounts."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.store = base / "store"
        self.journal = base / "journal"
        self.pidfile = base / "powerloss.pid"
        self.log = base / "powerloss.log"
        self.store.mkdir()
        self.proc: subprocess.Popen | None = None

    def command(self, *args: str) -> list[str]:
        return [sys.executable, str(POWERLOSS), *args]

    def mount(self, *options: str) -> None:
        """Recover, mount, and return once the layer answers (the pidfile names the daemon
        and the store is a FUSE mount)."""
        assert self.proc is None, "already mounted"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command("mount", str(self.store), "--journal", str(self.journal),
                             "--pidfile", str(self.pidfile), "--foreground", *options),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + POWERLOSS_READY_S
        while not self._ready():
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                pytest.fail(f"powerloss exited with {code} before mounting:\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"powerloss not mounted after {POWERLOSS_READY_S} s:\n{self.output()}")
            time.sleep(0.01)

    def _ready(self) -> bool:
        try:
            pid = int(self.pidfile.read_text())
        except (FileNotFoundError, ValueError):
            return False
        return pid == self.proc.pid and powerloss.fuse_mounted(str(self.store.resolve()))

    def cut(self) -> None:
        """Power cut: everything not made durable is lost."""
        subprocess.run(self.command("cut", str(self.store), "--pidfile", str(self.pidfile)),
                       check=True, capture_output=True, timeout=POWERLOSS_READY_S)
        self.proc.wait(timeout=POWERLOSS_READY_S)
        self.proc = None

    def stop(self) -> int:
        """Clean stop (SIGTERM); returns the daemon's exit code."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=POWERLOSS_READY_S)
        self.proc = None
        return code

    def mounted(self) -> bool:
        return powerloss.fuse_mounted(str(self.store.resolve()))

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=POWERLOSS_READY_S)
            self.proc = None
        if self.mounted():
            powerloss.detach(str(self.store.resolve()))
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def powerloss_layer():
    """A PowerLossLayer, mounted, over an empty store directory in a fresh directory of
    /tmp that any user can reach (pytest's tmp_path is root's alone). Skips where the
    machine has no /dev/fuse or libfuse3."""
    reason = powerloss.unavailable()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="jetraft-powerloss-"))
    base.chmod(0o755)
    layer = PowerLossLayer(base)
    try:
        layer.mount()
        yield layer
        died = layer.proc is not None and layer.proc.poll() is not None
        if died:
            pytest.fail(f"the powerloss daemon died during the test ({layer.proc.returncode})")
    finally:
        print(layer.output()[-_LOG_TAIL:])  # shown when the test failed
        layer.close()
