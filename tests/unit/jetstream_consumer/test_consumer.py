"""jetraft Consumer: pull requests, push delivery, acks, redelivery, floors, persistence,
as nats-server 2.15.1 answers them (observed on the real binary; server/consumer.go)."""

from __future__ import annotations

import json

from jetraft.jetstream.consumer import Consumer, Delivery, parse_ack_subject
from jetraft.jetstream.model import SECOND, ConsumerConfig, StreamConfig
from jetraft.jetstream.store import CorruptMessage, MemoryStore
from jetraft.jetstream.stream import Stream

MS = 1_000_000
T0 = 1_000 * SECOND


def make_stream(**cfg) -> Stream:
    cfg.setdefault("subjects", ["s.>"])
    return Stream(StreamConfig(name="S", **cfg), MemoryStore(), created_ns=T0)


def publish(stream: Stream, *subjects: str, ts: int = T0, headers=None) -> list[int]:
    return [stream.publish(s, headers, f"m{stream.last_seq + 1}".encode(), ts + i)["seq"]
            for i, s in enumerate(subjects)]


def consumer(stream: Stream, name="C", interest=None, state=None, **cfg) -> Consumer:
    cfg.setdefault("durable_name", name)
    config = ConsumerConfig(**cfg).checked(stream.config)
    return Consumer(stream, name, config, created_ns=T0, state=state,
                    has_interest=interest or (lambda s: True))


def status(out) -> list[bytes]:
    return [o.headers for o in out]


def msgs(out) -> list:
    return [o for o in out if o.reply and o.reply.startswith("$JS.ACK.")]


# --- pull ---------------------------------------------------------------------------------

def test_pull_filtered_batch_ack_subjects_and_info():
    s = make_stream()
    publish(s, *["s.a" if i in (1, 5) else "s.b" for i in range(1, 11)])
    c = consumer(s, ack_policy="explicit", filter_subject="s.a")
    info = c.info(T0)
    assert info["delivered"] == {"consumer_seq": 0, "stream_seq": 0}
    assert info["num_pending"] == 2
    out = c.request_next("_INBOX.p.1", b'{"batch":2,"expires":500000000}', T0 + SECOND)
    got = msgs(out)
    assert [(o.subject, o.reply, o.data) for o in got] == [
        ("_INBOX.p.1", f"$JS.ACK.S.C.1.1.1.{T0}.1", b"m1"),
        ("_INBOX.p.1", f"$JS.ACK.S.C.1.5.2.{T0 + 4}.0", b"m5")]
    assert all(isinstance(o, Delivery) and o.msg_subject == "s.a" and o.headers is None
               for o in got)
    info = c.info(T0 + SECOND)
    assert info["delivered"]["consumer_seq"] == 2 and info["delivered"]["stream_seq"] == 5
    assert info["ack_floor"] == {"consumer_seq": 0, "stream_seq": 0}
    assert (info["num_pending"], info["num_ack_pending"], info["num_waiting"]) == (0, 2, 0)
    # ack the second first: floor stays; then the first: floor jumps to delivered
    out = c.process_ack(got[1].reply, b"+ACK", "_INBOX.ackr", T0 + 2 * SECOND)
    assert [(o.subject, o.headers, o.data) for o in out] == [("_INBOX.ackr", None, b"")]
    assert c.info(T0)["ack_floor"]["stream_seq"] == 0
    c.process_ack(got[0].reply, b"", None, T0 + 3 * SECOND)
    info = c.info(T0 + 3 * SECOND)
    assert info["ack_floor"] == {"consumer_seq": 2, "stream_seq": 5,
                                 "last_active": "1970-01-01T00:16:43Z"}
    assert info["num_ack_pending"] == 0
    assert c.drain_acked() == [5, 1]


def test_pull_expiry_408_with_pending_headers_and_heartbeats():
    s = make_stream()
    c = consumer(s, ack_policy="explicit")
    assert c.request_next("_INBOX.p.2", b'{"batch":3,"expires":300000000,"max_bytes":1000}',
                          T0) == []
    assert c.next_deadline() == T0 + 300 * MS
    assert c.info(T0)["num_waiting"] == 1
    assert c.poll(T0 + 299 * MS) == []
    out = c.poll(T0 + 300 * MS)
    assert [(o.subject, o.reply, o.headers, o.data) for o in out] == [
        ("_INBOX.p.2", None, b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\n"
                             b"Nats-Pending-Bytes: 1000\r\n\r\n", b"")]
    assert c.next_deadline() is None or c.next_deadline() > T0 + 300 * MS
    # heartbeats every idle_heartbeat while waiting
    publish(s, "s.a", "s.b")
    c2 = consumer(s, name="H", ack_policy="explicit", filter_subject="s.a")
    out = c2.request_next("_INBOX.p.4", b'{"batch":3,"expires":1000000000,'
                                        b'"idle_heartbeat":200000000}', T0)
    assert len(msgs(out)) == 1
    assert c2.next_deadline() == T0 + 200 * MS
    hb = c2.poll(T0 + 200 * MS)
    assert status(hb) == [b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\n"
                          b"Nats-Last-Stream: 2\r\n\r\n"]
    assert c2.poll(T0 + 300 * MS) == []
    assert len(c2.poll(T0 + 400 * MS)) == 1
    assert status(c2.poll(T0 + SECOND))[-1] == (
        b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\n"
        b"Nats-Pending-Bytes: 0\r\n\r\n")


def test_pull_refusals():
    s = make_stream()
    c = consumer(s, ack_policy="explicit", max_batch=10, max_expires=SECOND, max_bytes=100,
                 max_waiting=1)

    def one(payload):
        out = c.request_next("_INBOX.x", payload, T0)
        assert len(out) == 1 and out[0].subject == "_INBOX.x" and out[0].data == b""
        return out[0].headers

    assert one(b'{"batch":11}') == b"NATS/1.0 409 Exceeded MaxRequestBatch of 10\r\n\r\n"
    assert one(b'{"expires":2000000000}') == \
        b"NATS/1.0 409 Exceeded MaxRequestExpires of 1s\r\n\r\n"
    assert one(b'{"max_bytes":101}') == \
        b"NATS/1.0 409 Exceeded MaxRequestMaxBytes of 100\r\n\r\n"
    assert one(b'{"batch":"x"}') == (
        b"NATS/1.0 400 Bad Request - json: cannot unmarshal string into Go struct field "
        b".batch of type int\r\n\r\n")
    assert one(b'{"expires":100,"idle_heartbeat":100}') == \
        b"NATS/1.0 400 Bad Request - heartbeat value too large\r\n\r\n"
    assert one(b'{"batch":1,"no_wait":true}') == b"NATS/1.0 404 No Messages\r\n\r\n"
    assert c.request_next("_INBOX.a", b'{"batch":1,"expires":900000000}', T0) == []
    assert one(b'{"batch":1,"expires":900000000}') == \
        b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"


def test_stop_sends_consumer_deleted():
    s = make_stream()
    c = consumer(s, ack_policy="explicit")
    c.request_next("_INBOX.a", b'{"batch":1,"expires":900000000}', T0)
    out = c.stop()
    assert [(o.subject, o.headers) for o in out] == [
        ("_INBOX.a", b"NATS/1.0 409 Consumer Deleted\r\n\r\n")]
    assert c.poll(T0 + SECOND) == [] and c.next_deadline() is None


def test_junk_payload_is_one_message_like_nats_server():
    s = make_stream()
    publish(s, "s.a", "s.a")
    c = consumer(s, ack_policy="explicit")
    assert len(msgs(c.request_next("_INBOX.j", b"junk", T0))) == 1
    assert len(msgs(c.request_next("_INBOX.j", b"5", T0))) == 1


def test_push_based_refuses_pull():
    s = make_stream()
    c = consumer(s, deliver_subject="dlv")
    out = c.request_next("_INBOX.p", b"1", T0)
    assert status(out) == [b"NATS/1.0 409 Consumer is push based\r\n\r\n"]


def test_max_bytes_exceeded_and_batch_completed():
    s = make_stream()
    s.publish("s.a", None, b"x" * 100, T0)
    s.publish("s.a", None, b"y" * 10, T0 + 1)
    c = consumer(s, ack_policy="explicit", filter_subject="s.a")
    out = c.request_next("_INBOX.p.6", b'{"batch":5,"max_bytes":50,"expires":300000000}', T0)
    assert status(out) == [b"NATS/1.0 409 Message Size Exceeds MaxBytes\r\n"
                           b"Nats-Pending-Messages: 5\r\nNats-Pending-Bytes: 50\r\n\r\n"]
    out = c.request_next("_INBOX.p.7", b'{"batch":1,"max_bytes":500,"expires":300000000}', T0)
    size = len("s.a") + len(out[0].reply) + 100
    assert out[0].data == b"x" * 100
    assert out[1].headers == (b"NATS/1.0 409 Batch Completed\r\nNats-Pending-Messages: 0\r\n"
                              + f"Nats-Pending-Bytes: {500 - size}\r\n\r\n".encode())


def test_no_wait_returns_404_after_partial_batch():
    s = make_stream()
    publish(s, "s.a", "s.a")
    c = consumer(s, ack_policy="explicit")
    out = c.request_next("_INBOX.n", b'{"batch":5,"no_wait":true}', T0)
    assert len(msgs(out)) == 2
    assert out[-1].headers == b"NATS/1.0 404 No Messages\r\n\r\n"
    assert c.info(T0)["num_waiting"] == 0


def test_requests_without_interest_are_dropped():
    s = make_stream()
    live = {"_INBOX.live"}
    c = consumer(s, ack_policy="explicit", interest=lambda subj: subj in live)
    c.request_next("_INBOX.gone", b'{"batch":1,"expires":900000000}', T0)
    c.request_next("_INBOX.live", b'{"batch":1,"expires":900000000}', T0)
    publish(s, "s.a")
    out = c.poll(T0 + 1)
    assert [getattr(o, 'msg_subject', o.subject) for o in out] == ["s.a"]
    assert c.info(T0)["num_waiting"] == 0


# --- acks, redelivery ---------------------------------------------------------------------

def test_nak_term_progress_next_and_ack_wait():
    s = make_stream()
    publish(s, "s.a", "s.b", "s.c")
    c = consumer(s, ack_policy="explicit", ack_wait=10 * SECOND)
    m1 = msgs(c.request_next("_INBOX.p", b"1", T0))[0]
    assert m1.reply == f"$JS.ACK.S.C.1.1.1.{T0}.2"
    out = c.process_ack(m1.reply, b"-NAK", "_INBOX.r", T0 + 1)
    assert [(o.subject, o.data) for o in out] == [("_INBOX.r", b"")]
    m1b = msgs(c.request_next("_INBOX.p", b"1", T0 + 2))[0]
    assert m1b.reply == f"$JS.ACK.S.C.2.1.2.{T0}.2"          # delivery count 2, cseq 2
    assert c.info(T0)["num_redelivered"] == 1
    c.process_ack(m1b.reply, b"+TERM because", None, T0 + 3)
    assert c.info(T0)["num_ack_pending"] == 0
    assert c.info(T0)["ack_floor"]["consumer_seq"] == 2
    # +NXT acks and asks for more on the reply
    m2 = msgs(c.request_next("_INBOX.p", b"1", T0 + 4))[0]
    out = c.process_ack(m2.reply, b"+NXT 1", "_INBOX.next", T0 + 5)
    assert [(getattr(o, 'msg_subject', o.subject), o.data) for o in out] == [("s.c", b"m3")]
    m3 = out[0]
    assert c.info(T0)["ack_floor"]["stream_seq"] == 2
    # progress pushes the ack wait out
    assert c.next_deadline() == T0 + 5 + 10 * SECOND
    c.process_ack(m3.reply, b"+WPI", None, T0 + 5 * SECOND)
    assert c.next_deadline() == T0 + 15 * SECOND
    c.request_next("_INBOX.q", b'{"batch":1,"expires":60000000000}', T0 + 5 * SECOND)
    assert c.poll(T0 + 15 * SECOND - 1) == []
    out = c.poll(T0 + 15 * SECOND)
    assert [(getattr(o, 'msg_subject', o.subject), o.reply) for o in out] == [("s.c", f"$JS.ACK.S.C.2.3.5.{T0 + 2}.0")]


def test_nak_delay_json_and_go_duration():
    s = make_stream()
    publish(s, "s.a", "s.b")
    c = consumer(s, ack_policy="explicit", ack_wait=30 * SECOND)
    a, b = msgs(c.request_next("_INBOX.p", b"2", T0))
    c.process_ack(a.reply, b'-NAK {"delay": 2000000000}', None, T0)
    c.process_ack(b.reply, b"-NAK 1.5s", None, T0)
    assert c.next_deadline() == T0 + 1500 * MS
    c.request_next("_INBOX.q", b'{"batch":5,"expires":60000000000}', T0)
    assert [o.data for o in msgs(c.poll(T0 + 1500 * MS))] == [b"m2"]
    assert [o.data for o in msgs(c.poll(T0 + 2 * SECOND))] == [b"m1"]


def test_backoff_and_max_deliver():
    s = make_stream()
    publish(s, "s.a")
    c = consumer(s, ack_policy="explicit", backoff=[SECOND, 3 * SECOND], max_deliver=3)
    c.request_next("_INBOX.q", b'{"batch":10,"expires":100000000000}', T0)
    assert c.next_deadline() == T0 + SECOND
    times = []
    for t in range(T0, T0 + 20 * SECOND, 100 * MS):
        for o in msgs(c.poll(t)):
            times.append((t - T0, parse_ack_subject(o.reply)[2]))
    assert times == [(SECOND, 2), (4 * SECOND, 3)]
    info = c.info(T0 + 20 * SECOND)
    assert info["num_ack_pending"] == 0 and info["num_redelivered"] == 1
    assert c.needs_ack(1)          # ran out of deliveries: kept for interest retention


def test_max_ack_pending_stalls_until_ack():
    s = make_stream()
    publish(s, "s.a", "s.a", "s.a")
    c = consumer(s, ack_policy="explicit", max_ack_pending=2)
    got = msgs(c.request_next("_INBOX.p", b'{"batch":3,"expires":5000000000}', T0))
    assert len(got) == 2
    out = c.process_ack(got[0].reply, b"+ACK", None, T0 + 1)
    assert [o.data for o in msgs(out)] == [b"m3"]


def test_ack_all_acks_everything_below():
    s = make_stream()
    publish(s, "s.a", "s.a", "s.a")
    c = consumer(s, ack_policy="all")
    got = msgs(c.request_next("_INBOX.p", b"3", T0))
    c.process_ack(got[1].reply, b"", None, T0)
    info = c.info(T0)
    assert info["num_ack_pending"] == 1
    assert info["ack_floor"]["consumer_seq"] == 2 and info["ack_floor"]["stream_seq"] == 2
    assert c.drain_acked() == [1, 2]
    assert not c.needs_ack(2) and c.needs_ack(3)


def test_ack_none_floor_follows_delivery():
    s = make_stream()
    publish(s, "s.a", "s.b", "s.a", "s.a")
    c = consumer(s, ack_policy="none", filter_subject="s.a")
    got = msgs(c.request_next("_INBOX.p", b"2", T0))
    assert [o.reply for o in got] == [f"$JS.ACK.S.C.1.1.1.{T0}.2",
                                      f"$JS.ACK.S.C.1.3.2.{T0 + 2}.1"]
    info = c.info(T0)
    assert info["delivered"]["stream_seq"] == 3
    assert info["ack_floor"] == {"consumer_seq": 2, "stream_seq": 3}
    assert info["num_pending"] == 1
    assert c.process_ack(got[0].reply, b"", "_INBOX.r", T0) == []   # limits: no answer


def test_v2_ack_subject_accepted():
    assert parse_ack_subject("$JS.ACK._.HASH.S.C.2.7.9.123.4.xyz") == (7, 9, 2, 123, 4)
    assert parse_ack_subject("$JS.ACK.S.C.2.7.9.123.4") == (7, 9, 2, 123, 4)
    assert parse_ack_subject("$JS.ACK.S.C.2.7") == (0, 0, 0, 0, 0)
    s = make_stream()
    publish(s, "s.a")
    c = consumer(s, ack_policy="explicit")
    m = msgs(c.request_next("_INBOX.p", b"1", T0))[0]
    sseq, cseq, dc, ts, pending = parse_ack_subject(m.reply)
    c.process_ack(f"$JS.ACK._.H.S.C.{dc}.{sseq}.{cseq}.{ts}.{pending}.r", b"", None, T0)
    assert c.info(T0)["num_ack_pending"] == 0


# --- deliver policies ---------------------------------------------------------------------

def test_last_per_subject_as_nats_server():
    s = make_stream()
    publish(s, *[["s.a", "s.b", "s.c"][i % 3] for i in range(1, 7)])
    c = consumer(s, ack_policy="explicit", deliver_policy="last_per_subject",
                 filter_subject="s.>")
    info = c.info(T0)
    assert info["delivered"] == {"consumer_seq": 0, "stream_seq": 3}
    assert info["ack_floor"] == {"consumer_seq": 0, "stream_seq": 3}
    assert info["num_pending"] == 3
    out = msgs(c.request_next("_INBOX.p", b"1", T0))
    assert [(getattr(o, 'msg_subject', o.subject), o.reply) for o in out] == [("s.b", f"$JS.ACK.S.C.1.4.1.{T0 + 3}.2")]
    out = msgs(c.request_next("_INBOX.p", b"5", T0))
    assert [(getattr(o, 'msg_subject', o.subject), o.reply) for o in out] == [("s.c", f"$JS.ACK.S.C.1.5.2.{T0 + 4}.1"),
                                                   ("s.a", f"$JS.ACK.S.C.1.6.3.{T0 + 5}.0")]
    publish(s, "s.d")
    assert [getattr(o, 'msg_subject', o.subject) for o in msgs(c.poll(T0))] == ["s.d"]


def test_deliver_policies():
    s = make_stream()
    publish(s, "s.a", "s.b", "s.a", "s.b", ts=T0)
    new = consumer(s, name="N", deliver_policy="new", ack_policy="explicit")
    assert new.info(T0)["delivered"] == {"consumer_seq": 0, "stream_seq": 4}
    assert new.info(T0)["num_pending"] == 0
    last = consumer(s, name="L", deliver_policy="last", filter_subject="s.a")
    assert [o.data for o in msgs(last.request_next("_INBOX.x", b"9", T0))] == [b"m3"]
    seq = consumer(s, name="Q", deliver_policy="by_start_sequence", opt_start_seq=2)
    assert [o.data for o in msgs(seq.request_next("_INBOX.x", b"9", T0))] == \
        [b"m2", b"m3", b"m4"]
    tm = consumer(s, name="T", deliver_policy="by_start_time", opt_start_time=T0 + 2)
    assert [o.data for o in msgs(tm.request_next("_INBOX.x", b"9", T0))] == [b"m3", b"m4"]
    multi = consumer(s, name="M", filter_subjects=["s.b", "s.zz"])
    assert [o.data for o in msgs(multi.request_next("_INBOX.x", b"9", T0))] == \
        [b"m2", b"m4"]
    publish(s, "s.b")
    assert [o.data for o in msgs(new.request_next("_INBOX.x", b"9", T0))] == [b"m5"]


# --- push ---------------------------------------------------------------------------------

def test_push_headers_only_and_heartbeat_bytes():
    s = make_stream()
    publish(s, "s.b")
    s.publish("s.c", b"NATS/1.0\r\nX: 1\r\n\r\n", b"m2", T0 + 1)
    interest = {"dlv": False}
    c = consumer(s, name="P", ack_policy="none", deliver_subject="dlv", flow_control=True,
                 idle_heartbeat=300 * MS, headers_only=True,
                 interest=lambda subj: interest.get(subj, False))
    assert c.poll(T0) == []                 # nobody listening
    assert "push_bound" not in c.info(T0)
    interest["dlv"] = True
    out = c.poll(T0 + 1)
    assert [(getattr(o, 'msg_subject', o.subject), o.reply, o.headers, o.data) for o in out] == [
        ("s.b", f"$JS.ACK.S.P.1.1.1.{T0}.1", b"NATS/1.0\r\nNats-Msg-Size: 2\r\n\r\n", b""),
        ("s.c", f"$JS.ACK.S.P.1.2.2.{T0 + 1}.0",
         b"NATS/1.0\r\nX: 1\r\nNats-Msg-Size: 2\r\n\r\n", b"")]
    assert c.info(T0)["push_bound"] is True
    assert c.next_deadline() == T0 + 1 + 300 * MS
    hb = c.poll(T0 + 1 + 300 * MS)
    assert [(o.subject, o.reply, o.headers, o.data) for o in hb] == [
        ("dlv", None, b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 2\r\n"
                      b"Nats-Last-Stream: 2\r\n\r\n", b"")]


class SmallWindow(Consumer):
    FLOW_CONTROL_MAX_PENDING = 16 * 100     # first window 100 bytes


def test_push_flow_control_stalls_and_resumes():
    s = make_stream()
    for i in range(10):
        s.publish("s.a", None, b"x" * 40, T0 + i)
    cfg = ConsumerConfig(durable_name="F", deliver_subject="dlv", flow_control=True,
                         idle_heartbeat=SECOND).checked(s.config)
    c = SmallWindow(s, "F", cfg, created_ns=T0)
    out = c.poll(T0)
    data = [o for o in out if o.data]
    fc = [o for o in out if o.headers == b"NATS/1.0 100 FlowControl Request\r\n\r\n"]
    assert len(fc) == 1 and fc[0].subject == "dlv"
    assert fc[0].reply.startswith("$JS.FC.S.F.") and len(fc[0].reply.split(".")[-1]) == 4
    assert 1 <= len(data) < 10
    assert c.poll(T0 + 1) == []             # stalled
    hb = c.poll(T0 + 2 * SECOND)
    assert hb[0].headers.endswith(
        f"Nats-Consumer-Stalled: {fc[0].reply}\r\n\r\n".encode())
    assert c.process_flow_control("$JS.FC.S.F.old", T0) == []
    more = c.process_flow_control(fc[0].reply, T0 + 3 * SECOND)
    assert [o for o in more if o.data]


# --- stream changes, persistence ----------------------------------------------------------

def test_purge_and_delete_fix_pending():
    s = make_stream()
    publish(s, "s.a", "s.a", "s.a", "s.a")
    c = consumer(s, ack_policy="explicit")
    got = msgs(c.request_next("_INBOX.p", b"2", T0))
    assert len(got) == 2
    s.delete_message(2)
    c.on_messages_removed(T0)
    assert c.info(T0)["num_ack_pending"] == 1
    s.purge({})
    c.on_messages_removed(T0)
    info = c.info(T0)
    assert info["num_ack_pending"] == 0 and info["num_pending"] == 0
    assert info["ack_floor"]["stream_seq"] == 4
    publish(s, "s.a")
    assert [o.reply.split(".")[5] for o in msgs(c.request_next("_INBOX.p", b"1", T0))] == ["5"]


def test_state_round_trip():
    s = make_stream()
    publish(s, "s.a", "s.b", "s.a")
    c = consumer(s, ack_policy="explicit", filter_subject="s.a")
    got = msgs(c.request_next("_INBOX.p", b"1", T0))
    assert c.dirty
    state = json.loads(json.dumps(c.state_to_json()))
    assert not c.dirty
    c2 = consumer(s, ack_policy="explicit", filter_subject="s.a", state=state)
    assert c2.info(T0) == c.info(T0)
    assert [o.data for o in msgs(c2.request_next("_INBOX.p", b"1", T0))] == [b"m3"]
    c2.process_ack(got[0].reply, b"", None, T0)
    assert c2.info(T0)["num_ack_pending"] == 1


class CorruptStore(MemoryStore):
    bad = {2}

    def _fetch(self, seq, seg, i):
        if seq in self.bad:
            raise CorruptMessage(f"message {seq}")
        return super()._fetch(seq, seg, i)


def test_corrupt_message_skipped():
    s = Stream(StreamConfig(name="S", subjects=["s.>"]), CorruptStore(), created_ns=T0)
    publish(s, "s.a", "s.a", "s.a")
    for filt in ("", "s.a"):
        c = consumer(s, name="X" + filt.replace(".", ""), filter_subject=filt)
        out = msgs(c.request_next("_INBOX.p", b"5", T0))
        assert [o.data for o in out] == [b"m1", b"m3"]


def test_inactivity_and_interest():
    s = make_stream()
    c = consumer(s, name="E", durable_name="", inactive_threshold=10 * SECOND)
    assert not c.is_inactive(T0 + 9 * SECOND)
    assert c.next_deadline() == T0 + 10 * SECOND
    assert c.is_inactive(T0 + 10 * SECOND)
    c.request_next("_INBOX.p", b'{"batch":1,"expires":60000000000}', T0 + 10 * SECOND)
    assert not c.is_inactive(T0 + 30 * SECOND)
    listening = {"v": True}
    p = consumer(s, name="P2", durable_name="", deliver_subject="d",
                 interest=lambda subj: listening["v"])
    assert not p.is_inactive(T0 + 100 * SECOND)
    listening["v"] = False
    assert not p.is_inactive(T0 + 100 * SECOND)
    assert p.is_inactive(T0 + 105 * SECOND)      # ephemeral default 5 s
    durable = consumer(s, name="D")
    assert not durable.is_inactive(T0 + 10**6 * SECOND)


def test_interest_needs_ack_and_update_config():
    s = make_stream(retention="interest")
    publish(s, "s.a", "s.b")
    c = consumer(s, ack_policy="explicit", filter_subject="s.a")
    assert c.needs_ack(1) and not c.needs_ack(2)
    got = msgs(c.request_next("_INBOX.p", b"1", T0))
    c.process_ack(got[0].reply, b"", None, T0)
    assert not c.needs_ack(1) and c.drain_acked() == [1]
    new = c.config.copy(max_ack_pending=5, description="d")
    c.update_config(new, T0)
    assert c.info(T0)["config"]["description"] == "d"
