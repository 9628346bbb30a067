"""What each check's verdict means to the person reading it, and where to look next.

For every check of :mod:`jetraft.validation.checks`: :data:`GUIDES` says what an invalid
verdict means for the cluster (``meaning``) and why a check can be "unknown"
(``unknown``); :func:`next_steps` turns an invalid check's first offending examples into
where to look: which event log (``logs/<host>/events*.jsonl``), ledger or drained
stream, which events, servers, group and time. :func:`evidence` renders the examples as
a short table (the raw examples stay in report.json). Used by report.md and the
terminal; needs nothing but the report's dict (no Spark).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jetraft.events import rfc3339_ns

META_GROUP = "_meta_"


@dataclass(frozen=True)
class Guide:
    """``meaning``: what an invalid verdict says about the cluster; ``unknown``: why the
    run held nothing to decide on."""

    meaning: str
    unknown: str = "the run held nothing this check decides on"


GUIDES: dict[str, Guide] = {
    "input": Guide(
        "every line of the event logs was read: a line that is not JSON, or of a schema version "
        "this validation does not know, is left out of every other check, whose verdicts then "
        "hold for the rest of the logs only"),
    "topology": Guide(
        "the servers that wrote event logs are those the inventory (topology.json) names, in "
        "their zones, in one cluster, and each joined the meta group: a mismatch means logs are "
        "missing, a host wrote under another name, or what runs is not what the inventory says"),
    "election_safety": Guide(
        "two servers led one RAFT group in the same term: both could commit different entries, "
        "so acknowledged writes may be lost or diverge (a RAFT safety violation)",
        "no raft_became_leader event in the logs"),
    "term_monotonic": Guide(
        "a server's term in a group went back: the term is persisted before it is used, so a "
        "lower one means it was lost (a store not synced, restored or shared) and the server may "
        "vote twice in one term"),
    "log_matching": Guide(
        "servers applied different entries at the same index of a group (or a snapshot disagrees "
        "with the entry applied at its index): their state machines diverged, replicas of a "
        "stream hold different messages"),
    "leader_completeness": Guide(
        "a server became leader without every entry committed before its election: a leader "
        "missing committed entries overwrites them, so acknowledged writes are lost (this check "
        "relies on the hosts' clocks: skew between hosts can raise it, see --clock-skew-ms)"),
    "availability": Guide(
        "a fault of fewer servers than a quorum (one zone) left the meta group or the drill's "
        "stream without a leader, or writes unacknowledged, until the fault was repaired: the "
        "cluster did not ride out the loss it is built to survive",
        "no drills.json, or no drill with a fault: run the drills (python -m lab run) to decide it"),
    "replication": Guide(
        "a group's leader last reported a replica lagging: that replica was never seen to catch "
        "up, so its group runs with fewer current copies than configured",
        "no raft_replica_current or raft_replica_lagging event: no leader reported its replicas"),
    "stream_catchup": Guide(
        "a replica started fetching a stream's messages after a snapshot and never finished "
        "while its server went on running: that replica's copy of the stream is incomplete",
        "no stream catch-up happened in this run: no stream_catchup_started or _finished event"),
    "ledger": Guide(
        "an acknowledged publish is missing from the stream read back after healing (lost), is "
        "in it twice (duplicate) or at another sequence than acknowledged (misplaced), or the "
        "stream holds a message never published (unexpected): data a client was promised is "
        "not what the stream holds",
        "no <drill>.ledger.jsonl and <drill>.stream.jsonl in the run: run the drills to decide it"),
    "ttl": Guide(
        "a message published with a Nats-TTL was still served more than 1 s after its TTL had "
        "passed (counted from the time the stream stored it): the stream's leader did not expire "
        "it, or a leader that took over served a message its predecessor should have removed, so "
        "clients read data they were promised would be gone",
        "no <drill>.ttl.jsonl in the run, or no get of a TTL'd message was answered: run the zone "
        "drills (python -m lab run) to decide it"),
    "counter": Guide(
        "a counter stream's final value is not the sum of the increments it acknowledged: below "
        "it, an acknowledged increment was lost; above it, an increment was applied that was "
        "never acknowledged nor of unknown outcome (a retry with the same Nats-Msg-Id counted "
        "twice, or an increment applied twice)",
        "no <drill>.counter.jsonl in the run, or no drill read its counter back: run the zone "
        "drills (python -m lab run) to decide it"),
    "queue": Guide(
        "a publish the stream acknowledged was never read back (lost: in the prefix, middle or "
        "postfix of the run), was read at another sequence than acknowledged (misplaced), is "
        "twice in the stream (duplicated), or a value never published was read (unexpected): "
        "the queue did not keep what it promised its clients",
        "history/queue.jsonl holds no publish: the campaign's queue workload did not run"),
    "node_divergence": Guide(
        "a replica's own copy of the stream lacks an acknowledged message, or the replicas hold "
        "different messages at one sequence, or one differs from what the stream served: the "
        "replicas diverged (split-brain), and which copy a reader sees depends on the leader",
        "history/queue.jsonl holds no read-node line: no replica's own copy was read"),
    "linearizable": Guide(
        "no order of a key's operations, each at an instant between its invocation and its "
        "completion, explains what the clients saw: the KV bucket answered as no single copy "
        "of the key could have (a stale or lost write, two creates that both won, an update "
        "accepted on a wrong revision, a revision going back)",
        "history/kv.jsonl holds no operation, or the search of some key reached its bound "
        "before deciding (see unknown_keys and bound; an unknown verdict is not a pass)"),
    "stale_reads": Guide(
        "a get returned an older revision of a key than a write that had already completed "
        "before the get began: a reader saw the past, as a server answering from a stale copy "
        "(a deposed leader, a lagging follower) does",
        "history/kv.jsonl holds no successful get"),
}


def guide(name: str) -> Guide:
    return GUIDES.get(name) or Guide("(no description for this check)")


# --------------------------------------------------------------------------- names


def group_label(group: str | None, names: dict[str, dict] | None) -> str:
    """How a RAFT group is named for people: ``meta group``, ``KILL_ZONE_A (kill-zone-a)``,
    ``ORDERS › consumer C1``; the group id itself when no event named its stream."""
    if group is None:
        return "-"
    n = (names or {}).get(group)
    if group == META_GROUP or (n and n.get("meta")):
        return "meta group"
    if not n or not n.get("stream"):
        return group
    text = n["stream"] + (f" › consumer {n['consumer']}" if n.get("consumer") else "")
    return text + (f" ({n['drill']})" if n.get("drill") else "")


def stream_and_drill(group: str | None, names: dict[str, dict] | None) -> tuple[str, str]:
    """(stream, drill) of a group for a table's columns: ``meta group`` for the meta group,
    ``-`` for what is not known."""
    if group is None:
        return "-", "-"
    if group == META_GROUP:
        return "meta group", "-"
    n = (names or {}).get(group) or {}
    stream = n.get("stream") or "-"
    if n.get("consumer"):
        stream += f" › consumer {n['consumer']}"
    return stream, n.get("drill") or "-"


# --------------------------------------------------------------------------- evidence


def cell(value: Any, width: int = 80) -> str:
    """One value of an example, readable: lists joined with commas, {server, term, hash}
    rows as ``n1 term 3 hash 12``, times in ns since the epoch as RFC 3339, None as ``-``."""
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, dict):
        text = " ".join(f"{k} {cell(v, width)}" if k != "server" else str(v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = "; ".join(cell(v, width) for v in value) if any(isinstance(v, dict) for v in value) \
            else ", ".join(cell(v, width) for v in value)
        text = text or "-"
    else:
        text = str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def evidence(examples: list[dict], names: dict[str, dict] | None = None, rows: int = 5,
             width: int = 60) -> tuple[list[str], list[list[str]]]:
    """The first ``rows`` examples as a table: (headers, rows of cells). The columns are
    the examples' keys in order of appearance; next to ``group``, the group's ``stream``
    and ``drill``; ``*_ns`` times shown as RFC 3339 (``elected_ns`` as ``elected``)."""
    shown = examples[:rows]
    keys: list[str] = []
    for e in shown:
        for k in e:
            if k not in keys:
                keys.append(k)
    headers: list[str] = []
    for k in keys:
        headers.append(k[:-3] if k.endswith("_ns") else k)
        if k == "group":
            headers += ["stream", "drill"]
    table = []
    for e in shown:
        row = []
        for k in keys:
            v = e.get(k)
            if k.endswith("_ns") and isinstance(v, int) and v > 10**17:
                v = rfc3339_ns(v)
            elif k.endswith("groups") and isinstance(v, list):       # group ids, with their names
                v = [g if group_label(g, names) == g else f"{g} ({group_label(g, names)})" for g in v]
            row.append(cell(v, width))
            if k == "group":
                row += list(stream_and_drill(v, names))
        table.append(row)
    return headers, table


# --------------------------------------------------------------------------- next steps


def _logs(servers, hosts: dict[str, list[str]] | None) -> str:
    """``logs/jr-a1/events*.jsonl`` (and others) of these servers."""
    paths = []
    for s in [servers] if isinstance(servers, str) else servers or []:
        for h in (hosts or {}).get(s) or [s]:
            p = f"logs/{h}/events*.jsonl"
            if p not in paths:
                paths.append(p)
    return ", ".join(paths) or "logs/*/events*.jsonl"


def next_steps(name: str, check: dict, names: dict[str, dict] | None = None,
               hosts: dict[str, list[str]] | None = None, limit: int = 3) -> list[str]:
    """Where to look next for an invalid check, one sentence per offending example (the
    first ``limit``), paths relative to the run directory; [] when the check is not
    invalid."""
    if check.get("valid") is not False:
        return []
    out: list[str] = []
    for e in check.get("examples", [])[:limit]:
        step = _STEPS.get(name, _generic)(e, names, hosts)
        if step and step not in out:
            out.append(step)
    if not out:
        out.append(_generic({}, names, hosts))
    if name == "leader_completeness":
        out.append("If the hosts' clocks may differ by more than the gap between the election and "
                   "the commit, validate again with --clock-skew-ms.")
    return out


def _g(e: dict, names) -> str:
    group = e.get("group")
    label = group_label(group, names)
    return f"group {group}" + ("" if label == group else f" ({label})")


def _input(e, names, hosts):
    if "lines" in e:
        return (f"{e['lines']} {e['problem']} (counted, not listed): raft_applied lines of "
                f"logs/*/events*.jsonl cut short (a server killed mid-write) or with another \"v\" "
                f"(a jetraft this validation does not know).")
    line = (e.get("line") or "")[:60]
    return (f"{e.get('file') or _logs(e.get('host'), None)} (host {e.get('host')}): the line "
            f"starting {line!r} ({e.get('problem')}); a torn last line means the server was killed "
            f"mid-write, another schema version a jetraft this validation does not know.")


def _topology(e, names, hosts):
    server, problem = e.get("server"), e.get("problem", "")
    if problem == "in the inventory, never seen":
        return (f"{server}: no event log names it; check that playbooks/collect_logs.yml fetched "
                f"logs/{server}/events.jsonl and that the server started (its journal.jsonl).")
    if problem == "seen, not in the inventory":
        return (f"{server} wrote events but is not in topology.json: find its host with "
                f"grep -l '\"server_name\":\"{server}\"' logs/*/events*.jsonl, and compare the "
                f"inventory with what was deployed.")
    if problem == "another zone than the inventory's":
        return (f"{server}: its zone in raft_* events (unique_tag of its server_tags, see its "
                f"server_starting in {_logs(server, hosts)}) is {e.get('seen')}, the inventory says "
                f"{e.get('inventory')}.")
    if problem == "never joined the meta group":
        return (f"{server}: no raft_became_follower/leader of group _meta_ in {_logs(server, hosts)}; "
                f"look for jetstream_meta_refused, jetstream_meta_store_replaced and route_closed there.")
    if problem == "one server name written from several hosts":
        return (f"{server} wrote from hosts {cell(e.get('hosts'))}: two machines run under one "
                f"server_name; check each host's configuration.")
    return f"{problem}: compare topology.json with the server_starting events of logs/*/events*.jsonl."


def _election(e, names, hosts):
    return (f"{_g(e, names)}, term {e.get('term')}: raft_became_leader, raft_became_candidate and "
            f"raft_vote_granted of that term in {_logs(e.get('leaders'), hosts)}, from {e.get('first_ts')}: "
            f"who voted for whom (a vote given twice in a term, or not persisted before it was sent).")


def _term(e, names, hosts):
    return (f"{e.get('server')}, {_g(e, names)}: {e.get('event_before')} at term {e.get('term_before')}, "
            f"then {e.get('event')} at term {e.get('term')} ({e.get('ts')}) in {_logs(e.get('server'), hosts)}; "
            f"a server_starting between them points at how its store kept the term over a restart.")


def _matching(e, names, hosts):
    applied = e.get("applied") or []
    servers = sorted({a.get("server") for a in applied if a.get("server")}
                     | {s.get("server") for s in e.get("snapshots") or [] if s.get("server")})
    return (f"{_g(e, names)}, index {e.get('index')}: the raft_applied lines covering it "
            f"(first_index..last_index) in {_logs(servers, hosts)} differ in term or hash "
            f"({cell(applied) or '-'}); then that group's raft_became_leader and "
            f"raft_snapshot_installed before them.")


def _completeness(e, names, hosts):
    elected = e.get("elected_ns")
    when = rfc3339_ns(elected) if isinstance(elected, int) else "-"
    return (f"{e.get('leader')} became leader of {_g(e, names)} in term {e.get('term')} at {when} with "
            f"last log index {e.get('last_index')}, while index {e.get('committed_before')} had been "
            f"applied: its raft_became_leader and the raft_vote_granted of that term in "
            f"{_logs(e.get('leader'), hosts)} (who voted for a shorter log).")


def _availability(e, names, hosts):
    groups = ", ".join(group_label(g, names) for g in e.get("leaderless_groups") or []) or "none"
    return (f"Drill {e.get('drill')} ({cell(e.get('servers'))} down from {e.get('fault') or '-'} to "
            f"{e.get('repair') or '-'}): leaderless {groups}"
            f"{'' if e.get('write_before_repair', True) else '; no write acknowledged'}. Look at "
            f"raft_became_pre_candidate, raft_became_candidate, raft_vote_granted and route_closed in "
            f"the other servers' logs/*/events*.jsonl in that window, and the client's errors in "
            f"{e.get('drill')}.ledger.jsonl.")


def _replication(e, names, hosts):
    return (f"Peer {e.get('peer')} of {_g(e, names)}: leader {e.get('leader')} (term {e.get('term')}) "
            f"reported it lagging by {e.get('lag')} entries (offline {cell(e.get('offline'))}) at "
            f"{e.get('since')}; in {_logs(e.get('peer'), hosts)} after that: raft_snapshot_installed, "
            f"stream_catchup_*, jetstream_storage_failed, and whether the server was running.")


def _catchup(e, names, hosts):
    return (f"{e.get('server')}, {_g(e, names)}: stream_catchup_started at {e.get('started')} "
            f"(reason {e.get('reason')}) with no successful stream_catchup_finished in the "
            f"{e.get('log_ends_s_after')} s its log went on ({e.get('failed_attempts')} failed, last "
            f"error {e.get('last_error') or '-'}): {_logs(e.get('server'), hosts)}, and route_closed "
            f"towards its sources.")


def _ledger(e, names, hosts):
    drill = e.get("drill")
    acked = e.get("acked_seq")
    stored = e.get("stored_seqs")
    groups = [f"{g} ({n['stream']})" for g, n in (names or {}).items()
              if n.get("drill") == drill and n.get("stream") and not n.get("consumer")]
    return (f"{e.get('problem')} {e.get('msg_id')}: {drill}.ledger.jsonl (when it was sent and "
            f"acknowledged{'' if acked is None else f', acknowledged sequence {acked}'}) and "
            f"{drill}.stream.jsonl ({'not in it' if not stored else 'stored at ' + cell(stored)}); then "
            f"the drill's stream group{'s' if len(groups) > 1 else ''} "
            f"{', '.join(groups) or '(drills.json)'} in logs/*/events*.jsonl around that time: "
            f"raft_became_leader, raft_applied.")


def _ttl(e, names, hosts):
    drill = e.get("drill")
    return (f"{e.get('stream')} sequence {e.get('stream_seq')} ({e.get('msg_id')}, TTL {e.get('ttl_s')} s): "
            f"stored at {_when(e.get('stored_ns') or e.get('acked_ns'))}, expired at "
            f"{_when(e.get('expires_ns'))}, still served by a get sent at {_when(e.get('last_seen_ns'))} "
            f"({e.get('seen_s_after_expiry')} s later): its line in {drill}.ttl.jsonl (every get, "
            f"answered or not), then {e.get('stream')}'s group in logs/*/events*.jsonl around the expiry: "
            f"raft_became_leader (a leader change then), raft_applied.")


def _counter(e, names, hosts):
    drill = e.get("drill")
    return (f"{e.get('stream')} ({drill}): final value {e.get('final')} (sequence {e.get('final_seq')}), "
            f"allowed {e.get('low')}..{e.get('high')} ({e.get('acknowledged')} increments acknowledged, "
            f"{e.get('unknown')} of unknown outcome); the last acknowledgement said {e.get('last_acked_val')} "
            f"at sequence {e.get('last_acked_seq')}: {drill}.counter.jsonl (every attempt by Nats-Msg-Id, "
            f"retries included), then {e.get('stream')}'s group in logs/*/events*.jsonl: raft_applied, "
            f"raft_became_leader, stream_catchup_*.")


def _when(ns) -> str:
    return rfc3339_ns(ns) if isinstance(ns, int) and ns > 10**17 else "-"


def _queue(e, names, hosts):
    value, problem = e.get("value"), e.get("problem")
    where = (f"acknowledged at sequence {e.get('ack_seq')} at {_when(e.get('ack_wall_ns'))}"
             if e.get("ack_seq") is not None else f"publish outcome {e.get('outcome') or 'none'}")
    read = f"read at {cell(e.get('read_seqs'))}" if e.get("read_seqs") else "never read"
    epoch = f" ({e.get('epoch')})" if e.get("epoch") else ""
    return (f"{problem}{epoch} value {value}: its lines in history/queue.jsonl (\"value\": {value}; "
            f"process {e.get('process')}, connected to {e.get('node') or '-'}, {where}; {read}); then "
            f"the CAMPAIGN stream's group in logs/*/events*.jsonl around that time: raft_became_leader, "
            f"raft_applied, stream_catchup_*, stream_store_damaged.")


def _divergence(e, names, hosts):
    if e.get("problem") == "lost on node":
        node = e.get("node")
        return (f"{node}'s own copy lacks value {e.get('value')} (acknowledged at sequence "
                f"{e.get('ack_seq')} at {_when(e.get('ack_wall_ns'))}): the read-node lines of {node} "
                f"in history/queue.jsonl, then {_logs(node, hosts)} after that time: "
                f"raft_snapshot_installed, stream_catchup_*, stream_store_damaged, server_starting.")
    return (f"Sequence {e.get('seq')} ({cell(e.get('kinds'))}): the nodes hold {cell(e.get('copies'))}, the "
            f"drain {cell(e.get('drained'))}; the read-node and drain lines of history/queue.jsonl at "
            f"\"revision\": {e.get('seq')}, then the CAMPAIGN stream's raft_applied at that index in "
            f"logs/*/events*.jsonl.")


def _linearizable(e, names, hosts):
    return (f"Key {e.get('key')}: its first {e.get('prefix_ops')} operations in history/kv.jsonl are "
            f"already not linearizable, up to the {e.get('f')} of process {e.get('process')} on "
            f"{e.get('node') or '-'} (value {e.get('value')}, revision {e.get('revision')}) invoked at "
            f"{_when(e.get('invoke_wall_ns'))}: report.md's counterexample table lists them; then the "
            f"KV bucket's stream group (KV_campaign) in logs/*/events*.jsonl around that time.")


def _stale(e, names, hosts):
    return (f"Key {e.get('key')}: a get by process {e.get('process')} on {e.get('node') or '-'} invoked at "
            f"{_when(e.get('invoke_wall_ns'))} returned revision {e.get('revision')}, after a "
            f"{e.get('write_f')} at revision {e.get('write_revision')} (process {e.get('write_process')} on "
            f"{e.get('write_node') or '-'}) had completed at {_when(e.get('write_complete_wall_ns'))}: "
            f"history/kv.jsonl, then {_logs(e.get('node'), hosts)}: was that server a deposed leader or "
            f"a lagging replica of the KV bucket's stream then (raft_became_follower, raft_replica_lagging)?")


def _generic(e, names, hosts):
    return "report.json holds every offending example of this check in full."


_STEPS = {"input": _input, "topology": _topology, "election_safety": _election,
          "term_monotonic": _term, "log_matching": _matching, "leader_completeness": _completeness,
          "availability": _availability, "replication": _replication, "stream_catchup": _catchup,
          "ledger": _ledger, "ttl": _ttl, "counter": _counter, "queue": _queue,
          "node_divergence": _divergence, "linearizable": _linearizable, "stale_reads": _stale}
