"""One host's part of a network step, run by the agent as its own process (like fio): the runner's
wrapper records its exit code, so it survives an agent restart and its end is collected like fio's.

``python -m agents.netstep net-spec.json net.json``

The spec (written by :class:`agents.runner.StepRunner`) holds the host's role, its paths resolved to
interfaces and peer addresses, the MTU, the tool, the workload and ``start_at``. The process:

1. sets the MTU of its path interfaces when the agent manages it (``--manage-mtu``; on lab hosts
   Ansible sets it: ``playbooks/iscsi_initiator.yml``), then reads it back: a path whose MTU is not
   the suite's fails the step, naming the interface;
2. waits for ``start_at``, the moment every host of the step starts (clocks in sync: NTP/PTP on a
   lab, one clock in the namespace lab), and records when its tools actually started;
3. measures: the **target** counts each path's NIC bytes ten times a second; an **initiator** runs
   its tool (:data:`INITIATOR_TOOLS`): fio (``nbd`` engine, one process per path), iscsi-perf on every
   path at once after SendTargets discovery and a READ CAPACITY login on each path, or fio on the
   kernel's iSCSI disk / dm-multipath map with each path's NIC counted (``block``,
   :mod:`agents.netblock`);
4. writes ``net.json``: per path the totals and a per-second series of ``[t_start, t_end, bytes,
   ios]`` (epoch seconds), so the controller can sum exactly the window where every host ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.netblock import resolve as resolve_block
from agents.netblock import run_block
from agents.netmeasure import (
    STALL_S,
    SYS_CLASS_NET,
    NetMeasureError,
    NetPathTarget,
    count_nic_bytes,
    gbps,
    iscsi_capacity,
    iscsi_discover,
    iscsi_perf_paths,
    run_fio_paths,
    wait_until,
)
from labcontract.errors import NetStepError, StepError
from labcontract.suite import Workload


def read_mtu(iface: str, sys_class_net: Path = SYS_CLASS_NET) -> int:
    try:
        return int((sys_class_net / iface / "mtu").read_text())
    except (OSError, ValueError) as e:
        raise NetStepError(f"interface {iface}: cannot read its MTU ({e})") from None


def ensure_mtu(paths: Sequence[dict[str, Any]], mtu: int, *, manage: bool) -> dict[str, int]:
    """Each path's MTU as the kernel reports it, after setting it when ``manage``."""
    out = {}
    for p in paths:
        if manage and read_mtu(p["iface"]) != mtu:
            res = subprocess.run(["ip", "link", "set", "dev", p["iface"], "mtu", str(mtu)], capture_output=True,
                                 text=True)
            if res.returncode != 0:
                raise NetStepError(f"path {p['name']} ({p['iface']}): cannot set MTU {mtu}: {res.stderr.strip()}")
        out[p["name"]] = got = read_mtu(p["iface"])
        if got != mtu:
            raise NetStepError(f"path {p['name']} ({p['iface']}) has MTU {got}, the step wants {mtu} (set it "
                               "with playbooks/iscsi_initiator.yml, or run the agent with --manage-mtu)")
    return out


def _targets(spec: dict[str, Any], mtus: dict[str, int], iqn: str) -> list[NetPathTarget]:
    return [NetPathTarget(key=p["name"], address=p["peer"], iqn=iqn, lun=spec["lun"], iscsi_port=spec["iscsi_port"],
                          nbd_port=spec["nbd_port"], mtu=mtus[p["name"]]) for p in spec["paths"]]


def run_fio(spec: dict[str, Any], workload: Workload, mtus: dict[str, int], workdir: Path) -> dict[str, Any]:
    run = run_fio_paths(workload, _targets(spec, mtus, spec.get("iqn") or ""), workdir)
    paths: dict[str, dict[str, Any]] = {}
    ends: list[float] = []
    for key, r in run.paths.items():
        series: list[list[float]] = []
        prev = (0.0, 0, 0)
        for smp in r.samples:
            if smp.t - prev[0] >= 0.2:
                series.append([run.t0 + prev[0], run.t0 + smp.t, float(smp.bytes - prev[1]), float(smp.ios - prev[2])])
                prev = (smp.t, smp.bytes, smp.ios)
        m = r.metrics
        paths[key] = {"gbps": r.gbps, "iops": r.iops, "lat_mean_ns": r.lat_mean_ns,
                      "lat_p99_ns": m.combined.percentiles_ns.get("p99"), "read_gbps": m.read.bw_bytes * 8 / 1e9,
                      "write_gbps": m.write.bw_bytes * 8 / 1e9, "bytes": m.read.io_bytes + m.write.io_bytes,
                      "seconds": m.runtime_ms / 1000.0, "completed": r.completed, "returncode": r.returncode,
                      "series": series}
        if series:
            ends.append(series[-1][1])
    failures = [{**f, "stopped_at": run.t0 + f["stopped_at_s"]} for f in run.summary()["failures"]]
    ended = max(ends, default=time.time())
    # measured from fio's first report past its ramp (connecting and ramping are not steady traffic)
    firsts = [p["series"][0][1] for p in paths.values() if p["series"]]
    measure_from = max(max(firsts, default=run.t0), run.t0 + workload.ramp_time)
    return {"started_at": run.t0, "ended_at": ended, "measure_from": min(measure_from, ended), "measure_to": ended,
            "paths": paths, "failures": failures, "job": run.job}


def _iscsi_failures(paths: dict[str, Any], end: float) -> list[dict[str, Any]]:
    """A path whose I/Os stopped ``STALL_S`` before the end (a pulled cable: iscsi-perf waits forever)."""
    out = []
    for key, p in paths.items():
        moving = [iv for iv in p["series"] if iv[2] > 0]
        stopped = moving[-1][1] if moving else p["series"][0][0] if p["series"] else end
        if end - stopped < STALL_S:
            continue
        others = [k for k, o in paths.items() if k != key and o["series"] and o["series"][-1][2] > 0]
        after = [iv for k in others for iv in paths[k]["series"] if iv[0] >= stopped]
        carried = max((iv[1] for iv in after), default=stopped) - stopped
        out.append({"path": key, "stopped_at": stopped, "survivors": others, "carried_on_s": carried,
                    "survivor_gbps": gbps(sum(iv[2] for iv in after), carried) if carried > 0 else 0.0})
    return out


def prepare_iscsi(spec: dict[str, Any], mtus: dict[str, int]) -> tuple[list[NetPathTarget], dict[str, Any]]:
    """Before the common start: SendTargets discovery and a login (READ CAPACITY) on every path."""
    discovery: dict[str, Any] = {}
    iqn = spec.get("iqn")
    for p in spec["paths"]:
        found = iscsi_discover(p["peer"], port=spec["iscsi_port"])
        discovery[p["name"]] = [{"iqn": t.iqn, "portal": t.portal, "luns": t.luns} for t in found]
        if iqn is None:
            if len(found) != 1:
                raise NetStepError(f"path {p['name']}: the portal {p['peer']} announces {len(found)} targets; "
                                   "name one with network.iqn")
            iqn = found[0].iqn
        elif iqn not in {t.iqn for t in found}:
            raise NetStepError(f"path {p['name']}: target {iqn} not announced by portal {p['peer']}")
    assert iqn is not None
    targets = _targets(spec, mtus, iqn)
    capacity = {t.key: iscsi_capacity(t) for t in targets}
    return targets, {"iqn": iqn, "discovery": discovery,
                     "capacity": {k: {"bytes": c.bytes, "block_size": c.block_size} for k, c in capacity.items()}}


def run_iscsi(targets: list[NetPathTarget], prep: dict[str, Any], workload: Workload) -> dict[str, Any]:
    """iscsi-perf on every path at once for the workload's runtime."""
    block = next(iter(prep["capacity"].values()))["block_size"]
    started = time.time()
    results = iscsi_perf_paths(targets, seconds=workload.runtime, transfer_blocks=max(1, workload.bs // block),
                               max_requests=workload.iodepth * workload.numjobs,
                               random=workload.rw != "read" and workload.percentage_random != 0)
    paths = {}
    for key, r in results.items():
        series = [[started + i, started + i + 1, float(n * r.transfer_bytes), float(n)]
                  for i, n in enumerate(r.per_second_ios)]
        paths[key] = {"gbps": r.gbps, "iops": r.iops, "lat_mean_ns": None, "read_gbps": r.gbps, "write_gbps": 0.0,
                      "bytes": r.bytes, "seconds": r.seconds, "completed": True, "series": series,
                      "capacity_bytes": prep["capacity"][key]["bytes"], "transfer_bytes": r.transfer_bytes}
    ended = started + max((r.seconds for r in results.values()), default=0.0)
    # the first second holds each path's first requests: measured from the second one on
    measure_from = started + 1 if ended - started > 2 else started
    return {"started_at": started, "ended_at": ended, "measure_from": measure_from, "measure_to": ended,
            "paths": paths, "failures": _iscsi_failures(paths, ended), "iqn": prep["iqn"],
            "discovery": prep["discovery"]}


@dataclass(frozen=True)
class InitiatorTool:
    """How an initiator measures under one ``network.tool``: what it prepares before the common start (discovery,
    logins, finding its device: a failure there fails the step before any host starts) and the measurement."""

    prepare: Callable[[dict[str, Any], dict[str, int]], Any]
    measure: Callable[[dict[str, Any], Any, Workload, dict[str, int], Path], dict[str, Any]]


INITIATOR_TOOLS: dict[str, InitiatorTool] = {
    "fio": InitiatorTool(lambda spec, mtus: None,
                         lambda spec, _prep, w, mtus, workdir: run_fio(spec, w, mtus, workdir / "nbd")),
    "iscsi": InitiatorTool(prepare_iscsi, lambda _spec, prep, w, _mtus, _workdir: run_iscsi(prep[0], prep[1], w)),
    "block": InitiatorTool(lambda spec, _mtus: resolve_block(spec),
                           lambda spec, prep, w, _mtus, workdir: run_block(spec, prep, w, workdir / "block")),
}


def run(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    mtus = ensure_mtu(spec["paths"], spec["mtu"], manage=spec.get("manage_mtu", False))
    workload = Workload.model_validate(spec["workload"])
    tool = INITIATOR_TOOLS[spec["tool"]] if spec["role"] == "initiator" else None
    prep = tool.prepare(spec, mtus) if tool is not None else None
    wait_until(spec["start_at"])
    if tool is None:
        out = count_nic_bytes(spec["paths"], spec["seconds"])
        out["failures"] = []
    else:
        out = tool.measure(spec, prep, workload, mtus, workdir)
    total = out.pop("total", None)          # a tool that knows its own I/O (block: fio's) says so
    if total is None:
        total_bytes = sum(p["bytes"] for p in out["paths"].values())
        secs = max((p["seconds"] for p in out["paths"].values()), default=0.0)
        ios = [p["iops"] * p["seconds"] for p in out["paths"].values() if p.get("iops") is not None]
        total = {"gbps": gbps(total_bytes, secs), "bytes": total_bytes, "seconds": secs,
                 "iops": sum(ios) / secs if ios and secs else None}
    return {"role": spec["role"], "tool": spec["tool"], "host": spec.get("host", ""), "mtu": mtus,
            "start_at": spec["start_at"], "late_s": out["started_at"] - spec["start_at"], **out, "total": total}


def main(argv: Sequence[str]) -> int:
    spec_file, out_file = Path(argv[0]), Path(argv[1])
    spec = json.loads(spec_file.read_text())
    try:
        result = run(spec, spec_file.parent)
    except (NetStepError, NetMeasureError, StepError, OSError) as e:
        print(f"network step failed: {e}", file=sys.stderr)
        return 1
    tmp = out_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.rename(out_file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
