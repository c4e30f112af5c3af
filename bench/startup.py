"""What ``labctl`` costs before it does anything (issue 27: ``--version`` and ``--help`` within 0.3 s of CPU).

Each command runs as a fresh process, ``--rounds`` times, the arms in an order that changes every round, against a
bare baseline measured in the same run: ``python -c pass`` with the same interpreter (the interpreter's own start,
site-packages and the editable install's finder included). The CPU of a run is the child's user + system time
(``os.wait4``), not its wall time, so other work on the machine slows it less; the figures are still the median
and range over the rounds, and the ratio is against the baseline's median.

The children run without ``PYTHONDONTWRITEBYTECODE`` (an installed labctl has its modules byte-compiled; with it
set, a start compiles some forty modules again, about 0.1 s), each arm once before the rounds so that the caches
are written.

Arms: the bare interpreter; ``import typer`` (the command-line framework alone); ``labctl --version``;
``labctl --help``; ``labctl runs --help`` (one command's help, its module loaded).

``--before DIR``: the same labctl arms from another checkout (e.g. ``git worktree add /tmp/before main~5``), run
with that directory as the working directory so that its packages are the ones imported, in the same rounds.

Usage: python -m bench.startup [--rounds 15] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

TARGET_S = 0.3
LABCTL = [sys.executable, "-c", "import sys; from orchestrator.cmd.labctl import main; sys.exit(main())"]
ARMS: dict[str, list[str]] = {
    "bare python -c pass": [sys.executable, "-c", "pass"],
    "import typer": [sys.executable, "-c", "import typer"],
    "labctl --version": [*LABCTL, "--version"],
    "labctl --help": [*LABCTL, "--help"],
    "labctl runs --help": [*LABCTL, "runs", "--help"],
}


ROOT = Path(__file__).resolve().parents[1]


def cpu_of(argv: list[str], cwd: Path = ROOT) -> float:
    """User + system CPU seconds of one run of ``argv`` (which must succeed) in ``cwd``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[-2:])} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--before", type=Path, help="another checkout whose labctl is measured in the same rounds")
    args = ap.parse_args()
    arms = {n: (argv, ROOT) for n, argv in ARMS.items()}
    if args.before is not None:
        arms |= {f"before: {n}": (argv, args.before.resolve()) for n, argv in ARMS.items() if n.startswith("labctl")}
    names = list(arms)
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for n in names:                     # warm: byte-code written, files in the page cache
        cpu_of(*arms[n])
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            cpu[n].append(cpu_of(*arms[n]))
    bare = statistics.median(cpu[names[0]])
    print(f"labctl's start: CPU (user + system) per process, {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'arm':32} {'median s':>9} {'min':>7} {'max':>7} {'x bare':>7}")
    for n in names:
        xs = cpu[n]
        print(f"{n:32} {statistics.median(xs):9.3f} {min(xs):7.3f} {max(xs):7.3f} "
              f"{statistics.median(xs) / bare if bare else float('nan'):7.1f}")
    for n in ("labctl --version", "labctl --help"):
        m = statistics.median(cpu[n])
        print(f"{n}: median {m:.3f} s  target <= {TARGET_S} s: {'PASS' if m <= TARGET_S else 'FAIL'}")


if __name__ == "__main__":
    main()
