"""Orchestration overhead: the same fio job bare and through the lab, live telemetry on and off.

Starts a real embedded lab (redis-server, controller, agent) on a loop-device DUT, then runs N rounds on
the same DUT; each round runs three arms in an order that rotates from round to round:

- **bare**: fio started by this script, in a session of its own as the agent starts it;
- **live**: the suite submitted through the lab with live telemetry (fio ``--status-interval=1`` json+
  snapshots, the agent's per-second live status), the default;
- **quiet**: the same submission with ``live=False``.

and prints, with the 95% confidence interval of the mean over rounds (Student's t, orchestrator.stats):

- the IOPS ratios live / bare, quiet / bare and live / quiet (mean of per-round ratios; median; range);
- the control overhead submit -> fio start and fio exit -> result stored (target <= 0.5 s each);
- CPU time per I/O of fio (bare: this process's rusage of the child; through the lab: the agent's
  cutime+cstime, i.e. the fio steps it reaped) and of the agent (its utime+stime) with live on and off:
  the cost of telemetry measured as work done, which the IOPS noise of a shared VM hides.

The harness does not compete with what it measures: while fio runs it blocks on the agent's events stream
(bench.benchlab.BenchLab.wait_run); with ``--pin`` (the default where >= 2 CPUs are allowed) fio runs on
its own CPU(s) and redis, the controller, the agent and this script on the others.

Usage: python -m bench.overhead [--pairs 7] [--runtime 8] [--backing-dir /dev/shm] [--no-pin] [--fio-nice -10]
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.benchlab import BenchLab, bench_lab, excludes, fio_job_cpu, fmt_ci, fmt_range, ratio_summary, ratios
from labcontract.fiojob import render_job
from labcontract.fioresult import parse_fio_output
from labcontract.suite import Suite, parse_suite
from orchestrator.stats.summary import summarize

ARMS = ("bare", "live", "quiet")
ORDERS = (("bare", "live", "quiet"), ("live", "quiet", "bare"), ("quiet", "bare", "live"))


@dataclass
class Arm:
    """One arm's figures over the rounds."""

    iops: list[float] = field(default_factory=list)
    fio_cpu_per_io: list[float] = field(default_factory=list)     # seconds
    agent_cpu_per_io: list[float] = field(default_factory=list)   # seconds (lab arms)
    agent_cpu_share: list[float] = field(default_factory=list)    # agent CPU / wall of the run (lab arms)
    fio_main_cpu: list[float] = field(default_factory=list)       # fio's CPU outside its job, per second of runtime
    fio_cpu_per_s: list[float] = field(default_factory=list)      # fio's whole CPU per second of runtime
    to_start: list[float] = field(default_factory=list)
    to_stored: list[float] = field(default_factory=list)


def run_bare(bl: BenchLab, job: Path, i: int, arm: Arm | None) -> float:
    out = bl.root / f"bare-{i}.json"
    iops, cpu, ios = bl.bare_fio_cpu(job, out)
    if arm is not None:
        job_cpu, runtime = fio_job_cpu(out.read_bytes())
        arm.iops.append(iops)
        arm.fio_cpu_per_io.append(cpu / ios)
        arm.fio_main_cpu.append((cpu - job_cpu) / runtime)
        arm.fio_cpu_per_s.append(cpu / runtime)
    return iops


def run_lab(bl: BenchLab, suite: Suite, runtime: int, live: bool, arm: Arm | None) -> float:
    own0, fio0 = bl.agent_cpu()
    t0 = time.time()
    run_id, _ = bl.client.submit(suite, "bench-host", ["dut0"], live=live)
    d = bl.wait_run(run_id, runtime + 120)
    wall = time.time() - t0
    assert d.run.state == "SUCCEEDED", d.run.reason
    own1, fio1 = bl.agent_cpu()
    att = d.steps[0].attempts[-1]
    res = d.results[d.steps[0].id]
    assert att.fio_started_at and att.fio_ended_at and att.ended_at
    output = bl.attempt_output(d)
    ios = parse_fio_output(output).combined.ios
    job_cpu, fio_runtime = fio_job_cpu(output)
    iops = res.iops or 0.0
    if arm is not None:
        arm.iops.append(iops)
        arm.fio_cpu_per_io.append((fio1 - fio0) / ios)
        arm.fio_main_cpu.append((fio1 - fio0 - job_cpu) / fio_runtime)
        arm.fio_cpu_per_s.append((fio1 - fio0) / fio_runtime)
        arm.agent_cpu_per_io.append((own1 - own0) / ios)
        arm.agent_cpu_share.append((own1 - own0) / wall)
        arm.to_start.append(att.fio_started_at - t0)
        arm.to_stored.append(att.ended_at - att.fio_ended_at)
    return iops


def report(arms: dict[str, Arm]) -> None:
    b, lv, q = arms["bare"], arms["live"], arms["quiet"]
    print("\nIOPS ratios, mean of per-round ratios [95% CI] (median, n):")
    for name, num, den in (("live / bare", lv, b), ("quiet / bare", q, b), ("live / quiet", lv, q)):
        rs = ratios(num.iops, den.iops)
        s = ratio_summary(rs, name)
        shown = "differs from 1" if excludes(s, 1.0) else "1 within the interval"
        print(f"  {name:<13} {fmt_ci(s)}  range {fmt_range(rs)}  CoV {s.cov_pct or 0:.1f}%  [{shown}]")
    print("\ncontrol overhead (lab arms, both):")
    for label, vals in (("submit -> fio start", lv.to_start + q.to_start),
                        ("fio exit -> result stored", lv.to_stored + q.to_stored)):
        s = summarize(vals, label)
        print(f"  {label:<26} {fmt_ci(s, '{:.3f}')} s  max {max(vals):.3f} s  (target <= 0.5 s)")
    print("\nCPU time per I/O, microseconds, mean [95% CI]:")
    for name in ARMS:
        a = arms[name]
        print(f"  fio   {name:<6} {fmt_ci(summarize([x * 1e6 for x in a.fio_cpu_per_io], name), '{:.3f}')}")
    for name in ("live", "quiet"):
        a = arms[name]
        share = summarize([x * 100 for x in a.agent_cpu_share], name)
        print(f"  agent {name:<6} {fmt_ci(summarize([x * 1e6 for x in a.agent_cpu_per_io], name), '{:.3f}')}"
              f"   ({share.mean:.2f}% of a core over submit -> stored)")
    print("\ntelemetry's cost as CPU, per-round ratios live / quiet, mean [95% CI]:")
    for label, nums, dens in (("fio CPU per I/O", lv.fio_cpu_per_io, q.fio_cpu_per_io),
                              ("agent CPU per I/O", lv.agent_cpu_per_io, q.agent_cpu_per_io)):
        rs = ratios(nums, dens)
        s = ratio_summary(rs, label)
        shown = "differs from 1" if excludes(s, 1.0) else "1 within the interval"
        print(f"  {label:<18} {fmt_ci(s)}  range {fmt_range(rs)}  [{shown}]")
    print("\nfio's CPU outside its job process (status output, helper thread, start and end), ms per second of "
          "its runtime, mean [95% CI]:")
    for name in ARMS:
        print(f"  {name:<6} {fmt_ci(summarize([x * 1e3 for x in arms[name].fio_main_cpu], name), '{:.2f}')}")
    diff = [(a - b) * 1e3 for a, b in zip(lv.fio_main_cpu, q.fio_main_cpu, strict=True)]
    print(f"  live - quiet, per round: {fmt_ci(summarize(diff, 'live - quiet'), '{:.2f}')} ms/s")
    shares = [d / (w * 1e3) * 100 for d, w in zip(diff, q.fio_cpu_per_s, strict=True)]
    print(f"  the same in % of fio's whole CPU (quiet arm): {fmt_ci(summarize(shares, 'share'), '{:.2f}')} %")
    print("  fio CPU per I/O, lab quiet / bare: "
          f"{fmt_ci(ratio_summary(ratios(q.fio_cpu_per_io, b.fio_cpu_per_io)))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", "--rounds", dest="rounds", type=int, default=7,
                    help="rounds of the three arms (bare, live, quiet)")
    ap.add_argument("--runtime", type=int, default=8)
    ap.add_argument("--bs", default="4k")
    ap.add_argument("--rw", default="randread")
    ap.add_argument("--iodepth", type=int, default=16)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=1, help="bare and live runs before measuring (discarded)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="let fio share the CPUs with the lab's daemons (the former set-up)")
    ap.add_argument("--fio-nice", type=int, default=0,
                    help="nice value of fio in every arm (e.g. -10, as root: fio then loses less CPU to other work "
                         "on a shared machine)")
    ap.add_argument("--backing-dir", type=Path, default=None,
                    help="where the DUT's backing file lives (e.g. /dev/shm for a RAM-backed loop device, "
                         "which takes the disk's noise out of the comparison)")
    args = ap.parse_args()
    if args.rounds < 2:
        ap.error("--pairs must be >= 2 (an interval needs two rounds)")

    suite_text = (f"suite: bench\nprofiles:\n  - {{name: bench, rw: {args.rw}, bs: {args.bs}, "
                  f"iodepth: {args.iodepth}, runtime: {args.runtime}s, ioengine: libaio, direct: true}}\n")
    suite = parse_suite(suite_text, "bench.yaml")
    with bench_lab(args.size_mib, args.backing_dir, pin=args.pin, fio_nice=args.fio_nice) as bl:
        dut = bl.dut
        job = bl.root / "bare.fio"
        job.write_text(render_job(suite.workloads[0], dut.path))
        pinning = (f"fio on CPU {sorted(bl.fio_cpus)}, the rest on {sorted(os.sched_getaffinity(0))}"
                   if bl.fio_cpus else "not pinned")
        print(f"DUT {dut.path} ({'loop, direct I/O' if dut.loop else 'file'} on {dut.backing}), {args.size_mib} MiB; "
              f"{args.rw} {args.bs} QD{args.iodepth}, {args.runtime}s per run, {args.rounds} rounds of "
              f"bare / live / quiet; {pinning}; fio nice {args.fio_nice}; load average {os.getloadavg()[0]:.2f}\n")
        for i in range(args.warmup):
            print(f"warm-up {i + 1}: bare {run_bare(bl, job, -1 - i, None):,.0f} IOPS, "
                  f"live {run_lab(bl, suite, args.runtime, True, None):,.0f} IOPS (discarded)")
        arms = {name: Arm() for name in ARMS}
        print(f"{'round':>5} {'order':>18} {'bare IOPS':>11} {'live IOPS':>11} {'quiet IOPS':>11} "
              f"{'live/bare':>9} {'quiet/bare':>10} {'start':>7} {'stored':>7} {'load':>5}")
        for i in range(args.rounds):
            order = ORDERS[i % len(ORDERS)]
            for name in order:
                if name == "bare":
                    run_bare(bl, job, i, arms["bare"])
                else:
                    run_lab(bl, suite, args.runtime, name == "live", arms[name])
            b, lv, q = (arms[n].iops[-1] for n in ARMS)
            print(f"{i + 1:>5} {'/'.join(order):>18} {b:>11,.0f} {lv:>11,.0f} {q:>11,.0f} {lv / b:>9.4f} "
                  f"{q / b:>10.4f} {arms['live'].to_start[-1]:>6.3f}s {arms['live'].to_stored[-1]:>6.3f}s "
                  f"{os.getloadavg()[0]:>5.2f}")
        report(arms)
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
