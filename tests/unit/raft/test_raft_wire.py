"""The RAFT wire codec: round trips (by hand and with hypothesis) and malformed batches."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.raft.wire import VERSION, decode_batch, encode_batch
from jetraft.raft.types import Entry, EntryType, Message, MessageType, Snapshot

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
small = st.integers(min_value=0, max_value=1000)
name = st.text(max_size=12)
entry = st.builds(Entry, term=u64, index=u64, type=st.sampled_from(EntryType), data=st.binary(max_size=40))
snapshot = st.builds(Snapshot, index=u64, term=u64, peers=st.lists(name, max_size=5).map(tuple),
                     data=st.binary(max_size=40))
message = st.builds(
    Message,
    type=st.sampled_from(MessageType), group=name, src=name, dst=name,
    term=u64 | small, log_term=u64 | small, index=u64 | small,
    entries=st.lists(entry, max_size=4).map(tuple), commit=u64 | small,
    reject=st.booleans(), reject_hint=u64 | small, snapshot=st.none() | snapshot,
    context=st.binary(max_size=20),
)


@settings(deadline=None, max_examples=300)
@given(st.lists(message, max_size=12))
def test_any_batch_round_trips(messages):
    assert decode_batch(encode_batch(messages)) == messages


@settings(deadline=None, max_examples=300)
@given(st.lists(message, min_size=1, max_size=4), st.data())
def test_a_truncated_or_mangled_batch_raises_value_error_only(messages, data):
    raw = encode_batch(messages)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    with pytest.raises(ValueError):
        decode_batch(raw[:cut])
    pos = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    flipped = bytearray(raw)
    flipped[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    try:
        out = decode_batch(bytes(flipped))
    except ValueError:
        return
    assert all(isinstance(m, Message) for m in out)  # a flip may still decode to valid messages


def test_messages_of_many_groups_share_one_string_table():
    hb = [Message(MessageType.HEARTBEAT, f"S-R3F-{k:04d}", "srv-a", "srv-b", term=7, commit=k)
          for k in range(100)]
    raw = encode_batch(hb)
    assert decode_batch(raw) == hb
    assert raw.count(b"srv-a") == 1 and raw.count(b"srv-b") == 1
    assert len(raw) < 100 * 24, "a heartbeat must cost about its group name plus a few bytes"


def test_a_full_append_round_trips_field_for_field():
    m = Message(MessageType.APPEND, "_meta_", "a", "b", term=3, log_term=2, index=41,
                entries=(Entry(3, 42, EntryType.NORMAL, b"x" * 10),
                         Entry(3, 43, EntryType.CONFIG_CHANGE, b"\x01d")), commit=40)
    (back,) = decode_batch(encode_batch([m]))
    assert back == m
    assert back.type is MessageType.APPEND and back.entries[1].type is EntryType.CONFIG_CHANGE


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


GOOD = [7, 0, 1, 2, 5, 0, 0, 3]
STRINGS = ["g", "a", "b"]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"", "not valid msgpack"),
        (b"\x93\x01", "not valid msgpack"),
        (pack([VERSION, STRINGS, [GOOD]]) + b"\x00", "not valid msgpack"),
        (pack({"v": 1}), "expected [version"),
        (pack([2, STRINGS, [GOOD]]), "unsupported version"),
        (pack([True, STRINGS, [GOOD]]), "unsupported version"),
        (pack([VERSION, ["g", 5], [GOOD]]), "string table"),
        (pack([VERSION, STRINGS, {}]), "messages must be a list"),
        (pack([VERSION, STRINGS, [[7, 0, 1]]]), "message 0: message"),
        (pack([VERSION, STRINGS, [GOOD + [0] * 6]]), "message 0: message"),
        (pack([VERSION, STRINGS, [[99, 0, 1, 2]]]), "type: expected a known MessageType"),
        (pack([VERSION, STRINGS, [["7", 0, 1, 2]]]), "type: expected a known MessageType"),
        (pack([VERSION, STRINGS, [[[], 0, 0, 0]]]), "type: expected a known MessageType"),
        (pack([VERSION, STRINGS, [[7, 3, 1, 2]]]), "group: expected an index"),
        (pack([VERSION, STRINGS, [[7, 0, -1, 2]]]), "src: expected an index"),
        (pack([VERSION, STRINGS, [[7, 0, 1, 2, -5]]]), "term: expected an unsigned"),
        (pack([VERSION, STRINGS, [[7, 0, 1, 2, 1.5]]]), "term: expected an unsigned"),
        (pack([VERSION, STRINGS, [[7, 0, 1, 2, True]]]), "term: expected an unsigned"),
        (pack([VERSION, STRINGS, [[5, 0, 1, 2, 1, 0, 0, 0, 0]]]), "entries: expected an array"),
        (pack([VERSION, STRINGS, [[5, 0, 1, 2, 1, 0, 0, 0, [[1, 2, 9, b""]]]]]), "entry 0 type"),
        (pack([VERSION, STRINGS, [[5, 0, 1, 2, 1, 0, 0, 0, [[1, 2, 1]]]]]), "entry 0: expected an array of 4"),
        (pack([VERSION, STRINGS, [[5, 0, 1, 2, 1, 0, 0, 0, [[1, 2, 1, "text"]]]]]), "entry 0 data"),
        (pack([VERSION, STRINGS, [[6, 0, 1, 2, 1, 0, 0, 0, [], 1]]]), "reject: expected a bool"),
        (pack([VERSION, STRINGS, [[7, 0, 1, 2, 1, 0, 0, 0, [], False, 0, "ctx"]]]), "context: expected bytes"),
        (pack([VERSION, STRINGS, [[9, 0, 1, 2, 1, 0, 0, 0, [], False, 0, b"", [1, 1, [5], b""]]]]),
         "snapshot peers"),
        (pack([VERSION, STRINGS, [[9, 0, 1, 2, 1, 0, 0, 0, [], False, 0, b"", [1, 1]]]]),
         "snapshot: expected an array of 4"),
        (pack([VERSION, STRINGS, [[7, 0, 1, 2, -(1 << 63)]]]), "term: expected an unsigned"),
        (pack([VERSION, STRINGS, [[7, 0, 1, 2, msgpack.ExtType(1, b"x")]]]), "term: expected an unsigned"),
    ],
)
def test_malformed_batches_raise_value_error_naming_the_problem(raw, needle):
    with pytest.raises(ValueError) as info:
        decode_batch(raw)
    assert needle in str(info.value), str(info.value)


def test_a_minimal_heartbeat_decodes_with_defaults():
    (m,) = decode_batch(pack([VERSION, STRINGS, [GOOD]]))
    assert m == Message(MessageType.HEARTBEAT, "g", "a", "b", term=5, commit=3)
