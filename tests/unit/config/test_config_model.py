"""The typed configuration: ServerConfig defaults, keys and aliases as nats-server
server/opts.go reads them, warnings, errors and validation."""

from __future__ import annotations

import dataclasses

import pytest

from jetraft.config import (
    AccountConfig,
    AuthorizationConfig,
    ClusterConfig,
    ConfigError,
    JetStreamConfig,
    LoggingConfig,
    RouteURL,
    ServerConfig,
    UserConfig,
    config_from_text,
    load_config,
    parse_route_url,
    validate,
)

HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"


def cfg(text: str, **env: str) -> ServerConfig:
    return config_from_text(text, "s.conf", env=env)


def error(text: str, **env: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        cfg(text, **env)
    return e.value


# -- defaults --------------------------------------------------------------------------------


def test_defaults_are_nats_server_defaults():
    config = cfg("# empty\n")
    assert config == ServerConfig(warnings=("s.conf:1:1: config has no values or is empty",))
    assert (config.host, config.port, config.http_host, config.http_port) == ("0.0.0.0", 4222, "0.0.0.0", None)
    assert (config.max_payload, config.max_connections, config.max_control_line, config.max_pending) == (
        1048576,
        65536,
        4096,
        67108864,
    )
    assert (config.write_deadline, config.ping_interval, config.ping_max) == (10.0, 120.0, 2)
    assert (config.lame_duck_duration, config.lame_duck_grace_period) == (120.0, 10.0)
    assert config.logging == LoggingConfig(debug=False, trace=False, logtime=True, log_file=None)
    assert dict(config.accounts) == {"$G": AccountConfig("$G"), "$SYS": AccountConfig("$SYS")}
    assert config.system_account == "$SYS"
    assert (config.jetstream, config.cluster, config.authorization, config.source) == (None, None, None, None)
    assert config.jetstream_accounts() == ()


def test_load_config_records_source_and_reports_unreadable_files(tmp_path):
    path = tmp_path / "n.conf"
    path.write_text("port: 4333\n")
    assert load_config(path, env={}).source == str(path)
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "missing.conf", env={})
    assert str(e.value) == f"{tmp_path / 'missing.conf'}:0:0: cannot read configuration file: No such file or directory"


# -- addresses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("listen: 4333", "0.0.0.0", 4333),
        ("listen: '127.0.0.1:4333'", "127.0.0.1", 4333),
        ("listen: 127.0.0.1:4333", "127.0.0.1", 4333),
        ("listen: localhost:4333", "localhost", 4333),
        ("listen: ':4333'", "0.0.0.0", 4333),
        ("listen: '[::1]:4333'", "::1", 4333),
        ("listen: '4333'", "0.0.0.0", 4333),
        ("host: 10.0.0.1\nport: 4333", "10.0.0.1", 4333),
        ("net: 10.0.0.1\nport: -1", "10.0.0.1", -1),
        ("port: 0", "0.0.0.0", 4222),
        ("listen: 1.2.3.4:1\nport: 4333", "1.2.3.4", 4333),
        ("port: 4333\nlisten: 1.2.3.4:1", "1.2.3.4", 1),
    ],
)
def test_client_listen_host_and_port(text, host, port):
    config = cfg(text)
    assert (config.host, config.port) == (host, port)


@pytest.mark.parametrize(
    ("text", "http_host", "http_port"),
    [
        ("http: 8222", "0.0.0.0", 8222),
        ("http: '127.0.0.1:8222'", "127.0.0.1", 8222),
        ("http_port: 8222", "0.0.0.0", 8222),
        ("monitor_port: 8222", "0.0.0.0", 8222),
        ("host: 10.0.0.2\nhttp_port: 8222", "10.0.0.2", 8222),
        ("http_port: 0", "0.0.0.0", None),
    ],
)
def test_monitoring_listener(text, http_host, http_port):
    config = cfg(text)
    assert (config.http_host, config.http_port) == (http_host, http_port)


ADDRESS_ERRORS = [
    ("port: '4222'", 1, 7, "port: expected an integer, got a string ('4222')"),
    ("port: 70000", 1, 7, "port: 70000 is out of range (a port is 0 to 65535, or -1 for a random port)"),
    ("port: -2", 1, 7, "port: -2 is out of range (a port is 0 to 65535, or -1 for a random port)"),
    ("listen: 'a:b:c'", 1, 9, "listen: could not parse address 'a:b:c': expected host:port or a port"),
    ("listen: 'host:'", 1, 9, "listen: could not parse port '' in 'host:'"),
    ("listen: true", 1, 9, "listen: expected an integer or a string, got a boolean (true)"),
    ("http: 'h:99999'", 1, 7, "http: 99999 is out of range (a port is 0 to 65535, or -1 for a random port)"),
    ("host: 4", 1, 7, "host: expected a string, got an integer (4)"),
]


# -- scalar settings ------------------------------------------------------------------------------


def test_limits_logging_and_files():
    config = cfg(
        """
        server_name: n1
        max_payload: 2MB
        max_connections: 100
        max_control_line: 8kb
        max_pending: 128MB
        ping_max: 5
        debug: true
        trace: yes
        logtime: off
        logfile: /var/log/jetraft.log
        pidfile: /run/jetraft.pid
        """
    )
    assert config.server_name == "n1"
    assert (config.max_payload, config.max_connections, config.max_control_line, config.max_pending) == (
        2 * 2**20,
        100,
        8 * 1024,
        128 * 2**20,
    )
    assert config.ping_max == 5
    assert cfg("ping_max: 0").ping_max == 2  # 0 means the default, as nats-server
    assert config.logging == LoggingConfig(debug=True, trace=True, logtime=False, log_file="/var/log/jetraft.log")
    assert config.pid_file == "/run/jetraft.pid"
    assert config.warnings == ()


def test_keys_are_case_insensitive_and_aliases_work():
    config = cfg("Server_Name: n2\nMAX_CONN: 0\nlog_file: a.log\npid_file: p\nLISTEN: 4333")
    assert (config.server_name, config.max_connections, config.logging.log_file, config.pid_file, config.port) == (
        "n2",
        -1,
        "a.log",
        "p",
        4333,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ping_interval: '30s'", 30.0),
        ("ping_interval: \"100ms\"", 0.1),
        ("ping_interval: '2m'", 120.0),
        ("ping_interval: '1h30m'", 5400.0),
        ("ping_interval: 5s", 5.0),
        ("ping_interval: '1.5s'", 1.5),
    ],
)
def test_durations_are_go_duration_strings_in_seconds(text, expected):
    config = cfg(text)
    assert config.ping_interval == expected
    assert config.warnings == ()


def test_integer_duration_is_seconds_with_a_warning():
    config = cfg("write_deadline: 5\nping_interval: 2m")
    assert (config.write_deadline, config.ping_interval) == (5.0, 2_000_000.0)
    assert config.warnings == (
        's.conf:1:17: write_deadline: 5 should be a duration string such as "5s"; read as 5 seconds',
        's.conf:2:16: ping_interval: unquoted 2m is the number 2000000 (size suffix), read as 2000000 seconds; '
        'write "2m" for a duration',
    )


def test_lame_duck_settings():
    config = cfg("lame_duck_duration: '45s'\nlame_duck_grace_period: '5s'")
    assert (config.lame_duck_duration, config.lame_duck_grace_period) == (45.0, 5.0)


SCALAR_ERRORS = [
    ("ping_interval: 'soon'", 1, 16, "ping_interval: invalid duration 'soon'"),
    ("ping_interval: '5'", 1, 16, "ping_interval: missing unit in duration '5'"),
    ("write_deadline: '3d'", 1, 17, "write_deadline: unknown unit 'd' in duration '3d'"),
    ("ping_interval: 1.5", 1, 16, "ping_interval: expected a string or an integer, got a float (1.5)"),
    ("lame_duck_duration: '10s'", 1, 21, "lame_duck_duration: invalid lame_duck_duration of 10s, minimum is 30 seconds"),
    ("lame_duck_grace_period: '-1s'", 1, 25, "lame_duck_grace_period: invalid lame_duck_grace_period, needs to be positive"),
    ("max_payload: 3GB", 1, 14, "max_payload: 3221225472 is too big (maximum 2147483647)"),
    ("max_payload: 0", 1, 14, "max_payload: 0 is too small (minimum 1)"),
    ("server_name: 'n 1'", 1, 14, "server_name: server name cannot contain spaces"),
    ("server_name: [n1]", 1, 14, "server_name: expected a string, got an array"),
    ("debug: 1", 1, 8, "debug: expected a boolean, got an integer (1)"),
    ("\nmax_payload: 8MB\nmax_pending: 4MB", 2, 14, "max_payload (8388608) cannot be higher than max_pending (4194304)"),
    ("lame_duck_duration: '30s'\nlame_duck_grace_period: '30s'", 2, 25,
     "lame duck grace period (30s) should be strictly lower than lame duck duration (30s)"),
]  # fmt: skip


def test_server_tags_are_lower_cased_trimmed_and_unique():
    assert cfg("server_tags: ['AZ:Zone-A', ' ssd ', 'az:zone-a', '']").server_tags == ("az:zone-a", "ssd")
    assert cfg("server_tags: 'az:b'").server_tags == ("az:b",)
    assert error("server_tags: [a, 1]").message == "server_tags[1]: expected a string, got an integer (1)"


# -- jetstream ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "enabled"),
    [
        ("jetstream {}", True),
        ("jetstream: enabled", True),
        ("jetstream: Enable", True),
        ("jetstream: true", True),
        ("jetstream: on", True),
        ("jetstream: false", False),
        ("jetstream: disabled", False),
        ("jetstream { enabled: false }", False),
        ("jetstream { enabled: true, store_dir: /d }", True),
        ("", False),
    ],
)
def test_jetstream_enabled_forms(text, enabled):
    config = cfg(text)
    assert (config.jetstream is not None) == enabled


def test_jetstream_settings_and_aliases():
    config = cfg(
        """
        jetstream {
          storedir: "/data/js"
          max_mem: 1G
          max_file_store: 10GB
          sync_interval: "30s"
          unique_tag: " AZ: "
          domain: hub
        }
        """
    )
    assert config.jetstream == JetStreamConfig(
        store_dir="/data/js",
        max_memory_store=10**9,
        max_file_store=10 * 2**30,
        sync_interval=30.0,
        sync_always=False,
        unique_tag="az:",
        domain="hub",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("jetstream { store: /a, max_memory_store: '1G', max_file: '512M' }", ("/a", 2**30, 512 * 2**20, None, False)),
        ("jetstream { store_dir: /b, max_mem_store: -1, sync: always }", ("/b", None, None, None, True)),
        ("jetstream { sync: ALWAYS, max_file: '' }", (None, None, 0, None, True)),
        ("store_dir: /top\njetstream: enabled", ("/top", None, None, None, False)),
    ],
)
def test_jetstream_store_size_and_sync_forms(text, expected):
    js = cfg(text).jetstream
    assert js is not None
    assert (js.store_dir, js.max_memory_store, js.max_file_store, js.sync_interval, js.sync_always) == expected


JETSTREAM_ERRORS = [
    ("jetstream: maybe", 1, 12, "jetstream: expected 'enabled' or 'disabled', got 'maybe'"),
    ("jetstream: 1", 1, 12, "jetstream: expected a boolean or a string or a map, got an integer (1)"),
    ("jetstream { max_mem: '1X' }", 1, 22,
     "jetstream.max_mem: a size written as a string must be a number followed by K, M, G or T, got '1X'"),
    ("jetstream { domain: 'a.b' }", 1, 21, "jetstream.domain: invalid domain name: may not contain ., * or > or spaces"),
    ("jetstream { enabled: 'yes' }", 1, 22, "jetstream.enabled: expected a boolean, got a string ('yes')"),
    ("store_dir: /a\njetstream { store_dir: /b }", 2, 24, "duplicate 'store_dir' configuration (first set at s.conf:1:12)"),
    ("jetstream { sync: 'x' }", 1, 19, "jetstream.sync: invalid duration 'x'"),
]  # fmt: skip


def test_jetstream_accounts_rule():
    assert cfg("jetstream {}\naccounts { A { jetstream: enabled }, B {} }").jetstream_accounts() == ("A",)
    assert cfg("jetstream {}\naccounts { $SYS {} }").jetstream_accounts() == ("$G",)
    assert cfg("accounts { A { jetstream: enabled } }").jetstream_accounts() == ()


# -- cluster -----------------------------------------------------------------------------------


def test_cluster_block():
    config = cfg(
        """
        server_name: n1
        cluster {
          name: C1
          listen: 10.0.0.1:7222
          authorization { user: ruser, password: "T0p", timeout: 0.5 }
          routes: [
            nats://ruser:T0p@10.0.0.2:7222
            nats-route://10.0.0.3
            "nats://[fd00::4]:7222"
            nats://u%40x:p%3Aw@h:1
          ]
        }
        """
    )
    assert config.cluster == ClusterConfig(
        name="C1",
        host="10.0.0.1",
        port=7222,
        routes=(
            RouteURL("nats", "10.0.0.2", 7222, "ruser", "T0p"),
            RouteURL("nats-route", "10.0.0.3", 6222),
            RouteURL("nats", "fd00::4", 7222),
            RouteURL("nats", "h", 1, "u@x", "p:w"),
        ),
        user="ruser",
        password="T0p",
        auth_timeout=0.5,
    )
    assert str(config.cluster.routes[0]) == "nats://ruser:[REDACTED]@10.0.0.2:7222"
    assert str(config.cluster.routes[2]) == "nats://[fd00::4]:7222"


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [("'0.0.0.0:6222'", "0.0.0.0", 6222), ("':7000'", "0.0.0.0", 7000), ("7001", "0.0.0.0", 7001), ("'7002'", "0.0.0.0", 7002),
     ("localhost:6222", "localhost", 6222)],
)  # fmt: skip
def test_cluster_listen_forms(listen, host, port):
    cluster = cfg(f"cluster {{ name: c, listen: {listen} }}").cluster
    assert cluster is not None and (cluster.host, cluster.port) == (host, port)


def test_cluster_host_port_keys_and_defaults():
    cluster = cfg("cluster { name: c, host: 10.1.1.1, port: 7777 }").cluster
    assert cluster is not None and (cluster.host, cluster.port, cluster.routes, cluster.auth_timeout) == ("10.1.1.1", 7777, (), 2.0)


def test_duplicate_route_is_a_warning():
    config = cfg("cluster { name: c, routes: [nats://a:1, nats://b:2, nats://a:1] }")
    assert config.cluster is not None and [r.host for r in config.cluster.routes] == ["a", "b"]
    assert config.warnings == ("s.conf:1:53: cluster.routes[2]: duplicate route entry 'nats://a:1' detected, ignored",)


CLUSTER_ERRORS = [
    ("cluster {\n  listen: 6222\n}", 1, 1, "cluster has no name: jetraft requires cluster { name: ... }"),
    ("server_name: n\ncluster: 6222", 2, 10, "cluster: expected a map, got an integer (6222)"),
    ("cluster { name: 'C 1' }", 1, 17, "cluster.name: cluster name cannot contain spaces"),
    ("\njetstream: enabled\ncluster { name: C1 }", 2, 1, "jetstream cluster requires `server_name` to be set"),
    ("cluster { name: c, routes: ['http://h:1'] }", 1, 29,
     "cluster.routes[0]: invalid route URL 'http://h:1': expected nats://host:port or nats-route://host:port"),
    ("cluster { name: c, routes: ['h:6222'] }", 1, 29,
     "cluster.routes[0]: invalid route URL 'h:6222': expected nats://host:port or nats-route://host:port"),
    ("cluster { name: c, routes: ['nats://h:99999'] }", 1, 29,
     "cluster.routes[0]: invalid route URL 'nats://h:99999': Port out of range 0-65535"),
    ("cluster { name: c, routes: ['nats://h:x'] }", 1, 29,
     "cluster.routes[0]: invalid route URL 'nats://h:x': Port could not be cast to integer value as 'x'"),
    ("cluster { name: c, routes: ['nats://:1'] }", 1, 29, "cluster.routes[0]: invalid route URL 'nats://:1': no host"),
    ("cluster { name: c, routes: ['nats://h:1/p'] }", 1, 29,
     "cluster.routes[0]: invalid route URL 'nats://h:1/p': unexpected path, query or fragment"),
    ("cluster { name: c, routes: nats://h:1 }", 1, 28, "cluster.routes: expected an array, got a string ('nats://h:1')"),
    ("cluster { name: c, authorization { users: [] } }", 1, 36,
     "cluster.authorization.users: cluster authorization does not allow multiple users"),
    ("cluster { name: c, authorization { token: t } }", 1, 36, "cluster.authorization.token: cluster authorization does not support tokens"),
    ("cluster { name: c, port: 65536 }", 1, 26, "cluster.port: 65536 is out of range (a port is 0 to 65535, or -1 for a random port)"),
]  # fmt: skip


# -- authorization, accounts, users ----------------------------------------------------------


def test_authorization_users_go_to_the_global_account():
    config = cfg(
        f"""
        authorization {{
          timeout: "3s"
          users: [
            {{ user: alice, password: "{HASH}" }}
            {{ username: bob, pass: plain }}
          ]
        }}
        no_auth_user: bob
        """
    )
    assert config.authorization == AuthorizationConfig(timeout=3.0)
    assert config.accounts["$G"].users == (UserConfig("alice", HASH, "$G"), UserConfig("bob", "plain", "$G"))
    assert [u.is_bcrypt for u in config.all_users()] == [True, False]
    assert config.no_auth_user == "bob"


@pytest.mark.parametrize(
    ("password", "is_bcrypt"),
    [(HASH, True), ("$2b$10$x", True), ("$2y$04$", True), ("$2x$12$abc", True), ("$2c$11$abc", False),
     ("$2a$1$abc", False), ("2a$11$abc", False), ("secret", False), (None, False)],
)  # fmt: skip
def test_is_bcrypt_as_nats_server(password, is_bcrypt):
    assert UserConfig("u", password).is_bcrypt is is_bcrypt


def test_single_user_and_token_authorization():
    assert cfg("authorization { user: a, password: b, timeout: 1 }").authorization == AuthorizationConfig("a", "b", None, 1.0)
    assert cfg("authorization { token: s3cr3t }").authorization == AuthorizationConfig(token="s3cr3t")


def test_high_auth_timeout_warns():
    config = cfg("authorization { timeout: 61 }")
    assert config.authorization is not None and config.authorization.timeout == 61.0
    assert config.warnings == (
        "s.conf:1:26: authorization.timeout: timeout of 61 seconds is high, consider keeping it under 60 seconds "
        "(an unquoted 1m is 1000000; write '1m')",
    )


def test_accounts_with_users_and_jetstream():
    config = cfg(
        f"""
        system_account: SYS
        accounts {{
          SYS {{ users: [ {{ user: admin, password: "{HASH}" }} ] }}
          APP {{
            jetstream: enabled
            users: [ {{ user: app, password: app }} ]
          }}
          UNLIMITED {{ jetstream {{ max_mem: -1, max_file: -1, max_bytes_required: false, cluster_traffic: system }} }}
        }}
        jetstream {{}}
        """
    )
    assert list(config.accounts) == ["$G", "SYS", "APP", "UNLIMITED"]
    assert config.accounts["APP"] == AccountConfig("APP", (UserConfig("app", "app", "APP"),), True)
    assert config.accounts["SYS"].users == (UserConfig("admin", HASH, "SYS"),)
    assert config.system_account == "SYS"
    assert config.jetstream_accounts() == ("APP", "UNLIMITED")
    assert config.warnings == ()


NOT_ENFORCED = ("is accepted; jetraft enforces max_ack_pending, max_bytes_required, max_consumers, max_memory, "
                "max_storage, max_streams, memory_max_stream_bytes, storage_max_stream_bytes)")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ("cluster_traffic: owner", "s.conf:1:28: 'accounts.A.jetstream.cluster_traffic': this account JetStream "
                                   f"limit is not supported by jetraft (only 'system', no limit, {NOT_ENFORCED}"),
        ("max_mem: big", "s.conf:1:37: accounts.A.jetstream.max_mem: expected an integer, got a string ('big')"),
        ("max_streams: '10'", "s.conf:1:41: accounts.A.jetstream.max_streams: expected an integer, got a string ('10')"),
        ("max_bytes_required: 1", "s.conf:1:48: accounts.A.jetstream.max_bytes_required: expected a boolean, "
                                  "got an integer (1)"),
        ("max_speed: -1", "s.conf:1:28: unknown field 'accounts.A.jetstream.max_speed'"),
    ],
)
def test_account_jetstream_limits_not_enforced_are_refused(limits: str, message: str):
    assert str(error(f"accounts {{ A {{ jetstream {{ {limits} }} }} }}")) == message


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ("max_streams: 10, max_consumers: 5", (("max_streams", 10), ("max_consumers", 5))),
        ("streams: 2, consumers: 0", (("max_streams", 2), ("max_consumers", 0))),
        ("max_bytes_required: true, mem_max_stream_bytes: 1K, disk_max_stream_bytes: 1M",
         (("max_bytes_required", True), ("memory_max_stream_bytes", 1000),     # unquoted: powers of 10
          ("storage_max_stream_bytes", 1000 * 1000))),
        ("max_stream_bytes: true, memory_max_stream_bytes: 5, store_max_stream_bytes: 6",
         (("max_bytes_required", True), ("memory_max_stream_bytes", 5), ("storage_max_stream_bytes", 6))),
        ("max_bytes: false, max_mem: -1, max_file: 1G, max_ack_pending: -1",
         (("max_bytes_required", False), ("max_memory", -1), ("max_storage", 1000 ** 3), ("max_ack_pending", -1))),
        ("max_ack_pending: 100", (("max_ack_pending", 100),)),
        ("mem: 1K, memory: 2K, max_memory: 3K, store: 4, disk: 5, max_disk: 6, max_store: 7",
         (("max_memory", 3000), ("max_storage", 7))),      # the last alias written wins
    ],
)
def test_account_jetstream_limits_jetraft_enforces_are_read(limits: str, expected: tuple):
    """opts.go parseJetStreamForAccount's names and aliases, under JetStreamAccountLimits' JSON names."""
    config = cfg(f"accounts {{ A {{ jetstream {{ {limits} }} }} }}\njetstream {{}}")
    assert config.accounts["A"].jetstream_limits == expected
    assert config.jetstream_accounts() == ("A",)


def test_accounts_as_a_list_of_names():
    assert list(cfg("accounts: [A, B]").accounts) == ["$G", "A", "B", "$SYS"]


def test_variables_defined_inside_accounts_are_not_accounts():
    config = cfg("accounts {\n  PW = secret\n  A { users: [ { user: a, password: $PW } ] }\n}")
    assert list(config.accounts) == ["$G", "A", "$SYS"]
    assert config.accounts["A"].users == (UserConfig("a", "secret", "A"),)


ACCOUNT_ERRORS = [
    ("accounts { A { users: [ {user: x} ] }, B { users: [ {user: x} ] } }", 1, 60,
     "duplicate user 'x' detected (first at s.conf:1:32)"),
    ("authorization { users: [ {user: x} ] }\naccounts { A { users: [ {user: x} ] } }", 2, 32,
     "duplicate user 'x' detected (first at s.conf:1:33)"),
    ("accounts { A { users: [ {password: x} ] } }", 1, 25, "accounts.A.users[0]: user entry requires a user"),
    ("accounts { A { users: [ x ] } }", 1, 25, "accounts.A.users[0]: expected a map, got a string ('x')"),
    ("accounts { A { users: {} } }", 1, 23, "accounts.A.users: expected an array, got a map"),
    ("accounts { A: 1 }", 1, 15, "accounts.A: expected a map, got an integer (1)"),
    ("accounts { $G {} }", 1, 12, "'$G' is a reserved account"),
    ("accounts: [A, A]", 1, 15, "duplicate account 'A' (first at s.conf:1:12)"),
    ("accounts { A { jetstream: sometimes } }", 1, 27, "accounts.A.jetstream: expected 'enabled' or 'disabled', got 'sometimes'"),
    ("authorization { user: a, token: t }", 1, 1, "authorization: cannot have a user/pass and a token"),
    ("authorization { user: a, users: [] }", 1, 1, "authorization: cannot have a single user/pass and a users array"),
    ("authorization { token: t, users: [] }", 1, 1, "authorization: cannot have a token and a users array"),
    ("accounts { A { users: [ {user: x} ] } }\nauthorization { user: a }", 1, 32,
     "cannot have a single user/pass in authorization and users in accounts"),
    ("authorization { timeout: 'x' }", 1, 26, "authorization.timeout: invalid duration 'x'"),
    ("authorization { password: 5 }", 1, 27, "authorization.password: expected a string, got an integer (5)"),
    ("system_account: FOO", 1, 17, "system account 'FOO' is not defined in accounts"),
    ("accounts { $SYS { jetstream: enabled } }", 1, 19, "jetstream can not be enabled on the system account"),
    ("no_auth_user: ghost", 1, 15, "no_auth_user: 'ghost' present, but users are not defined"),
    ("authorization { users: [ {user: a} ] }\nno_auth_user: ghost", 2, 15,
     "no_auth_user: 'ghost' not present as user in authorization block or account configuration"),
]  # fmt: skip


def test_snapshot_and_catch_up_settings():
    js = cfg("jetstream { stream_compact: 500, stream_compact_size: 1MB, stream_compact_interval: 30s,"
             " meta_compact: 100, meta_compact_size: 64KB, max_outstanding_catchup: 512KB }").jetstream
    assert (js.stream_compact, js.stream_compact_size, js.stream_compact_interval_ns) == (500, 1 << 20, 30 * 10**9)
    assert (js.meta_compact, js.meta_compact_size, js.max_outstanding_catchup) == (100, 64 << 10, 512 << 10)
    defaults = cfg("jetstream {}").jetstream
    assert (defaults.stream_compact, defaults.stream_compact_size, defaults.stream_compact_interval) == (
        65536, 8 << 20, 120.0)
    for bad, message in (("stream_compact: 0", "too small"), ("stream_compact_size: 0", "positive size"),
                         ("stream_compact_interval: \"0s\"", "positive duration"),
                         ("meta_compact: -1", "too small"), ("max_outstanding_catchup: -1", "positive size")):
        with pytest.raises(ConfigError, match=message):
            cfg(f"jetstream {{ {bad} }}")


def test_system_alias_and_precedence():
    assert cfg("accounts { S {} }\nsystem: S").system_account == "S"
    assert cfg("accounts { S {}, T {} }\nsystem_account: S\nsystem: T").system_account == "S"


# -- logging ----------------------------------------------------------------------------------


def test_log_rotation_and_utc_keys_under_both_spellings():
    a = cfg("logfile: a.log\nlogfile_size_limit: 1KB\nlogfile_max_num: 3\nlogtime_utc: true\nsyslog: false")
    b = cfg("log_file: a.log\nlog_size_limit: 1024\nlog_max_num: 3\nlogtime_utc: true")
    expected = LoggingConfig(log_file="a.log", log_size_limit=1024, log_max_num=3, logtime_utc=True)
    assert a.logging == b.logging == expected
    assert a.warnings == b.warnings == ()


@pytest.mark.parametrize("text", ["syslog: true", 'remote_syslog: "udp://127.0.0.1:514"'])
def test_syslog_is_refused_rather_than_ignored(text):
    with pytest.raises(ConfigError) as e:
        cfg(text)
    assert "writes no syslog; refused rather than ignored" in str(e.value)


# -- warnings ---------------------------------------------------------------------------------


def test_keys_that_change_only_logging_profiling_or_tuning_are_warnings():
    config = cfg(
        """trace_verbose: true
prof_port: 6060
trace_headers: true
max_traced_msg_len: 10
jetstream { max_buffered_msgs: 1M, request_queue_limit: 100 }
accounts { A { msg_trace: { dest: t } } }
VAR = used
server_name: $VAR
"""
    )
    assert config.warnings == (
        "s.conf:1:1: 'trace_verbose' is not supported by jetraft, ignored",
        "s.conf:2:1: 'prof_port' is not supported by jetraft, ignored",
        "s.conf:3:1: 'trace_headers' is not supported by jetraft, ignored",
        "s.conf:4:1: 'max_traced_msg_len' is not supported by jetraft, ignored",
        "s.conf:5:13: 'jetstream.max_buffered_msgs' is not supported by jetraft, ignored",
        "s.conf:5:36: 'jetstream.request_queue_limit' is not supported by jetraft, ignored",
        "s.conf:6:16: 'accounts.A.msg_trace' is not supported by jetraft, ignored",
    )
    assert config.server_name == "used"


REFUSED = "is not supported by jetraft; refused rather than ignored (it matters for security, clustering or data retention)"


@pytest.mark.parametrize(
    ("text", "where", "label"),
    [
        ("operator: /etc/nats/op.jwt", "1:1", "operator"),
        ("resolver: MEMORY", "1:1", "resolver"),
        ("resolver_preload { ACC: jwt }", "1:1", "resolver_preload"),
        ("trusted: [OABC]", "1:1", "trusted"),
        ("port: 4222\nno_system_account: true", "2:1", "no_system_account"),
        ("allow_non_tls: true", "1:1", "allow_non_tls"),
        ("leafnodes { port: 7422 }", "1:1", "leafnodes"),
        ("gateway { name: g }", "1:1", "gateway"),
        ("websocket { port: 8080 }", "1:1", "websocket"),
        ("mqtt { port: 1883 }", "1:1", "mqtt"),
        ("mappings { a: b }", "1:1", "mappings"),
        ("max_subscriptions: 10", "1:1", "max_subscriptions"),
        ("client_advertise: x:4222", "1:1", "client_advertise"),
        ("proxies { trusted: [] }", "1:1", "proxies"),
        ("cluster { name: c, pool_size: 3 }", "1:20", "cluster.pool_size"),
        ("cluster { name: c, no_advertise: true }", "1:20", "cluster.no_advertise"),
        ("cluster { name: c, compression: off }", "1:20", "cluster.compression"),
        ("cluster { name: c, accounts: [A] }", "1:20", "cluster.accounts"),
        ("cluster { name: c, advertise: x }", "1:20", "cluster.advertise"),
        ("cluster { name: c, authorization { user: r, password: p, auth_callout {} } }", "1:58",
         "cluster.authorization.auth_callout"),
        ("jetstream { key: s3cr3t }", "1:13", "jetstream.key"),
        ("jetstream { ek: s3cr3t }", "1:13", "jetstream.ek"),
        ("jetstream { cipher: aes }", "1:13", "jetstream.cipher"),
        ("jetstream { strict: false }", "1:13", "jetstream.strict"),
        ("jetstream { limits { max_ack_pending: 10 } }", "1:13", "jetstream.limits"),
        ("authorization { auth_callout { issuer: x } }", "1:17", "authorization.auth_callout"),
        ("accounts { A { imports: [] } }", "1:16", "accounts.A.imports"),
        ("accounts { A { exports: [] } }", "1:16", "accounts.A.exports"),
        ("accounts { A { nkey: AABC } }", "1:16", "accounts.A.nkey"),
        ("accounts { A { mappings { a: b } } }", "1:16", "accounts.A.mappings"),
        ("accounts { A { limits { max_connections: 1 } } }", "1:16", "accounts.A.limits"),
        ("accounts { A { users: [ { user: u, allowed_connection_types: [STANDARD] } ] } }", "1:36",
         "accounts.A.users[0].allowed_connection_types"),
    ],
)
def test_keys_that_matter_for_security_clustering_or_retention_are_errors(text: str, where: str, label: str):
    assert str(error(text)) == f"s.conf:{where}: {label!r} {REFUSED}"


def test_nkey_users_are_errors():
    assert str(error("accounts { A { users: [ { nkey: UABC } ] } }")) == (
        "s.conf:1:27: 'accounts.A.users[0].nkey': nkey users are not supported by jetraft (use user and password)"
    )
    assert str(error("authorization { users: [ { user: u, password: p }, { nkey: UABC } ] }")).startswith(
        "s.conf:1:54: 'authorization.users[1].nkey': nkey users are not supported"
    )


@pytest.mark.parametrize(
    ("text", "where", "label"),
    [
        ("colour: blue", "1:1", "colour"),
        ("authorisation { user: u, password: p }", "1:1", "authorisation"),
        ("cluster { name: c, shape: round }", "1:20", "cluster.shape"),
        ("jetstream { speed: 11 }", "1:13", "jetstream.speed"),
        ("authorization { mood: ok }", "1:17", "authorization.mood"),
        ("authorization { users: [ { user: u, pasword: p } ] }", "1:37", "authorization.users[0].pasword"),
        ("accounts { A { usres: [] } }", "1:16", "accounts.A.usres"),
        ("cluster { name: c, authorization { usr: r } }", "1:36", "cluster.authorization.usr"),
    ],
)
def test_unknown_keys_are_errors_as_in_nats_server(text: str, where: str, label: str):
    # nats-server server/opts.go: unknownConfigFieldErr in every block, the top level included.
    assert str(error(text)) == f"s.conf:{where}: unknown field {label!r}"


def test_store_dir_without_jetstream_warns():
    assert cfg("store_dir: /x").warnings == ("s.conf:1:12: store_dir is set but JetStream is not enabled, ignored",)


def test_environment_variables_reach_typed_values():
    config = cfg("port: $P\nserver_name: $N\njetstream { store_dir: $D }", P="4999", N="n9", D="/srv/js")
    assert (config.port, config.server_name, config.jetstream) == (4999, "n9", JetStreamConfig(store_dir="/srv/js"))


# -- validate after command-line overrides ---------------------------------------------------


CLUSTERED = "server_name: n1\njetstream {}\ncluster {\n  name: C1\n  listen: 6222\n}\n"


@pytest.mark.parametrize(
    ("text", "line", "column", "message"), ADDRESS_ERRORS + SCALAR_ERRORS + JETSTREAM_ERRORS + CLUSTER_ERRORS + ACCOUNT_ERRORS
)
def test_typed_errors_name_the_place(text, line, column, message):
    err = error(text)
    assert (err.file, err.line, err.column, err.message) == ("s.conf", line, column, message)


def test_validate_accepts_a_loaded_configuration():
    validate(cfg(CLUSTERED))


def test_validate_names_the_file_while_the_value_is_the_files():
    config = dataclasses.replace(cfg(CLUSTERED), server_name=None)
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert str(e.value) == "s.conf:2:1: jetstream cluster requires `server_name` to be set"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": 70000}, "port: 70000 is out of range (a port is 0 to 65535, or -1 for a random port)"),
        ({"http_port": -5}, "http_port: -5 is out of range (a port is 0 to 65535, or -1 for a random port)"),
        ({"server_name": "a b"}, "server name cannot contain spaces"),
        ({"cluster": ClusterConfig(name=None)}, "cluster has no name: jetraft requires cluster { name: ... }"),
        ({"cluster": ClusterConfig(name="c", port=70000)}, "cluster port 70000 is out of range"),
        ({"jetstream": JetStreamConfig(store_dir="/cli"), "server_name": None, "cluster": ClusterConfig(name="c")},
         "jetstream cluster requires `server_name` to be set"),
        ({"system_account": "OPS"}, "system account 'OPS' is not defined in accounts"),
        ({"max_payload": 2 * 67108864}, "max_payload (134217728) cannot be higher than max_pending (67108864)"),
        ({"lame_duck_grace_period": 500.0}, "lame duck grace period (500s) should be strictly lower than lame duck duration (120s)"),
        ({"no_auth_user": "nobody"}, "no_auth_user: 'nobody' present, but users are not defined"),
    ],
)  # fmt: skip
def test_validate_after_overrides_points_at_the_command_line(changes, message):
    config = dataclasses.replace(cfg("server_name: n1\njetstream: {}\n"), **changes)
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert str(e.value) == f"<command line>:0:0: {message}"


def test_validate_duplicate_users_from_overrides():
    accounts = {
        "$G": AccountConfig("$G", (UserConfig("u"),)),
        "A": AccountConfig("A", (UserConfig("u", account="A"),)),
        "$SYS": AccountConfig("$SYS"),
    }
    with pytest.raises(ConfigError, match=r"^<command line>:0:0: duplicate user 'u' detected$"):
        validate(ServerConfig(accounts=accounts))


def test_parse_route_url_for_the_command_line():
    assert parse_route_url(" nats://u:p@10.0.0.2:7222 ") == RouteURL("nats", "10.0.0.2", 7222, "u", "p")
    assert parse_route_url("nats-route://h") == RouteURL("nats-route", "h", 6222)
    with pytest.raises(ConfigError) as e:
        parse_route_url("h:6222")
    assert str(e.value) == (
        "<command line>:0:0: --routes: invalid route URL 'h:6222': expected nats://host:port or nats-route://host:port"
    )


# Every key nats-server 2.15 reads (server/opts.go processConfigFileLine, parseCluster,
# parseJetStream, parseAuthorization, parseAccounts, parseUsers): jetraft knows each one,
# handling it, refusing it or tolerating it; none is an "unknown field".
NATS_SERVER_KEYS = {
    "{key}: 1": """account_resolver accounts accounts_resolver allow_non_tls authorization client_advertise cluster
        connect_error_reports debug default_js_domain default_sentinel disable_sublist_cache feature_flags gateway host
        http http_base_path http_port https https_port jetstream lame_duck_duration lame_duck_grace_period leaf leafnodes
        listen log_file log_max_num log_size_limit logfile logfile_max_num logfile_size_limit logtime logtime_utc mappings
        maps max_closed_clients max_conn max_connections max_control_line max_payload max_pending max_sub_tokens max_subs
        max_subscription_tokens max_subscriptions max_traced_msg_len monitor_port mqtt net no_auth_user
        no_fast_producer_stall no_header_support no_sublist_cache no_sys_acc no_system no_system_account ocsp ocsp_cache
        operator operators pid_file pidfile ping_interval ping_max port ports_file_dir prof_block_rate prof_port proxies
        proxy_protocol reconnect_error_reports remote_syslog resolver resolver_pinned_accounts resolver_preload
        resolver_tls root root_operator root_operators roots server_metadata server_name server_tags store_dir storedir
        syslog system system_account tls trace trace_headers trace_verbose trusted trusted_keys websocket write_deadline
        write_timeout ws""",
    "cluster { name: c, {key}: 1 }": """accounts advertise authorization cluster_advertise compression connect_backoff
        connect_retries host listen name net no_advertise permissions ping_interval ping_max pool_size port routes tls
        write_deadline write_timeout""",
    "jetstream { {key}: 1 }": """cipher domain ek enable enabled encryption_key extension_hint info_queue_limit key
        limits max_buffered_msgs max_buffered_size max_concurrent_io max_file max_file_store max_mem max_mem_store
        max_memory_store max_outstanding_catchup meta_compact meta_compact_size meta_compact_sync prev_ek
        prev_encryption_key prev_key request_queue_limit store store_dir storedir strict sync sync_interval tpm
        unique_tag""",
    "authorization { {key}: 1 }": """auth_callout auth_hook default_permission default_permissions pass password
        permissions proxy_required timeout token user username users""",
    "accounts { A { {key}: 1 } }": "default_permissions exports imports jetstream limits mappings maps msg_trace nkey "
                                   "trace_dest users",
    "accounts { A { users: [ { user: u, {key}: 1 } ] } }": """allowed_connection_types authorization clients
        connection_types nkey pass password permission permissions proxy_required user username""",
}


@pytest.mark.parametrize(
    "text", [template.replace("{key}", key) for template, keys in NATS_SERVER_KEYS.items() for key in keys.split()]
)
def test_every_nats_server_key_is_known(text: str):
    try:
        cfg(text)
    except ConfigError as e:
        assert "unknown field" not in e.message
