"""Hostile JSON on the JetStream API: jetraft-server next to nats-server, one request at a time.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.hostile_json [--rounds N]

For each server (JetStream, default max_payload of 1 MiB) it sends each body below to its
API subject, ``--rounds`` times (default 5), and reports the best time from publishing the
request to reading its answer (every one of these bodies is refused, except the ordinary
request), then the ratio jetraft / nats-server. While a request is being decoded the
server's event loop serves nobody else, so this is also how long one such request holds
every other client. Absolute numbers on a shared machine are noise; the ratio of the same
run is the result. Not run by CI; asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from compat_support import RawClient
from servers import KINDS, start_server

MIB = 1 << 20
BODY = MIB - 64      # under max_payload with the request's own bytes
CREATE = "$JS.API.STREAM.CREATE.X"

#: (name, subject, body)
BODIES = [
    ("small STREAM.CREATE (refused: max_msgs 1e999)", CREATE, b'{"name":"X","subjects":["x"],"max_msgs":1e999}'),
    ("1 MiB of '[' (nesting past 10,000)", CREATE, b"[" * BODY),
    ("1 MiB of '{\"a\":' (nesting past 10,000)", CREATE, b'{"a":' * (BODY // 5)),
    ("1 MiB of '[],' at depth 999", CREATE,
     b"[" * 999 + b"[]," * ((BODY - 2100) // 3) + b"[]" + b"]" * 999),
    ("1 MiB of '{}' (512 Ki concatenated values)", CREATE, b"{}" * (BODY // 2)),
    ("1 MiB array of small integers", "$JS.API.STREAM.NAMES", b"[" + b"1," * (BODY // 2 - 1) + b"1]"),
    ("1 MiB array of 20-digit integers", "$JS.API.STREAM.NAMES",
     b"[" + b"99999999999999999999," * (BODY // 21 - 1) + b"1]"),
    ("1 MiB of strings holding brackets", CREATE, b"[" + b'"[[[[{{{{",' * (BODY // 12) + b'""]'),
    ("DIRECT.GET, 1 MiB of '['", "$JS.API.DIRECT.GET.KV", b"[" * BODY),
    ("pull request, 1 MiB of '{\"a\":'", "$JS.API.CONSUMER.MSG.NEXT.KV.c", b'{"a":' * (BODY // 5)),
]


def measure(kind: str, workdir: Path, rounds: int) -> dict[str, float]:
    """{body name: best seconds from request to answer} for one kind of server."""
    server = start_server(kind, workdir, f'jetstream {{ store_dir: "{workdir / "store"}" }}')
    out: dict[str, float] = {}
    try:
        with RawClient(server.address, timeout=60) as c:
            c.connect(headers=True)
            c.send(b"SUB _INBOX.bench 1\r\n")
            setup = [("$JS.API.STREAM.CREATE.KV", b'{"name":"KV","subjects":["kv.>"],"allow_direct":true}'),
                     ("kv.a", b"hi"),
                     ("$JS.API.CONSUMER.DURABLE.CREATE.KV.c",
                      b'{"stream_name":"KV","config":{"durable_name":"c","ack_policy":"explicit"}}')]
            for subject, body in setup:
                c.send(b"PUB %s _INBOX.bench %d\r\n%s\r\n" % (subject.encode(), len(body), body))
                c.read_msg()
            for name, subject, body in BODIES:
                best = float("inf")
                for _ in range(rounds):
                    start = time.perf_counter()
                    c.send(b"PUB %s _INBOX.bench %d\r\n%s\r\n" % (subject.encode(), len(body), body))
                    c.read_msg()
                    best = min(best, time.perf_counter() - start)
                out[name] = best
    finally:
        server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-hostile-json-") as tmp:
        for kind in KINDS:
            results[kind] = measure(kind, Path(tmp) / kind, args.rounds)
    print(f"| body | jetraft ms | nats-server ms | ratio |\n|---|---:|---:|---:|")
    for name, _subject, _body in BODIES:
        ours, theirs = results["jetraft"][name], results["nats-server"][name]
        print(f"| {name} | {ours * 1000:.1f} | {theirs * 1000:.1f} | {ours / theirs:.1f} |")


if __name__ == "__main__":
    main()
