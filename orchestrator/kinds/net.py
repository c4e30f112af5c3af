"""``net``: one host's part of a network cell (target or initiator). The cell's steps start together; each
host's end stores a result of its own totals; once every host's step has ended the cell closes (NetGroup:
skew and the totals over the window where every host measured)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.errors import StepOutputError
from labcontract.protocol import NetStart, StartStep
from labcontract.suite import Workload
from orchestrator.kinds.base import KindContext
from orchestrator.kinds.common import BaseKind, host_provenance
from orchestrator.runs import netgroups
from orchestrator.states import TERMINAL_STEP, StepState
from orchestrator.store.models import Attempt, Host, NetGroup, Result, Run, Step

log = logging.getLogger("orchestrator.controller")
NET_TARGET_EXTRA_S = 2      # the target counts this much longer than its initiators measure


class NetKind(BaseKind):
    names = ("net",)
    agent_kind = ("net", 2)       # 2: tool block

    def expected_seconds(self, ctx: KindContext, step: Step) -> int:
        return super().expected_seconds(ctx, step) + int(ctx.tuning.net_start_lead_s) + 1 + NET_TARGET_EXTRA_S

    def start_message(self, ctx: KindContext, run: Run, step: Step, att: Attempt) -> StartStep:
        return StartStep(run_id=run.id, step_id=step.id, attempt_id=att.id, host=att.host, action="net",
                         devices=(), job_name=step.name, kind="net", suite=run.suite_name,
                         workload=Workload.model_validate(step.workload), net=net_start(ctx, run, step, att),
                         timeout_s=att.timeout_s, dispatched_at=att.dispatched_at or ctx.clock())

    def cohort(self, run: Run, step: Step) -> list[Step]:
        """A network step stands for its cell: every host's pending step of that cell, the target's (h0) first."""
        return sorted((st for st in run.steps
                       if st.seq == step.seq and st.kind == "net" and st.state == StepState.PENDING),
                      key=lambda st: st.id)

    def store(self, ctx: KindContext, s: Session, att: Attempt, stored: Mapping[str, bytes]) -> None:
        try:
            store_net(ctx, s, att, stored.get("net.json", b""))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise StepOutputError(f"net.json unreadable: {e}") from e

    def after_end(self, ctx: KindContext, s: Session, att: Attempt) -> None:
        close_net_group(ctx, s, att.step.run, att.step)


def net_start(ctx: KindContext, run: Run, step: Step, att: Attempt) -> NetStart:
    """The network part of a start: the whole cell starts ``net_start_lead_s`` after its dispatch (the
    attempts of a cell share their dispatch time); the target counts a little longer than the
    initiators measure, so their window is inside its own."""
    topo = run.topology or {}
    assert step.workload is not None
    seconds = Workload.model_validate(step.workload).expected_seconds
    role = step.cell.get("role", "initiator")
    return NetStart(role=role, paths=tuple(step.cell.get("net_paths", [])), mtu=int(step.cell["mtu"]),
                    tool=step.cell.get("tool", "fio"),
                    start_at=(att.dispatched_at or ctx.clock()) + ctx.tuning.net_start_lead_s,
                    seconds=seconds + (NET_TARGET_EXTRA_S if role == "target" else 0), iqn=topo.get("iqn"),
                    lun=topo.get("lun", 1), iscsi_port=topo.get("iscsi_port", 3260),
                    nbd_port=topo.get("nbd_port", 10809))


def store_net(ctx: KindContext, s: Session, att: Attempt, raw: bytes) -> None:
    """One host's part of a network cell: a result whose figures are that host's totals (whole run), with
    every path's own figures in ``per_path``; the cell's window totals come later. Kind ``net``, the tool
    (fio | iscsi) in ``tool``, throughput in Gbps; ``fio_version`` stays empty."""
    out = json.loads(raw or b"{}")
    # per path: its figures and its per-second series (the target samples NIC counters at 10 Hz)
    paths = {name: {k: v for k, v in p.items() if k != "series"}
             | {"mtu": out["mtu"].get(name), "series": netgroups.per_second(p.get("series", []))}
             for name, p in out["paths"].items()}
    total = out["total"]
    io = out.get("io")
    if io is not None:           # tool block: fio's own figures for the device the paths carry
        io = netgroups.checked_io(io)
        read, write = float(io["read_bw_bytes"]), float(io["write_bw_bytes"])
        lat = [(float(io["lat_mean_ns"]), 1.0)] if io.get("lat_mean_ns") else []
    else:
        read = sum(p.get("read_gbps") or 0.0 for p in paths.values()) * 1e9 / 8
        write = sum(p.get("write_gbps") or 0.0 for p in paths.values()) * 1e9 / 8
        lat = [(p["lat_mean_ns"], p["iops"]) for p in paths.values() if p.get("lat_mean_ns") and p.get("iops")]
    host = s.get(Host, att.host)
    tool = str(att.step.cell.get("tool", "fio"))[:32]
    provenance = {"host": host_provenance(host), "agent_version": host.agent_version if host else None,
                  "role": out["role"], "tool": out["tool"], "mtu": out["mtu"],
                  "suite_sha256": att.step.run.suite_sha256,
                  "net_spec": {k: out.get(k) for k in ("start_at", "late_s", "iqn", "discovery", "block") if k in out},
                  "failures": netgroups.checked_failures(out.get("failures", []))}
    gbps = float(total["gbps"])
    s.add(Result(attempt_id=att.id, step_id=att.step_id, run_id=att.step.run_id,
                 kind="net", tool=tool, tool_version=str(out.get("tool_version") or "")[:128],
                 throughput=gbps, throughput_unit="Gbps",
                 read_iops=0.0, write_iops=0.0, iops=total.get("iops") or 0.0, read_bw_bytes=read,
                 write_bw_bytes=write, bw_bytes=gbps * 1e9 / 8,
                 lat_mean_ns=sum(v * w for v, w in lat) / sum(w for _v, w in lat) if lat else None,
                 lat_max_ns=None, lat_stddev_ns=None, lat_p99_ns=(io or {}).get("lat_p99_ns"),
                 runtime_ms=int(total["seconds"] * 1000), fio_version=None,
                 metrics={k: v for k, v in out.items() if k != "paths"} | ({"io": io} if io is not None else {}),
                 per_path=paths, series=None,
                 provenance=provenance, created_at=ctx.clock()))
    att.fio_started_at = out.get("started_at") or att.fio_started_at


def close_net_group(ctx: KindContext, s: Session, run: Run, step: Step) -> None:
    """Once every host's step of a network cell has ended: its skew and window totals (NetGroup)."""
    group = sorted((st for st in run.steps if st.seq == step.seq and st.kind == "net"), key=lambda st: st.id)
    if any(st.state not in TERMINAL_STEP for st in group) or s.scalar(
            select(NetGroup.id).where(NetGroup.run_id == run.id, NetGroup.seq == step.seq)) is not None:
        return
    s.flush()
    outputs: dict[str, dict[str, Any]] = {}
    reason = ""
    for st in group:
        att = st.attempts[-1] if st.attempts else None
        art = next((a for a in att.artifacts if a.name == "net.json"), None) if att else None
        if st.state != StepState.SUCCEEDED or art is None:
            reason = reason or f"{st.host}: {st.state} {st.reason}".strip()
            continue
        outputs[st.host] = json.loads(ctx.artifacts.read(art.path))
    agg: dict[str, Any] = {}
    if not reason:
        try:
            agg = netgroups.aggregate(outputs)
        except ValueError as e:
            reason = str(e)
    cell = {k: v for k, v in step.cell.items() if k not in ("role",)}
    s.add(NetGroup(run_id=run.id, seq=step.seq, name=step.name.rsplit("@", 1)[0], cell=cell,
                   hosts=[st.host for st in group], starts=agg.get("starts", {}), skew_ms=agg.get("skew_ms"),
                   window_start=agg.get("window_start"), window_end=agg.get("window_end"),
                   total=agg.get("total", {}) | ({"window_s": agg["window_s"], "skew_ok": agg["skew_ok"]}
                                                 if agg else {}),
                   per_path=agg.get("per_path", {}), per_host=agg.get("per_host", {}),
                   failures=agg.get("failures", []), complete=not reason, reason=reason, created_at=ctx.clock()))
    if agg:
        log.info("network cell %s: %.3f Gbps over %.1fs (skew %.1f ms)", step.name.rsplit("@", 1)[0],
                 agg["total"]["initiator_gbps"], agg["window_s"], agg["skew_ms"],
                 extra={"run": run.id, "step": step.name, "host": run.host})


KIND = NetKind()
