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
from jetraft.jetstream.store import CorruptMessage, MessageNotFound, TooManyResults
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
                                      self._capture, clustered=self.clustered, existing=self._config_json)
            if not self.clustered:      # a cluster's meta leader checks these before proposing
                self.check_stream_bytes_limits(cfg)
                self.check_stream_consumers_limit(cfg)
                self.check_stream_reservation(cfg, self._stream_configs(), create=False)
        except Exception:
            if entry is not None:
                self._add_capture(entry)
            raise
        dropped = [] if self.clustered else self.dropped_link_consumers(entry.name, entry.stream.config, cfg)
        entry.stream.config = cfg
        for subject in cfg.subjects:
            self._capture.insert(subject, entry.name)
        if entry.directory is not None:
            layout.write_stream_meta(entry.directory, cfg, entry.stream.created_ns)
        entry.stream.enforce_limits("")  # tightened limits apply now
        self.events.emit("jetstream_stream_updated", account=self.name, stream=cfg.name)
        return self.stream_info(entry, now_ns), (self.advise(adv.stream_action, cfg.name, "modify", now_ns)
                                                 + self._poll_stream(entry, now_ns, removed=True)
                                                 + self.drop_link_consumers(dropped, now_ns))

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
        made = [] if self.clustered else self.made_link_consumers(entry.name, entry.stream.config)
        out = [Reply(m) for m in self.delete_replica(entry.name)]
        self.events.emit("jetstream_stream_deleted", account=self.name, stream=entry.name)
        out += self.deleted_advisories(entry.name, consumers, now_ns)
        return {"success": True}, out + self.drop_link_consumers(made, now_ns)

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
        """STREAM.LIST: a page of stream infos; an offline stream (:attr:`unloaded`) is
        listed by name in ``missing`` and with its reason in ``offline`` instead
        (nats-server jsStreamListRequest)."""
        names, offset, page = self._page(payload, "JSApiStreamListRequest", None, LIST_LIMIT)
        infos = [self.stream_info(self.streams[n], now_ns, dynamic=False) for n in page if n in self.streams]
        out: dict[str, Any] = {"total": len(names), "offset": offset, "limit": LIST_LIMIT,
                               "streams": infos}   # [] when none
        missing = [n for n in page if n not in self.streams]
        if missing:
            out["missing"] = missing
            out["offline"] = {n: self.unloaded[n] for n in missing}
        return out

    # ------------------------------------------------------------------ direct get

    def _direct_get(self, tokens: list[str], reply: str | None, payload: bytes) -> list[Reply] | None:
        """``$JS.API.DIRECT.GET.<stream>[.<subject>]`` (nats-server stream.go
        processDirectGetRequest, processDirectGetLastBySubjectRequest, getDirectRequest,
        getDirectMulti): the message itself with Nats-Stream, Nats-Subject, Nats-Sequence and
        Nats-Time-Stamp headers, or a 404/408 status. A batch or multi-last get answers
        each message with Nats-Num-Pending and Nats-Last-Sequence too, then ``204 EOB``
        (with Nats-Num-Pending, Nats-Last-Sequence and, for multi-last, Nats-UpTo-Sequence).
        The body is read as Go's ``json.Unmarshal`` reads it (unknown keys ignored): anything
        it refuses is ``408 Malformed Request``. Streams without ``allow_direct`` do not
        answer (no responders), unless a caught-up mirror with ``mirror_direct`` answers
        for one that is not on this server (as itself: Nats-Stream names the mirror). One
        request sends at most DIRECT_GET_MAX_BYTES and
        DIRECT_GET_MAX_MSGS of messages (at least one); its EOB's Nats-Num-Pending says what
        is left, and the client asks again from there."""
        entry = self.streams.get(tokens[4])
        cfg = entry.stream.config if entry is not None else None
        # in a cluster the routing lets through only the direct gets a stream answers: its
        # own (allow_direct) and, on a mirror's leader, its origin's (mirror_direct)
        if cfg is None or not (cfg.allow_direct or (self.clustered and cfg.mirror_direct)):
            # a caught-up mirror with mirror_direct answers for an origin not here
            mirror = None if self.clustered else self.direct_mirror(tokens[4])
            if mirror is None:
                return None
            entry = self.streams[mirror]
        if not reply:
            return []
        try:
            req = direct_get_request(".".join(tokens[5:]) if len(tokens) > 5 else None, payload)
        except DirectGetRefused as refused:
            return [_status(reply, 408, refused.text)]
        budget = DIRECT_GET_MAX_BYTES if req.max_bytes == 0 else min(req.max_bytes, DIRECT_GET_MAX_BYTES)
        if req.multi_last:
            return _direct_multi(entry, req, reply, budget)
        return _direct_batch(entry, req, reply, budget)


#: The most message bytes one DIRECT.GET request sends (subject, headers and payload of
#: each, as nats-server counts them against ``max_bytes``): a client asks again from its
#: EOB for the rest (nats-server's default is the server's max_pending, 64 MiB).
DIRECT_GET_MAX_BYTES = 8 << 20
#: The most messages one DIRECT.GET request sends, so that one request's work on the event
#: loop is bounded whatever its ``batch`` (nats-server has no such bound).
DIRECT_GET_MAX_MSGS = 4096
#: The most subjects a multi-last get answers (nats-server stream.go getDirectMulti).
MULTI_LAST_MAX = 1024


def _status(reply: str, code: int, text: str, extra: str = "") -> Reply:
    headers = status_headers(code, text) if not extra else (
        f"NATS/1.0 {code} {text}\r\n{extra}\r\n".encode())
    return Reply(Outbound(reply, None, headers, b""))


def _sent(entry, reply: str, sm, lines: str, no_hdrs: bool) -> Reply:
    """One message of a DIRECT.GET answer: the stored headers (unless ``no_hdrs``) followed
    by the stream's lines for it and ``lines``."""
    extra = (f"Nats-Stream: {entry.name}\r\nNats-Subject: {sm.subject}\r\n"
             f"Nats-Sequence: {sm.seq}\r\nNats-Time-Stamp: {gofmt.format_time(sm.ts)}\r\n{lines}")
    headers = None if no_hdrs else append_lines(sm.headers, extra)
    return Reply(Outbound(reply, None, headers, sm.data))


def _size(sm) -> int:
    return len(sm.subject) + len(sm.headers or b"") + len(sm.data)


def _direct_batch(entry, req, reply: str, budget: int) -> list[Reply]:
    """One message, or a batch of them (nats-server getDirectRequest)."""
    store = entry.stream.store
    seq = store.seq_from_time(req.start_time) if req.start_time is not None else req.seq
    is_batch = req.batch > 0
    pending = valid_through = 0
    if is_batch:
        valid_through = store.state().last_seq
        pending = store.num_pending((req.next_for,) if req.next_for else (), max(seq, 1), valid_through)
    out: list[Reply] = []
    last = sent_bytes = 0
    for i in range(min(max(req.batch, 1), DIRECT_GET_MAX_MSGS)):
        try:
            if seq > 0 and not req.next_for:
                sm = store.load(seq) if i == 0 and not is_batch else store.load_next(">", seq)
            elif req.next_for:
                sm = store.load_next(req.next_for, seq)
            else:
                sm = store.load_last(req.last_for)
        except (MessageNotFound, CorruptMessage):
            sm = None
        if sm is None:
            if req.batch > 1 and i > 0:
                break
            return [_status(reply, 404, "Message Not Found")]
        if seq > 0 or req.next_for:
            seq = sm.seq + 1
        lines = ""
        if is_batch:
            pending = max(pending - 1, 0)
            lines = f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n"
        out.append(_sent(entry, reply, sm, lines, req.no_hdrs))
        last = sm.seq
        sent_bytes += _size(sm)
        if sent_bytes >= budget:
            break
    if is_batch:
        end = store.state().last_seq
        if end > valid_through:
            pending = store.num_pending((req.next_for,) if req.next_for else (), max(seq, 1), end)
        out.append(_status(reply, 204, "EOB", f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n"))
    return out


def _direct_multi(entry, req, reply: str, budget: int) -> list[Reply]:
    """The last message of each subject of ``req.multi_last`` (nats-server getDirectMulti)."""
    store = entry.stream.store
    st = store.state()
    up_to = req.up_to_seq
    if req.up_to_time is not None:
        up_to = store.seq_from_time(req.up_to_time)
        if up_to <= st.first_seq:
            return [_status(reply, 404, "No Results")]
        up_to -= 1
    if up_to == 0:
        up_to = st.last_seq
    try:
        seqs = store.multi_last_seqs(req.multi_last, up_to, MULTI_LAST_MAX)
    except TooManyResults:
        return [_status(reply, 413, "Too Many Results")]
    if not seqs:
        return [_status(reply, 404, "No Results")]
    out: list[Reply] = []
    pending, last, sent_bytes, sent = len(seqs), 0, 0, 0
    for seq in seqs:
        pending = max(pending - 1, 0)
        if seq < req.seq:
            continue
        try:
            sm = store.load(seq)
        except (MessageNotFound, CorruptMessage):
            return [_status(reply, 404, "Message Not Found")]
        out.append(_sent(entry, reply, sm, f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n", False))
        last = seq
        sent_bytes += _size(sm)
        sent += 1
        if sent_bytes >= budget or sent >= DIRECT_GET_MAX_MSGS or (req.batch > 0 and sent >= req.batch):
            break
    out.append(_status(reply, 204, "EOB", f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n"
                                           f"Nats-UpTo-Sequence: {up_to}\r\n"))
    return out
