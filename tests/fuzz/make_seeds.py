"""Write the seed inputs of every fuzz target into tests/fuzz/corpus/<target>/seed-<sha1>.

Seeds are valid (and a few typically invalid) inputs: client protocol streams as nats-py
writes them, every route frame kind, RAFT batches, the $JS.API requests of
tests/compat/test_compat_js_bad_input.py (ERROR_CASES), the stream and consumer configs the
compat tests create, pull and DIRECT.GET requests, and the server configuration blocks of
the specification (tests/unit/config/seeds) plus small configurations for each piece of
the syntax; for the store's doors, real stream snapshots (SnapshotWriter, a replica's
StreamReplica.snapshot), forged ones, and catch-up frame scripts. The store targets' crash
reproducers (decode bombs included, zlib-compressed in the targets' zlib modes) are written
to tests/fuzz/crashes/<target>/ too. The output is deterministic; existing files are left
alone.

Usage, from the project root (the test helpers it imports are on PYTHONPATH, as the
Makefile's TEST_HELPERS and pyproject.toml's pytest pythonpath put them)::

    PYTHONPATH=tests:tests/compat:tests/unit/config python tests/fuzz/make_seeds.py [target ...]

(all targets without arguments).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable

from fuzz_support import CORPUS, CRASHES, frame

CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"name":"seed",'
           b'"lang":"python3","version":"2.16.0","protocol":1,"echo":true,"headers":true,'
           b'"no_responders":true}\r\n')
STREAMS = [
    CONNECT + b"PING\r\n",
    CONNECT + b"SUB foo 1\r\nSUB foo.* q 2\r\nSUB foo.> 3\r\nUNSUB 1\r\nUNSUB 2 5\r\nPING\r\n",
    CONNECT + b"PUB foo 5\r\nhello\r\nPUB foo _INBOX.a.b 0\r\n\r\nPING\r\n",
    CONNECT + b"HPUB foo 22 27\r\nNATS/1.0\r\nA: b\r\n\r\n\r\nhello\r\n"
              b"HPUB foo _INBOX.r 12 12\r\nNATS/1.0\r\n\r\n\r\n",
    # what tests/integration/test_fuzz_server.py sends
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
    b"SUB fuzz.* 1\r\nSUB fuzz.> q 2\r\nPUB fuzz.a  5\r\nhello\r\n"
    b"HPUB fuzz.b _INBOX.x 22 27\r\nNATS/1.0\r\nA: b\r\n\r\n\r\nhello\r\n"
    b"PING\r\nUNSUB 1 3\r\nPUB fuzz.c 0\r\n\r\nPONG\r\n",
    b"connect {}\npub foo 3\nabc\r\nping\npong\n+OK\r\nINFO {}\r\n",
    b"PUB\tfoo\t\t2\r\nhi\r\nSUB  a.b   1 \r\nUNSUB 1 0\r\n",
    b'CONNECT {"verbose":true,"pedantic":true}\r\nPUB a.*.b 1\r\nx\r\nPUB a..b 1\r\nx\r\n',
    b"SUB a..b 1\r\nSUB a.>.b 2\r\nSUB > 3\r\n",
    b'CONNECT {"protocol":2}\r\n',
    b'CONNECT {"no_responders":true}\r\n',
    b'CONNECT {"verbose":"yes"}\r\n',
    b"CONNECT not json\r\n",
    b"PUB foo 999999999999\r\n",
    b"PUB foo 2000000\r\n",
    b"HPUB foo 10 5\r\nhello\r\n",
    b"PUB foo 5\r\nhelloXX",
    b"MSG foo 1 1\r\nx\r\n",
    b"-ERR 'bad'\r\n",
    b"SUB " + b"a" * 200 + b" 1\r\n",
    b"\x00\xff\r\n",
    b"PUB foo 3\r\nab",
]


def client_parser_seeds() -> Iterable[bytes]:
    for stream in STREAMS:
        yield frame(stream)
        yield frame(stream, (1, 2, 3), flags=1)
        yield frame(stream, (len(stream) // 2,), flags=4)
    yield frame(STREAMS[2], (20, 0, 7), flags=2)


def route_frames_seeds() -> Iterable[bytes]:
    from jetraft.raft import wire as raft_wire
    from jetraft.protocol import route as rp

    info = rp.RouteInfo(server_name="n1", server_id="NABC", cluster="C1", tags=("az:a", "ssd"),
                        jetstream=True, listen="127.0.0.1:6222", routes=("127.0.0.1:6223",),
                        client_url="127.0.0.1:4222")
    frames = [
        rp.encode_info(info),
        rp.encode_info(rp.RouteInfo(server_name="n2", server_id="NDEF", cluster="")),
        rp.encode_connect("ruser", "s3cret"), rp.encode_connect(None, None),
        rp.encode_err(rp.ERR_AUTH, "bad credentials"), rp.PING, rp.PONG,
        rp.encode_sub("$G", "orders.>"), rp.encode_sub("APP", "work", "workers", 3),
        rp.encode_unsub("$G", "orders.>"), rp.encode_unsub("APP", "work", "workers"),
        rp.encode_msg("$G", "a.b", "_INBOX.x.1", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload", ("q1", "q2")),
        rp.encode_msg("$G", "a.b", None, None, b""),
        rp.encode_msg("$G", "deliver.x", None, None, b"m", (), deliver_as="orders.new"),
        rp.encode_app("raft", raft_wire.encode_batch(list(_raft_messages()))),
        rp.encode_app("jsapi", b"\x93\x01\x02\x03"),
        rp.encode_subs("$G", ["orders.>", "a.b", "c"]), rp.encode_unsubs("APP", ["a.b"]),
    ]
    for f in frames:
        yield frame(f)
    stream = b"".join(frames)
    yield frame(stream)
    yield frame(stream, (3, 40, 1, 200), flags=1)
    yield frame(b"\x00\x00\x00\x00")
    yield frame(b"\xff\xff\xff\xff\x91\x04")
    yield frame(b"\x00\x00\x00\x02\x91\x0a")


def _raft_messages():
    from jetraft.raft.types import ConfigChange, ConfigChangeType, Entry, EntryType, Message, MessageType, Snapshot

    yield Message(MessageType.HEARTBEAT, "meta", "n1", "n2", term=3, commit=7)
    yield Message(MessageType.APPEND, "S-1", "n1", "n2", term=3, log_term=2, index=7, commit=7,
                  entries=(Entry(3, 8, EntryType.NORMAL, b"data"),
                           Entry(3, 9, EntryType.CONFIG_CHANGE, ConfigChange(ConfigChangeType.ADD_PEER, "n4").encode())))
    yield Message(MessageType.APPEND_RESPONSE, "S-1", "n2", "n1", term=3, index=7, reject=True,
                  reject_hint=5, log_term=2)
    yield Message(MessageType.VOTE, "meta", "n3", "n1", term=4, index=9, log_term=3)
    yield Message(MessageType.SNAPSHOT, "meta", "n1", "n3", term=4,
                  snapshot=Snapshot(9, 3, ("n1", "n2", "n3"), b"state"))
    yield Message(MessageType.READ_INDEX, "meta", "n2", "n1", term=4, context=b"ctx")


def raft_wire_seeds() -> Iterable[bytes]:
    from jetraft.raft import wire as raft_wire

    msgs = list(_raft_messages())
    yield raft_wire.encode_batch(msgs)
    for m in msgs:
        yield raft_wire.encode_batch([m])
    yield raft_wire.encode_batch([])


def _api_cases() -> list[tuple[str, bytes]]:
    import test_compat_js_bad_input as bad

    cases = [(subject, body) for _, subject, body, _ in bad.ERROR_CASES]
    cases += [(subject, b"") for subject in bad.SILENT_SUBJECTS]
    cases += [
        ("$JS.API.INFO", b""),
        ("$JS.API.STREAM.CREATE.T", json.dumps(bad.STREAM_CONFIG | {"name": "T", "subjects": ["t.>"]}).encode()),
        ("$JS.API.STREAM.CREATE.W", b'{"name":"W","subjects":["w.*"],"retention":"workqueue","storage":"memory"}'),
        ("$JS.API.STREAM.UPDATE.S", b'{"name":"S","subjects":["s.>"],"storage":"memory","allow_direct":true,"max_msgs":2}'),
        ("$JS.API.STREAM.INFO.S", b'{"subjects_filter":">","deleted_details":true}'),
        ("$JS.API.STREAM.PURGE.S", b'{"filter":"s.a","keep":1}'),
        ("$JS.API.STREAM.PURGE.F", b'{"seq":2}'),
        ("$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.a"}'),
        ("$JS.API.STREAM.MSG.GET.F", b'{"next_by_subj":"f.>","seq":1}'),
        ("$JS.API.STREAM.MSG.DELETE.S", b'{"seq":2,"no_erase":true}'),
        ("$JS.API.STREAM.NAMES", b'{"subject":"s.a","offset":0}'),
        ("$JS.API.STREAM.LIST", b'{"offset":1}'),
        ("$JS.API.STREAM.DELETE.F", b""),
        ("$JS.API.CONSUMER.CREATE.S.D.s.a", b'{"stream_name":"S","config":{"name":"D","filter_subject":"s.a","ack_policy":"explicit"}}'),
        ("$JS.API.CONSUMER.DURABLE.CREATE.F.P", b'{"stream_name":"F","config":{"durable_name":"P","deliver_subject":"push.p","ack_policy":"explicit","idle_heartbeat":1000000000,"flow_control":true}}'),
        ("$JS.API.CONSUMER.CREATE.S", b'{"stream_name":"S","config":{"deliver_policy":"last_per_subject","filter_subjects":["s.a","s.b"]},"action":"create"}'),
        ("$JS.API.CONSUMER.NAMES.S", b'{"offset":0}'),
        ("$JS.API.CONSUMER.LIST.S", b""),
        ("$JS.API.CONSUMER.INFO.S.C", b""),
        ("$JS.API.CONSUMER.DELETE.S.C", b""),
        ("$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":2,"expires":1000000000}'),
        ("$JS.API.DIRECT.GET.S", b'{"seq":1}'),
        ("$JS.API.DIRECT.GET.F.f.x", b""),
        ("$JS.API.STREAM.LEADER.STEPDOWN.S", b""),
    ]
    return cases


_REQUEST_TYPES = {  # subject kind -> index into js_request.REQUESTS
    "STREAM.CREATE": 0, "STREAM.UPDATE": 0, "STREAM.INFO": 1, "STREAM.PURGE": 2, "STREAM.MSG.GET": 3,
    "STREAM.MSG.DELETE": 4, "STREAM.NAMES": 5, "STREAM.LIST": 6, "CONSUMER.NAMES": 7,
    "CONSUMER.LIST": 7, "CONSUMER.CREATE": 8, "CONSUMER.DURABLE": 8,
}


def js_request_seeds() -> Iterable[bytes]:
    for subject, body in _api_cases():
        tokens = subject.split(".")
        kind = ".".join(tokens[2:5]) if tokens[3:4] == ["MSG"] else ".".join(tokens[2:4])
        if kind in _REQUEST_TYPES:
            yield bytes([_REQUEST_TYPES[kind]]) + body


STREAM_CONFIGS = [
    {"name": "S", "subjects": ["s.>"], "max_msg_size": 1000, "storage": "file"},
    {"name": "S", "subjects": ["s.*", "t"], "retention": "workqueue", "storage": "memory", "num_replicas": 1},
    {"name": "S", "subjects": ["s.>"], "retention": "interest", "max_msgs": 100, "max_bytes": 1 << 20,
     "max_age": 3_600_000_000_000, "max_msgs_per_subject": 5, "discard": "new", "discard_new_per_subject": True,
     "duplicate_window": 60_000_000_000, "allow_rollup_hdrs": True, "deny_delete": True, "deny_purge": True},
    {"name": "S", "subjects": ["s.>"], "allow_direct": True, "allow_msg_ttl": True,
     "subject_delete_marker_ttl": 1_000_000_000, "metadata": {"owner": "x"}, "description": "d",
     "compression": "s2", "subject_transform": {"src": "s.>", "dest": "t.>"}},
    {"name": "S", "mirror": {"name": "O", "opt_start_seq": 5}},
    {"name": "S", "subjects": ["s"], "sources": [{"name": "A", "filter_subject": "a.>"}], "sealed": False,
     "placement": {"cluster": "c", "tags": ["az:a"]}, "consumer_limits": {"inactive_threshold": 10, "max_ack_pending": 5},
     "pedantic": True},
]
CONSUMER_CONFIGS = [
    {"durable_name": "C", "ack_policy": "explicit"},
    {"name": "E", "deliver_policy": "by_start_sequence", "opt_start_seq": 2, "ack_policy": "all",
     "ack_wait": 5_000_000_000, "max_deliver": 3, "backoff": [1_000_000_000, 2_000_000_000],
     "filter_subject": "s.a", "replay_policy": "original", "sample_freq": "50%"},
    {"durable_name": "P", "deliver_subject": "push.p", "deliver_group": "q", "ack_policy": "none",
     "flow_control": True, "idle_heartbeat": 1_000_000_000, "headers_only": True, "rate_limit_bps": 1000},
    {"deliver_policy": "by_start_time", "opt_start_time": "2026-01-02T03:04:05.123456789Z",
     "filter_subjects": ["s.a", "s.b.>"], "max_waiting": 10, "max_batch": 5, "max_expires": 1_000_000_000,
     "max_bytes": 1024, "inactive_threshold": 1_000_000_000, "metadata": {"k": "v"}},
    {"name": "G", "priority_groups": ["g1"], "priority_policy": "pinned_client",
     "priority_timeout": 60_000_000_000, "pause_until": "2030-01-01T00:00:00Z", "num_replicas": 0,
     "mem_storage": True},
    {"deliver_policy": "last_per_subject", "ack_policy": "flow_control"},
]


def js_config_seeds() -> Iterable[bytes]:
    for cfg in STREAM_CONFIGS:
        yield b"\x00" + json.dumps(cfg).encode()
        yield b"\x02" + json.dumps(cfg).encode()
    for cfg in CONSUMER_CONFIGS:
        for parent in range(4):
            yield bytes([1 | parent << 2]) + json.dumps(cfg).encode()
    yield b"\x00" + b'{"name":"S","max_age":1.5}'
    yield b"\x01" + b'{"ack_policy":"bogus"}'


def js_pull_request_seeds() -> Iterable[bytes]:
    yield from (b"", b"5", b" 10 ", b"x", b"[1]", b"{bad", b"{}",
                b'{"batch":10,"expires":5000000000}', b'{"batch":1,"no_wait":true}',
                b'{"idle_heartbeat":1000,"expires":5000}', b'{"idle_heartbeat":1000,"expires":1000}',
                b'{"max_bytes":1024,"batch":"x"}', b'{"expires":1.5}', b'{"no_wait":1}',
                b'{"batch":2,"group":"g","id":"x","min_pending":1}')


def js_direct_get_seeds() -> Iterable[bytes]:
    bodies = (b'{"seq":1}', b'{"seq":2,"no_hdrs":true}', b'{"last_by_subj":"s.a"}',
              b'{"next_by_subj":"s.a","seq":2}', b'{"next_by_subj":"f.>"}', b'{"seq":99}',
              b'{"batch":2,"seq":1}', b'{"multi_last":["s.a"]}', b'{"start_time":"2026-01-01T00:00:00Z"}',
              b'{"seq":1,"last_by_subj":"s.a"}', b"", b"{bad", b"[1]", b'{"seq":"1"}')
    for body in bodies:
        yield b"\x00" + body
        yield b"\x01" + body.replace(b"s.a", b"f.x")
    for tail in (b"s.a", b"s.*", b"f.y.z", b"nothing"):
        yield b"\x02" + tail + b"\x00"
        yield b"\x03" + tail.replace(b"s.", b"f.") + b"\x00" + b'{"seq":1}'


def js_api_seeds() -> Iterable[bytes]:
    prefix = "$JS.API."
    for subject, body in _api_cases():
        yield subject[len(prefix):].encode() + b"\x00" + body
    ack = b"@S.C.1.1.1.1800000000000000000.2"
    sequences = [
        [b"CONSUMER.MSG.NEXT.S.C\x00{\"batch\":1}", ack + b"\x00+ACK", b"CONSUMER.INFO.S.C\x00"],
        [b"CONSUMER.MSG.NEXT.S.C\x00{\"batch\":3,\"no_wait\":true}", ack + b"\x00-NAK {\"delay\":1}",
         ack + b"\x00+WPI", ack + b"\x00+TERM reason", b"~"],
        [b"+s.new\x00hello", b"+f.x\x00again", b"+f.x\x00third", b"STREAM.INFO.F\x00"],
        [b"STREAM.CREATE.W\x00{\"name\":\"W\",\"subjects\":[\"w.*\"],\"retention\":\"workqueue\",\"storage\":\"file\"}",
         b"+w.1\x00job", b"CONSUMER.DURABLE.CREATE.W.X\x00{\"stream_name\":\"W\",\"config\":{\"durable_name\":\"X\",\"ack_policy\":\"explicit\"}}",
         b"CONSUMER.MSG.NEXT.W.X\x00", b"@W.X.1.1.1.1800000000000000000.0\x00+ACK"],
        [b"STREAM.PURGE.F\x00{\"filter\":\"f.x\"}", b"STREAM.MSG.DELETE.F\x00{\"seq\":2}",
         b"STREAM.UPDATE.F\x00{\"name\":\"F\",\"subjects\":[\"f.>\",\"g\"],\"storage\":\"file\",\"allow_direct\":true}"],
        [b"STREAM.DELETE.F\x00", b"STREAM.NAMES\x00", b"~"],
    ]
    for seq in sequences:
        yield b"\x00\x00".join(seq)


CONFIGS = [
    "port: 4222\n",
    "listen: 127.0.0.1:4222\nhttp: 8222\nserver_name: $NAME\n",
    "# comment\n// comment\nport = $PORT\nmax_payload: 1MB\nwrite_deadline: \"2s\"\nping_interval: 2m\n",
    "include inc.conf\n",
    "include cycle.conf\n",
    "include bad.conf\n",
    "include sub/leaf.conf\n",
    "include /etc/hostname\n",
    "jetstream {\n  store_dir: \"/tmp/js\"\n  max_memory_store: 1G\n  max_file_store: 10GB\n  unique_tag: \"az:\"\n}\n",
    "cluster {\n  name: C1\n  listen: 0.0.0.0:6222\n  routes = [\n    nats://u:p@127.0.0.2:6222\n    nats-route://127.0.0.3:6222\n  ]\n}\n",
    "accounts {\n  A: { users: [ {user: a, password: $HASH} ], jetstream: enabled }\n  SYS: { users: [{user: s, password: p}] }\n}\nsystem_account: SYS\n",
    "authorization {\n  user: u\n  password: \"p w\"\n  timeout: 1.5\n}\n",
    "server_tags: [\"az:a\", ssd]\nvar = 3\nx: $var\ny: $MAP\nz: $LOOP\nw: $BAD\n",
    "t: 2026-01-02T03:04:05Z\nb: true\nc: off\nf: -1.5e3\nk: 10Ki\nq: 'single'\nm { a { b { c: [1, [2, {d: 3}]] } } }\n",
    "a: \"unterminated\n",
    "a: [1, 2\n",
    "a {\n",
    "a: 99999999999999999999\n",
    "a: 1kbb\n",
    "a: \"\\u00e9\\t\\n\\x\"\n",
    "lame_duck_duration: \"30s\"\nmax_connections: 100\ndebug: true\ntrace: false\nlogtime: true\n",
    "port: 70000\n",
    "port: \"x\"\n",
    "bogus_key: 1\n",
]


def nats_config_seeds() -> Iterable[bytes]:
    from config_seeds import all_seed_blocks

    for block in all_seed_blocks():
        yield block.text.encode()
        yield block.adjusted("/tmp/jetraft-store").encode()
    for text in CONFIGS:
        yield text.encode()


# --- the doors into the store: restores, stream snapshots, catch-up frames ------------------

T0 = 1_800_000_000_000_000_000


def _snapshot_data() -> list[bytes]:
    """Real stream snapshot data (jetstream/snapshot.py SnapshotWriter) of tests/fuzz/
    js_account.py's streams: S (memory; consumer C with a delivery pending, then without
    consumers; then with message 2 deleted) and F (file)."""
    import shutil
    import tempfile

    import js_account
    from jetraft.jetstream.snapshot import SnapshotWriter

    directory = tempfile.mkdtemp(prefix="jetraft-seeds-")
    acc = js_account.new_account(directory)
    try:
        acc.handle_api("$JS.API.CONSUMER.MSG.NEXT.S.C", "_INBOX.n", None, b'{"batch":1}', T0 + 10)
        out = []
        for name, no_consumers, delete in (("S", False, False), ("S", True, False), ("F", False, False),
                                           ("S", False, True)):
            if delete:
                acc.handle_api("$JS.API.STREAM.MSG.DELETE.S", "_INBOX.d", None, b'{"seq":2}', T0 + 20)
            entry = acc.streams[name]
            writer = SnapshotWriter(entry.stream, entry.consumers, no_consumers=no_consumers)
            data = bytearray()
            while chunk := writer.read(1024):
                data += chunk
            out.append(bytes(data))
        return out
    finally:
        js_account.close_account(acc, directory)
        shutil.rmtree(directory, ignore_errors=True)


def _snap_header(first: int, last: int, messages: int = 0, nbytes: int = 0, replica: dict | None = None,
                 **extra) -> bytes:
    import msgpack

    return msgpack.packb({"format": "jetraft-stream-snapshot", "version": 1,
                          "store": [first, last, messages, nbytes],
                          "replica": {} if replica is None else replica, **extra}, use_bin_type=True)


def snapshot_payload(first: int, last: int, records: list, end: dict | None = None, **extra) -> bytes:
    """Snapshot data without its digest: MAGIC, a header, ``records`` (lists or raw msgpack
    bytes), the end record (by default the matching one)."""
    import msgpack

    from jetraft.jetstream.snapshot import MAGIC

    body = [MAGIC, _snap_header(first, last, len(records), **extra)]
    body += [r if isinstance(r, bytes) else msgpack.packb(r, use_bin_type=True) for r in records]
    end = {"end": True, "messages": len(records), "last_seq": last} if end is None else end
    return b"".join(body) + msgpack.packb(end, use_bin_type=True)


def empty_arrays(n: int) -> bytes:
    """msgpack: an array of ``n`` empty arrays (1 byte each on the wire, a list object each
    once decoded)."""
    return b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n


#: Empty arrays in a decode bomb: 12 MB of msgpack, about 1 GB of Python lists.
BOMB_VALUES = 12_000_000


def restore_bomb_payloads() -> dict[str, bytes]:
    """Snapshot data (without the digest) that decodes to ~1 GB: what each holds."""
    import msgpack

    from jetraft.jetstream.snapshot import MAGIC

    end = msgpack.packb({"end": True, "messages": 0, "last_seq": 0}, use_bin_type=True)
    header = _snap_header(1, 0)
    unknown_key = b"\x85" + header[1:] + msgpack.packb("x") + empty_arrays(BOMB_VALUES)
    return {
        "header-unknown-key-12M-empty-arrays": MAGIC + unknown_key + end,
        "record-of-12M-empty-arrays": MAGIC + header + empty_arrays(BOMB_VALUES) + end,
        "after-end-12M-empty-arrays": MAGIC + header + end + empty_arrays(BOMB_VALUES),
    }


def restore_wire(payload: bytes, digest: bool = True) -> bytes:
    """Restore data as a client sends it: ``payload`` and its SHA-256, Snappy-framed."""
    import io

    from jetraft.jetstream.snapshot_frames import FramedReader

    if digest:
        payload += hashlib.sha256(payload).digest()
    return FramedReader(io.BytesIO(payload)).read(1 << 62)


WIRE, PAYLOAD, UNSUMMED, ZLIB, LIMIT = 0, 1, 2, 3, 4     # restore_data options


def restore_data_seeds() -> Iterable[bytes]:
    import zlib

    from jetraft.jetstream.snapshot_frames import S2_IDENTIFIER, STREAM_IDENTIFIER

    for data in _snapshot_data():
        payload = data[:-32]
        yield frame(restore_wire(payload, digest=True))
        yield frame(restore_wire(payload, digest=True), (10, 0, 3, 200), flags=WIRE)
        yield frame(payload, flags=PAYLOAD)
        yield frame(payload, (7, 60), flags=PAYLOAD | LIMIT)
        yield frame(data, flags=UNSUMMED)
        yield frame(zlib.compress(payload, 9), flags=ZLIB)
    hdr = b"NATS/1.0\r\nNats-Msg-Id: a\r\n\r\n"
    forged = [
        snapshot_payload(1, 0, []),                                        # an empty stream
        snapshot_payload(50, 49, []),                                      # emptied at 49
        snapshot_payload(1, 3, [[1, "s.a", None, b"x", T0], [3, "s.b", hdr, b"y", T0 + 1]]),
        snapshot_payload(5, 1000, [[5, "s.*", None, b"", 0], [999, "s.>.x", None, b"z" * 100, T0]]),
        snapshot_payload(1, 2, [[2, "s.a", None, b"x", T0], [1, "s.a", None, b"x", T0]]),  # out of order
        snapshot_payload(1, 2, [[1, "s.a", None, b"x", T0]], end={"end": True, "messages": 2, "last_seq": 2}),
        snapshot_payload(1, 1, [[1, "s.a", None, b"x" * 5000, T0]]),       # over the limit
        snapshot_payload(1, 1, [], version=2),
    ]
    for payload in forged:
        yield frame(payload, flags=PAYLOAD)
        yield frame(payload, flags=PAYLOAD | LIMIT)
    yield frame(S2_IDENTIFIER + b"\x00" * 20)
    yield frame(STREAM_IDENTIFIER)
    yield frame(b"")
    yield frame(restore_wire(forged[2])[:-5])
    yield frame(STREAM_IDENTIFIER + b"\x00\x05\x00\x00\x00\x00\x00\x00\x61")    # a bad CRC


def restore_data_reproducers() -> dict[str, bytes]:
    """Inputs that crashed restore_data before the fixes: name -> input (crashes/<name>)."""
    import zlib

    out = {
        "restore-message-unchecked--subject-with-crlf.bin":
            snapshot_payload(1, 1, [[1, "s.a\r\nMSG forged 1 2", None, b"x", T0]]),
        "restore-message-unchecked--empty-subject.bin": snapshot_payload(1, 1, [[1, "", None, b"x", T0]]),
        "restore-message-unchecked--empty-token.bin": snapshot_payload(1, 1, [[1, "s..a", None, b"x", T0]]),
        "restore-message-unchecked--headers-not-a-header-block.bin":
            snapshot_payload(1, 1, [[1, "s.a", b"HTTP/1.1 200\r\n", b"x", T0]]),
        "restore-seq-overflow--sequence-2-64-1.bin":
            snapshot_payload(1, (1 << 64) - 1, [[(1 << 64) - 1, "s.a", None, b"x", T0]]),
        "restore-seq-overflow--timestamp-2-64-1.bin": snapshot_payload(1, 1, [[1, "s.a", None, b"x", (1 << 64) - 1]]),
        "restore-gap-stall--sequence-gap-2-62.bin":
            snapshot_payload(1, 1 << 62, [[1, "s.a", None, b"x", T0], [1 << 62, "s.a", None, b"x", T0]]),
    }
    out = {name: frame(payload, flags=PAYLOAD) for name, payload in out.items()}
    for what, payload in restore_bomb_payloads().items():
        out[f"restore-decode-bomb--{what}.bin"] = frame(zlib.compress(payload, 9), flags=ZLIB)
    return out


def _replica_snapshot() -> bytes:
    """The snapshot of tests/fuzz/js_replica.py's source replica (the blocks each
    stream_snapshot input starts from)."""
    import shutil
    import tempfile

    import js_replica

    directory = tempfile.mkdtemp(prefix="jetraft-seeds-")
    try:
        acc, _, data = js_replica.source(directory)
        acc.close()
        return data
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def stream_snapshot_seeds() -> Iterable[bytes]:
    import zlib

    import msgpack

    data = _replica_snapshot()
    for flags in (0, 2, 4, 6, 8, 12, 16, 18):
        yield bytes([flags]) + data
    yield b"\x01" + zlib.compress(data, 9)
    snap = msgpack.unpackb(data)
    state, replica = snap["state"], snap["state"]["replica"]

    def variant(**changes) -> bytes:
        return b"\x00" + msgpack.packb({**snap, **changes}, use_bin_type=True)

    yield variant(store=[snap["store"][0], snap["store"][1], snap["store"][2] + 1, snap["store"][3]])
    yield variant(blocks=snap["blocks"][1:])
    yield variant(blocks=[])
    yield variant(blocks=snap["blocks"] + [[10_000, 64]])
    yield variant(state={**state, "config": {**state["config"], "storage": "memory"}})
    yield variant(state={**state, "config": {**state["config"], "max_age": -1}})
    yield variant(state={**state, "replica": {**replica, "consumers": []}})
    yield variant(state={**state, "replica": {**replica, "version": 2}})
    consumer = replica["consumers"][0]
    yield variant(state={**state, "replica": {**replica, "consumers": [
        consumer, {**consumer, "name": "D", "config": {**consumer["config"], "durable_name": "D"}}]}})
    yield variant(state={**state, "replica": {**replica, "consumers": [
        {**consumer, "state": {**consumer["state"], "pending": [[1, 1, T0], [1, 2, T0]]}}]}})
    yield variant(stream="OTHER")
    for bad in (b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"v": 2}),
                msgpack.packb({"v": 1, "stream": "ORDERS", "last_ts": 0, "block_bytes": 100,
                               "blocks": [[5, 20], [2, 20]], "store": [1, 0, 0, 0], "state": {}})):
        yield b"\x00" + bad


def stream_snapshot_reproducers() -> dict[str, bytes]:
    """Inputs that crashed stream_snapshot before the fixes."""
    import zlib

    import msgpack

    data = _replica_snapshot()
    n = len(msgpack.unpackb(data))
    bomb = bytes([0x80 | (n + 1)]) + data[1:] + msgpack.packb("x") + empty_arrays(BOMB_VALUES)
    snap = msgpack.unpackb(data)

    def named(name: str) -> bytes:
        state = {**snap["state"], "config": {**snap["state"]["config"], "name": name}}
        return b"\x00" + msgpack.packb({**snap, "state": state}, use_bin_type=True)

    return {"snapshot-decode-bomb--unknown-key-12M-empty-arrays.bin": b"\x01" + zlib.compress(bomb, 9),
            "snapshot-config-unchecked--config-names-another-stream.bin": named("OTHER"),
            "snapshot-config-unchecked--config-name-with-nul.bin": named("ORD\x00ERS")}


def _record(kind: int, body: bytes, src: int = 0) -> bytes:
    """One catchup_frames record: kind (and src), length, body."""
    return bytes([kind | src << 3]) + len(body).to_bytes(2, "big") + body


CU_GROUP = "S-R3F-fuzz"              # catchup_frames.GROUP
CU_ADOPT, CU_SMALL, CU_ZLIB = 1, 8, 16  # catchup_frames flags
CU_ALL, CU_HALF, CU_ABSENT = 2, 4, 6  # ... what is missing (bits 1-2)


def catchup_frames_seeds() -> Iterable[bytes]:
    import msgpack

    def p(**m) -> bytes:
        return msgpack.packb({"g": CU_GROUP, **m}, use_bin_type=True)

    requests = [p(k="blk", b=1, o=0, n=1000, a=7), p(k="blk", b=1, o=1900, n=1000),
                p(k="blk", b=19, o=16, n=10 * (1 << 20)), p(k="blk", b=10_000, o=0, n=100),
                p(k="blk", b=2, o=0, n=100), p(k="blk", b=1, o=0), p(k="blk", b=1, o=0, n=True),
                p(k="snap"), p(k="hold", a=5), p(k="done"),
                msgpack.packb({"g": "S-R3F-other", "k": "blk", "b": 1, "o": 0, "n": 10}),
                b"\xc1", b"", msgpack.packb([1, 2]), msgpack.packb({"g": 5, "k": "blk"}),
                p(k="rm -rf"), p(k="blk", b=-1, o=0), p(k="blk", b=1, o=True), p(k="blk", b="1", o=0)]
    for src in range(4):
        yield b"\x00" + b"".join(_record(0, r, src) for r in requests[:10])
    yield b"\x00" + b"".join(_record(0, r) for r in requests[10:])
    answers = [p(k="blk", b=1, o=0, s="ok", d=b"x" * 10), p(k="blk", b=1, o=0, s="gone"),
               p(k="snap", s="busy"), b"\xc1", msgpack.packb({"s": "ok"})]
    yield b"\x00" + b"".join(_record(1, a, 1) for a in answers)
    real = _record(3, msgpack.packb({}))
    for flags in (0, CU_ALL, CU_HALF, CU_ABSENT, CU_SMALL, CU_ALL | CU_SMALL, CU_ADOPT, CU_ABSENT | CU_ADOPT):
        yield bytes([flags]) + real
    yield bytes([CU_SMALL]) + _record(4, b"") + _record(5, b"") + real + _record(3, msgpack.packb({"s": "busy"}))
    yield bytes([CU_SMALL]) + _record(3, msgpack.packb({"s": "behind"})) + _record(3, msgpack.packb({"s": "gone"}))
    yield bytes([CU_ALL]) + b"".join(_record(2, a) for a in answers)
    yield b"\x00" + _record(3, msgpack.packb({"d": b"short"})) + _record(3, msgpack.packb({"o": 5}))
    yield b"\x00" + _record(6, requests[0], 1) + _record(7, answers[0], 1) + _record(6, requests[7], 2) + real
    yield bytes([CU_ADOPT]) + real + _record(3, msgpack.packb({"i": 3})) + real
    yield bytes([CU_ADOPT]) + real + _record(3, msgpack.packb({"s": "busy"})) + _record(4, b"") + real
    yield bytes([CU_ADOPT]) + real + _record(3, msgpack.packb({"d": b"\xc1", "l": ["n4"]}))


def catchup_frames_reproducers() -> dict[str, bytes]:
    """Inputs that crash catchup_frames before the fixes: malformed answers a fetching
    replica gets from its peers."""
    import msgpack

    real = _record(3, msgpack.packb({}))
    adopt = {"no-index": None, "index-not-a-number": {"i": "9"}, "peers-not-a-list": {"p": 5},
             "data-not-bytes": {"d": 5}, "peers-not-names": {"p": [1, 2]}, "term-not-a-number": {"t": "x"}}
    out = {}
    for what, patch in adopt.items():
        answer = (_record(2, msgpack.packb({"g": CU_GROUP, "k": "snap", "s": "ok"})) if patch is None
                  else _record(3, msgpack.packb(patch)))
        out[f"catchup-answer-unchecked--snap-{what}.bin"] = bytes([CU_ADOPT]) + real + answer
    out["catchup-answer-unchecked--snap-answer-with-list-offset.bin"] = b"\x00" + _record(
        2, msgpack.packb({"g": CU_GROUP, "k": "snap", "s": "ok", "b": [1], "o": 0}))
    import zlib

    def bomb(**fields) -> bytes:
        head = msgpack.packb({"g": CU_GROUP, **fields}, use_bin_type=True)
        return zlib.compress(bytes([head[0] + 1]) + head[1:] + msgpack.packb("x") + empty_arrays(BOMB_VALUES), 9)

    out["catchup-decode-bomb--request-12M-empty-arrays.bin"] = bytes([CU_ZLIB]) + _record(
        0, bomb(k="blk", b=1, o=0, n=100), 1)
    out["catchup-decode-bomb--data-frame-12M-empty-arrays.bin"] = bytes([CU_ZLIB]) + _record(
        1, bomb(k="blk", b=1, o=0, s="ok"), 1)
    return out


SEEDS = {
    "client_parser": client_parser_seeds,
    "route_frames": route_frames_seeds,
    "raft_wire": raft_wire_seeds,
    "js_request": js_request_seeds,
    "js_config": js_config_seeds,
    "js_pull_request": js_pull_request_seeds,
    "js_direct_get": js_direct_get_seeds,
    "js_api": js_api_seeds,
    "nats_config": nats_config_seeds,
    "restore_data": restore_data_seeds,
    "stream_snapshot": stream_snapshot_seeds,
    "catchup_frames": catchup_frames_seeds,
}

#: target -> the crash reproducers it generates (written to crashes/<target>/ if absent).
REPRODUCERS = {
    "restore_data": restore_data_reproducers,
    "stream_snapshot": stream_snapshot_reproducers,
    "catchup_frames": catchup_frames_reproducers,
}


def write(target: str) -> int:
    """Write ``target``'s seeds; return how many files were new."""
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    new = 0
    for data in SEEDS[target]():
        path = directory / f"seed-{hashlib.sha1(data).hexdigest()}"
        if not path.exists():
            path.write_bytes(data)
            new += 1
    return new


def write_reproducers(target: str) -> int:
    """Write ``target``'s generated crash reproducers; return how many files were new."""
    directory = CRASHES / target
    new = 0
    for name, data in REPRODUCERS.get(target, dict)().items():
        path = directory / name
        if not path.exists():
            directory.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            new += 1
    return new


def main(argv: list[str]) -> int:
    for target in argv or list(SEEDS):
        if target not in SEEDS:
            print(f"unknown target {target!r}; known: {', '.join(SEEDS)}", file=sys.stderr)
            return 2
        print(f"{target}: {write(target)} new seed(s) in {CORPUS / target}")
        if target in REPRODUCERS:
            print(f"{target}: {write_reproducers(target)} new reproducer(s) in {CRASHES / target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
