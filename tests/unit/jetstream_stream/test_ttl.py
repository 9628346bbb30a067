"""Per-message TTL, sans-IO (jetstream/ttl.py and Stream.expire): the index's expiries,
``never`` against max_age, the saved index read back (only what it does not cover is read
again from the messages), a saved index that does not read back, and an entry whose
sequence holds another message now."""

from __future__ import annotations

import msgpack
import pytest

from jetraft.jetstream import layout
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream, parse_message_ttl
from jetraft.jetstream.ttl import NEVER, TtlIndex
from jetraft.storage import GroupCommit

T0 = 1_800_000_000_000_000_000
S = 1_000_000_000


def ttl(value: str) -> bytes:
    return f"NATS/1.0\r\nNats-TTL: {value}\r\n\r\n".encode()


def stream(store: MemoryStore | None = None, state: bytes | None = None, **cfg) -> Stream:
    config = StreamConfig.from_json({"name": "T", "subjects": ["t.>"], "storage": "memory",
                                     "allow_msg_ttl": True, **cfg})
    return Stream(config, store or MemoryStore(), ttl_state=state)


def held(s: Stream) -> list[int]:
    st = s.store.state()
    return list(s.store.stored_seqs(st.first_seq, st.last_seq))


def test_messages_go_when_their_ttl_passes_in_expiry_order():
    s = stream()
    s.publish("t.a", ttl("3"), b"", T0)
    s.publish("t.b", ttl("1s"), b"", T0)
    s.publish("t.c", None, b"", T0)
    assert s.next_expiry() == T0 + S
    assert s.expire(T0 + S - 1) == 0
    assert s.expire(T0 + S) == 1 and held(s) == [1, 3]
    assert s.next_expiry() == T0 + 3 * S
    assert s.expire(T0 + 10 * S) == 1 and held(s) == [3] and s.next_expiry() is None


def test_never_outlives_max_age_and_a_ttl_does_not_hold_back_max_age():
    s = stream(max_age=2 * S)
    s.publish("t.a", ttl("never"), b"", T0)
    s.publish("t.b", ttl("1h"), b"", T0)
    s.publish("t.c", None, b"", T0)
    assert s.expire(T0 + 5 * S) == 2 and held(s) == [1]


def test_a_saved_index_is_read_back_and_only_later_messages_are_read():
    store = MemoryStore()
    s = stream(store)
    s.publish("t.a", ttl("5"), b"", T0)
    saved = s.ttls.to_bytes()
    s.publish("t.b", ttl("2"), b"", T0 + 1)      # after the save: read from the message
    again = stream(store, saved)
    assert again.ttls.covered == 2 and len(again.ttls) == 2
    assert again.expire(T0 + 3 * S) == 1 and held(again) == [1]


@pytest.mark.parametrize("data", [b"\xc1", msgpack.packb({"v": 1}), msgpack.packb([1, 0, [[0, 5, 1]]]),
                                  msgpack.packb([9, 0, []]), msgpack.packb([1, 0, [[1, -7, 1]]])])
def test_a_saved_index_that_does_not_read_back_is_refused_and_the_messages_read_instead(data):
    with pytest.raises(ValueError):
        TtlIndex.from_bytes(data, 10)
    store = MemoryStore()
    stream(store).publish("t.a", ttl("1"), b"", T0)
    assert len(stream(store, data).ttls) == 1


def test_an_entry_for_a_sequence_that_holds_another_message_is_dropped():
    store = MemoryStore()
    s = stream(store)
    s.publish("t.a", ttl("1"), b"", T0)
    index = TtlIndex()
    index.add(1, 1, T0 - 99)          # a message at seq 1 with another timestamp
    s.ttls = index
    assert s.expire(T0 + 10 * S) == 0 and held(s) == [1]


def test_the_index_knows_never_and_parses_as_nats_server():
    index = TtlIndex()
    index.add(4, -1, T0)
    assert index.never(4) and not index.never(5) and index.next_expiry() is None
    assert parse_message_ttl("never") == (NEVER, False)


def test_a_replica_store_opened_off_the_loop_saves_its_ttl_index_for_the_stream(tmp_path):
    """A replica installed from a snapshot (or restored) opens its store in a worker thread;
    the TTL index is read there and saved, so the stream made over the store reads it back
    instead of reading every message on the event loop."""
    class Events:
        def emit(self, name: str, **fields) -> None:
            pass

    acc = JetStreamAccount("$G", store_dir=str(tmp_path), sync=GroupCommit(), events=Events(),
                           interest=lambda s: False, server_version="2.15.1", clustered=True)
    cfg = {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": True}
    entry = acc.create_replica(cfg, T0)
    entry.stream.publish("t.a", ttl("5"), b"", T0)
    entry.stream.publish("t.b", None, b"", T0)
    entry.stream.store.sync()
    acc.detach_replica("T")
    store = acc.open_replica_store("T", ttl=True)
    saved = TtlIndex.from_bytes(layout.read_ttl_index(layout.stream_dir(acc.base, "T")), 2)
    assert saved.covered == 2 and len(saved) == 1 and saved.next_expiry() == T0 + 5 * S
    again = acc.create_replica(cfg, T0, keep_files=True, store=store)
    assert again.stream.ttls.covered == 2 and again.stream.next_expiry() == T0 + 5 * S
