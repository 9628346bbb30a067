"""JetStream advisories without a server: their form, who gets them, and fault isolation.

The shapes are compared with nats-server's in tests/compat/test_compat_advisories.py; here:
ids in nuid form and never repeated, no advisory built when nobody listens, and an
advisory that fails to build never breaks the request that caused it.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from jetraft.events import EVENTS
from jetraft.jetstream import advisories as adv
from jetraft.jetstream.api import JetStreamAccount

T0 = 1_800_000_000_000_000_000
REPLY = "_INBOX.r"
CREATE = json.dumps({"name": "S", "subjects": ["s.>"], "storage": "memory"}).encode()


def recorder() -> SimpleNamespace:
    """An event log that keeps (name, fields) of every event it is given, in ``lines``."""
    lines: list[tuple[str, dict]] = []

    def emit(name: str, **fields) -> None:
        assert name in EVENTS, name
        lines.append((name, fields))
    return SimpleNamespace(emit=emit, lines=lines)


def account(listening) -> JetStreamAccount:
    return JetStreamAccount("$G", store_dir=None, sync=None, events=recorder(), interest=lambda s: True,
                            server_version="2.15.1", server_name="n1", domain="hub",
                            advisory_interest=listening)


def test_ids_are_nuids_and_never_repeat():
    nuid = adv.Nuid()
    ids = [nuid.next() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9A-Za-z]{22}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert adv.Nuid().next()[:12] != nuid.next()[:12]


def test_a_stream_create_with_listeners_sends_its_action_and_audit_in_the_account():
    acc = account(lambda subject: subject.startswith("$JS.EVENT."))
    client = {"id": 7, "acc": "$G"}
    out = acc.handle_api("$JS.API.STREAM.CREATE.S", REPLY, None, CREATE, T0, client)
    assert [r.out.subject for r in out] == [REPLY, "$JS.EVENT.ADVISORY.STREAM.CREATED.S",
                                           "$JS.EVENT.ADVISORY.API"]
    action, audit = (json.loads(r.out.data) for r in out[1:])
    assert {k: action[k] for k in ("type", "stream", "action", "domain")} == {
        "type": "io.nats.jetstream.advisory.v1.stream_action", "stream": "S", "action": "create",
        "domain": "hub"}
    assert audit["server"] == "n1" and audit["client"] == client
    assert audit["request"] == CREATE.decode() and audit["response"] == out[0].out.data.decode()


def test_nobody_listening_means_no_advisory():
    for listening in (None, lambda subject: False):
        out = account(listening).handle_api("$JS.API.STREAM.CREATE.S", REPLY, None, CREATE, T0)
        assert [r.out.subject for r in out] == [REPLY]


def test_an_advisory_that_fails_never_breaks_the_request(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("advisory bug")

    monkeypatch.setattr(adv, "stream_action", broken)
    acc = account(lambda subject: True)
    out = acc.handle_api("$JS.API.STREAM.CREATE.S", REPLY, None, CREATE, T0)
    assert [r.out.subject for r in out] == [REPLY, "$JS.EVENT.ADVISORY.API"]
    assert json.loads(out[0].out.data)["did_create"] is True
    assert "S" in acc.streams
    failed = [f for name, f in acc.events.lines if name == "advisory_failed"]
    assert failed == [{"account": "$G", "advisory": "broken", "error": "RuntimeError('advisory bug')"}]
    # and the next request is served with its advisories
    monkeypatch.undo()
    out = acc.handle_api("$JS.API.STREAM.DELETE.S", REPLY, None, b"", T0)
    assert [r.out.subject for r in out] == [REPLY, "$JS.EVENT.ADVISORY.STREAM.DELETED.S",
                                           "$JS.EVENT.ADVISORY.API"]
