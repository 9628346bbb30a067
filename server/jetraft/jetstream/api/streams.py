"""The stream requests of the ``$JS.API``: STREAM.CREATE, UPDATE, INFO, DELETE, PURGE, NAMES
and LIST, STREAM.MSG.GET and MSG.DELETE, and DIRECT.GET (streams with ``allow_direct``).

As nats-server server/jetstream_api.go (jsStreamCreateRequest, jsStreamUpdateRequest,
jsStreamInfoRequest, jsStreamDeleteRequest, jsStreamPurgeRequest, jsStreamNamesRequest,
jsStreamListRequest, jsMsgGetRequest, jsMsgDeleteRequest) and server/stream.go
(processDirectGetRequest, processDirectGetLastBySubjectRequest).
"""

from __future__ import annotations

from typing import Any

from jetraft import gofmt
from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.api.core import LIST_LIMIT, NAMES_LIMIT, SUBJECTS_LIMIT, AccountCore, Reply
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.requests import (
    DirectGetRefused,
    decode_fields,
    decode_request,
    direct_get_request,
    int_field,
    msg_get_request,
    str_field,
)
from jetraft.jetstream.store import CorruptMessage, MessageNotFound
from jetraft.jetstream.validate import check_stream_create, check_stream_update
from jetraft.protocol.client import status_headers
from jetraft.protocol.headers import append_lines


class StreamRequests(AccountCore):
    """The stream handlers of the API (see the module docstring)."""

    def _api_stream_create(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        cfg, exists = check_stream_create(payload, tokens[4], self._capture, existing=self._config_json,
                                          clustered=self.clustered, unloaded=self.unloaded)
        if not self.clustered:      # a cluster's meta leader checks these before proposing
            self.check_stream_count_limits(cfg, sum(1 for name in self.streams if name != cfg.name))
            self.check_stream_reservation(cfg, self._stream_configs(), create=True)
            self.check_stream_bytes_limits(cfg)
        if exists:
            return {**self.stream_info(self.streams[cfg.name], now_ns), "did_create": True}
        if cfg.name in self.restoring:
            raise E.stream_name_exist()
        if cfg.storage == "file" and self.base is None:
            raise E.stream_create("jetstream has no store directory")
        entry = self._create_stream(cfg, now_ns)
        self.events.emit("jetstream_stream_created", account=self.name, stream=cfg.name,
                         subjects=list(cfg.subjects), storage=cfg.storage, retention=cfg.retention)
        return ({**self.stream_info(entry, now_ns), "did_create": True},
                self.advise(adv.stream_action, cfg.name, "create", now_ns))

    def _config_json(self, name: str) -> dict[str, Any] | None:
        entry = self.streams.get(name)
        return entry.stream.config.to_json() if entry is not None else None

    def _api_stream_update(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        entry = self.streams.get(tokens[4])
        if entry is not None:
            self._remove_capture(entry)     # the other streams' subjects are left in the index
        try:
            cfg = check_stream_update(payload, tokens[4], lambda name: self._entry(name).stream.config,
                                      self._capture, clustered=self.clustered)
            if not self.clustered:      # a cluster's meta leader checks these before proposing
                self.check_stream_bytes_limits(cfg)
                self.check_stream_consumers_limit(cfg)
                self.check_stream_reservation(cfg, self._stream_configs(), create=False)
        except Exception:
            if entry is not None:
                self._add_capture(entry)
            raise
        entry.stream.config = cfg
        for subject in cfg.subjects:
            self._capture.insert(subject, entry.name)
        if entry.directory is not None:
            layout.write_stream_meta(entry.directory, cfg, entry.stream.created_ns)
        entry.stream.enforce_limits("")  # tightened limits apply now
        self.events.emit("jetstream_stream_updated", account=self.name, stream=cfg.name)
        return self.stream_info(entry, now_ns), (self.advise(adv.stream_action, cfg.name, "modify", now_ns)
                                                 + self._poll_stream(entry, now_ns, removed=True))

    def _api_stream_info(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        req = decode_request(payload, "JSApiStreamInfoRequest") or {}
        decode_fields(req, "JSApiStreamInfoRequest",
                       {"deleted_details": "bool", "subjects_filter": "string", "offset": "int"})
        entry = self._entry(tokens[4])
        sf = str_field(req, "subjects_filter", "JSApiStreamInfoRequest") or None
        offset = max(int_field(req, "offset", "JSApiStreamInfoRequest", "int"), 0)
        # deleted: the lowest store.MAX_DELETED_DETAILS only; subjects: one sorted page of
        # SUBJECTS_LIMIT from offset (Stream.info)
        info = self.stream_info(entry, now_ns, subjects_filter=sf,
                                deleted_details=bool(req.get("deleted_details")),
                                subjects_offset=offset, subjects_limit=SUBJECTS_LIMIT)
        # nats-server adds paging fields (set with subjects_filter when a subject matches,
        # else 0) and, even on a single server, cluster.leader (its own name).
        out = {key: info.pop(key, 0) for key in ("total", "offset", "limit")}
        info.pop("cluster", None)
        out.update(info)
        cluster = {"leader": self.server_name} if self.server_name else None
        if self.cluster_info is not None:
            cluster = self.cluster_info(entry.name) or cluster
        if cluster:
            info_keys = list(out)
            pos = info_keys.index("state") + 1 if "state" in info_keys else len(info_keys)
            items = list(out.items())
            items.insert(pos, ("cluster", cluster))
            out = dict(items)
        return out

    def _api_stream_delete(self, tokens: list[str], payload: bytes, now_ns: int):
        if payload.strip():
            raise E.not_empty_request()
        entry = self._entry(tokens[4])
        consumers = list(entry.consumers)
        out = [Reply(m) for m in self.delete_replica(entry.name)]
        self.events.emit("jetstream_stream_deleted", account=self.name, stream=entry.name)
        return {"success": True}, out + self.deleted_advisories(entry.name, consumers, now_ns)

    def deleted_advisories(self, stream: str, consumers: list[str], now_ns: int) -> list[Reply]:
        """The advisories of a stream's deletion, as nats-server sends them: a
        ``CONSUMER.DELETED`` for each consumer it still had, then ``STREAM.DELETED``."""
        out: list[Reply] = []
        for cname in consumers:
            out.extend(self.advise(adv.consumer_action, stream, cname, "delete", now_ns))
        return out + self.advise(adv.stream_action, stream, "delete", now_ns)

    def _api_stream_purge(self, tokens: list[str], payload: bytes, now_ns: int):
        req = decode_request(payload, "JSApiStreamPurgeRequest") or {}
        decode_fields(req, "JSApiStreamPurgeRequest",
                       {"filter": "string", "seq": "uint64", "keep": "uint64"})
        entry = self._entry(tokens[4])
        body = entry.stream.purge(req)
        self.events.emit("jetstream_stream_purged", account=self.name, stream=entry.name,
                         purged=body["purged"])
        return body, self._poll_stream(entry, now_ns, removed=True)

    def _api_msg_get(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        if not payload.strip():
            self._entry(tokens[5])
            raise E.bad_request()
        req = msg_get_request(decode_request(payload, "JSApiMsgGetRequest") or {}, strict=True)
        entry = self._entry(tokens[5])
        return entry.stream.get_message(req)

    def _api_msg_delete(self, tokens: list[str], payload: bytes, now_ns: int):
        if not payload.strip():
            raise E.bad_request()
        req = decode_request(payload, "JSApiMsgDeleteRequest") or {}
        decode_fields(req, "JSApiMsgDeleteRequest", {"seq": "uint64", "no_erase": "bool"})
        seq = int_field(req, "seq", "JSApiMsgDeleteRequest")
        entry = self._entry(tokens[5])
        if seq > entry.stream.store.state().last_seq:
            err = E.stream_msg_delete_failed("stream store EOF")
            err.counted = False     # nats-server does not count this one in api.errors
            raise err
        body = entry.stream.delete_message(seq)
        return body, self._poll_stream(entry, now_ns, removed=True)

    def _api_stream_names(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiStreamNamesRequest", None, NAMES_LIMIT)
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "streams": page or None}

    def _api_stream_list(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiStreamListRequest", None, LIST_LIMIT)
        infos = [self.stream_info(self.streams[n], now_ns, dynamic=False) for n in page]
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "streams": infos}   # [] when none

    # ------------------------------------------------------------------ direct get

    def _direct_get(self, tokens: list[str], reply: str | None, payload: bytes) -> list[Reply] | None:
        """``$JS.API.DIRECT.GET.<stream>[.<subject>]`` (nats-server stream.go
        processDirectGetRequest, processDirectGetLastBySubjectRequest): the message itself
        with Nats-Stream, Nats-Subject, Nats-Sequence and Nats-Time-Stamp headers, or a
        404/408 status. The body is read as Go's ``json.Unmarshal`` reads it (unknown keys
        ignored): anything it refuses (bad JSON, nesting past the limit, a number outside
        its field's Go type) is ``408 Malformed Request``. Streams without ``allow_direct``
        do not answer (no responders)."""
        entry = self.streams.get(tokens[4])
        if entry is None or not entry.stream.config.allow_direct:
            return None
        if not reply:
            return []

        def status(code: int, text: str) -> list[Reply]:
            return [Reply(Outbound(reply, None, status_headers(code, text), b""))]

        try:
            req = direct_get_request(".".join(tokens[5:]) if len(tokens) > 5 else None, payload)
        except DirectGetRefused as refused:
            return status(408, refused.text)
        store = entry.stream.store
        seq, last_for, next_for = req.seq, req.last_for, req.next_for
        try:
            if next_for:
                sm = store.load_next(next_for, seq)
            elif seq > 0:
                sm = store.load(seq)
            else:
                sm = store.load_last(last_for)
        except (MessageNotFound, CorruptMessage):
            sm = None
        if sm is None:
            return status(404, "Message Not Found")
        extra = (f"Nats-Stream: {entry.name}\r\nNats-Subject: {sm.subject}\r\n"
                 f"Nats-Sequence: {sm.seq}\r\nNats-Time-Stamp: {gofmt.format_time(sm.ts)}\r\n")
        headers = None if req.no_hdrs else append_lines(sm.headers, extra)
        return [Reply(Outbound(reply, None, headers, sm.data))]
