"""lab/membership.py: the campaign's membership changes through the appliance's playbooks.

The playbooks themselves run in the lab (the day-two drills and the campaign); here, what
each action does in order, what it skips and why, and what a failing playbook leaves in
the fault's record."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

import lab.day_two as day_two
from lab.membership import PlaybookMembership
from lab.nemesis import CampaignNemesis, NemesisError
from lab.schedule import Fault

from test_nemesis import RecordingRunner, fake_target


class FakeMachines:
    def __init__(self, inventory: Path):
        self.inventory, self.replaced, self.calls = inventory, [], []

    def replace(self, name: str, keep_event_log: Path | None = None) -> Path:
        self.replaced.append((name, keep_event_log))
        return self.inventory

    def add(self, names: list[str]) -> Path:
        self.calls.append(("add", names))
        return self.inventory.with_name("seven.yml")

    def retire(self, names: list[str]) -> Path:
        self.calls.append(("retire", names))
        return self.inventory.with_name("retired.yml")


def recording(m: PlaybookMembership) -> list:
    calls = []

    async def playbook(action, playbook, extra, limit=None):
        calls.append((action, playbook, extra, limit))
        return 2.5
    m.playbook = playbook
    return calls


def change(action: str, targets=("jr-b2",)) -> Fault:
    return Fault("membership", targets, 10.0, 200.0, {"action": action})


def inventory(path: Path, names: list[str]) -> Path:
    """A YAML inventory whose group jetraft holds ``names``."""
    path.write_text("jetraft:\n  hosts:\n" + "".join(f"    {n}: {{}}\n" for n in names))
    return path


FIVE = ["jr-a1", "jr-a2", "jr-b1", "jr-b2", "jr-c1"]


@pytest.mark.parametrize("flavour", ["jetraft", "nats-server"])
def test_scale_up_down_adds_the_spares_scales_out_then_retires_them_and_scales_down(tmp_path, flavour):
    inventory(tmp_path / "hosts.yml", FIVE)
    machines = FakeMachines(tmp_path / "hosts.yml")
    reconnected = []

    async def on_new_hosts(inventory):
        reconnected.append(inventory.name)
    built = []

    def build_package(dest):
        built.append(dest)
        return dest
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour=flavour, machines=machines,
                           on_new_hosts=on_new_hosts, build_package=build_package)
    calls = recording(m)
    inventories = []
    playbook = m.playbook

    async def noting(action, book, extra, limit=None):
        inventories.append(m.inventory.name)
        return await playbook(action, book, extra, limit)
    m.playbook = noting
    detail = asyncio.run(m(change("scale-up-down", ())))
    assert machines.calls == [("add", ["jr-a3", "jr-c2"]), ("retire", ["jr-a3", "jr-c2"])]
    assert reconnected == ["seven.yml", "retired.yml"]
    # jr-c2 installs from the Debian package (topology.PACKAGE_HOSTS), which carries jetraft
    # alone: built and named for jetraft only (the nats-server flavours install it from the
    # wheelhouse, campaign.FLAVOURS)
    package = {"jetraft_server_deb_dir": str(tmp_path / "deb")} if flavour == "jetraft" else {}
    assert built == ([tmp_path / "deb"] if flavour == "jetraft" else [])
    assert calls == [("scale-up-down", "playbooks/scale.yml", package, None),
                     ("scale-up-down", "playbooks/scale_down.yml", {}, None)]
    assert inventories == ["seven.yml", "retired.yml"]
    assert detail == {"action": "scale-up-down", "hosts": ["jr-a3", "jr-c2"],
                      "playbook": "playbooks/scale.yml, playbooks/scale_down.yml", "seconds": 5.0,
                      "scale_up_s": 2.5, "scale_down_s": 2.5, "log": "membership-scale-up-down.log"}


def test_scale_up_down_is_skipped_when_the_spares_are_servers_already(tmp_path):
    machines = FakeMachines(inventory(tmp_path / "hosts.yml", FIVE + ["jr-a3", "jr-c2"]))
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour="jetraft", machines=machines)
    calls = recording(m)
    detail = asyncio.run(m(change("scale-up-down", ())))
    assert detail == {"skipped": "the spares (jr-a3, jr-c2) are servers of the cluster already "
                                 "(a run on seven hosts)"}
    assert calls == [] and machines.calls == []


def test_scale_up_down_needs_machines(tmp_path):
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour="jetraft")
    calls = recording(m)
    assert "needs a provider that makes machines" in asyncio.run(m(change("scale-up-down", ())))["skipped"]
    assert calls == []


def test_replace_host_replaces_the_machine_reconnects_then_runs_the_playbooks(tmp_path):
    machines = FakeMachines(tmp_path / "new-hosts.yml")
    reconnected = []

    async def on_new_hosts(inventory):
        reconnected.append(inventory)
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour="jetraft", machines=machines,
                           extra={"jetraft_server_flavour": "jetraft"}, on_new_hosts=on_new_hosts)
    calls = recording(m)
    detail = asyncio.run(m(change("replace-host")))
    [(name, kept)] = machines.replaced
    assert name == "jr-b2" and kept.parent == tmp_path / "logs" / "jr-b2"
    assert kept.name.startswith("events.replaced-") and kept.name.endswith(".jsonl")
    assert reconnected == [tmp_path / "new-hosts.yml"] and m.inventory == tmp_path / "new-hosts.yml"
    assert calls == [("replace-host", "playbooks/replace_host.yml", {"jetraft_replace_host": "jr-b2"}, None),
                     ("replace-host", "lab/powerloss.yml", {}, "jr-b2")]
    assert detail == {"action": "replace-host", "playbook": "playbooks/replace_host.yml", "seconds": 5.0,
                      "log": "membership-replace-host.log"}


def test_replace_host_needs_machines_and_one_target(tmp_path):
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour="jetraft")
    assert "needs a provider that makes machines" in asyncio.run(m(change("replace-host")))["skipped"]
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour="jetraft",
                           machines=FakeMachines(tmp_path))
    with pytest.raises(NemesisError, match="replaces one host, not 2"):
        asyncio.run(m(change("replace-host", ("jr-a1", "jr-a2"))))


@pytest.mark.parametrize("flavour", ["jetraft", "nats-server"])
def test_peer_remove_readd_runs_rejoin_host_on_any_inventory(tmp_path, flavour):
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour=flavour)
    calls = recording(m)
    detail = asyncio.run(m(change("peer-remove-readd")))
    assert calls == [("peer-remove-readd", "playbooks/rejoin_host.yml",
                      {"jetraft_rejoin_host": "jr-b2"}, None)]
    assert detail == {"action": "peer-remove-readd", "playbook": "playbooks/rejoin_host.yml",
                      "seconds": 2.5, "log": "membership-peer-remove-readd.log"}
    with pytest.raises(NemesisError, match="rejoins one host, not 2"):
        asyncio.run(m(change("peer-remove-readd", ("jr-a1", "jr-a2"))))


def test_a_rolling_upgrade_of_nats_server_is_skipped(tmp_path):
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour="nats-server")
    calls = recording(m)
    assert "one nats-server version" in asyncio.run(m(change("rolling-upgrade")))["skipped"]
    assert calls == []


def test_a_failing_playbook_names_its_log_and_its_last_lines(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ansible-playbook"
    script.write_text("#!/bin/sh\necho \"PLAY RECAP $*\"\necho 'fatal: [jr-b2]: FAILED!'\nexit 2\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(day_two, "BIN", bin_dir)
    m = PlaybookMembership(tmp_path / "hosts.yml", tmp_path, flavour="jetraft",
                           extra={"jetraft_server_flavour": "jetraft"})
    with pytest.raises(NemesisError) as failed:
        asyncio.run(m.playbook("replace-host", "playbooks/replace_host.yml", {"jetraft_replace_host": "x"},
                               limit="x"))
    text = str(failed.value)
    assert "playbooks/replace_host.yml failed (exit 2" in text and "membership-replace-host.log" in text
    assert "fatal: [jr-b2]: FAILED!" in text and "--limit x" in text
    log = (tmp_path / "membership-replace-host.log").read_text()
    assert log.startswith("$ ") and '"jetraft_replace_host": "x"' in log


def test_the_nemesis_records_a_skipped_or_failed_change_and_goes_on(tmp_path):
    async def skipped(fault):
        return {"skipped": "not here"}

    async def failing(fault):
        raise NemesisError("playbooks/upgrade.yml failed (exit 2)")
    for runner, expected in ((skipped, ("not here", None)),
                             (failing, (None, "playbooks/upgrade.yml failed (exit 2)"))):
        nemesis = CampaignNemesis(fake_target(), runner=RecordingRunner(), membership=runner)
        record = asyncio.run(nemesis.apply(change("rolling-upgrade")))
        assert (record.skipped, record.detail.get("failed")) == expected
        assert (record.applied_ns is None) == (expected[0] is not None)
