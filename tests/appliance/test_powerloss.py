"""The power-loss layer (lab/powerloss.py): after a power cut a store directory holds what
was fsynced, file data and directory entries alike, and nothing else.

Each test mounts the layer over an empty directory (the ``powerloss_layer`` fixture of
tests/appliance/conftest.py), works through the mount as a program would, cuts the power
(SIGKILL of the daemon, then umount -l), mounts again (which recovers) and reads what is
left. Runs as root, with /dev/fuse and Debian's fuse3 (make test installs it).
"""

from __future__ import annotations

import errno
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from lab import powerloss

pytestmark = pytest.mark.skipif(powerloss.unavailable() is not None,
                                reason=f"the power-loss layer cannot mount here: {powerloss.unavailable()}")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: Path, data: bytes, *, offset: int | None = None, sync: bool = False,
          flags: int = os.O_WRONLY | os.O_CREAT) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        if offset is None:
            os.write(fd, data)
        else:
            os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def durable_file(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` and make both durable: the file and its directory."""
    write(path, data, sync=True)
    fsync_dir(path.parent)


def after_cut(layer) -> None:
    layer.cut()
    assert not layer.mounted()
    layer.mount()


def test_synced_write_survives_unsynced_write_is_lost(powerloss_layer):
    f = powerloss_layer.store / "log"
    durable_file(f, b"")
    write(f, b"A" * 100, flags=os.O_WRONLY | os.O_APPEND, sync=True)
    write(f, b"B" * 50, flags=os.O_WRONLY | os.O_APPEND)
    assert f.read_bytes() == b"A" * 100 + b"B" * 50  # closed, not fsynced: still pending

    after_cut(powerloss_layer)

    assert f.read_bytes() == b"A" * 100


def test_reads_see_unsynced_writes_before_the_cut(powerloss_layer):
    f = powerloss_layer.store / "data"
    durable_file(f, b"hello world")
    write(f, b"WORLD", offset=6)       # overwrite inside the synced bytes
    write(f, b"!", offset=20)          # past the end: a hole of zeros
    write(f, b"lo w", offset=3)        # overwrite across synced and unsynced bytes
    expected = b"hello WORLD" + bytes(9) + b"!"
    expected = expected[:3] + b"lo w" + expected[7:]
    assert f.read_bytes() == expected
    assert f.stat().st_size == 21
    fd = os.open(f, os.O_RDONLY)
    try:
        assert os.pread(fd, 6, 5) == expected[5:11]
    finally:
        os.close(fd)

    after_cut(powerloss_layer)

    assert f.read_bytes() == b"hello world"
    assert f.stat().st_size == 11


def test_new_file_needs_its_directory_fsynced(powerloss_layer):
    store = powerloss_layer.store
    durable_file(store / "kept", b"file and directory fsynced")
    write(store / "lost", b"fsynced file, directory not", sync=True)
    (store / "sub").mkdir()                       # the new directory's entry: never fsynced
    durable_file(store / "sub" / "inner", b"x")   # durable in sub, but sub is not in store

    after_cut(powerloss_layer)

    assert sorted(os.listdir(store)) == ["kept"]
    assert (store / "kept").read_bytes() == b"file and directory fsynced"


def test_rename_survives_only_once_its_directory_is_fsynced(powerloss_layer):
    store = powerloss_layer.store
    durable_file(store / "a", b"contents of a")
    durable_file(store / "b", b"contents of b")
    os.rename(store / "a", store / "a2")
    fsync_dir(store)
    os.rename(store / "b", store / "b2")          # not made durable
    assert sorted(os.listdir(store)) == ["a2", "b2"]

    after_cut(powerloss_layer)

    assert sorted(os.listdir(store)) == ["a2", "b"]
    assert (store / "a2").read_bytes() == b"contents of a"
    assert (store / "b").read_bytes() == b"contents of b"


def test_replace_of_a_file_the_stores_way(powerloss_layer):
    """Temp file, fsync, rename over the old file: the old contents until the directory is
    fsynced, the new ones after."""
    store = powerloss_layer.store
    durable_file(store / "meta", b"old")
    write(store / "meta.tmp", b"new", sync=True)
    os.replace(store / "meta.tmp", store / "meta")
    assert (store / "meta").read_bytes() == b"new"

    after_cut(powerloss_layer)

    assert os.listdir(store) == ["meta"]
    assert (store / "meta").read_bytes() == b"old"

    write(store / "meta.tmp", b"new", sync=True)
    os.replace(store / "meta.tmp", store / "meta")
    fsync_dir(store)

    after_cut(powerloss_layer)

    assert os.listdir(store) == ["meta"]
    assert (store / "meta").read_bytes() == b"new"


def test_unlink_not_made_durable_is_undone(powerloss_layer):
    store = powerloss_layer.store
    durable_file(store / "gone", b"removed, durably")
    durable_file(store / "back", b"removed, not durably")
    (store / "gone").unlink()
    fsync_dir(store)
    (store / "back").unlink()
    assert os.listdir(store) == []

    after_cut(powerloss_layer)

    assert os.listdir(store) == ["back"]
    assert (store / "back").read_bytes() == b"removed, not durably"


def test_truncate_not_fsynced_is_undone(powerloss_layer):
    store = powerloss_layer.store
    durable_file(store / "cut", b"0123456789")
    durable_file(store / "trunc", b"0123456789")
    os.truncate(store / "cut", 4)
    write(store / "trunc", b"ab", flags=os.O_WRONLY | os.O_TRUNC)
    assert (store / "cut").read_bytes() == b"0123"
    assert (store / "trunc").read_bytes() == b"ab"

    after_cut(powerloss_layer)

    assert (store / "cut").read_bytes() == b"0123456789"
    assert (store / "trunc").read_bytes() == b"0123456789"


def test_fsynced_truncate_survives(powerloss_layer):
    f = powerloss_layer.store / "f"
    durable_file(f, b"0123456789")
    fd = os.open(f, os.O_RDWR)
    try:
        os.ftruncate(fd, 4)
        os.pwrite(fd, b"xy", 6)  # grows it again, with a hole where 4..5 were
        os.fsync(fd)
    finally:
        os.close(fd)

    after_cut(powerloss_layer)

    assert f.read_bytes() == b"0123\0\0xy"


def test_unprivileged_writer_owns_its_files(powerloss_layer):
    store = powerloss_layer.store
    store.chmod(0o777)
    fsync_dir(store)
    nobody = pwd.getpwnam("nobody")
    subprocess.run(["sh", "-c", "printf 'written by nobody' > owned && sync owned . && mkdir sub && sync ."],
                   cwd=store, user=nobody.pw_uid, group=nobody.pw_gid, check=True, timeout=30)

    after_cut(powerloss_layer)

    assert (store / "owned").read_bytes() == b"written by nobody"
    for name in ("owned", "sub"):
        st = (store / name).stat()
        assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid), name


def test_clean_stop_does_not_flush(powerloss_layer):
    """SIGTERM (or umount) of the layer is a power cut too, as with lazyfs: the bare
    directory then holds only what was made durable."""
    store = powerloss_layer.store
    durable_file(store / "f", b"synced")
    write(store / "f", b" and not", flags=os.O_WRONLY | os.O_APPEND)
    write(store / "new", b"created, directory not fsynced", sync=True)

    assert powerloss_layer.stop() == 0

    assert not powerloss_layer.mounted()
    assert os.listdir(store) == ["f"]  # nor the holding directory
    assert (store / "f").read_bytes() == b"synced"
    assert powerloss_layer.journal.read_bytes() == b""


def test_unsynced_cap_answers_enospc_and_loses_nothing_synced(powerloss_layer):
    powerloss_layer.stop()
    powerloss_layer.mount("--max-unsynced-bytes", "4096")
    store = powerloss_layer.store
    durable_file(store / "f", b"")
    fd = os.open(store / "f", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"A" * 3000)
        os.fsync(fd)
        os.write(fd, b"B" * 3000)
        with pytest.raises(OSError) as refused:
            os.write(fd, b"C" * 2000)
        assert refused.value.errno == errno.ENOSPC
        assert (store / "f").read_bytes() == b"A" * 3000 + b"B" * 3000
        os.fsync(fd)                  # B made durable, the cap's room back
        os.write(fd, b"D" * 2000)     # pending when the power goes
    finally:
        os.close(fd)

    after_cut(powerloss_layer)

    assert (store / "f").read_bytes() == b"A" * 3000 + b"B" * 3000


RECORD = 128

#: The store's pattern: one file, created and its directory fsynced, then a record appended
#: and fsynced at a time; the number of each record is printed once its fsync returned.
APPENDER = r"""
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
d = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
os.fsync(d)
os.close(d)
synced, unsynced = int(sys.argv[2]), int(sys.argv[3])
i = 0
while synced < 0 or i < synced:
    os.write(fd, b"%08d" % i + b"." * 119 + b"\n")
    os.fsync(fd)
    print(i, flush=True)
    i += 1
for j in range(unsynced):
    os.write(fd, b"%08d" % (i + j) + b"." * 119 + b"\n")
print("ready", flush=True)
sys.stdin.read()
"""


def records(n: int) -> bytes:
    return b"".join(b"%08d" % i + b"." * 119 + b"\n" for i in range(n))


def test_appender_killed_keeps_exactly_its_fsynced_records(powerloss_layer):
    f = powerloss_layer.store / "stream.blk"
    with subprocess.Popen([sys.executable, "-c", APPENDER, str(f), "300", "7"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line == b"ready\n":
                break
        assert lines[-1] == b"ready\n" and len(lines) == 301
        assert f.stat().st_size == 307 * RECORD
        proc.kill()
        after_cut(powerloss_layer)

    assert f.read_bytes() == records(300)


def test_appender_cut_at_full_speed_keeps_a_whole_prefix(powerloss_layer):
    """The cut lands while the program appends: what survives is every record whose fsync
    returned (and perhaps the one whose fsync was under way), never a torn record."""
    f = powerloss_layer.store / "stream.blk"
    with subprocess.Popen([sys.executable, "-c", APPENDER, str(f), "-1", "0"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as proc:
        acked = 0
        for line in proc.stdout:
            acked = int(line) + 1
            if acked == 500:
                break
        powerloss_layer.cut()
        for line in proc.stdout:  # acks already on their way; the program then fails
            acked = int(line) + 1
        proc.wait(timeout=30)
        assert proc.returncode != 0  # its next write met the cut
    powerloss_layer.mount()

    data = f.read_bytes()
    assert len(data) % RECORD == 0
    survived = len(data) // RECORD
    assert acked <= survived <= acked + 1
    assert data == records(survived)


def test_background_mount_cut_and_recover_commands(powerloss_layer):
    """The CLI as the lab uses it: ``mount`` returns once the mount is ready, ``cut``
    kills it, ``recover`` rolls the journal back without mounting."""
    layer = powerloss_layer
    layer.stop()
    store = layer.store
    subprocess.run(layer.command("mount", str(store), "--journal", str(layer.journal),
                                 "--pidfile", str(layer.pidfile)),
                   check=True, timeout=30, stdin=subprocess.DEVNULL, capture_output=True)
    try:
        assert layer.mounted()
        durable_file(store / "kept", b"durable")
        write(store / "kept", b"+lost", flags=os.O_WRONLY | os.O_APPEND)
        write(store / "new", b"lost with its entry", sync=True)
        assert sorted(os.listdir(store)) == ["kept", "new"]
    finally:
        subprocess.run(layer.command("cut", str(store), "--pidfile", str(layer.pidfile)),
                       check=True, timeout=30, capture_output=True)
    assert not layer.mounted()
    assert not layer.pidfile.exists()
    # Underneath, the entry made without a directory fsync is still there until recovery.
    assert sorted(os.listdir(store)) == [".powerloss-held", "kept", "new"]

    subprocess.run(layer.command("recover", str(store), "--journal", str(layer.journal)),
                   check=True, timeout=30, capture_output=True)

    assert os.listdir(store) == ["kept"]
    assert (store / "kept").read_bytes() == b"durable"
    assert layer.journal.read_bytes() == b""


def test_file_removed_while_open_stays_usable_and_comes_back(powerloss_layer):
    store = powerloss_layer.store
    durable_file(store / "blk", b"0123456789")
    fd = os.open(store / "blk", os.O_RDWR)
    try:
        (store / "blk").unlink()
        assert os.listdir(store) == []
        os.pwrite(fd, b"ab", 0)
        os.fsync(fd)
        assert os.fstat(fd).st_size == 10
        assert os.pread(fd, 10, 0) == b"ab23456789"
    finally:
        os.close(fd)
    assert os.listdir(store) == []

    after_cut(powerloss_layer)

    assert os.listdir(store) == ["blk"]
    assert (store / "blk").read_bytes() == b"ab23456789"


def test_every_namespace_change_not_made_durable_is_undone(powerloss_layer):
    store = powerloss_layer.store
    (store / "old").mkdir()
    (store / "empty").mkdir()
    durable_file(store / "old" / "f", b"f")
    durable_file(store / "target", b"target")
    fsync_dir(store)
    before = sorted(str(p.relative_to(store)) for p in store.rglob("*"))

    (store / "empty").rmdir()
    os.rename(store / "old", store / "new")          # a directory with its contents
    os.link(store / "target", store / "second-name")
    os.symlink("target", store / "link")
    os.mkfifo(store / "fifo")
    os.replace(store / "new" / "f", store / "target")  # over an existing file, across directories
    fsync_dir(store / "new")                            # one of its two directories only
    assert sorted(os.listdir(store)) == ["fifo", "link", "new", "second-name", "target"]

    after_cut(powerloss_layer)

    assert sorted(str(p.relative_to(store)) for p in store.rglob("*")) == before
    assert (store / "old" / "f").read_bytes() == b"f"
    assert (store / "target").read_bytes() == b"target"
    assert (store / "target").stat().st_nlink == 1
