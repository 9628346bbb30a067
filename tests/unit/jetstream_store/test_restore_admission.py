"""Every door into the store checks what a publish checks: a restore's data
(jetstream/snapshot.py ``build_restored_store``) is refused, with a clear message and no store
left behind, when a message breaks a rule of jetstream/admission.py or the data would take
more memory to decode than its budget allows."""

from __future__ import annotations

import resource
import time

import msgpack
import pytest
from snapshot_forge import forge, header

from jetraft.jetstream.admission import Admission, InadmissibleMessage, check_message, subject_problem
from jetraft.jetstream.snapshot import HEADER_MAX_VALUES, SnapshotDataError, build_restored_store

HDRS = b"NATS/1.0\r\nK: v\r\n\r\n"
#: The subject of the attack: read back, it forged a MSG frame to every reader.
FORGING = "i1.a _in.x 3\r\nPWN\r\nMSG _in.injected 1 4\r\nEVIL\r\nMSG i1.b"


def restore(tmp_path, data: bytes, kind: str = "file", **kw):
    path = tmp_path / "snap"
    path.write_bytes(data)
    return build_restored_store(str(path), str(tmp_path / "dst") if kind == "file" else None, **kw)


@pytest.mark.parametrize("kind", ["file", "memory"])
@pytest.mark.parametrize("subject, why", [
    (FORGING, "holds whitespace or a line break"),
    ("a b", "holds whitespace"),
    ("a\tb", "holds whitespace"),
    ("a\nb", "holds whitespace"),
    ("", "is empty"),
    ("a..b", "has an empty token"),
    (".a", "has an empty token"),
    ("a.", "has an empty token"),
])
def test_a_subject_no_publish_could_store_is_refused(tmp_path, kind, subject, why):
    data = forge(header(1, 2, 2), [[1, "ok.a", None, b"x", 1], [2, subject, None, b"y", 2]])
    with pytest.raises(SnapshotDataError, match=f"message 2: subject .* {why}"):
        restore(tmp_path, data, kind)
    assert not (tmp_path / "dst").exists()


def test_a_subject_over_the_servers_control_line_is_refused(tmp_path):
    data = forge(header(1, 1, 1), [[1, "a." + "b" * 5000, None, b"x", 1]])
    with pytest.raises(SnapshotDataError, match="is longer than 4096 bytes"):
        restore(tmp_path, data, admission=Admission(max_subject=4096))
    assert restore(tmp_path, data, "memory").messages == 1     # no limit given: kept


@pytest.mark.parametrize("headers, why", [
    (b"HTTP/1.0\r\n\r\n", "does not start with NATS/1.0"),
    (b"NATS/1.0\r\nK: v\r\n", "does not end with an empty line"),
    (b"NATS/1.0\r\nK v\r\n\r\n", "no ':'"),
    (b"NATS/1.0\r\n" + b"K: " + b"v" * 70_000 + b"\r\n\r\n", "over 65535"),
])
def test_a_malformed_or_oversized_header_block_is_refused(tmp_path, headers, why):
    data = forge(header(1, 1, 1), [[1, "a.b", headers, b"x", 1]])
    with pytest.raises(SnapshotDataError, match=why):
        restore(tmp_path, data)


def test_sizes_sequences_and_timestamps_out_of_range_are_refused(tmp_path):
    with pytest.raises(SnapshotDataError, match="11 bytes of headers and data are over the limit of 10"):
        restore(tmp_path, forge(header(1, 1, 1), [[1, "a", None, b"x" * 11, 1]]),
                admission=Admission(max_msg=10))
    with pytest.raises(SnapshotDataError, match="timestamp .* out of range"):
        restore(tmp_path, forge(header(1, 1, 1), [[1, "a", None, b"x", 1 << 63]]))
    with pytest.raises(SnapshotDataError, match="sequences .* out of range"):
        restore(tmp_path, forge(header(1, 1 << 63, 1), [[1, "a", None, b"x", 1]]))
    assert not (tmp_path / "dst").exists()


def test_a_well_formed_message_with_headers_restores(tmp_path):
    data = forge(header(1, 3, 2), [[1, "a.b", HDRS, b"x", 1], [3, "a.*", None, b"y", 2]])
    result = restore(tmp_path, data, "memory", admission=Admission(max_subject=4096, max_msg=100))
    assert (result.first_seq, result.last_seq, result.messages) == (1, 3, 2)
    assert result.store.load(1).headers == HDRS


@pytest.mark.parametrize("where", ["header", "end"])
def test_unknown_keys_are_refused(tmp_path, where):
    hdr = header(1, 1, 1, **({"junk": []} if where == "header" else {}))
    end = {"end": True, "messages": 1, "last_seq": 1, **({"junk": 1} if where == "end" else {})}
    with pytest.raises(SnapshotDataError, match="unknown key 'junk'|end record is malformed"):
        restore(tmp_path, forge(hdr, [[1, "a", None, b"x", 1]], end))


#: 12 million empty arrays (12 MB, a few hundred KB once framed: 840 MB as Python lists),
#: and 1.9 million arrays each holding an empty one (each container within msgpack's own
#: per-container limits).
BOMBS = {
    "long": b"\xdd" + (12_000_000).to_bytes(4, "big") + b"\x90" * 12_000_000,
    "nested": b"\xdd" + (1_900_000).to_bytes(4, "big") + b"\x91\x90" * 1_900_000,
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
@pytest.mark.parametrize("where", ["unknown key", "replica state", "record"])
def test_a_decode_bomb_is_refused_before_memory_grows(tmp_path, where, bomb):
    """Refused within the decoding budget, quickly, before memory grows."""
    payload = BOMBS[bomb]
    base = header(1, 1, 1)
    records: list = [[1, "a", None, b"x", 1]]
    if where == "unknown key":
        hdr = b"\x85" + msgpack.packb(base, use_bin_type=True)[1:] + msgpack.packb("junk") + payload
    elif where == "replica state":
        body = msgpack.packb({k: v for k, v in base.items() if k != "replica"}, use_bin_type=True)
        hdr = b"\x84" + body[1:] + msgpack.packb("replica") + b"\x81" + msgpack.packb("consumers") + payload
    else:
        hdr, records = base, [payload]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    with pytest.raises(SnapshotDataError, match=f"holds more than {HEADER_MAX_VALUES:,} values|"
                                                f"exceeds max_array_len\\({HEADER_MAX_VALUES}\\)"):
        restore(tmp_path, forge(hdr, records))
    assert time.monotonic() - start < 5
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, f"peak memory grew by {grown_mb:.0f} MB"
    assert not (tmp_path / "dst").exists()


def test_the_rules_themselves():
    assert subject_problem("orders.1") is None
    assert subject_problem("orders.*") is None          # a non-pedantic PUB stores one
    assert subject_problem("\x00x") is None             # PUB splits on whitespace alone
    assert subject_problem("a" * 10, 9) == "is longer than 9 bytes"
    assert subject_problem("é" * 5, 9) == "is longer than 9 bytes"    # bytes, not characters
    with pytest.raises(InadmissibleMessage, match="sequence 0 is out of range"):
        check_message(0, "a", None, b"", 1)
    check_message(1, "a", b"garbage", b"", 1, Admission(strict_headers=False))    # recovery: kept
