"""``jetraft object seal``, ``watch`` and ``edit`` as a user runs them, on jetraft and on nats-server.

Each test runs against one server of each kind (the ``js_server`` fixture): seal makes a
bucket refuse puts and deletes while its objects stay readable, and ``object info`` says
Sealed; edit changes only the settings given, and the server then enforces them; watch (a
subprocess) prints the objects there, then each put and delete in natscli's line format,
and Ctrl-C ends it with status 0. A missing bucket, a bad name, a bad flag value and a
setting the server refuses are each one error line, never a traceback. The last test edits
and seals a three-replica bucket on a three-server jetraft cluster.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time

from cluster import Cluster
from test_admin_cli import BIN, Admin, assert_clean_error, field
from test_cli_kv_object import TIME


def put_file(admin: Admin, tmp_path, bucket: str, name: str, data: bytes, code: int = 0):
    source = tmp_path / f"src-{len(data)}-{os.urandom(4).hex()}"
    source.write_bytes(data)
    return admin("object", "put", bucket, str(source), "--name", name, "-f", code=code)


# --------------------------------------------------------------------------- seal


def test_seal_refuses_puts_and_deletes_and_shows_sealed(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    admin("object", "add", "VAULT", "--description", "frozen")
    put_file(admin, tmp_path, "VAULT", "kept.txt", b"keep me")

    refused = admin("object", "seal", "VAULT", code=1)           # no terminal to ask on, no -f
    assert_clean_error(refused.stderr, "not confirmed", "-f")
    assert field(admin("object", "info", "VAULT").stdout, "Sealed") == ["false"]

    sealed = admin("object", "seal", "VAULT", "-f").stdout
    assert re.match(rf"VAULT has been sealed\nInformation for Object Store Bucket VAULT created {TIME}\n",
                    sealed), sealed
    assert field(sealed, "Sealed") == ["true"] and field(sealed, "Description") == ["frozen"]
    info = admin("object", "info", "VAULT").stdout
    assert field(info, "Sealed") == ["true"]
    assert field(info, "TTL") == ["unlimited"]

    new = put_file(admin, tmp_path, "VAULT", "new.txt", b"too late", code=1)
    assert_clean_error(new.stderr, "err_code 10109", "bucket VAULT is sealed", "jetraft object info VAULT")
    gone = admin("object", "rm", "VAULT", "kept.txt", "-f", code=1)
    assert_clean_error(gone.stderr, "err_code 10109", "bucket VAULT is sealed")

    target = tmp_path / "kept.out"
    admin("object", "get", "VAULT", "kept.txt", "-O", str(target))     # still readable
    assert target.read_bytes() == b"keep me"
    assert admin("object", "ls", "VAULT", "-n").stdout == "kept.txt\n"

    again = json.loads(admin("object", "seal", "VAULT", "-f", "--json").stdout)   # sealing twice is no error
    assert again["config"]["name"] == "OBJ_VAULT" and again["config"]["sealed"] is True


def test_seal_watch_edit_of_a_missing_bucket_or_bad_name_is_one_line(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    for args in (("object", "seal", "NOPE", "-f"), ("object", "seal", "NOPE"), ("object", "watch", "NOPE"),
                 ("object", "edit", "NOPE", "--description", "x")):
        out = admin(*args, code=1)
        assert_clean_error(out.stderr, "object store bucket NOPE not found", "jetraft object ls",
                           "jetraft object add NOPE")
        assert out.stdout == ""
    for command in ("seal", "watch", "edit"):
        bad = admin("object", command, "no.dots", code=1)
        assert_clean_error(bad.stderr, "invalid bucket name 'no.dots'", "letters, digits, '-' and '_'")
    assert admin("object", "ls").stdout == "No Object Store buckets found\n"   # nothing was added


# --------------------------------------------------------------------------- watch


def test_watch_prints_puts_and_deletes_until_ctrl_c(js_server, tmp_path):
    """object watch (a subprocess) prints the object stored before it started, then a put
    and a delete made while it runs, in natscli's lines; Ctrl-C ends it with status 0."""
    admin = Admin(js_server.url, tmp_path)
    admin("object", "add", "W")
    put_file(admin, tmp_path, "W", "before.txt", b"hello")
    watch = subprocess.Popen([str(BIN), "object", "watch", "W", "-s", js_server.url], stdout=subprocess.PIPE,
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
        wait_for(rf"\[{TIME}\] PUT W > before\.txt: 5 B bytes in 1 chunks")
        put_file(admin, tmp_path, "W", "during.bin", os.urandom(3 * 512 * 1024))       # 12 chunks of 128 KiB
        wait_for(rf"\[{TIME}\] PUT W > during\.bin: 1\.5 MiB bytes in 12 chunks")
        admin("object", "rm", "W", "before.txt", "-f")
        wait_for(rf"\[{TIME}\] DEL W > before\.txt")
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=15)
    finally:
        watch.kill()
    reader.join(timeout=5)
    assert watch.returncode == 0, err
    assert "Traceback" not in err and "error" not in err, err
    assert len(seen) == 3, seen


def test_watch_json_is_one_object_info_a_line(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    admin("object", "add", "WJ")
    put_file(admin, tmp_path, "WJ", "a.txt", b"abc")
    watch = subprocess.Popen([str(BIN), "object", "watch", "WJ", "--json", "-s", js_server.url],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=admin.env)
    try:
        first = json.loads(watch.stdout.readline())       # the pipe's EOF ends it if the watch dies
        watch.send_signal(signal.SIGINT)
        rest, err = watch.communicate(timeout=15)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    assert rest == ""
    assert (first["bucket"], first["name"], first["size"], first["chunks"]) == ("WJ", "a.txt", 3, 1)
    assert first["digest"].startswith("SHA-256=") and re.match(r"\d{4}-\d\d-\d\dT", first["mtime"])


# --------------------------------------------------------------------------- edit


def test_edit_changes_only_the_settings_given(js_server, tmp_path):
    admin = Admin(js_server.url, tmp_path)
    admin("object", "add", "ED", "--description", "first", "--max-bucket-size", "64MB", "--ttl", "1d")

    edited = admin("object", "edit", "ED", "--description", "second", "--max-bucket-size", "100KB").stdout
    assert re.match(rf"Information for Object Store Bucket ED created {TIME}\n", edited), edited
    assert field(edited, "Description") == ["second"] and field(edited, "Maximum Bucket Size") == ["100 KiB"]
    assert field(edited, "TTL") == ["24h0m0s"]                                # not given: kept
    info = admin("object", "info", "ED").stdout
    assert field(info, "Description") == ["second"] and field(info, "Maximum Bucket Size") == ["100 KiB"]
    assert field(info, "TTL") == ["24h0m0s"] and field(info, "Replicas") == ["1"]
    assert field(info, "Storage") == ["File"] and field(info, "Sealed") == ["false"]

    full = put_file(admin, tmp_path, "ED", "big.bin", os.urandom(300_000), code=1)   # the new limit holds
    assert_clean_error(full.stderr, "err_code 10077", "bucket ED is full")

    later = admin("object", "edit", "ED", "--ttl", "1h", "--max-bucket-size", "-1", "--metadata", "owner:ops",
                  "--metadata", "tier=cold").stdout
    assert field(later, "TTL") == ["1h0m0s"] and field(later, "Maximum Bucket Size") == ["unlimited"]
    assert field(later, "Description") == ["second"]
    assert field(later, "Metadata") == ["owner: ops", "tier: cold"]
    put_file(admin, tmp_path, "ED", "big.bin", os.urandom(300_000))

    config = json.loads(admin("object", "edit", "ED", "--description", "third", "--json").stdout)["config"]
    assert config["description"] == "third" and config["max_age"] == 3600 * 10**9 and config["max_bytes"] == -1
    assert config["metadata"]["owner"] == "ops" and config["name"] == "OBJ_ED"
    assert field(admin("object", "info", "ED").stdout, "Metadata") == ["owner: ops", "tier: cold"]


def test_edit_bad_input_is_one_line(js_server, tmp_path, server_kind):
    admin = Admin(js_server.url, tmp_path)
    admin("object", "add", "ED", "--description", "same")

    size = admin("object", "edit", "ED", "--max-bucket-size", "lots", code=1)
    assert_clean_error(size.stderr, "Invalid value for '--max-bucket-size'", "try --help")
    ttl = admin("object", "edit", "ED", "--ttl", "soon", code=1)
    assert_clean_error(ttl.stderr, "Invalid value for '--ttl'", "try --help")
    meta = admin("object", "edit", "ED", "--metadata", "novalue", code=1)
    assert_clean_error(meta.stderr, "expected KEY=VALUE got 'novalue'", "try --help")

    replicas = admin("object", "edit", "ED", "--replicas", "3", code=1)     # one server keeps one replica
    assert_clean_error(replicas.stderr, "err_code 10074", "use --replicas 1, or a cluster")

    compressed = admin("object", "edit", "ED", "--compress", code=None)    # s2: both servers compress
    assert compressed.exit_code == 0, compressed.stderr
    assert field(admin("object", "info", "ED").stdout, "Description") == ["same"]     # nothing else changed


# --------------------------------------------------------------------------- a jetraft cluster


def test_seal_and_edit_a_three_replica_bucket_on_a_jetraft_cluster(tmp_path):
    """On three jetraft servers: edit through one server, seal through another; a third sees
    both, and refuses a put into the sealed bucket."""
    c = Cluster("jetraft", tmp_path / "cluster", 3, jetstream=True)
    c.start()
    try:
        c.wait_formed()
        c.wait_meta_leader()
        names = list(c.servers)
        first, second, third = (Admin(c.servers[n].url, tmp_path / n) for n in names)
        added = first("object", "add", "TRIPLE", "--replicas", "3").stdout
        assert field(added, "Replicas") == ["3"] and len(field(added, "Replica")) == 2

        edited = first("object", "edit", "TRIPLE", "--description", "three copies", "--max-bucket-size", "1MB").stdout
        assert field(edited, "Description") == ["three copies"] and field(edited, "Maximum Bucket Size") == ["1.0 MiB"]
        put_file(first, tmp_path, "TRIPLE", "a.txt", b"replicated")
        sealed = second("object", "seal", "TRIPLE", "-f").stdout
        assert sealed.startswith("TRIPLE has been sealed\n") and field(sealed, "Sealed") == ["true"]

        info = third("object", "info", "TRIPLE").stdout
        assert field(info, "Sealed") == ["true"] and field(info, "Description") == ["three copies"]
        assert field(info, "Maximum Bucket Size") == ["1.0 MiB"] and field(info, "Replicas") == ["3"]
        refused = put_file(third, tmp_path, "TRIPLE", "b.txt", b"late", code=1)
        assert_clean_error(refused.stderr, "err_code 10109", "bucket TRIPLE is sealed")
        assert third("object", "ls", "TRIPLE", "-n").stdout == "a.txt\n"
    finally:
        c.stop()
