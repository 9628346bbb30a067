"""The human log: ``-l``/``log_file`` as nats-server writes it, beside the JSON event log.

Each test starts the real jetraft-server and, where nats-server has the case, the real
nats-server with the same flags or configuration keys, and reads the log file an operator
would read: its lines, its labels, its wording, and the files rotation leaves behind.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from polling import poll
from servers import KINDS, _tcp_ready, binary, free_port, render_config

#: nats-server's file log line (logger/log.go): "[pid] date time.micros [LBL] message".
LINE = re.compile(r"\[(\d+)\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6}) \[(INF|WRN|ERR|DBG|TRC|FTL)\] (.*)")
#: The same without the time (logtime off).
LINE_NO_TIME = re.compile(r"\[(\d+)\] \[(INF|WRN|ERR|DBG|TRC|FTL)\] (.*)")
#: A backup made by rotation: "<log>.YYYY.MM.DD.HH.MM.SS.<nanoseconds>" (logger/log.go).
BACKUP = re.compile(r"\.\d{4}\.\d\d\.\d\d\.\d\d\.\d\d\.\d\d\.\d{9}")


@dataclass
class Proc:
    kind: str
    port: int
    proc: subprocess.Popen
    log: Path
    out: Path
    err: Path

    def lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def messages(self) -> list[str]:
        out = []
        for line in self.lines():
            m = LINE.fullmatch(line.rstrip("\r")) or LINE_NO_TIME.fullmatch(line.rstrip("\r"))
            if m:
                out.append(m.groups()[-1])
        return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def context(self) -> str:
        return (f"--- {self.kind} log:\n" + "\n".join(self.lines())
                + f"\n--- stderr:\n{self.err.read_text(errors='replace')}")


def start(kind: str, tmp_path: Path, extra: str = "", *args: str, log_name: str = "server.log") -> Proc:
    """Start ``kind`` with a config (client port + ``extra``) and ``args``; wait until it
    accepts clients and its log holds a line."""
    workdir = tmp_path / kind
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = workdir / "server.conf"
    conf.write_text(render_config(port, None, extra.replace("@DIR@", str(workdir))))
    log = workdir / log_name
    out, err = workdir / "stdout", workdir / "stderr"
    argv = [str(binary(kind)), "-c", str(conf), *(a.replace("@DIR@", str(workdir)) for a in args)]
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=o, stderr=e, cwd=workdir)
    p = Proc(kind, port, proc, log, out, err)
    try:
        poll(lambda: proc.poll() is not None or (_tcp_ready(port) and p.messages()),
             timeout=20, what=f"{kind} to accept clients and log", retry_on=())
        assert proc.poll() is None, p.context()
    except AssertionError:
        p.stop()
        raise
    return p


async def connect_and_close(port: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, allow_reconnect=False)
    await nc.flush()
    await nc.close()


@pytest.fixture
def started():
    procs: list[Proc] = []
    yield procs
    for p in procs:
        p.stop()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["flags", "config"])
def test_log_file_lines_have_nats_server_format_and_wording(kind, how, tmp_path, started):
    if how == "flags":
        p = start(kind, tmp_path, "", "-l", "@DIR@/server.log", "-T")
    else:
        p = start(kind, tmp_path, 'logfile: "@DIR@/server.log"\nlogtime: true\n')
    started.append(p)
    poll(lambda: "Server is ready" in p.messages(), timeout=20, what=f"{kind}: 'Server is ready'", retry_on=())
    lines = [line.rstrip("\r") for line in p.lines()]
    assert lines, p.context()
    for line in lines:
        m = LINE.fullmatch(line)
        assert m, f"{line!r} is not in nats-server's format\n{p.context()}"
        assert int(m.group(1)) == p.proc.pid
    messages = p.messages()
    assert re.fullmatch(r"Starting (nats|jetraft)-server", messages[0]), messages
    assert f"Listening for client connections on 127.0.0.1:{p.port}" in messages
    assert {LINE.fullmatch(line).group(3) for line in lines} <= {"INF", "WRN"}
    assert p.stop() == 0


@pytest.mark.parametrize("kind", KINDS)
def test_logtime_false_drops_the_timestamp(kind, tmp_path, started):
    p = start(kind, tmp_path, 'log_file: "@DIR@/server.log"\nlogtime: false\n')
    started.append(p)
    poll(lambda: "Server is ready" in p.messages(), timeout=20, what=f"{kind}: 'Server is ready'", retry_on=())
    for line in p.lines():
        assert LINE_NO_TIME.fullmatch(line.rstrip("\r")), line


@pytest.mark.parametrize("kind", KINDS)
def test_debug_flag_adds_dbg_lines(kind, tmp_path, started):
    p = start(kind, tmp_path, "", "-l", "@DIR@/server.log", "-D")
    started.append(p)
    asyncio.run(connect_and_close(p.port))
    poll(lambda: any("[DBG]" in ln for ln in p.lines()), timeout=20, what=f"{kind}: a [DBG] line", retry_on=())


@pytest.mark.parametrize("kind", KINDS)
def test_without_debug_no_dbg_lines(kind, tmp_path, started):
    p = start(kind, tmp_path, "", "-l", "@DIR@/server.log")
    started.append(p)
    asyncio.run(connect_and_close(p.port))
    p.stop()
    assert not [ln for ln in p.lines() if "[DBG]" in ln or "[TRC]" in ln], p.context()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keys", [("logfile_size_limit", "logfile_max_num"), ("log_size_limit", "log_max_num")])
def test_rotation_names_backups_as_nats_server_and_purges(kind, keys, tmp_path, started):
    size_key, num_key = keys
    p = start(kind, tmp_path, f'log_file: "@DIR@/server.log"\n{size_key}: 300\n{num_key}: 2\n', "-D")
    started.append(p)
    for _ in range(3):
        asyncio.run(connect_and_close(p.port))
    poll(lambda: any("Purged log file" in m for m in p.messages()) or
         len([f for f in p.log.parent.iterdir() if f.name.startswith("server.log.")]) >= 1,
         timeout=20, what=f"{kind}: a rotated file", retry_on=())
    p.stop()
    backups = sorted(f.name for f in p.log.parent.iterdir() if f.name.startswith("server.log."))
    assert backups, p.context()
    for name in backups:
        assert BACKUP.fullmatch(name[len("server.log"):]), name
    # logfile_max_num: 2 keeps the current file and one backup
    assert len(backups) == 1, backups
    rotated = [m for m in p.messages() if m.startswith("Rotated log, backup saved as ")]
    assert rotated, p.context()
    assert re.fullmatch(r'Rotated log, backup saved as ".*server\.log' + BACKUP.pattern + '"', rotated[-1])


def test_json_event_log_stays_on_stdout_with_a_human_log(tmp_path, started):
    p = start("jetraft", tmp_path, "", "-l", "@DIR@/server.log", "--events", "@DIR@/events.jsonl")
    started.append(p)
    assert p.stop() == 0
    for path in (p.out, p.log.parent / "events.jsonl"):
        events = [json.loads(line) for line in path.read_text().splitlines()]
        names = [e["event"] for e in events]
        assert names[0] == "server_starting" and "server_ready" in names, names
    assert not any(line.startswith("{") for line in p.lines())


@pytest.mark.parametrize("kind", KINDS)
def test_client_connection_lines_have_nats_server_wording(kind, tmp_path, started):
    p = start(kind, tmp_path, "", "-l", "@DIR@/server.log", "-D")
    started.append(p)
    asyncio.run(connect_and_close(p.port))
    created = re.compile(r"\[DBG\] 127\.0\.0\.1:\d+ - cid:\d+ - Client connection created")
    closed = re.compile(r"\[DBG\] 127\.0\.0\.1:\d+ - cid:\d+ - .*Client connection closed: Client Closed")
    poll(lambda: any(created.search(ln) for ln in p.lines()) and any(closed.search(ln) for ln in p.lines()),
         timeout=20, what=f"{kind}: client connection lines", retry_on=())


def test_events_nats_server_does_not_log_are_named_with_their_fields(tmp_path, started):
    p = start("jetraft", tmp_path, "", "-l", "@DIR@/server.log", "-js", "-sd", "@DIR@/store")
    started.append(p)

    async def add_stream() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{p.port}", connect_timeout=5, allow_reconnect=False)
        try:
            await nc.jetstream().add_stream(name="ORDERS", subjects=["orders.>"])
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(add_stream(), 30))
    line = poll(lambda: next((m for m in p.messages() if m.startswith("jetstream_stream_created ")), None),
                timeout=20, what="a jetstream_stream_created line", retry_on=())
    assert "stream=ORDERS" in line and 'subjects=["orders.>"]' in line, line


def test_syslog_is_refused_with_a_clear_error(tmp_path):
    conf = tmp_path / "s.conf"
    conf.write_text("listen: 127.0.0.1:4222\nsyslog: true\n")
    r = subprocess.run([str(binary("jetraft")), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "syslog" in r.stderr and "log_file" in r.stderr, r.stderr
    r = subprocess.run([str(binary("jetraft")), "-s", "-t"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "syslog" in r.stderr, r.stderr
    conf.write_text("listen: 127.0.0.1:4222\nsyslog: false\n")
    r = subprocess.run([str(binary("jetraft")), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_reload_moves_the_human_log_to_the_new_log_file(tmp_path, started):
    p = start("jetraft", tmp_path, 'log_file: "@DIR@/server.log"\n')
    started.append(p)
    conf = p.log.parent / "server.conf"
    conf.write_text(conf.read_text().replace("server.log", "other.log") + "logtime: false\n")
    p.proc.send_signal(signal.SIGHUP)
    other = p.log.parent / "other.log"
    line = poll(lambda: other.exists() and next((ln for ln in other.read_text().splitlines()
                                                 if "config_reloaded" in ln), None),
                timeout=20, what="the reload logged in the new file", retry_on=())
    assert LINE_NO_TIME.fullmatch(line), line
    assert not any("config_reloaded" in ln for ln in p.lines())
