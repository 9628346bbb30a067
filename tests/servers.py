"""Start and stop NATS-compatible servers (jetraft-server or nats-server) for tests.

Both binaries are launched the same way: a configuration file written into a
working directory, then ``[binary, "-c", conf]``.  Readiness is polled (TCP
connect, then ``/healthz`` when monitoring is on) against a deadline; stopping
sends SIGTERM, waits with a deadline, then SIGKILLs the one process we started.

This module is used by ``tests/conftest.py`` and by ``tests/bench/core.py``; it
imports nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

#: Server kinds, in the order tests are parametrized.
KINDS = ("jetraft", "nats-server")

_BINARIES = {"jetraft": "jetraft-server", "nats-server": "nats-server"}

#: Log text that means "the port we picked was taken meanwhile": retry with new ports.
_PORT_CONFLICT_HINTS = ("address already in use", "errno 98", "eaddrinuse")


class ServerStartError(RuntimeError):
    """A server did not become ready; the message carries its config and output."""


def binary(kind: str) -> Path:
    """Return the path of the executable for ``kind`` in the running interpreter's venv."""
    return Path(sys.executable).parent / _BINARIES[kind]


def _ephemeral_low(default: int = 32768) -> int:
    """The lowest port the kernel hands to outgoing connections (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


#: Ports are picked below the ephemeral range, which the kernel gives to outgoing
#: connections: a port bound to 0 and closed can be taken by any client's connect()
#: before the server that was promised it binds (seen as EADDRINUSE when five servers
#: dial each other while starting). Each process starts at its own offset and never
#: hands out a port twice.
_EPHEMERAL_RANGE = (max(1024, _ephemeral_low() - 12000), _ephemeral_low())


def worker_range(low: int, high: int, environ=os.environ) -> tuple[int, int]:
    """The part of ``low..high-1`` this process takes its ports from.

    Under pytest-xdist (``PYTEST_XDIST_WORKER`` = ``gw<i>``, ``PYTEST_XDIST_WORKER_COUNT``
    = n) the range is cut into n disjoint slices and worker i takes slice i, so no two
    workers of one run can both find a port free and then race to bind it. Outside xdist
    (or with unreadable variables) the whole range.
    """
    worker, count = environ.get("PYTEST_XDIST_WORKER", ""), environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    try:
        index, n = int(worker.removeprefix("gw")), int(count)
    except ValueError:
        return low, high
    if not 0 <= index < n:
        return low, high
    size = (high - low) // n
    return low + index * size, low + (index + 1) * size


PORT_RANGE = worker_range(*_EPHEMERAL_RANGE)
_handed_out: set[int] = set()
_next_port = PORT_RANGE[0] + (os.getpid() * 97) % (PORT_RANGE[1] - PORT_RANGE[0])


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free now and outside the ephemeral range.

    Never returns the same port twice in one process, nor a port another pytest-xdist
    worker of the same run may return (each worker has its own slice of the range, see
    ``worker_range``). Raises RuntimeError when every port of this process's range (about
    12,000 below ``ip_local_port_range``, divided by the number of workers) is in use.
    """
    global _next_port
    low, high = PORT_RANGE
    for _ in range(high - low):
        port = _next_port
        _next_port = low + (_next_port + 1 - low) % (high - low)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free TCP port on 127.0.0.1 in {low}..{high - 1}")


def render_config(port: int, http_port: int | None, extra: str = "") -> str:
    """Render a server configuration: client listener, optional monitoring, extra text."""
    lines = [f"listen: 127.0.0.1:{port}"]
    if http_port is not None:
        lines.append(f"http: 127.0.0.1:{http_port}")
    if extra:
        lines.append(extra.strip())
    return "\n".join(lines) + "\n"


def js_config(store_dir: Path | str) -> str:
    """The config text that enables JetStream with its file store in ``store_dir``."""
    return f'jetstream {{ store_dir: "{store_dir}" }}'


@dataclass
class RunningServer:
    """One server process we started, with where to reach it and where its output goes."""

    kind: str
    port: int
    http_port: int | None
    config_path: Path
    stdout_path: Path
    stderr_path: Path
    proc: subprocess.Popen = field(repr=False)

    @property
    def url(self) -> str:
        """The ``nats://`` URL clients connect to."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) of the client listener, for raw sockets."""
        return ("127.0.0.1", self.port)

    def output(self) -> str:
        """The configuration and captured stdout/stderr, for failure messages."""
        parts = [f"--- {self.kind}: {' '.join(map(str, self.proc.args))}"]
        parts.append(f"--- config {self.config_path}:\n{_read(self.config_path)}")
        parts.append(f"--- stdout:\n{_read(self.stdout_path)}")
        parts.append(f"--- stderr:\n{_read(self.stderr_path)}")
        return "\n".join(parts)

    def http_get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """GET ``path`` on the monitoring port; return (status, body), even for 4xx/5xx."""
        if self.http_port is None:
            raise RuntimeError(f"{self.kind} was started without monitoring (http)")
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def monitor(self, path: str) -> dict:
        """GET a monitoring endpoint (``/varz``, ``/connz`` ...) and decode its JSON."""
        status, body = self.http_get(path)
        if status != 200:
            raise AssertionError(f"GET {path} on {self.kind}: HTTP {status}: {body[:500]!r}")
        return json.loads(body)

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; return the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        return self.proc.returncode


def _read(path: Path) -> str:
    """Return a file's text, or a note when it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"<unreadable: {e}>"


def _tcp_ready(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _healthz_ready(server: RunningServer, path: str = "/healthz") -> bool:
    """True when the monitoring port answers ``path`` (``/healthz``) with HTTP 200."""
    try:
        status, _ = server.http_get(path, timeout=0.5)
    except OSError:
        return False
    return status == 200


def wait_ready(server: RunningServer, deadline: float, path: str = "/healthz") -> str | None:
    """Poll until ready (TCP, then ``path`` answers 200); return None when ready, else the
    reason it is not."""
    while time.monotonic() < deadline:
        if not server.alive():
            return f"exited with code {server.proc.returncode}"
        if _tcp_ready(server.port) and (server.http_port is None or _healthz_ready(server, path)):
            return None
        time.sleep(0.02)
    return "not ready before the deadline"


def _launch(kind: str, workdir: Path, extra: str, http: bool, name: str,
            executable: Path) -> RunningServer:
    """Write the config file and start the process, output captured to files in workdir."""
    port = free_port()
    http_port = free_port() if http else None
    conf = workdir / f"{name}.conf"
    conf.write_text(render_config(port, http_port, extra))
    stdout_path, stderr_path = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [str(executable), "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=workdir,
        )
    return RunningServer(kind, port, http_port, conf, stdout_path, stderr_path, proc)


def start_server(
    kind: str,
    workdir: Path,
    extra: str = "",
    *,
    http: bool = False,
    name: str | None = None,
    ready_timeout: float = 15.0,
    attempts: int = 3,
    executable: Path | None = None,
) -> RunningServer:
    """Start ``kind`` with ``extra`` config text in ``workdir`` and wait until it is ready;
    ``executable``: the server's command (default ``binary(kind)``, this venv's).

    Retries with new ports when the log shows the picked port was taken meanwhile.
    Raises ServerStartError (with config and output) when the server does not come up.
    """
    __tracebackhide__ = True  # pytest: the message carries everything
    if kind not in _BINARIES:
        raise ValueError(f"unknown server kind {kind!r}; expected one of {KINDS}")
    workdir.mkdir(parents=True, exist_ok=True)
    name = name or kind
    for attempt in range(1, attempts + 1):
        command = executable or binary(kind)
        if not command.exists():
            raise ServerStartError(f"{kind}: no executable at {command}")
        server = _launch(kind, workdir, extra, http, f"{name}-{attempt}", command)
        reason = wait_ready(server, time.monotonic() + ready_timeout)
        if reason is None:
            return server
        server.stop()
        log = (_read(server.stdout_path) + _read(server.stderr_path)).lower()
        if attempt < attempts and any(hint in log for hint in _PORT_CONFLICT_HINTS):
            continue
        raise ServerStartError(f"{kind} failed to start ({reason})\n{server.output()}")
    raise AssertionError("unreachable")
