"""Durable links (jetstream/sourcing.py, nats-server 2.14 ADR-60) on one server, sans-IO: a
mirror or source of a workqueue or interest origin keeps its position in a consumer of the
origin with ``ack_policy: flow_control``; a message leaves the origin only once the link
asked past it (it is stored), and nothing is acknowledged before the link knows which
origin it reads."""

from __future__ import annotations

import json

from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.consumer_delivery import flow_control_last
from jetraft.jetstream.sourcing import FetchRequest, LinkStep, SourceSpec, link_consumer, origin_answer
from jetraft.storage import GroupCommit

T0 = 1_800_000_000_000_000_000
SECOND = 1_000_000_000


class Events:
    def emit(self, name: str, **fields) -> None:
        pass


def account() -> JetStreamAccount:
    return JetStreamAccount("$G", store_dir=None, sync=GroupCommit(), events=Events(),
                            interest=lambda s: not s.startswith(("$JS.M.", "$JS.S.")), server_version="2.15.1")


def api(acc: JetStreamAccount, subject: str, body: dict | None = None, now: int = T0) -> dict:
    out = acc.handle_api(subject, "_INBOX.r", None, json.dumps(body).encode() if body else b"", now)
    return json.loads(out[0].out.data)


def origin(acc: JetStreamAccount, retention: str, n: int) -> None:
    assert "error" not in api(acc, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"],
                                                              "storage": "memory", "retention": retention})
    for i in range(n):
        acc.publish(acc.streams["W"], f"w.{i % 2}", None, None, f"m{i}".encode(), T0 + i)


def run_until_idle(acc: JetStreamAccount, name: str, start: int) -> int:
    """Runs the stream's links at each of their deadlines until none fetches anything new."""
    now = start
    for _ in range(50):
        acc.run_links(name, now)
        now = max(now + 1, acc.sources_deadline(acc.streams[name]) or now + SECOND)
    return now


def state(acc: JetStreamAccount, name: str) -> tuple[int, int, int]:
    st = acc.streams[name].stream.store.state()
    return st.messages, st.first_seq, st.last_seq


def test_a_mirror_of_a_workqueue_origin_takes_every_message_once_and_empties_it():
    acc = account()
    origin(acc, "workqueue", 5)
    assert "error" not in api(acc, "$JS.API.STREAM.CREATE.M", {"name": "M", "storage": "memory",
                                                              "mirror": {"name": "W"}})
    now = run_until_idle(acc, "M", T0 + SECOND)
    assert state(acc, "M") == (5, 1, 5)
    assert state(acc, "W") == (0, 6, 5)
    (name,) = acc.streams["W"].consumers
    spec = SourceSpec.parse({"name": "W"}, mirror=True)
    assert name == link_consumer("M", "$G", spec, [spec])[0] and name.startswith("JS_MIRROR_")
    info = api(acc, f"$JS.API.CONSUMER.INFO.W.{name}", now=now)
    assert info["config"]["ack_policy"] == "flow_control" and info["ack_floor"]["stream_seq"] == 5
    # more messages later go the same way
    for i in range(3):
        acc.publish(acc.streams["W"], "w.x", None, None, b"late", now + i)
    run_until_idle(acc, "M", now + SECOND)
    assert state(acc, "M") == (8, 1, 8) and state(acc, "W") == (0, 9, 8)


def test_an_interest_origin_keeps_a_message_until_its_other_consumer_acks_it_too():
    acc = account()
    assert "error" not in api(acc, "$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w.>"],
                                                              "storage": "memory", "retention": "interest"})
    assert "error" not in api(acc, "$JS.API.CONSUMER.CREATE.W.X", {
        "stream_name": "W", "config": {"durable_name": "X", "ack_policy": "all"}})
    for i in range(3):
        acc.publish(acc.streams["W"], "w.a", None, None, b"m", T0 + i)
    assert "error" not in api(acc, "$JS.API.STREAM.CREATE.S", {"name": "S", "storage": "memory",
                                                              "sources": [{"name": "W"}]})
    run_until_idle(acc, "S", T0 + SECOND)
    assert state(acc, "S")[0] == 3 and state(acc, "W")[0] == 3      # X has acked nothing
    now = T0 + 100 * SECOND
    pulled = acc.handle_api("$JS.API.CONSUMER.MSG.NEXT.W.X", "_INBOX.pull", None, b'{"batch": 3}', now)
    pulled = [*pulled, *acc.poll(now)]
    acks = [r.out.reply for r in pulled if r.out.reply and r.out.reply.startswith("$JS.ACK.")]
    assert len(acks) == 3
    acc.ack(acks[-1], None, b"+ACK", now)        # ack policy all: the last acks every one
    assert state(acc, "W")[0] == 0


def test_nothing_is_acknowledged_before_the_link_knows_its_origin_nor_on_another_one():
    acc = account()
    origin(acc, "workqueue", 4)
    entry = acc.streams["W"]
    created = entry.stream.created_ns
    cfg = {"durable_name": "C", "ack_policy": "flow_control", "deliver_subject": "dl.c"}
    assert "error" not in api(acc, "$JS.API.CONSUMER.CREATE.W.C", {"stream_name": "W", "config": cfg})
    first = FetchRequest("W", 3, None, (">",), "", consumer="C", named=True, mirror=True, asker="M")
    answer, create, step = origin_answer(entry.stream, entry.consumers, first, created)
    assert create is None and [m[0] for m in answer.msgs] == [3, 4]
    assert step == LinkStep("C", 0, (3, 4))          # delivered, nothing acknowledged
    other = FetchRequest("W", 3, None, (">",), "another", consumer="C", named=True, mirror=True)
    answer, _, step = origin_answer(entry.stream, entry.consumers, other, created)
    assert step is None and answer.msgs == ()
    known = FetchRequest("W", 3, None, (">",), answer.ident, consumer="C", named=True, mirror=True)
    _, _, step = origin_answer(entry.stream, entry.consumers, known, created)
    assert step is not None and step.ack_seq == 2


def test_a_named_consumer_missing_or_without_flow_control_acks_is_the_links_error():
    acc = account()
    origin(acc, "limits", 2)
    entry = acc.streams["W"]
    req = FetchRequest("W", 1, None, (">",), consumer="MC", named=True, mirror=True)
    answer, create, step = origin_answer(entry.stream, entry.consumers, req, 0)
    assert answer.error["err_code"] == 10014 and create is None and step is None
    api(acc, "$JS.API.CONSUMER.CREATE.W.MC", {"stream_name": "W", "config": {"durable_name": "MC",
                                                                             "ack_policy": "explicit"}})
    answer, _, _ = origin_answer(entry.stream, entry.consumers, req, 0)
    assert answer.error == {"code": 400, "err_code": 10214,
                            "description": "stream mirror consumer requires flow control ack policy"}
    source = FetchRequest("W", 1, None, (">",), consumer="MC", named=True, mirror=False)
    assert origin_answer(entry.stream, entry.consumers, source, 0)[0].error["err_code"] == 10217
    # a limits origin read by a plain link: no consumer, nothing moved
    plain = FetchRequest("W", 1, None, (">",), consumer="JS_MIRROR_x", named=False, mirror=True)
    answer, create, step = origin_answer(entry.stream, entry.consumers, plain, 0)
    assert len(answer.msgs) == 2 and create is None and step is None


def test_a_flow_control_answer_acknowledges_what_it_reports_stored():
    acc = account()
    origin(acc, "workqueue", 3)
    cfg = {"durable_name": "F", "ack_policy": "flow_control", "deliver_subject": "dl.f", "max_ack_pending": 3}
    created = acc.handle_api("$JS.API.CONSUMER.CREATE.W.F", "_INBOX.r", None,
                             json.dumps({"stream_name": "W", "config": cfg}).encode(), T0)
    sent = [r.out for r in [*created, *acc.poll(T0 + SECOND)]]
    assert [m.data for m in sent if m.subject == "dl.f" and m.data] == [b"m0", b"m1", b"m2"]
    # held at max_ack_pending, the consumer asks for the flow-control answer that acks
    (fc,) = [m.reply for m in sent if m.reply and m.reply.startswith("$JS.FC.W.F.")]
    assert state(acc, "W") == (3, 1, 3)
    acc.flow_control(fc, T0 + 2 * SECOND, (2, 2))
    assert state(acc, "W") == (1, 3, 3) and acc.streams["W"].consumers["F"].ack_floor_seq == 2
    acc.flow_control(fc, T0 + 3 * SECOND, (3, 3))      # answered already: ignored
    assert state(acc, "W") == (1, 3, 3)


def test_a_flow_control_answer_with_bad_headers_acks_nothing():
    assert flow_control_last(None) is None and flow_control_last(b"") is None
    assert flow_control_last(b"not headers") is None
    assert flow_control_last(b"NATS/1.0\r\nNats-Last-Stream: x\r\n\r\n") is None
    assert flow_control_last(b"NATS/1.0\r\nNats-Last-Stream: 99999999999999999999999\r\n\r\n") is None
    assert flow_control_last(b"NATS/1.0\r\nNats-Last-Stream: 7\r\nNats-Last-Consumer: -2\r\n\r\n") == (7, 0)
    assert flow_control_last(b"NATS/1.0\r\nNats-Last-Stream: 7\r\nNats-Last-Consumer: 3\r\n\r\n") == (7, 3)


def test_a_reset_body_is_checked_as_nats_server_decodes_it():
    acc = account()
    origin(acc, "limits", 3)
    cfg = {"durable_name": "R", "ack_policy": "explicit"}
    assert "error" not in api(acc, "$JS.API.CONSUMER.CREATE.W.R", {"stream_name": "W", "config": cfg})
    for body in (b'{"seq": -1}', b'{"seq": "2"}', b'[1]', b'{"seq": 1.5}'):
        out = acc.handle_api("$JS.API.CONSUMER.RESET.W.R", "_INBOX.r", None, body, T0)
        got = json.loads(out[0].out.data)
        assert got["error"]["err_code"] == 10025 and got["reset_seq"] == 0, (body, got)
    assert acc.handle_api("$JS.API.CONSUMER.RESET.W.NOPE", "_INBOX.r", None, b"", T0) == []
    ok = json.loads(acc.handle_api("$JS.API.CONSUMER.RESET.W.R", "_INBOX.r", None, b'{"seq": 2}', T0)[0].out.data)
    assert (ok["reset_seq"], ok["num_pending"], ok["ack_floor"]["stream_seq"]) == (2, 2, 1)
