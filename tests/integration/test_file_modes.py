"""What jetraft writes to disk is readable by its owner only, whatever the umask.

Each server is started with umask 0, the most permissive, so that any file or directory
created without an explicit mode shows as world readable. A file stream with a durable
consumer gets messages, some acknowledged; after the server stops (its shutdown writes
consumer state too), every directory under the store must be 0700 and every file 0600, as
nats-server creates its store (server/filestore.go defaultDirPerms/defaultFilePerms); the
``log_file`` is 0640 (logger/log.go defaultLogPerms) and the ``pid_file`` 0600
(server/server.go logPid). The same checks run against nats-server, side by side.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nats
import pytest
from cluster import Cluster
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError
from servers import KINDS, start_server


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """Processes started inside inherit ``mask`` (tests run one at a time)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes_under(root: Path) -> dict[str, str]:
    """``{relative path: octal mode}`` of ``root`` and everything under it."""
    found = {".": oct(stat.S_IMODE(root.stat().st_mode))}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            found[str(path.relative_to(root))] = oct(stat.S_IMODE(path.lstat().st_mode))
    return found


def wrong_modes(root: Path) -> dict[str, str]:
    """The entries under ``root`` whose mode is not 0700 (directory) or 0600 (file)."""
    wrong = {}
    for rel, mode in modes_under(root).items():
        path = root / rel
        want = "0o700" if path.is_dir() else "0o600"
        if mode != want:
            wrong[rel] = f"{mode} (want {want})"
    return wrong


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


async def until_answered(request, deadline: float):
    """``await request()`` until it is answered: a cluster that is still electing leaders
    answers 10008 or 503, no-responders, or not at all, for a while after it formed (both
    servers)."""
    while True:
        try:
            return await request()
        except (APIError, NoStreamResponseError, nats.errors.TimeoutError, nats.errors.NoRespondersError) as err:
            refused = isinstance(err, APIError) and not isinstance(err, ServiceUnavailableError) and err.err_code != 10008
            if refused or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def publish_and_consume(urls: list[str], replicas: int) -> None:
    """A file stream with a durable consumer: 20 messages, the first 10 acknowledged."""
    nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        js = nc.jetstream(timeout=5)
        deadline = time.monotonic() + 60
        await until_answered(lambda: js.add_stream(name="SECRETS", subjects=["secret.>"], num_replicas=replicas),
                             deadline)
        for i in range(20):  # a message asked again is stored once (Nats-Msg-Id)
            await until_answered(lambda: js.publish(f"secret.{i}", b"the password is swordfish",
                                                            headers={"Nats-Msg-Id": str(i)}),
                                 deadline)
        # creating the same durable again is the same consumer: asked again while unanswered
        sub = await until_answered(lambda: js.pull_subscribe("secret.>", durable="READER"), deadline)
        msgs = await until_answered(lambda: sub.fetch(10, timeout=5), deadline)
        assert len(msgs) == 10
        for msg in msgs:
            await msg.ack_sync()
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", KINDS)
def test_standalone_store_log_and_pid_file_modes(kind, tmp_path):
    store, log, pid = tmp_path / "data" / "store", tmp_path / "server.log", tmp_path / "server.pid"
    extra = f'server_name: s1\njetstream {{ store_dir: "{store}" }}\nlog_file: "{log}"\npid_file: "{pid}"\n'
    with umask(0):
        server = start_server(kind, tmp_path / "run", extra)
    try:
        asyncio.run(asyncio.wait_for(publish_and_consume([server.url], 1), 60))
        assert mode(pid) == "0o600"
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.output()
    assert len(modes_under(store)) > 5, modes_under(store)
    assert wrong_modes(tmp_path / "data") == {}
    assert mode(log) == "0o640"


@pytest.mark.parametrize("kind", KINDS)
def test_cluster_store_and_log_file_modes(kind, tmp_path):
    c = Cluster(kind, tmp_path, 3, jetstream=True,
                extra=[f'log_file: "{tmp_path}/{n}.log"' for n in ("n1", "n2", "n3")])
    with umask(0):
        c.start()
    try:
        c.wait_formed()
        asyncio.run(asyncio.wait_for(publish_and_consume(c.urls(), 3), 90))
    finally:
        c.stop()
    for name in ("n1", "n2", "n3"):
        store = c.store_dir(name)
        assert len(modes_under(store)) > 5, modes_under(store)
        assert wrong_modes(store) == {}, name
        assert mode(tmp_path / f"{name}.log") == "0o640"
