"""The role's peer removal (tasks/peer_remove.yml, what playbooks/replace_host.yml runs with
``-e jetraft_replace_old=OLD``) against running five-server clusters of both kinds: a dead
server is removed from the meta group through a surviving one, as the system account's
user, and a second run changes nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster import Cluster
from playbook import ROOT, flat, local_inventory, run_playbook
from servers import KINDS

TAGS = [["az:a"], ["az:a"], ["az:b"], ["az:b"], ["az:c"]]
ACCOUNTS = """
accounts {
  $SYS { users [ { user: sys, password: s3cret-sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
"""
PLAY = """---
- name: Remove a dead server
  hosts: jetraft
  gather_facts: false
  tasks:
    - name: The old member is removed
      ansible.builtin.include_role:
        name: jetraft_server
        tasks_from: peer_remove
      vars:
        __jetraft_server_remove_peer: n5
"""


def removal(result) -> str:
    """How the removal task ended: ``changed``, ``ok`` or ``failed``."""
    task = result.stdout.split("The old member is removed: n5]", 1)[1].split("TASK [", 1)[0]
    return next(word for word in ("changed", "ok", "fatal") if f"{word}: [" in task)


def meta(c: Cluster, name: str) -> dict:
    return c.servers[name].monitor("/jsz").get("meta_cluster", {})


def wait_meta(c: Cluster, predicate, what: str, timeout: float = 60.0, dead: str = "") -> dict:
    """The meta leader's /jsz meta_cluster once ``predicate`` holds for it (a leader other
    than ``dead``); fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        view = {}
        for name in ("n1", "n2", "n3", "n4"):
            try:
                view = meta(c, name)
            except OSError:
                continue
            if view.get("leader") and view["leader"] != dead:
                leader = meta(c, view["leader"])
                if predicate(leader):
                    return leader
        assert time.monotonic() < deadline, f"{what}: {view}\n{c.outputs()}"
        time.sleep(0.2)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_server_is_removed_once_and_a_rerun_changes_nothing(kind, tmp_path):
    with Cluster(kind, tmp_path / "c", 5, jetstream=True, unique_tag="az:", tags=TAGS,
                 extra=ACCOUNTS) as c:
        c.start()
        c.wait_formed(60)
        wait_meta(c, lambda m: len(m.get("replicas", [])) == 4, "a meta group of five")
        c.kill("n5")
        wait_meta(c, lambda m: True, "a meta leader other than n5", dead="n5")
        hosts = {name: {"ansible_host": "127.0.0.1", "jetraft_server_client_port": c.members[name].port}
                 for name in ("n1", "n2", "n3", "n4")}
        inventory = local_inventory(tmp_path / "hosts.yml", hosts=hosts, jetraft_server_tls=False,
                                    jetraft_server_sys_user="sys", jetraft_server_sys_password="s3cret-sys",
                                    jetraft_server_route_password="unused")
        playbook = ROOT / "playbooks" / "_test_peer_remove.yml"
        playbook.write_text(PLAY)
        try:
            first = run_playbook("_test_peer_remove", inventory)
            second = run_playbook("_test_peer_remove", inventory)
        finally:
            playbook.unlink()
        assert first.returncode == 0, flat(first)[-3000:]
        assert removal(first) == "changed" and "s3cret-sys" not in flat(first)
        assert "changed=1 " in first.stdout
        leader = wait_meta(c, lambda m: "n5" not in {r["name"] for r in m.get("replicas", [])},
                           "n5 out of the meta group", dead="n5")
        assert leader["cluster_size"] == 4
        assert second.returncode == 0, flat(second)[-3000:]
        assert removal(second) == "ok", flat(second)[-3000:]
        assert "changed=1 " not in second.stdout
        assert not list(Path("/tmp").glob("ansible.*.json")), "the context file was left behind"
