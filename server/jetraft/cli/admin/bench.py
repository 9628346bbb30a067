"""``jetraft bench``: a bounded publish benchmark with a rich progress bar.

Core mode: ``--pub`` connections publish ``--msgs`` messages in all to SUBJECT while
``--sub`` connections (default 1) each receive all of them; latency is end to end
(publisher to subscriber, timed in this process); the subscribers are waited for while
messages keep arriving, and what has not come after ``--timeout`` seconds of quiet is
reported lost (core NATS is at most once). JetStream mode (``--js``): a stream on
SUBJECT is created (``--replicas``, ``--storage``) unless one of that name exists, the
publishers wait for every PubAck, one at a time with ``--sync`` or ``--window`` in flight
otherwise; latency is publish to PubAck. The stream is deleted afterwards unless
``--no-cleanup`` (a stream that existed before is never deleted).
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from array import array
from dataclasses import dataclass, field

import click
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import api
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jetraft.cli.admin.groups import json_option, parsed, pass_options
from jetraft.cli.admin.render import console, print_table
from jetraft.cli.admin.session import INTERRUPTED, CliError, Options, Session, connect, run
from jetraft.cli.admin.units import format_bytes, parse_size

#: The most messages one run may send.
MAX_MSGS = 10_000_000
#: The largest message (nats-server's hard max_payload limit is 64 MiB).
MAX_SIZE = 64 * 1024 * 1024
_STAMP = struct.Struct("<q")


@dataclass
class Tally:
    """What the publishers and subscribers counted; latencies in nanoseconds."""

    sent: int = 0
    acked: int = 0
    received: int = 0
    errors: int = 0
    latencies: array = field(default_factory=lambda: array("q"))

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile latency in milliseconds, or None without samples."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] / 1e6


def _payload(size: int) -> bytearray:
    return bytearray(max(size, 0))


def _stamp(buf: bytearray) -> bytes:
    """The payload with the send time in its first 8 bytes (when it has room)."""
    if len(buf) >= _STAMP.size:
        _STAMP.pack_into(buf, 0, time.perf_counter_ns())
    return bytes(buf)


def _shares(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


async def _core_publisher(nc: Client, subject: str, n: int, size: int, tally: Tally, stop: asyncio.Event) -> None:
    buf = _payload(size)
    for i in range(n):
        if stop.is_set():
            break
        await nc.publish(subject, _stamp(buf))
        tally.sent += 1
        if i % 1000 == 999:
            await asyncio.sleep(0)  # let the progress bar and the subscribers run
    await nc.flush(timeout=30)


async def _js_publisher(nc: Client, subject: str, n: int, size: int, sync: bool, window: int,
                        timeout: float, tally: Tally, stop: asyncio.Event) -> None:
    js = nc.jetstream(timeout=timeout, publish_async_max_pending=window)
    buf = _payload(size)

    def done(sent_at: int, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            tally.errors += 1
            return
        tally.acked += 1
        tally.latencies.append(time.perf_counter_ns() - sent_at)

    for _ in range(n):
        if stop.is_set():
            break
        sent_at = time.perf_counter_ns()
        payload = bytes(buf)
        tally.sent += 1
        if sync:
            try:
                await js.publish(subject, payload)
            except (nats.errors.Error, asyncio.TimeoutError):
                tally.errors += 1
                continue
            tally.acked += 1
            tally.latencies.append(time.perf_counter_ns() - sent_at)
        else:
            fut = await js.publish_async(subject, payload, wait_stall=timeout)
            fut.add_done_callback(lambda f, t=sent_at: done(t, f))
    if not sync and js.publish_async_pending():
        try:
            await asyncio.wait_for(js.publish_async_completed(), timeout)
        except asyncio.TimeoutError:
            tally.errors += js.publish_async_pending()


async def _wait_for_subscribers(waits: list[asyncio.Future], tally: Tally, idle: float,
                                stop: asyncio.Event) -> None:
    """Wait until every subscriber has all its messages, or until none arrived for ``idle``
    seconds (core NATS is at most once: what has not come by then is counted lost), or
    Ctrl-C. Bounded by progress, not by a total time: a slow machine delivering every
    message late loses none."""
    loop = asyncio.get_running_loop()
    seen, quiet_until = tally.received, loop.time() + idle
    while not stop.is_set():
        pending = [w for w in waits if not w.done()]
        if not pending:
            return
        if tally.received != seen:
            seen, quiet_until = tally.received, loop.time() + idle
        elif loop.time() >= quiet_until:
            return
        await asyncio.wait(pending, timeout=0.1)


async def _subscriber(nc: Client, subject: str, expected: int, tally: Tally) -> asyncio.Future:
    finished: asyncio.Future = asyncio.get_running_loop().create_future()
    got = 0

    async def on_msg(msg) -> None:
        nonlocal got
        now = time.perf_counter_ns()
        got += 1
        tally.received += 1
        if len(msg.data) >= _STAMP.size:
            tally.latencies.append(now - _STAMP.unpack_from(msg.data)[0])
        if got >= expected and not finished.done():
            finished.set_result(got)

    await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    await nc.flush()
    return finished


async def _ensure_stream(session: Session, name: str, subject: str, replicas: int, storage: str) -> bool:
    """Create the bench stream; True when this run created it (and so may delete it)."""
    try:
        await session.jsm.stream_info(name)
        return False
    except nats.js.errors.NotFoundError:
        pass
    await session.jsm.add_stream(name=name, subjects=[subject], num_replicas=replicas,
                                 storage=api.StorageType(storage))
    return True


@click.command("bench")
@click.argument("subject")
@click.option("--pub", "publishers", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Publisher connections.")
@click.option("--sub", "subscribers", type=click.IntRange(0, 64), default=1, show_default=True,
              help="Core mode: subscriber connections, each receiving every message.")
@click.option("--msgs", type=click.IntRange(1, MAX_MSGS), default=100_000, show_default=True,
              help=f"Messages to publish in all (at most {MAX_MSGS:,}).")
@click.option("--size", default="128", callback=parsed(parse_size, "e.g. 128, 1K"), show_default=True,
              help="Message size in bytes.")
@click.option("--js", "jetstream", is_flag=True, help="Publish to a JetStream stream and wait for PubAcks.")
@click.option("--stream", "stream_name", default="benchstream", show_default=True, help="--js: the stream.")
@click.option("--replicas", type=click.IntRange(1, 5), default=1, show_default=True, help="--js: stream replicas.")
@click.option("--storage", type=click.Choice(["file", "memory"]), default="file", show_default=True)
@click.option("--sync", is_flag=True, help="--js: wait for each PubAck before the next publish.")
@click.option("--window", type=click.IntRange(1, 65536), default=256, show_default=True,
              help="--js without --sync: publishes in flight per publisher.")
@click.option("--no-cleanup", is_flag=True, help="--js: keep the stream this run created.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@json_option
@pass_options
def bench(opts: Options, subject: str, publishers: int, subscribers: int, msgs: int, size: int,
          jetstream: bool, stream_name: str, replicas: int, storage: str, sync: bool, window: int,
          no_cleanup: bool, no_progress: bool) -> None:
    """Benchmark publishing to SUBJECT; prints msgs/s, MiB/s and latency p50/p99."""
    if size < 0 or size > MAX_SIZE:
        raise click.BadParameter(f"must be between 0 and {MAX_SIZE}", param_hint="--size")

    async def body(session: Session) -> int:
        session.handles_interrupt = True
        tally = Tally()
        created = False
        if jetstream:
            created = await _ensure_stream(session, stream_name, subject, replicas, storage)
        conns = [await connect(session.opts) for _ in range(publishers + (0 if jetstream else subscribers))]
        try:
            waits = []
            if not jetstream:
                waits = [await _subscriber(nc, subject, msgs, tally) for nc in conns[publishers:]]
            progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=console(stderr=True), disable=no_progress,
                                transient=False)
            label = "acked" if jetstream else "published"
            with progress:
                bar = progress.add_task(f"{label}", total=msgs)

                async def refresh() -> None:
                    while True:
                        progress.update(bar, completed=tally.acked if jetstream else tally.sent)
                        await asyncio.sleep(0.1)

                refresher = asyncio.create_task(refresh())
                start = time.perf_counter()
                if jetstream:
                    work = [_js_publisher(nc, subject, n, size, sync, window, session.opts.timeout, tally,
                                          session.stop) for nc, n in zip(conns, _shares(msgs, publishers))]
                else:
                    work = [_core_publisher(nc, subject, n, size, tally, session.stop)
                            for nc, n in zip(conns, _shares(msgs, publishers))]
                await asyncio.gather(*work)
                pub_elapsed = time.perf_counter() - start
                await _wait_for_subscribers(waits, tally, session.opts.timeout, session.stop)
                elapsed = time.perf_counter() - start
                refresher.cancel()
                progress.update(bar, completed=tally.acked if jetstream else tally.sent)
        finally:
            for nc in conns:
                await nc.close()
            if created and not no_cleanup:
                await session.jsm.delete_stream(stream_name)
        report = _report(jetstream, sync, publishers, subscribers, size, tally, pub_elapsed, elapsed,
                         replicas, storage)
        if session.opts.json:
            session.echo(json.dumps(report, indent=2))
        else:
            _print_report(report)
        if session.stop.is_set():
            session.echo("interrupted", err=True)
            return INTERRUPTED
        if tally.errors:
            raise CliError(f"{tally.errors:,} publishes failed")
        return 0

    run(opts, body)


def _report(jetstream: bool, sync: bool, publishers: int, subscribers: int, size: int, tally: Tally,
            pub_elapsed: float, elapsed: float, replicas: int, storage: str) -> dict:
    done = tally.acked if jetstream else tally.sent
    mode = (f"JetStream R{replicas} {storage} {'sync' if sync else 'async'}" if jetstream else "core")
    report = {
        "mode": mode, "publishers": publishers, "size": size, "messages": done,
        "seconds": round(pub_elapsed, 3), "msgs_per_sec": round(done / pub_elapsed, 1) if pub_elapsed else 0.0,
        "bytes_per_sec": round(done * size / pub_elapsed, 1) if pub_elapsed else 0.0,
        "latency_p50_ms": tally.percentile(50), "latency_p99_ms": tally.percentile(99),
        "errors": tally.errors,
    }
    if not jetstream:
        report["subscribers"] = subscribers
        report["received"] = tally.received
        report["lost"] = max(0, done * subscribers - tally.received)
        report["sub_msgs_per_sec"] = round(tally.received / elapsed, 1) if elapsed and subscribers else 0.0
    return report


def _print_report(r: dict) -> None:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f} ms"

    rows = [("Mode", r["mode"]), ("Publishers", r["publishers"]), ("Messages", f"{r['messages']:,}"),
            ("Message size", format_bytes(r["size"])), ("Duration", f"{r['seconds']:.3f} s"),
            ("Throughput", f"{r['msgs_per_sec']:,.0f} msgs/s, {format_bytes(r['bytes_per_sec'])}/s"),
            ("Latency p50", ms(r["latency_p50_ms"])), ("Latency p99", ms(r["latency_p99_ms"]))]
    if "subscribers" in r:
        rows += [("Subscribers", r["subscribers"]), ("Received", f"{r['received']:,} (lost {r['lost']:,})"),
                 ("Subscriber rate", f"{r['sub_msgs_per_sec']:,.0f} msgs/s")]
    if r["errors"]:
        rows.append(("Errors", f"{r['errors']:,}"))
    print_table("Benchmark", ["Measure", "Value"], rows)
