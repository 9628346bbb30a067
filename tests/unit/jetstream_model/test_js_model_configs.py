"""jetraft.jetstream.model: defaults, validation errors, JSON shape, nats-py round trips."""

from __future__ import annotations

import dataclasses

import pytest
from nats.js import api

from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import (
    AccountInfo,
    ClusterInfo,
    ConsumerConfig,
    ConsumerInfo,
    PeerInfo,
    PubAck,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
    StreamState,
)
from jetraft.gofmt import format_time, parse_time

S = 10**9

#: nats-server 2.15's config for STREAM.CREATE {"name":"M","subjects":["m.>"]} (verified in the compat test).
MINIMAL_STREAM = {
    "name": "M", "subjects": ["m.>"], "retention": "limits", "max_consumers": -1, "max_msgs": -1,
    "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": -1, "max_msg_size": -1, "discard": "old",
    "storage": "file", "num_replicas": 1, "duplicate_window": 120 * S, "compression": "none",
    "allow_direct": False, "mirror_direct": False, "sealed": False, "deny_delete": False, "deny_purge": False,
    "allow_rollup_hdrs": False, "consumer_limits": {}, "allow_msg_ttl": False,
}


def err(fn) -> tuple[int, int, str]:
    with pytest.raises(JSApiError) as info:
        fn()
    e = info.value
    return e.code, e.err_code, e.description


def test_js_model_stream_defaults():
    assert StreamConfig.from_json({"name": "M", "subjects": ["m.>"]}).to_json() == MINIMAL_STREAM
    cfg = StreamConfig.from_json({"name": "ORDERS"})
    assert cfg.subjects == ["ORDERS"]
    assert StreamConfig.from_json({"name": "A", "max_age": 30 * S}).duplicate_window == 30 * S
    assert StreamConfig.from_json({"name": "A", "max_msgs": -7}).max_msgs == -1
    assert StreamConfig.from_json({"name": "A", "placement": {}}).placement is None


def test_js_model_nats_py_round_trip():
    sent = api.StreamConfig(name="S", subjects=["a.>"], max_age=60, storage=api.StorageType.MEMORY).as_dict()
    cfg = StreamConfig.from_json(sent)
    back = api.StreamConfig.from_response(cfg.to_json())
    assert back.name == "S" and back.max_age == 60 and back.storage == "memory" and back.duplicate_window == 60
    info = StreamInfo(config=cfg, created=parse_time("2026-11-22T03:54:36.123456789Z"), ts=1)
    parsed = api.StreamInfo.from_response(info.to_json())
    assert parsed.created.microsecond == 123456 and parsed.state.messages == 0
    csent = api.ConsumerConfig(durable_name="d", ack_wait=5, backoff=[5, 10], max_deliver=3).as_dict()
    ccfg = ConsumerConfig.from_json(csent, cfg)
    assert (ccfg.ack_wait, ccfg.max_ack_pending, ccfg.max_waiting, ccfg.name) == (5 * S, 1000, 512, "d")
    cinfo = ConsumerInfo(stream_name="S", name="d", created=5, config=ccfg,
                         delivered=SequenceInfo(1, 2, last_active=7),
                         cluster=ClusterInfo(name="c", leader="n1", replicas=[PeerInfo(name="n2", current=True)]))
    parsed = api.ConsumerInfo.from_response(cinfo.to_json())
    assert parsed.config.backoff == [5.0, 10.0] and parsed.delivered.stream_seq == 2
    assert parsed.cluster.replicas[0].name == "n2"
    acct = api.AccountInfo.from_response(AccountInfo().to_json())
    assert acct.limits.max_streams == -1 and acct.api.level == 5
    assert api.PubAck.from_response(PubAck("S", 3).to_json()) == api.PubAck(stream="S", seq=3)


def test_js_model_to_json_emits_only_keys_nats_py_knows():
    # Every key of a default StreamConfig/ConsumerConfig is a field nats-py reads.
    py_stream = {f.name for f in dataclasses.fields(api.StreamConfig)}
    assert set(StreamConfig.from_json({"name": "A"}).to_json()) <= py_stream
    py_consumer = {f.name for f in dataclasses.fields(api.ConsumerConfig)}
    full = ConsumerConfig.from_json({"durable_name": "d", "ack_policy": "explicit"}, StreamConfig.from_json({"name": "A"}))
    assert set(full.to_json()) <= py_consumer
    assert set(StreamState().to_json()) <= {f.name for f in dataclasses.fields(api.StreamState)} | {"first_ts", "last_ts"}


def test_js_model_time_format():
    assert format_time(None) == "0001-01-01T00:00:00Z"
    assert format_time(0) == "1970-01-01T00:00:00Z"
    assert format_time(1_795_000_000 * S + 120_000_000) == "2026-11-18T11:06:40.12Z"
    assert parse_time("2026-11-22T03:54:36.123456789Z") % S == 123456789
    assert parse_time("2026-11-22T04:54:36+01:00") == parse_time("2026-11-22T03:54:36Z")
    assert parse_time("0001-01-01T00:00:00Z") is None


BAD_STREAMS = [
    ({"name": "a.b"}, (500, 10052, "stream name is required and can not contain '.', '*', '>', '\\', '/'")),
    ({"name": ""}, (500, 10052, "stream name is required and can not contain '.', '*', '>', '\\', '/'")),
    ({"name": "x" * 256}, (500, 10052, "stream name is too long, maximum allowed is 255")),
    ({"name": "A", "num_replicas": 6}, (500, 10052, "maximum replicas is 5")),
    ({"name": "A", "num_replicas": -1}, (400, 10133, "replicas count cannot be negative")),
    ({"name": "A", "max_age": -1}, (500, 10052, "max age can not be negative")),
    ({"name": "A", "max_age": 5}, (500, 10052, "max age needs to be >= 100ms")),
    ({"name": "A", "duplicate_window": 5}, (500, 10052, "duplicates window needs to be >= 100ms")),
    ({"name": "A", "max_age": S, "duplicate_window": 2 * S},
     (500, 10052, "duplicates window can not be larger then max age")),
    ({"name": "A", "subjects": ["a.>", "a.b"]}, (500, 10052, 'subject "a.>" overlaps with "a.b"')),
    ({"name": "A", "subjects": ["x", "x"]}, (500, 10052, 'subject "x" overlaps with "x"')),
    ({"name": "A", "subjects": ["a..b"]}, (500, 10052, "invalid subject")),
    ({"name": "A", "subjects": [">"]}, (500, 10052, "capturing all subjects requires no-ack to be true")),
    ({"name": "A", "subjects": ["$JS.API.>"]},
     (500, 10052, "subjects that overlap with jetstream api require no-ack to be true")),
    ({"name": "A", "subjects": ["$SYS.>"]},
     (500, 10052, "subjects that overlap with system api require no-ack to be true")),
    ({"name": "A", "deny_purge": True, "allow_rollup_hdrs": True},
     (500, 10052, "roll-ups require the purge permission")),
    ({"name": "A", "discard_new_per_subject": True},
     (500, 10052, "discard new per subject requires discard new policy to be set")),
    ({"name": "A", "placement": {"preferred": "n1"}}, (500, 10052, "preferred server not permitted in placement")),
    ({"name": "A", "mirror": {"name": "B"}, "subjects": ["q"]}, (400, 10034, "stream mirrors can not contain subjects")),
    ({"name": "A", "retention": "bogus"}, (400, 10025, 'invalid JSON: can not unmarshal "\\"bogus\\""')),
    ({"name": "A", "compression": "zip"}, (400, 10025, "invalid JSON: unknown compression algorithm")),
    ({"name": "A", "bogus": 1}, (400, 10025, 'invalid JSON: json: unknown field "bogus"')),
    ({"name": "A", "max_msgs": "x"}, (400, 10025, "invalid JSON: json: cannot unmarshal string into Go struct "
                                                  "field StreamConfigRequest.max_msgs of type int64")),
    ({"name": "A", "max_msgs": -9, "pedantic": True}, (400, 10157, "pedantic mode: max_msgs must be set to -1")),
]


@pytest.mark.parametrize(("body", "expected"), BAD_STREAMS)
def test_js_model_stream_refusals(body, expected):
    assert err(lambda: StreamConfig.from_json(body)) == expected


def test_js_model_stream_create_request_checks():
    assert err(lambda: StreamConfig.decode({"name": "B"}).create_request_checks("A")) == (
        400, 10056, "stream name in subject does not match request")
    assert err(lambda: StreamConfig.decode({"name": "A", "sealed": True}).create_request_checks("A")) == (
        500, 10052, "stream configuration for create can not be sealed")


def test_js_model_stream_update_check():
    old = StreamConfig.from_json({"name": "A", "deny_purge": True})
    ok = StreamConfig.update_check(old, StreamConfig.decode({"name": "A", "deny_purge": True, "max_msgs": 5}))
    assert ok.max_msgs == 5
    cases = [
        ({"name": "B"}, "stream configuration name must match original"),
        ({"name": "A", "deny_purge": True, "storage": "memory"}, "stream configuration update can not change storage type"),
        ({"name": "A", "deny_purge": True, "retention": "workqueue"},
         "stream configuration update can not change retention policy to/from workqueue"),
        ({"name": "A"}, "stream configuration update can not cancel deny purge"),
    ]
    for body, msg in cases:
        assert err(lambda: StreamConfig.update_check(old, StreamConfig.decode(body))) == (500, 10052, msg)
    assert err(lambda: StreamConfig.update_check(old, StreamConfig.decode({"name": "A", "deny_purge": True,
                                                                             "num_replicas": 3}))) == (
        500, 10074, "replicas > 1 not supported in non-clustered mode")
    sealed = StreamConfig.update_check(old, StreamConfig.decode({"name": "A", "deny_purge": True, "sealed": True}))
    assert (sealed.discard, sealed.deny_delete) == ("new", True)


WQ = StreamConfig.from_json({"name": "W", "subjects": ["w.>"], "retention": "workqueue"})
M = StreamConfig.from_json({"name": "M", "subjects": ["m.>"]})

BAD_CONSUMERS = [
    ({"durable_name": "a.b"}, M, (500, 10052, "consumer durable name can not contain '.', '*', '>', '\\', '/'")),
    ({"num_replicas": 3}, M, (400, 10126, "consumer config replica count exceeds parent stream")),
    ({"ack_policy": "explicit", "ack_wait": -1}, M, (400, 10183, "consumer ack wait needs to be positive")),
    ({"ack_policy": "explicit", "backoff": [S, 2 * S], "max_deliver": 1}, M,
     (400, 10116, "max deliver is required to be > length of backoff values")),
    ({"deliver_subject": "d.*"}, M, (400, 10079, "consumer deliver subject has wildcards")),
    ({"deliver_subject": "m.x"}, M, (400, 10081, "consumer deliver subject forms a cycle")),
    ({"deliver_subject": "dx", "max_ack_pending": 5}, M,
     (400, 10082, "consumer requires ack policy for max ack pending")),
    ({"deliver_subject": "dx", "idle_heartbeat": 50_000_000}, M,
     (400, 10083, "consumer idle heartbeat needs to be >= 100ms")),
    ({}, WQ, (400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream")),
    ({"idle_heartbeat": S}, M, (400, 10088, "consumer idle heartbeat requires a push based consumer")),
    ({"max_expires": 10}, M, (400, 10115, "consumer max request expires needs to be >= 1ms")),
    ({"filter_subject": "m.a", "filter_subjects": ["m.b"]}, M,
     (400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified")),
    ({"filter_subjects": ["m.>", "m.a"]}, M, (400, 10138, "consumer subject filters cannot overlap")),
    ({"filter_subjects": [""]}, M, (400, 10139, "consumer filter in FilterSubjects cannot be empty")),
    ({"deliver_policy": "by_start_sequence"}, M,
     (400, 10094, "consumer delivery policy is deliver by start sequence, but optional start sequence is not set")),
    ({"opt_start_seq": 3}, M,
     (400, 10094, "consumer delivery policy is deliver all, but optional start sequence is also set")),
    ({"deliver_policy": "last_per_subject"}, M,
     (400, 10094, "consumer delivery policy is deliver last per subject, but optional filter subject is not set")),
    ({"deliver_subject": "dx", "flow_control": True}, M,
     (400, 10108, "consumer with flow control also needs heartbeats")),
    ({"name": "a", "durable_name": "b"}, M,
     (400, 10132, "Consumer Durable and Name have to be equal if both are provided")),
    ({"priority_groups": ["g"]}, M, (400, 10196, "consumer can not have priority groups when policy is none")),
    ({"ack_policy": "bogus"}, M, (400, 10025, 'invalid JSON: can not unmarshal "\\"bogus\\""')),
]


@pytest.mark.parametrize(("body", "stream", "expected"), BAD_CONSUMERS)
def test_js_model_consumer_refusals(body, stream, expected):
    assert err(lambda: ConsumerConfig.from_json(body, stream)) == expected


def test_js_model_consumer_defaults():
    c = ConsumerConfig.from_json({"ack_policy": "explicit"}, M)
    assert (c.ack_wait, c.max_deliver, c.max_ack_pending, c.max_waiting) == (30 * S, -1, 1000, 512)
    push = ConsumerConfig.from_json({"deliver_subject": "dx"}, M)
    assert (push.max_waiting, push.max_ack_pending, push.ack_wait) == (0, 0, 0)
    j = push.to_json()
    assert j["deliver_policy"] == "all" and j["ack_policy"] == "none" and "ack_wait" not in j
    limited = StreamConfig.from_json({"name": "L", "consumer_limits": {"max_ack_pending": 10}})
    assert ConsumerConfig.from_json({"ack_policy": "explicit"}, limited).max_ack_pending == 10
    assert err(lambda: ConsumerConfig.from_json({"ack_policy": "explicit", "max_ack_pending": 20}, limited)) == (
        400, 10121, "consumer max ack pending exceeds system limit of 10")
