"""lab/Vagrantfile (the lab for a machine with a hypervisor) cannot boot here: no hypervisor,
and nothing is ever brought up. `vagrant validate` checks every machine's configuration,
the Ansible provisioner's included, for libvirt (vagrant-libvirt) and VirtualBox (without
VirtualBox installed only with --ignore-provider: its provider block is then not checked).
Vagrant's own API then shows what each machine would run, in order, and the inventory the
Vagrantfile writes is read back as the drills read it. Vagrant's state goes to a temporary
directory (VAGRANT_HOME, VAGRANT_DOTFILE_PATH): no box is fetched, lab/.vagrant is not made."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook import ROOT

from lab import topology, vagrant_inventory
from lab.drills import Target

pytestmark = pytest.mark.skipif(shutil.which("vagrant") is None,
                                reason="vagrant is not installed (Debian: apt-get install "
                                       "vagrant vagrant-libvirt)")

LAB = ROOT / "lab"
DISK = {"libvirt": "/dev/vdb", "virtualbox": "/dev/sdb"}


@pytest.fixture(scope="module")
def vagrant_env(tmp_path_factory):
    """Vagrant's environment: its home and the Vagrantfile's state in a temporary directory,
    no version checks, plugins from the system (Debian's vagrant-libvirt)."""
    tmp = tmp_path_factory.mktemp("vagrant")
    env = {k: v for k, v in os.environ.items() if k != "JETRAFT_LAB_SUITE"}
    return {**env, "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_HOME": str(tmp / "home"),
            "VAGRANT_DOTFILE_PATH": str(tmp / "dot"), "VAGRANT_NO_COLOR": "1"}


def vagrant(env, provider: str, *args: str, cwd=LAB):
    return subprocess.run(["vagrant", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**env, "VAGRANT_DEFAULT_PROVIDER": provider})


def assert_validated(result):
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Vagrantfile validated successfully." in result.stdout
    assert not re.search(r"error|warn|deprecat", result.stderr, re.I), result.stderr


def test_validates_for_libvirt(vagrant_env):
    had_state = (LAB / ".vagrant").exists()
    assert_validated(vagrant(vagrant_env, "libvirt", "validate"))
    assert (Path(vagrant_env["VAGRANT_DOTFILE_PATH"]) / "jetraft-secrets.yml").exists()
    assert (LAB / ".vagrant").exists() == had_state


def test_validates_for_virtualbox(vagrant_env):
    if shutil.which("VBoxManage"):
        assert_validated(vagrant(vagrant_env, "virtualbox", "validate"))
    else:   # VirtualBox not installed: everything but its provider block is checked
        assert_validated(vagrant(vagrant_env, "virtualbox", "validate", "--ignore-provider"))


def test_a_misspelt_provisioner_option_fails_validation(vagrant_env, tmp_path):
    text = (LAB / "Vagrantfile").read_text()
    assert "ansible.limit = " in text
    (tmp_path / "Vagrantfile").write_text(text.replace("ansible.limit = ", "ansible.limits = "))
    result = vagrant(vagrant_env, "libvirt", "validate", cwd=tmp_path)
    assert result.returncode != 0
    assert "limits" in result.stdout + result.stderr


# Each machine's provisioners in order, the Ansible provisioner's settings and the
# triggers, as Vagrant compiles them for a provider (validate's provider check bypassed).
DUMP = r"""
require "json"
require "vagrant"
env = Vagrant::Environment.new(cwd: Dir.pwd)
Vagrant.plugin("2").manager.providers.each do |_, d|
  d[0].define_singleton_method(:usable?) { |*| true }
end
provider = ARGV[0].to_sym
out = env.machine_names.to_h do |name|
  config = env.vagrantfile.machine_config(name, provider, env.boxes)[:config]
  provs = config.vm.provisioners.map do |p|
    c = p.config
    { "name" => p.name.to_s, "type" => p.type.to_s,
      "inline" => (c.inline if p.type == :shell),
      "ansible" => (p.type == :ansible ? { "playbook" => c.playbook, "limit" => c.limit,
        "groups" => c.groups, "host_vars" => c.host_vars, "extra_vars" => c.extra_vars,
        "become" => c.become, "config_file" => c.config_file } : nil) }
  end
  [name.to_s, { "box" => config.vm.box, "hostname" => config.vm.hostname,
                "networks" => config.vm.networks.map { |t, o| [t.to_s, o[:ip]] },
                "provisioners" => provs,
                "triggers" => config.trigger.before_triggers.map { |t| [t.name, t.command.to_s] } }]
end
puts JSON.generate(out)
"""


@pytest.fixture(scope="module")
def machines(vagrant_env):
    """machines(provider): every machine as Vagrant compiles it for that provider."""
    compiled = {}

    def get(provider: str, **env: str) -> dict:
        key = (provider, *sorted(env.items()))
        if key not in compiled:
            result = subprocess.run(["ruby", "-", provider], input=DUMP, cwd=LAB,
                                    capture_output=True, text=True, timeout=120,
                                    env={**vagrant_env, "VAGRANT_DEFAULT_PROVIDER": provider, **env})
            assert result.returncode == 0, result.stderr
            compiled[key] = json.loads(result.stdout.strip().splitlines()[-1])
        return compiled[key]
    return get


@pytest.mark.parametrize("provider", ["libvirt", "virtualbox"])
def test_five_machines_and_site_yml_once_from_the_last(machines, provider):
    ms = machines(provider)
    assert list(ms) == [h.name for h in topology.HOSTS]
    for h in topology.HOSTS:
        m = ms[h.name]
        # the default lab is mixed: zone c's host on Debian 13, the others on Debian 12
        box = "debian/trixie64" if h.name == "jr-c1" else "debian/bookworm64"
        assert (m["box"], m["hostname"]) == (box, h.name)
        assert ["private_network", h.address] in m["networks"]
        names = [p["name"] for p in m["provisioners"]]
        disk = ["non-rotational data disk"] if provider == "libvirt" else []
        last = h == topology.HOSTS[-1]
        assert names == ["host", *disk, *(["site.yml"] if last else [])], names
        assert bool(m["triggers"]) == last
    site = ms["jr-c1"]["provisioners"][-1]["ansible"]
    assert site["playbook"] == str(ROOT / "site.yml")
    assert site["config_file"] == str(ROOT / "ansible.cfg")
    assert site["limit"] == "all" and site["become"] is True
    groups = site["groups"]
    for zone in topology.ZONES:
        assert groups[f"zone_{zone}"] == [h.name for h in topology.zone_hosts(zone)]
        assert groups[f"zone_{zone}:vars"] == {"jetraft_zone": zone}
    assert groups["jetraft:children"] == ["zone_a", "zone_b", "zone_c"]
    # site.yml makes the PKI where inventories/lab/ (testinfra, the drills) says it is
    assert groups["jetraft:vars"]["jetraft_certs_dir"] == str(ROOT / "inventories" / "lab" / "pki")
    assert site["host_vars"] == {h.name: {"jetraft_storage_device": DISK[provider],
                                          "jetraft_server_address": h.address}
                                 for h in topology.HOSTS}
    secrets = yaml.safe_load(open(site["extra_vars"].lstrip("@")))
    assert set(secrets) == set(vagrant_inventory.SECRET_KEYS)
    assert {t for t, _ in ms["jr-c1"]["triggers"]} == {"inventories/lab"}
    assert {c for _, c in ms["jr-c1"]["triggers"]} == {"up", "provision", "reload"}


@pytest.mark.parametrize("suite,box", [("trixie", "debian/trixie64"),
                                       ("bookworm", "debian/bookworm64")])
def test_jetraft_lab_suite_puts_every_machine_on_one_debian(machines, suite, box):
    ms = machines("libvirt", JETRAFT_LAB_SUITE=suite)
    assert {name: m["box"] for name, m in ms.items()} == {h.name: box for h in topology.HOSTS}


def test_an_unknown_lab_suite_is_refused_naming_the_suites(vagrant_env):
    result = vagrant({**vagrant_env, "JETRAFT_LAB_SUITE": "buster"}, "libvirt", "validate")
    assert result.returncode != 0
    assert "JETRAFT_LAB_SUITE=buster: the lab suites are mixed, bookworm, trixie" in \
        result.stdout + result.stderr


def test_the_libvirt_data_disk_is_marked_non_rotational(machines):
    udev = machines("libvirt")["jr-a1"]["provisioners"][1]["inline"]
    assert 'KERNEL=="vdb", ATTR{queue/rotational}="0"' in udev
    assert "test \"$(cat /sys/block/vdb/queue/rotational)\" = 0" in udev
    vbox = (LAB / "Vagrantfile").read_text()
    assert '"--nonrotational", "on"' in vbox


def test_the_written_inventory_reaches_root_with_pinned_host_keys(machines, vagrant_env, tmp_path):
    ms = machines("libvirt")      # the lab's state is made in VAGRANT_DOTFILE_PATH
    dot = Path(vagrant_env["VAGRANT_DOTFILE_PATH"])
    # what the trigger runs before site.yml, into tmp_path rather than inventories/lab
    subprocess.run([sys.executable, "-m", "lab.vagrant_inventory", "--vagrant-dir", str(dot),
                    "--data-disk", "/dev/vdb", "--directory", str(tmp_path / "inv")],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    target = Target.from_inventory(tmp_path / "inv" / "hosts.yml")
    assert [(s.name, s.address, s.zone) for s in target.servers] == \
        [(h.name, h.address, h.zone) for h in topology.HOSTS]
    assert target.ssh_user == "root"
    assert target.ca_file == str((tmp_path / "inv" / "pki" / "ca-bundle.crt").resolve())
    assert target.ssh_key == str(dot / "jetraft-lab-key")
    assert target.known_hosts == str(dot / "jetraft-known-hosts")
    lab_secrets = yaml.safe_load((dot / "jetraft-secrets.yml").read_text())
    app = lab_secrets["jetraft_server_accounts"]["APP"]["users"][0]
    assert (target.app_user, target.app_password) == (app["user"], app["password"])
    known = dict(line.split(" ", 1)
                 for line in (dot / "jetraft-known-hosts").read_text().splitlines())
    public_key = (dot / "jetraft-lab-key.pub").read_text().strip()
    for h in topology.HOSTS:
        script = ms[h.name]["provisioners"][0]["inline"]
        assert f"echo '{public_key}' > /root/.ssh/authorized_keys" in script
        private = re.search(r"<<'KEY'\n(.*?)\nKEY\n", script, re.S).group(1)
        key_file = tmp_path / f"{h.name}.key"
        key_file.write_text(private + "\n")
        key_file.chmod(0o600)
        derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key_file)], check=True,
                                 capture_output=True, text=True).stdout.split()
        assert known[h.address] == f"{derived[0]} {derived[1]}"
