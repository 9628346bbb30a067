"""Fuzz target: the pull request decoder (jetraft.jetstream.consumer_pull._parse_next_request).

Input: the body of a ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` request.

Invariant (its docstring, nats-server ``nextReqFromMsg``): it returns ``(batch, expires ns,
max_bytes, no_wait, heartbeat ns, priority fields)`` -- ints, a bool and a PriorityGroup (of
strings and ints; None for a body that is not JSON) -- or raises ``_BadRequest`` with
nats-server's reason, and nothing else.
"""

from __future__ import annotations

import contextlib

import atheris

from fuzz_support import main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.jetstream.consumer_priority import PriorityGroup
    from jetraft.jetstream.consumer_pull import _BadRequest, _parse_next_request


def TestOneInput(data: bytes) -> None:
    try:
        result = _parse_next_request(data)
    except _BadRequest as exc:
        assert exc.args and type(exc.args[0]) is str, exc
        return
    assert type(result) is tuple and len(result) == 6, result
    batch, expires, max_bytes, no_wait, hb, pg = result
    assert all(type(v) is int for v in (batch, expires, max_bytes, hb)), result
    assert type(no_wait) is bool, result
    assert hb <= 0 or hb * 2 <= expires, result
    if pg is not None:
        assert type(pg) is PriorityGroup, result
        assert type(pg.group) is str and type(pg.id) is str, result
        assert all(type(v) is int for v in (pg.min_pending, pg.min_ack_pending, pg.priority)), result
    else:
        assert not data.strip().startswith(b"{"), result


if __name__ == "__main__":
    main(TestOneInput)
