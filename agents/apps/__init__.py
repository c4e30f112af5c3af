"""Application workloads on the DUT, agent side: the step process's input (:class:`AppSpec`), the context a
database driver gets (:class:`AppContext`) and the driver shape (:class:`AppDriver`).

``python -m agents.appstep app-spec.json app.json`` (:mod:`agents.appstep`) validates the spec, makes or
checks the filesystem and mounts it (:mod:`agents.apps.fs`), then hands over to the kind's driver:

- ``sysbench``: :mod:`agents.apps.sysbench` (server: :mod:`agents.apps.mariadb`)
- ``pgbench``: :mod:`agents.apps.pgbench` (server: :mod:`agents.apps.postgres`)

A driver is a module with two functions, called with the DUT's filesystem mounted at ``ctx.mountpoint``:

- ``prepare(ctx, params) -> AppResult``: initialise the database under the mountpoint, load it, stop the server;
- ``run(ctx, params, point) -> AppResult``: start the server on the prepared data, warm up, measure ``point``
  threads / clients, stop the server.

A driver reports every server it starts through ``ctx.on_server(pid, kind, datadir)`` right after the start
(before waiting on anything) and ``ctx.on_server_gone(pid)`` once it stopped it; appstep records them in
``app-state.json`` so :func:`agents.apps.cleanup.release` can stop what a killed process left behind. A driver
stops its own server in ``finally``. Long waits check ``ctx.stop`` (set on SIGTERM / SIGINT; the main thread
also gets :class:`Cancelled` raised from the signal handler).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from labcontract.apps import AppResult, AppStart

MAX_PATH = 4096
MAX_DUTS = 64
MAX_ARGV = 64
ID_RE = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
DUT_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

PathStr = Annotated[str, Field(min_length=1, max_length=MAX_PATH, pattern=r"^/[^\x00\n]*$")]  # absolute
Arg = Annotated[str, Field(min_length=1, max_length=MAX_PATH, pattern=r"^[^\x00]*$")]


class DutSpec(BaseModel):
    """One DUT of the step, as the agent declared it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=DUT_NAME_RE)]
    path: PathStr
    kind: Literal["block", "file"]
    size_bytes: Annotated[int, Field(ge=0, le=1 << 60)]


class ExternalSpec(BaseModel):
    """An external workload as the agent's own configuration declares it (never from the wire)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    command: Annotated[tuple[Arg, ...], Field(min_length=1, max_length=MAX_ARGV, strict=False)]
    timeout_s: Annotated[int, Field(ge=1, le=30 * 86400)]
    destructive: bool = False


class Binaries(BaseModel):
    """Tool paths from the agent's configuration; None: found on the host (``shutil.which``, the
    PostgreSQL version directories)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    mariadbd: PathStr | None = None
    mariadb_install_db: PathStr | None = None
    sysbench: PathStr | None = None
    pg_bin_dir: PathStr | None = None
    pgbench: PathStr | None = None


class AppSpec(BaseModel):
    """``app-spec.json``: what the agent hands the step process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempt_id: Annotated[str, Field(pattern=ID_RE)]
    run_id: Annotated[str, Field(pattern=ID_RE)]
    app: AppStart
    duts: Annotated[tuple[DutSpec, ...], Field(min_length=1, max_length=MAX_DUTS)]
    state_dir: PathStr
    # where the DUT's filesystem is mounted: <mount_root>/<attempt_id> (None: <attempt dir>/mnt). A directory
    # every OS user can traverse (PostgreSQL runs as its own user and must reach its PGDATA under it)
    mount_root: PathStr | None = None
    external: ExternalSpec | None = None
    binaries: Binaries = Binaries()

    def mountpoint(self, attempt_dir: Path) -> Path:
        return Path(self.mount_root) / self.attempt_id if self.mount_root else attempt_dir / "mnt"

    @model_validator(mode="after")
    def _consistent(self) -> AppSpec:
        if self.app.kind in ("sysbench", "pgbench") and len(self.duts) != 1:
            raise ValueError(f"a {self.app.kind} step runs on exactly one DUT (got {len(self.duts)})")
        if self.app.kind == "external":
            if self.external is None:
                raise ValueError("an external step needs the workload's declaration (external)")
            if self.app.external is not None and self.app.external.workload != self.external.name:
                raise ValueError(f"the step names workload {self.app.external.workload!r}, the declaration is "
                                 f"{self.external.name!r}")
        elif self.external is not None:
            raise ValueError(f"a {self.app.kind} step carries no external declaration")
        if len({d.name for d in self.duts}) != len(self.duts):
            raise ValueError("a DUT name appears twice")
        return self


class Cancelled(Exception):
    """SIGTERM / SIGINT: the step stops, releasing what it holds."""


@dataclass
class AppContext:
    """What a driver gets. ``mountpoint`` is mounted (the DUT's filesystem) when the driver is called."""

    cwd: Path                                   # the attempt directory
    mountpoint: Path                            # AppSpec.mountpoint(cwd)
    spec: AppSpec
    log: logging.Logger                         # -> app.log
    live: Callable[[Mapping[str, float]], None]  # rewrite live.json with one second's figures ("t" added)
    on_server: Callable[[int, str, Path], None]  # (pid, kind, datadir): record a started server
    on_server_gone: Callable[[int], None]       # (pid): the server stopped
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def dut(self) -> DutSpec:
        return self.spec.duts[0]

    @property
    def binaries(self) -> Binaries:
        return self.spec.binaries

    @property
    def tool_out(self) -> Path:
        """The tool's output (bounded by :func:`agents.apps.proc.bound_file`)."""
        return self.cwd / "tool.out"

    @property
    def server_log(self) -> Path:
        return self.cwd / "server.log"


class AppDriver(Protocol):
    """A database workload kind's module (``agents.apps.sysbench``, ``agents.apps.pgbench``)."""

    def prepare(self, ctx: AppContext, params: Any) -> AppResult: ...

    def run(self, ctx: AppContext, params: Any, point: int) -> AppResult: ...


# kind -> (driver module, AppStart attribute holding its params)
DRIVERS: dict[str, tuple[str, str]] = {
    "sysbench": ("agents.apps.sysbench", "sysbench"),
    "pgbench": ("agents.apps.pgbench", "pgbench"),
}
