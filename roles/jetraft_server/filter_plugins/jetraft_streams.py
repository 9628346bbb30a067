"""``jetraft_stream_problems``: what keeps a server's streams from being whole, read from its
``/jsz?accounts=true&streams=true&config=true`` answer (nats-server server/monitor.go
JSInfo: ``account_details[].stream_detail[]`` with ``cluster`` and ``config``).

``{{ jsz | jetraft_stream_problems(server_name, zones, members, unique_zones) }}`` is a list of sentences,
empty when every stream this server holds has a leader, and every stream it leads has its
replica count (``config.num_replicas``) of peers, each current and online, on servers that
are all ``members`` of the cluster, in distinct zones (the placement's ``unique_tag``) when
there are at least as many zones as replicas and ``unique_zones`` is true (the role's
``jetraft_server_unique_zones``; without a unique tag, replicas may share a zone). ``zones`` maps server name to zone. A stream
led elsewhere is judged by its leader, on its leader's host.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _streams(jsz: dict):
    for account in jsz.get("account_details") or []:
        for stream in account.get("stream_detail") or []:
            yield account.get("name", "?"), stream


def jetraft_stream_problems(jsz: object, server_name: str, zones: dict | None = None,
                            members: list | None = None, unique_zones: bool = True) -> list[str]:
    """The problems of ``server_name``'s streams (see the module's docstring). Raises
    AnsibleFilterError when ``jsz`` is not a /jsz answer with account details (a server too
    old to give them, or the query options left out)."""
    if not isinstance(jsz, dict) or "server_id" not in jsz:
        raise AnsibleFilterError("jetraft_stream_problems: not a /jsz answer")
    if jsz.get("disabled"):
        return []
    if "account_details" not in jsz and jsz.get("streams", 0):
        raise AnsibleFilterError(
            "jetraft_stream_problems: the /jsz answer has no account_details: ask for "
            "/jsz?accounts=true&streams=true&config=true (a server that ignores them is older "
            "than this role: upgrade it first)")
    zones = zones or {}
    members = set(members) if members is not None else None
    all_zones = set(zones.values())
    problems = []
    for account, stream in _streams(jsz):
        name = f"{account} > {stream.get('name', '?')}"
        cluster = stream.get("cluster") or {}
        leader = cluster.get("leader")
        if not leader:
            problems.append(f"{name}: no leader")
            continue
        if leader != server_name:
            continue
        replicas = cluster.get("replicas") or []
        wanted = int((stream.get("config") or {}).get("num_replicas") or 1)
        peers = [leader] + [r.get("name", "?") for r in replicas]
        if len(peers) < wanted:
            problems.append(f"{name}: {len(peers)} of {wanted} replicas ({', '.join(peers)})")
        behind = [r.get("name", "?") for r in replicas
                  if not r.get("current") or r.get("offline")]
        if behind:
            problems.append(f"{name}: not current on {', '.join(behind)}")
        if members is not None:
            strangers = [p for p in peers if p not in members]
            if strangers:
                problems.append(f"{name}: replicas on servers outside the cluster: {', '.join(strangers)}")
        if unique_zones and zones and len(all_zones) >= len(peers):
            placed = [zones.get(p) for p in peers]
            if None not in placed and len(set(placed)) < len(placed):
                problems.append(f"{name}: two replicas in one zone ("
                                + ", ".join(f"{p} in {z}" for p, z in zip(peers, placed)) + ")")
    return problems


class FilterModule:
    def filters(self):
        return {"jetraft_stream_problems": jetraft_stream_problems}
