"""``jetraft object get`` writes only where it was told, whatever the bucket's metadata says.

An object's metadata is a JSON message on ``$O.<bucket>.M.<base64url name>``: anyone who
may publish to the bucket can write one, naming the object anything. Here the tests do so
as an attacker would (nats-py, a rollup of the subject, the data of a real object so that a
download would succeed), then run ``jetraft object get`` with the current directory a fresh
``cli/cwd`` under ``tmp_path``: a stored name that makes no safe file name (empty, ``.``,
``..``, control characters, not the name asked for) is one ``nats: error:`` line asking for
``--output``, never a traceback, and nothing appears in ``cli/`` or ``cli/cwd``; a name with
directories (``/`` or ``\\``) gives its last part, in ``cli/cwd``. Text output shows control
characters of stored names escaped. Each test runs against jetraft and nats-server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from pathlib import Path

import nats
import pytest
from test_admin_cli import BIN, Admin, assert_clean_error, field

DATA = b"the real report\n"


@pytest.fixture
def cwd(tmp_path) -> Path:
    """A fresh, empty working directory ``cli/cwd``; its parent ``cli`` holds nothing else."""
    work = tmp_path / "cli" / "cwd"
    work.mkdir(parents=True)
    return work


def tree(root: Path) -> list[str]:
    """Every path under ``root`` (hidden ones included), relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


def publish_meta(url: str, bucket: str, subject_name: str, info: dict) -> None:
    """Store ``info`` as the metadata of ``subject_name``, as nats-py's ObjectStore.put does
    (one message, rolling up the subject), acknowledged by the stream."""

    async def publish() -> None:
        nc = await nats.connect(url)
        try:
            ack = await nc.jetstream().publish(meta_subject(bucket, subject_name), json.dumps(info).encode(),
                                               headers={"Nats-Rollup": "sub"})
            assert ack.stream == f"OBJ_{bucket}", ack
        finally:
            await nc.close()

    asyncio.run(publish())


def bucket_with_report(admin: Admin, tmp_path: Path, bucket: str) -> dict:
    """A bucket holding ``report.txt``; returns its object info (nuid, size, digest...)."""
    admin("object", "add", bucket)
    source = tmp_path / "report-source.txt"
    source.write_bytes(DATA)
    admin("object", "put", bucket, str(source), "--name", "report.txt")
    return json.loads(admin("object", "info", bucket, "report.txt", "--json").stdout)


def get_in(cwd: Path, admin: Admin, *args: str) -> subprocess.CompletedProcess:
    """``jetraft object get ARGS`` as a user runs it, in ``cwd``."""
    return subprocess.run([str(BIN), "object", "get", *args, "-s", admin.url], capture_output=True, text=True,
                          env=admin.env, cwd=cwd, timeout=30)


#: Stored names an attacker writes into the metadata of report.txt (none is report.txt).
FORGED = ["\x00bad", ".", "..", "../escape", "a/b", "", "/", "report.txt/..", "\x1b]0;pwned\x07"]


def test_metadata_naming_another_object_is_refused(js_server, tmp_path, cwd):
    """The metadata of report.txt rewritten to name something else: get without --output
    refuses it in one line, with or without -f, and writes nothing anywhere; with --output
    the user chose the file, and it is written."""
    admin = Admin(js_server.url, tmp_path)
    real = bucket_with_report(admin, tmp_path, "FORGE")
    for forged in FORGED:
        publish_meta(js_server.url, "FORGE", "report.txt", {**real, "name": forged})
        for force in ((), ("-f",)):
            res = get_in(cwd, admin, "FORGE", "report.txt", *force)
            assert res.returncode == 1, (forged, force, res.stdout, res.stderr)
            assert_clean_error(res.stderr, "the metadata of object FORGE > report.txt names another object",
                               "give --output")
            assert "\x00" not in res.stderr and "\x1b" not in res.stderr, res.stderr
            assert len(res.stderr.splitlines()) == 1, res.stderr
            assert res.stdout == ""
            assert tree(cwd.parent) == ["cwd"], (forged, force)

    wrote = get_in(cwd, admin, "FORGE", "report.txt", "--output", "chosen.txt")     # the last forgery
    assert wrote.returncode == 0, wrote.stderr
    assert (cwd / "chosen.txt").read_bytes() == DATA
    assert tree(cwd.parent) == ["cwd", "cwd/chosen.txt"]


@pytest.mark.parametrize("stored, needle", [
    ("\x00bad", "object name '\\x00bad' holds control characters"),
    ("\x1b[2Jclear", "object name '\\x1b[2Jclear' holds control characters"),
    ("line\nbreak", "object name 'line\\nbreak' holds control characters"),
    (".", "object name '.' ends in '.'"),
    ("..", "object name '..' ends in '..'"),
    ("up/..", "object name 'up/..' ends in '..'"),
    ("dir/", "object name 'dir/' ends in nothing"),
    ("dir\\", "object name 'dir\\' ends in nothing"),
    pytest.param("l/" + "\u00e9" * 128, "ends in 256 bytes, too long for a file name (at most 255)",
                 id="256-bytes"),
])
def test_stored_name_with_no_safe_file_name_is_refused(js_server, tmp_path, cwd, monkeypatch, stored, needle):
    """Metadata under the object's own name, which makes no file name: one error line (run
    in-process, as a NUL cannot be passed in a process's arguments) asking for --output,
    and nothing written in the current directory or its parent, even with -f."""
    admin = Admin(js_server.url, tmp_path)
    real = bucket_with_report(admin, tmp_path, "OWN")
    publish_meta(js_server.url, "OWN", stored, {**real, "name": stored})
    monkeypatch.chdir(cwd)
    for force in ((), ("-f",)):
        res = admin("object", "get", "OWN", stored, *force, code=1)
        assert_clean_error(res.stderr, needle, "give --output FILE")
        assert len(res.stderr.splitlines()) == 1, res.stderr
        assert tree(cwd.parent) == ["cwd"], (stored, force)
    admin("object", "get", "OWN", stored, "-O", "out.txt")
    assert (cwd / "out.txt").read_bytes() == DATA


def test_names_with_directories_are_written_in_the_current_directory(js_server, tmp_path, cwd):
    """A name's directories, either separator, are dropped (natscli's filepath.Base): the
    file is its last part, in the current directory; an ordinary name still works."""
    admin = Admin(js_server.url, tmp_path)
    real = bucket_with_report(admin, tmp_path, "DIRS")
    for stored, written in (("../escape", "escape"), ("a/b", "b"), ("win\\dir\\c.txt", "c.txt"),
                            ("/etc/d.conf", "d.conf"), ("..\\..\\e", "e"), ("long/" + "f" * 255, "f" * 255)):
        publish_meta(js_server.url, "DIRS", stored, {**real, "name": stored})
        res = get_in(cwd, admin, "DIRS", stored)
        assert res.returncode == 0, (stored, res.stderr)
        assert res.stdout.startswith(f"Wrote: 16 B to {cwd / written} in "), res.stdout
        assert (cwd / written).read_bytes() == DATA
        assert tree(cwd.parent) == ["cwd", f"cwd/{written}"], stored
        (cwd / written).unlink()

    ordinary = get_in(cwd, admin, "DIRS", "report.txt")
    assert ordinary.returncode == 0, ordinary.stderr
    assert (cwd / "report.txt").read_bytes() == DATA
    assert tree(cwd.parent) == ["cwd", "cwd/report.txt"]


def test_a_directory_in_the_way_is_one_line(js_server, tmp_path, cwd):
    """The default file name is a directory here: refused, with -f too, and left alone."""
    admin = Admin(js_server.url, tmp_path)
    bucket_with_report(admin, tmp_path, "INWAY")
    (cwd / "report.txt").mkdir()
    for force in ((), ("-f",)):
        res = get_in(cwd, admin, "INWAY", "report.txt", *force)
        assert res.returncode == 1, res.stdout
        assert_clean_error(res.stderr, f"{cwd / 'report.txt'} is a directory: give --output a file path")
        assert tree(cwd.parent) == ["cwd", "cwd/report.txt"]


def test_control_characters_of_stored_names_are_printed_escaped(js_server, tmp_path):
    """info, ls and ls -n show a stored name's (and description's) control characters as
    escapes, never raw; --json keeps the stored text."""
    admin = Admin(js_server.url, tmp_path)
    real = bucket_with_report(admin, tmp_path, "ESC")
    evil = "\x1b]0;pwned\x07\x1b[2J"
    publish_meta(js_server.url, "ESC", evil, {**real, "name": evil, "description": "x\x1b[31m"})

    info = admin("object", "info", "ESC", evil).stdout
    assert "\x1b" not in info and "\x07" not in info, repr(info)
    assert info.startswith("Object information for ESC > \\x1b]0;pwned\\x07\\x1b[2J\n"), repr(info)
    assert field(info, "Description") == ["x\\x1b[31m"]
    names = admin("object", "ls", "ESC", "-n").stdout
    assert sorted(names.splitlines()) == ["\\x1b]0;pwned\\x07\\x1b[2J", "report.txt"], repr(names)
    table = admin("object", "ls", "ESC").stdout
    assert "\x1b" not in table and "\\x1b]0;pwned" in table, repr(table)
    stored = json.loads(admin("object", "info", "ESC", evil, "--json").stdout)
    assert stored["name"] == evil
