"""The ``cluster`` object of stream info and the meta cluster of ``/jsz``, as one server of a
JetStream cluster sees its RAFT groups: leader, peers (current, active, lag, offline) and
the meta group's size, quorum and last snapshot (nats-server stream.go ClusterInfo,
jetstream_cluster.go / monitor.go MetaClusterInfo).

A part of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (``net/jetstream/cluster.py``),
over the state its ``__init__`` sets up: each clustered account's ``cluster_info`` is
:meth:`ClusterInfo._cluster_info_fn`, the monitoring reads :meth:`ClusterInfo.meta_cluster_info`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jetraft.gofmt import format_time
from jetraft.jetstream.api_subjects import peer_hash

if TYPE_CHECKING:
    from jetraft.net.raft.host import RaftGroup

__all__ = ["ClusterInfo"]


class ClusterInfo:
    """The cluster info of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (see the
    module docstring)."""

    def _cluster_info_fn(self, account: str):
        def info(stream: str) -> dict[str, Any] | None:
            group = self.groups.get((account, stream))
            if group is None:
                return None
            return self.group_info(group)
        return info

    def group_info(self, group: RaftGroup) -> dict[str, Any]:
        """The ``cluster`` object of stream info (nats-server stream.go ClusterInfo)."""
        now = time.time_ns()
        out: dict[str, Any] = {"name": self.cluster_name, "raft_group": group.name}
        if group.leader:
            out["leader"] = group.leader
        if group.leader_since_ns:
            out["leader_since"] = format_time(group.leader_since_ns)
        # RAFT traffic travels in the system account (nats-server 2.12+ reports it so)
        out["system_account"] = True
        out["traffic_account"] = self.server.config.system_account
        replicas = []
        if group.is_leader:
            for r in group.replicas(now):
                item: dict[str, Any] = {"name": r["name"], "current": bool(r["current"])}
                if r.get("offline"):
                    item["offline"] = True
                item["active"] = int(r.get("active_ns", 0))
                if r.get("lag"):
                    item["lag"] = int(r["lag"])
                item["peer"] = peer_hash(r["name"])
                replicas.append(item)
        else:   # a follower knows the leader's liveness and which routes are down
            for name in group.peers:
                if name == self.server.server_name:
                    continue
                seen = group.heard_ns(name)
                offline = name not in self.routes.peers or name in self.host.down
                current = name == group.leader and seen is not None and not offline
                item = {"name": name, "current": current,
                        "active": max(0, now - seen) if current else 0, "peer": peer_hash(name)}
                if offline:     # active: since it was last heard or its route went down
                    item["offline"] = True
                    last = max(seen or 0, self.route_down_since(name) or 0)
                    item["active"] = max(0, now - last) if last else 0
                replicas.append(item)
        if replicas:
            out["replicas"] = sorted(replicas, key=lambda r: r["name"])
        return out

    def meta_cluster_info(self) -> dict[str, Any]:
        """nats-server MetaClusterInfo (/jsz ``meta_cluster``): the meta leader and its
        peers (current, active ns, lag, offline) as this server sees them."""
        group = self.meta_group
        if group is None:
            size = self._expected_servers()
            return {"name": self.cluster_name, "cluster_size": size, "quorum_needed": size // 2 + 1,
                    "pending": 0, "pending_requests": 0, "pending_infos": 0}
        info = self.group_info(group)
        out: dict[str, Any] = {"name": self.cluster_name}
        if group.leader:
            out["leader"] = group.leader
            out["peer"] = peer_hash(group.leader)
        if info.get("replicas"):
            out["replicas"] = info["replicas"]
        out.update({"cluster_size": len(group.peers), "quorum_needed": len(group.peers) // 2 + 1,
                    "pending": 0, "pending_requests": 0, "pending_infos": 0})
        snap = group.log.snapshot()
        out["snapshot"] = {"pending_entries": max(0, group.applied_index - snap.index),
                           "pending_size": 0, "last_time": format_time(self.meta_snapshot_ns)
                           if self.meta_snapshot_ns else "0001-01-01T00:00:00Z"}
        return out


    def _expected_servers(self) -> int:
        """How many servers the configured routes name (ourselves included once)."""
        targets = self.routes.targets()
        others = sum(1 for t in targets if not t.is_self)
        return max(others + 1, len(self.routes.peers) + 1)
