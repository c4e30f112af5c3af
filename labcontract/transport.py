"""Celery and Redis settings both sides use, so controller and agents cannot drift apart."""

from __future__ import annotations

from typing import Any

import redis

from labcontract.brokerauth import Resolved, redact_url, resolve, unacked_keys

# Seconds. A dispatch is a start request that takes milliseconds to handle; the visibility
# timeout only has to cover an agent that died between receiving and acknowledging it.
VISIBILITY_TIMEOUT = 300
SOCKET_TIMEOUT = 10
SOCKET_CONNECT_TIMEOUT = 5


def celery_settings(broker_url: str, *, host: str | None = None) -> dict[str, Any]:
    """``host``: the settings of that agent's worker (its queue, and kombu's unacked hash, index and
    mutex under keys of its own, which its broker user may touch; kombu's defaults are shared by all).

    The password a URL's ``password_file`` names is read here into the in-memory kombu URL (never logged:
    Celery and kombu log URLs with the password masked); ``rediss://`` gets ``broker_use_ssl``."""
    conn = resolve(broker_url)
    options: dict[str, Any] = {
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT,
        "retry_on_timeout": True,
        "health_check_interval": 10,
        # one list per queue (celery_wire pushes priority 0 only): an agent's ACL names exactly its key
        "priority_steps": [0],
    }
    settings: dict[str, Any] = {
        "broker_url": conn.kombu_url,
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
        "broker_transport_options": options,
        "task_default_queue": "lab.unrouted",
    }
    if conn.ssl is not None:
        settings["broker_use_ssl"] = conn.ssl
    if conn.sentinel is not None:        # kombu's sentinel:// transport: the master group, the sentinels' login
        options["master_name"] = conn.sentinel.master
        options["sentinel_kwargs"] = {"socket_timeout": SOCKET_TIMEOUT,
                                      "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT, **conn.sentinel_kwargs}
    if host is not None:
        from kombu.entity import Exchange, Queue

        from labcontract.protocol import agent_queue

        options.update(unacked_keys(host))
        queue = agent_queue(host)   # bound to an exchange of its own name: binding keys per host too
        settings["task_queues"] = [Queue(queue, Exchange(queue, type="direct"), routing_key=queue)]  # type: ignore[no-untyped-call]
    return settings


def redis_py_url(url: str) -> str:
    """Kombu names a unix-socket broker ``redis+socket:///path``; redis-py ``unix:///path``."""
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://"):]
    return url


def redis_client(url: str, **overrides: Any) -> redis.Redis:
    """A client for the events/commands streams, with explicit socket timeouts; the user, the password
    (read from the URL's ``password_file``) and TLS files as the URL names them."""
    conn = resolve(url)
    kwargs: dict[str, Any] = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT,
                              "health_check_interval": 10, "decode_responses": True, **conn.kwargs, **overrides}
    if conn.sentinel is not None:
        return _sentinel_client(conn, kwargs)
    try:
        return redis.Redis.from_url(conn.url, **kwargs)
    except ValueError as e:
        raise ValueError(f"bad broker URL {redact_url(url)}: {e}") from None


def _sentinel_client(conn: Resolved, kwargs: dict[str, Any]) -> redis.Redis:
    """A client of the primary of ``conn``'s master group: each new connection asks the sentinels where it is, and
    one whose server turned replica is dropped (READONLY), so the caller's retry reaches the new primary."""
    from redis.sentinel import Sentinel

    assert conn.sentinel is not None
    timeouts = {k: kwargs[k] for k in ("socket_timeout", "socket_connect_timeout")}
    if conn.sentinel.tls:
        kwargs = {**kwargs, "ssl": True}
    sentinels = Sentinel(list(conn.sentinel.sentinels), sentinel_kwargs={**timeouts, **conn.sentinel_kwargs},  # type: ignore[no-untyped-call]
                         **kwargs)
    client: redis.Redis = sentinels.master_for(conn.sentinel.master, redis_class=redis.Redis, db=conn.sentinel.db)  # type: ignore[no-untyped-call]
    return client
