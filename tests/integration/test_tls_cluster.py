"""Cluster TLS, end to end: three jetraft-server processes whose routes are all TLS.

Every server's ``cluster { tls { cert_file, key_file, ca_file } }`` names a certificate from
the test CA (tests/tls_support.py), so each route, dialled or accepted, verifies the other
side's certificate (nats-server requires client certificates on routes when cluster TLS is
set: opts.go getTLSConfig). An R3 stream replicates over those routes; connections to the
route port without a certificate from the CA, or without TLS, are refused and logged as
``route_refused``, and a server with another CA's certificate never joins.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time

import nats
import pytest
from cluster import Cluster
from polling import poll
from tls_support import PKI, CertPair, client_context


def route_tls(cert: CertPair, ca) -> str:
    return ("tls {\n"
            f"    cert_file: {json.dumps(str(cert.cert))}\n"
            f"    key_file: {json.dumps(str(cert.key))}\n"
            f"    ca_file: {json.dumps(str(ca))}\n"
            "  }")


@pytest.fixture(scope="module")
def cluster(formed_cluster, pki):
    with formed_cluster("jetraft", "tlscluster", 3, jetstream=True, cluster_extra=route_tls(pki.server, pki.ca)) as c:
        yield c


def run(scenario, timeout: float = 90.0) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout))


def tls_refusals(c: Cluster, name: str) -> list[str]:
    return [e["reason"] for e in c.events(name)
            if e["event"] == "route_refused" and "TLS handshake failed" in e["reason"]]


def test_routes_are_tls_and_an_r3_stream_replicates(cluster):
    """Every route came up over TLS (each server logged its peers as connected, none
    refused), and an R3 stream's acknowledged messages are on all three servers."""
    for name in cluster.members:
        assert cluster.routes_of(name) == set(cluster.members) - {name}
        assert tls_refusals(cluster, name) == []

    async def scenario():
        nc = await nats.connect(cluster.urls(), connect_timeout=2, max_reconnect_attempts=-1,
                                reconnect_time_wait=0.1)
        js = nc.jetstream(timeout=5)
        deadline = time.monotonic() + 30
        while True:
            try:
                await js.add_stream(name="TLSR3", subjects=["tls.>"], num_replicas=3)
                break
            except Exception:  # noqa: BLE001 - no meta leader yet: retry until the deadline
                assert time.monotonic() < deadline, "stream never created"
                await asyncio.sleep(0.2)
        for i in range(50):
            ack = await js.publish("tls.m", str(i).encode())
            assert ack.seq == i + 1
        await nc.close()
        for url in cluster.urls():  # each server answers from its own replica's state
            one = await nats.connect(url, connect_timeout=2)
            deadline = time.monotonic() + 20
            while True:
                si = await one.jetstream(timeout=5).stream_info("TLSR3")
                current = [r for r in si.cluster.replicas or [] if r.current]
                if si.state.messages == 50 and len(current) == 2:
                    break
                assert time.monotonic() < deadline, f"{url}: {si.state}, {si.cluster}"
                await asyncio.sleep(0.1)
            await one.close()

    run(scenario)


@pytest.mark.parametrize(("which", "why"), [
    ("plain", "first record does not look like a TLS handshake"),
    ("no_cert", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
    ("other_ca", "unable to get local issuer certificate"),
    ("expired", "certificate has expired"),
])
def test_route_without_a_valid_client_certificate_is_refused(cluster, pki, which, why):
    """A connection to the route port that speaks plain TCP, presents no certificate, one
    from another CA or an expired one is closed before any route frame, and logged as
    route_refused; the mesh is untouched."""
    port = cluster.members["n1"].cluster_port
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if which == "plain":
        sock.sendall(b"CONNECT {}\r\n")
        assert sock.recv(4096) == b""
    else:
        cert = {"no_cert": None, "other_ca": pki.other_client, "expired": pki.expired_client}[which]
        ctx = client_context(pki, cert)
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError, EOFError)):
            with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"x")  # TLS 1.3: the refusal of the client certificate shows on a read
                if not tls.recv(4096):
                    raise EOFError("closed")
    sock.close()
    poll(lambda: any(why in r for r in tls_refusals(cluster, "n1")), f"route_refused: {why}", 20, retry_on=())
    assert cluster.routes_of("n1") == {"n2", "n3"}


def test_a_server_with_another_ca_never_joins(cluster, pki, tmp_path):
    """A fourth server configured with the other CA's certificate dials n1: neither side
    accepts the other's certificate, the route never comes up, and both log why."""
    stranger = Cluster("jetraft", tmp_path / "stranger", 1, names=["n4"],
                       routes=[cluster.route_url("n1")],
                       cluster_extra=route_tls(pki.other_server, pki.other_ca))
    before = len(tls_refusals(cluster, "n1"))
    stranger.start()
    try:
        poll(lambda: any("certificate" in r for r in tls_refusals(stranger, "n4")),
             "n4 refusing n1's certificate", 20, retry_on=())
        poll(lambda: len(tls_refusals(cluster, "n1")) > before, "n1 logging the failed route", 20, retry_on=())
        assert stranger.routes_of("n4") == set()
        assert cluster.routes_of("n1") == {"n2", "n3"}
    finally:
        stranger.stop()


def route_tls_map(pki: PKI) -> str:
    return route_tls(pki.server, pki.ca).replace("  }", "    verify_and_map: true\n  }")


def test_verify_and_map_routes_need_the_certificate_to_name_the_cluster_user(pki, tmp_path):
    """cluster { tls { verify_and_map } }: a route is accepted when its certificate's subject
    (CN=server) is the cluster's authorization user, whatever password the route URL carries;
    with another user configured, no route is ever accepted."""
    good = Cluster("jetraft", tmp_path / "good", 2, auth=("CN=server", "unused"),
                   route_auth=("CN=server", "wrong password"), cluster_extra=route_tls_map(pki))
    good.start()
    try:
        good.wait_formed()
    finally:
        good.stop()
    bad = Cluster("jetraft", tmp_path / "bad", 2, auth=("CN=someone-else", "pw"), cluster_extra=route_tls_map(pki))
    bad.start()
    try:
        for name in bad.members:
            poll(lambda name=name: any("verify_and_map" in e["reason"] for e in bad.events(name)
                                       if e["event"] == "route_refused"), f"{name} refusing the mapped route", 20,
                 retry_on=())
            assert bad.routes_of(name) == set()
    finally:
        bad.stop()
