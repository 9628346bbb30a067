"""The meta group's state machine, beside the stream's (:mod:`jetraft.jetstream.replicated`):
it applies committed meta entries to the :class:`~jetraft.jetstream.meta.MetaState` and hands
their changes on, through the inputs it is given, to whoever acts on them (the glue,
``net/jetstream/cluster.py``, which carries out the controller's actions for each change).

It is the RAFT group's StateMachine (``net/raft/group.py``): ``apply``, ``snapshot``,
``restore``, ``leader_changed`` and ``may_vote``.
"""

from __future__ import annotations

from collections.abc import Callable

from jetraft.jetstream.meta import MetaChange, MetaState
from jetraft.raft.types import Entry, EntryType


class MetaMachine:
    """Applies meta entries to ``meta``. Its inputs, each called from the RAFT group's
    processing pass:

    - ``on_changes(changes)``: the changes of one applied batch (or of a restored snapshot),
      in order, to be acted on at once;
    - ``on_batch(entries)``: a non-empty batch was applied (the end of the start-up replay
      is looked for);
    - ``on_rejected(index, exc)``: a committed entry the MetaState refused (reported and
      skipped: every server skips it alike);
    - ``on_snapshot()``: a snapshot of the state is being taken (the monitoring's
      ``last_time``);
    - ``may_vote()``: whether this server may vote (not while it lost its store and is not
      admitted again: :attr:`ClusterController.fresh`).
    """

    def __init__(self, meta: MetaState, *, on_changes: Callable[[list[MetaChange]], None],
                 on_batch: Callable[[], None], on_rejected: Callable[[int, Exception], None],
                 on_snapshot: Callable[[], None], may_vote: Callable[[], bool]) -> None:
        self.meta = meta
        self._on_changes = on_changes
        self._on_batch = on_batch
        self._on_rejected = on_rejected
        self._on_snapshot = on_snapshot
        self._may_vote = may_vote

    def apply(self, entries: list[Entry]) -> None:
        """Apply a batch to the MetaState, then act on its changes at once: a stream created
        and deleted within one batch (the replay of the meta log at start-up) never gets
        a RAFT group opened, elected and deleted again."""
        changes: list[MetaChange] = []
        for e in entries:
            if e.type != EntryType.NORMAL or not e.data:
                continue
            try:
                changes += self.meta.apply(e.data)
            except Exception as exc:  # noqa: BLE001 - a bad entry is reported and skipped
                self._on_rejected(e.index, exc)
        self._on_changes(changes)
        if entries:
            self._on_batch()

    def snapshot(self) -> bytes:
        """The MetaState's snapshot (:meth:`MetaState.snapshot`)."""
        self._on_snapshot()
        return self.meta.snapshot()

    def restore(self, data: bytes) -> None:
        """Replace the MetaState with a snapshot's and act on what changed."""
        self._on_changes(self.meta.install_snapshot(data))

    @property
    def may_vote(self) -> bool:
        return self._may_vote()

    def leader_changed(self, leader: str | None, term: int) -> None:
        """The meta leader is read from the group's view when needed: nothing to do."""
