"""Legato over TLS to a dedicated embedded PostgreSQL with a certificate the test makes:
``sslmode=verify-full`` (with ``sslrootcert``) and ``require`` for a workflow end to end
and the CLI; a wrong CA and a wrong host name each one clear error."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from legato import Client, DatabaseUnavailable, Runtime, migrations
from legato.db import create_engine
from legato.testing.database import running_tls_postgres, tls_capable_bin_dir
from tests.e2e import flows
from tests.helpers import run_legato


@dataclass(frozen=True)
class TlsServer:
    url: str  # postgresql://postgres@localhost:PORT/postgres, no TLS parameters yet
    ca: Path  # the CA that signed the server's certificate (for localhost only)
    other_ca: Path  # a CA that did not

    def with_tls(self, sslmode: str, ca: Path | None = None, host: str = "localhost") -> str:
        url = self.url.replace("@localhost:", f"@{host}:") + f"?sslmode={sslmode}"
        return url if ca is None else f"{url}&sslrootcert={ca}"


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def _certificate_authority(directory: Path, name: str) -> None:
    _openssl(
        directory,
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )


def _server_certificate(directory: Path, ca: str) -> None:
    """``server.crt`` / ``server.key`` for the host name ``localhost`` only, signed by ``ca``."""
    _openssl(
        directory,
        *("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost"),
        *("-keyout", "server.key", "-out", "server.csr"),
    )
    (directory / "san.ext").write_text("subjectAltName = DNS:localhost\n")
    _openssl(
        directory,
        *("x509", "-req", "-in", "server.csr", "-days", "2", "-extfile", "san.ext"),
        *("-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", "server.crt"),
    )


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (it makes the test's certificates)")
    bin_dir = tls_capable_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL built with OpenSSL (Debian: apt-get install postgresql)")
    directory = tmp_path_factory.mktemp("tls")
    _certificate_authority(directory, "ca")
    _certificate_authority(directory, "other-ca")
    _server_certificate(directory, "ca")
    certificate, key = directory / "server.crt", directory / "server.key"
    with running_tls_postgres(certificate, key, bin_dir) as url:
        yield TlsServer(url, directory / "ca.crt", directory / "other-ca.crt")


_LEGATO_SESSIONS_ENCRYPTED = text(
    "SELECT count(*), bool_and(s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
    "WHERE a.application_name LIKE 'legato%'"
)


async def test_a_workflow_runs_end_to_end_over_verify_full(tls: TlsServer) -> None:
    engine = create_engine(tls.with_tls("verify-full", tls.ca), "legato")
    try:
        await migrations.upgrade(engine, "legato")
        async with (
            Runtime(engine, flows.app, poll_interval=0.2),
            Client(engine, app=flows.app) as client,
        ):
            handle = await client.start(flows.chain, 1)
            assert await handle.result(timeout=30) == 5
            async with engine.connect() as conn:
                sessions, encrypted = (await conn.execute(_LEGATO_SESSIONS_ENCRYPTED)).one()
    finally:
        await engine.dispose()
    assert sessions >= 2 and encrypted  # the loops' pool and the LISTEN connection


async def test_the_cli_migrates_over_verify_full_and_checks_over_require(tls: TlsServer) -> None:
    upgraded = await run_legato(
        "db", "upgrade", "--schema", "over_tls", database_url=tls.with_tls("verify-full", tls.ca)
    )
    assert upgraded.status == 0, upgraded.stderr
    checked = await run_legato(
        "db", "check", "--schema", "over_tls", database_url=tls.with_tls("require")
    )
    assert checked.status == 0, checked.stderr
    assert "is at head" in checked.stdout


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        ("ca", "unable to get local issuer certificate"),
        ("host", "the certificate is not issued for '127.0.0.1'"),
    ],
)
async def test_a_wrong_ca_or_host_name_is_one_error_line(
    tls: TlsServer, wrong: str, says: str
) -> None:
    url = (
        tls.with_tls("verify-full", tls.other_ca)
        if wrong == "ca"
        else tls.with_tls("verify-full", tls.ca, host="127.0.0.1")
    )
    done = await run_legato("db", "upgrade", database_url=url)
    assert done.status != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("legato: error: "), done.stderr
    assert "failed TLS verification" in lines[0] and says in lines[0]
    with pytest.raises(DatabaseUnavailable, match=says) as raised:
        await Client.connect(url)
    assert raised.value.retryable is False  # waiting will not fix a certificate
