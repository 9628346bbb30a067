"""Directories the store creates are durable before they are used: a new directory entry
survives a power cut only once its parent directory is fsynced (POSIX fsync(2)); without
it a stream's whole directory, and every message acknowledged in it, can vanish."""

from __future__ import annotations

import os

import pytest

from jetraft.storage import fileio


def test_every_directory_made_has_its_parent_fsynced(tmp_path, monkeypatch):
    synced: list[str] = []
    real = fileio.fsync_dir
    monkeypatch.setattr(fileio, "fsync_dir", lambda fd, path: (synced.append(path), real(fd, path)))
    target = tmp_path / "jetstream" / "APP" / "streams" / "ORDERS"
    fileio.make_dirs(target)
    assert target.is_dir()
    assert synced == [str(tmp_path), str(tmp_path / "jetstream"), str(tmp_path / "jetstream" / "APP"),
                      str(tmp_path / "jetstream" / "APP" / "streams")]


def test_directories_that_exist_are_neither_made_nor_synced_again(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    synced: list[str] = []
    monkeypatch.setattr(fileio, "fsync_dir", lambda fd, path: synced.append(path))
    fileio.make_dirs(tmp_path / "a" / "b")
    fileio.make_dirs(tmp_path / "a" / "b")
    assert synced == [str(tmp_path / "a")]


def test_a_parent_that_cannot_be_synced_fails_the_creation(tmp_path):
    def fail_fsync(op, path, size):
        if op == "fsync":
            raise OSError(5, os.strerror(5), path)

    with fileio.inject(fail_fsync), pytest.raises(OSError, match="Input/output error"):
        fileio.make_dirs(tmp_path / "s" / "msgs")
