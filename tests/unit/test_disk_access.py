"""Only the storage layer touches the disk: in server/jetraft's data path (raft/, jetstream/,
net/) no module creates, writes, renames, truncates, fsyncs or deletes a file or directory
itself; each goes through :mod:`jetraft.storage.fileio`, the seam that fault injection and the
durability rules (fsync of a file's directory, no retried fsync) live behind. Reading is not
restricted."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "server" / "jetraft"
DATA_PATH = ("raft", "jetstream", "net")

#: os and shutil functions that change what is on disk (or fsync it).
CHANGES = {
    "os": {"open", "write", "pwrite", "writev", "fsync", "fdatasync", "ftruncate", "truncate",
           "replace", "rename", "renames", "unlink", "remove", "makedirs", "mkdir", "rmdir",
           "link", "symlink", "sync_file_range"},
    "shutil": {"rmtree", "move", "copy", "copy2", "copyfile", "copytree"},
}
#: pathlib.Path methods that change what is on disk and go by no other common name
#: (``replace``, ``unlink`` and ``touch`` do: str.replace, fileio.unlink, a group's touch).
PATH_CHANGES = {"write_text", "write_bytes", "symlink_to", "hardlink_to"}
#: Modules whose ``os.write`` goes to a socket, not a file.
SOCKET_WRITERS = {"net/transport/client.py", "net/transport/tls.py"}


def touches(source: str) -> list[tuple[int, str]]:
    """The calls in ``source`` that change the disk directly: ``(line, "os.rename")``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.attr in CHANGES.get(func.value.id, ()):
            found.append((node.lineno, f"{func.value.id}.{func.attr}"))
        elif isinstance(func, ast.Attribute) and func.attr in PATH_CHANGES \
                and not (isinstance(func.value, ast.Name) and func.value.id in CHANGES):
            found.append((node.lineno, f".{func.attr}()"))
        elif isinstance(func, ast.Name) and func.id == "open" and _writes(node):
            found.append((node.lineno, "open(..., write mode)"))
    return found


def _writes(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) \
        and any(c in mode.value for c in "wax+")


def violations(package: Path) -> list[str]:
    out = []
    for part in DATA_PATH:
        for path in sorted((package / part).rglob("*.py")):
            name = path.relative_to(package).as_posix()
            for line, call in touches(path.read_text()):
                if call == "os.write" and name in SOCKET_WRITERS:
                    continue
                out.append(f"{path.relative_to(package).as_posix()}:{line}: {call}")
    return out


def test_the_data_path_touches_the_disk_only_through_the_storage_layer():
    assert violations(PACKAGE) == []


def test_a_planted_direct_write_rename_fsync_and_delete_are_each_found(tmp_path):
    (tmp_path / "jetstream").mkdir()
    (tmp_path / "net" / "jetstream").mkdir(parents=True)
    (tmp_path / "raft").mkdir()
    (tmp_path / "jetstream" / "store.py").write_text(
        "import os\nos.rename('a', 'b')\nos.fsync(3)\n")
    (tmp_path / "net" / "jetstream" / "snapshot.py").write_text(
        "import shutil\nfrom pathlib import Path\nshutil.rmtree('d')\nPath('x').write_bytes(b'')\n"
        "with open('f', 'ab') as f:\n    pass\nwith open('g') as g:\n    pass\n")
    (tmp_path / "raft" / "log.py").write_text(
        "import os\nfrom jetraft.storage import fileio\nos.read(3, 10)\nos.stat('x')\n"
        "fileio.unlink('x')\n")
    (tmp_path / "net" / "transport").mkdir()
    (tmp_path / "net" / "transport" / "client.py").write_text("import os\nos.write(5, b'PING')\n")
    assert violations(tmp_path) == [
        "jetstream/store.py:2: os.rename", "jetstream/store.py:3: os.fsync",
        "net/jetstream/snapshot.py:3: shutil.rmtree", "net/jetstream/snapshot.py:4: .write_bytes()",
        "net/jetstream/snapshot.py:5: open(..., write mode)"]
