"""ClientParser: every command form nats-py sends, chunking, and nats-server's errors.

Expected errors and fatality were probed against nats-server 2.15.1
(server/parser.go, server/client.go): see ProtocolViolation's table.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from jetraft.protocol import (
    ERR_INVALID_PUBLISH_SUBJECT,
    ERR_INVALID_SUBJECT,
    ERR_MAX_CONTROL_LINE,
    ERR_MAX_PAYLOAD,
    ERR_UNKNOWN_OP,
    ClientParser,
    Connect,
    Ping,
    Pong,
    ProtocolViolation,
    Pub,
    Sub,
    Unsub,
)

HDR = b"NATS/1.0\r\nFoo: bar\r\n\r\n"  # 22 bytes, as nats-py builds a header block
CONNECT_JSON = {
    "verbose": False,
    "pedantic": False,
    "lang": "python3",
    "version": "2.16.0",
    "protocol": 1,
    "headers": True,
    "no_responders": True,
}
CONNECT_LINE = b"CONNECT " + json.dumps(CONNECT_JSON, sort_keys=True).encode() + b"\r\n"

# (bytes nats-py sends, what the parser must return). The byte strings are what
# nats/protocol/command.py produces; test_nats_py_emits_these_bytes checks that.
NATS_PY_FORMS = [
    (b"PUB foo  5\r\nhello\r\n", [Pub("foo", None, None, b"hello")]),
    (b"PUB foo _INBOX.abc.1 5\r\nhello\r\n", [Pub("foo", "_INBOX.abc.1", None, b"hello")]),
    (b"PUB foo  0\r\n\r\n", [Pub("foo", None, None, b"")]),
    (b"HPUB foo  22 27\r\n" + HDR + b"hello\r\n", [Pub("foo", None, HDR, b"hello")]),
    (b"HPUB foo rep 22 22\r\n" + HDR + b"\r\n", [Pub("foo", "rep", HDR, b"")]),
    (b"SUB foo  1\r\n", [Sub("foo", None, "1")]),
    (b"SUB foo.* workers 2\r\n", [Sub("foo.*", "workers", "2")]),
    (b"SUB _INBOX.abc.* 3\r\n", [Sub("_INBOX.abc.*", None, "3")]),
    (b"UNSUB 1 \r\n", [Unsub("1", None)]),
    (b"UNSUB 1 10\r\n", [Unsub("1", 10)]),
    (b"PING\r\n", [Ping()]),
    (b"PONG\r\n", [Pong()]),
    (CONNECT_LINE, [Connect(CONNECT_JSON)]),
]


def feed_all(data: bytes, **kwargs) -> list:
    return ClientParser(**kwargs).feed(data)


def feed_bytewise(data: bytes, **kwargs) -> list:
    parser = ClientParser(**kwargs)
    out: list = []
    for i in range(len(data)):
        out += parser.feed(data[i : i + 1])
    return out


def violation(message: str, fatal: bool = True, send_err: bool = True) -> ProtocolViolation:
    return ProtocolViolation(message, fatal, send_err)


@pytest.mark.parametrize(("data", "expected"), NATS_PY_FORMS)
def test_nats_py_forms(data: bytes, expected: list) -> None:
    assert feed_all(data) == expected
    assert feed_bytewise(data) == expected


def test_nats_py_emits_these_bytes() -> None:
    command = pytest.importorskip("nats.protocol.command")
    assert command.pub_cmd("foo", "", b"hello") == NATS_PY_FORMS[0][0]
    assert command.pub_cmd("foo", "_INBOX.abc.1", b"hello") == NATS_PY_FORMS[1][0]
    assert command.hpub_cmd("foo", "", HDR, b"hello") == NATS_PY_FORMS[3][0]
    assert command.sub_cmd("foo", "", 1) == NATS_PY_FORMS[5][0]
    assert command.sub_cmd("foo.*", "workers", 2) == NATS_PY_FORMS[6][0]
    assert command.unsub_cmd(1, 0) == NATS_PY_FORMS[8][0]
    assert command.unsub_cmd(1, 10) == NATS_PY_FORMS[9][0]


MIXED = b"".join(data for data, _ in NATS_PY_FORMS)
MIXED_EXPECTED = [cmd for _, cmds in NATS_PY_FORMS for cmd in cmds]


def test_mixed_stream_in_one_feed() -> None:
    assert feed_all(MIXED) == MIXED_EXPECTED


def test_mixed_stream_split_at_every_point() -> None:
    for cut in range(len(MIXED) + 1):
        parser = ClientParser()
        assert parser.feed(MIXED[:cut]) + parser.feed(MIXED[cut:]) == MIXED_EXPECTED, cut


def test_mixed_stream_split_at_every_pair_of_points() -> None:
    step = 7  # every pair would be ~100k parses; a stride keeps it fast and still crosses every field
    for a in range(0, len(MIXED) + 1, step):
        for b in range(a, len(MIXED) + 1, 3):
            parser = ClientParser()
            out = parser.feed(MIXED[:a]) + parser.feed(MIXED[a:b]) + parser.feed(MIXED[b:])
            assert out == MIXED_EXPECTED, (a, b)


def test_mixed_stream_byte_by_byte() -> None:
    assert feed_bytewise(MIXED) == MIXED_EXPECTED


def test_feed_accepts_bytearray_and_memoryview() -> None:
    parser = ClientParser()
    out = parser.feed(bytearray(b"PUB a 1\r\n")) + parser.feed(memoryview(b"x\r\nPING\r\n"))
    assert out == [Pub("a", None, None, b"x"), Ping()]
    assert type(out[0].payload) is bytes


def test_empty_feed_returns_nothing() -> None:
    parser = ClientParser()
    assert parser.feed(b"") == []
    assert parser.feed(b"PI") == []
    assert parser.feed(b"") == []
    assert parser.feed(b"NG\r\n") == [Ping()]


# ------------------------------------------------------------ tolerated forms


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"pub foo 1\r\nx\r\n", [Pub("foo", None, None, b"x")]),
        (b"Pub foo 1\r\nx\r\n", [Pub("foo", None, None, b"x")]),
        (b"hpub foo 12 12\r\nNATS/1.0\r\n\r\n\r\n", [Pub("foo", None, b"NATS/1.0\r\n\r\n", b"")]),
        (b"sub foo 1\r\n", [Sub("foo", None, "1")]),
        (b"unsub 1\r\n", [Unsub("1", None)]),
        (b"ping\r\npong\r\n", [Ping(), Pong()]),
        (b'connect {"verbose":false}\r\n', [Connect({"verbose": False})]),
        (b"PUB\tfoo\t\t1\r\nx\r\n", [Pub("foo", None, None, b"x")]),
        (b"PUB  \t foo   r  1   \r\nx\r\n", [Pub("foo", "r", None, b"x")]),
        (b"SUB\tfoo\tq\t1\t\r\n", [Sub("foo", "q", "1")]),
        (b"UNSUB  7   3  \r\n", [Unsub("7", 3)]),
        # LF without CR ends a control line (parser.go only looks for '\n').
        (b"PUB foo 1\nx\r\nSUB a 1\nUNSUB 1\nPING\nPONG\n", [
            Pub("foo", None, None, b"x"), Sub("a", None, "1"), Unsub("1", None), Ping(), Pong()]),
        (b"CONNECT {}\n", [Connect({})]),
        # Anything after PING/PONG up to LF is ignored (parser.go OP_PING/OP_PONG).
        (b"PING garbage\r\nPONGS\r\n", [Ping(), Pong()]),
        # INFO and +OK from a client are accepted and ignored.
        (b'INFO {"server_id":"x"}\r\n+OK\r\nPING\r\n', [Ping()]),
        (b"INFO null\r\n+ok whatever\r\n", []),
        # CONNECT needs no blank before its JSON.
        (b'CONNECT{"name":"n"}\r\n', [Connect({"name": "n"})]),
        # The size may have leading zeros, up to 9 digits (util.go parseSize).
        (b"PUB foo 000000003\r\nabc\r\n", [Pub("foo", None, None, b"abc")]),
        # The payload is opaque: CRLF, verbs and NULs inside it are data.
        (b"PUB foo 13\r\nPING\r\nPUB x\r\n\r\n", [Pub("foo", None, None, b"PING\r\nPUB x\r\n")]),
        # UNSUB with a max of 0 or a non-number means "now" (client.go processUnsub).
        (b"UNSUB 1 0\r\nUNSUB 2 x\r\nUNSUB 3 1234567890\r\n", [
            Unsub("1", None), Unsub("2", None), Unsub("3", None)]),
        # A PUB subject is not checked when not pedantic: wildcards and empty tokens pass.
        (b"PUB foo.* 1\r\nx\r\nPUB a..b 0\r\n\r\n", [
            Pub("foo.*", None, None, b"x"), Pub("a..b", None, None, b"")]),
        # HPUB with a header length of 0 is a plain message (client.go msgParts: hdr > 0).
        (b"HPUB foo 0 3\r\nabc\r\n", [Pub("foo", None, None, b"abc")]),
        # A form feed is not a separator for nats-server: it stays in the subject.
        (b"SUB a\x0cb 1\r\n", [Sub("a\x0cb", None, "1")]),
    ],
)
def test_tolerated_forms(data: bytes, expected: list) -> None:
    assert feed_all(data) == expected
    assert feed_bytewise(data) == expected


def test_subjects_round_trip_byte_exact() -> None:
    raw_subject = b"caf\xc3\xa9.\xff\xfe.x"
    out = feed_all(b"SUB " + raw_subject + b" q\x80 s\x81\r\nPUB " + raw_subject + b" r\xfa 1\r\nx\r\n")
    sub, pub = out
    assert sub.subject.encode("utf-8", "surrogateescape") == raw_subject
    assert sub.subject.split(".")[0] == "café"
    assert sub.queue.encode("utf-8", "surrogateescape") == b"q\x80"
    assert sub.sid.encode("utf-8", "surrogateescape") == b"s\x81"
    assert pub.subject == sub.subject
    assert pub.reply.encode("utf-8", "surrogateescape") == b"r\xfa"


def test_large_payload_across_many_feeds() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value, CRLFs included
    data = b"PUB big  %d\r\n" % len(payload) + payload + b"\r\nPING\r\n"
    parser = ClientParser()
    out: list = []
    for i in range(0, len(data), 1000):
        out += parser.feed(data[i : i + 1000])
    assert out == [Pub("big", None, None, payload), Ping()]


def test_hpub_headers_and_payload_split() -> None:
    header = b"NATS/1.0\r\nNats-Msg-Id: 1\r\nA: " + b"h" * 500 + b"\r\n\r\n"
    body = b"b" * 700
    data = b"HPUB s r %d %d\r\n" % (len(header), len(header) + len(body)) + header + body + b"\r\n"
    for cut in (1, 20, 30, 200, len(data) - 700, len(data) - 2, len(data) - 1):
        parser = ClientParser()
        assert parser.feed(data[:cut]) + parser.feed(data[cut:]) == [Pub("s", "r", header, body)]


# ------------------------------------------------------------ limits


def test_max_payload_boundary() -> None:
    assert feed_all(b"PUB foo 10\r\n0123456789\r\n", max_payload=10) == [Pub("foo", None, None, b"0123456789")]
    assert feed_all(b"PUB foo 11\r\n01234567890\r\n", max_payload=10) == [violation(ERR_MAX_PAYLOAD)]


def test_max_payload_counts_hpub_total_size() -> None:
    data = b"HPUB foo 12 13\r\nNATS/1.0\r\n\r\nx\r\n"
    assert feed_all(data, max_payload=13) == [Pub("foo", None, b"NATS/1.0\r\n\r\n", b"x")]
    assert feed_all(data, max_payload=12) == [violation(ERR_MAX_PAYLOAD)]


def test_max_payload_is_settable_and_negative_means_unlimited() -> None:
    parser = ClientParser(max_payload=4)
    assert parser.feed(b"PUB a 4\r\nabcd\r\n") == [Pub("a", None, None, b"abcd")]
    parser.max_payload = -1
    assert parser.feed(b"PUB a 6\r\nabcdef\r\n") == [Pub("a", None, None, b"abcdef")]
    parser.max_payload = 5
    assert parser.feed(b"PUB a 6\r\n") == [violation(ERR_MAX_PAYLOAD)]


def test_max_payload_is_checked_before_the_payload_arrives() -> None:
    parser = ClientParser()
    assert parser.feed(b"PUB foo 1048577\r\n") == [violation(ERR_MAX_PAYLOAD)]


def test_max_control_line_counts_arguments_only() -> None:
    arg = b"s" * 95 + b" 1"  # 97 bytes of arguments
    assert feed_all(b"SUB " + arg + b"\r\n", max_control_line=97) == [Sub("s" * 95, None, "1")]
    assert feed_all(b"SUB    \t " + arg + b"\r\n", max_control_line=97) == [Sub("s" * 95, None, "1")]
    assert feed_all(b"SUB " + arg + b"\r\n", max_control_line=96) == [violation(ERR_MAX_CONTROL_LINE)]
    assert feed_bytewise(b"SUB " + arg + b"\r\n", max_control_line=96) == [violation(ERR_MAX_CONTROL_LINE)]


def test_max_control_line_applies_to_pub_and_connect() -> None:
    long_subject = b"a" * 5000
    assert feed_all(b"PUB " + long_subject + b" 1\r\nx\r\n") == [violation(ERR_MAX_CONTROL_LINE)]
    assert feed_all(b'CONNECT {"name":"' + long_subject + b'"}\r\n') == [violation(ERR_MAX_CONTROL_LINE)]


def test_endless_line_is_refused_before_its_end() -> None:
    parser = ClientParser(max_control_line=4096)
    assert parser.feed(b"PUB ") == []
    out: list = []
    for _ in range(10):
        out += parser.feed(b"x" * 1000)
    assert out == [violation(ERR_MAX_CONTROL_LINE)]
    assert parser.feed(b" 1\r\nx\r\n") == []


def test_blanks_and_ping_garbage_do_not_count_against_the_limit() -> None:
    # nats-server skips blanks after the verb and everything after PING without buffering.
    parser = ClientParser(max_control_line=16)
    out = parser.feed(b"SUB")
    for _ in range(100):
        out += parser.feed(b" " * 100)
    out += parser.feed(b"foo 1\r\nPING")
    for _ in range(100):
        out += parser.feed(b"z" * 100)
    out += parser.feed(b"\r\n")
    assert out == [Sub("foo", None, "1"), Ping()]


@pytest.mark.parametrize("prefix", [b"PING", b"PONG ", b"+OK", b"SUB", b"CONNECT"])
def test_unbounded_blanks_or_ping_garbage_use_bounded_memory(prefix: bytes) -> None:
    filler = b" " * 4096 if prefix in (b"SUB", b"CONNECT") else b"z" * 4096
    parser = ClientParser()
    parser.feed(prefix)
    tracemalloc.start()
    try:
        for _ in range(1024):  # 4 MiB that nats-server would skip without buffering
            assert parser.feed(filler) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


# ------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Unknown or malformed verbs: -ERR 'Unknown Protocol Operation', fatal.
        (b"FOO\r\n", violation(ERR_UNKNOWN_OP)),
        (b"PUBLISH foo 1\r\nx\r\n", violation(ERR_UNKNOWN_OP)),
        (b"PUB\r\n", violation(ERR_UNKNOWN_OP)),
        (b"SUB\r\n", violation(ERR_UNKNOWN_OP)),
        (b"UNSUB\r\n", violation(ERR_UNKNOWN_OP)),
        (b"HPUB\r\n", violation(ERR_UNKNOWN_OP)),
        (b"\r\n", violation(ERR_UNKNOWN_OP)),
        (b" PING\r\n", violation(ERR_UNKNOWN_OP)),
        (b"MSG foo 1 1\r\nx\r\n", violation(ERR_UNKNOWN_OP)),
        (b"HMSG foo 1 1 1\r\nx\r\n", violation(ERR_UNKNOWN_OP)),
        (b"RS+ foo\r\n", violation(ERR_UNKNOWN_OP)),
        (b"-ERR\r\n", violation(ERR_UNKNOWN_OP)),
        # The payload must be followed by CRLF exactly.
        (b"PUB foo 2\r\nxyz\r\n", violation(ERR_UNKNOWN_OP)),
        (b"PUB foo 1\r\nx\n", violation(ERR_UNKNOWN_OP)),
        (b"PUB foo 1\r\nx\rZ", violation(ERR_UNKNOWN_OP)),
        (b"HPUB foo 12 12\r\nNATS/1.0\r\n\r\nX\r\n", violation(ERR_UNKNOWN_OP)),
        # Argument errors: nats-server closes without an -ERR.
        (b"PUB foo\r\n", violation("processPub Parse Error", send_err=False)),
        (b"PUB \r\n", violation("processPub Parse Error", send_err=False)),
        (b"PUB foo 1 2 3\r\nx\r\n", violation("processPub Parse Error", send_err=False)),
        (b"PUB foo x\r\n", violation("processPub Bad or Missing Size", send_err=False)),
        (b"PUB foo -1\r\n", violation("processPub Bad or Missing Size", send_err=False)),
        (b"PUB foo +1\r\n", violation("processPub Bad or Missing Size", send_err=False)),
        (b"PUB foo 1234567890\r\n", violation("processPub Bad or Missing Size", send_err=False)),
        (b"PUB foo 99999999999999999999999\r\n", violation("processPub Bad or Missing Size", send_err=False)),
        (b"HPUB foo 3\r\n", violation("processHeaderPub Parse Error", send_err=False)),
        (b"HPUB a b c d e\r\n", violation("processHeaderPub Parse Error", send_err=False)),
        (b"HPUB foo x 3\r\n", violation("processHeaderPub Bad or Missing Header Size", send_err=False)),
        (b"HPUB foo 3 x\r\n", violation("processHeaderPub Bad or Missing Total Size", send_err=False)),
        (b"HPUB foo 5 3\r\nxxxxx\r\n",
         violation("processHeaderPub Header Size larger then TotalSize", send_err=False)),
        (b"SUB foo\r\n", violation("processSub Parse Error", send_err=False)),
        (b"SUB foo q 1 2\r\n", violation("processSub Parse Error", send_err=False)),
        (b"UNSUB 1 2 3\r\n", violation("processUnsub Parse Error", send_err=False)),
        (b"UNSUB  \r\n", violation("processUnsub Parse Error", send_err=False)),
        # A client sending -ERR is closed (client.go processErr), silently.
        (b"-ERR 'boom'\r\n", violation("Client Error 'boom'", send_err=False)),
        (b"INFO {bad\r\n", violation("INFO: invalid JSON", send_err=False)),
    ],
)
def test_fatal_errors(data: bytes, expected: ProtocolViolation) -> None:
    suffix = b"PING\r\nSUB after 9\r\n"
    assert feed_all(data + suffix) == [expected]
    assert feed_bytewise(data + suffix) == [expected]


def test_commands_before_a_fatal_error_are_returned() -> None:
    assert feed_all(b"PING\r\nSUB a 1\r\nBAD\r\nPING\r\n") == [Ping(), Sub("a", None, "1"), violation(ERR_UNKNOWN_OP)]


def test_nothing_is_parsed_after_a_fatal_error() -> None:
    parser = ClientParser()
    assert parser.feed(b"XX") == [violation(ERR_UNKNOWN_OP)]
    assert parser.feed(b"PING\r\n") == []
    assert parser.feed(b"PUB a 1\r\nx\r\n") == []


def test_verb_errors_are_reported_before_the_line_ends() -> None:
    # nats-server checks the verb byte by byte; so do we, without waiting for LF.
    for partial in (b"X", b"PX", b"PUBX", b"PUB\r", b"CONNEC_", b"HM", b"UNSUBX", b"-ERR:"):
        assert ClientParser().feed(partial) == [violation(ERR_UNKNOWN_OP)], partial
    for prefix in (b"P", b"PU", b"PUB", b"PUB ", b"H", b"CONNECT", b"+", b"-ER", b"unsu"):
        assert ClientParser().feed(prefix) == [], prefix


@pytest.mark.parametrize("subject", [b"foo..bar", b"foo.", b".foo", b"foo.>.bar", b">.a", b".", b"a.>.>"])
def test_sub_invalid_subject_is_not_fatal(subject: bytes) -> None:
    out = feed_all(b"SUB " + subject + b" 1\r\nSUB ok 2\r\n")
    assert out == [violation(ERR_INVALID_SUBJECT, fatal=False), Sub("ok", None, "2")]


def test_sub_wildcards_inside_tokens_are_literal() -> None:
    assert feed_all(b"SUB foo*.b>r 1\r\n") == [Sub("foo*.b>r", None, "1")]


# ------------------------------------------------------------ pedantic


def test_pedantic_pub_to_invalid_subject_warns_and_still_publishes() -> None:
    parser = ClientParser()
    parser.pedantic = True
    out = parser.feed(b"PUB foo.* 1\r\nx\r\nPUB a..b 1\r\ny\r\nPUB ok.> 0\r\n\r\nPUB fine 0\r\n\r\n")
    warn = violation(ERR_INVALID_PUBLISH_SUBJECT, fatal=False)
    assert out == [
        warn, Pub("foo.*", None, None, b"x"),
        warn, Pub("a..b", None, None, b"y"),
        warn, Pub("ok.>", None, None, b""),
        Pub("fine", None, None, b""),
    ]


def test_pedantic_hpub() -> None:
    parser = ClientParser()
    parser.pedantic = True
    out = parser.feed(b"HPUB > 12 12\r\nNATS/1.0\r\n\r\n\r\n")
    assert out == [violation(ERR_INVALID_PUBLISH_SUBJECT, fatal=False), Pub(">", None, b"NATS/1.0\r\n\r\n", b"")]


def test_pedantic_warning_comes_before_a_bad_payload_error() -> None:
    parser = ClientParser()
    parser.pedantic = True
    assert parser.feed(b"PUB a.* 1\r\nxy") == [
        violation(ERR_INVALID_PUBLISH_SUBJECT, fatal=False), violation(ERR_UNKNOWN_OP)]


def test_connect_sets_pedantic_like_nats_server() -> None:
    parser = ClientParser()
    assert parser.pedantic is False
    parser.feed(b"CONNECT {}\r\n")  # absent on the first CONNECT: nats-server's default, True
    assert parser.pedantic is True
    parser.feed(b'CONNECT {"pedantic":false}\r\n')
    assert parser.pedantic is False
    parser.feed(b'CONNECT {"verbose":true}\r\n')  # absent later: unchanged
    assert parser.pedantic is False
    # In one feed, the CONNECT's setting applies to the PUB right after it.
    parser = ClientParser()
    out = parser.feed(b'CONNECT {"pedantic":true}\r\nPUB a.* 0\r\n\r\n')
    assert out == [Connect({"pedantic": True}), violation(ERR_INVALID_PUBLISH_SUBJECT, fatal=False),
                   Pub("a.*", None, None, b"")]


# ------------------------------------------------------------ CONNECT


@pytest.mark.parametrize(
    ("line", "options"),
    [
        (b"CONNECT null\r\n", {}),
        (b'CONNECT {"verbose":null,"pedantic":false}\r\n', {"pedantic": False}),
        (b'CONNECT {"verbose":false} \r\n', {"verbose": False}),
        (b'CONNECT {"extra":[1,2],"protocol":0}\r\n', {"extra": [1, 2], "protocol": 0}),
        (b'CONNECT {"user":"u","pass":"p","auth_token":"t","name":"n","echo":false}\r\n',
         {"user": "u", "pass": "p", "auth_token": "t", "name": "n", "echo": False}),
        (b'CONNECT {"import":{"allow":["a"]}}\r\n', {"import": {"allow": ["a"]}}),
    ],
)
def test_connect_accepted(line: bytes, options: dict) -> None:
    assert feed_all(line) == [Connect(options)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"CONNECT {bad json\r\n", violation("CONNECT: invalid JSON", send_err=False)),
        (b"CONNECT\r\n", violation("CONNECT: invalid JSON", send_err=False)),
        (b"CONNECT []\r\n", violation("CONNECT: invalid JSON", send_err=False)),
        (b"CONNECT 5\r\n", violation("CONNECT: invalid JSON", send_err=False)),
        (b"CONNECT {} x\r\n", violation("CONNECT: invalid JSON", send_err=False)),
        (b'CONNECT {"n":NaN}\r\n', violation("CONNECT: invalid JSON", send_err=False)),
        (b"CONNECT " + b"[" * 2000 + b"]" * 2000 + b"\r\n", violation("CONNECT: invalid JSON", send_err=False)),
        (b'CONNECT {"verbose":"x"}\r\n', violation("CONNECT: invalid type for field 'verbose'", send_err=False)),
        (b'CONNECT {"protocol":1.5}\r\n', violation("CONNECT: invalid type for field 'protocol'", send_err=False)),
        (b'CONNECT {"protocol":true}\r\n', violation("CONNECT: invalid type for field 'protocol'", send_err=False)),
        (b'CONNECT {"name":5}\r\n', violation("CONNECT: invalid type for field 'name'", send_err=False)),
        (b'CONNECT {"import":5}\r\n', violation("CONNECT: invalid type for field 'import'", send_err=False)),
        (b'CONNECT {"protocol":2}\r\n', violation("invalid client protocol")),
        (b'CONNECT {"protocol":-1}\r\n', violation("invalid client protocol")),
        (b'CONNECT {"no_responders":true}\r\n', violation("no responders requires headers support")),
        (b'CONNECT {"no_responders":true,"headers":false}\r\n', violation("no responders requires headers support")),
    ],
)
def test_connect_refused(line: bytes, expected: ProtocolViolation) -> None:
    assert feed_all(line + b"PING\r\n") == [expected]


def test_connect_with_invalid_utf8_is_decoded_with_replacement() -> None:
    # Go's encoding/json replaces invalid UTF-8 with U+FFFD rather than failing.
    assert feed_all(b'CONNECT {"name":"a\xffb"}\r\n') == [Connect({"name": "a\ufffdb"})]


def test_violation_defaults_to_sending_an_err() -> None:
    assert ProtocolViolation("x", True) == ProtocolViolation("x", True, True)


@pytest.mark.parametrize("first", [b"P", b"PUB foo 1048576\r\n", b"SUB", b"\r\n", b" CONNECT {}\r\n", b"ping\r\n"])
def test_awaiting_auth_refuses_anything_but_connect_at_its_first_byte(first: bytes) -> None:
    parser = ClientParser()
    parser.awaiting_auth = True
    assert parser.feed(first + b"x" * 65536) == [ProtocolViolation("Authorization Violation", True)]
    assert parser.feed(b"CONNECT {}\r\n") == []  # nothing after the violation
    assert parser.buffered_bytes == 0  # nothing of the payload kept


def test_awaiting_auth_ends_with_the_first_connect() -> None:
    parser = ClientParser()
    parser.awaiting_auth = True
    assert parser.feed(b"CON") == []
    assert parser.feed(b'nect {"verbose":false}\r\nPUB a 1\r\nx\r\n') == [
        Connect({"verbose": False}), Pub("a", None, None, b"x")]
    assert parser.awaiting_auth is False


@pytest.mark.parametrize("cut", [11, 12, 13])
def test_a_payload_followed_by_a_wrong_byte_fails_at_that_byte_however_the_reads_fall(cut: int) -> None:
    data = b"PUB foo 1\r\nab"
    parser = ClientParser()
    out = parser.feed(data[:cut]) + parser.feed(data[cut:])
    assert out == [ProtocolViolation(ERR_UNKNOWN_OP, True)]
