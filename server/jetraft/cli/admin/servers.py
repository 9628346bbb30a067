"""``jetraft server ...``: list, report jetstream, raft step-down, raft peer-remove
(``server cluster ...`` is natscli's spelling of ``server raft ...``).

These use the system account's requests (``$SYS.REQ.SERVER.PING``,
``$SYS.REQ.SERVER.PING.JSZ``), ``$JS.API.META.LEADER.STEPDOWN`` and
``$JS.API.SERVER.REMOVE``, so they need a user of the system account (``--user``/``--password`` or a context). Every server answers a
ping; the answers are gathered until ``--expect`` of them have come (without --expect:
until none has come for :data:`QUIET_GAP` seconds after the last one), or ``--timeout``
passes.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
import nats.errors

from jetraft.cli.admin.groups import AliasedGroup, confirm, force_option, json_option, pass_options
from jetraft.cli.admin.render import print_table
from jetraft.cli.admin.session import CliError, Options, Session, run
from jetraft.cli.admin.streams import poll_new_leader
from jetraft.cli.admin.units import clock, format_ago, format_bytes, format_count, since

PING = "$SYS.REQ.SERVER.PING"
PING_JSZ = "$SYS.REQ.SERVER.PING.JSZ"
#: After the first answer to a ping, stop once no other answer came for this long.
QUIET_GAP = 0.3


@click.group(cls=AliasedGroup)
def server() -> None:
    """Inspect and manage the servers (needs a system account user)."""


def expect_option(fn):
    """``--expect N``: stop gathering after N answers."""
    return click.option("--expect", type=click.IntRange(min=1), metavar="N",
                        help="Stop after answers from N servers.")(fn)


async def gather(session: Session, subject: str, payload: Any = None, expect: int | None = None) -> list[dict]:
    """Publish one request to ``subject`` and collect every server's JSON answer.

    Raises CliError when nothing answers (no responders, or none before the timeout).
    """
    nc = session.nc
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    answers: list[dict] = []
    try:
        data = b"" if payload is None else json.dumps(payload).encode()
        await nc.publish(subject, data, reply=inbox)
        deadline = time.monotonic() + session.opts.timeout
        while expect is None or len(answers) < expect:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                quiet = answers and expect is None
                msg = await sub.next_msg(timeout=min(remaining, QUIET_GAP) if quiet else remaining)
            except nats.errors.TimeoutError:
                break
            if msg.headers and msg.headers.get("Status") == "503":
                raise CliError(f"no responders for {subject}: server requests need a user of the system "
                               "account (--user/--password or a context), and a server that answers them")
            try:
                answers.append(json.loads(msg.data))
            except ValueError:
                continue
    finally:
        await sub.unsubscribe()
    if not answers:
        raise CliError(f"no server answered {subject} within {session.opts.timeout:g}s")
    return sorted(answers, key=lambda a: a.get("server", {}).get("name", ""))


@server.command("list")
@expect_option
@json_option
@pass_options
def server_list(opts: Options, expect: int | None) -> None:
    """List the servers ($SYS.REQ.SERVER.PING): name, cluster, host, version, JetStream,
    connections, subscriptions, routes, uptime; then the totals."""

    async def body(session: Session) -> None:
        answers = await gather(session, PING, expect=expect)
        if session.opts.json:
            session.output_json(answers)
            return
        rows = []
        conns = 0
        for a in answers:
            info, stats = a.get("server", {}), a.get("statsz", {})
            conns += stats.get("connections", 0)
            rows.append((info.get("name"), info.get("cluster", ""), info.get("host"), info.get("ver"),
                         "yes" if info.get("jetstream") else "no", format_count(stats.get("connections")),
                         format_count(stats.get("subscriptions")), len(stats.get("routes") or []),
                         since(stats.get("start"), info.get("time")) if stats.get("start") else ""))
        print_table(f"Server Overview ({len(answers)} servers)",
                    ["Name", "Cluster", "Host", "Version", "JS", "Conns", "Subs", "Routes", "Uptime"],
                    rows, right=(5, 6, 7, 8))
        session.echo(f"{len(answers)} servers, {conns:,} connections")

    run(opts, body)


@server.group("report", cls=AliasedGroup)
def server_report() -> None:
    """Reports gathered from every server."""


def meta_view(answers: list[dict]) -> tuple[dict | None, str | None]:
    """The meta group as its leader sees it (the freshest view of every peer), else as
    any server sees it; with the name of the server whose view it is."""
    metas = [(a.get("server", {}).get("name"), a.get("data", {}).get("meta_cluster")) for a in answers]
    metas = [(name, m) for name, m in metas if m]
    for name, meta in metas:
        if meta.get("leader") and meta.get("leader") == name:
            return meta, name
    return (metas[0][1], metas[0][0]) if metas else (None, None)


def offline_peers(answers: list[dict]) -> set[str]:
    """The meta peers some answering server sees offline (``offline: true`` in its
    ``meta_cluster.replicas``), less the servers that answered (they are up)."""
    answered = {a.get("server", {}).get("name") for a in answers}
    out: set[str] = set()
    for a in answers:
        meta = a.get("data", {}).get("meta_cluster") or {}
        out.update(p.get("name") for p in meta.get("replicas") or [] if p.get("offline"))
    return out - answered


def meta_rows(meta: dict, viewer: str | None, offline: set[str] | frozenset[str] = frozenset()) -> list[tuple]:
    """Rows of the meta group table: the leader (marked *), then each other peer; a peer
    in ``offline`` (see :func:`offline_peers`) is shown offline and not current."""
    leader = meta.get("leader") or ""
    rows: list[tuple] = []
    if leader:
        rows.append((leader, "*", "true", "true", "0s", 0))
    seen = {leader}
    for peer in meta.get("replicas") or []:
        name = peer.get("name") or peer.get("peer") or "?"
        if name in seen:
            continue
        seen.add(name)
        active = peer.get("active") or 0
        down = bool(peer.get("offline")) or name in offline
        rows.append((name, "", str(bool(peer.get("current")) and not down).lower(), str(not down).lower(),
                     f"{format_ago(active)} ago" if active else "not seen", peer.get("lag") or 0))
    if viewer and viewer not in seen:
        rows.append((viewer, "", "?", "true", "", ""))
    return sorted(rows, key=lambda r: (r[1] != "*", r[0]))


@server_report.command("jetstream")
@expect_option
@json_option
@pass_options
def report_jetstream(opts: Options, expect: int | None) -> None:
    """JetStream on every server ($SYS.REQ.SERVER.PING.JSZ): streams, consumers, messages,
    bytes, memory and file use, API requests and errors; then the RAFT meta group: its
    leader and, for each peer, current, online, last seen and lag."""

    async def body(session: Session) -> None:
        answers = await gather(session, PING_JSZ, expect=expect)
        if session.opts.json:
            session.output_json(answers)
            return
        rows = []
        totals = [0] * 8
        for a in answers:
            info, data = a.get("server", {}), a.get("data", {})
            api_stats = data.get("api", {})
            values = [data.get("streams", 0), data.get("consumers", 0), data.get("messages", 0),
                      data.get("bytes", 0), data.get("memory", 0), data.get("storage", 0),
                      api_stats.get("total", 0), api_stats.get("errors", 0)]
            totals = [t + (v or 0) for t, v in zip(totals, values)]
            rows.append((info.get("name"), info.get("cluster", ""), *_report_cells(values)))
        rows.append(("Total", "", *_report_cells(totals)))
        print_table("JetStream Summary",
                    ["Server", "Cluster", "Streams", "Consumers", "Messages", "Bytes", "Memory",
                     "File", "API Req", "API Err"], rows, right=range(2, 10))
        meta, viewer = meta_view(answers)
        if meta is None:
            session.echo("No RAFT meta group: JetStream is not clustered on these servers")
            return
        title = (f"RAFT Meta Group Information (cluster {meta.get('name', '?')}, "
                 f"{meta.get('cluster_size', '?')} peers, leader {meta.get('leader') or 'none'})")
        print_table(title, ["Name", "Leader", "Current", "Online", "Active", "Lag"],
                    meta_rows(meta, viewer, offline_peers(answers)), right=(5,))

    run(opts, body)


def _report_cells(values: list[int]) -> list[str]:
    streams, consumers, messages, nbytes, memory, storage, api_total, api_errors = values
    return [format_count(streams), format_count(consumers), format_count(messages), format_bytes(nbytes),
            format_bytes(memory), format_bytes(storage), format_count(api_total), format_count(api_errors)]


@server.group("raft", cls=AliasedGroup)
def server_raft() -> None:
    """Manage the JetStream meta group."""


@server_raft.command("step-down")
@click.option("--wait", type=click.FloatRange(min=0.1), default=10.0, show_default=True, metavar="SECONDS",
              help="How long to wait for the new leader.")
@json_option
@pass_options
def raft_step_down(opts: Options, wait: float) -> None:
    """Make the meta group leader step down ($JS.API.META.LEADER.STEPDOWN).

    Learns the leader from $SYS.REQ.SERVER.PING.JSZ, prints 'Requesting leader step down
    of "OLD" in a N peer RAFT group', then polls until 'New leader elected "NEW"'.
    """

    async def body(session: Session) -> None:
        meta, _ = meta_view(await gather(session, PING_JSZ))
        if meta is None:
            raise CliError("JetStream is not clustered on this server: there is no meta group leader to step down")
        old = meta.get("leader")
        if not old:
            raise CliError("the meta group has no leader now (an election is under way, or too few "
                           "servers are up for a quorum): nothing to step down; retry in a few "
                           "seconds, or check the servers (jetraft server report jetstream)")
        if not session.opts.json:
            session.echo(f'{clock()} Requesting leader step down of "{old}" in a '
                         f'{meta.get("cluster_size", "?")} peer RAFT group')
        await session.request_json(session.api_subject("META.LEADER.STEPDOWN"))

        async def leader() -> str | None:
            view, _ = meta_view(await gather(session, PING_JSZ))
            return view.get("leader") if view else None

        new = await poll_new_leader(leader, old, wait)
        if session.opts.json:
            session.output_json({"old_leader": old, "new_leader": new})
        else:
            session.echo(f'{clock()} New leader elected "{new}"')

    run(opts, body)


@server_raft.command("peer-remove")
@click.argument("name")
@force_option
@json_option
@pass_options
def raft_peer_remove(opts: Options, name: str, force: bool) -> None:
    """Remove server NAME (a name or peer id) from the JetStream meta group ($JS.API.SERVER.REMOVE).

    For a server that will not come back: its stream replicas are placed on other servers
    by the usual zone rules, and it is refused as a member if it returns with its old
    store. Finds NAME among the meta leader's peers (from $SYS.REQ.SERVER.PING.JSZ), asks
    'Really remove online|offline peer NAME' unless -f, then prints 'Removed peer "NAME"'.
    """

    async def body(session: Session) -> None:
        meta, seen_by = meta_view(await gather(session, PING_JSZ))
        if meta is None:
            raise CliError("JetStream is not clustered on the servers that answered: there is no meta group")
        leader = meta.get("leader")
        if not leader or leader != seen_by:
            raise CliError("no meta group leader answered: wait for one to be elected "
                           "(jetraft server report jetstream), then try again")
        if name == leader:
            raise CliError(f"{name} is the meta group leader: move the leadership first "
                           "(jetraft server raft step-down), then remove it")
        found = next((r for r in meta.get("replicas") or []
                      if name in (r.get("name"), r.get("peer"))), None)
        if found is None:
            peers = sorted([leader, *(r.get("name") for r in meta.get("replicas") or [])])
            raise CliError(f"{name} is not a peer of the meta group (its peers: {', '.join(peers)})")
        state = "offline" if found.get("offline") else "online"
        if not force and not session.opts.json:
            session.echo("Removing a peer is for a server that will not come back: its stream replicas are "
                         "placed on other servers,\nand it is refused as a member if it returns with its old store.")
        confirm(force, f"Really remove {state} peer {found['name']}?")
        resp = await session.request_json(session.api_subject("SERVER.REMOVE"), {"peer": found["name"]})
        if session.opts.json:
            session.output_json(resp)
        else:
            session.echo(f'{clock()} Removed peer "{found["name"]}" from the meta group')

    run(opts, body)
