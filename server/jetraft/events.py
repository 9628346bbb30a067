"""The structured event log: one JSON object per line, read by operators and by Spark.

Every line is a JSON object with these keys (schema version :data:`SCHEMA_VERSION`):

``ts``
    UTC time of the event, RFC 3339 with nanoseconds (``2026-11-22T03:54:36.123456789Z``).
``v``
    The schema version (int). A reader rejects versions it does not know.
``server_name``
    The emitting server's ``server_name`` (its server_id when none is configured).
``level``
    ``error``, ``warn``, ``info``, ``debug`` or ``trace``; ``debug`` lines appear only with
    ``-D``/``debug: true``, ``trace`` lines only with ``-V``/``trace: true``.
``event``
    The event name, one of :data:`EVENTS`.
``...``
    The event's own fields, as listed in :data:`EVENTS`. Field names never clash with the
    five keys above.

Secrets never enter the log: :meth:`EventLog.emit` refuses field names listed in
:data:`REDACTED_FIELDS` (``pass``, ``password``, ``auth_token``...), and the server never
passes a client's CONNECT options as a whole.

:class:`HumanLog` writes the same events for people, as nats-server's file log
(``[pid] 2006/01/02 15:04:05.000000 [INF] Server is ready``): see :func:`human_lines`.

Later layers (RAFT, JetStream) add their events to :data:`EVENTS`; adding an event or an
optional field keeps the version, renaming or removing one bumps it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

SCHEMA_VERSION = 1

LEVELS = {"error": 40, "warn": 30, "info": 20, "debug": 10, "trace": 5}

#: Mode of a log file jetraft creates (``--events``, and ``-l``/``log_file``): owner
#: read/write, group read, as nats-server's log (logger/log.go defaultLogPerms).
LOG_FILE_MODE = 0o640

#: Field names that must never be logged (a programming error if passed).
REDACTED_FIELDS = frozenset({"pass", "password", "auth_token", "token", "sig", "jwt", "nkey"})


@dataclass(frozen=True, slots=True)
class EventSpec:
    """What an event means, its default level and its fields (name -> description)."""

    level: str
    doc: str
    fields: dict[str, str]


_LEADER_INDEX = ("the new leader's last log index (int) when it won the election, before it appends "
                 "its term's empty entry at index + 1 (Raft §5.4.1, §8)")

#: Every event jetraft emits. The Spark jobs (jetraft.validation) read this schema.
EVENTS: dict[str, EventSpec] = {
    "server_starting": EventSpec(
        "info", "The server process started and is about to bind its listeners.",
        {"server_id": "str", "version": "jetraft version", "nats_version": "advertised NATS version",
         "config": "config file path or null", "pid": "int",
         "cluster": "the cluster name (cluster { name }), or null without a cluster block",
         "tags": "the configured server_tags (list of str, [] when none)"},
    ),
    "listening": EventSpec(
        "info", "A listener is accepting connections.",
        {"kind": "client | monitor | cluster", "host": "str", "port": "int"},
    ),
    "server_ready": EventSpec("info", "Every listener is up; the server serves clients.", {}),
    "config_warning": EventSpec(
        "warn", "A configuration key was ignored.", {"message": "file:line:col: text"},
    ),
    "config_reloaded": EventSpec(
        "info", "SIGHUP reloaded the configuration.",
        {"config": "path", "changed": "list of option names applied"},
    ),
    "config_reload_failed": EventSpec(
        "error", "SIGHUP reload refused; the running configuration is unchanged.",
        {"config": "path", "error": "str"},
    ),
    "client_connected": EventSpec(
        "debug", "A client finished CONNECT (and authentication when required).",
        {"cid": "int", "ip": "str", "port": "int", "name": "client name or null",
         "lang": "str or null", "version": "str or null", "user": "user name or null",
         "account": "str"},
    ),
    "client_closed": EventSpec(
        "debug", "A client connection ended.",
        {"cid": "int", "ip": "str", "port": "int", "reason": "nats-server closed-state text",
         "in_msgs": "int", "out_msgs": "int"},
    ),
    "auth_failed": EventSpec(
        "warn", "A client failed authentication (the password itself is never logged).",
        {"cid": "int", "ip": "str", "port": "int", "user": "user name or null", "reason": "str"},
    ),
    "permissions_violation": EventSpec(
        "warn", "A client published or subscribed where its user's permissions do not allow; it was "
        "answered with -ERR 'Permissions Violation ...' and the connection kept (nats-server client.go).",
        {"cid": "int", "user": "user name or null", "kind": "publish or subscribe", "subject": "str",
         "queue": "queue group (subscribe only) or null"},
    ),
    "protocol_error": EventSpec(
        "debug", "A client sent something the protocol forbids; it was answered with -ERR.",
        {"cid": "int", "error": "the -ERR text", "fatal": "bool"},
    ),
    "connection_error": EventSpec(
        "error", "Handling one connection's input raised an exception inside the server: that "
        "connection alone was closed (a client gets -ERR 'Internal Server Error'); the server "
        "and every other connection go on.",
        {"kind": "client | route", "error": "repr of the exception", "traceback": "str",
         "cid": "int (clients)", "ip": "str", "port": "int", "peer_name": "str or null (routes)"},
    ),
    "tls_handshake_failed": EventSpec(
        "warn", "A connection did not complete its TLS handshake in time, spoke plain text, or "
        "presented a certificate that does not verify or is not pinned; that connection alone was "
        "closed (nats-server client.go doTLSHandshake).",
        {"kind": "client | route", "ip": "str", "port": "int", "cid": "int (clients)", "reason": "str"},
    ),
    "slow_consumer": EventSpec(
        "warn", "A client could not keep up and was disconnected; other clients are unaffected.",
        {"cid": "int", "ip": "str", "port": "int", "pending_bytes": "int", "reason": "str"},
    ),
    "stale_connection": EventSpec(
        "debug", "A client did not answer ping_max PINGs and was disconnected.",
        {"cid": "int", "ip": "str", "port": "int"},
    ),
    "max_connections": EventSpec(
        "warn", "A connection was refused because max_connections was reached.",
        {"ip": "str", "limit": "int"},
    ),
    "lame_duck_started": EventSpec(
        "info", "Lame duck mode: no new clients; existing ones are drained.",
        {"clients": "int", "duration_s": "float", "grace_period_s": "float"},
    ),
    "shutdown": EventSpec("info", "The server is stopping.", {"reason": "signal or cause"}),
    # Routes (jetraft.net.transport.route): the cluster's full mesh
    "route_connected": EventSpec(
        "info", "A route to another cluster member is up (handshake done).",
        {"peer_name": "remote server_name", "peer_id": "remote server_id", "remote": "host:port",
         "direction": "solicited | accepted", "tags": "remote server_tags", "jetstream": "bool"},
    ),
    "route_closed": EventSpec(
        "info", "A route closed.", {"peer_name": "str or null", "remote": "host:port", "reason": "str"},
    ),
    "route_refused": EventSpec(
        "warn", "A route handshake was refused (bad credentials, other cluster, self, duplicate).",
        {"remote": "host:port", "reason": "str"},
    ),
    "route_connect_failed": EventSpec(
        "debug", "Connecting to a configured or discovered route failed; it is retried with backoff.",
        {"url": "route URL (no password)", "error": "str", "retry_in_s": "float"},
    ),
    # RAFT (jetraft.raft.node on_event hook; one line per transition, per group). Every raft_*
    # event but raft_batch_dropped and raft_log_recovered also carries ``index`` (this server's
    # last log index when no other meaning is given), ``peers`` (the group's latest
    # configuration), ``leader`` (the leader this server knows, or null) and ``zone`` (this
    # server's unique_tag value, or null); jetraft.net.raft.host adds those it lacks.
    **{
        f"raft_became_{role}": EventSpec(
            "info", f"This server became {role.replace('_', '-')} of a RAFT group.",
            {"group": "RAFT group name", "term": "int", "leader": "leader's id or null",
             "index": _LEADER_INDEX if role == "leader" else "this server's last log index (int)",
             "peers": "list of peer ids", "zone": "unique_tag value or null"},
        )
        for role in ("follower", "pre_candidate", "candidate", "leader")
    },
    "raft_vote_granted": EventSpec(
        "info", "This server granted its vote (RequestVote, Raft §5.2).",
        {"group": "str", "term": "int", "to": "candidate id"},
    ),
    "raft_commit_advanced": EventSpec(
        "debug", "The group's commit index advanced on this server.",
        {"group": "str", "term": "int", "commit": "int (log index)"},
    ),
    "raft_applied": EventSpec(
        "info", "This server applied newly committed entries of a group to its state machine: one line "
        "per apply batch, entries in index order, each listed once per process lifetime (after a "
        "restart, entries past the last snapshot are applied, and listed, again; entries restored "
        "from a snapshot are not listed: see raft_snapshot_installed). For Raft log matching and "
        "state machine safety (§5.3, §5.4.3): a (group, index) applied on several servers has one "
        "term and one hash.",
        {"group": "str", "term": "this server's current term (int)",
         "first_index": "log index of the first entry applied (int)",
         "last_index": "log index of the last entry applied (int); the batch is every index "
                       "first_index..last_index",
         "terms": "list of int: the term of each applied entry, in index order",
         "hashes": "list of int: per applied entry, in index order, zlib.crc32(bytes([type]) + data) "
                   "(unsigned 32-bit), type being the entry type's number (1 normal, 2 configuration "
                   "change) and data the entry's bytes as replicated (b'' for a leader's empty entry)",
         "index": "this server's last log index (int)", "peers": "list of peer ids",
         "leader": "str or null", "zone": "str or null"},
    ),
    "raft_replica_current": EventSpec(
        "info", "On a group's leader: a peer became current (online and at most CURRENT_LAG = 32 "
        "entries behind the leader's last index, as in stream info cluster.replicas). Emitted on a "
        "change, and for every peer in a new leader's first evaluation (its first tick as leader, "
        "every tick_s = 0.05 s) or a peer's first after it joined, so the latest raft_replica_* line "
        "of a (group, peer) in a term is its state.",
        {"group": "str", "term": "the leader's term (int)", "peer": "str",
         "lag": "entries behind the leader's last index (int)", "offline": "bool (false here)",
         "behind_ns": "ns the peer had been lagging under this leader before it became current "
                      "(int), or null when it was current when first evaluated",
         "index": "the leader's last log index (int)", "peers": "list of peer ids",
         "leader": "str", "zone": "str or null"},
    ),
    "raft_replica_lagging": EventSpec(
        "info", "On a group's leader: a peer is not current (more than CURRENT_LAG = 32 entries behind "
        "the leader's last index, or offline: not heard within an election timeout or reported down "
        "by the transport). Emitted on a change and in a leader's first evaluation, as "
        "raft_replica_current.",
        {"group": "str", "term": "the leader's term (int)", "peer": "str",
         "lag": "entries behind the leader's last index (int)", "offline": "bool",
         "index": "the leader's last log index (int)", "peers": "list of peer ids",
         "leader": "str", "zone": "str or null"},
    ),
    "raft_group_closed": EventSpec(
        "info", "This server stopped hosting a group (its stream or consumer deleted or moved away, or "
        "its replica rebuilt from its log after a storage failure: deleted false, then opened again); "
        "not emitted when the whole server stops.",
        {"group": "str", "deleted": "bool: the group's log files were removed too",
         "index": "this server's last log index (int)", "peers": "list of peer ids",
         "leader": "str or null", "zone": "str or null"},
    ),
    "raft_group_files_deleted": EventSpec(
        "info", "The files of a group this server holds on disk but never opened since it started "
        "were removed: the meta group's state, caught up with its leader, no longer assigns it the "
        "group's stream (deleted, or this server removed from it, while it was down).",
        {"group": "str"},
    ),
    "raft_group_failed": EventSpec(
        "error", "Driving one RAFT group raised an exception that is not a storage failure (a "
        "fault in its node or state machine): that group stopped on this server for good (it "
        "neither votes nor acknowledges; its stream is served by the other replicas, or not at "
        "all); the server and every other group go on. Restarting the server reopens it.",
        {"group": "str", "term": "int", "op": "what raised: ready | write | apply | advance | "
         "leader_changed | tick", "error": "repr of the exception", "traceback": "str",
         "index": "this server's last log index (int)", "peers": "list of peer ids",
         "leader": "str or null", "zone": "str or null"},
    ),
    "raft_snapshot_taken": EventSpec(
        "info", "This server took a snapshot and may compact its log.",
        {"group": "str", "index": "int", "term": "int",
         "bytes": "the snapshot's size in bytes (int; absent in older logs)",
         "reason": "what made it due: entries | bytes | interval | restore (a clustered restore's restorer, before its peers catch up; absent in older logs)"},
    ),
    "raft_log_compacted": EventSpec(
        "info", "This server discarded the log entries a snapshot covers (Raft §7).",
        {"group": "str", "index": "the last index discarded (int): the log now starts after it",
         "entries": "entries discarded by this compaction (int)",
         "log_bytes": "bytes of the log's segment files left on disk (int)"},
    ),
    "stream_catchup_started": EventSpec(
        "info", "A stream replica began fetching the messages a snapshot describes from a peer's store "
        "(after InstallSnapshot, a restart whose store is behind its snapshot, or a damaged store); "
        "it neither applies later entries nor campaigns until it finishes.",
        {"group": "str", "account": "str", "stream": "str",
         "snapshot_index": "the RAFT index the snapshot covers (int)",
         "reason": "snapshot | restart | damage",
         "bytes_needed": "bytes of store blocks still to fetch (int)",
         "last_seq": "the stream's last sequence in the snapshot (int)"},
    ),
    "stream_catchup_finished": EventSpec(
        "info", "A stream replica's catch-up ended: ok true when its store matches the snapshot and it "
        "went on applying entries.",
        {"group": "str", "account": "str", "stream": "str", "snapshot_index": "int",
         "ok": "bool", "bytes": "bytes fetched (int)", "chunks": "responses received (int)",
         "duration_ns": "from stream_catchup_started to now (int)",
         "sources": "peers fetched from (list of str)", "error": "str or null"},
    ),
    "stream_store_damaged": EventSpec(
        "error", "A clustered stream replica's store failed its checks on open (a record failing its "
        "checksum, a torn or missing block): the damaged part is fetched again from a peer, never "
        "served, and the replica does not campaign until then.",
        {"group": "str", "account": "str", "stream": "str", "file": "block file name",
         "offset": "byte offset of the first bad byte (int)", "kind": "checksum_mismatch | torn_tail | "
         "missing_block | short_block | invalid_message (a record no publish could have stored: "
         "jetstream/admission.py)", "detail": "str"},
    ),
    "raft_snapshot_installed": EventSpec(
        "info", "This server installed a snapshot sent by the leader (InstallSnapshot, Raft §7).",
        {"group": "str", "index": "int", "term": "int"},
    ),
    "raft_peer_added": EventSpec(
        "info", "A peer joined the group's configuration (thesis §4.1), as a voter or as a "
        "learner that receives the log but does not vote (thesis §4.2.1).",
        {"group": "str", "term": "int", "peer": "str", "index": "int",
         "learner": "bool: it joined as a learner"},
    ),
    "raft_peer_removed": EventSpec(
        "info", "A peer left the group's configuration (thesis §4.1).",
        {"group": "str", "term": "int", "peer": "str", "index": "int",
         "learner": "bool: it was a learner"},
    ),
    "raft_peer_promoted": EventSpec(
        "info", "A learner of the group became a voter (thesis §4.2.1).",
        {"group": "str", "term": "int", "peer": "str", "index": "int"},
    ),
    "raft_peer_demoted": EventSpec(
        "info", "A promotion was undone: its entry was cut from the log before it committed "
        "(thesis §4.1), and the peer is a learner again.",
        {"group": "str", "term": "int", "peer": "str", "index": "int"},
    ),
    "raft_leader_transfer": EventSpec(
        "info", "The leader is handing leadership to a peer (TimeoutNow, thesis §3.10).",
        {"group": "str", "term": "int", "to": "str"},
    ),
    "raft_batch_dropped": EventSpec(
        "warn", "A batch of RAFT messages from a peer could not be decoded or stepped; it was dropped.",
        {"peer": "server name", "error": "str", "bytes": "int"},
    ),
    "raft_log_recovered": EventSpec(
        "warn", "Opening a group's log found a torn tail or a corrupt record (never served).",
        {"group": "str", "file": "str", "offset": "int (bytes)", "kind": "torn_tail | checksum_mismatch",
         "first_index": "int"},
    ),
    "jetstream_enabled": EventSpec(
        "info", "JetStream is serving these accounts from this store directory.",
        {"store_dir": "str or null", "accounts": "list of account names", "sync": "always | interval seconds"},
    ),
    "jetstream_stream_recovered": EventSpec(
        "info", "A stream was loaded from disk at start-up.",
        {"account": "str", "stream": "str", "messages": "int", "last_seq": "int"},
    ),
    "jetstream_recovery_problem": EventSpec(
        "warn", "Start-up found a damaged file: a torn tail, a record failing its checksum (never served) "
        "or an unreadable meta/state file (left on disk).",
        {"account": "str", "stream": "str", "consumer": "str or null", "path": "str", "detail": "str"},
    ),
    "jetstream_stream_created": EventSpec(
        "info", "A stream was created ($JS.API.STREAM.CREATE).",
        {"account": "str", "stream": "str", "subjects": "list", "storage": "file | memory",
         "retention": "limits | interest | workqueue"},
    ),
    "jetstream_stream_restored": EventSpec(
        "info", "A clustered restore ($JS.API.STREAM.RESTORE) put a stream on a quorum of its "
        "peers (logged by its restoring leader).",
        {"account": "str", "stream": "str", "group": "str", "peers": "list",
         "bytes": "the backup's size in bytes (int)", "messages": "int", "last_seq": "int"},
    ),
    "jetstream_stream_updated": EventSpec("info", "A stream's configuration changed.",
                                          {"account": "str", "stream": "str"}),
    "jetstream_stream_deleted": EventSpec("info", "A stream and its consumers were deleted.",
                                          {"account": "str", "stream": "str"}),
    "jetstream_stream_purged": EventSpec("info", "Messages were purged from a stream.",
                                         {"account": "str", "stream": "str", "purged": "int"}),
    "jetstream_consumer_created": EventSpec(
        "info", "A consumer was created.",
        {"account": "str", "stream": "str", "consumer": "str", "durable": "bool", "kind": "push | pull"},
    ),
    "jetstream_consumer_deleted": EventSpec(
        "info", "A consumer was deleted (by request, with its stream, or inactive).",
        {"account": "str", "stream": "str", "consumer": "str", "reason": "str"},
    ),
    "api_request_failed": EventSpec(
        "error", "Handling one JetStream API request raised an exception inside the server: that "
        "request alone was answered with an error (500, its response type's nats-server error; a "
        "500 status for DIRECT.GET and pull requests); the server and every other request go on.",
        {"account": "str", "subject": "the request's subject", "error": "repr of the exception",
         "traceback": "str"},
    ),
    "advisory_failed": EventSpec(
        "error", "Building one JetStream advisory ($JS.EVENT.ADVISORY.> or $JS.EVENT.METRIC.>) "
        "raised an exception: that advisory was not sent; the request or timer that caused it "
        "was served as usual.",
        {"account": "str", "advisory": "the advisory's builder", "error": "repr of the exception"},
    ),
    # The JetStream cluster (meta group decisions and administration)
    "jetstream_cluster_tick_failed": EventSpec(
        "error", "One pass of the cluster controller's periodic work (the meta group's bootstrap "
        "and membership, stream groups' reconciliation and timers) raised an exception inside the "
        "server: that pass was abandoned and the next one runs 0.1 s later; the server goes on.",
        {"error": "repr of the exception", "traceback": "str"},
    ),
    "jetstream_stream_assigned": EventSpec(
        "info", "The meta group placed a stream on a RAFT group of peers.",
        {"account": "str", "stream": "str", "group": "RAFT group name", "peers": "list of server names",
         "replicas": "int"},
    ),
    "jetstream_consumer_assigned": EventSpec(
        "info", "The meta group placed a consumer on a RAFT group of its stream's peers.",
        {"account": "str", "stream": "str", "consumer": "str", "group": "RAFT group name",
         "peers": "list of server names"},
    ),
    "jetstream_placement_failed": EventSpec(
        "warn", "No placement satisfied a stream's replicas and tags (error 10005).",
        {"account": "str", "stream": "str", "replicas": "int", "reason": "str"},
    ),
    "jetstream_peer_removed": EventSpec(
        "info", "A peer was removed from a stream's group and a replacement chosen.",
        {"account": "str", "stream": "str", "group": "str", "peer": "str", "replacement": "str or null"},
    ),
    "jetstream_server_removed": EventSpec(
        "info", "A server was removed from the meta group (SERVER.REMOVE).", {"peer": "str"},
    ),
    "jetstream_meta_joining": EventSpec(
        "info", "This server heard of an established meta group before opening its own, and "
        "opens it from what it was told: as a member of its first configuration, or as a new "
        "server the meta leader adds as a learner, then promotes to a voter once caught up.",
        {"by": "the server that told it (str)", "leader": "str or null", "term": "int",
         "voters": "list of server names", "learners": "list of server names",
         "member": "bool: this server is one of the voters",
         "store_lost": "bool: the group records another store id for this server (it lost "
                       "its store): it joins as a new member"},
    ),
    "jetstream_meta_store_replaced": EventSpec(
        "warn", "The meta state records another store id for this server: it lost its store "
        "(a wiped disk, a new machine under the same name). It neither votes nor holds a "
        "replica until the meta leader has removed its old identity and admitted it again.",
        {"store": "the recorded store id (str)", "mine": "this server's store id (str)"},
    ),
    "jetstream_meta_member": EventSpec(
        "info", "The meta state recorded this server's store id: it votes and holds replicas.",
        {"store": "this server's store id (str)"},
    ),
    "jetstream_meta_refused": EventSpec(
        "warn", "This server was removed from the meta group ($JS.API.SERVER.REMOVE) and is "
        "not a member until added again: it opens no meta group and holds no replica.",
        {"by": "the server that said so (str)", "leader": "str or null", "reason": "str"},
    ),
    "route_frame_invalid": EventSpec(
        "warn", "A route peer sent a frame this server could not read; it was ignored.",
        {"peer_name": "str", "kind": "the frame's kind (str)", "reason": "str"},
    ),
    "jetstream_stepdown_requested": EventSpec(
        "info", "A leader step-down was requested through the API or lame duck mode.",
        {"group": "str", "kind": "meta | stream | consumer", "leader": "str", "to": "str or null",
         "cause": "api | lame_duck"},
    ),
    "jetstream_storage_failed": EventSpec(
        "error", "A write, truncation or fsync of a stream's store, a consumer state file or a "
        "RAFT log failed (a full disk, an I/O error). Only what it concerns stops: a stream (one "
        "server) refuses every write with an error and acknowledges nothing more; a RAFT group "
        "stops on this server (no votes, no acknowledgements, no leadership). Core NATS and every "
        "other stream and group go on. Retried every few seconds until jetstream_storage_resumed. "
        "Lines written before this field set existed carry only ``error``.",
        {"account": "str or null", "stream": "str or null",
         "consumer": "str or null (a consumer state file failed)",
         "group": "RAFT group name, or null (a stream of a server without a cluster)",
         "errno": "symbolic errno (ENOSPC, EIO, EDQUOT, EROFS...) or null",
         "path": "the file or directory the operation failed on, or null",
         "op": "write (a write, truncation or file creation) | fsync | apply (a replica's store, "
               "applying committed entries) | open | close",
         "error": "str"},
    ),
    "jetstream_stream_failed": EventSpec(
        "error", "Handling one stream's input or timers (a publish, an ack, a poll of its "
        "consumers) raised an exception that is not a storage failure: that stream stopped for "
        "good on this server (writes refused with 10051 'internal error', reads and deletes "
        "served; a restart reopens it); the server and every other stream go on.",
        {"account": "str", "stream": "str", "error": "repr of the exception", "traceback": "str"},
    ),
    "jetstream_storage_resumed": EventSpec(
        "warn", "A stream or RAFT group stopped by jetstream_storage_failed runs again, without a "
        "restart: a probe write and fsync in its directory succeeded and its files were put back "
        "to what is provably on disk and read back (a stream: rolled back to what its last "
        "successful fsyncs made durable, everything acknowledged kept; a group: its log reopened, "
        "or a replica rebuilt from its log).",
        {"account": "str or null", "stream": "str or null", "group": "str or null",
         "frozen_s": "seconds it was stopped (float)", "attempts": "resume attempts made (int)",
         "rolled_back": "a stream: sequences rolled back (written, never acknowledged, not "
                        "provably on disk), else null"},
    ),
    "jetstream_storage_retry_failed": EventSpec(
        "debug", "An attempt to resume a stream or group stopped by jetstream_storage_failed "
        "failed (the disk is still full or failing); the next one follows.",
        {"account": "str or null", "stream": "str or null", "group": "str or null",
         "errno": "str or null", "error": "str", "retry_in_s": "float"},
    ),
    "server_stopped": EventSpec("info", "Every connection and listener is closed.", {}),
}


#: nats-server's plain labels (logger/log.go setPlainLabelFormats), by event level.
LABELS = {"error": "[ERR] ", "warn": "[WRN] ", "info": "[INF] ", "debug": "[DBG] ", "trace": "[TRC] "}

#: The longest human line written (characters, without the prefix); longer ones end in "...".
MAX_HUMAN_LINE = 8192


def _join_host_port(host: Any, port: Any) -> str:
    host = str(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() or c in '"=' for c in value):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def _quoted(value: Any) -> str:
    return json.dumps(str(value))


def human_lines(event: str, fields: dict[str, Any], server_name: str) -> list[str]:
    """The human log's message(s) for one event: nats-server's wording (server/server.go,
    route.go, client.go, jetstream.go, jetstream_cluster.go) for the events nats-server
    also logs, else ``event key=value ...`` (strings bare when they hold no space, quote
    or ``=``; other values as JSON). Returns one or more messages, without prefix or label."""
    f = fields
    if event == "server_starting":
        lines = ["Starting jetraft-server", f"  Version:  {f.get('version')}",
                 f"  NATS:     {f.get('nats_version')}"]
        if f.get("cluster"):
            lines.append(f"  Cluster:  {f['cluster']}")
        lines += [f"  Name:     {server_name}", f"  ID:       {f.get('server_id')}"]
        if f.get("config"):
            lines.append(f"Using configuration file: {f['config']}")
        return lines
    if event == "listening":
        where = _join_host_port(f.get("host"), f.get("port"))
        kind = f.get("kind")
        if kind == "client":
            return [f"Listening for client connections on {where}"]
        if kind == "cluster":
            return [f"Listening for route connections on {where}"]
        if kind == "monitor":
            return [f"Starting http monitor on {where}"]
    simple = {"server_ready": "Server is ready", "shutdown": "Initiating Shutdown...",
              "server_stopped": "Server Exiting..",
              "lame_duck_started": "Entering lame duck mode, stop accepting new clients"}
    if event in simple:
        return [simple[event]]
    if event == "client_connected":
        return [f"{_join_host_port(f.get('ip'), f.get('port'))} - cid:{f.get('cid')} - Client connection created"]
    if event == "client_closed":
        return [f"{_join_host_port(f.get('ip'), f.get('port'))} - cid:{f.get('cid')} - "
                f"Client connection closed: {f.get('reason')}"]
    if event == "route_connected":
        return [f"{f.get('remote')} - Route connection created (server {f.get('peer_name')}, {f.get('direction')})"]
    if event == "route_closed":
        return [f"{f.get('remote')} - Router connection closed: {f.get('reason')}"]
    if event == "jetstream_enabled":
        return ["Starting JetStream", f"  Store Directory: {_quoted(f.get('store_dir'))}"]
    if event == "raft_became_leader" and f.get("group") == "_meta_":
        return ["Self is new JetStream cluster metadata leader"]
    return [" ".join([event, *(f"{k}={_value(v)}" for k, v in fields.items())])]


class HumanLog:
    """nats-server's file log (logger/log.go): ``[pid] 2006/01/02 15:04:05.000000 [INF] text``.

    ``logtime`` off drops the time; ``utc`` writes it in UTC instead of local time
    (``logtime_utc``). ``size_limit`` > 0 rotates as nats-server does: once the file
    passes that many bytes it is renamed ``<path>.YYYY.MM.DD.HH.MM.SS.<nanoseconds>``, a new
    file is started with ``Rotated log, backup saved as "<backup>"``, and with ``max_num`` > 0
    only the ``max_num - 1`` newest backups are kept (each removal logged as ``Purged log
    file "<backup>"``). A file it creates is mode 0640. Raises OSError when the file cannot
    be opened; a later write or rotation error is swallowed (the server goes on, and
    rotation is retried at twice the size, as nats-server)."""

    def __init__(self, path: str | os.PathLike[str], *, logtime: bool = True, utc: bool = False,
                 size_limit: int = 0, max_num: int = 0, clock: Callable[[], int] = time.time_ns) -> None:
        self.path = os.fspath(path)
        self.logtime, self.utc = logtime, utc
        self.size_limit = self._limit = max(size_limit, 0)
        self.max_num = max(max_num, 0)
        self._clock = clock
        self._pid = f"[{os.getpid()}] "
        self._file = self._open()
        self._out = os.fstat(self._file.fileno()).st_size

    def settings(self) -> tuple[Any, ...]:
        return (self.path, self.logtime, self.utc, self.size_limit, self.max_num)

    def _open(self) -> IO[str]:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, LOG_FILE_MODE)
        return os.fdopen(fd, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - owned, closed in close()

    def _stamp(self, ns: int) -> str:
        if not self.logtime:
            return ""
        secs, frac = divmod(ns, 1_000_000_000)
        tm = time.gmtime(secs) if self.utc else time.localtime(secs)
        return time.strftime("%Y/%m/%d %H:%M:%S", tm) + f".{frac // 1000:06d} "

    def _line(self, level: str, message: str, ns: int) -> str:
        if len(message) > MAX_HUMAN_LINE:
            message = message[:MAX_HUMAN_LINE] + "..."
        return f"{self._pid}{self._stamp(ns)}{LABELS[level]}{message}\n"

    def write(self, level: str, messages: list[str]) -> None:
        """Write ``messages`` at ``level`` (one line each), then rotate when due."""
        ns = self._clock()
        try:
            for message in messages:
                line = self._line(level, message, ns)
                self._file.write(line)
                self._out += len(line.encode("utf-8", "replace"))
        except (OSError, ValueError):
            return
        if self._limit and self._out > self._limit:
            self._rotate(ns)

    def _rotate(self, ns: int) -> None:
        secs, frac = divmod(ns, 1_000_000_000)
        tm = time.gmtime(secs) if self.utc else time.localtime(secs)
        backup = self.path + time.strftime(".%Y.%m.%d.%H.%M.%S", tm) + f".{frac:09d}"
        try:
            self._file.close()
            os.rename(self.path, backup)
            self._file = self._open()
        except OSError as exc:
            self._limit *= 2
            try:
                self._file = self._open()
                self._file.write(self._line("error", f"Unable to rotate logfile ({exc}), will attempt next "
                                                     f"rotation at size {self._limit}", ns))
            except OSError:
                pass
            return
        self._limit = self.size_limit
        line = self._line("info", f"Rotated log, backup saved as {_quoted(backup)}", ns)
        self._file.write(line)
        self._out = len(line.encode("utf-8", "replace"))
        if self.max_num:
            self._purge(ns)

    def _purge(self, ns: int) -> None:
        directory, base = os.path.split(self.path)
        pattern = re.compile(re.escape(base) + r"\.\d{4}\.\d\d\.\d\d\.\d\d\.\d\d\.\d\d\.\d{9}")
        try:
            backups = sorted(n for n in os.listdir(directory or ".") if pattern.fullmatch(n))
        except OSError as exc:
            self._file.write(self._line("error", f"Unable to read directory {_quoted(directory)} for log purge "
                                                 f"({exc}), will attempt next rotation", ns))
            return
        for name in backups[:max(len(backups) - (self.max_num - 1), 0)]:
            try:
                os.remove(os.path.join(directory, name))
            except OSError as exc:
                self._file.write(self._line("error", f"Unable to remove backup log file {_quoted(name)} ({exc}), "
                                                     "will attempt next rotation", ns))
                return
            self._file.write(self._line("info", f"Purged log file {_quoted(name)}", ns))

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass


def rfc3339_ns(ns: int) -> str:
    """Format nanoseconds since the epoch as RFC 3339 UTC with nine fraction digits."""
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


class EventLog:
    """Writes events as JSON lines to stdout and, optionally, to a file (``--events``);
    and, when :meth:`set_human` was given one, as nats-server's human lines (``-l``).

    ``threshold`` is the lowest level written (``info`` by default; ``debug`` with ``-D``,
    ``trace`` with ``-V``). Writes are line-buffered and flushed per event, so a crash loses
    at most the line being written. Safe to call from worker threads.

    Raises ``ValueError`` for an unknown event or a secret field name: both are bugs.
    """

    def __init__(
        self,
        server_name: str,
        *,
        stream: IO[str] | None = sys.stdout,
        path: str | os.PathLike[str] | None = None,
        threshold: str = "info",
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.server_name = server_name
        self._streams: list[IO[str]] = [stream] if stream is not None else []
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        self._clock = clock
        self._human: HumanLog | None = None
        self.threshold = threshold
        if path is not None:
            self.open_file(path)

    @property
    def threshold(self) -> str:
        return self._threshold

    @threshold.setter
    def threshold(self, level: str) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown log level {level!r}")
        self._threshold = level
        self._min = LEVELS[level]

    def open_file(self, path: str | os.PathLike[str]) -> None:
        """Append events to ``path`` as well (replacing any previous file). A file it
        creates is mode 0640 (owner read/write, group read), whatever the umask, as
        nats-server creates its log (logger/log.go defaultLogPerms): events name
        streams, subjects and users. An existing file keeps its mode. Raises OSError."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, LOG_FILE_MODE)
        f = os.fdopen(fd, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - owned, closed in close()
        with self._lock:
            old, self._file = self._file, f
        if old is not None:
            old.close()

    def set_human(self, log: HumanLog | None) -> None:
        """Also write each event to ``log`` (a :class:`HumanLog`) in nats-server's human
        format, replacing (and closing) any previous one; None stops it."""
        with self._lock:
            old, self._human = self._human, log
        if old is not None and old is not log:
            old.close()

    @property
    def human(self) -> HumanLog | None:
        return self._human

    def enabled(self, level: str) -> bool:
        """Whether events of ``level`` are written (to skip building costly fields)."""
        return LEVELS[level] >= self._min

    def emit(self, event: str, /, level: str | None = None, **fields: Any) -> None:
        """Write one event. ``level`` defaults to the event's level in :data:`EVENTS`."""
        spec = EVENTS.get(event)
        if spec is None:
            raise ValueError(f"unknown event {event!r}: add it to jetraft.events.EVENTS")
        secret = REDACTED_FIELDS.intersection(fields)
        if secret:
            raise ValueError(f"event {event!r} must not carry secret fields {sorted(secret)}")
        level = level or spec.level
        if LEVELS[level] < self._min:
            return
        record = {"ts": rfc3339_ns(self._clock()), "v": SCHEMA_VERSION,
                  "server_name": self.server_name, "level": level, "event": event}
        record.update(fields)
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            for stream in self._streams:
                try:
                    stream.write(line)
                    stream.flush()
                except (OSError, ValueError):
                    pass  # a closed stdout must not take the server down
            if self._file is not None:
                self._file.write(line)
            if self._human is not None:
                self._human.write(level, human_lines(event, fields, self.server_name))

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._human is not None:
                self._human.close()
                self._human = None
