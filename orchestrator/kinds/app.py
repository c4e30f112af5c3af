"""``app``: an application workload on the DUT (sysbench OLTP on MariaDB, pgbench on PostgreSQL, an external
declared workload), planned per OP mode as a ``prepare`` step then one ``run`` step per ladder point. The
step's ``job_text`` is its :class:`~labcontract.apps.AppStart` as JSON.

Interlock: a prepare makes a filesystem on the DUT (``purge``); a run writes (``write``); an external
workload is judged as writing (conservative: its declaration may do anything to the device).

A successful end carries ``app.json`` (:class:`~labcontract.apps.AppResult`, bounded; app-spec.json,
app.log, server.log, tool.out, fio.stderr are kept as artifacts only):

- prepare: no result row (like a purge); the tool and how long the load took go to the step's note.
  ``app.json`` is optional there; a present one must be valid.
- run: a result row of kind ``sysbench`` | ``pgbench`` | ``external``: throughput is ``metrics["tps"]``
  in TPS; an external workload without ``tps`` reports its first metric (in the order of ``app.json``),
  its unit being the metric's name (a sysbench / pgbench result without ``tps``: no throughput).
  ``lat_avg_ms`` / ``lat_p99_ms`` (and ``lat_max_ms``) become the latency figures in ns,
  ``seconds`` the runtime; the fio-only figures stay empty; ``metrics`` is the AppResult but its series
  (stored once, in ``series``: name -> per-second values as given); provenance as for a fio result.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pydantic import ValidationError
from sqlalchemy.orm import Session

from labcontract import interlock
from labcontract.apps import APP_RESULT_MAX_BYTES, AppResult, AppStart, expected_seconds
from labcontract.errors import StepOutputError
from labcontract.protocol import StartStep
from orchestrator.kinds.base import KindContext
from orchestrator.kinds.common import BaseKind, ctx_of, result_provenance, run_devices
from orchestrator.states import StepState, check_step
from orchestrator.store.models import Attempt, Result, Run, Step

log = logging.getLogger("orchestrator.controller")
APP_RESULT = "app.json"


def app_of(step: Step) -> AppStart:
    """The step's AppStart (its job text); a bad one raises ValueError (the step cannot be started)."""
    return AppStart.model_validate_json(step.job_text)


class AppKind(BaseKind):
    names = ("app",)
    agent_kind = ("app", 1)

    # the filesystem a prepare made is the lab's own: the agent knows it (its marker), the controller's
    # last observation of the DUT may show it as a signature; the agent judges that one at start
    lab_fs = True

    def operation(self, step: Step) -> str | None:
        try:
            app = app_of(step)
        except ValueError:
            return "purge"       # unreadable: judged as the most destructive (its start then fails anyway)
        return interlock.app_operation(app.kind, app.phase, destructive=True)   # external: conservative

    def expected_seconds(self, ctx: KindContext, step: Step) -> int:
        return expected_seconds(app_of(step))

    def start_message(self, ctx: KindContext, run: Run, step: Step, att: Attempt) -> StartStep:
        return StartStep(run_id=run.id, step_id=step.id, attempt_id=att.id, host=att.host, action="app",
                         devices=run_devices(run), job_name=step.name, kind="app", round=step.round,
                         suite=run.suite_name, workload=None, app=app_of(step),
                         timeout_s=att.timeout_s, dispatched_at=att.dispatched_at or ctx.clock())

    def store(self, ctx: KindContext, s: Session, att: Attempt, stored: Mapping[str, bytes]) -> None:
        app = app_of(att.step)
        raw = stored.get(APP_RESULT)
        if app.phase == "prepare":
            if raw is not None:
                res = parse_result(raw)
                att.step.note = (f"prepared by {res.tool} {res.tool_version}"
                                 f"{' (server ' + res.server_version + ')' if res.server_version else ''}"
                                 f" in {res.seconds:.0f}s")[:1024]
            return
        if raw is None:
            raise StepOutputError(f"{APP_RESULT} missing: the application step left no result")
        s.add(app_result(ctx, s, att, app, parse_result(raw)))
        log.info("%s point %s stored", app.kind, app.point, extra=ctx_of(att))

    def after_end(self, ctx: KindContext, s: Session, att: Attempt) -> None:
        """A prepare that failed for good leaves its OP mode's points nothing to run on: they fail at once,
        saying why, instead of each being refused by the agent."""
        step = att.step
        if step.state != StepState.FAILED or step.cell.get("phase") != "prepare":
            return
        why = f"not run: its prepare step {step.name} failed ({step.reason[:300]})"
        for other in step.run.steps:
            if other.seq > step.seq and other.kind == "app" and other.state == StepState.PENDING \
                    and other.cell.get("op_mode") == step.cell.get("op_mode"):
                check_step("step", other.id, other.state, StepState.FAILED)
                other.state, other.reason, other.ended_at = str(StepState.FAILED), why, ctx.clock()


def parse_result(raw: bytes) -> AppResult:
    """``app.json`` as an AppResult, bounded; anything else raises StepOutputError with the reason."""
    if len(raw) > APP_RESULT_MAX_BYTES:
        raise StepOutputError(f"{APP_RESULT} is {len(raw)} bytes (at most {APP_RESULT_MAX_BYTES})")
    try:
        return AppResult.model_validate_json(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
                             for err in e.errors()[:5])
        raise StepOutputError(f"{APP_RESULT} invalid: {problems}"[:4096]) from e


def headline(app: AppStart, res: AppResult) -> tuple[float | None, str]:
    """The row's throughput and its unit: ``tps`` in TPS; an external workload without it, its first metric."""
    if "tps" in res.metrics:
        return res.metrics["tps"], "TPS"
    if app.kind == "external" and res.metrics:
        name, value = next(iter(res.metrics.items()))
        return value, name[:16]
    return None, "TPS"


def app_result(ctx: KindContext, s: Session, att: Attempt, app: AppStart, res: AppResult) -> Result:
    throughput, unit = headline(app, res)
    ms = {k: v for k, v in res.metrics.items()}
    provenance = result_provenance(ctx, s, att) | {
        "app": {"kind": app.kind, "phase": app.phase, "point": app.point, "fs_size_bytes": app.fs_size_bytes,
                "server_version": res.server_version}}
    return Result(attempt_id=att.id, step_id=att.step_id, run_id=att.step.run_id,
                  kind=app.kind, tool=res.tool, tool_version=res.tool_version,
                  throughput=throughput, throughput_unit=unit,
                  read_iops=None, write_iops=None, iops=None, read_bw_bytes=None, write_bw_bytes=None,
                  bw_bytes=None,
                  lat_mean_ns=ms["lat_avg_ms"] * 1e6 if "lat_avg_ms" in ms else None,
                  lat_max_ns=ms["lat_max_ms"] * 1e6 if "lat_max_ms" in ms else None, lat_stddev_ns=None,
                  lat_p99_ns=ms["lat_p99_ms"] * 1e6 if "lat_p99_ms" in ms else None,
                  runtime_ms=int(res.seconds * 1000), fio_version=None,
                  metrics=res.model_dump(mode="json", exclude={"series"}), per_device=None,
                  series={k: list(v) for k, v in res.series.items()} or None, lat_hist=None,
                  provenance=provenance, created_at=ctx.clock())


KIND = AppKind()
