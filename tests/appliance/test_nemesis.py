"""The fault campaign's nemesis (lab/nemesis.py): which packets each partition shape drops
(read back out of the nftables rulesets it loads, and checked by ``nft -c`` where nft is
installed), what the file corruptions do to real files, and which commands each fault
sends to which hosts, in which order (a recording runner stands in for SSH)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import random
import re
import shlex
import shutil
import subprocess
import sys
from itertools import permutations
from pathlib import Path

import pytest

from lab import topology
from lab.drills import Server, Target
from lab.nemesis import (
    NFT_TABLE,
    CampaignNemesis,
    CommandResult,
    NemesisError,
    corrupt,
    corruption_script,
    drop_rules,
    file_class,
    netem_heal_script,
    netem_script,
    nft_rulesets,
    ring_far,
)
from lab.schedule import KINDS, Fault, draw

NAMES = [h.name for h in topology.HOSTS]
ADDRESSES = {h.name: h.address for h in topology.HOSTS}
BY_ADDRESS = {a: n for n, a in ADDRESSES.items()}
ZONE = {h.name: h.zone for h in topology.HOSTS}
UNIT, LAYER = "jetraft.service", "jetraft-powerloss.service"


# ---- partitions: the packets each shape drops -------------------------------------------

_DROP = re.compile(r"^(ip6?) ([sd]addr) \{ ([^}]*) \} (?:numgen random mod 100 < (\d+) )?drop$")


def parse_ruleset(text: str) -> dict[str, list[tuple[str, list[str], int | None]]]:
    """Chain name -> the drop rules of one host's ruleset: (saddr/daddr, addresses,
    percent or None). Asserts SSH is accepted before any drop in each chain."""
    chains: dict[str, list] = {}
    chain = None
    ssh_first: dict[str, bool] = {}
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"chain (\w+) \{", line)
        if m:
            chain = m.group(1)
            chains[chain] = []
            continue
        if chain and line in ("tcp dport 22 accept", "tcp sport 22 accept"):
            ssh_first[chain] = not chains[chain]
            continue
        m = _DROP.match(line)
        if m:
            assert chain is not None
            chains[chain].append((m.group(2), [a.strip() for a in m.group(3).split(",")],
                                  int(m.group(4)) if m.group(4) else None))
    assert ssh_first == {"input": True, "output": True}, text
    return chains


def cut_pairs(rulesets: dict[str, str], addresses=ADDRESSES) -> dict[tuple[str, str], int]:
    """(from, to) -> percent dropped (100: all) for every pair some host's rules drop."""
    by_address = {a: n for n, a in addresses.items()}
    cut: dict[tuple[str, str], int] = {}
    for host, text in rulesets.items():
        for chain, rules in parse_ruleset(text).items():
            for way, addrs, percent in rules:
                for a in addrs:
                    peer = by_address[a]
                    pair = (peer, host) if (chain, way) == ("input", "saddr") else (host, peer)
                    assert (chain, way) in (("input", "saddr"), ("output", "daddr"))
                    cut[pair] = percent or 100
    return cut


def partition(shape: str, targets, **params) -> Fault:
    return Fault("partition", tuple(targets), 10.0, 20.0, {"shape": shape, **params})


def both_ways(side: set[str]) -> set[tuple[str, str]]:
    other = set(NAMES) - side
    return {(a, b) for a in side for b in other} | {(b, a) for a in side for b in other}


def test_one_server_cut_off_both_ways():
    cut = cut_pairs(nft_rulesets(partition("one", ["jr-c1"]), ADDRESSES))
    assert set(cut) == both_ways({"jr-c1"})


def test_a_zone_cut_off_both_ways_rules_on_both_sides():
    rulesets = nft_rulesets(partition("zone", ["jr-a1", "jr-a2"]), ADDRESSES)
    assert set(cut_pairs(rulesets)) == both_ways({"jr-a1", "jr-a2"})
    assert set(rulesets) == set(NAMES)


def test_a_majority_and_a_minority_cut_apart():
    side = {"jr-a1", "jr-b2", "jr-c1"}
    cut = cut_pairs(nft_rulesets(partition("majority", sorted(side)), ADDRESSES))
    assert set(cut) == both_ways(side)


def test_one_way_the_targets_stop_hearing_the_others_but_are_heard():
    rulesets = nft_rulesets(partition("one-way", ["jr-b1", "jr-b2"]), ADDRESSES)
    assert set(rulesets) == {"jr-b1", "jr-b2"}
    cut = cut_pairs(rulesets)
    assert set(cut) == {(o, t) for t in ("jr-b1", "jr-b2")
                        for o in ("jr-a1", "jr-a2", "jr-c1")}


@pytest.mark.parametrize("ring", [sorted(NAMES), ["jr-b1", "jr-a1", "jr-c1", "jr-a2", "jr-b2"]])
def test_majorities_ring_each_sees_a_majority_no_two_the_same(ring):
    cut = cut_pairs(nft_rulesets(partition("majorities-ring", sorted(NAMES), ring=ring),
                                 ADDRESSES))
    sees = {n: {n} | {m for m in NAMES if m != n and (m, n) not in cut} for n in NAMES}
    for n in NAMES:
        assert len(sees[n]) == 3                          # itself and a neighbour each side
        i = ring.index(n)
        assert sees[n] == {ring[i - 1], n, ring[(i + 1) % 5]}
        assert all(((m, n) in cut) == ((n, m) in cut) for m in NAMES if m != n)
    assert len({frozenset(s) for s in sees.values()}) == 5


@pytest.mark.parametrize("n", [5, 7, 9])
def test_ring_far_leaves_every_server_a_majority_and_every_majority_distinct(n):
    ring = [f"s{i}" for i in range(n)]
    far = ring_far(ring)
    sees = {s: frozenset(set(ring) - set(far[s])) for s in ring}
    assert all(len(v) >= n // 2 + 1 for v in sees.values())
    assert len(set(sees.values())) == n
    assert all((a in far[b]) == (b in far[a]) for a, b in permutations(ring, 2))


@pytest.mark.parametrize("direction,expected", [
    ("both", lambda t: {(t, o) for o in NAMES if o != t} | {(o, t) for o in NAMES if o != t}),
    ("one-way", lambda t: {(o, t) for o in NAMES if o != t}),
])
def test_packet_loss_drops_a_share_of_the_traffic_with_the_others(direction, expected):
    fault = Fault("packet-loss", ("jr-a2",), 1.0, 9.0, {"percent": 30, "direction": direction})
    cut = cut_pairs(nft_rulesets(fault, ADDRESSES))
    assert set(cut) == expected("jr-a2") and set(cut.values()) == {30}


def test_packet_loss_on_every_server_drops_between_every_pair():
    fault = Fault("packet-loss", tuple(NAMES), 1.0, 9.0, {"percent": 5, "direction": "both"})
    assert set(cut_pairs(nft_rulesets(fault, ADDRESSES))) == set(permutations(NAMES, 2))


def test_ipv6_addresses_get_ip6_rules():
    v6 = {n: f"fd00::{i + 1}" for i, n in enumerate(NAMES)}
    text = nft_rulesets(partition("one", ["jr-a1"]), v6)["jr-a1"]
    assert "ip6 saddr { fd00::2, fd00::3, fd00::4, fd00::5 } drop" in text
    assert set(cut_pairs({"jr-a1": text}, v6)) == both_ways({"jr-a1"})


def test_a_target_not_in_the_inventory_is_refused():
    with pytest.raises(NemesisError, match="no server jr-z9"):
        drop_rules(partition("one", ["jr-z9"]), ADDRESSES)


def _all_network_faults() -> list[Fault]:
    ring = ["jr-b1", "jr-a1", "jr-c1", "jr-a2", "jr-b2"]
    return [partition("one", ["jr-c1"]), partition("zone", ["jr-a1", "jr-a2"]),
            partition("majority", ["jr-a1", "jr-b1", "jr-c1"]),
            partition("one-way", ["jr-b2"]),
            partition("majorities-ring", sorted(NAMES), ring=ring),
            Fault("packet-loss", ("jr-a1",), 1.0, 2.0, {"percent": 20, "direction": "both"}),
            Fault("packet-loss", tuple(NAMES), 1.0, 2.0, {"percent": 7, "direction": "one-way"})]


@pytest.mark.skipif(shutil.which("nft") is None, reason="nft is not installed here")
@pytest.mark.parametrize("fault", _all_network_faults(),
                         ids=lambda f: f"{f.kind}-{f.param('shape') or f.param('direction')}")
def test_nft_accepts_every_ruleset(fault, tmp_path):
    for host, text in nft_rulesets(fault, ADDRESSES).items():
        path = tmp_path / f"{host}.nft"
        path.write_text(text)
        check = subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, f"{host}: {check.stderr}\n{text}"


def test_netem_delays_only_the_peers_and_is_shell():
    peers = ["10.213.0.12", "10.213.0.15"]
    script = netem_script(peers, 80, 20)
    assert "netem delay 80ms 20ms" in script
    filtered = re.findall(r"match ip dst (\S+)/32 flowid 1:3", script)
    assert filtered == peers
    for text in (script, netem_heal_script(peers)):
        assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0


# ---- corruption on real files ----------------------------------------------------------

def _files(tmp_path: Path, sizes: list[int], seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    paths = []
    for i, size in enumerate(sizes):
        p = tmp_path / f"{i:020d}.blk"
        p.write_bytes(rng.randbytes(size))
        paths.append(str(p))
    return paths


def _bits_changed(a: bytes, b: bytes) -> int:
    return sum(bin(x ^ y).count("1") for x, y in zip(a, b))


@pytest.mark.parametrize("bits", [1, 3, 8, 40])
def test_bitflip_changes_exactly_n_bits_of_one_file(tmp_path, bits):
    paths = _files(tmp_path, [300, 500, 700])
    before = {p: Path(p).read_bytes() for p in paths}
    detail = corrupt(paths, "bitflip", random.Random(7), bits=bits)
    assert detail["file"] in paths and len(detail["bits"]) == bits
    for p in paths:
        after = Path(p).read_bytes()
        assert len(after) == len(before[p])
        if p == detail["file"]:
            assert _bits_changed(before[p], after) == bits
            for offset, bit in detail["bits"]:
                assert (before[p][offset] ^ after[offset]) >> bit & 1
        else:
            assert after == before[p]


def test_the_same_seed_damages_the_same_way(tmp_path):
    for kind in ("bitflip", "chunk-copy", "truncate"):
        a, b = tmp_path / f"{kind}-a", tmp_path / f"{kind}-b"
        a.mkdir()
        b.mkdir()
        da = corrupt(_files(a, [100, 4000, 900]), kind, random.Random(3), bits=5)
        db = corrupt(list(reversed(_files(b, [100, 4000, 900]))), kind, random.Random(3), bits=5)
        assert json.dumps(da).replace(str(a), "") == json.dumps(db).replace(str(b), "")
        assert [p.read_bytes() for p in sorted(a.iterdir())] == \
            [p.read_bytes() for p in sorted(b.iterdir())]


def test_truncate_shortens_one_file_keeping_its_start(tmp_path):
    paths = _files(tmp_path, [1000, 2000])
    before = {p: Path(p).read_bytes() for p in paths}
    detail = corrupt(paths, "truncate", random.Random(5))
    after = Path(detail["file"]).read_bytes()
    assert len(after) == detail["new_size"] < detail["size"] == len(before[detail["file"]])
    assert after == before[detail["file"]][:len(after)]
    assert [Path(p).read_bytes() for p in paths if p != detail["file"]] == \
        [before[p] for p in paths if p != detail["file"]]


def test_chunk_copy_copies_a_chunk_of_one_file_over_another(tmp_path):
    paths = _files(tmp_path, [5000, 3000, 8000])
    before = {p: Path(p).read_bytes() for p in paths}
    detail = corrupt(paths, "chunk-copy", random.Random(9), chunk=1024)
    src, dst = detail["source"], detail["file"]
    off, n, src_off = detail["offset"], detail["length"], detail["source_offset"]
    assert src != dst and 1 <= n <= 1024
    after = Path(dst).read_bytes()
    assert after[off:off + n] == before[src][src_off:src_off + n]
    assert after[:off] == before[dst][:off] and after[off + n:] == before[dst][off + n:]
    assert Path(src).read_bytes() == before[src]
    assert detail["changed"] is True


def test_nothing_to_damage_is_reported_not_invented(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "one").mkdir()
    empty = _files(tmp_path / "empty", [0, 0])
    assert corrupt(empty, "bitflip", random.Random(1))["skipped"] == \
        "0 non-empty file(s) of the class"
    one = _files(tmp_path / "one", [10, 0])
    before = Path(one[0]).read_bytes()
    assert corrupt(one, "chunk-copy", random.Random(1))["skipped"] == \
        "1 non-empty file(s) of the class"
    assert Path(one[0]).read_bytes() == before


@pytest.mark.parametrize("flavour,path,klass", [
    ("jetraft", "jetstream/APP/streams/ORDERS/msgs/00000000000000000001.blk", "stream-block"),
    ("jetraft", "jetstream/APP/streams/ORDERS/msgs/00000000000000000001.idx", "index"),
    ("jetraft", "jetstream/_raft/g-S-ORDERS/00000000000000000001.log", "raft-log"),
    ("jetraft", "jetstream/_raft/g-_meta_/snapshot", "snapshot"),
    ("jetraft", "jetstream/_raft/g-_meta_/hardstate", None),
    ("jetraft", "jetstream/APP/streams/ORDERS/meta.json", None),
    ("jetraft", "jetstream/APP/streams/ORDERS/msgs/00000000000000000001.idx.tmp", None),
    ("nats-server", "jetstream/APP/streams/ORDERS/msgs/1.blk", "stream-block"),
    ("nats-server", "jetstream/APP/streams/ORDERS/msgs/index.db", "index"),
    ("nats-server", "jetstream/APP/streams/ORDERS/meta.inf", "index"),
    ("nats-server", "jetstream/APP/streams/ORDERS/meta.sum", "index"),
    ("nats-server", "jetstream/$SYS/_js_/S-R3F-abc/msgs/1.blk", "raft-log"),
    ("nats-server", "jetstream/$SYS/_js_/_meta_/snapshots/snap.3.1024", "snapshot"),
    ("nats-server", "jetstream/$SYS/_js_/_meta_/tav.idx", None),
    ("nats-server-always", "jetstream/APP/streams/ORDERS/msgs/7.blk", "stream-block"),
    ("nats-server", "jetstream/APP/streams/ORDERS/obs/C1/meta.inf", None),
])
def test_file_classes_per_flavour(flavour, path, klass):
    assert file_class(path, flavour) == klass


def _jetraft_store(root: Path) -> dict[str, bytes]:
    rng = random.Random(4)
    files = {
        "jetstream/APP/streams/ORDERS/meta.json": b'{"config": {}}',
        "jetstream/APP/streams/ORDERS/msgs/00000000000000000001.blk": rng.randbytes(3000),
        "jetstream/APP/streams/ORDERS/msgs/00000000000000000001.idx": rng.randbytes(200),
        "jetstream/APP/streams/ORDERS/msgs/00000000000000000900.blk": rng.randbytes(1500),
        "jetstream/_raft/g-_meta_/00000000000000000001.log": rng.randbytes(800),
        "jetstream/_raft/g-_meta_/snapshot": rng.randbytes(90),
        "jetstream/_raft/g-_meta_/hardstate": rng.randbytes(24),
        "jetstream/_raft/g-S-ORDERS/00000000000000000001.log": rng.randbytes(600),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


@pytest.mark.parametrize("kind,klass", [("bitflip", "stream-block"), ("truncate", "snapshot"),
                                        ("chunk-copy", "raft-log"), ("bitflip", "index")])
def test_the_program_sent_to_a_host_damages_one_file_of_the_class(tmp_path, kind, klass):
    files = _jetraft_store(tmp_path)
    script = corruption_script(str(tmp_path), "jetraft", kind, klass, seed=12, bits=2)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    detail = json.loads(run.stdout)
    changed = [rel for rel, data in files.items() if (tmp_path / rel).read_bytes() != data]
    assert changed == [str(Path(detail["file"]).relative_to(tmp_path))]
    assert file_class(changed[0], "jetraft") == klass and detail["file_class"] == klass
    assert detail["candidates"] == sum(file_class(r, "jetraft") == klass for r in files)


# ---- the nemesis's commands, in order, through a recording runner ----------------------

class RecordingRunner:
    """Stands in for SSH: records each call's (host, command) list and answers from
    ``answer(host, command) -> CommandResult`` (ok by default). A ``python3 -c`` command
    runs here, on this machine's Python, as it would on the host."""

    def __init__(self, answer=None):
        self.calls: list[list[tuple[str, str]]] = []
        self.answer = answer or (lambda host, command: None)
        self.closed = False

    async def run(self, commands):
        self.calls.append([(s.name, c) for s, c in commands])
        results = []
        for server, command in commands:
            result = self.answer(server.name, command)
            if result is None and command.startswith("python3 -c "):
                program = shlex.split(command)[2]
                done = subprocess.run([sys.executable, "-c", program], capture_output=True,
                                      text=True)
                result = CommandResult(done.returncode == 0, done.stdout, done.stderr)
            results.append(result or CommandResult(True))
        return results

    def close(self):
        self.closed = True

    def commands(self) -> list[tuple[str, str]]:
        return [c for call in self.calls for c in call]


def fake_target() -> Target:
    return Target(servers=[Server(h.name, h.address, h.zone) for h in topology.HOSTS],
                  ssh_user="root", ssh_key=None, known_hosts=None, app_user="app",
                  app_password="secret")


def nemesis(runner, **kw) -> CampaignNemesis:
    ticks = iter(range(1_000, 1_000_000, 1_000))
    return CampaignNemesis(fake_target(), runner=runner, clock=lambda: next(ticks), **kw)


def apply_heal(nem: CampaignNemesis, fault: Fault):
    async def both():
        applied = await nem.apply(fault)
        healed = await nem.heal(fault)
        return applied, healed
    return asyncio.run(both())


def test_kill_then_start_on_each_target_at_once():
    runner = RecordingRunner()
    fault = Fault("kill", ("jr-a1", "jr-a2"), 10.0, 20.0, {"scope": "zone", "zone": "a"})
    record, healed = apply_heal(nemesis(runner), fault)
    kill = f"systemctl kill --signal=SIGKILL {UNIT}; systemctl stop {UNIT}"
    assert runner.calls == [[("jr-a1", kill), ("jr-a2", kill)],
                            [("jr-a1", f"systemctl start {UNIT}"),
                             ("jr-a2", f"systemctl start {UNIT}")]]
    assert record is healed and record.applied_ns == 1_000 and record.healed_ns == 2_000
    assert (record.kind, record.targets, record.start_s, record.end_s, record.skipped) == \
        ("kill", ["jr-a1", "jr-a2"], 10.0, 20.0, None)
    assert record.params == {"scope": "zone", "zone": "a"}


def test_pause_then_resume():
    runner = RecordingRunner()
    apply_heal(nemesis(runner), Fault("pause", ("jr-b2",), 1.0, 2.0, {"scope": "one"}))
    assert runner.commands() == [("jr-b2", f"systemctl kill --signal=SIGSTOP {UNIT}"),
                                 ("jr-b2", f"systemctl kill --signal=SIGCONT {UNIT}")]


def test_a_partition_loads_each_hosts_ruleset_and_the_heal_deletes_the_table():
    runner = RecordingRunner()
    fault = partition("one-way", ["jr-c1"])
    record, _ = apply_heal(nemesis(runner), fault)
    (apply_call, heal_call) = runner.calls
    assert [h for h, _ in apply_call] == ["jr-c1"]
    words = shlex.split(apply_call[0][1].split(" | ")[0])
    assert words[:2] == ["printf", "%s"] and apply_call[0][1].endswith("| nft -f -")
    assert words[2] == nft_rulesets(fault, ADDRESSES)["jr-c1"]
    assert heal_call == [("jr-c1", f"if nft list table inet {NFT_TABLE} >/dev/null 2>&1; "
                                   f"then nft delete table inet {NFT_TABLE}; fi")]
    assert record.detail["dropped"] == {"jr-c1": {"input": [ADDRESSES[n] for n in NAMES
                                                            if n != "jr-c1"]}}


def test_a_power_cut_checks_the_layer_then_cuts_every_target_in_one_step():
    runner = RecordingRunner()
    fault = Fault("power-loss", tuple(NAMES), 30.0, 40.0, {"scope": "all"})
    record, _ = apply_heal(nemesis(runner), fault)
    check, cut, heal = runner.calls
    assert check == [(n, f"systemctl cat {LAYER} >/dev/null 2>&1") for n in NAMES]
    steps = [f"systemctl kill --signal=SIGSTOP {UNIT}",
             f"systemctl kill --signal=SIGKILL {LAYER}",
             f"systemctl kill --signal=SIGKILL {UNIT}",
             f"systemctl stop {UNIT} {LAYER} || exit 1",
             # the layer's mount only, never the store's disk beneath it
             "findmnt -n -o FSTYPE /var/lib/jetraft | tail -n 1 | grep -q '^fuse'"
             " && umount -l /var/lib/jetraft; true"]
    assert cut == [(n, "; ".join(steps)) for n in NAMES]      # one call: all hosts at once
    assert heal == [(n, f"systemctl start {LAYER} {UNIT}") for n in NAMES]
    assert record.detail["coordinated"] is True


def test_a_power_cut_without_the_layer_is_refused_before_anything_is_cut():
    def answer(host, command):
        if command.startswith("systemctl cat") and host == "jr-b1":
            return CommandResult(False, "", "No files found for jetraft-powerloss.service.")
    runner = RecordingRunner(answer)
    fault = Fault("power-loss", ("jr-a1", "jr-b1"), 1.0, 2.0, {"scope": "one"})
    with pytest.raises(NemesisError, match=r"jetraft-powerloss.service is not installed on "
                                           r"jr-b1; the campaign installs it .*lab/powerloss.yml"):
        asyncio.run(nemesis(runner).apply(fault))
    assert len(runner.calls) == 1


def test_a_corruption_crashes_damages_and_restarts_the_one_host(tmp_path):
    files = _jetraft_store(tmp_path)
    runner = RecordingRunner()
    fault = Fault("bitflip", ("jr-b1",), 5.0, 10.0,
                  {"file_class": "stream-block", "seed": 77, "bits": 3})
    record, healed = apply_heal(nemesis(runner, store_dir=str(tmp_path)), fault)
    (kill, damage, start) = runner.calls
    assert kill == [("jr-b1", f"systemctl kill --signal=SIGKILL {UNIT}; systemctl stop {UNIT}")]
    assert damage[0][0] == "jr-b1" and damage[0][1].startswith("python3 -c ")
    assert start == [("jr-b1", f"systemctl start {UNIT}")]
    assert record.skipped is None and record.detail["restart"] == "ok"
    assert len(record.detail["bits"]) == 3 and record.detail["file_class"] == "stream-block"
    damaged = Path(record.detail["file"])
    rel = str(damaged.relative_to(tmp_path))
    assert _bits_changed(files[rel], damaged.read_bytes()) == 3
    assert healed.healed_ns is not None


def test_a_server_that_does_not_come_back_after_a_corruption_is_recorded(tmp_path):
    _jetraft_store(tmp_path)
    runner = RecordingRunner(lambda host, command: CommandResult(
        False, "", "Job for jetraft.service failed.") if command.startswith("systemctl start")
        else None)
    fault = Fault("truncate", ("jr-a1",), 5.0, 10.0, {"file_class": "raft-log", "seed": 1})
    record = asyncio.run(nemesis(runner, store_dir=str(tmp_path)).apply(fault))
    assert record.detail["restart"] == "Job for jetraft.service failed."
    assert record.applied_ns is not None


def test_a_class_the_host_does_not_hold_falls_back_to_the_next_it_holds(tmp_path):
    """A stream group that never took a snapshot has no snapshot file: the damage goes to
    the next class in FILE_CLASSES order the host holds, and the record says both."""
    files = _jetraft_store(tmp_path)
    for rel in [r for r in files if r.endswith("/snapshot")]:
        (tmp_path / rel).unlink()
    fault = Fault("truncate", ("jr-a1",), 5.0, 10.0, {"file_class": "snapshot", "seed": 4})
    record = asyncio.run(nemesis(RecordingRunner(), store_dir=str(tmp_path)).apply(fault))
    assert record.skipped is None
    assert (record.detail["drawn_class"], record.detail["file_class"]) == ("snapshot", "stream-block")
    assert file_class(str(Path(record.detail["file"]).relative_to(tmp_path)), "jetraft") == "stream-block"


def test_a_chunk_copy_needs_two_files_so_one_snapshot_falls_back_to_stream_blocks(tmp_path):
    """A chunk is copied from one file of the class over another: a host with one snapshot
    file damages the next class it holds two of, and the record says both."""
    files = _jetraft_store(tmp_path)
    assert sum(file_class(r, "jetraft") == "snapshot" for r in files) == 1
    fault = Fault("chunk-copy", ("jr-a1",), 5.0, 10.0, {"file_class": "snapshot", "seed": 2})
    record = asyncio.run(nemesis(RecordingRunner(), store_dir=str(tmp_path)).apply(fault))
    assert record.skipped is None
    assert (record.detail["drawn_class"], record.detail["file_class"]) == ("snapshot", "stream-block")
    changed = [rel for rel, data in files.items() if (tmp_path / rel).read_bytes() != data]
    assert [file_class(r, "jetraft") for r in changed] == ["stream-block"]


def test_a_corruption_with_no_file_of_the_class_is_skipped_and_says_so(tmp_path):
    runner = RecordingRunner()
    fault = Fault("chunk-copy", ("jr-a1",), 5.0, 10.0, {"file_class": "snapshot", "seed": 1})
    record = asyncio.run(nemesis(runner, store_dir=str(tmp_path)).apply(fault))
    assert record.skipped == "no snapshot file to damage: 0 non-empty file(s) of the class"
    assert record.applied_ns is None and record.detail["restart"] == "ok"


def test_packet_delay_without_netem_is_skipped_after_one_probe():
    runner = RecordingRunner(lambda host, command: CommandResult(
        False, "", "Error: Specified qdisc kind is unknown.") if "netem delay 1ms" in command
        else None)
    nem = nemesis(runner)
    first = Fault("packet-delay", ("jr-a1",), 1.0, 2.0, {"delay_ms": 50, "jitter_ms": 5})
    second = Fault("packet-delay", ("jr-c1",), 3.0, 4.0, {"delay_ms": 90, "jitter_ms": 0})
    records = [apply_heal(nem, f)[0] for f in (first, second)]
    assert [r.skipped for r in records] == ["the kernel has no netem"] * 2
    assert records[0].detail["probe"] == "Error: Specified qdisc kind is unknown."
    assert runner.commands() == [("jr-a1", "tc qdisc add dev lo root netem delay 1ms && "
                                           "tc qdisc del dev lo root")]


def test_packet_delay_with_netem_delays_the_targets_traffic_to_the_others():
    runner = RecordingRunner()
    fault = Fault("packet-delay", ("jr-a1", "jr-a2"), 1.0, 2.0,
                  {"delay_ms": 120, "jitter_ms": 10, "scope": "zone", "zone": "a"})
    record, _ = apply_heal(nemesis(runner), fault)
    probe, delay, heal = runner.calls
    others = [ADDRESSES[n] for n in ("jr-b1", "jr-b2", "jr-c1")]
    assert delay == [(n, netem_script(others, 120, 10)) for n in ("jr-a1", "jr-a2")]
    assert heal == [(n, netem_heal_script(others)) for n in ("jr-a1", "jr-a2")]
    assert record.detail["delayed"] == {"jr-a1": others, "jr-a2": others}


def test_membership_goes_to_the_campaigns_playbook_runner_or_is_skipped():
    fault = Fault("membership", ("jr-b2",), 10.0, 200.0, {"action": "replace-host"})
    runner = RecordingRunner()
    assert asyncio.run(nemesis(runner).apply(fault)).skipped == \
        "membership changes need the campaign's playbook runner"
    seen = []

    async def playbooks(f):
        seen.append(f)
        return {"playbook": "playbooks/replace_host.yml", "seconds": 12.5}
    record = asyncio.run(nemesis(runner, membership=playbooks).apply(fault))
    assert seen == [fault] and record.detail["playbook"] == "playbooks/replace_host.yml"
    assert record.skipped is None and runner.calls == []


def test_after_a_scale_down_partitions_reach_only_the_servers_left():
    """Seen in a campaign: a partition during scale-up-down (seven servers) left the
    nemesis with seven addresses; the first partition after the scale-down then named the
    retired servers and stopped the run."""
    runner = RecordingRunner()
    seven = Target(servers=[Server(h.name, h.address, h.zone) for h in topology.ALL_HOSTS],
                   ssh_user="root", ssh_key=None, known_hosts=None, app_user="app",
                   app_password="secret")
    ticks = iter(range(1_000, 1_000_000, 1_000))
    nem = CampaignNemesis(seven, runner=runner, clock=lambda: next(ticks))

    async def scale_down_between_two_partitions():
        await nem.apply(partition("one", ["jr-b2"]))
        await nem.heal(partition("one", ["jr-b2"]))
        await nem.reconnect(fake_target())                  # the spares retired
        return await nem.apply(partition("one", ["jr-b2"]))
    record = asyncio.run(scale_down_between_two_partitions())
    assert sorted(record.detail["dropped"]) == sorted(NAMES)
    assert {host for host, _ in runner.calls[-1]} == set(NAMES)


def test_a_failed_command_names_the_host_and_its_error():
    runner = RecordingRunner(lambda host, command: CommandResult(
        False, "", "Failed to stop jetraft.service: Access denied") if host == "jr-c1" else None)
    with pytest.raises(NemesisError, match="kill failed on jr-c1: Failed to stop jetraft.service: "
                                           "Access denied"):
        asyncio.run(nemesis(runner).apply(Fault("kill", ("jr-b1", "jr-c1"), 1.0, 2.0)))


def test_heal_all_repairs_every_host_and_reports_failures_without_raising():
    runner = RecordingRunner(lambda host, command: CommandResult(
        False, "", "ssh: connection refused") if host == "jr-b2" else None)
    nem = nemesis(runner)
    record = asyncio.run(nem.heal_all())
    (call,) = runner.calls
    assert [h for h, _ in call] == NAMES
    script = call[0][1]
    assert f"nft delete table inet {NFT_TABLE}" in script
    assert f"systemctl kill --signal=SIGCONT {UNIT}" in script
    assert script.index(f"systemctl start {LAYER}") < script.index(f"systemctl start {UNIT}")
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    assert record.detail == {**{n: "ok" for n in NAMES}, "jr-b2": "ssh: connection refused"}
    nem.close()
    assert runner.closed


def test_a_whole_drawn_schedule_applies_and_heals_with_shell_every_host_can_parse(tmp_path):
    _jetraft_store(tmp_path)
    runner = RecordingRunner()
    nem = nemesis(runner, store_dir=str(tmp_path), membership=lambda f: _done())
    schedule = draw(4, 5, [(h.name, h.zone) for h in topology.HOSTS], kinds=set(KINDS),
                    every_kind=True)

    async def campaign():
        steps = sorted([(f.start_s, 0, f) for f in schedule] + [(f.end_s, 1, f) for f in schedule],
                       key=lambda s: (s[0], s[1]))
        for _, heal, fault in steps:
            await (nem.heal(fault) if heal else nem.apply(fault))
        return await nem.heal_all()
    asyncio.run(campaign())
    assert {f.kind for f in schedule} == set(KINDS)
    for fault in schedule:
        record = nem.records[fault]
        assert record.healed_ns is not None and (record.applied_ns or record.skipped), record
        json.dumps(record.as_dict())
    for host, command in runner.commands():
        assert host in NAMES
        if command.startswith("python3 -c "):
            compile(shlex.split(command)[2], "<corruption>", "exec")
        else:
            assert subprocess.run(["sh", "-n"], input=command, text=True).returncode == 0, command


async def _done() -> dict:
    return {"playbook": "ok"}


def test_addresses_must_be_ip_literals_or_resolvable():
    target = fake_target()
    target.servers[0] = Server("jr-a1", "localhost", "a")
    nem = CampaignNemesis(target, runner=RecordingRunner())
    assert ipaddress.ip_address(nem.addresses()["jr-a1"]).is_loopback
    assert nem.addresses()["jr-c1"] == "10.213.0.15"


def test_an_unknown_flavour_is_refused():
    with pytest.raises(ValueError, match="no flavour 'etcd': one of jetraft, nats-server"):
        CampaignNemesis(fake_target(), runner=RecordingRunner(), flavour="etcd")


# ---- the SSH runner: every host's command started before any is waited for ---------------

class _Stream:
    def __init__(self, log, host, name, data, channel=None):
        self.log, self.host, self.name, self.data, self.channel = log, host, name, data, channel

    def read(self):
        self.log.append(("read", self.host, self.name))
        return self.data

    def close(self):
        pass


class _Channel:
    def __init__(self, status):
        self.status = status

    def recv_exit_status(self):
        return self.status


class _Client:
    """A paramiko client as pyinfra's SSH connector holds it."""

    def __init__(self, log, host, status):
        self.log, self.host, self.status = log, host, status

    def exec_command(self, command, timeout=None):
        self.log.append(("exec", self.host, command))
        channel = _Channel(self.status)
        return (_Stream(self.log, self.host, "stdin", b""),
                _Stream(self.log, self.host, "stdout", f"{self.host} out".encode(), channel),
                _Stream(self.log, self.host, "stderr", b"boom" if self.status else b""))


class _Host:
    def __init__(self, log, name, status=0):
        self.connector = type("Connector", (), {"client": _Client(log, name, status)})()

    def disconnect(self):
        pass


def test_the_ssh_runner_starts_every_hosts_command_before_waiting_for_any():
    from lab.nemesis import PyinfraRunner

    log: list = []
    target = fake_target()
    hosts = {s.name: _Host(log, s.name, status=1 if s.name == "jr-b1" else 0)
             for s in target.servers}
    runner = PyinfraRunner(target, hosts=hosts)
    try:
        results = asyncio.run(runner.run([(s, "cut") for s in target.servers]))
    finally:
        runner.close()
    execs = [i for i, entry in enumerate(log) if entry[0] == "exec"]
    reads = [i for i, entry in enumerate(log) if entry[0] == "read"]
    assert len(execs) == 5 and max(execs) < min(reads)
    assert {entry[2] for entry in log if entry[0] == "exec"} == {"sh -c cut"}
    assert [r.ok for r in results] == [n != "jr-b1" for n in NAMES]
    assert results[0].stdout == "jr-a1 out" and results[2].stderr == "boom"


def test_each_connect_reads_the_known_hosts_file_again(tmp_path):
    """pyinfra keeps the host keys it read for the life of the process; a campaign's second
    fresh lab (or a replaced host) has new keys in the same file, so every connect forgets
    what was read before (here to a host with no SSH server: the connect fails, saying so)."""
    from pyinfra.connectors.sshuserclient.client import get_host_keys

    from lab.drills import DrillError, Nemesis, Server, Target
    known = str(tmp_path / "known_hosts")
    stale = f"{(known,)}{{}}"
    get_host_keys.cache[stale] = "the first lab's keys"
    target = Target(servers=[Server("n1", "127.0.0.1", "a")], ssh_user="root", ssh_key=None,
                    known_hosts=known, app_user="app", app_password="x")
    from pyinfra.api.exceptions import PyinfraError
    with pytest.raises((DrillError, PyinfraError)):
        Nemesis(target)
    assert stale not in get_host_keys.cache
