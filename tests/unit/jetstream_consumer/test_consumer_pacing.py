"""jetraft Consumer: ``replay_policy: original`` and ``rate_limit_bps`` (consumer_pacing.py),
as nats-server 2.15.1 paces them (server/consumer.go loopAndGatherMsgs, setRateLimit;
side by side in tests/compat/test_compat_js_consumer_options.py), with the clock in hand;
and flow control counting the deliver subject (nats-server jsPubMsg.size)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.consumer import Consumer, parse_ack_subject
from jetraft.jetstream.consumer_pacing import DEFAULT_RATE_BURST
from jetraft.jetstream.model import SECOND, ConsumerConfig, StreamConfig
from jetraft.jetstream.replica_state import check_consumer_state
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream

MS = 1_000_000
T0 = 1_000 * SECOND


def make_stream(**cfg) -> Stream:
    cfg.setdefault("subjects", ["s.>"])
    return Stream(StreamConfig(name="S", **cfg), MemoryStore(), created_ns=T0)


def stored_at(stream: Stream, *times: int, size: int = 2, subject: str = "s.a") -> None:
    for ts in times:
        stream.publish(subject, None, b"x" * size, ts)


def consumer(stream: Stream, now: int, name="C", state=None, interest=None, **cfg) -> Consumer:
    cfg.setdefault("durable_name", name)
    config = ConsumerConfig(**cfg).checked(stream.config)
    return Consumer(stream, name, config, created_ns=now, state=state,
                    has_interest=interest or (lambda s: True))


def seqs(out) -> list[int]:
    return [parse_ack_subject(o.reply)[0] for o in out if o.reply and o.reply.startswith("$JS.ACK.")]


def statuses(out) -> list[bytes]:
    return [o.headers.split(b"\r\n")[0] for o in out if not (o.reply or "").startswith("$JS.ACK.")]


# --- replay original ----------------------------------------------------------------------

def test_replay_original_push_waits_each_stored_gap_then_goes_at_once():
    s = make_stream()
    stored_at(s, T0, T0 + 500 * MS, T0 + 700 * MS, T0 + 700 * MS, T0 + 2 * SECOND)
    now = T0 + 10 * SECOND
    c = consumer(s, now, deliver_subject="dlv", idle_heartbeat=100 * MS, replay_policy="original")
    assert seqs(c.poll(now)) == [1]                     # the first goes at once
    assert c.next_deadline() == now + 500 * MS          # the gap to the second
    assert c.poll(now + 499 * MS) == []                 # no heartbeat while it waits
    assert c.info(now)["num_pending"] == 4              # it is put back meanwhile
    assert seqs(c.poll(now + 500 * MS)) == [2]
    now += 500 * MS
    assert c.next_deadline() == now + 200 * MS
    assert seqs(c.poll(now + 200 * MS)) == [3, 4]       # a gap of 0 is not waited
    now += 200 * MS
    assert c.next_deadline() == now + 1300 * MS
    late = now + 1400 * MS                              # a late poll: sent then
    assert seqs(c.poll(late)) == [5]
    assert c.next_deadline() == late + 100 * MS         # the heartbeat: caught up, nothing waits
    stored_at(s, late + 50 * MS, late + 5 * SECOND)     # new messages go as they come,
    assert seqs(c.poll(late + 50 * MS)) == [6, 7]       # whatever their gaps
    hb = c.poll(late + 5 * SECOND + 100 * MS)
    assert hb[0].headers == (b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 7\r\n"
                             b"Nats-Last-Stream: 7\r\n\r\n")


def test_replay_original_pull_waits_after_each_request_and_holds_expiries():
    s = make_stream()
    stored_at(s, T0, T0 + 800 * MS, T0 + 900 * MS)
    now = T0 + 10 * SECOND
    c = consumer(s, now, ack_policy="explicit", replay_policy="original")
    assert seqs(c.request_next("_INBOX.1", b"1", now)) == [1]
    assert c.next_deadline() is None or c.next_deadline() > now + SECOND   # no request: no timer
    # the next request waits the gap from when it came
    later = now + 5 * SECOND
    assert c.request_next("_INBOX.2", b'{"batch":2,"expires":300000000,"idle_heartbeat":100000000}',
                          later) == []
    assert c.next_deadline() == later + 800 * MS      # nothing else while it waits: no heartbeat
    assert c.poll(later + 400 * MS) == []
    out = c.poll(later + 800 * MS)                    # its expiry passed meanwhile: 408, kept
    assert statuses(out) == [b"NATS/1.0 408 Request Timeout"] and seqs(out) == []
    assert c.info(later)["num_pending"] == 2
    # the next request: the replay gap is waited again from it
    again = later + 2 * SECOND
    assert c.request_next("_INBOX.3", b'{"batch":2,"expires":5000000000}', again) == []
    assert seqs(c.poll(again + 800 * MS)) == [2]
    assert seqs(c.poll(again + 900 * MS)) == [3]
    stored_at(s, again + 20 * SECOND)                   # caught up: at once
    assert seqs(c.request_next("_INBOX.4", b"1", again + 20 * SECOND)) == [4]


def test_replay_original_from_a_new_start_replays_again_and_deliver_new_does_not():
    s = make_stream()
    stored_at(s, T0, T0 + SECOND)
    now = T0 + 5 * SECOND
    c = consumer(s, now, deliver_subject="dlv", replay_policy="original")
    assert seqs(c.poll(now)) == [1]
    # a restart: the persisted state never holds the waiting message
    state = c.state_to_json()
    again = consumer(s, now, state=state, deliver_subject="dlv", replay_policy="original")
    assert seqs(again.poll(now + 1)) == [2]           # the first after a start goes at once
    fresh = consumer(s, now, name="N", deliver_subject="dln", replay_policy="original",
                     deliver_policy="new")
    assert fresh.poll(now) == []
    stored_at(s, now + SECOND, now + 3 * SECOND)
    assert seqs(fresh.poll(now + SECOND)) == [3, 4]     # no replay: nothing to catch up with


# --- rate limit ---------------------------------------------------------------------------

def test_rate_limit_bps_a_full_bucket_then_the_rate():
    s = make_stream(max_msg_size=1000)                  # the burst
    stored_at(s, *[T0] * 6, size=400)
    now = T0 + SECOND
    c = consumer(s, now, deliver_subject="dlv", rate_limit_bps=8 * 1000)   # 1000 bytes/s
    first = c.poll(now)
    sizes = [len(o.msg_subject) + len(o.reply) + len(o.data) for o in first]
    assert len(first) == 2                              # 2 x ~450 bytes fit in 1000
    owed = sum(sizes) + sizes[0] - 1000                 # the third went below empty
    assert c.next_deadline() == now + owed * MS         # 1 byte per ms
    assert c.poll(now + owed * MS - 1) == []
    assert seqs(c.poll(now + owed * MS)) == [3]
    # an update to another rate: a new, full bucket
    cfg = ConsumerConfig(**{**c.config.to_json(), "rate_limit_bps": 8 * 2000}).checked(s.config)
    out = c.update_config(cfg, now + owed * MS + 1)
    assert seqs(out) == [4, 5]


def test_rate_limit_message_larger_than_the_burst_and_a_rate_of_zero():
    s = make_stream(max_msg_size=100)
    stored_at(s, T0, size=90)                           # ~140 bytes with its subjects
    c = consumer(s, T0, deliver_subject="dlv", rate_limit_bps=8 * 100)
    out = c.poll(T0)
    assert out == []                                    # it waits for the bucket to pay
    due = c.next_deadline()
    assert T0 < due < T0 + SECOND
    assert seqs(c.poll(due)) == [1]                     # nats-server: never (see the module)
    z = make_stream()
    stored_at(z, T0, T0, size=600_000)
    zero = consumer(z, T0, deliver_subject="dlv", rate_limit_bps=7)        # 0 bytes/s
    assert seqs(zero.poll(T0)) == [1]                   # what the full bucket (1 MiB) holds
    assert zero.next_deadline() is None                 # then nothing, for ever
    assert zero.poll(T0 + 3600 * SECOND) == []
    assert DEFAULT_RATE_BURST == 1024 * 1024


def test_a_pacing_consumer_carries_its_pace_in_the_replica_state():
    s = make_stream()
    stored_at(s, T0, T0 + SECOND)
    a = consumer(s, T0 + 5 * SECOND, deliver_subject="dlv", replay_policy="original",
                 rate_limit_bps=8 * 1_000_000)
    a.poll(T0 + 5 * SECOND)
    state = check_consumer_state(a.replica_state())
    assert state["pace"][3] == T0 + 6 * SECOND          # the second message waits
    b = consumer(s, T0, deliver_subject="dlv", replay_policy="original", rate_limit_bps=8 * 1_000_000)
    b.restore_replica_state(state)
    assert b.replica_state() == a.replica_state()
    assert seqs(b.poll(T0 + 6 * SECOND)) == seqs(a.poll(T0 + 6 * SECOND)) == [2]
    plain = consumer(s, T0, name="P", deliver_subject="dlp")
    assert "pace" not in plain.replica_state()        # as an older jetraft reads it


# --- flow control -------------------------------------------------------------------------

class SmallWindow(Consumer):
    FLOW_CONTROL_MAX_PENDING = 16 * 1000        # first window 1000 bytes


def test_flow_control_counts_the_deliver_subject():
    """nats-server counts what it sends: the deliver subject, the ack subject, headers and
    payload; the stored subject does not count."""
    s = make_stream()
    stored_at(s, *[T0] * 10, size=100)
    for deliver in ("d", "a.much.longer.deliver.subject.than.the.stored.one"):
        cfg = ConsumerConfig(durable_name="F", deliver_subject=deliver, flow_control=True,
                             idle_heartbeat=SECOND).checked(s.config)
        c = SmallWindow(s, "F", cfg, created_ns=T0)
        out = c.poll(T0)
        sent = [o for o in out if o.data]
        per = len(deliver) + len(sent[0].reply) + 100
        assert len(sent) == 1000 // per + 1, (deliver, len(sent))


# --- invariants under random pacing -------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
       push=st.booleans(), rate=st.sampled_from([0, 8 * 500, 8 * 5000]),
       replay=st.booleans(),
       ops=st.lists(st.tuples(st.sampled_from(["time", "pull", "pub", "restart"]), st.integers(1, 1500)),
                    max_size=40))
def test_paced_delivery_keeps_order_counts_and_the_pace(gaps, push, rate, replay, ops):
    if not push:
        rate = 0
    s = make_stream(max_msg_size=200)          # the burst: about one message
    ts = T0
    for gap in gaps:
        ts += gap * MS
        stored_at(s, ts, size=100)
    now = ts + SECOND
    extra = {"deliver_subject": "dlv"} if push else {}
    cfg = dict(replay_policy="original" if replay else "instant", rate_limit_bps=rate, **extra)
    c = consumer(s, now, **cfg)
    delivered: list[tuple[int, int, int]] = []      # (sseq, when, bytes)
    restarted = False

    def take(out):
        for o in out:
            if o.reply and o.reply.startswith("$JS.ACK."):
                sseq, cseq, dc, _ts, _p = parse_ack_subject(o.reply)
                assert dc == 1 and cseq == len(delivered) + 1
                delivered.append((sseq, now, len(o.msg_subject) + len(o.reply) + len(o.data)))

    take(c.poll(now))
    for op, arg in ops:
        if op == "time":
            due = c.next_deadline()
            now = max(now + 1, due) if due is not None and arg % 2 else now + arg * MS
            take(c.poll(now))
        elif op == "pull" and not push:
            take(c.request_next("_INBOX.p", b'{"batch":%d,"expires":%d}' % (arg % 5 + 1, 2 * SECOND), now))
        elif op == "pub":
            stored_at(s, now, size=100)
            take(c.poll(now))
        elif op == "restart":
            restarted = True
            c = consumer(s, now, state=c.state_to_json(), **cfg)
            take(c.poll(now))
    for _ in range(400):                            # drain
        if not push:
            take(c.request_next("_INBOX.p", b'{"batch":5,"expires":%d}' % (60 * SECOND), now))
        due = c.next_deadline()
        now = max(now + 1, due if due is not None else now + SECOND)
        take(c.poll(now))
    assert [d[0] for d in delivered] == list(range(1, s.last_seq + 1))     # each once, in order
    if rate and not restarted:          # a start fills the bucket again (as nats-server's)
        per_s = rate // 8
        for i, (_, when, _) in enumerate(delivered):
            paid = sum(d[2] for d in delivered[:i + 1])
            # never faster than the bucket allows: full (200 bytes) at the start, then the rate
            assert paid <= 200 + per_s * (when - delivered[0][1]) // SECOND + 1, (i, paid, when)
