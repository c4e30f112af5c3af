"""Network runs: their topology, the submission checks, and the totals of a network cell.

A network cell is one step per host (the target and each initiator) with the same ``seq``; the
controller dispatches them together with one ``start_at`` and, once all have ended, stores a
:class:`~orchestrator.store.models.NetGroup`: the start skew across hosts and every path's Gbps and
IOPS summed over the window where all hosts measured, from each host's per-second series
(``agents.netstep``: intervals ``[t_start, t_end, bytes, ios, ...]``, prorated at the window's edges); under
tool ``block`` an initiator's paths are its NICs' counters and its I/Os fio's own series (``io``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from labcontract.errors import Problem
from labcontract.suite import Suite
from orchestrator.runs.planner import NetHosts
from orchestrator.store.models import Host, Run

SKEW_LIMIT_MS = 100.0


def topology(suite: Suite, hosts: NetHosts) -> dict[str, Any]:
    net = suite.network
    assert net is not None
    return {"target": hosts.target, "initiators": list(hosts.initiators), "paths": list(net.paths),
            "mtu": list(net.mtu), "multipath": list(net.multipath), "tool": net.tool, "iqn": net.iqn,
            "lun": net.lun, "nbd_port": net.nbd_port, "iscsi_port": net.iscsi_port}


def hosts_of(run: Run) -> list[str]:
    """Every host a run uses: a network run's target and initiators, else its one host."""
    if run.topology:
        return [run.topology["target"], *run.topology["initiators"]]
    return [run.host]


def net_problems(s: Session, suite: Suite, target: str | None, initiators: Sequence[str],
                 repeat: int | None = None) -> list[Problem]:
    """A network submission: a target and at least one initiator, all registered, each named once, each
    declaring every path the suite names (and, on an initiator, the target's address on it); its steps (a step
    per host, cell and repeat: ``repeat`` overrides the suite's) within the suite's cell_limit, counted with the
    initiators given (the suite's own count judges only its own initiators)."""
    net = suite.network
    assert net is not None
    problems = []
    target = target or net.target
    inis = tuple(initiators) or net.initiators
    twice = sorted({h for h in inis if inis.count(h) > 1})
    if twice:            # two steps of one host in one cell: refused here, never a store IntegrityError
        problems.append(Problem("--initiator", f"named more than once: {', '.join(twice)[:200]}"))
    runs = len(suite.cells) * (repeat or suite.repeat)
    steps, judged = runs * (1 + len(inis)), runs * (1 + max(len(net.initiators), 1))   # judged: by the suite/--repeat
    if steps > suite.cell_limit >= judged:
        problems.append(Problem("--initiator", f"{len(inis)} initiators make {steps} steps, over the suite's "
                                               f"cell_limit of {suite.cell_limit}"))
    if not target:
        problems.append(Problem("--host", "a network suite needs its target host (network.target or --host)"))
    if not inis:
        problems.append(Problem("--initiator", "a network suite needs at least one initiator host "
                                               "(network.initiators or --initiator)"))
    if target and target in inis:
        problems.append(Problem("--initiator", f"{target} is also the target"))
    for role, name in ([("target", target)] if target else []) + [("initiator", h) for h in inis]:
        host = s.get(Host, name)
        if host is None:
            problems.append(Problem("--host" if role == "target" else "--initiator",
                                    f"unknown host {name!r} (no agent registered under that name)"))
            continue
        declared = {p["name"]: p for p in (host.facts or {}).get("net_paths", [])}
        for path in net.paths:
            p = declared.get(path)
            if p is None:
                problems.append(Problem("network.paths", f"{role} {name} declares no path {path!r} (declared: "
                                                         f"{', '.join(declared) or 'none'})"))
            elif role == "initiator" and not p.get("peer"):
                problems.append(Problem("network.paths", f"initiator {name} path {path!r} has no peer address "
                                                         "(the target's portal: --net-path NAME=IFACE@ADDRESS)"))
    return problems


def _in_window(series: Sequence[Sequence[float]], start: float, end: float, col: int) -> float:
    """Column ``col`` of the intervals, summed over [start, end]; an interval cut by an edge counts pro rata."""
    total = 0.0
    for iv in series:
        t0, t1 = iv[0], iv[1]
        overlap = min(t1, end) - max(t0, start)
        if overlap <= 0 or t1 <= t0 or len(iv) <= col:
            continue
        total += iv[col] * overlap / (t1 - t0)
    return total


def per_second(series: Any) -> list[list[float]]:
    """A path's intervals (``[t_start, t_end, bytes, ios, (tx, rx)]``; the target samples at 10 Hz) summed
    into one interval per second of the measurement, as reports draw them. Raises ValueError / TypeError
    on an interval that is not a list of finite numbers (net.json comes from an agent: untrusted)."""
    if not isinstance(series, list):
        raise TypeError(f"series: expected a list, got {type(series).__name__}")
    buckets: dict[int, list[float]] = {}
    base: float | None = None
    for iv in series:
        if not isinstance(iv, list) or not 4 <= len(iv) <= 6 or not all(
                isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in iv):
            raise ValueError(f"series: not an interval of 4 to 6 finite numbers: {str(iv)[:80]}")
        base = iv[0] if base is None else base
        k = int(iv[0] - base)
        b = buckets.get(k)
        if b is None:
            buckets[k] = [float(x) for x in iv]
        else:
            b[0], b[1] = min(b[0], iv[0]), max(b[1], iv[1])
            for i in range(2, min(len(b), len(iv))):
                b[i] += iv[i]
    return [buckets[k] for k in sorted(buckets)]


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


_IO_NUMBERS = ("read_bw_bytes", "write_bw_bytes")
_IO_OPTIONAL = ("lat_mean_ns", "lat_p99_ns", "iops", "gbps", "bytes", "seconds", "errors")


def checked_io(io: Any) -> dict[str, Any]:
    """An initiator's own I/O figures under tool ``block`` as ``net.json`` gives them (untrusted): finite numbers
    of at least 0 (the bandwidths required, the others or null) and its series (:func:`per_second`, summed per
    second). Raises ValueError / TypeError naming what is wrong."""
    if not isinstance(io, dict):
        raise TypeError(f"io: expected an object, got {type(io).__name__}")
    bad = [k for k in _IO_NUMBERS if not (_number(io.get(k)) and io[k] >= 0)] + [
        k for k in _IO_OPTIONAL if io.get(k) is not None and not (_number(io[k]) and io[k] >= 0)]
    if bad:
        raise ValueError(f"io: {', '.join(bad)} not a finite number of at least 0")
    return {**io, "series": per_second(io.get("series", []))}


_FAILURE_NUMBERS = ("stopped_at", "carried_on_s", "survivor_gbps")
_FAILURE_OPTIONAL = ("resumed_at", "io_stalled_s")


def checked_failures(items: Any) -> list[dict[str, Any]]:
    """A host's path failures as ``net.json`` gives them (untrusted): at most 64, each a path name, finite numbers
    (``stopped_at``, ``carried_on_s``, ``survivor_gbps``; ``resumed_at`` and ``io_stalled_s`` or null) and the
    surviving paths' names. Raises ValueError naming what is wrong."""
    if not isinstance(items, list) or len(items) > 64:
        raise ValueError("failures: expected a list of at most 64")
    for f in items:
        if not isinstance(f, dict) or not isinstance(f.get("path"), str) or len(f["path"]) > 64:
            raise ValueError(f"failures: not a path failure: {str(f)[:80]}")
        survivors = f.get("survivors", [])
        bad = [k for k in _FAILURE_NUMBERS if not _number(f.get(k))] + [
            k for k in _FAILURE_OPTIONAL if f.get(k) is not None and not _number(f[k])]
        if bad or not isinstance(survivors, list) or len(survivors) > 8 or not all(
                isinstance(x, str) and len(x) <= 64 for x in survivors):
            raise ValueError(f"failures: path {f['path'][:64]!r}: {', '.join(bad) or 'survivors'} not as expected")
    return items


def aggregate(outputs: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The cell's totals from every host's ``net.json`` (host -> output): skew, window, per path, per
    host and in total. The skew is between the moments the hosts' tools started; the window runs from the
    latest host's first steady report to the earliest host's end. Raises ValueError when the hosts'
    measurements do not overlap."""
    starts = {h: float(o["started_at"]) for h, o in outputs.items()}
    ends = {h: float(o["ended_at"]) for h, o in outputs.items()}
    # each host's measured part: past its tools' start-up (an initiator's first report) to its end
    w0 = max(float(o.get("measure_from", o["started_at"])) for o in outputs.values())
    w1 = min(float(o.get("measure_to", o["ended_at"])) for o in outputs.values())
    if w1 <= w0:
        raise ValueError(f"the hosts' measurements do not overlap (latest start {w0:.3f}, earliest end {w1:.3f})")
    secs = w1 - w0
    per_path: dict[str, Any] = {}
    per_host: dict[str, Any] = {}
    total: dict[str, Any] = {"initiator_gbps": 0.0, "initiator_iops": 0.0, "target_gbps": 0.0, "target_tx_gbps": 0.0,
             "target_rx_gbps": 0.0}
    lat_weight = lat_sum = 0.0
    for host, out in outputs.items():
        role = out["role"]
        host_gbps = host_iops = 0.0
        # tool block: the kernel spreads one device's I/O over the paths; each path's Gbps is its NIC's, the
        # host's IOPS and latency are fio's own (its per-second series, cut at the same window)
        io = out.get("io") if role == "initiator" and isinstance(out.get("io"), dict) else None
        for name, p in out["paths"].items():
            series = p.get("series", [])
            n_bytes = _in_window(series, w0, w1, 2)
            ios = _in_window(series, w0, w1, 3)
            entry: dict[str, Any] = {"host": host, "role": role, "path": name, "mtu": out.get("mtu", {}).get(name),
                                     "gbps": n_bytes * 8 / 1e9 / secs, "run_gbps": p.get("gbps")}
            if role == "target":
                entry["tx_gbps"] = _in_window(series, w0, w1, 4) * 8 / 1e9 / secs
                entry["rx_gbps"] = _in_window(series, w0, w1, 5) * 8 / 1e9 / secs
                total["target_tx_gbps"] += entry["tx_gbps"]
                total["target_rx_gbps"] += entry["rx_gbps"]
            elif io is not None:           # one device over every path (tool block): the I/O is the host's
                entry["iops"] = entry["lat_mean_ns"] = None
            else:
                entry["iops"] = ios / secs
                entry["lat_mean_ns"] = p.get("lat_mean_ns")
                host_iops += entry["iops"]
                if p.get("lat_mean_ns") is not None and entry["iops"] > 0:
                    lat_sum += p["lat_mean_ns"] * entry["iops"]
                    lat_weight += entry["iops"]
            host_gbps += entry["gbps"]
            per_path[f"{host}.{name}"] = entry
        if io is not None:
            host_iops = _in_window(io.get("series", []), w0, w1, 3) / secs
            if io.get("lat_mean_ns") is not None and host_iops > 0:
                lat_sum += io["lat_mean_ns"] * host_iops
                lat_weight += host_iops
        per_host[host] = {"role": role, "gbps": host_gbps, "iops": host_iops if role == "initiator" else None,
                          "started_at": starts[host], "ended_at": ends[host], "late_s": out.get("late_s")}
        total["initiator_gbps" if role == "initiator" else "target_gbps"] += host_gbps
        if role == "initiator":
            total["initiator_iops"] += host_iops
    total["lat_mean_ns"] = lat_sum / lat_weight if lat_weight else None
    total["paths"] = sum(1 for e in per_path.values() if e["role"] == "initiator")
    skew_ms = (max(starts.values()) - min(starts.values())) * 1000.0
    failures = [{**f, "host": h} for h, o in outputs.items() for f in o.get("failures", [])]
    return {"starts": starts, "skew_ms": skew_ms, "skew_ok": skew_ms <= SKEW_LIMIT_MS, "window_start": w0,
            "window_end": w1, "window_s": secs, "total": total, "per_path": per_path, "per_host": per_host,
            "failures": failures}
