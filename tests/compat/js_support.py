"""Helpers shared by the JetStream compat tests (streams, publish, consumers).

Each test takes ``js_server`` (tests/conftest.py), a server of the parametrized
``server_kind`` started with JetStream enabled and its store under the test's tmp_path.
Scenarios are asyncio functions run
by ``compat_support.run``; ``js_session`` opens one nats-py connection and hands out
``nc``, ``nc.jetstream()`` and ``nc.jsm()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import servers
from compat_support import connect, run
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NoKeysError, NoStreamResponseError, ServiceUnavailableError
from nats.js.manager import JetStreamManager


#: nats-server's JetStream API response "type" strings.
STREAM_CREATE_RESPONSE = "io.nats.jetstream.api.v1.stream_create_response"
STREAM_INFO_RESPONSE = "io.nats.jetstream.api.v1.stream_info_response"
STREAM_NAMES_RESPONSE = "io.nats.jetstream.api.v1.stream_names_response"
STREAM_LIST_RESPONSE = "io.nats.jetstream.api.v1.stream_list_response"
STREAM_MSG_GET_RESPONSE = "io.nats.jetstream.api.v1.stream_msg_get_response"
ACCOUNT_INFO_RESPONSE = "io.nats.jetstream.api.v1.account_info_response"
CONSUMER_CREATE_RESPONSE = "io.nats.jetstream.api.v1.consumer_create_response"

#: Nanoseconds per second: JetStream durations on the wire are integer nanoseconds.
NS = 1_000_000_000


@dataclass
class Session:
    """One nats-py connection with its JetStream context and manager."""

    nc: Client
    js: JetStreamContext
    jsm: JetStreamManager

    async def api(self, subject: str, body: Any = None, *, raw: bytes | None = None) -> dict:
        """Send a raw ``$JS.API`` request (JSON ``body`` or ``raw`` bytes); return the decoded reply."""
        if raw is None:
            raw = b"" if body is None else json.dumps(body).encode()
        msg = await self.nc.request(subject, raw, timeout=5)
        return json.loads(msg.data)

    async def publish_many(self, subject: str, payloads: list[bytes]) -> list[int]:
        """Publish each payload with a JetStream ack; return the acked stream sequences."""
        return [(await self.js.publish(subject, p)).seq for p in payloads]


@contextlib.asynccontextmanager
async def js_session(url: str, **options) -> AsyncIterator[Session]:
    """Connect nats-py to ``url``; yield a Session; close the connection at the end."""
    nc = await connect(url, **options)
    try:
        yield Session(nc, nc.jetstream(timeout=5), nc.jsm(timeout=5))
    finally:
        await nc.close()


async def api_error(call: Awaitable[Any]) -> APIError:
    """Await ``call``, which must raise a JetStream APIError; return the error."""
    try:
        result = await call
    except APIError as err:
        return err
    raise AssertionError(f"expected a JetStream API error, got {result!r}")


def error_triple(err: APIError) -> tuple[int | None, int | None, str | None]:
    """(code, err_code, description) of an APIError, for exact comparisons."""
    return err.code, err.err_code, err.description


async def asked_again(call: Callable[[], Awaitable[Any]], what: str, timeout: float = 60.0) -> Any:
    """``await call()``, asked again while a cluster cannot answer it yet; return its result.

    A freshly formed cluster, or one electing a meta leader, may leave a stream or consumer
    create unanswered for longer than a request's timeout, answer no responders, or answer
    503 / err_code 10008 ("JetStream system temporarily unavailable"), raised by nats-py or
    as the ``error`` of a raw API reply (a meta leader election). Any other answer,
    error or not, is returned or raised at once. Only for idempotent requests: a create
    with the same config, or a publish carrying a ``Nats-Msg-Id``. Fails with an
    AssertionError naming ``what`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = await call()
            if isinstance(answer, dict) and (answer.get("error") or {}).get("err_code") == 10008:
                raise ServiceUnavailableError(code=503, err_code=10008, description=str(answer["error"]))
            return answer
        except (NatsTimeoutError, NoRespondersError, NoStreamResponseError, APIError) as err:
            if isinstance(err, APIError) and not (isinstance(err, ServiceUnavailableError)
                                                  or err.err_code == 10008):
                raise
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not answered within {timeout:.0f} s (last: {err!r})") from err
        await asyncio.sleep(0.1)


async def listed(call: Callable[[], Awaitable[list]], asks: int = 3) -> list:
    """``await call()`` for a nats-py ``kv.history(key)`` or ``kv.keys()`` known to list
    something, asked again (at most ``asks`` times in all) while it raises NoKeysError.

    nats-py's watcher signals "no more history" before its first message when the
    consumer info that follows its subscribe finds every message already sent but none
    yet through the callback (nats.py issue 842: ``kv.py`` ``watch``, ``num_pending == 0
    and received == 0``). A server that lists nothing still fails: the last asking's
    NoKeysError is raised. An empty answer is never accepted here; a test of one calls
    nats-py directly.
    """
    for ask in range(asks):
        try:
            return await call()
        except NoKeysError:
            if ask == asks - 1:
                raise
    raise AssertionError("asks must be at least 1")


async def stream_leader(s: Session, name: str) -> str:
    """The server that leads stream ``name`` now (STREAM.INFO asked again while electing)."""
    info = await asked_again(lambda: s.api(f"$JS.API.STREAM.INFO.{name}"), f"{name} info")
    return info["cluster"]["leader"]


def across_step_down_and_sigkill(c: Any, bodies: list[dict], step_down: tuple[str, ...], killed: str,
                                 publish: Callable[[Session, int, str], Awaitable[None]],
                                 check: Callable[[Session, str], Awaitable[None]],
                                 timeout: float = 240.0) -> None:
    """A three-server cluster ``c`` (tests/cluster.py) through leader changes: the streams
    ``bodies`` created; messages 0-9 published, the ``step_down`` streams' leaders stepped
    down, 10-19 published, ``check``; the server leading ``killed`` SIGKILLed, 20-29
    published through another, ``check``; the killed server started again and ``check``
    asked of it. ``publish(s, k, phase)`` and ``check(s, phase)`` get the phase
    ("before", "after", "rejoined")."""
    names = list(c.servers)

    async def before() -> str:
        async with js_session(c.servers[names[0]].url) as s:
            for body in bodies:
                created = await asked_again(lambda body=body: s.api(f"$JS.API.STREAM.CREATE.{body['name']}", body),
                                            f"{body['name']} created")
                assert "error" not in created, created
            for k in range(10):
                await publish(s, k, "before")
            for name in step_down:
                await asked_again(lambda name=name: s.api(f"$JS.API.STREAM.LEADER.STEPDOWN.{name}"), "step-down")
            for k in range(10, 20):
                await publish(s, k, "before")
            await check(s, "before")
            return await stream_leader(s, killed)

    leader = run(before, timeout=timeout)
    c.kill(leader)
    survivor = next(n for n in names if n != leader)

    async def after() -> None:
        async with js_session(c.servers[survivor].url) as s:
            for k in range(20, 30):
                await publish(s, k, "after")
            await check(s, "after")

    run(after, timeout=timeout)
    c.restart(leader)

    async def rejoined() -> None:
        async with js_session(c.servers[leader].url) as s:
            await check(s, "rejoined")

    run(rejoined, timeout=timeout)


def across_restarts(kind: str, tmp_path: Any, *steps: Callable[[str], Awaitable[None]]) -> None:
    """Each of ``steps`` (``step(url)``) run on a server of ``kind`` started over the same
    store directory, the server stopped after each: what one step stored, the next finds."""
    store = tmp_path / "store"
    for step in steps:
        server = servers.start_server(kind, tmp_path / step.__name__, servers.js_config(store), name=kind)
        try:
            run(lambda step=step, server=server: step(server.url))
        finally:
            server.stop()
