"""Hostile JSON on the JetStream API: jetraft answers as nats-server 2.15.1 does and stays up.

Each case sends one raw request (nesting far past Go's 10,000 levels, numbers no Go
integer type holds) to a server that holds stream ``KV`` (``allow_direct``, one message
``kv.a`` = ``hi``) and a durable pull consumer ``c``, compares the reply with
nats-server's (pinned below: the nats-server half of each test checks the pin), then
checks that the server is still running and still answers an ordinary request. The
DIRECT.GET and STREAM.CREATE cases also run on a three-server cluster of each kind.

Where jetraft and nats-server differ on purpose (nesting between jetraft's 1,000 levels
and Go's 10,000), the test says so and pins both answers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import servers
from compat_support import RawClient
from polling import poll

T = "io.nats.jetstream.api.v1."
PAGED = {"total": 0, "offset": 0, "limit": 0}
DEEP = 50_000                      # far past Go's maxNestingDepth (10,000)
KV_CONFIG = {"name": "KV", "subjects": ["kv.>"], "allow_direct": True}
CONSUMER = {"stream_name": "KV", "config": {"durable_name": "c", "ack_policy": "explicit"}}
INBOX = "_INBOX.hostile"


def bad_json(rtype: str, detail: str, **extra: Any) -> dict:
    """nats-server's 10025 reply: ``invalid JSON: <detail>``."""
    return {"type": T + rtype, "error": {"code": 400, "err_code": 10025,
                                         "description": "invalid JSON: " + detail}, **extra}


def status(code: int, text: str) -> tuple[bytes, bytes]:
    """A status-only reply (headers, payload), as DIRECT.GET and pull requests answer."""
    return f"NATS/1.0 {code} {text}\r\n\r\n".encode(), b""


MALFORMED = status(408, "Malformed Request")
SC, MG, CC = "stream_create_response", "stream_msg_get_response", "consumer_create_response"
NAMES = "stream_names_response"


def unmarshal_number(literal: str, field: str, gotype: str) -> str:
    return f"json: cannot unmarshal number {literal} into Go struct field {field} of type {gotype}"


#: (id, subject, body, nats-server's reply: a JSON object, or (headers, payload) of a
#: status reply)
CASES: list[tuple[str, str, bytes, Any]] = [
    # a bad escape whose byte is not ASCII: Go quotes the backslash and that one byte (%#q)
    ("stream-create-escape-not-utf8", "$JS.API.STREAM.CREATE.T", b'"\\\x92',
     bad_json(SC, 'invalid escape sequence "\\\\\\x92" in string at offset 3')),
    ("stream-create-escape-multibyte", "$JS.API.STREAM.CREATE.T", b'{"name":"\\\xc3\xa9"}',
     bad_json(SC, 'invalid escape sequence "\\\\\\xc3" in string at offset 11')),
    ("stream-create-deep", "$JS.API.STREAM.CREATE.X", b"[" * DEEP,
     bad_json(SC, "exceeded max depth at offset 10001")),
    ("stream-create-deep-after-spaces", "$JS.API.STREAM.CREATE.X", b"  " + b"[" * DEEP,
     bad_json(SC, "exceeded max depth at offset 10003")),
    ("stream-create-deep-objects", "$JS.API.STREAM.CREATE.X", b'{"name":' + b'{"a":' * 10_001,
     bad_json(SC, "exceeded max depth at offset 50004")),
    ("stream-create-deep-second-value", "$JS.API.STREAM.CREATE.X",
     b'{"name":"X","subjects":["x"]} ' + b"[" * DEEP, bad_json(SC, "exceeded max depth at offset 10031")),
    ("stream-create-metadata-600-deep", "$JS.API.STREAM.CREATE.X",
     b'{"name":"X","metadata":' + b"[" * 600 + b"]" * 600 + b"}",
     bad_json(SC, "json: cannot unmarshal array into Go struct field StreamConfigRequest.metadata "
                  "of type map[string]string")),
    ("stream-create-max-msgs-1e999", "$JS.API.STREAM.CREATE.X", b'{"name":"X","max_msgs":1e999}',
     bad_json(SC, unmarshal_number("1e999", "StreamConfigRequest.max_msgs", "int64"))),
    ("stream-create-mirror-start-1e999", "$JS.API.STREAM.CREATE.X",
     b'{"name":"X","mirror":{"name":"KV","opt_start_seq":1e999}}',
     bad_json(SC, unmarshal_number("1e999", "StreamConfigRequest.mirror.opt_start_seq", "uint64"))),
    ("stream-create-source-start-negative", "$JS.API.STREAM.CREATE.X",
     b'{"name":"X","sources":[{"name":"KV","opt_start_seq":-1}]}',
     bad_json(SC, unmarshal_number("-1", "StreamConfigRequest.sources.0.opt_start_seq", "uint64"))),
    ("stream-create-limits-1e999", "$JS.API.STREAM.CREATE.X",
     b'{"name":"X","consumer_limits":{"max_ack_pending":1e999}}',
     bad_json(SC, unmarshal_number("1e999", "StreamConfigRequest.consumer_limits.max_ack_pending", "int"))),
    ("stream-names-deep", "$JS.API.STREAM.NAMES", b"[" * DEEP,
     bad_json(NAMES, "exceeded max depth at offset 10001", **PAGED, streams=None)),
    ("stream-names-offset-1e999", "$JS.API.STREAM.NAMES", b'{"offset":1e999}',
     bad_json(NAMES, unmarshal_number("1e999", "JSApiStreamNamesRequest.offset", "int"), **PAGED,
              streams=None)),
    ("stream-names-offset-20-digits", "$JS.API.STREAM.NAMES", b'{"offset":99999999999999999999}',
     bad_json(NAMES, unmarshal_number("99999999999999999999", "JSApiStreamNamesRequest.offset", "int"),
              **PAGED, streams=None)),
    ("stream-names-offset-past-int64", "$JS.API.STREAM.NAMES", b'{"offset":9223372036854775808}',
     bad_json(NAMES, unmarshal_number("9223372036854775808", "JSApiStreamNamesRequest.offset", "int"),
              **PAGED, streams=None)),
    ("stream-names-offset-nan", "$JS.API.STREAM.NAMES", b'{"offset":NaN}',
     bad_json(NAMES, "invalid character 'N' looking for beginning of value at offset 11", **PAGED,
              streams=None)),
    ("msg-get-seq-1e999", "$JS.API.STREAM.MSG.GET.KV", b'{"seq":1e999}',
     bad_json(MG, unmarshal_number("1e999", "JSApiMsgGetRequest.seq", "uint64"))),
    ("msg-get-seq-past-uint64", "$JS.API.STREAM.MSG.GET.KV", b'{"seq":18446744073709551616}',
     bad_json(MG, unmarshal_number("18446744073709551616", "JSApiMsgGetRequest.seq", "uint64"))),
    ("msg-get-seq-minus-zero", "$JS.API.STREAM.MSG.GET.KV", b'{"seq":-0}',
     bad_json(MG, unmarshal_number("-0", "JSApiMsgGetRequest.seq", "uint64"))),
    ("purge-keep-1e999", "$JS.API.STREAM.PURGE.KV", b'{"keep":1e999}',
     bad_json("stream_purge_response", unmarshal_number("1e999", "JSApiStreamPurgeRequest.keep", "uint64"),
              purged=0)),
    ("consumer-create-max-deliver-1e999", "$JS.API.CONSUMER.CREATE.KV",
     b'{"stream_name":"KV","config":{"durable_name":"d","ack_policy":"explicit","max_deliver":1e999}}',
     bad_json(CC, unmarshal_number("1e999", "CreateConsumerRequest.config.max_deliver", "int"))),
    ("consumer-create-backoff-1e999", "$JS.API.CONSUMER.CREATE.KV",
     b'{"stream_name":"KV","config":{"durable_name":"d","backoff":[1e999]}}',
     bad_json(CC, "json: cannot unmarshal number 1e999 into CreateConsumerRequest.config.backoff.0 "
                  "of type time.Duration")),
    ("consumer-create-deep", "$JS.API.CONSUMER.CREATE.KV", b'{"stream_name":"KV","config":' + b"[" * DEEP,
     bad_json(CC, "exceeded max depth at offset 10029")),
    ("direct-get-deep", "$JS.API.DIRECT.GET.KV", b"[" * DEEP, MALFORMED),
    ("direct-get-seq-1e999", "$JS.API.DIRECT.GET.KV", b'{"seq":1e999}', MALFORMED),
    ("direct-get-seq-20-digits", "$JS.API.DIRECT.GET.KV", b'{"seq":99999999999999999999}', MALFORMED),
    ("direct-get-seq-negative", "$JS.API.DIRECT.GET.KV", b'{"seq":-1}', MALFORMED),
    ("direct-get-seq-fraction", "$JS.API.DIRECT.GET.KV", b'{"seq":1.0}', MALFORMED),
    ("direct-get-batch-1e999", "$JS.API.DIRECT.GET.KV", b'{"seq":1,"batch":1e999}', MALFORMED),
    ("direct-get-by-subject-deep", "$JS.API.DIRECT.GET.KV.kv.a", b"{" * DEEP, MALFORMED),
    ("pull-deep-object", "$JS.API.CONSUMER.MSG.NEXT.KV.c", b"{" + b'"a":{' * 20_000,
     status(400, "Bad Request - exceeded max depth")),
    ("pull-batch-1e999", "$JS.API.CONSUMER.MSG.NEXT.KV.c", b'{"batch":1e999}',
     status(400, "Bad Request - " + unmarshal_number("1e999", ".batch", "int"))),
    ("pull-expires-20-digits", "$JS.API.CONSUMER.MSG.NEXT.KV.c", b'{"expires":99999999999999999999}',
     status(400, "Bad Request - " + unmarshal_number("99999999999999999999", ".expires", "time.Duration"))),
    ("pull-min-pending-1e999", "$JS.API.CONSUMER.MSG.NEXT.KV.c", b'{"min_pending":1e999}',
     status(400, "Bad Request - " + unmarshal_number("1e999", ".min_pending", "int64"))),
]

#: Nesting Go decodes (at most 10,000 levels) but jetraft refuses past its own 1,000:
#: (id, subject, body, nats-server's reply, jetraft's reply).
DEPTH_DIFFERENCES: list[tuple[str, str, bytes, Any, Any]] = [
    ("stream-create-metadata-9999-deep", "$JS.API.STREAM.CREATE.X",
     b'{"name":"X","metadata":' + b"[" * 9_999 + b"]" * 9_999 + b"}",
     bad_json(SC, "json: cannot unmarshal array into Go struct field StreamConfigRequest.metadata "
                  "of type map[string]string"),
     bad_json(SC, "exceeded max depth at offset 1023")),
    ("direct-get-seq-2000-deep", "$JS.API.DIRECT.GET.KV",
     b'{"seq":' + b"[" * 2_000 + b"]" * 2_000 + b"}", MALFORMED, MALFORMED),
    ("pull-batch-2000-deep", "$JS.API.CONSUMER.MSG.NEXT.KV.c",
     b'{"a":' + b"[" * 2_000 + b"]" * 2_000 + b',"batch":"x"}',
     status(400, "Bad Request - json: cannot unmarshal string into Go struct field .batch of type int"),
     status(400, "Bad Request - exceeded max depth")),
]


# --- requests ------------------------------------------------------------------------------

def raw_request(address: tuple[str, int], subject: str, body: bytes, *, timeout: float = 10.0,
            user: tuple[str, str] | None = None,
            headers: dict[str, str] | None = None) -> tuple[list[bytes], bytes | None, bytes]:
    """Publish ``body`` to ``subject`` with a reply inbox on a raw connection (HPUB with
    ``headers`` when given, else PUB); return the reply's control-line tokens, its header
    block (None for MSG) and its payload."""
    with RawClient(address, timeout=timeout) as c:
        options: dict[str, Any] = {"headers": True, "no_responders": True}
        if user:
            options.update(user=user[0], password=user[1])
        c.connect(**options)
        c.send(f"SUB {INBOX} 1\r\n".encode())
        if headers:
            block = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            c.send(f"HPUB {subject} {INBOX} {len(block)} {len(block) + len(body)}\r\n".encode()
                   + block + body + b"\r\n")
        else:
            c.send(f"PUB {subject} {INBOX} {len(body)}\r\n".encode() + body + b"\r\n")
        tokens, raw = c.read_msg()
    if tokens[0] == b"HMSG":
        size = int(tokens[-2])
        return tokens, raw[:size], raw[size:]
    return tokens, None, raw


def api(address: tuple[str, int], subject: str, body: Any = b"", **kw: Any) -> dict:
    """A request whose reply is JSON (``body``: bytes as they are, else JSON-encoded)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    tokens, headers, payload = raw_request(address, subject, data, **kw)
    assert headers is None, (tokens, headers, payload)
    return json.loads(payload)


def check_reply(address: tuple[str, int], subject: str, body: bytes, expected: Any) -> None:
    tokens, headers, payload = raw_request(address, subject, body)
    if isinstance(expected, tuple):
        assert (headers, payload) == expected, (tokens, headers, payload)
    else:
        assert headers is None, (tokens, headers, payload)
        assert json.loads(payload) == expected


def still_serving(srv: servers.RunningServer) -> None:
    """The server runs and answers an ordinary request: KV still holds its message."""
    assert srv.alive(), srv.output()[-3000:]
    info = api(srv.address, "$JS.API.STREAM.INFO.KV")
    assert info["state"]["messages"] == 1, info
    _tokens, headers, payload = raw_request(srv.address, "$JS.API.DIRECT.GET.KV", b'{"seq":1}')
    assert payload == b"hi" and headers is not None and b"Nats-Sequence: 1\r\n" in headers


def seeded(start_server, tmp_path) -> servers.RunningServer:
    """A JetStream server holding KV (one message) and the durable pull consumer c."""
    srv = start_server(f'jetstream {{ store_dir: "{tmp_path / "store"}" }}')
    created = api(srv.address, "$JS.API.STREAM.CREATE.KV", KV_CONFIG)
    assert "error" not in created, created
    assert api(srv.address, "kv.a", b"hi") == {"stream": "KV", "seq": 1}
    made = api(srv.address, "$JS.API.CONSUMER.DURABLE.CREATE.KV.c", CONSUMER)
    assert "error" not in made, made
    return srv


# --- one server ----------------------------------------------------------------------------

@pytest.mark.parametrize(("subject", "body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_request_is_answered_as_nats_server_does(start_server, tmp_path, subject, body, expected):
    srv = seeded(start_server, tmp_path)
    check_reply(srv.address, subject, body, expected)
    still_serving(srv)


@pytest.mark.parametrize(("subject", "body", "nats", "ours"), [c[1:] for c in DEPTH_DIFFERENCES],
                         ids=[c[0] for c in DEPTH_DIFFERENCES])
def test_nesting_between_1000_and_10000_levels(start_server, tmp_path, server_kind, subject, body, nats, ours):
    """Go decodes up to 10,000 levels; jetraft refuses past 1,000 (docs/limits.md, "Limits and
    hostile input" says why), at the offset of the bracket that passes 1,000."""
    srv = seeded(start_server, tmp_path)
    check_reply(srv.address, subject, body, nats if server_kind == "nats-server" else ours)
    still_serving(srv)


@pytest.mark.parametrize("nak", [b'-NAK {"delay":99999999999999999999}', b"-NAK {" + b'"a":{' * 20_000],
                         ids=["delay-20-digits", "deep"])
def test_nak_with_a_delay_go_refuses_is_a_plain_nak(start_server, tmp_path, nak):
    """nats-server processNak: a delay it cannot decode makes a plain NAK (redelivered now)."""
    srv = seeded(start_server, tmp_path)
    with RawClient(srv.address) as c:
        c.connect(headers=True)
        c.send(f"SUB {INBOX} 1\r\n".encode())
        c.send(f"PUB $JS.API.CONSUMER.MSG.NEXT.KV.c {INBOX} 1\r\n1\r\n".encode())
        tokens, first = c.read_msg()
        assert (tokens[1], first) == (b"kv.a", b"hi"), tokens
        ack = tokens[3].decode()
        c.send(f"PUB {ack} {len(nak)}\r\n".encode() + nak + b"\r\n")
        pull = b'{"batch":1,"expires":5000000000}'
        c.send(f"PUB $JS.API.CONSUMER.MSG.NEXT.KV.c {INBOX} {len(pull)}\r\n".encode() + pull + b"\r\n")
        tokens, again = c.read_msg()
        assert (tokens[1], again) == (b"kv.a", b"hi"), tokens
        assert tokens[3].decode().split(".")[4] == "2", tokens     # delivered a second time
    still_serving(srv)


# --- a three-server cluster ------------------------------------------------------------------

#: What a check raises while a server cannot answer yet (counted as not yet by ``poll``).
NOT_ANSWERING = (AssertionError, TimeoutError, EOFError, KeyError, ConnectionError)


@pytest.fixture(scope="module", params=servers.KINDS)
def cluster(request, formed_cluster):
    """Three servers of one kind with an R3 stream KV (allow_direct, one message) that every
    server answers DIRECT.GET for."""
    with formed_cluster(request.param, "hostile", 3, jetstream=True) as c:
        first = c.servers["n1"].address
        created = poll(lambda: (r := api(first, "$JS.API.STREAM.CREATE.KV", {**KV_CONFIG, "num_replicas": 3}))
                       and "error" not in r and r, "KV created", 30, retry_on=NOT_ANSWERING)
        assert created["config"]["num_replicas"] == 3
        # asked again until stored: the Nats-Msg-Id makes a message asked again a duplicate of
        # the first (acknowledged with "duplicate": true), never a second message
        stored = {"stream": "KV", "seq": 1}
        poll(lambda: {k: v for k, v in api(first, "kv.a", b"hi", headers={"Nats-Msg-Id": "kv-a"}).items()
                      if k != "duplicate"} == stored, "the message stored", 30, retry_on=NOT_ANSWERING)
        for name, srv in c.servers.items():
            poll(lambda srv=srv: raw_request(srv.address, "$JS.API.DIRECT.GET.KV", b'{"seq":1}', timeout=2)[2] == b"hi",
                 f"DIRECT.GET answered through {name}", 30, retry_on=NOT_ANSWERING)
        yield c
        if crashed := [n for n, s in c.servers.items() if not s.alive()]:
            pytest.fail(f"{request.param} servers exited during the tests: {crashed}\n{c.outputs()}")


CLUSTER_CASES = [c for c in CASES if c[0] in (
    "stream-create-deep", "stream-create-deep-objects", "stream-create-metadata-600-deep",
    "stream-create-max-msgs-1e999", "stream-create-mirror-start-1e999", "stream-names-deep",
    "stream-names-offset-1e999", "direct-get-deep", "direct-get-seq-1e999", "direct-get-seq-negative",
    "direct-get-by-subject-deep")]


@pytest.mark.parametrize("via", ["n1", "n2", "n3"])
@pytest.mark.parametrize(("subject", "body", "expected"), [c[1:] for c in CLUSTER_CASES],
                         ids=[c[0] for c in CLUSTER_CASES])
def test_hostile_request_on_a_cluster(cluster, via, subject, body, expected):
    """Sent through each server in turn (the meta leader answers STREAM.CREATE; every replica
    or the stream leader answers DIRECT.GET): nats-server's reply, and every server still
    answers an ordinary request."""
    check_reply(cluster.servers[via].address, subject, body, expected)
    for name, srv in cluster.servers.items():
        assert srv.alive(), f"{name} exited\n{srv.output()[-3000:]}"
        poll(lambda srv=srv: raw_request(srv.address, "$JS.API.DIRECT.GET.KV", b'{"seq":1}', timeout=2)[2] == b"hi",
             f"DIRECT.GET answered through {name}", 15, retry_on=NOT_ANSWERING)
