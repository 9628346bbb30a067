"""lab/Vagrantfile (the lab for machines with a hypervisor) is valid for both providers.
It cannot boot here (no hypervisor); `vagrant validate` parses it and checks every
machine's configuration, including the Ansible provisioner's."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from playbook import ROOT

pytestmark = pytest.mark.skipif(shutil.which("vagrant") is None,
                                reason="vagrant is not installed (make lab-deps installs it)")


def validate(tmp_path, provider: str, *args: str, vagrantfile: str | None = None):
    (tmp_path / "Vagrantfile").write_text(vagrantfile or (ROOT / "lab" / "Vagrantfile").read_text())
    env = {**os.environ, "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_HOME": str(tmp_path / "home"),
           "VAGRANT_DEFAULT_PROVIDER": provider, "VAGRANT_EXPERIMENTAL": "disks"}
    return subprocess.run(["vagrant", "validate", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_vagrantfile_validates_for_libvirt(tmp_path):
    result = validate(tmp_path, "libvirt")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Vagrantfile validated successfully." in result.stdout


def test_the_vagrantfile_validates_for_virtualbox_without_its_provider_installed(tmp_path):
    result = validate(tmp_path, "virtualbox", "--ignore-provider")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Vagrantfile validated successfully." in result.stdout


def test_a_broken_provisioner_is_caught(tmp_path):
    broken = (ROOT / "lab" / "Vagrantfile").read_text().replace(
        'ansible.playbook = "../site.yml"', 'ansible.playbook_typo = "../site.yml"')
    result = validate(tmp_path, "libvirt", vagrantfile=broken)
    assert result.returncode != 0
    assert "playbook_typo" in result.stdout + result.stderr
