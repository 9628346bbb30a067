"""The fault campaign's workloads, each recorded as a history of operations (Jepsen's split:
workload / nemesis / checker; jepsen-io/nats's ``:queue`` workload).

A history is a JSON-lines file (``<run>/history/<workload>.jsonl``), one line per event,
Jepsen's operation map:

- ``run``, ``workload`` (``queue`` or ``kv``);
- ``process``: a logical client, with at most one operation outstanding; after an ``info``
  (an outcome that is not known) the client goes on under a new process number, as in
  Jepsen, so an operation that may still take effect never overlaps its successor;
- ``type``: ``invoke``, then ``ok`` (done), ``fail`` (definitely not done) or ``info``
  (unknown: a timeout, a lost connection);
- ``f``: queue: ``publish`` (invoke and completion), ``consume`` (a message a push or pull
  consumer received during the run), ``drain`` (the final read of the whole stream) and
  ``read-node`` (a replica's own copy, read on its server at the end); kv: ``put``,
  ``get``, ``create``, ``update``, ``delete``;
- ``key``: queue: the stream's name (a run may have two queue streams, R3 and R5, whose
  values never overlap); kv: the key;
- ``value`` (integers: the unique published value, the value written or read;
  null for a delete and for a get that found nothing), ``revision`` (the stream sequence
  acknowledged or read at; a KV revision), ``expect`` (an update's expected revision);
- ``node``: the server the client was connected to (for ``read-node``: whose copy);
- ``time_ns`` (monotonic, orders the events), ``wall_ns`` (nanoseconds since the epoch),
  ``error``.

The checkers are in :mod:`jetraft.validation` (``jetraft-validate``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

from lab.drills import Target, _quiet, _quiet_cb

#: Seconds an operation may take before its outcome is recorded as unknown (``info``).
OP_TIMEOUT_S = 2.0
#: Bounds: a queue workload publishes at most this many values in a run; a final read
#: stops after this many seconds without progress.
MAX_VALUES = 500_000
DRAIN_IDLE_S = 5.0

QUEUE_STREAM = "CAMPAIGN"
QUEUE_SUBJECT = "campaign.queue"
#: The second queue stream of a run on seven servers: R5, its values from QUEUE5_FIRST.
QUEUE5_STREAM = "CAMPAIGN5"
QUEUE5_SUBJECT = "campaign5.queue"
QUEUE5_FIRST = 10_000_000
KV_BUCKET = "campaign"


class History:
    """A history file, written as events happen (line-buffered: a run that dies keeps
    what it recorded). Process numbers: ``new_process()``."""

    def __init__(self, path: Path, run: str, workload: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.run, self.workload = path, run, workload
        self._file = path.open("w", buffering=1)
        self._processes = 0
        self.counts = {"invoke": 0, "ok": 0, "fail": 0, "info": 0}

    def new_process(self) -> int:
        self._processes += 1
        return self._processes - 1

    def record(self, process: int, type_: str, f: str, **fields: Any) -> dict:
        event = {"run": self.run, "workload": self.workload, "process": process, "type": type_,
                 "f": f, "key": None, "value": None, "revision": None, "expect": None,
                 "node": None, "time_ns": time.monotonic_ns(), "wall_ns": time.time_ns(),
                 "error": None}
        event.update(fields)
        self.counts[type_] = self.counts.get(type_, 0) + 1
        self._file.write(json.dumps(event) + "\n")
        return event

    def close(self) -> None:
        self._file.close()


def outcome(exc: BaseException) -> str:
    """``fail`` when ``exc`` says the operation did not take effect (an error answer from
    the stream, no responders: nothing received the publish), else ``info`` (a timeout or
    a connection lost after sending: it may have)."""
    if isinstance(exc, nats.js.errors.APIError) and not isinstance(
            exc, nats.js.errors.ServiceUnavailableError):
        return "fail"
    if isinstance(exc, (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)):
        return "fail"
    if isinstance(exc, nats.errors.ConnectionClosedError | nats.errors.OutboundBufferLimitError):
        return "fail" if "before sending" in str(exc) else "info"
    return "info"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


class _Client:
    """One client connection of a workload, preferring ``first`` of the target's servers
    (the others to reconnect to), as Jepsen binds each client to a node."""

    def __init__(self, target: Target, first: int):
        self.target, self.first = target, first
        self.nc = None
        self.js = None

    async def connect(self) -> None:
        urls = self.target.urls()
        urls = urls[self.first % len(urls):] + urls[:self.first % len(urls)]
        self.nc = await nats.connect(
            servers=urls, user=self.target.app_user, password=self.target.app_password,
            tls=self.target.ssl_context(), connect_timeout=2, dont_randomize=True,
            ping_interval=1, max_outstanding_pings=2, reconnect_time_wait=0.2,
            max_reconnect_attempts=-1, allow_reconnect=True, error_cb=_quiet,
            disconnected_cb=_quiet_cb, reconnected_cb=_quiet_cb, closed_cb=_quiet_cb)
        self.js = self.nc.jetstream(timeout=OP_TIMEOUT_S)

    @property
    def node(self) -> str | None:
        url = self.nc.connected_url if self.nc is not None else None
        return self.target.server_at(url.hostname if url else None)

    async def close(self) -> None:
        if self.nc is not None:
            try:
                await self.nc.close()
            except Exception:
                pass


async def _retry(what, action, deadline_s: float = 120.0):
    """``action()`` until it succeeds (setup steps while the cluster may still be electing);
    the last error past the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return await action()
        except Exception as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: {_error(exc)}") from exc
            await asyncio.sleep(0.5)


async def _absent(deletion) -> None:
    """Await ``deletion`` (a stream's or bucket's); one that is not there is absent too."""
    try:
        await deletion
    except nats.js.errors.NotFoundError:
        pass


class QueueWorkload:
    """Unique integers (from ``first_value``) published to an R``replicas`` stream
    ``stream`` (subject ``subject``) by ``publishers`` clients, consumed during the run by a
    push and a pull consumer (both acknowledging), drained at the end (jepsen-io/nats
    ``:queue``). Every line of its history has ``key`` = ``stream``."""

    def __init__(self, target: Target, history: History, *, publishers: int = 3,
                 replicas: int = 3, pause_s: float = 0.002, stream: str = QUEUE_STREAM,
                 subject: str = QUEUE_SUBJECT, first_value: int = 0):
        self.target, self.history = target, history
        self.publishers, self.replicas, self.pause_s = publishers, replicas, pause_s
        self.stream, self.subject, self.first_value = stream, subject, first_value
        self.acknowledged = 0
        self._next_value = first_value
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._clients: list[_Client] = []

    async def setup(self, replica_on: str | None = None) -> None:
        """Create the stream and its two durable consumers (retried while the cluster
        elects its leaders). ``replica_on``: a server that must hold a replica (the run's
        corruption host; see :meth:`place_replica_on`)."""
        client = await self._client(0)
        config = StreamConfig(name=self.stream, subjects=[self.subject],
                              num_replicas=self.replicas)
        # a run's history starts from an empty stream: an earlier run's on the same cluster
        # (--inventory) goes first
        await _retry(f"an earlier run's stream {self.stream} deleted",
                     lambda: _absent(client.js.delete_stream(self.stream)))

        async def create():
            try:
                await client.js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                await client.js.add_stream(config)
            for durable in ("pull", "push"):
                cfg = ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
                                     deliver_policy=DeliverPolicy.ALL, ack_wait=5.0,
                                     max_ack_pending=10_000)
                if durable == "push":
                    cfg.deliver_subject = f"{self.stream.lower()}.push"
                await client.js.add_consumer(self.stream, cfg)
        await _retry(f"stream {self.stream} and its consumers created", create)
        if replica_on is not None:
            await self.place_replica_on(client, replica_on)

    async def place_replica_on(self, client: _Client, server: str,
                               attempts: int | None = None) -> list[str]:
        """Make ``server`` one of the stream's peers: while it is not, a peer in its zone
        (else a follower) is removed (``$JS.API.STREAM.PEER.REMOVE``, nats-server's and
        jetraft's alike) and the stream placed again; a unique zone tag keeps the
        replacement in that zone, so in a zone of two servers it is ``server``; without one
        (``jetraft_server_unique_zones: false``) the replacement is any server outside the
        group. Returns the peers; RuntimeError when ``server`` is not one after ``attempts``
        removals (default: one more than the servers)."""
        attempts = attempts if attempts is not None else len(self.target.servers) + 1
        zones = {s.name: s.zone for s in self.target.servers}

        async def peers() -> list[str]:
            async def current():
                info = await client.js.stream_info(self.stream)
                cluster = info.cluster
                replicas = cluster.replicas or [] if cluster else []
                if cluster is None or not cluster.leader or len(replicas) != self.replicas - 1 \
                        or not all(r.current for r in replicas):
                    raise RuntimeError(f"stream {self.stream} not yet whole")
                return [cluster.leader, *(r.name for r in replicas)]
            return await _retry(f"stream {self.stream} whole", current)

        names = await peers()
        for _ in range(attempts):
            if server in names:
                return names
            same_zone = [n for n in names if zones.get(n) == zones.get(server)] or names[1:]
            if not same_zone:
                raise RuntimeError(f"no peer of {self.stream} to make room for {server}: {names}")
            msg = await client.nc.request(f"$JS.API.STREAM.PEER.REMOVE.{self.stream}",
                                          json.dumps({"peer": same_zone[0]}).encode(),
                                          timeout=OP_TIMEOUT_S)
            reply = json.loads(msg.data)
            if not reply.get("success"):
                raise RuntimeError(f"peer-remove {same_zone[0]} from {self.stream}: {reply}")
            deadline = time.monotonic() + 60
            while (names := await peers()) and same_zone[0] in names:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{same_zone[0]} still a peer of {self.stream}: {names}")
                await asyncio.sleep(0.5)
        if server not in names:
            raise RuntimeError(f"{server} is no peer of {self.stream} after {attempts} "
                               f"placements: {names}")
        return names

    async def _client(self, first: int) -> _Client:
        client = _Client(self.target, first)
        await _retry("a client connected", client.connect, deadline_s=60)
        self._clients.append(client)
        return client

    async def start(self) -> None:
        for i in range(self.publishers):
            client = await self._client(i)
            self._tasks.append(asyncio.create_task(self._publish(client)))
        self._tasks.append(asyncio.create_task(self._pull(await self._client(self.publishers))))
        self._tasks.append(asyncio.create_task(self._push(await self._client(self.publishers + 1))))

    async def _publish(self, client: _Client) -> None:
        process = self.history.new_process()
        while not self._stop.is_set() and self._next_value - self.first_value < MAX_VALUES:
            value = self._next_value
            self._next_value += 1
            node = client.node
            self.history.record(process, "invoke", "publish", key=self.stream, value=value, node=node)
            try:
                ack = await client.js.publish(self.subject, str(value).encode(),
                                              timeout=OP_TIMEOUT_S)
                self.history.record(process, "ok", "publish", key=self.stream, value=value, revision=ack.seq,
                                    node=node)
                self.acknowledged += 1
            except Exception as exc:      # every outcome is history, none is fatal
                kind = outcome(exc)
                self.history.record(process, kind, "publish", key=self.stream, value=value, node=node,
                                    error=_error(exc))
                if kind == "info":
                    process = self.history.new_process()
                await asyncio.sleep(0.05)
            await asyncio.sleep(self.pause_s)

    def _consumed(self, msg, f: str, node: str | None, process: int) -> None:
        try:
            value = int(msg.data)
        except ValueError:
            value = None
        self.history.record(process, "ok", f, key=self.stream, value=value,
                            revision=msg.metadata.sequence.stream,
                            node=node)

    async def _pull(self, client: _Client) -> None:
        process = self.history.new_process()
        sub = None
        while not self._stop.is_set():
            try:
                if sub is None:
                    sub = await client.js.pull_subscribe_bind("pull", stream=self.stream)
                for msg in await sub.fetch(100, timeout=1.0):
                    self._consumed(msg, "consume", client.node, process)
                    await msg.ack()
            except nats.errors.TimeoutError:
                continue
            except Exception:
                await asyncio.sleep(0.2)

    async def _push(self, client: _Client) -> None:
        process = self.history.new_process()

        async def on_message(msg) -> None:
            try:
                self._consumed(msg, "consume", client.node, process)
                await msg.ack()
            except Exception:
                pass
        sub = None
        while not self._stop.is_set():
            if sub is None:
                try:
                    sub = await client.js.subscribe(self.subject, durable="push",
                                                    stream=self.stream, cb=on_message,
                                                    manual_ack=True)
                except Exception:
                    await asyncio.sleep(0.5)
                    continue
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        """Stop publishing and consuming (the clients stay connected for the drain)."""
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def js(self):
        """The JetStream context of the workload's first client (for checks of the stream)."""
        return self._clients[0].js

    async def drain(self) -> int:
        """Read the whole stream from its first message with an ephemeral consumer; one
        ``drain`` line per message. Returns the count read."""
        client = self._clients[0]
        process = self.history.new_process()
        info = await _retry("stream info for the drain", lambda: client.js.stream_info(self.stream))
        last = info.state.last_seq
        read, seen = 0, 0
        sub = await _retry("a drain consumer", lambda: client.js.pull_subscribe(
            self.subject, stream=self.stream, config=ConsumerConfig(
                ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL,
                inactive_threshold=60.0)))
        idle_since = time.monotonic()
        try:
            while seen < last and time.monotonic() - idle_since < DRAIN_IDLE_S:
                try:
                    msgs = await sub.fetch(1000, timeout=1.0)
                except nats.errors.TimeoutError:
                    continue
                for msg in msgs:
                    self._consumed(msg, "drain", client.node, process)
                    seen = max(seen, msg.metadata.sequence.stream)
                    read += 1
                idle_since = time.monotonic()
        finally:
            try:
                await sub.unsubscribe()
            except Exception:
                pass
        return read

    def record_node_copy(self, node: str, rows: list[tuple[int, bytes]]) -> None:
        """A replica's own copy (stream sequence, payload), read on its server: one
        ``read-node`` line each."""
        process = self.history.new_process()
        for seq, data in rows:
            try:
                value = int(data)
            except ValueError:
                value = None
            self.history.record(process, "ok", "read-node", key=self.stream, value=value,
                                revision=seq, node=node)

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


class KVWorkload:
    """put, get, create, update and delete on a few keys of a replicated KV bucket by
    ``clients`` clients; each client's choices come from ``seed``."""

    def __init__(self, target: Target, history: History, *, seed: int, clients: int = 4,
                 keys: int = 5, replicas: int = 3, pause_s: float = 0.01):
        self.target, self.history, self.seed = target, history, seed
        self.n_clients, self.keys, self.replicas, self.pause_s = clients, keys, replicas, pause_s
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._clients: list[_Client] = []
        self._next_value = 0
        self.ok = 0

    async def setup(self) -> None:
        client = _Client(self.target, 0)
        await _retry("a client connected", client.connect, deadline_s=60)
        self._clients.append(client)
        # every key's history starts from no value: an earlier run's bucket goes first
        await _retry(f"an earlier run's KV bucket {KV_BUCKET} deleted",
                     lambda: _absent(client.js.delete_key_value(KV_BUCKET)))

        async def create():
            try:
                await client.js.key_value(KV_BUCKET)
            except nats.js.errors.BucketNotFoundError:
                await client.js.create_key_value(bucket=KV_BUCKET, history=1,
                                                 replicas=self.replicas)
        await _retry(f"KV bucket {KV_BUCKET} created", create)

    async def start(self) -> None:
        for i in range(self.n_clients):
            client = _Client(self.target, i + 1)
            await _retry("a client connected", client.connect, deadline_s=60)
            self._clients.append(client)
            rng = random.Random(f"{self.seed}-kv-{i}")
            self._tasks.append(asyncio.create_task(self._loop(client, rng)))

    async def _loop(self, client: _Client, rng: random.Random) -> None:
        process = self.history.new_process()
        kv = None
        revisions: dict[str, int] = {}
        while not self._stop.is_set():
            if kv is None:
                try:
                    kv = await client.js.key_value(KV_BUCKET)
                except Exception:
                    await asyncio.sleep(0.5)
                    continue
            key = f"k{rng.randrange(self.keys)}"
            f = rng.choices(("get", "put", "create", "update", "delete"), (4, 3, 1, 2, 1))[0]
            value = None
            if f in ("put", "create", "update"):
                value = self._next_value
                self._next_value += 1
            expect = revisions.get(key, 0) if f == "update" else None
            node = client.node
            self.history.record(process, "invoke", f, key=key, value=value, expect=expect,
                                node=node)
            try:
                done = await asyncio.wait_for(self._op(client, kv, f, key, value, expect),
                                              OP_TIMEOUT_S)
                read_value, revision = done
                if revision is not None:
                    revisions[key] = revision
                self.history.record(process, "ok", f, key=key,
                                    value=read_value if f == "get" else value,
                                    revision=revision, expect=expect, node=node)
                self.ok += 1
            except Exception as exc:
                kind = "fail" if isinstance(exc, nats.js.errors.KeyWrongLastSequenceError) \
                    else outcome(exc)
                self.history.record(process, kind, f, key=key, value=value, expect=expect,
                                    node=node, error=_error(exc))
                if kind == "info":
                    process = self.history.new_process()
            await asyncio.sleep(self.pause_s)

    async def _op(self, client: _Client, kv, f: str, key: str, value: int | None,
                  expect: int | None) -> tuple[int | None, int | None]:
        """One operation; (the value read, the revision written or read)."""
        if f == "get":
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError as exc:
                entry = getattr(exc, "entry", None)
                return None, getattr(entry, "revision", None)
            return int(entry.value), entry.revision
        if f == "put":
            return value, await kv.put(key, str(value).encode())
        if f == "create":
            return value, await kv.create(key, str(value).encode())
        if f == "update":
            return value, await kv.update(key, str(value).encode(), last=expect)
        ack = await client.js.publish(f"$KV.{KV_BUCKET}.{key}", b"",
                                      headers={"KV-Operation": "DEL"}, timeout=OP_TIMEOUT_S)
        return None, ack.seq

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


#: Run on a jetraft host with its virtualenv's Python: copies the stream's message blocks
#: (the server keeps running; a block being appended may end torn in the copy, which the
#: store's recovery cuts back to the last whole record) and prints ``[seq, payload]`` for
#: each stored message, then ``["recovery", report]``.
_READ_COPY = r"""
import glob, json, shutil, sys, tempfile
from jetraft.jetstream.store import FileStore
from jetraft.storage.group_commit import GroupCommit
found = glob.glob(sys.argv[1] + "/jetstream/*/streams/" + sys.argv[2] + "/msgs")
if not found:
    print(json.dumps(["missing", sys.argv[2]]))
    sys.exit(0)
tmp = tempfile.mkdtemp(prefix="jetraft-readback-")
try:
    shutil.copytree(found[0], tmp + "/msgs")
    store = FileStore(tmp + "/msgs", sync=GroupCommit())
    state = store.state()
    for seq in store.stored_seqs(state.first_seq, state.last_seq):
        try:
            print(json.dumps([seq, store.load(seq).data.decode("utf-8", "replace")]))
        except Exception as exc:
            print(json.dumps(["unreadable", seq, str(exc)]))
    print(json.dumps(["recovery", store.recovery_report]))
    store.close()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
"""


def read_node_copy(target: Target, server, stream: str, *, venv: str = "/opt/jetraft",
                   store_dir: str = "/var/lib/jetraft") -> list[tuple[int, bytes]] | None:
    """``server``'s own copy of ``stream`` (jetraft's file store, read on the host over SSH
    with the server's own code): (stream sequence, payload) of each message, ascending;
    None when the server holds no replica of it. Raises RuntimeError when the host cannot
    be read."""
    import subprocess

    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    if target.ssh_key:
        argv += ["-i", target.ssh_key]
    if target.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={target.known_hosts}",
                 "-o", "StrictHostKeyChecking=yes"]
    argv += [f"{target.ssh_user}@{server.address}",
             f"{venv}/bin/python - {store_dir} {stream}"]
    done = subprocess.run(argv, input=_READ_COPY, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{server.name}: reading its copy of {stream} failed: "
                           f"{done.stderr.strip()[-300:]}")
    rows = []
    for line in done.stdout.splitlines():
        item = json.loads(line)
        if item[0] == "missing":
            return None
        if isinstance(item[0], int):
            rows.append((item[0], item[1].encode()))
    return rows
