"""A private PostgreSQL server for the test session.

Debian's ``postgresql`` package (installed by ``make test``) provides the server binaries under
/usr/lib/postgresql/<version>/bin. The fixture initialises a throw-away cluster in a temporary
directory, starts ``postgres`` on 127.0.0.1 on a free port (with its unix socket inside that
directory, so no system PostgreSQL, e.g. one on port 5432, is ever touched), waits until it
accepts connections, creates the ``labtest`` database and, at the end, stops the server with
``pg_ctl stop -m immediate`` and removes the directory.

PostgreSQL refuses to run as root; when the tests run as root the server programs are run as
the ``postgres`` OS user through ``runuser``, and the directory is owned by that user.

Use it from a test module by importing the fixtures::

    from tests.pg import PgServer, pg_server, pg_url  # noqa: F401
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from orchestrator.labs.lab import free_port

PG_GLOB = "/usr/lib/postgresql/*/bin"
PG_OS_USER = "postgres"
PG_DB_USER = "postgres"
TEST_DATABASE = "labtest"
START_TIMEOUT_S = 30.0
MISSING = ("the PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found under {glob}: "
           "`make test` installs them (Debian package `postgresql`, via scripts/ensure-packages); "
           "or run `apt-get install postgresql`")


def find_pg_bindir() -> Path | None:
    """The bin directory of the newest installed PostgreSQL server, or None."""
    found = []
    for d in Path("/").glob(PG_GLOB.lstrip("/")):
        if all((d / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            m = re.search(r"/postgresql/(\d+)(?:\.(\d+))?/bin$", str(d))
            version = (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)
            found.append((version, d))
    return max(found)[1] if found else None


def _as_pg_user() -> list[str]:
    """The argv prefix that runs a program as the postgres OS user (nothing when not root)."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root, but `runuser` (util-linux) is not installed")
    try:
        pwd.getpwnam(PG_OS_USER)
    except KeyError:
        raise RuntimeError(f"running as root, but there is no {PG_OS_USER!r} OS user to run PostgreSQL "
                           "as: `make test` installs the postgresql package, which creates it") from None
    return [runuser, "-u", PG_OS_USER, "--"]


def _chown_to_pg_user(path: Path) -> None:
    if os.geteuid() == 0:
        pw = pwd.getpwnam(PG_OS_USER)
        os.chown(path, pw.pw_uid, pw.pw_gid)


@dataclass
class PgServer:
    """One private PostgreSQL server: started by start(), stopped (and its directory removed) by stop()."""

    bindir: Path
    root: Path
    port: int = 0
    host: str = "127.0.0.1"
    popen: subprocess.Popen[bytes] | None = None
    startup_s: float = 0.0
    databases: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)     # more ``name=value`` settings (after the defaults)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def sockdir(self) -> Path:
        return self.root / "sock"

    @property
    def logfile(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str = TEST_DATABASE) -> str:
        """The SQLAlchemy URL of a database of this server (psycopg 3 driver)."""
        return f"postgresql+psycopg://{PG_DB_USER}@{self.host}:{self.port}/{database}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _run(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*_as_pg_user(), *argv], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=self.root)

    # --- start ------------------------------------------------------------------------

    def initdb(self) -> None:
        res = self._run([str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", PG_DB_USER,
                         "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"])
        if res.returncode != 0:
            raise RuntimeError(f"initdb failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")

    def start(self, attempts: int = 3) -> None:
        """Start postgres on a free port; retry on another port if the chosen one got taken."""
        t0 = time.monotonic()
        for attempt in range(1, attempts + 1):
            self.port = free_port()
            self._spawn()
            try:
                self._wait_ready(time.monotonic() + START_TIMEOUT_S)
            except _PortTaken:
                if attempt == attempts:
                    raise RuntimeError(f"postgres could not bind a free port {attempts} times:\n"
                                       f"{self.log_tail()}") from None
                continue
            self.startup_s = time.monotonic() - t0
            return

    def _spawn(self) -> None:
        argv = [str(self.bindir / "postgres"), "-D", str(self.datadir),
                "-p", str(self.port), "-k", str(self.sockdir),
                "-c", f"listen_addresses={self.host}",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "log_min_messages=warning"]
        for setting in self.settings:
            argv += ["-c", setting]
        with self.logfile.open("ab") as log:
            self.popen = subprocess.Popen([*_as_pg_user(), *argv], stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)

    def _wait_ready(self, deadline: float) -> None:
        """Poll until the server accepts a connection on its TCP port; fail fast if it exits."""
        assert self.popen is not None
        last_error = ""
        while True:
            if self.popen.poll() is not None:
                tail = self.log_tail()
                if "could not bind" in tail or "Address already in use" in tail:
                    raise _PortTaken()
                raise RuntimeError(f"postgres exited with code {self.popen.returncode} at start:\n{tail}")
            try:
                with psycopg.connect(host=self.host, port=self.port, user=PG_DB_USER, dbname="postgres",
                                     connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as e:
                last_error = str(e).strip()
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not accept connections on {self.host}:{self.port} within "
                                   f"{START_TIMEOUT_S:.0f}s (last error: {last_error}):\n{self.log_tail()}")
            time.sleep(0.02)

    def create_database(self, name: str) -> str:
        """Create an empty database and return its SQLAlchemy URL."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise ValueError(f"not a plain database name: {name!r}")
        with psycopg.connect(host=self.host, port=self.port, user=PG_DB_USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return self.url(name)

    # --- stop -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server (immediate shutdown: its data is thrown away) and remove its directory."""
        try:
            if self.popen is not None and self.popen.poll() is None:
                res = self._run([str(self.bindir / "pg_ctl"), "stop", "-D", str(self.datadir),
                                 "-m", "immediate", "-w", "-t", "20"], timeout=30)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(15 if res.returncode == 0 else 0.1)
                if self.popen.poll() is None:
                    # pg_ctl could not stop it: end the server's whole process group (ours alone:
                    # it was started in a session of its own).
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.popen.pid, signal.SIGKILL)
                    self.popen.wait(10)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class _PortTaken(Exception):
    """postgres exited because another process took its port between free_port() and bind()."""


def start_postgres() -> PgServer:
    """Initialise and start a private server; fails the test (not skip) when PostgreSQL is missing."""
    bindir = find_pg_bindir()
    if bindir is None:
        pytest.fail(MISSING.format(glob=PG_GLOB), pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="labtest-pg-"))
    server = PgServer(bindir=bindir, root=root)
    try:
        _chown_to_pg_user(root)
        server.sockdir.mkdir()
        _chown_to_pg_user(server.sockdir)
        server.initdb()
        server.start()
        server.create_database(TEST_DATABASE)
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A private PostgreSQL server for the whole test session."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_url(pg_server: PgServer) -> str:
    """The session's ``labtest`` database: ``postgresql+psycopg://postgres@127.0.0.1:PORT/labtest``."""
    return pg_server.url(TEST_DATABASE)


__all__ = ["TEST_DATABASE", "PgServer", "find_pg_bindir", "pg_server", "pg_url", "start_postgres"]
