"""Celery task messages encoded here and pushed onto the agents' queues, a whole batch per Redis round trip.

Why: ``app.send_task`` costs 0.6 ms a message on an idle machine and 2-3 ms under load (Celery's router and
``maybe_declare``, kombu's ``ensure`` wrappers, a Redis client built per publish, one LPUSH round trip each).
The starts of a burst (200 hosts whose steps end in the same second) queued behind one another at that rate.

What goes on the wire is what ``send_task`` puts there, built by the same code where it matters:

* the task message is Celery's protocol v2 from ``app.amqp.as_task_v2`` (headers ``task``, ``id``, ``expires``
  as an ISO timestamp, ``retries``, ...), its body serialized by kombu's serializer registry;
* the envelope is kombu's virtual transport's (base64 body, ``delivery_info``, ``delivery_tag``, ``priority``:
  what ``Channel.basic_publish`` adds), JSON-encoded by kombu and LPUSHed onto the queue's list, as kombu's
  Redis ``Channel._put`` does for priority 0 (the list named after the queue).

The agents' Celery workers consume it unchanged: expiry is the ``expires`` header, and acks_late, the
unacked hash and its visibility-timeout restore are the consumer's, keyed on the same ``delivery_tag`` and
``delivery_info``. tests/unit/test_celery_wire.py compares the envelope field by field with the one
``send_task`` publishes (a Celery or kombu upgrade that changes the format fails there), and
tests/integration/test_dispatch_wire.py has a real worker execute it and drop it once expired.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

# kombu's Redis transport: the list of priority 0 is named after the queue (Channel._q_for_pri)
DEFAULT_PRIORITY = 0
PERSISTENT = 2                      # kombu.entity.PERSISTENT_DELIVERY_MODE, Celery's default delivery mode


@dataclass(frozen=True)
class RetryPolicy:
    """When the broker connection fails: retries and waits as kombu's ``Connection.ensure`` spaces them
    for ``send_task(retry=True, retry_policy=...)`` (0.2, 0.7, 1.2 s), then the error is raised."""

    max_retries: int = 3
    interval_start: float = 0.2
    interval_step: float = 0.5
    interval_max: float = 1.0

    def waits(self) -> list[float]:
        top = self.interval_max + self.interval_start
        return [min(self.interval_start + i * self.interval_step, top) for i in range(self.max_retries)]


class TaskEncoder:
    """Builds the broker message of one task call, as Celery's ``send_task`` would (see the module doc)."""

    def __init__(self, app: Any) -> None:
        conf = app.conf
        if conf.task_compression or (conf.broker_transport_options or {}).get("global_keyprefix"):
            raise ValueError("celery_wire encodes uncompressed messages on unprefixed queues only")
        from kombu.serialization import dumps
        from kombu.utils.json import dumps as json_dumps

        self.app = app
        self.serializer: str = conf.task_serializer
        self._serialize: Any = dumps            # kombu's registry: (content type, encoding, payload)
        self._json: Any = json_dumps            # what kombu's Redis Channel._put encodes the envelope with

    def encode(self, name: str, args: Sequence[Any], *, queue: str, expires_s: float, argsrepr: str) -> str:
        """The JSON envelope to LPUSH onto ``queue``; a worker drops it ``expires_s`` after now."""
        task_id = str(uuid.uuid4())
        headers, properties, body, _event = self.app.amqp.as_task_v2(
            task_id, name, list(args), {}, expires=expires_s, reply_to=self.app.thread_oid,
            argsrepr=argsrepr, kwargsrepr="{}", ignore_result=None)
        content_type, content_encoding, payload = self._serialize(body, serializer=self.serializer)
        properties.update(argsrepr=argsrepr, kwargsrepr="{}", delivery_mode=PERSISTENT,
                          expiration=str(int(expires_s * 1000)),
                          delivery_info={"exchange": "", "routing_key": queue}, priority=DEFAULT_PRIORITY,
                          body_encoding="base64", delivery_tag=str(uuid.uuid4()))
        data = payload.encode(content_encoding) if isinstance(payload, str) else payload
        envelope = {"body": base64.b64encode(data).decode("ascii"), "content-encoding": content_encoding,
                    "content-type": content_type, "headers": headers, "properties": properties}
        return str(self._json(envelope))


class QueuePusher:
    """LPUSHes encoded messages onto queue lists: a batch in one MULTI/EXEC round trip, so that it lands
    whole or not at all. A connection error is retried per :class:`RetryPolicy` (a batch whose EXEC went
    through but whose reply was lost is pushed again: agents ignore a start they already know), then
    raised as kombu's ``OperationalError``, as ``send_task`` raises it."""

    def __init__(self, client: redis.Redis, policy: RetryPolicy | None = None, chunk: int = 500) -> None:
        self.client, self.policy, self.chunk = client, policy or RetryPolicy(), chunk

    def push(self, items: Sequence[tuple[str, str]]) -> None:
        """``items``: (queue, encoded message) in sending order."""
        for i in range(0, len(items), self.chunk):
            self._push_chunk(items[i:i + self.chunk])

    def _push_chunk(self, items: Sequence[tuple[str, str]]) -> None:
        from kombu.exceptions import OperationalError

        waits = self.policy.waits()
        for attempt in range(len(waits) + 1):
            try:
                with self.client.pipeline(transaction=True) as pipe:
                    for queue, message in items:
                        pipe.lpush(queue, message)
                    pipe.execute()
                return
            except (redis.ConnectionError, redis.TimeoutError) as e:
                if attempt == len(waits):
                    raise OperationalError(str(e)) from e
                time.sleep(waits[attempt])

    def close(self) -> None:
        self.client.close()
