"""In-memory runs for the chart tests: transient Run / Step / Result / PreconditionRecord rows (no session),
shaped like the enterprise-synthetic suite's (precondition groups with per-second series, the 8K 70/30 T x Q
ladder, 4K 16T16Q and 1T1Q, 8K/128K sequential) with json+ style latency histograms, deterministic per seed.

Numbers follow a device's behaviour closely enough for the charts to look like one (a write burst that
decays to steady state, latency = outstanding I/Os / IOPS), not a model of any device.
"""

from __future__ import annotations

import math
import random
from typing import Any

from labcontract.fioresult import PERCENTILE_POINTS, percentiles_from_bins
from labcontract.steady import SteadyCriteria, detect
from orchestrator.queries import RunDetail
from orchestrator.store.models import PreconditionRecord, Result, Run, Step

OS_NAME = "Debian GNU/Linux 12 (bookworm)"
CRITERIA = {"numjobs": 16, "iodepth": 16, "round": 60, "max_rounds": 360, "window": 5, "max_range_pct": 20.0,
            "max_excursion_pct": 10.0, "track": "iops"}
LADDER = [(t, q) for t in (2, 4, 8, 16) for q in (2, 4, 8, 16)]


def fio_bin(ns: float) -> int:
    """The json+ bin a latency falls in: 64 bins per power of two, the bin's midpoint (as fio reports)."""
    e = math.floor(math.log2(ns))
    j = math.floor((ns / 2 ** e - 1) * 64)
    return int(2 ** e * (1 + (j + 0.5) / 64))


def histogram(rng: random.Random, mean_ns: float, n: int = 2000) -> list[list[int]]:
    bins: dict[int, int] = {}
    for _ in range(n):
        b = fio_bin(max(1000.0, rng.lognormvariate(math.log(mean_ns), 0.45)))
        bins[b] = bins.get(b, 0) + 1
    return [[k, v] for k, v in sorted(bins.items())]


def _lat(bins: list[list[int]]) -> dict[str, Any]:
    vals = [k for k, c in bins for _ in range(c)]
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return {"min_ns": float(min(vals)), "mean_ns": mean, "max_ns": float(max(vals)), "stddev_ns": sd,
            "samples": len(vals), "percentiles_ns": percentiles_from_bins({k: c for k, c in bins}, PERCENTILE_POINTS)}


def result(rid: str, st: Step, rng: random.Random, iops: float, bs: int, read_share: float, *,
           hist: bool = True, devices: list[str] | None = None, series: dict[str, Any] | None = None,
           runtime_ms: int = 60_000) -> Result:
    """A stored result whose metrics, percentiles and (``hist``) lat_hist agree with one another."""
    wl = st.workload or {}
    mean_ns = wl.get("numjobs", 1) * wl.get("iodepth", 1) / iops * 1e9
    metrics: dict[str, Any] = {"fio_version": "fio-3.33", "jobs": 1, "runtime_ms": runtime_ms, "errors": 0}
    lat_hist: dict[str, Any] = {"read": [], "write": [], "per_device": {}}
    merged: dict[int, int] = {}
    for d, share in (("read", read_share), ("write", 1 - read_share)):
        dir_iops = iops * share
        bins = histogram(rng, mean_ns * (1.0 if d == "read" else 1.3)) if share > 0 else []
        lat_hist[d] = bins
        for k, c in bins:
            merged[k] = merged.get(k, 0) + c
        metrics[d] = {"ios": int(dir_iops * runtime_ms / 1000), "io_bytes": int(dir_iops * bs * runtime_ms / 1000),
                      "iops": dir_iops, "bw_bytes": dir_iops * bs, "runtime_ms": runtime_ms,
                      "lat": _lat(bins) if bins else None}
    comb = _lat([[k, c] for k, c in sorted(merged.items())])
    metrics["combined"] = {"iops": iops, "bw_bytes": iops * bs, "ios": int(iops * runtime_ms / 1000),
                           "lat_mean_ns": comb["mean_ns"], "lat_max_ns": comb["max_ns"],
                           "lat_stddev_ns": comb["stddev_ns"], "percentiles_ns": comb["percentiles_ns"]}
    for i, dev in enumerate(devices or []):
        lat_hist["per_device"][dev] = {"read": histogram(rng, mean_ns * (1 + 0.4 * i), 1000), "write": []}
    res = Result(attempt_id=f"{st.id}-a1", step_id=st.id, run_id=rid, read_iops=iops * read_share,
                 write_iops=iops * (1 - read_share), iops=iops, read_bw_bytes=iops * read_share * bs,
                 write_bw_bytes=iops * (1 - read_share) * bs, bw_bytes=iops * bs, lat_mean_ns=comb["mean_ns"],
                 lat_max_ns=comb["max_ns"], lat_stddev_ns=comb["stddev_ns"], lat_p99_ns=comb["percentiles_ns"]["p99"],
                 runtime_ms=runtime_ms, fio_version="fio-3.33", metrics=metrics, per_device=None, series=series,
                 per_path=None, created_at=0.0, lat_hist=lat_hist if hist else None,
                 provenance={"host": {"os": OS_NAME}, "devices": [
                     {"path": p, "model": "Acme P3700", "size_bytes": 400_000_000_000}
                     for p in (devices or ["/dev/nvme0n1"])]})
    return res


def _step(rid: str, seq: int, kind: str, name: str, cell: dict[str, Any], wl: dict[str, Any] | None,
          rnd: int = 0) -> Step:
    return Step(id=f"{rid}-s{seq:03d}-r{rnd:03d}", run_id=rid, seq=seq, round=rnd, kind=kind, name=name, cell=cell,
                workload=wl, job_text="", state="SUCCEEDED", note="", host="", reason="")


def _wl(name: str, rw: str, bs: int, t: int, q: int, mix: int | None = None) -> dict[str, Any]:
    return {"name": name, "rw": rw, "bs": bs, "rwmixread": mix, "percentage_random": None, "numjobs": t,
            "iodepth": q, "runtime": 60}


def precondition_group(rid: str, seq: int, op_mode: str, rng: random.Random, steady_iops: float, rounds: int,
                       seconds: int, mix: int) -> tuple[list[Step], dict[str, Result], PreconditionRecord]:
    """``rounds`` rounds of ``seconds`` per-second samples: a burst decaying to ``steady_iops``."""
    steps, results, recs = [], {}, []
    for r in range(1, rounds + 1):
        name = f"precondition.4k-random.r{mix}.round{r}"
        st = _step(rid, seq, "precondition", name, {"op_mode": op_mode, "profile": "4k-random", "round": r},
                   _wl(name, "randrw", 4096, 16, 16, mix), r)
        t0 = (r - 1) * seconds
        iops = [steady_iops * (1 + 2.0 * math.exp(-(t0 + t) / 240)) * rng.uniform(0.97, 1.03)
                for t in range(1, seconds + 1)]
        mean = [256 / v * 1e6 for v in iops]
        series = {"t": [float(t) for t in range(1, seconds + 1)], "iops": iops, "read_iops": iops,
                  "write_iops": [0.0] * seconds, "lat_mean_us": mean,
                  "lat_max_us": [m * rng.uniform(4, 9) for m in mean],
                  "lat_stddev_us": [m * 0.6 for m in mean]}
        res = result(rid, st, rng, sum(iops) / seconds, 4096, mix / 100, series=series, runtime_ms=seconds * 1000)
        res.lat_mean_ns = sum(mean) / seconds * 1000      # the round's figures agree with its series
        res.lat_max_ns = max(series["lat_max_us"]) * 1000
        res.lat_stddev_ns = sum(series["lat_stddev_us"]) / seconds * 1000
        steps.append(st)
        results[st.id] = res
        recs.append({"round": r, "iops": res.iops, "lat_mean_ns": res.lat_mean_ns, "lat_max_ns": res.lat_max_ns,
                     "lat_stddev_ns": res.lat_stddev_ns, "read_iops": res.read_iops, "write_iops": res.write_iops,
                     "bw_bytes": res.bw_bytes})
    verdict = detect([x["iops"] for x in recs], SteadyCriteria())
    rec = PreconditionRecord(run_id=rid, seq=seq, name=f"precondition.4k-random.r{mix}", criteria=dict(CRITERIA),
                             rounds=recs, steady=verdict.steady, reached_round=verdict.round, verdict=verdict.reason,
                             ended_at=1.0)
    return steps, results, rec


def enterprise_run(rid: str, op_mode: str = "stock", *, speed: float = 1.0, seed: int = 1, rounds: int = 8,
                   seconds: int = 60, hist: bool = True, devices: list[str] | None = None,
                   precondition: bool = True) -> RunDetail:
    """An ended enterprise-synthetic-like run; ``speed`` scales every IOPS figure (HP > stock)."""
    rng = random.Random(seed)
    run = Run(id=rid, suite_name="enterprise-synthetic", suite_source="enterprise-synthetic", suite_text="",
              suite_sha256="a" * 64, host="h1", device=(devices or ["/dev/nvme0n1"])[0],
              devices=devices or ["/dev/nvme0n1"], state="SUCCEEDED", submitted_at=1_700_000_000.0, reason="")
    steps: list[Step] = []
    results: dict[str, Result] = {}
    pcs: list[PreconditionRecord] = []

    def measure(profile: str, dims: dict[str, Any], wl: dict[str, Any], iops: float, share: float) -> None:
        st = _step(rid, len(steps), "measure", wl["name"], {"op_mode": op_mode, "profile": profile, **dims}, wl)
        steps.append(st)
        results[st.id] = result(rid, st, rng, iops * speed, wl["bs"], share, hist=hist, devices=devices)

    for mix in (100, 0):
        if precondition:
            ps, pr, rec = precondition_group(rid, len(steps), op_mode, rng, (150_000 if mix else 60_000) * speed,
                                             rounds, seconds, mix)
            steps += ps
            results |= pr
            pcs.append(rec)
        measure("4k-random", {"rwmixread": mix}, _wl(f"4k-random.r{mix}", "randrw", 4096, 16, 16, mix),
                150_000 if mix else 60_000, mix / 100)
    for t, q in LADDER:
        measure("8k-7030", {"numjobs": t, "iodepth": q}, _wl(f"8k-7030.t{t}.q{q}", "randrw", 8192, t, q, 70),
                1500 * t * q / (1 + t * q / 64), 0.7)
    for mix in (100, 0):
        measure("4k-random-1t1q", {"rwmixread": mix}, _wl(f"4k-random-1t1q.r{mix}", "randrw", 4096, 1, 1, mix),
                11_000 if mix else 30_000, mix / 100)
    for bs, prof in ((8192, "8k-seq"), (131072, "128k-seq")):
        for rw in ("read", "write"):
            measure(prof, {"rw": rw}, _wl(f"{prof}.{rw}", rw, bs, 16, 16), (2.4e9 if rw == "read" else 1.1e9) / bs,
                    1.0 if rw == "read" else 0.0)
    return RunDetail(run=run, steps=steps, results=results, preconditions=pcs)


def demo_run(rid: str = "r-demo-000001", *, hist: bool = True) -> RunDetail:
    """The demo suite's shape: 4K random 1T16Q, 8K 70/30 2T8Q, 128K sequential 1T8Q; no preconditioning."""
    rng = random.Random(7)
    run = Run(id=rid, suite_name="demo", suite_source="demo", suite_text="", suite_sha256="b" * 64, host="h1",
              device="/dev/loop0", devices=["/dev/loop0"], state="SUCCEEDED", submitted_at=1_700_000_000.0, reason="")
    specs: list[tuple[str, dict[str, Any], dict[str, Any], float, float]] = [
        ("4k-random", {"rwmixread": 100}, _wl("4k-random.r100", "randrw", 4096, 1, 16, 100), 40_000, 1.0),
        ("4k-random", {"rwmixread": 0}, _wl("4k-random.r0", "randrw", 4096, 1, 16, 0), 20_000, 0.0),
        ("8k-7030", {}, _wl("8k-7030", "randrw", 8192, 2, 8, 70), 25_000, 0.7),
        ("128k-seq", {"rw": "read"}, _wl("128k-seq.read", "read", 131072, 1, 8), 3_000, 1.0),
        ("128k-seq", {"rw": "write"}, _wl("128k-seq.write", "write", 131072, 1, 8), 2_000, 0.0)]
    steps, results = [], {}
    for i, (prof, dims, wl, iops, share) in enumerate(specs):
        st = _step(rid, i, "measure", wl["name"], {"op_mode": "stock", "profile": prof, **dims}, wl)
        steps.append(st)
        results[st.id] = result(rid, st, rng, iops, wl["bs"], share, hist=hist, runtime_ms=5000)
    return RunDetail(run=run, steps=steps, results=results, preconditions=[])
