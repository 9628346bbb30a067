"""The requests the meta leader answers (nats-server jetstream_cluster.go
jsClusteredStream*Request, jetstream_api.go): stream create, update, delete, names,
list, restore, peer-remove, account info, META.LEADER.STEPDOWN and SERVER.REMOVE;
proposed to the meta group and answered once applied."""

from __future__ import annotations

import json
from dataclasses import replace
from collections.abc import Callable
from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.api import (
    API_PREFIX,
    LIST_LIMIT,
    NAMES_LIMIT,
    JetStreamAccount,
)
from jetraft.jetstream.api_subjects import (
    api_kind,
    peer_hash,
    response_type,
    stream_of,
)
from jetraft.jetstream.cluster.actions import (
    Propose,
    Read,
    Refusal,
    RemoveServer,
    StepDown,
)
from jetraft.jetstream.cluster.core import (
    MAX_META_AUDITS,
    META_GROUP,
    RESTORE_PROPOSED_NS,
    ControllerCore,
    restore_in_progress,
)
from jetraft.jetstream.meta import (
    StreamAssignment,
    encode_assign_stream,
    encode_remove_server,
    encode_remove_stream,
    encode_replace_stream_peer,
    encode_update_stream,
    group_name,
)
from jetraft.jetstream.model import StreamConfig, StreamInfo, StreamState
from jetraft.jetstream.placement import PlacementError
from jetraft.jetstream.requests import (
    decode_request,
    int_field,
    request_info,
    str_field,
)
from jetraft.jetstream.validate import check_stream_create, check_stream_update
from jetraft.protocol.subjects import subjects_overlap


class MetaRequests(ControllerCore):
    """Requests answered by the meta leader (see the module docstring)."""

    def _meta_api(self, acc: JetStreamAccount, tokens: list[str], kind: str, subject: str,
                  reply: str | None, headers: bytes | None, payload: bytes, hops: int) -> bool:
        rtype = response_type(tokens)
        if not reply:
            return True
        leader = self._meta_leader()
        if leader != self.me:
            return self._forward(leader, acc.name, subject, reply, headers, payload, hops, rtype)
        now = self._now
        if kind != "STREAM.UPDATE":         # an update is answered (and audited) by the stream's leader
            audits = self._meta_audits
            audits[reply] = (acc.name, subject, payload, request_info(headers))
            audits.move_to_end(reply)
            while len(audits) > MAX_META_AUDITS:
                audits.popitem(last=False)
        try:
            if kind == "STREAM.CREATE":
                return self._create_stream(acc, tokens, subject, reply, headers, payload, hops, now)
            if kind == "STREAM.DELETE":
                if payload.strip():
                    raise E.not_empty_request()
                sa = self.meta.streams.get((acc.name, tokens[4]))
                if sa is None:
                    raise E.stream_not_found()
                self._propose_meta(encode_remove_stream(acc.name, tokens[4]), acc.name, reply, rtype)
                self._meta_replies[("delete", acc.name, tokens[4])] = (reply, rtype)
                return True
            if kind == "STREAM.RESTORE":
                return self._restore_stream(acc, tokens[4] if len(tokens) > 4 else "", reply,
                                            payload, now)
            if kind == "STREAM.UPDATE":
                if self._restoring((acc.name, tokens[4])):
                    raise restore_in_progress()
                err = self._check_update(acc, tokens[4], payload)
                if err is not None:
                    raise err
                new = StreamConfig.decode(decode_request(payload, "StreamConfigRequest") or {}).checked()
                if len(self._update_proposed) > 1024:
                    self._update_proposed.clear()
                self._update_proposed[(acc.name, tokens[4])] = (now, new)
                self._propose_meta(encode_update_stream(acc.name, tokens[4], new.to_json()),
                                   acc.name, reply, rtype)
                return self._stream_api(acc, tokens[4], tokens, kind, subject, reply, headers,
                                        payload, hops, via_meta=True)
            if kind == "STREAM.PEER":
                return self._peer_remove(acc, tokens[5] if len(tokens) > 5 else "", reply, payload, rtype)
            if kind in ("STREAM.NAMES", "STREAM.LIST") or subject == "$JS.API.INFO":
                # answered from the assignments once the meta group confirms this server
                # still leads it with every assignment acknowledged before (ReadIndex)
                self._out.append(Read(META_GROUP, acc.name, subject, reply, headers, payload,
                                      (Refusal(acc.name, reply, rtype),)))
                return True
        except E.JSApiError as err:
            self._error(acc.name, reply, rtype, err)
            return True
        finally:
            if kind in ("STREAM.CREATE", "STREAM.RESTORE"):
                # answered, when it succeeds, by the new stream's leader: no audit waits here
                self._meta_audits.pop(reply, None)
        return False

    def _propose_meta(self, data: bytes, account: str, reply: str | None, rtype: str) -> None:
        """A meta proposal answering a request: refused at once (no longer the meta leader)
        means 10008 and nothing else of the request is done."""
        self._out.append(Propose(META_GROUP, data,
                                 (Refusal(account, reply, rtype),),
                                 abandon=True))

    def _meta_read(self, acc: JetStreamAccount, kind: str, subject: str, payload: bytes,
                   now: int) -> dict[str, Any]:
        """NAMES, LIST and account INFO from the meta leader: the assignments (with the
        request's ``subject`` filter and ``offset``, as a single server pages them), with
        state from this server's replicas where it holds one. Raises JSApiError for a bad
        request."""
        if subject == "$JS.API.INFO":
            info = acc.account_info(payload, now)
            info["streams"] = sum(1 for (account, _name) in self.meta.streams if account == acc.name)
            return info
        go_type = "JSApiStreamNamesRequest" if kind == "STREAM.NAMES" else "JSApiStreamListRequest"
        req = acc.names_request(payload, go_type, ("offset", "subject"))
        filt = str_field(req, "subject", go_type)
        offset = max(int_field(req, "offset", go_type, "int"), 0)
        names = sorted(name for (account, name), sa in self.meta.streams.items()
                       if account == acc.name and (not filt or any(
                           subjects_overlap(filt, s) for s in sa.config.get("subjects") or [name])))
        offset = min(offset, len(names))
        if kind == "STREAM.NAMES":
            page = names[offset:offset + NAMES_LIMIT]
            return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "streams": page or None}
        infos = []
        for name in names[offset:offset + LIST_LIMIT]:
            entry = acc.streams.get(name)
            if entry is not None:
                infos.append(acc.stream_info(entry, now, dynamic=False))
            else:       # no replica here: the assigned config, state unknown (zeros)
                sa = self.meta.streams[(acc.name, name)]
                info = StreamInfo(config=StreamConfig.from_json(sa.config).checked(),
                                  created=sa.created_ns, state=StreamState(), ts=now).to_json()
                info["cluster"] = {"name": self.cluster_name}
                infos.append(info)
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "streams": infos}

    def _serve_meta_read(self, acc: JetStreamAccount, read: Read, now: int) -> None:
        """A read the meta group confirmed: NAMES, LIST or account INFO from the
        assignments; a request about a stream that was not assigned when it came is
        "stream not found" if it still is not, and taken up as usual if it now is."""
        tokens = read.subject.split(".")
        kind = api_kind(tokens)
        rtype = response_type(tokens)
        try:
            if kind in ("STREAM.NAMES", "STREAM.LIST") or read.subject == "$JS.API.INFO":
                body = self._meta_read(acc, kind, read.subject, read.payload, now)
                self._respond(acc.name, read.reply, {"type": rtype, **body})
                return
            stream = stream_of(tokens)
            if stream is None or (acc.name, stream) not in self.meta.streams:
                raise E.stream_not_found()
        except E.JSApiError as err:
            self._error(acc.name, read.reply, rtype, err)
            return
        self._stream_api(acc, stream, tokens, kind, read.subject, read.reply, read.headers,
                         read.payload, 0)

    def _existing_config(self, account: str) -> Callable[[str], dict[str, Any] | None]:
        """The config JSON of the account's stream ``name`` in the meta group's assignments."""
        def existing(name: str) -> dict[str, Any] | None:
            sa = self.meta.streams.get((account, name))
            return sa.config if sa is not None else None
        return existing

    def _create_stream(self, acc: JetStreamAccount, tokens: list[str], subject: str, reply: str,
                       headers: bytes | None, payload: bytes, hops: int, now: int) -> bool:
        cfg, exists = check_stream_create(payload, tokens[4], self._account_subjects(acc.name),
                                          existing=self._existing_config(acc.name), clustered=True)
        key = (acc.name, cfg.name)
        # the account's limits, in nats-server's order (jsClusteredStreamRequest): its
        # checkStreamCfg, then jsClusteredStreamLimitsCheck
        acc.check_stream_bytes_limits(cfg)
        acc.check_stream_count_limits(cfg, self._other_streams(acc.name, cfg.name, now))
        if acc.byte_limited():
            acc.check_stream_reservation(cfg, self._stream_configs(acc.name, now), create=True)
        if exists:
            existing = self.meta.streams[key]
            group = self.view.group(key)
            target = group.leader if group is not None else self._reachable(existing.peers)
            if target == self.me:
                self._answer_existing(acc, cfg.name, reply)
                return True
            return self._forward(target, acc.name, subject, reply, headers, payload, hops,
                                 E.STREAM_CREATE_RESPONSE, via_meta=True)
        inflight = self._create_proposed.get(key)
        if inflight is not None and now - inflight[0] < RESTORE_PROPOSED_NS:
            # the same name proposed a moment ago, not applied yet: the same config gets the
            # same assignment (RAFT group, peers) again with its own reply, another config
            # 10058 (nats-server streamAssignmentOrInflight)
            if inflight[1].to_json() != cfg.to_json():
                raise E.stream_name_exist()
            sa = replace(inflight[2], reply=reply, client=request_info(headers))
            self._propose_meta(encode_assign_stream(sa), acc.name, reply, E.STREAM_CREATE_RESPONSE)
            return True
        peers = self._place_new(acc.name, cfg)
        sa = StreamAssignment(account=acc.name, name=cfg.name, config=cfg.to_json(),
                              group=group_name("S", acc.name, cfg.name, now, replicas=len(peers),
                                               storage=cfg.storage), peers=tuple(peers),
                              created_ns=now, reply=reply, client=request_info(headers))
        if len(self._create_proposed) > 1024:
            self._create_proposed.clear()
        self._create_proposed[key] = (now, cfg, sa)
        self._propose_meta(encode_assign_stream(sa), acc.name, reply, E.STREAM_CREATE_RESPONSE)
        self._emit("jetstream_stream_assigned", account=acc.name, stream=cfg.name,
                   group=sa.group, peers=list(sa.peers), replicas=cfg.num_replicas)
        return True

    def _other_streams(self, account: str, name: str, now: int) -> int:
        """How many streams ``account`` has but ``name``: its assignments and the creates
        and restores this meta leader proposed in the last RESTORE_PROPOSED_NS, not applied
        yet (nats-server counts its in-flight proposals too: streamAssignmentsOrInflightSeq)."""
        names = {n for (a, n) in self.meta.streams if a == account}
        names.update(n for (a, n), (at, _cfg, _sa) in self._create_proposed.items()
                     if a == account and now - at < RESTORE_PROPOSED_NS)
        names.update(n for (a, n), at in self._restore_proposed.items()
                     if a == account and now - at < RESTORE_PROPOSED_NS)
        names.discard(name)
        return len(names)

    def _stream_configs(self, account: str, now: int) -> list[StreamConfig]:
        """The configs of ``account``'s stream assignments, with the creates and updates
        this meta leader proposed in the last RESTORE_PROPOSED_NS and not applied yet (for
        the bytes the account's streams reserve; nats-server counts its in-flight proposals
        too). An update is answered by the stream's leader, which may be before the meta
        group applied it here."""
        out = {n: StreamConfig.from_json(sa.config) for (a, n), sa in self.meta.streams.items()
               if a == account}
        for (a, n), (at, cfg, _sa) in self._create_proposed.items():
            if a == account and n not in out and now - at < RESTORE_PROPOSED_NS:
                out[n] = cfg
        for (a, n), (at, cfg) in self._update_proposed.items():
            if a == account and n in out and now - at < RESTORE_PROPOSED_NS:
                out[n] = cfg
        return list(out.values())

    def _check_update(self, acc: JetStreamAccount, stream: str, payload: bytes) -> E.JSApiError | None:
        """The meta leader's checks of STREAM.UPDATE that need the whole cluster's view
        (replica count, overlap with streams of other peers); the stream's replicas then
        apply the update itself through their log, with every single-server check."""
        def current(name: str) -> StreamConfig:
            sa = self.meta.streams.get((acc.name, name))
            if sa is None:
                raise E.stream_not_found()
            return StreamConfig.from_json(sa.config).checked()

        try:
            cfg = check_stream_update(payload, stream, current, self._account_subjects(acc.name, stream),
                                      clustered=True, meta_leader=True, existing=self._existing_config(acc.name))
            acc.check_stream_bytes_limits(cfg)
            acc.check_stream_consumers_limit(cfg)
            if acc.byte_limited():
                acc.check_stream_reservation(cfg, self._stream_configs(acc.name, self._now), create=False)
            self._check_placement_update(self.meta.streams[(acc.name, stream)], cfg)
        except E.JSApiError as err:
            return err
        return None

    def _account_subjects(self, account: str, skip: str | None = None) -> list[str]:
        """The subjects of the account's stream assignments but ``skip``'s (a stream without
        subjects: its name), for one overlap check against them all."""
        out: list[str] = []
        for (acct, name), sa in self.meta.streams.items():
            if acct == account and name != skip:
                out.extend(sa.config.get("subjects") or [name])
        return out

    def _peer_remove(self, acc: JetStreamAccount, stream: str, reply: str, payload: bytes,
                     rtype: str) -> bool:
        req = decode_request(payload, "JSApiStreamRemovePeerRequest") or {}
        peer = req.get("peer") or ""
        if not peer:
            raise E.bad_request()
        sa = self.meta.streams.get((acc.name, stream))
        if sa is None:
            raise E.stream_not_found()
        if peer not in sa.peers:
            raise E.cluster_peer_not_member()
        remaining = tuple(p for p in sa.peers if p != peer)
        try:
            new = self._place(sa, exclude=(peer,), existing=remaining)
        except PlacementError as exc:
            reason = self._remap_reason(sa, exc)
            self._emit("jetstream_placement_failed", account=acc.name, stream=stream,
                       replicas=len(sa.peers), reason=reason)
            raise E.peer_remap(reason) from None
        added = [p for p in new if p not in remaining]
        replacement = added[0] if added else None
        if replacement is None:
            raise E.peer_remap(self._remap_reason(sa, PlacementError()))
        self._propose_meta(encode_replace_stream_peer(acc.name, stream, peer, replacement),
                           acc.name, reply, rtype)
        self._meta_replies[("peer-remove", acc.name, stream)] = (reply, rtype)
        self._emit("jetstream_peer_removed", account=acc.name, stream=stream, group=sa.group,
                   peer=peer, replacement=replacement)
        return True

    def _system_api(self, account: str, subject: str, reply: str | None, headers: bytes | None,
                    payload: bytes, hops: int) -> bool:
        """``$JS.API.META.LEADER.STEPDOWN`` and ``$JS.API.SERVER.REMOVE`` from the system
        account (nats-server jetstream_api.go jsLeaderStepDownRequest,
        jsLeaderServerRemoveRequest): answered by the meta leader."""
        if subject not in ("$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE"):
            return False
        remove = subject == "$JS.API.SERVER.REMOVE"
        rtype = E.META_SERVER_REMOVE_RESPONSE if remove else E.META_LEADER_STEPDOWN_RESPONSE
        leader = self._meta_leader()
        if leader != self.me:
            return self._forward(leader, account, subject, reply, headers, payload, hops, rtype)
        if remove:
            try:
                self._remove_server(account, reply, payload, rtype)
            except E.JSApiError as err:
                self._error(account, reply, rtype, err)
            return True
        self._out.append(StepDown(META_GROUP, "meta", account, reply, rtype))
        return True

    def _remove_server(self, account: str, reply: str | None, payload: bytes, rtype: str) -> None:
        """SERVER.REMOVE on the meta leader: take the server out of the meta group (a
        configuration change), then record it removed; once that entry is applied every
        stream it held gets a replacement replica (see :meth:`meta_change`)."""
        req = decode_request(payload, "JSApiMetaServerRemoveRequest") or {}
        name, peer_id = req.get("peer") or "", req.get("peer_id") or ""
        meta = self.view.meta_group_view()
        found = next((p for p in meta.peers
                      if (peer_id and peer_hash(p) == peer_id) or (not peer_id and p == name)), None)
        if found is None:
            raise E.cluster_server_not_member()
        if found == self.me:
            raise E.cluster_member_change_inflight()   # step down first, as nats-server
        self._out.append(RemoveServer(found, encode_remove_server(found), account, reply, rtype))

    def _answer_repeated_create(self, sa: StreamAssignment) -> None:
        """On the meta leader: answer a STREAM.CREATE whose assignment was applied after
        another of the same name (proposed while the first was in flight): as a create of
        an existing stream, its info from its leader when the config is the one assigned,
        else 10058."""
        if self._meta_leader() != self.me:
            return
        current = self.meta.streams.get((sa.account, sa.name))
        acc = self.accounts.get(sa.account)
        if current is None or acc is None:
            return
        if current.config != sa.config:
            self._error(sa.account, sa.reply, E.STREAM_CREATE_RESPONSE, E.stream_name_exist())
            return
        group = self.view.group(current.key)
        target = group.leader if group is not None and group.leader else self._reachable(current.peers)
        if target == self.me:
            self._answer_existing(acc, sa.name, sa.reply)
            return
        self._forward(target, sa.account, f"{API_PREFIX}STREAM.CREATE.{sa.name}", sa.reply, None,
                      json.dumps(sa.config).encode(), 0, E.STREAM_CREATE_RESPONSE, via_meta=True)

    def _answer_existing(self, acc: JetStreamAccount, stream: str, reply: str | None) -> None:
        """STREAM.CREATE of a stream that exists with the same config: its info, without
        ``did_create`` (what a nats-server cluster answers)."""
        entry = acc.streams.get(stream)
        if entry is None:
            self._error(acc.name, reply, E.STREAM_CREATE_RESPONSE, E.cluster_not_available())
            return
        self._respond(acc.name, reply, {"type": E.STREAM_CREATE_RESPONSE,
                                        **acc.stream_info(entry, self._now)})
