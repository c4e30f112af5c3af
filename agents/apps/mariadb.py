"""A MariaDB server of our own on the DUT's filesystem: initialise a datadir, start ``mariadbd`` (Unix socket
only, no network, no option files), wait until it accepts connections, stop it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agents.apps import AppContext, server
from agents.apps.proc import socket_connectable, tail
from labcontract.apps import SysbenchParams
from labcontract.errors import AppStepError

START_TIMEOUT_S = 300.0
STOP_GRACE_S = 300.0       # InnoDB flushes its buffer pool on a clean shutdown
DATABASE = "sbtest"


@dataclass
class MariaServer:
    proc: subprocess.Popen[bytes]
    pid: int
    ticks: int
    socket: Path
    datadir: Path


def find_binary(configured: str | None, name: str, fallbacks: tuple[str, ...] = ()) -> str:
    if configured:
        if not os.access(configured, os.X_OK):
            raise AppStepError(f"{name}: {configured} is not executable")
        return configured
    found = shutil.which(name)
    if found:
        return found
    for f in fallbacks:
        if os.access(f, os.X_OK):
            return f
    raise AppStepError(f"{name} is not installed (not on PATH; set its path in the agent's configuration)")


def mariadbd_path(ctx: AppContext) -> str:
    return find_binary(ctx.binaries.mariadbd, "mariadbd", ("/usr/sbin/mariadbd", "/usr/libexec/mariadbd"))


def server_version(ctx: AppContext) -> str:
    try:
        out = subprocess.run([mariadbd_path(ctx), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    # "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)"
    parts = out.split()
    return ("MariaDB " + parts[parts.index("Ver") + 1])[:128] if "Ver" in parts[:-1] else out.strip()[:128]


def _user_args() -> list[str]:
    return ["--user=root"] if os.geteuid() == 0 else []


def install_db(ctx: AppContext, datadir: Path) -> None:
    """A fresh datadir with the system tables, a root user with no password (socket only) and database sbtest."""
    tool = find_binary(ctx.binaries.mariadb_install_db, "mariadb-install-db", ("/usr/bin/mariadb-install-db",))
    datadir.mkdir(parents=True, exist_ok=True)
    extra = ctx.cwd / "init.sql"
    extra.write_text(f"CREATE DATABASE IF NOT EXISTS {DATABASE};\n")
    argv = [tool, "--no-defaults", f"--datadir={datadir}", *_user_args(), "--auth-root-authentication-method=socket",
            "--skip-test-db", "--skip-name-resolve", f"--extra-file={extra}"]
    ctx.log.info("initialising the datadir: %s", " ".join(argv))
    with ctx.server_log.open("ab") as log:
        res = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=1800)
    if res.returncode != 0:
        raise AppStepError(f"mariadb-install-db failed (exit {res.returncode}): {tail(ctx.server_log, 6)}")


def socket_path(ctx: AppContext) -> Path:
    """The server's socket, in a private 0700 directory of its own: root@localhost authenticates by the peer's OS
    user (unix_socket), and nobody but root may even reach the socket (a root-run mariadbd reachable by another
    user would write files as root: SELECT ... INTO OUTFILE). The directory also serves as the server's
    secure_file_priv, the only place it may read or write files."""
    return Path(tempfile.mkdtemp(prefix="sl-mysqld-")) / "mysqld.sock"


def server_argv(ctx: AppContext, p: SysbenchParams, datadir: Path, sock: Path) -> list[str]:
    return [mariadbd_path(ctx), "--no-defaults", f"--datadir={datadir}", f"--socket={sock}", "--skip-networking",
            *_user_args(), f"--innodb-buffer-pool-size={p.buffer_pool_mb}M",
            f"--innodb-flush-method={p.flush_method}", f"--innodb-log-file-size={p.log_file_mb}M",
            f"--innodb-flush-log-at-trx-commit={p.flush_log_at_trx_commit}", f"--log-error={ctx.server_log}",
            f"--pid-file={ctx.cwd / 'mysqld.pid'}", "--skip-name-resolve", "--max-connections=2100",
            "--skip-log-bin", f"--secure-file-priv={sock.parent}", "--local-infile=0"]


def start(ctx: AppContext, p: SysbenchParams, datadir: Path) -> MariaServer:
    """Start mariadbd in its own session (the agent may stop our process group; the server is stopped by us or by
    :func:`agents.apps.cleanup.release`) and wait until its socket accepts connections."""
    sock = socket_path(ctx)
    sock.unlink(missing_ok=True)
    argv = server_argv(ctx, p, datadir, sock)
    proc, ticks = server.launch(ctx, "mariadbd", argv, datadir)
    srv = MariaServer(proc, proc.pid, ticks, sock, datadir)
    server.await_ready(ctx, proc, "mariadbd", lambda: socket_connectable(sock), START_TIMEOUT_S,
                       lambda: stop(ctx, srv))
    ctx.log.info("mariadbd %d ready on %s", proc.pid, sock)
    return srv


def stop(ctx: AppContext, srv: MariaServer) -> str:
    """A clean shutdown (SIGTERM: mariadbd flushes and exits), SIGKILL after a grace period."""
    if srv.proc.poll() is not None:
        what = f"mariadbd {srv.pid}: had exited ({srv.proc.returncode})"
    else:
        srv.proc.terminate()
        try:
            srv.proc.wait(STOP_GRACE_S)
            what = f"mariadbd {srv.pid}: stopped (exit {srv.proc.returncode})"
        except subprocess.TimeoutExpired:
            srv.proc.kill()
            srv.proc.wait()
            what = f"mariadbd {srv.pid}: killed (SIGKILL after {STOP_GRACE_S:.0f} s)"
    ctx.on_server_gone(srv.pid)
    ctx.log.info("%s", what)
    if srv.socket.parent.name.startswith("sl-mysqld-"):
        shutil.rmtree(srv.socket.parent, ignore_errors=True)
    return what


@contextmanager
def running(ctx: AppContext, p: SysbenchParams, datadir: Path) -> Iterator[MariaServer]:
    srv = start(ctx, p, datadir)
    try:
        yield srv
    finally:
        stop(ctx, srv)
    if srv.proc.returncode not in (0, None):
        ctx.log.warning("mariadbd ended with exit code %s", srv.proc.returncode)
