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

    def _send(self, task: str, host: str, msg: Message) -> None:
        self.app.send_task(task, args=[msg.model_dump(mode="json")], queue=agent_queue(host),
                           expires=self.expires_s, retry=True,
                           retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5})

    def start(self, msg: StartStep) -> None:
        self._send(TASK_START, msg.host, msg)

    def cancel(self, host: str, msg: CancelStep) -> None:
        self._send(TASK_CANCEL, host, msg)

    def report(self, host: str, msg: ReportStep) -> None:
        self._send(TASK_REPORT, host, msg)

    def close(self) -> None:
        self.app.close()
