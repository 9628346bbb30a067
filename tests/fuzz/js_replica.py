"""A clustered stream replica for the store fuzz targets stream_snapshot and catchup_frames
(not a target itself), built the way tests/unit/jetstream_cluster/test_stream_snapshot.py
builds one: a JetStreamAccount with ``clustered=True`` and a :class:`StreamReplica` of file
stream ORDERS (:data:`CONFIG`) whose RAFT entries are applied directly.

:func:`source` makes the replica every input starts from: 60 publishes (with message ids,
some deleted), a durable consumer with deliveries pending, blocks of :data:`BLOCK_BYTES`
(so the store has several, and ``max_msgs`` emptied the first ones); its :meth:`snapshot
<StreamReplica.snapshot>` is the seed of stream_snapshot, its block files the store a
replica holds (:func:`template`). Everything is deterministic (fixed times), so the seeds
made once by make_seeds.py match the blocks made again by each fuzzing process, as long
as the store's format and the workload do not change (else regenerate the seeds).

Import it inside ``atheris.instrument_imports()``: it imports the code under test.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile

from jetraft.jetstream import store_format as fmt
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.replicated import API, PUBLISH, InterestOverride, StreamReplica, encode_entry
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, EntryType

T0 = 1_800_000_000_000_000_000
NAME = "ORDERS"
CONFIG = {"name": NAME, "subjects": ["orders.>"], "num_replicas": 3, "storage": "file",
          "retention": "limits", "duplicate_window": 120_000_000_000, "max_msgs": 40}
BLOCK_BYTES = 2048
SCRATCH_ENV = "JETRAFT_FUZZ_SCRATCH"


class Events:
    """An event log that keeps what was emitted (``lines``: (name, fields))."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields) -> None:
        self.lines.append((name, fields))


def scratch_root(prefix: str) -> str:
    """A fresh directory under $JETRAFT_FUZZ_SCRATCH when set (else the system's temporary
    directory), removed at interpreter exit when Python gets to run that."""
    root = tempfile.mkdtemp(prefix=prefix, dir=os.environ.get(SCRATCH_ENV) or None)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def account(directory: str, events=None) -> JetStreamAccount:
    return JetStreamAccount("$G", store_dir=directory, sync=GroupCommit(), events=events or Events(),
                            interest=lambda subject: False, server_version="2.15.1", sync_always=False,
                            server_name="n1", clustered=True)


def replica(acc: JetStreamAccount, *, create: bool = True) -> StreamReplica:
    """The replica of ORDERS in ``acc`` (its stream created empty when ``create``)."""
    if create:
        acc.create_replica(CONFIG, T0)
    return StreamReplica(acc, NAME, emit=lambda out: None, override=InterestOverride(),
                         config=CONFIG, created_ns=T0)


def _entries() -> list[bytes]:
    out = []
    for i in range(1, 61):
        hdr = f"NATS/1.0\r\nNats-Msg-Id: id-{i}\r\n\r\n".encode() if i % 2 else None
        out.append(encode_entry(PUBLISH, T0 + i, set(), f"orders.{i % 3}", f"_INBOX.p{i}", hdr, b"x" * 40))
        if i % 7 == 0:
            out.append(encode_entry(API, T0 + i, set(), f"$JS.API.STREAM.MSG.DELETE.{NAME}", "_INBOX.d",
                                    None, json.dumps({"seq": i - 3}).encode()))
    create = json.dumps({"stream_name": NAME, "config": {
        "durable_name": "C", "ack_policy": "explicit", "ack_wait": 30_000_000_000}}).encode()
    out.append(encode_entry(API, T0 + 100, set(), f"$JS.API.CONSUMER.CREATE.{NAME}.C", "_INBOX.c", None, create))
    out.append(encode_entry(API, T0 + 101, {"_INBOX.n"}, f"$JS.API.CONSUMER.MSG.NEXT.{NAME}.C", "_INBOX.n",
                            None, json.dumps({"batch": 3}).encode()))
    return out


def source(directory: str) -> tuple[JetStreamAccount, StreamReplica, bytes]:
    """The account, replica and snapshot described in the module docstring (the snapshot
    durable: the blocks it no longer lists are deleted)."""
    acc = account(directory)
    r = replica(acc)
    acc.streams[NAME].stream.store.block_bytes = BLOCK_BYTES
    r.apply([Entry(term=1, index=i + 1, type=EntryType.NORMAL, data=d) for i, d in enumerate(_entries())])
    data = r.snapshot()
    assert data is not None
    r.snapshot_durable(r.applied_index)
    return acc, r, data


_template: tuple[str, bytes] | None = None


def template() -> tuple[str, bytes]:
    """(a directory holding the source replica's block files as of its snapshot, that
    snapshot), made once per process."""
    global _template
    if _template is None:
        root = scratch_root("jetraft-fuzz-replica-")
        acc, r, data = source(os.path.join(root, "source"))
        msgs = acc.replica_msgs_dir(NAME)
        blocks = os.path.join(root, "blocks")
        os.mkdir(blocks)
        for name in os.listdir(msgs):
            if fmt.parse_block_name(name) is not None:
                shutil.copyfile(os.path.join(msgs, name), os.path.join(blocks, name))
        acc.close()
        _template = (blocks, data)
    return _template
