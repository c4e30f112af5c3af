"""In-memory runs for the chart tests of the heat map, device groups and network charts: transient
SQLAlchemy Run/Step/Result/NetGroup objects (no session), shaped as the controller stores them, with values
derived by formulas so a test can name the exact number a cell must show."""

from __future__ import annotations

from typing import Any

from labcontract.suite import load_suite
from orchestrator.queries import RunDetail
from orchestrator.runs.planner import NetHosts, plan
from orchestrator.store.models import NetGroup, Result, Run, Step

OS = "Debian GNU/Linux 12 (bookworm)"


def _run(rid: str, suite: str, devices: list[str], topology: dict[str, Any] | None = None) -> Run:
    return Run(id=rid, suite_name=suite, suite_source=suite, suite_text="", suite_sha256="0" * 64, host="lab1",
               device=devices[0] if devices else "", devices=devices, state="SUCCEEDED", submitted_at=0.0,
               reason="", topology=topology)


def _metrics(iops: float, bw: float, lat_mean: float, lat_max: float) -> dict[str, Any]:
    lat = {"min_ns": 1000.0, "mean_ns": lat_mean, "max_ns": lat_max, "stddev_ns": lat_mean / 4, "samples": 100}
    d = {"ios": int(iops * 60), "io_bytes": int(bw * 60), "iops": iops, "bw_bytes": bw, "runtime_ms": 60000, "lat": lat}
    return {"fio_version": "fio-3.33", "jobs": 1, "runtime_ms": 60000, "read": d,
            "write": {**d, "ios": 0, "io_bytes": 0, "iops": 0.0, "bw_bytes": 0.0, "lat": None},
            "combined": {"iops": iops, "bw_bytes": bw, "ios": int(iops * 60), "lat_mean_ns": lat_mean,
                         "lat_max_ns": lat_max, "lat_stddev_ns": lat_mean / 4, "percentiles_ns": {}}, "errors": 0}


def _result(step: Step, iops: float, bw: float, devices: list[dict[str, Any]], *, lat_mean: float = 200_000.0,
            lat_max: float = 2_000_000.0, per_device: dict[str, Any] | None = None,
            per_path: dict[str, Any] | None = None) -> Result:
    return Result(attempt_id=f"{step.id}-a1", step_id=step.id, run_id=step.run_id, read_iops=iops, write_iops=0.0,
                  iops=iops, read_bw_bytes=bw, write_bw_bytes=0.0, bw_bytes=bw, lat_mean_ns=lat_mean,
                  lat_max_ns=lat_max, lat_stddev_ns=lat_mean / 4, lat_p99_ns=None, runtime_ms=60000,
                  fio_version="fio-3.33", metrics=_metrics(iops, bw, lat_mean, lat_max), per_device=per_device,
                  series=None, per_path=per_path, created_at=0.0,
                  provenance={"host": {"hostname": "lab1", "os": OS}, "devices": devices})


def _steps(run: Run, suite: str, devices: list[str], **kw: Any) -> list[Step]:
    return [Step(id=f"{run.id}-s{p.seq:03d}" + (f"-{p.host}" if p.host else ""), run_id=run.id, seq=p.seq, round=0,
                 kind=p.kind, name=p.name, cell=p.cell, note=p.note,
                 workload=p.workload.model_dump(mode="json") if p.workload else None, job_text=p.job_text,
                 host=p.host or "", state="SUCCEEDED")
            for p in plan(load_suite(suite), devices, **kw)]


def pattern_mbs(bs: int, read: int, rand: int, factor: float = 1.0) -> float:
    """A pattern cell's MB/s: grows with block size and read share, falls with random share."""
    return (bs / 4096 * 10 + read / 25 * 3 + (100 - rand) / 25) * factor


def pattern_run(rid: str = "r20261124-aaaaaa", factor: float = 1.0, model: str = "PM1733") -> RunDetail:
    """The built-in pattern-125 suite on one device: 125 pattern cells + 3 large-block cells."""
    devs = [{"path": "/dev/nvme0n1", "model": model, "serial": "S4ABC1234", "size_bytes": 3_840_000_000_000}]
    run = _run(rid, "pattern-125", ["/dev/nvme0n1"])
    steps = _steps(run, "pattern-125", run.devices)
    results = {}
    for st in steps:
        w: dict[str, Any] = st.workload or {}
        read = 100 if w.get("rwmixread") is None else int(w["rwmixread"])
        rand = 0 if w.get("percentage_random") is None else int(w["percentage_random"])
        bw = pattern_mbs(int(w["bs"]), read, rand, factor) * 1e6
        results[st.id] = _result(st, bw / int(w["bs"]), bw, devs)
    return RunDetail(run=run, steps=steps, results=results, preconditions=[])


DEVICES = ["/dev/nvme0n1", "/dev/nvme1n1"]


def device_iops(i: int, seq: int) -> float:
    """Device ``i``'s IOPS in the cell at plan position ``seq``."""
    return 100_000.0 * (i + 1) + 1_000.0 * seq


def group_run(rid: str = "r20261124-gggggg", devices: list[str] | None = None, runtime: int | None = 1) -> RunDetail:
    """The built-in device-group suite on two devices (or one: then no per-device figures)."""
    paths = devices or DEVICES
    devs = [{"path": p, "model": "P5800X", "serial": f"PHAL{i}000{i}X", "size_bytes": 400_000_000_000}
            for i, p in enumerate(paths)]
    run = _run(rid, "device-group", paths)
    steps = _steps(run, "device-group", paths, runtime=runtime)
    results = {}
    for st in steps:
        if st.kind != "measure":
            continue
        bs = int((st.workload or {})["bs"])
        per = {p: _metrics(device_iops(i, st.seq), device_iops(i, st.seq) * bs, 20_000.0 * (i + 1),
                           900_000.0 * (i + 1)) for i, p in enumerate(paths)}
        total = sum(device_iops(i, st.seq) for i in range(len(paths)))
        results[st.id] = _result(st, total, total * bs, devs, per_device=per if len(paths) > 1 else None)
    return RunDetail(run=run, steps=steps, results=results, preconditions=[])


T0 = 1_764_000_000.0


def path_gbps(mtu: int, paths: str, path: str, seq: int) -> float:
    """A path's Gbps over the window: a little more at MTU 9000, path b a little less than path a."""
    return round(22.0 + (0.6 if mtu == 9000 else 0.0) - (0.5 if path == "b" else 0.0) + 0.1 * seq
                 - (0.0 if paths == "multi" else 0.2), 3)


def _intervals(t0: float, seconds: int, gbps: float, step: float = 1.0) -> list[list[float]]:
    n = round(seconds / step)
    return [[t0 + i * step, t0 + (i + 1) * step, gbps * 1e9 / 8 * step, 0.0] for i in range(n)]


def network_run(rid: str = "r20261124-nnnnnn", suite: str = "network-paths", tool: str = "fio",
                series: bool = True, factor: float = 1.0) -> RunDetail:
    """A network run (target ``arr``, initiator ``ini``), per cell a NetGroup and each host's Result; the
    initiator's paths carry ``gbps`` and, when ``series``, per-second intervals (net.json's format)."""
    topo = {"target": "arr", "initiators": ["ini"], "paths": ["a", "b"], "mtu": [1500, 9000],
            "multipath": ["single", "multi"], "tool": tool}
    run = _run(rid, suite, [], topology=topo)
    steps = _steps(run, suite, [], net_hosts=NetHosts("arr", ("ini",)))
    results: dict[str, Result] = {}
    groups = []
    for seq in sorted({st.seq for st in steps}):
        ini = next(st for st in steps if st.seq == seq and st.cell["role"] == "initiator")
        tgt = next(st for st in steps if st.seq == seq and st.cell["role"] == "target")
        mtu, mode, names = int(ini.cell["mtu"]), str(ini.cell["paths"]), list(ini.cell["net_paths"])
        start = T0 + seq * 100
        gb = {p: path_gbps(mtu, mode, p, seq) * factor for p in names}
        iops = {p: gb[p] * 1e9 / 8 / 131072 for p in names}
        ini_paths: dict[str, dict[str, Any]] = {p: {"gbps": gb[p], "iops": iops[p], "mtu": mtu, "lat_mean_ns": 50_000.0}
                     | ({"series": _intervals(start, 10, gb[p])} if series else {}) for p in names}
        tgt_paths: dict[str, dict[str, Any]] = {p: {"gbps": gb[p] * 1.01, "iops": None, "mtu": mtu}
                     | ({"series": _intervals(start - 0.5, 11, gb[p] * 1.01, 0.1)} if series else {}) for p in names}
        results[ini.id] = _result(ini, sum(iops.values()), sum(gb.values()) * 1e9 / 8, [],
                                  per_path=ini_paths)
        results[tgt.id] = _result(tgt, 0.0, sum(gb.values()) * 1.01e9 / 8, [], per_path=tgt_paths)
        per_path = {f"ini.{p}": {"host": "ini", "role": "initiator", "path": p, "mtu": mtu, "gbps": gb[p],
                                 "iops": iops[p]} for p in names}
        per_path |= {f"arr.{p}": {"host": "arr", "role": "target", "path": p, "mtu": mtu, "gbps": gb[p] * 1.01}
                     for p in names}
        total = {"initiator_gbps": sum(gb.values()), "initiator_iops": sum(iops.values()),
                 "target_gbps": sum(gb.values()) * 1.01, "lat_mean_ns": 50_000.0, "window_s": 9.0}
        cell = {k: v for k, v in ini.cell.items() if k != "role"}
        groups.append(NetGroup(run_id=rid, seq=seq, name=ini.name.rsplit("@", 1)[0], cell=cell, hosts=["arr", "ini"],
                               starts={"arr": start - 0.5, "ini": start}, skew_ms=500.0, window_start=start + 1,
                               window_end=start + 10, total=total, per_path=per_path,
                               per_host={}, failures=[], complete=True, reason="", created_at=0.0))
    return RunDetail(run=run, steps=steps, results=results, preconditions=[], net_groups=groups)
