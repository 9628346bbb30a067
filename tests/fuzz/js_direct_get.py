"""Fuzz target: DIRECT.GET request decoding (JetStreamAccount._direct_get via handle_api).

Input: a flags byte, then the request. Flags: bit 0 = stream F (file) instead of S
(memory); bit 1 = the request is ``<subject>\\0<payload>``: the subject is appended to the
API subject (``$JS.API.DIRECT.GET.<stream>.<subject>``, last message on that subject),
else the whole rest is the JSON payload. Runs on one account built once
(tests/fuzz/js_account.py): DIRECT.GET only reads.

Invariants (nats-server stream.go processDirectGetRequest, getDirectRequest,
getDirectMulti): no exception; every reply goes to the request's reply subject; one reply,
or for a batch or multi-last get the messages then an empty ``204 EOB`` carrying
Nats-Num-Pending and Nats-Last-Sequence; each message has Nats-Stream, Nats-Subject,
Nats-Sequence and Nats-Time-Stamp headers (Nats-Num-Pending too in a batch), or is an empty
message with a 404, 408 or 413 status; header blocks parse (no block with ``no_hdrs``).
"""

from __future__ import annotations

import contextlib

import atheris

from fuzz_support import main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.protocol import headers as hdr

    import js_account
    from js_account import REPLY, T0

_BLANKS = (b" ", b"\t", b"\r", b"\n")
_account = None


def _acc():
    global _account
    if _account is None:
        root = js_account.scratch_root()
        _account = js_account.new_account(root)
    return _account


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    flags, rest = data[0], data[1:]
    stream = "F" if flags & 1 else "S"
    subject = f"$JS.API.DIRECT.GET.{stream}"
    payload = rest
    if flags & 2:
        tail, _, payload = rest.partition(b"\x00")
        if not tail or any(b in tail for b in _BLANKS):
            return
        subject += "." + tail.decode("utf-8", "surrogateescape")
    out = _acc().handle_api(subject, REPLY, None, payload, T0)
    assert type(out) is list and out, out
    msgs = [r.out for r in out]
    assert all(m.subject == REPLY and type(m.data) is bytes for m in msgs), msgs
    if len(msgs) > 1:
        eob = hdr.parse(msgs[-1].headers)
        assert eob.status == "204" and msgs[-1].data == b"", eob
        assert eob.get("Nats-Num-Pending") and eob.get("Nats-Last-Sequence"), eob
        msgs = msgs[:-1]
    for msg in msgs:
        _check_message(msg, stream, batch=len(out) > 1)


def _check_message(msg, stream: str, batch: bool) -> None:
    if msg.headers is None:  # a stored message asked for with "no_hdrs"
        assert msg.data, msg
        return
    h = hdr.parse(msg.headers)
    if h.status:
        assert not batch and h.status in ("404", "408", "413") and msg.data == b"", (h, msg)
        return
    assert h.get("Nats-Stream") == stream, h
    for key in ("Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp") + (("Nats-Num-Pending",) if batch else ()):
        assert h.get(key), (key, h)

if __name__ == "__main__":
    main(TestOneInput)
