"""Request-level fault isolation of the JetStream API, without a server.

An exception raised inside the handling of one request (injected here) is answered with
nats-server's 500 error for the request's response type, reported as
``api_request_failed`` with its traceback, and never propagates; the next request is
served as usual. The clustered path (the cluster controller) is tested the same way in
tests/unit/jetstream_cluster/test_cluster_controller.py.
"""

from __future__ import annotations

import json

import pytest

from jetraft.events import EVENTS
from jetraft.jetstream.api import JetStreamAccount

T0 = 1_800_000_000_000_000_000
REPLY = "_INBOX.r"


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields) -> None:
        assert name in EVENTS, name
        self.lines.append((name, fields))


@pytest.fixture
def account():
    acc = JetStreamAccount("$G", store_dir=None, sync=None, events=Events(), interest=lambda s: True,
                           server_version="2.15.1")
    body = json.dumps({"name": "KV", "subjects": ["kv.>"], "allow_direct": True, "storage": "memory"})
    (created,) = acc.handle_api("$JS.API.STREAM.CREATE.KV", REPLY, None, body.encode(), T0)
    assert "error" not in json.loads(created.out.data)
    acc.publish(acc.streams["KV"], "kv.a", None, None, b"hi", T0)
    consumer = {"stream_name": "KV", "config": {"durable_name": "c", "ack_policy": "explicit"}}
    acc.handle_api("$JS.API.CONSUMER.DURABLE.CREATE.KV.c", REPLY, None, json.dumps(consumer).encode(), T0)
    return acc


def boom(*_args, **_kwargs):
    raise RuntimeError("injected failure")


def failures(acc: JetStreamAccount) -> list[dict]:
    return [fields for name, fields in acc.events.lines if name == "api_request_failed"]


def answer(acc: JetStreamAccount, subject: str, body: bytes = b"") -> dict:
    (reply,) = acc.handle_api(subject, REPLY, None, body, T0)
    assert reply.out.subject == REPLY and reply.out.headers is None
    return json.loads(reply.out.data)


@pytest.mark.parametrize(("subject", "handler", "expected"), [
    ("$JS.API.STREAM.INFO.KV", "_api_stream_info",
     {"type": "io.nats.jetstream.api.v1.stream_info_response",
      "error": {"code": 500, "err_code": 10051, "description": "internal error"},
      "total": 0, "offset": 0, "limit": 0}),
    ("$JS.API.STREAM.CREATE.X", "_api_stream_create",
     {"type": "io.nats.jetstream.api.v1.stream_create_response",
      "error": {"code": 500, "err_code": 10049, "description": "internal error"}}),
    ("$JS.API.STREAM.PURGE.KV", "_api_stream_purge",
     {"type": "io.nats.jetstream.api.v1.stream_purge_response",
      "error": {"code": 500, "err_code": 10110, "description": "internal error"}, "purged": 0}),
    ("$JS.API.CONSUMER.CREATE.KV", "_api_consumer_create",
     {"type": "io.nats.jetstream.api.v1.consumer_create_response",
      "error": {"code": 500, "err_code": 10012, "description": "internal error"}}),
    ("$JS.API.INFO", "_api_info",
     {"type": "io.nats.jetstream.api.v1.account_info_response",
      "error": {"code": 500, "err_code": 10051, "description": "internal error"}}),
])
def test_a_failing_handler_answers_its_request_and_the_next_one_works(account, monkeypatch, subject,
                                                                      handler, expected):
    before = (account.api_total, account.api_errors)
    monkeypatch.setattr(JetStreamAccount, handler, boom)
    assert answer(account, subject, b"{}" if "CREATE" in subject else b"") == expected
    (event,) = failures(account)
    assert (event["account"], event["subject"]) == ("$G", subject)
    assert event["error"] == "RuntimeError('injected failure')"
    assert "Traceback" in event["traceback"] and "injected failure" in event["traceback"]
    assert (account.api_total, account.api_errors) == (before[0] + 1, before[1] + 1)
    # the next requests, on this subject and others, are served as usual
    monkeypatch.undo()
    assert answer(account, "$JS.API.STREAM.NAMES")["streams"] == ["KV"]
    assert answer(account, "$JS.API.STREAM.INFO.KV")["state"]["messages"] == 1
    assert len(failures(account)) == 1


@pytest.mark.parametrize(("subject", "handler"), [
    ("$JS.API.DIRECT.GET.KV", "_direct_get"),
    ("$JS.API.CONSUMER.MSG.NEXT.KV.c", "_msg_next"),
])
def test_a_failing_status_request_gets_a_500_status(account, monkeypatch, subject, handler):
    monkeypatch.setattr(JetStreamAccount, handler, boom)
    (reply,) = account.handle_api(subject, REPLY, None, b'{"seq":1}', T0)
    assert (reply.out.subject, reply.out.headers, reply.out.data) == (
        REPLY, b"NATS/1.0 500 Internal Server Error\r\n\r\n", b"")
    assert [e["subject"] for e in failures(account)] == [subject]
    monkeypatch.undo()
    (reply,) = account.handle_api("$JS.API.DIRECT.GET.KV", REPLY, None, b'{"seq":1}', T0)
    assert reply.out.data == b"hi"


def test_a_failure_without_a_reply_subject_is_reported_and_unanswered(account, monkeypatch):
    monkeypatch.setattr(JetStreamAccount, "_direct_get", boom)
    assert account.handle_api("$JS.API.DIRECT.GET.KV", None, None, b'{"seq":1}', T0) == []
    assert len(failures(account)) == 1
