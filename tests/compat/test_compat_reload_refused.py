"""A SIGHUP that changes an option nats-server cannot change at run time is refused whole,
by jetraft as by nats-server (server/reload.go diffOptions: "config reload not supported
for ..."): the server keeps serving with the configuration it had, other changes in the
same file included, and says which option stopped the reload."""

from __future__ import annotations

import signal
import time

import pytest
from compat_support import RawClient

REFUSED = "config reload not supported for"

#: (option as written before, as written after): options reload.go has no case for.
CHANGES = [
    ("max_pending: 10000000", "max_pending: 20000000"),
    ("max_closed_clients: 100", "max_closed_clients: 5"),
    ("lame_duck_duration: 30s", "lame_duck_duration: 60s"),
    ("lame_duck_grace_period: 10s", "lame_duck_grace_period: 1s"),
    ('accounts { A { users = [ { user: a, pass: a } ] }, S { users = [ { user: s, pass: s } ] } }\n'
     'system_account: S',
     'accounts { A { users = [ { user: a, pass: a } ] }, S { users = [ { user: s, pass: s } ] } }\n'
     'system_account: A'),
]


@pytest.mark.parametrize(("before", "after"), CHANGES,
                         ids=["max_pending", "max_closed_clients", "lame_duck_duration",
                              "lame_duck_grace_period", "system_account"])
def test_a_reload_changing_an_option_fixed_at_start_is_refused_whole(start_server, before, after):
    server = start_server(f"max_payload: 1000\n{before}\n", http=True)
    server.config_path.write_text(server.config_path.read_text()
                                  .replace("max_payload: 1000", "max_payload: 2000")
                                  .replace(before, after))
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while REFUSED not in server.output():
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.05)
    varz = server.monitor("/varz")
    assert varz["max_payload"] == 1000          # nothing of the file was applied
    if "max_pending" in before:
        assert varz["max_pending"] == 10000000
    assert server.proc.poll() is None           # still serving


def wait_reloaded(server, before: str) -> None:
    """Poll /varz until its config_load_time moves on from ``before``."""
    deadline = time.monotonic() + 15
    while server.monitor("/varz")["config_load_time"] == before:
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.05)


def test_a_reload_applies_max_control_line_to_connected_clients(start_server):
    """max_control_line is reloadable: a client connected before the reload is held to the
    new limit (reload.go maxControlLineOption: every client's mcl)."""
    server = start_server("max_control_line: 4096\n", http=True)
    with RawClient(server.address) as raw:
        raw.connect()
        loaded = server.monitor("/varz")["config_load_time"]
        server.config_path.write_text(server.config_path.read_text()
                                      .replace("max_control_line: 4096", "max_control_line: 64"))
        server.proc.send_signal(signal.SIGHUP)
        wait_reloaded(server, loaded)
        raw.send(b"SUB " + b"a" * 100 + b" 1\r\n")
        assert raw.read_until_closed() == b"-ERR 'maximum control line exceeded'\r\n"
