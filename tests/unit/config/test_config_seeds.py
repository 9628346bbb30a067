"""Every server configuration block of the seed documents is accepted, with the
values the documents mean."""

from __future__ import annotations

import bcrypt
import pytest
from config_seeds import HOSTS, SEEDS, SeedBlock, all_seed_blocks

from jetraft.config import config_from_text, load_config, parse_text

SYS_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
SYS_PASSWORD = b"a very long s3cr3t! password"
BLOCKS = all_seed_blocks()


def test_every_document_yields_three_server_blocks():
    per_document = {path.name: 0 for path in SEEDS.glob("*.txt")}
    for block in BLOCKS:
        per_document[block.document] += 1
    assert per_document == {
        "000_abd0e04c91deb7a3.txt": 3,
        "001_7d724912f2f3131b.txt": 3,
        "002_fbb9366b699efd85.txt": 3,
        "003_427ac29c17392e3d.txt": 3,
    }


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.document}#{b.index}")
def test_seed_block_verbatim_parses(block: SeedBlock):
    tree = parse_text(block.text, env={})
    assert tree["server_name"] == f"n{block.index}-c1"
    assert tree["listen"] == 4222
    assert tree["jetstream"] == {"store_dir": "/nats/storage"}
    assert tree["cluster"]["name"] == "C1"
    config = config_from_text(block.text, env={})
    assert config.warnings == ()


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.document}#{b.index}")
def test_seed_block_typed_values(block: SeedBlock, tmp_path):
    store = str(tmp_path / "storage")
    path = tmp_path / "server.conf"
    path.write_text(block.adjusted(store), encoding="utf-8")

    config = load_config(path, env={})

    assert config.source == str(path)
    assert config.server_name == f"n{block.index}-c1"
    assert (config.host, config.port) == ("0.0.0.0", 4222)
    assert config.jetstream is not None and config.jetstream.store_dir == store
    assert config.cluster is not None
    assert config.cluster.name == "C1"
    assert config.cluster.port == 6222
    assert config.cluster.host in ("0.0.0.0", "localhost")
    others = {HOSTS[h] for h in HOSTS if h != block.host}
    assert {(r.host, r.port) for r in config.cluster.routes} == {(host, 6222) for host in others}
    assert {r.scheme for r in config.cluster.routes} <= {"nats", "nats-route"}
    assert config.jetstream_accounts() == ("$G",)
    assert config.warnings == ()
    sys_users = config.accounts["$SYS"].users
    if "$SYS" in block.text:
        assert [(u.user, u.password, u.account) for u in sys_users] == [("admin", SYS_HASH, "$SYS")]
        assert sys_users[0].is_bcrypt
    else:
        assert sys_users == ()


def test_seed_hash_survives_parsing_and_matches_the_documented_password():
    block = next(b for b in BLOCKS if "$SYS" in b.text)
    (admin,) = config_from_text(block.text, env={}).accounts["$SYS"].users
    assert bcrypt.checkpw(SYS_PASSWORD, admin.password.encode())
    assert not bcrypt.checkpw(b"a very long s3cr3t! passwore", admin.password.encode())
