"""The lifecycle of this server's stream replicas: opened and closed as the meta state
assigns them, their group's membership reconciled towards the assignment by the
leader one change at a time (removing before adding), a leaving replica let go once
that loses nothing, TICK entries, and the leader's route interest."""

from __future__ import annotations

from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.api import (
    API_PREFIX,
)
from jetraft.jetstream.api.batches import timed_out_advisories
from jetraft.jetstream.cluster.actions import (
    ChangePeer,
    CloseReplica,
    GroupView,
    Key,
    OpenReplica,
    Propose,
    RemoveServer,
    SetInterest,
    StepDown,
)
from jetraft.jetstream.cluster.core import (
    EXPIRY_CHECK_NS,
    LEADER_API_SUBJECTS,
    ControllerCore,
    StartRestore,
)
from jetraft.jetstream.meta import (
    MetaChange,
    StreamAssignment,
)
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.replicated import (
    TICK,
    StreamReplica,
    encode_entry,
)
from jetraft.jetstream.requests import (
    json_bytes,
)
from jetraft.jetstream.sourcing import LINK_REPLY


class ReplicaLifecycle(ControllerCore):
    """Stream replicas opened, reconciled, ticked and let go (see the module docstring)."""

    def tick(self, now_ns: int, mono_ns: int) -> list[Any]:
        """Time passed (``now_ns`` wall clock, ``mono_ns`` monotonic): bootstrap the meta
        group once the routes settled (or join an established one), take the next step of
        the meta group's membership on its leader, drive every led stream group's
        membership towards its assignment and propose a TICK entry where one is due; abandon
        the atomic batches staged here that timed out."""
        self._now = now_ns
        self._mono = mono_ns
        if self._last_peer_change_ns is None:
            self._last_peer_change_ns = mono_ns
        self._batch_timeouts(now_ns)
        meta = self.view.meta_group_view()
        if meta is None:
            self._maybe_bootstrap(mono_ns)
            return self._take()
        if meta.is_leader:
            self._meta_membership(meta, now_ns)
            self._lost_restores(now_ns)
        for key in self.view.replica_keys():
            group = self.view.group(key)
            replica = self.view.replica(key)
            if replica is None or group is None:
                continue
            sa = self.meta.streams.get(key)
            if not group.is_leader:
                if sa is not None and self.me not in sa.peers:
                    self._maybe_leave(key, group, sa)
                continue
            if sa is not None and sa.restore is not None and replica.is_leader \
                    and key not in self.restores:
                self._restore_failed(key)   # asked again until the meta group deletes it
            if sa is not None:
                if sa.restore != "data":    # while the data comes, the group is its restorer
                    self._reconcile_peers(group, sa)
                if sa.vacated:
                    self._report_vacated(group, sa)
            self._maybe_tick(key, replica, group, now_ns, mono_ns)
            if sa is None or sa.restore is None:
                self._feed_sources(key, replica, group, now_ns)
        return self._take()

    def _batch_timeouts(self, now_ns: int) -> None:
        """Abandon the atomic batches staged here that timed out, with their advisories. A
        leader-only timer on this server's clock, never a replicated TICK: a batch is staged
        on the leader that took its messages only (and dropped, unadvised, when the stream's
        leader changes: :meth:`leader_changed`). Bounded per tick (:func:`timed_out_advisories`)."""
        seen: set[int] = set()
        for acc in self.accounts.values():
            batches = acc.batches       # one per server, shared by its accounts
            if id(batches) in seen:
                continue
            seen.add(id(batches))
            due = batches.next_expiry()
            if due is None or due > now_ns:
                continue
            try:
                sends = timed_out_advisories(batches, self.accounts, now_ns)
            except Exception as exc:  # noqa: BLE001 - the rest of the tick goes on
                self._emit("advisory_failed", account=None, advisory="stream_batch_abandoned", error=repr(exc))
                continue
            for account, r in sends:
                self._send(r.account or account, r.out)

    def _maybe_tick(self, key: Key, replica: StreamReplica, group: GroupView, now: int,
                    mono_ns: int) -> None:
        """Propose a TICK when the leader's push interest changed, a consumer timer is due,
        or (every EXPIRY_CHECK_NS) the stream has a max_age. A tick still in flight may be
        proposed again: applying a poll twice is harmless."""
        acc = self.accounts.get(key[0])
        if acc is None:
            return
        interest = self._push_interest(acc, key[1])
        changed = interest != self._interest_seen.get(key, frozenset())
        deadline = acc.stream_deadline(key[1])
        entry = acc.streams.get(key[1])
        last = self._last_tick.get(key)
        expiry = (entry is not None and entry.stream.config.max_age > 0
                  and (last is None or mono_ns - last >= EXPIRY_CHECK_NS))
        if not changed and not expiry and (deadline is None or deadline > now):
            return
        self._interest_seen[key] = interest
        self._last_tick[key] = mono_ns
        self._out.append(Propose(group.name, encode_entry(TICK, replica.next_ts(now), interest, changed)))

    def _reconcile_peers(self, group: GroupView, sa: StreamAssignment) -> None:
        """On the group's leader, one membership step towards ``sa.peers``: remove an extra
        peer, else add a missing one (one change at a time, thesis §4.1). A leader the
        assignment no longer names hands over before it lets go of its copy (see
        :meth:`_reconcile_leaving`)."""
        want = set(sa.peers)
        have = set(group.peers)
        if self.me not in want:
            self._reconcile_leaving(group, sa)
            return
        extra = sorted(have - want)
        if extra:
            self._out.append(ChangePeer(group.name, "remove", extra[0]))
            return
        missing = sorted(want - have)
        if missing:
            self._out.append(ChangePeer(group.name, "add", missing[0]))

    def _reconcile_leaving(self, group: GroupView, sa: StreamAssignment) -> None:
        """The leader of a group whose assignment no longer names this server (a peer-remove
        of the leader). In order, one step per tick:

        1. another extra peer is removed first (the usual order);
        2. when no other member of the group stays (R1: group {A}, assigned {C}), a missing
           peer is added first: this server holds the only copy;
        3. once a quorum of the members that stay are current (caught up, and not fetching
           a snapshot's messages), the leader proposes its own removal. The change commits
           only once a quorum of the new configuration holds the log up to it; the RAFT core
           then hands leadership to the most up-to-date member with TimeoutNow (thesis
           §4.2.2), whose reconciliation adds the missing peers. This server closes and
           deletes its replica once its configuration no longer names it and it no longer
           leads (:meth:`_maybe_leave`).

        nats-server (jetstream_cluster.go ``removeStream``) has the removed server step down
        if it leads, propose its own removal and delete its copy at once, without waiting
        for either: an R1 stream then starts empty on its new server, and an R2 stream's
        remaining copy may be left without a quorum. jetraft keeps the copy until the
        removal is committed. A step the RAFT group refuses (a change in flight) is asked
        again on the next tick."""
        me = self.me
        want = set(sa.peers)
        if me not in group.peers:
            return      # our removal is appended: the RAFT core steps down once it commits
        others = [p for p in group.peers if p != me]
        extra = sorted(p for p in others if p not in want)
        if extra:
            self._out.append(ChangePeer(group.name, "remove", extra[0]))
            return
        if not others:
            missing = sorted(want - set(group.peers))
            if missing:
                self._out.append(ChangePeer(group.name, "add", missing[0]))
            return
        current = {r["name"] for r in group.replicas(self._now) if r.get("current")}
        if sum(1 for p in others if p in current) >= len(others) // 2 + 1:
            self._out.append(ChangePeer(group.name, "remove", me))

    def _maybe_leave(self, key: Key, group: GroupView | None, sa: StreamAssignment) -> None:
        """A replica of a stream whose assignment no longer names this server: closed and
        deleted when that loses nothing. A leader never lets go (it hands over first, see
        :meth:`_reconcile_leaving`). A follower does when:

        - its group's configuration no longer names it (its removal reached its log; a
          former leader steps down only once that is committed);
        - the other members form a quorum of the configuration without it (R3 and more:
          they commit and elect without it);
        - otherwise (a configuration of two, R2): once a leader this server saw, named in
          the assignment, went silent (no leader known): the leader stops sending to a
          removed peer at once, so until then it may still need this server's
          acknowledgements (a new leader commits an entry of its term before any change).
        """
        if group is None:
            self._leaving.discard(key)
            self._drop_replica(key, delete=True)
            return
        if group.is_leader:
            return
        me = self.me
        peers = group.peers
        others = [p for p in peers if p != me]
        leader = group.leader
        if me in peers and len(others) < len(peers) // 2 + 1:
            if leader is not None and leader != me and leader in sa.peers:
                self._leaving.add(key)
                return
            if leader is not None or key not in self._leaving:
                return
        self._leaving.discard(key)
        self._drop_replica(key, delete=True)

    def meta_change(self, change: MetaChange, now_ns: int) -> list[Any]:
        """Act on one change of an applied meta entry (carry out its actions before the
        next change is given). A change to a stream assignment that the MetaState no longer
        holds (deleted, or deleted and created again with another RAFT group, later in the
        same batch) is skipped: its removal follows."""
        self._now = now_ns
        kind = change.kind
        sa = change.assignment
        if kind in ("stream_added", "stream_updated", "stream_peers_changed"):
            self._restore_proposed.pop((sa.account, sa.name), None)
            self._create_proposed.pop((sa.account, sa.name), None)
            self._update_proposed.pop((sa.account, sa.name), None)
            now = self.meta.streams.get((sa.account, sa.name))
            if now is not None and now.group == sa.group and not self.replaying:
                self._ensure_replica(sa, kind, change.old_peers)
            if kind == "stream_updated" and change.old is not None and not self.replaying \
                    and self._meta_leader() == self.me:
                self._drop_link_consumers(self.accounts.get(sa.account), sa, change.old)
        elif kind == "stream_create_repeated":
            self._create_proposed.pop((sa.account, sa.name), None)
            if not self.replaying and sa.reply:
                self._answer_repeated_create(sa)
        elif kind == "stream_removed":
            acc = self.accounts.get(sa.account)
            entry = acc.streams.get(sa.name) if acc is not None else None
            # a follower's replica may not have applied its last consumer deletes yet
            led = entry is not None and self._led(sa.account, sa.name)
            consumers = list(entry.consumers) if led else []
            self._drop_replica((sa.account, sa.name), delete=True, group=sa.group)
            answer = self._meta_answer("delete", sa.account, sa.name, {"success": True})
            if answer and acc is not None:      # the server that answers the delete announces it
                self._out.extend(answer)
                for r in acc.deleted_advisories(sa.name, consumers, now_ns):
                    self._send(sa.account, r.out)
                self._drop_link_consumers(acc, sa)
        elif kind == "server_removed":
            self._server_removed(change)
        elif kind == "member_store" and change.server == self.me:
            if self.fresh:
                if not self.replaying:      # a replayed one is history (see end_replay)
                    self._store_replaced()
            elif self.join_fresh or not self._member_said:
                self.join_fresh = False
                self._member_said = True
                self._emit("jetstream_meta_member", store=self.store_id)
                if not self.replaying:                      # replicas now assigned to it
                    assigned = self.ensure_assigned(now_ns)
                    self._out.extend(assigned)
        return self._take()

    def _drop_link_consumers(self, acc: Any, sa: StreamAssignment, old: Any = None) -> None:
        """The deleted stream's link consumers (jetstream/sourcing.py) deleted from their
        origins, one request each to the origin's leader, as nats-server's deleting leader
        tries once (tryDeleteMirrorConsumer): one that fails stays, as there. With ``old``
        (the assignment before an update), only those the update removed, sent by the meta
        leader (tryDeleteSourceConsumer)."""
        if acc is None:
            return
        try:
            if old is None:
                made = acc.made_link_consumers(sa.name, StreamConfig.from_json(sa.config))
            else:
                made = acc.dropped_link_consumers(sa.name, StreamConfig.from_json(old.config),
                                                  StreamConfig.from_json(sa.config))
        except Exception:  # noqa: BLE001 - a config this version cannot read has no links to drop
            return
        for origin, cname in made:
            subject = f"$JS.API.CONSUMER.DELETE.{origin}.{cname}"
            if (acc.name, origin) in self.meta.streams:
                self._stream_api(acc, origin, subject.split("."), "CONSUMER.DELETE", subject,
                                 LINK_REPLY, None, b"", 0, via_meta=True)

    def _ensure_replica(self, sa: StreamAssignment, kind: str,
                        old_peers: tuple[str, ...] = ()) -> None:
        """Open this server's replica of ``sa`` if it names this server and none is open;
        let go of one it no longer names once that loses nothing (:meth:`_maybe_leave`).
        A peer-remove (``stream_peers_changed``, ``old_peers`` the peers before) is answered
        here on the meta leader, once its entry is applied."""
        key = (sa.account, sa.name)
        peers_changed = kind == "stream_peers_changed"
        if self.fresh and self.view.replica(key) is None:
            return          # not a member again yet: no replica (see :attr:`fresh`)
        if self.me not in sa.peers:
            if self.view.replica(key) is not None:
                self._maybe_leave(key, self.view.group(key), sa)
            if peers_changed:
                self._answer_meta("peer-remove", sa.account, sa.name, {"success": True})
            return
        if sa.account not in self.accounts:
            return
        if self.view.replica(key) is not None:
            if peers_changed:
                self._answer_meta("peer-remove", sa.account, sa.name, {"success": True})
            return
        restorer = sa.restored_by
        if sa.restore == "data" and restorer != self.me:
            return      # the data is not there yet: the restorer's group opens alone
        # A replacement joins the group as it was before the change (the former peers but
        # itself: the group of an R1 stream whose only peer is removed is that peer); its
        # log then replays every membership change, each a no-op or a step towards the
        # current peers.
        if peers_changed:
            bootstrap = tuple(p for p in (old_peers or sa.peers) if p != self.me)
        elif sa.restore == "data":
            bootstrap = (self.me,)      # the restorer, alone until its data is in place
        elif restorer is not None and restorer != self.me:
            # a restored stream's other peers are not members until its leader adds them
            # (they take its snapshot): none of them ever elects a leader without the data
            bootstrap = tuple(p for p in sa.peers if p != self.me)
        else:
            bootstrap = tuple(sa.peers)
        campaign = not peers_changed and bool(sa.peers) and sa.peers[0] == self.me
        then = (self._meta_answer("peer-remove", sa.account, sa.name, {"success": True})
                if peers_changed else [])
        if sa.reply:
            self._create_replies[key] = sa.reply    # answered by its first leader
        else:
            self._create_replies.pop(key, None)
        self._out.append(OpenReplica(sa, bootstrap, campaign, tuple(then)))

    def _drop_replica(self, key: Key, *, delete: bool, group: str | None = None) -> None:
        self._leaving.discard(key)
        self._create_replies.pop(key, None)
        self._set_leader_interest(key, False)
        self._out.append(CloseReplica(key, delete, group))

    def ensure_assigned(self, now_ns: int) -> list[Any]:
        """After the meta group resumed from a storage failure: a replica for every
        assignment naming this server, none for any other (what applying the meta entries
        would have left)."""
        self._now = now_ns
        for key, sa in list(self.meta.streams.items()):
            if (self.me in sa.peers and self.view.replica(key) is None
                    and not self.view.storage_failed(sa.group)):
                self._ensure_replica(sa, "stream_added")
        for key in self.view.replica_keys():
            sa = self.meta.streams.get(key)
            if sa is None:
                self._drop_replica(key, delete=True)
            elif self.me not in sa.peers:
                self._maybe_leave(key, self.view.group(key), sa)
        return self._take()

    def reopen_replica(self, key: Key, now_ns: int) -> list[Any]:
        """The replica of ``key`` is to be rebuilt (its store failed while applying): close
        its group and open it again from its assignment, if this server still holds it
        (the glue closed the old group and forgot the old replica)."""
        self._now = now_ns
        sa = self.meta.streams.get(key)
        if sa is None or self.me not in sa.peers:
            return []
        self._set_leader_interest(key, False)
        self._ensure_replica(sa, "stream_added")
        self._create_replies.pop(key, None)     # its create was answered long ago
        return self._take()

    def leader_changed(self, key: Key, leader: str | None, term: int, now_ns: int) -> list[Any]:
        """The group of stream ``key`` elected ``leader`` (None: no leader) in ``term``:
        take or drop the stream's route interest; abandon the atomic batches staged for it
        here (without an advisory, as nats-server 2.15.1: none then, none when they would
        have timed out); answer its create once it has a leader."""
        self._now = now_ns
        replica = self.view.replica(key)
        if replica is None:
            return []
        mine = leader == self.me
        replica.is_leader = mine
        acc = self.accounts.get(key[0])
        if acc is not None:     # batches staged under the former leadership are abandoned
            acc.batches.drop_stream(key)
        self._set_leader_interest(key, mine)
        sa = self.meta.streams.get(key)
        restoring = sa is not None and sa.restore is not None
        if leader is not None and key in self._create_replies:
            reply = self._create_replies.pop(key)
            if mine and restoring and sa.restore == "data" and sa.restored_by == self.me \
                    and key not in self.restores:
                self.restores.add(key)
                self._out.append(StartRestore(sa, reply))
            elif mine and not restoring:
                self._answer_create(key, reply)
        if mine and restoring and key not in self.restores:
            # this server leads a stream being restored that it does not restore (it
            # restarted meanwhile, or took over from the restorer): the restore failed
            self._restore_failed(key)
        return self._take()

    def _set_leader_interest(self, key: Key, on: bool) -> None:
        account, stream = key
        held = self._interest.pop(key, None)
        add: tuple[str, ...] = ()
        if on:
            acc = self.accounts.get(account)
            entry = acc.streams.get(stream) if acc else None
            if entry is not None:
                subjects = [*entry.stream.config.subjects, f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>",
                            *(s.format(stream) for s in LEADER_API_SUBJECTS)]
                self._interest[key] = subjects
                add = tuple(subjects)
        if held or add:  # one batch: a stream's subjects go in a few route frames, not one each
            self._out.append(SetInterest(account, add=add, remove=tuple(held or ())))

    def step_down_done(self, action: StepDown, to: str | None, cause: str = "api") -> list[Any]:
        """The outcome of ``action``: ``to`` the peer the leadership goes to, None when it
        could not be handed over (answered 10008)."""
        self._emit("jetstream_stepdown_requested", group=action.group, kind=action.kind,
                   leader=self.me, to=to, cause=cause)
        if to is None:
            self._error(action.account, action.reply, action.rtype, E.cluster_not_available())
        else:
            self._respond(action.account, action.reply, {"type": action.rtype, "success": True})
        return self._take()

    def server_remove_done(self, action: RemoveServer, error: E.JSApiError | None) -> list[Any]:
        """The outcome of ``action``: None when the removal was proposed (answered once it is
        applied), otherwise the error to answer."""
        if error is not None:
            self._error(action.account, action.reply, action.rtype, error)
            return self._take()
        key = ("server-remove", "", action.peer)
        self._meta_replies[key] = (action.reply or "", action.rtype)
        self._meta_reply_accounts[key] = action.account
        self._emit("jetstream_server_removed", peer=action.peer)
        return self._take()

    def _answer_create(self, key: Key, reply: str) -> None:
        acc = self.accounts[key[0]]
        entry = acc.streams.get(key[1])
        if entry is None:
            return
        body = {"type": E.STREAM_CREATE_RESPONSE, **acc.stream_info(entry, self._now),
                "did_create": True}
        data = json_bytes(body)
        self._send(key[0], Outbound(reply, None, None, data))
        # the new stream's leader answers the create and audits it with the client the
        # assignment names, without the request (nats-server processClusterCreateStream)
        sa = self.meta.streams.get(key)
        for r in acc.audit(f"{API_PREFIX}STREAM.CREATE.{key[1]}", b"", data,
                           sa.client if sa is not None else None, self._now):
            self._send(key[0], r.out)
        self._stream_advisory(key[0], key[1], "create")
