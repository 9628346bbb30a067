"""The validation's outputs: ``report.json`` (the verdict, each check's {valid, count,
examples, details}), ``report.md`` (the same for people) and ``timeline.png`` (the leader of
each RAFT group over time, the drills' faults shaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jetraft.validation.checks import META_GROUP, CheckResult


def verdict(results: list[CheckResult]) -> bool:
    """The run is valid when no check is invalid ("unknown" is not a failure)."""
    return all(r.valid is not False for r in results)


def write_json(path: Path, source: str, results: list[CheckResult], seconds: float,
               read_seconds: float = 0.0) -> dict:
    doc = {"valid": verdict(results), "source": source, "seconds": round(seconds, 1),
           "read_seconds": round(read_seconds, 1), "checks": {r.name: r.as_dict() for r in results}}
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc


def _mark(valid: bool | str) -> str:
    return {True: "valid", False: "**INVALID**"}.get(valid, "unknown") if isinstance(valid, bool) else "unknown"


def write_markdown(path: Path, doc: dict, timeline: str | None) -> None:
    lines = [f"# jetraft validation: {'VALID' if doc['valid'] else 'INVALID'}", "",
             f"Source: `{doc['source']}` ({doc['seconds']} s)", "",
             "| check | verdict | count | what it checks |", "|---|---|---|---|"]
    for name, c in doc["checks"].items():
        lines.append(f"| {name} | {_mark(c['valid'])} | {c['count']} | {c['doc']} |")
    if timeline:
        lines += ["", "## Leaders over time", "", f"![leaders per group]({timeline})"]
    faults = doc["checks"].get("availability", {}).get("details", {}).get("faults") or []
    if faults:
        lines += ["", "## Faults", "",
                  "| drill | servers | meta leader after (s) | stream leader after (s) | write after (s) | leaderless |",
                  "|---|---|---|---|---|---|"]
        for f in faults:
            groups = f["groups"]
            meta = groups.get(META_GROUP, {}).get("seconds_to_leader")
            stream = [v.get("seconds_to_leader") for g, v in groups.items() if g != META_GROUP]
            lines.append(f"| {f['drill']} | {', '.join(f['servers'])} | {_num(meta)} | "
                         f"{_num(stream[0] if stream else None)} | {_num(f['seconds_to_write'])} | "
                         f"{', '.join(f['leaderless_groups']) or '-'} |")
    membership = doc["checks"].get("topology", {}).get("details", {}).get("membership") or []
    lines += _section("Meta group membership", ("time", "server", "change", "log index", "logged by"),
                      [(m["ts"], m["server"], m["change"], m["index"], m["seen_by"]) for m in membership])
    lines += _catchup_sections(doc["checks"].get("stream_catchup", {}).get("details", {}))
    for name, c in doc["checks"].items():
        lines += ["", f"## {name}: {_mark(c['valid'])}", "", c["doc"] + ".", ""]
        shown = {k: v for k, v in c["details"].items() if k not in _TABLES}
        if shown:
            lines += ["```json", json.dumps(shown, indent=2, default=str), "```", ""]
        if c["examples"]:
            lines += [f"{c['count']} offending, the first {len(c['examples'])}:", "", "```json"]
            lines += [json.dumps(e, default=str) for e in c["examples"]]
            lines += ["```"]
    path.write_text("\n".join(lines) + "\n")


#: How a membership change is labelled on the timeline.
_SHORT_CHANGE = {"added": "+voter", "added as a learner": "+learner", "removed": "removed",
                 "promoted to voter": "voter", "demoted to learner": "learner again",
                 "came back with another store": "new store", "refused as a removed member": "refused"}

#: Details shown as their own tables in report.md, not again in their check's JSON.
_TABLES = frozenset({"faults", "catchups", "damaged_stores", "membership"})


def _catchup_sections(details: dict) -> list[str]:
    """report.md's "Stream catch-ups" and "Damaged stores" tables, from the stream_catchup
    check's details (empty when there is neither)."""
    lines: list[str] = []
    catchups = details.get("catchups") or []
    if catchups:
        lines += ["", "## Stream catch-ups", "",
                  f"{details['count']} catch-ups, {details['finished']} finished "
                  f"({details['failed']} failed); duration median {_num(details['duration_median_s'])} s, "
                  f"max {_num(details['duration_max_s'])} s.", "",
                  "| group | stream | server | reason | snapshot index | bytes | chunks | duration (s) "
                  "| ok | sources | status |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in catchups:
            lines.append(f"| {c['group']} | {_text(c['stream'])} | {c['server']} | {_text(c['reason'])} | "
                         f"{_text(c['snapshot_index'])} | {_text(c['bytes'])} | {_text(c['chunks'])} | "
                         f"{_num(c['duration_s'])} | {'-' if c['ok'] is None else str(c['ok']).lower()} | "
                         f"{', '.join(c['sources'] or []) or '-'} | {c['status']} |")
    damaged = details.get("damaged_stores") or []
    lines += _section("Damaged stores", ("time", "server", "stream", "file", "offset", "kind"),
                      [(d["ts"], d["server"], d["stream"], d["file"], d["offset"], d["kind"])
                       for d in damaged])
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


def plot_timeline(path: Path, elections: list[dict], faults: list[dict], end_ns: int,
                  deleted: dict[str, int] | None = None, max_groups: int = 16,
                  membership: list[dict] | None = None) -> bool:
    """Draw ``elections`` (dicts with group, server_name, ns; sorted by ns) as bars: one row
    per group, coloured by leader, each leader until the next election in its group, the
    group's deletion (``deleted``: group -> ns) or ``end_ns``; ``faults`` (dicts with name,
    fault_ns, repair_ns) shaded, the x axis from 10 s before the first; the meta group's
    ``membership`` changes (dicts with ns, change, server: checks.meta_membership) as
    dotted lines labelled with the server and its change. The meta group and the groups
    with the most elections come first. Returns False with nothing to draw."""
    if not elections:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    start = min([e["ns"] for e in elections] + [f["fault_ns"] for f in faults if f.get("fault_ns")])
    by_group: dict[str, list[dict]] = {}
    for e in elections:
        by_group.setdefault(e["group"], []).append(e)
    order = sorted(by_group, key=lambda g: (g != META_GROUP, -len(by_group[g]), g))[:max_groups]
    servers = sorted({e["server_name"] for e in elections})
    colours = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(servers)}
    fig, ax = plt.subplots(figsize=(12, 2.0 + 0.45 * len(order)))
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
    for i, f in enumerate(faults):
        if not f.get("fault_ns"):
            continue
        left = (f["fault_ns"] - start) / 1e9
        right = ((f.get("repair_ns") or end_ns) - start) / 1e9
        ax.axvspan(left, right, color="red", alpha=0.12)
        ax.text(left, -0.6, f["name"], fontsize=7, color="darkred", rotation=60,
                ha="left", va="bottom")
    for m in membership or []:
        if not m.get("ns") or m["ns"] < start:
            continue
        x = (m["ns"] - start) / 1e9
        ax.axvline(x, color="dimgray", linestyle=":", linewidth=0.8)
        ax.text(x, -1.9, f"{m['server']} {_SHORT_CHANGE.get(m['change'].split(' (')[0], m['change'])}",
                fontsize=6, color="dimgray", rotation=60, ha="left", va="top")
    fault_starts = [f["fault_ns"] for f in faults if f.get("fault_ns")]
    if fault_starts:            # across the drills' faults, from 10 s before the first
        ax.set_xlim(left=max(0.0, (min(fault_starts) - start) / 1e9 - 10))
    ax.set_ylim(len(order) - 0.5, -2.0)
    ax.set_yticks(range(len(order)), [g if len(g) <= 24 else g[:21] + "..." for g in order], fontsize=8)
    ax.set_xlabel("seconds since the first election")
    ax.set_yticks([], minor=True)
    ax.set_title("RAFT leaders per group (shaded: drill faults, from the fault to its repair; "
                 "dotted: meta group membership changes)")
    ax.legend(handles=[Patch(color=colours[s], label=s) for s in servers], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8, title="leader")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
