"""What /connz shows of a closed connection's reason and of a duration: nats-server's
ClosedState strings (server/monitor.go) and myUptime."""

from __future__ import annotations

import pytest

from jetraft.gofmt import uptime as go_uptime
from jetraft.net.transport.client import nats_close_reason

S = 1_000_000_000


@pytest.mark.parametrize("reason,shown", [
    ("Client Closed", "Client Closed"),
    ("Read Error", "Read Error"),
    ("Authentication Failure", "Authentication Failure"),
    ("Authentication Timeout", "Authentication Timeout"),
    ("Stale Connection", "Stale Connection"),
    ("Slow Consumer (Pending Bytes)", "Slow Consumer (Pending Bytes)"),
    ("Slow Consumer (Write Deadline)", "Slow Consumer (Write Deadline)"),
    ("Server Shutdown", "Server Shutdown"),
    ("TLS Handshake Error", "TLS Handshake Failure"),
    ("maximum control line exceeded", "Maximum Control Line Exceeded"),
    ("Maximum Payload Violation", "Maximum Message Payload Exceeded"),
    ("invalid client protocol", "Bad Client Protocol Version"),
    ("no responders requires headers support", "No Responders Requires Headers"),
    ("Unknown Protocol Operation", "Protocol Violation"),
    (None, "Client Closed"),
])
def test_close_reasons_are_nats_server_strings(reason, shown):
    assert nats_close_reason(reason) == shown


@pytest.mark.parametrize("ns,text", [
    (0, "0s"), (59 * S + S // 2, "59s"), (65 * S, "1m5s"), (7201 * S, "2h0m1s"),
    ((3 * 86400 + 4 * 3600 + 5 * 60 + 6) * S, "3d4h5m6s"), ((400 * 86400 + 5) * S, "1y35d0h0m5s"), (-S, "0s"),
])
def test_uptime_as_nats_server_prints_it(ns, text):
    assert go_uptime(ns) == text
