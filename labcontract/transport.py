"""Celery and Redis settings both sides use, so controller and agents cannot drift apart."""

from __future__ import annotations

from typing import Any

import redis

# Seconds. A dispatch is a start request that takes milliseconds to handle; the visibility
# timeout only has to cover an agent that died between receiving and acknowledging it.
VISIBILITY_TIMEOUT = 300
SOCKET_TIMEOUT = 10
SOCKET_CONNECT_TIMEOUT = 5


def celery_settings(broker_url: str) -> dict[str, Any]:
    return {
        "broker_url": broker_url,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,             # acked after the (short) start handler returned
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_disable_prefetch": True,    # take a message only when idle
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "worker_send_task_events": False,
        "worker_enable_remote_control": False,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": VISIBILITY_TIMEOUT,
            "socket_timeout": SOCKET_TIMEOUT,
            "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT,
            "retry_on_timeout": True,
            "health_check_interval": 10,
        },
        "task_default_queue": "lab.unrouted",
    }


def redis_py_url(url: str) -> str:
    """Kombu names a unix-socket broker ``redis+socket:///path``; redis-py ``unix:///path``."""
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://"):]
    return url


def redis_client(url: str) -> redis.Redis:
    """A client for the events/commands streams, with explicit socket timeouts."""
    return redis.Redis.from_url(
        redis_py_url(url),
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_CONNECT_TIMEOUT,
        health_check_interval=10,
        decode_responses=True,
    )
