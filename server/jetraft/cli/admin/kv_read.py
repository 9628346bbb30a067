"""What a Key-Value bucket holds now, read whole: the entries behind ``kv history`` and ``kv ls B``.

nats-py's ``KeyValue.history`` and ``KeyValue.keys`` subscribe an ordered push consumer and
then ask for its info to learn how much is pending. When the server has sent everything
before that info arrives and none of it has reached the callback yet, they answer "no keys"
for a key that has values (nats.py issue 842). nats.go (natscli) takes the count from the
consumer's create reply instead, before anything is delivered; so does this module: it
creates an ephemeral pull consumer, reads ``num_pending`` from the create reply (nothing is
sent before the first fetch), and fetches exactly that many messages.
"""

from __future__ import annotations

import contextlib
import uuid

import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE, KeyValue

from jetraft.cli.admin.session import Session

#: Messages a fetch asks for at most.
FETCH_BATCH = 256
#: Seconds an idle ephemeral consumer of this reader outlives a client that vanished.
INACTIVE_THRESHOLD = 30.0
#: Seconds one fetch waits for its messages.
FETCH_TIMEOUT = 5.0

#: Nats-Marker-Reason values (a server-placed delete marker, nats-server 2.11) and the
#: operation each stands for, as nats-py's watcher reads them.
MARKER_OPERATIONS = {"MaxAge": KV_PURGE, "Purge": KV_PURGE, "Remove": KV_DEL}


def operation_of(headers: dict[str, str] | None) -> str | None:
    """The KV operation of a message's headers: ``KV-Operation`` (DEL or PURGE), else the one a
    ``Nats-Marker-Reason`` stands for, else None (a PUT)."""
    if not headers:
        return None
    if KV_OP in headers:
        return headers[KV_OP]
    return MARKER_OPERATIONS.get(headers.get("Nats-Marker-Reason", ""))


async def bucket_entries(session: Session, bucket: str, key: str, *, history: bool) -> list[KeyValue.Entry]:
    """The entries of the keys matching ``key`` (wildcards allowed) in bucket ``bucket``, in
    stream order: every revision kept when ``history``, else the latest of each key. Deletes
    and purges are entries too (their ``operation`` is DEL or PURGE); entries removed after
    the count (an expiry, a purge) are not waited for beyond one fetch's timeout. Raises
    nats-py's APIError when the consumer cannot be created."""
    stream = f"KV_{bucket}"
    prefix = f"$KV.{bucket}."
    config = api.ConsumerConfig(
        name=uuid.uuid4().hex,
        deliver_policy=api.DeliverPolicy.ALL if history else api.DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=api.AckPolicy.NONE,
        filter_subject=prefix + key,
        inactive_threshold=INACTIVE_THRESHOLD,
        mem_storage=True,
        num_replicas=1,
    )
    created = await session.jsm.add_consumer(stream, config=config)
    entries: list[KeyValue.Entry] = []
    try:
        wanted = int(created.num_pending or 0)
        if wanted == 0:
            return entries
        sub = await session.js.pull_subscribe_bind(created.name, stream=stream)
        try:
            while len(entries) < wanted:
                try:
                    batch = await sub.fetch(batch=min(FETCH_BATCH, wanted - len(entries)), timeout=FETCH_TIMEOUT)
                except nats.errors.TimeoutError:
                    break       # removed since the count (an expiry, a purge): what is left was read
                for msg in batch:
                    meta = msg.metadata
                    entries.append(KeyValue.Entry(
                        bucket=bucket, key=msg.subject[len(prefix):], value=msg.data,
                        revision=meta.sequence.stream, delta=meta.num_pending, created=meta.timestamp,
                        operation=operation_of(msg.headers)))
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        return entries
    finally:
        with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
            await session.jsm.delete_consumer(stream, created.name)


async def bucket_keys(session: Session, bucket: str) -> list[str]:
    """The keys of bucket ``bucket`` whose latest entry is a value (not a delete or purge),
    sorted."""
    latest = await bucket_entries(session, bucket, ">", history=False)
    return sorted(e.key for e in latest if e.operation not in (KV_DEL, KV_PURGE))
