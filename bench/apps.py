"""Application-workload fidelity: sysbench OLTP through the orchestrator vs the same sysbench by hand, same DUT.

Starts a real embedded lab (redis-server, controller, agent) on a loop-device DUT. Each pair runs, in
alternating order:

- **orchestrated**: a ``kind: sysbench`` suite (prepare, then one step per thread count) submitted to the
  controller; the agent makes the filesystem, starts its own mariadbd per point, warms up, measures;
- **by hand**: what an engineer would type, written here independently of the agent's code: mount the
  filesystem the orchestrated prepare made, start ``mariadbd`` with the same options, the same sysbench
  warm-up and measured run, stop the server, unmount.

Prints the TPS per point and pair and the median ratio orchestrated / by hand per thread count
(target >= 0.98 at 8 and 32 threads).

Usage: python -m bench.apps [--pairs 3] [--time 20] [--warmup 5] [--threads 8 32] [--tables 8]
       [--table-size 60000] [--buffer-pool-mb 16] [--size-mib 2048] [--backing-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import select

from bench.benchlab import HOST, BenchLab, bench_lab, median
from labcontract.apps import SysbenchParams
from labcontract.suite import parse_suite
from orchestrator.labs.lab import wait_for
from orchestrator.queries import run_detail
from orchestrator.store.models import Device, Run

TPS_RE = re.compile(r"^\s*transactions:\s+\d+\s+\(([\d.]+) per sec\.\)", re.M)


def suite_text(p: SysbenchParams) -> str:
    threads = ", ".join(str(t) for t in p.threads)
    return (f"suite: bench-sysbench\nkind: sysbench\ndevices: 1\n"
            f"sysbench: {{tables: {p.tables}, table_size: {p.table_size}, threads: [{threads}], time: {p.time}, "
            f"warmup: {p.warmup}, buffer_pool_mb: {p.buffer_pool_mb}}}\n")


def observed_unmounted(bl: BenchLab) -> bool:
    """The controller's view of the DUT (from the agent's last registration) shows it unmounted: the by-hand side
    mounted it, and the controller's interlock refuses a mounted DUT."""
    with bl.db() as s:
        dev = s.scalars(select(Device).where(Device.host == HOST)).first()
        return dev is not None and not ((dev.observed or {}).get("mountpoints"))


def run_state(bl: BenchLab, run_id: str) -> str | None:
    with bl.db() as s:
        state = s.scalar(select(Run.state).where(Run.id == run_id))
    return state if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def orchestrated(bl: BenchLab, p: SysbenchParams) -> dict[int, float]:
    """TPS per thread count of one orchestrated run (prepare + one step per point). The harness looks at the
    store once a second (one small query), so that it does not compete with what it measures."""
    wait_for(lambda: observed_unmounted(bl), 120, "the controller to see the DUT unmounted", interval=1.0)
    suite = parse_suite(suite_text(p), "bench-sysbench.yaml")
    run_id, _ = bl.client.submit(suite, HOST, ["dut0"])
    state = wait_for(lambda: run_state(bl, run_id), 3600, f"run {run_id}", interval=1.0)
    with bl.db() as s:
        d = run_detail(s, run_id)
    assert state == "SUCCEEDED", d.run.reason
    out: dict[int, float] = {}
    for step in d.steps:
        res = d.results.get(step.id)
        threads = step.cell.get("threads")
        if res is not None and isinstance(threads, int):
            tps = (res.metrics.get("metrics") or {}).get("tps") if isinstance(res.metrics, dict) else None
            out[threads] = float(tps if tps is not None else res.throughput or 0.0)
    return out


def _connectable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def by_hand_server(dut: str, root: Path, p: SysbenchParams) -> Iterator[Path]:
    """Mount the DUT's filesystem and run mariadbd on its datadir with the agent's options; stop, unmount."""
    mnt, sock = root / "mnt-hand", root / "hand.sock"
    mnt.mkdir(exist_ok=True)
    subprocess.run(["mount", "-o", "noatime", dut, str(mnt)], check=True)
    proc = None
    try:
        argv = ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={mnt / 'mysql'}", f"--socket={sock}",
                "--skip-networking", "--user=root", f"--innodb-buffer-pool-size={p.buffer_pool_mb}M",
                f"--innodb-flush-method={p.flush_method}", f"--innodb-log-file-size={p.log_file_mb}M",
                f"--innodb-flush-log-at-trx-commit={p.flush_log_at_trx_commit}",
                f"--log-error={root / 'hand-server.log'}", "--skip-name-resolve", "--max-connections=2100",
                "--skip-log-bin"]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: _connectable(sock) or proc.poll() is not None, 300, "mariadbd (by hand)")
        if proc.poll() is not None:
            raise RuntimeError(f"mariadbd by hand exited: see {root / 'hand-server.log'}")
        yield sock
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(300)
        for _ in range(50):
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


def by_hand(bl: BenchLab, p: SysbenchParams) -> dict[int, float]:
    """TPS per thread count, each point as the agent does it: a server started for it, warm-up, measure."""
    out: dict[int, float] = {}
    sysbench = shutil.which("sysbench") or "sysbench"
    for threads in p.threads:
        with by_hand_server(bl.dut.path, bl.root, p) as sock:
            base = [sysbench, p.test, "--db-driver=mysql", f"--mysql-socket={sock}", "--mysql-user=root",
                    "--mysql-db=sbtest", f"--tables={p.tables}", f"--table-size={p.table_size}",
                    f"--threads={threads}"]
            if p.warmup:
                subprocess.run([*base, f"--time={p.warmup}", "run"], check=True, capture_output=True)
            res = subprocess.run([*base, f"--time={p.time}", "--report-interval=1", "--histogram=on",
                                  "--percentile=99", "run"], check=True, capture_output=True, text=True,
                                 start_new_session=True)
            m = TPS_RE.search(res.stdout)
            if m is None:
                raise RuntimeError(f"no TPS in sysbench's output:\n{res.stdout[-2000:]}")
            out[threads] = float(m[1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--time", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[8, 32])
    # the data set ten times the buffer pool or more, as the reviews size it: the DUT is what is measured
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--table-size", type=int, default=60000)
    ap.add_argument("--buffer-pool-mb", type=int, default=16)
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--backing-dir", type=Path, default=None)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench.apps needs root (mkfs, mount, loop devices)")
    p = SysbenchParams(tables=args.tables, table_size=args.table_size, threads=tuple(args.threads), time=args.time,
                       warmup=args.warmup, buffer_pool_mb=args.buffer_pool_mb)
    with bench_lab(args.size_mib, args.backing_dir) as bl:
        print(f"DUT {bl.dut.path} ({args.size_mib} MiB, backing {bl.dut.backing}); sysbench {p.test}, "
              f"{p.tables} tables x {p.table_size} rows, {p.warmup}s warm-up + {p.time}s per point, "
              f"threads {list(p.threads)}, {args.pairs} pairs\n")
        ratios: dict[int, list[float]] = {t: [] for t in p.threads}
        print(f"{'pair':>4} {'order':>12} {'threads':>7} {'by hand TPS':>12} {'orch TPS':>10} {'ratio':>7}")
        for i in range(args.pairs):
            if i % 2 == 0:      # the first pair must prepare first: the orchestrated run makes the filesystem
                orch = orchestrated(bl, p)
                hand, order = by_hand(bl, p), "orch first"
            else:
                hand = by_hand(bl, p)
                orch, order = orchestrated(bl, p), "hand first"
            for t in p.threads:
                r = orch[t] / hand[t]
                ratios[t].append(r)
                print(f"{i + 1:>4} {order:>12} {t:>7} {hand[t]:>12,.1f} {orch[t]:>10,.1f} {r:>7.4f}")
        print()
        for t in p.threads:
            rs = ratios[t]
            print(f"threads {t:>3}: median TPS ratio orchestrated / by hand {median(rs):.4f} "
                  f"(pairs {min(rs):.3f}-{max(rs):.3f}; target >= 0.98)")


if __name__ == "__main__":
    main()
