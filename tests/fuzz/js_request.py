"""Fuzz target: the $JS.API request body decoders (jetraft.jetstream.requests).

Input: one byte choosing the request type (its value modulo the number of types in
REQUESTS), then the request body as a client publishes it.

Each request is decoded as its handler does: ``decode_request`` (Go encoding/json's
errors), ``check_fields`` (unknown fields), then ``int_field``/``str_field`` for its
typed fields. Invariant: these return the documented shapes (None or a dict; an int; a
str) or raise JSApiError 10025 "invalid JSON: ..." (400), and nothing else.
"""

from __future__ import annotations

import contextlib

import atheris

from fuzz_support import main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.jetstream.requests import (
        MSG_GET_TYPES,
        check_fields,
        decode_request,
        int_field,
        str_field,
    )
    from jetraft.jetstream.errors import JSApiError

#: (Go request type, allowed fields or None when any field is accepted, integer fields with
#: their Go types, string fields): what each handler in api.py checks.
REQUESTS: tuple[tuple[str, tuple[str, ...] | None, tuple[tuple[str, str], ...], tuple[str, ...]], ...] = (
    ("StreamConfigRequest", None, (), ()),
    ("JSApiStreamInfoRequest", ("deleted_details", "subjects_filter", "offset"), (), ("subjects_filter",)),
    ("JSApiStreamPurgeRequest", ("filter", "seq", "keep"), (("seq", "uint64"), ("keep", "uint64")), ("filter",)),
    ("JSApiMsgGetRequest", tuple(MSG_GET_TYPES),
     (("seq", "uint64"), ("batch", "int"), ("max_bytes", "int")), ("last_by_subj", "next_by_subj")),
    ("JSApiMsgDeleteRequest", ("seq", "no_erase"), (("seq", "uint64"),), ()),
    ("JSApiStreamNamesRequest", ("offset", "subject"), (("offset", "int"),), ("subject",)),
    ("JSApiStreamListRequest", ("offset", "subject"), (("offset", "int"),), ("subject",)),
    ("JSApiConsumersRequest", ("offset",), (("offset", "int"),), ()),
    ("CreateConsumerRequest", ("stream_name", "config", "action", "pedantic"), (), ("stream_name", "action")),
)


def _check_error(err: JSApiError) -> None:
    assert err.err_code == 10025 and err.code == 400, err
    assert err.description.startswith("invalid JSON: "), err.description


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    go_type, allowed, ints, strs = REQUESTS[data[0] % len(REQUESTS)]
    payload = data[1:]
    try:
        req = decode_request(payload, go_type)
        assert req is None or type(req) is dict, req
        if req is None:
            return
        if allowed is not None:
            check_fields(req, allowed)
        for key, gotype in ints:
            value = int_field(req, key, go_type, gotype)
            assert type(value) is int, value
            assert not gotype.startswith("uint") or value >= 0, value
        for key in strs:
            assert type(str_field(req, key, go_type)) is str
    except JSApiError as err:
        _check_error(err)


if __name__ == "__main__":
    main(TestOneInput)
