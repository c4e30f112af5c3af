"""The simulated agents of :mod:`bench.scale`, run in other processes: each takes its hosts' start messages off
their queues (as kombu's Redis transport does for an agent's Celery worker, or with a kombu consumer), answers
``step_started`` at once and ``step_ended`` a step's length later with a real fio json+ output, heartbeats every
host every 3 s, and on the storm event registers and heartbeats every host at once (a reconnect)."""

from __future__ import annotations

import base64
import collections
import contextlib
import heapq
import json
import time
from collections.abc import Callable
from typing import Any

from labcontract.brokerauth import resolve
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    TASK_START,
    Artifact,
    Heartbeat,
    Register,
    StepEnded,
    StepStarted,
    agent_queue,
    events_stream,
)
from labcontract.transport import redis_client

UNACKED, UNACKED_INDEX = "unacked", "unacked_index"     # kombu's Redis QoS keys (defaults)


class SimHosts:
    """What the simulated agents of one process do, whichever consumer hands them their starts: answer a
    start with ``step_started`` at once and ``step_ended`` ``step_s`` later, heartbeat every host every 3 s,
    and record the dispatch latency and the step gap."""

    def __init__(self, client: Any, hosts: list[str], step_s: float, fio_json: bytes, storm: Any = None) -> None:
        self.client, self.hosts, self.step_s = client, hosts, step_s
        self.artifacts = (Artifact.of("fio.json", fio_json), Artifact.of("job.fio", b"[global]\n"))
        self.latencies: list[float] = []     # dispatched_at -> start received
        self.received: list[float] = []      # when each start was received (same order)
        self.storm, self._stormed = storm, False     # an event: every host reconnects at once when it is set
        self.gaps: list[float] = []          # a host's step ended -> its next start received
        self._ends: list[tuple[float, str, str]] = []
        self._ended_at: dict[str, float] = {}
        self._last_beat = 0.0

    def register(self, *, heartbeat: bool = False) -> None:
        """Every host registers (in one pipeline); ``heartbeat``: a heartbeat after each registration, and each
        names the attempts its host runs, as an agent that reconnects does."""
        dut = DeclaredDut(name="dut0", path="/sim/dut0", kind="file", size_bytes=1 << 30)
        running: dict[str, list[str]] = {}
        for _t, host, att in self._ends:
            running.setdefault(host, []).append(att)
        pipe = self.client.pipeline(transaction=False)
        for h in self.hosts:
            mine = tuple(running.get(h, ()))
            pipe.xadd(events_stream(h), {"data": Register(host=h, agent_version="sim", facts=HostFacts(hostname=h),
                                                        duts=(dut,), running=mine).model_dump_json()})
            if heartbeat:
                pipe.xadd(events_stream(h), {"data": Heartbeat(host=h, running=mine).model_dump_json()})
        pipe.execute()

    def started(self, payload: dict[str, Any], now: float, pipe: Any) -> None:
        """A start received at ``now``: its event goes into ``pipe`` (sent by the caller)."""
        self.latencies.append(now - float(payload["dispatched_at"]))
        self.received.append(now)
        host, att = payload["host"], payload["attempt_id"]
        if host in self._ended_at:
            self.gaps.append(now - self._ended_at.pop(host))
        pipe.xadd(events_stream(host), {"data": StepStarted(host=host, attempt_id=att, pid=1, fio_started_at=now,
                                                       job_sha256="").model_dump_json()})
        heapq.heappush(self._ends, (now + self.step_s, host, att))

    def tick(self, now: float) -> None:
        """The steps whose time is up end (one pipeline); heartbeats when due; the storm when it is asked for."""
        if self.storm is not None and not self._stormed and self.storm.is_set():
            self.register(heartbeat=True)
            self._stormed = True
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
                     stop: Any, storm: Any) -> None:
    sim = SimHosts(redis_client(broker), hosts, step_s, fio_json, storm)
    sim.register()
    CONSUMERS[consumer](sim, broker, stop)
    out.put((sim.latencies, sim.received, sim.gaps))
