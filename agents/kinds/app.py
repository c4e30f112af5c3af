"""Step kind ``app``: an application workload on a DUT (sysbench on MariaDB, pgbench on PostgreSQL, or an
external workload the host declared), run by ``python -m agents.appstep app-spec.json app.json``.

Targets: the declared DUTs the message names (sysbench / pgbench: exactly one); an external workload must be
declared on this host (``--app-workloads``) and its parameters pass the declared schema (the declaration, never
the message, gives the command). The interlock (:func:`labcontract.interlock.app_operation`): a prepare makes a
filesystem (``purge``), a run writes into it (``write``), an external workload writes only when declared
``destructive``; a mounted device is always refused. The filesystem signature is no reason to refuse when the
DUT's current filesystem UUID is the one a previous prepare of this agent recorded in
``<state_dir>/apps/<dut>.json`` (the lab's own filesystem may be remade, and a run needs it).

Cleanup (after the process ended, also after a restart, a cancel or a timeout):
:func:`agents.apps.cleanup.release` stops the DB servers the step recorded and unmounts its mountpoint.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agents.kinds.base import (
    Host,
    Interlock,
    Launch,
    LiveFigures,
    LiveSource,
    StepKind,
    Targets,
    interlock_refusal,
    resolve_duts,
)
from labcontract import interlock
from labcontract.apps import AppStart, expected_seconds
from labcontract.errors import StepError
from labcontract.protocol import StartStep

if TYPE_CHECKING:
    from agents.attempt import Attempt

#: The step process, before its two arguments (a seam: unit tests point it at a fake).
APPSTEP_ARGV: tuple[str, ...] = (sys.executable, "-m", "agents.appstep")
BINARIES = ("mariadbd", "mariadb_install_db", "sysbench", "pg_bin_dir", "pgbench")


def may_mount() -> bool:
    """Whether this agent may mount a filesystem (root: mount(8) refuses any other user a mount fstab does not
    list, whatever its capabilities)."""
    return os.geteuid() == 0


def _release(attempt_dir: Path) -> list[str]:
    try:
        from agents.apps.cleanup import release
    except ImportError as e:
        raise StepError(f"cannot release attempt {attempt_dir.name}: agents.apps.cleanup is missing ({e}); "
                       "a DB server or mount of the step may be left") from e
    return list(release(attempt_dir))


class AppKind(StepKind):
    action: ClassVar[str] = "app"
    platforms: ClassVar[frozenset[str]] = frozenset({"linux"})   # Linux tools (docs/windows.md)
    artifacts: ClassVar[tuple[str, ...]] = ("app.json", "app-spec.json", "app.log", "server.log", "tool.out",
                                            "fio.stderr")
    tails: ClassVar[tuple[str, ...]] = ("fio.stderr", "app.log", "server.log", "tool.out")
    slow_cleanup: ClassVar[bool] = True
    refresh_observations: ClassVar[bool] = True

    def targets(self, msg: StartStep, host: Host) -> tuple[Targets, str]:
        if msg.app is None:
            return Targets(), 'an "app" step without its app part'
        duts, refused = resolve_duts(msg, host)
        if refused:
            return Targets(duts=tuple(duts)), refused
        app = msg.app
        if app.kind in ("sysbench", "pgbench") and not may_mount():
            return Targets(duts=tuple(duts)), (f"a {app.kind} step makes a filesystem on the DUT and mounts it: this "
                                               f"agent runs as uid {os.geteuid()}, which may not mount (run the "
                                               "agent of an application lab host as root; docs/apps.md)")
        if app.kind in ("sysbench", "pgbench") and len(duts) != 1:
            return Targets(duts=tuple(duts)), f"a {app.kind} step runs on exactly one DUT (named: {len(duts)})"
        targets = Targets(duts=tuple(duts), app=app)
        if app.external is not None:
            if host.workloads is None:
                return targets, (f"external workload {app.external.workload!r} is not declared on this host "
                                 "(declared: none; agent --app-workloads FILE)")
            decl, values, problems = host.workloads.resolve(app.external)
            if problems or decl is None:
                return targets, "; ".join(problems)
            ext = app.external.model_copy(update={"params": values})
            targets = Targets(duts=tuple(duts), external=decl, app=app.model_copy(update={"external": ext}))
        lock = self.interlock(msg, targets, host)
        return targets, interlock_refusal(lock, host) or mounted_refusal(targets, lock, host) or ""

    def interlock(self, msg: StartStep, targets: Targets, host: Host) -> Interlock:
        if msg.app is None:
            raise StepError('an "app" step without its app part')
        destructive = targets.external is not None and targets.external.destructive
        op = interlock.app_operation(msg.app.kind, msg.app.phase, destructive)
        return Interlock(op, targets.duts)     # the lab's own filesystem: judged for every kind (interlock_refusal)

    def launch(self, msg: StartStep, targets: Targets, host: Host) -> Launch:
        app = targets.app or msg.app
        if app is None:
            raise StepError(f"attempt {msg.attempt_id}: an app step without its app part")
        if app.kind == "external" and targets.external is None:
            raise StepError(f"attempt {msg.attempt_id}: an external step without its workload's declaration")
        job = json.dumps(app_spec(msg, app, targets, host), indent=1)
        return Launch({"app-spec.json": job}, (*APPSTEP_ARGV, "app-spec.json", "app.json"), job)

    def cleanup(self, attempt_dir: Path) -> list[str]:
        return _release(attempt_dir)

    def live(self, reader: LiveSource, attempt: Attempt, msg: StartStep) -> LiveFigures:
        if msg.app is None:
            return LiveFigures()
        live = reader.app_live(attempt)
        if live is not None:
            live = live.model_copy(update={"device": msg.devices[0] if msg.devices else ""})
        return LiveFigures(expected_s=float(expected_seconds(msg.app)), app=live)


def app_spec(msg: StartStep, app: AppStart, targets: Targets, host: Host) -> dict[str, Any]:
    """``app-spec.json``: what the step process gets (validated there as ``agents.apps.AppSpec``)."""
    return {"attempt_id": msg.attempt_id, "run_id": msg.run_id, "app": app.model_dump(mode="json"),
            "duts": [{"name": d.name, "path": d.path, "kind": d.kind, "size_bytes": d.size_bytes}
                     for d in targets.duts],
            "state_dir": str(host.state_dir.resolve()),
            "mount_root": str(host.app_mount_root) if host.app_mount_root is not None else None,
            "external": targets.external.spec() if targets.external is not None else None,
            "binaries": dict.fromkeys(BINARIES)}


def mounted_refusal(targets: Targets, lock: Interlock, host: Host) -> str | None:
    """An app step never runs on a mounted device, whatever its operation (the interlock already refused a
    destructive one)."""
    if lock.operation is not None:
        return None
    out = []
    for d in targets.duts:
        obs = host.platform.observe_dut(d.path)
        if obs.mountpoints:
            out.append(f"refusing an application workload on {d.path}: mounted on {', '.join(obs.mountpoints)}")
    return "; ".join(out) or None


KIND = AppKind()
