"""The task messages the dispatcher encodes itself (orchestrator.controller.celery_wire) are the ones Celery's
``send_task`` publishes: compared field by field on kombu's in-memory transport and decoded as a worker's
consumer decodes them. The pusher's batches, order and retries, on a recording Redis client."""

from __future__ import annotations

import base64
import itertools
import json
import time
from datetime import datetime
from typing import Any

import pytest
import redis

from labcontract.protocol import TASK_CANCEL, TASK_REPORT, TASK_START, CancelStep, ReportStep, StartStep
from labcontract.transport import celery_settings
from orchestrator.controller.celery_wire import QueuePusher, RetryPolicy, TaskEncoder
from orchestrator.controller.dispatch import Dispatcher

QUEUE = "agent.h1"
VARYING = {"id", "root_id", "correlation_id", "delivery_tag", "expires"}   # per message / per instant


def celery_app() -> Any:
    from celery import Celery

    app = Celery("wire-test", set_as_current=False)
    app.conf.update(celery_settings("memory://"))
    return app


def start_msg(attempt: str = "r1-s000-a1", host: str = "h1") -> StartStep:
    return StartStep(run_id="r1", step_id="r1-s000", attempt_id=attempt, host=host, devices=("/dev/x",),
                     job_name="4k-randread", timeout_s=130, dispatched_at=time.time())


def published_by_celery(app: Any, args: list[Any], argsrepr: str) -> dict[str, Any]:
    """The message as ``send_task`` (the dispatcher's former call) puts it on the transport."""
    app.send_task(TASK_START, args=args, queue=QUEUE, expires=60, retry=True, argsrepr=argsrepr, kwargsrepr="{}",
                  retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5})
    with app.connection_for_write() as conn:
        message: dict[str, Any] = conn.default_channel._get(QUEUE)
        return message


def without(d: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def test_the_envelope_is_the_one_send_task_publishes() -> None:
    app = celery_app()
    args = [start_msg().model_dump(mode="json")]
    ours = json.loads(TaskEncoder(app).encode(TASK_START, args, queue=QUEUE, expires_s=60, argsrepr="(r1-s000-a1)"))
    theirs = published_by_celery(app, args, "(r1-s000-a1)")

    assert ours.keys() == theirs.keys()
    assert json.loads(base64.b64decode(ours["body"])) == json.loads(base64.b64decode(theirs["body"]))
    assert without(ours, {"body", "headers", "properties"}) == without(theirs, {"body", "headers", "properties"})
    for part in ("headers", "properties"):
        assert ours[part].keys() == theirs[part].keys(), part
        assert without(ours[part], VARYING) == without(theirs[part], VARYING), part
    expires = [datetime.fromisoformat(m["headers"]["expires"]).timestamp() for m in (ours, theirs)]
    assert abs(expires[0] - expires[1]) < 2 and abs(expires[0] - (time.time() + 60)) < 2
    h, p = ours["headers"], ours["properties"]
    assert h["id"] == h["root_id"] == p["correlation_id"] != p["delivery_tag"]
    assert p["delivery_info"] == {"exchange": "", "routing_key": QUEUE}


def test_each_message_has_its_own_ids() -> None:
    encoder = TaskEncoder(celery_app())
    a, b = (json.loads(encoder.encode(TASK_START, [{}], queue=QUEUE, expires_s=60, argsrepr="()")) for _ in range(2))
    assert a["headers"]["id"] != b["headers"]["id"]
    assert a["properties"]["delivery_tag"] != b["properties"]["delivery_tag"]


def test_a_consumer_decodes_it_as_the_task_call() -> None:
    app = celery_app()
    payload = start_msg().model_dump(mode="json")
    raw = TaskEncoder(app).encode(TASK_START, [payload], queue=QUEUE, expires_s=60, argsrepr="(x)")
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        message = channel.Message(json.loads(raw), channel=channel)
    args, kwargs, embed = message.decode()
    assert args == [payload] and kwargs == {} and embed["callbacks"] is None
    assert message.headers["task"] == TASK_START
    assert message.delivery_info["routing_key"] == QUEUE


def test_the_retry_waits_are_those_of_kombus_ensure() -> None:
    from kombu.utils.functional import fxrange

    policy = RetryPolicy()
    kombu = itertools.islice(fxrange(policy.interval_start, policy.interval_max + policy.interval_start,
                                     policy.interval_step, repeatlast=True), policy.max_retries)
    assert policy.waits() == pytest.approx(list(kombu))


class FakePipeline:
    def __init__(self, client: FakeRedis, transaction: bool) -> None:
        self.client, self.transaction = client, transaction
        self.commands: list[tuple[str, str]] = []

    def __enter__(self) -> FakePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def lpush(self, key: str, value: str) -> None:
        self.commands.append((key, value))

    def execute(self) -> None:
        self.client.executes.append((self.transaction, list(self.commands)))
        if self.client.failures > 0:
            self.client.failures -= 1
            raise redis.ConnectionError("connection reset")
        self.client.pushed += self.commands


class FakeRedis:
    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.executes: list[tuple[bool, list[tuple[str, str]]]] = []
        self.pushed: list[tuple[str, str]] = []

    def pipeline(self, transaction: bool = True) -> FakePipeline:
        return FakePipeline(self, transaction)

    def close(self) -> None:
        return None


NO_WAIT = RetryPolicy(interval_start=0, interval_step=0, interval_max=0)


def test_a_batch_goes_in_one_transaction_in_order() -> None:
    client = FakeRedis()
    items = [(f"agent.h{i}", f"m{i}") for i in range(5)]
    QueuePusher(client, NO_WAIT).push(items)            # type: ignore[arg-type]
    assert client.executes == [(True, items)]


def test_a_large_batch_is_split_into_chunks() -> None:
    client = FakeRedis()
    items = [(f"agent.h{i}", f"m{i}") for i in range(5)]
    QueuePusher(client, NO_WAIT, chunk=2).push(items)   # type: ignore[arg-type]
    assert [len(cmds) for _t, cmds in client.executes] == [2, 2, 1]
    assert client.pushed == items


def test_a_connection_error_is_retried() -> None:
    client = FakeRedis(failures=2)
    QueuePusher(client, NO_WAIT).push([(QUEUE, "m")])  # type: ignore[arg-type]
    assert len(client.executes) == 3 and client.pushed == [(QUEUE, "m")]


def test_after_the_last_retry_the_error_is_raised_as_send_task_raises_it() -> None:
    from kombu.exceptions import OperationalError

    client = FakeRedis(failures=10)
    with pytest.raises(OperationalError):
        QueuePusher(client, NO_WAIT).push([(QUEUE, "m")])  # type: ignore[arg-type]
    assert len(client.executes) == 4 and client.pushed == []


def test_the_dispatcher_sends_each_request_to_its_hosts_queue() -> None:
    disp = Dispatcher("redis://127.0.0.1:1/0", expires_s=60)     # never connects: the client is replaced
    client = FakeRedis()
    disp.pusher = QueuePusher(client, NO_WAIT)          # type: ignore[arg-type]
    disp.start_many([start_msg("a1", "h1"), start_msg("a2", "h2")])
    disp.start(start_msg("a3", "h3"))
    disp.cancel("h1", CancelStep(attempt_id="a1", reason="stop"))
    disp.report("h2", ReportStep(attempt_id="a2"))
    disp.start_many([])
    assert [len(cmds) for _t, cmds in client.executes] == [2, 1, 1, 1]
    sent = [(queue, json.loads(raw)) for queue, raw in client.pushed]
    assert [(q, m["headers"]["task"], m["headers"]["argsrepr"]) for q, m in sent] == [
        ("agent.h1", TASK_START, "(a1)"), ("agent.h2", TASK_START, "(a2)"), ("agent.h3", TASK_START, "(a3)"),
        ("agent.h1", TASK_CANCEL, "(a1)"), ("agent.h2", TASK_REPORT, "(a2)")]
    body = json.loads(base64.b64decode(sent[3][1]["body"]))
    assert body[0] == [{"v": body[0][0]["v"], "attempt_id": "a1", "reason": "stop"}]
    disp.close()
