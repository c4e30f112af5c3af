"""A synthetic network run (methodology.md section 6) written to a real store: the built-in ``network-paths``
suite planned by the real planner for an array (target) and one host (initiator), every cell's ``net.json``
of both hosts made up with per-path per-second intervals, stored as the controller stores it
(``orchestrator.kinds.net.store_net``: a result per host with every path's figures in ``per_path``) and its cell totals
computed by the real :func:`orchestrator.runs.netgroups.aggregate` into a ``NetGroup``. Unlike the controller of
this checkout, which drops them, each path's per-second interval series (``[t_start, t_end, bytes, ios, ...]``)
is kept in ``per_path[path]["series"]``, where the report's "Gbps over time" chart looks for it.

Magnitudes as published: one 25GbE path carries 22-23 Gbps, two paths about 42 Gbps for 128K read; the MTU
makes no clear difference; the target's NIC counters see the initiator's bytes plus a few % of protocol.
"""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy.orm import Session

from bench.reportbase import host_facts, new_run
from labcontract.facts import NetPathDecl
from labcontract.suite import load_suite, parse_suite
from orchestrator.runs import netgroups
from orchestrator.runs.planner import NetHosts, plan
from orchestrator.store.models import Attempt, NetGroup, Result, Run, Step

TARGET, INITIATOR = "array01", "host01"
LINK_GBPS = 25.0


def _facts(host: str, role: str) -> dict[str, Any]:
    peer = {"a": "10.10.1.1", "b": "10.10.2.1"}
    paths = tuple(NetPathDecl(name=n, iface=f"ens{i + 1}f0", peer=peer[n] if role == "initiator" else None, mtu=9000)
                  for i, n in enumerate(("a", "b")))
    return host_facts(host, [], net_paths=paths)


def _gbps_of(profile: str, multi: bool, mtu: int, rng: random.Random) -> float:
    """A path's Gbps for this cell (per path; multipath splits a little under two links' worth)."""
    base = {"seq-128k-read": 22.8, "block-128k": 22.3, "block-64k": 21.1}.get(profile, 20.0)
    per = base * (0.93 if multi else 1.0) * (1.004 if mtu == 9000 else 1.0)
    return min(per * rng.gauss(1.0, 0.006), LINK_GBPS * 0.97)


def _outputs(workload: dict[str, Any], paths: list[str], mtu: int, gbps: dict[str, float], start: float,
             rng: random.Random) -> dict[str, dict[str, Any]]:
    """The ``net.json`` of the target (NIC counters) and of the initiator (fio per path) for one cell."""
    secs = int(workload.get("runtime") or 60)
    bs = int(workload.get("bs") or 131072)
    ini_paths: dict[str, Any] = {}
    tgt_paths: dict[str, Any] = {}
    for name in paths:
        ini, tgt = [], []
        t0 = start + 0.03
        for i in range(secs):
            g = gbps[name] * rng.gauss(1.0, 0.012) * (0.6 if i == 0 else 1.0)
            b = g * 1e9 / 8
            ini.append([t0 + i, t0 + i + 1, b, b / bs])
            tx = b * 1.031
            tgt.append([start + i, start + i + 1, tx + b * 0.012, 0.0, tx, b * 0.012])
        tgt.append([start + secs, start + secs + 1, 1e6, 0.0, 9e5, 1e5])
        ib = sum(iv[2] for iv in ini)
        lat = 16 * 4 * bs / (ib / secs) * 1e9      # Little's law: 4 jobs x QD16 outstanding per path
        ini_paths[name] = {"gbps": ib * 8 / 1e9 / secs, "iops": ib / bs / secs, "lat_mean_ns": lat,
                           "lat_p99_ns": lat * 3, "read_gbps": ib * 8 / 1e9 / secs,
                           "write_gbps": 0.0, "bytes": int(ib), "seconds": float(secs), "completed": True,
                           "returncode": 0, "series": ini}
        tb = sum(iv[2] for iv in tgt)
        span = secs + 1
        tgt_paths[name] = {"gbps": tb * 8 / 1e9 / span, "tx_gbps": sum(iv[4] for iv in tgt) * 8 / 1e9 / span,
                           "rx_gbps": sum(iv[5] for iv in tgt) * 8 / 1e9 / span, "bytes": int(tb), "iops": None,
                           "lat_mean_ns": None, "seconds": float(span), "completed": True, "series": tgt}
    mtus = dict.fromkeys(paths, mtu)

    def wrap(role: str, host: str, p: dict[str, Any], started: float, ended: float) -> dict[str, Any]:
        secs_ = max(v["seconds"] for v in p.values())
        total = sum(v["bytes"] for v in p.values())
        ios = [v["iops"] * v["seconds"] for v in p.values() if v.get("iops") is not None]
        out = {"role": role, "tool": "fio", "host": host, "mtu": mtus, "start_at": start, "late_s": started - start,
               "started_at": started, "ended_at": ended, "paths": p, "failures": [],
               "total": {"gbps": total * 8 / 1e9 / secs_, "bytes": total, "seconds": secs_,
                         "iops": sum(ios) / secs_ if ios else None}}
        if role == "initiator":
            out |= {"measure_from": started + 1.0, "measure_to": ended}
        return out

    return {TARGET: wrap("target", TARGET, tgt_paths, start, start + secs + 1),
            INITIATOR: wrap("initiator", INITIATOR, ini_paths, start + 0.03, start + 0.03 + secs)}


def _result(run: Run, step: Step, out: dict[str, Any], facts: dict[str, Any]) -> Result:
    """What ``orchestrator.kinds.net.store_net`` stores for one host's part of a cell, with each path's interval series
    kept in ``per_path`` (the network chart's "Gbps over time" reads it there; the controller of this
    checkout still drops it, see the module docstring)."""
    paths = {name: dict(p) | {"mtu": out["mtu"].get(name)} for name, p in out["paths"].items()}
    total = out["total"]
    lat = [(p["lat_mean_ns"], p["iops"]) for p in paths.values() if p.get("lat_mean_ns") and p.get("iops")]
    att = Attempt(id=f"{step.id}-a1", step_id=step.id, number=1, host=step.host, device="net", state="SUCCEEDED",
                  timeout_s=400, dispatch_count=1, dispatched_at=out["start_at"] - 2, started_at=out["start_at"] - 1,
                  fio_started_at=out["started_at"], fio_ended_at=out["ended_at"], ended_at=out["ended_at"] + 0.2,
                  exit_code=0)
    step.attempts.append(att)
    return Result(attempt_id=att.id, step_id=step.id, run_id=run.id, read_iops=0.0, write_iops=0.0,
                  iops=total.get("iops") or 0.0,
                  read_bw_bytes=sum(p.get("read_gbps") or 0.0 for p in paths.values()) * 1e9 / 8,
                  write_bw_bytes=sum(p.get("write_gbps") or 0.0 for p in paths.values()) * 1e9 / 8,
                  bw_bytes=total["gbps"] * 1e9 / 8,
                  lat_mean_ns=sum(v * w for v, w in lat) / sum(w for _v, w in lat) if lat else None,
                  lat_max_ns=None, lat_stddev_ns=None, lat_p99_ns=None, runtime_ms=int(total["seconds"] * 1000),
                  fio_version=None, kind="net", tool=out["tool"], tool_version="", throughput=total["gbps"],
                  throughput_unit="Gbps", metrics={k: v for k, v in out.items() if k != "paths"}, per_path=paths,
                  series=None, provenance={"host": facts, "agent_version": "0.13.0", "role": out["role"],
                                           "tool": out["tool"], "mtu": out["mtu"], "suite_sha256": run.suite_sha256,
                                           "net_spec": {"start_at": out["start_at"], "late_s": out["late_s"]},
                                           "failures": []},
                  created_at=out["ended_at"] + 0.2)


def write_network_run(s: Session, run_id: str, *, at: float, seed: int = 13) -> Run:
    """The ``network-paths`` suite (3 profiles x MTU 1500/9000 x single/multipath) on array01 <- host01."""
    rng = random.Random(f"{seed}-{run_id}")
    text = load_suite("network-paths").source_text
    suite = parse_suite(text, "builtin:network-paths")
    hosts = NetHosts(TARGET, (INITIATOR,))
    run = new_run(run_id, suite, text, [], host=TARGET, at=at)
    run.topology = netgroups.topology(suite, hosts)
    s.add(run)
    s.flush()      # net groups refer to the run by id only (no relationship orders the inserts)
    facts = {TARGET: _facts(TARGET, "target"), INITIATOR: _facts(INITIATOR, "initiator")}
    index = {h: i for i, h in enumerate(hosts.all)}
    by_seq: dict[int, list[Step]] = {}
    for p in plan(suite, [], net_hosts=hosts):
        assert p.host is not None and p.workload is not None
        step = Step(id=f"{run_id}-s{p.seq:03d}-h{index[p.host]}", seq=p.seq, round=0, kind=p.kind, name=p.name,
                    cell=p.cell, note=p.note, host=p.host, workload=p.workload.model_dump(mode="json"),
                    job_text=p.job_text, state="SUCCEEDED")
        run.steps.append(step)
        by_seq.setdefault(p.seq, []).append(step)
    t = at + 10
    for seq, steps in by_seq.items():
        cell = steps[0].cell
        paths = list(cell["net_paths"])
        mtu, multi = int(cell["mtu"]), cell["paths"] == "multi"
        gbps = {name: _gbps_of(str(cell["profile"]), multi, mtu, rng) for name in paths}
        outputs = _outputs(steps[0].workload or {}, paths, mtu, gbps, t, rng)
        for st in steps:
            st.ended_at = outputs[st.host]["ended_at"] + 0.2
            s.add(_result(run, st, outputs[st.host], facts[st.host]))
        agg = netgroups.aggregate(outputs)
        s.add(NetGroup(run_id=run.id, seq=seq, name=steps[0].name.rsplit("@", 1)[0],
                       cell={k: v for k, v in cell.items() if k != "role"}, hosts=[st.host for st in steps],
                       starts=agg["starts"], skew_ms=agg["skew_ms"], window_start=agg["window_start"],
                       window_end=agg["window_end"],
                       total=agg["total"] | {"window_s": agg["window_s"], "skew_ok": agg["skew_ok"]},
                       per_path=agg["per_path"], per_host=agg["per_host"], failures=agg["failures"], complete=True,
                       reason="", created_at=t + 70))
        t += 75
    run.ended_at = t
    return run
