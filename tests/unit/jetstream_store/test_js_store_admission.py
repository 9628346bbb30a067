"""A file store opened over block files (a restart, or blocks a replica fetched from a peer
in a catch-up) admits only what a publish could have stored (jetstream/admission.py): a
record whose checksums pass but whose subject would break the protocol, or whose sequence
or timestamp is out of range, is reported and treated as lost, never served; the records
around it are kept."""

from __future__ import annotations

import os

import pytest
from js_store_helpers import blocks, open_file_store

from jetraft.jetstream import store_format as fmt
from jetraft.jetstream.store import CorruptMessage

FORGING = "i1.a _in.x 3\r\nPWN\r\nMSG _in.injected 1 4\r\nEVIL\r\nMSG i1.b"


def write_block(directory, records) -> None:
    """One block file holding ``records`` (``(seq, ts, subject, headers, data)``), each
    with correct checksums: what a peer could send in a catch-up."""
    os.makedirs(directory, exist_ok=True)
    out = bytearray(fmt.encode_block_header())
    for seq, ts, subject, headers, data in records:
        fmt.encode_record(out, fmt.REC_MSG, seq, ts, subject.encode("utf-8", "surrogateescape"),
                          headers, data)
    with open(os.path.join(directory, fmt.block_name(records[0][0])), "wb") as f:
        f.write(out)


@pytest.mark.parametrize("subject", [FORGING, "a b", "", "a..b", "x."])
def test_a_record_with_a_subject_no_publish_could_store_is_lost_not_served(tmp_path, subject):
    write_block(tmp_path, [(1, 10, "a.1", None, b"one"), (2, 20, subject, None, b"evil"),
                           (3, 30, "a.3", b"NATS/1.0\r\n\r\n", b"three")])
    fs = open_file_store(tmp_path)
    assert [(r["kind"], r["first_seq"]) for r in fs.recovery_report] == [("invalid_message", 2)]
    with pytest.raises(CorruptMessage):
        fs.load(2)
    st = fs.state()
    assert (st.messages, st.first_seq, st.last_seq, st.lost) == (2, 1, 3, [2])
    assert [fs.load(s).subject for s in (1, 3)] == ["a.1", "a.3"]
    assert fs.load_next(">", 2).seq == 3
    assert subject not in fs.subjects_state(">")
    assert fs.store("a.4", None, b"four", 40) == 4          # never reuses a sequence
    fs.close()


def test_out_of_range_sequences_and_timestamps_are_refused(tmp_path):
    write_block(tmp_path, [(1, 10, "a.1", None, b"one"), (2, 1 << 63, "a.2", None, b"two"),
                           (1 << 63, 30, "a.3", None, b"three")])
    fs = open_file_store(tmp_path)
    assert [r["kind"] for r in fs.recovery_report] == ["invalid_message", "invalid_message"]
    st = fs.state()
    assert (st.messages, st.last_seq, st.lost) == (1, 2, [2])
    assert fs.store("a.4", None, b"four", 40) == 3
    fs.close()


def test_a_clean_store_reopens_without_reports_through_its_index_files(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=4096)
    for i in range(200):
        fs.store(f"a.{i % 7}", b"NATS/1.0\r\nK: v\r\n\r\n" if i % 2 else None, b"x" * 50, 1000 + i)
    fs.sync(force=True)
    fs.close()
    assert len(blocks(tmp_path)) > 1
    fs = open_file_store(tmp_path)
    assert fs.recovery_report == [] and fs.state().messages == 200
    fs.close()
