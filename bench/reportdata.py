"""Synthetic, full-size runs written to a real store, without running fio: what the report benchmark and the
browser tests read.

Why synthetic: a review-size run (125 patterns of 60 s, or 40 preconditioning rounds of 60 s per group, stock
and HP) takes hours to measure, but the report's cost and correctness depend only on what the store holds.
So the rows are made the way the controller makes them — the plan from the real planner
(:func:`orchestrator.runs.planner.plan`) on the built-in suites, precondition rounds appended as
:mod:`orchestrator.runs.preconditioning` appends them, the steady verdict from :func:`labcontract.steady.detect`,
network totals from :func:`orchestrator.runs.netgroups.aggregate` — and only the figures are invented, from a
device model with published magnitudes (methodology.md "Published figures": a 2013 PCIe card does 750,000 4K
random read IOPS and 250,000-400,000 write IOPS; 25GbE paths carry 22-23 Gbps). Everything is seeded.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.orm import Session, sessionmaker

from bench.reportbase import CARD, FIO, HOST, NVME, SEED, T0, DeviceModel, host_facts, new_run
from bench.reportnet import write_network_run
from labcontract.fioresult import Combined, DirectionStats, LatencyStats, StepMetrics, percentiles_from_bins
from labcontract.steady import SteadyCriteria, detect
from labcontract.suite import Workload, load_suite, parse_suite, with_overrides
from orchestrator.runs.planner import plan, round_workload
from orchestrator.runs.preconditioning import round_values
from orchestrator.store.db import make_engine, migrate, sessions, sqlite_url
from orchestrator.store.models import Attempt, PreconditionRecord, Result, Run, Step


def open_store(path: Path) -> sessionmaker[Session]:
    """A SQLite store at ``path`` with the current schema (as the controller makes it at start)."""
    engine = make_engine(sqlite_url(path))
    migrate(engine)
    return sessions(engine)


# ------------------------------------------------------------------ figures of one workload


@dataclass(frozen=True)
class Perf:
    read_iops: float
    write_iops: float
    lat_mean_ns: float
    lat_max_ns: float
    lat_stddev_ns: float


def perf(dev: DeviceModel, wl: dict[str, Any], op_mode: str, rng: random.Random) -> Perf:
    """The device's figures for a workload: peaks bounded by IOPS and bandwidth, latency by Little's law
    (outstanding I/Os / IOPS) over the unloaded latency, so a T x Q ladder rises and saturates as it does."""
    bs = int(wl.get("bs") or 4096)
    rw = str(wl.get("rw", "randrw"))
    mix = 1.0 if rw in ("read", "randread") else 0.0 if rw in ("write", "randwrite") else \
        float(wl.get("rwmixread", 50)) / 100
    rnd = wl.get("percentage_random")
    seq = 1.0 - (float(rnd) / 100 if rnd is not None else 1.0 if rw.startswith("rand") else 0.0)
    gain = dev.hp_gain if op_mode.startswith("hp") else 1.0
    peak_r = min(dev.read_iops * (1 + 0.4 * seq) * 4096 / max(bs, 4096) ** 0.35 / 4096 ** 0.65, dev.read_bw / bs)
    peak_w = min(dev.write_iops * gain * (1 + 0.8 * seq) * 4096 / max(bs, 4096) ** 0.35 / 4096 ** 0.65,
                 dev.write_bw / bs)
    peak = 1 / (mix / peak_r + (1 - mix) / peak_w)
    outstanding = int(wl.get("numjobs") or 1) * int(wl.get("iodepth") or 1)
    base = (mix * dev.read_lat_ns + (1 - mix) * dev.write_lat_ns) * (1 + bs / 65536)
    lat = (base + outstanding / peak * 1e9) * rng.gauss(1.0, 0.015)
    iops = outstanding / lat * 1e9
    return Perf(iops * mix, iops * (1 - mix), lat, lat * rng.uniform(7, 24), lat * rng.uniform(0.35, 0.75))


def _bin_value(ns: int) -> int:
    """The json+ bin key fio files a latency of ``ns`` under (fio stat.c plat_val_to_idx / plat_idx_to_val)."""
    msb = ns.bit_length() - 1 if ns else 0
    if msb <= 6:
        return ns
    eb = msb - 6
    idx = ((eb + 1) << 6) + (63 & (ns >> eb))
    eb2 = (idx >> 6) - 1
    return int((1 << (eb2 + 6)) + ((idx % 64) + 0.5) * (1 << eb2))


def histogram(mean_ns: float, max_ns: float, ios: int, sigma: float = 0.55) -> list[list[int]]:
    """Lognormal latency bins ``[[ns, count], ...]`` of ``ios`` I/Os with this mean, the largest at ``max_ns``."""
    if ios <= 0:
        return []
    mu = math.log(mean_ns) - sigma * sigma / 2
    bins: dict[int, int] = {}
    lo, steps = mean_ns / 12, 90
    ratio = (max_ns / lo) ** (1 / steps)
    prev = 0.0
    for i in range(1, steps + 1):
        edge = lo * ratio ** i
        cdf = 0.5 * (1 + math.erf((math.log(edge) - mu) / (sigma * math.sqrt(2))))
        count = round((cdf - prev) * ios)
        prev = cdf
        if count > 0:
            key = _bin_value(int(edge / math.sqrt(ratio)))
            bins[key] = bins.get(key, 0) + count
    bins[_bin_value(int(max_ns))] = bins.get(_bin_value(int(max_ns)), 0) + 1
    return [[k, bins[k]] for k in sorted(bins)]


def metrics(p: Perf, bs: int, jobs: int, runtime_s: float) -> tuple[StepMetrics, dict[str, Any]]:
    """fio's StepMetrics for these figures, and the merged histogram they were read from."""
    ms = int(runtime_s * 1000)
    hist: dict[str, Any] = {}
    dirs: dict[str, DirectionStats] = {}
    for d, iops in (("read", p.read_iops), ("write", p.write_iops)):
        ios = int(iops * runtime_s)
        bins = histogram(p.lat_mean_ns, p.lat_max_ns, ios) if ios else []
        hist[d] = bins
        lat = LatencyStats(min_ns=p.lat_mean_ns / 10, mean_ns=p.lat_mean_ns, max_ns=p.lat_max_ns,
                           stddev_ns=p.lat_stddev_ns, samples=ios,
                           percentiles_ns=percentiles_from_bins(dict((k, c) for k, c in bins))) if ios else None
        dirs[d] = DirectionStats(ios=ios, io_bytes=ios * bs, iops=iops, bw_bytes=iops * bs, runtime_ms=ms, lat=lat)
    merged: dict[int, int] = {}
    for k, c in [*hist["read"], *hist["write"]]:
        merged[k] = merged.get(k, 0) + c
    total = p.read_iops + p.write_iops
    comb = Combined(iops=total, bw_bytes=total * bs, ios=dirs["read"].ios + dirs["write"].ios,
                    lat_mean_ns=p.lat_mean_ns, lat_max_ns=p.lat_max_ns, lat_stddev_ns=p.lat_stddev_ns,
                    percentiles_ns=percentiles_from_bins(merged) if merged else {})
    return StepMetrics(fio_version=FIO, jobs=jobs, runtime_ms=ms, read=dirs["read"], write=dirs["write"],
                       combined=comb, errors=0), hist


def series(level: Perf, seconds: int, rng: random.Random, decay: Sequence[float] | None = None) -> dict[str, Any]:
    """Per-second columns as :func:`labcontract.fioseries.series_summary` stores them (latency in µs);
    ``decay[i]``: IOPS factor of second i (the fall from the burst during preconditioning)."""
    out: dict[str, list[Any]] = {k: [] for k in ("t", "iops", "read_iops", "write_iops", "lat_mean_us",
                                                 "lat_max_us", "lat_stddev_us")}
    total = level.read_iops + level.write_iops
    share = level.read_iops / total if total else 0.0
    for i in range(seconds):
        f = (decay[i] if decay else 1.0) * rng.gauss(1.0, 0.02)
        iops = total * f
        lat = level.lat_mean_ns / f
        spike = rng.uniform(2.0, 6.0) if rng.random() < 0.03 else 1.0
        out["t"].append(float(i + 1))
        out["iops"].append(iops)
        out["read_iops"].append(iops * share)
        out["write_iops"].append(iops * (1 - share))
        out["lat_mean_us"].append(lat / 1e3)
        out["lat_max_us"].append(min(level.lat_max_ns, lat * rng.uniform(4, 9) * spike) / 1e3)
        out["lat_stddev_us"].append(level.lat_stddev_ns / f * spike ** 0.5 / 1e3)
    return out


# ------------------------------------------------------------------ rows


def provenance(facts: dict[str, Any], run: Run, step: Step) -> dict[str, Any]:
    devs = {b["path"]: b for b in facts["block_devices"]}
    devices = [{"name": devs[p]["name"], "path": p, "kind": "block", "size_bytes": devs[p]["size_bytes"],
                "model": devs[p]["model"], "serial": devs[p]["serial"], "firmware": devs[p]["firmware"],
                "by_id": None} for p in run.devices]
    return {"host": facts, "agent_version": "0.13.0", "device": devices[0], "devices": devices,
            "op_mode": step.cell.get("op_mode", "stock"), "op_note": step.note, "suite_sha256": run.suite_sha256,
            "job_sha256": None}


def attempt(run: Run, step: Step, t: float, seconds: float) -> Attempt:
    att = Attempt(id=f"{step.id}-a1", step_id=step.id, number=1, host=step.host or run.host, device=run.device,
                  state="SUCCEEDED", timeout_s=int(seconds) + 300, dispatch_count=1, dispatched_at=t, started_at=t,
                  fio_started_at=t + 0.01, fio_ended_at=t + seconds, ended_at=t + seconds + 0.1, exit_code=0)
    step.attempts.append(att)
    return att


def add_result(s: Session, run: Run, step: Step, facts: dict[str, Any], m: StepMetrics, t: float, *,
               hist: dict[str, Any] | None, ser: dict[str, Any] | None,
               per_device: dict[str, Any] | None = None) -> Result:
    att = attempt(run, step, t, m.runtime_ms / 1000)
    c, r, w = m.combined, m.read, m.write
    res = Result(attempt_id=att.id, step_id=step.id, run_id=run.id, read_iops=r.iops, write_iops=w.iops,
                 iops=c.iops, read_bw_bytes=r.bw_bytes, write_bw_bytes=w.bw_bytes, bw_bytes=c.bw_bytes,
                 lat_mean_ns=c.lat_mean_ns, lat_max_ns=c.lat_max_ns, lat_stddev_ns=c.lat_stddev_ns,
                 lat_p99_ns=c.percentiles_ns.get("p99"), runtime_ms=m.runtime_ms, fio_version=m.fio_version,
                 metrics=m.model_dump(mode="json"), per_device=per_device, series=ser,
                 lat_hist=hist, provenance=provenance(facts, run, step), created_at=t + m.runtime_ms / 1000)
    s.add(res)
    return res


def _device_figures(devs: Sequence[tuple[str, DeviceModel]], wl: dict[str, Any], op_mode: str, rng: random.Random,
                    seconds: float) -> tuple[StepMetrics, dict[str, Any], dict[str, Any] | None, Perf]:
    """One step's metrics, histogram and figures; for a group per device too (IOPS summed, largest max)."""
    bs, jobs = int(wl.get("bs") or 4096), int(wl.get("numjobs") or 1)
    parts = [(path, perf(d, wl, op_mode, rng)) for path, d in devs]
    if len(parts) == 1:
        m, h = metrics(parts[0][1], bs, jobs, seconds)
        return m, h, None, parts[0][1]
    per: dict[str, Any] = {}
    hist: dict[str, Any] = {"read": [], "write": [], "per_device": {}}
    for path, p in parts:
        pm, ph = metrics(p, bs, jobs, seconds)
        per[path] = pm.model_dump(mode="json")
        hist["per_device"][path] = ph
    r = sum(p.read_iops for _, p in parts)
    w = sum(p.write_iops for _, p in parts)
    tot = Perf(r, w, sum(p.lat_mean_ns * (p.read_iops + p.write_iops) for _, p in parts) / (r + w),
               max(p.lat_max_ns for _, p in parts), max(p.lat_stddev_ns for _, p in parts))
    m, h = metrics(tot, bs, jobs * len(parts), seconds)
    m = m.model_copy(update={"combined": m.combined.model_copy(update={"iops": sum(
        per[p]["combined"]["iops"] for p, _ in parts)})})
    hist.update(read=h["read"], write=h["write"])
    return m, hist, per, tot


def _decays(rounds: int, seconds: int, criteria: SteadyCriteria, burst: float,
            rng: random.Random) -> list[list[float]]:
    """Per round, per second IOPS factors: the fresh-out-of-box burst decaying (4 rounds) and, until the last
    window, a garbage-collection stall every ``window`` rounds (IOPS at 35% for half the round), so that
    every window before the last holds a stall and the SNIA check first judges steady state at exactly round
    ``rounds``, as the controller would have stopped there. Checked with :func:`labcontract.steady.detect`."""
    w = criteria.window
    out = []
    for r in range(1, rounds + 1):
        stall = r % w == 0 and r <= rounds - w
        out.append([(1 + burst * math.exp(-((r - 1) * seconds + i) / (4 * seconds)))
                    * (0.35 if stall and seconds // 4 <= i < 3 * seconds // 4 else 1.0) * rng.gauss(1.0, 0.004)
                    for i in range(seconds)])
    verdict = detect([sum(x) / seconds for x in out], criteria)
    if not (verdict.steady and verdict.round == rounds):
        raise ValueError(f"synthetic preconditioning of {rounds} rounds is not first steady at its last round: "
                         f"{verdict.reason}")
    return out


def write_disk_run(s: Session, run_id: str, suite_text: str, devs: Sequence[tuple[str, DeviceModel]], *,
                   at: float = T0, rounds: int = 40, seed: int = SEED, runtime: int | None = None,
                   scale: float | None = None) -> Run:
    """A finished run of a suite on one device or a group: the planner's steps, a result per measured step
    (per-second series, histogram, per device for groups), ``rounds`` precondition rounds per group with
    their record and steady verdict."""
    rng = random.Random(f"{seed}-{run_id}")
    suite = parse_suite(suite_text, f"builtin:{run_id}")
    paths = [p for p, _ in devs]
    run = new_run(run_id, suite, suite_text, paths, at=at, runtime=runtime, scale=scale)
    s.add(run)
    s.flush()      # precondition records refer to the run by id only (no relationship orders the inserts)
    facts = host_facts(HOST, devs)
    pc = with_overrides(suite, runtime=runtime, scale=scale).phases.precondition
    t = at + 5
    for p in plan(suite, paths, runtime=runtime, scale=scale):
        step = Step(id=p.step_id(run_id), seq=p.seq, round=p.round, kind=p.kind, name=p.name, cell=p.cell, note=p.note,
                    workload=p.workload.model_dump(mode="json") if p.workload else None, job_text=p.job_text,
                    state="SUCCEEDED", ended_at=t)
        run.steps.append(step)
        wl = step.workload or {}
        mode = str(p.cell.get("op_mode", "stock"))
        if p.kind == "purge":
            attempt(run, step, t, 30)
            t += 31
        elif p.kind == "measure" and p.workload is not None:
            secs = p.workload.expected_seconds
            m, h, per, level = _device_figures(devs, wl, mode, rng, secs)
            add_result(s, run, step, facts, m, t, hist=h, per_device=per, ser=series(level, int(secs), rng))
            t += secs + 0.3
        elif p.kind == "precondition" and pc is not None and p.workload is not None:
            t = _precondition(s, run, step, facts, devs, pc.model_dump(mode="json"), rounds, rng, t)
    run.ended_at = t
    return run


def _precondition(s: Session, run: Run, first: Step, facts: dict[str, Any], devs: Sequence[tuple[str, DeviceModel]],
                  criteria: dict[str, Any], rounds: int, rng: random.Random, t: float) -> float:
    wl = first.workload or {}
    mode = str(first.cell.get("op_mode", "stock"))
    secs = int(wl.get("runtime") or 60)
    crit = SteadyCriteria(window=int(criteria["window"]), max_range_pct=float(criteria["max_range_pct"]),
                          max_excursion_pct=float(criteria["max_excursion_pct"]))
    write_share = 1 - (1.0 if wl.get("rw") == "read" else 0.0 if wl.get("rw") == "write"
                       else float(wl.get("rwmixread", 50)) / 100)
    burst = (0.1 + 2.5 * write_share) / (1.6 if mode.startswith("hp") else 1.0)
    decay = _decays(rounds, secs, crit, burst, rng)
    steady = perf(devs[0][1], wl, mode, rng)
    rec = PreconditionRecord(run_id=run.id, seq=first.seq, name=first.name.rsplit(".round", 1)[0], criteria=criteria,
                             rounds=[], verdict="")
    s.add(rec)
    base = first.workload
    values = []
    step = first
    for r in range(1, rounds + 1):
        if r > 1:
            nxt = round_workload(Workload.model_validate(base).model_copy(update={"name": rec.name}), r)
            step = Step(id=f"{run.id}-s{first.seq:03d}-r{r:03d}", seq=first.seq, round=r, kind="precondition",
                        name=nxt.name, cell={**first.cell, "round": r}, note=first.note,
                        workload=nxt.model_dump(mode="json"), job_text=first.job_text, state="SUCCEEDED", ended_at=t)
            run.steps.append(step)
        mean_f = sum(decay[r - 1]) / secs
        level = Perf(steady.read_iops * mean_f, steady.write_iops * mean_f, steady.lat_mean_ns / mean_f,
                     steady.lat_max_ns * (1 + 0.5 * (r == 1)), steady.lat_stddev_ns)
        m, h = metrics(level, int(wl.get("bs") or 4096), int(wl.get("numjobs") or 1), secs)
        add_result(s, run, step, facts, m, t, hist=h, ser=series(steady, secs, rng, decay[r - 1]))
        values.append({"round": r, **round_values(m)})
        t += secs + 0.3
    rec.rounds = values
    verdict = detect([v["iops"] for v in values], crit)
    rec.steady, rec.reached_round = verdict.steady, verdict.round
    rec.verdict = verdict.reason if verdict.steady else \
        f"not steady after {rounds} rounds (max_rounds {criteria['max_rounds']}): {verdict.reason}"
    rec.ended_at = t
    return t


# ------------------------------------------------------------------ the runs of the benchmark and the tests


def builtin_text(name: str, **changes: Any) -> str:
    """A built-in suite's text with top-level keys replaced (e.g. op_modes)."""
    doc = yaml.safe_load(load_suite(name).source_text)
    doc.update(changes)
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class SyntheticStore:
    path: Path
    sessions: sessionmaker[Session]
    pattern: str
    stock: str
    hp: str
    group: str
    network: str
    compare: list[str]        # 10 runs for the N-way compare (pattern runs of several devices / modes)


def build(path: Path, *, rounds: int = 40, compare_runs: int = 10) -> SyntheticStore:
    """Every synthetic run, written to a new SQLite store at ``path``."""
    sm = open_store(path)
    one = [("/dev/nvme0n1", CARD)]
    with sm.begin() as s:
        pattern = write_disk_run(s, "synpattern125", builtin_text("pattern-125"), one).id
        stock = write_disk_run(s, "synentstock", builtin_text("enterprise-synthetic"), one, rounds=rounds).id
        hp = write_disk_run(s, "synenthp20", builtin_text("enterprise-synthetic", op_modes=["hp:20"]), one,
                            rounds=rounds, at=T0 + 86_400).id
        group = write_disk_run(s, "syngroup4", builtin_text("device-group"),
                               [(f"/dev/nvme{i}n1", NVME) for i in range(4)], at=T0 + 2 * 86_400).id
        network = write_network_run(s, "synnetpaths", at=T0 + 3 * 86_400).id
        compare = [pattern]
        for i in range(1, compare_runs):
            dev = (CARD, NVME)[i % 2]
            mode = ["hp:20"] if i % 4 >= 2 else ["stock"]
            compare.append(write_disk_run(s, f"synpatcmp{i:02d}", builtin_text("pattern-125", op_modes=mode),
                                          [(f"/dev/nvme{i}n1", dev)], at=T0 + (4 + i) * 86_400, seed=SEED + i).id)
    return SyntheticStore(path, sm, pattern, stock, hp, group, network, compare)
