"""Carrying out the cluster controller's actions (:mod:`jetraft.jetstream.cluster.actions`) on
one server: replies sent (through the server a request came from when told so), entries
proposed, ReadIndex reads, requests forwarded over the routes, the stream leader's route
interest, events, replicas and the meta group opened and closed, membership changes,
step-downs, SERVER.REMOVE, refusals and clustered restores started.

A part of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (``net/jetstream/cluster.py``),
over the state its ``__init__`` sets up; what each action opens or closes is in
:mod:`.meta_group` and :mod:`.cluster_replicas`. Fault isolation: a ReadIndex read's
serving or refusal that raises is that request's failure alone (``api_request_failed``).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.cluster import (
    META_GROUP,
    ChangePeer,
    CloseMeta,
    CloseReplica,
    Emit,
    AppFrame,
    Forward,
    OpenMeta,
    OpenReplica,
    Propose,
    Read,
    Refusal,
    RemoveServer,
    Send,
    SetInterest,
    StartRestore,
    StepDown,
    ToMetaLeader,
    encode_reply_frame,
)
from jetraft.raft.types import (
    NotLeaderError,
    ProposalDroppedError,
    RaftError,
)
from jetraft.storage import StorageError

if TYPE_CHECKING:
    from jetraft.net.raft.host import RaftGroup

__all__ = ["ActionRunner"]


class ActionRunner:
    """How :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` carries out the
    controller's actions (see the module docstring)."""

    def execute(self, actions: list[Any]) -> None:
        """Carry out the controller's actions, in order."""
        for action in actions:
            kind = type(action)
            if kind is Send:
                self._send(action)
            elif kind is Propose:
                if not self._propose(action):
                    self.execute(list(action.refused))
                    if action.abandon:
                        return
            elif kind is Read:
                self._read(action)
            elif kind is Forward:
                if not self.routes.send_app(action.server, "jsapi", action.frame):
                    self.execute(list(action.unreachable))
            elif kind is AppFrame:
                self.routes.send_app(action.server, action.kind, action.body)
            elif kind is SetInterest:
                if action.remove:
                    self.routes.remove_internal_interests(action.account, action.remove)
                if action.add:
                    self.routes.add_internal_interests(action.account, action.add)
            elif kind is Emit:
                self.events.emit(action.event, **action.fields)
            elif kind is OpenReplica:
                self._open_replica(action)
            elif kind is CloseReplica:
                self._close_replica(action.key, delete=action.delete, group_name=action.group)
            elif kind is ChangePeer:
                self._change_peer(action)
            elif kind is StepDown:
                self._step_down(action)
            elif kind is RemoveServer:
                self._remove_server(action)
            elif kind is OpenMeta:
                self._open_meta(action.peers)
            elif kind is CloseMeta:
                self._close_meta()
            elif kind is ToMetaLeader:
                self._to_meta_leader(action.data)
            elif kind is Refusal:
                self.execute(self.controller.refusal(action))
            elif kind is StartRestore:
                acc = self.service.accounts.get(action.assignment.account)
                if acc is not None:
                    self.service.transfers.start_clustered(acc, action.assignment, action.reply)
            else:
                raise TypeError(f"unknown cluster action {action!r}")

    def _send(self, action: Send) -> None:
        if action.via is not None and self.routes.send_app(
                action.via, "jsreply", encode_reply_frame(action.account, action.out)):
            return
        self.server.route_internal(action.account, action.out)

    def _group_named(self, name: str) -> RaftGroup | None:
        if name == META_GROUP:
            return self.meta_group
        return self.host.groups.get(name)

    def _propose(self, action: Propose) -> bool:
        group = self._group_named(action.group)
        if group is None:
            return False
        try:
            group.propose(action.data)
            return True
        except (NotLeaderError, ProposalDroppedError):
            return False
        except (RaftError, StorageError):
            if action.group == META_GROUP:
                return False    # no longer the meta leader: the new one decides
            raise

    def _read(self, action: Read) -> None:
        """Hand ``action`` to its group as a ReadIndex read (RaftGroup.read); the refusal
        at once when the group cannot take it. What serving or refusing it raises is that
        request's failure alone (``api_request_failed``)."""
        group = self._group_named(action.group)

        def isolated(step: Callable[[], list[Any]]) -> Callable[[], None]:
            def run() -> None:
                try:
                    self.execute(step())
                except Exception as exc:  # noqa: BLE001 - one request's failure, not the group's
                    self.events.emit("api_request_failed", account=action.account,
                                     subject=action.subject, error=repr(exc),
                                     traceback="".join(traceback.format_exception(exc)))
            return run

        serve = isolated(lambda: self.controller.serve_read(action, time.time_ns()))
        refuse = isolated(lambda: list(action.refused))
        if group is None:
            refuse()
            return
        try:
            group.read(serve, refuse)
        except (RaftError, StorageError):       # not the leader any more, closed, too many reads waiting
            refuse()

    def _change_peer(self, action: ChangePeer) -> None:
        group = self._group_named(action.group)
        if group is None:
            return
        try:
            if action.op == "step_down":
                group.step_down()
            elif action.op == "remove":
                group.remove_peer(action.peer)
            elif action.op == "add_learner":
                group.add_learner(action.peer)
            elif action.op == "promote":
                group.promote(action.peer)
            else:
                group.add_peer(action.peer)
        except (RaftError, StorageError, ValueError):
            return      # a change is in flight: reconciliation tries again

    def _step_down(self, action: StepDown) -> None:
        """Hand ``group``'s leadership to its most up-to-date peer (STEPDOWN requests)."""
        group = self._group_named(action.group)
        try:
            to = group.step_down() if group is not None else None
        except (RaftError, StorageError):
            to = None
        self.execute(self.controller.step_down_done(action, to))

    def _remove_server(self, action: RemoveServer) -> None:
        """SERVER.REMOVE on the meta leader: take the server out of the meta group (a
        configuration change), then record it removed; once that entry is applied every
        stream it held gets a replacement replica."""
        error: E.JSApiError | None = None
        try:
            self.meta_group.remove_peer(action.peer)
            self.meta_group.propose(action.data)
        except (ProposalDroppedError, ValueError):
            error = E.cluster_member_change_inflight()
        except NotLeaderError:
            error = E.cluster_not_available()
        self.execute(self.controller.server_remove_done(action, error))
