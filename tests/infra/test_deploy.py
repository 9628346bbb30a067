"""What site.yml left on every host, seen over SSH with testinfra (the Ansible backend
reads the same inventory site.yml used)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import INVENTORY

testinfra_hosts = [f"ansible://jetraft?ansible_inventory={INVENTORY}"]

CONFIG = "/etc/jetraft/jetraft.conf"
STORE = "/var/lib/jetraft"
TLS = "/etc/jetraft/tls"


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


def _http_json(host, path: str) -> dict:
    """GET ``path`` on the monitoring port from the host itself: https, verified against
    the CA bundle the server trusts."""
    cmd = host.run("python3 -c 'import ssl, sys, urllib.request; "
                   "ctx = ssl.create_default_context(cafile=\"%s/ca.crt\"); "
                   "sys.stdout.write(urllib.request.urlopen(\"https://127.0.0.1:8222%s\", timeout=5, "
                   "context=ctx).read().decode())'" % (TLS, path))
    assert cmd.rc == 0, cmd.stderr
    return json.loads(cmd.stdout)


def test_the_service_is_enabled_and_running(host):
    service = host.service("jetraft")
    assert service.is_enabled
    assert service.is_running


@pytest.mark.parametrize("port", [4222, 6222, 8222])
def test_the_client_route_and_monitoring_ports_listen(host, port):
    assert host.socket(f"tcp://0.0.0.0:{port}").is_listening


def test_the_configuration_names_this_server_routes_to_the_others_and_tags_its_zone(host, hostvars):
    conf = host.file(CONFIG).content_string
    name = hostvars["inventory_hostname"]
    assert re.search(rf'server_name\s*[:=]?\s*"{re.escape(name)}"', conf)
    others = [h for h in hostvars["groups"]["jetraft"] if h != name]
    routes = re.findall(r"nats://[^\"]*@([^:\"]+):6222", conf)
    assert len(routes) == len(others) == 4
    assert hostvars["ansible_host"] not in routes
    assert f'"az:{hostvars["jetraft_zone"]}"' in conf
    assert 'unique_tag' in conf and '"az:"' in conf


def test_the_sys_user_is_a_bcrypt_hash_never_the_password(host, hostvars):
    conf = host.file(CONFIG).content_string
    assert re.search(r'"\$2[ab]\$\d\d\$[./A-Za-z0-9]{53}"', conf)
    assert hostvars["jetraft_server_sys_password"] not in conf
    for account in hostvars.get("jetraft_server_accounts", {}).values():
        for user in account.get("users", []):
            assert user["password"] not in conf


@pytest.mark.parametrize("path, mode, owner, group", [
    (CONFIG, 0o640, "root", "jetraft"),
    ("/etc/jetraft", 0o750, "root", "jetraft"),
    ("/etc/systemd/system/jetraft.service", 0o644, "root", "root"),
    (STORE, 0o750, "jetraft", "jetraft"),
    (TLS, 0o750, "root", "jetraft"),
    (f"{TLS}/server.key", 0o600, "jetraft", "jetraft"),
    (f"{TLS}/server.crt", 0o644, "root", "root"),
    (f"{TLS}/ca.crt", 0o644, "root", "root"),
])
def test_file_modes_and_owners(host, path, mode, owner, group):
    f = host.file(path)
    assert f.exists
    assert (f.mode, f.user, f.group) == (mode, owner, group)


def test_the_store_is_mounted_from_the_non_rotational_data_disk_with_noatime(host, hostvars):
    mount = host.mount_point(STORE)
    assert mount.exists
    assert "noatime" in mount.options
    device = hostvars["jetraft_storage_device"]
    assert mount.device == device
    name = device.rsplit("/", 1)[-1]
    assert host.file(f"/sys/block/{name}/queue/rotational").content_string.strip() == "0"
    assert host.file(f"{STORE}").exists


@pytest.mark.parametrize("command", ["jetraft", "jetraft-server", "jetraft-validate"])
def test_every_installed_command_answers_help(host, command):
    shown = host.run(f"/opt/jetraft/bin/{command} --help")
    assert shown.rc == 0 and "Usage:" in shown.stdout, shown.stderr[-2000:]


def test_an_operator_on_the_host_lists_streams_and_servers_as_typed(host, hostvars):
    """`jetraft` is on root's PATH and root's selected context reaches this host's server
    with an account's user (TLS with the cluster's CA); the system context sees every server."""
    streams = host.run("sh -lc 'jetraft stream ls --names'")
    assert streams.rc == 0, streams.stdout[-1000:] + streams.stderr[-2000:]
    system = f"{hostvars.get('jetraft_cluster_name', 'C1')}-system".lower()
    servers = host.run(f"sh -lc 'jetraft --context {system} server list'")
    assert servers.rc == 0, servers.stderr[-2000:]
    assert all(name in servers.stdout for name in hostvars["groups"]["jetraft"]), servers.stdout


def test_healthz_is_ok(host):
    assert _http_json(host, "/healthz") == {"status": "ok"}


def test_a_meta_leader_sees_every_peer_current(host, hostvars):
    meta = _http_json(host, "/jsz")["meta_cluster"]
    assert meta["cluster_size"] == 5
    assert meta["leader"] in hostvars["groups"]["jetraft"]
    if meta["leader"] == hostvars["inventory_hostname"]:
        assert sorted(r["name"] for r in meta["replicas"] if r["current"]) == sorted(
            h for h in hostvars["groups"]["jetraft"] if h != meta["leader"])


#: Scrapes /metrics on the host with the server's own virtualenv (it has prometheus_client)
#: and prints each sample as JSON: [name, labels, value].
_SCRAPE = r"""
import json, ssl, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
ctx = ssl.create_default_context(cafile="%s/ca.crt")
text = urllib.request.urlopen("https://127.0.0.1:8222/metrics", timeout=5, context=ctx).read().decode()
print(json.dumps([[s.name, s.labels, s.value] for f in text_string_to_metric_families(text) for s in f.samples]))
"""


def test_metrics_parse_and_say_what_the_cluster_is(host, hostvars):
    cmd = host.run("/opt/jetraft/bin/python -c %s" % _shell_quote(_SCRAPE % TLS))
    assert cmd.rc == 0, cmd.stderr
    samples = json.loads(cmd.stdout)
    values = {}
    for name, labels, value in samples:
        values.setdefault(name, []).append((labels, value))
    assert values["jetraft_scrape_collector_up"] and all(v == 1 for _, v in values["jetraft_scrape_collector_up"])
    others = len(hostvars["groups"]["jetraft"]) - 1
    assert values["jetraft_routes"] == [({}, others)]
    meta = [v for labels, v in values["jetraft_raft_is_leader"] if labels.get("group") == "_meta_"]
    assert meta in ([0.0], [1.0])
    if meta == [1.0]:                   # the meta leader sees every other server current
        current = [labels["peer"] for labels, v in values["jetraft_raft_replica_current"]
                   if labels.get("group") == "_meta_" and v == 1]
        assert sorted(current) == sorted(h for h in hostvars["groups"]["jetraft"]
                                         if h != hostvars["inventory_hostname"])


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
