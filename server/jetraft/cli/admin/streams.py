"""``jetraft stream ...``: add, info, edit, ls, report, get, view, rmm, rm, purge, backup, restore,
cluster step-down, cluster peer-remove."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as _dt
import json
import os
import sys
import time

import click
import nats.errors
import nats.js.errors
from nats.js import api

from jetraft.cli.admin.groups import (
    AliasedGroup,
    confirm,
    force_option,
    json_option,
    parsed,
    pass_options,
    split_csv,
)
from jetraft.cli.admin.render import cluster_members, config_diff, print_table, stream_page, title_case
from jetraft.cli.admin.session import CliError, Options, Session, fail, run
from jetraft.cli.admin.units import (
    clock,
    format_bytes,
    format_count,
    format_time,
    parse_duration,
    parse_size,
    parse_time,
    since,
)

#: ``--retention`` names (``work`` is the ``nats`` CLI's word for a work queue).
RETENTION = {"limits": api.RetentionPolicy.LIMITS, "interest": api.RetentionPolicy.INTEREST,
             "work": api.RetentionPolicy.WORK_QUEUE, "workqueue": api.RetentionPolicy.WORK_QUEUE}


#: Characters nats-server refuses in stream and consumer names (they would change the API subjects).
NAME_FORBIDDEN = (".", "*", ">", "/", "\\")


def check_name(what: str, name: str) -> str:
    """``name`` if it is a valid stream or consumer name; else one ``nats: error:`` line
    with the rule, exit 1 (nats-py would raise before the request is sent)."""
    if not name or any(c in name for c in NAME_FORBIDDEN) or any(c.isspace() for c in name):
        fail(f"invalid {what} name {name!r}: names cannot contain '.', '*', '>', '/', '\\' or "
             "whitespace (use letters, digits, '-' and '_')")
    return name


def name_argument(what: str):
    """A NAME argument checked by :func:`check_name`."""
    return click.argument("name", callback=lambda _ctx, _param, value: check_name(what, value))


@click.group(cls=AliasedGroup)
def stream() -> None:
    """Manage streams (alias: str, s)."""


@stream.command("add")
@name_argument("stream")
@click.option("--subjects", multiple=True, metavar="SUBJECT[,SUBJECT]", help="Subjects the stream stores.")
@click.option("--replicas", type=click.IntRange(1, 5), default=1, show_default=True, help="Number of replicas.")
@click.option("--storage", type=click.Choice(["file", "memory"]), default="file", show_default=True)
@click.option("--retention", type=click.Choice(sorted(RETENTION)), default="limits", show_default=True)
@click.option("--max-msgs", type=int, default=-1, help="Maximum messages kept (-1: unlimited).")
@click.option("--max-msgs-per-subject", type=int, default=-1, help="Maximum messages per subject.")
@click.option("--max-bytes", default="-1", callback=parsed(parse_size, "e.g. 1GB"), help="Maximum bytes kept.")
@click.option("--max-age", default="0", callback=parsed(parse_duration, "e.g. 1h, 7d"),
              help="Maximum message age (0: unlimited).")
@click.option("--max-msg-size", default="-1", callback=parsed(parse_size, "e.g. 1MB"), help="Maximum message size.")
@click.option("--max-consumers", type=int, default=-1, help="Maximum consumers.")
@click.option("--discard", type=click.Choice(["old", "new"]), default="old", show_default=True)
@click.option("--dupe-window", default="2m", callback=parsed(parse_duration, "e.g. 2m"), show_default=True,
              help="Window for Nats-Msg-Id duplicate detection.")
@click.option("--description", help="A description.")
@click.option("--defaults", is_flag=True, help="Accepted for compatibility: unset options take their defaults.")
@json_option
@pass_options
def stream_add(opts: Options, name: str, subjects: tuple[str, ...], replicas: int, storage: str,
               retention: str, max_msgs: int, max_msgs_per_subject: int, max_bytes: int, max_age: float,
               max_msg_size: int, max_consumers: int, discard: str, dupe_window: float,
               description: str | None, defaults: bool) -> None:
    """Create a stream ($JS.API.STREAM.CREATE.NAME); prints its info as 'stream info' does."""
    config = api.StreamConfig(
        name=name, description=description, subjects=split_csv(subjects) or None,
        num_replicas=replicas, storage=api.StorageType(storage), retention=RETENTION[retention],
        max_msgs=max_msgs, max_msgs_per_subject=max_msgs_per_subject, max_bytes=max_bytes,
        max_age=max_age, max_msg_size=max_msg_size, max_consumers=max_consumers,
        discard=api.DiscardPolicy(discard), duplicate_window=dupe_window,
    )

    async def body(session: Session) -> None:
        session.show(await session.jsm.add_stream(config), stream_page)

    run(opts, body)


def without_type(resp: dict) -> dict:
    """An API response without its ``type`` field: the info object scripts read."""
    return {k: v for k, v in resp.items() if k != "type"}


async def apply_edit(session: Session, what: str, old: dict, new: dict, *, force: bool, dry_run: bool,
                     update, render) -> None:
    """The ``edit`` flow the ``nats`` CLI follows: print 'Differences (-old +new):' and the
    changed fields (or 'No difference in configuration' and stop), stop there with exit 1
    for --dry-run, ask 'Really edit WHAT?' unless ``force``, await ``update(new)`` (the
    server's info response, a dict), print 'WHAT was updated' and ``render`` of the info
    (only the info's JSON with --json)."""
    diff = config_diff(old, new)
    if not diff:
        if session.opts.json:
            session.output_json(without_type(await update(None)))
        elif not dry_run:
            session.echo("No difference in configuration")
        return
    if not session.opts.json or dry_run:
        session.echo(f"Differences (-old +new):\n{diff}".rstrip("\n"))
    if dry_run:
        raise SystemExit(1)
    confirm(force, f"Really edit {what}?")
    info = await update(new)
    if session.opts.json:
        session.output_json(without_type(info))
        return
    session.echo(f"{what} was updated\n")
    session.echo(render(info))


def stream_changes(subjects: tuple[str, ...], description: str | None, replicas: int | None,
                   max_msgs: int | None, max_msgs_per_subject: int | None, max_bytes: int | None,
                   max_age: float | None, max_msg_size: int | None, max_consumers: int | None,
                   discard: str | None, dupe_window: float | None,
                   flags: dict[str, bool | None]) -> dict:
    """The StreamConfig JSON fields the given ``stream edit`` options set (None: not given);
    durations in nanoseconds, as the API takes them."""
    out: dict = {}
    if subjects:
        out["subjects"] = split_csv(subjects)
    values = {"description": description, "num_replicas": replicas, "max_msgs": max_msgs,
              "max_msgs_per_subject": max_msgs_per_subject, "max_bytes": max_bytes,
              "max_msg_size": max_msg_size, "max_consumers": max_consumers, "discard": discard}
    out.update({k: v for k, v in values.items() if v is not None})
    if max_age is not None:
        out["max_age"] = int(max_age * 1e9)
    if dupe_window is not None:
        out["duplicate_window"] = int(dupe_window * 1e9)
    out.update({k: v for k, v in flags.items() if v is not None})
    return out


@stream.command("edit")
@click.argument("name")
@click.option("--subjects", multiple=True, metavar="SUBJECT[,SUBJECT]", help="The subjects the stream stores.")
@click.option("--description", help="A description.")
@click.option("--replicas", type=click.IntRange(1, 5), help="Number of replicas.")
@click.option("--max-msgs", type=int, help="Maximum messages kept (-1: unlimited).")
@click.option("--max-msgs-per-subject", type=int, help="Maximum messages per subject (-1: unlimited).")
@click.option("--max-bytes", callback=parsed(parse_size, "e.g. 1GB"), help="Maximum bytes kept (-1: unlimited).")
@click.option("--max-age", callback=parsed(parse_duration, "e.g. 1h, 7d"), help="Maximum message age (0: unlimited).")
@click.option("--max-msg-size", callback=parsed(parse_size, "e.g. 1MB"), help="Maximum message size (-1: unlimited).")
@click.option("--max-consumers", type=int, help="Maximum consumers (-1: unlimited).")
@click.option("--discard", type=click.Choice(["old", "new"]), help="Discard policy when a limit is reached.")
@click.option("--dupe-window", callback=parsed(parse_duration, "e.g. 2m"),
              help="Window for Nats-Msg-Id duplicate detection.")
@click.option("--allow-rollup/--no-allow-rollup", default=None, help="Allow roll-ups (Nats-Rollup headers).")
@click.option("--deny-delete/--no-deny-delete", default=None, help="Refuse message deletes through the API.")
@click.option("--deny-purge/--no-deny-purge", default=None, help="Refuse purges through the API.")
@click.option("--allow-direct/--no-allow-direct", default=None, help="Allow direct gets ($JS.API.DIRECT.GET).")
@click.option("--dry-run", is_flag=True, help="Only show the differences (exit 1 when there are some).")
@force_option
@json_option
@pass_options
def stream_edit(opts: Options, name: str, subjects: tuple[str, ...], description: str | None,
                replicas: int | None, max_msgs: int | None, max_msgs_per_subject: int | None,
                max_bytes: int | None, max_age: float | None, max_msg_size: int | None,
                max_consumers: int | None, discard: str | None, dupe_window: float | None,
                allow_rollup: bool | None, deny_delete: bool | None, deny_purge: bool | None,
                allow_direct: bool | None, dry_run: bool, force: bool) -> None:
    """Change a stream's configuration ($JS.API.STREAM.UPDATE.NAME with the config from
    $JS.API.STREAM.INFO.NAME and the given options applied).

    Prints 'Differences (-old +new):' and the changed fields, asks 'Really edit Stream
    NAME?' (-f skips it), then 'Stream NAME was updated' and the info as 'stream info'
    shows it; 'No difference in configuration' when the options change nothing.
    """
    changes = stream_changes(subjects, description, replicas, max_msgs, max_msgs_per_subject, max_bytes,
                             max_age, max_msg_size, max_consumers, discard, dupe_window,
                             {"allow_rollup_hdrs": allow_rollup, "deny_delete": deny_delete,
                              "deny_purge": deny_purge, "allow_direct": allow_direct})

    async def body(session: Session) -> None:
        current = await session.request_json(session.api_subject(f"STREAM.INFO.{name}"))
        old = dict(current.get("config") or {})

        async def update(new: dict | None) -> dict:
            if new is None:
                return current
            return await session.request_json(session.api_subject(f"STREAM.UPDATE.{name}"), new)

        await apply_edit(session, f"Stream {name}", old, {**old, **changes}, force=force, dry_run=dry_run,
                         update=update, render=lambda info: stream_page(api.StreamInfo.from_response(info)))

    run(opts, body)


@stream.command("info")
@click.argument("name")
@json_option
@pass_options
def stream_info(opts: Options, name: str) -> None:
    """Show a stream ($JS.API.STREAM.INFO.NAME): Configuration, Cluster Information, State."""

    async def body(session: Session) -> None:
        session.show(await session.jsm.stream_info(name), stream_page)

    run(opts, body)


async def all_streams(session: Session) -> list[api.StreamInfo]:
    """Every stream, page by page ($JS.API.STREAM.LIST with an offset)."""
    streams: list[api.StreamInfo] = []
    while True:
        page = await session.jsm.streams_info_iterator(offset=len(streams))
        before = len(streams)
        streams.extend(page)
        if len(streams) >= page.total or len(streams) == before:
            return streams


def server_name(session: Session) -> str:
    """The name of the server the session is connected to (its INFO's ``server_name``): the
    server of every stream on a server that is not clustered."""
    info = getattr(session.nc, "_server_info", None) or {}
    return str(info.get("server_name") or "")


async def stream_leaders(session: Session, streams: list[api.StreamInfo]) -> dict[str, str]:
    """Stream name -> the server that leads it ("" when none does now). A stream listed
    without a cluster block lives on the server we are connected to; one listed without
    a leader (jetraft lists R1 streams so) is asked for its info ($JS.API.STREAM.INFO.NAME)."""
    out: dict[str, str] = {}
    for s in streams:
        name = s.config.name or ""
        if s.cluster is None:
            out[name] = server_name(session)
        elif s.cluster.leader:
            out[name] = s.cluster.leader
        else:
            try:
                info = await session.jsm.stream_info(name)
            except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
                info = None
            out[name] = (info.cluster.leader if info and info.cluster else "") or ""
    return out


@stream.command("ls")
@click.option("-n", "--names", is_flag=True, help="Print only the names, one a line.")
@json_option
@pass_options
def stream_ls(opts: Options, names: bool) -> None:
    """List streams ($JS.API.STREAM.LIST): a table of name, messages, size, replicas."""

    async def body(session: Session) -> None:
        streams = sorted(await all_streams(session), key=lambda s: s.config.name or "")
        if session.opts.json:
            session.output_json([s.config.name for s in streams] if names else streams)
        elif names:
            for s in streams:
                session.echo(s.config.name or "")
        elif not streams:
            session.echo("No streams defined")
        else:
            leaders = await stream_leaders(session, streams)
            rows = [(s.config.name, ", ".join(s.config.subjects or []), format_time(s.created),
                     format_count(s.state.messages), format_bytes(s.state.bytes), s.config.num_replicas or 1,
                     leaders[s.config.name])
                    for s in streams]
            print_table(f"Streams ({len(streams)})",
                        ["Name", "Subjects", "Created", "Messages", "Size", "Replicas", "Leader"],
                        rows, right=(3, 4, 5))

    run(opts, body)


def decode_headers(raw: str | None) -> list[tuple[str, str]]:
    """The headers of a stored message (``hdrs``: base64 of ``NATS/1.0\\r\\nK: V\\r\\n...``)
    as (key, value) pairs in their order."""
    if not raw:
        return []
    text = base64.b64decode(raw).decode(errors="replace")
    pairs = []
    for line in text.split("\r\n")[1:]:
        key, sep, value = line.partition(":")
        if sep and key.strip():
            pairs.append((key.strip(), value.strip()))
    return pairs


async def get_message(session: Session, stream: str, request: dict) -> dict | None:
    """One stored message ($JS.API.STREAM.MSG.GET.STREAM with ``request``: ``{"seq": N}``,
    ``{"last_by_subj": S}`` or ``{"seq": N, "next_by_subj": S}``): the reply's ``message``
    (subject, seq, hdrs and data in base64, time). No such message (10037) is None for a
    ``next_by_subj`` request, else a CliError that says where to look."""
    try:
        resp = await session.request_json(session.api_subject(f"STREAM.MSG.GET.{stream}"), request)
    except nats.js.errors.APIError as exc:
        if exc.err_code != 10037:
            raise
        if "next_by_subj" in request:
            return None
        raise CliError(f"{exc.description or 'no message found'} (err_code 10037): it was removed, or is "
                       f"outside the stream's sequences (see jetraft stream info {stream})") from None
    return resp.get("message") or {}


@stream.command("get")
@click.argument("name")
@click.argument("seq", type=click.IntRange(min=1), required=False)
@click.option("-S", "--last-for", metavar="SUBJECT", help="The last message stored for SUBJECT.")
@json_option
@pass_options
def stream_get(opts: Options, name: str, seq: int | None, last_for: str | None) -> None:
    """Show one stored message, by sequence or the last for a subject ($JS.API.STREAM.MSG.GET.NAME).

    Prints 'Item: NAME#SEQ received TIME (AGO ago) on Subject S', its headers under
    'Headers:', then its body; --json prints the server's message object (subject, seq,
    hdrs and data in base64, time), as nats-server sends it.
    """
    if (seq is None) == (last_for is None):
        fail("give the message's sequence, or --last-for SUBJECT for the last message on a subject")

    async def body(session: Session) -> None:
        msg = await get_message(session, name, {"seq": seq} if seq is not None else {"last_by_subj": last_for})
        if session.opts.json:
            session.output_json(msg)
            return
        session.echo(f"Item: {name}#{msg.get('seq')} received {format_time(msg.get('time'))} "
                     f"({since(msg.get('time'))} ago) on Subject {msg.get('subject')}\n")
        headers = decode_headers(msg.get("hdrs"))
        if headers:
            session.echo("Headers:")
            for key, value in headers:
                session.echo(f"  {key}: {value}")
            session.echo()
        session.echo(base64.b64decode(msg.get("data") or "").decode(errors="replace"))

    run(opts, body)


async def first_since(session: Session, stream: str, cutoff: _dt.datetime) -> int:
    """The first sequence of ``stream`` whose message was received at or after ``cutoff``
    (one past the last sequence when none was): a binary search over the sequences, one
    $JS.API.STREAM.MSG.GET per probe (about log2 of the message count)."""
    info = await session.jsm.stream_info(stream)
    lo, hi = info.state.first_seq or 1, info.state.last_seq + 1
    while lo < hi:
        mid = (lo + hi) // 2
        msg = await get_message(session, stream, {"seq": mid, "next_by_subj": ">"})
        received = parse_time(msg.get("time")) if msg else None
        if msg is None or (received is not None and received >= cutoff):
            hi = mid
        else:
            lo = int(msg.get("seq") or mid) + 1
    return lo


@stream.command("view")
@click.argument("name")
@click.argument("size", type=click.IntRange(1, 25), default=10)
@click.option("--id", "start", type=click.IntRange(min=1), help="Start at this sequence.")
@click.option("--since", "since_ago", callback=parsed(parse_duration, "e.g. 1h, 1d3h5m2s"),
              help="Start at the first message received within this long before now.")
@click.option("--subject", help="Only messages on this subject (wildcards allowed).")
@click.option("--raw", is_flag=True, help="Print only the bodies.")
@pass_options
def stream_view(opts: Options, name: str, size: int, start: int | None, since_ago: float | None,
                subject: str | None, raw: bool) -> None:
    """Print a page of SIZE messages (at most 25) from the start of the stream, --id or
    --since ($JS.API.STREAM.MSG.GET.NAME with next_by_subj, one message at a time).

    Each message is '[SEQ] Subject: S Received: TIME', its headers indented, its body;
    --raw prints the bodies only. 'Reached apparent end of data' (on stderr) when the
    stream has no more messages.
    """

    async def body(session: Session) -> None:
        seq = start or 1
        if since_ago is not None:
            cutoff = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=since_ago)
            seq = await first_since(session, name, cutoff)
        for _ in range(size):
            msg = await get_message(session, name, {"seq": seq, "next_by_subj": subject or ">"})
            if msg is None:
                session.echo("Reached apparent end of data", err=True)
                return
            data = base64.b64decode(msg.get("data") or "").decode(errors="replace")
            if raw:
                session.echo(data)
            else:
                session.echo(f"[{msg.get('seq')}] Subject: {msg.get('subject')} Received: {format_time(msg.get('time'))}")
                headers = decode_headers(msg.get("hdrs"))
                if headers:
                    session.echo()
                    for key, value in headers:
                        session.echo(f"  {key}: {value}")
                session.echo()
                session.echo(data if data else "nil body")
                session.echo()
            seq = int(msg.get("seq") or seq) + 1

    run(opts, body)


@stream.command("rmm")
@click.argument("name")
@click.argument("seq", type=click.IntRange(min=1))
@force_option
@pass_options
def stream_rmm(opts: Options, name: str, seq: int, force: bool) -> None:
    """Remove one message ($JS.API.STREAM.MSG.DELETE.NAME, {"seq": SEQ}; nats-server also
    overwrites its bytes, jetraft tombstones the record); prints nothing when done, as the
    nats CLI."""
    confirm(force, f"Really remove message {seq} from Stream {name}?")

    async def body(session: Session) -> None:
        await session.request_json(session.api_subject(f"STREAM.MSG.DELETE.{name}"), {"seq": seq})

    run(opts, body)


async def all_stream_dicts(session: Session) -> list[dict]:
    """Every stream's info as the server sends it, page by page ($JS.API.STREAM.LIST)."""
    found: list[dict] = []
    while True:
        page = await session.request_json(session.api_subject("STREAM.LIST"), {"offset": len(found)})
        items = page.get("streams") or []
        found.extend(items)
        if not items or len(found) >= int(page.get("total") or 0):
            return found


@stream.command("report")
@click.option("-o", "--consumers", "by_consumers", is_flag=True, help="Sort by number of consumers.")
@click.option("-m", "--messages", "by_messages", is_flag=True, help="Sort by number of messages.")
@click.option("-n", "--name", "by_name", is_flag=True, help="Sort by stream name.")
@json_option
@pass_options
def stream_report(opts: Options, by_consumers: bool, by_messages: bool, by_name: bool) -> None:
    """A table of every stream ($JS.API.STREAM.LIST), as the nats CLI's 'Stream Report':
    Stream, Storage, Placement, Consumers, Messages, Bytes, Lost, Deleted, API Level and
    Replicas (the leader marked *, a replica behind or offline !). Sorted by size unless
    told otherwise; --json prints the stream infos."""

    async def body(session: Session) -> None:
        raw = await all_stream_dicts(session)
        if session.opts.json:
            session.output_json(raw)
            return
        session.echo("Obtaining Stream stats\n")
        # from_response converts the nested objects of the dict it is given: hand it a copy.
        pairs = [(api.StreamInfo.from_response(dict(item)), (item.get("state") or {}).get("lost") or {})
                 for item in raw]
        if by_consumers:
            pairs.sort(key=lambda p: p[0].state.consumer_count)
        elif by_messages:
            pairs.sort(key=lambda p: p[0].state.messages)
        elif by_name:
            pairs.sort(key=lambda p: p[0].config.name or "")
        else:
            pairs.sort(key=lambda p: (p[0].state.bytes, p[0].config.name or ""))
        here = server_name(session)
        rows = []
        for info, lost in pairs:
            cfg, state = info.config, info.state
            placement = ""
            if cfg.placement is not None:
                placement = f"cluster: {cfg.placement.cluster} " if cfg.placement.cluster else ""
                placement += f"tags: {', '.join(cfg.placement.tags)}" if cfg.placement.tags else ""
            lost_text = (f"{format_count(len(lost.get('msgs') or []))} ({format_bytes(lost.get('bytes'))})"
                         if lost.get("msgs") else "0")
            level = (cfg.metadata or {}).get("_nats.req.level", "0")
            cluster = info.cluster if info.cluster is not None else api.ClusterInfo(leader=here)
            rows.append((cfg.name, title_case(cfg.storage or "file"), placement.strip(), format_count(state.consumer_count),
                         format_count(state.messages), format_bytes(state.bytes), lost_text,
                         format_count(state.num_deleted), level, cluster_members(cluster)))
        print_table("Stream Report", ["Stream", "Storage", "Placement", "Consumers", "Messages", "Bytes", "Lost",
                                      "Deleted", "API Level", "Replicas"], rows, right=(3, 4, 5, 7))

    run(opts, body)


@stream.command("rm")
@click.argument("name")
@force_option
@pass_options
def stream_rm(opts: Options, name: str, force: bool) -> None:
    """Delete a stream and its messages ($JS.API.STREAM.DELETE.NAME); prints 'Deleted stream NAME'."""
    confirm(force, f"Really delete stream {name}?")

    async def body(session: Session) -> None:
        await session.jsm.delete_stream(name)
        session.echo(f"Deleted stream {name}")

    run(opts, body)


@stream.command("purge")
@click.argument("name")
@force_option
@json_option
@pass_options
def stream_purge(opts: Options, name: str, force: bool) -> None:
    """Remove every message of a stream ($JS.API.STREAM.PURGE.NAME); prints how many, then the info."""
    confirm(force, f"Really purge stream {name}?")

    async def body(session: Session) -> None:
        # A raw request: nats-py's purge_stream drops the 'purged' count.
        resp = await session.request_json(session.api_subject(f"STREAM.PURGE.{name}"), {})
        info = await session.jsm.stream_info(name)
        if session.opts.json:
            session.output_json({"purged": resp.get("purged", 0), "stream": info.as_dict()})
            return
        session.echo(f"Purged {resp.get('purged', 0):,} messages from stream {name}\n")
        session.show(info, stream_page)

    run(opts, body)


@stream.group("cluster", cls=AliasedGroup)
def stream_cluster() -> None:
    """Manage a stream's RAFT group: leader step-down, peer removal."""


async def poll_new_leader(fetch, old: str | None, wait: float) -> str:
    """Await ``fetch()`` (returning the current leader or None) until it names a leader
    other than ``old``; raises CliError after ``wait`` seconds. Failed fetches during the
    election are retried."""
    deadline = time.monotonic() + wait
    last: str | None = None
    while time.monotonic() < deadline:
        try:
            last = await fetch()
        except (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError, CliError):
            last = None
        if last and last != old:
            return last
        await asyncio.sleep(0.1)
    still = f"the leader is still {last!r}" if last else "no leader is elected"
    raise CliError(f"no new leader within {wait:g}s: {still}")


#: ``--wait SECONDS`` of the step-down commands: how long to wait for the new leader.
wait_option = click.option("--wait", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                           metavar="SECONDS", help="How long to wait for the new leader.")


@stream_cluster.command("step-down")
@click.argument("name")
@wait_option
@json_option
@pass_options
def stream_step_down(opts: Options, name: str, wait: float) -> None:
    """Make a stream's leader step down ($JS.API.STREAM.LEADER.STEPDOWN.NAME).

    Prints 'Requesting leader step down of "OLD" in a N peer RAFT group', polls
    $JS.API.STREAM.INFO.NAME until another leader is elected (at most --wait seconds),
    prints 'New leader elected "NEW"' and the stream's info.
    """

    async def body(session: Session) -> None:
        info = await session.jsm.stream_info(name)
        old = info.cluster.leader if info.cluster else None
        peers = 1 + len(info.cluster.replicas or []) if info.cluster else 1
        if not session.opts.json:
            session.echo(f'{clock()} Requesting leader step down of "{old}" in a {peers} peer RAFT group')
        await session.request_json(session.api_subject(f"STREAM.LEADER.STEPDOWN.{name}"))

        async def leader() -> str | None:
            current = await session.jsm.stream_info(name)
            return current.cluster.leader if current.cluster else None

        new = await poll_new_leader(leader, old, wait)
        if session.opts.json:
            session.output_json({"stream": name, "old_leader": old, "new_leader": new})
            return
        session.echo(f'{clock()} New leader elected "{new}"\n')
        session.show(await session.jsm.stream_info(name), stream_page)

    run(opts, body)


@stream_cluster.command("peer-remove")
@click.argument("name")
@click.argument("peer", required=False)
@json_option
@pass_options
def stream_peer_remove(opts: Options, name: str, peer: str | None) -> None:
    """Remove a server from a stream's RAFT group ($JS.API.STREAM.PEER.REMOVE.NAME, {"peer": PEER}).

    Prints 'Removing peer "PEER"' then 'Requested removal of peer "PEER"'; the stream
    then places a new replica by its placement rules. Without PEER, lists the peers.
    """

    async def body(session: Session) -> None:
        if peer is None:
            info = await session.jsm.stream_info(name)
            cluster = info.cluster or api.ClusterInfo()
            names = [n for n in [cluster.leader, *(r.name for r in cluster.replicas or [])] if n]
            raise CliError(f"name the peer to remove from stream {name}: one of {', '.join(names) or '(none)'}")
        if not session.opts.json:
            session.echo(f'{clock()} Removing peer "{peer}"')
        resp = await session.request_json(session.api_subject(f"STREAM.PEER.REMOVE.{name}"), {"peer": peer})
        if session.opts.json:
            session.output_json(resp)
        else:
            session.echo(f'{clock()} Requested removal of peer "{peer}"')

    run(opts, body)


# --- backup and restore (natscli cli/stream_command.go backupAction/restoreAction, jsm.go
# snapshots.go): the server's $JS.API.STREAM.SNAPSHOT/RESTORE protocol -----------------------

#: The files of a backup directory (jsm.go SnapshotToDirectory). The data file keeps natscli's
#: name, but jetraft's content (its own snapshot format, not an s2 tar): a backup made from
#: nats-server does not restore into jetraft, nor the other way round.
BACKUP_META = "backup.json"
BACKUP_DATA = "stream.tar.s2"
#: Bytes per restore chunk (jsm.go RestoreSnapshotFromDirectory).
RESTORE_CHUNK = 64 * 1024
#: Seconds the final answer of a restore may take (the server checks and writes the data).
RESTORE_FINISH_S = 300.0
#: Seconds without a snapshot chunk before a backup gives up (natscli's idle timeout).
BACKUP_IDLE_S = 5.0


class _Progress:
    """One progress line on stderr, rewritten in place, only when stderr is a terminal."""

    def __init__(self, enabled: bool, verb: str, total: int) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.verb = verb
        self.total = total
        self.last = 0.0

    def update(self, done: int, *, final: bool = False) -> None:
        if not self.enabled or (not final and time.monotonic() - self.last < 0.2):
            return
        self.last = time.monotonic()
        total = f" / {format_bytes(self.total)}" if self.total else ""
        sys.stderr.write(f"\r{self.verb} {format_bytes(done)}{total}" + ("\n" if final else ""))
        sys.stderr.flush()


def _elapsed(start: float) -> str:
    seconds = time.monotonic() - start
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.2f}s"


@stream.command("backup")
@name_argument("stream")
@click.argument("target")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Show a progress line (on a terminal).")
@click.option("--check", is_flag=True, help="Check every message's checksum before the backup.")
@click.option("--consumers/--no-consumers", default=True, show_default=True,
              help="Back up the stream's consumers too.")
@click.option("--chunk-size", callback=parsed(parse_size, "e.g. 128KB"),
              help="Size of the chunks the server sends (1KB..1MB).")
@click.option("--window-size", callback=parsed(parse_size, "e.g. 8MB"),
              help="Bytes the server sends before waiting for acknowledgements (1KB..32MB).")
@pass_options
def stream_backup(opts: Options, name: str, target: str, progress: bool, check: bool, consumers: bool,
                  chunk_size: int | None, window_size: int | None) -> None:
    """Back up a stream into directory TARGET ($JS.API.STREAM.SNAPSHOT.NAME).

    Writes TARGET/backup.json (the stream's config and state) and TARGET/stream.tar.s2
    (the data: jetraft's snapshot format in Snappy's framing), as `nats stream backup` does.
    """

    async def body(session: Session) -> None:
        await session.jsm.stream_info(name)         # "stream not found" before any file
        try:
            os.makedirs(target, exist_ok=True)
        except OSError as exc:
            raise CliError(f"cannot create the backup directory {target}: {exc.strerror or exc}") from None
        data_path = os.path.join(target, BACKUP_DATA)
        inbox = session.nc.new_inbox()
        sub = await session.nc.subscribe(inbox)
        req: dict = {"deliver_subject": inbox, "no_consumers": not consumers, "jsck": check}
        if chunk_size:
            req["chunk_size"] = chunk_size
        if window_size:
            req["window_size"] = window_size
        start = time.monotonic()
        try:
            resp = await session.request_json(session.api_subject(f"STREAM.SNAPSHOT.{name}"), req,
                                              timeout=max(session.opts.timeout, 60.0) if check else None)
            expected = int(resp.get("state", {}).get("bytes") or 0)
            session.echo(f'Starting backup of Stream "{name}" with {format_bytes(expected)}')
            if check:
                session.echo("Health Check was requested, this can take a long time without progress reports")
            bar = _Progress(progress, "Received", expected)
            received = chunks = 0
            with open(data_path, "wb") as out:
                while True:
                    try:
                        msg = await sub.next_msg(timeout=max(BACKUP_IDLE_S, session.opts.timeout))
                    except nats.errors.TimeoutError:
                        raise CliError("backup timed out after receiving no data for a long period") from None
                    if msg.data:
                        out.write(msg.data)
                        received += len(msg.data)
                        chunks += 1
                        if msg.reply:
                            await session.nc.publish(msg.reply, b"")
                        bar.update(received)
                        continue
                    status = (msg.headers or {}).get("Status", "")
                    if status and status != "204":
                        text = (msg.headers or {}).get("Description", "")
                        raise CliError(f"snapshot failed: {status} {text}".rstrip())
                    break
            bar.update(received, final=True)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(data_path)
            raise
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        meta = {"config": resp.get("config"), "state": resp.get("state")}
        with open(os.path.join(target, BACKUP_META), "w") as f:
            f.write(json.dumps(meta, indent=2))
        session.echo(f'Received {format_bytes(received)} in {chunks} chunks for stream "{name}" '
                     f"in {_elapsed(start)}")

    run(opts, body)


def _read_backup(directory: str) -> dict:
    path = os.path.join(directory, BACKUP_META)
    try:
        with open(path) as f:
            meta = json.load(f)
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc} (is {directory} a backup made by `stream backup`?)")
    except ValueError as exc:
        fail(f"{path} is not valid JSON: {exc}")
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) \
            or not isinstance(meta["config"].get("name"), str):
        fail(f"{path} holds no stream config (expected {{\"config\": {{\"name\": ...}}, \"state\": ...}})")
    if not os.path.isfile(os.path.join(directory, BACKUP_DATA)):
        fail(f"{os.path.join(directory, BACKUP_DATA)} is missing: the backup is incomplete")
    return meta


def _read_config_file(path: str) -> dict:
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(f"{path} is not valid JSON: {exc}")
    if not isinstance(cfg, dict):
        fail(f"{path} must hold a stream configuration (a JSON object)")
    return cfg


@stream.command("restore")
@click.argument("directory")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Show a progress line (on a terminal).")
@click.option("--config", "config_file", metavar="FILE", help="Restore with this stream configuration (JSON) instead.")
@click.option("--cluster", help="Place the stream in this cluster.")
@click.option("--tag", "tags", multiple=True, help="Place the stream on servers with this tag (repeatable).")
@click.option("--replicas", type=click.IntRange(1, 5), help="Override the number of replicas.")
@pass_options
def stream_restore(opts: Options, directory: str, progress: bool, config_file: str | None,
                   cluster: str | None, tags: tuple[str, ...], replicas: int | None) -> None:
    """Restore a stream from a backup DIRECTORY ($JS.API.STREAM.RESTORE.NAME).

    Reads DIRECTORY/backup.json and DIRECTORY/stream.tar.s2 as written by `stream backup`;
    the stream must not exist. Prints the restored stream's info.
    """
    meta = _read_backup(directory)
    name = meta["config"]["name"]
    cfg = dict(meta["config"])
    if config_file:
        cfg = _read_config_file(config_file)
        if cfg.get("name") != name:
            fail("stream names may not be changed during restore")
    if cluster or tags:
        cfg["placement"] = {**({"cluster": cluster} if cluster else {}), **({"tags": list(tags)} if tags else {})}
    if replicas:
        cfg["num_replicas"] = replicas
    data_path = os.path.join(directory, BACKUP_DATA)

    async def body(session: Session) -> None:
        try:
            await session.jsm.stream_info(name)
        except nats.js.errors.NotFoundError:
            pass
        else:
            raise CliError(f'stream "{name}" already exists: remove it first (jetraft stream rm {name})')
        session.echo(f'Starting restore of Stream "{name}" from file "{directory}"\n')
        start = time.monotonic()
        resp = await session.request_json(session.api_subject(f"STREAM.RESTORE.{name}"),
                                          {"config": cfg, "state": meta.get("state") or {}})
        deliver = resp.get("deliver_subject")
        if not deliver:
            raise CliError(f"the server gave no subject to restore stream {name} to")
        bar = _Progress(progress, "Sent", os.path.getsize(data_path))
        sent = 0
        with open(data_path, "rb") as f:
            while chunk := f.read(RESTORE_CHUNK):
                ack = await session.nc.request(deliver, chunk, timeout=session.opts.timeout)
                if ack.data:
                    _raise_reply_error(ack.data)
                sent += len(chunk)
                bar.update(sent)
        bar.update(sent, final=True)
        final = await session.nc.request(deliver, b"", timeout=max(session.opts.timeout, RESTORE_FINISH_S))
        _raise_reply_error(final.data)
        session.echo(f'Restored stream "{name}" in {_elapsed(start)}\n')
        session.show(await session.jsm.stream_info(name), stream_page)

    run(opts, body)


def _raise_reply_error(data: bytes) -> None:
    """Raise the API error a restore reply carries (nothing for a success)."""
    try:
        body = json.loads(data)
    except ValueError:
        raise CliError(f"restore failed: the server answered {data[:200]!r}") from None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        raise nats.js.errors.APIError.from_error(body["error"])
