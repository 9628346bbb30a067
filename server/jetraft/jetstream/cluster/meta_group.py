"""The meta group's membership as one server sees it: bootstrap, joining an established
group (hellos), removal, store identities, the leader's next membership step, and the
account usage reports servers exchange (nats-server jetstream_cluster.go: the meta
group, its peers and their stats)."""

from __future__ import annotations

from typing import Any

from jetraft.jetstream.cluster.actions import (
    ChangePeer,
    CloseMeta,
    Emit,
    GroupView,
    OpenMeta,
    Propose,
)
from jetraft.jetstream.cluster.core import (
    BOOTSTRAP_SETTLE_NS,
    META_GROUP,
    ControllerCore,
)
from jetraft.jetstream.meta import (
    MetaEntryError,
    StreamAssignment,
    decode_op,
    encode_clear_vacated,
    encode_member_store,
    entry_stream,
)
from jetraft.jetstream.meta_members import MetaHello, join_peers, membership_step
from jetraft.jetstream.usage import decode_usage, encode_usage


class MetaGroup(ControllerCore):
    """The meta group's membership (see the module docstring)."""

    def peer_changed(self, name: str, connected: bool, mono_ns: int) -> None:
        """A route to ``name`` came up or went down (monotonic ns): the bootstrap waits
        for the routes to be quiet."""
        self._last_peer_change_ns = mono_ns
        if not connected:
            self.peer_stores.pop(name, None)

    @property
    def fresh(self) -> bool:
        """This server may neither vote in the meta group nor hold a replica: the meta
        state records another store id for it (it lost its store), or it joined as a new
        member whose store id is not recorded yet."""
        recorded = self.meta.stores.get(self.me)
        if recorded is not None:
            return recorded != self.store_id
        return self.join_fresh

    def hello(self, name: str) -> MetaHello | None:
        """What to tell server ``name`` of our meta group (None: no meta group yet)."""
        meta = self.view.meta_group_view()
        if meta is None:
            return MetaHello((), (), None, 0, store=self.store_id)
        return MetaHello(tuple(meta.peers), tuple(meta.learners), meta.leader, meta.term,
                         removed=name in self.meta.removed_servers, store=self.store_id,
                         your_store=self.meta.stores.get(name))

    def meta_hello(self, src: str, hello: MetaHello) -> list[Any]:
        """Server ``src`` told us about its meta group (route APP frame ``"jsmeta"``, see
        :mod:`jetraft.jetstream.meta_members`). Before our meta group is open: remember
        how to join an established group, or that we were removed from it (said once in
        the event log: ``jetstream_meta_refused``)."""
        if hello.store:
            self.peer_stores[src] = hello.store
        meta = self.view.meta_group_view()
        if meta is not None:
            # A server removed while it was down opens its old meta log at start: once an
            # established group's leader says so, it stops acting as a member.
            if hello.removed and hello.established and self.me not in hello.voters \
                    and src == hello.leader and not meta.is_leader:
                self._refuse(src, hello)
                self._out.append(CloseMeta())
            return self._take()
        if hello.removed:
            self._refuse(src, hello)
            return self._take()
        got = join_peers(self.me, self.store_id, hello)
        if got is None and hello.your_store is not None and self._group_exists_by is None:
            # its meta state records our store, so the group committed entries: it is
            # electing a leader (perhaps the one this server was before it lost its store)
            self._group_exists_by = src
        if got is not None and self._join is None:
            self._join, self.join_fresh = got
            self._emit("jetstream_meta_joining", by=src, leader=hello.leader, term=hello.term,
                       voters=list(hello.voters), learners=list(hello.learners),
                       member=not self.join_fresh,
                       store_lost=hello.your_store not in (None, self.store_id))
        return self._take()

    def _refuse(self, src: str, hello: MetaHello) -> None:
        if self._refused_by is None:
            self._refused_by = src
            self._join = None
            self._emit("jetstream_meta_refused", by=src, leader=hello.leader,
                       reason="this server was removed from the meta group "
                              "($JS.API.SERVER.REMOVE); started again with an empty store "
                              "it joins as a new server")

    def _maybe_bootstrap(self, mono_ns: int) -> None:
        if self._join is not None:          # an established group told us how to join
            self._out.append(OpenMeta(self._join))
            return
        if self._refused_by is not None:    # removed: stay out until added again
            return
        if self._group_exists_by is not None:  # an established group without a leader yet
            return
        # Every route is up (one of them may be ourselves), then a quiet moment: the seed
        # configuration names every server, and discovery brings the rest meanwhile.
        if not self.view.routes_settled():
            return
        if mono_ns - (self._last_peer_change_ns or mono_ns) < BOOTSTRAP_SETTLE_NS:
            return
        js_peers = sorted(n for n, p in self.view.route_peers().items() if p.jetstream)
        # and every JetStream server connected has said what its meta group is (hellos
        # are sent on connect and repeated): a hello that comes late must not find this
        # server already in a group of its own
        if any(n != self.me and n not in self.peer_stores for n in js_peers):
            return
        self._out.append(OpenMeta(tuple(sorted({self.me, *js_peers}))))

    def _meta_membership(self, meta: GroupView, now_ns: int) -> None:
        """On the meta leader: the next join, promotion, removal or store record of the
        meta group (:func:`~jetraft.jetstream.meta_members.membership_step`), and replicas
        placed in the slots a server that lost its store left vacant."""
        stores = {n: self.peer_stores.get(n, "") for n, p in self.view.route_peers().items()
                  if p.jetstream}
        stores[self.me] = self.store_id
        for name in (*meta.peers, *meta.learners):     # first sight: all at once
            if stores.get(name) and name not in self.meta.stores:
                self._propose_once(encode_member_store(name, stores[name]))
        step = membership_step(
            voters=meta.peers, learners=meta.learners, candidates=stores,
            removed=self.meta.removed_servers, recorded=self.meta.stores,
            current=lambda name: meta.member_current(name, now_ns))
        if step is not None:
            op, name = step
            if op == "record":
                self._propose_once(encode_member_store(name, stores[name]))
            else:
                self._out.append(ChangePeer(META_GROUP, op, name))
        self._fill_vacancies()

    def meta_op(self, src: str, data: bytes) -> list[Any]:
        """On the meta leader: server ``src`` asks for meta entry ``data`` (route APP frame
        ``"jsmetaop"``); only ``clear_vacated`` is taken, anything else is ignored."""
        meta = self.view.meta_group_view()
        if meta is None or not meta.is_leader:
            return []
        try:
            op = decode_op(data)
            if op in ("restore_state", "remove_stream"):
                # from the server restoring the stream, while it restores: its next phase,
                # or the deletion of a restore that failed
                sa = self.meta.streams.get(entry_stream(data))
                if sa is None or sa.restore is None or src not in sa.peers \
                        or (op == "restore_state" and sa.restored_by != src):
                    return []
            elif op != "clear_vacated":
                return []
        except MetaEntryError:
            return []
        self._out.append(Propose(META_GROUP, data))
        return self._take()

    def _report_vacated(self, group: GroupView, sa: StreamAssignment) -> None:
        """On a stream group's leader: a server whose slot was vacated (it lost its store)
        is out of the group and that change is committed: it may hold a replica again."""
        if not group.config_settled:
            return
        for server in sa.vacated:
            if server not in group.peers and server not in group.learners:
                self._propose_once(encode_clear_vacated(sa.account, sa.name, server),
                                   via_leader=True)

    def _store_replaced(self) -> None:
        self._emit("jetstream_meta_store_replaced", store=self.meta.stores.get(self.me),
                   mine=self.store_id)

    def end_replay(self, now_ns: int) -> list[Any]:
        """The meta entries committed before this start are applied (:attr:`replaying`
        ends): say once if the state they left records another store for this server (a
        member_store entry met during the replay is history, logged when it was news), and
        open the replicas that state assigns here (:meth:`ensure_assigned`)."""
        self.replaying = False
        if self.fresh and self.meta.stores.get(self.me) is not None:
            self._store_replaced()
        return self._take() + self.ensure_assigned(now_ns)

    def usage_report(self, mono_ns: int) -> bytes | None:
        """This server's ``"jsusage"`` frame when one is due (:mod:`jetraft.jetstream.usage`,
        AccountUsage.due): the stored bytes of each account with a ``max_mem`` or
        ``max_file``; None when none has one or no report is due."""
        usage = {name: acc.usage() for name, acc in self.accounts.items() if acc.byte_limited()}
        if not usage or not self.usage.due(mono_ns, usage):
            return None
        return encode_usage(usage)

    def usage_received(self, src: str, body: bytes) -> list[Any]:
        """Server ``src``'s ``"jsusage"`` frame. A malformed one is reported and dropped."""
        try:
            self.usage.received(src, decode_usage(body, self.accounts))
        except ValueError as exc:
            return [Emit("config_warning", {"message": f"malformed jsusage frame from {src}: {exc}"})]
        return []
