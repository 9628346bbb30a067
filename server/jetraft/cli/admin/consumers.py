"""``jetraft consumer ...``: add, info, edit, ls, report, rm, next, cluster step-down."""

from __future__ import annotations

import datetime as _dt
import math

import click
import nats.errors
from nats.js import api

from jetraft.cli.admin.groups import AliasedGroup, confirm, force_option, json_option, parsed, pass_options, split_csv
from jetraft.cli.admin.messages import format_message
from jetraft.cli.admin.render import cluster_members, consumer_page, print_table, title_case
from jetraft.cli.admin.session import CliError, Options, Session, run
from jetraft.cli.admin.streams import apply_edit, poll_new_leader, wait_option
from jetraft.cli.admin.units import clock, format_count, format_duration, format_time, parse_duration, since

ACK = {"explicit": api.AckPolicy.EXPLICIT, "none": api.AckPolicy.NONE, "all": api.AckPolicy.ALL}


@click.group(cls=AliasedGroup)
def consumer() -> None:
    """Manage consumers (alias: con, c, obs)."""


def deliver_start(text: str) -> dict:
    """``--deliver``: all, new, last, last-per-subject, a stream sequence (``100``) or a
    duration back from now (``1h``) -> the ConsumerConfig fields that say where to start."""
    t = text.strip().lower().replace("-", "_")
    if t in ("all", "new", "last", "last_per_subject"):
        return {"deliver_policy": api.DeliverPolicy(t)}
    if t.isdigit():
        return {"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": int(t)}
    start = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=parse_duration(text))
    return {"deliver_policy": api.DeliverPolicy.BY_START_TIME, "opt_start_time": start}


@consumer.command("add")
@click.argument("stream")
@click.argument("name")
@click.option("--pull/--push", "pull", default=None, help="Pull (the default) or push delivery.")
@click.option("--deliver-subject", "--target", "deliver_subject", metavar="SUBJECT",
              help="Push consumers: the subject messages are delivered to.")
@click.option("--deliver-group", metavar="GROUP", help="Push consumers: the queue group bound to it.")
@click.option("--ack", "ack", type=click.Choice(sorted(ACK)), default="explicit", show_default=True)
@click.option("--filter", "filters", multiple=True, metavar="SUBJECT", help="Only messages on these subjects.")
@click.option("--deliver", "deliver", default="all", show_default=True,
              callback=parsed(deliver_start, "all, new, last, last-per-subject, a sequence or a duration"),
              help="Where to start: all, new, last, last-per-subject, a sequence, or a duration ago.")
@click.option("--max-deliver", type=int, default=-1, help="Maximum deliveries of a message (-1: unlimited).")
@click.option("--max-pending", type=int, help="Maximum unacknowledged messages.")
@click.option("--wait", "ack_wait", callback=parsed(parse_duration, "e.g. 30s"), help="Ack wait (e.g. 30s).")
@click.option("--replay", type=click.Choice(["instant", "original"]), default="instant", show_default=True)
@click.option("--replicas", type=click.IntRange(0, 5), help="Replicas (default: the stream's).")
@click.option("--description", help="A description.")
@click.option("--defaults", is_flag=True, help="Accepted for compatibility: unset options take their defaults.")
@json_option
@pass_options
def consumer_add(opts: Options, stream: str, name: str, pull: bool | None, deliver_subject: str | None,
                 deliver_group: str | None, ack: str, filters: tuple[str, ...], deliver: dict,
                 max_deliver: int, max_pending: int | None, ack_wait: float | None, replay: str,
                 replicas: int | None, description: str | None, defaults: bool) -> None:
    """Create a durable consumer NAME on STREAM ($JS.API.CONSUMER.CREATE.STREAM.NAME); prints its info."""
    if pull is None:
        pull = deliver_subject is None
    if pull and deliver_subject:
        raise click.UsageError("--deliver-subject is for push consumers (drop --pull)")
    if not pull and not deliver_subject:
        raise click.UsageError("a push consumer needs --deliver-subject")
    subjects = split_csv(filters)
    config = api.ConsumerConfig(
        name=name, durable_name=name, description=description, deliver_subject=deliver_subject,
        deliver_group=deliver_group, ack_policy=ACK[ack], max_deliver=max_deliver,
        max_ack_pending=max_pending, ack_wait=ack_wait, replay_policy=api.ReplayPolicy(replay),
        num_replicas=replicas, filter_subject=subjects[0] if len(subjects) == 1 else None,
        filter_subjects=subjects if len(subjects) > 1 else None, **deliver,
    )

    async def body(session: Session) -> None:
        session.show(await session.jsm.add_consumer(stream, config), consumer_page)

    run(opts, body)


async def with_cluster(session: Session, info: api.ConsumerInfo) -> api.ConsumerInfo:
    """``info`` with its ``cluster`` block. A server that leaves it out of CONSUMER.INFO
    (jetraft: a consumer is replicated in its stream's RAFT group, so it has the stream's
    leader and replicas) gets the stream's, from $JS.API.STREAM.INFO.STREAM."""
    if info.cluster is None:
        stream = await session.jsm.stream_info(info.stream_name)
        info.cluster = stream.cluster
    return info


@consumer.command("info")
@click.argument("stream")
@click.argument("name")
@json_option
@pass_options
def consumer_info(opts: Options, stream: str, name: str) -> None:
    """Show a consumer ($JS.API.CONSUMER.INFO.STREAM.NAME): Configuration, Cluster Information
    (name, leader, one Replica row per follower), State."""

    async def body(session: Session) -> None:
        session.show(await with_cluster(session, await session.jsm.consumer_info(stream, name)), consumer_page)

    run(opts, body)


def consumer_changes(description: str | None, filters: tuple[str, ...], max_deliver: int | None,
                     max_pending: int | None, max_waiting: int | None, ack_wait: float | None,
                     replicas: int | None, headers_only: bool | None, inactive_threshold: float | None,
                     max_pull_batch: int | None, max_pull_expire: float | None,
                     max_pull_bytes: int | None) -> tuple[dict, list[str]]:
    """The ConsumerConfig JSON fields the given ``consumer edit`` options set (durations in
    nanoseconds), and the fields to drop (a filter given as one subject replaces a list,
    and the reverse)."""
    out: dict = {}
    drop: list[str] = []
    subjects = split_csv(filters)
    if len(subjects) == 1:
        out["filter_subject"], drop = subjects[0], ["filter_subjects"]
    elif subjects:
        out["filter_subjects"], drop = subjects, ["filter_subject"]
    values = {"description": description, "max_deliver": max_deliver, "max_ack_pending": max_pending,
              "max_waiting": max_waiting, "num_replicas": replicas, "headers_only": headers_only,
              "max_batch": max_pull_batch, "max_bytes": max_pull_bytes}
    out.update({k: v for k, v in values.items() if v is not None})
    durations = {"ack_wait": ack_wait, "inactive_threshold": inactive_threshold, "max_expires": max_pull_expire}
    out.update({k: int(v * 1e9) for k, v in durations.items() if v is not None})
    return out, drop


@consumer.command("edit")
@click.argument("stream")
@click.argument("name")
@click.option("--description", help="A description.")
@click.option("--filter", "filters", multiple=True, metavar="SUBJECT", help="Only messages on these subjects.")
@click.option("--max-deliver", type=int, help="Maximum deliveries of a message (-1: unlimited).")
@click.option("--max-pending", type=int, help="Maximum unacknowledged messages.")
@click.option("--max-waiting", type=int, help="Pull consumers: maximum outstanding pull requests.")
@click.option("--wait", "ack_wait", callback=parsed(parse_duration, "e.g. 30s"), help="Ack wait (e.g. 30s).")
@click.option("--replicas", type=click.IntRange(0, 5), help="Replicas (0: the stream's).")
@click.option("--headers-only/--no-headers-only", default=None, help="Deliver only the headers, no bodies.")
@click.option("--inactive-threshold", callback=parsed(parse_duration, "e.g. 1h"),
              help="How long the consumer may be idle before it is removed.")
@click.option("--max-pull-batch", type=int, help="Pull consumers: the largest batch a request may ask for.")
@click.option("--max-pull-expire", callback=parsed(parse_duration, "e.g. 30s"),
              help="Pull consumers: the longest expiry a request may ask for.")
@click.option("--max-pull-bytes", type=int, help="Pull consumers: the largest max bytes a request may ask for.")
@click.option("--dry-run", is_flag=True, help="Only show the differences (exit 1 when there are some).")
@force_option
@json_option
@pass_options
def consumer_edit(opts: Options, stream: str, name: str, description: str | None, filters: tuple[str, ...],
                  max_deliver: int | None, max_pending: int | None, max_waiting: int | None,
                  ack_wait: float | None, replicas: int | None, headers_only: bool | None,
                  inactive_threshold: float | None, max_pull_batch: int | None, max_pull_expire: float | None,
                  max_pull_bytes: int | None, dry_run: bool, force: bool) -> None:
    """Change a durable consumer's editable settings ($JS.API.CONSUMER.CREATE.STREAM.NAME
    with action "update" and the config from $JS.API.CONSUMER.INFO.STREAM.NAME, the given
    options applied).

    Prints 'Differences (-old +new):' and the changed fields, asks 'Really edit Consumer
    STREAM > NAME?' (-f skips it), then 'Consumer STREAM > NAME was updated' and the info
    as 'consumer info' shows it; 'No difference in configuration' when nothing changes.
    The server refuses changes to fields that cannot be edited (deliver policy, ack
    policy, ...) with an API error.
    """
    changes, drop = consumer_changes(description, filters, max_deliver, max_pending, max_waiting, ack_wait,
                                     replicas, headers_only, inactive_threshold, max_pull_batch,
                                     max_pull_expire, max_pull_bytes)

    async def body(session: Session) -> None:
        current = await session.request_json(session.api_subject(f"CONSUMER.INFO.{stream}.{name}"))
        old = dict(current.get("config") or {})
        if not old.get("durable_name") and not old.get("name"):
            raise CliError(f"consumer {stream} > {name} is not durable: only durable consumers can be edited")
        new = {k: v for k, v in {**old, **changes}.items() if k not in drop}

        async def update(config: dict | None) -> dict:
            if config is None:
                return current
            return await session.request_json(session.api_subject(f"CONSUMER.CREATE.{stream}.{name}"),
                                              {"stream_name": stream, "config": config, "action": "update"})

        async def render(info: dict) -> str:
            return consumer_page(await with_cluster(session, api.ConsumerInfo.from_response(info)))

        rendered: dict[str, str] = {}

        async def update_and_render(config: dict | None) -> dict:
            info = await update(config)
            if not session.opts.json:
                rendered["page"] = await render(info)
            return info

        await apply_edit(session, f"Consumer {stream} > {name}", old, new, force=force, dry_run=dry_run,
                         update=update_and_render, render=lambda _info: rendered["page"])

    run(opts, body)


@consumer.command("ls")
@click.argument("stream")
@click.option("-n", "--names", is_flag=True, help="Print only the names, one a line.")
@json_option
@pass_options
def consumer_ls(opts: Options, stream: str, names: bool) -> None:
    """List a stream's consumers ($JS.API.CONSUMER.LIST.STREAM): name, mode, pending, last delivery."""

    async def body(session: Session) -> None:
        found: list[api.ConsumerInfo] = []
        while True:
            page = await session.jsm.consumers_info(stream, offset=len(found))
            found.extend(page)
            if not page or len(page) < 256:
                break
        found.sort(key=lambda c: c.name)
        if session.opts.json:
            session.output_json([c.name for c in found] if names else found)
        elif names:
            for c in found:
                session.echo(c.name)
        elif not found:
            session.echo(f"No consumers defined on stream {stream}")
        else:
            rows = [(c.name, "push" if c.config.deliver_subject else "pull", format_time(c.created),
                     format_count(c.num_ack_pending), format_count(c.num_pending),
                     f"{since(c.delivered.last_active)} ago" if c.delivered and c.delivered.last_active else "never")
                    for c in found]
            print_table(f"Consumers of {stream} ({len(found)})",
                        ["Name", "Mode", "Created", "Ack Pending", "Unprocessed", "Last Delivery"],
                        rows, right=(3, 4))

    run(opts, body)


async def all_consumers(session: Session, stream: str) -> list[api.ConsumerInfo]:
    """Every consumer of ``stream``, page by page ($JS.API.CONSUMER.LIST.STREAM)."""
    found: list[api.ConsumerInfo] = []
    while True:
        page = await session.jsm.consumers_info(stream, offset=len(found))
        found.extend(page)
        if not page or len(page) < 256:
            return found


@consumer.command("report")
@click.argument("stream")
@pass_options
def consumer_report(opts: Options, stream: str) -> None:
    """A table of a stream's consumers ($JS.API.CONSUMER.LIST.STREAM), as the nats CLI's
    'Consumer report for STREAM with N consumers': Consumer, Mode, Ack Policy, Ack Wait,
    Ack Pending, Redelivered, Unprocessed (count / share of the stream's messages), Ack
    Floor, API Level, Cluster (the leader marked *, a replica behind or offline !)."""

    async def body(session: Session) -> None:
        info = await session.jsm.stream_info(stream)
        found = sorted(await all_consumers(session, stream), key=lambda c: c.name)
        rows = []
        for c in found:
            c = await with_cluster(session, c) if c.cluster is None else c
            pending = c.num_pending or 0
            unprocessed = "0"
            if pending:
                share = min(100, math.floor(pending / max(info.state.messages, 1) * 100))
                unprocessed = f"{pending:,} / {share}%"
            level = (c.config.metadata or {}).get("_nats.req.level", "0")
            rows.append((c.name, "Push" if c.config.deliver_subject else "Pull", title_case(c.config.ack_policy),
                         format_duration(c.config.ack_wait), format_count(c.num_ack_pending),
                         format_count(c.num_redelivered), unprocessed,
                         format_count(c.ack_floor.stream_seq if c.ack_floor else 0), level,
                         cluster_members(c.cluster)))
        print_table(f"Consumer report for {stream} with {info.state.consumer_count:,} consumers",
                    ["Consumer", "Mode", "Ack Policy", "Ack Wait", "Ack Pending", "Redelivered", "Unprocessed",
                     "Ack Floor", "API Level", "Cluster"], rows, right=(4, 5, 6, 7))

    run(opts, body)


@consumer.group("cluster", cls=AliasedGroup)
def consumer_cluster() -> None:
    """Manage a consumer's RAFT group: leader step-down."""


@consumer_cluster.command("step-down")
@click.argument("stream")
@click.argument("name")
@wait_option
@json_option
@pass_options
def consumer_step_down(opts: Options, stream: str, name: str, wait: float) -> None:
    """Make a consumer's leader step down ($JS.API.CONSUMER.LEADER.STEPDOWN.STREAM.NAME).

    Prints 'Requesting leader step down of "OLD" in a N peer RAFT group', polls
    $JS.API.CONSUMER.INFO.STREAM.NAME until another leader is elected (at most --wait
    seconds) and prints 'New leader elected "NEW"'. On jetraft a consumer is replicated in
    its stream's RAFT group, so the stream's leader moves with it.
    """

    async def body(session: Session) -> None:
        info = await with_cluster(session, await session.jsm.consumer_info(stream, name))
        if info.cluster is None or not info.cluster.name:
            raise CliError(f"consumer {stream} > {name} is not clustered: there is no leader to step down")
        old = info.cluster.leader
        if not old:
            raise CliError(f"consumer {stream} > {name} has no leader now: retry once one is elected")
        peers = 1 + len(info.cluster.replicas or [])
        if not session.opts.json:
            session.echo(f'{clock()} Requesting leader step down of "{old}" in a {peers} peer RAFT group')
        await session.request_json(session.api_subject(f"CONSUMER.LEADER.STEPDOWN.{stream}.{name}"))

        async def leader() -> str | None:
            current = await with_cluster(session, await session.jsm.consumer_info(stream, name))
            return current.cluster.leader if current.cluster else None

        new = await poll_new_leader(leader, old, wait)
        if session.opts.json:
            session.output_json({"stream": stream, "consumer": name, "old_leader": old, "new_leader": new})
        else:
            session.echo(f'{clock()} New leader elected "{new}"')

    run(opts, body)


@consumer.command("rm")
@click.argument("stream")
@click.argument("name")
@force_option
@pass_options
def consumer_rm(opts: Options, stream: str, name: str, force: bool) -> None:
    """Delete a consumer ($JS.API.CONSUMER.DELETE.STREAM.NAME); prints 'Deleted consumer STREAM > NAME'."""
    confirm(force, f"Really delete consumer {stream} > {name}?")

    async def body(session: Session) -> None:
        await session.jsm.delete_consumer(stream, name)
        session.echo(f"Deleted consumer {stream} > {name}")

    run(opts, body)


@consumer.command("next")
@click.argument("stream")
@click.argument("name")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True, help="How many messages.")
@click.option("--ack/--no-ack", default=True, show_default=True, help="Acknowledge each message.")
@click.option("--raw", is_flag=True, help="Print only the message bodies.")
@pass_options
def consumer_next(opts: Options, stream: str, name: str, count: int, ack: bool, raw: bool) -> None:
    """Fetch messages from a pull consumer ($JS.API.CONSUMER.MSG.NEXT.STREAM.NAME), one at a time.

    Prints each as '[hh:mm:ss] subj: S / tries: N / cons seq: C / str seq: S / pending: P',
    then its headers and body, then 'Acknowledged message' when --ack (waiting for the
    server to confirm the ack; consumers with ack policy none are not acked).
    Exits 1 when no message comes within --timeout.
    """

    async def body(session: Session) -> None:
        info = await session.jsm.consumer_info(stream, name)
        if info.config.deliver_subject:
            raise CliError(f"consumer {stream} > {name} is a push consumer; next needs a pull consumer")
        ack_each = ack and info.config.ack_policy != api.AckPolicy.NONE
        psub = await session.js.pull_subscribe_bind(durable=name, stream=stream)
        try:
            for _ in range(count):
                try:
                    (msg,) = await psub.fetch(1, timeout=session.opts.timeout)
                except nats.errors.TimeoutError:
                    raise CliError(f"no message received within {session.opts.timeout:g}s") from None
                if raw:
                    session.echo(msg.data.decode(errors="replace"))
                else:
                    md = msg.metadata
                    session.echo(f"[{clock()}] subj: {msg.subject} / tries: {md.num_delivered} / "
                                 f"cons seq: {md.sequence.consumer} / str seq: {md.sequence.stream} / "
                                 f"pending: {md.num_pending}\n")
                    session.echo(format_message(msg, with_subject=False))
                if ack_each:
                    await msg.ack_sync(timeout=session.opts.timeout)
                    if not raw:
                        session.echo("Acknowledged message\n")
        finally:
            await psub.unsubscribe()

    run(opts, body)
