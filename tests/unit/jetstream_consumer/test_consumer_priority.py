"""jetraft Consumer: priority groups (consumer_priority.py) with the clock in hand: pull
request refusals first (hostile input), then overflow, pinned client (the pin, its timer,
UNPIN, a RAFT term change), prioritized, and the replica state carrying all of it; as
nats-server 2.15.1 serves them (server/consumer.go processNextMsgRequest, nextWaiting;
side by side in tests/compat/test_compat_js_priority.py)."""

from __future__ import annotations

import json

import pytest

from jetraft.jetstream.consumer import Consumer, parse_ack_subject
from jetraft.jetstream.model import SECOND, ConsumerConfig, StreamConfig
from jetraft.jetstream.replica_state import ReplicaStateError, check_consumer_state
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream

MS = 1_000_000
T0 = 1_000 * SECOND


def make_stream() -> Stream:
    return Stream(StreamConfig(name="S", subjects=["s.>"]), MemoryStore(), created_ns=T0)


def publish(stream: Stream, n: int, now: int = T0, subject: str = "s.a") -> None:
    for k in range(n):
        stream.publish(subject, None, f"m{k}".encode(), now)


class ScreenCounting(Consumer):
    """A consumer that counts the overflow screenings of waiting requests."""

    screened = 0

    def _overflow_holds(self, pg) -> bool:
        self.screened += 1
        return super()._overflow_holds(pg)


def consumer(stream: Stream, policy: str = "pinned_client", groups=("A",), cls=Consumer, **cfg) -> Consumer:
    cfg.setdefault("durable_name", "C")
    cfg.setdefault("ack_policy", "explicit")
    config = ConsumerConfig(priority_policy=policy, priority_groups=list(groups), **cfg).checked(stream.config)
    c = cls(stream, "C", config, created_ns=T0, has_interest=lambda s: True)
    c.advisory_interest = lambda subject: True
    c.account_name = "$G"
    return c


def req(group: str = "A", batch: int = 1, expires: int = 30 * SECOND, **fields) -> bytes:
    return json.dumps({"batch": batch, "expires": expires, "group": group, **fields}).encode()


def delivered(out, reply: str | None = None) -> list[int]:
    """Stream sequences delivered (to ``reply`` only, when given)."""
    return [parse_ack_subject(o.reply)[0] for o in out
            if o.reply and o.reply.startswith("$JS.ACK.") and (reply is None or o.subject == reply)]


def statuses(out) -> list[tuple[str, bytes]]:
    return [(o.subject, o.headers) for o in out
            if o.headers and o.headers.startswith(b"NATS/1.0 ") and not (o.reply or "").startswith("$JS.ACK.")]


def pin_of(out) -> str:
    (pins,) = {o.headers.split(b"Nats-Pin-Id: ")[1].split(b"\r\n")[0].decode()
               for o in out if o.reply and o.reply.startswith("$JS.ACK.")}
    return pins


def advisories(out) -> list[tuple[str, dict]]:
    return [(o.subject, json.loads(o.payload)) for o in out if o.subject.startswith("$JS.EVENT.ADVISORY.")]


# --- hostile pull requests ----------------------------------------------------------------

@pytest.mark.parametrize(("policy", "body", "status"), [
    ("pinned_client", req(group=""), b"NATS/1.0 400 Bad Request - Priority Group missing\r\n\r\n"),
    ("pinned_client", b"{}", b"NATS/1.0 400 Bad Request - Priority Group missing\r\n\r\n"),
    ("overflow", req(group="B"), b"NATS/1.0 400 Bad Request - Invalid Priority Group\r\n\r\n"),
    ("pinned_client", req(min_pending=1), b"NATS/1.0 400 Bad Request - Not a Overflow Priority consumer\r\n\r\n"),
    ("none", req(min_ack_pending=-5), b"NATS/1.0 400 Bad Request - Not a Overflow Priority consumer\r\n\r\n"),
    ("overflow", req(id="x"), b"NATS/1.0 400 Bad Request - Not a Pinned Client Priority consumer\r\n\r\n"),
    ("prioritized", req(priority=10), b"NATS/1.0 400 Bad Request - Priority must be between 0 and 9\r\n\r\n"),
    ("none", req(priority=-1), b"NATS/1.0 400 Bad Request - Priority must be between 0 and 9\r\n\r\n"),
    ("prioritized", req(priority=2 ** 64),
     b"NATS/1.0 400 Bad Request - json: cannot unmarshal number 18446744073709551616 into Go struct field "
     b".priority of type int\r\n\r\n"),
    ("overflow", req(min_pending="1"),
     b"NATS/1.0 400 Bad Request - json: cannot unmarshal string into Go struct field .min_pending of type int64"
     b"\r\n\r\n"),
    ("pinned_client", req(id={"a": 1}),
     b"NATS/1.0 400 Bad Request - json: cannot unmarshal object into Go struct field .id of type string\r\n\r\n"),
])
def test_a_bad_priority_request_is_answered_and_never_queued(policy, body, status):
    s = make_stream()
    publish(s, 1)
    c = consumer(s, policy, groups=() if policy == "none" else ("A",))
    out = c.request_next("_INBOX.r", body, T0)
    assert [(o.subject, o.headers) for o in out] == [("_INBOX.r", status)]
    assert c.waiting_replies() == [] and c.info(T0)["num_ack_pending"] == 0


def test_a_huge_queue_of_waiting_requests_is_looked_at_once_per_message():
    """Bounded work: every waiting request is screened once for a message, not cycled
    round again and again (nats-server's cycle stops after one round too)."""
    s = make_stream()
    c = consumer(s, "overflow", max_waiting=5000, cls=ScreenCounting)
    for k in range(5000):
        assert c.request_next(f"_INBOX.{k}", req(min_pending=10 ** 9), T0) == []
    publish(s, 1)
    c.screened = 0
    assert delivered(c.poll(T0)) == []
    assert c.screened == 5000
    assert c.waiting_replies()[:2] == ["_INBOX.0", "_INBOX.1"]     # the order is kept


# --- overflow -----------------------------------------------------------------------------

def test_overflow_thresholds_count_the_message_being_delivered_and_the_acks_awaited():
    s = make_stream()
    publish(s, 3)
    c = consumer(s, "overflow")
    assert delivered(c.request_next("_INBOX.hi", req(min_pending=4), T0)) == []
    assert delivered(c.request_next("_INBOX.ack", req(min_ack_pending=1), T0)) == []
    out = c.request_next("_INBOX.three", req(min_pending=3), T0)
    assert delivered(out, "_INBOX.three") == [1]
    # one ack awaited now: the waiting min_ack_pending request takes the next message
    assert delivered(out, "_INBOX.ack") == [2] and delivered(out, "_INBOX.hi") == []
    assert c.waiting_replies() == ["_INBOX.hi"]
    assert delivered(c.request_next("_INBOX.any", req(), T0), "_INBOX.any") == [3]
    publish(s, 4)
    assert delivered(c.poll(T0), "_INBOX.hi") == [4]
    assert c.info(T0)["priority_groups"] == [{"group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}]


# --- pinned client ------------------------------------------------------------------------

def test_the_first_request_is_pinned_and_others_wait_or_are_refused():
    s = make_stream()
    c = consumer(s, priority_timeout=10 * SECOND)
    c.request_next("_INBOX.one", req(batch=5), T0)
    c.request_next("_INBOX.two", req(batch=5), T0)
    publish(s, 2)
    out = c.poll(T0 + 1)
    assert delivered(out, "_INBOX.one") == [1, 2] and delivered(out, "_INBOX.two") == []
    pin = pin_of(out)
    assert len(pin) == 22 and pin.isalnum()
    (subject, body), = advisories(out)
    assert subject == "$JS.EVENT.ADVISORY.CONSUMER.PINNED.S.C"
    assert (body["type"], body["account"], body["group"], body["pinned_id"]) == (
        "io.nats.jetstream.advisory.v1.consumer_group_pinned", "$G", "A", pin)
    assert c.info(T0 + 1)["priority_groups"] == [{"group": "A", "pinned_client_id": pin,
                                                  "pinned_ts": "1970-01-01T00:16:40.000000001Z"}]
    assert statuses(c.request_next("_INBOX.bad", req(id="nope"), T0 + 2)) == [
        ("_INBOX.bad", b"NATS/1.0 423 Nats-Pin-Id mismatch\r\n\r\n")]
    # every message carries the pin; headers already there are kept
    s.publish("s.a", b"NATS/1.0\r\nK: v\r\n\r\n", b"x", T0 + 3)
    (msg,) = [o for o in c.poll(T0 + 3) if o.reply and o.reply.startswith("$JS.ACK.")]
    assert (msg.subject, msg.headers) == ("_INBOX.one", f"NATS/1.0\r\nK: v\r\nNats-Pin-Id: {pin}\r\n\r\n".encode())


def test_the_pin_ends_after_priority_timeout_unless_a_request_renews_it():
    s = make_stream()
    c = consumer(s, priority_timeout=2 * SECOND)
    publish(s, 1)
    pin = pin_of(c.request_next("_INBOX.one", req(), T0))
    assert c.next_deadline() == T0 + 2 * SECOND
    c.request_next("_INBOX.two", req(), T0 + 1 * SECOND)
    # a request carrying the pin renews its time
    c.request_next("_INBOX.one", req(id=pin), T0 + 1500 * MS)
    assert c.next_deadline() == T0 + 3500 * MS
    publish(s, 1)
    out = c.poll(T0 + 1600 * MS)
    assert delivered(out, "_INBOX.one") == [2] and pin_of(out) == pin
    assert advisories(c.poll(T0 + 3499 * MS)) == []
    publish(s, 1)
    out = c.poll(T0 + 3500 * MS)
    (unpinned, pinned) = advisories(out)
    assert unpinned[0] == "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.C"
    assert (unpinned[1]["group"], unpinned[1]["reason"]) == ("A", "timeout")
    new_pin = pin_of(out)
    assert delivered(out, "_INBOX.two") == [3] and new_pin != pin and pinned[1]["pinned_id"] == new_pin


def test_unpin_lets_the_next_request_take_a_new_pin_and_refuses_the_old_ones():
    s = make_stream()
    c = consumer(s)
    publish(s, 1)
    pin = pin_of(c.request_next("_INBOX.one", req(batch=3), T0))
    c.request_next("_INBOX.two", req(batch=3), T0)
    out = c.unpin("A", T0 + 1)
    assert [(subj, a["reason"]) for subj, a in advisories(out)] == [
        ("$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.C", "admin")]
    assert c.pinned_id == ""
    publish(s, 1)
    out = c.poll(T0 + 2)
    # the old pin's request is told (pending 2 messages, no byte limit), the next one pinned
    assert statuses(out) == [("_INBOX.one", b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 2\r\n"
                                            b"Nats-Pending-Bytes: 0\r\n\r\n")]
    assert delivered(out, "_INBOX.two") == [2] and pin_of(out) not in ("", pin)


def test_a_request_too_small_for_the_message_gives_its_pin_back():
    s = make_stream()
    c = consumer(s)
    s.publish("s.a", None, b"x" * 200, T0)
    out = c.request_next("_INBOX.small", req(max_bytes=10), T0)
    assert statuses(out)[0][1].startswith(b"NATS/1.0 409 Message Size Exceeds MaxBytes")
    assert c.pinned_id == ""
    out = c.request_next("_INBOX.next", req(), T0)
    assert delivered(out, "_INBOX.next") == [1] and pin_of(out) == c.pinned_id != ""


def test_a_plain_request_waits_while_pinned_and_is_served_with_an_empty_pin_id_otherwise():
    s = make_stream()
    c = consumer(s)
    publish(s, 1)
    out = c.request_next("_INBOX.plain", b"1", T0)
    assert delivered(out) == [1] and pin_of(out) == "" and c.pinned_id == ""
    assert delivered(c.request_next("_INBOX.one", req(), T0)) == []
    assert c.pinned_id == ""          # nothing to deliver: the pin comes with a message
    publish(s, 1)
    assert delivered(c.poll(T0), "_INBOX.one") == [2] and c.pinned_id
    c.request_next("_INBOX.plain2", b"1", T0)
    publish(s, 1)
    assert delivered(c.poll(T0)) == [] and c.waiting_replies() == ["_INBOX.plain2"]


def test_a_new_raft_term_ends_a_pin_of_an_earlier_one_on_every_replica():
    s = make_stream()
    c = consumer(s)
    c.on_term(3)
    publish(s, 1)
    pin = pin_of(c.request_next("_INBOX.one", req(batch=2), T0))
    c.on_term(3)                     # the same term: kept
    assert c.pinned_id == pin
    c.on_term(4)                     # a new leader: gone, with no advisory
    assert c.pinned_id == "" and c.info(T0)["priority_groups"][0] == {
        "group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}
    assert advisories(c.poll(T0 + 1)) == []
    c.request_next("_INBOX.two", req(), T0 + 2)
    publish(s, 1)
    out = c.poll(T0 + 3)
    assert statuses(out)[0] == ("_INBOX.one", b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 1\r\n"
                                              b"Nats-Pending-Bytes: 0\r\n\r\n")
    assert delivered(out, "_INBOX.two") == [2]


# --- prioritized --------------------------------------------------------------------------

def test_prioritized_requests_are_served_lowest_number_first_in_arrival_order_within_one():
    s = make_stream()
    c = consumer(s, "prioritized")
    for reply, body in [("p5", req(priority=5)), ("plain", b"1"), ("p1", req(priority=1)),
                        ("p1b", req(priority=1, batch=2)), ("p0", req())]:
        c.request_next(f"_INBOX.{reply}", body, T0)
    assert c.waiting_replies() == ["_INBOX.p0", "_INBOX.p1", "_INBOX.p1b", "_INBOX.p5", "_INBOX.plain"]
    publish(s, 6)
    out = c.poll(T0)
    assert [o.subject for o in out if o.reply] == ["_INBOX.p0", "_INBOX.p1", "_INBOX.p1b", "_INBOX.p1b",
                                                   "_INBOX.p5", "_INBOX.plain"]


# --- replica state ------------------------------------------------------------------------

def test_the_pin_and_waiting_priority_fields_survive_a_replica_handover():
    s = make_stream()
    a = consumer(s, priority_timeout=5 * SECOND)
    a.on_term(2)
    publish(s, 1)
    pin = pin_of(a.request_next("_INBOX.one", req(batch=3), T0))
    a.request_next("_INBOX.two", req(), T0 + 1)
    state = json.loads(json.dumps(a.replica_state()))
    checked = check_consumer_state(state)
    b = consumer(s, priority_timeout=5 * SECOND)
    b.restore_replica_state(checked)
    assert b.replica_state() == a.replica_state()
    assert b.pinned_id == pin and b.next_deadline() == a.next_deadline()
    publish(s, 1)
    assert delivered(a.poll(T0 + 2), "_INBOX.one") == delivered(b.poll(T0 + 2), "_INBOX.one") == [2]


@pytest.mark.parametrize("damage", [
    lambda st: st["waiting"][0].append(["A", 0, 0, "", "x"]),
    lambda st: st["waiting"][0].append(["A", 0, 0]),
    lambda st: st["waiting"][0].extend([["A", 0, 0, "", 0], None]),
    lambda st: st.__setitem__("priority", ["pin", None, 0, "A", -1, 0, 0]),
    lambda st: st.__setitem__("priority", ["pin", "now", 0, "A", 0, 0, 0]),
    lambda st: st.__setitem__("priority", ["pin"]),
])
def test_a_damaged_priority_state_is_refused(damage):
    s = make_stream()
    c = consumer(s)
    c.request_next("_INBOX.one", req(), T0)
    state = json.loads(json.dumps(c.replica_state()))
    damage(state)
    with pytest.raises(ReplicaStateError):
        check_consumer_state(state)
