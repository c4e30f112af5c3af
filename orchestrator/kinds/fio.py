"""fio steps on a host's DUTs: ``measure`` and ``precondition`` (rounds until steady state); a rounds run's
measured cells (SNIA PTS-E, :mod:`orchestrator.runs.rounds`) and its WIPC passes (a ``precondition`` of one round)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from labcontract import hostcpu, interlock
from labcontract.drivehealth import ARTIFACT as HEALTH_ARTIFACT
from labcontract.drivehealth import parse_drive_health
from labcontract.drivetemp import ARTIFACT as TEMP_ARTIFACT
from labcontract.drivetemp import parse_drive_temp, summary
from labcontract.errors import FioError, ProtocolError, StepOutputError
from labcontract.fiojob import device_section, render_job
from labcontract.fioresult import StepMetrics, latency_bins_both, parse_fio_groups
from labcontract.fioseries import read_status_stream, series_summary
from labcontract.hostcpu import HostCpu
from labcontract.power import ARTIFACT as POWER_ARTIFACT
from labcontract.power import parse_host_power
from labcontract.protocol import ARTIFACT_MAX_BYTES, MAX_STATUS_INTERVAL_S, StartStep
from labcontract.rounds import is_wipc
from labcontract.suite import Workload
from orchestrator.kinds.base import KindContext
from orchestrator.kinds.common import BaseKind, ctx_of, generic_start, result_provenance, run_devices
from orchestrator.runs import loadcurve, opmode, preconditioning, rounds
from orchestrator.states import StepState
from orchestrator.store.models import Attempt, Result, Run, Step

log = logging.getLogger("orchestrator.controller")


class FioKind(BaseKind):
    names = ("measure", "precondition")
    retryable = True                     # a whole fio job against the run's own devices
    repurge_before_retry = True

    def operation(self, step: Step) -> str | None:
        rw = step.workload.get("rw") if step.workload else None
        return interlock.destructive_operation("fio", rw)

    def start_message(self, ctx: KindContext, run: Run, step: Step, att: Attempt) -> StartStep:
        workload = Workload.model_validate(step.workload) if step.workload else None
        if workload is not None and step.cell.get("op_mode", "stock") != "stock":
            # an OP mode set on the device by dut_state: fio runs the cell's own footprint, not the emulation
            workload, step.note = opmode.step_workload(run, step, ctx.artifacts.read)
            if workload is not None:
                step.job_text = render_job(workload, list(run_devices(run)))
        live = step.kind == "precondition" or bool(step.workload and run.live)
        interval = status_interval(workload.expected_seconds if workload else 0, len(run_devices(run)))
        return generic_start(ctx, run, step, att, action="fio", workload=workload,
                             status_interval_s=interval if live else None)

    def store(self, ctx: KindContext, s: Session, att: Attempt, stored: Mapping[str, bytes]) -> None:
        try:
            self._store(ctx, s, att, stored.get("fio.json", b""), drive_health(att, stored.get(HEALTH_ARTIFACT)),
                        stored)
        except FioError as e:
            raise StepOutputError(str(e)) from e

    def _store(self, ctx: KindContext, s: Session, att: Attempt, raw: bytes,
               health: dict[str, Any] | None = None, stored: Mapping[str, bytes] | None = None) -> None:
        """Parse fio's output and store the result; a precondition round also decides whether another
        round follows, a load curve's maximum adds the curve's points."""
        step, run = att.step, att.step.run
        source = f"attempt {att.id} fio.json"
        per_device: dict[str, Any] | None = None
        # With --status-interval=1 (always for preconditioning; for every step of a live run) fio's output
        # is a stream of cumulative reports, the last the final one; the step keeps its per-second series.
        stream = read_status_stream(raw, source=source)          # the stream read once
        metrics = stream.metrics.model_copy(update={"host_cpu": host_cpu_of(att, stored or {},
                                                                           stream.metrics.combined.ios)})
        series = series_summary(stream.samples)
        final = stream.final
        devices = run_devices(run)
        bins, clat = latency_bins_both(final, source=source)   # the total latency's, and the completion latency's
        lat_hist: dict[str, Any] | None = dict(bins[0]) if bins else None
        if lat_hist is not None and clat and (clat[0]["read"] or clat[0]["write"]):
            lat_hist["clat"] = dict(clat[0])
        if len(devices) > 1:
            groups = parse_fio_groups(final, source=source)
            per_device = {}
            for i, dev in enumerate(devices):
                g = groups.get(device_section(step.name, i))
                if g is None:
                    raise FioError(f"no result for device {dev} (job {device_section(step.name, i)})", path=source)
                per_device[dev] = g.model_dump(mode="json")
            if bins and lat_hist is not None:
                lat_hist["per_device"] = {dev: bins[1].get(device_section(step.name, i), {"read": [], "write": []})
                                          for i, dev in enumerate(devices)}
        result = fio_result(ctx, s, att, metrics, per_device=per_device, series=series, lat_hist=lat_hist,
                            drive_health=health)
        power = host_power(att, (stored or {}).get(POWER_ARTIFACT))
        if power is not None:
            result.provenance = {**(result.provenance or {}), "power": power}
        temps = drive_temps(att, (stored or {}).get(TEMP_ARTIFACT))
        if temps:
            result.provenance = {**(result.provenance or {}), "drive_temp": temps}
        s.add(result)
        if loadcurve.is_maximum(step):
            points, left_out = loadcurve.points_after(run, step, metrics)
            run.steps.extend(points)
            if left_out:
                step.note = f"{step.note}; {left_out}" if step.note else left_out
                log.warning("%s", left_out, extra=ctx_of(att))
            log.info("load curve: %d point(s) queued after the maximum (%.0f IOPS)", len(points),
                     metrics.combined.iops or 0.0, extra=ctx_of(att))
        if rounds.is_rounds_step(step):
            queued = rounds.after_cell(s, run, step, metrics, ctx.clock())
            run.steps.extend(queued)
            if queued:
                log.info("round %d: not steady yet; round %d queued (%d steps)", step.round, step.round + 1,
                         len(queued), extra=ctx_of(att))
        if step.kind == "precondition" and not is_wipc(step.cell):
            nxt = preconditioning.after_round(s, run, step, metrics, ctx.clock())
            if nxt is not None:
                run.steps.append(nxt)
                log.info("precondition round %d: not steady yet; round %d queued", step.round, nxt.round,
                         extra=ctx_of(att))
            else:
                log.info("precondition done after round %d", step.round, extra=ctx_of(att))

    def after_end(self, ctx: KindContext, s: Session, att: Attempt) -> None:
        step = att.step
        if step.state != StepState.FAILED:
            return
        if step.kind == "precondition" and not is_wipc(step.cell):
            preconditioning.fail_group(s, step.run, step, att.reason, ctx.clock())
        elif rounds.is_rounds_step(step):
            rounds.fail_cell(s, step.run, step, att.reason, ctx.clock())


# fio's --status-interval stream (fio.json) must stay within an artifact's bound (ARTIFACT_MAX_BYTES, 128 MiB): a
# json+ report is 20-37 KiB per device entry (measured: 4 jobs grouped, 4K random writes, direct and buffered); its
# histogram prints only the bins that hold I/Os, at most 1,856 per direction (about 40 KiB), so 96 KiB is assumed
# (both directions spread over every bin) and the stream gets three quarters of the bound.
REPORT_BYTES_PER_DEVICE = 96 << 10
STREAM_BUDGET_BYTES = ARTIFACT_MAX_BYTES * 3 // 4


def status_interval(seconds: int, devices: int) -> int:
    """The step's fio ``--status-interval``: 1 s (the per-second series) unless its stream would outgrow
    :data:`STREAM_BUDGET_BYTES`, then the shortest interval that keeps it within (a 6-hour step on one device:
    22 s; one of 15 minutes: still 1 s). A stream past the bound could not be sent and the step would fail."""
    reports = max(STREAM_BUDGET_BYTES // (REPORT_BYTES_PER_DEVICE * max(devices, 1)), 1)
    return min(max(1, -(-max(seconds, 0) // reports)), MAX_STATUS_INTERVAL_S)


def fio_result(ctx: KindContext, s: Session, att: Attempt, metrics: StepMetrics, *,
               per_device: dict[str, Any] | None = None, series: dict[str, Any] | None = None,
               lat_hist: dict[str, Any] | None = None, drive_health: dict[str, Any] | None = None) -> Result:
    """The result row of a fio step, with its provenance (and its DUTs' health around it, when read)."""
    c, r, w = metrics.combined, metrics.read, metrics.write
    provenance = result_provenance(ctx, s, att)
    if drive_health is not None:
        provenance["drive_health"] = drive_health
    return Result(attempt_id=att.id, step_id=att.step_id, run_id=att.step.run_id,
                  kind="fio", tool="fio", tool_version=metrics.fio_version[:128],
                  throughput=c.iops, throughput_unit="IOPS",
                  read_iops=r.iops, write_iops=w.iops, iops=c.iops, read_bw_bytes=r.bw_bytes,
                  write_bw_bytes=w.bw_bytes, bw_bytes=c.bw_bytes, lat_mean_ns=c.lat_mean_ns,
                  lat_max_ns=c.lat_max_ns, lat_stddev_ns=c.lat_stddev_ns,
                  lat_p99_ns=c.percentiles_ns.get("p99"), runtime_ms=metrics.runtime_ms,
                  fio_version=metrics.fio_version, metrics=metrics.model_dump(mode="json"),
                  per_device=per_device, series=series, lat_hist=lat_hist,
                  provenance=provenance, created_at=ctx.clock())


def host_cpu_of(att: Attempt, stored: Mapping[str, bytes], ios: int) -> HostCpu | None:
    """The host's CPU over the step from the agent's two /proc/stat readings (labcontract.hostcpu); None when the
    agent sent none (Windows, an older agent) or a reading is refused, which is logged: the step's figures stand."""
    start, end = stored.get(hostcpu.START), stored.get(hostcpu.END)
    if not start or not end:
        return None
    try:
        return hostcpu.host_cpu(start, end, ios)
    except ValueError as e:
        log.warning("host CPU over the step not recorded: %s", e, extra=ctx_of(att))
        return None


def drive_health(att: Attempt, raw: bytes | None) -> dict[str, Any] | None:
    """The attempt's ``drive-health.json`` as the result keeps it; None when the agent sent none, or one that does
    not fit (logged: a result is never refused for it)."""
    if raw is None:
        return None
    try:
        return parse_drive_health(raw, f"attempt {att.id} {HEALTH_ARTIFACT}").model_dump(mode="json")
    except ProtocolError as e:
        log.warning("%s", e, extra=ctx_of(att))
        return None


def host_power(att: Attempt, raw: bytes | None) -> dict[str, Any] | None:
    """The attempt's ``host-power.json`` (labcontract.power) as the result keeps it; None when the agent sent none
    (no BMC declared, an older agent), or one that does not fit (logged: a result is never refused for it)."""
    if raw is None:
        return None
    try:
        # the per-second series stays in the artifact (host-power.json): the row keeps the summary
        return parse_host_power(raw, f"attempt {att.id} {POWER_ARTIFACT}").model_dump(mode="json",
                                                                                     exclude={"series"})
    except ProtocolError as e:
        log.warning("%s", e, extra=ctx_of(att))
        return None


def drive_temps(att: Attempt, raw: bytes | None) -> dict[str, Any] | None:
    """The attempt's ``drive-temp.json`` (labcontract.drivetemp) as the result keeps it: per DUT its range, mean and
    series in at most 360 points; None when the agent sent none or one that does not fit (logged)."""
    if raw is None:
        return None
    try:
        return summary(parse_drive_temp(raw, f"attempt {att.id} {TEMP_ARTIFACT}"))
    except ProtocolError as e:
        log.warning("%s", e, extra=ctx_of(att))
        return None


KIND = FioKind()
