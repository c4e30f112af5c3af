"""A PostgreSQL server of our own on the DUT's filesystem: initialise PGDATA (``<mountpoint>/pgdata``), start
``postgres`` (Unix socket only, in a private directory; no TCP listener), wait until it accepts connections, run
``psql`` against it, stop it.

PostgreSQL refuses to run as root. When the agent runs as root, ``initdb`` and ``postgres`` run as the
``postgres`` OS user (created by Debian's ``postgresql`` package): ``subprocess.Popen(user=, group=,
extra_groups=[])``, so the pid we record is the postmaster's own (``runuser`` would sit in between). PGDATA and the
socket directory are owned by that user, mode 0700; the client tools (psql, pgbench) run as the agent and connect
as the database user ``postgres`` (trust authentication, socket only).

Stopping: SIGINT to the postmaster is PostgreSQL's *fast* shutdown (active sessions are ended, a shutdown
checkpoint written); SIGKILL after :data:`STOP_GRACE_S`. The postmaster runs in a session of its own so the
agent stopping our process group does not reach it: it is stopped by us (``finally``) or by
:func:`agents.apps.cleanup.release` from the pid recorded through ``ctx.on_server``.
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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agents.apps import AppContext, Cancelled, server
from agents.apps.proc import TOOL_OUT_MAX, bound_file, free_port, run_tool, tail
from labcontract.errors import AppStepError

PG_GLOB = "usr/lib/postgresql/*/bin"
PG_OS_USER = "postgres"
PG_DB_USER = "postgres"
DATABASE = "bench"
START_TIMEOUT_S = 600.0     # a start after a crash replays the WAL first
STOP_GRACE_S = 300.0        # a fast shutdown writes a checkpoint of shared_buffers
INITDB_TIMEOUT_S = 600.0
PSQL_TIMEOUT_S = 3600.0     # CHECKPOINT after loading a large scale
SOCKET_PATH_MAX = 100       # sun_path is 108 bytes
_SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass
class PgServer:
    proc: subprocess.Popen[bytes]
    pid: int
    ticks: int
    datadir: Path
    sockdir: Path
    port: int
    private_sockdir: bool     # made under /tmp (removed on stop)

    def conn_args(self) -> list[str]:
        """Client options (psql, pgbench) reaching this server."""
        return ["-h", str(self.sockdir), "-p", str(self.port), "-U", PG_DB_USER]


def clean_env() -> dict[str, str]:
    """The environment of every PostgreSQL program: no PG* variables of the agent's (PGOPTIONS, PGSERVICE,
    PGPASSFILE... would change what we measure or where we connect)."""
    env = {k: os.environ[k] for k in _SAFE_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    env["LC_ALL"] = "C"
    return env


def _version_key(d: Path) -> tuple[int, int]:
    m = re.search(r"/postgresql/(\d+)(?:\.(\d+))?/bin\Z", str(d))
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)


def find_bindir(configured: str | None) -> Path:
    """The server's bin directory: the configured one, else the newest ``/usr/lib/postgresql/<v>/bin``."""
    need = ("initdb", "postgres", "psql", "pg_isready")
    if configured:
        d = Path(configured)
        missing = [x for x in need if not os.access(d / x, os.X_OK)]
        if missing:
            raise AppStepError(f"pg_bin_dir {configured}: {', '.join(missing)} missing or not executable")
        return d
    found = [d for d in Path("/").glob(PG_GLOB) if all(os.access(d / x, os.X_OK) for x in need)]
    if not found:
        raise AppStepError(f"the PostgreSQL server is not installed (no /{PG_GLOB} with {', '.join(need)}; "
                       "install the postgresql package or set pg_bin_dir in the agent's configuration)")
    return max(found, key=_version_key)


def version_of(binary: Path | str) -> str:
    """``<tool> --version``'s line, e.g. ``postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)``."""
    try:
        res = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, env=clean_env())
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    line = (res.stdout.strip().splitlines() or ["unknown"])[0]
    return line[:128]


def server_version(bindir: Path) -> str:
    return version_of(bindir / "postgres")


# --- the OS user --------------------------------------------------------------------------------------------


def _pg_user() -> pwd.struct_passwd | None:
    """The OS user the server runs as: ``postgres`` when we are root, None (ourselves) otherwise."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(PG_OS_USER)
    except KeyError:
        raise AppStepError(f"running as root, but there is no {PG_OS_USER!r} OS user to run PostgreSQL as "
                       "(install the postgresql package, which creates it)") from None


def _own(path: Path, user: pwd.struct_passwd | None) -> None:
    if user is not None:
        os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(path, 0o700)


def _ids(user: pwd.struct_passwd | None) -> tuple[int | None, int | None, list[int] | None]:
    """(user, group, extra_groups) for Popen: the server's user without root's supplementary groups."""
    if user is None:
        return None, None, None
    return user.pw_uid, user.pw_gid, []


def _check_reachable(path: Path, user: pwd.struct_passwd | None) -> None:
    """Every directory above ``path`` must be searchable by the server's user (PostgreSQL opens PGDATA by path)."""
    if user is None:
        return
    for d in reversed(path.resolve().parents):
        try:
            st = d.stat()
        except OSError as e:
            raise AppStepError(f"cannot stat {d}: {e.strerror}") from None
        ok = (st.st_mode & 0o001 or (st.st_uid == user.pw_uid and st.st_mode & 0o100)
              or (st.st_gid == user.pw_gid and st.st_mode & 0o010))
        if not ok:
            raise AppStepError(f"the {user.pw_name} OS user cannot reach {path}: {d} is mode "
                           f"{st.st_mode & 0o7777:04o} owned by uid {st.st_uid} (it needs o+x)")


def _pg_run(argv: Sequence[str], user: pwd.struct_passwd | None, log: Path, timeout_s: float,
            cwd: Path) -> subprocess.CompletedProcess[bytes]:
    with log.open("ab") as f:
        f.write(("$ " + " ".join(argv) + "\n").encode())
        f.flush()
        uid, gid, groups = _ids(user)
        return subprocess.run(list(argv), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=timeout_s, env=clean_env(), cwd=cwd, user=uid, group=gid,
                              extra_groups=groups)


# --- initialise, start, stop ------------------------------------------------------------------------------


def pgdata_of(ctx: AppContext) -> Path:
    return ctx.mountpoint / "pgdata"


def initdb(ctx: AppContext, bindir: Path, datadir: Path) -> None:
    """A fresh cluster in ``datadir`` (an existing one is removed: a prepare starts over). Sync semantics are
    PostgreSQL's own (no ``--no-sync``)."""
    user = _pg_user()
    if datadir.exists():
        ctx.log.info("removing the previous PGDATA %s", datadir)
        shutil.rmtree(datadir)
    datadir.mkdir(parents=True)
    _own(datadir, user)
    _check_reachable(datadir, user)
    argv = [str(bindir / "initdb"), "-D", str(datadir), "-U", PG_DB_USER, "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-instructions"]
    ctx.log.info("initialising PGDATA: %s", " ".join(argv))
    try:
        res = _pg_run(argv, user, ctx.server_log, INITDB_TIMEOUT_S, datadir)
    except subprocess.TimeoutExpired:
        raise AppStepError(f"initdb did not finish within {INITDB_TIMEOUT_S:.0f} s") from None
    bound_file(ctx.server_log, TOOL_OUT_MAX)
    if res.returncode != 0:
        raise AppStepError(f"initdb failed (exit {res.returncode}): {tail(ctx.server_log, 6)}")


def _sockdir(ctx: AppContext, user: pwd.struct_passwd | None, port: int) -> tuple[Path, bool]:
    """A directory only the server's user can write, short enough for ``.s.PGSQL.<port>``."""
    d = ctx.cwd / "pgsock"
    if len(str(d / f".s.PGSQL.{port}")) <= SOCKET_PATH_MAX:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(d)
        d.mkdir()
        _own(d, user)
        try:
            _check_reachable(d, user)
            return d, False
        except AppStepError:
            shutil.rmtree(d, ignore_errors=True)
    d = Path(tempfile.mkdtemp(prefix="sl-pg-"))
    _own(d, user)
    return d, True


def server_argv(bindir: Path, datadir: Path, sockdir: Path, port: int, shared_buffers_mb: int,
                synchronous_commit: str, max_connections: int) -> list[str]:
    return [str(bindir / "postgres"), "-D", str(datadir), "-k", str(sockdir), "-p", str(port),
            "-c", "listen_addresses=", "-c", f"shared_buffers={shared_buffers_mb}MB",
            "-c", f"synchronous_commit={synchronous_commit}", "-c", f"max_connections={max_connections}",
            "-c", "logging_collector=off", "-c", "log_destination=stderr", "-c", "log_min_messages=warning"]


def _ready(bindir: Path, sockdir: Path, port: int) -> bool:
    """``pg_isready``: the server accepts connections (not starting up, not in recovery)."""
    try:
        res = subprocess.run([str(bindir / "pg_isready"), "-q", "-h", str(sockdir), "-p", str(port),
                              "-U", PG_DB_USER, "-d", "postgres", "-t", "2"],
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=10, env=clean_env())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def start(ctx: AppContext, bindir: Path, datadir: Path, *, shared_buffers_mb: int, synchronous_commit: str,
          max_connections: int = 100) -> PgServer:
    """Start ``postgres`` on ``datadir`` in its own session, record it (``ctx.on_server``) and wait until it accepts
    connections; fails fast with the server log's last lines if it exits (bad configuration, no memory)."""
    if not (datadir / "PG_VERSION").is_file():
        raise AppStepError(f"{datadir} holds no PostgreSQL cluster (was the prepare step run on this DUT?)")
    user = _pg_user()
    _check_reachable(datadir, user)
    port = free_port()          # no TCP listener: the port only names the socket (.s.PGSQL.<port>)
    sockdir, private = _sockdir(ctx, user, port)
    argv = server_argv(bindir, datadir, sockdir, port, shared_buffers_mb, synchronous_commit, max_connections)
    uid, gid, groups = _ids(user)
    proc, ticks = server.launch(ctx, "postgres", argv, datadir, echo=True, env=clean_env(), cwd=sockdir, user=uid,
                                group=gid, extra_groups=groups)
    srv = PgServer(proc, proc.pid, ticks, datadir, sockdir, port, private)
    server.await_ready(ctx, proc, "postgres", lambda: _ready(bindir, sockdir, port), START_TIMEOUT_S,
                       lambda: stop(ctx, srv))
    ctx.log.info("postgres %d ready on %s (port %d)", proc.pid, sockdir, port)
    return srv


def stop(ctx: AppContext, srv: PgServer) -> str:
    """Fast shutdown (SIGINT to the postmaster), SIGKILL of its process group after :data:`STOP_GRACE_S`."""
    if srv.proc.poll() is not None:
        what = f"postgres {srv.pid}: had exited ({srv.proc.returncode})"
    else:
        with contextlib.suppress(ProcessLookupError):
            srv.proc.send_signal(signal.SIGINT)
        try:
            srv.proc.wait(STOP_GRACE_S)
            what = f"postgres {srv.pid}: stopped (exit {srv.proc.returncode})"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(srv.pid, signal.SIGKILL)     # its own session: the postmaster and its children
            srv.proc.wait()
            what = f"postgres {srv.pid}: killed (SIGKILL after {STOP_GRACE_S:.0f} s)"
    ctx.on_server_gone(srv.pid)
    ctx.log.info("%s", what)
    if srv.private_sockdir:
        shutil.rmtree(srv.sockdir, ignore_errors=True)
    return what


@contextmanager
def running(ctx: AppContext, bindir: Path, datadir: Path, *, shared_buffers_mb: int, synchronous_commit: str,
            max_connections: int = 100) -> Iterator[PgServer]:
    srv = start(ctx, bindir, datadir, shared_buffers_mb=shared_buffers_mb, synchronous_commit=synchronous_commit,
                max_connections=max_connections)
    try:
        yield srv
    finally:
        stop(ctx, srv)
    if srv.proc.returncode not in (0, None):
        ctx.log.warning("postgres ended with exit code %s", srv.proc.returncode)


def psql(ctx: AppContext, bindir: Path, srv: PgServer, database: str, sql: str, timeout_s: float = PSQL_TIMEOUT_S
         ) -> None:
    """One fixed SQL command (never built from input) through ``psql``; AppStepError with its output on failure."""
    argv = [str(bindir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", *srv.conn_args(), "-d", database,
            "-c", sql]
    rc, out = run_tool(argv, ctx.tool_out, timeout_s=timeout_s, stop=ctx.stop, env=clean_env())
    if ctx.stop.is_set():
        raise Cancelled()
    if rc != 0:
        last = " | ".join(x.strip() for x in out.splitlines()[-6:] if x.strip())
        raise AppStepError(f"psql {sql!r} failed (exit {rc}): {last}")
