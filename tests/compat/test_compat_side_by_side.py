"""The server under test next to a reference nats-server: same config, same traffic.

What the two report (INFO, /varz, /connz, /subsz, /healthz) is compared field by
field: fields both report must have the same JSON type, and the fields whose values
follow from the configuration and the traffic must have the same value.  Against
nats-server itself this compares two nats-server processes, which shows the
comparison only looks at deterministic values.
"""

from __future__ import annotations

import asyncio
import json

from compat_support import close_all, connect, json_type, round_trip, run, server_info
from polling import apoll

CONFIG = """
max_payload: 65536
max_pending: 1048576
ping_interval: "30s"
ping_max: 3
write_deadline: "5s"
"""

#: Fields whose values must be equal on both servers after the same traffic.
SAME_VALUE = {
    "info": ["proto", "headers", "max_payload", "host", "auth_required", "tls_required", "jetstream"],
    "varz": [
        "proto", "host", "max_payload", "max_control_line", "max_pending", "ping_interval",
        "ping_max", "write_deadline", "auth_timeout", "max_connections", "connections",
        "in_msgs", "out_msgs", "in_bytes", "out_bytes", "slow_consumers",
    ],
    "connz": ["num_connections", "total", "offset", "limit"],
    "connection": [
        "kind", "type", "ip", "pending_bytes", "in_msgs", "out_msgs", "in_bytes", "out_bytes",
        "subscriptions", "name", "lang", "version",
    ],
    "subsz": ["offset", "limit"],
}

#: /varz fields the server under test must have.
REQUIRED_VARZ = [
    "server_id", "server_name", "version", "connections", "in_msgs", "out_msgs", "in_bytes",
    "out_bytes", "subscriptions",
]


async def observe(server) -> dict:
    """Drive the same traffic through ``server`` with nats-py and collect what it reports."""
    pub = await connect(server.url, name="side-pub")
    sub_nc = await connect(server.url, name="side-sub")
    sub = await sub_nc.subscribe("side.>")
    await sub_nc.subscribe("side.q", queue="workers")
    await round_trip(sub_nc)
    for i in range(7):
        await pub.publish("side.q", f"message {i:02d}".encode())
    await pub.publish("side.h", b"with headers", headers={"K": "v"})
    await round_trip(pub, sub_nc)
    assert sub.pending_msgs == 8

    def monitor(path: str):
        return asyncio.to_thread(server.monitor, path)

    async def counted() -> bool:
        varz = await monitor("/varz")
        return varz["in_msgs"] == 8 and varz["out_msgs"] == 15

    await apoll(counted, f"{server.kind} /varz to count 8 messages in, 15 out", 10, retry_on=())
    seen = {
        "info": server_info(pub),
        "varz": await monitor("/varz"),
        "connz": await monitor("/connz"),
        "subsz": await monitor("/subsz"),
        "healthz": server.http_get("/healthz"),
    }
    seen["connections"] = sorted(seen["connz"]["connections"], key=lambda c: c.get("name", ""))
    await close_all(pub, sub_nc)
    return seen


def compare(what: str, ref: dict, sut: dict, same_value: list[str]) -> list[str]:
    """Differences between two JSON objects: types of shared fields, values of listed ones."""
    problems = []
    for key in sorted(ref.keys() & sut.keys()):
        if json_type(ref[key]) != json_type(sut[key]):
            ours, theirs = json_type(sut[key]), json_type(ref[key])
            problems.append(f"{what}.{key}: type {ours}, nats-server has {theirs}")
        elif key in same_value and ref[key] != sut[key]:
            problems.append(f"{what}.{key}: {sut[key]!r}, nats-server has {ref[key]!r}")
    return problems


def test_reports_match_nats_server(start_server):
    """INFO and the monitoring endpoints agree with nats-server's for the same config and traffic."""
    sut = start_server(CONFIG, http=True)
    reference = start_server(CONFIG, http=True, kind="nats-server")
    observed = {}

    async def scenario():
        observed["ref"] = await observe(reference)
        observed["sut"] = await observe(sut)

    run(scenario)
    ref, got = observed["ref"], observed["sut"]
    assert got["healthz"][0] == ref["healthz"][0] == 200
    assert json.loads(got["healthz"][1]) == json.loads(ref["healthz"][1])
    problems = []
    for what in ("info", "varz", "connz", "subsz"):
        problems += compare(what, ref[what], got[what], SAME_VALUE[what])
    assert len(got["connections"]) == len(ref["connections"]) == 2
    for ref_conn, conn in zip(ref["connections"], got["connections"]):
        what = f"connz.connections[{conn.get('name')}]"
        problems += compare(what, ref_conn, conn, SAME_VALUE["connection"])
    problems += [f"varz.{key}: missing" for key in REQUIRED_VARZ if key not in got["varz"]]
    # Addresses are each server's own.
    for server, seen in ((sut, got), (reference, ref)):
        assert (seen["info"]["port"], seen["varz"]["port"]) == (server.port, server.port)
        assert seen["varz"]["http_port"] == server.http_port
    assert not problems, "differences from nats-server:\n" + "\n".join(problems)
