"""The SNIA PTS-E IOPS test (the built-in ``snia-iops``) through the orchestrator on a loop DUT, at ``--scale``.

Prints the wall time from submit to the run's end, the rounds it took to reach steady state (or ``max_rounds``),
the steps, and per round the orchestrated wall time against the same 56 fio jobs run bare back to back in the same
run (the baseline): ``ratio`` = orchestrated round / bare round. The WIPC passes are timed apart (they write the
DUT twice over and are as long on both arms).

Usage: python -m bench.pts [--scale 0.02] [--size-mib 1024] [--backing-dir /dev/shm] [--max-rounds N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.benchlab import bench_lab, median
from labcontract.fiojob import render_job
from labcontract.suite import load_suite, with_overrides


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.02, help="the run's --scale (0.02: 1 s cells)")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--backing-dir", type=Path, default=None)
    ap.add_argument("--max-rounds", type=int, default=None, help="the submission's cap on rounds")
    args = ap.parse_args()
    suite = load_suite("snia-iops")
    cells = [c.workload for c in with_overrides(suite, scale=args.scale).cells]

    with bench_lab(args.size_mib, args.backing_dir) as bl:
        jobs = []
        for i, w in enumerate(cells):
            job = bl.root / f"bare-{i:03d}.fio"
            job.write_text(render_job(w, bl.dut.path))
            jobs.append(job)
        print(f"DUT {bl.dut.path} ({args.size_mib} MiB) on {bl.dut.backing}; snia-iops at --scale {args.scale:g}: "
              f"{len(cells)} cells x {cells[0].runtime} s a round\n")
        t0 = time.monotonic()
        for i, job in enumerate(jobs):
            bl.bare_fio(job, bl.root / f"bare-{i:03d}.json")
        bare_round = time.monotonic() - t0

        t0 = time.monotonic()
        overrides: dict[str, object] = {"scale": args.scale}
        if args.max_rounds is not None:
            overrides["max_rounds"] = args.max_rounds
        d = bl.run_suite(suite, timeout=24 * 3600, **overrides)
        wall = time.monotonic() - t0

        (rec,) = d.preconditions
        rounds = max(st.round for st in d.steps if st.kind == "measure")
        by_round: dict[int, list[float]] = {}
        wipc = 0.0
        for st in d.steps:
            att = st.attempts[-1]
            if not (att.fio_started_at and att.fio_ended_at):
                continue
            if st.kind == "precondition":
                wipc += att.fio_ended_at - att.fio_started_at
            elif st.kind == "measure":
                by_round.setdefault(st.round, []).extend((att.fio_started_at, att.fio_ended_at))
        spans = [max(v) - min(v) for v in by_round.values()]
        print(f"run: {wall:,.1f} s from submit to end, {len(d.steps)} steps, {rounds} rounds; "
              f"{'steady at round ' + str(rec.reached_round) if rec.steady else 'NOT steady'}: {rec.verdict}")
        print(f"WIPC (2 passes over {args.size_mib} MiB):      {wipc:8.1f} s")
        print(f"a round, bare back to back:         {bare_round:8.1f} s")
        print(f"a round, orchestrated (median):     {median(spans):8.1f} s   (min {min(spans):.1f}, "
              f"max {max(spans):.1f})")
        print(f"ratio (orchestrated / bare round):  {median(spans) / bare_round:8.3f}")
        full = (median(spans) - len(cells) * cells[0].runtime + len(cells) * 60) * rounds
        print(f"projected at 60 s cells, {rounds} rounds:  {full / 3600:8.2f} h of rounds (+ WIPC at the DUT's speed)")


if __name__ == "__main__":
    main()
