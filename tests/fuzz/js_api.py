"""Fuzz target: a whole JetStream account's request handling (JetStreamAccount.handle_api).

Each input runs on a fresh account (tests/fuzz/js_account.py: streams S in memory and F on
file, with messages and a pull consumer) and is a series of up to 6 requests separated by
two NUL bytes; in each, the part before the first NUL says what it is and the rest is the
payload:

- ``<suffix>``: a request to ``$JS.API.<suffix>`` with reply subject ``_INBOX.fuzz``;
- ``+<subject>``: a publish to ``<subject>`` (stored when a stream takes it);
- ``@<suffix>``: an ack to ``$JS.ACK.<suffix>``;
- ``~``: the account's timers (``poll``).

Requests are 1 s apart. Subjects are what a client can send (no blanks, not empty).

Invariants: no exception comes out of handle_api, publish, ack or poll (the API answers
every failure with an error reply, nats-server's JSApiError shape; the account's
"internal error" safety net re-raises here, see js_account); every answer has the
documented shape (js_account.check_api_replies); after the account is closed, a new one on
the same directory recovers every file-backed stream with the same configuration and
messages, and reports no recovery problem.
"""

from __future__ import annotations

import contextlib
import os
import shutil

import atheris

from fuzz_support import main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.jetstream.api import JetStreamAccount

    import js_account
    from js_account import REPLY, T0, check_api_replies, check_headers

MAX_REQUESTS = 6
SECOND = 1_000_000_000
_BLANKS = (b" ", b"\t", b"\r", b"\n")

_root: str | None = None
_count = 0


def _directory() -> str:
    global _root, _count
    if _root is None:
        _root = js_account.scratch_root()
    _count += 1
    return os.path.join(_root, str(_count))


def requests(data: bytes) -> list[tuple[str, bytes, bytes]]:
    """The (kind, subject bytes, payload) of each request in ``data``; kind is one of
    "api", "pub", "ack", "poll"."""
    out = []
    for record in data.split(b"\x00\x00")[:MAX_REQUESTS]:
        head, _, payload = record.partition(b"\x00")
        if head[:1] == b"+":
            out.append(("pub", head[1:], payload))
        elif head[:1] == b"@":
            out.append(("ack", b"$JS.ACK." + head[1:], payload))
        elif head[:1] == b"~":
            out.append(("poll", b"", payload))
        else:
            out.append(("api", b"$JS.API." + head, payload))
    return out


def _durable_view(acc: JetStreamAccount) -> dict:
    """What a restart must give back: each file stream's config, messages and consumers."""
    view = {}
    for name, entry in acc.streams.items():
        if entry.directory is None:
            continue
        st = entry.stream.store.state()
        view[name] = (entry.stream.config.to_json(), st.messages, st.first_seq, st.last_seq,
                      sorted(entry.consumers))
    return view


class _Recorder:
    def __init__(self) -> None:
        self.problems: list[dict] = []

    def emit(self, name: str, **fields) -> None:
        if name == "jetstream_recovery_problem":
            self.problems.append(fields)


def TestOneInput(data: bytes) -> None:
    directory = _directory()
    acc = js_account.new_account(directory)
    closed = False
    try:
        for i, (kind, raw_subject, payload) in enumerate(requests(data)):
            now = T0 + (i + 1) * SECOND
            subject = raw_subject.decode("utf-8", "surrogateescape")
            if kind != "poll" and (not raw_subject or any(b in raw_subject for b in _BLANKS)):
                continue
            if kind == "api":
                check_api_replies(subject, REPLY, acc.handle_api(subject, REPLY, None, payload, now))
            elif kind == "pub":
                entry = acc.stream_for(subject)
                if entry is not None:
                    for r in acc.publish(entry, subject, "_INBOX.pub", None, payload, now):
                        check_headers(r.out.headers)
            elif kind == "ack":
                for r in acc.ack(subject, "_INBOX.ack", payload, now):
                    check_headers(r.out.headers)
            else:
                for r in acc.poll(now):
                    check_headers(r.out.headers)
        expected = _durable_view(acc)
        acc.sync.sync()
        closed = True
        acc.close()
        events = _Recorder()
        again = js_account.bare_account(directory, events)
        again.recover(T0 + 100 * SECOND)
        try:
            assert not events.problems, events.problems
            assert _durable_view(again) == expected, (_durable_view(again), expected)
        finally:
            again.close()
    finally:
        if closed:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            js_account.close_account(acc, directory)


if __name__ == "__main__":
    main(TestOneInput)
