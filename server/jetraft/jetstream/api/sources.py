"""The account's mirrors and sources (jetstream/sourcing.py): each sourcing stream's links,
what they fetch, and storing what the origins answer.

A link runs where the stream is led: on a single server always; in a cluster on the
stream's leader, which proposes each answer to the stream's RAFT group so that every
replica stores it (:meth:`SourceLinks.apply_sourced`). What a link shows in STREAM.INFO
(``mirror``, ``sources``: lag, active, error) is the leader's.
"""

from __future__ import annotations

from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.api.core import AccountCore, Reply, StreamEntry
from jetraft.jetstream.requests import json_bytes
from jetraft.jetstream.sourcing import (
    FETCH_TIMEOUT_NS,
    LINK_REPLY,
    IDLE_POLL_NS,
    FetchAnswer,
    FetchRequest,
    LinkStep,
    SourceLink,
    answer_fetch,
    link_consumer,
    origin_answer,
    specs_of,
)

#: A mirror answers its origin's direct gets once it lags fewer messages than this
#: (nats-server dgetCaughtUpThresh).
DIRECT_CAUGHT_UP = 10
#: The err_code a durable fetch sent to one of the origin's servers that does not lead
#: it is answered with (10009, JSClusterNotLeaderErr): the link asks another at once.
NOT_LEADER = 10009


class SourceLinks(AccountCore):
    """The links of the account's sourcing streams (see the module docstring)."""

    def links(self, entry: StreamEntry) -> dict[str, SourceLink]:
        """The stream's links by index name, made again (keeping the state of those whose
        index name stays) when its config changed."""
        cfg = entry.stream.config
        if entry.links_for is not cfg:
            old = entry.links
            entry.links = {}
            specs = specs_of(cfg)
            for spec in specs:
                link = old.get(spec.iname)
                if link is None or link.spec != spec:
                    link = SourceLink(spec)
                link.consumer, link.named = link_consumer(entry.name, self.name, spec, specs, self.domain)
                link.asker = entry.name
                entry.links[spec.iname] = link
                self.sourced_by.setdefault(spec.name, set()).add(entry.name)
            entry.links_for = cfg
        return entry.links

    def start_link(self, entry: StreamEntry, link: SourceLink) -> None:
        """Where a link starts asking (nats-server setupMirrorConsumer,
        startingSequenceForSources, trySetupSourceConsumer): a mirror after its last
        sequence; a source after the last message stored from it; else from its
        ``opt_start_seq``, its ``opt_start_time`` (not before the stream's last message),
        or, in a stream that no longer starts at 1, the time of its last message."""
        stream = entry.stream
        link.started = True
        if link.spec.mirror:
            link.next_seq = stream.last_seq + 1 if stream.last_seq else 0
            return
        pos = stream.source_positions().get(link.spec.iname)
        if pos:
            link.next_seq, link.ident = pos[0] + 1, pos[1]
            return
        spec, st = link.spec, stream.store.state()
        if spec.start_seq:
            return
        last_ts = st.last_ts if st.last_seq else 0
        if spec.start_time is not None:
            link.start_time = max(spec.start_time, last_ts)
        elif st.first_seq > 1 and last_ts:
            link.start_time = last_ts

    def fetches_due(self, entry: StreamEntry, now_ns: int) -> list[tuple[SourceLink, FetchRequest]]:
        """The fetches the stream's links are due to make now (each marked in flight, sent
        at ``now_ns``); one in flight for FETCH_TIMEOUT_NS is given up and made again."""
        out = []
        for link in self.links(entry).values():
            if link.in_flight and now_ns - link.sent_ns >= FETCH_TIMEOUT_NS:
                link.in_flight = False
                link.peer += 1                  # ask another of the origin's servers
                link.error = E.api_error("JSSourceConsumerSetupFailedErrF" if not link.spec.mirror
                                         else "JSMirrorConsumerSetupFailedErrF",
                                         err="origin did not answer").to_json()
            if link.in_flight or link.due_ns > now_ns:
                continue
            link.sent_ns = now_ns
            if not link.started:
                self.start_link(entry, link)
            link.in_flight = True
            out.append((link, link.request()))
        return out

    def sources_deadline(self, entry: StreamEntry) -> int | None:
        """The earliest ns at which one of the stream's links is due, or None."""
        due = [link.due_ns for link in self.links(entry).values() if not link.in_flight]
        return min(due) if due else None

    def origin_fetch(self, req: FetchRequest) -> tuple[FetchAnswer, dict[str, Any] | None, LinkStep | None]:
        """The origin's side of a fetch of one of the account's streams, changing nothing:
        ``(answer, create, step)`` (jetstream/sourcing.py :func:`origin_answer`)."""
        entry = self.streams.get(req.origin)
        if entry is None:
            return answer_fetch(None, req), None, None
        return origin_answer(entry.stream, entry.consumers, req, entry.stream.created_ns, self.name)

    def answer_fetch(self, req: FetchRequest, now_ns: int) -> tuple[FetchAnswer, list[Reply]]:
        """A single server's answer to a fetch of one of the account's streams, a durable
        link's consumer made and moved at once; returns the answer and what the origin's
        changes send (advisories, deliveries)."""
        answer, create, step = self.origin_fetch(req)
        out: list[Reply] = []
        if create is not None:
            subject, payload = self.link_consumer_request(req.origin, create)
            out.extend(self.link_api(subject, LINK_REPLY, payload, now_ns))
        if step is not None:
            out.extend(self.apply_link_step(req.origin, step, now_ns))
        return answer, out

    def direct_mirror(self, origin: str, runs_links: Any = None) -> str | None:
        """A stream of this account that answers ``origin``'s direct gets (nats-server
        subscribeToMirrorDirect): a mirror of it with ``mirror_direct`` whose link once
        lagged fewer than DIRECT_CAUGHT_UP messages (and goes on answering, the origin
        deleted or not, as nats-server's subscription stays); only among
        those ``runs_links(name)`` says this server runs the links of (every one on a single
        server). None when there is none."""
        for name in sorted(self.sourced_by.get(origin, ())):
            entry = self.streams.get(name)
            cfg = entry.stream.config if entry is not None else None
            if cfg is None or not cfg.mirror_direct or cfg.mirror is None or \
                    (runs_links is not None and not runs_links(name)):
                continue
            link = next(iter(self.links(entry).values()), None)
            if link is not None and link.spec.name == origin and link.caught_up:
                return name
        return None

    def made_link_consumers(self, name: str, config: Any) -> list[tuple[str, str]]:
        """``(origin, consumer)`` of the link consumers stream ``name`` (``config``: its
        StreamConfig) has jetraft make (those no ``consumer`` block names): deleted with the
        stream, as nats-server's tryDeleteMirrorConsumer and tryDeleteSourceConsumer do."""
        specs = specs_of(config)
        out = []
        for spec in specs:
            cname, named = link_consumer(name, self.name, spec, specs, self.domain)
            if not named:
                out.append((spec.name, cname))
        return out

    def dropped_link_consumers(self, name: str, old: Any, new: Any) -> list[tuple[str, str]]:
        """The link consumers (:meth:`made_link_consumers`) stream ``name`` had with config
        ``old`` and no longer has with ``new``: a source or mirror an update removed or
        changed, whose consumer nats-server deletes (tryDeleteSourceConsumer)."""
        keep = set(self.made_link_consumers(name, new))
        return [m for m in self.made_link_consumers(name, old) if m not in keep]

    def drop_link_consumers(self, made: list[tuple[str, str]], now_ns: int) -> list[Reply]:
        """A single server's deletion of a deleted stream's link consumers (``made``, from
        :meth:`made_link_consumers`) that exist; returns the advisories it sends."""
        out: list[Reply] = []
        for origin, cname in made:
            entry = self.streams.get(origin)
            if entry is not None and cname in entry.consumers:
                out.extend(self.link_api(f"$JS.API.CONSUMER.DELETE.{origin}.{cname}", LINK_REPLY,
                                         b"", now_ns))
        return out

    def link_api(self, subject: str, reply: str | None, payload: bytes, now_ns: int) -> list[Reply]:
        """An API request applied; the answer to a request made for a link's consumer
        (reply :data:`LINK_REPLY`) is dropped, its advisories are kept."""
        out = self.handle_api(subject, reply, None, payload, now_ns) or []
        return [r for r in out if r.out.subject != LINK_REPLY] if reply == LINK_REPLY else out

    @staticmethod
    def link_consumer_request(origin: str, config: dict[str, Any]) -> tuple[str, bytes]:
        """The CONSUMER.CREATE request (subject, payload) that makes a durable link's consumer."""
        subject = f"$JS.API.CONSUMER.DURABLE.CREATE.{origin}.{config['durable_name']}"
        return subject, json_bytes({"stream_name": origin, "config": config})

    def apply_link_step(self, origin: str, step: LinkStep, now_ns: int) -> list[Reply]:
        """A durable link's acks and deliveries on its consumer of ``origin`` (every replica
        of a clustered origin, the ``"L"`` log entry): the acknowledged messages leave a
        workqueue or interest origin. A consumer or stream gone meanwhile takes nothing."""
        entry = self.streams.get(origin)
        consumer = entry.consumers.get(step.consumer) if entry is not None else None
        if consumer is None:
            return []
        consumer.link_step(step.ack_seq, step.seqs, now_ns)
        return self._apply_retention(entry, now_ns)

    def wake_links(self, origin: str) -> None:
        """A message was stored in ``origin``: the links that fetch from it are due now
        (and :attr:`links_woken` tells the caller to run them)."""
        for name in self.sourced_by.get(origin, ()):
            entry = self.streams.get(name)
            for link in entry.links.values() if entry is not None else ():
                if link.spec.name == origin and not link.in_flight:
                    link.due_ns = 0
                    self.links_woken = True

    def fetched(self, entry: StreamEntry, link: SourceLink, answer: FetchAnswer,
                refusal: E.JSApiError | None, now_ns: int) -> None:
        """The leader's bookkeeping once an answer is stored (``refusal``: why a message of
        it was not): where to ask next (read from what the stream now holds), lag, active,
        error, and when."""
        link.in_flight = False
        if answer.error is not None:
            if answer.error.get("err_code") == NOT_LEADER:
                link.peer += 1      # a durable fetch reached a follower: the next server, now
                link.due_ns = now_ns
                return
            link.failed(answer.error, now_ns)
            return
        link.active_ns = now_ns
        stream = entry.stream
        if link.ident and answer.ident and answer.ident != link.ident and not link.spec.mirror:
            link.ident, link.next_seq, link.due_ns = answer.ident, 0, now_ns   # recreated: from its start
            return
        link.ident = answer.ident or link.ident
        if refusal is not None:
            pos = stream.source_positions().get(link.spec.iname)
            if pos:
                link.next_seq = pos[0] + 1
            link.failed(refusal, now_ns)
            return
        link.error = None
        link.start_time = None
        link.lag = answer.pending
        link.caught_up = link.caught_up or answer.pending < DIRECT_CAUGHT_UP
        if answer.msgs or answer.next_seq > link.next_seq:
            link.next_seq = answer.next_seq
        link.due_ns = now_ns if answer.pending else now_ns + IDLE_POLL_NS

    def apply_sourced(self, entry: StreamEntry, iname: str,
                      msgs: tuple[tuple[int, str, bytes | None, bytes, int], ...],
                      now_ns: int, ident: str = "") -> tuple[int, E.JSApiError | None, list[Reply]]:
        """Store what a link fetched (every replica, in log order): ``(taken, refusal,
        replies)``, the replies being consumer deliveries and republished messages. A spec
        no longer in the config (an update removed it) takes nothing."""
        link = self.links(entry).get(iname)
        if link is None or not msgs:
            return 0, None, []
        spec, stream = link.spec, entry.stream
        republished: list[Any] = []
        if spec.mirror:
            taken, refusal = stream.store_mirrored(msgs, spec), None
        else:
            taken, refusal = stream.store_sourced(msgs, spec, now_ns, ident, republished)
        durable = entry.directory is not None
        out: list[Reply] = [Reply(m, needs_sync=durable) for m in republished]
        if taken:
            self.wake_links(entry.name)
            out.extend(self._poll_stream(entry, now_ns, removed=stream.config.retention == "interest"))
        return taken, refusal, out

    def apply_fetched(self, entry: StreamEntry, iname: str, answer: FetchAnswer, now_ns: int) -> list[Reply]:
        """A fetch's answer applied (every replica of a clustered stream, the ``"S"`` log
        entry): its messages stored, then the link's bookkeeping. Returns the replies the
        leader sends."""
        _taken, refusal, out = self.apply_sourced(entry, iname, answer.msgs, now_ns, answer.ident)
        link = self.links(entry).get(iname)
        if link is not None:
            self.fetched(entry, link, answer, refusal, now_ns)
        return out

    def reset_links(self, name: str) -> None:
        """The stream's leader changed: its links start again from what its store holds."""
        entry = self.streams.get(name)
        if entry is None:
            return
        for link in self.links(entry).values():
            link.started = link.in_flight = False
            link.due_ns = 0

    def source_info(self, entry: StreamEntry, now_ns: int) -> dict[str, Any]:
        """STREAM.INFO's ``mirror`` or ``sources`` for the stream ({} for neither)."""
        links = self.links(entry)
        specs = specs_of(entry.stream.config)
        if not specs:
            return {}
        infos = [spec.info_json(links.get(spec.iname), now_ns) for spec in specs]
        return {"mirror": infos[0]} if specs[0].mirror else {"sources": infos}
