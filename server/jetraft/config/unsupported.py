"""Which nats-server configuration keys jetraft refuses and which it tolerates with a
warning, block by block (top level, ``cluster``, ``jetstream``, ``authorization``,
``accounts``, ``users``), and the account JetStream limits it accepts or enforces.

The keys are nats-server's (``server/opts.go`` processConfigFileLine, parseCluster,
parseJetStream, parseAuthorization, parseAccounts, parseUsers, parseJetStreamForAccount);
the rule is design.md's "fail closed". Read by :mod:`jetraft.config.builder`
(``_Builder.ignore``); private to this package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class _Unsupported:
    """The keys of one block that nats-server knows and jetraft has no handler for:
    ``refused`` ones are ConfigErrors, ``tolerated`` ones warnings (see ``ignore``)."""

    refused: frozenset[str]
    tolerated: frozenset[str] = frozenset()


def _keys(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Which nats-server keys jetraft refuses and which it tolerates with a warning.
#
# The lists are every key of nats-server server/opts.go (processConfigFileLine,
# parseCluster, parseJetStream, parseAuthorization, parseAccounts, parseUsers,
# parseJetStreamForAccount) that jetraft has no handler for; a key with a handler in the
# builder never reaches ``ignore``, so a key listed here and handled is simply handled. The
# rule (design.md, "fail closed"): a key that matters for security, clustering or data
# retention is refused, because ignoring it would run a server that is not the one the
# operator configured -- with ``operator``/``resolver`` ignored, nats-server refuses to
# start while jetraft used to accept any client; with nkey users skipped, an account
# was believed reachable by key only; with ``jetstream { key }`` ignored, messages were
# stored in clear. Only keys that change what is logged, what is profiled or how fast
# something goes are tolerated:
#
# top level, tolerated:
#   trace_verbose, trace_headers, max_traced_msg_len,
#   connect_error_reports, reconnect_error_reports: what and where the log writes
#     (the log holds no message payloads beyond what ``trace`` already shows);
#   prof_port, prof_block_rate: a profiling listener jetraft does not open (fewer
#     listeners, not more);
#   ports_file_dir, server_metadata, http_base_path: files and
#     fields for tooling and the monitoring pages (the pages stay where they were;
#     http_base_path only moves them);
#   disable_sublist_cache/no_sublist_cache, no_fast_producer_stall, write_timeout:
#     core NATS performance and slow-consumer policy (at most once either way);
#   no_header_support: jetraft supports headers; a client that sends none is unaffected.
# top level, refused: TLS (tls, allow_non_tls, ocsp, ocsp_cache, https, https_port),
#   operator/JWT mode (operator(s), root(s)..., resolver..., resolver_tls,
#   resolver_preload, resolver_pinned_accounts, trusted(_keys), default_sentinel),
#   proxies and proxy_protocol (who a client is), no_system_account (the $SYS account
#   jetraft always has), client limits (max_subscriptions/max_subs, max_sub_tokens):
#   bounds against hostile clients), subject mappings (mappings/maps: where messages
#   go and what streams capture), other listeners (leafnodes/leaf, gateway,
#   websocket/ws, mqtt), cluster topology and wire formats (client_advertise,
#   feature_flags, default_js_domain).
# cluster: all refused. advertise/no_advertise/connect_retries/connect_backoff/
#   pool_size/accounts/compression/ping_interval/ping_max/write_deadline/write_timeout
#   change which routes exist and how they are kept alive; permissions and tls are
#   security.
# jetstream, tolerated: max_buffered_size, max_buffered_msgs, request_queue_limit, info_queue_limit, max_concurrent_io,
#   meta_compact_sync: nats-server's internal queue, buffer and sync knobs; jetraft
#   bounds its own queues and fsyncs before every acknowledgement by default.
#   meta_compact, meta_compact_size and max_outstanding_catchup are implemented.
# jetstream, refused: strict, encryption (key/ek/encryption_key, prev_key/...,
#   cipher, tpm), limits (server-wide JetStream limits), extension_hint (leaf domains).
# authorization (also cluster authorization): auth_callout/auth_hook, proxy_required,
#   permissions and default permissions: all refused.
# accounts: nkey, imports, exports, mappings/maps, limits, default_permissions: refused;
#   msg_trace/trace_dest tolerated (message tracing publishes trace events; without it
#   none are published).
# users: permissions, connection types, proxy_required: refused; nkey users are refused
#   in ``_users``; account JetStream limits in ``_account_jetstream``.
# Any key nats-server does not know either is an error in every block, as in
# nats-server (its top-level unknown-field error is on by default: opts.go
# allowUnknownTopLevelField is 0 unless an embedding program calls
# NoErrOnUnknownFields); a misspelt ``authorization`` must not leave a server open.
_UNSUPPORTED_TOP_LEVEL = _Unsupported(
    refused=_keys(
        """client_advertise mappings maps default_sentinel https https_port gateway leaf leafnodes
        proxy_protocol max_subscriptions max_subs max_sub_tokens max_subscription_tokens tls ocsp
        ocsp_cache allow_non_tls operator operators roots root root_operators root_operator resolver
        account_resolver accounts_resolver resolver_tls resolver_preload resolver_pinned_accounts
        no_system_account no_system no_sys_acc trusted trusted_keys websocket ws mqtt feature_flags
        default_js_domain proxies"""
    ),
    tolerated=_keys(
        """trace_verbose trace_headers max_traced_msg_len connect_error_reports
        reconnect_error_reports prof_port prof_block_rate ports_file_dir server_metadata
        http_base_path disable_sublist_cache no_sublist_cache no_fast_producer_stall
        write_timeout no_header_support"""
    ),
)
_UNSUPPORTED_CLUSTER = _Unsupported(
    refused=_keys(
        """tls cluster_advertise advertise no_advertise connect_retries connect_backoff permissions
        pool_size accounts compression ping_interval ping_max write_deadline write_timeout"""
    ),
)
_UNSUPPORTED_JETSTREAM = _Unsupported(
    refused=_keys("strict key ek encryption_key prev_key prev_ek prev_encryption_key cipher tpm limits extension_hint"),
    tolerated=_keys(
        """max_buffered_size max_buffered_msgs request_queue_limit
        info_queue_limit max_concurrent_io meta_compact_sync"""
    ),
)
_UNSUPPORTED_AUTHORIZATION = _Unsupported(
    refused=_keys("default_permission default_permissions permissions auth_callout auth_hook proxy_required"),
)
_UNSUPPORTED_ACCOUNT = _Unsupported(
    refused=_keys("nkey imports exports default_permissions mappings maps limits"),
    tolerated=_keys("msg_trace trace_dest"),
)
_UNSUPPORTED_USER = _Unsupported(
    refused=_keys(
        "permission permissions authorization allowed_connection_types connection_types clients proxy_required"
    ),
)
#: An account's ``jetstream { ... }`` limits (opts.go parseJetStreamForAccount): the
#: value kind and the values that mean "no limit", the only ones jetraft accepts.
_ACCOUNT_JETSTREAM_LIMITS: dict[str, tuple[str, tuple[Any, ...]]] = {
    **dict.fromkeys(
        """max_memory max_mem mem memory max_store max_file max_disk store disk max_streams streams
        max_consumers consumers mem_max_stream_bytes memory_max_stream_bytes disk_max_stream_bytes
        store_max_stream_bytes max_ack_pending""".split(),
        ("integer", (-1,)),
    ),
    **dict.fromkeys("max_bytes_required max_stream_bytes max_bytes".split(), ("boolean", (False,))),
    "cluster_traffic": ("string", ("system", "")),
}
#: The account JetStream limits jetraft enforces, by their configuration names (opts.go
#: parseJetStreamForAccount), to their JetStreamAccountLimits JSON names. ``max_ack_pending``
#: is a consumer's default and upper bound (consumer.go setConsumerConfigDefaults,
#: checkConsumerCfg); in a cluster the stream's leader writes the default it gives into the
#: request it proposes, so that every replica stores the same config.
_ACCOUNT_JETSTREAM_ENFORCED: dict[str, str] = {
    **dict.fromkeys("max_memory max_mem mem memory".split(), "max_memory"),
    **dict.fromkeys("max_store max_file max_disk store disk".split(), "max_storage"),
    "max_streams": "max_streams", "streams": "max_streams",
    "max_consumers": "max_consumers", "consumers": "max_consumers",
    "max_bytes_required": "max_bytes_required", "max_stream_bytes": "max_bytes_required",
    "max_bytes": "max_bytes_required",
    "mem_max_stream_bytes": "memory_max_stream_bytes", "memory_max_stream_bytes": "memory_max_stream_bytes",
    "disk_max_stream_bytes": "storage_max_stream_bytes", "store_max_stream_bytes": "storage_max_stream_bytes",
    "max_ack_pending": "max_ack_pending",
}

