"""Orchestration overhead: the same fio job bare and through the orchestrator, alternating.

Starts a real embedded lab (redis-server, controller, agent) on a loop-device DUT, then runs
N pairs on the same DUT, alternating which goes first, and prints:

- the median IOPS ratio orchestrated / bare          (target >= 0.99)
- the median control overhead submit -> fio start     (target <= 0.5 s)
- the median control overhead fio exit -> result stored (target <= 0.5 s)

Usage: python -m bench.overhead [--pairs 5] [--runtime 10] [--bs 4k] [--iodepth 16] [--warmup 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.benchlab import bench_lab, median
from labcontract.fiojob import render_job
from labcontract.suite import parse_suite


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--bs", default="4k")
    ap.add_argument("--rw", default="randread")
    ap.add_argument("--iodepth", type=int, default=16)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=1, help="bare runs before measuring (discarded)")
    ap.add_argument("--backing-dir", type=Path, default=None,
                    help="where the DUT's backing file lives (e.g. /dev/shm for a RAM-backed loop device, "
                         "which takes the disk's noise out of the comparison)")
    args = ap.parse_args()

    suite_text = (f"suite: bench\nprofiles:\n  - {{name: bench, rw: {args.rw}, bs: {args.bs}, "
                  f"iodepth: {args.iodepth}, runtime: {args.runtime}s, ioengine: libaio, direct: true}}\n")
    suite = parse_suite(suite_text, "bench.yaml")
    with bench_lab(args.size_mib, args.backing_dir) as bl:
        dut = bl.dut
        job = bl.root / "bare.fio"
        job.write_text(render_job(suite.workloads[0], dut.path))
        print(f"DUT {dut.path} ({'loop, direct I/O' if dut.loop else 'file'} on {dut.backing}), {args.size_mib} MiB; "
              f"{args.rw} {args.bs} QD{args.iodepth}, {args.runtime}s per run, {args.pairs} pairs\n")

        def bare(i: int) -> float:
            return bl.bare_fio(job, bl.root / f"bare-{i}.json")

        def orchestrated() -> tuple[float, float, float]:
            t0 = time.time()
            d = bl.run_suite(suite, args.runtime + 120)
            att = d.steps[0].attempts[0]
            res = d.results[d.steps[0].id]
            assert att.fio_started_at and att.fio_ended_at and att.ended_at
            return res.iops or 0.0, att.fio_started_at - t0, att.ended_at - att.fio_ended_at

        for i in range(args.warmup):
            print(f"warm-up run {i + 1}: {bare(-1 - i):,.0f} IOPS (discarded)")
        ratios, starts, stores = [], [], []
        print(f"{'pair':>4} {'order':>12} {'bare IOPS':>12} {'orch IOPS':>12} {'ratio':>7} "
              f"{'submit->fio':>12} {'exit->stored':>13}")
        for i in range(args.pairs):
            if i % 2 == 0:
                b = bare(i)
                o, st, sd = orchestrated()
                order = "bare first"
            else:
                o, st, sd = orchestrated()
                b = bare(i)
                order = "orch first"
            ratios.append(o / b)
            starts.append(st)
            stores.append(sd)
            print(f"{i + 1:>4} {order:>12} {b:>12,.0f} {o:>12,.0f} {o / b:>7.4f} {st:>11.3f}s {sd:>12.3f}s")
        print()
        print(f"median IOPS ratio (orchestrated / bare): {median(ratios):.4f}   (target >= 0.99)")
        print(f"median submit -> fio start:              {median(starts):.3f} s (target <= 0.5 s)")
        print(f"median fio exit -> result stored:        {median(stores):.3f} s (target <= 0.5 s)")


if __name__ == "__main__":
    main()
