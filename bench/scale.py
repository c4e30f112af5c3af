"""The controller at lab scale: 200 simulated agents and 10,000 queued steps through the real broker
(redis-server, Celery task messages on the agents' queues, the events and commands streams) and the
real store (SQLite, as deployed by default).

* The controller is the real :class:`~orchestrator.controller.Controller`, built as its daemon builds
  it, in this process: each scheduler pass is timed, and the peak RSS is this process's.
* The agents are simulated in a second process: one kombu consumer on all 200 agent queues. For each
  start it records the dispatch latency (controller's ``dispatched_at`` -> message received), answers
  ``step_started`` at once and ``step_ended`` ``--step-seconds`` later with a real fio json+ output
  (one fio run at start-up); every host heartbeats every 3 s.

Run: ``python -m bench.scale`` (``--agents``, ``--steps-per-run``, ``--step-seconds``).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import multiprocessing as mp
import resource
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    COMMANDS_STREAM,
    EVENTS_STREAM,
    TASK_START,
    Artifact,
    Heartbeat,
    Register,
    StepEnded,
    StepStarted,
    Submit,
    agent_queue,
)
from labcontract.transport import redis_client
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller
from orchestrator.dispatch import Dispatcher
from orchestrator.lab import Lab, wait_for
from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.models import Run

DIMS = {"bs": ["4k", "8k", "16k", "32k", "64k"], "rwmixread": [0, 30, 50, 70, 100], "iodepth": [1, 32]}


def suite_text(steps: int) -> str:
    """A suite of ``steps`` measured cells (a sweep), 1 s each as planned."""
    values = [(bs, mix, qd) for bs in DIMS["bs"] for mix in DIMS["rwmixread"] for qd in DIMS["iodepth"]]
    n = len(values)
    reps = -(-steps // n)
    profiles = [f"  - {{name: p{r}, rw: randrw, sweep: {{bs: {DIMS['bs']}, rwmixread: {DIMS['rwmixread']}, "
                f"iodepth: {DIMS['iodepth']}}}, runtime: 1}}" for r in range(reps)]
    text = "suite: scale\ncell_limit: 100000\nprofiles:\n" + "\n".join(profiles) + "\n"
    assert steps == reps * n, f"steps per run must be a multiple of {n}"
    return text


def real_fio_output(workdir: Path) -> bytes:
    target = workdir / "fio-target"
    subprocess.run(["fio", "--name=scale", f"--filename={target}", "--size=16m", "--rw=randread", "--bs=4k",
                    "--runtime=1", "--time_based", "--output-format=json+", f"--output={workdir / 'fio.json'}"],
                   check=True, capture_output=True)
    return (workdir / "fio.json").read_bytes()


def host_name(i: int) -> str:
    return f"sim{i:03d}"


# --- the simulated agents (a separate process) ------------------------------------------------

def simulated_agents(broker: str, n: int, step_s: float, fio_json: bytes, out: Any, stop: Any) -> None:
    from kombu import Connection, Consumer, Queue

    r = redis_client(broker)
    fio_art, job_art = Artifact.of("fio.json", fio_json), Artifact.of("job.fio", b"[global]\n")
    ends: list[tuple[float, str, str]] = []
    latencies: list[float] = []
    gaps: list[float] = []                    # a host's step ended -> its next start received
    ended_at: dict[str, float] = {}
    hosts = [host_name(i) for i in range(n)]
    dut = DeclaredDut(name="dut0", path="/sim/dut0", kind="file", size_bytes=1 << 30)
    for h in hosts:
        r.xadd(EVENTS_STREAM, {"data": Register(host=h, agent_version="sim", facts=HostFacts(hostname=h),
                                                 duts=(dut,)).model_dump_json()})

    def on_message(body: Any, message: Any) -> None:
        now = time.time()
        if message.headers.get("task") == TASK_START:
            payload = body[0][0]
            latencies.append(now - float(payload["dispatched_at"]))
            host, att = payload["host"], payload["attempt_id"]
            if host in ended_at:
                gaps.append(now - ended_at.pop(host))
            r.xadd(EVENTS_STREAM, {"data": StepStarted(host=host, attempt_id=att, pid=1, fio_started_at=now,
                                                        job_sha256="").model_dump_json()})
            heapq.heappush(ends, (now + step_s, host, att))
        message.ack()

    last_beat = 0.0
    with Connection(broker) as conn:
        queues = [Queue(agent_queue(h), routing_key=agent_queue(h)) for h in hosts]
        with Consumer(conn, queues=queues, callbacks=[on_message], accept=["json"], prefetch_count=200):
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.01)
                now = time.time()
                while ends and ends[0][0] <= now:
                    _t, host, att = heapq.heappop(ends)
                    ev = StepEnded(host=host, attempt_id=att, outcome="exited", exit_code=0, fio_started_at=_t - step_s,
                                   fio_ended_at=_t, artifacts=(fio_art, job_art))
                    r.xadd(EVENTS_STREAM, {"data": ev.model_dump_json()})
                    ended_at[host] = time.time()
                if now - last_beat >= 3:
                    pipe = r.pipeline(transaction=False)
                    for h in hosts:
                        pipe.xadd(EVENTS_STREAM, {"data": Heartbeat(host=h).model_dump_json()})
                    pipe.execute()
                    last_beat = now
    out.put((latencies, gaps))


# --- the controller, timed -------------------------------------------------------------------

class TimedController(Controller):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ticks: list[float] = []
        self.passes: list[float] = []

    def schedule(self) -> None:
        t = time.perf_counter()
        super().schedule()
        self.ticks.append(time.perf_counter() - t)

    def step_once(self) -> None:
        t = time.perf_counter()
        super().step_once()
        self.passes.append(time.perf_counter() - t)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--steps-per-run", type=int, default=50)
    ap.add_argument("--step-seconds", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lab-scale-"))
    lab = Lab(root)
    ctx = mp.get_context("fork")
    stop, out = ctx.Event(), ctx.Queue()
    try:
        broker = lab.start_redis()
        fio_json = real_fio_output(root)
        engine = make_engine(f"sqlite:///{root / 'store.sqlite'}")
        migrate(engine)
        db = sessions(engine)
        tuning = ControllerTuning()
        ctl = TimedController(db, redis_client(broker), Dispatcher(broker, expires_s=tuning.dispatch_expires_s),
                              ArtifactStore(root / "artifacts"), tuning)
        ctl.setup()
        sim = ctx.Process(target=simulated_agents, args=(broker, args.agents, args.step_seconds, fio_json, out, stop))
        sim.start()
        loop = threading.Thread(target=ctl.run_forever, name="controller", daemon=True)
        loop.start()
        r = redis_client(broker)
        text = suite_text(args.steps_per_run)
        total = args.agents * args.steps_per_run
        wait_for(lambda: ctl_hosts(db) >= args.agents, 60, "the simulated agents to register", interval=0.2)
        t0 = time.time()
        pipe = r.pipeline(transaction=False)
        for i in range(args.agents):
            cmd = Submit(run_id=f"scale-{i:03d}-{uuid.uuid4().hex[:4]}", suite_source="scale.yaml", suite_text=text,
                         host=host_name(i), devices=("dut0",), live=False, reply_to=f"lab:reply:scale-{i}")
            pipe.xadd(COMMANDS_STREAM, {"data": cmd.model_dump_json()})
        pipe.execute()
        print(f"queued {args.agents} runs x {args.steps_per_run} steps = {total} steps on {args.agents} "
              f"simulated agents ({args.step_seconds:.1f} s per step)", flush=True)
        wait_for(lambda: runs_done(db) >= args.agents, args.timeout, "every run to end", interval=1.0)
        wall = time.time() - t0
        stop.set()
        latencies, gaps = out.get(timeout=60)
        sim.join(30)
        ctl.stop()
        loop.join(30)
        states = run_states(db)
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ideal = args.steps_per_run * args.step_seconds
        print(json.dumps({"runs": states, "steps": total}))
        print(f"wall time                  {wall:8.1f} s   (ideal {ideal:.0f} s: {wall / ideal:.2f}x)")
        print(f"steps per second           {total / wall:8.1f}")
        print(f"dispatch latency  p50      {pct(latencies, 50) * 1000:8.1f} ms   (n={len(latencies)})")
        print(f"dispatch latency  p99      {pct(latencies, 99) * 1000:8.1f} ms   (target <= 100 ms)")
        print(f"dispatch latency  max      {max(latencies) * 1000:8.1f} ms")
        print(f"step gap          p50/p99  {pct(gaps, 50) * 1000:8.1f} / {pct(gaps, 99) * 1000:.1f} ms   "
              "(a host's step ended -> its next start received)")
        print(f"scheduler tick    p50      {pct(ctl.ticks, 50) * 1000:8.1f} ms   (n={len(ctl.ticks)})")
        print(f"scheduler tick    p99      {pct(ctl.ticks, 99) * 1000:8.1f} ms")
        print(f"controller pass   p50/p99  {pct(ctl.passes, 50) * 1000:8.1f} / {pct(ctl.passes, 99) * 1000:.1f} ms")
        print(f"controller peak RSS        {rss_mib:8.1f} MiB (target <= 500 MiB)")
        print(f"median latency: {statistics.median(latencies) * 1000:.1f} ms")
    finally:
        stop.set()
        lab.stop()


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
