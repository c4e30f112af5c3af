"""Sends start / cancel / report requests to agents' Celery queues (and nothing else).

The messages are Celery task messages, encoded and pushed by :mod:`orchestrator.controller.celery_wire` rather than
through ``app.send_task``: a batch of starts costs one Redis round trip instead of 2-3 ms a message, which is
what a burst of starts (many hosts whose steps end together) waited on (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

from labcontract.protocol import (
    TASK_CANCEL,
    TASK_REPORT,
    TASK_START,
    CancelStep,
    Message,
    ReportStep,
    StartStep,
    agent_queue,
)
from labcontract.transport import celery_settings, redis_client
from orchestrator.controller.celery_wire import QueuePusher, TaskEncoder

# a host's claimed clock lead taken into a message's expiry at most this much (Register.sent_at is the agent's word:
# 1e12 s overflowed Celery's expiry date and broke every dispatch of the controller's pass)
MAX_SKEW_S = 86400.0


class Dispatcher:
    def __init__(self, broker_url: str, *, expires_s: float) -> None:
        from celery import Celery

        self.app: Any = Celery("lab-controller", set_as_current=False)
        self.app.conf.update(celery_settings(broker_url))
        self.expires_s = expires_s
        # host -> its clock minus ours (registration). A worker judges Celery's absolute ``expires`` on its own
        # clock: a host ahead of ours would drop every message as expired, so its messages live that much longer
        self.skew_s: dict[str, float] = {}
        self.encoder = TaskEncoder(self.app)
        self.pusher = QueuePusher(redis_client(broker_url))

    def _encode(self, task: str, host: str, msg: Message) -> tuple[str, str]:
        # argsrepr: a short label instead of Celery's saferepr of the whole payload
        label = getattr(msg, "attempt_id", "") or type(msg).__name__
        queue = agent_queue(host)
        lead = min(max(0.0, self.skew_s.get(host, 0.0)), MAX_SKEW_S)
        return queue, self.encoder.encode(task, [msg.model_dump(mode="json")], queue=queue,
                                          expires_s=self.expires_s + lead,
                                          argsrepr=f"({label})")

    def start(self, msg: StartStep) -> None:
        self.pusher.push([self._encode(TASK_START, msg.host, msg)])

    def start_many(self, msgs: list[StartStep]) -> None:
        """Several starts in one round trip to the broker (all of them queued, or none)."""
        if msgs:
            self.pusher.push([self._encode(TASK_START, msg.host, msg) for msg in msgs])

    def cancel(self, host: str, msg: CancelStep) -> None:
        self.pusher.push([self._encode(TASK_CANCEL, host, msg)])

    def report(self, host: str, msg: ReportStep) -> None:
        self.pusher.push([self._encode(TASK_REPORT, host, msg)])

    def close(self) -> None:
        self.pusher.close()
        self.app.close()
