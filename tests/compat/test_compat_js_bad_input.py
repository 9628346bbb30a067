"""Bad input on the JetStream API: jetraft must answer exactly as nats-server does, and lose nothing.

Every case sends a raw request to a ``$JS.API`` subject (or publishes to a stream
subject) on a server whose stream ``S`` already holds three messages, compares the reply
with nats-server's (pinned below: the nats-server half of each test checks the pin),
then checks that ``S`` still holds exactly those three messages, byte for byte, and
still takes a publish.

nats-server's JSON errors come from Go's ``encoding/json``: their descriptions (offsets,
Go type names) are part of what a client sees, so they are compared to the letter.
"""

from __future__ import annotations

import base64
import json

import nats.errors
import pytest
from compat_support import RawClient, connect, run

STREAM_CONFIG = {"name": "S", "subjects": ["s.>"], "max_msg_size": 1000, "storage": "file"}
STORED = [("s.a", b"first"), ("s.b", b"second \x00\xff binary"), ("s.a", b"third")]

T = "io.nats.jetstream.api.v1."
BAD_NAME = "stream name is required and can not contain '.', '*', '>', '\\', '/'"
BAD_CONSUMER_NAME = "consumer name can not contain '.', '*', '>', '\\', '/'"
# the "total"/"offset"/"limit" fields nats-server puts even into paged responses' errors
PAGED = {"total": 0, "offset": 0, "limit": 0}


def err(rtype: str, code: int, err_code: int, description: str, **extra) -> dict:
    """nats-server's error reply: {"type", "error": {code, err_code, description}, ...}."""
    return {"type": T + rtype, "error": {"code": code, "err_code": err_code,
                                         "description": description}, **extra}


def bad_json(rtype: str, detail: str, **extra) -> dict:
    return err(rtype, 400, 10025, "invalid JSON: " + detail, **extra)


def ccreate(config: dict, stream: str = "S") -> bytes:
    """A CONSUMER.CREATE body."""
    return json.dumps({"stream_name": stream, "config": config}).encode()


EXPLICIT = {"ack_policy": "explicit"}
SC, CC = "stream_create_response", "consumer_create_response"
NOT_MATCHING = err(SC, 400, 10056, "stream name in subject does not match request")

#: (id, subject, body, nats-server's exact reply)
ERROR_CASES = [
    # malformed JSON
    ("stream-create-not-json", "$JS.API.STREAM.CREATE.T", b"{not json",
     bad_json(SC, "invalid character 'n' looking for beginning of object key string at offset 2")),
    ("stream-create-trailing-garbage", "$JS.API.STREAM.CREATE.T", b'{"name":"T","subjects":["t"]} trailing',
     bad_json(SC, "invalid character 'a' in literal true (expecting 'u') at offset 33")),
    ("stream-create-not-utf8", "$JS.API.STREAM.CREATE.T", b"\xff\xfe",
     bad_json(SC, "invalid character '\\xff' looking for beginning of value at offset 1")),
    ("stream-info-not-json", "$JS.API.STREAM.INFO.S", b"{bad",
     bad_json("stream_info_response", "invalid character 'b' looking for beginning of object key string at offset 2", **PAGED)),
    ("stream-update-not-json", "$JS.API.STREAM.UPDATE.S", b"{bad",
     bad_json("stream_update_response", "invalid character 'b' looking for beginning of object key string at offset 2")),
    ("stream-purge-not-json", "$JS.API.STREAM.PURGE.S", b"{bad",
     bad_json("stream_purge_response", "invalid character 'b' looking for beginning of object key string at offset 2", purged=0)),
    ("stream-names-not-json", "$JS.API.STREAM.NAMES", b"{bad",
     bad_json("stream_names_response", "invalid character 'b' looking for beginning of object key string at offset 2", **PAGED, streams=None)),
    ("stream-list-not-json", "$JS.API.STREAM.LIST", b"{bad",
     bad_json("stream_list_response", "invalid character 'b' looking for beginning of object key string at offset 2", **PAGED, streams=[])),
    ("msg-get-not-json", "$JS.API.STREAM.MSG.GET.S", b"{bad",
     bad_json("stream_msg_get_response", "invalid character 'b' looking for beginning of object key string at offset 2")),
    ("consumer-create-not-json", "$JS.API.CONSUMER.CREATE.S", b"{bad",
     bad_json(CC, "invalid character 'b' looking for beginning of object key string at offset 2")),
    ("consumer-create-control-char", "$JS.API.CONSUMER.CREATE.S", b'{"stream_name":"S","config":{"name":"a\tb"}}',
     bad_json(CC, "invalid character '\\t' in string at offset 39")),
    # JSON that is not an object
    ("stream-create-array", "$JS.API.STREAM.CREATE.T", b"[1,2]",
     bad_json(SC, "json: cannot unmarshal array into Go value of type server.StreamConfigRequest")),
    ("stream-create-string", "$JS.API.STREAM.CREATE.T", b'"T"',
     bad_json(SC, "json: cannot unmarshal string into Go value of type server.StreamConfigRequest")),
    ("stream-create-number", "$JS.API.STREAM.CREATE.T", b"42",
     bad_json(SC, "json: cannot unmarshal number into Go value of type server.StreamConfigRequest")),
    # nats-server: `null` and an empty body decode to an empty config, whose name ""
    # then fails the subject check
    ("stream-create-null", "$JS.API.STREAM.CREATE.T", b"null", NOT_MATCHING),
    ("stream-create-empty", "$JS.API.STREAM.CREATE.T", b"", NOT_MATCHING),
    ("stream-create-empty-object", "$JS.API.STREAM.CREATE.T", b"{}", NOT_MATCHING),
    # unknown fields (nats-server decodes API requests strictly)
    ("stream-create-unknown-field", "$JS.API.STREAM.CREATE.T", b'{"name":"T","subjects":["t"],"bogus":1}',
     bad_json(SC, 'json: unknown field "bogus"')),
    ("stream-create-nested-config", "$JS.API.STREAM.CREATE.T", b'{"name":"T","config":{}}',
     bad_json(SC, 'json: unknown field "config"')),
    ("msg-get-unknown-field", "$JS.API.STREAM.MSG.GET.S", b'{"seq":1,"bogus":true}',
     bad_json("stream_msg_get_response", 'json: unknown field "bogus"')),
    ("purge-unknown-field", "$JS.API.STREAM.PURGE.S", b'{"bogus":1}',
     bad_json("stream_purge_response", 'json: unknown field "bogus"', purged=0)),
    ("consumer-create-unknown-field", "$JS.API.CONSUMER.CREATE.S", ccreate({**EXPLICIT, "bogus": 1}),
     bad_json(CC, 'json: unknown field "bogus"')),
    # wrong field types
    ("stream-subjects-string", "$JS.API.STREAM.CREATE.T", b'{"name":"T","subjects":"t"}',
     bad_json(SC, "json: cannot unmarshal string into Go struct field StreamConfigRequest.subjects of type []string")),
    ("stream-max-msgs-string", "$JS.API.STREAM.CREATE.T", b'{"name":"T","max_msgs":"ten"}',
     bad_json(SC, "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64")),
    ("stream-max-age-float", "$JS.API.STREAM.CREATE.T", b'{"name":"T","max_age":1.5}',
     bad_json(SC, "json: cannot unmarshal number 1.5 into Go struct field StreamConfigRequest.max_age of type time.Duration")),
    ("stream-replicas-string", "$JS.API.STREAM.CREATE.T", b'{"name":"T","num_replicas":"1"}',
     bad_json(SC, "json: cannot unmarshal string into Go struct field StreamConfigRequest.num_replicas of type int")),
    # nats-server: enum fields have their own (terser) message
    ("stream-storage-unknown", "$JS.API.STREAM.CREATE.T", b'{"name":"T","storage":"disk"}',
     bad_json(SC, 'can not unmarshal "\\"disk\\""')),
    ("consumer-ack-policy-number", "$JS.API.CONSUMER.CREATE.S", ccreate({"ack_policy": 7}),
     bad_json(CC, 'can not unmarshal "7"')),
    ("msg-get-seq-string", "$JS.API.STREAM.MSG.GET.S", b'{"seq":"one"}',
     bad_json("stream_msg_get_response", "json: cannot unmarshal string into Go struct field JSApiMsgGetRequest.seq of type uint64")),
    ("msg-get-seq-negative", "$JS.API.STREAM.MSG.GET.S", b'{"seq":-1}',
     bad_json("stream_msg_get_response", "json: cannot unmarshal number -1 into Go struct field JSApiMsgGetRequest.seq of type uint64")),
    ("msg-delete-seq-string", "$JS.API.STREAM.MSG.DELETE.S", b'{"seq":"x"}',
     bad_json("stream_msg_delete_response", "json: cannot unmarshal string into Go struct field JSApiMsgDeleteRequest.seq of type uint64")),
    ("purge-keep-string", "$JS.API.STREAM.PURGE.S", b'{"filter":"zz","keep":"x"}',
     bad_json("stream_purge_response", "json: cannot unmarshal string into Go struct field JSApiStreamPurgeRequest.keep of type uint64", purged=0)),
    ("stream-names-offset-string", "$JS.API.STREAM.NAMES", b'{"offset":"x"}',
     bad_json("stream_names_response", "json: cannot unmarshal string into Go struct field JSApiStreamNamesRequest.offset of type int", **PAGED, streams=None)),
    # invalid stream names (nats-server answers these with code 500)
    ("stream-name-star", "$JS.API.STREAM.CREATE.a*b", b'{"name":"a*b"}', err(SC, 500, 10052, BAD_NAME)),
    ("stream-name-gt", "$JS.API.STREAM.CREATE.a>b", b'{"name":"a>b"}', err(SC, 500, 10052, BAD_NAME)),
    ("stream-name-only-star", "$JS.API.STREAM.CREATE.*", b'{"name":"*"}', err(SC, 500, 10052, BAD_NAME)),
    ("stream-name-only-gt", "$JS.API.STREAM.CREATE.>", b'{"name":">"}', err(SC, 500, 10052, BAD_NAME)),
    ("stream-name-backslash", "$JS.API.STREAM.CREATE.a\\b", b'{"name":"a\\\\b"}',
     err(SC, 400, 10128, "Stream name can not contain path separators")),
    ("stream-name-256", "$JS.API.STREAM.CREATE." + "x" * 256, json.dumps({"name": "x" * 256}).encode(),
     err(SC, 500, 10052, "stream name is too long, maximum allowed is 255")),
    ("stream-name-space", "$JS.API.STREAM.CREATE.ab", b'{"name":"a b"}', NOT_MATCHING),
    ("stream-subject-space", "$JS.API.STREAM.CREATE.T", b'{"name":"T","subjects":["a b"]}',
     err(SC, 500, 10052, "invalid subject")),
    # subject in the request != name in the body
    ("stream-create-other-name", "$JS.API.STREAM.CREATE.T", b'{"name":"U"}', NOT_MATCHING),
    ("stream-create-existing-name-in-body", "$JS.API.STREAM.CREATE.T", b'{"name":"S"}', NOT_MATCHING),
    ("stream-create-duplicate-key", "$JS.API.STREAM.CREATE.T", b'{"name":"T","name":"U"}', NOT_MATCHING),
    ("stream-update-other-name", "$JS.API.STREAM.UPDATE.S", b'{"name":"T"}',
     err("stream_update_response", 400, 10056, "stream name in subject does not match request")),
    ("consumer-create-other-stream", "$JS.API.CONSUMER.CREATE.S", ccreate(EXPLICIT, stream="T"),
     err(CC, 400, 10056, "stream name in subject does not match request")),
    ("consumer-create-no-stream-name", "$JS.API.CONSUMER.CREATE.S", b'{"config":{"ack_policy":"explicit"}}',
     err(CC, 400, 10056, "stream name in subject does not match request")),
    # existing stream, other config
    ("stream-create-overlap", "$JS.API.STREAM.CREATE.T", b'{"name":"T","subjects":["s.>"]}',
     err(SC, 400, 10065, "subjects overlap with an existing stream")),
    ("stream-recreate-other-config", "$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["other"]}',
     err(SC, 400, 10058, "stream name already in use with a different configuration")),
    # consumer on a missing stream
    ("consumer-create-missing-stream", "$JS.API.CONSUMER.CREATE.NOPE", ccreate(EXPLICIT, stream="NOPE"),
     err(CC, 404, 10059, "stream not found")),
    ("consumer-create-named-missing-stream", "$JS.API.CONSUMER.CREATE.NOPE.C", ccreate({**EXPLICIT, "name": "C"}, "NOPE"),
     err(CC, 404, 10059, "stream not found")),
    ("durable-create-missing-stream", "$JS.API.CONSUMER.DURABLE.CREATE.NOPE.C",
     ccreate({**EXPLICIT, "durable_name": "C"}, "NOPE"), err(CC, 404, 10059, "stream not found")),
    # consumer name / durable mismatch
    ("consumer-durable-mismatch", "$JS.API.CONSUMER.CREATE.S.C", ccreate({**EXPLICIT, "durable_name": "D"}),
     err(CC, 400, 10017, "consumer name in subject does not match durable name in request")),
    ("consumer-name-and-durable-mismatch", "$JS.API.CONSUMER.CREATE.S.C",
     ccreate({**EXPLICIT, "name": "C", "durable_name": "D"}),
     err(CC, 400, 10017, "consumer name in subject does not match durable name in request")),
    ("durable-create-mismatch", "$JS.API.CONSUMER.DURABLE.CREATE.S.C", ccreate({**EXPLICIT, "durable_name": "D"}),
     err(CC, 400, 10017, "consumer name in subject does not match durable name in request")),
    ("ephemeral-subject-with-durable", "$JS.API.CONSUMER.CREATE.S", ccreate({**EXPLICIT, "durable_name": "D"}),
     err(CC, 400, 10020, "consumer expected to be ephemeral but a durable name was set in request")),
    ("consumer-filter-not-in-subject", "$JS.API.CONSUMER.CREATE.S.C.s.a",
     ccreate({**EXPLICIT, "name": "C", "filter_subject": "s.b"}),
     err(CC, 400, 10131, "Consumer create request did not match filtered subject from create subject")),
    ("consumer-create-extra-token", "$JS.API.CONSUMER.CREATE.S.C.extra", ccreate({**EXPLICIT, "name": "C"}),
     err(CC, 400, 10131, "Consumer create request did not match filtered subject from create subject")),
    # invalid consumer names
    ("consumer-name-star", "$JS.API.CONSUMER.CREATE.S.a*b", ccreate({**EXPLICIT, "name": "a*b"}),
     err(CC, 500, 10052, BAD_CONSUMER_NAME)),
    ("consumer-name-dot", "$JS.API.CONSUMER.CREATE.S", ccreate({**EXPLICIT, "name": "a.b"}),
     err(CC, 500, 10052, BAD_CONSUMER_NAME)),
    # nats-server: a space is refused with the same text, which does not mention spaces
    ("consumer-name-space", "$JS.API.CONSUMER.CREATE.S", ccreate({**EXPLICIT, "name": "a b"}),
     err(CC, 500, 10052, BAD_CONSUMER_NAME)),
    ("durable-name-too-long", "$JS.API.CONSUMER.DURABLE.CREATE.S." + "d" * 300,
     ccreate({**EXPLICIT, "durable_name": "d" * 300}),
     err(CC, 400, 10102, "consumer name is too long, maximum allowed is 255")),
    # missing things, and requests that must have no body
    ("stream-info-missing", "$JS.API.STREAM.INFO.NOPE", b"",
     err("stream_info_response", 404, 10059, "stream not found", **PAGED)),
    ("stream-delete-missing", "$JS.API.STREAM.DELETE.NOPE", b"",
     err("stream_delete_response", 404, 10059, "stream not found")),
    ("stream-delete-with-body", "$JS.API.STREAM.DELETE.S", b"{bad",
     err("stream_delete_response", 400, 10038, "expected an empty request payload")),
    ("msg-get-missing-stream", "$JS.API.STREAM.MSG.GET.NOPE", b'{"seq":1}',
     err("stream_msg_get_response", 404, 10059, "stream not found")),
    ("msg-get-no-seq", "$JS.API.STREAM.MSG.GET.S", b"{}",
     err("stream_msg_get_response", 400, 10003, "bad request")),
    ("msg-get-seq-and-subject", "$JS.API.STREAM.MSG.GET.S", b'{"seq":1,"last_by_subj":"s.a"}',
     err("stream_msg_get_response", 400, 10003, "bad request")),
    ("msg-get-beyond-last", "$JS.API.STREAM.MSG.GET.S", b'{"seq":99}',
     err("stream_msg_get_response", 404, 10037, "no message found")),
    # nats-server: deleting a sequence past the end is a 500 "stream store EOF"
    ("msg-delete-beyond-last", "$JS.API.STREAM.MSG.DELETE.S", b'{"seq":99}',
     err("stream_msg_delete_response", 500, 10057, "stream store EOF")),
    ("consumer-info-missing", "$JS.API.CONSUMER.INFO.S.NOPE", b"",
     err("consumer_info_response", 404, 10014, "consumer not found")),
    ("consumer-info-missing-stream", "$JS.API.CONSUMER.INFO.NOPE.C", b"",
     err("consumer_info_response", 404, 10059, "stream not found")),
    ("consumer-delete-missing", "$JS.API.CONSUMER.DELETE.S.NOPE", b"",
     err("consumer_delete_response", 404, 10014, "consumer not found")),
]

#: API subjects nobody answers on nats-server: the request times out (it is not a
#: no-responders 503: the server's $JS.API.> subscription takes it and stays silent).
SILENT_SUBJECTS = [
    "$JS.API.BOGUS",
    "$JS.API.STREAM.BOGUS",
    "$JS.API.STREAM.INFO",          # no stream name
    "$JS.API.STREAM.CREATE",        # no stream name
    "$JS.API.STREAM.CREATE.a.b",    # a name with a dot is two tokens: no such API
]


def js_config(tmp_path) -> str:
    return f'jetstream {{ store_dir: "{tmp_path / "store"}" }}'


async def api(nc, subject: str, body: bytes = b"", timeout: float = 5) -> dict:
    """Send one raw request and decode the JSON reply."""
    return json.loads((await nc.request(subject, body, timeout=timeout)).data)


async def seed(nc) -> None:
    """Create S and store STORED, checking each acknowledgement."""
    created = await api(nc, "$JS.API.STREAM.CREATE.S", json.dumps(STREAM_CONFIG).encode())
    assert "error" not in created, created
    for seq, (subject, data) in enumerate(STORED, 1):
        assert await api(nc, subject, data) == {"stream": "S", "seq": seq}


async def assert_intact(url: str, last_seq: int = len(STORED)) -> None:
    """S holds exactly STORED (first_seq 1, nothing lost, last sequence ``last_seq``) and
    still takes a publish."""
    nc = await connect(url)
    try:
        info = await api(nc, "$JS.API.STREAM.INFO.S")
        state = info["state"]
        n = len(STORED)
        assert (state["messages"], state["first_seq"], state["last_seq"]) == (n, 1, last_seq), state
        for seq, (subject, data) in enumerate(STORED, 1):
            got = await api(nc, "$JS.API.STREAM.MSG.GET.S", json.dumps({"seq": seq}).encode())
            msg = got["message"]
            assert (msg["seq"], msg["subject"], base64.b64decode(msg["data"])) == (seq, subject, data)
        assert await api(nc, "s.after", b"after") == {"stream": "S", "seq": last_seq + 1}
    finally:
        await nc.close()


def with_seeded_stream(start_server, tmp_path, body, last_seq: int = len(STORED)) -> None:
    """Start a JetStream server, seed S, run ``body(nc, url)``, then check S is intact."""
    srv = start_server(js_config(tmp_path))

    async def scenario():
        nc = await connect(srv.url)
        try:
            await seed(nc)
            await body(nc, srv.url)
        finally:
            await nc.close()
        await assert_intact(srv.url, last_seq)

    run(scenario, timeout=30)


@pytest.mark.parametrize(("subject", "body", "expected"), [c[1:] for c in ERROR_CASES],
                         ids=[c[0] for c in ERROR_CASES])
def test_error_reply_matches_nats_server(start_server, tmp_path, subject, body, expected):
    """The reply to a bad request is nats-server's, field for field; S is untouched."""

    async def case(nc, url):
        assert await api(nc, subject, body) == expected

    with_seeded_stream(start_server, tmp_path, case)


@pytest.mark.parametrize("subject", SILENT_SUBJECTS)
def test_unknown_api_subject_gets_no_reply(start_server, tmp_path, subject):
    """An API subject nats-server does not serve gets no reply at all (a timeout)."""

    async def case(nc, url):
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(subject, b'{"name":"a.b"}', timeout=0.5)

    with_seeded_stream(start_server, tmp_path, case)


def test_pull_request_for_missing_consumer_has_no_responders(start_server, tmp_path):
    """MSG.NEXT for a consumer that does not exist: nats-server has no responder (503)."""

    async def case(nc, url):
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("$JS.API.CONSUMER.MSG.NEXT.S.NOPE", b"1", timeout=2)

    with_seeded_stream(start_server, tmp_path, case)


def test_edge_names_nats_server_accepts(start_server, tmp_path):
    """A 255-character stream name is accepted; a consumer name in the subject wins over
    a different ``name`` in the body (nats-server creates the consumer "C", not "D")."""

    async def case(nc, url):
        long_name = "x" * 255
        created = await api(nc, "$JS.API.STREAM.CREATE." + long_name,
                            json.dumps({"name": long_name}).encode())
        assert created["type"] == T + SC
        assert (created["config"]["name"], created["config"]["subjects"]) == (long_name, [long_name])
        made = await api(nc, "$JS.API.CONSUMER.CREATE.S.C", ccreate({**EXPLICIT, "name": "D"}))
        assert made["type"] == T + CC
        assert (made["stream_name"], made["name"], made["config"]["name"]) == ("S", "C", "C")
        names = await api(nc, "$JS.API.CONSUMER.NAMES.S")
        assert names["consumers"] == ["C"]

    with_seeded_stream(start_server, tmp_path, case)


def test_msg_get_last_by_wildcard_subject(start_server, tmp_path):
    """nats-server answers last_by_subj with a wildcard: the last message matching it."""

    async def case(nc, url):
        got = await api(nc, "$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.*"}')
        msg = got["message"]
        assert got["type"] == T + "stream_msg_get_response"
        assert (msg["subject"], msg["seq"], base64.b64decode(msg["data"])) == ("s.a", 3, b"third")

    with_seeded_stream(start_server, tmp_path, case)


@pytest.mark.parametrize(("data", "headers"), [
    (b"x" * 1001, None),
    (b"x" * 990, {"A": "b"}),  # 990 + an 18-byte header block: headers count toward the limit
], ids=["payload", "payload+headers"])
def test_publish_above_max_msg_size(start_server, tmp_path, data, headers):
    """Above the stream's max_msg_size: nats-server's 10054 reply, with stream and seq 0."""

    async def case(nc, url):
        reply = await nc.request("s.big", data, headers=headers, timeout=5)
        assert json.loads(reply.data) == {
            "error": {"code": 400, "err_code": 10054, "description": "message size exceeds maximum allowed"},
            "stream": "S", "seq": 0}
        # at the limit it is stored (then removed again, so that S holds STORED only)
        at_limit = data[: 1000 - (18 if headers else 0)]
        assert await api(nc, "s.big", at_limit) == {"stream": "S", "seq": 4}
        purged = await api(nc, "$JS.API.STREAM.PURGE.S", b'{"filter":"s.big"}')
        assert purged == {"type": T + "stream_purge_response", "success": True, "purged": 1}

    with_seeded_stream(start_server, tmp_path, case, last_seq=4)


@pytest.mark.parametrize("control", [
    b"PUB s.a _INBOX.r 1048577\r\n",
    b"HPUB s.a _INBOX.r 12 1048589\r\n",
    b"PUB $JS.API.STREAM.CREATE.T _INBOX.r 1048577\r\n",
], ids=["pub", "hpub", "api-request"])
def test_above_max_payload_closes_the_connection(start_server, tmp_path, control):
    """Above max_payload (1 MiB) the connection gets nats-server's -ERR and is closed;
    the stream loses nothing."""

    async def case(nc, url):
        host, port = url.removeprefix("nats://").split(":")
        with RawClient((host, int(port))) as raw:
            raw.connect()
            raw.send(control)
            assert raw.read_until_closed() == b"-ERR 'Maximum Payload Violation'\r\n"
        assert nc.is_connected  # other connections are unaffected

    with_seeded_stream(start_server, tmp_path, case)


def test_many_bad_requests_on_one_connection(start_server, tmp_path):
    """Every bad request in a row on one connection: each answered as nats-server does,
    the API error counter in $JS.API.INFO counts them, and S is untouched."""

    async def case(nc, url):
        before = (await api(nc, "$JS.API.INFO"))["api"]
        mismatches = []
        for case_id, subject, body, expected in ERROR_CASES:
            got = await api(nc, subject, body)
            if got != expected:
                mismatches.append((case_id, got))
        assert mismatches == []
        after = (await api(nc, "$JS.API.INFO"))["api"]
        # nats-server does not count its "stream store EOF" reply to a MSG.DELETE past
        # the end as an API error; every other error reply counts
        assert after["errors"] - before["errors"] == len(ERROR_CASES) - 1
        assert after["total"] - before["total"] == len(ERROR_CASES) + 1  # + the INFO itself

    with_seeded_stream(start_server, tmp_path, case)
