"""Telemetry overhead: IOPS with live telemetry on vs off, alternating pairs on the same DUT.

Two agents declare the same loop-device DUT. "on": agent with its exporter, scraped every second
(as Prometheus does), runs submitted live (fio --status-interval=1 json+ snapshots, the Redis live
key). "off": agent with --no-metrics, runs submitted with live=False. Prints the median IOPS ratio
and the agent's CPU while exporting.

Targets: IOPS overhead <= 0.5%; agent CPU <= 1% of a core.

IOPS on a small VM varies by several % from run to run, more than the target; so the benchmark
also measures fio's own CPU time per I/O, bare, with and without the per-second json+ snapshots
(the part of telemetry that runs inside fio), which resolves far smaller differences.

Usage: python -m bench.telemetry [--pairs 7] [--runtime 10] [--backing-dir /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench.benchlab import median
from labcontract.suite import parse_suite
from labcontract.transport import redis_client
from orchestrator.labs.lab import Lab, wait_for
from orchestrator.queries import run_detail
from orchestrator.runs.client import ControllerClient
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK        # utime + stime of the agent itself


def fio_cpu_per_io(job: Path, out: Path, snapshots: bool) -> float:
    """CPU seconds per I/O of one bare fio run (its whole process: job threads and status thread)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = ["fio", "--output-format=json+", f"--output={out}", *(["--status-interval=1"] if snapshots else []),
            str(job)]
    subprocess.run(argv, check=True, capture_output=True, start_new_session=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    from labcontract.fioresult import parse_fio_output

    ios = parse_fio_output(out.read_bytes()).combined.ios
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / ios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--backing-dir", type=Path, default=None)
    args = ap.parse_args()
    suite = parse_suite(f"suite: tele\nprofiles:\n  - {{name: t, rw: randread, bs: 4k, iodepth: 16, "
                        f"runtime: {args.runtime}s}}\n", "telemetry.yaml")
    lab = Lab(Path(tempfile.mkdtemp(prefix="lab-bench-")))
    try:
        broker = lab.start_redis()
        dut = lab.make_dut("tele-dut", args.size_mib, backing_dir=args.backing_dir)
        store = f"sqlite:///{lab.root / 'store.sqlite'}"
        lab.start_controller(store, metrics_port=None)
        on = lab.start_agent("tele-on", [f"dut0={dut.path}"], metrics_port=0)     # ephemeral, 127.0.0.1
        off = lab.start_agent("tele-off", [f"dut0={dut.path}"], metrics_port=None)
        db = sessions(make_engine(store))

        def address() -> str | None:
            try:
                with db() as s:
                    h_on, h_off = s.get(Host, "tele-on"), s.get(Host, "tele-off")
                    return h_on.facts.get("metrics_address") if h_on and h_off else None
            except Exception:
                return None
        metrics = f"http://{wait_for(address, 60, 'both agents to register')}/metrics"
        client = ControllerClient(redis_client(broker))
        print(f"DUT {dut.path} on {dut.backing}; randread 4k QD16, {args.runtime}s per run, {args.pairs} pairs; "
              f"exporter {metrics}\n")

        def run(host: str, live: bool) -> tuple[float, float]:
            stop = threading.Event()
            scrapes = [0]

            def scrape() -> None:
                while not stop.wait(1.0):
                    with urllib.request.urlopen(metrics, timeout=5) as r:
                        r.read()
                    scrapes[0] += 1
            pid = (on if host == "tele-on" else off).popen.pid
            thread = threading.Thread(target=scrape, daemon=True)
            if live:
                thread.start()
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            run_id, _ = client.submit(suite, host, ["dut0"], live=live)

            def done() -> bool:
                with db() as s:
                    return run_detail(s, run_id).run.state in ("SUCCEEDED", "FAILED", "CANCELLED")
            wait_for(done, args.runtime + 120, f"run {run_id}", interval=0.1)
            cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
            stop.set()
            with db() as s:
                d = run_detail(s, run_id)
                assert d.run.state == "SUCCEEDED", d.run.reason
                return d.results[d.steps[0].id].iops or 0.0, cpu

        run("tele-off", False)          # warm-up, discarded
        ratios, cpu_on, cpu_off = [], [], []
        print(f"{'pair':>4} {'order':>10} {'off IOPS':>12} {'on IOPS':>12} {'on/off':>7} {'agent CPU on':>13} "
              f"{'agent CPU off':>14}")
        for i in range(args.pairs):
            if i % 2 == 0:
                (b, cb), (o, co) = run("tele-off", False), run("tele-on", True)
            else:
                (o, co), (b, cb) = run("tele-on", True), run("tele-off", False)
            ratios.append(o / b)
            cpu_on.append(co)
            cpu_off.append(cb)
            print(f"{i + 1:>4} {'off first' if i % 2 == 0 else 'on first':>10} {b:>12,.0f} {o:>12,.0f} {o / b:>7.4f} "
                  f"{co * 100:>12.2f}% {cb * 100:>13.2f}%")
        print()
        print(f"median IOPS ratio telemetry on / off: {median(ratios):.4f}  "
              f"(overhead {(1 - median(ratios)) * 100:+.2f}%, target <= 0.5%)")
        print(f"median agent CPU while exporting:     {median(cpu_on) * 100:.2f}% of a core (target <= 1%); "
              f"without telemetry {median(cpu_off) * 100:.2f}%")

        from labcontract.fiojob import render_job

        job = lab.root / "cpu.fio"
        job.write_text(render_job(suite.workloads[0], dut.path))
        with_s, without_s = [], []
        for _ in range(args.pairs):
            without_s.append(fio_cpu_per_io(job, lab.root / "cpu.json", False))
            with_s.append(fio_cpu_per_io(job, lab.root / "cpu.json", True))
        print(f"fio CPU per I/O, bare: without snapshots {median(without_s) * 1e6:.3f} us, with "
              f"{median(with_s) * 1e6:.3f} us: ratio {median(with_s) / median(without_s):.4f}")
    finally:
        lab.stop()


if __name__ == "__main__":
    main()
