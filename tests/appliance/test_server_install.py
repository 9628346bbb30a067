"""playbooks/deploy.yml, tag jetraft_server_install: jetraft installed on a host from the
controller's wheelhouse with no package index (the host here is this machine, into a
temporary virtualenv; pip is pointed at an index that does not exist, so any attempt to
reach one fails the run)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from playbook import flat, run_playbook
from servers import start_server

from jetraft import __version__

ROOT = Path(__file__).resolve().parents[2]


def write_inventory(tmp: Path, wheelhouse: Path, **extra) -> Path:
    """One local host installing from ``wheelhouse`` into ``tmp``; ``extra`` adds or replaces
    its variables."""
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "jetraft_server_venv": str(tmp / "opt" / "jetraft"),
            "jetraft_server_python": sys.executable,
            "jetraft_server_wheelhouse": str(wheelhouse),
            "jetraft_server_wheelhouse_dest": str(tmp / "cache" / "wheelhouse"),
            # required by the role's argument specification, whatever the tags
            "jetraft_server_sys_password": "unused", "jetraft_server_route_password": "unused",
            **extra}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump({"jetraft": {"hosts": {"h1": host}}}))
    return path


def install(inv: Path) -> subprocess.CompletedProcess:
    return run_playbook("deploy", inv, "jetraft_server_install", drop_env_prefix="PIP_",
                        env={"PIP_INDEX_URL": "http://127.0.0.1:9/no-index-here/",
                             "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"})


def test_installed_from_the_wheelhouse_with_no_index_and_a_rerun_changes_nothing(wheelhouse, tmp_path):
    inv = write_inventory(tmp_path, wheelhouse)
    first = install(inv)
    assert first.returncode == 0, first.stdout[-4000:]
    server = tmp_path / "opt" / "jetraft" / "bin" / "jetraft-server"
    shown = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and __version__ in shown.stdout + shown.stderr
    again = install(inv)
    assert again.returncode == 0, again.stdout[-4000:]
    assert "changed=0" in again.stdout.split("PLAY RECAP")[-1], again.stdout[-3000:]


def test_a_missing_wheelhouse_says_how_to_make_one(tmp_path):
    result = install(write_inventory(tmp_path, tmp_path / "nowhere"))
    out = flat(result)
    assert result.returncode != 0
    assert "run `make wheelhouse` on the controller" in out, out[-2000:]


def test_the_package_installation_without_a_package_says_how_to_make_one(tmp_path):
    """jetraft_server_install deb with no package on the controller: the run stops before it
    changes anything on the host, naming the directory and `make deb`."""
    result = install(write_inventory(tmp_path, tmp_path / "nowhere", jetraft_server_install="deb",
                                     jetraft_server_venv="/opt/jetraft",
                                     jetraft_server_deb_dir=str(tmp_path / "no-debs")))
    out = flat(result)
    assert result.returncode != 0
    assert f"no jetraft package in {tmp_path / 'no-debs'}" in out, out[-2000:]
    assert "run `make deb` on the controller" in out, out[-2000:]
    assert "changed=0" in result.stdout.split("PLAY RECAP")[-1], result.stdout[-3000:]
    assert not (tmp_path / "cache").exists()


def test_the_package_installation_takes_jetraft_in_the_package_s_place_only(tmp_path):
    """The package carries jetraft alone, under /opt/jetraft: the nats-server flavour or
    another virtualenv with jetraft_server_install deb is refused by name, before anything
    is installed."""
    debs = tmp_path / "debs"
    debs.mkdir()
    (debs / "jetraft_0.1.0-1_amd64.deb").write_bytes(b"not installed by this test")
    flavour = install(write_inventory(tmp_path, tmp_path / "nowhere", jetraft_server_install="deb",
                                      jetraft_server_venv="/opt/jetraft",
                                      jetraft_server_flavour="nats-server",
                                      jetraft_server_deb_dir=str(debs)))
    assert flavour.returncode != 0
    assert ("jetraft_server_flavour nats-server installs from the wheelhouse (keep "
            "jetraft_server_install wheelhouse)") in flat(flavour), flat(flavour)[-2000:]
    elsewhere = install(write_inventory(tmp_path, tmp_path / "nowhere", jetraft_server_install="deb",
                                        jetraft_server_deb_dir=str(debs)))
    assert elsewhere.returncode != 0
    assert (f"jetraft_server_venv {tmp_path / 'opt' / 'jetraft'} is not where the package "
            "installs") in flat(elsewhere), flat(elsewhere)[-2000:]
    assert not (tmp_path / "cache").exists()


def test_a_virtualenv_made_by_another_python_is_made_again(wheelhouse, tmp_path):
    """A host upgraded from Debian 12 to 13: the virtualenv the old Python made is replaced by
    one of the host's Python, and jetraft runs from it."""
    inv = write_inventory(tmp_path, wheelhouse)
    assert install(inv).returncode == 0
    cfg = tmp_path / "opt" / "jetraft" / "pyvenv.cfg"
    ours = cfg.read_text()
    cfg.write_text("".join("version = 3.9.2\n" if line.startswith("version") else line + "\n"
                           for line in ours.splitlines()))
    (tmp_path / "opt" / "jetraft" / "lib" / "python3.9").mkdir()     # the old Python's packages
    again = install(inv)
    assert again.returncode == 0, again.stdout[-4000:]
    assert re.search(r"A virtualenv made by another Python is made again\] \**\nchanged: \[h1\]",
                     again.stdout), again.stdout[-4000:]
    assert cfg.read_text() == ours
    assert not (tmp_path / "opt" / "jetraft" / "lib" / "python3.9").exists()
    server = tmp_path / "opt" / "jetraft" / "bin" / "jetraft-server"
    shown = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and __version__ in shown.stdout + shown.stderr


def test_every_installed_command_runs_and_the_admin_cli_talks_to_the_installed_server(wheelhouse, tmp_path):
    """Each console script of pyproject.toml, from the virtualenv the role made (no dev or
    lab extras in it), answers --help; the admin CLI adds and lists a stream on a server
    started from the same virtualenv."""
    assert install(write_inventory(tmp_path, wheelhouse)).returncode == 0
    bin_dir = tmp_path / "opt" / "jetraft" / "bin"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {"jetraft", "jetraft-server", "jetraft-validate"} <= set(scripts)
    for script in scripts:
        shown = subprocess.run([str(bin_dir / script), "--help"], capture_output=True, text=True,
                               timeout=60)
        assert shown.returncode == 0 and "Usage:" in shown.stdout, (script, shown.stderr[-2000:])
    server = start_server("jetraft", tmp_path / "server",
                          f'jetstream {{ store_dir: "{tmp_path / "store"}" }}',
                          executable=bin_dir / "jetraft-server")
    try:
        def jetraft(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(bin_dir / "jetraft"), "-s", server.url, *args],
                                  capture_output=True, text=True, timeout=60)

        added = jetraft("stream", "add", "ORDERS", "--subjects", "orders.>", "--defaults")
        assert added.returncode == 0, added.stdout[-2000:] + added.stderr[-2000:]
        listed = jetraft("stream", "ls", "--names")
        assert (listed.returncode, listed.stdout.split()) == (0, ["ORDERS"]), listed.stderr[-2000:]
    finally:
        server.stop()
