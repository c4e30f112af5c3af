"""Sends start / cancel / report requests to agents' Celery queues (and nothing else)."""

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
from labcontract.transport import celery_settings


class Dispatcher:
    def __init__(self, broker_url: str, *, expires_s: float) -> None:
        from celery import Celery

        self.app: Any = Celery("lab-controller", set_as_current=False)
        self.app.conf.update(celery_settings(broker_url))
        self.expires_s = expires_s

    def _send(self, task: str, host: str, msg: Message, producer: Any = None) -> None:
        # argsrepr: a short label instead of Celery's saferepr of the whole payload (1 ms+ a message)
        label = getattr(msg, "attempt_id", "") or type(msg).__name__
        self.app.send_task(task, args=[msg.model_dump(mode="json")], queue=agent_queue(host),
                           expires=self.expires_s, retry=True, producer=producer,
                           argsrepr=f"({label})", kwargsrepr="{}",
                           retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5})

    def start(self, msg: StartStep) -> None:
        self._send(TASK_START, msg.host, msg)

    def start_many(self, msgs: list[StartStep]) -> None:
        """Several starts through one producer (one connection from the pool for the lot)."""
        if not msgs:
            return
        with self.app.producer_or_acquire() as producer:
            for msg in msgs:
                self._send(TASK_START, msg.host, msg, producer)

    def cancel(self, host: str, msg: CancelStep) -> None:
        self._send(TASK_CANCEL, host, msg)

    def report(self, host: str, msg: ReportStep) -> None:
        self._send(TASK_REPORT, host, msg)

    def close(self) -> None:
        self.app.close()
