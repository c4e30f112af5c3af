"""What an Ansible task costs on a VM lab host, with and without Mitogen (issue 24, docs/vmlab.md).

site.yml onto two TCG guests took 27.5 minutes, most of it Ansible's start of a Python per task on a guest that
starts Python in seconds. This measures one VM of the cached image (``make vmtest`` builds it): a play of
``--tasks`` tasks (``command: true``, Ansible's ``stat`` and ``copy`` of a small file, in turn), run with
Ansible's default strategy and with Mitogen's ``mitogen_linear``, each ``--repeat`` times, against a bare
baseline measured in the same run: ``ssh host true`` (a round trip with nothing started on the guest). Printed:
seconds per task (median of the runs, the play's start subtracted by running the same play with one task), and
the ratio of each to the bare round trip.

Target: Mitogen's task ≤ 1/3 of the default's under TCG (what takes the tier inside CI's time).

Usage: python -m bench.vmlab [--tasks 12] [--repeat 3] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from orchestrator.labs.vmlab.image import ensure_image, project_requirements
from orchestrator.labs.vmlab.lab import VmLab, agent_spec, choose_accel

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def playbook(path: Path, tasks: int) -> Path:
    kinds = [{"ansible.builtin.command": "true", "changed_when": False},
             {"ansible.builtin.stat": {"path": "/etc/hostname"}},
             {"ansible.builtin.copy": {"content": "bench\n", "dest": "/root/bench.txt", "mode": "0644"}}]
    doc = [{"hosts": "all", "gather_facts": False,
            "tasks": [{"name": f"task {i}", **kinds[i % len(kinds)]} for i in range(tasks)]}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])}... exited {res.returncode}:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "storagelab" / "vmlab")
    args = ap.parse_args()
    image = ensure_image(args.cache, project_requirements(ROOT), ROOT / "constraints.txt")
    accel, why = choose_accel(image, args.cache)
    with tempfile.TemporaryDirectory(prefix="bench-vmlab-") as tmp:
        lab = VmLab(Path(tmp) / "lab", image, [agent_spec(1, "vm1")], accel=accel, accel_why=why)
        try:
            boot = lab.start()["vm1"]
            inv = lab.inventory(Path(tmp) / "hosts.yml", {"bench": ["vm1"]})
            many, one = playbook(Path(tmp) / "many.yml", args.tasks), playbook(Path(tmp) / "one.yml", 1)
            import ansible_mitogen

            base = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
            base["PATH"] = f"{VENV_BIN}:{base.get('PATH', '')}"
            strategies = {
                "default (linear)": base,
                "mitogen_linear": {**base, "ANSIBLE_STRATEGY": "mitogen_linear", "ANSIBLE_STRATEGY_PLUGINS":
                                   str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")},
            }
            vm = lab["vm1"]
            bare = [timed(vm.ssh_argv("true"), base) for _ in range(max(5, args.repeat))]
            per_task: dict[str, list[float]] = {}
            for _ in range(args.repeat):            # the arms alternate within a round
                for name, env in strategies.items():
                    full = timed(lab.net.exec([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), str(many)]), env)
                    start = timed(lab.net.exec([str(VENV_BIN / "ansible-playbook"), "-i", str(inv), str(one)]), env)
                    per_task.setdefault(name, []).append((full - start) / (args.tasks - 1))
        finally:
            lab.cleanup()
    rt = statistics.median(bare)
    print(f"VM: 1 vCPU, {accel} ({why}); booted to SSH in {boot:.0f} s; {args.tasks} tasks x {args.repeat} runs")
    print(f"bare ssh round trip (ssh host true): median {rt:.2f} s (min {min(bare):.2f}, max {max(bare):.2f})")
    print(f"{'strategy':<20} {'s/task median':>14} {'min':>7} {'max':>7} {'x bare':>8}")
    for name, values in per_task.items():
        med = statistics.median(values)
        print(f"{name:<20} {med:>14.2f} {min(values):>7.2f} {max(values):>7.2f} {med / rt:>8.1f}")
    ratio = statistics.median(per_task["mitogen_linear"]) / statistics.median(per_task["default (linear)"])
    print(f"mitogen / default per task: {ratio:.2f}  target <= 0.33: {'PASS' if ratio <= 1 / 3 else 'FAIL'}")


if __name__ == "__main__":
    main()
