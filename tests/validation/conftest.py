"""A Spark session shared by the validation tests (local[2], as on a two-core machine)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from jetraft.validation.job import spark_session

    session = spark_session("local[2]", "2g")
    yield session
    session.stop()
