"""Meta group membership through the meta log: servers join, are promoted, and leave.

The meta group's members are its RAFT configuration, changed one server at a time by
CONFIG_CHANGE entries (thesis §4.1), never by the routes a configuration file names:

- A JetStream server connected by a route that is no member (and was not removed with
  ``$JS.API.SERVER.REMOVE``) is added as a **learner** (thesis §4.2.1): it receives the log
  and snapshots but neither votes nor counts for a quorum, so a new server cannot slow
  commits or decide an election before it holds the data.
- A learner the leader sees caught up (at most ``CURRENT_LAG`` entries behind, heard within
  an election timeout) is **promoted** to a voter.
- A learner that was removed is dropped again.

The meta leader takes one step per tick (:func:`membership_step`); the RAFT core refuses a
second change while one is uncommitted, and the next tick asks again.

Joining: every server with an open meta group tells each JetStream server it connects to
what the group is (:class:`MetaHello`, route APP frame ``"jsmeta"``), and the meta leader
repeats it to non-voters. A server that has not opened its meta group yet opens it from
the first hello of a group that has elected a leader: as a member when the hello names it
a voter (a server of the first configuration starting late), otherwise as a joiner that
knows the voters but not itself (it cannot campaign before the entry adding it reaches its
log). Only a server that hears of no such group bootstraps a new one from its routes. A
server the hello says was removed opens nothing and says so in its event log.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

import msgpack

__all__ = ["MetaHello", "decode_hello", "encode_hello", "join_peers", "membership_step"]


@dataclass(frozen=True, slots=True)
class MetaHello:
    """What a server tells another of its meta group: the ``voters`` and ``learners`` of
    its configuration, the ``leader`` it knows (None) and its ``term``; ``removed``: the
    receiver was removed with SERVER.REMOVE (the meta state says so)."""

    voters: tuple[str, ...]
    learners: tuple[str, ...]
    leader: str | None
    term: int
    removed: bool = False

    @property
    def established(self) -> bool:
        """The group has elected a leader (so it exists beyond a first configuration)."""
        return self.term > 0 and self.leader is not None


def encode_hello(h: MetaHello) -> bytes:
    return msgpack.packb({"v": list(h.voters), "r": list(h.learners), "l": h.leader,
                          "t": h.term, "x": h.removed})


def decode_hello(body: bytes) -> MetaHello:
    """Raises ValueError on a malformed frame."""
    try:
        m = msgpack.unpackb(body)
        voters, learners, leader, term = m["v"], m["r"], m["l"], m["t"]
        removed = m.get("x", False)
    except (msgpack.UnpackException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"malformed meta hello: {exc}") from exc
    names = [*voters, *learners] if isinstance(voters, list) and isinstance(learners, list) else None
    if names is None or not all(isinstance(n, str) and n for n in names) \
            or not (leader is None or isinstance(leader, str)) \
            or not isinstance(term, int) or term < 0 or not isinstance(removed, bool):
        raise ValueError("malformed meta hello")
    return MetaHello(tuple(voters), tuple(learners), leader, term, removed)


def join_peers(me: str, hello: MetaHello) -> tuple[str, ...] | None:
    """The peers to open the meta group with after ``hello``: the voters (with ``me`` when
    it is one of them, without it as a joiner); None when ``me`` was removed or the group
    has no leader yet (a first configuration still forming: bootstrap as usual)."""
    if hello.removed or not hello.established:
        return None
    return tuple(hello.voters) if me in hello.voters else tuple(v for v in hello.voters if v != me)


def membership_step(*, voters: Iterable[str], learners: Iterable[str],
                    candidates: Iterable[str], removed: Collection[str],
                    current: Callable[[str], bool]) -> tuple[str, str] | None:
    """The next membership change the meta leader proposes, as ``(op, server)`` with ``op``
    ``"remove"`` (a learner that was removed), ``"promote"`` (a learner ``current`` says is
    caught up) or ``"add_learner"`` (a JetStream server among ``candidates``, the route
    peers, that is no member and was not removed); None when nothing is to change. One at a
    time, in that order, each kind in name order."""
    voters, learners = set(voters), sorted(learners)
    for name in learners:
        if name in removed:
            return "remove", name
    for name in learners:
        if current(name):
            return "promote", name
    for name in sorted(candidates):
        if name not in voters and name not in learners and name not in removed:
            return "add_learner", name
    return None
