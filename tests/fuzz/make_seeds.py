"""Write the seed inputs of every fuzz target into tests/fuzz/corpus/<target>/seed-<sha1>.

Seeds are valid (and a few typically invalid) inputs: client protocol streams as nats-py
writes them, every route frame kind, RAFT batches, the $JS.API requests of
tests/compat/test_compat_js_bad_input.py (ERROR_CASES), the stream and consumer configs the
compat tests create, pull and DIRECT.GET requests, and the server configuration blocks of
the specification (tests/unit/config/seeds) plus small configurations for each piece of
the syntax. The output is deterministic; existing files are left alone.

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

from fuzz_support import CORPUS, frame

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


def main(argv: list[str]) -> int:
    for target in argv or list(SEEDS):
        if target not in SEEDS:
            print(f"unknown target {target!r}; known: {', '.join(SEEDS)}", file=sys.stderr)
            return 2
        print(f"{target}: {write(target)} new seed(s) in {CORPUS / target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
