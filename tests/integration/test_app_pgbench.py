"""The pgbench driver against a real PostgreSQL 15 server and pgbench: prepare, two points of the ladder, bad
configurations. A temporary directory stands in for the DUT's mounted filesystem (mkfs / mount are tested with
appstep); everything is small: scale 1, 3-second points."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agents.apps import AppContext, AppSpec, Cancelled
from agents.apps import pgbench as driver
from agents.apps import postgres as pg
from agents.apps.proc import wait_for
from labcontract.apps import AppResult, PgbenchParams
from labcontract.errors import AppStepError


def _binaries_or_skip() -> None:
    try:
        bindir = pg.find_bindir(None)
    except AppStepError as e:
        pytest.skip(f"PostgreSQL server binaries missing: {e}")
    if not (os.access(bindir / "pgbench", os.X_OK) or shutil.which("pgbench")):
        pytest.skip("pgbench is not installed")


@dataclass
class Recorder:
    started: dict[int, Path] = field(default_factory=dict)
    gone: list[int] = field(default_factory=list)
    live: list[dict[str, float]] = field(default_factory=list)

    def on_server(self, pid: int, kind: str, datadir: Path) -> None:
        assert kind == "postgres"
        self.started[pid] = datadir

    def on_live(self, figures: Mapping[str, float]) -> None:
        self.live.append(dict(figures))


def make_ctx(root: Path, rec: Recorder, name: str) -> AppContext:
    cwd = root / name
    cwd.mkdir()
    os.chmod(cwd, 0o755)          # the postgres OS user reaches PGDATA through it
    spec = AppSpec.model_validate({
        "attempt_id": name, "run_id": "r1", "app": {"kind": "pgbench", "phase": "prepare", "pgbench": {}},
        "duts": [{"name": "d0", "path": str(root / "dut.img"), "kind": "file", "size_bytes": 0}],
        "state_dir": str(root)})
    return AppContext(cwd=cwd, mountpoint=root / "mnt", spec=spec, log=logging.getLogger(f"test.pgbench.{name}"),
                      live=rec.on_live, on_server=rec.on_server, on_server_gone=rec.gone.append)


def postgres_pids(datadir: Path) -> list[int]:
    """Processes whose command line names ``datadir`` (the postmaster; its children carry no -D)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(datadir).encode() in argv and any(a.endswith(b"postgres") for a in argv[:1]):
            out.append(int(d.name))
    return out


def assert_nothing_left(rec: Recorder, datadir: Path) -> None:
    assert sorted(rec.gone) == sorted(rec.started), (rec.started, rec.gone)
    wait_for(lambda: not postgres_pids(datadir), 10, what="no postgres on the datadir")
    for pid in rec.started:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.fixture(scope="module")
def prepared() -> Iterator[tuple[Path, Recorder, AppResult]]:
    _binaries_or_skip()
    root = Path(tempfile.mkdtemp(prefix="sl-pgbench-"))
    os.chmod(root, 0o755)
    (root / "mnt").mkdir(mode=0o755)
    rec = Recorder()
    try:
        res = driver.prepare(make_ctx(root, rec, "prepare"), PgbenchParams(scale=1, shared_buffers_mb=32))
        yield root, rec, res
    finally:
        for pid in list(rec.started):
            if pid not in rec.gone and Path(f"/proc/{pid}").exists():
                os.kill(pid, 9)
        shutil.rmtree(root, ignore_errors=True)


def test_prepare(prepared: tuple[Path, Recorder, AppResult]) -> None:
    root, rec, res = prepared
    assert res.tool == "pgbench"
    assert res.tool_version[0].isdigit()
    assert res.server_version.startswith("PostgreSQL ")
    assert res.metrics["scale"] == 1 and res.metrics["prepare_s"] > 0
    assert (root / "mnt" / "pgdata" / "PG_VERSION").is_file()
    assert len(rec.started) == 1
    assert_nothing_left(rec, root / "mnt" / "pgdata")


@pytest.mark.parametrize("clients", [2, 4])
def test_run_point(prepared: tuple[Path, Recorder, AppResult], clients: int) -> None:
    root, _, _ = prepared
    rec = Recorder()
    ctx = make_ctx(root, rec, f"run{clients}")
    params = PgbenchParams(scale=1, clients=(clients,), time=3, shared_buffers_mb=32)
    res = driver.run(ctx, params, clients)
    AppResult.model_validate_json(res.model_dump_json())          # what appstep writes, read back
    m = res.metrics
    assert m["tps"] > 0 and m["transactions"] > 0
    assert m["clients"] == clients
    assert 0 < m["lat_min_ms"] <= m["lat_avg_ms"] <= m["lat_p99_ms"] <= m["lat_max_ms"]
    assert m["lat_p95_ms"] <= m["lat_p99_ms"]
    assert m["errors"] == 0
    assert len(res.series["tps"]) == 3 and len(res.series["lat_avg_ms"]) == 3
    assert sum(res.series["tps"]) == m["transactions"]
    # the live figures came from the -P 1 lines
    assert rec.live and all(x["point"] == clients and x["tps"] >= 0 for x in rec.live)
    assert not list(ctx.cwd.glob("pgbench_log.*"))                 # read, then removed
    assert "progress:" in (ctx.cwd / "tool.out").read_text()
    assert_nothing_left(rec, root / "mnt" / "pgdata")


def test_warmup_then_run(prepared: tuple[Path, Recorder, AppResult]) -> None:
    root, _, _ = prepared
    rec = Recorder()
    ctx = make_ctx(root, rec, "warm")
    res = driver.run(ctx, PgbenchParams(scale=1, clients=(2,), time=2, warmup=1, builtin="select-only"), 2)
    assert res.metrics["tps"] > 0 and len(res.series["tps"]) == 2
    assert (ctx.cwd / "tool.out").read_text().count("number of clients: 2") == 2     # warm-up + measured
    assert_nothing_left(rec, root / "mnt" / "pgdata")


def test_cancel_mid_point_stops_everything(prepared: tuple[Path, Recorder, AppResult]) -> None:
    """ctx.stop (SIGTERM to appstep) during the measurement: pgbench killed, the server stopped, Cancelled."""
    root, _, _ = prepared
    rec = Recorder()
    ctx = make_ctx(root, rec, "cancel")

    def live(figures: Mapping[str, float]) -> None:
        rec.on_live(figures)
        ctx.stop.set()                    # at the first progress line

    ctx.live = live
    with pytest.raises(Cancelled):
        driver.run(ctx, PgbenchParams(scale=1, clients=(2,), time=60), 2)
    assert len(rec.live) >= 1
    assert_nothing_left(rec, root / "mnt" / "pgdata")


def test_absurd_shared_buffers_fails_clearly(prepared: tuple[Path, Recorder, AppResult]) -> None:
    root, _, _ = prepared
    rec = Recorder()
    ctx = make_ctx(root, rec, "badsb")
    with pytest.raises(AppStepError, match=r"postgres exited .* while starting: .*(shared memory|memory)"):
        driver.run(ctx, PgbenchParams(scale=1, clients=(2,), time=2, shared_buffers_mb=4 << 20), 2)
    assert len(rec.started) == 1
    assert_nothing_left(rec, root / "mnt" / "pgdata")


def test_run_without_prepare_is_refused() -> None:
    _binaries_or_skip()
    root = Path(tempfile.mkdtemp(prefix="sl-pgbench-"))
    try:
        os.chmod(root, 0o755)
        (root / "mnt").mkdir(mode=0o755)
        rec = Recorder()
        with pytest.raises(AppStepError, match="holds no PostgreSQL cluster"):
            driver.run(make_ctx(root, rec, "noprep"), PgbenchParams(scale=1, clients=(2,), time=2), 2)
        assert rec.started == {}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_unreachable_mountpoint_is_refused() -> None:
    """PostgreSQL runs as the postgres OS user: a PGDATA behind a root-only directory is a clear error."""
    _binaries_or_skip()
    if os.geteuid() != 0:
        pytest.skip("only root runs the server as another user")
    root = Path(tempfile.mkdtemp(prefix="sl-pgbench-"))      # 0700, root's
    try:
        (root / "mnt").mkdir()
        rec = Recorder()
        ctx = make_ctx(root, rec, "closed")
        with pytest.raises(AppStepError, match=r"cannot reach .*needs o\+x"):
            driver.prepare(ctx, PgbenchParams(scale=1))
        assert rec.started == {}
    finally:
        shutil.rmtree(root, ignore_errors=True)
