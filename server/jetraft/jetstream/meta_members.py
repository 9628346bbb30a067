"""Meta group membership through the meta log: servers join, are promoted, and leave.

The meta group's members are its RAFT configuration, changed one server at a time by
CONFIG_CHANGE entries (thesis §4.1), never by the routes a configuration file names:

- A JetStream server connected by a route that is no member (and was not removed with
  ``$JS.API.SERVER.REMOVE``) is added as a **learner** (thesis §4.2.1): it receives the log
  and snapshots but neither votes nor counts for a quorum, so a new server cannot slow
  commits or decide an election before it holds the data.
- A learner the leader sees caught up (at most ``CURRENT_LAG`` entries behind, heard within
  an election timeout) is **promoted** to a voter.
- A learner that was removed is dropped again; a member that comes back with another
  store leaves and joins again (below).
- A server removed with ``$JS.API.SERVER.REMOVE`` stays out as long as it runs with the
  store it had: its log may lack what the group committed since, and its vote must not
  count. Started again with an empty store (wiped, or a new machine under the name), it
  is a new server: the leader records its new store, which takes it off the removed
  list, and adds it as a learner. A server removed before its store was recorded stays
  out (nothing tells its identities apart). nats-server lets a removed peer back after
  five minutes whatever its log holds (server/raft.go ``peerRemoveTimeout``).

The meta leader takes one step per tick (:func:`membership_step`); the RAFT core refuses a
second change while one is uncommitted, and the next tick asks again.

A server that lost its store (a wiped disk, a new machine under the same name) must not
vote as the member it was: its log no longer holds what it once acknowledged, so its vote
could elect a leader that lacks committed entries (the hazard of nats-server #7567). Every
store has a random id (``<store_dir>/jetstream/store_id``) that servers exchange in their
hellos, and the meta state records each member's (``member_store``). The meta leader
removes a member that comes back with another store (its old identity), records the new
store, adds it back as a learner and promotes it once caught up, as any new server. Until
its new store is recorded the server neither votes nor campaigns in the meta group
(``RaftNode(can_vote=...)``) and opens no replica: by then the removal of its old
identity is in its log, and so is everything it acknowledged before. Recording the new
store also vacates its replica slots in every stream (``jetstream.meta``), which the
leader fills under the placement rules. The RAFT simulator wipes stores at random under
this rule and finds no lost committed entry; without the rule it finds one
(``tests/sim``).

Joining: every server tells each JetStream server it connects to what its meta group is
and its store id (:class:`MetaHello`, route APP frame ``"jsmeta"``), when the route comes
up and then every second. A server that has not opened its meta group yet opens it from
the first hello of a group that has elected a leader: as a member when the hello names it
a voter (a server of the first configuration starting late), otherwise as a joiner that
knows the voters but not itself (it cannot campaign before the entry adding it reaches its
log). Only a server that hears of no such group bootstraps a new one from its routes. A
server the hello says was removed opens nothing and says so in its event log.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import msgpack

__all__ = ["MetaHello", "decode_hello", "encode_hello", "join_peers", "membership_step"]


@dataclass(frozen=True, slots=True)
class MetaHello:
    """What a server tells another of its meta group: the ``voters`` and ``learners`` of
    its configuration, the ``leader`` it knows (None) and its ``term``; ``removed``: the
    receiver was removed with SERVER.REMOVE (the meta state says so); ``store``: the
    sender's own store id; ``your_store``: the store id the sender's meta state records for
    the receiver (None: none recorded). A server without a meta group sends empty voters."""

    voters: tuple[str, ...]
    learners: tuple[str, ...]
    leader: str | None
    term: int
    removed: bool = False
    store: str = ""
    your_store: str | None = None

    @property
    def established(self) -> bool:
        """The group has elected a leader (so it exists beyond a first configuration)."""
        return self.term > 0 and self.leader is not None


def encode_hello(h: MetaHello) -> bytes:
    return msgpack.packb({"v": list(h.voters), "r": list(h.learners), "l": h.leader,
                          "t": h.term, "x": h.removed, "s": h.store, "y": h.your_store})


def decode_hello(body: bytes) -> MetaHello:
    """Raises ValueError on a malformed frame."""
    try:
        m = msgpack.unpackb(body)
        voters, learners, leader, term = m["v"], m["r"], m["l"], m["t"]
        removed = m.get("x", False)
        store, your_store = m.get("s", ""), m.get("y")
    except (msgpack.UnpackException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"malformed meta hello: {exc}") from exc
    names = [*voters, *learners] if isinstance(voters, list) and isinstance(learners, list) else None
    if names is None or not all(isinstance(n, str) and n for n in names) \
            or not (leader is None or isinstance(leader, str)) \
            or not isinstance(term, int) or term < 0 or not isinstance(removed, bool) \
            or not isinstance(store, str) or not (your_store is None or isinstance(your_store, str)):
        raise ValueError("malformed meta hello")
    return MetaHello(tuple(voters), tuple(learners), leader, term, removed, store, your_store)


def join_peers(me: str, my_store: str, hello: MetaHello) -> tuple[tuple[str, ...], bool] | None:
    """How to open the meta group after ``hello``: ``(peers, fresh)``. A voter of the group
    whose store the group knows (or has not recorded yet: a server of the first
    configuration starting late) opens with the voters, itself included, as a member. Any
    other server (a new one, or one whose store id differs from the recorded one: it lost
    its store) opens as a joiner, the voters without itself, and is ``fresh``: it neither
    votes nor holds a replica until the meta state records its store. None when ``me`` was
    removed or the group has no leader yet (a first configuration still forming: bootstrap
    as usual)."""
    if hello.removed or not hello.established:
        return None
    if me in hello.voters and hello.your_store in (None, my_store):
        return tuple(hello.voters), False
    return tuple(v for v in hello.voters if v != me), True


def membership_step(*, voters: Iterable[str], learners: Iterable[str],
                    candidates: Mapping[str, str], removed: Collection[str],
                    recorded: Mapping[str, str], current: Callable[[str], bool]
                    ) -> tuple[str, str] | None:
    """The next membership change the meta leader makes, as ``(op, server)``; None when
    nothing is to change. ``candidates``: the JetStream servers connected now (the leader
    included), each with the store id it runs with; ``recorded``: the store ids the meta
    state records. In this order, each kind in name order, one at a time:

    - ``"remove"``: a learner that was removed, or a member (voter or learner) whose store
      is not the recorded one (it lost its store: its old identity leaves the group);
    - ``"record"``: a member whose store is not recorded yet, or a server that is no member
      whose store is not the recorded one (propose ``member_store``); for a removed server
      only when a store was recorded for it and it now runs with another (recording the
      new store re-admits it, :meth:`jetraft.jetstream.meta.MetaState.apply`);
    - ``"promote"``: a learner ``current`` says is caught up;
    - ``"add_learner"``: a server that is no member, was not removed, and whose store is
      recorded.
    """
    voters, learners = set(voters), sorted(learners)
    members = sorted(voters | set(learners))
    for name in learners:
        if name in removed:
            return "remove", name
    for name in members:
        store, known = candidates.get(name), recorded.get(name)
        if store and known is not None and store != known:
            return "remove", name
    for name in members:
        if candidates.get(name) and recorded.get(name) is None:
            return "record", name
    for name in learners:
        if current(name):
            return "promote", name
    for name in sorted(candidates):
        if name in voters or name in learners or not candidates[name]:
            continue
        if name in removed:
            # the identity that was removed stays out; the same name with another store
            # (wiped, or a new machine) is a new server: recording it re-admits it
            known = recorded.get(name)
            if known is not None and candidates[name] != known:
                return "record", name
            continue
        return ("add_learner" if recorded.get(name) == candidates[name] else "record"), name
    return None
