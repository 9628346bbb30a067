"""``jetraft kv edit BUCKET [flags]`` as a user runs it, on jetraft and on nats-server.

The tests taking ``js_server`` run once against each server kind: the edited settings
(history, TTL, description, bucket and value sizes) in the printed info page, in
``kv info`` and in nats-py's KeyValue status, the values already stored kept, every other
stream setting kept, the duplicate window nats.go gives a TTL; a missing bucket and bad
flag values as one ``nats: error:`` line with exit status 1; the settings jetraft refuses
(marker TTL) as the server's one-line error on jetraft and
applied on nats-server; compression, republish and sources applied on both. The JSON test runs both servers in one test and compares them. The
last test edits a three-replica bucket on a three-server jetraft cluster.
"""

from __future__ import annotations

import asyncio
import json
import re

import nats
from cluster import Cluster
from test_admin_cli import Admin, assert_clean_error, field
from servers import js_config
from test_cli_kv_object import TIME, table_rows

#: Settings ``kv edit`` leaves alone when only history, TTL, description and sizes change.
KEPT = ("subjects", "storage", "num_replicas", "retention", "discard", "deny_delete", "deny_purge",
        "allow_rollup_hdrs", "allow_direct", "max_msgs", "max_consumers", "allow_msg_ttl", "compression")


def bucket_status(url: str, bucket: str):
    """nats-py's view of the bucket: ``KeyValue.status()`` (history, ttl, values, stream_info)."""

    async def read():
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            return await (await nc.jetstream().key_value(bucket)).status()
        finally:
            await nc.close()

    return asyncio.run(read())


def stream_config(admin: Admin, stream: str) -> dict:
    """The stream's config as ``stream info --json`` prints it."""
    return json.loads(admin("stream", "info", stream, "--json").stdout)["config"]


def test_kv_edit_changes_settings_and_keeps_values(js_server, tmp_path):
    """history, ttl, description, max bucket/value size change; the page is kv info's; nats-py
    sees the new settings; the stored values and every other setting stay."""
    admin = Admin(js_server.url, tmp_path)
    admin("kv", "add", "CFG", "--storage", "memory")
    admin("kv", "put", "CFG", "mode", "slow")
    admin("kv", "put", "CFG", "mode", "fast")
    admin("kv", "put", "CFG", "notes", "hello")
    before = stream_config(admin, "KV_CFG")
    assert before["max_msgs_per_subject"] == 1

    edited = admin("kv", "edit", "CFG", "--history", "5", "--ttl", "1h", "--description", "app settings",
                   "--max-bucket-size", "1MB", "--max-value-size", "1KB").stdout
    assert re.match(rf"Information for Key-Value Store Bucket CFG created {TIME}\n\nConfiguration:\n", edited), edited
    assert field(edited, "History Kept") == ["5"] and field(edited, "Maximum Age") == ["1h0m0s"]
    assert field(edited, "Description") == ["app settings"]
    assert field(edited, "Maximum Bucket Size") == ["1.0 MiB"] and field(edited, "Maximum Value Size") == ["1.0 KiB"]
    assert field(edited, "Values Stored") == ["2"] and field(edited, "Storage") == ["Memory"]
    assert edited == admin("kv", "info", "CFG").stdout                # the same page as kv info

    status = bucket_status(js_server.url, "CFG")
    assert (status.history, status.ttl, status.values) == (5, 3600.0, 2)
    cfg = status.stream_info.config
    assert (cfg.description, cfg.max_bytes, cfg.max_msg_size) == ("app settings", 1024 * 1024, 1024)

    assert admin("kv", "get", "CFG", "mode", "--raw").stdout == "fast"  # values already stored are kept
    assert admin("kv", "get", "CFG", "notes", "--raw").stdout == "hello"
    admin("kv", "put", "CFG", "mode", "faster")
    admin("kv", "put", "CFG", "mode", "fastest")
    kept = [r[5] for r in table_rows(admin("kv", "history", "CFG", "mode").stdout)[1:]]
    assert kept == ["fast", "faster", "fastest"]                       # the new history is in force
    too_big = admin("kv", "put", "CFG", "big", "x" * 2000, code=1)      # so is the new value size
    assert_clean_error(too_big.stderr, "err_code 10054", "Maximum Value Size")

    after = stream_config(admin, "KV_CFG")
    assert {k: after.get(k) for k in KEPT} == {k: before.get(k) for k in KEPT}
    assert after["duplicate_window"] == before["duplicate_window"] == 120 * 10**9

    shorter = admin("kv", "edit", "CFG", "--ttl", "30s").stdout       # nats.go: duplicate window <= TTL
    assert field(shorter, "Maximum Age") == ["30s"] and field(shorter, "History Kept") == ["5"]
    assert field(shorter, "Description") == ["app settings"]           # flags not given stay as they are
    assert stream_config(admin, "KV_CFG")["duplicate_window"] == 30 * 10**9
    forever = admin("kv", "edit", "CFG", "--ttl", "0", "--max-bucket-size", "-1").stdout
    assert field(forever, "Maximum Age") == ["unlimited"] and field(forever, "Maximum Bucket Size") == ["unlimited"]
    assert bucket_status(js_server.url, "CFG").values == 4


def test_kv_edit_errors_are_one_line(js_server, tmp_path):
    """A missing bucket, a bad name and bad flag values: one 'nats: error:' line, exit 1, nothing
    printed on stdout and nothing changed."""
    admin = Admin(js_server.url, tmp_path)
    admin("kv", "add", "CFG", "--history", "3")

    missing = admin("kv", "edit", "NOPE", "--history", "5", code=1)
    assert_clean_error(missing.stderr, "bucket NOPE not found", "jetraft kv ls", "jetraft kv add NOPE")
    assert missing.stdout == ""
    bad_name = admin("kv", "edit", "BAD.NAME", code=1)
    assert_clean_error(bad_name.stderr, "invalid bucket name 'BAD.NAME'")

    cases = {("--history", "0"): "'--history': 0 is not in the range 1<=x<=64",
             ("--history", "65"): "'--history': 65 is not in the range 1<=x<=64",
             ("--ttl", "5q"): "'--ttl': unknown unit 'q'",
             ("--max-bucket-size", "lots"): "'--max-bucket-size': invalid size 'lots'",
             ("--max-value-size", "3GB"): "'--max-value-size': 3GB is larger than 2147483647 bytes",
             ("--metadata", "novalue"): "'--metadata': 'novalue' is not KEY=VALUE",
             ("--republish-source", "$KV.CFG.>"): "need --republish-destination"}
    for args, needle in cases.items():
        out = admin("kv", "edit", "CFG", *args, code=1)
        assert_clean_error(out.stderr, needle, "try --help")
        assert out.stdout == "", args
    no_bucket = admin("kv", "edit", code=1)
    assert_clean_error(no_bucket.stderr, "Missing argument 'BUCKET'", "try --help")

    script = admin.proc("kv", "edit", "CFG", "--history", "99", code=1)  # the console script alike
    assert_clean_error(script.stderr, "'--history': 99 is not in the range 1<=x<=64")
    assert "Usage:" not in script.stderr
    assert field(admin("kv", "info", "CFG").stdout, "History Kept") == ["3"]


def test_kv_edit_settings_are_applied_and_shown(js_server, tmp_path):
    """Marker TTL, compression, republish and sources are applied by both servers and shown
    on the info page."""
    admin = Admin(js_server.url, tmp_path)
    admin("kv", "add", "CFG")
    admin("kv", "put", "CFG", "k", "v")
    republish = ("--republish-source", "$KV.CFG.>", "--republish-destination", "copy.>", "--republish-headers")
    flags = {"subject_delete_marker_ttl": ("--marker-ttl", "10s")}
    republished = admin("kv", "edit", "CFG", *republish).stdout
    assert field(republished, "Republishing Headers") == ["$KV.CFG.> to copy.>"]
    assert stream_config(admin, "KV_CFG")["republish"] == {"src": "$KV.CFG.>", "dest": "copy.>",
                                                           "headers_only": True}
    shown = admin("kv", "edit", "CFG", "--compress").stdout
    assert field(shown, "Compressed") == ["true"]
    assert stream_config(admin, "KV_CFG")["compression"] == "s2"
    admin("kv", "edit", "CFG", "--source", "OTHER")
    sources = stream_config(admin, "KV_CFG")["sources"]
    assert sources == [{"name": "KV_OTHER", "subject_transforms": [{"src": "$KV.OTHER.>", "dest": "$KV.CFG.>"}]}]
    marked = admin("kv", "edit", "CFG", *flags["subject_delete_marker_ttl"]).stdout
    assert field(marked, "Per-Key TTL Supported") == ["true"] and field(marked, "Limit Marker TTL") == ["10s"]
    assert admin("kv", "get", "CFG", "k", "--raw").stdout == "v"


def test_kv_edit_json_matches_nats_server(start_server, tmp_path):
    """--json prints the bucket's stream info, as kv info --json does: the edited values, and
    the same keys on jetraft as on nats-server."""
    shapes = {}
    for kind in ("jetraft", "nats-server"):
        server = start_server(js_config(tmp_path / f"store-{kind}"), kind=kind)
        admin = Admin(server.url, tmp_path / kind)
        admin("kv", "add", "J")
        admin("kv", "put", "J", "k", "v1")
        edited = json.loads(admin("kv", "edit", "J", "--history", "4", "--ttl", "2h", "--description", "d",
                                  "--metadata", "team=ops", "--json").stdout)
        info = json.loads(admin("kv", "info", "J", "--json").stdout)
        cfg = edited["config"]
        assert (cfg["name"], cfg["max_msgs_per_subject"], cfg["max_age"], cfg["description"]) == ("KV_J", 4, 7200 * 10**9, "d")
        assert cfg["metadata"]["team"] == "ops" and edited["state"]["messages"] == 1
        assert edited["config"] == info["config"] and edited["state"] == info["state"]
        shapes[kind] = {"edit": set(edited), "edit.config": set(cfg), "edit.state": set(edited["state"])}
    for key in ("edit", "edit.config", "edit.state"):
        missing = shapes["nats-server"][key] - shapes["jetraft"][key] - {"ts", "cluster"}
        assert not missing, (key, missing)


def test_kv_edit_on_a_jetraft_cluster(tmp_path):
    """On three jetraft servers, kv edit of a three-replica bucket through one server is seen
    through another, values kept; a replica count change is jetraft's one-line refusal
    (err_code 10061, nats-server's JSStreamReplicasNotUpdatableErr) and changes nothing."""
    c = Cluster("jetraft", tmp_path / "cluster", 3, jetstream=True)
    c.start()
    try:
        c.wait_formed()
        c.wait_meta_leader()
        names = list(c.servers)
        everywhere = Admin(",".join(c.servers[n].url for n in names), tmp_path / "all")
        everywhere("kv", "add", "TRIPLE", "--replicas", "3", "--history", "2")
        everywhere("kv", "put", "TRIPLE", "region", "eu-west")
        everywhere("kv", "put", "TRIPLE", "zone", "a")
        first = Admin(c.servers[names[0]].url, tmp_path / "first")
        edited = first("kv", "edit", "TRIPLE", "--history", "6", "--description", "placement").stdout
        assert field(edited, "Name") == ["C1"] and len(field(edited, "Replica")) == 2
        assert field(edited, "History Kept") == ["6"] and field(edited, "Values Stored") == ["2"]

        third = Admin(c.servers[names[2]].url, tmp_path / "third")
        seen = third("kv", "info", "TRIPLE").stdout
        assert field(seen, "History Kept") == ["6"] and field(seen, "Description") == ["placement"]
        assert third("kv", "get", "TRIPLE", "region", "--raw").stdout == "eu-west"
        assert third("kv", "ls", "TRIPLE").stdout == "region\nzone\n"

        refused = third("kv", "edit", "TRIPLE", "--replicas", "1", "--history", "9", code=1)
        assert_clean_error(refused.stderr, "Replicas configuration can not be updated (err_code 10061)",
                           "add a new bucket with the --replicas wanted")
        config = json.loads(first("kv", "info", "TRIPLE", "--json").stdout)["config"]
        assert (config["num_replicas"], config["max_msgs_per_subject"]) == (3, 6)

        # a placement no server satisfies is nats-server's 10005; one its servers satisfy
        # (their own cluster) is taken; jetraft never stores a placement it does not act on
        nowhere = third("kv", "edit", "TRIPLE", "--tags", "nothere:x", code=1)
        assert "no suitable peers for placement" in nowhere.stderr and "err_code 10005" in nowhere.stderr
        assert "Traceback" not in nowhere.stderr and len(nowhere.stderr.strip().splitlines()) == 1
        first("kv", "edit", "TRIPLE", "--cluster", "C1")
        placement = json.loads(first("kv", "info", "TRIPLE", "--json").stdout)["config"].get("placement")
        assert placement == {"cluster": "C1"}
    finally:
        c.stop()
