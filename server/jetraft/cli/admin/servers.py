"""``jetraft server ...``: list, ping, info, report jetstream|connections|accounts, raft
step-down, raft peer-remove (``server cluster ...`` is natscli's spelling of ``server raft ...``).

These use the system account's requests (``$SYS.REQ.SERVER.PING``,
``$SYS.REQ.SERVER.PING.JSZ``, ``.VARZ``, ``.CONNZ``), ``$JS.API.META.LEADER.STEPDOWN`` and
``$JS.API.SERVER.REMOVE``, so they need a user of the system account (``--user``/``--password`` or a context). Every server answers a
ping; the answers are gathered until ``--expect`` of them have come (without --expect:
until none has come for :data:`QUIET_GAP` seconds after the last one), or ``--timeout``
passes.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import click
import nats.errors

from jetraft.cli.admin.checks import check
from jetraft.cli.admin.groups import AliasedGroup, confirm, force_option, json_option, pass_options
from jetraft.cli.admin.messages import until_stopped
from jetraft.cli.admin.render import Page, print_table
from jetraft.cli.admin.session import CliError, Options, Session, run
from jetraft.cli.admin.streams import poll_new_leader
from jetraft.cli.admin.units import (
    clock,
    format_ago,
    format_bytes,
    format_count,
    format_duration,
    parse_time,
    since,
)

PING = "$SYS.REQ.SERVER.PING"
PING_JSZ = "$SYS.REQ.SERVER.PING.JSZ"
PING_VARZ = "$SYS.REQ.SERVER.PING.VARZ"
PING_CONNZ = "$SYS.REQ.SERVER.PING.CONNZ"
#: After the first answer to a ping, stop once no other answer came for this long.
QUIET_GAP = 0.3


@click.group(cls=AliasedGroup)
def server() -> None:
    """Inspect and manage the servers (needs a system account user)."""


server.add_command(check)


def expect_option(fn):
    """``--expect N``: stop gathering after N answers."""
    return click.option("--expect", type=click.IntRange(min=1), metavar="N",
                        help="Stop after answers from N servers.")(fn)


def watch_option(fn):
    """``--watch SECONDS``: the report again every SECONDS seconds until Ctrl-C."""
    return click.option("--watch", "watch", type=click.IntRange(min=1), metavar="SECONDS",
                        help="Show the report again every SECONDS seconds until Ctrl-C.")(fn)


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


class ReportGroup(AliasedGroup):
    """The reports, with the ``nats`` CLI's aliases for them."""

    SHORT = {"conn": "connections", "conns": "connections", "connz": "connections", "acct": "accounts",
             "js": "jetstream", "jsz": "jetstream"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.SHORT.get(cmd_name, cmd_name))


@server.group("report", cls=ReportGroup)
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
@watch_option
@json_option
@pass_options
def report_jetstream(opts: Options, expect: int | None, watch: int | None) -> None:
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

    run(opts, watching(watch, body))


def _report_cells(values: list[int]) -> list[str]:
    streams, consumers, messages, nbytes, memory, storage, api_total, api_errors = values
    return [format_count(streams), format_count(consumers), format_count(messages), format_bytes(nbytes),
            format_bytes(memory), format_bytes(storage), format_count(api_total), format_count(api_errors)]


# --------------------------------------------------------------------------- connections, accounts

#: Connections asked of each server per page (natscli's ConnzOptions limit).
CONNZ_PAGE = 1024
#: Connection states of ``--state`` as ConnzOptions ``state`` (nats-server ConnState).
CONN_STATES = {"open": 0, "closed": 1, "all": 2}
#: ``report connections --sort`` keys (ascending, as natscli sorts them).
CONN_SORTS: dict[str, Any] = {
    "in-bytes": lambda c: c.get("in_bytes") or 0, "out-bytes": lambda c: c.get("out_bytes") or 0,
    "in-msgs": lambda c: c.get("in_msgs") or 0, "out-msgs": lambda c: c.get("out_msgs") or 0,
    "uptime": lambda c: -(_started(c.get("start"))), "cid": lambda c: c.get("cid") or 0,
    "subs": lambda c: len(c.get("subscriptions_list") or []),
}
#: ``report accounts --sort`` keys.
ACCOUNT_SORTS: dict[str, Any] = {
    "in-bytes": lambda a: a["in_bytes"], "out-bytes": lambda a: a["out_bytes"], "in-msgs": lambda a: a["in_msgs"],
    "out-msgs": lambda a: a["out_msgs"], "conns": lambda a: a["connections"], "subs": lambda a: a["subscriptions"],
}


def _started(text: Any) -> float:
    when = parse_time(text) if isinstance(text, str) else None
    return when.timestamp() if when is not None else 0.0


def filter_options(fn):
    """natscli's report filters: ``--host``, ``--cluster``, ``--tags`` (EventFilterOptions,
    exact match), and ``--watch``."""
    fn = watch_option(fn)
    fn = click.option("--tags", multiple=True, metavar="TAG", help="Limit the report to servers with these tags.")(fn)
    fn = click.option("--cluster", "cluster_name", help="Limit the report to a specific cluster.")(fn)
    fn = click.option("--host", "host", help="Limit the report to a specific server (by name).")(fn)
    return click.option("-R", "--reverse", is_flag=True, help="Reverse the sort order.")(fn)


def watching(seconds: int | None, body):
    """``body`` itself, or with ``seconds`` a body that runs it, then again every ``seconds``
    seconds, the terminal cleared before each (when it is one), until Ctrl-C, which ends it
    with status 0 (natscli's report ``--watch``, withWatcher). An error ends it at once."""
    if not seconds:
        return body

    async def watched(session: Session) -> None:
        session.handles_interrupt = True
        while not session.stop.is_set():
            click.clear()
            await body(session)
            await until_stopped(session, asyncio.sleep(seconds))

    return watched


def _event_filter(session: Session, host: str | None, cluster_name: str | None, tags: tuple[str, ...]) -> dict:
    out: dict[str, Any] = {"exact_match": True}
    if host:
        out["server_name"] = host
    if cluster_name:
        out["cluster"] = cluster_name
    if tags:
        out["tags"] = list(tags)
    if session.opts.js_domain:
        out["domain"] = session.opts.js_domain
    return out


async def active_servers(session: Session) -> int:
    """How many servers the connected one knows to be up: ``active_servers`` of the first
    answer to $SYS.REQ.SERVER.PING (natscli serverdata.CurrentActiveServers)."""
    first = await gather(session, PING, expect=1)
    return int((first[0].get("statsz") or {}).get("active_servers") or 1)


async def gather_connections(session: Session, limit: int | None, options: dict[str, Any]) -> list[dict]:
    """Every matching connection of every answering server ($SYS.REQ.SERVER.PING.CONNZ
    with ``options``, page by page of :data:`CONNZ_PAGE`), each ConnInfo with the answering
    server's ServerInfo under ``server``. Waits for ``limit`` answers (default: as many
    servers as are active). Raises CliError for a server's error answer."""
    expect = limit or await active_servers(session)
    conns: list[dict] = []
    offset = 0
    while True:
        answers = await gather(session, PING_CONNZ, {**options, "limit": CONNZ_PAGE, "offset": offset}, expect)
        more = False
        for answer in answers:
            if answer.get("error"):
                error = answer["error"]
                raise CliError(f"invalid response received from {answer.get('server', {}).get('name', '?')}: "
                               f"{error.get('description', error)}")
            data = answer.get("data")
            if not isinstance(data, dict):
                raise CliError("no data received in a $SYS.REQ.SERVER.PING.CONNZ answer")
            page = data.get("connections") or []
            conns += [{**c, "server": answer.get("server") or {}} for c in page]
            if page and (data.get("offset") or 0) + (data.get("limit") or 0) < (data.get("total") or 0):
                more = True
        if not more:
            return conns
        offset += CONNZ_PAGE


def connections_report(conns: list[dict], sort: str, top: int, reverse: bool, state: str) -> None:
    """natscli's connections table (the first ``top`` after sorting by ``sort``, ascending
    unless ``reverse``), the totals of all of them, then the connections per server."""
    conns = sorted(conns, key=CONN_SORTS.get(sort, CONN_SORTS["subs"]), reverse=reverse)
    total = len(conns)
    shown = min(top, total) if top > 0 else total
    headers = ["CID", "Name", "Server", "Cluster", "IP", "Account", "Uptime", "In Msgs", "Out Msgs",
               "In Bytes", "Out Bytes", "Subs"]
    with_reason = state in ("closed", "all")
    if with_reason:
        headers.append("Reason")
    rows = []
    per_server: dict[str, list] = {}
    for c in conns:
        info = c.get("server") or {}
        entry = per_server.setdefault(info.get("name", ""), [info.get("cluster", ""), 0])
        entry[1] += 1
        if len(rows) >= shown:
            continue
        name = c.get("name") or c.get("mqtt_client") or ""
        name = name[:40] + " .." if len(name) > 40 else name
        account = c.get("account") or ""
        account = account[:12] + " .." if len(account) > 46 else account
        kind = c.get("kind") or "Client"
        cid = str(c.get("cid", "")) if kind == "Client" else f"{kind[0]}{c.get('cid', '')}"
        row = [cid, name, info.get("name", ""), info.get("cluster", ""), f"{c.get('ip', '')}:{c.get('port', '')}",
               account, c.get("uptime", ""), format_count(c.get("in_msgs")), format_count(c.get("out_msgs")),
               format_bytes(c.get("in_bytes")), format_bytes(c.get("out_bytes")),
               format_count(len(c.get("subscriptions_list") or []))]
        rows.append(row + ([c.get("reason", "")] if with_reason else []))
    if total > 1:
        sums = [sum(c.get(k) or 0 for c in conns) for k in ("in_msgs", "out_msgs", "in_bytes", "out_bytes",
                                                           "subscriptions")]
        footer = ["", f"Totals for {total:,} connections", "", "", "", "", "", format_count(sums[0]),
                  format_count(sums[1]), format_bytes(sums[2]), format_bytes(sums[3]), format_count(sums[4])]
        rows.append(footer + ([""] if with_reason else []))
    print_table(f"Top {shown} Connections out of {total:,} by {sort}", headers, rows, right=range(7, 12))
    if per_server:
        click.echo()
        order = sorted(per_server, key=lambda n: per_server[n][1])
        print_table("Connections per server", ["Server", "Cluster", "Connections"],
                    [(n, per_server[n][0], per_server[n][1]) for n in order], right=(2,))


def _connz_options(user: str | None, account: str | None, state: str, subject: str | None) -> dict[str, Any]:
    """natscli's ConnzOptions for the reports: subscriptions and users shown."""
    out: dict[str, Any] = {"subscriptions": True, "auth": True, "state": CONN_STATES[state]}
    if user:
        out["user"] = user
    if account:
        out["acc"] = account
    if subject:
        out["filter_subject"] = subject
    return out


@server_report.command("connections")
@click.argument("limit", metavar="[LIMIT]", required=False, type=click.IntRange(min=1))
@click.option("--account", help="Limit the report to a specific account.")
@click.option("--sort", type=click.Choice(list(CONN_SORTS)), default="subs", show_default=True,
              help="Sort by a specific property.")
@click.option("--top", type=int, default=1000, show_default=True, help="Limit the report to the top N connections.")
@click.option("--subject", help="Only the connections with a subscription matching this subject.")
@click.option("--username", help="Only the connections of this user.")
@click.option("--state", type=click.Choice(list(CONN_STATES)), default="open", show_default=True,
              help="Only the connections in this state.")
@click.option("--closed-reason", "closed_reason", metavar="REASON",
              help="Only the connections whose closed reason (lower case) matches this regular expression.")
@filter_options
@json_option
@pass_options
def report_connections(opts: Options, limit: int | None, account: str | None, sort: str, top: int,
                       subject: str | None, username: str | None, state: str, closed_reason: str | None,
                       reverse: bool, host: str | None, cluster_name: str | None, tags: tuple[str, ...],
                       watch: int | None) -> None:
    """Connections on every server ($SYS.REQ.SERVER.PING.CONNZ): the top --top by --sort
    (ascending; -R reverses) with CID, name, server, cluster, IP, account, uptime, messages,
    bytes and subscriptions, the totals, then the connections per server. LIMIT: wait for
    that many servers (default: as many as are active). --closed-reason: a regular
    expression searched in each connection's reason, lower-cased (natscli's ``lower(Conn.Reason)
    matches``; give --state closed or all, open connections have none). --watch: again every
    SECONDS until Ctrl-C. --json: every connection's ConnInfo with its server's ServerInfo
    under "server" (natscli cli/server_report_command.go)."""
    reason = _reason_pattern(closed_reason)

    async def body(session: Session) -> None:
        options = {**_connz_options(username, account, state, subject), **_event_filter(session, host, cluster_name, tags)}
        conns = await gather_connections(session, limit, options)
        if reason is not None:
            conns = [c for c in conns if reason.search((c.get("reason") or "").lower())]
        if not conns:
            raise CliError("no connection matched on the servers that answered")
        if session.opts.json:
            session.output_json(conns)
            return
        connections_report(conns, sort, top, reverse, state)

    run(opts, watching(watch, body))


def _reason_pattern(text: str | None) -> re.Pattern[str] | None:
    """``--closed-reason`` compiled; a bad expression is a one-line usage error."""
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise click.BadParameter(f"{text!r} is not a regular expression: {exc}",
                                 param_hint="'--closed-reason'") from None


def account_totals(conns: list[dict]) -> dict[str, dict[str, Any]]:
    """Per account: connections, messages and bytes in and out, subscriptions, the
    connections (``connection_info``) and the servers they are on (natscli
    srvReportAccountInfo)."""
    out: dict[str, dict[str, Any]] = {}
    for c in conns:
        name = c.get("account") or ""
        acc = out.setdefault(name, {"account": name, "connections": 0, "connection_info": [], "in_msgs": 0,
                                    "out_msgs": 0, "in_bytes": 0, "out_bytes": 0, "subscriptions": 0,
                                    "server": []})
        acc["connection_info"].append(c)
        acc["connections"] += 1
        for key in ("in_msgs", "out_msgs", "in_bytes", "out_bytes"):
            acc[key] += c.get(key) or 0
        acc["subscriptions"] += len(c.get("subscriptions_list") or [])
        info = c.get("server") or {}
        if all(s.get("id") != info.get("id") for s in acc["server"]):
            acc["server"].append(info)
    return out


@server_report.command("accounts")
@click.argument("account_name", metavar="[ACCOUNT]", required=False)
@click.argument("limit", metavar="[LIMIT]", required=False, type=click.IntRange(min=1))
@click.option("--sort", type=click.Choice(list(ACCOUNT_SORTS)), default="subs", show_default=True,
              help="Sort by a specific property.")
@click.option("--top", type=int, default=1000, show_default=True, help="Limit the report to the top N accounts.")
@filter_options
@json_option
@pass_options
def report_accounts(opts: Options, account_name: str | None, limit: int | None, sort: str, top: int, reverse: bool,
                    host: str | None, cluster_name: str | None, tags: tuple[str, ...], watch: int | None) -> None:
    """Account activity from every server's connections ($SYS.REQ.SERVER.PING.CONNZ):
    per account, connections, messages and bytes in and out, subscriptions; the --top
    accounts by --sort (ascending; -R reverses). With ACCOUNT: that account's connections
    (as report connections). LIMIT: wait for that many servers. --json: the accounts with
    their connections and servers (natscli cli/server_report_command.go)."""

    async def body(session: Session) -> None:
        options = {**_connz_options(None, account_name, "open", None), **_event_filter(session, host, cluster_name, tags)}
        conns = await gather_connections(session, limit, options)
        if not conns:
            raise CliError(f"no connection of account {account_name} on the servers that answered" if account_name
                           else "no connection on the servers that answered")
        accounts = account_totals(conns)
        if account_name:
            if account_name not in accounts or len(accounts) != 1:
                raise CliError(f"did not receive any results for account {account_name}")
            if session.opts.json:
                session.output_json(accounts[account_name])
            else:
                connections_report(accounts[account_name]["connection_info"], sort, top, reverse, "open")
            return
        ordered = sorted(accounts.values(), key=ACCOUNT_SORTS[sort], reverse=reverse)
        if 0 < top < len(ordered):
            ordered = ordered[:top] if reverse else ordered[-top:]
        if session.opts.json:
            session.output_json(ordered)
            return
        print_table(f"{len(ordered)} Accounts Overview",
                    ["Account", "Connections", "In Msgs", "Out Msgs", "In Bytes", "Out Bytes", "Subs"],
                    [(a["account"], format_count(a["connections"]), format_count(a["in_msgs"]),
                      format_count(a["out_msgs"]), format_bytes(a["in_bytes"]), format_bytes(a["out_bytes"]),
                      format_count(a["subscriptions"])) for a in ordered], right=range(1, 7))

    run(opts, watching(watch, body))


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


async def ping_round(session: Session, expect: int | None, show_id: bool) -> tuple[list[float], int | None]:
    """One ``$SYS.REQ.SERVER.PING``: print ``NAME rtt=DURATION`` as each answer comes.

    Waits for ``expect`` answers (without it: as many as the first answer's
    ``active_servers``, as the ``nats`` CLI does), or until the timeout. Returns the
    round-trip times in milliseconds and the number of answers expected.
    """
    nc = session.nc
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    times: list[float] = []
    try:
        start = time.monotonic()
        await nc.publish(PING, b"", reply=inbox)
        deadline = start + session.opts.timeout
        while expect is None or len(times) < expect:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                msg = await sub.next_msg(timeout=remaining)
            except nats.errors.TimeoutError:
                break
            if msg.headers and msg.headers.get("Status"):
                raise CliError(f"{msg.headers.get('Status')} status from {PING}: server requests need a user "
                               "of the system account (--user/--password or a context)")
            elapsed = time.monotonic() - start
            try:
                answer = json.loads(msg.data)
            except ValueError:
                continue
            info, stats = answer.get("server") or {}, answer.get("statsz") or {}
            if expect is None and not times and stats.get("active_servers"):
                expect = int(stats["active_servers"])
            times.append(elapsed * 1000)
            name = f"{info.get('id', '')} {info.get('name', ''):<60}" if show_id else f"{info.get('name', ''):<60}"
            session.echo(f"{name} rtt={format_duration(elapsed)}")
    finally:
        await sub.unsubscribe()
    return times, expect


@server.command("ping")
@click.argument("expect_arg", metavar="[EXPECT]", required=False, type=click.IntRange(min=1))
@expect_option
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="Ping N times, one round after the other.")
@click.option("--id", "show_id", is_flag=True, help="Include the server id in the output.")
@pass_options
def server_ping(opts: Options, expect_arg: int | None, expect: int | None, count: int, show_id: bool) -> None:
    """Ping every server ($SYS.REQ.SERVER.PING): one line per answer with its round-trip
    time, then the statistics. EXPECT (or --expect) servers are waited for; without it,
    as many as the first answer says are active. Fewer answers than expected exit 1."""
    wanted = expect_arg or expect

    async def body(session: Session) -> None:
        times: list[float] = []
        short: tuple[int, int] | None = None
        for _ in range(count):
            got, expected = await ping_round(session, wanted, show_id)
            times += got
            if expected and len(got) < expected and short is None:
                short = (len(got), expected)
        session.echo()
        session.echo("---- ping statistics ----")
        if times:
            session.echo(f"{len(times)} replies max: {max(times):.2f} min: {min(times):.2f} "
                         f"avg: {sum(times) / len(times):.2f}")
        else:
            session.echo("no responses received")
        if not times:
            raise CliError(f"no server answered {PING} within {session.opts.timeout:g}s: server requests need "
                           "a user of the system account, and a server that answers them")
        if short is not None:
            raise CliError(f"only {short[0]} of {short[1]} servers answered within {session.opts.timeout:g}s: "
                           "check the missing ones (jetraft server list), or give more time with --timeout")

    run(opts, body)


def _is_server_id(text: str) -> bool:
    """A nats-server id: 56 upper-case characters (an nkey starting with N)."""
    return len(text) == 56 and text.upper() == text


def _go_duration_ns(value: Any) -> str:
    return format_duration((value or 0) / 1e9) if isinstance(value, (int, float)) else str(value or "")


def _bytes_limit(value: Any) -> str:
    return "Unlimited" if isinstance(value, (int, float)) and value < 0 else format_bytes(value)


def varz_page(varz: dict[str, Any]) -> str:
    """``server info``: the ``nats`` CLI's page of one server's VARZ."""
    sid, name = varz.get("server_id", ""), varz.get("server_name", "")
    page = Page(f"Server information for {sid}" if not name or name == sid
                else f"Server information for {name} ({sid})")
    rows = page.section("Process Details")
    rows += [("Version", varz.get("version", "")), ("Git Commit", varz.get("git_commit", "")),
             ("Go Version", varz.get("go", "")), ("Start Time", varz.get("start", "")),
             ("Uptime", varz.get("uptime", ""))]
    rows = page.section("Connection Details")
    rows += [("Auth Required", str(bool(varz.get("auth_required"))).lower()),
             ("TLS Required", str(bool(varz.get("tls_required"))).lower())]
    host = f"{varz.get('host', '')}:{varz.get('port', '')}"
    rows.append(("Host", f"{host} ({varz['ip']})" if varz.get("ip") else host))
    if varz.get("connect_urls"):
        rows.append(("Client URLs", ", ".join(varz["connect_urls"])))
    if varz.get("ws_connect_urls"):
        rows.append(("WebSocket URLs", ", ".join(varz["ws_connect_urls"])))
    js = varz.get("jetstream") or {}
    config, stats = js.get("config") or {}, js.get("stats") or {}
    if config.get("store_dir"):
        rows = page.section("JetStream")
        rows += [("Domain", config.get("domain", "")), ("Storage Directory", config["store_dir"]),
                 ("Max Memory", _bytes_limit(config.get("max_memory"))),
                 ("Max File", _bytes_limit(config.get("max_storage"))),
                 ("Active Accounts", stats.get("accounts", 0)),
                 ("Memory In Use", format_bytes(stats.get("memory"))),
                 ("File In Use", format_bytes(stats.get("storage"))),
                 ("API Requests", (stats.get("api") or {}).get("total", 0)),
                 ("API Errors", (stats.get("api") or {}).get("errors", 0))]
    rows = page.section("Limits")
    rows += [("Max Conn", varz.get("max_connections", 0)), ("Max Subs", varz.get("max_subscriptions", 0)),
             ("Max Payload", format_bytes(varz.get("max_payload"))),
             ("TLS Timeout", format_duration(varz.get("tls_timeout") or 0)),
             ("Write Deadline", _go_duration_ns(varz.get("write_deadline")))]
    rows = page.section("Statistics")
    rows += [("CPU Cores", f"{varz.get('cores', 0)} {float(varz.get('cpu') or 0):.2f}%"),
             ("Memory", format_bytes(varz.get("mem"))),
             ("Connections", varz.get("connections", 0)), ("Subscriptions", varz.get("subscriptions", 0)),
             ("Messages", f"{format_count(varz.get('in_msgs'))} in {format_count(varz.get('out_msgs'))} out"),
             ("Bytes", f"{format_bytes(varz.get('in_bytes'))} in {format_bytes(varz.get('out_bytes'))} out"),
             ("Slow Consumers", varz.get("slow_consumers", 0))]
    cluster = varz.get("cluster") or {}
    if cluster.get("urls"):
        rows = page.section("Cluster")
        rows.append(("Name", cluster.get("name", "")))
        if varz.get("tags"):
            rows.append(("Tags", ", ".join(varz["tags"])))
        rows += [("Host", f"{cluster.get('addr', cluster.get('host', ''))}:{cluster.get('cluster_port', '')}"),
                 ("URLs", ", ".join(cluster["urls"]))]
    for _, section in page.sections:
        section[:] = [(label, str(value)) for label, value in section]
    return page.render()


@server.command("info")
@click.argument("name", metavar="[SERVER]", required=False)
@json_option
@pass_options
def server_info(opts: Options, name: str | None) -> None:
    """Show one server ($SYS.REQ.SERVER.<id>.VARZ for a server id, else
    $SYS.REQ.SERVER.PING.VARZ filtered by name; without SERVER, the first to answer):
    process, connections, JetStream, limits, statistics, cluster."""

    async def body(session: Session) -> None:
        if name and _is_server_id(name):
            subject, payload = f"$SYS.REQ.SERVER.{name}.VARZ", {}
        else:
            subject, payload = PING_VARZ, ({"server_name": name} if name else {})
        try:
            resp = await session.request_json(subject, payload)
        except CliError as exc:
            if name and str(exc).startswith("no reply"):
                raise CliError(f"no server named {name} answered {subject} within {session.opts.timeout:g}s "
                               "(jetraft server list shows the servers)") from None
            raise
        if not isinstance(resp, dict) or not isinstance(resp.get("data"), dict):
            error = resp.get("error") if isinstance(resp, dict) else None
            raise CliError(f"{subject} answered without server data: {error or resp}")
        session.show(resp["data"], varz_page)

    run(opts, body)
