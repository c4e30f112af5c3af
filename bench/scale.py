"""The controller at lab scale: 200 simulated agents and 10,000 queued steps through the real broker
(redis-server, Celery task messages on the agents' queues, the events and commands streams) and the
real store (SQLite, as deployed by default).

* The controller is the real :class:`~orchestrator.controller.Controller`, built as its daemon builds
  it, in this process: each scheduler pass is timed, and the peak RSS is this process's. Its dispatcher
  also notes when each start is on its agent's queue.
* The agents are simulated in ``--agent-procs`` other processes, each for its share of the hosts. For
  each start they record the dispatch latency (controller's ``dispatched_at`` -> message taken off the
  queue), answer ``step_started`` at once and ``step_ended`` ``--step-seconds`` later with a real fio
  json+ output (one fio run at start-up); every host heartbeats every 3 s.
* ``--consumer redis`` (default) takes the messages off the queues as kombu's Redis transport does for
  the agents' Celery workers (BRPOP, the unacked hash and index of the visibility timeout, the ack), in a
  few Redis commands a message; ``--consumer kombu`` uses a kombu consumer on all the queues, whose 1-3 ms
  of Python a message, done in series for every host, delays each start behind the others of its burst
  (200 real agents do that work in parallel, each on its own host).

Run: ``python -m bench.scale`` (``--agents``, ``--steps-per-run``, ``--step-seconds``; any step count
works, e.g. ``--steps-per-run 10`` for a short run).
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import gc
import heapq
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labcontract.brokerauth import resolve
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    COMMANDS_STREAM,
    TASK_START,
    Artifact,
    Heartbeat,
    Register,
    StartStep,
    StepEnded,
    StepStarted,
    Submit,
    agent_queue,
    events_stream,
)
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
UNACKED, UNACKED_INDEX = "unacked", "unacked_index"     # kombu's Redis QoS keys (defaults)


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


# --- the simulated agents (other processes) ----------------------------------------------------

class SimHosts:
    """What the simulated agents of one process do, whichever consumer hands them their starts: answer a
    start with ``step_started`` at once and ``step_ended`` ``step_s`` later, heartbeat every host every 3 s,
    and record the dispatch latency and the step gap."""

    def __init__(self, client: Any, hosts: list[str], step_s: float, fio_json: bytes) -> None:
        self.client, self.hosts, self.step_s = client, hosts, step_s
        self.artifacts = (Artifact.of("fio.json", fio_json), Artifact.of("job.fio", b"[global]\n"))
        self.latencies: list[float] = []     # dispatched_at -> start received
        self.gaps: list[float] = []          # a host's step ended -> its next start received
        self._ends: list[tuple[float, str, str]] = []
        self._ended_at: dict[str, float] = {}
        self._last_beat = 0.0

    def register(self) -> None:
        dut = DeclaredDut(name="dut0", path="/sim/dut0", kind="file", size_bytes=1 << 30)
        pipe = self.client.pipeline(transaction=False)
        for h in self.hosts:
            pipe.xadd(events_stream(h), {"data": Register(host=h, agent_version="sim", facts=HostFacts(hostname=h),
                                                        duts=(dut,)).model_dump_json()})
        pipe.execute()

    def started(self, payload: dict[str, Any], now: float, pipe: Any) -> None:
        """A start received at ``now``: its event goes into ``pipe`` (sent by the caller)."""
        self.latencies.append(now - float(payload["dispatched_at"]))
        host, att = payload["host"], payload["attempt_id"]
        if host in self._ended_at:
            self.gaps.append(now - self._ended_at.pop(host))
        pipe.xadd(events_stream(host), {"data": StepStarted(host=host, attempt_id=att, pid=1, fio_started_at=now,
                                                       job_sha256="").model_dump_json()})
        heapq.heappush(self._ends, (now + self.step_s, host, att))

    def tick(self, now: float) -> None:
        """The steps whose time is up end (one pipeline); heartbeats when due."""
        if self._ends and self._ends[0][0] <= now:
            pipe = self.client.pipeline(transaction=False)
            while self._ends and self._ends[0][0] <= now:
                t, host, att = heapq.heappop(self._ends)
                ev = StepEnded(host=host, attempt_id=att, outcome="exited", exit_code=0,
                               fio_started_at=t - self.step_s, fio_ended_at=t, artifacts=self.artifacts)
                pipe.xadd(events_stream(host), {"data": ev.model_dump_json()})
                self._ended_at[host] = now
            pipe.execute()
        if now - self._last_beat >= 3:
            pipe = self.client.pipeline(transaction=False)
            for h in self.hosts:
                pipe.xadd(events_stream(h), {"data": Heartbeat(host=h).model_dump_json()})
            pipe.execute()
            self._last_beat = now


def redis_consumer(sim: SimHosts, broker: str, stop: Any) -> None:
    """Takes messages off the hosts' queues with the Redis commands kombu's transport sends for a Celery
    worker with acks_late: BRPOP on the queue lists (rotated, as kombu's queue cycle), the message into the
    unacked hash and its delivery tag into the index (one MULTI/EXEC), then the handler, then the ack
    (both removed). The body is decoded from the envelope as kombu does (base64, JSON)."""
    r = redis_client(broker)
    keys = collections.deque(agent_queue(h) for h in sim.hosts)
    while not stop.is_set():
        popped = r.brpop(list(keys), timeout=0.01)
        if popped is not None:
            queue, raw = popped
            keys.remove(queue)
            keys.append(queue)
            envelope = json.loads(raw)
            tag = envelope["properties"]["delivery_tag"]
            r.pipeline().zadd(UNACKED_INDEX, {tag: time.time()}).hset(
                UNACKED, tag, json.dumps([envelope, "", queue])).execute()
            now = time.time()
            args = json.loads(base64.b64decode(envelope["body"]))[0]
            pipe = r.pipeline(transaction=False)
            if envelope["headers"]["task"] == TASK_START:
                sim.started(args[0], now, pipe)
            pipe.zrem(UNACKED_INDEX, tag).hdel(UNACKED, tag).execute()
        sim.tick(time.time())


def kombu_consumer(sim: SimHosts, broker: str, stop: Any) -> None:
    """One kombu consumer on all the hosts' queues (acks each message after its handler)."""
    from kombu import Connection, Consumer, Queue

    def on_message(body: Any, message: Any) -> None:
        now = time.time()
        if message.headers.get("task") == TASK_START:
            pipe = sim.client.pipeline(transaction=False)
            sim.started(body[0][0], now, pipe)
            pipe.execute()
        message.ack()

    with Connection(resolve(broker).kombu_url) as conn:
        queues = [Queue(agent_queue(h), routing_key=agent_queue(h)) for h in sim.hosts]
        with Consumer(conn, queues=queues, callbacks=[on_message], accept=["json"], prefetch_count=len(queues)):
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.01)
                sim.tick(time.time())


CONSUMERS: dict[str, Callable[[SimHosts, str, Any], None]] = {"redis": redis_consumer, "kombu": kombu_consumer}


def simulated_agents(broker: str, hosts: list[str], step_s: float, fio_json: bytes, consumer: str, out: Any,
                     stop: Any) -> None:
    sim = SimHosts(redis_client(broker), hosts, step_s, fio_json)
    sim.register()
    CONSUMERS[consumer](sim, broker, stop)
    out.put((sim.latencies, sim.gaps))


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
        # 200 simulated hosts in two processes: they take the lab's admin user (a real agent has its own)
        assert lab.admin_url is not None
        sims = [ctx.Process(target=simulated_agents, args=(lab.admin_url, hosts[k::args.agent_procs],
                                                           args.step_seconds, fio_json, args.consumer, out, stop))
                for k in range(args.agent_procs)]
        for p in sims:
            p.start()
        loop = threading.Thread(target=ctl.run_forever, name="controller", daemon=True)
        loop.start()
        r = redis_client(broker)
        text = suite_text(args.steps_per_run)
        total = args.agents * args.steps_per_run
        wait_for(lambda: ctl_hosts(db) >= args.agents, 60, "the simulated agents to register", interval=0.2)
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
        wait_for(lambda: runs_done(db) >= args.agents, args.timeout, "every run to end", interval=1.0)
        wall = time.time() - t0
        load1 = os.getloadavg()[0]
        stop.set()
        latencies: list[float] = []
        gaps: list[float] = []
        for _p in sims:
            lat, gap = out.get(timeout=60)
            latencies += lat
            gaps += gap
        for p in sims:
            p.join(30)
        ctl.stop()
        loop.join(30)
        gc.callbacks.remove(pauses)
        states = run_states(db)
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ideal = args.steps_per_run * args.step_seconds
        queued = dispatcher.queued
        print(json.dumps({"runs": states, "steps": total}))
        print(f"wall time                  {wall:8.1f} s   (ideal {ideal:.0f} s: {wall / ideal:.2f}x)")
        print(f"steps per second           {total / wall:8.1f}")
        print(f"dispatch latency  p50      {pct(latencies, 50) * 1000:8.1f} ms   (n={len(latencies)})")
        print(f"dispatch latency  p99      {pct(latencies, 99) * 1000:8.1f} ms   (target <= 100 ms)")
        print(f"dispatch latency  max      {max(latencies) * 1000:8.1f} ms")
        print(f"dispatched -> queued p50/p99/max {pct(queued, 50) * 1000:8.1f} / {pct(queued, 99) * 1000:.1f} / "
              f"{max(queued) * 1000:.1f} ms   (the controller's part: dispatched_at -> on the agent's queue)")
        print(f"step gap          p50/p99  {pct(gaps, 50) * 1000:8.1f} / {pct(gaps, 99) * 1000:.1f} ms   "
              "(a host's step ended -> its next start received)")
        print(f"scheduler tick    p50      {pct(ctl.ticks, 50) * 1000:8.1f} ms   (n={len(ctl.ticks)})")
        print(f"scheduler tick    p99      {pct(ctl.ticks, 99) * 1000:8.1f} ms")
        print(f"controller pass   p50/p99  {pct(ctl.passes, 50) * 1000:8.1f} / {pct(ctl.passes, 99) * 1000:.1f} ms")
        full_gc = pauses.full or [0.0]
        print(f"full GC pauses    p50/max  {pct(full_gc, 50) * 1000:8.1f} / {max(full_gc) * 1000:.1f} ms   "
              f"(n={len(pauses.full)}; each stops the controller's loop)")
        print(f"controller peak RSS        {rss_mib:8.1f} MiB (target <= 500 MiB)")
        print(f"load average (1 min)       {load0:8.2f} at the start, {load1:.2f} at the end ({os.cpu_count()} CPUs)")
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
