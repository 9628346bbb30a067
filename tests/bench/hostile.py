"""Memory before authentication: jetraft-server next to nats-server under the same attacks.

Run from the project root (``make bench`` runs it the same way)::

    PYTHONPATH=tests:tests/compat .venv/bin/python -m tests.bench.hostile [--clients N] [--strangers N]

For each server: its RSS once idle (a client did one round trip), then its peak RSS (VmHWM)
after each attack (a fresh server per attack):
  * ``--clients`` connections to a server requiring authentication each start a 1 MiB PUB
    before CONNECT and push its payload as fast as the server reads;
  * ``--strangers`` connections to the route port each announce a 64 MiB frame and push its
    body for two seconds.
Prints peak/idle per server and the jetraft/nats-server ratio of the peaks.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from servers import KINDS, free_port, start_server
from test_compat_hostile_clients import (
    AUTH,
    idle_rss,
    route_config,
    route_strangers,
    unauthenticated_pubs,
)


def measure(kind: str, workdir: Path, args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """{attack: (idle KiB, peak KiB)} for one kind of server."""
    out = {}
    server = start_server(kind, workdir / "auth", AUTH)
    try:
        idle = idle_rss(server)
        out[f"{args.clients} clients, 1 MiB PUB before CONNECT"] = (idle, unauthenticated_pubs(server, args.clients))
    finally:
        server.stop()
    route_port = free_port()
    server = start_server(kind, workdir / "route", route_config(route_port))
    try:
        idle = idle_rss(server)
        out[f"{args.strangers} route strangers, 64 MiB frames"] = (
            idle, route_strangers(server, route_port, args.strangers))
    finally:
        server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--strangers", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {kind: measure(kind, Path(tmp) / kind, args) for kind in KINDS}
    print(f"{'attack':<42} {'server':<12} {'idle MiB':>9} {'peak MiB':>9} {'peak/idle':>10}")
    for attack in results[KINDS[0]]:
        for kind in KINDS:
            idle, peak = results[kind][attack]
            print(f"{attack:<42} {kind:<12} {idle / 1024:>9.1f} {peak / 1024:>9.1f} {peak / idle:>10.2f}")
        ratio = results["jetraft"][attack][1] / results["nats-server"][attack][1]
        print(f"{'':<42} {'jetraft/nats-server peak':<34} {ratio:>10.2f}")


if __name__ == "__main__":
    main()
