"""``jetraft server check connection|stream|consumer|jetstream|meta``: health checks for
monitoring systems, with the ``nats`` CLI's flags, output and exit statuses.

Every check gathers a :class:`Result` (OK, warning and critical messages and performance
data) and prints it once, by default as a Nagios plugin line::

    OK Connection OK:connected to nats://127.0.0.1:4222 in 1.2ms OK:rtt time 150µs ... | connect_time=0.0012s;0.5000;1.0000 ...

``--format json|text|prometheus`` prints the same result as JSON, a plain page or
Prometheus metrics. The exit status is the Nagios one: 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN (always 0 with ``--format prometheus``, as a scrape is not a verdict). A server
that cannot be reached, or a stream or consumer that does not exist, is a CRITICAL result,
not an error: a monitoring system must see it as such.

Thresholds may also come from the stream's or consumer's metadata
(``io.nats.monitor.msgs-critical: 10``, ...); a flag given on the command line wins.

``meta`` (alias ``raft``) reads the meta group from its leader's JSZ answer and needs a
user of the system account; as natscli's, every finding of it is CRITICAL (it has no
WARNING outcome).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import click
import nats.errors
import nats.js.errors

from jetraft import gofmt
from jetraft.cli.admin.groups import AliasedGroup, options, parsed
from jetraft.cli.admin.session import CliError, Options, Session, connect, describe_failure
from jetraft.cli.admin.units import format_duration, parse_duration, parse_time

#: Nagios exit statuses.
EXIT = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}
#: The Prometheus namespace of ``--format prometheus`` metrics, as the ``nats`` CLI's.
NAMESPACE = "natscli"


@dataclass
class Perf:
    """One item of performance data: ``name=value[unit][;warn][;crit]``."""

    name: str
    value: float
    warn: float = 0
    crit: float = 0
    unit: str = ""
    help: str = ""

    def nagios(self) -> str:
        fmt = "{:.4f}" if self.unit == "s" else "{:.0f}"
        name = f"'{self.name}'" if any(c in self.name for c in " \t") else self.name
        text = f"{name}={fmt.format(self.value)}{self.unit}"
        if self.warn or self.crit:
            text += f";{fmt.format(self.warn)}" if self.warn else ";"
            if self.crit:
                text += f";{fmt.format(self.crit)}"
        return text

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "value": self.value, "warning": self.warn,
                               "critical": self.crit}
        if self.unit:
            out["unit"] = self.unit
        return out


@dataclass
class Result:
    """A check's findings; the status is CRITICAL if any critical, else WARNING if any
    warning, else OK."""

    name: str
    suite: str
    oks: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    criticals: list[str] = field(default_factory=list)
    perf: list[Perf] = field(default_factory=list)

    def ok(self, msg: str) -> None:
        self.oks.append(msg)

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def critical(self, msg: str) -> None:
        self.criticals.append(msg)

    def pd(self, *items: Perf) -> None:
        self.perf.extend(items)

    @property
    def status(self) -> str:
        return "CRITICAL" if self.criticals else "WARNING" if self.warnings else "OK"

    def nagios(self) -> str:
        parts = [self.name, *(f"Crit:{c}" for c in self.criticals), *(f"Warn:{w}" for w in self.warnings),
                 *(f"OK:{o}" for o in self.oks)]
        line = f"{self.status} {' '.join(parts)}"
        if self.perf:
            line += " | " + " ".join(p.nagios() for p in self.perf)
        return line

    def json(self) -> str:
        out: dict[str, Any] = {"status": self.status, "check_suite": self.suite, "check_name": self.name}
        for key, values in (("warning", self.warnings), ("critical", self.criticals), ("ok", self.oks)):
            if values:
                out[key] = values
        out["perf_data"] = [p.as_dict() for p in self.perf]
        return json.dumps(out, indent=2)

    def text(self) -> str:
        lines = [f"{self.name}: {self.status}", ""]
        rows = ([("OK", m) for m in self.oks] + [("Warning", m) for m in self.warnings]
                + [("Critical", m) for m in self.criticals])
        if rows:
            lines += ["Status Detail", ""] + [f"  {s:<8}  {m}" for s, m in rows] + [""]
        if self.perf:
            lines += ["Check Metrics", ""]
            lines += [f"  {p.name}: {_number(p.value)}{p.unit} (warning {_number(p.warn)}, "
                      f"critical {_number(p.crit)}){'  ' + p.help if p.help else ''}" for p in self.perf]
        return "\n".join(lines).rstrip("\n")

    def prometheus(self) -> str:
        item = self.name.replace('"', ".")
        lines: list[str] = []
        for p in self.perf:
            metric = f"{NAMESPACE}_{self.suite}_{p.name}"
            lines += [f"# HELP {metric} {p.help or f'Data about the NATS CLI check {self.suite}'}",
                      f"# TYPE {metric} gauge", f'{metric}{{item="{item}"}} {_number(p.value, 6)}']
        metric = f"{NAMESPACE}_{self.suite}_status_code"
        lines += [f"# HELP {metric} Nagios compatible status code for {self.suite}", f"# TYPE {metric} gauge",
                  f'{metric}{{item="{item}",status="{self.status}"}} {EXIT[self.status]}']
        return "\n".join(lines)

    def render(self, fmt: str) -> str:
        return {"json": self.json, "text": self.text, "prometheus": self.prometheus}.get(fmt, self.nagios)()


def _number(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def _seconds(value: float) -> str:
    """A threshold in seconds as Go's %v of a float prints it: ``0.5``, ``1``."""
    return f"{value:g}"


# --------------------------------------------------------------------------- plumbing


class CheckGroup(AliasedGroup):
    """The check kinds, with the ``nats`` CLI's short names for some."""

    SHORT = {"conn": "connection", "js": "jetstream", "raft": "meta"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.SHORT.get(cmd_name, cmd_name))


@click.group("check", cls=CheckGroup)
@click.option("--format", "fmt", type=click.Choice(["nagios", "json", "prometheus", "text"]), default="nagios",
              show_default=True, help="Render the check in this format.")
@click.option("--outfile", type=click.Path(dir_okay=False), help="Save the output to this file, not stdout.")
@click.pass_context
def check(ctx: click.Context, fmt: str, outfile: str | None) -> None:
    """Health checks for monitoring systems (Nagios exit statuses: 0 OK, 1 WARNING,
    2 CRITICAL, 3 UNKNOWN)."""
    ctx.obj = {"format": fmt, "outfile": outfile}


Probe = Callable[[Options, Result], Awaitable[None]]


def finish(result: Result, probe: Probe, opts: Options) -> None:
    """Run ``probe`` (failures it does not expect become critical messages), print the
    result in the chosen format and exit with its Nagios status."""
    settings = click.get_current_context().find_object(dict) or {}
    fmt, outfile = settings.get("format", "nagios"), settings.get("outfile")
    try:
        asyncio.run(asyncio.wait_for(probe(opts, result), opts.timeout * 4 + 5))
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - every failure is a finding of the check
        result.critical(describe_failure(exc) or f"check failed: {exc}")
    text = result.render(fmt)
    if outfile:
        try:
            with open(outfile, "w", encoding="utf-8") as out:
                out.write(text + "\n")
        except OSError as exc:
            click.echo(f"nats: error: cannot write {outfile}: {exc.strerror or exc}", err=True)
            sys.exit(1)
    else:
        click.echo(text)
    sys.exit(0 if fmt == "prometheus" else EXIT[result.status])


async def with_session(opts: Options, result: Result, body: Callable[[Session], Awaitable[None]],
                       failed: str = "could not load info") -> None:
    """Connect and run ``body``; a failed connection or request is a critical message."""
    nc = await open_connection(opts, result)
    if nc is None:
        return
    try:
        await body(Session(opts, nc))
    except (CliError, nats.js.errors.APIError, nats.errors.Error) as exc:
        result.critical(f"{failed}: {describe_failure(exc) or exc}")
    finally:
        await close(nc, opts)


async def open_connection(opts: Options, result: Result) -> Any:
    """A connection, or None after a critical message saying why there is none."""
    try:
        return await connect(opts)
    except CliError as exc:
        result.critical(f"connection failed: {exc}")
        return None


async def close(nc: Any, opts: Options) -> None:
    try:
        await asyncio.wait_for(nc.close(), opts.timeout)
    except (asyncio.TimeoutError, nats.errors.Error, OSError):
        pass


def grade(result: Result, value: float, warn: float, crit: float, bad: str, good: str) -> None:
    """Critical at or above ``crit``, warning at or above ``warn``, else ok; ``bad`` may
    hold ``{}`` for the threshold crossed (in seconds)."""
    if value >= crit:
        result.critical(bad.format(_seconds(crit)))
    elif value >= warn:
        result.warn(bad.format(_seconds(warn)))
    else:
        result.ok(good)


def duration_option(name: str, default: str | None, help_text: str):
    return click.option(name, default=default, metavar="DURATION", callback=parsed(parse_duration, "a duration"),
                        help=help_text + (f" (default {default})" if default else ""))


def options_from_metadata(metadata: dict[str, str] | None, parsers: dict[str, Callable[[str], Any]],
                          given: dict[str, Any]) -> dict[str, Any]:
    """``given`` (flags; None when not given) completed from ``io.nats.monitor.*`` metadata."""
    out = dict(given)
    for key, parse in parsers.items():
        text = (metadata or {}).get(f"io.nats.monitor.{key}")
        if out.get(key) is None and text is not None:
            try:
                out[key] = parse(text)
            except ValueError:
                raise CliError(f"could not configure based on metadata: io.nats.monitor.{key}: {text!r}") from None
    return out


# --------------------------------------------------------------------------- connection


@check.command("connection")
@duration_option("--connect-warn", "500ms", "Warning threshold for establishing the connection")
@duration_option("--connect-critical", "1s", "Critical threshold for establishing the connection")
@duration_option("--rtt-warn", "500ms", "Warning threshold for the server round-trip time")
@duration_option("--rtt-critical", "1s", "Critical threshold for the server round-trip time")
@duration_option("--req-warn", "500ms", "Warning threshold for a full request round trip")
@duration_option("--req-critical", "1s", "Critical threshold for a full request round trip")
def check_connection(connect_warn: float, connect_critical: float, rtt_warn: float, rtt_critical: float,
                     req_warn: float, req_critical: float) -> None:
    """Connect, measure the server's round-trip time and a request to ourselves."""

    async def probe(opts: Options, result: Result) -> None:
        start = time.monotonic()
        nc = await open_connection(opts, result)
        if nc is None:
            return
        try:
            took = time.monotonic() - start
            url = _connected_url(nc)
            result.pd(Perf("connect_time", took, connect_warn, connect_critical, "s", "Time taken to connect to NATS"))
            grade(result, took, connect_warn, connect_critical,
                  f"connected to {url}, connect time exceeded {{}}", f"connected to {url} in {format_duration(took)}")

            rtt = await nc.rtt(timeout=max(1, int(opts.timeout)))
            result.pd(Perf("rtt", rtt, rtt_warn, rtt_critical, "s", "The round-trip-time of the connection"))
            grade(result, rtt, rtt_warn, rtt_critical, "rtt time exceeded {}", f"rtt time {format_duration(rtt)}")

            payload = secrets.token_urlsafe(75)[:100].encode()
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox, max_msgs=1)
            start = time.monotonic()
            await nc.publish(inbox, payload)
            try:
                got = await sub.next_msg(timeout=opts.timeout)
            except nats.errors.TimeoutError:
                result.critical(f"did not receive from {inbox}: timeout")
                return
            req = time.monotonic() - start
            result.pd(Perf("request_time", req, req_warn, req_critical, "s",
                           "Time taken for a full Request-Reply operation"))
            if got.data != payload:
                result.critical("did not receive expected message")
            grade(result, req, req_warn, req_critical, f"round trip request took {req:f}",
                  f"round trip took {req:f}s")
        finally:
            await close(nc, opts)

    finish(Result("Connection", "connections"), probe, options(False))


def _connected_url(nc: Any) -> str:
    url = getattr(nc, "connected_url", None)
    if url is None:
        return "?"
    return f"{url.scheme}://{url.hostname}:{url.port}"


# --------------------------------------------------------------------------- stream

STREAM_METADATA: dict[str, Callable[[str], Any]] = {
    "lag-critical": int, "seen-critical": parse_duration, "min-sources": int, "max-sources": int,
    "peer-expect": int, "peer-lag-critical": int, "peer-seen-critical": parse_duration,
    "msgs-warn": int, "msgs-critical": int, "subjects-warn": int, "subjects-critical": int,
}


def _active(entry: dict) -> float:
    """``active`` of a source, mirror or replica (nanoseconds) in seconds."""
    return (entry.get("active") or 0) / 1e9


@check.command("stream")
@click.option("--stream", "name", required=True, help="The stream to check.")
@click.option("--lag-critical", type=int, metavar="MSGS", help="Critical threshold for the lag of any source or mirror.")
@duration_option("--seen-critical", None, "Critical threshold for how long ago a source or mirror was seen")
@click.option("--min-sources", type=int, help="Minimum number of sources to expect.")
@click.option("--max-sources", type=int, help="Maximum number of sources to expect.")
@click.option("--peer-expect", type=int, help="Number of cluster replicas to expect.")
@click.option("--peer-lag-critical", type=int, metavar="OPS", help="Critical threshold for the lag of a cluster peer.")
@duration_option("--peer-seen-critical", None, "Critical threshold for how long ago a cluster peer was seen")
@click.option("--msgs-warn", type=int, metavar="MSGS", help="Warn if the stream holds this many messages or fewer.")
@click.option("--msgs-critical", type=int, metavar="MSGS", help="Critical if the stream holds this many messages or fewer.")
@click.option("--subjects-warn", type=int, help="Warning threshold for the subjects in the stream.")
@click.option("--subjects-critical", type=int, help="Critical threshold for the subjects in the stream.")
def check_stream(name: str, **flags: Any) -> None:
    """A stream's messages, subjects, sources or mirror, and cluster peers (thresholds
    also from its io.nats.monitor.* metadata)."""
    given = {key.replace("_", "-"): value for key, value in flags.items()}

    async def body(session: Session) -> None:
        info = await session.request_json(session.api_subject(f"STREAM.INFO.{name}"))
        limits = options_from_metadata((info.get("config") or {}).get("metadata"), STREAM_METADATA, given)
        t = {key: value or 0 for key, value in limits.items()}
        _stream_cluster(info, t, result)
        _stream_messages(info, t, result)
        _stream_subjects(info, t, result)
        _stream_sources(info, t, result)
        _stream_mirror(info, t, result)

    result = Result(name, "stream")
    finish(result, lambda opts, res: with_session(opts, res, body), options(False))


def _stream_cluster(info: dict, t: dict[str, Any], result: Result) -> None:
    cluster = info.get("cluster") or None
    replicas = (info.get("config") or {}).get("num_replicas", 1)
    if (cluster is None or replicas <= 1) and t["peer-expect"] <= 0:
        return
    if cluster is None or replicas <= 1:
        result.critical("Stream is not clustered")
        return
    if not cluster.get("leader"):
        result.critical("No leader")
        return
    peers = cluster.get("replicas") or []
    if len(peers) + 1 != t["peer-expect"]:
        result.critical(f"Expected {t['peer-expect']} replicas got {len(peers) + 1}")
        return
    result.ok(f"{len(peers) + 1} peers")
    offline = sum(1 for p in peers if p.get("offline"))
    lagged = sum(1 for p in peers if t["peer-lag-critical"] > 0 and (p.get("lag") or 0) > t["peer-lag-critical"])
    inactive = sum(1 for p in peers if t["peer-seen-critical"] > 0 and _active(p) > t["peer-seen-critical"])
    if offline:
        result.critical(f"{offline} replicas offline")
    if t["peer-lag-critical"] > 0:
        (result.critical(f"{lagged} replicas lagged") if lagged else result.ok("replicas are current"))
    if t["peer-seen-critical"] > 0:
        (result.critical(f"{inactive} replicas inactive") if inactive else result.ok("replicas are active"))


def _stream_messages(info: dict, t: dict[str, Any], result: Result) -> None:
    warn, crit = t["msgs-warn"], t["msgs-critical"]
    if warn <= 0 and crit <= 0:
        return
    msgs = (info.get("state") or {}).get("messages", 0)
    result.pd(Perf("messages", msgs, warn, crit, help="Messages stored in the stream"))
    if crit > 0 and msgs <= crit:
        result.critical(f"{msgs} messages")
    elif warn > 0 and msgs <= warn:
        result.warn(f"{msgs} messages")
    else:
        result.ok(f"{msgs} messages")


def _stream_subjects(info: dict, t: dict[str, Any], result: Result) -> None:
    warn, crit = t["subjects-warn"], t["subjects-critical"]
    if warn <= 0 and crit <= 0:
        return
    count = (info.get("state") or {}).get("num_subjects", 0)
    result.pd(Perf("subjects", count, warn, crit, help="Number of subjects stored in the stream"))
    rising = warn < crit  # more subjects is worse; else fewer is
    if (rising and count >= crit) or (not rising and count <= crit):
        result.critical(f"{count} subjects")
    elif (rising and count >= warn) or (not rising and count <= warn):
        result.warn(f"{count} subjects")
    else:
        result.ok(f"{count} subjects")


def _stream_sources(info: dict, t: dict[str, Any], result: Result) -> None:
    sources = info.get("sources") or []
    count = len(sources)
    low, high = t["min-sources"], t["max-sources"]
    result.pd(Perf("sources", count, low, high, help="Number of sources being consumed by this stream"))
    if (low > 0 and count < low) or (high > 0 and count > high):
        result.critical(f"{count} sources")
    else:
        result.ok(f"{count} sources")
    lag, seen = t["lag-critical"], t["seen-critical"]
    if lag <= 0 and seen <= 0:
        return
    lagged = sum(1 for s in sources if lag > 0 and (s.get("lag") or 0) >= lag)
    inactive = sum(1 for s in sources if seen > 0 and _active(s) >= seen)
    result.pd(Perf("sources_lagged", lagged, help="Number of sources that are behind more than the threshold"),
              Perf("sources_inactive", inactive, help="Number of sources that are inactive"))
    (result.critical(f"{lagged} sources are lagged") if lagged else result.ok(f"{count} sources current"))
    (result.critical(f"{inactive} sources are inactive") if inactive else result.ok(f"{count} sources active"))


def _stream_mirror(info: dict, t: dict[str, Any], result: Result) -> None:
    lag, seen = t["lag-critical"], t["seen-critical"]
    if (lag <= 0 and seen <= 0) or info.get("sources"):
        return
    mirror, state = (info.get("config") or {}).get("mirror"), info.get("mirror")
    if not mirror:
        result.critical("not mirrored")
        return
    if not state:
        result.critical("invalid state")
        return
    result.pd(Perf("lag", state.get("lag") or 0, crit=lag, help="Number of operations this peer is behind its origin"),
              Perf("active", _active(state), crit=seen, unit="s",
                   help="Indicates if this peer is active and catching up if lagged"))
    healthy = True
    if lag > 0 and (state.get("lag") or 0) >= lag:
        result.critical(f"Mirror Lag {state.get('lag')}")
        healthy = False
    if seen > 0 and _active(state) >= seen:
        result.critical(f"Mirror Seen {format_duration(_active(state))}")
        healthy = False
    if healthy:
        result.ok(f"Mirror {mirror.get('name')}")


# --------------------------------------------------------------------------- consumer

CONSUMER_METADATA: dict[str, Callable[[str], Any]] = {
    "outstanding-ack-critical": int, "waiting-critical": int, "unprocessed-critical": int,
    "last-delivery-critical": parse_duration, "last-ack-critical": parse_duration, "redelivery-critical": int,
}


@check.command("consumer")
@click.option("--stream", "stream", required=True, help="The stream holding the consumer.")
@click.option("--consumer", "name", required=True, help="The consumer to check.")
@click.option("--outstanding-ack-critical", type=int, help="Maximum number of outstanding acks to allow.")
@click.option("--waiting-critical", type=int, help="Maximum number of waiting pulls to allow.")
@click.option("--unprocessed-critical", type=int, help="Maximum number of unprocessed messages to allow.")
@duration_option("--last-delivery-critical", None, "Time to allow since the last delivery")
@duration_option("--last-ack-critical", None, "Time to allow since the last ack")
@click.option("--redelivery-critical", type=int, help="Maximum number of redeliveries to allow.")
def check_consumer(stream: str, name: str, **flags: Any) -> None:
    """A consumer's outstanding acks, waiting pulls, unprocessed messages, redeliveries
    and the time since its last delivery and ack (thresholds also from its
    io.nats.monitor.* metadata)."""
    given = {key.replace("_", "-"): value for key, value in flags.items()}

    async def body(session: Session) -> None:
        info = await session.request_json(session.api_subject(f"CONSUMER.INFO.{stream}.{name}"))
        limits = options_from_metadata((info.get("config") or {}).get("metadata"), CONSUMER_METADATA, given)
        t = {key: value or 0 for key, value in limits.items()}
        now = _dt.datetime.now(_dt.timezone.utc)
        delivered = parse_time((info.get("delivered") or {}).get("last_active"))
        acked = parse_time((info.get("ack_floor") or {}).get("last_active"))
        counts = [("ack_pending", "num_ack_pending", "outstanding-ack-critical", "Ack Pending",
                   "The number of messages waiting to be Acknowledged"),
                  ("pull_waiting", "num_waiting", "waiting-critical", "Waiting Pulls",
                   "The number of waiting Pull requests"),
                  ("pending", "num_pending", "unprocessed-critical", "Unprocessed Messages",
                   "The number of messages that have not yet been consumed"),
                  ("redelivered", "num_redelivered", "redelivery-critical", "Redelivered",
                   "The number of messages currently being redelivered")]
        for metric, key, limit, _label, help_text in counts:
            result.pd(Perf(metric, info.get(key) or 0, crit=t[limit], help=help_text))
        times = [("last_delivery", delivered, "last-delivery-critical", "Seconds since the last message was delivered"),
                 ("last_ack", acked, "last-ack-critical", "Seconds since the last message was acknowledged")]
        for metric, when, limit, help_text in times:
            if when is not None:
                result.pd(Perf(metric, (now - when).total_seconds(), crit=t[limit], unit="s", help=help_text))
        for _metric, key, limit, label, _help in counts:
            if t[limit] > 0:
                value = info.get(key) or 0
                (result.critical if value >= t[limit] else result.ok)(f"{label}: {value}")
        for label, none, when, limit in (("Last delivery", "No deliveries", delivered, "last-delivery-critical"),
                                         ("Last ack", "No acks", acked, "last-ack-critical")):
            if t[limit] <= 0:
                continue
            if when is None:
                result.critical(none)
            elif (now - when).total_seconds() >= t[limit]:
                result.critical(f"{label} {format_duration((now - when).total_seconds())} ago")
            else:
                result.ok(f"{label} {gofmt.time_string(when)}")

    result = Result(f"{stream}_{name}", "consumer")
    finish(result, lambda opts, res: with_session(opts, res, body), options(False))


# --------------------------------------------------------------------------- jetstream


@check.command("jetstream")
@click.option("--mem-warn", type=int, default=75, show_default=True, help="Warning threshold for memory storage, in percent.")
@click.option("--mem-critical", type=int, default=90, show_default=True, help="Critical threshold for memory storage, in percent.")
@click.option("--store-warn", type=int, default=75, show_default=True, help="Warning threshold for disk storage, in percent.")
@click.option("--store-critical", type=int, default=90, show_default=True, help="Critical threshold for disk storage, in percent.")
@click.option("--streams-warn", type=int, default=-1, show_default=True, help="Warning threshold for streams used, in percent.")
@click.option("--streams-critical", type=int, default=-1, show_default=True, help="Critical threshold for streams used, in percent.")
@click.option("--consumers-warn", type=int, default=-1, show_default=True, help="Warning threshold for consumers used, in percent.")
@click.option("--consumers-critical", type=int, default=-1, show_default=True, help="Critical threshold for consumers used, in percent.")
@click.option("--replicas/--no-replicas", default=True, show_default=True, help="Check that all streams have healthy replicas.")
@duration_option("--replica-seen-critical", "5s", "Critical threshold for when a stream replica was last seen")
@click.option("--replica-lag-critical", type=int, default=200, show_default=True,
              help="Critical threshold for how many operations behind a replica may be.")
def check_jetstream(mem_warn: int, mem_critical: int, store_warn: int, store_critical: int, streams_warn: int,
                    streams_critical: int, consumers_warn: int, consumers_critical: int, replicas: bool,
                    replica_seen_critical: float, replica_lag_critical: int) -> None:
    """The account's JetStream use against its limits (in percent), and its streams' replicas."""

    async def body(session: Session) -> None:
        info = await session.request_json(session.api_subject("INFO"))
        limits = info.get("limits") or {}
        for item, unit, warn, crit, most, used in (
                ("memory", "B", mem_warn, mem_critical, limits.get("max_memory"), info.get("memory")),
                ("storage", "B", store_warn, store_critical, limits.get("max_storage"), info.get("storage")),
                ("streams", "", streams_warn, streams_critical, limits.get("max_streams"), info.get("streams")),
                ("consumers", "", consumers_warn, consumers_critical, limits.get("max_consumers"),
                 info.get("consumers"))):
            _usage(result, item, unit, warn, crit, most or 0, used or 0)
        if replicas:
            streams = await _all_streams(session)
            _replica_health(result, streams, replica_seen_critical, replica_lag_critical)

    result = Result("JetStream", "jetstream")
    finish(result, lambda opts, res: with_session(opts, res, body, "JetStream not available"), options(False))


def _usage(result: Result, item: str, unit: str, warn: int, crit: int, most: int, used: int) -> None:
    pct = int(used / most * 100) if most > 0 else 0
    result.pd(Perf(item, used, unit=unit, help=f"JetStream {item} resource usage"),
              Perf(f"{item}_pct", pct, warn, crit, "%", f"JetStream {item} resource usage in percent"))
    if warn != -1 and crit != -1 and warn >= crit:
        result.critical(f"{item}: invalid thresholds")
    elif pct > 100:
        result.critical(f"{item}: exceed server limits")
    elif warn >= 0 and crit >= 0 and pct > crit:
        result.critical(f"{pct}% {item}")
    elif warn >= 0 and crit >= 0 and pct > warn:
        result.warn(f"{pct}% {item}")


async def _all_streams(session: Session) -> list[dict]:
    """Every stream's info, page by page ($JS.API.STREAM.LIST)."""
    streams: list[dict] = []
    while True:
        page = await session.request_json(session.api_subject("STREAM.LIST"), {"offset": len(streams)})
        batch = page.get("streams") or []
        streams += batch
        if not batch or len(streams) >= (page.get("total") or 0):
            return streams


def _replica_health(result: Result, streams: list[dict], seen: float, lag: int) -> None:
    healthy = no_leader = missing = failed = lagged = unseen = 0
    for info in streams:
        replicas = (info.get("config") or {}).get("num_replicas", 1)
        cluster = info.get("cluster")
        if replicas == 1:
            healthy += 1
        elif not cluster:
            failed += 1
        elif not cluster.get("leader"):
            no_leader += 1
        elif len(cluster.get("replicas") or []) != replicas - 1:
            missing += 1
        else:
            for peer in cluster.get("replicas") or []:
                if peer.get("offline"):
                    failed += 1
                elif _active(peer) > seen:
                    unseen += 1
                elif (peer.get("lag") or 0) > lag:
                    lagged += 1
            healthy += 1
    result.pd(Perf("replicas_ok", healthy, help="Streams with healthy cluster state"),
              Perf("replicas_no_leader", no_leader, help="Streams with no leader elected"),
              Perf("replicas_missing_replicas", missing, help="Streams with fewer known replicas than configured"),
              Perf("replicas_lagged", lagged, crit=lag, help=f"Streams with > {lag} lagged replicas"),
              Perf("replicas_not_seen", unseen, crit=seen, unit="s",
                   help=f"Streams with replicas seen > {format_duration(seen)} ago"),
              Perf("replicas_fail", failed, help="Streams unhealthy cluster state"))
    if failed or missing or no_leader or unseen or lagged:
        result.critical(f"{failed + missing + no_leader} unhealthy streams")


# --------------------------------------------------------------------------- meta

#: The meta group as its leader sees it: only the meta leader answers (JSZ ``leader_only``).
PING_JSZ = "$SYS.REQ.SERVER.PING.JSZ"


@check.command("meta")
@click.option("--expect", type=click.IntRange(min=0), required=True, metavar="SERVERS",
              help="Number of servers to expect in the meta group.")
@click.option("--lag-critical", type=click.IntRange(min=0), required=True, metavar="OPS",
              help="Critical threshold for how many operations behind a peer may be.")
@click.option("--seen-critical", required=True, metavar="DURATION", callback=parsed(parse_duration, "a duration"),
              help="Critical threshold for how long ago a peer should have been seen.")
def check_meta(expect: int, lag_critical: int, seen_critical: float) -> None:
    """The JetStream meta group as its leader sees it ($SYS.REQ.SERVER.PING.JSZ with
    leader_only; needs a system account user): a leader, --expect peers, and every
    follower current, online, seen within --seen-critical and at most --lag-critical
    operations behind. Any failure is CRITICAL (natscli monitor.CheckJetstreamMeta)."""

    async def body(session: Session) -> None:
        resp = await session.request_json(PING_JSZ, {"leader_only": True})
        meta_health(result, resp, expect, lag_critical, seen_critical)

    result = Result("JetStream Meta Cluster", "meta")
    finish(result, lambda opts, res: with_session(opts, res, body, "JSZ API request failed"), options(False))


def meta_health(result: Result, resp: Any, expect: int, lag_critical: int, seen_critical: float) -> None:
    """Grade one JSZ answer's ``meta_cluster`` (peers as its leader sees them: ``active``
    in nanoseconds, ``lag`` in operations) into ``result``: the ``peers`` count against
    ``expect``, then the followers not current, inactive for more than ``seen_critical``
    seconds, offline, or lagged more than ``lag_critical`` operations (0 turns a
    threshold off)."""
    data = resp.get("data") if isinstance(resp, dict) else None
    if not isinstance(data, dict):
        result.critical("no JSZ response received")
        return
    meta = data.get("meta_cluster")
    if not isinstance(meta, dict):
        result.critical("no cluster information")
        return
    leader = meta.get("leader")
    if not leader:
        result.critical("No leader")
        return
    peers = [p for p in meta.get("replicas") or [] if isinstance(p, dict)]
    size = len(peers) + 1
    result.pd(Perf("peers", size, expect, expect, help="Configured RAFT peers"))
    if expect > 0 and size != expect:
        result.critical(f"{size} peers of expected {expect}")
    not_current = sum(1 for p in peers if not p.get("current"))
    offline = sum(1 for p in peers if p.get("offline"))
    inactive = sum(1 for p in peers if seen_critical > 0 and _active(p) > seen_critical)
    lagged = sum(1 for p in peers if lag_critical > 0 and (p.get("lag") or 0) > lag_critical)
    result.pd(Perf("peer_offline", offline, help="Offline RAFT peers"),
              Perf("peer_not_current", not_current, help="RAFT peers that are not current"),
              Perf("peer_inactive", inactive, help="Inactive RAFT peers"),
              Perf("peer_lagged", lagged, help="RAFT peers that are lagged more than configured threshold"))
    if not_current:
        result.critical(f"{not_current} not current")
    if inactive:
        result.critical(f"{inactive} inactive more than {format_duration(seen_critical)}")
    if offline:
        result.critical(f"{offline} offline")
    if lagged:
        result.critical(f"{lagged} lagged more than {lag_critical} ops")
    if not result.criticals and not result.warnings:
        result.ok(f"{size} peers led by {leader}")
