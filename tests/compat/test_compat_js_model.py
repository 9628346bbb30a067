"""Pin jetraft's JetStream data model to what the real nats-server answers.

Each case sends a raw ``$JS.API`` request to nats-server and compares the reply with
what ``jetraft.jetstream.model``/``errors`` compute for the same input: error triples,
and the defaulted stream/consumer config.  Only nats-server is started (the model is
pure); the test is skipped when the binary is missing.
"""

from __future__ import annotations

import json

import pytest
from compat_support import connect, run

import servers
from jetraft.jetstream import errors as E
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import ConsumerConfig, StreamConfig

pytestmark = pytest.mark.skipif(not servers.binary("nats-server").exists(), reason="nats-server not installed")


def _model_error(fn) -> dict:
    try:
        fn()
    except JSApiError as err:
        return err.to_json()
    raise AssertionError("the model accepted the config")


def _stream_error(body: dict, name: str) -> dict:
    def go():
        cfg = StreamConfig.decode(body)
        cfg.create_request_checks(name)
        cfg.checked(pedantic=cfg.pedantic)

    return _model_error(go)


STREAM_CASES = [
    ("S1", {"name": "S1", "subjects": ["a.>", "a.b"]}),
    ("S2", {"name": "S2", "max_age": -1}),
    ("S3", {"name": "S3", "max_age": 5}),
    ("S4", {"name": "S4", "subjects": ["x", "x"]}),
    ("S5", {"name": "S5", "subjects": ["$JS.API.>"]}),
    ("S6", {"name": "S6", "retention": "bogus"}),
    ("S7", {"name": "S7", "bogus_field": 1}),
    ("S8", {"name": "OTHER"}),
    ("S9", {"name": "S9", "num_replicas": -1}),
    ("S10", {"name": "S10", "sealed": True}),
    ("S11", {"name": "S11", "deny_purge": True, "allow_rollup_hdrs": True}),
    ("S12", {"name": "S12", "subjects": ["a..b"]}),
    ("S13", {"name": "S13", "discard_new_per_subject": True}),
    ("S14", {"name": "S14", "max_age": 1_000_000_000, "duplicate_window": 2_000_000_000}),
    ("S15", {"name": "S15", "compression": "zip"}),
]

CONSUMER_CASES = [
    {"ack_policy": "explicit", "deliver_policy": "by_start_sequence"},
    {"ack_policy": "explicit", "deliver_policy": "last_per_subject"},
    {"ack_policy": "explicit", "backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 1},
    {"ack_policy": "explicit", "filter_subject": "m.a", "filter_subjects": ["m.b"]},
    {"ack_policy": "explicit", "filter_subjects": ["m.>", "m.a"]},
    {"ack_policy": "explicit", "idle_heartbeat": 1_000_000_000},
    {"ack_policy": "explicit", "deliver_subject": "d.*"},
    {"ack_policy": "explicit", "deliver_subject": "m.x"},
    {"ack_policy": "explicit", "flow_control": True, "deliver_subject": "dd"},
    {"ack_policy": "none", "max_ack_pending": 5, "deliver_subject": "dx"},
    {"ack_policy": "explicit", "deliver_policy": "all", "opt_start_seq": 3},
    {"ack_policy": "bogus"},
]


def test_js_model_errors_match_nats_server(start_server, server_kind, tmp_path):
    if server_kind != "nats-server":
        pytest.skip("pins the pure model to nats-server; runs once")
    srv = start_server(f"jetstream {{ store_dir: '{tmp_path / 'js'}' }}", kind="nats-server")

    async def scenario():
        nc = await connect(srv.url)

        async def api(subject: str, body) -> dict:
            payload = b"" if body is None else json.dumps(body).encode()
            msg = await nc.request(subject, payload, timeout=5)
            return json.loads(msg.data)

        # Streams: every invalid create answers exactly what the model raises.
        for name, body in STREAM_CASES:
            reply = await api(f"$JS.API.STREAM.CREATE.{name}", body)
            assert reply["type"] == E.STREAM_CREATE_RESPONSE
            assert reply.get("error") == _stream_error(body, name), (name, body)

        # Defaults: a minimal stream's config equals the model's (bar server metadata).
        reply = await api("$JS.API.STREAM.CREATE.M", {"name": "M", "subjects": ["m.>"]})
        assert "error" not in reply, reply
        got = reply["config"]
        meta = got.pop("metadata")
        model = StreamConfig.from_json({"name": "M", "subjects": ["m.>"]})
        assert got == model.to_json()
        assert meta == model.to_response_json(meta["_nats.ver"])["metadata"] | {"_nats.req.level": "0"}
        assert set(reply["state"]) == {"messages", "bytes", "first_seq", "first_ts", "last_seq", "last_ts",
                                       "consumer_count"}

        # A second stream on overlapping subjects; a missing stream.
        reply = await api("$JS.API.STREAM.CREATE.M2", {"name": "M2", "subjects": ["m.a"]})
        assert reply["error"] == E.subjects_overlap().to_json()
        reply = await api("$JS.API.STREAM.INFO.NOPE", None)
        assert reply["error"] == E.stream_not_found().to_json()
        reply = await api("$JS.API.CONSUMER.CREATE.NOPE.c", {"stream_name": "NOPE", "config": {"name": "c"}})
        assert reply["error"] == E.stream_not_found().to_json()
        reply = await api("$JS.API.CONSUMER.INFO.M.nope", None)
        assert reply["error"] == E.consumer_not_found().to_json()

        # Consumers: defaults and refusals.
        stream = StreamConfig.from_json({"name": "M", "subjects": ["m.>"]})
        reply = await api("$JS.API.CONSUMER.CREATE.M.dur", {"stream_name": "M",
                                                             "config": {"durable_name": "dur",
                                                                        "ack_policy": "explicit"}})
        assert "error" not in reply, reply
        got = reply["config"]
        got.pop("metadata")
        want = ConsumerConfig.from_json({"durable_name": "dur", "ack_policy": "explicit"}, stream).to_json()
        assert got == want
        for i, cfg in enumerate(CONSUMER_CASES):
            name = f"c{i}"
            body = {"stream_name": "M", "config": {"name": name, **cfg}}
            reply = await api(f"$JS.API.CONSUMER.CREATE.M.{name}", body)
            expected = _model_error(lambda: ConsumerConfig.decode(body["config"]).checked(stream))
            assert reply.get("error") == expected, (cfg, reply)
        await nc.close()

    run(scenario)
