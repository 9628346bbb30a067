"""Fuzz target: the NATS client protocol parser (jetraft.protocol.ClientParser).

Input: see ``fuzz_support.chunks``: a flags byte, the sizes of the chunks the stream is cut
into, then the bytes a client sends. Option bits: 1 = small limits (max_control_line 64,
max_payload 128), 2 = no max_payload (-1), 4 = pedantic before the first CONNECT (as
nats-server is).

Invariants (ClientParser's docstring): ``feed`` never raises and never reports an internal
error; it returns only Connect, Pub, Sub, Unsub, Ping, Pong and ProtocolViolation with the
documented field types; a Pub never exceeds max_payload; a fatal violation is the last
command and every later feed returns []; the commands are the same whether the stream is
fed whole, in the fuzzer's chunks or one byte at a time (up to 512 bytes).
"""

from __future__ import annotations

import contextlib

import atheris

from fuzz_support import chunks, main

# Imported by the test suite, the code under test stays uninstrumented.
with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.protocol.client import (
        ClientParser,
        Connect,
        Ping,
        Pong,
        ProtocolViolation,
        Pub,
        Sub,
        Unsub,
    )

BYTEWISE_MAX = 512


def _parser(options: int) -> ClientParser:
    if options & 1:
        parser = ClientParser(max_control_line=64, max_payload=128)
    else:
        parser = ClientParser()
    if options & 2:
        parser.max_payload = -1
    if options & 4:
        parser.pedantic = True
    return parser


def _check_command(cmd: object, max_payload: int) -> None:
    """One command has a documented type and documented field types."""
    if isinstance(cmd, Connect):
        assert type(cmd.options) is dict, cmd
        assert all(type(k) is str and v is not None for k, v in cmd.options.items()), cmd
    elif isinstance(cmd, Pub):
        assert type(cmd.subject) is str and cmd.subject, cmd
        assert cmd.reply is None or (type(cmd.reply) is str and cmd.reply), cmd
        assert cmd.headers is None or (type(cmd.headers) is bytes and cmd.headers), cmd
        assert type(cmd.payload) is bytes, cmd
        if max_payload >= 0:
            assert len(cmd.headers or b"") + len(cmd.payload) <= max_payload, cmd
    elif isinstance(cmd, Sub):
        assert type(cmd.subject) is str and cmd.subject, cmd
        assert cmd.queue is None or (type(cmd.queue) is str and cmd.queue), cmd
        assert type(cmd.sid) is str and cmd.sid, cmd
    elif isinstance(cmd, Unsub):
        assert type(cmd.sid) is str and cmd.sid, cmd
        assert cmd.max_msgs is None or (type(cmd.max_msgs) is int and cmd.max_msgs > 0), cmd
    elif isinstance(cmd, ProtocolViolation):
        assert type(cmd.message) is str and type(cmd.fatal) is bool and type(cmd.send_err) is bool
        assert not cmd.message.startswith("internal parser error"), cmd
    else:
        assert isinstance(cmd, (Ping, Pong)), f"undocumented command {cmd!r}"


def _run(options: int, pieces: list[bytes]) -> list:
    """Feed ``pieces`` to a new parser; check each feed's output; return all commands."""
    parser = _parser(options)
    out: list = []
    dead = False
    for piece in pieces:
        got = parser.feed(piece)
        assert type(got) is list, got
        if dead:
            assert got == [], f"commands after a fatal violation: {got!r}"
        for cmd in got:
            assert not dead, f"command after a fatal violation: {cmd!r}"
            _check_command(cmd, parser.max_payload)
            if isinstance(cmd, ProtocolViolation) and cmd.fatal:
                dead = True
        out += got
    if dead:
        assert parser.feed(b"PING\r\nPUB a 1\r\nx\r\n") == [], "parser alive after a fatal violation"
    return out


def _compare(pieces: list[bytes], got: list, whole: list, how: str) -> None:
    assert got == whole, f"{how} {pieces!r}: {got!r} != whole {whole!r}"


def TestOneInput(data: bytes) -> None:
    options, pieces = chunks(data)
    stream = b"".join(pieces)
    whole = _run(options, [stream])
    _compare(pieces, _run(options, pieces), whole, "chunks")
    if len(stream) <= BYTEWISE_MAX:
        bytewise = [stream[i:i + 1] for i in range(len(stream))]
        _compare(bytewise, _run(options, bytewise), whole, "byte by byte")


if __name__ == "__main__":
    main(TestOneInput)
