"""The 125-pattern sweep through the orchestrator vs the same 125 fio jobs run back to back bare.

Prints the wall-time ratio (orchestrated / bare) and the median gap between cells (fio exit of one
cell -> fio start of the next, through event stream, controller, store and dispatch). Target:
gap <= 0.3 s, so that with the review's 60 s cells the sweep is within 2% of bare fio.

Usage: python -m bench.pattern125 [--runtime 1] [--size-mib 1024] [--backing-dir /dev/shm]
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import yaml

from bench.benchlab import bench_lab, median
from labcontract.fiojob import render_job
from labcontract.suite import load_suite, parse_suite


def pattern_only_suite() -> str:
    """The built-in pattern-125 suite without its three large-block checks: exactly the 125 patterns."""
    doc = yaml.safe_load(load_suite("pattern-125").source_text)
    doc["profiles"] = [p for p in doc["profiles"] if p["name"] == "pattern"]
    return yaml.safe_dump(doc, sort_keys=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", type=int, default=1, help="seconds per cell")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--backing-dir", type=Path, default=None)
    args = ap.parse_args()
    suite = parse_suite(pattern_only_suite(), "pattern-125 (patterns only)")
    cells = [w.model_copy(update={"runtime": args.runtime}) for w in suite.workloads]
    assert len(cells) == 125

    with bench_lab(args.size_mib, args.backing_dir) as bl:
        jobs = []
        for i, w in enumerate(cells):
            job = bl.root / f"bare-{i:03d}.fio"
            job.write_text(render_job(w, bl.dut.path))
            jobs.append(job)
        print(f"DUT {bl.dut.path} on {bl.dut.backing}; 125 cells x {args.runtime}s\n")

        t0 = time.monotonic()
        for i, job in enumerate(jobs):
            bl.bare_fio(job, bl.root / f"bare-{i:03d}.json")
        bare_wall = time.monotonic() - t0

        t0 = time.monotonic()
        d = bl.run_suite(suite, timeout=125 * (args.runtime + 30), runtime=args.runtime)
        orch_wall = time.monotonic() - t0

        attempts = [st.attempts[-1] for st in d.steps]
        gaps = [b.fio_started_at - a.fio_ended_at for a, b in itertools.pairwise(attempts)
                if a.fio_ended_at and b.fio_started_at]
        fio_time = sum((a.fio_ended_at or 0) - (a.fio_started_at or 0) for a in attempts)
        print(f"bare, back to back:          {bare_wall:8.1f} s")
        print(f"orchestrated (submit->end):  {orch_wall:8.1f} s   (fio itself: {fio_time:.1f} s)")
        print(f"wall-time ratio:             {orch_wall / bare_wall:8.3f}")
        print(f"gap between cells: median {median(gaps):.3f} s, p90 {sorted(gaps)[int(len(gaps) * 0.9)]:.3f} s, "
              f"max {max(gaps):.3f} s   (target median <= 0.3 s)")
        per_cell_bare = bare_wall / 125
        projected = (60 + per_cell_bare - args.runtime + median(gaps)) / (60 + per_cell_bare - args.runtime)
        print(f"projected at 60 s cells:     {projected:8.4f} x bare (target <= 1.02)")


if __name__ == "__main__":
    main()
