"""What reading the host's power from its BMC costs the agent (agents.power, docs/power.md).

The agent's sampler reads the chassis' Redfish power once a second in a thread of its own while a step runs. This
bench measures its CPU against a bare baseline in the same run: N rounds, each of two arms in an order that
alternates from round to round, each arm ``--seconds`` long:

- **bare**: this process waits as the agent's main loop does, no sampler;
- **sampling**: the same wait with a :class:`agents.power.PowerSampler` reading a real Redfish service
  (sushy-tools' ``sushy-static`` serving DMTF's public mockup of a 1U server, tests/fixtures/redfish; installed
  by the dev extra) over http every ``--interval`` seconds.

The CPU of an arm is this process's (every thread's) CPU time over it (``time.process_time``); the server runs in a
process of its own and is not counted. It prints, with the 95% confidence interval of the mean over rounds:

- the sampler's cost: (sampling CPU - bare CPU) per second of the arm, in % of one CPU (target <= 0.5%);
- the CPU per reading (ms) and the readings per arm.

Usage: python -m bench.power [--rounds 7] [--seconds 10] [--interval 1]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from agents.power import BmcConfig, PowerSampler, RedfishPower
from bench.benchlab import fmt_ci, fmt_range, ratio_summary
from tests.redfish import redfish_mockup

TARGET_PCT = 0.5


def arm(source: RedfishPower | None, seconds: float) -> tuple[float, int]:
    """CPU seconds this process spent over ``seconds`` of wall time, and the readings taken."""
    idle = threading.Event()
    cpu0 = time.process_time()
    sampler = PowerSampler(source).start() if source is not None else None
    idle.wait(seconds)
    readings = 0
    if sampler is not None:
        power = sampler.result()
        readings = power.samples
        assert power.failures == 0, power.error
    return time.process_time() - cpu0, readings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-power-") as d, redfish_mockup(Path(d) / "sushy.log") as bmc:
        (Path(d) / "pw").write_text("bench\n")
        source = RedfishPower(BmcConfig(url=bmc.url, user="bench", password_file=Path(d) / "pw",
                                        interval_s=ns.interval), "bench")
        source.read()                       # discovery once, as the agent's first step does
        cost_pct, per_reading_ms, counts = [], [], []
        for i in range(ns.rounds):
            order = ("bare", "sampling") if i % 2 == 0 else ("sampling", "bare")
            cpu: dict[str, float] = {}
            n = 0
            for name in order:
                cpu[name], got = arm(source if name == "sampling" else None, ns.seconds)
                n = got or n
            extra = cpu["sampling"] - cpu["bare"]
            cost_pct.append(100 * extra / ns.seconds)
            per_reading_ms.append(1000 * extra / max(1, n))
            counts.append(n)
            print(f"round {i + 1}: bare {cpu['bare'] * 1000:.1f} ms CPU, sampling {cpu['sampling'] * 1000:.1f} ms "
                  f"CPU, {n} readings", flush=True)
    cost = ratio_summary(cost_pct, "sampler CPU %")
    print(f"\nsampler CPU, % of one CPU: {fmt_ci(cost, '{:.3f}')}, range {fmt_range(cost_pct, '{:.3f}')} "
          f"(target <= {TARGET_PCT}%)")
    print(f"CPU per reading, ms: {fmt_ci(ratio_summary(per_reading_ms, 'per reading'), '{:.2f}')}")
    print(f"readings per {ns.seconds:g} s arm: {fmt_range([float(c) for c in counts], '{:.0f}')}")
    verdict = "met" if (cost.ci_high if cost.ci_high is not None else cost.mean) <= TARGET_PCT else "NOT met"
    print(f"target {verdict}")


if __name__ == "__main__":
    main()
