"""Role jetraft_storage (playbooks/storage.yml) on this machine, against loop devices made
for each test from sparse files in the test's directory, marked non-rotational as the lab's
disks are; the mount point and fstab live in the test's directory too. No real disk is ever
named: the choice among the host's disks is tested on made-up disk facts. Needs root
(losetup, mkfs, mount)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from playbook import ANSIBLE_PLAYBOOK, ROOT, flat, local_inventory, run_playbook

TOOLS = ("losetup", "mkfs.xfs", "mkfs.ext4", "blkid", "findmnt", "lsblk", "mount", "umount")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="jetraft_storage needs root (losetup, mkfs, mount)"),
    pytest.mark.skipif(not all(shutil.which(t) for t in TOOLS),
                       reason=f"needs {', '.join(TOOLS)} (make setup installs xfsprogs)"),
    pytest.mark.timeout(300),
]


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def probe(dev: str, tag: str) -> str:
    """``blkid -p`` value of ``tag`` on ``dev`` ("" when the disk holds nothing)."""
    return subprocess.run(["blkid", "-p", "-o", "value", "-s", tag, dev],
                          capture_output=True, text=True).stdout.strip()


def mounted(dev: str) -> list[str]:
    """Where ``dev`` is mounted."""
    out = subprocess.run(["findmnt", "-n", "-l", "-o", "TARGET", "--source", dev],
                         capture_output=True, text=True).stdout
    return out.split()


def mount_of(target: Path) -> tuple[str, list[str]] | None:
    """(source, options) of what is mounted on ``target`` (the first mount there, under any
    stacked over it), or None."""
    out = subprocess.run(["findmnt", "-n", "-o", "SOURCE,OPTIONS", "--mountpoint", str(target)],
                         capture_output=True, text=True).stdout.split()
    return (out[0], out[1].split(",")) if out else None


@dataclass
class Disk:
    dev: str
    mount_point: Path
    fstab: Path


@pytest.fixture
def disk(tmp_path, block_devices):
    """A 512 MiB sparse file on a loop device marked non-rotational; afterwards unmounted
    wherever it is mounted and detached."""
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(512 << 20)
    dev = sh("losetup", "--find", "--show", str(image))
    try:
        Path(f"/sys/block/{Path(dev).name}/queue/rotational").write_text("0")
        yield Disk(dev, tmp_path / "store", tmp_path / "fstab")
    finally:
        for target in reversed(mounted(dev)):
            subprocess.run(["umount", "-l", target], capture_output=True)
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def inventory(tmp_path: Path, disk: Disk, **extra) -> Path:
    return local_inventory(tmp_path / "hosts.yml", hosts={"h1": None},
                           jetraft_storage_device=disk.dev,
                           jetraft_storage_mount_point=str(disk.mount_point),
                           jetraft_storage_fstab=str(disk.fstab), **extra)


def apply(tmp_path: Path, disk: Disk, **extra) -> subprocess.CompletedProcess:
    return run_playbook("storage", inventory(tmp_path, disk, **extra))


def ansible_playbook(playbook: Path, inv: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_ROLES_PATH": str(ROOT / "roles")}
    return subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inv), str(playbook), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def recap(result: subprocess.CompletedProcess) -> dict[str, int]:
    """h1's counts in the PLAY RECAP."""
    line = next(ln for ln in result.stdout.split("PLAY RECAP")[-1].splitlines()
                if ln.startswith("h1 "))
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def succeeded(result: subprocess.CompletedProcess) -> dict[str, int]:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return recap(result)


def refused(result: subprocess.CompletedProcess, *texts: str) -> None:
    out = flat(result)
    assert result.returncode != 0, out[-2000:]
    for text in texts:
        assert text in out, out[-3000:]


def put_file_on(dev: str, where: Path, name: str, content: str) -> None:
    where.mkdir()
    sh("mount", dev, str(where))
    try:
        (where / name).write_text(content)
    finally:
        sh("umount", str(where))


def read_file_on(dev: str, where: Path, name: str) -> str:
    where.mkdir()
    sh("mount", "-o", "ro", dev, str(where))
    try:
        return (where / name).read_text()
    finally:
        sh("umount", str(where))


def test_an_empty_disk_gets_xfs_mounted_noatime_through_fstab_and_a_rerun_changes_nothing(disk, tmp_path):
    disk.fstab.write_text(f"UUID=1111-2222 / ext4 errors=remount-ro 0 1\n"
                          f"/dev/old-disk {disk.mount_point} ext4 defaults 0 2\n")
    assert succeeded(apply(tmp_path, disk))["changed"] > 0
    assert probe(disk.dev, "TYPE") == "xfs" and probe(disk.dev, "LABEL") == "jetraft"
    source, options = mount_of(disk.mount_point)
    assert source == disk.dev and "noatime" in options
    uuid = probe(disk.dev, "UUID")
    assert disk.fstab.read_text().splitlines() == [
        "UUID=1111-2222 / ext4 errors=remount-ro 0 1",        # other entries are kept
        f"UUID={uuid} {disk.mount_point} xfs noatime 0 2"]    # the store's is replaced
    again = apply(tmp_path, disk)
    assert succeeded(again)["changed"] == 0, again.stdout[-3000:]
    # The mount point made before the first mount: root's, 0750.
    sh("umount", str(disk.mount_point))
    made = disk.mount_point.stat()
    assert (stat.S_IMODE(made.st_mode), made.st_uid, made.st_gid) == (0o750, 0, 0)


def test_ext4_when_asked_named_by_its_device_in_fstab(disk, tmp_path):
    first = apply(tmp_path, disk, jetraft_storage_fstype="ext4", jetraft_storage_fstab_source="device")
    assert succeeded(first)["changed"] > 0
    assert probe(disk.dev, "TYPE") == "ext4"
    source, options = mount_of(disk.mount_point)
    assert source == disk.dev and "noatime" in options
    assert disk.fstab.read_text() == f"{disk.dev} {disk.mount_point} ext4 noatime 0 2\n"
    again = apply(tmp_path, disk, jetraft_storage_fstype="ext4", jetraft_storage_fstab_source="device")
    assert succeeded(again)["changed"] == 0, again.stdout[-3000:]


def test_a_disk_already_mounted_without_the_options_is_remounted_not_reformatted(disk, tmp_path):
    sh("mkfs.xfs", "-q", disk.dev)
    uuid = probe(disk.dev, "UUID")
    disk.mount_point.mkdir()
    sh("mount", disk.dev, str(disk.mount_point))          # by hand: relatime
    (disk.mount_point / "stream.blk").write_text("messages")
    assert "noatime" not in mount_of(disk.mount_point)[1]
    options = "noatime,nofail"                             # nofail never shows in the kernel's
    assert succeeded(apply(tmp_path, disk, jetraft_storage_mount_options=options))["changed"] > 0
    assert "noatime" in mount_of(disk.mount_point)[1]
    assert probe(disk.dev, "UUID") == uuid
    assert (disk.mount_point / "stream.blk").read_text() == "messages"
    assert disk.fstab.read_text() == f"UUID={uuid} {disk.mount_point} xfs {options} 0 2\n"
    again = apply(tmp_path, disk, jetraft_storage_mount_options=options)
    assert succeeded(again)["changed"] == 0, again.stdout[-3000:]


def test_a_disk_holding_another_filesystem_is_never_reformatted(disk, tmp_path):
    sh("mkfs.ext4", "-q", "-L", "precious", disk.dev)
    put_file_on(disk.dev, tmp_path / "prepare", "keep.txt", "do not lose me")
    result = apply(tmp_path, disk)                         # asks for xfs
    refused(result, f"{disk.dev} on h1 already holds ext4 labelled precious, not xfs, and is never "
                    "reformatted. Pick another disk with jetraft_storage_device",
            f"wipe it yourself (wipefs -a {disk.dev})")
    assert (probe(disk.dev, "TYPE"), probe(disk.dev, "LABEL")) == ("ext4", "precious")
    assert read_file_on(disk.dev, tmp_path / "look", "keep.txt") == "do not lose me"
    assert mount_of(disk.mount_point) is None and not disk.fstab.exists()


def test_a_disk_holding_a_partition_table_is_never_touched(disk, tmp_path):
    with open(disk.dev, "r+b") as f:                       # an MBR with one Linux partition
        f.seek(446)
        f.write(bytes([0, 0, 0, 0, 0x83, 0, 0, 0]) + (2048).to_bytes(4, "little")
                + (65536).to_bytes(4, "little"))
        f.seek(510)
        f.write(b"\x55\xaa")
        os.fsync(f.fileno())
    refused(apply(tmp_path, disk),
            f"{disk.dev} on h1 already holds a dos partition table, and is never reformatted")
    assert probe(disk.dev, "PTTYPE") == "dos" and probe(disk.dev, "TYPE") == ""
    assert not disk.fstab.exists()


def test_a_disk_mounted_elsewhere_is_refused(disk, tmp_path):
    sh("mkfs.xfs", "-q", disk.dev)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sh("mount", disk.dev, str(elsewhere))
    refused(apply(tmp_path, disk),
            f"{disk.dev} on h1 is mounted on {elsewhere}: it is in use. Pick another disk")
    assert mount_of(disk.mount_point) is None and not disk.fstab.exists()


def test_a_mount_stacked_over_the_store_is_refused_unless_its_source_is_allowed(disk, tmp_path):
    assert succeeded(apply(tmp_path, disk))["changed"] > 0
    (disk.mount_point / "stream.blk").write_text("messages")
    sh("mount", "-t", "tmpfs", "layer", str(disk.mount_point))     # hides the disk
    try:
        refused(apply(tmp_path, disk),
                f"{disk.mount_point} on h1 is mounted from layer over {disk.dev}, which it hides; "
                "unmount it first (or, for a layer meant to be there, name its source in "
                "jetraft_storage_stacked_sources)")
        again = apply(tmp_path, disk, jetraft_storage_stacked_sources=["layer"])
        assert succeeded(again)["changed"] == 0, again.stdout[-3000:]
        assert sh("findmnt", "-n", "-o", "SOURCE", "--mountpoint",
                  str(disk.mount_point)).split() == [disk.dev, "layer"]  # left in place
        refused(apply(tmp_path, disk, jetraft_storage_stacked_sources=["other"]),
                f"is mounted from layer over {disk.dev}")
    finally:
        sh("umount", str(disk.mount_point))
    assert (disk.mount_point / "stream.blk").read_text() == "messages"


def test_a_disk_lacking_its_options_under_an_allowed_layer_is_refused_not_remounted(disk, tmp_path):
    sh("mkfs.xfs", "-q", disk.dev)
    disk.mount_point.mkdir()
    sh("mount", disk.dev, str(disk.mount_point))          # by hand: relatime
    sh("mount", "-t", "tmpfs", "layer", str(disk.mount_point))
    try:
        refused(apply(tmp_path, disk, jetraft_storage_stacked_sources=["layer"]),
                f"{disk.dev} on h1 is mounted without noatime under layer; unmount the layer")
        assert "noatime" not in mount_of(disk.mount_point)[1]
    finally:
        sh("umount", str(disk.mount_point))


def test_a_store_directory_holding_files_is_not_hidden_and_the_disk_stays_empty(disk, tmp_path):
    disk.mount_point.mkdir()
    (disk.mount_point / "old-stream").write_text("data")
    refused(apply(tmp_path, disk),
            f"{disk.mount_point} on h1 already holds old-stream: mounting {disk.dev} there "
            "would hide it. Move it away")
    assert probe(disk.dev, "TYPE") == "" and mount_of(disk.mount_point) is None
    assert not disk.fstab.exists()


def test_check_mode_reports_the_changes_and_makes_none(disk, tmp_path):
    result = ansible_playbook(ROOT / "playbooks" / "storage.yml", inventory(tmp_path, disk),
                              "--check", "--diff")
    assert succeeded(result)["changed"] > 0
    assert probe(disk.dev, "TYPE") == "" and mount_of(disk.mount_point) is None
    assert not disk.fstab.exists() and not disk.mount_point.exists()


def test_a_missing_device_is_named(tmp_path):
    result = apply(tmp_path, Disk("/dev/jetraft-no-such-disk", tmp_path / "store", tmp_path / "fstab"))
    refused(result, "/dev/jetraft-no-such-disk is not a block device on h1; set jetraft_storage_device")
    assert not (tmp_path / "fstab").exists()


def test_a_rotational_disk_is_refused_unless_allowed(disk, tmp_path):
    Path(f"/sys/block/{Path(disk.dev).name}/queue/rotational").write_text("1")
    refused(apply(tmp_path, disk),
            f"{disk.dev} on h1 is rotational; use an SSD, or set jetraft_storage_allow_rotational")
    assert probe(disk.dev, "TYPE") == ""
    succeeded(apply(tmp_path, disk, jetraft_storage_allow_rotational=True))
    assert probe(disk.dev, "TYPE") == "xfs"


# The choice among the host's disks (jetraft_storage_device unset), on made-up disk facts.

def fact(rotational="0", partitions=None, holders=None, removable="0", sectors=2097152) -> dict:
    """One entry of ansible_facts.devices, as the setup module reports it."""
    return {"rotational": rotational, "partitions": partitions or {}, "holders": holders or [],
            "removable": removable, "sectors": sectors}


HOST_DISKS = {
    "nvme0n1": fact(partitions={"nvme0n1p1": {}}),       # the system disk
    "nvme1n1": fact(),                                      # the data disk
    "sda": fact(rotational="1"),                            # a spinning disk
    "sdb": fact(removable="1"),                             # a USB stick
    "sdc": fact(),                                          # mounted whole (see MOUNTED)
    "sdd": fact(holders=["dm-0"]),                          # an LVM physical volume
    "sde": fact(sectors=0),                                 # a card reader, no card
    "loop0": fact(), "zram0": fact(), "dm-0": fact(), "md0": fact(), "sr0": fact(removable="1"),
}
MOUNTED = ["/dev/nvme0n1p1", "/dev/sdc", "/dev/mapper/vg-root"]


def choose(tmp_path: Path, devices: dict, **role_vars) -> subprocess.CompletedProcess:
    """The role's candidates.yml on ``devices`` (with MOUNTED mounted); prints the choice."""
    play = [{"name": "Choose the data disk", "hosts": "jetraft", "gather_facts": False, "tasks": [
        {"name": "Candidates", "ansible.builtin.include_role": {
            "name": "jetraft_storage", "tasks_from": "candidates"},
         "vars": {"__jetraft_storage_devices": devices,
                  "__jetraft_storage_mounted_devices": MOUNTED, **role_vars}},
        {"name": "Chosen", "ansible.builtin.debug": {"msg": "chosen={{ __jetraft_storage_device }}"}}]}]
    playbook = tmp_path / "choose.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    return ansible_playbook(playbook, local_inventory(tmp_path / "hosts.yml", hosts={"h1": None}))


def test_the_one_fixed_unused_non_rotational_disk_is_chosen(tmp_path):
    result = choose(tmp_path, HOST_DISKS)
    succeeded(result)
    assert "chosen=/dev/nvme1n1" in result.stdout, result.stdout[-3000:]


def test_several_candidates_are_listed_and_none_chosen(tmp_path):
    refused(choose(tmp_path, HOST_DISKS, jetraft_storage_allow_rotational=True),
            "h1 has 2 unpartitioned, unmounted, fixed disks (/dev/nvme1n1, /dev/sda); "
            "set jetraft_storage_device to the data disk.")


def test_no_candidate_says_so(tmp_path):
    disks = {k: v for k, v in HOST_DISKS.items() if k != "nvme1n1"}
    refused(choose(tmp_path, disks),
            "h1 has 0 unpartitioned, unmounted, fixed non-rotational disks (none); "
            "set jetraft_storage_device to the data disk.")
