"""Where replicas go: every placement decision of the controller through one method,
:meth:`Placing.select`, over the servers as the meta group sees them
(:func:`jetraft.jetstream.placement.select_peers`: online JetStream voters, unique_tag,
placement tags and cluster; error 10005 when impossible). Used by stream create and
restore, peer-remove, SERVER.REMOVE's replacements, vacancies left by a lost store, and
the placement check of an update."""

from __future__ import annotations

from dataclasses import replace

from jetraft.jetstream import errors as E
from jetraft.jetstream.cluster.actions import (
    Propose,
)
from jetraft.jetstream.cluster.core import (
    META_GROUP,
    ControllerCore,
)
from jetraft.jetstream.meta import (
    MetaChange,
    StreamAssignment,
    encode_add_stream_peer,
    encode_replace_stream_peer,
    replicas_of,
)
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.placement import PeerInfo, PlacementError, select_peers


class Placing(ControllerCore):
    """Replica placement (see the module docstring)."""

    def select(self, cfg: StreamConfig, count: int, *, exclude: tuple[str, ...] = (),
               existing: tuple[str, ...] = ()) -> list[str]:
        """``count`` peers for a stream of config ``cfg`` under its placement (tags, cluster),
        the ``unique_tag`` and the servers' load, the ``existing`` peers kept and none of
        ``exclude`` (:func:`~jetraft.jetstream.placement.select_peers`). Raises
        PlacementError when no such peers are online."""
        placement = cfg.placement
        return select_peers(
            self._peer_infos(), count, unique_tag=self.unique_tag,
            placement_tags=tuple(getattr(placement, "tags", None) or ()) if placement else (),
            placement_cluster=(getattr(placement, "cluster", None) or None) if placement else None,
            exclude=exclude, existing=existing, load=self.meta.load())

    def _place_new(self, account: str, cfg: StreamConfig) -> list[str]:
        """The peers of a new stream (create, restore): :meth:`select` of
        ``cfg.num_replicas``. Raises JSApiError 10005 (the failure is also emitted as
        ``jetstream_placement_failed``)."""
        try:
            return self.select(cfg, cfg.num_replicas)
        except PlacementError as exc:
            self._emit("jetstream_placement_failed", account=account, stream=cfg.name,
                       replicas=cfg.num_replicas, reason=str(exc))
            raise E.cluster_no_peers(str(exc)) from None

    def _place(self, sa: StreamAssignment, *, exclude: tuple[str, ...] = (),
               existing: tuple[str, ...] = (), count: int | None = None) -> list[str]:
        """Peers for ``sa``'s replicas (``count``, default as many as it has) under its
        placement (:meth:`select`; PlacementError if impossible)."""
        return self.select(StreamConfig.from_json(sa.config), len(sa.peers) if count is None else count,
                           exclude=exclude, existing=existing)

    def _fill_vacancies(self, limit: int = 8) -> None:
        """On the meta leader, once a second: streams with fewer peers than their
        ``num_replicas`` (a server that lost its store left them) get a replica placed under
        their placement rules, one per stream and pass, at most ``limit`` per pass. A server whose slot it was is not placed back on
        that stream: its old replica may still be in the stream's RAFT group."""
        if self._mono - self._filled_at < 1_000_000_000:
            return          # once a second: a pass looks at every stream
        self._filled_at = self._mono
        done = 0
        for key, sa in self.meta.streams.items():
            if done >= limit:
                return
            if len(sa.peers) >= replicas_of(sa):
                continue
            try:
                new = self._place(sa, exclude=tuple(sa.vacated), existing=sa.peers,
                                  count=replicas_of(sa))
            except PlacementError as exc:
                if key not in self._fill_failed:
                    self._fill_failed.add(key)
                    self._emit("jetstream_placement_failed", account=sa.account, stream=sa.name,
                               replicas=replicas_of(sa), reason=str(exc))
                continue
            self._fill_failed.discard(key)
            added = [p for p in new if p not in sa.peers]
            if added:
                self._propose_once(encode_add_stream_peer(sa.account, sa.name, added[0]))
                done += 1

    def _server_removed(self, change: MetaChange) -> None:
        """A server left for good: answer SERVER.REMOVE, and (meta leader) give each of its
        streams a replacement replica under the same placement rules."""
        if change.assignment is None:
            key = ("server-remove", "", change.server)
            account = self._meta_reply_accounts.pop(key, None)
            if account is not None:
                self._answer_meta("server-remove", "", change.server, {"success": True}, account)
            return
        sa = change.assignment
        if not isinstance(sa, StreamAssignment) or self._meta_leader() != self.me:
            return
        remaining = tuple(p for p in sa.peers if p != change.server)
        try:
            new = self._place(sa, exclude=(change.server,), existing=remaining)
        except PlacementError as exc:
            self._emit("jetstream_placement_failed", account=sa.account, stream=sa.name,
                       replicas=len(sa.peers), reason=str(exc))
            return
        added = [p for p in new if p not in remaining]
        if added:
            self._out.append(Propose(META_GROUP, encode_replace_stream_peer(
                sa.account, sa.name, change.server, added[0])))
            self._emit("jetstream_peer_removed", account=sa.account, stream=sa.name,
                       group=sa.group, peer=change.server, replacement=added[0])

    def _peer_infos(self) -> list[PeerInfo]:
        out = [PeerInfo(self.me, self.server_tags, True, True, self.cluster_name)]
        online = set()
        removed = self.meta.removed_servers
        # A peer with a route but silent in the meta group past an election timeout (a
        # partition keeps TCP routes open) is offline: placed last, as one gone away.
        now = self._now
        meta = self.view.meta_group_view()
        silent = self.view.meta_silent(now) if meta is not None else set()
        voters = set(meta.peers) if meta is not None else set()
        for name, peer in self.view.route_peers().items():
            online.add(name)
            # only voters of the meta group hold replicas: a server that is joining (a
            # learner, or no member yet) or was removed is not placed on
            if name not in removed and name in voters:
                out.append(PeerInfo(name, tuple(peer.tags), name not in silent, peer.jetstream,
                                    peer.cluster, now if name in silent else None))
        if meta is not None:
            for name in meta.peers:
                if name not in online and name != self.me and name not in removed:
                    out.append(PeerInfo(name, (), False, True, self.cluster_name))
        return out

    def _check_placement_update(self, sa: StreamAssignment, cfg: StreamConfig) -> None:
        """A new ``placement`` is taken when the stream's servers all satisfy it (nothing
        has to move). nats-server moves the stream otherwise (jsClusteredStreamUpdateRequest,
        a move request); jetraft does not move streams, so it refuses the update: 10005 when
        no servers satisfy the placement at all (nats-server's answer then), 10052 when
        others do. Raises JSApiError."""
        def key(placement) -> tuple[str, tuple[str, ...]]:
            return ((placement.cluster or "", tuple(placement.tags or ())) if placement is not None
                    else ("", ()))
        new = key(cfg.placement)
        if new == key(StreamConfig.from_json(sa.config).placement):
            return
        cluster, tags = new
        infos = self._peer_infos()
        ours = [replace(p, online=True) for p in infos if p.name in sa.peers]
        try:        # its own servers, as they are: no unique tag to spread over again
            select_peers(ours, len(sa.peers), placement_tags=tags, placement_cluster=cluster or None)
            return
        except PlacementError:
            pass
        try:
            select_peers(infos, len(sa.peers), unique_tag=self.unique_tag, placement_tags=tags,
                         placement_cluster=cluster or None, load=self.meta.load())
        except PlacementError as exc:
            raise E.cluster_no_peers(str(exc)) from None
        raise E.unsupported_stream_setting(
            f"moving stream {sa.name} off its servers ({', '.join(sa.peers)}) to satisfy a new placement")

    def _remap_reason(self, sa: StreamAssignment, err: PlacementError) -> str:
        """Why no server can replace a peer of ``sa``: the placement error's description
        (nats-server jetstream_cluster.go selectPeerError, errors.json
        JSClusterNoPeersErrF: "no suitable peers for placement, server tag not unique"),
        then what the servers outside the group lack, e.g. ``"no suitable peers for
        placement, server tag not unique (no server outside n1, n3, n5 in a zone the stream
        does not use, unique_tag 'az:')"``."""
        group = ", ".join(sorted(sa.peers))
        spare = [p for p in self._peer_infos() if p.jetstream and p.name not in sa.peers]
        if not spare:
            detail = f"no server outside {group}"
        elif err.unique_tag:
            detail = (f"no server outside {group} in a zone the stream does not use, "
                      f"unique_tag '{self.unique_tag}'")
        elif err.offline and not any(p.online for p in spare):
            detail = f"every server outside {group} is offline"
        else:
            detail = f"no server outside {group} qualifies"
        return f"{err.description} ({detail})"
