"""The leader's pending ReadIndex requests (thesis §6.4; etcd read_only.go): each waits for a
heartbeat round acknowledged by a quorum, which confirms every request before it too.

A request that comes before the leader committed an entry of its term waits apart
(:attr:`ReadOnly.waiting`): its commit index could still lag what earlier leaders committed.
"""

from __future__ import annotations

from collections.abc import Callable


class ReadRequest:
    """A pending read-index request (etcd read_only.go readIndexStatus): the commit ``index``
    when it came, its ``context`` (unique per request), the server ``src`` that asked, and
    the servers that acknowledged a heartbeat carrying it (``acks``)."""

    __slots__ = ("index", "context", "src", "acks")

    def __init__(self, index: int, context: bytes, src: str, acks: set[str]) -> None:
        self.index = index
        self.context = context
        self.src = src
        self.acks = acks


class ReadOnly:
    """The requests of one leader's term, in the order they came."""

    __slots__ = ("pending", "order", "waiting")

    def __init__(self) -> None:
        self.pending: dict[bytes, ReadRequest] = {}
        self.order: list[ReadRequest] = []
        #: (context, src) of requests that came before the leader committed in its term
        self.waiting: list[tuple[bytes, str]] = []

    def reset(self) -> None:
        """Forget every request (a new term)."""
        self.pending.clear()
        self.order.clear()
        self.waiting.clear()

    def take_waiting(self) -> list[tuple[bytes, str]]:
        """The requests that waited for the leader's first commit, in order; none wait after."""
        waiting, self.waiting = self.waiting, []
        return waiting

    def add(self, req: ReadRequest) -> None:
        """Track ``req`` until a quorum acknowledges it (:meth:`ack`)."""
        self.pending[req.context] = req
        self.order.append(req)

    def last_context(self) -> bytes:
        """The context a heartbeat carries: the newest request's (b"" when none)."""
        return self.order[-1].context if self.order else b""

    def ack(self, context: bytes, src: str, quorum: Callable[[ReadRequest], bool]) -> list[ReadRequest]:
        """Server ``src`` acknowledged the heartbeat carrying ``context``: the requests now
        confirmed (that one, once ``quorum`` says so, and every one before it), in order."""
        req = self.pending.get(context)
        if req is None:
            return []
        req.acks.add(src)
        if not quorum(req):
            return []
        upto = self.order.index(req) + 1
        done, self.order = self.order[:upto], self.order[upto:]
        for r in done:
            del self.pending[r.context]
        return done
