"""Text blocks and tables shown by the admin CLI, laid out as the ``nats`` CLI lays them.

An information page is a title then sections (``Configuration:``, ``Cluster
Information:``, ``State:``) of ``Label: value`` rows whose labels are right-aligned::

    Cluster Information:

                     Name: C1
                   Leader: n1-c1
                  Replica: n4-c1, current, seen 0.07s ago

Tables (``stream ls``, ``server list`` ...) are rich tables.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from nats.js import api
from rich import box
from rich.console import Console
from rich.table import Table

from jetraft.cli.admin.units import (
    format_ago,
    format_bytes,
    format_count,
    format_duration,
    format_limit,
    format_time,
    since,
)

#: Labels are right-aligned to at least this width, as in the ``nats`` CLI.
LABEL_WIDTH = 21


class Page:
    """An information page: a title and sections of (label, value) rows."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.sections: list[tuple[str, list[tuple[str, str]]]] = []

    def section(self, name: str) -> list[tuple[str, str]]:
        """Start a section; returns its row list for :meth:`row`-style appends."""
        rows: list[tuple[str, str]] = []
        self.sections.append((name, rows))
        return rows

    def render(self) -> str:
        """The page as text, labels right-aligned across every section."""
        width = max([LABEL_WIDTH] + [len(label) + 1 for _, rows in self.sections for label, _ in rows])
        lines = [self.title, ""]
        for name, rows in self.sections:
            if not rows:
                continue
            lines += [f"{name}:", ""]
            lines += [f"{label:>{width}}: {value}" for label, value in rows]
            lines.append("")
        return "\n".join(lines).rstrip("\n") + "\n"


def title_case(value: Any) -> str:
    """An API enum as the ``nats`` CLI shows it: ``"workqueue"`` -> ``"WorkQueue"``; ``"explicit"`` -> ``"Explicit"``."""
    text = getattr(value, "value", value) or ""
    return {"workqueue": "WorkQueue", "last_per_subject": "Last Per Subject",
            "by_start_sequence": "By Start Sequence", "by_start_time": "By Start Time"}.get(text, text.title())


def replica_state(peer: api.PeerInfo) -> str:
    """``n2, current, seen 0.21s ago`` / ``n3, outdated, offline, not seen, 4 operations behind``."""
    state = [peer.name or "?", "current" if peer.current else "outdated"]
    if peer.offline:
        state.append("offline")
    active = peer.active or 0
    state.append(f"seen {format_ago(active)} ago" if 0 < active < 2**63 - 1 else "not seen")
    lag = peer.lag or 0
    if lag == 1:
        state.append("1 operation behind")
    elif lag > 1:
        state.append(f"{lag:,} operations behind")
    return ", ".join(state)


def cluster_rows(rows: list[tuple[str, str]], cluster: api.ClusterInfo | None) -> None:
    """Fill a 'Cluster Information' section: Name, Leader, one Replica row per follower."""
    if cluster is None:
        return
    rows.append(("Name", cluster.name or "(not clustered)"))
    rows.append(("Leader", cluster.leader or "(no leader)"))
    for peer in cluster.replicas or []:
        rows.append(("Replica", replica_state(peer)))


def stream_page(info: api.StreamInfo) -> str:
    """``stream info``: Configuration, Cluster Information and State of one stream."""
    cfg, state = info.config, info.state
    page = Page(f"Information for Stream {cfg.name} created {format_time(info.created)}")
    rows = page.section("Configuration")
    if cfg.description:
        rows.append(("Description", cfg.description))
    rows.append(("Subjects", ", ".join(cfg.subjects or []) or "(none)"))
    rows.append(("Replicas", str(cfg.num_replicas or 1)))
    rows.append(("Storage", title_case(cfg.storage)))
    rows.append(("Retention", title_case(cfg.retention)))
    rows.append(("Acknowledgements", str(not cfg.no_ack).lower()))
    rows.append(("Discard Policy", title_case(cfg.discard)))
    rows.append(("Duplicate Window", format_duration(cfg.duplicate_window)))
    rows.append(("Maximum Messages", format_limit(cfg.max_msgs)))
    rows.append(("Maximum Per Subject", format_limit(cfg.max_msgs_per_subject)))
    rows.append(("Maximum Bytes", format_limit(cfg.max_bytes, format_bytes)))
    rows.append(("Maximum Age", format_limit(cfg.max_age, format_duration)))
    rows.append(("Maximum Message Size", format_limit(cfg.max_msg_size, format_bytes)))
    rows.append(("Maximum Consumers", format_limit(cfg.max_consumers)))
    for flag, label in (("sealed", "Sealed"), ("deny_delete", "Deny Delete"), ("deny_purge", "Deny Purge"),
                        ("allow_rollup_hdrs", "Allows Rollups"), ("allow_direct", "Allows Direct")):
        if getattr(cfg, flag, False):
            rows.append((label, "true"))
    cluster_rows(page.section("Cluster Information"), info.cluster)
    rows = page.section("State")
    rows.append(("Messages", format_count(state.messages)))
    rows.append(("Bytes", format_bytes(state.bytes)))
    rows.append(("First Sequence", format_count(state.first_seq)))
    rows.append(("Last Sequence", format_count(state.last_seq)))
    if state.num_deleted:
        rows.append(("Deleted Messages", format_count(state.num_deleted)))
    rows.append(("Active Consumers", format_count(state.consumer_count)))
    return page.render()


def _sequences(seq: api.SequenceInfo | None, with_active: bool) -> str:
    if seq is None:
        return "none"
    text = f"Consumer sequence: {seq.consumer_seq:,} Stream sequence: {seq.stream_seq:,}"
    if with_active and seq.last_active is not None:
        text += f" Last delivery: {since(seq.last_active)} ago"
    return text


def consumer_page(info: api.ConsumerInfo) -> str:
    """``consumer info``: Configuration, Cluster Information and State of one consumer."""
    cfg = info.config
    page = Page(f"Information for Consumer {info.stream_name} > {info.name} created {format_time(info.created)}")
    rows = page.section("Configuration")
    rows.append(("Name", info.name))
    if cfg.durable_name:
        rows.append(("Durable Name", cfg.durable_name))
    if cfg.description:
        rows.append(("Description", cfg.description))
    if cfg.deliver_subject:
        rows.append(("Delivery Subject", cfg.deliver_subject))
        if cfg.deliver_group:
            rows.append(("Deliver Queue Group", cfg.deliver_group))
    else:
        rows.append(("Pull Mode", "true"))
    filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else [])
    if filters:
        rows.append(("Filter Subject", ", ".join(filters)))
    rows.append(("Deliver Policy", title_case(cfg.deliver_policy)))
    rows.append(("Ack Policy", title_case(cfg.ack_policy)))
    if cfg.ack_wait:
        rows.append(("Ack Wait", format_duration(cfg.ack_wait)))
    rows.append(("Replay Policy", title_case(cfg.replay_policy)))
    rows.append(("Maximum Deliveries", format_limit(cfg.max_deliver)))
    if cfg.max_ack_pending:
        rows.append(("Max Ack Pending", format_limit(cfg.max_ack_pending)))
    if not cfg.deliver_subject and cfg.max_waiting:
        rows.append(("Max Waiting Pulls", format_limit(cfg.max_waiting)))
    if cfg.num_replicas:
        rows.append(("Replicas", str(cfg.num_replicas)))
    cluster_rows(page.section("Cluster Information"), info.cluster)
    rows = page.section("State")
    rows.append(("Last Delivered Message", _sequences(info.delivered, True)))
    rows.append(("Acknowledgment Floor", _sequences(info.ack_floor, False)))
    pending = format_count(info.num_ack_pending)
    if cfg.max_ack_pending and cfg.max_ack_pending > 0:
        pending += f" out of maximum {cfg.max_ack_pending:,}"
    rows.append(("Outstanding Acks", pending))
    rows.append(("Redelivered Messages", format_count(info.num_redelivered)))
    rows.append(("Unprocessed Messages", format_count(info.num_pending)))
    if not cfg.deliver_subject:
        rows.append(("Waiting Pulls", f"{info.num_waiting or 0:,} of maximum {cfg.max_waiting or 0:,}"))
    return page.render()


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The fields of a stream or consumer configuration that ``new`` changes, as ``edit``
    shows them under 'Differences (-old +new):', one JSON line each::

        -  "max_msgs": -1,
        +  "max_msgs": 100,

    Lists that differ only in order are equal (as the ``nats`` CLI compares subjects).
    Returns "" when nothing changes."""

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, list) and isinstance(b, list):
            return sorted(map(json.dumps, a)) == sorted(map(json.dumps, b))
        return a == b

    lines: list[str] = []
    for key in [*old, *(k for k in new if k not in old)]:
        if same(old.get(key), new.get(key)):
            continue
        if key in old:
            lines.append(f'-  "{key}": {json.dumps(old[key])},')
        if key in new:
            lines.append(f'+  "{key}": {json.dumps(new[key])},')
    return "".join(line + "\n" for line in lines)


def cluster_members(cluster: api.ClusterInfo | None) -> str:
    """The Replicas/Cluster cell of the reports, as the ``nats`` CLI writes it: every peer,
    sorted, the leader marked ``*`` and a replica that is offline or not current ``!``
    (``n1*, n2, n3!``); "" without cluster information."""
    if cluster is None:
        return ""
    names = [f"{cluster.leader}*"] if cluster.leader else []
    for peer in cluster.replicas or []:
        names.append(f"{peer.name}!" if peer.offline or not peer.current else f"{peer.name}")
    return ", ".join(sorted(names))


def console(stderr: bool = False) -> Console:
    """A rich console; when not on a terminal, wide enough that tables do not wrap."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 200
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()) -> Table:
    """A rich table with ``headers``; columns whose index is in ``right`` are right-aligned."""
    right = set(right)
    t = Table(box=box.ROUNDED)
    for i, header in enumerate(headers):
        t.add_column(header, justify="right" if i in right else "left", no_wrap=True)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def print_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
                right: Iterable[int] = ()) -> None:
    """Print ``title`` on its own line (never wrapped to the table's width), then the table."""
    out = console()
    out.print(title, markup=False)
    out.print(table(headers, rows, right=right))
