"""Fixtures that start NATS-compatible servers: jetraft and the real nats-server.

Every compat test takes ``server`` (a default configuration) or ``start_server`` (a
factory for its own configuration); both are parametrized over ``server_kind`` so
the same test runs against jetraft-server and nats-server.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import filelock
import pytest

import servers  # tests/servers.py (pyproject.toml's pythonpath)
from cluster import Cluster, formed
from tls_support import PKI, make_pki

#: The last lines of a server's output shown when a test fails.
_OUTPUT_TAIL = 6000

#: Under pytest-xdist these run first: the Spark jobs of tests/validation (one Spark session
#: for the whole directory, minutes of work) and the ansible runs of tests/appliance. Handed
#: out last, they would leave the other workers idle at the end of the run.
_FIRST_UNDER_XDIST = ("tests/validation/", "tests/appliance/")


def pytest_configure(config):
    config.addinivalue_line("markers", "compat: a test under tests/compat (added at collection)")
    config.addinivalue_line(
        "markers",
        "no_server: a compat test that starts no server, only pure code or `-t` configuration "
        "checks against nats-server's; make check runs these with the unit tests",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark compat tests ``compat``; under xdist, put the slowest directories first.

    ``make test`` distributes whole files (``--dist loadfile``), so a module-scoped fixture
    (a cluster, a pair of servers, a PKI) and the Spark session of tests/validation start
    once. Files are handed out in collection order: ``_FIRST_UNDER_XDIST`` go first.
    """
    for item in items:
        if item.nodeid.startswith("tests/compat/"):
            item.add_marker("compat")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: not item.nodeid.startswith(_FIRST_UNDER_XDIST))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Remember each phase's report on the item so fixtures can see whether the test failed."""
    report = yield
    setattr(item, f"_compat_report_{report.when}", report)
    return report


@pytest.fixture(params=servers.KINDS)
def server_kind(request) -> str:
    """The kind of server under test: "jetraft" or "nats-server"."""
    return request.param


@pytest.fixture
def start_server(request, server_kind, tmp_path):
    """Factory: ``start_server(extra_config="", *, http=False, kind=None)`` -> RunningServer.

    Starts the server under test (or ``kind``) with ``extra_config`` appended to its
    listen/http lines.  At teardown every server is stopped; a server that died during
    the test fails the teardown, and a failed test prints each server's output.
    """
    started: list[servers.RunningServer] = []

    def start(extra_config: str = "", *, http: bool = False, kind: str | None = None):
        __tracebackhide__ = True
        kind = kind or server_kind
        name = f"{kind}-{len(started)}"
        server = servers.start_server(kind, tmp_path / name, extra_config, http=http, name=kind)
        started.append(server)
        return server

    yield start

    crashed = [s for s in started if not s.alive()]
    for server in started:
        server.stop()
    call_report = getattr(request.node, "_compat_report_call", None)
    if crashed or (call_report is not None and call_report.failed):
        for server in started:
            print(server.output()[-_OUTPUT_TAIL:])
    if crashed:
        pytest.fail(
            "server exited during the test: "
            + ", ".join(f"{s.kind} (code {s.proc.returncode})" for s in crashed)
        )


@pytest.fixture
def server(start_server) -> servers.RunningServer:
    """The server under test with the default configuration and no monitoring port."""
    return start_server()


@pytest.fixture
def monitored_server(start_server) -> servers.RunningServer:
    """The server under test with the monitoring port (``http``) enabled."""
    return start_server(http=True)


@pytest.fixture
def block_devices():
    """This machine's block devices, for this test alone: a lock file every pytest-xdist
    worker shares. The storage role's tests attach loop devices and flip their rotational
    flag; a test that reads /sys/block (preflight's disk checks) must not see that happen
    half-way through its run."""
    with filelock.FileLock("/tmp/jetraft-tests-block-devices.lock"):
        yield


@pytest.fixture
def js_server(start_server, tmp_path) -> servers.RunningServer:
    """The server under test (jetraft or nats-server, as ``server_kind``) with JetStream,
    its file store under tmp_path."""
    return start_server(servers.js_config(tmp_path / "store"))


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> PKI:
    """A test CA with server, client and route certificates (tests/tls_support.py), one
    per test module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def formed_cluster(request, tmp_path_factory):
    """Factory: ``formed_cluster(kind, name, size=3, *, users=(None,), **options)`` -> a context
    manager giving a Cluster.

    Builds ``Cluster(kind, <tmp>/<name>-<kind>N, size, **options)`` (tests/cluster.py: ``options``
    are its keyword arguments, ``jetstream=True``, ``extra=...``, ``tags=...``); entered, it is
    as :func:`cluster.formed` leaves it: started and formed; with JetStream, its servers agree
    on a meta leader and each answers ``$JS.API.INFO`` for each of ``users`` ((user, password),
    None: no credentials; name an account's user where clients without credentials have none),
    asked again to a deadline. On the way out it is stopped, each server's output printed when
    a test failed meanwhile. A fixture of any scope uses it::

        @pytest.fixture(scope="module", params=servers.KINDS)
        def cluster(request, formed_cluster):
            with formed_cluster(request.param, "limits", 3, jetstream=True, extra=ACCOUNTS,
                                users=[("a", "a")]) as c:
                yield c
    """
    def make(kind: str, name: str, size: int = 3, *,
             users: Sequence[tuple[str, str] | None] = (None,), **options):
        c = Cluster(kind, tmp_path_factory.mktemp(f"{name}-{kind}"), size, **options)
        return formed(c, request.session, users=users)

    return make
