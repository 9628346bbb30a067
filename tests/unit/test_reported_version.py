"""The version jetraft reports where nats-server reports its own (INFO, /varz, $SYS):
nats-server's feature level with jetraft's release as semver build metadata, read by
nats-py as that feature level."""

from __future__ import annotations

import pytest
from nats.aio.client import ServerVersion

import jetraft


@pytest.mark.parametrize("release,expected", [
    ("0.1.0", "2.12.1+jetraft.0.1.0"),
    ("0.1.0+lab.20261126.091807", "2.12.1+jetraft.0.1.0.lab.20261126.091807"),  # lab/day_two.py's builds
    ("1.0.0rc1+x_y..z", "2.12.1+jetraft.1.0.0rc1.x-y.z"),
])
def test_release_becomes_build_metadata(release, expected):
    assert jetraft.nats_version(release) == expected


@pytest.mark.parametrize("release", ["0.1.0", "0.1.0+lab.20261126.091807", "2.0.0.dev3+g1234abc"])
def test_nats_py_reads_the_feature_version(release):
    """nats-py's ServerVersion parses it (it raises ValueError for what semver refuses) as
    2.12.1, so its JetStream manager still picks the named-consumer API (major >= 2 and
    minor >= 9, nats/js/manager.py)."""
    version = ServerVersion(jetraft.nats_version(release))
    assert (version.major, version.minor, version.patch, version.prerelease) == (2, 12, 1, "")
    assert version.build.startswith("jetraft.")
    assert version.major >= 2 and version.minor >= 9


def test_the_server_reports_its_own_release():
    assert jetraft.NATS_COMPAT_VERSION == jetraft.nats_version(jetraft.__version__)
    assert ServerVersion(jetraft.NATS_COMPAT_VERSION).build == "jetraft." + jetraft.__version__.replace("+", ".")
