"""Atomic batch publish for one account (jetstream/batch.py): a message carrying
``Nats-Batch-Id`` is staged on the stream's leader (:meth:`AtomicPublish.stage_atomic`),
and a committed batch is checked whole and stored whole (:meth:`AtomicPublish.apply_batch`:
on a single server at once, in a cluster when its one RAFT entry is applied on each
replica). nats-server server/stream.go processJetStreamAtomicBatchMsg.

A batch abandoned as nats-server advises it (jetstream/batch.py) gets the
``$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>`` advisory in the account and, with
``account`` set, in the system account (nats-server sendStreamBatchAbandonedAdvisory): at
once for the message that abandoned it, and for one that timed out when the server's timers
call :func:`timed_out_advisories` (the stream's leader's own timer: the staging is there
only, never replicated).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jetraft import gofmt
from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream.api.core import AccountCore, Reply, StreamEntry
from jetraft.jetstream.batch import AtomicBatches, Committed, Msg, batch_id, check_batch
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.requests import json_bytes, pub_ack_bytes


#: Timed-out batches advised per call of :func:`timed_out_advisories` (the rest wait for the next).
TIMED_OUT_PER_PASS = 100


class BatchBroken(RuntimeError):
    """A message of a batch that passed :func:`~jetraft.jetstream.batch.check_batch` was
    refused after earlier ones were stored: a fault of the stream, never answered as a
    success."""


def _refused(reply: str | None, stream: str, err: JSApiError) -> list[Reply]:
    if not reply:
        return []
    body = {"error": err.to_json(), "stream": stream, "seq": 0}
    return [Reply(Outbound(reply, None, None, json_bytes(body)))]


def batch_pub_ack(ack: dict, batch: str, count: int) -> bytes:
    """The PubAck of a committed batch: its last message's, then ``"batch"`` and ``"count"``
    (nats-server: ``,"batch":%q,"count":%d}`` after the sequence; a counter's ``val`` is not
    sent)."""
    ack = {k: v for k, v in ack.items() if k != "val"}
    return pub_ack_bytes(ack)[:-1] + f',"batch":{gofmt.quote(batch)},"count":{count}}}'.encode()


class AtomicPublish(AccountCore):
    """Staging and committing atomic batches (see the module docstring)."""

    def stage_atomic(self, entry: StreamEntry, subject: str, reply: str | None, headers: bytes,
                     data: bytes, now_ns: int) -> tuple[list[Reply], Committed | None, str | None]:
        """Stage one message with a ``Nats-Batch-Id`` on ``entry``'s stream (this server
        leads it). Returns ``(replies, committed, reply)``: what to send now (a refusal, or
        the empty message that acknowledges a staged message), the batch when this message
        committed it (to store: :meth:`apply_batch`, or propose), and the reply its PubAck
        goes to (None on a ``no_ack`` stream). The account's byte limits are the caller's
        (:meth:`publish_limit_refusal`), before this (nats-server checks the stream's seal,
        the account's limits, ``max_msg_size``, then the batch)."""
        cfg = entry.stream.config
        if cfg.no_ack:
            reply = None
        if cfg.sealed:
            return _refused(reply, cfg.name, E.stream_sealed()), None, reply
        hlen = len(headers)
        if cfg.max_msg_size >= 0 and (hlen > cfg.max_msg_size or len(data) > cfg.max_msg_size - hlen):
            return _refused(reply, cfg.name, E.message_exceeds_maximum()), None, reply
        staging = self.batches.stage((self.name, entry.name), entry, cfg, subject, headers, data, now_ns)
        if staging.error is not None:
            advised = (self.batch_advisories(cfg.name, batch_id(headers), staging.abandoned, now_ns)
                       if staging.abandoned is not None else [])
            return advised + _refused(reply, cfg.name, staging.error), None, reply
        if staging.committed is None:
            # staged: an empty message tells the publisher to go on (nats-server flow control)
            return ([Reply(Outbound(reply, None, None, b""))] if reply else []), None, reply
        return [], staging.committed, reply

    def batch_advisories(self, stream: str, batch: str, reason: str, now_ns: int) -> list[Reply]:
        """The batch abandoned advisory of ``batch`` of ``stream`` (see the module docstring):
        in this account unless it is the system account, and with ``account`` set in the
        system account, each when a subscription there listens. Fault isolation: one that
        fails is reported (``advisory_failed``) and left out."""
        out: list[Reply] = []
        subject = f"{adv.ADVISORY_PREFIX}STREAM.BATCH_ABANDONED.{stream}"
        system = self.system_account
        try:
            if self.name != system and self._listening(subject):
                out.append(Reply(adv.stream_batch_abandoned(stream, batch, reason, now_ns, domain=self.domain)))
            if system and self.system_interest is not None and self.system_interest(subject):
                out.append(Reply(adv.stream_batch_abandoned(stream, batch, reason, now_ns, account=self.name,
                                                            domain=self.domain), account=system))
        except Exception as exc:  # noqa: BLE001 - an advisory never breaks the publish
            self.events.emit("advisory_failed", account=self.name, advisory="stream_batch_abandoned",
                             error=repr(exc))
        return out

    def batch_timed_out(self, owner: Any, stream: str, batch: str, reason: str, now_ns: int) -> list[Reply]:
        """:meth:`batch_advisories` of a batch that timed out, staged for stream entry
        ``owner``: none when that stream is gone, was created again or no longer allows
        atomic publish (nats-server drops such batches with the stream, without one)."""
        entry = self.streams.get(stream)
        if entry is None or entry is not owner or not entry.stream.config.allow_atomic:
            return []
        return self.batch_advisories(stream, batch, reason, now_ns)

    def publish_atomic(self, entry: StreamEntry, subject: str, reply: str | None, headers: bytes,
                       data: bytes, now_ns: int) -> list[Reply]:
        """A single server's publish of a message with a ``Nats-Batch-Id``: staged, and the
        batch stored when this message commits it (see :meth:`stage_atomic`,
        :meth:`apply_batch`)."""
        refusal = self.publish_limit_refusal(entry, subject, headers, data)
        if refusal is not None:
            return _refused(None if entry.stream.config.no_ack else reply, entry.name, refusal)
        out, committed, reply = self.stage_atomic(entry, subject, reply, headers, data, now_ns)
        if committed is None:
            return out
        return self.apply_batch(entry, committed.id, reply, committed.msgs, now_ns)

    def apply_batch(self, entry: StreamEntry, batch: str, reply: str | None,
                    msgs: tuple[Msg, ...] | list[Msg], now_ns: int) -> list[Reply]:
        """Store committed batch ``batch`` (``msgs``: ``(subject, headers, payload)`` in
        order) all together at ``now_ns``, or none of it: checked first as a whole
        (:func:`~jetraft.jetstream.batch.check_batch`; a refusal answers ``reply`` with its
        error). Returns what :meth:`publish` returns for a message: the republished
        messages, the PubAck (:func:`batch_pub_ack`; ``needs_sync`` for a file stream), then
        consumer deliveries. Deterministic: every replica of a clustered stream applies the
        same batch the same way."""
        stream = entry.stream
        if stream.config.no_ack:
            reply = None
        try:
            check_batch(stream, msgs, now_ns)
        except JSApiError as err:
            return _refused(reply, stream.config.name, err)
        durable = entry.directory is not None
        out: list[Reply] = []
        seqs: list[int] = []
        ack: dict = {}
        for i, (subject, headers, data) in enumerate(msgs):
            try:
                ack, republished = stream.publish_prechecked(subject, headers, data, now_ns)
            except JSApiError as err:
                if i == 0:
                    return _refused(reply, stream.config.name, err)
                raise BatchBroken(f"batch {batch!r} message {i + 1} refused after its check: "
                                  f"{err.description}") from err
            seqs.append(ack["seq"])
            if republished is not None:
                out.append(Reply(republished, needs_sync=durable))
        self.wake_links(entry.name)
        if reply:
            out.append(Reply(Outbound(reply, None, None, batch_pub_ack(ack, batch, len(msgs))),
                             needs_sync=durable))
        if stream.config.retention == "interest":
            for seq in seqs:
                if not any(c.needs_ack(seq) for c in entry.consumers.values()):
                    stream.store.remove(seq)
        out.extend(self._poll_stream(entry, now_ns, removed=stream.config.retention == "interest"))
        return out


def timed_out_advisories(batches: AtomicBatches, accounts: Mapping[str, AtomicPublish],
                         now_ns: int) -> list[tuple[str, Reply]]:
    """Abandon the batches of ``batches`` idle past their timeout at ``now_ns`` and return
    the advisories of those that timed out (here or lazily while staging), each with the
    account it is from (route it in ``reply.account`` when set): at most
    :data:`TIMED_OUT_PER_PASS` of them; :meth:`AtomicBatches.next_expiry` says when to call
    again. ``accounts``: the server's accounts by name."""
    batches.expire(now_ns, TIMED_OUT_PER_PASS)
    out: list[tuple[str, Reply]] = []
    for gone in batches.take_abandoned(TIMED_OUT_PER_PASS):
        acc = accounts.get(gone.key[0])
        if acc is not None:
            out.extend((acc.name, r) for r in acc.batch_timed_out(gone.owner, gone.key[1], gone.id,
                                                                  gone.reason, now_ns))
    return out
