"""The consumer requests of the ``$JS.API``: CONSUMER.CREATE (and DURABLE.CREATE), INFO,
DELETE, NAMES and LIST, RESET, PAUSE and UNPIN, and pull requests (CONSUMER.MSG.NEXT).

As nats-server server/jetstream_api.go (jsConsumerCreateRequest, jsConsumerInfoRequest,
jsConsumerDeleteRequest, jsConsumerNamesRequest, jsConsumerListRequest,
jsConsumerUnpinRequest) and
server/consumer.go (processNextMsgRequest).
"""

from __future__ import annotations

import secrets
from typing import Any

from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft import gofmt
from jetraft.jetstream import gojson
from jetraft.jetstream.api.core import LIST_LIMIT, NAMES_LIMIT, AccountCore, Reply, StreamEntry
from jetraft.jetstream.consumer import Consumer
from jetraft.jetstream.errors import JSApiError, UnsupportedSetting
from jetraft.jetstream.model.base import _GROUP_NAME
from jetraft.jetstream.requests import decode_request, str_field
from jetraft.jetstream.model import API_LEVEL, META_SERVER_LEVEL, META_SERVER_VERSION, ConsumerConfig
from jetraft.jetstream.validate import (
    check_consumer_create,
    check_consumer_update,
    check_new_consumer,
    consumer_filters_unique,
    same_consumer_config,
    static_consumer_metadata,
)

_NAME_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def new_consumer_name() -> str:
    """A random 8-character ephemeral consumer name (nats-server createConsumerName)."""
    return "".join(secrets.choice(_NAME_CHARS) for _ in range(8))


class ConsumerRequests(AccountCore):
    """The consumer handlers of the API (see the module docstring)."""

    def consumer_create_refusal(self, subject: str, payload: bytes) -> JSApiError | None:
        """The refusal of a CONSUMER.CREATE request on ``subject`` for a setting jetraft does
        not act on (``ConsumerConfig.check_supported``), found without changing anything, or
        None (also when the request fails an earlier check: handling it answers that). A
        clustered stream's leader asks this before proposing the request."""
        try:
            self._consumer_request(subject.split("."), payload)
        except UnsupportedSetting as err:
            return err
        except JSApiError:
            return None
        return None

    def _consumer_request(self, tokens: list[str], payload: bytes, *,
                          account_limits: bool = True) -> tuple[StreamEntry, ConsumerConfig, str]:
        """CONSUMER.CREATE's checks of the request alone (:func:`check_consumer_create`): the
        stream's entry, the checked config and the action; with ``account_limits``, the
        account's ``max_ack_pending`` bounds the config and its default. Raises JSApiError."""
        sname, cfg, action = check_consumer_create(
            tokens, payload, lambda name: self._entry(name).stream.config, clustered=self.clustered,
            max_ack_pending_limit=self.limits.max_ack_pending if account_limits else 0)
        return self.streams[sname], cfg, action

    def _api_consumer_create(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        # A clustered stream applies the request its leader proposed: the leader checked the
        # account's max_ack_pending and wrote the default it gives into the request
        # (LimitChecks.consumer_request_with_limits), so the replicas, whatever their own
        # configuration says, store the same config.
        entry, cfg, action = self._consumer_request(tokens, payload, account_limits=not self.clustered)
        name = cfg.durable_name or cfg.name
        existing = entry.consumers.get(name) if name else None
        if existing is not None:
            if action == "create" and not same_consumer_config(cfg, existing.config):
                raise E.consumer_already_exists()
            if entry.stream.config.retention == "workqueue" and \
                    not consumer_filters_unique(name, cfg, self._consumer_configs(entry)):
                raise E.api_error("JSConsumerWQConsumerNotUniqueErr")
            if not same_consumer_config(cfg, existing.config):
                try:
                    check_consumer_update(existing.config, cfg)
                except ValueError as exc:
                    raise E.consumer_create(str(exc)) from None
                out = existing.update_config(cfg, now_ns)
                self._write_consumer_meta(entry, existing)
                return self._consumer_info(existing, now_ns), [Reply(m) for m in out]
            return self._consumer_info(existing, now_ns)
        if action == "update":
            raise E.consumer_does_not_exist()
        check_new_consumer(entry.stream.config, self._consumer_configs(entry), name, cfg)
        if not self.clustered:      # a clustered stream's leader checks it before proposing
            self.check_consumer_count_limit(entry, name)
        if not name:
            name = new_consumer_name()
            cfg.name = name
        elif not cfg.name:
            cfg.name = name
        consumer = Consumer(entry.stream, name, cfg, created_ns=now_ns, has_interest=self.interest)
        consumer.advisory_interest = self.advisory_interest
        consumer.account_name = self.name
        consumer.on_term(self.stream_terms.get(entry.name, 0))
        entry.consumers[name] = consumer
        self._write_consumer_meta(entry, consumer)
        self.events.emit("jetstream_consumer_created", account=self.name, stream=entry.name,
                         consumer=name, durable=bool(cfg.durable_name),
                         kind="push" if cfg.deliver_subject else "pull")
        return self._consumer_info(consumer, now_ns), (
            self.advise(adv.consumer_action, entry.name, name, "create", now_ns)
            + [Reply(m) for m in consumer.poll(now_ns)])

    @staticmethod
    def _consumer_configs(entry: StreamEntry) -> dict[str, ConsumerConfig]:
        return {name: consumer.config for name, consumer in entry.consumers.items()}

    def _consumer_info(self, consumer: Consumer, now_ns: int) -> dict[str, Any]:
        """CONSUMER.INFO/CREATE body: the info with ``_nats.ver``/``_nats.level`` added to
        the config's metadata (nats-server jetstream_versioning.go setDynamicConsumerMetadata;
        CONSUMER.LIST does not add them)."""
        info = consumer.info(now_ns)
        config = dict(info.get("config") or {})
        config["metadata"] = {**(config.get("metadata") or {}), META_SERVER_VERSION: self.server_version,
                              META_SERVER_LEVEL: str(API_LEVEL)}
        info["config"] = config
        if self.cluster_info is not None:
            # a consumer is replicated in its stream's RAFT group: the stream's cluster block
            # (nats-server ConsumerInfo.Cluster, placed after num_pending)
            cluster = self.cluster_info(consumer.stream.config.name)
            if cluster:
                items = list(info.items())
                keys = [k for k, _ in items]
                pos = keys.index("num_pending") + 1 if "num_pending" in keys else len(items)
                items.insert(pos, ("cluster", cluster))
                info = dict(items)
        return info

    def _consumer(self, sname: str, cname: str) -> tuple[StreamEntry, Consumer]:
        entry = self._entry(sname)
        consumer = entry.consumers.get(cname)
        if consumer is None:
            raise E.consumer_not_found()
        return entry, consumer

    def has_consumer(self, tokens: list[str]) -> bool:
        """Whether ``$JS.API.CONSUMER.<op>.<stream>.<consumer>`` (split) names a consumer here."""
        entry = self.streams.get(tokens[4]) if len(tokens) == 6 else None
        return entry is not None and tokens[5] in entry.consumers

    def _api_consumer_reset(self, tokens: list[str], payload: bytes,
                            now_ns: int) -> tuple[dict[str, Any], list[Reply]]:
        """``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` with ``{"seq": n}`` or nothing
        (nats-server 2.14 processResetReq): the consumer's info and ``reset_seq``. Raises
        10025 for a body that is not JSON (json.Unmarshal's words), 10204 "invalid reset:
        ..." for a sequence its deliver policy does not allow. Also returns what the
        consumer then sends."""
        entry, consumer = self._consumer(tokens[4], tokens[5])
        seq = 0
        if payload:
            try:
                req = gojson.merge_objects(payload) or {}
            except gojson.GoJSONError as exc:
                raise E.invalid_json(exc.unmarshal_text()) from None
            except gojson.NotAnObject as exc:
                raise E.invalid_json(f"json: cannot unmarshal {gojson.json_kind(exc.value)} into Go value "
                                     "of type server.JSApiConsumerResetRequest") from None
            raw = req.get("seq", 0)
            if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < 1 << 64):
                raise E.invalid_json(f"json: cannot unmarshal {gojson.json_kind(raw)} into Go struct field "
                                     "JSApiConsumerResetRequest.seq of type uint64")
            seq = raw or 0
        try:
            reset = consumer.reset_start(seq)
        except ValueError as exc:
            raise E.api_error("JSConsumerInvalidResetErr", err=str(exc)) from None
        out = self._apply_retention(entry, now_ns)
        out.extend(Reply(m) for m in consumer.poll(now_ns))
        body = self._consumer_info(consumer, now_ns)
        body["reset_seq"] = reset
        return body, out

    def _api_consumer_pause(self, tokens: list[str], payload: bytes,
                            now_ns: int) -> tuple[dict[str, Any], list[Reply]]:
        """``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` with ``{"pause_until": <RFC 3339>}``
        (nats-server 2.11 jsConsumerPauseRequest): the consumer's ``pause_until`` set (the
        zero time or no body resumes it), its config stored, the pause advisory sent; the
        answer ``{paused, pause_until, pause_remaining?}`` at ``now_ns``. A body that is
        not a JSON object or array is read as none. Raises 10025 for bad JSON or time,
        10059/10014 for a stream or consumer not found. Also returns what the consumer
        then sends."""
        entry, consumer = self._consumer(tokens[4], tokens[5])
        until = None
        if payload.lstrip()[:1] in (b"{", b"["):
            req = decode_request(payload, "JSApiConsumerPauseRequest") or {}
            raw = req.get("pause_until")
            if raw is not None:
                if not isinstance(raw, str):
                    raise E.invalid_json(f"json: cannot unmarshal {gojson.json_kind(raw)} into Go struct "
                                         "field JSApiConsumerPauseRequest.pause_until of type time.Time")
                try:
                    until = gofmt.parse_time(raw)
                except ValueError as exc:
                    raise E.invalid_json(str(exc)) from None
        cfg = ConsumerConfig.decode(consumer.config.to_json())
        cfg.pause_until = until
        cfg.metadata = static_consumer_metadata(cfg)
        out = [Reply(m) for m in consumer.update_config(cfg, now_ns)]
        self._write_consumer_meta(entry, consumer)
        paused = until is not None and now_ns < until
        body: dict[str, Any] = {"paused": paused, "pause_until": gofmt.format_time(until)}
        if paused:
            body["pause_remaining"] = until - now_ns
        return body, out

    def _api_consumer_unpin(self, tokens: list[str], payload: bytes,
                            now_ns: int) -> tuple[dict[str, Any], list[Reply]]:
        """``$JS.API.CONSUMER.UNPIN.<stream>.<consumer>`` with ``{"group": "<name>"}``
        (nats-server 2.11 jsConsumerUnpinRequest): the consumer's pin ends and the unpinned
        advisory (reason ``admin``) goes out; the answer is the bare response type. Raises,
        in nats-server's order, 10025 for a body that is not JSON (``json.Unmarshal``'s
        words) or names no group (``consumer group not specified``), 10162 for an invalid
        group name, 10059/10014 for a stream or consumer not found (first, in a cluster, as
        nats-server's clustered servers check them first), 10160 for a group the consumer
        does not have. Also returns what the consumer then sends."""
        if self.clustered:
            self._consumer(tokens[4], tokens[5])
        try:
            req = gojson.unmarshal(payload)
        except gojson.GoJSONError as exc:
            raise E.invalid_json(exc.unmarshal_text()) from None
        if req is not None and not isinstance(req, dict):
            raise E.invalid_json(f"json: cannot unmarshal {gojson.json_kind(req)} into Go value "
                                 "of type server.JSApiConsumerUnpinRequest")
        group = str_field(req or {}, "group", "JSApiConsumerUnpinRequest")
        if not group:
            raise E.invalid_json("consumer group not specified")
        if not _GROUP_NAME.match(group):
            raise E.api_error("JSConsumerInvalidGroupNameErr")
        _entry, consumer = self._consumer(tokens[4], tokens[5])
        if group not in consumer.config.priority_groups:
            raise E.api_error("JSConsumerInvalidPriorityGroupErr")
        return {}, [Reply(m) for m in consumer.unpin(group, now_ns)]

    def stream_term(self, stream: str, term: int) -> None:
        """The clustered stream ``stream`` applies an entry of a RAFT term later than any
        before: its consumers' pins of earlier terms end (see
        :meth:`~jetraft.jetstream.consumer_priority._Priority.on_term`)."""
        self.stream_terms[stream] = term
        entry = self.streams.get(stream)
        for consumer in entry.consumers.values() if entry is not None else ():
            consumer.on_term(term)

    def _api_consumer_info(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        if payload.strip():
            raise E.not_empty_request()
        _entry, consumer = self._consumer(tokens[4], tokens[5])
        return self._consumer_info(consumer, now_ns)

    def _api_consumer_delete(self, tokens: list[str], payload: bytes, now_ns: int):
        if payload.strip():
            raise E.not_empty_request()
        entry, _consumer = self._consumer(tokens[4], tokens[5])
        out = self._delete_consumer(entry, tokens[5], "deleted by request")
        return {"success": True}, ([Reply(m) for m in out]
                                   + self.advise(adv.consumer_action, entry.name, tokens[5], "delete", now_ns))

    def _api_consumer_names(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiConsumersRequest", tokens[4], NAMES_LIMIT)
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "consumers": page}

    def _api_consumer_list(self, tokens: list[str], payload: bytes, now_ns: int) -> dict[str, Any]:
        names, offset, page = self._page(payload, "JSApiConsumersRequest", tokens[4], LIST_LIMIT)
        consumers = self.streams[tokens[4]].consumers
        infos = [consumers[n].info(now_ns) for n in page]
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "consumers": infos}

    def _msg_next(self, sname: str, cname: str, reply: str | None, payload: bytes,
                  now_ns: int) -> list[Reply] | None:
        """A pull request (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``); None for an
        unknown consumer (nats-server has no subscription for it: no responders)."""
        entry = self.streams.get(sname)
        consumer = entry.consumers.get(cname) if entry else None
        if consumer is None:
            return None
        if not reply:
            return []
        return [Reply(m) for m in consumer.request_next(reply, payload, now_ns)]
