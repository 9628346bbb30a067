"""Model-based property test of the jetraft Consumer: random publishes, pulls, acks, naks,
terms and clock jumps; invariants a client relies on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.consumer import Consumer, parse_ack_subject
from jetraft.jetstream.model import SECOND, ConsumerConfig, StreamConfig
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream

T0 = 1_000 * SECOND
ACK_WAIT = 5 * SECOND

ops = st.lists(st.one_of(
    st.tuples(st.just("pub"), st.sampled_from(["s.a", "s.b"])),
    st.tuples(st.just("pull"), st.integers(1, 4)),
    st.tuples(st.sampled_from(["ack", "nak", "term", "wpi"]), st.integers(0, 7)),
    st.tuples(st.just("time"), st.integers(1, 8)),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=ops, max_deliver=st.sampled_from([-1, 2, 3]),
       filt=st.sampled_from(["", "s.a"]), max_ack_pending=st.sampled_from([0, 3]))
def test_consumer_model(ops, max_deliver, filt, max_ack_pending):
    stream = Stream(StreamConfig(name="S", subjects=["s.>"]), MemoryStore(), created_ns=T0)
    cfg = ConsumerConfig(durable_name="C", ack_policy="explicit", ack_wait=ACK_WAIT,
                         max_deliver=max_deliver, filter_subject=filt,
                         max_ack_pending=max_ack_pending).checked(stream.config)
    c = Consumer(stream, "C", cfg, created_ns=T0)
    now = T0
    outstanding: dict[int, str] = {}       # sseq -> latest ack subject
    done: set[int] = set()                 # acked or termed
    deliveries: dict[int, int] = {}
    last_cseq = 0

    def take(out):
        nonlocal last_cseq
        for o in out:
            if o.reply and o.reply.startswith("$JS.ACK."):
                sseq, cseq, dc, _ts, _p = parse_ack_subject(o.reply)
                assert cseq == last_cseq + 1          # consumer seqs are dense
                last_cseq = cseq
                assert sseq not in done               # never redelivered after ack/term
                assert o.msg_subject == filt or not filt
                deliveries[sseq] = deliveries.get(sseq, 0) + 1
                assert dc == deliveries[sseq]
                if max_deliver > 0:
                    assert dc <= max_deliver
                outstanding[sseq] = o.reply

    for op, arg in ops:
        if op == "pub":
            stream.publish(arg, None, b"x", now)
            take(c.poll(now))
        elif op == "pull":
            take(c.request_next("_INBOX.p", b'{"batch":%d,"expires":%d}' % (arg, SECOND),
                                now))
        elif op == "time":
            now += arg * SECOND
            take(c.poll(now))
        elif outstanding:
            seq = sorted(outstanding)[arg % len(outstanding)]
            payload = {"ack": b"+ACK", "nak": b"-NAK", "term": b"+TERM",
                       "wpi": b"+WPI"}[op]
            take(c.process_ack(outstanding[seq], payload, None, now))
            if op in ("ack", "term"):
                done.add(seq)
                outstanding.pop(seq)
        info = c.info(now)
        floor = info["ack_floor"]["stream_seq"]
        pending_seqs = {s for s in outstanding if s not in done}
        assert info["num_ack_pending"] <= len(pending_seqs)
        if max_ack_pending:
            assert info["num_ack_pending"] <= max_ack_pending
        for s in pending_seqs:
            if deliveries.get(s, 0) < max_deliver or max_deliver < 0:
                assert s > floor, (s, floor)      # floor never passes an unacked message
        assert info["delivered"]["consumer_seq"] == last_cseq
    # drain: everything matching is eventually delivered unless acked/termed/exhausted
    for _ in range(40):
        now += ACK_WAIT
        out = c.request_next("_INBOX.p", b'{"batch":50,"expires":%d}' % SECOND, now)
        take(out)
        for o in out:
            if o.reply and o.reply.startswith("$JS.ACK."):
                seq = parse_ack_subject(o.reply)[0]
                take(c.process_ack(o.reply, b"+ACK", None, now))
                done.add(seq)
                outstanding.pop(seq, None)
    matching = [sm.seq for sm in (stream.store.load(s) for s in range(1, stream.last_seq + 1))
                if not filt or sm.subject == filt]
    for seq in matching:
        exhausted = max_deliver > 0 and deliveries.get(seq, 0) >= max_deliver
        assert seq in done or exhausted, (seq, deliveries)
    info = c.info(now)
    assert info["num_pending"] == 0 and info["num_ack_pending"] == 0
