"""Message schedules, sans-IO (jetstream/schedule.py and Stream.fire_schedules): patterns,
a schedule fired once and purged, a repeating one moved on (and once only after a long
stop), a copy refused by a limit tried again later, a schedule replaced or deleted, the
index read back from the store after a restart and carried in a replica's state, and
hostile headers."""

from __future__ import annotations

import pytest

from jetraft import gofmt
from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.replica_state import build_replica_state, check_replica_state
from jetraft.jetstream.schedule import ScheduleIndex, parse_pattern
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream
from jetraft.protocol.headers import get_header

T0 = 1_800_000_000_000_000_000
S = 1_000_000_000


def sched_stream(store: MemoryStore | None = None, **cfg) -> Stream:
    config = StreamConfig.from_json({"name": "S", "subjects": ["s.>"], "storage": "memory",
                                     "allow_msg_schedules": True, **cfg})
    return Stream(config, store or MemoryStore())


def schedule(pattern: str, target: str = "s.out", **extra: str) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
    return f"NATS/1.0\r\nNats-Schedule: {pattern}\r\nNats-Schedule-Target: {target}\r\n{lines}\r\n".encode()


def on(s: Stream, subject: str) -> list[tuple[int, bytes | None, bytes]]:
    st = s.store.state()
    out = []
    for seq in s.store.stored_seqs(st.first_seq, st.last_seq):
        sm = s.store.load(seq)
        if sm.subject == subject:
            out.append((seq, sm.headers, sm.data))
    return out


def code_of(call) -> int:
    with pytest.raises(JSApiError) as info:
        call()
    return info.value.to_json()["err_code"]


@pytest.mark.parametrize(("text", "at", "every"), [
    ("@at 2027-01-15T08:00:00Z", gofmt.parse_time("2027-01-15T08:00:00Z"), 0),
    ("@at 2027-01-15T09:00:00.5+01:00", gofmt.parse_time("2027-01-15T08:00:00.5Z"), 0),
    ("@every 1s", 0, S),
    ("@every 1h30m", 0, 5400 * S),
])
def test_patterns_read_as_nats_server_reads_them(text, at, every):
    pattern = parse_pattern(text)
    assert (pattern.at, pattern.every) == (at, every)


@pytest.mark.parametrize("text", ["@at", "@at 2027-01-15", "@at 2027-02-30T00:00:00Z", "@every 999ms",
                                  "@every -1s", "@every", "@every 1", "soon", "* * * * * *", "@hourly"])
def test_other_patterns_are_refused(text):
    assert code_of(lambda: parse_pattern(text)) == 10189


def test_an_at_schedule_fires_once_and_is_purged():
    s = sched_stream()
    s.publish("s.job", schedule(f"@at {gofmt.format_time(T0 + 5 * S)}", **{"Nats-Msg-Id": "x",
                                                                           "Nats-Expected-Last-Sequence": "0"}),
              b"payload", T0)
    assert s.next_expiry() == T0 + 5 * S
    assert s.fire_schedules(T0 + 4 * S) == (0, [])
    assert s.fire_schedules(T0 + 5 * S) == (1, [])
    (copy,) = on(s, "s.out")
    assert copy[1] == b"NATS/1.0\r\nNats-Scheduler: s.job\r\nNats-Schedule-Next: purge\r\n\r\n"
    assert copy[2] == b"payload"
    assert on(s, "s.job") == []
    assert s.next_expiry() is None
    assert s.fire_schedules(T0 + 60 * S) == (0, [])        # a second tick fires nothing


def test_an_every_schedule_fires_once_after_a_long_stop_and_moves_on():
    s = sched_stream()
    s.publish("s.tick", schedule("@every 10s"), b"", T0)
    assert s.next_expiry() == T0 + 10 * S
    # the stream's timer first runs an hour later: one copy, the next one from now
    assert s.fire_schedules(T0 + 3600 * S + 300_000_000)[0] == 1
    (copy,) = on(s, "s.out")
    assert get_header(copy[1], "Nats-Schedule-Next") == gofmt.format_time(T0 + 3610 * S)
    assert s.next_expiry() == T0 + 3610 * S
    assert s.fire_schedules(T0 + 3610 * S)[0] == 1
    assert s.next_expiry() == T0 + 3620 * S


def test_a_copy_refused_by_a_limit_is_tried_again_a_second_later():
    big = sched_stream(max_msg_size=150)
    big.publish("s.data", None, b"x" * 140, T0)
    big.publish("s.job", schedule(f"@at {gofmt.format_time(T0 + S)}", target="s.big",
                                  **{"Nats-Schedule-Source": "s.data"}), b"", T0)
    # the copy of s.data (with its Nats-Scheduler headers) is over max_msg_size: refused, kept
    # for later
    assert big.fire_schedules(T0 + S) == (0, [])
    assert big.next_expiry() == T0 + 2 * S
    assert on(big, "s.job")


def test_a_schedule_replaced_or_deleted_does_not_fire():
    s = sched_stream()
    s.publish("s.a", schedule(f"@at {gofmt.format_time(T0 + S)}"), b"old", T0)
    s.publish("s.a", b"NATS/1.0\r\nK: v\r\n\r\n", b"plain", T0)          # no longer a schedule
    s.publish("s.d", schedule(f"@at {gofmt.format_time(T0 + S)}"), b"d", T0)
    s.publish("s.d", None, b"no headers", T0)                           # nor this one
    s.publish("s.b", schedule(f"@at {gofmt.format_time(T0 + S)}"), b"b", T0)
    s.delete_message(s.store.last_seq_for_subject("s.b"))
    s.publish("s.c", schedule(f"@at {gofmt.format_time(T0 + S)}"), b"first", T0)
    s.publish("s.c", schedule(f"@at {gofmt.format_time(T0 + 2 * S)}"), b"second", T0)
    assert s.fire_schedules(T0 + S) == (0, [])
    assert s.fire_schedules(T0 + 2 * S)[0] == 1
    assert [d for _, _, d in on(s, "s.out")] == [b"second"]


def test_the_index_is_read_back_from_the_store_after_a_restart():
    store = MemoryStore()
    s = sched_stream(store)
    s.publish("s.once", schedule(f"@at {gofmt.format_time(T0 + 30 * S)}"), b"", T0)
    s.publish("s.rep", schedule("@every 10s"), b"", T0)
    s.fire_schedules(T0 + 10 * S)
    s.fire_schedules(T0 + 20 * S)
    again = sched_stream(store)
    assert sorted(again.schedules.to_state()) == sorted(s.schedules.to_state())
    assert again.next_expiry() == T0 + 30 * S


def test_the_index_travels_in_a_replica_state():
    s = sched_stream()
    s.publish("s.rep", schedule("@every 10s"), b"", T0)
    s.fire_schedules(T0 + 10 * S)
    state = build_replica_state(s, {})
    assert state["stream"]["schedules"] == [["s.rep", 1, T0 + 20 * S]]
    checked = check_replica_state(state, "S", "memory")
    assert checked.schedules == [["s.rep", 1, T0 + 20 * S]]
    state["stream"]["schedules"] = [["s.rep", "one", 5]]
    with pytest.raises(ValueError, match=r"schedules\[0\]"):
        check_replica_state(state, "S", "memory")
    del state["stream"]["schedules"]            # an older jetraft's state: no schedules
    assert check_replica_state(state, "S", "memory").schedules is None


def test_hostile_schedule_headers_are_refused_and_nothing_is_stored():
    s = sched_stream()
    at = f"@at {gofmt.format_time(T0 + S)}"
    for headers, code in (
            (schedule(at, target="s.out x"), 10190),
            (schedule(at, target="s." + "x" * 5, **{"Nats-Schedule-Source": "s.job"}), 10203),
            (schedule("@every 0.5s"), 10189),
            (schedule(at, **{"Nats-Schedule-Time-Zone": "Mars/Olympus"}), 10223),
            (b"NATS/1.0\r\nNats-Scheduler: s.x\r\n\r\n", 10212),
            (b"NATS/1.0\r\nNats-Schedule-Next: 2030-01-01T00:00:00Z\r\nNats-Scheduler: s.x\r\n\r\n", 10212)):
        assert code_of(lambda headers=headers: s.publish("s.job", headers, b"", T0)) == code
    assert s.store.state().messages == 0
    assert len(ScheduleIndex.from_state([])) == 0
