"""Fixtures of the Citus tests: a cluster for the session.

The cluster comes from ``tests/citus/cluster.py`` (``LEGATO_CITUS_URL``,
``LEGATO_CITUS_PREFIX`` or ``LEGATO_CITUS_TARBALL``); without one every test here is
skipped with the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.citus.cluster import (
    CitusUnavailable,
    Cluster,
    citus_bin_dir,
    existing_cluster,
    form,
    running_cluster,
)


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[Cluster]:
    """The session's Citus cluster (started here unless ``LEGATO_CITUS_URL`` names one)."""
    given = existing_cluster()
    if given is not None:
        yield given
        return
    try:
        bin_dir = citus_bin_dir()
    except CitusUnavailable as reason:
        pytest.skip(str(reason))
    with running_cluster(bin_dir) as cluster:
        asyncio.run(form(cluster.coordinator, cluster.workers))
        yield cluster
