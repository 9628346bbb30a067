"""Fuzz target: the route protocol decoder (jetraft.protocol.route.RouteParser, decode_frame).

Input: see ``fuzz_support.chunks``: a flags byte, the sizes of the chunks the bytes read
from a route are cut into, then those bytes (length-prefixed msgpack frames). Option bit 1:
``max_frame`` 4096 instead of 64 MiB.

Invariants (route.py's docstrings): ``feed`` returns only the documented frame types or
raises RouteProtocolError, and nothing else; the frames (and whether it fails) do not
depend on how the bytes are cut; ``buffered`` never exceeds ``max_frame`` + 4; every frame,
encoded again with the module's encoder, decodes to itself; an APP frame of kind ``raft``
carries a RAFT batch whose decoder (jetraft.raft.wire) raises only ValueError.
"""

from __future__ import annotations

import contextlib

import atheris

from fuzz_support import chunks, main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.raft import wire as raft_wire
    from jetraft.protocol import route as rp

_ENCODERS = {
    rp.RouteInfo: rp.encode_info,
    rp.RouteConnect: lambda f: rp.encode_connect(f.user, f.password),
    rp.RouteErr: lambda f: rp.encode_err(f.code, f.text),
    rp.RoutePing: lambda f: rp.PING,
    rp.RoutePong: lambda f: rp.PONG,
    rp.RouteSub: lambda f: rp.encode_sub(f.account, f.subject, f.queue, f.weight),
    rp.RouteUnsub: lambda f: rp.encode_unsub(f.account, f.subject, f.queue),
    rp.RouteMsg: lambda f: rp.encode_msg(f.account, f.subject, f.reply, f.headers, f.payload,
                                         f.queues, f.deliver_as),
    rp.AppFrame: lambda f: rp.encode_app(f.kind, f.body),
    rp.RouteSubs: lambda f: rp.encode_subs(f.account, f.subjects),
    rp.RouteUnsubs: lambda f: rp.encode_unsubs(f.account, f.subjects),
}


def _run(max_frame: int, pieces: list[bytes]) -> tuple[list, bool]:
    """Feed ``pieces``; return the frames and whether the parser refused the bytes."""
    parser = rp.RouteParser(max_frame)
    frames: list = []
    for piece in pieces:
        try:
            got = parser.feed(piece)
        except rp.RouteProtocolError:
            return frames, True
        assert type(got) is list, got
        assert parser.buffered <= max_frame + 4, parser.buffered
        frames += got
    return frames, False


def _check_frame(frame: object) -> None:
    encode = _ENCODERS.get(type(frame))
    assert encode is not None, f"undocumented frame {frame!r}"
    again = rp.RouteParser().feed(encode(frame))
    assert again == [frame], f"{frame!r} encodes and decodes to {again!r}"
    if isinstance(frame, rp.AppFrame) and frame.kind == "raft":
        try:
            messages = raft_wire.decode_batch(frame.body)
        except ValueError:
            return
        assert raft_wire.decode_batch(raft_wire.encode_batch(messages)) == messages


def TestOneInput(data: bytes) -> None:
    options, pieces = chunks(data)
    max_frame = 4096 if options & 1 else rp.MAX_FRAME
    whole, whole_failed = _run(max_frame, [b"".join(pieces)])
    split, split_failed = _run(max_frame, pieces)
    assert split_failed == whole_failed, f"chunks {pieces!r}: failed {split_failed}, whole {whole_failed}"
    if not whole_failed:  # (a feed that raises loses the frames before the bad one)
        assert split == whole, f"chunks {pieces!r}: {split!r} != whole {whole!r}"
    for frame in split:
        _check_frame(frame)
    # decode_frame on its own: the body of the first frame, or the bytes as they are.
    body = b"".join(pieces)
    if len(body) >= 4:
        n = int.from_bytes(body[:4], "big")
        if 0 < n <= len(body) - 4:
            body = body[4:4 + n]
    try:
        frame = rp.decode_frame(body)
    except rp.RouteProtocolError:
        return
    _check_frame(frame)


if __name__ == "__main__":
    main(TestOneInput)
