"""Start, break and stop N-server clusters of jetraft-server or nats-server for tests.

A :class:`Cluster` writes one seed-shaped configuration per server into its working
directory and launches each with ``[binary, "-c", conf]`` (as tests/servers.py does)::

    server_name: n1
    listen: 127.0.0.1:<port>
    http: 127.0.0.1:<http port>
    server_tags: ["az:a"]                      # when tags are given
    cluster {
      name: C1
      listen: 127.0.0.1:<cluster port>
      routes: [                                # every server's route URL, its own included,
        nats://ruser:rpass@127.0.0.1:<p1>      # or only the first server's with seed=True
                                               # (the first lists itself: nats-server's
                                               # JetStream wants a configured route)
        ...
      ]
      authorization {                          # when auth=(user, password)
        user: "ruser"
        password: "rpass"
      }
    }
    jetstream {                                # when jetstream=True (and not in plain)
      store_dir: "<workdir>/n1/store"
      unique_tag: "az:"
    }
    <extra text>

Ports are picked once and kept, so a server restarted with :meth:`Cluster.restart` reuses
its configuration and store. :meth:`Cluster.wait_formed` polls ``/routez`` until each live
server sees every other live server (counting distinct remote ids: nats-server pools several
connections per peer). Stopping sends SIGTERM, waits, then SIGKILLs; only processes this
module started are ever signalled, by their PID. :func:`formed` asks JetStream with nats-py.

Usage::

    with Cluster("jetraft", tmp_path, 3).start() as c:
        c.wait_formed()
        a, b = c.servers["n1"], c.servers["n2"]   # RunningServer: .url, .monitor(), .proc
        c.kill("n2"); c.restart("n2"); c.wait_formed()
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import servers
from servers import RunningServer, ServerStartError, binary, free_port


@dataclass
class Member:
    """One server's fixed identity: name, ports, tags, route URLs, extra configuration."""

    name: str
    port: int
    http_port: int
    cluster_port: int
    tags: tuple[str, ...] = ()
    routes: tuple[str, ...] = ()
    extra: str = ""
    starts: int = 0
    server: RunningServer | None = field(default=None, repr=False)


def _q(text: str) -> str:
    """A double-quoted configuration string."""
    return json.dumps(text)


class Cluster:
    """``size`` servers of ``kind`` ("jetraft" or "nats-server") in cluster ``name``.

    ``names``: server names (default n1..nN). ``seed``: each server lists only the first
    server's route, the first server too (implicit discovery must complete the mesh);
    otherwise every server lists all routes, its own included. ``routes``: explicit route URLs for every server instead.
    ``auth``: (user, password) required from routes (``cluster.authorization``);
    ``route_auth``: the credentials put in the route URLs (default ``auth``). ``tags``: one
    sequence of ``server_tags`` per server. ``jetstream``: a jetstream block with a store
    under the working directory (``unique_tag`` when given, and ``jetstream_extra``: text put
    inside that block); ``plain``: names of servers left without it (a mixed cluster). ``extra``: text appended to every
    configuration, or one text per server. ``cluster_extra``: text put inside every
    ``cluster`` block (a ``tls { ... }`` block, say), or one text per server.
    ``ready_timeout``: seconds the servers started together have to be ready (/healthz): a
    deadline for a machine busy with the rest of the suite, not a timing goal.
    """

    def __init__(self, kind: str, workdir: Path, size: int = 3, *, name: str = "C1",
                 names: Sequence[str] | None = None, seed: bool = False,
                 routes: Sequence[str] | None = None,
                 auth: tuple[str, str] | None = None, route_auth: tuple[str, str] | None = None,
                 tags: Sequence[Sequence[str]] | None = None, jetstream: bool = False,
                 unique_tag: str | None = None, extra: str | Sequence[str] = "",
                 jetstream_extra: str = "", plain: Sequence[str] = (),
                 cluster_extra: str | Sequence[str] = "", ready_timeout: float = 60.0) -> None:
        if kind not in servers.KINDS:
            raise ValueError(f"unknown server kind {kind!r}; expected one of {servers.KINDS}")
        self.kind = kind
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.auth = auth
        self.route_auth = route_auth if route_auth is not None else auth
        self.jetstream = jetstream
        self.plain = frozenset(plain)
        self.unique_tag = unique_tag
        self.jetstream_extra = jetstream_extra
        self.ready_timeout = ready_timeout
        names = list(names) if names is not None else [f"n{i + 1}" for i in range(size)]
        if len(names) != size:
            raise ValueError("names must have one entry per server")
        extras = [extra] * size if isinstance(extra, str) else list(extra)
        self.cluster_extras = dict(zip(names, [cluster_extra] * size if isinstance(cluster_extra, str)
                                       else list(cluster_extra)))
        self.members: dict[str, Member] = {}
        for i, member_name in enumerate(names):
            self.members[member_name] = Member(
                member_name, free_port(), free_port(), free_port(),
                tags=tuple(tags[i]) if tags else (), extra=extras[i])
        all_routes = [self.route_url(m) for m in self.members]
        for member in self.members.values():
            if routes is not None:
                member.routes = tuple(routes)
            elif seed:
                member.routes = (all_routes[0],)
            else:
                member.routes = tuple(all_routes)

    # ------------------------------------------------------------------ addresses

    def route_url(self, name: str, auth: tuple[str, str] | None = None) -> str:
        """The ``nats://[user:pass@]127.0.0.1:port`` route URL of server ``name``."""
        user, password = auth or self.route_auth or (None, None)
        creds = f"{quote(user, safe='')}:{quote(password, safe='')}@" if user else ""
        return f"nats://{creds}127.0.0.1:{self.members[name].cluster_port}"

    @property
    def servers(self) -> dict[str, RunningServer]:
        """The running (or last started) process of each server, by name."""
        return {n: m.server for n, m in self.members.items() if m.server is not None}

    def urls(self) -> list[str]:
        """The client URLs of every server, in member order."""
        return [f"nats://127.0.0.1:{m.port}" for m in self.members.values()]

    def store_dir(self, name: str) -> Path:
        """The JetStream store directory of server ``name``."""
        return self.workdir / name / "store"

    def config_text(self, name: str) -> str:
        """The configuration file of server ``name`` (see the module docstring)."""
        m = self.members[name]
        lines = [f"server_name: {m.name}", f"listen: 127.0.0.1:{m.port}",
                 f"http: 127.0.0.1:{m.http_port}"]
        if m.tags:
            lines.append(f"server_tags: [{', '.join(_q(t) for t in m.tags)}]")
        lines += ["cluster {", f"  name: {self.name}", f"  listen: 127.0.0.1:{m.cluster_port}"]
        if m.routes:
            lines += ["  routes: [", *(f"    {r}" for r in m.routes), "  ]"]
        if self.auth is not None:
            lines += ["  authorization {", f"    user: {_q(self.auth[0])}",
                      f"    password: {_q(self.auth[1])}", "  }"]
        if self.cluster_extras.get(name):
            lines.append(self.cluster_extras[name].strip())
        lines.append("}")
        if self.jetstream and name not in self.plain:
            lines += ["jetstream {", f"  store_dir: {_q(str(self.store_dir(name)))}"]
            if self.unique_tag:
                lines.append(f"  unique_tag: {_q(self.unique_tag)}")
            if self.jetstream_extra:
                lines.append(self.jetstream_extra.strip())
            lines.append("}")
        if m.extra:
            lines.append(m.extra.strip())
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ processes

    def start(self, names: Sequence[str] | None = None) -> Cluster:
        """Start the servers (all by default) together, then wait until each is ready
        (TCP and /healthz). Some of them only (a restart): ready once listening
        (``/healthz?js-server-only=true``), as a restarted replica may take a while to be
        current. Raises ServerStartError with the outputs when one is not, after stopping
        the servers this call started."""
        __tracebackhide__ = True
        started = [self._launch(n) for n in (names or list(self.members))]
        deadline = time.monotonic() + self.ready_timeout
        path = "/healthz" if names is None else "/healthz?js-server-only=true"
        for server in started:
            reason = servers.wait_ready(server, deadline, path)
            if reason is not None:
                # the servers just started are stopped: a caller whose start failed has no
                # cluster to stop, and they would run on beside the rest of the suite
                for s in started:
                    if s.alive():
                        s.proc.kill()
                        s.proc.wait(timeout=10)
                raise ServerStartError(f"{self.kind} {server.config_path.stem} failed to start "
                                       f"({reason})\n{server.output()}")
        return self

    def _launch(self, name: str) -> RunningServer:
        m = self.members[name]
        if m.server is not None and m.server.alive():
            raise RuntimeError(f"{name} is already running")
        if not binary(self.kind).exists():
            raise ServerStartError(f"{self.kind}: no executable at {binary(self.kind)}")
        home = self.workdir / name
        home.mkdir(parents=True, exist_ok=True)
        conf = home / f"{name}.conf"
        conf.write_text(self.config_text(name))
        m.starts += 1
        stdout_path = home / f"{name}-{m.starts}.stdout"
        stderr_path = home / f"{name}-{m.starts}.stderr"
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen([str(binary(self.kind)), "-c", str(conf)], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, cwd=home)
        m.server = RunningServer(self.kind, m.port, m.http_port, conf, stdout_path, stderr_path, proc)
        return m.server

    def kill(self, name: str) -> None:
        """SIGKILL server ``name`` (our own child, by PID) and reap it."""
        server = self.members[name].server
        if server is not None and server.alive():
            os.kill(server.proc.pid, signal.SIGKILL)
            server.proc.wait(timeout=10)

    def restart(self, name: str) -> RunningServer:
        """Start server ``name`` again with the same configuration and store; wait until ready."""
        self.stop_one(name)
        self.start([name])
        return self.members[name].server

    def stop_one(self, name: str, timeout: float = 10.0) -> int | None:
        """SIGTERM server ``name``, SIGKILL after ``timeout`` seconds; its exit code."""
        server = self.members[name].server
        return server.stop(timeout) if server is not None else None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every server: SIGTERM to all, then SIGKILL whichever outlives ``timeout``."""
        live = [s for s in self.servers.values() if s.alive()]
        for server in live:
            server.proc.terminate()
        deadline = time.monotonic() + timeout
        for server in live:
            try:
                server.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(timeout=timeout)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ state

    def routes_of(self, name: str) -> set[str]:
        """The server names (falling back to ids) server ``name`` has routes to (/routez)."""
        routez = self.servers[name].monitor("/routez")
        return {r.get("remote_name") or r["remote_id"] for r in routez.get("routes") or []}

    def wait_formed(self, timeout: float = 20.0, names: Sequence[str] | None = None) -> None:
        """Poll /routez until each live server (of ``names``) has a route to every other live
        one; raise AssertionError with what each server sees after ``timeout`` seconds."""
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout
        seen: dict[str, object] = {}
        while True:
            live = [n for n, s in self.servers.items() if s.alive()]
            check = [n for n in (names or live) if n in live]
            done = True
            for name in check:
                try:
                    seen[name] = have = self.routes_of(name)
                except (OSError, AssertionError, ValueError) as exc:
                    seen[name] = repr(exc)
                    done = False
                    continue
                if not set(live) - {name} <= have:
                    done = False
            if done:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"cluster not formed after {timeout}s: {seen}\n{self.outputs()}")
            time.sleep(0.05)

    def wait_meta_leader(self, timeout: float = 30.0) -> str:
        """Poll /jsz until every JetStream server (all but ``plain``) names the same meta
        leader; return its name, or raise AssertionError with what each server names after
        ``timeout`` seconds."""
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout
        while True:
            named = {n: s.monitor("/jsz").get("meta_cluster", {}).get("leader") for n, s in self.servers.items()
                     if n not in self.plain}
            leaders = set(named.values())
            if len(leaders) == 1 and None not in leaders:
                return leaders.pop()
            if time.monotonic() > deadline:
                raise AssertionError(f"no agreed meta leader after {timeout}s: {named}\n{self.outputs()}")
            time.sleep(0.05)

    def events(self, name: str) -> list[dict]:
        """jetraft's event log (JSON lines on stdout) of every start of server ``name``."""
        home = self.workdir / name
        out = []
        for i in range(1, self.members[name].starts + 1):
            path = home / f"{name}-{i}.stdout"
            for line in path.read_text(errors="replace").splitlines() if path.exists() else ():
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        return out

    def outputs(self, tail: int = 4000) -> str:
        """The last ``tail`` characters of each server's output, for failure messages."""
        return "\n".join(s.output()[-tail:] for s in self.servers.values())


def js_api_info(url: str, user: tuple[str, str] | None = None, timeout: float = 2.0) -> dict | None:
    """``$JS.API.INFO`` asked of the server at ``url`` (as ``user``: (name, password)): its
    JSON answer, or None when no server answered (no-responders, a timeout) or it answered
    10008 (no meta leader yet). Other answers (10039, JetStream not enabled for the account)
    are returned: they are answers."""
    import asyncio

    import nats
    import nats.errors

    async def ask() -> dict | None:
        auth = {"user": user[0], "password": user[1]} if user else {}
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=timeout, **auth)
        try:
            msg = await nc.request("$JS.API.INFO", b"", timeout=timeout)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            return None
        finally:
            await nc.close()
        answer = json.loads(msg.data)
        return None if (answer.get("error") or {}).get("err_code") == 10008 else answer
    return asyncio.run(ask())


@contextmanager
def formed(c: Cluster, session, users: Sequence[tuple[str, str] | None] = (None,)) -> Iterator[Cluster]:
    """Start ``c`` and wait until it is formed; with JetStream, until its servers agree on a
    meta leader and each answers ``$JS.API.INFO`` for each of ``users`` (an account's (user,
    password), None: no credentials) with neither no-responders nor 10008, asked again to a
    deadline, so that no test of a just-formed cluster needs a retry of its own. Stop it on the
    way out, printing every server's output when a test of the pytest ``session`` failed
    meanwhile (a module-scoped fixture's ``request.session``)."""
    import nats.errors
    from polling import poll

    failed_before = session.testsfailed
    try:
        c.start()
        c.wait_formed()
        if c.jetstream:
            c.wait_meta_leader()
            for name, server in c.servers.items():
                if name in c.plain:
                    continue
                for user in users:
                    poll(lambda: js_api_info(server.url, user), f"{name} answers $JS.API.INFO as "
                         f"{user[0] if user else 'no user'}", timeout=60, interval=0.2,
                         retry_on=(OSError, ValueError, nats.errors.Error))
        yield c
    finally:
        c.stop()
        if session.testsfailed > failed_before:
            print(c.outputs())
