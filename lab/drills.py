"""Zone-loss drills: faults through pyinfra over SSH while a client publishes and reads back.

The same drills run on the nspawn lab, on Vagrant machines and on real hosts: they read
the Ansible inventory (``ansible-inventory --list``) and touch hosts only over SSH, with
pyinfra's Python API:

- a crash is ``systemctl kill --signal=SIGKILL`` of jetraft.service followed by a stop
  (so that Restart=on-failure does not bring it back during the drill);
- a partition is an nftables table on each host of the zone that drops traffic to and
  from the other servers (SSH from the controller keeps working);
- healing deletes that table and starts the servers again.

The client and the monitoring requests speak TLS when the inventory's servers do
(``jetraft_server_tls``, on unless set false), verifying each server against the cluster's
CA bundle on the controller (``<jetraft_certs_dir>/ca-bundle.crt``; by default the
inventory's directory's ``pki/``).

A client (nats-py) publishes to an R3 stream (one replica per zone through unique_tag)
with a unique ``Nats-Msg-Id`` per attempt throughout. Every attempt goes to a ledger
(``lab/artifacts/<run>/<drill>.ledger.jsonl``): sent and acknowledged times in
nanoseconds since the epoch, the stream sequence or the error. At the end the stream is
read back and every acknowledged message must be in it.

The zone drills (kill, partition, pause, lose two zones) run two more workloads through the
same client, from before the fault until healed (lab/features.py): messages with a 2 s
``Nats-TTL`` to an R3 stream with ``allow_msg_ttl``, each looked for until 4 s after its
TTL passed (``<drill>.ttl.jsonl``; none may be served more than 1 s after it), and
increments of an R3 counter stream, an attempt of unknown outcome retried with its
``Nats-Msg-Id`` (``<drill>.counter.jsonl``; the value read back once healed must be the
sum of the acknowledged increments, within what the unknown ones allow).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import ssl
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
from nats.js.api import StreamConfig, StreamSource

UNIT = "jetraft.service"
NFT_TABLE = "jetraft_drill"
#: Bounds: a drill never publishes more than this many messages, nor waits longer than
#: this many seconds for a condition.
MAX_MESSAGES = 20_000
DEADLINE_S = 120.0


class DrillError(Exception):
    """A drill could not run (a host unreachable, a fault not applied, a deadline missed)."""


@dataclass(frozen=True)
class Server:
    """One server of the cluster as the inventory gives it."""

    name: str
    address: str
    zone: str


@dataclass
class Target:
    """The cluster under drill, read from an Ansible inventory."""

    servers: list[Server]
    ssh_user: str
    ssh_key: str | None
    known_hosts: str | None
    app_user: str
    app_password: str
    client_port: int = 4222
    http_port: int = 8222
    #: The CA bundle servers are verified against (None: the servers do not speak TLS).
    ca_file: str | None = None

    @classmethod
    def from_inventory(cls, inventory: Path, group: str = "jetraft") -> "Target":
        """Read ``inventory`` with ``ansible-inventory --list``. The client account is the
        first user of the first JetStream account in ``jetraft_server_accounts``. With TLS
        (``jetraft_server_tls``, default true) the CA bundle is ``ca-bundle.crt`` in
        ``jetraft_certs_dir`` (default ``pki/`` beside the inventory). Raises DrillError
        when the inventory has no such group or no such user."""
        data = inventory_list(inventory)
        hostvars = data.get("_meta", {}).get("hostvars", {})
        names = _group_hosts(data, group)
        if not names:
            raise DrillError(f"the inventory {inventory} has no hosts in group {group!r}")
        servers = [Server(n, hostvars[n].get("ansible_host", n),
                          str(hostvars[n].get("jetraft_zone", "?"))) for n in names]
        first = hostvars[names[0]]
        accounts = first.get("jetraft_server_accounts") or {}
        users = [u for a in accounts.values() if a.get("jetstream") for u in a.get("users", [])]
        if not users:
            raise DrillError("no JetStream account with a user in jetraft_server_accounts: "
                             "the drills' client needs one")
        known = None
        for word in shlex.split(first.get("ansible_ssh_common_args", "")):
            if word.startswith("UserKnownHostsFile="):
                known = word.split("=", 1)[1]
        ca_file = None
        if _truthy(first.get("jetraft_server_tls", True)):
            inventory_dir = inventory if inventory.is_dir() else inventory.parent
            certs_dir = first.get("jetraft_certs_dir")
            if not certs_dir or "{{" in str(certs_dir):
                certs_dir = inventory_dir / "pki"
            ca_file = str(Path(certs_dir) / "ca-bundle.crt")
        return cls(servers=servers, ssh_user=first.get("ansible_user", "root"),
                   ssh_key=first.get("ansible_ssh_private_key_file"), known_hosts=known,
                   app_user=users[0]["user"], app_password=users[0]["password"],
                   client_port=int(first.get("jetraft_server_client_port", 4222)),
                   http_port=int(first.get("jetraft_server_http_port", 8222)),
                   ca_file=ca_file)

    def zone(self, zone: str) -> list[Server]:
        return [s for s in self.servers if s.zone == zone]

    def zones(self) -> list[str]:
        return sorted({s.zone for s in self.servers})

    def urls(self, exclude: list[Server] = ()) -> list[str]:
        return [f"nats://{s.address}:{self.client_port}" for s in self.servers if s not in exclude]

    def server_at(self, host: str | None) -> str | None:
        """The name of the server at address ``host`` (None if none is)."""
        return next((s.name for s in self.servers if s.address == host), None)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context verifying servers (names and addresses) against the CA bundle;
        None when the servers do not speak TLS. Raises DrillError when the bundle is not
        there."""
        if self.ca_file is None:
            return None
        if not Path(self.ca_file).is_file():
            raise DrillError(f"no CA bundle at {self.ca_file}: site.yml makes it (the servers "
                             "speak TLS; set jetraft_certs_dir if it is elsewhere)")
        return ssl.create_default_context(cafile=self.ca_file)

    def monitor_url(self, server: Server, path: str) -> str:
        """``server``'s monitoring endpoint ``path`` (https with TLS)."""
        scheme = "https" if self.ca_file else "http"
        return f"{scheme}://{server.address}:{self.http_port}{path}"

    def get_json(self, server: Server, path: str) -> dict:
        """GET ``path`` on ``server``'s monitoring port (2 s timeout); the decoded JSON."""
        with urllib.request.urlopen(self.monitor_url(server, path), timeout=2,
                                    context=self.ssl_context()) as response:
            return json.load(response)


def _truthy(value: object) -> bool:
    """An inventory boolean (YAML true/false, or Ansible's strings yes/no/true/false)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def inventory_list(inventory: Path) -> dict:
    """``ansible-inventory -i inventory --list`` as a dict; DrillError when it fails."""
    tool = Path(sys.executable).with_name("ansible-inventory")
    result = subprocess.run([str(tool), "-i", str(inventory), "--list"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise DrillError(f"ansible-inventory -i {inventory} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def inventory_hosts(inventory: Path, group: str = "jetraft") -> list[str]:
    """The names of the hosts in ``group`` of ``inventory`` (its child groups included);
    DrillError when ansible-inventory fails."""
    return _group_hosts(inventory_list(inventory), group)


def _group_hosts(data: dict, group: str) -> list[str]:
    entry = data.get(group, {})
    names = list(entry.get("hosts", []))
    for child in entry.get("children", []):
        names += [n for n in _group_hosts(data, child) if n not in names]
    return names


class Nemesis:
    """Faults on the target's hosts through pyinfra over SSH. pyinfra (gevent) runs in one
    worker thread of its own; the coroutines here wait for it without blocking the client."""

    def __init__(self, target: Target):
        self.target = target
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="nemesis")
        self._hosts = self._pool.submit(self._connect).result()

    def _connect(self) -> dict:
        from pyinfra.api import Config, Inventory, State
        from pyinfra.api.connect import connect_all

        # pyinfra keeps the host keys it read from a known_hosts file for the life of the
        # process: a new lab or a replaced host (new host keys, same file) would be refused
        # as a changed key, so the file is read again at each connect
        from pyinfra.connectors.sshuserclient.client import get_host_keys
        getattr(get_host_keys, "cache", {}).clear()
        data = {"ssh_user": self.target.ssh_user}
        if self.target.ssh_key:
            data["ssh_key"] = self.target.ssh_key
        if self.target.known_hosts:
            data.update(ssh_known_hosts_file=self.target.known_hosts,
                        ssh_strict_host_key_checking="yes")
        inventory = Inventory(([(s.address, dict(data)) for s in self.target.servers], {}))
        state = State(inventory, Config(CONNECT_TIMEOUT=5))
        connect_all(state)
        hosts = {h.name: h for h in inventory.iter_activated_hosts()}
        missing = [s.name for s in self.target.servers if s.address not in hosts]
        if missing:
            raise DrillError(f"cannot reach {', '.join(missing)} over SSH")
        return {s.name: hosts[s.address] for s in self.target.servers}

    def _run(self, servers: list[Server], command: str) -> None:
        from pyinfra.api.command import StringCommand

        for s in servers:
            ok, output = self._hosts[s.name].run_shell_command(StringCommand(command))
            if not ok:
                raise DrillError(f"{s.name}: `{command}` failed: "
                                 f"{' '.join(getattr(output, 'stderr_lines', []) or [])}")

    async def _do(self, servers: list[Server], command: str) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, self._run, servers, command)

    async def crash(self, servers: list[Server]) -> None:
        """SIGKILL the servers (no lame duck, nothing flushed), and keep them down."""
        await self._do(servers, f"systemctl kill --signal=SIGKILL {UNIT}; systemctl stop {UNIT}")

    async def start(self, servers: list[Server]) -> None:
        await self._do(servers, f"systemctl start {UNIT}")

    async def partition(self, servers: list[Server]) -> None:
        """Drop traffic between ``servers`` and every other server, both ways."""
        others = ", ".join(s.address for s in self.target.servers if s not in servers)
        rules = (f"table inet {NFT_TABLE} {{\n"
                 f" chain input {{ type filter hook input priority -10; ip saddr {{ {others} }} drop; }}\n"
                 f" chain output {{ type filter hook output priority -10; ip daddr {{ {others} }} drop; }}\n"
                 "}\n")
        await self._do(servers, f"printf %s {shlex.quote(rules)} | nft -f -")

    async def pause(self, servers: list[Server]) -> None:
        """SIGSTOP the servers: alive, connections open, silent (a stalled host)."""
        await self._do(servers, f"systemctl kill --signal=SIGSTOP {UNIT}")

    async def resume(self, servers: list[Server]) -> None:
        await self._do(servers, f"systemctl kill --signal=SIGCONT {UNIT}")

    async def heal(self, servers: list[Server]) -> None:
        await self._do(servers, f"nft delete table inet {NFT_TABLE} 2>/dev/null || true")

    def close(self) -> None:
        def disconnect():
            for h in self._hosts.values():
                h.disconnect()
        self._pool.submit(disconnect).result()
        self._pool.shutdown()


@dataclass
class Attempt:
    """One publish: ``sent_ns``/``acked_ns`` are nanoseconds since the epoch."""

    msg_id: str
    sent_ns: int
    acked_ns: int | None = None
    stream_seq: int | None = None
    error: str | None = None


@dataclass
class DrillResult:
    """What a drill measured. ``lost``: acknowledged message ids missing from the stream;
    ``duplicates``: ids stored more than once; ``unexpected``: stored ids never attempted;
    ``misplaced``: acknowledged ids stored at another stream sequence than acknowledged.

    The fault's timeline, for the Spark validation (jetraft.validation): ``servers`` hit by
    the fault, ``stream`` and its RAFT ``group``, and nanoseconds since the epoch when the
    fault began (``fault_ns``), when the fault was in place (``applied_ns``: the kill,
    partition or pause command returned), when it was repaired (``repair_ns``: servers started
    again, partition healed, SIGCONT) and when every replica was current again
    (``healed_ns``). ``client_server``: the server the drill's client was connected to when
    the fault began; ``client_reconnects``: how often it reconnected during the drill (a
    client on a stalled server waits for its PINGs, and for TLS, to give up before it moves
    on)."""

    name: str
    stream: str = ""
    group: str | None = None
    servers: list[str] = field(default_factory=list)
    fault_ns: int | None = None
    applied_ns: int | None = None
    repair_ns: int | None = None
    healed_ns: int | None = None
    attempted: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    seconds_without_writes: float = 0.0
    acked_during_outage: int = 0
    meta_answered: bool | None = None
    replicas_current: bool = False
    duration_s: float = 0.0
    client_server: str | None = None
    client_reconnects: int = 0
    #: Seconds the drill's playbook ran (day-two drills, lab/day_two.py).
    playbook_s: float = 0.0
    ledger: str = ""
    #: What the drill stream's R3 mirror and R3 sourcing stream hold that differs from the
    #: drained stream once healed (empty: each holds every message once, the mirror at
    #: the same sequences); None when the drill has no copies.
    copy_problems: list[str] | None = None
    #: The zone drills' TTL'd messages (lab/features.py, ``<drill>.ttl.jsonl``): published,
    #: acknowledged, and the ids of those served more than 1 s after their TTL passed.
    ttl_ledger: str = ""
    ttl_published: int = 0
    ttl_acknowledged: int = 0
    ttl_outlived: list[str] = field(default_factory=list)
    #: The zone drills' counter (``<drill>.counter.jsonl``): increments (Nats-Msg-Ids)
    #: acknowledged and of unknown outcome, the range [counter_low, counter_high] its final
    #: value must be in, and the value read back once healed (None: not read).
    counter_ledger: str = ""
    counter_acknowledged: int = 0
    counter_unknown: int = 0
    counter_low: int | None = None
    counter_high: int | None = None
    counter_final: int | None = None

    @property
    def counter_ok(self) -> bool | None:
        """The counter read back is within [counter_low, counter_high] (None: not read)."""
        if self.counter_final is None or self.counter_low is None or self.counter_high is None:
            return None
        return self.counter_low <= self.counter_final <= self.counter_high

    def summary(self) -> dict:
        d = asdict(self)
        for key in ("lost", "duplicates", "unexpected", "misplaced", "ttl_outlived"):
            d[key] = len(getattr(self, key))
        d.pop("copy_problems")
        return d


class Workload:
    """Publishes ``<subject>`` messages with unique Nats-Msg-Ids until stopped."""

    def __init__(self, js, subject: str, run_id: str, pause_s: float = 0.005):
        self.js, self.subject, self.run_id, self.pause_s = js, subject, run_id, pause_s
        self.attempts: list[Attempt] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        self._stop.set()
        if self._task:
            await self._task

    async def _loop(self) -> None:
        while not self._stop.is_set() and len(self.attempts) < MAX_MESSAGES:
            a = Attempt(f"{self.run_id}-{len(self.attempts) + 1}", time.time_ns())
            self.attempts.append(a)
            try:
                ack = await self.js.publish(self.subject, a.msg_id.encode(), timeout=1.0,
                                            headers={"Nats-Msg-Id": a.msg_id})
                a.acked_ns, a.stream_seq = time.time_ns(), ack.seq
            except Exception as exc:          # every failure is recorded, none is fatal
                a.error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(0.05)
            await asyncio.sleep(self.pause_s)

    def acked(self) -> list[Attempt]:
        return [a for a in self.attempts if a.acked_ns is not None]

    async def wait_acks(self, after_ns: int, count: int, what: str) -> None:
        """Wait until ``count`` publishes sent after ``after_ns`` are acknowledged."""
        await until(lambda: sum(1 for a in self.acked() if a.sent_ns > after_ns) >= count,
                    what)

    def longest_gap_s(self, start_ns: int, end_ns: int) -> float:
        """The longest time between acknowledgements in [start_ns, end_ns], in seconds."""
        marks = [start_ns] + sorted(a.acked_ns for a in self.acked()
                                    if start_ns <= a.acked_ns <= end_ns) + [end_ns]
        return max(b - a for a, b in zip(marks, marks[1:])) / 1e9


async def until(predicate, what: str, timeout_s: float = DEADLINE_S) -> None:
    """Poll ``predicate`` (sync or async) every 0.2 s until true; DrillError past the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            try:
                value = await value
            except Exception:
                value = False
        if value:
            return
        await asyncio.sleep(0.2)
    raise DrillError(f"not within {timeout_s:.0f} s: {what}")


class Drills:
    """Runs the drills against ``target``, writing ledgers into ``artifacts``."""

    #: Seconds between a publish's answer and the next publish.
    workload_pause_s = 0.005

    def __init__(self, target: Target, artifacts: Path, log=print):
        self.target, self.artifacts, self.log = target, artifacts, log
        artifacts.mkdir(parents=True, exist_ok=True)
        self.run_id = artifacts.name

    async def _connect(self, exclude: list[Server] = ()):
        nc = await nats.connect(servers=self.target.urls(exclude), user=self.target.app_user,
                                password=self.target.app_password, connect_timeout=2,
                                tls=self.target.ssl_context(),
                                # a silent server is left after about 2 s (as a client
                                # that must ride out a stalled host would be set up)
                                ping_interval=1, max_outstanding_pings=2,
                                reconnect_time_wait=0.2, max_reconnect_attempts=-1,
                                allow_reconnect=True, error_cb=_quiet, disconnected_cb=_quiet_cb,
                                reconnected_cb=_quiet_cb, closed_cb=_quiet_cb)
        return nc, nc.jetstream(timeout=2.0)

    async def _stream(self, js, name: str) -> str:
        subject = f"drill.{name.lower()}"
        await self._recreate(js, StreamConfig(name=name, subjects=[subject], num_replicas=3,
                                              duplicate_window=120.0),
                             f"stream {name} created (R3, one replica per zone)")
        return subject

    @staticmethod
    async def _recreate(js, config: StreamConfig, what: str) -> None:
        """Delete the stream ``config`` names (if there is one) and create it, asked again to
        a deadline."""
        async def create():
            try:
                await js.delete_stream(config.name)
            except Exception:
                pass
            await js.add_stream(config)
            return True
        await until(create, what)

    async def _all_current(self, js, stream: str) -> bool:
        info = await js.stream_info(stream)
        replicas = info.cluster.replicas or [] if info.cluster else []
        if not info.cluster or not info.cluster.leader or len(replicas) != 2:
            return False
        if not all(r.current and not r.offline for r in replicas):
            return False
        return all(self._meta_current(s) for s in self.target.servers[:1])

    def _meta_current(self, server: Server) -> bool:
        """The meta group, as ``server``'s /jsz reports it: a leader, every peer current."""
        jsz = self.target.get_json(server, "/jsz")
        meta = jsz.get("meta_cluster", {})
        if not meta.get("leader"):
            return False
        if meta["leader"] != server.name:
            leader = next((s for s in self.target.servers if s.name == meta["leader"]), None)
            if leader is None:
                return False
            meta = self.target.get_json(leader, "/jsz").get("meta_cluster", {})
        replicas = meta.get("replicas", [])
        return len(replicas) == len(self.target.servers) - 1 and all(
            r.get("current") for r in replicas)

    async def _read_back(self, js, stream: str, subject: str) -> list[tuple[int, str]]:
        """Drain ``stream``: (stream sequence, Nats-Msg-Id) of every message, in order."""
        sub = await js.pull_subscribe(subject, stream=stream)
        drained: list[tuple[int, str]] = []
        try:
            while True:
                try:
                    msgs = await sub.fetch(500, timeout=2.0)
                except nats.errors.TimeoutError:
                    break
                for m in msgs:
                    msg_id = m.headers.get("Nats-Msg-Id") if m.headers else m.data.decode()
                    drained.append((m.metadata.sequence.stream, msg_id))
                    await m.ack()
        finally:
            await sub.unsubscribe()
        return drained

    async def _meta_answers(self, js, stream: str, probes: list[str]) -> bool:
        """Stream info of ``stream``, and a new (R1) stream created. Each attempt uses a new
        name (appended to ``probes`` for deletion after the repair): right after a fault,
        the meta leader may still place an attempt on a server it has not yet noticed is
        gone, and that stream answers only once that server is back."""
        await until(lambda: js.stream_info(stream), f"stream info of {stream}")

        async def create():
            probe = f"{stream}_META{len(probes) + 1}"
            probes.append(probe)
            await js.add_stream(StreamConfig(name=probe, subjects=[f"drill.{probe.lower()}"],
                                             num_replicas=1))
            return True
        await until(create, f"a new stream created through the meta group ({stream}_META*)")
        return True

    async def _delete(self, js, names: list[str]) -> None:
        for name in names:
            await until(lambda: _deleted(js, name), f"stream {name} deleted", timeout_s=30)

    def _finish(self, result: DrillResult, work: Workload, drained: list[tuple[int, str]],
                started: float) -> DrillResult:
        """Write the ledger (every attempt, ``present`` in the drained stream or not) and the
        drained stream (``<drill>.stream.jsonl``), and compare them: acknowledged but
        missing (lost), stored twice (duplicates), stored but never attempted (unexpected),
        stored at another sequence than its acknowledgement said (misplaced)."""
        stored: dict[str, list[int]] = {}
        for seq, msg_id in drained:
            stored.setdefault(msg_id, []).append(seq)
        ledger = self.artifacts / f"{result.name}.ledger.jsonl"
        with ledger.open("w") as f:
            for a in work.attempts:
                f.write(json.dumps({"drill": result.name, **asdict(a),
                                    "present": a.msg_id in stored}) + "\n")
        with (self.artifacts / f"{result.name}.stream.jsonl").open("w") as f:
            for seq, msg_id in drained:
                f.write(json.dumps({"drill": result.name, "stream_seq": seq,
                                    "msg_id": msg_id}) + "\n")
        attempted = {a.msg_id for a in work.attempts}
        result.ledger = str(ledger)
        result.attempted = len(work.attempts)
        result.acknowledged = len(work.acked())
        result.lost = [a.msg_id for a in work.acked() if a.msg_id not in stored]
        result.duplicates = [m for m, seqs in stored.items() if len(seqs) > 1]
        result.unexpected = [m for m in stored if m not in attempted]
        result.misplaced = [a.msg_id for a in work.acked()
                            if a.msg_id in stored and stored[a.msg_id] != [a.stream_seq]]
        result.duration_s = round(time.monotonic() - started, 1)
        (self.artifacts / f"{result.name}.json").write_text(json.dumps(result.summary(), indent=2))
        self.log(f"drill {result.name}: {result.attempted} attempted, {result.acknowledged} "
                 f"acknowledged, {len(result.lost)} lost, "
                 f"{result.seconds_without_writes:.2f} s without writes "
                 f"(client on {result.client_server or '?'}, {result.client_reconnects} reconnects)")
        return result

    async def kill_zone(self, zone: str, nemesis: Nemesis) -> DrillResult:
        """Crash every server of ``zone`` under load: writes resume on the other zones, the
        meta group answers, and after a restart every replica is current again."""
        return await self._outage(f"kill-zone-{zone}", self.target.zone(zone), nemesis,
                                  fault=nemesis.crash, repair=nemesis.start)

    async def partition_zone(self, zone: str, nemesis: Nemesis) -> DrillResult:
        """Cut ``zone`` off from the other servers (the client stays on the others)."""
        servers = self.target.zone(zone)
        return await self._outage(f"partition-zone-{zone}", servers, nemesis,
                                  fault=nemesis.partition, repair=nemesis.heal,
                                  client_excludes=servers)

    async def pause_leader(self, nemesis: Nemesis) -> DrillResult:
        """Stall the stream's leader (SIGSTOP): a new leader must take over and the client
        move on; after SIGCONT the old leader must catch up and lose nothing."""
        return await self._outage("pause-leader", None, nemesis, fault=nemesis.pause,
                                  repair=nemesis.resume)

    async def _leader(self, js, stream: str) -> list[Server]:
        info = await js.stream_info(stream)
        leader = info.cluster.leader if info.cluster else None
        found = [s for s in self.target.servers if s.name == leader]
        if not found:
            raise DrillError(f"stream {stream} has no known leader ({leader!r})")
        return found

    async def _begin(self, js, name: str, servers: list[Server] | None, *, copies: bool = False):
        """Log the drill, make its stream (with ``copies``, an R3 mirror of it and an R3
        stream sourcing it, :meth:`_check_copies`) and start the workload; returns (stream,
        subject, workload) once 50 publishes are acknowledged."""
        self.log(f"drill {name}: {', '.join(s.name for s in servers or []) or 'the stream leader'}")
        stream = name.upper().replace("-", "_")
        subject = await self._stream(js, stream)
        if copies:
            await self._copies(js, stream)
        info = await js.stream_info(stream)
        group = info.cluster.raft_group if info.cluster else None
        work = Workload(js, subject, f"{self.run_id}-{name}", pause_s=self.workload_pause_s)
        work.start()
        await work.wait_acks(0, 50, "50 acknowledged publishes before the fault")
        return stream, group, subject, work

    async def _copies(self, js, stream: str) -> None:
        for name, extra in ((f"{stream}_M", {"mirror": StreamSource(name=stream)}),
                            (f"{stream}_S", {"sources": [StreamSource(name=stream)]})):
            await self._recreate(js, StreamConfig(name=name, num_replicas=3, **extra),
                                 f"stream {name} created (R3, from {stream})")

    async def _check_copies(self, js, stream: str, subject: str, drained: list[tuple[int, str]],
                            result: DrillResult) -> None:
        """The drill stream's mirror holds its messages at the same sequences, and its
        sourcing stream each of them once, once both have caught up (to a deadline)."""
        want = [msg_id for _, msg_id in drained]
        problems: list[str] = []
        for name in (f"{stream}_M", f"{stream}_S"):
            async def caught_up(name=name):
                return (await js.stream_info(name)).state.messages >= len(drained)
            try:
                await until(caught_up, f"{name} holds the {len(drained)} messages of {stream}")
            except DrillError as exc:
                problems.append(str(exc))
                continue
            copy = await self._read_back(js, name, subject)
            if name.endswith("_M") and copy != drained:
                problems.append(f"{name}: {len(copy)} messages, differing from {stream} at "
                                f"{next((i for i, (a, b) in enumerate(zip(copy, drained)) if a != b), len(drained))}")
            if name.endswith("_S") and sorted(m for _, m in copy) != sorted(want):
                problems.append(f"{name}: {len(copy)} messages ({len(set(m for _, m in copy))} distinct), "
                                f"{len(want)} in {stream}")
        result.copy_problems = problems
        self.log(f"drill {result.name}: mirror and source of {stream} "
                 + ("hold every message once" if not problems else "; ".join(problems)))
        await self._delete(js, [f"{stream}_M", f"{stream}_S"])

    async def _start_features(self, nc, js, stream: str, name: str):
        """Make the drill's R3 stream of TTL'd messages (``<STREAM>_TTL``) and its R3 counter
        stream (``<STREAM>_COUNTER``), start their workloads (lab/features.py) and return
        them, (ttl, counter), once each has had a publish acknowledged."""
        from lab.features import CounterWorkload, TtlWorkload, counter_stream, ttl_stream

        run_id = f"{self.run_id}-{name}"
        ttl = TtlWorkload(nc, js, f"{stream}_TTL", f"drill.{stream.lower()}_ttl", run_id)
        counter = CounterWorkload(nc, js, f"{stream}_COUNTER", f"drill.{stream.lower()}_counter", run_id)
        await self._recreate(js, ttl_stream(ttl.stream, ttl.subject),
                             f"stream {ttl.stream} created (R3, allow_msg_ttl)")
        await self._recreate(js, counter_stream(counter.stream, counter.subject),
                             f"stream {counter.stream} created (R3, allow_msg_counter)")
        ttl.start()
        counter.start()
        await until(lambda: any(m.acked_ns for m in ttl.messages), f"a TTL'd message acknowledged by {ttl.stream}")
        await until(lambda: any(a["outcome"] == "ok" for a in counter.attempts),
                    f"an increment acknowledged by {counter.stream}")
        return ttl, counter

    async def _finish_features(self, js, features, result: DrillResult) -> None:
        """Stop the TTL and counter workloads (each TTL'd message looked for until 4 s after
        its TTL passed), read the counter back (asked again to a deadline), write their
        ledgers, note their figures in ``result`` and delete their streams."""
        from lab.features import write_ledger

        ttl, counter = features
        await asyncio.gather(ttl.stop(), counter.stop())
        await until(counter.read_final, f"the counter of {counter.stream} read back")
        result.ttl_ledger = write_ledger(self.artifacts / f"{result.name}.ttl.jsonl", ttl.lines(result.name))
        result.counter_ledger = write_ledger(self.artifacts / f"{result.name}.counter.jsonl",
                                             counter.lines(result.name))
        result.ttl_published = len(ttl.messages)
        result.ttl_acknowledged = sum(1 for m in ttl.messages if m.acked_ns is not None)
        result.ttl_outlived = ttl.outlived()
        (result.counter_low, result.counter_high, result.counter_acknowledged,
         result.counter_unknown) = counter.expected()
        result.counter_final = counter.final_value()
        self.log(f"drill {result.name}: {result.ttl_acknowledged} of {result.ttl_published} TTL'd messages "
                 f"acknowledged, {len(result.ttl_outlived)} served more than 1 s after their TTL; "
                 f"counter {result.counter_final} ({result.counter_acknowledged} increments acknowledged, "
                 f"{result.counter_unknown} unknown: {result.counter_low}..{result.counter_high} allowed)")
        await self._delete(js, [ttl.stream, counter.stream])

    async def _outage(self, name: str, servers: list[Server] | None, nemesis: Nemesis, *, fault,
                      repair, client_excludes: list[Server] = ()) -> DrillResult:
        started, result = time.monotonic(), DrillResult(name)
        nc, js = await self._connect(client_excludes)
        features = ()
        try:
            result.stream, result.group, subject, work = await self._begin(js, name, servers, copies=True)
            stream = result.stream
            features = await self._start_features(nc, js, stream, name)
            if servers is None:
                servers = await self._leader(js, stream)
                self.log(f"drill {name}: the stream leader is {servers[0].name}")
            result.servers = [s.name for s in servers]
            await self._note_client(nc, result)
            fault_ns = result.fault_ns = time.time_ns()
            repaired = False
            probes: list[str] = []
            try:
                await fault(servers)
                done_ns = result.applied_ns = time.time_ns()
                await work.wait_acks(done_ns, 50, f"writes acknowledged again after {name}")
                result.meta_answered = await self._meta_answers(js, stream, probes)
                await work.wait_acks(time.time_ns(), 50, "more writes during the outage")
                repair_ns = time.time_ns()
                result.seconds_without_writes = round(work.longest_gap_s(fault_ns, repair_ns), 3)
                await repair(servers)
                repaired = True
            finally:
                if not repaired:              # never leave the cluster broken
                    await repair(servers)
                result.repair_ns = time.time_ns()
            features[0].stop_publishing()     # its last messages are looked for while it heals
            await until(lambda: self._all_current(js, stream), "every replica current again")
            result.replicas_current, result.healed_ns = True, time.time_ns()
            await work.wait_acks(time.time_ns(), 20, "writes after healing")
            await work.stop()
            await self._finish_features(js, features, result)
            await self._delete(js, probes)
            drained = await self._read_back(js, stream, subject)
            await self._check_copies(js, stream, subject, drained, result)
            result.client_reconnects = nc.stats.get("reconnects", 0)
            return self._finish(result, work, drained, started)
        finally:
            for workload in features:         # a drill that failed leaves none running
                workload.cancel()
            await nc.close()

    async def _note_client(self, nc, result: DrillResult) -> None:
        """Record (and log) which server the client is on as the fault begins (once it is
        connected, should it be reconnecting at that moment)."""
        await until(lambda: nc.is_connected, "the drill's client connected", timeout_s=30)
        url = nc.connected_url
        result.client_server = self.target.server_at(url.hostname if url else None)
        self.log(f"drill {result.name}: the client is on {result.client_server or 'no server'}")

    async def lose_two_zones(self, zones: list[str], nemesis: Nemesis) -> DrillResult:
        """Crash two zones: no publish may be acknowledged while they are down; after a
        restart writes resume, every replica is current and nothing acknowledged is lost."""
        name = "lose-zones-" + "-".join(zones)
        started, result = time.monotonic(), DrillResult(name)
        servers = [s for z in zones for s in self.target.zone(z)]
        result.servers = [s.name for s in servers]
        nc, js = await self._connect()
        features = ()
        try:
            result.stream, result.group, subject, work = await self._begin(js, name, servers, copies=True)
            stream = result.stream
            features = await self._start_features(nc, js, stream, name)
            await self._note_client(nc, result)
            fault_ns = result.fault_ns = time.time_ns()
            try:
                await nemesis.crash(servers)
                down_ns = result.applied_ns = time.time_ns()
                # hold the outage until the client has had several attempts refused
                await until(lambda: sum(1 for a in work.attempts
                                        if a.sent_ns > down_ns and a.error) >= 5,
                            "publishes refused with an error while two zones are down")
                repair_ns = time.time_ns()
                result.acked_during_outage = sum(1 for a in work.acked()
                                                 if down_ns < a.sent_ns and a.acked_ns < repair_ns)
            finally:
                await nemesis.start(servers)
                result.repair_ns = time.time_ns()
            features[0].stop_publishing()     # its last messages are looked for while it heals
            await work.wait_acks(time.time_ns(), 50, "writes acknowledged again after the restart")
            result.seconds_without_writes = round(
                work.longest_gap_s(fault_ns, time.time_ns()), 3)
            await until(lambda: self._all_current(js, stream), "every replica current again")
            result.replicas_current, result.healed_ns = True, time.time_ns()
            await work.stop()
            await self._finish_features(js, features, result)
            drained = await self._read_back(js, stream, subject)
            await self._check_copies(js, stream, subject, drained, result)
            result.client_reconnects = nc.stats.get("reconnects", 0)
            return self._finish(result, work, drained, started)
        finally:
            for workload in features:         # a drill that failed leaves none running
                workload.cancel()
            await nc.close()

    async def all(self) -> list[DrillResult]:
        """Each zone killed in turn, two zones lost, one zone partitioned, a leader paused."""
        nemesis = Nemesis(self.target)
        try:
            zones = self.target.zones()
            results = [await self.kill_zone(z, nemesis) for z in zones]
            results.append(await self.lose_two_zones(zones[:2], nemesis))
            results.append(await self.partition_zone(zones[0], nemesis))
            results.append(await self.pause_leader(nemesis))
        finally:
            nemesis.close()
        (self.artifacts / "drills.json").write_text(
            json.dumps([r.summary() for r in results], indent=2))
        return results


async def _deleted(js, name: str) -> bool:
    try:
        await js.delete_stream(name)
    except nats.js.errors.NotFoundError:
        pass
    return True


async def _quiet(_exc: Exception) -> None:
    """The client's connection errors are expected during a drill; the ledger has them."""


async def _quiet_cb() -> None:
    return None


#: What asyncio logs each time a server closes a client's TLS connection: nats-py connects
#: in plain TCP and upgrades with start_tls, so the stream protocol answers EOF as if it
#: were not over TLS (CPython asyncio/sslproto.py). It tells nothing; a drill or a campaign
#: run prints it by the hundred while servers are killed.
SSL_EOF_NOISE = "returning true from eof_received() has no effect when using ssl"


class _DropSslEofNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != SSL_EOF_NOISE


logging.getLogger("asyncio").addFilter(_DropSslEofNoise())
