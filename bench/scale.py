"""The controller at lab scale: 200 simulated agents and 10,000 queued steps through the real broker
(redis-server, Celery task messages on the agents' queues, the events and commands streams) and the
real store (SQLite, as deployed by default).

* The controller is the real :class:`~orchestrator.controller.Controller`, built as its daemon builds
  it, in this process: each scheduler pass is timed, and the peak RSS is this process's. Its dispatcher
  also notes when each start is on its agent's queue.
* The agents are simulated (:mod:`bench.scalesim`) in ``--agent-procs`` other processes, each for its share
  of the hosts. For each start they record the dispatch latency (controller's ``dispatched_at`` -> message
  taken off the queue), answer ``step_started`` at once and ``step_ended`` ``--step-seconds`` later with a real fio
  json+ output (one fio run at start-up); every host heartbeats every 3 s.
* ``--consumer redis`` (default) takes the messages off the queues as kombu's Redis transport does for
  the agents' Celery workers (BRPOP, the unacked hash and index of the visibility timeout, the ack), in a
  few Redis commands a message; ``--consumer kombu`` uses a kombu consumer on all the queues, whose 1-3 ms
  of Python a message, done in series for every host, delays each start behind the others of its burst
  (200 real agents do that work in parallel, each on its own host).
* ``--storm-after SECONDS``: a heartbeat storm that long after the runs are queued: every simulated agent registers
  again and heartbeats at once (a broker restart, a network back); the bench reports how long the controller took
  to apply every registration and when the dispatch latency recovered.

Run: ``python -m bench.scale`` (``--agents``, ``--steps-per-run``, ``--step-seconds``; any step count
works, e.g. ``--steps-per-run 10`` for a short run; ``--agents 1000 --steps-per-run 10 --storm-after 30`` for a
lab of 1,000 agents).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.scalesim import CONSUMERS, simulated_agents
from labcontract.protocol import COMMANDS_STREAM, StartStep, Submit
from labcontract.transport import redis_client
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller
from orchestrator.controller.dispatch import Dispatcher
from orchestrator.labs.lab import Lab, wait_for
from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.models import Run

DIMS = {"bs": ["4k", "8k", "16k", "32k", "64k"], "rwmixread": [0, 30, 50, 70, 100], "iodepth": [1, 32]}
PER_PROFILE = 50                     # cells of one sweep over DIMS


def suite_text(steps: int) -> str:
    """A suite of ``steps`` measured cells (sweeps), 1 s each as planned."""
    full, rest = divmod(steps, PER_PROFILE)
    profiles = [f"  - {{name: p{r}, rw: randrw, sweep: {{bs: {DIMS['bs']}, rwmixread: {DIMS['rwmixread']}, "
                f"iodepth: {DIMS['iodepth']}}}, runtime: 1}}" for r in range(full)]
    if rest:
        profiles.append(f"  - {{name: p{full}, rw: randrw, bs: 4k, rwmixread: 70, "
                        f"sweep: {{iodepth: {list(range(1, rest + 1))}}}, runtime: 1}}")
    return "suite: scale\ncell_limit: 10000\nprofiles:\n" + "\n".join(profiles) + "\n"


def real_fio_output(workdir: Path) -> bytes:
    target = workdir / "fio-target"
    subprocess.run(["fio", "--name=scale", f"--filename={target}", "--size=16m", "--rw=randread", "--bs=4k",
                    "--runtime=1", "--time_based", "--output-format=json+", f"--output={workdir / 'fio.json'}"],
                   check=True, capture_output=True)
    return (workdir / "fio.json").read_bytes()


def host_name(i: int) -> str:
    return f"sim{i:03d}"


# --- the controller, timed -------------------------------------------------------------------

class TimedController(Controller):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ticks: list[float] = []
        self.passes: list[float] = []
        self.tick_cpu: list[float] = []      # the same, in the loop thread's CPU time (what contention leaves out)
        self.pass_cpu: list[float] = []

    def schedule(self) -> None:
        t, c = time.perf_counter(), time.thread_time()
        super().schedule()
        self.ticks.append(time.perf_counter() - t)
        self.tick_cpu.append(time.thread_time() - c)

    def step_once(self) -> None:
        t, c = time.perf_counter(), time.thread_time()
        super().step_once()
        self.passes.append(time.perf_counter() - t)
        self.pass_cpu.append(time.thread_time() - c)


class TimedDispatcher(Dispatcher):
    """Notes, per start, the controller's share of the dispatch latency: ``dispatched_at`` -> pushed."""

    def __init__(self, broker_url: str, *, expires_s: float) -> None:
        super().__init__(broker_url, expires_s=expires_s)
        self.queued: list[float] = []

    def start(self, msg: StartStep) -> None:
        super().start(msg)
        self.queued.append(time.time() - msg.dispatched_at)

    def start_many(self, msgs: list[StartStep]) -> None:
        super().start_many(msgs)
        now = time.time()
        self.queued += [now - m.dispatched_at for m in msgs]


class GcPauses:
    """Durations of this process's full (generation 2) collections: each one stops the controller's loop,
    whatever the loop was doing (a scheduler pass included)."""

    def __init__(self) -> None:
        self.full: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif info["generation"] == 2:
            self.full.append(time.perf_counter() - self._started)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else float("nan")


def storm_report(storm_at: float, applied_at: float | None, received: list[float], latencies: list[float]) -> None:
    """The heartbeat storm: how long the controller took to apply every host's registration, and when the dispatch
    latency recovered: the first 1-s window after the storm whose median is back within 1.5x the median of the
    30 s before it (and every registration applied)."""
    pairs = sorted(zip(received, latencies, strict=True))
    before = [lat for t, lat in pairs if storm_at - 30 <= t < storm_at]
    after = [(t - storm_at, lat) for t, lat in pairs if t >= storm_at]
    base = statistics.median(before) if before else float("nan")
    applied = applied_at - storm_at if applied_at is not None else float("nan")
    recovered = None
    for k in range(int(max((t for t, _ in after), default=0)) + 1):
        window = [lat for t, lat in after if k <= t < k + 1]
        if window and k + 1 >= applied and statistics.median(window) <= 1.5 * base:
            recovered = k + 1
            break
    during = [lat for t, lat in after if recovered is None or t < recovered]
    print(f"heartbeat storm            {len(during)} starts until recovered; dispatch p50/p99/max "
          f"{pct(during, 50) * 1000:.1f} / {pct(during, 99) * 1000:.1f} / {max(during, default=0) * 1000:.1f} ms "
          f"(30 s before: p50 {base * 1000:.1f} ms)")
    print(f"storm applied after        {applied:8.2f} s   (every host's registration and heartbeat at once)")
    print(f"dispatch recovered after   {recovered if recovered is not None else float('nan'):8.1f} s   "
          "(1-s window median <= 1.5x the median before)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--steps-per-run", type=int, default=50)
    ap.add_argument("--step-seconds", type=float, default=2.0)
    ap.add_argument("--agent-procs", type=int, default=2, help="processes the simulated agents are split over")
    ap.add_argument("--consumer", choices=sorted(CONSUMERS), default="redis",
                    help="how the simulated agents take messages off their queues")
    ap.add_argument("--dispatch-batch", type=int, default=ControllerTuning.dispatch_batch,
                    help="the controller's dispatch_batch (default: its default)")
    ap.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                    help="do not gc.freeze() the start-up heap before the controller's loop runs (the controller "
                         "daemon does, orchestrator/cmd/controller.py; this shows what it saves)")
    ap.add_argument("--storm-after", type=float, default=0.0, metavar="SECONDS",
                    help="a heartbeat storm this long after the runs are queued: every simulated agent registers "
                         "again and heartbeats at once, as after a broker restart (0: none)")
    ap.add_argument("--duration", type=float, default=0.0, metavar="SECONDS",
                    help="measure this long from when every run is in the store (the submits applied; the storm's "
                         "time counts from then too) and report on that window only (0: from the submits until "
                         "every run has ended)")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lab-scale-"))
    lab = Lab(root)
    ctx = mp.get_context("fork")
    stop, storm, out = ctx.Event(), ctx.Event(), ctx.Queue()
    try:
        broker = lab.start_redis()
        fio_json = real_fio_output(root)
        engine = make_engine(f"sqlite:///{root / 'store.sqlite'}")
        migrate(engine)
        db = sessions(engine)
        tuning = ControllerTuning(dispatch_batch=args.dispatch_batch)
        dispatcher = TimedDispatcher(broker, expires_s=tuning.dispatch_expires_s)
        ctl = TimedController(db, redis_client(broker), dispatcher, ArtifactStore(root / "artifacts"), tuning)
        ctl.setup()
        if args.gc_freeze:          # full collections then skip the ~130k start-up objects (~75-100 ms each here)
            gc.collect()
            gc.freeze()
        pauses = GcPauses()
        gc.callbacks.append(pauses)
        hosts = [host_name(i) for i in range(args.agents)]
        # the simulated hosts take the lab's admin user (a real agent has its own)
        assert lab.admin_url is not None
        sims = [ctx.Process(target=simulated_agents, args=(lab.admin_url, hosts[k::args.agent_procs],
                                                           args.step_seconds, fio_json, args.consumer, out, stop,
                                                           storm))
                for k in range(args.agent_procs)]
        for p in sims:
            p.start()
        loop = threading.Thread(target=ctl.run_forever, name="controller", daemon=True)
        loop.start()
        r = redis_client(broker)
        text = suite_text(args.steps_per_run)
        total = args.agents * args.steps_per_run
        wait_for(lambda: ctl_hosts(db) >= args.agents, 120, "the simulated agents to register", interval=0.2)
        load0 = os.getloadavg()[0]
        t0 = time.time()
        pipe = r.pipeline(transaction=False)
        for i in range(args.agents):
            cmd = Submit(run_id=f"scale-{i:03d}-{uuid.uuid4().hex[:4]}", suite_source="scale.yaml", suite_text=text,
                         host=host_name(i), devices=("dut0",), live=False, reply_to=f"lab:reply:scale-{i}")
            pipe.xadd(COMMANDS_STREAM, {"data": cmd.model_dump_json()})
        pipe.execute()
        print(f"queued {args.agents} runs x {args.steps_per_run} steps = {total} steps on {args.agents} "
              f"simulated agents ({args.step_seconds:.1f} s per step; {args.agent_procs} agent processes, "
              f"{args.consumer} consumer; dispatch_batch {tuning.dispatch_batch}"
              f"{'; gc.freeze()' if args.gc_freeze else ''})", flush=True)
        steps0, ticks0, passes0 = 0, 0, 0
        if args.duration > 0:      # the window measured starts once every run is in the store (submits done)
            wait_for(lambda: runs_stored(db) >= args.agents, args.timeout, "every run to be stored", interval=0.5)
            t0, steps0, ticks0, passes0 = time.time(), steps_done(db), len(ctl.ticks), len(ctl.passes)
        storm_at, applied_at = None, None
        if args.storm_after > 0:
            wait_for(lambda: time.time() - t0 >= args.storm_after or runs_done(db) >= args.agents, args.timeout,
                     "the storm's time", interval=0.1)
            storm_at = time.time()
            storm.set()
            wait_for(lambda: registered_since(db, storm_at) >= args.agents, args.timeout,
                     "every host's registration of the storm", interval=0.05)
            applied_at = time.time()
        wait_for(lambda: runs_done(db) >= args.agents or 0 < args.duration <= time.time() - t0, args.timeout,
                 "every run to end", interval=1.0)
        wall = time.time() - t0
        total = steps_done(db) - steps0
        load1 = os.getloadavg()[0]
        stop.set()
        latencies: list[float] = []
        received: list[float] = []
        gaps: list[float] = []
        for _p in sims:
            lat, rec, gap = out.get(timeout=60)
            latencies += [x for x, at in zip(lat, rec, strict=True) if at >= t0]
            received += [at for at in rec if at >= t0]
            gaps += gap
        for p in sims:
            p.join(30)
        ctl.stop()
        loop.join(30)
        gc.callbacks.remove(pauses)
        states = run_states(db)
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ideal = total / args.agents * args.step_seconds
        queued = dispatcher.queued
        ctl.ticks, ctl.passes = ctl.ticks[ticks0:], ctl.passes[passes0:]
        ctl.tick_cpu, ctl.pass_cpu = ctl.tick_cpu[ticks0:], ctl.pass_cpu[passes0:]
        print(json.dumps({"runs": states, "steps": total}))
        if args.duration > 0:
            print(f"measured from when every run was stored, for {args.duration:.0f} s")
        print(f"wall time                  {wall:8.1f} s   (ideal {ideal:.0f} s for the {total} steps done: "
              f"{wall / ideal:.2f}x)")
        print(f"steps per second           {total / wall:8.1f}")
        print(f"dispatch latency  p50      {pct(latencies, 50) * 1000:8.1f} ms   (n={len(latencies)})")
        print(f"dispatch latency  p99      {pct(latencies, 99) * 1000:8.1f} ms   (target <= 100 ms)")
        print(f"dispatch latency  max      {max(latencies) * 1000:8.1f} ms")
        print(f"dispatched -> queued p50/p99/max {pct(queued, 50) * 1000:8.1f} / {pct(queued, 99) * 1000:.1f} / "
              f"{max(queued) * 1000:.1f} ms   (the controller's part: dispatched_at -> on the agent's queue)")
        print(f"step gap          p50/p99  {pct(gaps, 50) * 1000:8.1f} / {pct(gaps, 99) * 1000:.1f} ms   "
              "(a host's step ended -> its next start received)")
        print(f"scheduler pass    p50/p99  {pct(ctl.ticks, 50) * 1000:8.1f} / {pct(ctl.ticks, 99) * 1000:.1f} ms   "
              f"(schedule(), n={len(ctl.ticks)})")
        print(f"controller pass   p50/p99  {pct(ctl.passes, 50) * 1000:8.1f} / {pct(ctl.passes, 99) * 1000:.1f} ms   "
              "(step_once(): events, commands, schedule, watchdogs)")
        tick_cpu, pass_cpu = ctl.tick_cpu, ctl.pass_cpu
        print(f"  in CPU time      p50/p99  {pct(tick_cpu, 50) * 1000:8.1f} / {pct(tick_cpu, 99) * 1000:.1f} ms "
              f"(schedule()) and {pct(pass_cpu, 50) * 1000:.1f} / {pct(pass_cpu, 99) * 1000:.1f} ms (step_once())")
        cpu = sum(pass_cpu)
        print(f"controller loop CPU        {cpu:8.1f} s    ({cpu / total * 1000:.2f} ms a step: one CPU of its own "
              f"would sustain about {total / cpu:.0f} steps/s)")
        full_gc = pauses.full or [0.0]
        print(f"full GC pauses    p50/max  {pct(full_gc, 50) * 1000:8.1f} / {max(full_gc) * 1000:.1f} ms   "
              f"(n={len(pauses.full)}; each stops the controller's loop)")
        print(f"controller peak RSS        {rss_mib:8.1f} MiB (target <= 500 MiB)")
        print(f"events refused             {ctl.intake.dead_lettered:8d}   (sent to the dead-letter stream)")
        print(f"load average (1 min)       {load0:8.2f} at the start, {load1:.2f} at the end ({os.cpu_count()} CPUs)")
        if storm_at is not None:
            storm_report(storm_at, applied_at, received, latencies)
    finally:
        stop.set()
        lab.stop()


def runs_stored(db: Any) -> int:
    from sqlalchemy import func, select

    with db() as s:
        return int(s.scalar(select(func.count()).select_from(Run)) or 0)


def steps_done(db: Any) -> int:
    from sqlalchemy import func, select

    from orchestrator.store.models import Step

    with db() as s:
        return int(s.scalar(select(func.count()).select_from(Step).where(Step.state == "SUCCEEDED")) or 0)


def registered_since(db: Any, since: float) -> int:
    from sqlalchemy import func, select

    from orchestrator.store.models import Host

    with db() as s:
        return int(s.scalar(select(func.count()).select_from(Host).where(Host.registered_at >= since)) or 0)


def ctl_hosts(db: Any) -> int:
    from sqlalchemy import func, select

    from orchestrator.store.models import Host

    with db() as s:
        return int(s.scalar(select(func.count()).select_from(Host)) or 0)


def runs_done(db: Any) -> int:
    from sqlalchemy import func, select

    with db() as s:
        return int(s.scalar(select(func.count()).select_from(Run).where(
            Run.state.in_(["SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]))) or 0)


def run_states(db: Any) -> dict[str, int]:
    from sqlalchemy import func, select

    with db() as s:
        return {k: int(v) for k, v in s.execute(select(Run.state, func.count()).group_by(Run.state)).all()}


if __name__ == "__main__":
    main()
