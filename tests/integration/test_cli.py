"""jetraft-server as an operator runs it: -t, -v, bad flags, signals, reload, lame duck.

Each test starts the real console script in a subprocess and observes what an operator
sees: exit status, stderr, the JSON-lines event log, and client behaviour through nats-py.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import nats
import pytest
from compat_support import server_info
from polling import poll
from servers import free_port

BIN = Path(sys.executable).parent / "jetraft-server"
SEEDS = Path(__file__).resolve().parents[1] / "unit" / "config" / "seeds"
SEED_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
SEED_PASSWORD = "a very long s3cr3t! password"


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout)


class Running:
    """A jetraft-server subprocess whose stdout (the event log) is captured to a file."""

    def __init__(self, tmp_path: Path, conf: str, *extra: str) -> None:
        self.port = free_port()
        self.conf = tmp_path / "server.conf"
        self.conf.write_text(conf.replace("@PORT@", str(self.port)))
        self.out = tmp_path / "stdout.log"
        self.err = tmp_path / "stderr.log"
        self.proc = subprocess.Popen([str(BIN), "-c", str(self.conf), *extra],
                                     stdout=self.out.open("w"), stderr=self.err.open("w"))
        poll(self._ready, "jetraft-server to accept connections", retry_on=())

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited {self.proc.returncode}: {self.err.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def has_event(self, name: str) -> bool:
        return any(e["event"] == name for e in self.events())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@pytest.fixture
def running(tmp_path):
    started: list[Running] = []

    def start(conf: str, *extra: str) -> Running:
        server = Running(tmp_path, conf, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def seed_blocks() -> list[tuple[str, str]]:
    """(id, text) of every server configuration block in the seed documents.

    A block runs from ``server_name=`` to the end of its ``cluster { ... }`` block, which is
    the last block of every server configuration in the seeds.
    """
    blocks = []
    for path in sorted(SEEDS.glob("*.txt")):
        text = path.read_text()
        for i, start in enumerate(m.start() for m in re.finditer(r"^server_name=", text, re.M)):
            cluster = text.index("cluster {", start)
            end = re.compile(r"^}\s*$", re.M).search(text, cluster).end()
            blocks.append((f"{path.stem[:3]}-{i}", text[start:end] + "\n"))
    return blocks


@pytest.mark.parametrize("block", seed_blocks(), ids=lambda b: b[0])
def test_seed_configurations_are_valid(tmp_path, block):
    name, text = block
    store = tmp_path / "storage"
    conf = tmp_path / f"{name}.conf"
    conf.write_text(text.replace("host_a", "127.0.0.1").replace("host_b", "127.0.0.2")
                    .replace("host_c", "127.0.0.3").replace("/nats/storage", str(store)))
    result = run_cli("-t", "-c", str(conf))
    assert result.returncode == 0, result.stderr
    assert f"configuration file {conf} is valid" in result.stderr
    assert not store.exists(), "-t must not create the store directory"


def test_seed_blocks_found():
    # The seeds hold 3 server blocks per document (4 documents).
    assert len(seed_blocks()) == 12


def test_broken_configuration_names_file_line_and_column(tmp_path):
    conf = tmp_path / "broken.conf"
    conf.write_text("listen: 4222\ncluster {\n  name: C1\n  listen: [\n")
    result = run_cli("-t", "-c", str(conf))
    assert result.returncode == 1
    assert re.search(rf"{re.escape(str(conf))}:\d+:\d+: ", result.stderr), result.stderr


def test_wrong_type_is_an_error(tmp_path):
    conf = tmp_path / "types.conf"
    conf.write_text('port: "not a number"\n')
    result = run_cli("-t", "-c", str(conf))
    assert result.returncode == 1
    assert f"{conf}:1:" in result.stderr


def test_missing_file(tmp_path):
    result = run_cli("-t", "-c", str(tmp_path / "absent.conf"))
    assert result.returncode == 1
    assert "absent.conf" in result.stderr


def test_version():
    result = run_cli("-v")
    assert result.returncode == 0
    assert re.match(r"jetraft-server: v\d+\.\d+\.\d+", result.stdout)


def test_jetstream_flags_serve_a_stream_that_survives_a_restart(running, tmp_path):
    """-js -sd DIR: JetStream answers nats-py, files land under DIR, and a restart on the
    same directory brings the stream back with its messages."""
    store = tmp_path / "js"

    async def publish_and_read(port: int, publish: bool) -> list[bytes]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        js = nc.jetstream()
        if publish:
            await js.add_stream(name="CLI", subjects=["cli.>"])
            for i in range(3):
                ack = await js.publish(f"cli.{i}", b"m%d" % i)
                assert ack.seq == i + 1
        msgs = [(await js.get_msg("CLI", seq)).data for seq in (1, 2, 3)]
        await nc.close()
        return msgs

    first = running("listen: 127.0.0.1:@PORT@\n", "-js", "-sd", str(store))
    assert asyncio.run(publish_and_read(first.port, True)) == [b"m0", b"m1", b"m2"]
    assert first.stop() == 0
    assert (store / "jetstream" / "$G" / "streams" / "CLI" / "meta.json").exists()
    enabled = [e for e in first.events() if e["event"] == "jetstream_enabled"]
    assert enabled and enabled[0]["store_dir"] == str(store) and enabled[0]["sync"] == "always"

    again = running("listen: 127.0.0.1:@PORT@\n", "-js", "-sd", str(store))
    assert asyncio.run(publish_and_read(again.port, False)) == [b"m0", b"m1", b"m2"]
    recovered = [e for e in again.events() if e["event"] == "jetstream_stream_recovered"]
    assert recovered == [dict(recovered[0], stream="CLI", messages=3, last_seq=3)]
    assert again.stop() == 0


def test_cluster_flags_are_validated(tmp_path):
    result = run_cli("-t", "--cluster_name", "C1", "--cluster", "nats://127.0.0.1:6222",
                     "--routes", "nats://127.0.0.1:6223,nats-route://127.0.0.1:6224")
    assert result.returncode == 0, result.stderr
    result = run_cli("-t", "--cluster_name", "C1", "--cluster", "nats://127.0.0.1:notaport")
    assert result.returncode != 0
    assert "invalid cluster URL" in result.stderr and "port is not a number" in result.stderr


def test_cluster_flags_start_a_route_listener(running):
    port = free_port()
    server = running(f"listen: 127.0.0.1:@PORT@\ncluster {{ name: C1, listen: 127.0.0.1:{port} }}\n")
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    assert server.stop() == 0
    listening = [e for e in server.events() if e["event"] == "listening"]
    assert {"kind": "cluster", "port": port} in [{"kind": e["kind"], "port": e["port"]} for e in listening]


def test_sigterm_stops_cleanly(running):
    server = running("listen: 127.0.0.1:@PORT@\n")
    assert server.stop() == 0
    names = [e["event"] for e in server.events()]
    assert names[0] == "server_starting"
    assert "server_ready" in names and names[-1] == "server_stopped"


def test_event_log_schema(running, tmp_path):
    log_file = tmp_path / "events.jsonl"
    server = running('listen: 127.0.0.1:@PORT@\nserver_name: "ev-1"\n', "--events", str(log_file))
    server.stop()
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert lines, "the event log file is empty"
    for record in lines:
        assert {"ts", "v", "server_name", "level", "event"} <= record.keys()
        assert record["server_name"] == "ev-1"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", record["ts"])
    assert [r["event"] for r in lines] == [e["event"] for e in server.events()]


AUTH_CONF = """
listen: 127.0.0.1:@PORT@
accounts {
  $SYS { users = [ { user: "admin", pass: "@PASS@" } ] }
  APP { users = [ { user: "app", pass: "app-secret" } ] }
}
"""


def test_passwords_never_logged(running):
    server = running(AUTH_CONF.replace("@PASS@", SEED_HASH), "-DV")

    async def scenario():
        with pytest.raises(Exception):
            await nats.connect(f"nats://admin:wrong-{SEED_PASSWORD.replace(' ', '')}@127.0.0.1:{server.port}",
                               allow_reconnect=False, connect_timeout=5)
        nc = await nats.connect(f"nats://app:app-secret@127.0.0.1:{server.port}", connect_timeout=5)
        await nc.close()

    asyncio.run(scenario())
    poll(lambda: server.has_event("auth_failed"), "auth_failed event", retry_on=())
    server.stop()
    log = server.out.read_text() + server.err.read_text()
    assert "app-secret" not in log
    assert "wrong-" not in log
    failed = [e for e in server.events() if e["event"] == "auth_failed"]
    assert failed[0]["user"] == "admin"


def test_sighup_reload_changes_users(running):
    server = running(AUTH_CONF.replace("@PASS@", "old-password"))
    url_old = f"nats://admin:old-password@127.0.0.1:{server.port}"
    url_new = f"nats://admin:new-password@127.0.0.1:{server.port}"

    async def scenario():
        closed = asyncio.Event()

        async def on_closed():
            closed.set()

        nc = await nats.connect(url_old, allow_reconnect=False, closed_cb=on_closed, connect_timeout=5)
        other = await nats.connect(f"nats://app:app-secret@127.0.0.1:{server.port}", connect_timeout=5)
        server.conf.write_text(server.conf.read_text().replace("old-password", "new-password"))
        server.proc.send_signal(signal.SIGHUP)
        await asyncio.wait_for(closed.wait(), 10)  # admin's credentials no longer hold
        assert other.is_connected  # app's did not change
        nc2 = await nats.connect(url_new, connect_timeout=5)
        await nc2.close()
        with pytest.raises(Exception):
            await nats.connect(url_old, allow_reconnect=False, connect_timeout=5)
        await other.close()

    asyncio.run(scenario())
    assert server.has_event("config_reloaded")


def test_sighup_refuses_broken_file_and_keeps_serving(running):
    server = running("listen: 127.0.0.1:@PORT@\n")
    server.conf.write_text("listen: 127.0.0.1:@PORT@\nmax_payload: {\n")
    server.proc.send_signal(signal.SIGHUP)
    poll(lambda: server.has_event("config_reload_failed"), "config_reload_failed", retry_on=())

    async def scenario():
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}", connect_timeout=5)
        await nc.flush()
        await nc.close()

    asyncio.run(scenario())
    assert server.stop() == 0


def test_sighup_with_another_pid_file_writes_it_and_the_stop_removes_it(running, tmp_path):
    """pid_file is reloadable (nats-server reload.go pidFileOption): the new file holds the
    server's PID at once, and a clean stop removes the file the server last wrote."""
    first, second = tmp_path / "first.pid", tmp_path / "second.pid"
    server = running(f'listen: 127.0.0.1:@PORT@\npid_file: "{first}"\n')
    poll(first.exists, "first pid file")
    server.conf.write_text(server.conf.read_text().replace(str(first), str(second)))
    server.proc.send_signal(signal.SIGHUP)
    poll(lambda: second.exists() and second.read_text().strip() != "", "second pid file", retry_on=())
    assert second.read_text() == f"{server.proc.pid}\n"
    assert oct(second.stat().st_mode & 0o777) == "0o600"
    assert server.stop() == 0
    assert not second.exists()


def test_lame_duck_informs_clients_and_stops(running, tmp_path):
    pid_file = tmp_path / "server.pid"
    http_port = free_port()
    # a grace period longer than a loaded machine takes to check the draining server: its
    # last client closes first, and the server stops then
    server = running("listen: 127.0.0.1:@PORT@\nlame_duck_duration: \"30s\"\n"
                     f"lame_duck_grace_period: \"25s\"\npid_file: \"{pid_file}\"\n"
                     f"http: 127.0.0.1:{http_port}\n")
    healthz = f"http://127.0.0.1:{http_port}/healthz"
    # the monitoring listener may come up a moment after the client port
    poll(lambda: urllib.request.urlopen(healthz, timeout=5).status == 200, "healthz answers 200")
    poll(pid_file.exists, "pid file")

    async def scenario():
        ldm = asyncio.Event()

        async def on_ldm():
            ldm.set()

        nc = await nats.connect(f"nats://127.0.0.1:{server.port}", lame_duck_mode_cb=on_ldm,
                                allow_reconnect=False, connect_timeout=5)
        result = run_cli("--signal", f"ldm={pid_file}")
        assert result.returncode == 0, result.stderr
        await asyncio.wait_for(ldm.wait(), 10)
        with pytest.raises(urllib.error.HTTPError) as unhealthy:  # still draining: 503
            urllib.request.urlopen(healthz, timeout=5)
        assert unhealthy.value.code == 503
        with pytest.raises(ConnectionRefusedError):  # no new clients in lame duck mode
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        await nc.close()

    asyncio.run(scenario())
    assert server.proc.wait(timeout=15) == 0
    assert server.has_event("lame_duck_started")
    assert not pid_file.exists()


def test_signal_without_pid_is_explained():
    result = run_cli("--signal", "reload")
    assert result.returncode == 1
    assert "no PID given" in result.stderr


def test_port_in_use_is_reported(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run_cli("-a", "127.0.0.1", "-p", str(port))
    assert result.returncode == 1
    assert "cannot start" in result.stderr


def test_flags_override_file(running):
    server = running("listen: 127.0.0.1:@PORT@\nserver_name: from-file\n", "-n", "from-flag")

    async def scenario():
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}", connect_timeout=5)
        name = server_info(nc).get("server_name")
        await nc.close()
        return name

    assert asyncio.run(scenario()) == "from-flag"


def test_sync_interval_relaxes_fsync_before_ack(running, tmp_path):
    """An explicit sync_interval acknowledges at once and syncs every interval; a clean stop
    still syncs, so the messages are there after a restart."""
    store = tmp_path / "js"
    conf = f'listen: 127.0.0.1:@PORT@\njetstream {{ store_dir: "{store}", sync_interval: "30s" }}\n'

    async def publish(port: int, count: int) -> list[int]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="LAZY", subjects=["lazy"])
        seqs = [(await js.publish("lazy", b"x")).seq for _ in range(count)]
        await nc.close()
        return seqs

    async def stored(port: int) -> int:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        info = await nc.jsm().stream_info("LAZY")
        await nc.close()
        return info.state.messages

    server = running(conf)
    assert asyncio.run(publish(server.port, 5)) == [1, 2, 3, 4, 5]
    enabled = [e for e in server.events() if e["event"] == "jetstream_enabled"]
    assert enabled[0]["sync"] == 30.0
    assert server.stop() == 0
    again = running(conf)
    assert asyncio.run(stored(again.port)) == 5
    assert again.stop() == 0
