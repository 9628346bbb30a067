"""The validation's outputs: ``report.json`` (the verdict, each check's {valid, count,
examples, details}), ``report.md`` (the same for people, with a fault campaign's queue,
replica and KV tables and its counterexamples) and ``timeline.png`` (the leader of each RAFT
group over time, the drills' faults shaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jetraft.events import rfc3339_ns
from jetraft.validation import guide
from jetraft.validation.checks import META_GROUP, CheckResult


def verdict(results: list[CheckResult]) -> bool:
    """The run is valid when no check is invalid ("unknown" is not a failure)."""
    return all(r.valid is not False for r in results)


def write_json(path: Path, source: str, results: list[CheckResult], seconds: float,
               read_seconds: float = 0.0, groups: dict[str, dict] | None = None) -> dict:
    """Write report.json: {valid, source, seconds, read_seconds, checks: {name: {valid,
    count, examples, details, doc, seconds, meaning}}, groups: {group id: {account, stream,
    consumer, drill}} (checks.group_names)}; returns it."""
    doc = {"valid": verdict(results), "source": source, "seconds": round(seconds, 1),
           "read_seconds": round(read_seconds, 1),
           "checks": {r.name: {**r.as_dict(), "meaning": guide.guide(r.name).meaning} for r in results},
           "groups": groups or {}}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc


def _mark(valid: bool | str) -> str:
    return {True: "valid", False: "**INVALID**"}.get(valid, "unknown") if isinstance(valid, bool) else "unknown"


#: Examples shown per invalid check in report.md (report.json keeps up to --examples).
MD_EXAMPLES = 5


def write_markdown(path: Path, doc: dict, timeline: str | None) -> None:
    """Write report.md: the verdicts, the streams and their RAFT groups, the timeline, the
    faults, membership and catch-up tables, the drills' TTL'd messages and counters, then
    each check: what it checks and means, its
    figures, and when invalid its first offending examples as a table and where to look
    next (the raw examples are in report.json)."""
    names = doc.get("groups") or {}
    hosts = doc["checks"].get("topology", {}).get("details", {}).get("hosts") or {}
    lines = [f"# jetraft validation: {'VALID' if doc['valid'] else 'INVALID'}", "",
             f"Source: `{doc['source']}` ({doc['seconds']} s). Every offending example, in full: "
             f"report.json.", "",
             "| check | verdict | offending | what it checks |", "|---|---|---|---|"]
    for name, c in doc["checks"].items():
        lines.append(f"| [{name}](#{name}) | {_mark(c['valid'])} | {c['count']} | {c['doc']} |")
    lines += _groups_section(names)
    if timeline:
        lines += ["", "## Leaders over time", "", f"![leaders per stream]({timeline})"]
    faults = doc["checks"].get("availability", {}).get("details", {}).get("faults") or []
    if faults:
        lines += ["", "## Faults", "",
                  "| drill | servers | meta leader after (s) | stream leader after (s) | write after (s) | leaderless |",
                  "|---|---|---|---|---|---|"]
        for f in faults:
            groups = f["groups"]
            meta = groups.get(META_GROUP, {}).get("seconds_to_leader")
            stream = [v.get("seconds_to_leader") for g, v in groups.items() if g != META_GROUP]
            leaderless = ", ".join(f"{guide.group_label(g, names)} [{g}]" if g != META_GROUP else "meta group"
                                   for g in f["leaderless_groups"])
            lines.append(f"| {f['drill']} | {', '.join(f['servers'])} | {_num(meta)} | "
                         f"{_num(stream[0] if stream else None)} | {_num(f['seconds_to_write'])} | "
                         f"{_text(leaderless or '-')} |")
    membership = doc["checks"].get("topology", {}).get("details", {}).get("membership") or []
    lines += _section("Meta group membership", ("time", "server", "change", "log index", "logged by"),
                      [(m["ts"], m["server"], m["change"], m["index"], m["seen_by"]) for m in membership])
    lines += _catchup_sections(doc["checks"].get("stream_catchup", {}).get("details", {}), names)
    lines += feature_sections(doc["checks"])
    lines += campaign_sections(doc["checks"])
    for name, c in doc["checks"].items():
        lines += _check_section(name, c, names, hosts)
    path.write_text("\n".join(lines) + "\n")


def _check_section(name: str, c: dict, names: dict, hosts: dict) -> list[str]:
    g = guide.guide(name)
    lines = ["", f"## {name}", "", f"Verdict: {_mark(c['valid'])}"
             + (f", {c['count']} offending." if c["valid"] is False else "."), "",
             f"What it checks: {c['doc']}.", ""]
    if c["valid"] is False:
        lines += [f"What this means: {g.meaning}.", ""]
    elif c["valid"] is not True:
        lines += [f"Unknown: {g.unknown}.", ""]
    else:
        lines += [f"Were it invalid: {g.meaning}.", ""]
    figures = [(k, v) for k, v in c["details"].items() if k not in _TABLES]
    if figures:
        lines += ["Figures: " + "; ".join(f"{k.replace('_', ' ')} {guide.cell(v, 120)}" for k, v in figures)
                  + ".", ""]
    if c["examples"] and c["valid"] is False:
        headers, rows = guide.evidence(c["examples"], names, rows=MD_EXAMPLES)
        lines += [f"The first {len(rows)} of {c['count']} offending:", "",
                  "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(_text(x) for x in row) + " |" for row in rows]
        lines += ["", "Next steps (paths in the run directory):", ""]
        lines += [f"- {step}" for step in guide.next_steps(name, c, names, hosts)]
        lines += ["", f"Raw examples: report.json, `checks.{name}.examples`."]
    return lines


def _groups_section(names: dict) -> list[str]:
    """report.md's "Streams and RAFT groups" table: each group's stream, drill, account."""
    rows = sorted(((guide.stream_and_drill(g, names), n.get("account"), g) for g, n in names.items()),
                  key=lambda r: (r[2] != META_GROUP, r[0][1] == "-", r[0][1], r[0][0], r[2]))
    return _section("Streams and RAFT groups", ("stream", "drill", "account", "RAFT group"),
                    [(sd[0], sd[1], account, group) for sd, account, group in rows]) if len(rows) > 1 else []


#: How a membership change is labelled on the timeline.
_SHORT_CHANGE = {"added": "+voter", "added as a learner": "+learner", "removed": "removed",
                 "promoted to voter": "voter", "demoted to learner": "learner again",
                 "came back with another store": "new store", "refused as a removed member": "refused"}

#: Details shown as their own tables in report.md, not again in their check's JSON.
_TABLES = frozenset({"faults", "catchups", "damaged_stores", "membership", "hosts", "lost_on_node_epochs",
                     "keys", "counterexamples", "per_key", "pairing_examples", "per_drill"})


def feature_sections(checks: dict) -> list[str]:
    """report.md's tables of the zone drills' TTL'd messages and counters, from the ttl
    and counter checks' ``per_drill`` details (nothing when a run has neither)."""
    ttl = (checks.get("ttl", {}).get("details") or {}).get("per_drill") or {}
    lines = _section("Drills: messages with a TTL",
                     ("drill", "published", "acknowledged", "gets answered", "seen gone", "never seen gone",
                      "gone early", "gone after expiry, median (s)", "max (s)"),
                     [(d, t["published"], t["acknowledged"], t["gets_answered"], t["seen_gone"],
                       t["never_seen_gone"], t["gone_early"], _num(t["gone_after_expiry_median_s"]),
                       _num(t["gone_after_expiry_max_s"])) for d, t in ttl.items()])
    counter = (checks.get("counter", {}).get("details") or {}).get("per_drill") or {}
    lines += _section("Drills: counters",
                      ("drill", "stream", "acknowledged", "unknown", "failed", "retried", "acknowledged sum",
                       "allowed", "final", "final sequence"),
                      [(d, c["stream"], c["acknowledged"], c["unknown"], c["failed"], c["retried"], c["acked_sum"],
                        f"{c['low']}..{c['high']}" if c["low"] != c["high"] else c["low"], c["final"],
                        c["final_seq"]) for d, c in counter.items()])
    return lines


def _catchup_sections(details: dict, names: dict | None = None) -> list[str]:
    """report.md's "Stream catch-ups" and "Damaged stores" tables, from the stream_catchup
    check's details (empty when there is neither)."""
    lines: list[str] = []
    catchups = details.get("catchups") or []
    if catchups:
        lines += ["", "## Stream catch-ups", "",
                  f"{details['count']} catch-ups, {details['finished']} finished "
                  f"({details['failed']} failed); duration median {_num(details['duration_median_s'])} s, "
                  f"max {_num(details['duration_max_s'])} s.", "",
                  "| stream | drill | RAFT group | server | reason | snapshot index | bytes | chunks "
                  "| duration (s) | ok | sources | status |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in catchups:
            drill = guide.stream_and_drill(c["group"], names)[1]
            lines.append(f"| {_text(c['stream'])} | {drill} | {c['group']} | {c['server']} | {_text(c['reason'])} | "
                         f"{_text(c['snapshot_index'])} | {_text(c['bytes'])} | {_text(c['chunks'])} | "
                         f"{_num(c['duration_s'])} | {'-' if c['ok'] is None else str(c['ok']).lower()} | "
                         f"{', '.join(c['sources'] or []) or '-'} | {c['status']} |")
    damaged = details.get("damaged_stores") or []
    lines += _section("Damaged stores", ("time", "server", "stream", "drill", "RAFT group", "file", "offset", "kind"),
                      [(d["ts"], d["server"], d["stream"], guide.stream_and_drill(d["group"], names)[1],
                        d["group"], d["file"], d["offset"], d["kind"]) for d in damaged])
    return lines


def campaign_sections(checks: dict) -> list[str]:
    """report.md's fault campaign tables, from the checks' details: the queue's figures
    (lost prefix / middle / postfix...), each node's losses and the divergent sequences,
    each KV key's verdict, and each non-linearizable key's counterexample (its operations,
    times in ms from the first one listed). Nothing for a run without histories."""
    lines: list[str] = []
    queue = checks.get("queue", {}).get("details")
    if queue:
        lost = queue.get("lost") or {}
        lines += ["", "## Fault campaign: queue", "",
                  f"{queue['attempted']} publishes attempted, {queue['acknowledged']} acknowledged "
                  f"({queue['failed']} failed, {queue['unknown']} of unknown outcome); {queue['read']} values "
                  f"read ({queue['consumed']} consumed, {queue['drained']} drained).", "",
                  "| lost prefix | lost middle | lost postfix | unexpected | duplicated | misplaced | recovered "
                  "| recovered after an error |", "|---|---|---|---|---|---|---|---|",
                  f"| {lost.get('prefix', 0)} | {lost.get('middle', 0)} | {lost.get('postfix', 0)} | "
                  f"{queue['unexpected']} | {queue['duplicated']} | {queue['misplaced']} | {queue['recovered']} | "
                  f"{queue['recovered_after_fail']} |"]
    nodes = checks.get("node_divergence", {}).get("details")
    if nodes and nodes.get("nodes"):
        epochs = nodes.get("lost_on_node_epochs") or {}
        lines += _section("Fault campaign: each replica's own copy",
                          ("node", "acknowledged values missing", "prefix", "middle", "postfix"),
                          [(n, nodes["lost_on_node"].get(n, 0), epochs.get(n, {}).get("prefix", 0),
                            epochs.get(n, {}).get("middle", 0), epochs.get(n, {}).get("postfix", 0))
                           for n in nodes["nodes"]])
        kinds = ", ".join(f"{k} {v}" for k, v in (nodes.get("divergent_kinds") or {}).items())
        lines += ["", f"Divergent sequences: {nodes.get('divergent', 0)}" + (f" ({kinds})." if kinds else ".")]
    lin = checks.get("linearizable", {}).get("details")
    stale = (checks.get("stale_reads", {}).get("details") or {}).get("per_key") or {}
    if lin and lin.get("keys"):
        lines += _section("Fault campaign: KV keys",
                          ("key", "linearizable", "operations", "ok", "fail", "info", "search steps", "seconds",
                           "stale reads"),
                          [(k, _mark(r["valid"]) + (f" (bound: {r['bound']})" if r.get("bound") else ""), r["ops"],
                            r["ok"], r["fail"], r["info"], r["steps"], r["seconds"], stale.get(k, 0))
                           for k, r in lin["keys"].items()])
    for key, c in ((lin or {}).get("counterexamples") or {}).items():
        lines += _counterexample(key, c)
    return lines


def _counterexample(key: str, c: dict) -> list[str]:
    ops = c["ops"]
    if not ops:
        return []
    start = ops[0]["invoke_ns"]
    first_wall = ops[0].get("invoke_wall_ns")
    when = f" at {rfc3339_ns(first_wall)}" if isinstance(first_wall, int) else ""
    omitted = f"; the {c['omitted']} before them are in history/kv.jsonl" if c.get("omitted") else ""
    lines = ["", f"## Counterexample: key {_text(key)}", "",
             f"The first {c['prefix_ops']} operations of key {_text(key)} (up to a completion, in completion "
             f"order) are already not linearizable: no order of them, each at an instant between its "
             f"invocation and completion, gives these results. The last {len(ops)} are listed{omitted}; "
             f"times in ms from the first listed invocation{when}. An operation still running when the "
             f"prefix ends is listed as info.", "",
             "| # | process | node | f | value | expect | outcome | revision | invoked (ms) | completed (ms) | |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, op in enumerate(ops, 1):
        done = op.get("complete_ns")
        lines.append(f"| {i} | {_text(op['process'])} | {_text(op['node'])} | {op['f']} | {_text(op['value'])} | "
                     f"{_text(op['expect'])} | {op['type']} | {_text(op['revision'])} | "
                     f"{(op['invoke_ns'] - start) / 1e6:.3f} | "
                     f"{'-' if done is None else f'{(done - start) / 1e6:.3f}'} | "
                     f"{'not linearizable from here' if op.get('failed') else ''} |")
    return lines


def _section(title: str, headers: tuple[str, ...], rows: list[tuple]) -> list[str]:
    """A report.md section: a heading and a table of ``rows`` (None shown as ``-``);
    nothing when there are no rows."""
    if not rows:
        return []
    return (["", f"## {title}", "", "| " + " | ".join(headers) + " |",
             "|" + "---|" * len(headers)]
            + ["| " + " | ".join(_text(x) for x in row) + " |" for row in rows])


def _text(x: Any) -> str:
    return "-" if x is None else str(x).replace("|", "\\|")


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}"


#: The leaders' colours on the timeline: matplotlib's tab20 without its reds and browns
#: (red-hued), its greys (the faults' shading is grey and hatched, the membership lines dim
#: grey) and its pale purple, too close to grey.
SERVER_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#e377c2", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#f7b6d2", "#dbdb8d", "#9edae5",
)
#: The shading of a drill's fault, from the fault to its repair (hatched).
FAULT_COLOUR = "#8c8c8c"
FAULT_HATCH = "///"
#: The dotted lines of the meta group's membership changes.
MEMBERSHIP_COLOUR = "dimgray"


def server_colours(servers: list[str]) -> dict[str, str]:
    """One colour of :data:`SERVER_COLOURS` per server (in the given order), cycling
    beyond 13 servers."""
    return {s: SERVER_COLOURS[i % len(SERVER_COLOURS)] for i, s in enumerate(servers)}


def plot_timeline(path: Path, elections: list[dict], faults: list[dict], end_ns: int,
                  deleted: dict[str, int] | None = None, max_groups: int = 16,
                  membership: list[dict] | None = None, names: dict[str, dict] | None = None) -> bool:
    """Draw the timeline (see :func:`timeline_figure`) into ``path`` (PNG). Returns False
    with nothing to draw."""
    fig = timeline_figure(elections, faults, end_ns, deleted, max_groups, membership, names)
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def timeline_figure(elections: list[dict], faults: list[dict], end_ns: int,
                    deleted: dict[str, int] | None = None, max_groups: int = 16,
                    membership: list[dict] | None = None, names: dict[str, dict] | None = None):
    """The timeline as a matplotlib Figure (None with no election): ``elections`` (dicts
    with group, server_name, ns; sorted by ns) as bars, one row per RAFT group, named by
    its stream and drill (``names``: checks.group_names) on the left and by its group id on
    the right, coloured by leader (:data:`SERVER_COLOURS`), each leader until the next
    election in its group, the group's deletion (``deleted``: group -> ns) or ``end_ns``;
    ``faults`` (dicts with name, fault_ns, repair_ns) shaded grey and hatched, the x axis
    from 10 s before the first; the meta group's ``membership`` changes (dicts with ns,
    change, server: checks.meta_membership) as dotted lines labelled with the server and
    its change. The meta group and the groups with the most elections come first. The
    legend names the leaders, the fault shading and the membership lines."""
    if not elections:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    start = min([e["ns"] for e in elections] + [f["fault_ns"] for f in faults if f.get("fault_ns")])
    by_group: dict[str, list[dict]] = {}
    for e in elections:
        by_group.setdefault(e["group"], []).append(e)
    order = sorted(by_group, key=lambda g: (g != META_GROUP, -len(by_group[g]), g))[:max_groups]
    servers = sorted({e["server_name"] for e in elections})
    colours = server_colours(servers)
    fig, ax = plt.subplots(figsize=(13, 2.4 + 0.45 * len(order)))
    for row, group in enumerate(order):
        evs = by_group[group]
        last = (deleted or {}).get(group, end_ns)
        spans, faces = [], []
        for e, nxt in zip(evs, evs[1:] + [None]):
            stop = min(nxt["ns"] if nxt else end_ns, last)
            if stop <= e["ns"]:
                continue
            spans.append(((e["ns"] - start) / 1e9, (stop - e["ns"]) / 1e9))
            faces.append(colours[e["server_name"]])
        # one collection per row: a bar each is slow with thousands of elections
        ax.broken_barh(spans, (row - 0.3, 0.6), facecolors=faces, edgecolor="white", linewidth=0.5)
    shaded = False
    for f in faults:
        if not f.get("fault_ns"):
            continue
        left = (f["fault_ns"] - start) / 1e9
        right = ((f.get("repair_ns") or end_ns) - start) / 1e9
        ax.axvspan(left, right, facecolor=FAULT_COLOUR, alpha=0.18, hatch=FAULT_HATCH,
                   edgecolor=FAULT_COLOUR, linewidth=0)
        ax.text(left, -0.6, f["name"], fontsize=7, color="black", rotation=60, ha="left", va="bottom")
        shaded = True
    drew_membership = False
    for m in membership or []:
        if not m.get("ns") or m["ns"] < start:
            continue
        x = (m["ns"] - start) / 1e9
        ax.axvline(x, color=MEMBERSHIP_COLOUR, linestyle=":", linewidth=0.8)
        ax.text(x, -1.9, f"{m['server']} {_SHORT_CHANGE.get(m['change'].split(' (')[0], m['change'])}",
                fontsize=6, color=MEMBERSHIP_COLOUR, rotation=60, ha="left", va="top")
        drew_membership = True
    fault_starts = [f["fault_ns"] for f in faults if f.get("fault_ns")]
    if fault_starts:            # across the drills' faults, from 10 s before the first
        ax.set_xlim(left=max(0.0, (min(fault_starts) - start) / 1e9 - 10))
    ax.set_ylim(len(order) - 0.5, -2.0)
    ax.set_yticks(range(len(order)), [_short(guide.group_label(g, names), 44) for g in order], fontsize=8)
    ax.set_yticks([], minor=True)
    ids = ax.secondary_yaxis("right")         # the group ids, a column of their own
    ids.set_yticks(range(len(order)), [g for g in order], fontsize=7, color="dimgray")
    ids.set_ylabel("RAFT group", fontsize=8, color="dimgray")
    ax.set_xlabel("seconds since the first election")
    ax.set_title("RAFT leaders per stream (colour: the leader)")
    handles = [Patch(facecolor=colours[s], label=s) for s in servers]
    if shaded:
        handles.append(Patch(facecolor=FAULT_COLOUR, alpha=0.35, hatch=FAULT_HATCH, edgecolor=FAULT_COLOUR,
                             label="drill fault\n(fault to repair)"))
    if drew_membership:
        handles.append(Line2D([], [], color=MEMBERSHIP_COLOUR, linestyle=":",
                              label="meta membership\nchange"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.14, 1.0), fontsize=8,
              title="leader / shading")
    fig.tight_layout()
    return fig


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"
