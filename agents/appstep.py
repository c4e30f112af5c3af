"""One application step, run by the agent as its own process in the attempt directory (like fio, under the
runner's wrapper, which records the exit code):

``python -m agents.appstep app-spec.json app.json``

- ``prepare`` (sysbench, pgbench): make the filesystem on the DUT (its OP footprint when ``fs_size_bytes``),
  record it in the marker ``<state_dir>/apps/<dut>.json``, mount it at ``./mnt``, initialise and load the
  database, stop the server, unmount; the marker says ``loaded`` once all of that succeeded.
- ``run``: check the DUT holds this run's loaded filesystem (its UUID is the marker's), mount, start the
  server, warm up, measure the point (``live.json`` rewritten each second), stop, unmount.
- ``external``: the declared command (:mod:`agents.apps.external`).

``app-state.json`` records what the process holds (mountpoint, servers with pid and start ticks) before it waits
on anything; :func:`agents.apps.cleanup.release` frees it if the process is killed. SIGTERM / SIGINT cancel the
step: the server is stopped, the DUT unmounted, exit 1 with "cancelled". Exit 0 only with a valid ``app.json``;
otherwise the reason is the last line on stderr. Logs: ``app.log``; server log ``server.log``; tool output
``tool.out``.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any, cast

from pydantic import ValidationError

from agents.apps import DRIVERS, AppContext, AppDriver, AppSpec, Cancelled, external
from agents.apps import fs as fsmod
from agents.apps.cleanup import STATE_FILE, release
from agents.apps.external import validation_reason
from agents.apps.proc import Oversized, read_bounded, start_ticks
from labcontract.apps import AppResult
from labcontract.errors import AppStepError

SPEC_MAX_BYTES = 1 << 20
log = logging.getLogger("appstep")


class State:
    """``app-state.json``, rewritten atomically on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"mountpoint": None, "device": None, "servers": []}
        self.lock = threading.Lock()
        self.save()

    def save(self) -> None:
        fsmod.write_json_atomic(self.path, self.data)

    def set_mount(self, mountpoint: Path | None, device: str | None) -> None:
        with self.lock:
            self.data.update(mountpoint=None if mountpoint is None else str(mountpoint), device=device)
            self.save()

    def add_server(self, pid: int, kind: str, datadir: Path | str, group: bool = False) -> None:
        with self.lock:
            self.data["servers"].append({"pid": pid, "start_ticks": start_ticks(pid) or -1, "kind": kind,
                                         "datadir": str(datadir), "group": group})
            self.save()

    def drop_server(self, pid: int) -> None:
        with self.lock:
            self.data["servers"] = [s for s in self.data["servers"] if s["pid"] != pid]
            self.save()


class Signals:
    """SIGTERM / SIGINT: set ``stop`` and raise :class:`Cancelled` once (never while cleaning up)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.cleaning = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        first = not self.stop.is_set()
        self.stop.set()
        if first and not self.cleaning:
            raise Cancelled("cancelled")


def live_writer(cwd: Path) -> Any:
    def write(fig: Mapping[str, float]) -> None:
        fsmod.write_json_atomic(cwd / "live.json", {"t": time.time(), **fig})
    return write


def load_spec(path: Path) -> AppSpec:
    try:
        data = read_bounded(path, SPEC_MAX_BYTES)
    except OSError as e:
        raise AppStepError(f"cannot read the spec {path}: {e.strerror}") from None
    except Oversized:
        raise AppStepError(f"the spec {path} exceeds {SPEC_MAX_BYTES} bytes") from None
    try:
        return AppSpec.model_validate_json(data)
    except ValidationError as e:
        raise AppStepError(f"invalid app spec: {validation_reason(e)}") from None


def db_step(spec: AppSpec, ctx: AppContext, state: State) -> AppResult:
    """prepare / run of a database kind, on the one DUT: filesystem, mount, the driver, unmount."""
    module, attr = DRIVERS[spec.app.kind]
    driver = cast(AppDriver, importlib.import_module(module))
    params = getattr(spec.app, attr)
    dut = spec.duts[0]
    state_dir = Path(spec.state_dir)
    fs = str(params.filesystem)
    marker = fsmod.marker_path(state_dir, dut)
    if (why := fsmod.in_use(dut)) is not None:
        raise AppStepError(why)
    if spec.app.phase == "prepare":
        marker.unlink(missing_ok=True)
        argv = fsmod.mkfs(dut, fs, spec.app.fs_size_bytes)
        log.info("made %s on %s: %s", fs, dut.path, " ".join(argv))
        uuid = fsmod.fs_uuid(dut.path)
        if uuid is None:
            raise AppStepError(f"no filesystem UUID on {dut.path} after mkfs")
        mark: dict[str, Any] = {"uuid": uuid, "fs": fs, "run_id": spec.run_id, "attempt_id": spec.attempt_id,
                                "kind": spec.app.kind, "fs_size_bytes": spec.app.fs_size_bytes,
                                "made_at": datetime.datetime.now(datetime.UTC).isoformat(), "loaded": False}
        fsmod.write_json_atomic(marker, mark)
    else:
        mark = fsmod.check_prepared(state_dir, dut, spec.run_id, spec.app.kind)
        fs = str(mark.get("fs", fs))
        if fs not in ("ext4", "xfs"):          # the marker is a file: what reaches mount -t is checked
            raise AppStepError(f"the marker of DUT {dut.name} names filesystem {fs[:32]!r}, not ext4 or xfs")
    if spec.mount_root is not None:       # traversable by the DB server's own OS user
        make_mountpoint(Path(spec.mount_root), ctx.mountpoint)
    state.set_mount(ctx.mountpoint, dut.path)
    fsmod.mount(dut, fs, ctx.mountpoint)
    log.info("mounted %s (%s) on %s", dut.path, fs, ctx.mountpoint)
    try:
        result = driver.prepare(ctx, params) if spec.app.phase == "prepare" else driver.run(ctx, params, spec.app.point)
    finally:
        what = fsmod.umount(ctx.mountpoint)
        log.info("%s", what)
        if not fsmod.mounted(ctx.mountpoint):
            state.set_mount(None, None)
            if spec.mount_root is not None:      # the step's own mountpoint, empty again: gone, failed or not
                with contextlib.suppress(OSError):
                    ctx.mountpoint.rmdir()
    if fsmod.mounted(ctx.mountpoint) or "lazily" in what:      # something still held the filesystem
        raise AppStepError(f"cannot unmount the DUT cleanly: {what}")
    if spec.app.phase == "prepare":
        mark.update(loaded=True, loaded_at=datetime.datetime.now(datetime.UTC).isoformat())
        fsmod.write_json_atomic(marker, mark)
    return result


def make_mountpoint(root: Path, mountpoint: Path) -> None:
    """``<root>/<attempt id>``, a new directory: ``root`` must be a real directory (not a symlink) owned by this
    process's user and writable by nobody else, so that nobody can put a symlink where the DUT gets mounted."""
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise AppStepError(f"the mount root {root} must be a directory of uid {os.geteuid()} that only it may write "
                       f"(it is mode {stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid})")
    try:
        mountpoint.mkdir(mode=0o755)
    except FileExistsError:
        if mountpoint.is_symlink() or not mountpoint.is_dir() or any(mountpoint.iterdir()):
            raise AppStepError(f"the mountpoint {mountpoint} exists and is not an empty directory") from None


def step(spec: AppSpec, ctx: AppContext, state: State) -> AppResult:
    if spec.app.kind == "external":
        assert spec.external is not None
        return external.run(ctx, spec.external, lambda pid, _t: state.add_server(pid, "external", ctx.cwd, True),
                            state.drop_server)
    return db_step(spec, ctx, state)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m agents.appstep app-spec.json app.json", file=sys.stderr)
        return 2
    cwd = Path.cwd()
    handler = logging.FileHandler(cwd / "app.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    stop = threading.Event()
    signals = Signals(stop)
    reason = ""
    try:
        state = State(cwd / STATE_FILE)
        spec = load_spec(Path(argv[1]))
        log.info("step %s of run %s: %s %s point %d", spec.attempt_id, spec.run_id, spec.app.kind, spec.app.phase,
                 spec.app.point)
        ctx = AppContext(cwd=cwd, mountpoint=spec.mountpoint(cwd), spec=spec,
                         log=logging.getLogger(f"app.{spec.app.kind}"), live=live_writer(cwd),
                         on_server=lambda pid, kind, datadir: state.add_server(pid, kind, datadir),
                         on_server_gone=state.drop_server, stop=stop)
        result = step(spec, ctx, state)
        out = Path(argv[2])
        AppResult.model_validate_json(result.model_dump_json())   # what we write, the reader accepts
        fsmod.write_json_atomic(out, result.model_dump(mode="json"))
        log.info("done: %s", {k: round(v, 3) for k, v in list(result.metrics.items())[:12]})
    except Cancelled:
        reason = "cancelled"
    except AppStepError as e:
        reason = str(e)
    except ValidationError as e:
        reason = f"invalid result: {validation_reason(e)}"
    except Exception as e:  # the reason goes to the agent, the traceback to app.log
        log.exception("internal error")
        reason = f"internal error: {type(e).__name__}: {e}"
    finally:
        signals.cleaning = True
        for line in release(cwd):
            log.warning("released: %s", line)
    if reason:
        log.error("failed: %s", reason)
        print(reason.replace("\n", " | ")[:4000], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
