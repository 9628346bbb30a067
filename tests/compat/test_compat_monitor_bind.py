"""Which address the monitoring port binds, side by side with nats-server.

nats-server binds monitoring to the client host (``-a``) unless the file's
``http: "host:port"`` names one (server/opts.go setBaselineOptions: HTTPHost defaults to
Host after the flags). The start command of docs/install.md, ``-a 127.0.0.1 -p P -m M``, must
not open monitoring on every interface. Only 127.0.0.0/8 is used: monitoring bound to
127.0.0.2 answers there and refuses 127.0.0.1, which it would not if bound to 0.0.0.0.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from servers import KINDS, binary, free_port


def _answers_healthz(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=0.5) as resp:
            return resp.status == 200
    except OSError:
        return False


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _run(kind: str, tmp_path: Path, args: list[str], monitor: tuple[str, int]):
    """Start ``kind`` with ``args``; wait (deadline 20 s) until /healthz answers on
    ``monitor``; return the process (the caller stops it)."""
    err = (tmp_path / f"{kind}.err").open("w")
    proc = subprocess.Popen([str(binary(kind)), *args], stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path)
    deadline = time.monotonic() + 20
    while not _answers_healthz(*monitor):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(timeout=10)
            err.close()
            pytest.fail(f"{kind} {args}: no /healthz on {monitor}: {(tmp_path / f'{kind}.err').read_text()}")
        time.sleep(0.02)
    err.close()
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize("kind", KINDS)
def test_flags_only_monitoring_binds_the_client_address(kind, tmp_path):
    port, http = free_port(), free_port()
    proc = _run(kind, tmp_path, ["-a", "127.0.0.2", "-p", str(port), "-m", str(http)], ("127.0.0.2", http))
    try:
        assert _accepts("127.0.0.2", port)
        assert not _accepts("127.0.0.1", http), f"{kind}: monitoring answers on 127.0.0.1, not only on -a"
        assert not _accepts("127.0.0.1", port)
    finally:
        _stop(proc)


@pytest.mark.parametrize("kind", KINDS)
def test_flag_address_overrides_the_file_host_for_monitoring_too(kind, tmp_path):
    port, http = free_port(), free_port()
    conf = tmp_path / "server.conf"
    conf.write_text(f"host: 127.0.0.3\nport: {port}\nhttp_port: {http}\n")
    proc = _run(kind, tmp_path, ["-c", str(conf), "-a", "127.0.0.2"], ("127.0.0.2", http))
    try:
        assert not _accepts("127.0.0.3", http)
        assert not _accepts("127.0.0.1", http)
    finally:
        _stop(proc)


@pytest.mark.parametrize("kind", KINDS)
def test_file_http_host_stays_when_the_flag_moves_the_client_address(kind, tmp_path):
    port, http = free_port(), free_port()
    conf = tmp_path / "server.conf"
    conf.write_text(f"port: {port}\nhttp: 127.0.0.3:{http}\n")
    proc = _run(kind, tmp_path, ["-c", str(conf), "-a", "127.0.0.2"], ("127.0.0.3", http))
    try:
        assert _accepts("127.0.0.2", port)
        assert not _accepts("127.0.0.2", http)
        assert not _accepts("127.0.0.1", http)
    finally:
        _stop(proc)
