"""Explicit Spark schemas of what the validation reads (no schema inference).

- :data:`EVENT` — one line of a server's event log (jetraft.events, schema version
  :data:`jetraft.events.SCHEMA_VERSION`): the five common keys and every event field a
  check uses. Fields a line does not carry are null; fields the checks do not use are
  not read. ``_corrupt_record`` holds a line that is not a JSON object.
- :data:`LEDGER` — one publish attempt of a drill (``<drill>.ledger.jsonl``, lab/drills.py
  Attempt): times in nanoseconds since the epoch.
- :data:`DRAIN` — one message of a drill's stream as read back after healing
  (``<drill>.stream.jsonl``).
- :data:`DRILL` — one drill's summary and fault timeline (``drills.json``, lab/drills.py
  DrillResult.summary()).
- :data:`TOPOLOGY` — the inventory's view (``topology.json``, playbooks/collect_logs.yml).
- :data:`TTL_LEDGER` — one publish with a ``Nats-TTL`` of a zone drill and the gets that
  looked for it afterwards (``<drill>.ttl.jsonl``, lab/features.py TtlMessage).
- :data:`COUNTER_LEDGER` — one increment attempt (``Nats-Incr``) of a zone drill, or the
  counter's final value read back (``<drill>.counter.jsonl``, lab/features.py).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

CORRUPT = "_corrupt_record"


def _s(name: str, kind=StringType()) -> StructField:
    return StructField(name, kind, True)


EVENT = StructType([
    _s("ts"), _s("v", IntegerType()), _s("server_name"), _s("level"), _s("event"),
    # RAFT events (raft_*): the group, the node's term, its last log index, its peers,
    # the leader it knows and the server's zone (unique_tag value)
    _s("group"), _s("term", LongType()), _s("index", LongType()), _s("leader"),
    _s("peers", ArrayType(StringType())), _s("zone"), _s("to"), _s("peer"),
    # raft_peer_added / raft_peer_removed: the peer is (was) a learner
    _s("learner", BooleanType()),
    # raft_applied: the applied range, each entry's term and hash (crc32 of type + data)
    _s("first_index", LongType()), _s("last_index", LongType()),
    _s("terms", ArrayType(LongType())), _s("hashes", ArrayType(LongType())),
    # raft_replica_current / raft_replica_lagging (the leader's view of a peer)
    _s("lag", LongType()), _s("offline", BooleanType()), _s("behind_ns", LongType()),
    # raft_group_closed
    _s("deleted", BooleanType()),
    # server_starting
    _s("cluster"), _s("tags", ArrayType(StringType())), _s("server_id"),
    # jetstream_* events that name a stream (and a consumer: jetstream_consumer_assigned)
    _s("account"), _s("stream"), _s("consumer"),
    # raft_snapshot_taken / raft_log_compacted: sizes, what made the snapshot due
    _s("bytes", LongType()), _s("reason"), _s("entries", LongType()), _s("log_bytes", LongType()),
    # stream_catchup_started / stream_catchup_finished
    _s("snapshot_index", LongType()), _s("bytes_needed", LongType()), _s("last_seq", LongType()),
    _s("ok", BooleanType()), _s("chunks", LongType()), _s("duration_ns", LongType()),
    _s("sources", ArrayType(StringType())), _s("error"),
    # stream_store_damaged
    _s("file"), _s("offset", LongType()), _s("kind"), _s("detail"),
    _s(CORRUPT),
])

#: A raft_applied line, as the pass over applied entries reads it.
APPLIED = StructType([
    _s("ts"), _s("v", IntegerType()), _s("server_name"), _s("event"), _s("group"),
    _s("first_index", LongType()), _s("terms", ArrayType(LongType())),
    _s("hashes", ArrayType(LongType())), _s(CORRUPT),
])

LEDGER = StructType([
    _s("drill"), _s("msg_id"), _s("sent_ns", LongType()), _s("acked_ns", LongType()),
    _s("stream_seq", LongType()), _s("error"), _s("present", BooleanType()),
])

DRAIN = StructType([_s("drill"), _s("stream_seq", LongType()), _s("msg_id")])

DRILL = StructType([
    _s("name"), _s("stream"), _s("group"), _s("servers", ArrayType(StringType())),
    _s("fault_ns", LongType()), _s("applied_ns", LongType()), _s("repair_ns", LongType()),
    _s("healed_ns", LongType()),
    _s("attempted", LongType()), _s("acknowledged", LongType()),
    _s("seconds_without_writes", DoubleType()), _s("acked_during_outage", LongType()),
])

#: One get of a TTL'd message by its stream sequence: ``ns`` when it was sent, ``answered_ns``
#: when answered (nanoseconds since the epoch, the controller's clock); ``found`` true (the
#: message was served), false (the stream answered that it holds no such message) or null
#: (no answer: a timeout, no leader; ``error`` says which).
TTL_OBSERVATION = StructType([
    _s("ns", LongType()), _s("answered_ns", LongType()), _s("found", BooleanType()), _s("error"),
])

#: ``ttl_ns``: the message's TTL (nanoseconds); ``sent_ns`` / ``acked_ns``: nanoseconds since
#: the epoch on the controller's clock; ``stored_ns``: the message's timestamp as the stream
#: stored it (the leader's clock; from the first get that found it, else null);
#: ``observations``: :data:`TTL_OBSERVATION`, in time order.
TTL_LEDGER = StructType([
    _s("drill"), _s("stream"), _s("subject"), _s("msg_id"), _s("ttl_ns", LongType()),
    _s("sent_ns", LongType()), _s("acked_ns", LongType()), _s("stream_seq", LongType()),
    _s("error"), _s("stored_ns", LongType()), _s("observations", ArrayType(TTL_OBSERVATION)),
])

#: ``kind`` ``increment``: one attempt to publish ``incr`` (an integer) with ``msg_id``
#: (``attempt`` 1, then 2... when retried with the same id); ``outcome`` ``ok`` (acknowledged:
#: ``stream_seq``, ``val`` the new value as a decimal string, or ``duplicate`` true when the
#: stream had it already), ``fail`` (definitely not applied) or ``info`` (unknown: a timeout,
#: a lost connection). ``kind`` ``final``: the counter read back once healed (``outcome`` ok:
#: ``val``, "0" when the subject holds no message, and ``stream_seq`` of the message read).
#: Times in nanoseconds since the epoch (``acked_ns``: when the answer came).
COUNTER_LEDGER = StructType([
    _s("drill"), _s("stream"), _s("subject"), _s("kind"), _s("msg_id"), _s("incr", LongType()),
    _s("attempt", IntegerType()), _s("sent_ns", LongType()), _s("acked_ns", LongType()),
    _s("stream_seq", LongType()), _s("val"), _s("duplicate", BooleanType()), _s("outcome"),
    _s("error"),
])

_INVENTORY_SERVER = StructType([_s("host"), _s("server_name"), _s("zone")])
#: ``retired``: the servers playbooks/scale_down.yml took out of the cluster (the group
#: ``jetraft_retired``), whose event logs are collected too; absent before that group existed.
TOPOLOGY = StructType([
    _s("cluster"),
    _s("servers", ArrayType(_INVENTORY_SERVER)),
    _s("retired", ArrayType(_INVENTORY_SERVER)),
])
