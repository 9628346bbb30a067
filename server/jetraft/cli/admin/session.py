"""What every ``jetraft`` command shares: connection options, contexts, the asyncio
runner, error reporting and output.

A command builds an async body taking a :class:`Session` and hands it to :func:`run`,
which connects nats-py, awaits the body, closes the connection and turns the failures a
user can expect (unreachable server, JetStream API errors, timeouts, Ctrl-C) into one
``nats: error: ...`` line on stderr and exit status 1 (130 for Ctrl-C), never a traceback.
The ``nats:`` prefix is the ``nats`` CLI's, so that scripts written against it keep
working.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import click
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.client import JetStreamContext
from nats.js.manager import JetStreamManager

ERROR_PREFIX = "nats: error:"
DEFAULT_URL = "nats://127.0.0.1:4222"
DEFAULT_TIMEOUT = 5.0
#: Exit status after Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130
#: Exit status when stdout is closed under us (128 + SIGPIPE).
BROKEN_PIPE = 141


class CliError(Exception):
    """An expected failure: printed as ``nats: error: <message>``, exit status 1."""


class Interrupted(Exception):
    """Ctrl-C during a command that does not treat it as its normal end."""


@dataclass
class Options:
    """The global options after flags, context file and environment are combined."""

    servers: list[str]
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    json: bool = False
    js_domain: str | None = None
    js_api_prefix: str | None = None
    #: TLS, as the ``nats`` CLI's --tlscert/--tlskey/--tlsca/--tlsfirst: a client
    #: certificate and key, the CAs servers are verified against, TLS before the INFO.
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_first: bool = False

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for the connection, or None when nothing asks for TLS (no TLS
        option and no ``tls://`` URL; a server that requires TLS then gets nats-py's
        default context). Raises CliError for a certificate without its key (or the
        reverse) and for files that cannot be loaded."""
        wanted = (self.tls_cert or self.tls_key or self.tls_ca or self.tls_first
                  or any(u.startswith("tls://") for u in self.servers))
        if not wanted:
            return None
        if bool(self.tls_cert) != bool(self.tls_key):
            raise CliError("a client certificate needs its key: give both --tlscert and --tlskey")
        try:
            ctx = ssl.create_default_context(cafile=self.tls_ca)
            if self.tls_cert:
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot load the TLS files: {exc}") from None
        return ctx

    @property
    def api_prefix(self) -> str:
        """The JetStream API subject prefix (``$JS.API`` unless a domain or prefix is set)."""
        if self.js_api_prefix:
            return self.js_api_prefix.rstrip(".")
        if self.js_domain:
            return f"$JS.{self.js_domain}.API"
        return "$JS.API"


def context_dir() -> Path:
    """Where the ``nats`` CLI keeps contexts: ``$XDG_CONFIG_HOME/nats/context``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nats" / "context"


def selected_context() -> str | None:
    """The context chosen with ``nats context select`` (``nats/context.txt``), if any."""
    try:
        name = (context_dir().parent / "context.txt").read_text().strip()
    except OSError:
        return None
    return name or None


def load_context(name: str | None, path: str | None) -> dict[str, Any]:
    """Read a ``nats`` CLI context file (JSON: url, user, password, token, creds, ...).

    ``path`` wins over ``name``; a named context that does not exist is an error, and so
    is a file that is not a JSON object. Returns {} when neither is given.
    """
    if path is None and name is None:
        return {}
    file = Path(path) if path is not None else context_dir() / f"{name}.json"
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise CliError(f"unknown context {name or path!r}: no file {file}") from None
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read context file {file}: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"context file {file} does not hold a JSON object")
    return data


def split_urls(text: str) -> list[str]:
    """``"a:4222, nats://b:4222"`` -> ``["nats://a:4222", "nats://b:4222"]``."""
    urls = [u.strip() for u in text.split(",") if u.strip()]
    return [u if "://" in u else f"nats://{u}" for u in urls]


def resolve_options(*, server: str | None, user: str | None, password: str | None,
                    creds: str | None, context: str | None, context_file: str | None,
                    timeout: float | None, json_out: bool, tlscert: str | None = None,
                    tlskey: str | None = None, tlsca: str | None = None,
                    tlsfirst: bool | None = None) -> Options:
    """Combine, most specific first: flags (``--user``, ``--password`` and ``--creds``
    also from ``NATS_USER``, ``NATS_PASSWORD`` and ``NATS_CREDS``; ``--tlscert`` and friends
    from ``NATS_CERT``, ``NATS_KEY``, ``NATS_CA``, as the ``nats`` CLI reads them), the
    context (``--context``/``--context-file``, ``NATS_CONTEXT`` or the selected one; its
    ``user``, ``password``, ``creds``, ``cert``, ``key``, ``ca`` and ``tls_first`` fields),
    ``NATS_URL``, the defaults."""
    user = user if user is not None else os.environ.get("NATS_USER") or None
    password = password if password is not None else os.environ.get("NATS_PASSWORD") or None
    creds = creds if creds is not None else os.environ.get("NATS_CREDS") or None
    if context is None and context_file is None:
        context = os.environ.get("NATS_CONTEXT") or selected_context()
    ctx = load_context(context, context_file)
    url = server or ctx.get("url") or os.environ.get("NATS_URL") or DEFAULT_URL
    servers = split_urls(url)
    if not servers:
        raise CliError("no server URL given (--server, a context's url or NATS_URL)")
    return Options(
        servers=servers,
        user=user if user is not None else ctx.get("user") or None,
        password=password if password is not None else ctx.get("password") or None,
        token=ctx.get("token") or None,
        creds=creds if creds is not None else ctx.get("creds") or None,
        timeout=timeout if timeout is not None else DEFAULT_TIMEOUT,
        json=json_out,
        js_domain=ctx.get("jetstream_domain") or None,
        js_api_prefix=ctx.get("jetstream_api_prefix") or None,
        tls_cert=tlscert if tlscert is not None else ctx.get("cert") or None,
        tls_key=tlskey if tlskey is not None else ctx.get("key") or None,
        tls_ca=tlsca if tlsca is not None else ctx.get("ca") or None,
        tls_first=tlsfirst if tlsfirst is not None else bool(ctx.get("tls_first")),
    )


def _describe_connect_error(exc: BaseException, timeout: float) -> str:
    """Why a connection attempt failed, in words."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is a server listening there?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror or exc})"
    if isinstance(exc, (asyncio.TimeoutError, nats.errors.TimeoutError)):
        return f"no answer within {timeout:g}s"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: the server's certificate is not trusted ({exc.verify_message}; check --tlsca)"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc} (check --tlsca, --tlscert/--tlskey and --tlsfirst)"
    if isinstance(exc, nats.errors.AuthorizationError) or "authorization" in str(exc).lower():
        return "authorization violation (check --user/--password, --creds or the context)"
    text = str(exc).removeprefix("nats: ").strip()
    return text or type(exc).__name__


async def connect(opts: Options) -> Client:
    """Connect nats-py to the first answering URL, without reconnects. Raises CliError."""
    failures: list[BaseException] = []

    async def on_error(exc: Exception) -> None:
        failures.append(exc)

    kwargs: dict[str, Any] = dict(
        servers=opts.servers, name="jetraft", connect_timeout=opts.timeout,
        allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.05,
        error_cb=on_error,
    )
    if opts.user:
        kwargs.update(user=opts.user, password=opts.password or "")
    if opts.token:
        kwargs["token"] = opts.token
    if opts.creds:
        if not Path(opts.creds).is_file():
            raise CliError(f"no credentials file {opts.creds} (from --creds, NATS_CREDS or the context): "
                           "give the path of a .creds file")
        kwargs["user_credentials"] = opts.creds
    tls = opts.ssl_context()
    if tls is not None:
        kwargs.update(tls=tls, tls_handshake_first=opts.tls_first)
    # Every URL gets two tries, each bounded by connect_timeout.
    overall = opts.timeout * 2 * len(opts.servers) + 1
    try:
        return await asyncio.wait_for(nats.connect(**kwargs), overall)
    except (OSError, asyncio.TimeoutError, nats.errors.Error) as exc:
        cause = failures[-1] if isinstance(exc, nats.errors.NoServersError) and failures else exc
        where = ", ".join(opts.servers)
        raise CliError(f"could not connect to {where}: {_describe_connect_error(cause, opts.timeout)}") from None


def _json_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.decode(errors="replace")
    return str(value)


def dump_json(value: Any) -> str:
    """Indented JSON of a response dict or a nats-py API object (``as_dict()``)."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    elif isinstance(value, list):
        value = [v.as_dict() if hasattr(v, "as_dict") else v for v in value]
    return json.dumps(value, indent=2, default=_json_default)


@dataclass
class Session:
    """One command's connection: ``nc``, ``js`` and ``jsm`` with the resolved options.

    ``stop`` is set by the first Ctrl-C. A command that ends on Ctrl-C (``sub``, ``bench``)
    sets ``handles_interrupt`` and watches ``stop``; for every other command Ctrl-C
    cancels the command.
    """

    opts: Options
    nc: Client
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    handles_interrupt: bool = False

    def _js_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"timeout": self.opts.timeout}
        if self.opts.js_api_prefix:
            options["prefix"] = self.opts.api_prefix
        elif self.opts.js_domain:
            options["domain"] = self.opts.js_domain
        return options

    @property
    def js(self) -> JetStreamContext:
        """A JetStream context (publish, pull subscriptions) with the session's timeout."""
        return self.nc.jetstream(**self._js_options())

    @property
    def jsm(self) -> JetStreamManager:
        """The JetStream manager (stream/consumer CRUD) with the session's timeout."""
        return self.nc.jsm(**self._js_options())

    def api_subject(self, suffix: str) -> str:
        """``STREAM.LEADER.STEPDOWN.X`` -> ``$JS.API.STREAM.LEADER.STEPDOWN.X`` (or the domain's)."""
        return f"{self.opts.api_prefix}.{suffix}"

    async def request_json(self, subject: str, payload: Any = None, *, timeout: float | None = None) -> dict:
        """Send one request (``payload`` JSON-encoded unless bytes) and decode the JSON reply.

        A JetStream ``error`` in the reply raises nats-py's APIError; no responders and
        no reply within the timeout raise CliError naming the subject.
        """
        timeout = self.opts.timeout if timeout is None else timeout
        data = payload if isinstance(payload, bytes) else b"" if payload is None else json.dumps(payload).encode()
        try:
            msg = await self.nc.request(subject, data, timeout=timeout)
        except nats.errors.NoRespondersError:
            raise CliError(f"no responders for {subject}: {_no_responders_hint(subject)}") from None
        except nats.errors.TimeoutError:
            raise CliError(f"no reply to {subject} within {timeout:g}s "
                           "(the server does not answer this request, or it is busy)") from None
        try:
            resp = json.loads(msg.data)
        except ValueError:
            raise CliError(f"the reply to {subject} is not JSON: {msg.data[:200]!r}") from None
        if isinstance(resp, dict) and isinstance(resp.get("error"), dict):
            raise nats.js.errors.APIError.from_error(resp["error"])
        return resp

    def echo(self, text: str = "", *, err: bool = False) -> None:
        """Print a line (flushed at once, so a reader of a pipe sees it)."""
        click.echo(text, err=err)
        (sys.stderr if err else sys.stdout).flush()

    def output_json(self, value: Any) -> None:
        """Print ``value`` as indented JSON."""
        self.echo(dump_json(value))

    def show(self, info: Any, render: Callable[[Any], str]) -> None:
        """Print an API object: its JSON with --json, else the text ``render(info)``."""
        if self.opts.json:
            self.output_json(info)
        else:
            self.echo(render(info))


def _no_responders_hint(subject: str) -> str:
    if subject.startswith("$SYS."):
        return "server requests need a user of the system account (--user/--password or a context)"
    if subject.startswith("$JS."):
        return "JetStream is not enabled for this account or on this server"
    return "nothing subscribes to that subject"


#: What a user can do about the JetStream API errors whose description alone does not say
#: (err_code -> advice appended to ``<description> (err_code N)``).
API_ADVICE = {
    10005: "the cluster has too few servers (with the placement tags, one per zone under unique_tag) "
           "for that many replicas: lower --replicas, or add servers",
    10008: "the cluster has no JetStream meta leader now (an election is under way, or too few servers "
           "are up for a quorum): retry in a few seconds; if it lasts, check the servers "
           "(jetraft server report jetstream)",
    10014: "check the consumer's name (jetraft consumer ls STREAM)",
    10026: "the stream or the account has as many consumers as its max_consumers allows: remove one "
           "(jetraft consumer rm), or raise the stream's limit (jetraft stream edit) or the account's "
           "(jetraft account info shows it)",
    10027: "the account has as many streams as its max_streams allows: remove one (jetraft stream rm), "
           "or raise the account's limit in the server's configuration (jetraft account info shows it)",
    10023: "the server's JetStream storage is full (its disk, or its max_file_store / max_memory_store): "
           "free space, lower the streams' limits, or raise the server's (jetraft server report jetstream)",
    10047: "the server's JetStream storage has no room for it (its disk, or its max_file_store / "
           "max_memory_store): free space, or raise the server's limits (jetraft server report jetstream)",
    10057: "check the sequence: the message may be removed already, or the sequence past the stream's "
           "last (jetraft stream info STREAM)",
    10058: "a stream of that name exists with other settings: change it with jetraft stream edit, "
           "or pick another name",
    10059: "check the stream's name (jetraft stream ls)",
    10113: "the account requires every stream to set a size limit: give one with --max-bytes",
    10122: "the account caps a stream's size: give a smaller --max-bytes (jetraft account info shows "
           "the limit as Storage / Memory Per Stream)",
    10075: "no other server can take this replica under the stream's placement: add a server that fits "
           "(tags, zone), or lower the stream's replicas",
}


def describe_api_error(exc: nats.js.errors.APIError) -> str:
    """``<description> (err_code N)``, then what to do about it for the errors of API_ADVICE."""
    text = exc.description or f"JetStream API error {exc.code}"
    if not exc.err_code:
        return text
    advice = API_ADVICE.get(exc.err_code)
    return f"{text} (err_code {exc.err_code})" + (f": {advice}" if advice else "")


def describe_failure(exc: BaseException) -> str | None:
    """The one-line message for an expected failure, or None for a bug (shown with a traceback)."""
    if isinstance(exc, CliError):
        return str(exc)
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return ("no stream answered the publish (no responders): no stream stores that subject, "
                "or its stream has no leader now; add a stream, or retry")
    if isinstance(exc, nats.js.errors.ServiceUnavailableError) and not exc.description:
        return "JetStream is not enabled for this account or on this server (no responders on $JS.API)"
    if isinstance(exc, nats.js.errors.APIError):
        return describe_api_error(exc)
    if isinstance(exc, nats.errors.NoRespondersError):
        return "no responders for the request"
    if isinstance(exc, (nats.errors.TimeoutError, asyncio.TimeoutError)):
        return ("timed out waiting for the server's reply (it is busy, or the cluster is electing a "
                "leader): retry, or give more time with --timeout")
    if isinstance(exc, nats.errors.ConnectionClosedError):
        return "the connection to the server was closed"
    if isinstance(exc, nats.errors.Error):
        return str(exc).removeprefix("nats: ")
    if isinstance(exc, OSError):
        return f"connection failed: {exc}"
    return None


Body = Callable[[Session], Awaitable[int | None]]


async def _run_body(opts: Options, body: Body) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    session: Session | None = None

    def on_sigint() -> None:
        if session is None or session.stop.is_set() or not session.handles_interrupt:
            task.cancel()
        if session is not None:
            session.stop.set()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        nc = await connect(opts)
        session = Session(opts, nc)
        try:
            return (await body(session)) or 0
        finally:
            try:
                await asyncio.wait_for(nc.close(), opts.timeout)
            except (asyncio.TimeoutError, nats.errors.Error, OSError):
                pass
    except asyncio.CancelledError:
        raise Interrupted() from None
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def run(opts: Options, body: Body) -> None:
    """Connect, await ``body(session)``, close; exit with the body's status (0 if None).

    Expected failures print ``nats: error: ...`` on stderr and exit 1; Ctrl-C exits 130.
    """
    try:
        code = asyncio.run(_run_body(opts, body))
    except (Interrupted, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        sys.exit(INTERRUPTED)
    except BrokenPipeError:
        # The reader of our output went away (``| head``): stop quietly, as a shell tool does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(BROKEN_PIPE)
    except Exception as exc:  # noqa: BLE001 - expected failures become one line, bugs re-raise
        message = describe_failure(exc)
        if message is None:
            raise
        fail(message)
    sys.exit(code)


def fail(message: str) -> None:
    """Print ``nats: error: <message>`` on stderr and exit 1."""
    click.echo(f"{ERROR_PREFIX} {message}", err=True)
    sys.exit(1)
