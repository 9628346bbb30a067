"""A clustered stream restore on its restorer: the stream a restore built from a backup
(``net/jetstream/snapshot.py``) put in place of this server's replica, its group
snapshotted, the other peers made to join and take the snapshot, and the client answered
once a quorum of the peers completed it (:meth:`RestoreInstaller.install_restore`).

nats-server does the same with sa.Restore, processStreamRestore and the leader's snapshot
and catch-up (jetstream_cluster.go); the decisions (limits, phases, the answer) are the
controller's (:mod:`jetraft.jetstream.cluster.restores`). A part of
:class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (``net/jetstream/cluster.py``), over
the state its ``__init__`` sets up.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import trio

from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.cluster import Key
from jetraft.jetstream.replicated import TICK, StreamReplica, encode_entry
from jetraft.storage import fileio

if TYPE_CHECKING:
    from jetraft.jetstream.api import JetStreamAccount
    from jetraft.net.raft.host import RaftGroup

__all__ = ["RESTORE_COPY_BPS", "RESTORE_POLL_S", "RESTORE_STEP_S", "RestoreInstaller"]

#: Seconds between checks of a clustered restore's progress.
RESTORE_POLL_S = 0.05
#: Seconds each step of a clustered restore may take (commit, meta entries).
RESTORE_STEP_S = 30.0
#: Bytes per second a restored stream is copied to its peers at least (the copy step may
#: take ``RESTORE_STEP_S`` plus the backup's size at this rate).
RESTORE_COPY_BPS = 4 << 20


class RestoreInstaller:
    """The clustered restores of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream`
    (see the module docstring)."""

    def hold_interest(self, account: str, subjects: tuple[str, ...], on: bool) -> None:
        """Take (``on``) or drop this server's route interest in ``subjects`` (a restore's
        deliver subject: its chunks reach the restorer from any server)."""
        if on:
            self.routes.add_internal_interests(account, subjects)
        else:
            self.routes.remove_internal_interests(account, subjects)

    def _restoring(self, key: Key, *, ended: bool = False) -> tuple[Any, RaftGroup, StreamReplica]:
        """The assignment, group and replica of stream ``key`` while this server restores
        it (``ended``: or just ended its restore) and leads its group; JSApiError 10062
        otherwise."""
        sa = self.meta.streams.get(key)
        group, replica = self.groups.get(key), self.replicas.get(key)
        if sa is None or (sa.restore is None and not ended) or group is None or replica is None:
            raise E.api_error("JSStreamRestoreErrF", err="the stream was deleted during the restore")
        if not group.is_leader or key not in self.controller.restores:
            raise E.api_error("JSStreamRestoreErrF", err="the stream's leadership moved to "
                              f"{group.leader or 'no server'} during the restore")
        return sa, group, replica

    async def _restore_step(self, key: Key, what: str, done, timeout_s: float, *,
                            ended: bool = False) -> None:
        """Wait (polling, at most ``timeout_s``) until ``done()`` holds, while this server
        still restores ``key`` (see :meth:`_restoring`); JSApiError 10062 naming ``what``
        on a timeout."""
        deadline = trio.current_time() + timeout_s
        while True:
            self._restoring(key, ended=ended)
            if done():
                return
            if trio.current_time() > deadline:
                raise E.api_error("JSStreamRestoreErrF", err=f"{what} took longer than {timeout_s:.0f}s")
            await trio.sleep(RESTORE_POLL_S)

    async def install_restore(self, acc: JetStreamAccount, key: Key, result: Any, built: str,
                              reply: str, size: int) -> None:
        """Put the stream a restore built (``built``: its directory, ``result`` its
        :class:`~jetraft.jetstream.snapshot.RestoreResult`; ``size`` the backup's bytes) in
        place of this server's (empty) replica of ``key``, and have every peer take it:

        1. the built directory replaces the replica's, the store is opened over it and the
           stream's and consumers' state restored (the assignment's config and creation
           time in the backup's place);
        2. one entry is committed and applied, then the group snapshots at it and compacts
           its log (``RaftGroup.snapshot_now``): the store is fsynced, and a peer that
           joins takes the snapshot and fetches the blocks (``net/jetstream/catchup.py``);
        3. the meta group moves the restore to ``"catchup"``: the other peers open their
           replicas, and this leader adds them to its group one at a time;
        4. once the group holds every peer and a quorum of them (this server included)
           completed the snapshot, the meta group ends the restore and ``reply`` is
           answered with the stream's info.

        nats-server does the same with sa.Restore, processStreamRestore and the leader's
        snapshot and catch-up (jetstream_cluster.go). Before step 1 the account's limits are
        checked with the stream's bytes (``result.bytes``: ``restore_limits_check`` of the
        controller). Raises JSApiError 10028 / 10047 when the account's ``max_mem`` /
        ``max_file`` has no room for it, 10062 when the stream's leadership or assignment
        changes meanwhile or a step times out (the caller deletes the stream in every
        case); StorageError/OSError when the store cannot be written."""
        name = key[1]
        sa, group, replica = self._restoring(key)
        self.controller.restore_limits_check(key, result.bytes, time.time_ns())
        try:
            await self._attach_restored(acc, key, built)
        finally:
            self.controller.restore_attached(key)
        sa, group, replica = self._restoring(key)
        state = dict(result.replica)
        state["stream"] = {**(state.get("stream") or {}), "config": sa.config,
                           "created_ns": sa.created_ns}
        try:
            acc.restore_replica_state(name, state, time.time_ns())
        except Exception as exc:  # noqa: BLE001 - a backup whose state does not apply
            raise E.api_error("JSStreamRestoreErrF", err=str(exc)) from None
        # 2: an entry past the last snapshot, then the snapshot at it
        index = group.propose(encode_entry(TICK, replica.next_ts(time.time_ns()), frozenset(), False))
        await self._restore_step(key, "committing the restore",
                                 lambda: group.applied_index >= index, RESTORE_STEP_S)
        group.snapshot_now("restore")
        # 3: the other peers open their replicas; this leader adds them (reconciliation)
        ctl = self.controller

        def phase(want: str | None):
            def done() -> bool:
                now = self.meta.streams.get(key)
                if now is not None and now.restore == want:
                    return True
                self.execute(ctl.restore_phase(key, want))
                return False
            return done

        await self._restore_step(key, "starting the replicas", phase("catchup"), RESTORE_STEP_S)
        need = len(sa.peers) // 2 + 1

        def quorum() -> bool:
            if set(group.peers) != set(sa.peers) or not group.config_settled:
                return False
            current = {r["name"] for r in group.replicas(time.time_ns()) if r.get("current")}
            held = 1 + sum(1 for p in sa.peers if p != self.server.server_name
                           and p in current and p in group.caught_up)
            return held >= need

        await self._restore_step(key, "copying the stream to a quorum of its peers", quorum,
                                 RESTORE_STEP_S + size / RESTORE_COPY_BPS)
        # 4: done; then the answer
        await self._restore_step(key, "ending the restore", phase(None), RESTORE_STEP_S, ended=True)
        entry = acc.streams.get(name)
        st = entry.stream.store.state() if entry is not None else None
        self.events.emit("jetstream_stream_restored", account=key[0], stream=name,
                         group=group.name, peers=list(sa.peers), bytes=size,
                         messages=st.messages if st else 0, last_seq=st.last_seq if st else 0)
        self.execute(ctl.restore_answer(key, reply, time.time_ns()))


    async def _attach_restored(self, acc: JetStreamAccount, key: Key, built: str) -> None:
        """Step 1 of :meth:`install_restore`: the built directory in place of the replica's
        (fsynced into its parent), the store opened over it, the stream attached."""
        name = key[1]
        assigned, _group, replica = self._restoring(key)     # raises 10062 when no longer ours
        if acc.base is None:
            raise E.stream_create("jetstream has no store directory")
        sdir = layout.stream_dir(acc.base, name)
        acc.detach_replica(name)

        def swap() -> None:
            fileio.remove_tree(sdir)
            parent = os.path.dirname(sdir)
            fileio.make_dirs(parent)
            fileio.replace(built, sdir)
            fileio.sync_directory(parent)

        store = None
        try:
            await trio.to_thread.run_sync(swap)
            ttl = bool(assigned.config.get("allow_msg_ttl"))
            store = await trio.to_thread.run_sync(lambda: acc.open_replica_store(name, ttl))
            sa, _group, replica = self._restoring(key)
            acc.create_replica(sa.config, sa.created_ns, keep_files=True, store=store)
        except BaseException:
            # no stream over the restored files: they go, and a replica still open gets
            # its empty stream back (the stream's deletion follows)
            if store is not None:
                store.close()
            with trio.CancelScope(shield=True):     # as large as the restore: off the loop
                await trio.to_thread.run_sync(fileio.remove_tree, sdir)
            if self.replicas.get(key) is replica and acc.streams.get(name) is None:
                replica.start_empty()
            raise

