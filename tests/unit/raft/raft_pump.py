"""A tiny hand-driven message pump for jetraft RAFT unit tests (not the simulator).

Each node has a MemoryStorage; :meth:`Cluster.pump` handles every node's Ready the way a
driver must (persist snapshot, entries, hard state; then send; then apply; then advance)
and delivers messages in FIFO order until nothing moves. Links can be cut; a filter can
drop or inspect messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from jetraft.raft import Config, Entry, EntryType, MemoryStorage, Message, RaftNode, Ready, Role

GROUP = "g1"


class Cluster:
    def __init__(self, ids: Iterable[str], *, seed: int = 1, **cfg: object) -> None:
        ids = tuple(ids)
        self.cfg = cfg
        self.seed = seed
        self.storages: dict[str, MemoryStorage] = {}
        self.nodes: dict[str, RaftNode] = {}
        self.applied: dict[str, list[Entry]] = {}
        self.read_states: dict[str, list] = {}
        self.cut: set[tuple[str, str]] = set()
        self.queue: list[Message] = []
        self.sent: list[Message] = []
        self.readies: dict[str, list[Ready]] = {}
        self.events: list[tuple[str, str, dict]] = []
        self.drop: Callable[[Message], bool] | None = None
        for i in ids:
            self.add(i, ids)

    def config(self, node_id: str, peers: tuple[str, ...]) -> Config:
        k = sorted(self.nodes).index(node_id) if node_id in self.nodes else len(self.nodes)
        return Config(node_id, GROUP, peers, seed=self.seed * 100 + k, **self.cfg)  # type: ignore[arg-type]

    def add(self, node_id: str, peers: tuple[str, ...] = ()) -> RaftNode:
        """A node with fresh storage (peers () for a node joining an existing group)."""
        self.storages[node_id] = MemoryStorage(tuple(peers))
        self.applied[node_id] = []
        self.read_states[node_id] = []
        self.readies[node_id] = []
        return self.start(node_id, peers)

    def start(self, node_id: str, peers: tuple[str, ...] = ()) -> RaftNode:
        node = RaftNode(
            self.config(node_id, tuple(peers)),
            self.storages[node_id],
            on_event=lambda name, f, n=node_id: self.events.append((n, name, f)),
        )
        self.nodes[node_id] = node
        return node

    def restart(self, node_id: str) -> RaftNode:
        """Crash and restart from storage (everything persisted survives; state after the
        last snapshot is re-applied from scratch)."""
        self.queue = [m for m in self.queue if m.dst != node_id]
        snap = self.storages[node_id].snapshot()
        self.applied[node_id] = [e for e in self.applied[node_id] if e.index <= snap.index]
        return self.start(node_id)

    # -- driving ---------------------------------------------------------------------------

    def handle(self, node_id: str) -> Ready:
        node, st = self.nodes[node_id], self.storages[node_id]
        rd = node.ready()
        self.readies[node_id].append(rd)
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
            self.applied[node_id] = [Entry(rd.snapshot.term, rd.snapshot.index, data=b"<snap>")]
        st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        for m in rd.messages:
            self.sent.append(m)
            self.queue.append(m)
        self.applied[node_id].extend(rd.committed_entries)
        self.read_states[node_id].extend(rd.read_states)
        node.advance(rd)
        return rd

    def deliver(self) -> int:
        q, self.queue = self.queue, []
        n = 0
        for m in q:
            if (m.src, m.dst) in self.cut or m.dst not in self.nodes:
                continue
            if self.drop is not None and self.drop(m):
                continue
            self.nodes[m.dst].step(m)
            n += 1
        return n

    def pump(self, rounds: int = 10_000) -> None:
        for _ in range(rounds):
            moved = False
            for i, node in list(self.nodes.items()):
                if node.has_ready():
                    self.handle(i)
                    moved = True
            if self.deliver():
                moved = True
            if not moved and not self.queue:
                return
        raise AssertionError("pump did not settle")

    def tick(self, node_ids: Iterable[str] | None = None, n: int = 1) -> None:
        """Tick the given nodes (all by default) ``n`` times, pumping after each tick."""
        ids = list(self.nodes) if node_ids is None else list(node_ids)
        for _ in range(n):
            for i in ids:
                self.nodes[i].tick()
            self.pump()

    def elect(self, node_id: str) -> RaftNode:
        self.nodes[node_id].campaign()
        self.pump()
        assert self.nodes[node_id].role is Role.LEADER, self.nodes[node_id].role
        return self.nodes[node_id]

    def lagging(self, leader: str, lagger: str, n: int) -> RaftNode:
        """Elect ``leader``, then commit ``n`` entries (b"0", b"1", ...) while ``lagger`` is
        cut off (still cut off on return)."""
        lead = self.elect(leader)
        self.isolate(lagger)
        self.commit(leader, n)
        return lead

    def commit(self, leader: str, n: int, prefix: bytes = b"") -> None:
        """Propose ``n`` entries (prefix + b"0", b"1", ...) on ``leader`` and pump."""
        for i in range(n):
            self.nodes[leader].propose(prefix + b"%d" % i)
        self.pump()

    # -- faults ----------------------------------------------------------------------------

    def isolate(self, node_id: str) -> None:
        for other in self.nodes:
            if other != node_id:
                self.cut.add((node_id, other))
                self.cut.add((other, node_id))

    def heal(self) -> None:
        self.cut.clear()

    # -- inspection ------------------------------------------------------------------------

    def leaders(self) -> list[str]:
        return [i for i, n in self.nodes.items() if n.role is Role.LEADER]

    def data(self, node_id: str) -> list[bytes]:
        """Applied NORMAL entries with data, in order."""
        return [
            e.data for e in self.applied[node_id] if e.type == EntryType.NORMAL and e.data
        ]


def persist(node: RaftNode, storage: MemoryStorage) -> Ready:
    """Handle one Ready of a lone node as a driver would (messages are returned, not sent)."""
    rd = node.ready()
    if rd.snapshot is not None:
        storage.apply_snapshot(rd.snapshot)
    storage.append(rd.entries)
    if rd.hard_state is not None:
        storage.set_hard_state(rd.hard_state)
    node.advance(rd)
    return rd
