"""jetraft.jetstream.model: the settings jetraft does not act on are refused, the rest pass.

``StreamConfig.check_supported`` / ``ConsumerConfig.check_supported`` raise nats-server's
error for an invalid configuration (10052 for a stream, 10012 for a consumer) described
``"<setting> is not supported by jetraft"``; the defaults nats-py sends (key-value and
object-store buckets included) pass. Also ``parse_message_ttl`` (nats-server
stream.go parseMessageTTL).
"""

from __future__ import annotations

import pytest
from nats.js import api

from jetraft.jetstream.errors import JSApiError, UnsupportedSetting
from jetraft.jetstream.model import ConsumerConfig, StreamConfig
from jetraft.jetstream.stream import parse_message_ttl

S = 10**9


def stream(**fields) -> StreamConfig:
    return StreamConfig.from_json({"name": "S", **fields})


@pytest.mark.parametrize(("setting", "fields"), [
    ("mirror external", {"mirror": {"name": "O", "external": {"api": "$JS.hub.API", "deliver": ""}}}),
    ("source external", {"subjects": ["s"], "sources": [{"name": "O", "external": {"api": "$JS.hub.API"}}]}),
    ("persist_mode async (nats-server 2.12)", {"persist_mode": "async"}),
    ("allow_batched (fast batch publish, nats-server 2.14)", {"allow_batched": True}),
])
def test_a_stream_setting_jetraft_does_not_act_on_is_refused(setting, fields):
    cfg = stream(**fields)
    assert cfg.unsupported() == setting
    with pytest.raises(UnsupportedSetting) as info:
        cfg.check_supported()
    assert isinstance(info.value, JSApiError)
    assert info.value.to_json() == {"code": 500, "err_code": 10052,
                                    "description": f"{setting} is not supported by jetraft"}


@pytest.mark.parametrize("fields", [
    {},
    {"max_consumers": 3, "no_ack": True, "max_age": S, "max_msgs": 5, "max_bytes": 100, "max_msg_size": 10,
     "max_msgs_per_subject": 2, "discard": "new", "discard_new_per_subject": True, "duplicate_window": S,
     "storage": "memory", "allow_direct": True, "deny_delete": True, "deny_purge": True,
     "description": "d", "metadata": {"k": "v"}, "placement": {"tags": ["az:a"]},
     "consumer_limits": {"inactive_threshold": S, "max_ack_pending": 5}, "retention": "workqueue"},
    {"allow_msg_ttl": True, "allow_rollup_hdrs": True},     # nats-py key-value buckets
    {"compression": "none", "first_seq": 0, "persist_mode": "default", "sources": []},
    {"compression": "s2"},                                  # file streams compress sealed blocks
    {"compression": "s2", "storage": "memory"},             # ignored, as nats-server's memory store
])
def test_settings_jetraft_acts_on_pass(fields):
    cfg = stream(**fields)
    assert cfg.unsupported() is None
    cfg.check_supported()


def test_nats_py_bucket_defaults_pass():
    kv = api.StreamConfig(name="KV_B", subjects=["$KV.B.>"], allow_direct=True, allow_rollup_hdrs=True,
                          allow_msg_ttl=True, deny_delete=True, discard=api.DiscardPolicy.NEW,
                          duplicate_window=120, max_age=None, max_bytes=-1, max_consumers=-1,
                          max_msg_size=-1, max_msgs=-1, max_msgs_per_subject=1, num_replicas=1)
    obj = api.StreamConfig(name="OBJ_O", subjects=["$O.O.C.>", "$O.O.M.>"], max_bytes=-1, max_consumers=0,
                           discard=api.DiscardPolicy.NEW, allow_rollup_hdrs=True, allow_direct=True)
    for config in (kv, obj):
        StreamConfig.from_json(config.as_dict()).check_supported()


def consumer(**fields) -> ConsumerConfig:
    return ConsumerConfig.from_json(fields)


@pytest.mark.parametrize(("setting", "fields"), [
    ("direct", {"deliver_subject": "d", "direct": True}),
    ("sourcing", {"deliver_subject": "d", "sourcing": True}),
])
def test_a_consumer_setting_jetraft_does_not_act_on_is_refused(setting, fields):
    cfg = consumer(**fields)
    assert cfg.unsupported() == setting
    with pytest.raises(UnsupportedSetting) as info:
        cfg.check_supported()
    assert info.value.to_json() == {"code": 500, "err_code": 10012,
                                    "description": f"{setting} is not supported by jetraft"}


@pytest.mark.parametrize("fields", [
    {},
    {"durable_name": "d", "ack_policy": "explicit", "ack_wait": S, "max_deliver": 3, "backoff": [S, 2 * S],
     "filter_subjects": ["a", "b"], "max_waiting": 5, "max_ack_pending": 5, "headers_only": True,
     "max_batch": 10, "max_expires": S, "max_bytes": 100, "inactive_threshold": S, "mem_storage": True,
     "metadata": {"k": "v"}, "pause_until": "2030-01-01T00:00:00Z", "deliver_policy": "by_start_sequence",
     "opt_start_seq": 4, "replay_policy": "instant"},
    {"deliver_subject": "d", "deliver_group": "q", "flow_control": True, "idle_heartbeat": S},
    {"replay_policy": "original", "ack_policy": "explicit"},                    # consumer_pacing.py
    {"deliver_subject": "d", "replay_policy": "original", "rate_limit_bps": 8000},
    # priority groups (consumer_priority.py)
    {"ack_policy": "explicit", "priority_policy": "overflow", "priority_groups": ["g"]},
    {"ack_policy": "explicit", "priority_policy": "pinned_client", "priority_groups": ["g", "h"],
     "priority_timeout": S},
    {"ack_policy": "explicit", "priority_policy": "prioritized", "priority_groups": ["g"]},
])
def test_consumer_settings_jetraft_acts_on_pass(fields):
    cfg = consumer(**fields)
    assert cfg.unsupported() is None
    cfg.check_supported()


@pytest.mark.parametrize(("text", "expected"), [
    ("", (0, False)), ("never", (-1, False)), ("Never", (-1, False)), ("5", (5, False)),
    ("1s", (1, False)), ("1.9s", (1, False)), ("2m", (120, False)), ("00", (0, False)),
    ("0", (0, True)), ("999ms", (0, True)), ("-1s", (0, True)), ("-5", (0, True)), ("+5", (0, True)),
    ("5 s", (0, True)), ("five", (0, True)), ("١", (0, True)),
    ("18446744073709551615", (0, True)),            # wraps to -1 as Go's parseInt64 does
    ("9223372036854775807", (9223372036854775807, False)),
])
def test_parse_message_ttl_reads_as_nats_server(text, expected):
    assert parse_message_ttl(text) == expected
