"""A standalone JetStream account for the $JS.API fuzz targets (not a target itself).

:func:`new_account` builds a :class:`JetStreamAccount` as ``net/jetstream/service.py`` does, with no
server around it, its files in ``directory`` (see :func:`scratch_root`): stream ``S``
(memory, ``s.>``, allow_direct) holding three messages (one with headers) and a durable
pull consumer ``C``; stream ``F`` (file, ``f.>``, allow_direct, max_msgs_per_subject 2)
holding two messages.

:func:`check_api_replies` is the invariant shared by the targets: what ``handle_api``
returned has the documented shape.

The account's safety net (``JetStreamAccount.api_failed``: an unexpected exception while
handling a request is answered with a 500 "internal error" and reported) is replaced by
one that raises the exception again: the net keeps a server alive, but what it catches is
still a crash of the request's handling, which the fuzzer must see.

Import it inside ``atheris.instrument_imports()``: it imports the code under test.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile

from jetraft.jetstream.api import JetStreamAccount, Reply
from jetraft.protocol import headers as hdr
from jetraft.storage import GroupCommit

#: The time of every request (ns since the epoch); a target adds to it as requests go by.
T0 = 1_800_000_000_000_000_000
REPLY = "_INBOX.fuzz"
API_TYPE_PREFIX = "io.nats.jetstream.api.v1."

_STREAMS = (
    {"name": "S", "subjects": ["s.>"], "storage": "memory", "allow_direct": True},
    {"name": "F", "subjects": ["f.>"], "storage": "file", "allow_direct": True,
     "max_msgs_per_subject": 2},
)
_MESSAGES = (
    ("s.a", None, b"first"),
    ("s.b", b"NATS/1.0\r\nNats-Msg-Id: m2\r\nA: b\r\n\r\n", b"second \x00\xff binary"),
    ("s.a", None, b"third"),
    ("f.x", None, b"file one"),
    ("f.y.z", b"NATS/1.0\r\nA: 1\r\n\r\n", b"file two"),
)
_CONSUMER = {"stream_name": "S", "config": {"durable_name": "C", "ack_policy": "explicit",
                                            "max_deliver": 3}}


class _Events:
    def emit(self, name: str, **fields) -> None:
        pass


#: A directory the caller owns and removes, for the accounts' stores (tests/fuzz/run.py and
#: the test suite set it: libFuzzer ends the process without running atexit handlers).
SCRATCH_ENV = "JETRAFT_FUZZ_SCRATCH"


def scratch_root() -> str:
    """A fresh directory for accounts: under $JETRAFT_FUZZ_SCRATCH when set (run.py and the
    test suite put it on /dev/shm when there is one), else in the system's temporary
    directory; removed at interpreter exit when Python gets to run that."""
    root = tempfile.mkdtemp(prefix="jetraft-fuzz-", dir=os.environ.get(SCRATCH_ENV) or None)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _raise_again(subject: str, reply: str | None, exc: BaseException):
    raise exc


def bare_account(directory: str, events=None) -> JetStreamAccount:
    """An empty account on ``directory`` whose API lets unexpected exceptions out."""
    acc = JetStreamAccount("$G", store_dir=directory, sync=GroupCommit(), events=events or _Events(),
                           interest=lambda subject: True, server_version="2.15.1",
                           sync_always=False, server_name="fuzz")
    acc.api_failed = _raise_again
    return acc


def new_account(directory: str) -> JetStreamAccount:
    """The account described in the module docstring, its store in ``directory``."""
    acc = bare_account(directory)
    for config in _STREAMS:
        out = acc.handle_api(f"$JS.API.STREAM.CREATE.{config['name']}", REPLY, None,
                             json.dumps(config).encode(), T0)
        assert out and "error" not in json.loads(out[0].out.data), out
    for i, (subject, headers, data) in enumerate(_MESSAGES):
        entry = acc.stream_for(subject)
        acc.publish(entry, subject, None, headers, data, T0 + i)
    out = acc.handle_api("$JS.API.CONSUMER.CREATE.S.C", REPLY, None, json.dumps(_CONSUMER).encode(), T0)
    assert out and "error" not in json.loads(out[0].out.data), out
    return acc


def close_account(acc: JetStreamAccount, directory: str) -> None:
    """Close ``acc``'s stores and remove ``directory``."""
    acc.sync.sync()
    acc.close()
    shutil.rmtree(directory, ignore_errors=True)


def check_headers(block: bytes | None) -> None:
    """A header block we send parses (jetraft.protocol.headers.parse raises nothing)."""
    if block is not None:
        assert type(block) is bytes, block
        hdr.parse(block)


def check_api_replies(subject: str, reply: str | None, out: object) -> None:
    """What ``handle_api(subject, reply, ...)`` returned has the documented shape: None (no
    responders) or a list of Reply; an API answer (first reply) to ``reply`` whose body is
    a JSON object with nats-server's ``type`` and, on failure, an ``error`` of exactly
    ``code``, ``err_code`` and ``description``; DIRECT.GET and MSG.NEXT answer with messages
    whose headers parse."""
    if out is None:
        return
    assert type(out) is list and all(type(r) is Reply for r in out), out
    for r in out:
        assert type(r.out.subject) is str and r.out.subject, r
        assert r.out.data is not None and type(bytes(r.out.data)) is bytes, r
        check_headers(r.out.headers)
    tokens = subject.split(".")
    kind = ".".join(tokens[2:4])
    if kind in ("DIRECT.GET", "CONSUMER.MSG") or not out:
        return
    first = out[0].out
    assert first.subject == reply, first
    body = json.loads(first.data)
    assert type(body) is dict and str(body.get("type", "")).startswith(API_TYPE_PREFIX), body
    if "error" in body:
        err = body["error"]
        assert type(err) is dict and set(err) == {"code", "err_code", "description"}, body
        assert type(err["code"]) is int and type(err["err_code"]) is int, body
        assert type(err["description"]) is str, body
