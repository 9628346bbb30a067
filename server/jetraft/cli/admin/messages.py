"""``jetraft pub`` and ``jetraft sub``: core NATS and JetStream publishing, subscribing."""

from __future__ import annotations

import asyncio
import json
import sys

import time

import click
import nats.js.errors
from nats.aio.msg import Msg

from jetraft.cli.admin.groups import json_option, pass_options
from jetraft.cli.admin.session import CliError, Options, Session, run
from jetraft.cli.admin.units import clock

#: Placeholders replaced in a published body by the message's number (1-based).
COUNT_PLACEHOLDERS = ("{{Count}}", "{{.Count}}")


def parse_headers(values: tuple[str, ...]) -> dict[str, str] | None:
    """``("K:V", "X: y")`` -> ``{"K": "V", "X": "y"}``; None when there are none."""
    headers: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition(":")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not KEY:VALUE", param_hint="--header")
        headers[key.strip()] = val.strip()
    return headers or None


def render_body(template: bytes, n: int) -> bytes:
    """The body of message number ``n``: the template with ``{{Count}}`` replaced."""
    for placeholder in COUNT_PLACEHOLDERS:
        template = template.replace(placeholder.encode(), str(n).encode())
    return template


def format_message(msg: Msg, *, with_subject: bool = True, number: int | None = None) -> str:
    """A received message as text: an optional '[#N] Received on "S"' line, headers, body."""
    lines = []
    if with_subject:
        head = f'[#{number}] Received on "{msg.subject}"' if number else f'Received on "{msg.subject}"'
        if msg.reply:
            head += f' with reply "{msg.reply}"'
        lines.append(head)
    for key, value in (msg.headers or {}).items():
        lines.append(f"{key}: {value}")
    if lines:
        lines.append("")
    lines.append(msg.data.decode(errors="replace"))
    return "\n".join(lines) + "\n"


async def streams_for_subject(session: Session, subject: str) -> list[str] | None:
    """The streams that store ``subject`` ($JS.API.STREAM.NAMES with ``{"subject": S}``),
    asked again while the meta group elects a leader (10008) until the timeout; None when
    the cluster cannot tell."""
    deadline = time.monotonic() + session.opts.timeout
    while True:
        try:
            resp = await session.request_json(session.api_subject("STREAM.NAMES"), {"subject": subject})
            return list(resp.get("streams") or [])
        except nats.js.errors.APIError as exc:
            if exc.err_code != 10008 or time.monotonic() > deadline:
                return None
        except CliError:
            return None
        await asyncio.sleep(0.1)


async def no_stream_answered(session: Session, subject: str) -> CliError:
    """Why a JetStream publish to ``subject`` got no responders, in one line: a stream stores
    it but has no leader now (retry), or no stream stores it (add one)."""
    names = await streams_for_subject(session, subject)
    if names:
        which = ", ".join(names)
        return CliError(f"stream {which} stores {subject} but has no leader now (its servers are down or "
                        "electing one): the message was not stored; retry once the stream has a leader "
                        f"(jetraft stream info {names[0]})")
    if names is None:
        return CliError(f"no stream answered the publish to {subject} (no responders), and the cluster "
                        "cannot say which stream stores it (no meta leader): retry in a few seconds")
    return CliError(f"no stream stores subject {subject}: add a stream for it (jetraft stream add "
                    f"NAME --subjects {subject}), or publish without -J if it need not be stored")


@click.command("pub")
@click.argument("subject")
@click.argument("body", required=False, default="")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="Publish this many messages; {{Count}} in BODY becomes each one's number.")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY:VALUE", help="Add a header.")
@click.option("-J", "--jetstream", is_flag=True, help="Publish to JetStream and print each PubAck.")
@click.option("--reply", metavar="SUBJECT", help="Reply subject (core publish only).")
@json_option
@pass_options
def pub(opts: Options, subject: str, body: str, count: int, headers: tuple[str, ...], jetstream: bool,
        reply: str | None) -> None:
    """Publish BODY to SUBJECT ('-' reads it from stdin).

    Core: PUB/HPUB, then a flush; prints 'Published N bytes to "SUBJECT"' (or one line
    for --count messages). With -J: each message waits for its PubAck and prints
    'Stored in stream S with sequence N' (JSON lines with --json); no responders is an
    error saying whether no stream stores the subject or its stream has no leader now.
    """
    hdrs = parse_headers(headers)
    template = sys.stdin.buffer.read() if body == "-" else body.encode()
    if jetstream and reply:
        raise click.UsageError("--reply cannot be used with -J (the PubAck comes back on its own inbox)")

    async def run_pub(session: Session) -> None:
        js = session.js
        size = 0
        for n in range(1, count + 1):
            payload = render_body(template, n)
            size += len(payload)
            if not jetstream:
                await session.nc.publish(subject, payload, reply=reply or "", headers=hdrs)
                continue
            try:
                ack = await js.publish(subject, payload, headers=dict(hdrs) if hdrs else None)
            except nats.js.errors.NoStreamResponseError:
                raise await no_stream_answered(session, subject) from None
            if session.opts.json:
                session.echo(json.dumps({"stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}))
                continue
            session.echo(f'{clock()} Published {len(payload)} bytes to "{subject}"')
            dup = " (duplicate)" if ack.duplicate else ""
            session.echo(f"Stored in stream {ack.stream} with sequence {ack.seq}{dup}")
        if not jetstream:
            await session.nc.flush(timeout=session.opts.timeout)
            if count == 1:
                session.echo(f'{clock()} Published {size} bytes to "{subject}"')
            else:
                session.echo(f'{clock()} Published {count} messages ({size} bytes) to "{subject}"')

    run(opts, run_pub)


async def until_stopped(session: Session, awaitable) -> object | None:
    """Await ``awaitable`` unless Ctrl-C comes first; returns its result, or None when stopped."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(session.stop.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    return None


@click.command("sub")
@click.argument("subject")
@click.option("--count", type=click.IntRange(min=1), help="Stop after this many messages.")
@click.option("--queue", metavar="GROUP", help="Join this queue group.")
@click.option("--raw", is_flag=True, help="Print only the bodies (status lines go to stderr).")
@pass_options
def sub(opts: Options, subject: str, count: int | None, queue: str | None, raw: bool) -> None:
    """Subscribe to SUBJECT (SUB) and print what arrives, until --count messages or Ctrl-C.

    Prints 'Subscribing on SUBJECT' once the server has the subscription (after a flush),
    then each message as '[#N] Received on "SUBJECT"', its headers and its body.
    """

    async def run_sub(session: Session) -> None:
        session.handles_interrupt = True
        inbox: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_msg(msg: Msg) -> None:
            await inbox.put(msg)

        subscription = await session.nc.subscribe(subject, queue=queue or "", cb=on_msg)
        await session.nc.flush(timeout=session.opts.timeout)
        status = f"{clock()} Subscribing on {subject}" + (f" in queue group {queue}" if queue else "")
        if count:
            status += f" for {count} message{'s' if count != 1 else ''}"
        session.echo(status, err=raw)
        received = 0
        while count is None or received < count:
            msg = await until_stopped(session, inbox.get())
            if msg is None:
                break
            received += 1
            if raw:
                session.echo(msg.data.decode(errors="replace"))
            else:
                session.echo(format_message(msg, number=received))
        await subscription.unsubscribe()

    run(opts, run_sub)
