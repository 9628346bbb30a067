"""Which server answers which request (nats-server jetstream_api.go): an inbound message
is a publish (proposed on the stream's leader), an ack or flow control, or a
``$JS.API`` request. Requests about one stream travel on the stream leader's interest,
on the same route as the publishes and acks before them; writes are proposed, reads
confirmed by a ReadIndex round; a request that reaches a server before the leader's
interest does is forwarded (:class:`Forward`, at most MAX_HOPS times)."""

from __future__ import annotations

from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.api import (
    API_PREFIX,
    JetStreamAccount,
    StreamEntry,
)
from jetraft.jetstream.api_subjects import (
    ack_stream,
    api_kind,
    response_type,
    stream_of,
)
from jetraft.jetstream.cluster.actions import (
    Emit,
    Forward,
    ForwardedRequest,
    Propose,
    Read,
    Refusal,
    StepDown,
    decode_forward,
)
from jetraft.jetstream.cluster.core import (
    MAX_HOPS,
    META_GROUP,
    STREAM_READS,
    STREAM_WRITES,
    ControllerCore,
    restore_in_progress,
)
from jetraft.jetstream.batch import batch_id
from jetraft.jetstream.consumer_delivery import flow_control_last
from jetraft.jetstream.requests import required_level_met
from jetraft.jetstream.replicated import (
    ACK,
    API,
    BATCH,
    FLOW_CONTROL,
    PUBLISH,
    encode_entry,
)


class ApiRouting(ControllerCore):
    """Inbound messages and API requests routed (see the module docstring)."""

    def handle(self, account: str, subject: str, reply: str | None, headers: bytes | None,
               payload: bytes, now_ns: int, *, hops: int = 0, via_meta: bool = False,
               origin: str | None = None, routed: bool = False) -> tuple[bool, list[Any]]:
        """An inbound message: ``(taken, actions)``. ``taken`` is False when clustered
        JetStream does not answer it here (the route layer or no-responders takes it on).
        ``hops``/``via_meta``/``origin``: a request forwarded by another server;
        ``routed``: it came from another server through route interest. A request whose
        handling raises is answered with an error, never raised (fault isolation)."""
        self._origin = origin
        self._now = now_ns
        acc = self.accounts.get(account)
        if acc is None:
            taken = False
            if account == self.system_account and subject.startswith(API_PREFIX):
                taken = self._system_api(account, subject, reply, headers, payload, hops)
            return taken, self._take()
        if subject.startswith(API_PREFIX):
            if headers and reply and hops == 0 and not required_level_met(headers) and \
                    api_kind(subject.split(".")) not in ("DIRECT.GET", "CONSUMER.MSG"):
                # refused where it arrives, before any leader takes it (nats-server
                # errorOnRequiredApiLevel): the account's answer, audited as the others
                for r in acc.handle_api(subject, reply, headers, payload, now_ns):
                    self._send(acc.name, r.out)
                return True, self._take()
            try:
                taken = self._api(acc, subject, reply, headers, payload, hops, via_meta, routed)
            except Exception as exc:  # noqa: BLE001 - one request's failure is answered, never raised
                for r in acc.api_failed(subject, reply, exc):
                    self._send(acc.name, r.out)
                taken = True
            return taken, self._take()
        if subject.startswith("$JS.ACK.") or subject.startswith("$JS.FC."):
            return self._ack(acc, subject, reply, headers, payload, now_ns), self._take()
        entry = acc.stream_for(subject)
        if entry is None:
            return False, []
        key = (account, entry.name)
        replica, group = self.view.replica(key), self.view.group(key)
        if replica is None or group is None or not group.is_leader:
            return False, []
        if self._restoring(key):
            if reply:
                self._respond(account, reply, {"error": restore_in_progress().to_json(),
                                               "stream": entry.name, "seq": 0})
            return True, self._take()
        if acc.byte_limited():
            refusal = acc.publish_limit_refusal(
                entry, subject, headers, payload,
                self.usage.others(account, (p for p in self._meta_peers() if p != self.me)))
            if refusal is not None:
                if reply:
                    self._respond(account, reply, {"error": refusal.to_json(), "stream": entry.name, "seq": 0})
                return True, self._take()
        if headers and batch_id(headers):
            self._stage_atomic(acc, entry, group.name, subject, reply, headers, payload, now_ns)
            return True, self._take()
        data = encode_entry(PUBLISH, replica.next_ts(now_ns), self._push_interest(acc, entry.name),
                            subject, reply, headers, payload)
        refused = (Refusal(account, reply, None, entry.name),) if reply else ()
        self._out.append(Propose(group.name, data, refused))
        return True, self._take()

    def _stage_atomic(self, acc: JetStreamAccount, entry: StreamEntry, group: str, subject: str,
                      reply: str | None, headers: bytes, payload: bytes, now_ns: int) -> None:
        """A message of an atomic batch reached the stream's leader: staged here (only
        here: a new leader has none of it), and a committed batch proposed as one entry,
        which every replica applies whole or not at all (jetstream/batch.py). A batch left
        idle times out on this server's own clock (:meth:`ReplicaLifecycle.tick`)."""
        out, committed, reply = acc.stage_atomic(entry, subject, reply, headers, payload, now_ns)
        for r in out:       # the refusal, or the empty message; an abandoned advisory in either account
            self._send(r.account or acc.name, r.out)
        if committed is None:
            return
        replica = self.view.replica((acc.name, entry.name))
        data = encode_entry(BATCH, replica.next_ts(now_ns), self._push_interest(acc, entry.name),
                            committed.id, reply, [list(m) for m in committed.msgs])
        refused = (Refusal(acc.name, reply, None, entry.name),) if reply else ()
        self._out.append(Propose(group, data, refused))

    def _ack(self, acc: JetStreamAccount, subject: str, reply: str | None, headers: bytes | None,
             payload: bytes, now: int) -> bool:
        stream = ack_stream(subject)
        key = (acc.name, stream)
        replica, group = self.view.replica(key), self.view.group(key)
        if replica is None or group is None or not group.is_leader:
            return False
        interest = self._push_interest(acc, stream)
        if subject.startswith("$JS.ACK."):
            data = encode_entry(ACK, replica.next_ts(now), interest, subject, reply, payload)
        else:
            last = flow_control_last(headers)
            data = encode_entry(FLOW_CONTROL, replica.next_ts(now), interest, subject,
                                list(last) if last is not None else None)
        self._out.append(Propose(group.name, data))
        return True

    def forwarded(self, src: str, body: bytes, now_ns: int) -> tuple[bool, list[Any]]:
        """A ``"jsapi"`` frame from server ``src``: the request it carries, handled here. A
        malformed frame is reported and dropped."""
        try:
            req = decode_forward(body)
        except Exception as exc:  # noqa: BLE001 - a malformed frame is dropped, never fatal
            return False, [Emit("config_warning", {"message": f"malformed jsapi frame from {src}: {exc}"})]
        self._remember_origin(req.reply, req.origin)
        return self.handle(req.account, req.subject, req.reply, req.headers, req.payload, now_ns,
                           hops=req.hops, via_meta=req.via_meta, origin=req.origin)

    def _forward(self, target: str | None, account: str, subject: str, reply: str | None,
                 headers: bytes | None, payload: bytes, hops: int, rtype: str,
                 via_meta: bool = False) -> bool:
        """Send an API request to server ``target``; answer 10008 when there is no target,
        no route to it, or the request went round too often."""
        if target is None or hops >= MAX_HOPS:
            self._error(account, reply, rtype, E.cluster_not_available())
            return True
        if target == self.me:
            return False
        origin = self._origin or self.me
        frame = ForwardedRequest(hops + 1, via_meta, account, subject, reply, headers, payload,
                                 origin).pack()
        self._out.append(Forward(target, frame,
                                 (Refusal(account, reply, rtype),)))
        return True

    def _api(self, acc: JetStreamAccount, subject: str, reply: str | None, headers: bytes | None,
             payload: bytes, hops: int, via_meta: bool = False, routed: bool = False) -> bool:
        tokens = subject.split(".")
        kind = api_kind(tokens)
        if kind == "STREAM.UPDATE" and not via_meta and len(tokens) == 5:
            return self._meta_api(acc, tokens, kind, subject, reply, headers, payload, hops)
        if kind == "STREAM.CREATE" and via_meta and len(tokens) == 5:
            # the meta leader found the stream exists with this config: its leader answers
            if self._led(acc.name, tokens[4]):
                self._answer_existing(acc, tokens[4], reply)
                return True
            group = self.view.group((acc.name, tokens[4]))
            return self._forward(group.leader if group else None, acc.name, subject, reply,
                                 headers, payload, hops, E.STREAM_CREATE_RESPONSE, via_meta=True)
        stream = stream_of(tokens)
        if kind in ("STREAM.CREATE", "STREAM.DELETE", "STREAM.NAMES", "STREAM.LIST",
                    "STREAM.PEER", "STREAM.RESTORE") or subject == "$JS.API.INFO":
            return self._meta_api(acc, tokens, kind, subject, reply, headers, payload, hops)
        if stream is None:
            out = acc.handle_api(subject, reply, headers, payload, self._now)
            for r in out or ():
                self._send(acc.name, r.out)
            return out is not None
        if routed and not self._led(acc.name, stream):
            return True     # a meta request seen through stale interest: not ours
        return self._stream_api(acc, stream, tokens, kind, subject, reply, headers, payload, hops,
                                routed=routed)

    def _stream_api(self, acc: JetStreamAccount, stream: str, tokens: list[str], kind: str,
                    subject: str, reply: str | None, headers: bytes | None, payload: bytes,
                    hops: int, via_meta: bool = False, routed: bool = False) -> bool:
        """A request about one stream. Its leader answers (reads at once, writes once
        replicated). Elsewhere it travels on the leader's subject interest, like the
        publishes and acks before it on the same route, so a pull request never overtakes
        an ack; one that reached a former leader is dropped, as nats-server drops it. A JSON
        API call that reaches a server before the leader's interest does is forwarded to
        the leader (nats-server has no such window: every server receives the request and
        only the leader answers)."""
        key = (acc.name, stream)
        rtype = response_type(tokens)
        if kind == "DIRECT.GET" and not routed and not self._led(acc.name, stream):
            # a caught-up mirror with mirror_direct that this server leads answers for its
            # origin, as itself (nats-server subscribeToMirrorDirect): a read near the client
            mirror = acc.direct_mirror(stream, lambda name: self._led(acc.name, name))
            group = self.view.group((acc.name, mirror)) if mirror is not None else None
            if group is not None:
                if reply:
                    local = ".".join(["$JS", "API", "DIRECT", "GET", mirror, *tokens[5:]])
                    self._out.append(Read(group.name, acc.name, local, reply, headers, payload, ()))
                return True
        sa = self.meta.streams.get(key)
        if sa is None:
            if kind in ("DIRECT.GET", "CONSUMER.MSG"):
                return False
            leader = self._meta_leader()
            if leader is not None and leader != self.me:
                # this server may not have applied a just-made assignment yet: only the
                # meta leader says "stream not found" (as in nats-server)
                return self._forward(leader, acc.name, subject, reply, headers, payload, hops,
                                     rtype, via_meta)
            if leader is None:
                self._error(acc.name, reply, rtype, E.cluster_not_available())
            elif reply:     # "not found" once the meta group confirms it (ReadIndex)
                self._out.append(Read(META_GROUP, acc.name, subject, reply, headers, payload,
                                      (Refusal(acc.name, reply, rtype),)))
            return True
        group = self.view.group(key)
        if group is None or not group.is_leader:
            if hops > 0 or via_meta:    # sent here by the meta leader or another server
                target = group.leader if group is not None else self._reachable(sa.peers)
                return self._forward(target, acc.name, subject, reply, headers, payload, hops,
                                     rtype, via_meta)
            if routed:      # our leader interest was stale: the client asks again
                return True
            if self.view.has_remote_interest(acc.name, subject):
                return False    # the route layer takes it to the leader, behind the acks
            if kind in ("CONSUMER.MSG", "DIRECT.GET"):
                return False    # not a JSON API call: no leader means no-responders
            # the leader's interest has not reached this server yet (a stream created or a
            # leader elected a moment ago): nothing of the stream's can have gone that way
            # before it, so the request goes to the leader this server knows, else to
            # another of the stream's servers (which passes it on once more at most);
            # 10008 only when there is none
            target = (group.leader if group is not None and group.leader else
                      self._reachable(tuple(p for p in sa.peers if p != self.me)))
            if target == self.me:   # this server's replica has not taken up leadership yet
                target = None
            return self._forward(target, acc.name, subject, reply, headers, payload, hops, rtype, via_meta)
        now = self._now
        if self._restoring(key) and (kind in STREAM_WRITES or kind in (
                "STREAM.LEADER", "CONSUMER.LEADER", "STREAM.UPDATE")):
            if kind != "CONSUMER.MSG":
                self._error(acc.name, reply, rtype, restore_in_progress())
            return True
        if kind == "STREAM.LEADER" or kind == "CONSUMER.LEADER":
            self._out.append(StepDown(group.name, "stream" if kind == "STREAM.LEADER" else "consumer",
                                      acc.name, reply, rtype))
            return True
        if kind in STREAM_WRITES:
            if kind == "CONSUMER.MSG" and not acc.knows_consumer(
                    f"$JS.ACK.{tokens[5]}.{tokens[6]}", "$JS.ACK."):
                return False
            if kind in ("CONSUMER.CREATE", "CONSUMER.DURABLE"):
                refusal = acc.consumer_create_refusal(subject, payload) or \
                    acc.consumer_limit_refusal(subject, payload)
                if refusal is not None:     # a setting jetraft does not act on, or the account's limit: not proposed
                    self._error(acc.name, reply, rtype, refusal)
                    return True
                # the default max_ack_pending the account's limit gives, written in
                payload = acc.consumer_request_with_limits(subject, payload)
            replica = self.view.replica(key)
            pull_inbox = reply if kind == "CONSUMER.MSG" else None
            data = encode_entry(API, replica.next_ts(now), self._push_interest(acc, stream, pull_inbox),
                                subject, reply, headers, payload)
            # A refused pull request is not answered (its client's request expires, as when
            # it reaches a server that is not the leader): a JSON body on the pull inbox
            # would be taken for a stream message.
            refused = () if kind == "CONSUMER.MSG" else (Refusal(acc.name, reply, rtype),)
            self._out.append(Propose(group.name, data, refused))
            return True
        if kind in STREAM_READS:
            if kind == "DIRECT.GET":
                entry = acc.streams.get(stream)
                if entry is None or not entry.stream.config.allow_direct:
                    return False    # no-responders, as from nats-server
            if not reply:
                return True         # nothing to answer, as nats-server
            # a status or a message answers a direct get: no JSON body when refused
            refused = () if kind == "DIRECT.GET" else (Refusal(acc.name, reply, rtype),)
            self._out.append(Read(group.name, acc.name, subject, reply, headers, payload, refused))
            return True
        out = acc.handle_api(subject, reply, headers, payload, now)
        if out is None:
            return False
        for r in out:
            self._send(acc.name, r.out)
        return True

    def serve_read(self, read: Read, now_ns: int) -> list[Any]:
        """The stream group confirmed ``read`` (see :class:`Read`): answer it from this
        server's state now. A stream gone meanwhile is answered as the account answers it
        (stream not found); a direct get of a stream that no longer allows it, not at all."""
        self._now = now_ns
        acc = self.accounts.get(read.account)
        if acc is None:
            return self._take()
        if read.group == META_GROUP:
            self._serve_meta_read(acc, read, now_ns)
            return self._take()
        for r in acc.handle_api(read.subject, read.reply, read.headers, read.payload, now_ns) or ():
            self._send(acc.name, r.out)
        return self._take()
