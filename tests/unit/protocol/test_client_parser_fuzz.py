"""Hypothesis: valid streams parse exactly under any chunking; garbage never escapes feed()."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.protocol import ClientParser, Connect, Ping, Pong, ProtocolViolation, Pub, Sub, Unsub

FUZZ = settings(deadline=None, max_examples=200)

token = st.text(alphabet="abcXYZ019_-$*>\u00e9", min_size=1, max_size=6)
subject = st.lists(token, min_size=1, max_size=4).map(".".join)
literal = st.lists(st.text(alphabet="abz09_", min_size=1, max_size=5), min_size=1, max_size=4).map(".".join)
blanks = st.sampled_from([" ", "  ", "\t", " \t "])
eol = st.sampled_from([b"\r\n", b"\n"])
verb_case = st.sampled_from([str.upper, str.lower, str.capitalize])


def enc(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@st.composite
def pub(draw) -> tuple[bytes, Pub]:
    subj = draw(literal)
    reply = draw(st.none() | literal)
    payload = draw(st.binary(max_size=64))
    sep = draw(blanks)
    if draw(st.booleans()):
        headers = b"NATS/1.0\r\n" + draw(st.binary(max_size=32)) + b"\r\n\r\n"
        verb = draw(verb_case)("hpub")
        sizes = f"{len(headers)}{sep}{len(headers) + len(payload)}"
    else:
        headers = None
        verb = draw(verb_case)("pub")
        sizes = str(len(payload))
    middle = f"{sep}{reply}{sep}" if reply else f"{sep}{sep}"  # nats-py: two blanks without a reply
    line = enc(f"{verb}{sep}{subj}{middle}{sizes}") + draw(eol)
    return line + (headers or b"") + payload + b"\r\n", Pub(subj, reply, headers, payload)


@st.composite
def sub(draw) -> tuple[bytes, Sub]:
    subj = draw(subject.filter(lambda s: "" not in s.split(".") and ">" not in s.split(".")[:-1]))
    queue = draw(st.none() | token.filter(lambda t: t not in ("*", ">")))
    sid = draw(st.integers(1, 10**6).map(str))
    sep = draw(blanks)
    args = f"{subj}{sep}{queue}{sep}{sid}" if queue else f"{subj}{sep}{sid}"
    return enc(f"{draw(verb_case)('sub')}{sep}{args}") + draw(eol), Sub(subj, queue, sid)


@st.composite
def unsub(draw) -> tuple[bytes, Unsub]:
    sid = draw(st.integers(1, 10**6).map(str))
    max_msgs = draw(st.none() | st.integers(1, 10**8))
    sep = draw(blanks)
    tail = f"{sep}{max_msgs}" if max_msgs else draw(st.sampled_from(["", " "]))
    return enc(f"{draw(verb_case)('unsub')}{sep}{sid}{tail}") + draw(eol), Unsub(sid, max_msgs)


@st.composite
def simple(draw) -> tuple[bytes, object]:
    kind = draw(st.sampled_from(["ping", "pong", "connect"]))
    if kind == "connect":
        options = {"verbose": False, "pedantic": False, "name": draw(st.text(max_size=8)), "protocol": 1}
        return b"CONNECT " + json.dumps(options).encode() + draw(eol), Connect(options)
    return enc(draw(verb_case)(kind)) + draw(eol), Ping() if kind == "ping" else Pong()


commands = st.lists(st.one_of(pub(), sub(), unsub(), simple()), min_size=1, max_size=12)


@st.composite
def chunked(draw, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def feed_chunks(chunks: list[bytes], parser: ClientParser | None = None) -> list:
    parser = parser or ClientParser()
    out: list = []
    for chunk in chunks:
        out += parser.feed(chunk)
    return out


@FUZZ
@given(commands, st.data())
def test_valid_streams_parse_exactly_under_any_chunking(cmds: list, data) -> None:
    stream = b"".join(raw for raw, _ in cmds)
    expected = [cmd for _, cmd in cmds]
    assert ClientParser().feed(stream) == expected
    assert feed_chunks(data.draw(chunked(stream))) == expected


@st.composite
def mutated(draw) -> bytes:
    stream = bytearray(b"".join(raw for raw, _ in draw(commands)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete"]))
        at = draw(st.integers(0, len(stream)))
        if op == "insert":
            stream[at:at] = draw(st.binary(min_size=1, max_size=4) | st.sampled_from([b"\r", b"\n", b" ", b"\r\n"]))
        elif stream and at < len(stream):
            if op == "flip":
                stream[at] ^= 1 << draw(st.integers(0, 7))
            else:
                del stream[at : at + draw(st.integers(1, 3))]
    return bytes(stream)


def check_well_formed(out: list) -> None:
    """Every item is a command; a fatal violation, if any, is the very last item."""
    for i, item in enumerate(out):
        assert isinstance(item, (Connect, Pub, Sub, Unsub, Ping, Pong, ProtocolViolation))
        if isinstance(item, ProtocolViolation):
            assert not item.message.startswith("internal"), item
            if item.fatal:
                assert i == len(out) - 1


@FUZZ
@given(mutated(), st.data())
def test_mutated_streams_never_raise_and_chunking_does_not_change_the_result(stream: bytes, data) -> None:
    whole = ClientParser().feed(stream)
    check_well_formed(whole)
    parser = ClientParser()
    pieces = feed_chunks(data.draw(chunked(stream)), parser)
    assert pieces == whole
    if whole and isinstance(whole[-1], ProtocolViolation) and whole[-1].fatal:
        assert parser.feed(b"PING\r\nPUB a 1\r\nx\r\n") == []


@FUZZ
@given(st.binary(max_size=300), st.data())
def test_random_bytes_never_raise(stream: bytes, data) -> None:
    whole = ClientParser(max_control_line=64, max_payload=128).feed(stream)
    check_well_formed(whole)
    assert feed_chunks(data.draw(chunked(stream)), ClientParser(max_control_line=64, max_payload=128)) == whole


@FUZZ
@given(st.lists(st.sampled_from([b"PUB ", b"HPUB ", b"SUB ", b"UNSUB ", b"PING", b"CONNECT ", b"\r\n", b"\n",
                                 b" ", b"\t", b"1", b"12", b"a.b", b"*", b">", b"{}", b"x", b"\r", b"-ERR ",
                                 b"+OK", b"INFO ", b"0"]), max_size=40), st.data())
def test_protocol_shaped_garbage_never_raises(parts: list[bytes], data) -> None:
    stream = b"".join(parts)
    whole = ClientParser().feed(stream)
    check_well_formed(whole)
    assert feed_chunks(data.draw(chunked(stream))) == whole
