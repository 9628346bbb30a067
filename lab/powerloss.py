#!/usr/bin/env python3
"""powerloss: a FUSE layer over a store directory that loses what was not fsynced.

The fault campaign's power-loss nemesis, after Jepsen's lazyfs
(https://github.com/dsrhaslab/lazyfs; jepsen.nemesis.lazyfs). It mounts itself over
STORE_DIR (an over-mount: the directory is opened first, then FUSE is mounted on the same
path, and every operation reaches the real directory underneath through that descriptor),
passes everything through, and keeps in its own memory whatever a program has not yet made
durable. Killing the daemon (SIGKILL, or the host losing power) then loses exactly that.

What it models (POSIX fsync(2): data reaches stable storage only when the file is fsynced,
and "an explicit fsync() on a file descriptor for the directory is also needed" for the
directory entry; Linux fsync(2), fdatasync(2)), each part told in full in its module:

- File data (powerloss_overlay.py): a write() goes to an in-memory overlay of the file,
  keyed by the underlying inode, until the file is fsynced (or written through O_SYNC or
  O_DSYNC); close() does not flush it. Truncations are unsynced changes of the same kind.
- Directory entries (powerloss_journal.py): a change is applied to the underlying directory
  at once, after an undo record is appended to the JOURNAL (a file outside STORE_DIR) and
  fdatasynced; a removed entry is held in ``.powerloss-held`` at the top of the store. The
  change is durable once its directories are fsynced: a file created and fsynced whose
  directory was never fsynced is gone after a power cut.
- Recovery (powerloss_journal.py; at every mount, or ``recover``): the journal's records
  are undone newest first, then the holding directory and the journal are emptied.
- The filesystem's operations (powerloss_fs.py) route each call to the two above and cap
  the memory unsynced data may take (--max-unsynced-bytes; past it a write fails, ENOSPC).
- Power cut: ``cut`` sends SIGKILL to the daemon and detaches the mount (umount -l).
  A clean stop (SIGTERM, SIGINT, umount) does not flush either, as lazyfs does not (its
  cache lives in the process and its destroy handler writes nothing back): the daemon drops
  its unsynced data and rolls the journal back before it exits, so the bare directory then
  holds what a power cut at that instant would have left.

What it does not model: the kernel's own page cache (writes leave the kernel at once, so a
crash of the machine running the daemon is not simulated beyond the daemon's memory);
sync(2) and syncfs(2), which do not reach a FUSE filesystem (only fsync counts here); and
what each module lists (tearing within a file, metadata other than names and sizes,
extended attributes, fallocate, directory link counts). The name ``.powerloss-held`` at the
top of the store is reserved.

Usage (as root; Debian's fuse3 package and the mfusepy module; Python 3.11+):

    python3 powerloss.py mount STORE_DIR --journal JOURNAL_FILE [--pidfile FILE]
                               [--foreground] [--log FILE] [--max-unsynced-bytes N] [--debug]
    python3 powerloss.py cut STORE_DIR --pidfile FILE
    python3 powerloss.py recover STORE_DIR --journal JOURNAL_FILE

``mount`` recovers, then mounts with allow_other and default_permissions (a file or
directory created through the layer belongs to the uid and gid of the process that created
it), writes the pidfile once the mount answers, and returns then, leaving the daemon
detached (logging to --log); with --foreground it stays, logging to stderr. It exits 0 on
SIGTERM, SIGINT or umount. With --debug, one line per fsync, fsyncdir and deletion of a held
entry is logged.

This program stands alone: the standard library and mfusepy, nothing else. It is four
files: this one (the command line, the daemon and the mount), powerloss_overlay.py,
powerloss_journal.py and powerloss_fs.py. lab/powerloss.yml copies them side by side with
mfusepy.py onto each lab host, where the system Python runs this file as a script
(``/usr/bin/python3 /opt/jetraft-powerloss/powerloss.py mount ...``) without the lab
package. So each module imports its siblings one of two ways, chosen by ``__package__``:
imported from this repository's lab package (the tests' ``from lab import powerloss``) they
are lab.powerloss, lab.powerloss_fs, ... and import each other relatively; run as a script
(on the hosts, and by the tests as lab/powerloss.py) nothing has a package, and the
siblings are imported by their plain names from the script's directory, which Python puts
first on sys.path. No other module of the lab package may be imported.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import re
import shutil
import subprocess
import sys
import time

if __package__:  # lab.powerloss; run as a script it has none (see above)
    from .powerloss_fs import PowerLoss
    from .powerloss_journal import _DIR_FLAGS, HELD, Journal, recover
else:
    from powerloss_fs import PowerLoss
    from powerloss_journal import _DIR_FLAGS, HELD, Journal, recover

DEFAULT_MAX_UNSYNCED = 256 * 1024 * 1024

UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
MNT_DETACH = 2

log = logging.getLogger("powerloss")


def _fuse_class():
    """mfusepy's FUSE, passing what its defaults leave out: rename's flags, the file handle of
    ftruncate(), and utimensat()'s UTIME_NOW and UTIME_OMIT."""
    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # libfuse3 even where libfuse2 is installed
    import mfusepy

    class Fuse(mfusepy.FUSE):
        def _path(self, path):
            return None if path is None else path.decode(self.encoding, self.errors)

        def rename_fuse_3(self, old, new, flags):
            return self.operations.rename(self._path(old), self._path(new), flags)

        def truncate_fuse_3(self, path, length, fip):
            return self.operations.truncate(self._path(path), length, fip.contents.fh if fip else None)

        def utimens_fuse_3(self, path, buf, fip):
            times = None
            if buf:
                times = tuple(
                    "now" if ts.tv_nsec == UTIME_NOW else None if ts.tv_nsec == UTIME_OMIT
                    else ts.tv_sec * 10**9 + ts.tv_nsec
                    for ts in (buf.contents.actime, buf.contents.modtime))
            return self.operations.utimens(self._path(path), times, fip.contents.fh if fip else None)

    return Fuse, mfusepy.fuse_get_context


def unavailable() -> str | None:
    """Why the layer cannot be mounted on this machine, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if not ctypes.util.find_library("fuse3"):
        return "no libfuse3 on this machine (Debian package fuse3)"
    return None


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fuse_mounted(path: str) -> bool:
    """Whether a FUSE filesystem is mounted at ``path`` (an absolute, resolved path)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) > 4 and _unescape(fields[4]) == path and right.startswith("fuse"):
                return True
    return False


def _write_pidfile(path: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _daemonize() -> tuple[int | None, int | None]:
    """Fork. The parent waits until the child says the mount is ready (or dies) and gets
    (exit code, None); the child gets (None, the pipe's end to say it on)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        ready = os.read(r, 1)
        os.close(r)
        if ready == b"1":
            return 0, None
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) or 1, None
    os.close(r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return None, w


def cmd_mount(args: argparse.Namespace) -> int:
    store = os.path.realpath(args.store)
    journal = os.path.abspath(args.journal)
    pidfile = os.path.abspath(args.pidfile) if args.pidfile else None
    logfile = os.path.abspath(args.log) if args.log else os.devnull  # libfuse changes to /
    if os.path.commonpath([store, os.path.realpath(journal)]) == store:
        raise SystemExit("powerloss: the journal must be outside the store directory")
    if fuse_mounted(store):
        raise SystemExit(f"powerloss: {store} is already a FUSE mount (cut or unmount it first)")
    ready_fd = None
    if not args.foreground:
        code, ready_fd = _daemonize()
        if code is not None:
            return code
    root = os.open(store, _DIR_FLAGS)
    recover(root, journal)
    os.umask(0)  # the modes the kernel passes are final
    os.mkdir(HELD, 0o700, dir_fd=root)
    Fuse, context = _fuse_class()
    mounted = False

    def ready() -> None:
        nonlocal ready_fd, mounted
        mounted = True
        if pidfile:
            _write_pidfile(pidfile)
        log.info("mounted over %s (journal %s)", store, journal)
        if ready_fd is not None:
            # Detached: the caller's stderr is let go (an ssh session or a pipe would wait
            # for it), the log goes to --log.
            fd = os.open(logfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(fd, 2)
            os.close(fd)
            os.write(ready_fd, b"1")
            os.close(ready_fd)
            ready_fd = None

    ops = PowerLoss(root, Journal(journal), max_unsynced=args.max_unsynced_bytes,
                    debug=args.debug, context=context, on_ready=ready)
    try:
        Fuse(ops, store, foreground=True, nothreads=True, allow_other=True,
             default_permissions=True, use_ino=True,
             fsname="powerloss", subtype="powerloss")  # lab/campaign.py's POWERLOSS_SOURCE
    except RuntimeError as e:
        # libfuse answers SIGTERM, SIGINT and SIGHUP with a non-zero result: a stop once
        # mounted, a failure before.
        if not mounted:
            raise SystemExit(f"powerloss: mounting {store} failed (libfuse: {e})") from None
    finally:
        # A clean stop is a power cut too: the unsynced data goes with this process, and the
        # namespace changes not made durable are rolled back.
        log.info("stopping: %d unsynced bytes dropped", ops.unsynced)
        ops.journal.close()
        recover(root, journal)
        os.close(root)
        if pidfile:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pidfile)
    return 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _is_daemon(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except FileNotFoundError:
        return False
    return any(a.endswith(b"powerloss.py") for a in argv) and b"mount" in argv


def detach(store: str) -> None:
    """umount -l: detach the mount at ``store`` now, whatever still uses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(store), MNT_DETACH) == 0:
        return
    code = ctypes.get_errno()
    helper = shutil.which("fusermount3")  # not root: the setuid helper may do it
    if code == errno.EPERM and helper and subprocess.run([helper, "-uz", store], check=False).returncode == 0:
        return
    raise SystemExit(f"powerloss: umount {store}: {os.strerror(code)}")


def cmd_cut(args: argparse.Namespace) -> int:
    store = os.path.realpath(args.store)
    try:
        with open(args.pidfile) as f:
            pid = int(f.read().strip())
    except FileNotFoundError:
        pid = None
    if pid is not None and _is_daemon(pid):
        os.kill(pid, 9)
        deadline = time.monotonic() + args.timeout
        while _alive(pid):
            if time.monotonic() > deadline:
                raise SystemExit(f"powerloss: daemon {pid} still alive {args.timeout} s after SIGKILL")
            time.sleep(0.01)
        log.info("daemon %d killed", pid)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.pidfile)
    if fuse_mounted(store):
        detach(store)
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    store = os.path.realpath(args.store)
    if fuse_mounted(store):
        raise SystemExit(f"powerloss: {store} is still mounted (cut it first)")
    root = os.open(store, _DIR_FLAGS)
    try:
        recover(root, os.path.abspath(args.journal))
    finally:
        os.close(root)
    return 0


def _size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    m = re.fullmatch(r"(\d+)\s*([kmg]?)(?:i?b)?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) * units[m.group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="powerloss.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("mount", help="recover, then mount the layer over STORE_DIR")
    p.add_argument("store", metavar="STORE_DIR")
    p.add_argument("--journal", required=True, help="undo journal (outside STORE_DIR)")
    p.add_argument("--pidfile", help="written with the daemon's pid once the mount is ready")
    p.add_argument("--foreground", action="store_true", help="do not detach")
    p.add_argument("--max-unsynced-bytes", type=_size, default=DEFAULT_MAX_UNSYNCED,
                   help="writes past this many unsynced bytes fail with ENOSPC (default 256MiB)")
    p.add_argument("--log", help="where a detached daemon logs once mounted (default: nowhere)")
    p.add_argument("--debug", action="store_true", help="log each fsync and fsyncdir")
    p.set_defaults(run=cmd_mount)
    p = sub.add_parser("cut", help="power cut: SIGKILL the daemon, then umount -l STORE_DIR")
    p.add_argument("store", metavar="STORE_DIR")
    p.add_argument("--pidfile", required=True)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the daemon to die")
    p.set_defaults(run=cmd_cut)
    p = sub.add_parser("recover", help="undo what the journal holds, without mounting")
    p.add_argument("store", metavar="STORE_DIR")
    p.add_argument("--journal", required=True)
    p.set_defaults(run=cmd_recover)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "debug", False) else logging.INFO,
                        format="powerloss[%(process)d] %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("fuse").setLevel(logging.WARNING)  # mfusepy: every callback and errno at debug
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
