"""Orchestration overhead: the same fio job bare and through the orchestrator, alternating.

Starts a real embedded lab (redis-server, controller, agent) on a loop-device DUT, then runs
N pairs on the same DUT, alternating which goes first, and prints:

- the median IOPS ratio orchestrated / bare          (target >= 0.99)
- the median control overhead submit -> fio start     (target <= 0.5 s)
- the median control overhead fio exit -> result stored (target <= 0.5 s)

Usage: python bench/overhead.py [--pairs 5] [--runtime 10] [--bs 4k] [--iodepth 16] [--warmup 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from labcontract.fiojob import render_job
from labcontract.fioresult import parse_fio_output
from labcontract.suite import parse_suite
from labcontract.transport import redis_client
from orchestrator.client import ControllerClient
from orchestrator.lab import Lab, wait_for
from orchestrator.queries import run_detail
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host

HOST = "bench-host"


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
    root = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    lab = Lab(root)
    try:
        broker = lab.start_redis()
        dut = lab.make_dut("bench-dut", args.size_mib, backing_dir=args.backing_dir)
        store = f"sqlite:///{root / 'store.sqlite'}"
        lab.start_controller(store)
        lab.start_agent(HOST, [f"dut0={dut.path}"])
        db = sessions(make_engine(store))

        def registered() -> bool:
            try:
                with db() as s:
                    return s.get(Host, HOST) is not None
            except Exception:
                return False
        wait_for(registered, 60, "the agent to register")
        client = ControllerClient(redis_client(broker))
        job = root / "bare.fio"
        job.write_text(render_job(suite.workloads[0], dut.path))
        print(f"DUT {dut.path} ({'loop, direct I/O' if dut.loop else 'file'} on {dut.backing}), {args.size_mib} MiB; "
              f"{args.rw} {args.bs} QD{args.iodepth}, {args.runtime}s per run, {args.pairs} pairs\n")

        def bare(i: int) -> float:
            out = root / f"bare-{i}.json"
            # in a session of its own, as the agent runs fio (and as an engineer's shell would)
            subprocess.run(["fio", "--output-format=json+", f"--output={out}", str(job)], check=True,
                           capture_output=True, start_new_session=True)
            return parse_fio_output(out.read_bytes()).combined.iops

        def orchestrated() -> tuple[float, float, float]:
            t0 = time.time()
            run_id, _ = client.submit(suite, HOST, ["dut0"])

            def done() -> bool:
                with db() as s:
                    return run_detail(s, run_id).run.state in ("SUCCEEDED", "FAILED", "CANCELLED")
            wait_for(done, args.runtime + 120, f"run {run_id}", interval=0.05)
            with db() as s:
                d = run_detail(s, run_id)
                assert d.run.state == "SUCCEEDED", d.run.reason
                att = d.steps[0].attempts[0]
                res = d.results[d.steps[0].id]
                assert att.fio_started_at and att.fio_ended_at and att.ended_at
                return res.iops, att.fio_started_at - t0, att.ended_at - att.fio_ended_at

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
        print(f"median IOPS ratio (orchestrated / bare): {statistics.median(ratios):.4f}   (target >= 0.99)")
        print(f"median submit -> fio start:              {statistics.median(starts):.3f} s (target <= 0.5 s)")
        print(f"median fio exit -> result stored:        {statistics.median(stores):.3f} s (target <= 0.5 s)")
    finally:
        lab.stop()


if __name__ == "__main__":
    main()
