"""The dispatcher's pre-encoded task messages (orchestrator.controller.celery_wire) through a real redis-server and a
worker process running the agent's Celery app (agents.daemon.make_worker_app) as the agent daemon runs it:
each task runs with its arguments while its message is still unacknowledged (acks_late), an expired start
is dropped, and a message taken but not acknowledged goes back to its queue the way kombu restores it (the
path of the visibility timeout) and then runs. The agent behind the app records its calls in a Redis list
instead of starting fio.

Run as a module (``python -m tests.integration.test_dispatch_wire BROKER``), this file is that worker.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from labcontract.brokerauth import unacked_keys
from labcontract.protocol import CancelStep, ReportStep, StartStep, agent_queue
from labcontract.transport import celery_settings, redis_client
from orchestrator.controller.dispatch import Dispatcher
from orchestrator.labs.lab import Lab, wait_for

pytestmark = pytest.mark.integration

HOST = "wirehost"
UNACKED = unacked_keys(HOST)["unacked_key"]   # kombu's Redis QoS hash of the host's unacknowledged messages
CALLS = "lab:test:wire:calls"    # where the worker's agent records its calls (as the controller user)
ROOT = Path(__file__).resolve().parents[2]


class RecordingAgent:
    """What make_worker_app needs of an agent; each call is recorded with the number of unacknowledged
    messages at that moment."""

    host = HOST

    def __init__(self, broker: str) -> None:
        self.redis = redis_client(broker)

    def _record(self, kind: str, payload: dict[str, Any]) -> None:
        self.redis.rpush(CALLS, json.dumps([kind, payload, int(self.redis.hlen(UNACKED))]))

    def start_step(self, payload: dict[str, Any]) -> None:
        self._record("start", payload)

    def cancel_step(self, payload: dict[str, Any]) -> None:
        self._record("cancel", payload)

    def report_step(self, payload: dict[str, Any]) -> None:
        self._record("report", payload)

    def note_error(self) -> None:
        return None


def worker_main(agent_broker: str, calls_broker: str) -> None:
    """The worker process: the agent's app and a solo-pool worker, as agents.daemon.run_agent starts them,
    connected as the host's agent user; its calls recorded through ``calls_broker``."""
    from agents.daemon import make_worker_app

    app = make_worker_app(cast(Any, RecordingAgent(calls_broker)), agent_broker)
    app.Worker(pool="solo", concurrency=1, loglevel="WARNING", hostname=f"agent@{HOST}", without_gossip=True,
               without_mingle=True, without_heartbeat=True, quiet=True).start()


@pytest.fixture
def wire_lab(tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(tmp_path)
    lab.start_redis()
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture
def broker(wire_lab: Lab) -> str:
    """The controller's URL (what the dispatcher connects with)."""
    assert wire_lab.broker_url
    return wire_lab.broker_url


@contextmanager
def agent_worker(lab: Lab, tmp_path: Path) -> Iterator[None]:
    log = tmp_path / "worker.log"
    assert lab.broker_url
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.integration.test_dispatch_wire", lab.agent_url(HOST),
                                 lab.broker_url], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield
        assert proc.poll() is None, log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def calls(broker: str) -> list[tuple[str, dict[str, Any], int]]:
    return [tuple(json.loads(c)) for c in redis_client(broker).lrange(CALLS, 0, -1)]  # type: ignore[misc]


def settled(broker: str) -> tuple[int, int]:
    """(messages waiting on the host's queue, messages delivered and not acknowledged)."""
    r = redis_client(broker)
    return int(r.llen(agent_queue(HOST))), int(r.hlen(UNACKED))


def start(attempt: str) -> StartStep:
    return StartStep(run_id="r1", step_id=attempt.rsplit("-", 1)[0], attempt_id=attempt, host=HOST,
                     devices=("/dev/x",), job_name="4k-randread", timeout_s=130, dispatched_at=time.time())


def test_the_agents_worker_runs_each_task_with_its_arguments_and_acks_it_after(broker: str, wire_lab: Lab,
                                                                              tmp_path: Path) -> None:
    disp = Dispatcher(broker, expires_s=60)
    starts = [start(f"r1-s00{i}-a1") for i in range(3)]
    cancel, report = CancelStep(attempt_id="r1-s000-a1", reason="stop"), ReportStep(attempt_id="r1-s001-a1")
    try:
        with agent_worker(wire_lab, tmp_path):
            disp.start_many(starts)
            disp.cancel(HOST, cancel)
            disp.report(HOST, report)
            wait_for(lambda: len(calls(broker)) == 5, 60, "the worker to run the five tasks")
            wait_for(lambda: settled(broker) == (0, 0), 10, "the five messages to be acknowledged")
    finally:
        disp.close()
    done = calls(broker)
    assert [(kind, payload) for kind, payload, _u in done] == [
        *(("start", m.model_dump(mode="json")) for m in starts),
        ("cancel", cancel.model_dump(mode="json")), ("report", report.model_dump(mode="json"))]
    assert all(unacked >= 1 for _k, _p, unacked in done)      # acks_late: acknowledged after the task


def test_an_expired_start_is_dropped_and_a_fresh_one_runs(broker: str, wire_lab: Lab, tmp_path: Path) -> None:
    stale, fresh = Dispatcher(broker, expires_s=1), Dispatcher(broker, expires_s=60)
    try:
        stale.start(start("r1-s000-a1"))
        time.sleep(1.5)                                   # no worker yet: it expires on the queue
        fresh.start(start("r1-s001-a1"))
        with agent_worker(wire_lab, tmp_path):
            wait_for(lambda: calls(broker) and settled(broker) == (0, 0), 60, "both messages to be consumed")
            time.sleep(0.5)
    finally:
        stale.close()
        fresh.close()
    assert [payload["attempt_id"] for _k, payload, _u in calls(broker)] == ["r1-s001-a1"]


def test_a_start_taken_but_not_acknowledged_is_restored_to_its_queue_and_runs(broker: str, wire_lab: Lab,
                                                                             tmp_path: Path) -> None:
    from kombu import Connection, Consumer, Queue

    disp = Dispatcher(broker, expires_s=60)
    taken: list[Any] = []
    try:
        disp.start(start("r1-s000-a1"))
        conf = celery_settings(wire_lab.agent_url(HOST), host=HOST)      # as the host's agent user
        with Connection(conf["broker_url"], transport_options=conf["broker_transport_options"]) as conn, \
                Consumer(conn, queues=[Queue(agent_queue(HOST))], accept=["json"],
                                                  callbacks=[lambda _body, message: taken.append(message)]):
            conn.drain_events(timeout=10)
            assert len(taken) == 1 and settled(broker) == (0, 1)      # delivered, in the unacked hash
        assert settled(broker) == (1, 0)            # back on agent.<host>, routed by its delivery_info
        with agent_worker(wire_lab, tmp_path):
            wait_for(lambda: calls(broker) and settled(broker) == (0, 0), 60, "the restored start to run")
    finally:
        disp.close()
    assert [payload["attempt_id"] for _k, payload, _u in calls(broker)] == ["r1-s000-a1"]


if __name__ == "__main__":
    worker_main(sys.argv[1], sys.argv[2])
