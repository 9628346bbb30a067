"""``make deb`` (tools/deb.py): the Debian package, built from a wheelhouse, checked with
lintian, then installed, upgraded, removed and purged with dpkg in a Debian 12 and a
Debian 13 container (systemd-nspawn over the lab's cached base rootfs, without booting, no
network: an overlay keeps the base untouched). systemd does not run in such a container, so
the unit is enabled but not started there; the lab's hosts start it.

Needs root, systemd-nspawn and debootstrap (make lab-deps; the first use of a suite builds
its base rootfs, about 70 s, which the lab reuses), dpkg-deb and lintian."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jetraft import __version__
from lab.day_two import next_wheelhouse
from lab.nspawn import NspawnLab

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import deb  # noqa: E402  (tools/deb.py)

TOOLS = ("systemd-nspawn", "debootstrap", "dpkg-deb", "lintian")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="dpkg in a container needs root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in TOOLS),
                       reason=f"needs {', '.join(TOOLS)} (make lab-deps installs them)"),
    pytest.mark.timeout(900),
]

NEXT = f"{__version__}.post7"


@pytest.fixture(scope="module")
def packages(wheelhouse, tmp_path_factory) -> dict[str, Path]:
    """The package of this tree, and one of the same tree at version NEXT."""
    out = tmp_path_factory.mktemp("deb")
    built = {"this": deb.build(wheelhouse, out / "this")}
    upgrade = next_wheelhouse(wheelhouse, out / "wheelhouse-next", NEXT)
    built["next"] = deb.build(upgrade, out / "next")
    return built


class Container:
    """A non-booted systemd-nspawn container over the cached base rootfs of ``suite``, its
    changes in an overlay under ``work`` (kept from one ``run`` to the next)."""

    def __init__(self, suite: str, work: Path, debs: Path) -> None:
        self.base = NspawnLab(progress=lambda m: None).base(suite)
        self.upper = work / "upper"
        self.upper.mkdir(parents=True)
        self.debs = debs
        self.name = f"jetraft-deb-{suite}-{os.getpid()}"

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
                f"--machine={self.name}", "--directory", str(self.base),
                f"--overlay={self.base}:{self.upper}:/", "--private-network",
                "--resolv-conf=off", "--timezone=off", "--link-journal=no",
                f"--bind-ro={self.debs}:/mnt/debs", *command]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if check:
            assert result.returncode == 0, (command, result.stdout[-3000:], result.stderr[-3000:])
        return result

    def sh(self, script: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("/bin/sh", "-ec", script, check=check)

    def path(self, inside: str) -> Path:
        """What the container sees at ``inside``, as changed in the overlay (or the base)."""
        changed = self.upper / inside.lstrip("/")
        return changed if changed.exists() or changed.is_symlink() else self.base / inside.lstrip("/")


def test_lintian_finds_nothing(packages):
    for package in packages.values():
        result = subprocess.run(["lintian", "--tag-display-limit", "0", "--fail-on", "error,warning",
                                 str(package)], capture_output=True, text=True, timeout=600)
        tags = [line for line in result.stdout.splitlines() if line[:2] in ("E:", "W:", "I:")]
        assert result.returncode == 0 and tags == [], result.stdout[-3000:] + result.stderr[-2000:]


def test_the_same_wheelhouse_gives_the_same_package(packages, wheelhouse, tmp_path):
    again = deb.build(wheelhouse, tmp_path)
    assert again.read_bytes() == packages["this"].read_bytes()


@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_install_upgrade_remove_and_purge(packages, suite, tmp_path):
    debs = tmp_path / "debs"
    debs.mkdir()
    for package in packages.values():
        shutil.copy(package, debs / package.name)
    this, following = (f"/mnt/debs/{packages[k].name}" for k in ("this", "next"))
    box = Container(suite, tmp_path / "box", debs)

    installed = box.run("dpkg", "-i", this)
    assert "Created symlink" in installed.stdout + installed.stderr      # enabled
    passwd = box.path("/etc/passwd").read_text()
    assert any(line.startswith("jetraft:") and line.endswith(":/var/lib/jetraft:/usr/sbin/nologin")
               for line in passwd.splitlines())
    assert os.readlink(box.path("/opt/jetraft/bin")) == f"venvs/{__version__}/bin"
    # every command runs from PATH; the admin CLI talks to the packaged server, which
    # serves JetStream with the configuration the package installed
    session = box.sh("""
        jetraft-server --version
        jetraft --help >/dev/null && jetraft-validate --help >/dev/null
        setpriv --reuid=jetraft --regid=jetraft --init-groups \
            jetraft-server -c /etc/jetraft/jetraft.conf > /tmp/server.log 2>&1 &
        server=$!
        i=0; until jetraft stream ls >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 100 ] || exit 9; sleep 0.1; done
        jetraft stream add ORDERS --subjects 'orders.>' --defaults >/dev/null
        jetraft pub orders.1 kept >/dev/null
        jetraft stream ls --names
        kill $server; wait $server || true
        ls /var/lib/jetraft
    """)
    lines = session.stdout.splitlines()
    assert __version__ in lines[0] and "ORDERS" in lines, session.stdout
    config = "# set by the operator\nlisten: 127.0.0.1:4333\njetstream { store_dir: /var/lib/jetraft }\n"
    box.sh(f"printf '%s' '{config}' > /etc/jetraft/jetraft.conf")

    upgraded = box.run("dpkg", "-i", following)
    assert upgraded.returncode == 0
    assert os.readlink(box.path("/opt/jetraft/bin")) == f"venvs/{NEXT}/bin"
    assert sorted(p.name for p in box.path("/opt/jetraft/venvs").iterdir()) == [__version__, NEXT]
    assert box.path("/etc/jetraft/jetraft.conf").read_text() == config     # never overwritten
    shown = box.sh("jetraft-server --version")
    assert NEXT in shown.stdout + shown.stderr

    box.run("dpkg", "-r", "jetraft")
    assert not box.path("/opt/jetraft").exists()
    assert not box.path("/usr/bin/jetraft").exists()
    assert box.path("/etc/jetraft/jetraft.conf").exists()
    store = box.sh("ls /var/lib/jetraft").stdout.split()
    assert store, "the store was emptied by remove"

    box.run("dpkg", "--purge", "jetraft")
    assert not box.path("/etc/jetraft").exists()
    assert box.sh("ls /var/lib/jetraft").stdout.split() == store          # the store stays


def test_a_virtualenv_the_package_did_not_make_is_not_replaced(packages, tmp_path):
    debs = tmp_path / "debs"
    debs.mkdir()
    shutil.copy(packages["this"], debs / packages["this"].name)
    box = Container("bookworm", tmp_path / "box", debs)
    box.sh("python3 -m venv /opt/jetraft")                     # the role's wheelhouse install
    result = box.run("dpkg", "-i", f"/mnt/debs/{packages['this'].name}", check=False)
    assert result.returncode != 0
    assert "/opt/jetraft is a virtualenv this package did not make" in result.stdout + result.stderr
    assert box.path("/opt/jetraft/pyvenv.cfg").exists()
