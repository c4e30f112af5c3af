"""Every change the web service asks for goes to the controller as a command on the web stream.

The service writes ``lab:commands:web`` as broker user ``web`` (only that user may), so the controller can
trust the command's ``actor`` (``token:<name>``, the caller this service authenticated) and records it. The
answer is awaited for ``command_timeout_s``: silence means the controller is down or stuck, and the caller
gets HTTP 503 with what the controller's lease says, never a hang.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid

import redis
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import Busy, CommandRefused, ServiceError
from labcontract.protocol import REPLY_PREFIX, WEB_COMMANDS_STREAM, Message, Reply
from orchestrator.runs.client import parse_reply, wait_reply

log = logging.getLogger(__name__)


def controller_absence(db: sessionmaker[Session], now: float) -> str:
    """Why the controller may not be answering, from its lease (orchestrator.store.lease)."""
    from orchestrator.store.lease import absence, current

    try:
        lease = current(db)
    except Exception as e:          # the store itself is down
        return f"the store cannot be read either ({type(e).__name__})"
    return absence(lease, now) or (f"controller {lease.holder if lease else '?'} holds its lease but did not "
                                   "answer (busy, or it cannot reach the broker)")


class Commander:
    MAX_WAITING = 8     # commands awaiting the controller at once: each holds a thread of the server's pool for up
                        # to timeout_s while the controller is down; beyond this, Busy (429) at once

    def __init__(self, client: redis.Redis, db: sessionmaker[Session], timeout_s: float) -> None:
        self.redis, self.db, self.timeout_s = client, db, timeout_s
        self._waiting = threading.BoundedSemaphore(self.MAX_WAITING)

    def send(self, cmd: Message, actor: str, what: str) -> Reply:
        """Send ``cmd`` (its ``reply_to`` is replaced) as ``actor``; the controller's Reply when it accepted.
        CommandRefused with its reasons when it refused; ServiceError (503) when it is unreachable."""
        if not self._waiting.acquire(blocking=False):
            raise Busy(f"{self.MAX_WAITING} commands are already waiting for the controller; try again shortly")
        try:
            return self._send(cmd, actor, what)
        finally:
            self._waiting.release()

    def _send(self, cmd: Message, actor: str, what: str) -> Reply:
        reply_to = REPLY_PREFIX + uuid.uuid4().hex
        cmd = type(cmd).model_validate({**cmd.model_dump(), "actor": actor, "reply_to": reply_to})   # checked again
        try:
            self.redis.xadd(WEB_COMMANDS_STREAM, {"data": cmd.model_dump_json()})
            got = wait_reply(self.redis, reply_to, self.timeout_s)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise ServiceError(f"the broker cannot be reached: {type(e).__name__}") from e
        except redis.ResponseError as e:      # NOPERM: this service runs with the wrong broker user
            raise ServiceError(f"the broker refused the web service's command: {e}") from e
        if got is None:
            with contextlib.suppress(redis.RedisError):
                self.redis.delete(reply_to)
            why = controller_absence(self.db, time.time())
            raise ServiceError(f"the controller did not answer within {self.timeout_s:g}s: {why}; "
                               f"the {what} may still be applied when it comes back")
        reply = parse_reply(got[1])
        if not reply.ok:
            raise CommandRefused(what, list(reply.errors))
        log.info("%s by %s accepted", what, actor)
        return reply
