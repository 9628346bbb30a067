"""Mirrors and sources in a cluster (jetstream/sourcing.py): the sourcing stream's leader
runs its links. A fetch is answered by this server's own replica of the origin when it
holds one, else by one of the origin's servers (route APP frames ``"jssrc"`` and
``"jssrcans"``: server to server, never a subject a client can publish or subscribe to).
Any replica may answer: its store is a prefix of the origin's committed messages. The
answer is proposed to the sourcing stream's RAFT group as one ``"S"`` entry, so every
replica stores the same messages at the same place in its log
(:meth:`~jetraft.jetstream.api.JetStreamAccount.apply_fetched`); the next fetch goes out
once it is applied. A leader change starts the links again from the new leader's store.

A durable link's fetch (workqueue or interest origin, or a named consumer) is answered by
the origin's leader only: it proposes the link's acks and deliveries to the origin's group
as one ``"L"`` entry, and the CONSUMER.CREATE of a missing link consumer as an ``"A"``
entry; a follower answers 10009 and the link asks the next of the origin's servers.
"""

from __future__ import annotations

from typing import Any

import msgpack

from jetraft.jetstream import errors as E
from jetraft.jetstream.cluster.actions import AppFrame, Emit, GroupView, Key, Propose
from jetraft.jetstream.cluster.core import ControllerCore
from jetraft.jetstream.replicated import API, LINK, SOURCED, StreamReplica, encode_entry
from jetraft.jetstream.sourcing import LINK_REPLY, FetchAnswer, FetchRequest

#: Route APP frame kinds: a fetch, and its answer.
FETCH_FRAME = "jssrc"
ANSWER_FRAME = "jssrcans"


class SourceFeeds(ControllerCore):
    """The leader's links, and fetches answered for other servers (see the module docstring)."""

    def _feed_sources(self, key: Key, replica: StreamReplica, group: GroupView, now: int) -> None:
        """On the stream's leader: each fetch that is due, answered here or sent to one of
        the origin's servers."""
        acc = self.accounts.get(key[0])
        entry = acc.streams.get(key[1]) if acc is not None else None
        if entry is None or (entry.stream.config.mirror is None and not entry.stream.config.sources):
            return
        for link, req in acc.fetches_due(entry, now):
            origin = (key[0], req.origin)
            sa = self.meta.streams.get(origin)
            durable = sa is not None and req.durable(str(sa.config.get("retention") or "limits"))
            og = self.view.group(origin)
            if origin in self.view.replica_keys() and req.origin in acc.streams and (
                    not durable or (og is not None and og.is_leader)):
                self._propose_answer(key, replica, group, link.spec.iname, self._origin_answer(origin, req, now), now)
                continue
            if sa is None or not sa.peers:
                acc.apply_fetched(entry, link.spec.iname, FetchAnswer(error=_not_found()), now)
                continue
            peers = [p for p in sa.peers if p != self.me] or list(sa.peers)
            target = peers[link.peer % len(peers)]
            if durable and og is not None and og.leader and og.leader != self.me:
                target = og.leader
            body = msgpack.packb([key[0], key[1], link.spec.iname, req.to_wire()], use_bin_type=True)
            self._out.append(AppFrame(target, FETCH_FRAME, body))

    def _propose_answer(self, key: Key, replica: StreamReplica, group: GroupView, iname: str,
                        answer: FetchAnswer, now: int) -> None:
        acc = self.accounts[key[0]]
        entry = acc.streams[key[1]]
        if answer.error is not None or not answer.msgs:
            acc.apply_fetched(entry, iname, answer, now)      # bookkeeping only: nothing to store
            return
        data = encode_entry(SOURCED, replica.next_ts(now), self._push_interest(acc, key[1]), iname,
                            [list(m) for m in answer.msgs], answer.next_seq, answer.pending, answer.ident)
        self._out.append(Propose(group.name, data))

    def _origin_answer(self, origin: Key, req: FetchRequest, now: int) -> FetchAnswer:
        """The answer of this server's replica of ``origin``; on its leader, a durable
        link's consumer create and its acks and deliveries proposed to the origin's group."""
        acc = self.accounts[origin[0]]
        try:
            answer, create, step = acc.origin_fetch(req)
        except Exception as exc:  # noqa: BLE001 - one fetch's failure is answered, never raised
            return FetchAnswer(error=E.stream_general(f"fetch failed: {exc}").to_json())
        if create is None and step is None:
            return answer
        replica, og = self.view.replica(origin), self.view.group(origin)
        if replica is None or og is None or not og.is_leader:
            return FetchAnswer(error=E.cluster_not_leader().to_json())
        interest = self._push_interest(acc, origin[1])
        if create is not None:
            subject, payload = acc.link_consumer_request(origin[1], create)
            refusal = acc.consumer_create_refusal(subject, payload) or acc.consumer_limit_refusal(subject, payload)
            if refusal is not None:
                return FetchAnswer(error=refusal.to_json())
            payload = acc.consumer_request_with_limits(subject, payload)
            self._out.append(Propose(og.name, encode_entry(API, replica.next_ts(now), interest, subject,
                                                           LINK_REPLY, None, payload)))
        if step is not None:
            self._out.append(Propose(og.name, encode_entry(LINK, replica.next_ts(now), interest, step.consumer,
                                                           step.ack_seq, list(step.seqs))))
        return answer

    def source_fetch(self, src: str, body: bytes, now_ns: int) -> list[Any]:
        """A ``"jssrc"`` frame from server ``src``: answered from this server's replica of
        the origin (an error when it holds none). A malformed frame is reported and dropped."""
        try:
            account, stream, iname, req = _decode(body, FetchRequest.from_wire)
        except Exception as exc:  # noqa: BLE001 - a malformed frame is dropped, never fatal
            return [Emit("config_warning", {"message": f"malformed {FETCH_FRAME} frame from {src}: {exc}"})]
        acc = self.accounts.get(account)
        held = acc is not None and (account, req.origin) in self.view.replica_keys() \
            and req.origin in acc.streams
        answer = self._origin_answer((account, req.origin), req, now_ns) if held \
            else FetchAnswer(error=_not_found())
        reply = msgpack.packb([account, stream, iname, answer.to_wire()], use_bin_type=True)
        return [*self._take(), AppFrame(src, ANSWER_FRAME, reply)]

    def source_answer(self, src: str, body: bytes, now_ns: int) -> list[Any]:
        """A ``"jssrcans"`` frame: proposed to the sourcing stream's group when this server
        still leads it and the link still waits for it; dropped otherwise."""
        try:
            account, stream, iname, answer = _decode(body, FetchAnswer.from_wire)
        except Exception as exc:  # noqa: BLE001 - a malformed frame is dropped, never fatal
            return [Emit("config_warning", {"message": f"malformed {ANSWER_FRAME} frame from {src}: {exc}"})]
        key = (account, stream)
        acc = self.accounts.get(account)
        replica, group = self.view.replica(key), self.view.group(key)
        entry = acc.streams.get(stream) if acc is not None else None
        if entry is None or replica is None or group is None or not group.is_leader:
            return []
        link = acc.links(entry).get(iname)
        if link is None or not link.in_flight:
            return []
        if answer.error is not None:
            link.peer += 1          # ask another of the origin's servers next time
        self._propose_answer(key, replica, group, iname, answer, now_ns)
        return self._take()


def _decode(body: bytes, parse: Any) -> tuple[str, str, str, Any]:
    """``[account, stream, index name, wire]`` of a frame, the wire form ``parse``d.
    Raises ValueError (or a msgpack error) when malformed."""
    account, stream, iname, wire = msgpack.unpackb(body, raw=False)
    if not (isinstance(account, str) and isinstance(stream, str) and isinstance(iname, str)):
        raise ValueError("bad field types")
    return account, stream, iname, parse(wire)


def _not_found() -> dict[str, Any]:
    return E.stream_not_found().to_json()
