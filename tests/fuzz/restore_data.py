"""Fuzz target: a stream restore's data, as a client sends it to
``$JS.SNAPSHOT.RESTORE.<stream>.<id>`` (net/jetstream/snapshot.py): unframed chunk by chunk
(jetraft.jetstream.snapshot_frames.Unframer) into a spool file, then checked and written
into a new store (jetraft.jetstream.snapshot.build_restored_store), a MemoryStore and a
FileStore, and the memory one attached to an account (``JetStreamAccount.attach_restored``,
which restores the snapshot's stream and consumer state).

Input: see ``fuzz_support.chunks``: a flags byte, chunk sizes, then a stream. Options
(the flags byte's high 5 bits):

- bits 0-1, what the stream is:
  0. ``wire``: the restore data itself, Snappy-framed, as a client sends it; the chunks are
     the restore's messages (empty ones are skipped: an empty message ends a restore);
  1. ``payload``: the snapshot data without its SHA-256 digest (``MAGIC``, header, records,
     end record); the target appends the digest and frames it the server's way
     (``FramedReader``), so that every mutation gets past the digest and the frames' CRCs
     to the records; the chunk sizes cut the framed bytes;
  2. ``unsummed``: like 1, but the stream is the whole snapshot data, digest (if any)
     included, as it is: reaches the digest check;
  3. ``zlib``: like 1, the payload zlib-compressed (at most 16 MiB inflated): lets a small
     input carry a big payload (the decode bombs among the regression inputs);
- bit 2: a storage limit (``max_bytes``) of 4096 bytes instead of none.

Outcomes allowed: the restore succeeds, or fails with FrameError (framing) or
SnapshotDataError (the data); the account refuses a restored state only with JSApiError.
Invariants on success: the memory and file restores agree (both fail alike or both give the
same sequences and messages; each store counts bytes its own way); every message's subject
is one a publish can store (:func:`storable`: a valid literal subject, ``*`` and ``>`` read
as plain characters, no white space), its headers (if any) a NATS header block that parses, its sequence within
[first_seq, last_seq], ascending; the state's counts match the messages. A failed file
restore leaves no directory behind.

Resource rules (fuzz_support.bounded): the unframing plus the slower of the two restores
(and the attach) take at most 100 ms, and memory at most fuzz_support.MEMORY_ALLOWANCE_MB.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import inspect
import io
import os
import shutil
import tempfile
import zlib

import atheris

from fuzz_support import Work, bounded, chunks, main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.jetstream.api import JetStreamAccount
    from jetraft.jetstream.errors import JSApiError
    from jetraft.jetstream.model import StreamConfig
    from jetraft.jetstream.snapshot import SnapshotDataError, build_restored_store
    from jetraft.jetstream.snapshot_frames import FrameError, FramedReader, Unframer
    from jetraft.jetstream.store import FileStore
    from jetraft.protocol import headers as hdr
    from jetraft.protocol.subjects import is_valid_literal_subject
    from jetraft.storage.group_commit import GroupCommit
    try:        # the restoring server's limits (nats-server's defaults), where the code has them
        from jetraft.jetstream.admission import Admission
    except ImportError:
        Admission = None

WIRE, PAYLOAD, UNSUMMED, ZLIB = range(4)
LIMIT = 4096
#: build_restored_store's ``admission``: max_control_line 4096, max_payload 1 MiB.
_ADMISSION = ({"admission": Admission(max_subject=4096, max_msg=1 << 20)}
              if Admission is not None and "admission" in inspect.signature(build_restored_store).parameters else {})
MAX_INFLATED = 16 << 20
_BLANKS = frozenset(" \t\r\n\x0b\x0c")
T0 = 1_800_000_000_000_000_000

_root: str | None = None
_count = 0


class _Events:
    def emit(self, name: str, **fields) -> None:
        pass


def _directory() -> str:
    """A new directory for one input (under $JETRAFT_FUZZ_SCRATCH when set)."""
    global _root, _count
    if _root is None:
        _root = tempfile.mkdtemp(prefix="jetraft-fuzz-restore-", dir=os.environ.get("JETRAFT_FUZZ_SCRATCH") or None)
        atexit.register(shutil.rmtree, _root, ignore_errors=True)
    _count += 1
    path = os.path.join(_root, str(_count))
    os.mkdir(path)
    return path


def framed(data: bytes) -> tuple[int, int, list[bytes]]:
    """(mode, max_bytes, the chunks a client sends) of an input."""
    options, pieces = chunks(data)
    mode, max_bytes = options & 3, LIMIT if options & 4 else 0
    if mode == WIRE:
        return mode, max_bytes, pieces
    payload = b"".join(pieces)
    if mode == ZLIB:
        try:
            d = zlib.decompressobj()
            payload = d.decompress(payload, MAX_INFLATED)
        except zlib.error:
            payload = b""
    if mode != UNSUMMED:
        payload += hashlib.sha256(payload).digest()
    wire = FramedReader(io.BytesIO(payload)).read(1 << 62)
    out, pos = [], 0
    for piece in pieces[:-1]:
        out.append(wire[pos:pos + len(piece)])
        pos += len(piece)
    out.append(wire[pos:])
    return mode, max_bytes, out


def storable(subject: str) -> bool:
    """Whether a publish can store a message on ``subject``: a valid literal subject (no
    empty token, no white space) with ``*`` and ``>`` read as plain characters, which a
    client that is not pedantic publishes to and a stream stores as they are (nats-server
    alike), and no ASCII white space at all."""
    literal = subject.replace("*", "_").replace(">", "_")
    return is_valid_literal_subject(literal) and not _BLANKS.intersection(subject)


def _messages(store) -> list[tuple]:
    st = store.state()
    out = []
    seq = st.first_seq
    while seq <= st.last_seq:
        msg = store.load_next(">", seq)
        if msg is None:
            break
        out.append((msg.seq, msg.subject, msg.headers, msg.data, msg.ts))
        seq = msg.seq + 1
    return out


def _check(result, messages: list[tuple]) -> None:
    assert result.first_seq <= result.last_seq + 1, (result.first_seq, result.last_seq)
    assert result.messages == len(messages), (result.messages, len(messages))
    assert isinstance(result.replica, dict), result.replica
    last = 0
    for seq, subject, headers, data, ts in messages:
        assert result.first_seq <= seq <= result.last_seq, (seq, result.first_seq, result.last_seq)
        assert seq > last, f"sequence {seq} after {last}"
        last = seq
        assert storable(subject), f"restored message {seq} has subject {subject!r}"
        if headers:
            try:
                hdr.parse(headers)
            except hdr.HeaderError as exc:
                raise AssertionError(f"restored message {seq} has headers {headers!r:.200} that do not parse: {exc}") from None
        assert isinstance(data, bytes) and isinstance(ts, int)


def _restore(path: str, msgs: str | None, max_bytes: int, work: Work, phase: str):
    try:
        with work(phase):
            return build_restored_store(path, msgs, max_bytes=max_bytes, **_ADMISSION)
    except SnapshotDataError as exc:
        if msgs is not None:
            assert not os.path.exists(msgs), f"a failed restore left {msgs} behind"
        return exc


def _attach(result, work: Work) -> None:
    """The memory restore attached to an account, as a restore of stream S (memory) ends."""
    acc = JetStreamAccount("$G", store_dir=None, sync=GroupCommit(), events=_Events(),
                           interest=lambda subject: True, server_version="2.15.1",
                           sync_always=False, server_name="fuzz")
    cfg = StreamConfig.from_json({"name": "S", "subjects": ["s.>"], "storage": "memory"}).checked()
    try:
        with work("attach"):
            acc.attach_restored(cfg, result, None, result.store, T0)
    except JSApiError:
        assert "S" not in acc.streams, "a refused restore left its stream in the account"
        return
    st = acc.streams["S"].stream.store.state()
    assert (st.first_seq, st.last_seq, st.messages) == (result.first_seq, result.last_seq, result.messages)


def run(prepared: tuple[int, int, list[bytes]], work: Work) -> None:
    mode, max_bytes, pieces = prepared
    directory = _directory()
    try:
        spool = os.path.join(directory, "spool")
        unframer = Unframer()
        try:
            with open(spool, "wb") as f:
                for piece in pieces:
                    if not piece:
                        continue        # (an empty message ends a restore: chunks are not empty)
                    with work("unframe"):
                        raw = unframer.feed(piece)
                    f.write(raw)
                with work("unframe"):
                    unframer.finish()
        except FrameError:
            assert mode == WIRE, "the target's own framing was refused"
            return
        in_memory = _restore(spool, None, max_bytes, work, "build-memory")
        on_file = _restore(spool, os.path.join(directory, "msgs"), max_bytes, work, "build-file")
        if isinstance(in_memory, Exception) or isinstance(on_file, Exception):
            assert isinstance(in_memory, Exception) and isinstance(on_file, Exception), \
                f"memory restore: {in_memory!r:.300}; file restore: {on_file!r:.300}"
            return
        messages = _messages(in_memory.store)
        _check(in_memory, messages)
        store = FileStore(os.path.join(directory, "msgs"), sync=GroupCommit())
        try:
            assert not store.recovery_report, store.recovery_report
            st = store.state()
            assert (st.first_seq, st.last_seq, st.messages) == \
                (in_memory.first_seq, in_memory.last_seq, in_memory.messages), (st, in_memory)
            assert (on_file.first_seq, on_file.last_seq, on_file.messages, on_file.bytes) == \
                (st.first_seq, st.last_seq, st.messages, st.bytes), (on_file, st)
            assert _messages(store) == messages
        finally:
            store.close()
        _attach(in_memory, work)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _work_seconds(work: Work) -> float:
    """The server restores into one store: unframing, then one of the two builds."""
    s = work.seconds
    return s.get("unframe", 0.0) + max(s.get("build-memory", 0.0) + s.get("attach", 0.0),
                                       s.get("build-file", 0.0))


_bounded = bounded(run, _work_seconds, prepare=framed)


def TestOneInput(data: bytes) -> None:
    _bounded(data)


if __name__ == "__main__":
    main(TestOneInput)
