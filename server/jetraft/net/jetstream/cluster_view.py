"""The controller's :class:`~jetraft.jetstream.cluster.ClusterView`, as one server's JetStream
cluster sees it: its RAFT groups and replicas, the meta group's silent peers, the routes'
peers and whether they are settled, subscription interest, and since when a server has been
unreachable.

A part of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (``net/jetstream/cluster.py``),
over the state its ``__init__`` sets up. The controller (:mod:`jetraft.jetstream.cluster`)
reads the world through these methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from jetraft.jetstream.cluster import Key, RoutePeerView

if TYPE_CHECKING:
    from jetraft.jetstream.replicated import StreamReplica
    from jetraft.net.raft.host import RaftGroup

__all__ = ["ControllerView"]


class ControllerView:
    """The :class:`~jetraft.jetstream.cluster.ClusterView` methods of
    :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (see the module docstring)."""

    def group(self, key: Key) -> RaftGroup | None:
        return self.groups.get(key)

    def replica(self, key: Key) -> StreamReplica | None:
        return self.replicas.get(key)

    def replica_keys(self) -> list[Key]:
        return list(self.groups)

    def meta_group_view(self) -> RaftGroup | None:
        return self.meta_group

    def meta_silent(self, now_ns: int) -> set[str]:
        group = self.meta_group
        if group is None:
            return set()
        return {r["name"] for r in group.replicas(now_ns) if r["offline"]}

    def route_peers(self) -> Mapping[str, RoutePeerView]:
        return self.routes.peers

    def routes_settled(self) -> bool:
        """Every route this server dials (configured or discovered) reached its server,
        or turned out to be ourselves."""
        peers = self.routes.peers
        for target in self.routes.targets():
            if not target.is_self and (target.peer_name is None or target.peer_name not in peers):
                return False
        return True

    def has_interest(self, account: str, subject: str) -> bool:
        match = self.server.account(account).sublist.match(subject)
        return bool(match.plain or match.queues) or self.routes.has_remote_interest(account, subject)

    def has_remote_interest(self, account: str, subject: str) -> bool:
        return self.routes.has_remote_interest(account, subject)

    def leads_stream(self, account: str, stream: str) -> bool:
        """Whether this server's replica of the stream is its group's leader."""
        group = self.controller.view.group((account, stream))
        return group is not None and group.is_leader

    def knows_stream(self, account: str, stream: str) -> bool:
        """Whether the meta group (as this server applied it) assigned the stream."""
        return (account, stream) in self.controller.meta.streams

    def storage_failed(self, group: str) -> bool:
        return group in self.storage_failures

    def routed_since_start(self) -> bool:
        """Whether a route to another server came up since this server started (until
        then the meta layer is recovering: nats-server raft.go waits for routes before it
        signals the end of its replay)."""
        return self._routed

    def route_down_since(self, name: str) -> int | None:
        """Wall-clock ns (time.time_ns) since which the route to server ``name`` is down,
        or None while it is up (or never came up since this server started)."""
        if name in self.routes.peers:
            return None
        return self._route_down_ns.get(name)

    def unreachable_since(self, name: str) -> int | None:
        """Wall-clock ns since which server ``name`` has had no route to this one: since its
        route went down, or since this server started when it never came up; None while
        the route is up."""
        if name in self.routes.peers:
            return None
        return self._route_down_ns.get(name, self._started_ns)
