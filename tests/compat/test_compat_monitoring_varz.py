"""/varz key for key beside nats-server (server/monitor.go Varz, JetStreamVarz): the
server under test and a reference nats-server start with the same configuration, and the
keys and JSON types of what both answer are compared, recursively; the values that follow
from the process (memory, CPU), the configuration and the traffic are checked as a user of
``nats server info`` or a scraper would read them. A cluster of each kind lists the other
servers' client URLs in ``connect_urls``.
"""

from __future__ import annotations

import json
import re
import time

import nats
import pytest
from cluster import Cluster
from compat_support import json_type, run

#: nats-server keys that jetraft leaves out on purpose (each omitempty in nats-server):
#: ``git_commit`` names a commit of nats-server's source; jetraft has no server-wide
#: JetStream limits block and none of nats-server's feature flags.
NOT_REPORTED = {"varz.git_commit", "varz.jetstream.limits", "varz.feature_flags.js_ack_fc_v2",
                "varz.feature_flags.js_api_reply_v2", "varz.feature_flags.js_raft_delete_range",
                "varz.feature_flags.js_snapshot_sources"}


def merged(items: list):
    """The elements of a JSON array as one: for objects, every key any of them has (omitempty
    keys differ between elements); otherwise the first element."""
    if not all(isinstance(item, dict) for item in items):
        return items[0]
    out: dict = {}
    for item in items:
        for key, value in item.items():
            out.setdefault(key, value)
    return out


def differences(path: str, ours, theirs, not_reported=NOT_REPORTED) -> list[str]:
    """Where the keys and JSON types of ``ours`` differ from nats-server's ``theirs``,
    recursively (a list by its elements, :func:`merged`); paths in ``not_reported`` may be missing."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        out = [f"{path}.{k}: missing" for k in sorted(theirs.keys() - ours.keys())
               if f"{path}.{k}" not in not_reported]
        out += [f"{path}.{k}: not in nats-server" for k in sorted(ours.keys() - theirs.keys())]
        for k in sorted(ours.keys() & theirs.keys()):
            out += differences(f"{path}.{k}", ours[k], theirs[k], not_reported)
        return out
    if isinstance(theirs, list) and isinstance(ours, list):
        return differences(path + "[]", merged(ours), merged(theirs), not_reported) if ours and theirs else []
    mine, ref = json_type(ours), json_type(theirs)
    return [] if mine == ref else [f"{path}: {mine}, nats-server has {ref}"]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def publish_to_stream(server) -> None:
    async def scenario():
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(5):
            await js.publish(f"s.{i}", b"x" * 100)
        await nc.close()
    run(scenario)


@pytest.fixture
def pair(start_server, tmp_path):
    """(server under test, reference nats-server), each with JetStream, a stream S with
    five messages, and monitoring."""
    config = ('jetstream {{ store_dir: "{}" }}\nserver_tags: ["az:a"]\n'
              'lame_duck_duration: "30s"\n')
    ours = start_server(config.format(tmp_path / "ours"), http=True)
    ref = start_server(config.format(tmp_path / "ref"), http=True, kind="nats-server")
    for server in (ours, ref):
        publish_to_stream(server)
    return ours, ref


def test_varz_has_nats_servers_keys_and_types(pair):
    """Every /varz key nats-server 2.15 reports (JetStream block included) is there with
    the same JSON type, and no key nats-server does not know."""
    ours, ref = pair
    problems = differences("varz", ours.monitor("/varz"), ref.monitor("/varz"))
    assert not problems, "differences from nats-server:\n" + "\n".join(problems)


def test_varz_process_figures_are_the_servers(pair):
    """``mem`` is the server process's resident memory, ``cpu`` a percentage, ``cores`` and
    ``gomaxprocs`` what the process may use."""
    for server in pair:
        varz = server.monitor("/varz")
        rss = rss_bytes(server.proc.pid)
        assert rss / 2 <= varz["mem"] <= rss * 2, (server.kind, varz["mem"], rss)
        assert 0 <= varz["cpu"] <= 100 * varz["cores"], (server.kind, varz["cpu"])
        assert 1 <= varz["gomaxprocs"] <= varz["cores"]


def test_varz_jetstream_block(pair, tmp_path):
    """The ``jetstream`` block carries the store directory, the usage of stream S and the
    JetStream account count, as nats-server's does."""
    seen = []
    for server, store in zip(pair, ("ours", "ref")):
        js = server.monitor("/varz")["jetstream"]
        assert js["config"]["store_dir"].startswith(str(tmp_path / store)), (server.kind, js)
        seen.append(js)
    ours, ref = seen
    for key in ("accounts", "ha_assets", "reserved_memory", "reserved_storage", "memory"):
        assert ours["stats"][key] == ref["stats"][key], key
    assert ours["stats"]["storage"] > 500 and ref["stats"]["storage"] > 500


def test_varz_counts_http_requests_and_client_traffic(pair):
    """``http_req_stats`` counts each endpoint asked, ``in_client_msgs`` the messages
    clients published (five stream publishes and the stream create), ``slow_consumer_stats``
    and ``stale_connection_stats`` split by connection kind."""
    for server in pair:
        server.monitor("/connz")
        server.monitor("/connz")
        varz = server.monitor("/varz")
        assert varz["http_req_stats"]["/connz"] == 2, (server.kind, varz["http_req_stats"])
        assert varz["in_client_msgs"] == varz["in_msgs"] >= 6, server.kind
        assert varz["slow_consumer_stats"] == {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}
        assert varz["stale_connection_stats"]["clients"] == 0
        assert varz["config_digest"].startswith("sha256:")
        assert varz["tags"] == ["az:a"]


def test_varz_version_is_the_info_version(pair):
    """``version`` is the version a client reads in INFO (nats-py picks its consumer API by
    it), a semantic version on both servers (jetraft's with its release as build metadata,
    ``2.12.1+jetraft.0.1.0``)."""
    for server in pair:
        info = {}

        async def scenario():
            nc = await nats.connect(server.url)
            info.update(nc._server_info)  # noqa: SLF001 - INFO as the client received it
            await nc.close()
        run(scenario)
        varz = server.monitor("/varz")
        assert varz["version"] == info["version"], server.kind
        assert re.fullmatch(r"\d+\.\d+\.\d+(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?", varz["version"]) and varz["go"], varz
        if server.kind == "jetraft":
            assert varz["version"].startswith("2.12.1+jetraft."), varz["version"]


def test_varz_without_jetstream_matches(start_server):
    """Without JetStream and without a cluster, /varz has nats-server's keys and types."""
    ours, ref = start_server("", http=True), start_server("", http=True, kind="nats-server")
    problems = differences("varz", ours.monitor("/varz"), ref.monitor("/varz"))
    assert not problems, "differences from nats-server:\n" + "\n".join(problems)


@pytest.mark.parametrize("kind", ["jetraft", "nats-server"])
def test_varz_connect_urls_list_the_other_servers(kind, tmp_path):
    """In a cluster each server's ``connect_urls`` lists the cluster's client URLs, its own
    included (the INFO ``connect_urls`` nats-server gossips), and ``cluster`` names it."""
    with Cluster(kind, tmp_path, 3, jetstream=False).start() as c:
        c.wait_formed()
        for server in c.servers.values():
            expected = sorted(f"127.0.0.1:{s.port}" for s in c.servers.values())
            deadline = time.monotonic() + 10
            while True:
                varz = server.monitor("/varz")
                if sorted(varz.get("connect_urls", [])) == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert sorted(varz.get("connect_urls", [])) == expected, json.dumps(varz.get("connect_urls"))
            assert varz["cluster"]["name"] == "C1"
