"""Role jetraft_storage on this machine, against loop devices made for each test (they
report non-rotational once marked, as the lab's disks are): the mount point and fstab
live in the test's directory. Needs root (mkfs, losetup, mount)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from playbook import flat, local_inventory, run_playbook

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="jetraft_storage needs root (losetup, mkfs, mount)"),
    pytest.mark.skipif(not (shutil.which("losetup") and shutil.which("mkfs.xfs")),
                       reason="losetup and mkfs.xfs are needed (make lab-deps installs xfsprogs)"),
    pytest.mark.timeout(300),
]


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def disk(tmp_path):
    """A 512 MiB sparse file on a loop device marked non-rotational; detached afterwards."""
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(512 << 20)
    dev = sh("losetup", "--find", "--show", str(image))
    Path(f"/sys/block/{Path(dev).name}/queue/rotational").write_text("0")
    mount_point = tmp_path / "store"
    yield dev, mount_point, tmp_path / "fstab"
    subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
    subprocess.run(["losetup", "-d", dev], capture_output=True)


def apply(tmp_path: Path, dev: str, mount_point: Path, fstab: Path, **extra):
    inv = local_inventory(tmp_path / "hosts.yml", hosts={"h1": None},
                          jetraft_storage_device=dev, jetraft_storage_mount_point=str(mount_point),
                          jetraft_storage_fstab=str(fstab), **extra)
    return run_playbook("storage", inv)


def test_an_empty_disk_gets_xfs_mounted_noatime_through_fstab_and_a_rerun_changes_nothing(disk, tmp_path):
    dev, mount_point, fstab = disk
    first = apply(tmp_path, dev, mount_point, fstab)
    assert first.returncode == 0, first.stdout[-3000:]
    assert sh("blkid", "-p", "-o", "value", "-s", "TYPE", dev) == "xfs"
    source, options = sh("findmnt", "-n", "-o", "SOURCE,OPTIONS", "--mountpoint", str(mount_point)).split()
    assert source == dev and "noatime" in options.split(",")
    uuid = sh("blkid", "-p", "-o", "value", "-s", "UUID", dev)
    assert f"UUID={uuid} {mount_point} xfs noatime 0 2" in fstab.read_text().splitlines()
    again = apply(tmp_path, dev, mount_point, fstab)
    assert again.returncode == 0 and "changed=0" in again.stdout.split("PLAY RECAP")[-1], again.stdout[-3000:]


def test_ext4_when_asked(disk, tmp_path):
    dev, mount_point, fstab = disk
    result = apply(tmp_path, dev, mount_point, fstab, jetraft_storage_fstype="ext4")
    assert result.returncode == 0, result.stdout[-3000:]
    assert sh("blkid", "-p", "-o", "value", "-s", "TYPE", dev) == "ext4"


def test_a_disk_holding_another_filesystem_is_never_reformatted(disk, tmp_path):
    dev, mount_point, fstab = disk
    sh("mkfs.ext4", "-q", "-L", "precious", dev)
    result = apply(tmp_path, dev, mount_point, fstab)          # asks for xfs
    out = flat(result)
    assert result.returncode != 0
    assert f"{dev} on h1 already holds a ext4 filesystem and is never reformatted" in out, out[-2000:]
    assert f"wipefs -a {dev}" in out
    assert sh("blkid", "-p", "-o", "value", "-s", "LABEL", dev) == "precious"
    assert not fstab.exists() or str(mount_point) not in fstab.read_text()


def test_a_missing_device_is_named(tmp_path):
    result = apply(tmp_path, "/dev/jetraft-no-such-disk", tmp_path / "store", tmp_path / "fstab")
    out = flat(result)
    assert result.returncode != 0
    assert "/dev/jetraft-no-such-disk is not a block device on h1; set jetraft_storage_device" in out, out[-2000:]


def test_a_rotational_disk_is_refused_unless_allowed(disk, tmp_path):
    dev, mount_point, fstab = disk
    Path(f"/sys/block/{Path(dev).name}/queue/rotational").write_text("1")
    refused = apply(tmp_path, dev, mount_point, fstab)
    assert refused.returncode != 0
    assert f"{dev} on h1 is rotational; use an SSD, or set jetraft_storage_allow_rotational" in flat(refused)
    allowed = apply(tmp_path, dev, mount_point, fstab, jetraft_storage_allow_rotational=True)
    assert allowed.returncode == 0, allowed.stdout[-3000:]
