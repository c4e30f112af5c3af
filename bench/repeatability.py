"""Repeatability: how much 4K random write at steady state varies from one repeat to the next on this machine.

One run of a suite on the benchmark lab (bench.benchlab): the DUT preconditioned to steady state with 4K random
write (phases.precondition: rounds until the SNIA window rule holds), then the measured cells repeated N times
(``repeat:``): 4K random write at 1 job x QD16 (the figure) and at QD1 (a second cell, so that the order of the
repeats matters). Prints, per cell, the repeats' IOPS and mean latency with mean, 95% confidence interval
(Student's t) and coefficient of variation, from orchestrator.stats.samples (what ``run show`` prints).

``--order both`` runs the suite twice on the same DUT, once with ``repeat_order: interleaved`` (qd16.rep1,
qd1.rep1, qd16.rep2, ...) and once ``back_to_back`` (qd16.rep1..5, then qd1.rep1..5), each preconditioned anew.

Usage: python -m bench.repeatability [--repeat 5] [--runtime 10] [--round 5] [--order interleaved|back_to_back|both]
       [--backing-dir DIR] [--no-pin]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench.benchlab import BenchLab, bench_lab
from labcontract.suite import Suite, parse_suite
from orchestrator.queries import RunDetail
from orchestrator.stats.samples import fmt_summary, run_samples

METRICS = (("iops", "IOPS", "{:,.0f}"), ("lat_mean_us", "mean latency µs", "{:,.1f}"))


def suite_text(repeat: int, order: str, runtime: int, round_s: int, max_rounds: int) -> str:
    """The suite, as an engineer would write it (docs/suites.md)."""
    return f"""\
suite: repeatability-4k-randwrite
description: 4K random write at steady state, {repeat} repeats ({order})
repeat: {repeat}
repeat_order: {order}
defaults: {{ioengine: libaio, direct: true, runtime: {runtime}s}}
phases:
  precondition: {{numjobs: 2, iodepth: 16, round: {round_s}s, max_rounds: {max_rounds}, window: 5}}
profiles:
  - name: 4k-randwrite
    rw: randwrite
    bs: 4k
    numjobs: 1
    sweep: {{iodepth: [16, 1]}}
"""


def make_suite(repeat: int, order: str, runtime: int, round_s: int, max_rounds: int) -> Suite:
    return parse_suite(suite_text(repeat, order, runtime, round_s, max_rounds), "repeatability.yaml")


def report(d: RunDetail, wall: float) -> None:
    for pc in d.preconditions:
        print(f"  precondition {pc.name}: {'steady' if pc.steady else 'NOT steady'} after {len(pc.rounds)} rounds "
              f"({pc.verdict})")
    order = [st.name for st in d.steps if st.kind == "measure"]
    print(f"  measure order: {' '.join(order)}")
    for cs in run_samples(d).values():
        print(f"  cell {cs.label}: {cs.planned} repeats planned")
        for name, title, fmt in METRICS:
            vals = cs.values.get(name, [])
            print(f"    {title:<16} {fmt_summary(cs.summary(name), fmt)}")
            s = cs.summary(name)
            if s is not None and s.ci_low is not None and s.ci_high is not None:
                print(f"    {'':<16} mean {fmt.format(s.mean)}, 95% CI [{fmt.format(s.ci_low)}, "
                      f"{fmt.format(s.ci_high)}], CoV {s.cov_pct or 0:.2f}%, median {fmt.format(s.median)}")
            print(f"    {'':<16} repeats: {', '.join(fmt.format(v) for v in vals)}")
    print(f"  run wall time {wall:.0f} s")


def run_once(bl: BenchLab, suite: Suite, timeout: float) -> None:
    t0 = time.monotonic()
    d = bl.run_suite(suite, timeout)
    report(d, time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runtime", type=int, default=10, help="seconds per measured repeat")
    ap.add_argument("--round", dest="round_s", type=int, default=5, help="seconds per precondition round")
    ap.add_argument("--max-rounds", type=int, default=20)
    ap.add_argument("--order", choices=("interleaved", "back_to_back", "both"), default="interleaved")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--backing-dir", type=Path, default=None,
                    help="where the DUT's backing file lives (default: the lab directory, on this machine's disk)")
    ap.add_argument("--no-pin", dest="pin", action="store_false", help="let fio share the CPUs with the lab")
    args = ap.parse_args()
    if args.repeat < 2:
        ap.error("--repeat must be >= 2 (a CoV needs two repeats)")
    orders = ("interleaved", "back_to_back") if args.order == "both" else (args.order,)
    with bench_lab(args.size_mib, args.backing_dir, pin=args.pin) as bl:
        dut = bl.dut
        print(f"DUT {dut.path} ({'loop, direct I/O' if dut.loop else 'file'} on {dut.backing}), {args.size_mib} MiB; "
              f"{'fio on CPU ' + str(sorted(bl.fio_cpus)) if bl.fio_cpus else 'not pinned'}; "
              f"load average {os.getloadavg()[0]:.2f}")
        for order in orders:
            suite = make_suite(args.repeat, order, args.runtime, args.round_s, args.max_rounds)
            print(f"\nrepeat_order: {order}; {args.repeat} repeats x {args.runtime} s per cell; precondition rounds "
                  f"of {args.round_s} s (at most {args.max_rounds})")
            timeout = args.max_rounds * (args.round_s + 30) + 2 * args.repeat * (args.runtime + 30) + 120
            run_once(bl, suite, timeout)
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
