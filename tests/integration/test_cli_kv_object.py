"""``jetraft kv`` and ``jetraft object`` as a user runs them, on jetraft and on nats-server.

Each test of the first part runs against one server of each kind (the ``js_server``
fixture): the Key-Value commands (add, put, get, history, ls, info, del, create, update,
purge, revert, compact,
watch) and the Object store commands (add, put, get, ls, info, rm), their text layouts
(natscli's), the one-line errors of a missing bucket, key or object, a deleted key or
object, a bad name and a missing confirmation, and a multi-chunk object read back byte for
byte. The JSON tests run both servers in one test and compare the keys scripts read. The
last test adds a three-replica bucket on a three-server jetraft cluster.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time

import nats
from click.testing import CliRunner
from cluster import Cluster
from polling import poll
from test_admin_cli import BIN, Admin, assert_clean_error, field
from servers import js_config

from jetraft.cli.admin import cli
from jetraft.cli.admin.groups import GLOBAL_FLAGS, GLOBAL_VALUED, hoist_global_options

#: A local time as natscli prints one: ``2026-11-26 15:02:03``.
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def feed(admin: Admin, data: bytes, *args: str, code: int = 0):
    """Run ``jetraft ARGS`` in-process with ``data`` on standard input."""
    argv = hoist_global_options(["-s", admin.url, "--timeout", "5", *args], GLOBAL_VALUED, GLOBAL_FLAGS)
    result = CliRunner().invoke(cli, argv, input=data, env=admin.changes, catch_exceptions=False)
    assert result.exit_code == code, (args, result.exit_code, result.stdout, result.stderr)
    return result


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of a rich table (header row included)."""
    return [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines()
            if line.startswith("│")]


# --------------------------------------------------------------------------- kv


def test_kv_add_put_get_history_ls_info(js_server, tmp_path):
    """kv add with its limits shows them in natscli's info page; put, put from stdin, get
    (text, --raw, --revision), history, ls of buckets and of keys."""
    admin = Admin(js_server.url, tmp_path)
    added = admin("kv", "add", "CFG", "--history", "5", "--ttl", "1h", "--max-value-size", "1KB",
                  "--max-bucket-size", "1MB", "--description", "app settings", "--storage", "memory").stdout
    assert re.match(rf"Information for Key-Value Store Bucket CFG created {TIME}\n\nConfiguration:\n", added), added
    assert field(added, "Bucket Name") == ["CFG"] and field(added, "History Kept") == ["5"]
    assert field(added, "Maximum Value Size") == ["1.0 KiB"] and field(added, "Maximum Bucket Size") == ["1.0 MiB"]
    assert field(added, "Maximum Age") == ["1h0m0s"] and field(added, "Description") == ["app settings"]
    assert field(added, "JetStream Stream") == ["KV_CFG"] and field(added, "Storage") == ["Memory"]
    assert field(added, "Values Stored") == ["0"]

    assert admin("kv", "put", "CFG", "mode", "slow").stdout == "slow\n"
    assert admin("kv", "put", "CFG", "mode", "fast").stdout == "fast\n"
    feed(admin, b"line one\nline two", "kv", "put", "CFG", "notes/today")
    binary = bytes(range(256))
    feed(admin, binary, "kv", "put", "CFG", "blob")

    got = admin("kv", "get", "CFG", "mode").stdout
    assert re.fullmatch(rf"CFG > mode revision: 2 created @ {TIME}\n\nfast\n\n", got), got
    assert admin("kv", "get", "CFG", "mode", "--revision", "1").stdout.startswith("CFG > mode revision: 1 ")
    assert admin("kv", "get", "CFG", "notes/today", "--raw").stdout == "line one\nline two"
    assert admin("kv", "get", "CFG", "blob", "--raw").stdout_bytes == binary
    shown = admin("kv", "get", "CFG", "blob").stdout
    assert "Showing first 120 bytes of 344, use --raw for full data" in shown     # base64 of 256 bytes
    too_long = admin("kv", "put", "CFG", "big", "x" * 2000, code=1)             # over --max-value-size
    assert_clean_error(too_long.stderr, "err_code 10054", "Maximum Value Size", "jetraft kv info CFG")
    other = admin("kv", "add", "CFG", "--history", "7", code=1)
    assert_clean_error(other.stderr, "err_code 10058", "bucket CFG already exists with other settings")

    history = admin("kv", "history", "CFG", "mode").stdout
    assert history.startswith("History for CFG > mode\n")
    rows = table_rows(history)
    assert rows[0] == ["Key", "Revision", "Op", "Created", "Length", "Value"]
    assert [(r[0], r[1], r[2], r[4], r[5]) for r in rows[1:]] == [("mode", "1", "PUT", "4", "slow"),
                                                                  ("mode", "2", "PUT", "4", "fast")]

    assert admin("kv", "ls", "CFG").stdout == "blob\nmode\nnotes/today\n"
    admin("kv", "add", "EMPTY")
    assert admin("kv", "ls", "EMPTY").stdout == "No keys found in bucket\n"
    buckets = admin("kv", "ls").stdout
    assert buckets.startswith("Key-Value Buckets\n")
    rows = table_rows(buckets)
    assert rows[0] == ["Bucket", "Description", "Created", "Size", "Values", "Last Update"]
    assert [(r[0], r[1], r[4]) for r in rows[1:]] == [("EMPTY", "", "0"), ("CFG", "app settings", "4")]
    assert admin("kv", "ls", "-n").stdout.splitlines() == ["EMPTY", "CFG"]
    admin("stream", "add", "PLAIN", "--subjects", "plain.>")                    # not a bucket: not listed
    assert "PLAIN" not in admin("kv", "ls").stdout

    info = admin("kv", "info", "CFG").stdout
    assert field(info, "Values Stored") == ["4"] and "Cluster Information:" in info
    assert field(admin("kv", "status", "CFG").stdout, "Values Stored") == ["4"]          # natscli's alias


def test_kv_ls_and_history_read_every_key_and_leave_no_consumer(js_server, tmp_path):
    """kv ls lists all of 300 keys (more than one fetch) and none deleted; kv history right
    after a put lists it (nats-py's watcher can answer "no keys" then, which kv history
    must not); neither leaves a consumer on the bucket's stream."""
    async def fill() -> None:
        nc = await nats.connect(js_server.url)
        try:
            kv = await nc.jetstream().create_key_value(bucket="MANY", history=5)
            for n in range(300):
                await kv.put(f"k{n:03}", b"v")
            await kv.delete("k000")
        finally:
            await nc.close()

    asyncio.run(fill())
    admin = Admin(js_server.url, tmp_path)
    assert admin("kv", "ls", "MANY").stdout.splitlines() == [f"k{n:03}" for n in range(1, 300)]
    for n in range(10):
        admin("kv", "put", "MANY", f"fresh{n}", "x")
        rows = table_rows(admin("kv", "history", "MANY", f"fresh{n}").stdout)[1:]
        assert [(r[0], r[2], r[5]) for r in rows] == [(f"fresh{n}", "PUT", "x")]
    assert json.loads(admin("consumer", "ls", "KV_MANY", "--json").stdout) in ([], None)


def test_kv_del_create_update(js_server, tmp_path):
    """kv del KEY leaves a DELETE in the history; create refuses an existing key but
    recreates a deleted one; update needs the latest revision; kv del BUCKET -f removes it."""
    admin = Admin(js_server.url, tmp_path)
    admin("kv", "add", "CFG", "--history", "10")
    admin("kv", "put", "CFG", "a", "1")
    assert admin("kv", "del", "CFG", "a", "-f").stdout == ""
    ops = [r[2] for r in table_rows(admin("kv", "history", "CFG", "a").stdout)[1:]]
    assert ops == ["PUT", "DELETE"]
    assert admin("kv", "create", "CFG", "a", "again").stdout == "again\n"
    exists = admin("kv", "create", "CFG", "a", "third", code=1)
    assert_clean_error(exists.stderr, "key a already exists in bucket CFG", "jetraft kv put")
    stale = admin("kv", "update", "CFG", "a", "x", "1", code=1)
    assert_clean_error(stale.stderr, "revision 1 is not the latest revision of CFG > a", "jetraft kv get CFG a")
    latest = re.match(r"CFG > a revision: (\d+) ", admin("kv", "get", "CFG", "a").stdout).group(1)
    assert admin("kv", "update", "CFG", "a", "newer", latest).stdout == "newer\n"
    assert admin("kv", "get", "CFG", "a", "--raw").stdout == "newer"

    assert admin("kv", "rm", "CFG", "-f").stdout == ""                          # natscli's alias of del
    assert admin("kv", "ls", "-n").stdout == ""
    assert admin("kv", "ls").stdout == "No Key-Value buckets found\n"


def test_kv_errors_are_one_line_saying_what_to_do(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    admin("kv", "add", "CFG")
    admin("kv", "put", "CFG", "gone", "soon")
    admin("kv", "del", "CFG", "gone", "-f")

    for args in (("kv", "get", "NOPE", "k"), ("kv", "put", "NOPE", "k", "v"), ("kv", "info", "NOPE"),
                 ("kv", "ls", "NOPE"), ("kv", "del", "NOPE", "-f"), ("kv", "history", "NOPE", "k"),
                 ("kv", "watch", "NOPE")):
        out = admin(*args, code=1)
        assert_clean_error(out.stderr, "bucket NOPE not found", "jetraft kv ls", "jetraft kv add NOPE")
        assert out.stdout == ""
    missing = admin("kv", "get", "CFG", "never", code=1)
    assert_clean_error(missing.stderr, "key never not found in bucket CFG", "jetraft kv ls CFG")
    assert_clean_error(admin("kv", "history", "CFG", "never", code=1).stderr, "key never not found")
    deleted = admin("kv", "get", "CFG", "gone", code=1)
    assert_clean_error(deleted.stderr, "key gone in bucket CFG was deleted at revision 2",
                       "jetraft kv put CFG gone", "jetraft kv history CFG gone")
    bad_bucket = admin("kv", "add", "BAD.NAME", code=1)
    assert_clean_error(bad_bucket.stderr, "invalid bucket name 'BAD.NAME'", "letters, digits, '-' and '_'")
    bad_key = admin("kv", "put", "CFG", "bad key", "v", code=1)
    assert_clean_error(bad_key.stderr, "invalid key 'bad key'", "cannot start or end with '.'")
    assert_clean_error(admin("kv", "get", "CFG", ".dot", code=1).stderr, "invalid key '.dot'")

    admin("kv", "put", "CFG", "kept", "yes")
    no_key_confirm = admin("kv", "del", "CFG", "kept", code=1)
    assert_clean_error(no_key_confirm.stderr, "not confirmed", "-f")
    no_bucket_confirm = admin("kv", "del", "CFG", code=1)
    assert_clean_error(no_bucket_confirm.stderr, "not confirmed", "-f")
    assert admin("kv", "get", "CFG", "kept", "--raw").stdout == "yes"       # nothing was deleted


def test_kv_watch_prints_updates_until_ctrl_c(js_server, tmp_path):
    """kv watch (a subprocess) prints the current values, then each PUT and DELETE in
    natscli's line format; Ctrl-C ends it with status 0."""
    admin = Admin(js_server.url, tmp_path)
    admin("kv", "add", "W", "--history", "5")
    admin("kv", "put", "W", "k1", "first")
    watch = subprocess.Popen([str(BIN), "kv", "watch", "W", "-s", js_server.url], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=admin.env)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in watch.stdout], daemon=True)
    reader.start()
    seen: list[str] = []

    def wait_for(pattern: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not any(re.fullmatch(pattern, line) for line in seen):
            remaining = deadline - time.monotonic()
            try:
                assert remaining > 0
                seen.append(lines.get(timeout=remaining).rstrip("\n"))
            except (AssertionError, queue.Empty):
                raise AssertionError(f"no line {pattern!r} within {timeout}s; got {seen}, "
                                     f"exit {watch.poll()}") from None

    try:
        wait_for(rf"\[{TIME}\] PUT W > k1: first")      # the value stored before the watch
        admin("kv", "put", "W", "k2", "second")
        wait_for(rf"\[{TIME}\] PUT W > k2: second")
        admin("kv", "del", "W", "k1", "-f")
        wait_for(rf"\[{TIME}\] DELETE W > k1")
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=15)
    finally:
        watch.kill()
    reader.join(timeout=5)
    assert watch.returncode == 0, err
    assert "Traceback" not in err and "error" not in err, err
    assert len(seen) == 3, seen


def test_kv_json_keys_match_nats_server(start_server, tmp_path):
    """--json of kv add, info, get, history, put and ls: the same keys on jetraft as on nats-server."""
    shapes = {}
    for kind in ("jetraft", "nats-server"):
        server = start_server(js_config(tmp_path / f"store-{kind}"), kind=kind)
        admin = Admin(server.url, tmp_path / kind)
        added = json.loads(admin("kv", "add", "J", "--history", "3", "--json").stdout)
        put = json.loads(admin("kv", "put", "J", "k", "v1", "--json").stdout)
        admin("kv", "put", "J", "k", "v2")
        got = json.loads(admin("kv", "get", "J", "k", "--json").stdout)
        history = json.loads(admin("kv", "history", "J", "k", "--json").stdout)
        info = json.loads(admin("kv", "info", "J", "--json").stdout)
        listed = json.loads(admin("kv", "ls", "--json").stdout)
        assert added["config"]["name"] == "KV_J" and added["config"]["max_msgs_per_subject"] == 3
        assert put == {"bucket": "J", "key": "k", "revision": 1}
        assert got["value"] == "v2" and got["revision"] == 2 and got["operation"] == "PUT" and got["created"]
        assert [h["value"] for h in history] == ["v1", "v2"]
        assert info["state"]["messages"] == 2
        assert json.loads(admin("kv", "ls", "J", "--json").stdout) == ["k"]
        assert [s["config"]["name"] for s in listed] == ["KV_J"]
        shapes[kind] = {"info": set(info), "info.config": set(info["config"]), "info.state": set(info["state"]),
                        "get": set(got), "history": set(history[0]), "ls": set(listed[0])}
    for key in ("get", "history"):
        assert shapes["jetraft"][key] == shapes["nats-server"][key], key
    for key in ("info", "info.config", "info.state", "ls"):
        missing = shapes["nats-server"][key] - shapes["jetraft"][key] - {"ts", "cluster"}
        assert not missing, (key, missing)


# --------------------------------------------------------------------------- object


def test_object_put_get_a_multi_chunk_file_byte_for_byte(js_server, tmp_path):
    """A 3 MB file (24 chunks of 128 KiB) goes in with put and comes back identical with get;
    get refuses to replace a file without -f; put asks before replacing an object."""
    admin = Admin(js_server.url, tmp_path)
    added = admin("object", "add", "FILES", "--description", "backups", "--ttl", "1d",
                  "--max-bucket-size", "64MB").stdout
    assert re.match(rf"Information for Object Store Bucket FILES created {TIME}\n", added), added
    assert field(added, "Description") == ["backups"] and field(added, "TTL") == ["24h0m0s"]
    assert field(added, "Maximum Bucket Size") == ["64 MiB"] and field(added, "Sealed") == ["false"]
    assert field(added, "JetStream Stream") == ["OBJ_FILES"] and field(added, "Replicas") == ["1"]

    source = tmp_path / "backup.tar"
    data = os.urandom(3 * 1024 * 1024 + 17)
    source.write_bytes(data)
    put = admin("object", "put", "FILES", str(source), "--name", "nightly/backup.tar").stdout
    assert put.startswith("Object information for FILES > nightly/backup.tar\n"), put
    assert field(put, "Size") == ["3.0 MiB"] and field(put, "Chunks") == ["25"]
    assert field(put, "Digest") == [f"SHA-256 {hashlib.sha256(data).hexdigest()}"]

    listing = admin("object", "ls", "FILES").stdout
    assert listing.startswith("Bucket Contents\n")
    assert [(r[0], r[1]) for r in table_rows(listing)] == [("Name", "Size"), ("nightly/backup.tar", "3.0 MiB")]
    info = admin("object", "info", "FILES", "nightly/backup.tar").stdout
    assert field(info, "Chunks") == ["25"] and field(info, "Size") == ["3.0 MiB"]

    target = tmp_path / "restored.tar"
    wrote = admin("object", "get", "FILES", "nightly/backup.tar", "--output", str(target)).stdout
    assert re.fullmatch(rf"Wrote: 3\.0 MiB to {re.escape(str(target))} in \S+\n", wrote), wrote
    assert target.read_bytes() == data

    target.write_bytes(b"precious")
    refused = admin("object", "get", "FILES", "nightly/backup.tar", "-O", str(target), code=1)
    assert_clean_error(refused.stderr, f"{target} exists", "-f")
    assert target.read_bytes() == b"precious"
    admin("object", "get", "FILES", "nightly/backup.tar", "-O", str(target), "-f")
    assert target.read_bytes() == data
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".restored")) == []

    replace = admin("object", "put", "FILES", str(source), "--name", "nightly/backup.tar", code=1)
    assert_clean_error(replace.stderr, "object FILES > nightly/backup.tar exists", "-f", "--name")
    nowhere = admin("object", "get", "FILES", "nightly/backup.tar", "-O", str(tmp_path / "no" / "dir.tar"), code=1)
    assert_clean_error(nowhere.stderr, f"cannot write in {tmp_path / 'no'}", "--output")
    small = tmp_path / "small.txt"
    small.write_bytes(b"hello")
    admin("object", "put", "FILES", str(small), "--name", "nightly/backup.tar", "-f")
    admin("object", "get", "FILES", "nightly/backup.tar", "-O", str(target), "-f")
    assert target.read_bytes() == b"hello"

    buckets = admin("object", "ls").stdout
    assert buckets.startswith("Object Store Buckets\n")
    assert [(r[0], r[1]) for r in table_rows(buckets)] == [("Bucket", "Description"), ("FILES", "backups")]
    assert admin("object", "ls", "-n").stdout == "FILES\n"
    assert admin("obj", "ls", "-n").stdout == "FILES\n"                           # natscli's alias


def test_object_put_from_stdin_and_default_names(js_server, tmp_path, monkeypatch):
    """put without FILE reads standard input (--name required); get without --output writes
    the name's last part in the current directory."""
    admin = Admin(js_server.url, tmp_path)
    admin("object", "add", "DOCS")
    feed(admin, b"from a pipe", "object", "put", "DOCS", "--name", "notes/readme.txt")
    unnamed = feed(admin, b"x", "object", "put", "DOCS", code=1)
    assert_clean_error(unnamed.stderr, "--name is required", "try --help")
    monkeypatch.chdir(tmp_path)
    admin("object", "get", "DOCS", "notes/readme.txt")
    assert (tmp_path / "readme.txt").read_bytes() == b"from a pipe"


def test_object_rm_and_errors(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    admin("object", "add", "FILES")
    source = tmp_path / "a.txt"
    source.write_bytes(b"aaa")
    admin("object", "put", "FILES", str(source), "--name", "a.txt")

    for args in (("object", "info", "NOPE"), ("object", "ls", "NOPE"), ("object", "get", "NOPE", "a.txt"),
                 ("object", "put", "NOPE", str(source)), ("object", "rm", "NOPE", "-f")):
        out = admin(*args, code=1)
        assert_clean_error(out.stderr, "object store bucket NOPE not found", "jetraft object ls",
                           "jetraft object add NOPE")
    missing = admin("object", "get", "FILES", "b.txt", code=1)
    assert_clean_error(missing.stderr, "object b.txt not found in bucket FILES", "jetraft object ls FILES")
    assert_clean_error(admin("object", "info", "FILES", "b.txt", code=1).stderr, "object b.txt not found")
    bad = admin("object", "add", "no/slash", code=1)
    assert_clean_error(bad.stderr, "invalid bucket name 'no/slash'")

    refused = admin("object", "rm", "FILES", "a.txt", code=1)
    assert_clean_error(refused.stderr, "not confirmed", "-f")
    removed = admin("object", "rm", "FILES", "a.txt", "-f").stdout
    assert removed.startswith("Removed FILES > a.txt\nInformation for Object Store Bucket FILES created ")
    deleted = admin("object", "get", "FILES", "a.txt", code=1)
    assert_clean_error(deleted.stderr, "object a.txt in bucket FILES was deleted")
    assert admin("object", "ls", "FILES").stdout == "No entries found\n"

    admin("object", "add", "TINY", "--max-bucket-size", "100KB")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(300_000))
    full = admin("object", "put", "TINY", str(big), "--name", "big.bin", code=1)
    assert_clean_error(full.stderr, "err_code 10077", "bucket TINY is full")
    assert admin("object", "ls", "TINY").stdout == "No entries found\n"

    assert_clean_error(admin("object", "rm", "FILES", code=1).stderr, "not confirmed", "-f")
    admin("object", "del", "FILES", "-f")                                        # natscli's alias of rm
    admin("object", "rm", "TINY", "-f")
    assert admin("object", "ls").stdout == "No Object Store buckets found\n"


def test_object_json_keys_match_nats_server(start_server, tmp_path):
    """--json of object add, info (bucket and object), put and ls: the same keys on both servers."""
    shapes = {}
    source = tmp_path / "f.bin"
    source.write_bytes(os.urandom(300_000))
    for kind in ("jetraft", "nats-server"):
        server = start_server(js_config(tmp_path / f"store-{kind}"), kind=kind)
        admin = Admin(server.url, tmp_path / kind)
        added = json.loads(admin("object", "add", "O", "--json").stdout)
        put = json.loads(admin("object", "put", "O", str(source), "--name", "f.bin", "--json").stdout)
        info = json.loads(admin("object", "info", "O", "f.bin", "--json").stdout)
        bucket = json.loads(admin("object", "info", "O", "--json").stdout)
        listed = json.loads(admin("object", "ls", "O", "--json").stdout)
        assert added["config"]["name"] == "OBJ_O" and put["size"] == 300_000 and put["chunks"] == 3
        assert info["digest"] == put["digest"] and [o["name"] for o in listed] == ["f.bin"]
        shapes[kind] = {"put": set(put), "info": set(info), "bucket": set(bucket),
                        "bucket.config": set(bucket["config"]), "ls": set(listed[0])}
    for key in ("put", "info", "ls"):
        assert shapes["jetraft"][key] == shapes["nats-server"][key], key
    for key in ("bucket", "bucket.config"):
        missing = shapes["nats-server"][key] - shapes["jetraft"][key] - {"ts", "cluster"}
        assert not missing, (key, missing)


# --------------------------------------------------------------------------- a jetraft cluster


def test_kv_with_three_replicas_on_a_jetraft_cluster(tmp_path):
    """kv add --replicas 3 on three jetraft servers: the bucket's group has a leader and two
    current replicas; put through one server, get through another."""
    c = Cluster("jetraft", tmp_path / "cluster", 3, jetstream=True)
    c.start()
    try:
        c.wait_formed()
        c.wait_meta_leader()
        names = list(c.servers)
        everywhere = Admin(",".join(c.servers[n].url for n in names), tmp_path / "all")
        added = everywhere("kv", "add", "TRIPLE", "--replicas", "3", "--history", "2").stdout
        assert field(added, "Name") == ["C1"]
        (leader,) = field(added, "Leader")
        assert leader in c.servers
        assert len(field(added, "Replica")) == 2
        info = json.loads(everywhere("kv", "info", "TRIPLE", "--json").stdout)
        assert info["config"]["num_replicas"] == 3

        Admin(c.servers[names[0]].url, tmp_path / "first")("kv", "put", "TRIPLE", "region", "eu-west")
        other = Admin(c.servers[names[2]].url, tmp_path / "third")
        got = other("kv", "get", "TRIPLE", "region").stdout
        assert re.fullmatch(rf"TRIPLE > region revision: 1 created @ {TIME}\n\neu-west\n\n", got), got
        assert other("kv", "ls", "TRIPLE").stdout == "region\n"
    finally:
        c.stop()


def test_kv_purge_revert_compact(js_server, tmp_path):
    """kv revert puts an earlier value back as a new revision; a delete marker is no value to
    revert to; kv purge leaves one purge marker of a key's history; kv compact drops the
    earlier values of deleted keys, keeping their (young) markers."""
    admin = Admin(js_server.url, tmp_path)
    admin("kv", "add", "REV", "--history", "10")
    for value in ("one", "two", "three"):
        admin("kv", "put", "REV", "k", value)
    assert admin("kv", "revert", "REV", "k", "1", "-f").stdout == "REV > k revision 4: the value of revision 1\n"
    assert admin("kv", "get", "REV", "k", "--raw").stdout == "one"
    refused = admin("kv", "revert", "REV", "k", "2", code=1)
    assert_clean_error(refused.stderr, "not confirmed", "-f")
    assert admin("kv", "get", "REV", "k", "--raw").stdout == "one"

    admin("kv", "del", "REV", "k", "-f")
    marker = admin("kv", "revert", "REV", "k", "5", "-f", code=1)
    assert "deleted" in marker.stderr.lower() and "Traceback" not in marker.stderr
    missing = admin("kv", "revert", "REV", "k", "99", "-f", code=1)
    assert "Traceback" not in missing.stderr and missing.stderr.startswith("nats: error:")

    history = json.loads(admin("--json", "kv", "history", "REV", "k").stdout)
    assert len(history) == 5
    admin("kv", "compact", "REV", "-f")

    def history_now() -> list | None:
        # nats-py's history watcher may find nothing pending just after a purge under load
        # (seen on nats-server): asked again until it reads the key
        result = admin("--json", "kv", "history", "REV", "k", code=None)
        return json.loads(result.stdout) if result.exit_code == 0 else None
    after = poll(history_now, "the compacted key's history", 10, retry_on=())
    assert [e["revision"] for e in after] == [history[-1]["revision"]]

    for value in ("a", "b"):
        admin("kv", "put", "REV", "p", value)
    admin("kv", "purge", "REV", "p", "-f")
    purged = json.loads(admin("--json", "kv", "history", "REV", "p").stdout)
    assert len(purged) == 1
    assert_clean_error(admin("kv", "get", "REV", "p", code=1).stderr, "key p in bucket REV was deleted", "kv history")
