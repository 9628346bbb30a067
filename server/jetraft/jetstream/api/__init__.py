"""One account's JetStream: its streams and consumers, the ``$JS.API`` and the ack subjects.

:class:`JetStreamAccount` is sans-IO apart from its files: every entry point takes the time
as ``now_ns`` (ns since the epoch) and returns the :class:`~jetraft.jetstream.outbound.Outbound`
messages the server must route (API responses, PubAcks, consumer deliveries). It never
fsyncs a message itself: a PubAck for a file-backed stream is returned with
``needs_sync=True`` and the caller (``net/jetstream/service.py``) sends it only after its group
commit has made the message durable.

Subjects served (nats-server ``server/jetstream_api.go``, ``server/stream.go``):

- ``$JS.API.INFO``; ``$JS.API.STREAM.CREATE|UPDATE|INFO|DELETE|PURGE.<stream>``,
  ``$JS.API.STREAM.NAMES``, ``$JS.API.STREAM.LIST``, ``$JS.API.STREAM.MSG.GET|DELETE.<stream>``;
- ``$JS.API.DIRECT.GET.<stream>[.<subject>]`` (streams with ``allow_direct``);
- ``$JS.API.CONSUMER.CREATE.<stream>[.<consumer>[.<filter>]]``,
  ``$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>``,
  ``$JS.API.CONSUMER.INFO|DELETE.<stream>.<consumer>``, ``$JS.API.CONSUMER.NAMES|LIST.<stream>``,
  ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``;
- ``$JS.ACK.<stream>.<consumer>...`` acks and ``$JS.FC.<stream>.<consumer>...`` flow control.

Every response carries nats-server's ``type`` string and, on failure, an ``error`` object
with exactly ``code``, ``err_code`` and ``description``.

Files: nats-server's layout, JSON instead of its binary meta files
(:mod:`jetraft.jetstream.layout`). A meta file that cannot be read is reported
(``jetstream_recovery_problem``) and its stream or consumer left on disk, untouched, for
the operator; it is never deleted.

The account is one class made of its parts, each a module of this package over the shared
state of :class:`~jetraft.jetstream.api.core.AccountCore` (:mod:`.core`): :mod:`.account`
(:class:`JetStreamAccount`: recovery, publishes, acks, flow control and consumers' timers),
:mod:`.dispatch` (the API's subjects, answers, counters and audits), :mod:`.streams` and
:mod:`.consumers` (their requests), :mod:`.replicas` (one replica of a clustered stream),
:mod:`.restores` (stream snapshots and restores) and :mod:`.limits` (the account's limits).
"""

from jetraft.jetstream.api.account import JetStreamAccount
from jetraft.jetstream.api.consumers import new_consumer_name
from jetraft.jetstream.api.core import (
    ACK_PREFIX,
    API_PREFIX,
    FC_PREFIX,
    LIST_LIMIT,
    NAMES_LIMIT,
    SUBJECTS_LIMIT,
    Reply,
    StreamEntry,
)
from jetraft.jetstream.api.dispatch import is_api_subject

__all__ = [
    "ACK_PREFIX", "API_PREFIX", "FC_PREFIX", "LIST_LIMIT", "NAMES_LIMIT", "SUBJECTS_LIMIT",
    "JetStreamAccount", "Reply", "StreamEntry", "is_api_subject", "new_consumer_name",
]
