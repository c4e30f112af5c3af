"""The HTTP endpoint both daemons serve: ``/metrics`` (Prometheus) and ``/health`` (JSON).

A small :class:`~http.server.ThreadingHTTPServer` in a daemon thread. Each daemon has its own
:class:`~prometheus_client.CollectorRegistry` holding one custom collector that computes every
series fresh at each scrape (nothing is kept in prometheus-client's global registry), so a
series that no longer applies (a step that ended) simply is not emitted.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric as Family

from labcontract.errors import ServiceError
from labcontract.telemetry import Metric

log = logging.getLogger(__name__)

__all__ = ["Family", "HealthCheck", "MetricsServer", "counter", "gauge", "info", "split_host_port"]

#: ``(healthy, body)``: 200 with the JSON body when healthy, 503 otherwise.
HealthCheck = Callable[[], tuple[bool, dict[str, Any]]]


def _check(metric: Metric, kind: str) -> Sequence[str]:
    if metric.kind != kind:
        raise TypeError(f"{metric.name} is a {metric.kind}, not a {kind}")
    return metric.labels


def gauge(metric: Metric) -> GaugeMetricFamily:
    """An empty family for a gauge of :mod:`labcontract.telemetry` (its name, labels and help)."""
    return GaugeMetricFamily(metric.name, metric.help, labels=_check(metric, "gauge"))


def counter(metric: Metric) -> CounterMetricFamily:
    """An empty family for a counter (exposed with the ``_total`` suffix)."""
    return CounterMetricFamily(metric.name, metric.help, labels=_check(metric, "counter"))


def info(metric: Metric) -> InfoMetricFamily:
    """An empty family for an info metric (exposed as ``<name>_info`` with value 1)."""
    return InfoMetricFamily(metric.name, metric.help, labels=_check(metric, "info"))


def split_host_port(address: str) -> tuple[str, int | None]:
    """``"h:9464" -> ("h", 9464)``, ``"h" -> ("h", None)``, ``"[::1]:9464" -> ("::1", 9464)``."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return address, None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """``/metrics`` and ``/health`` on ``bind:port`` (port 0: an ephemeral port, see :attr:`port`).

    The socket is bound when the object is made, so the port is known before :meth:`start`.
    """

    def __init__(self, registry: CollectorRegistry, health: HealthCheck, *, bind: str = "127.0.0.1",
                 port: int = 0, name: str = "metrics") -> None:
        self.registry, self.health, self.bind, self.name = registry, health, bind, name
        handler = _handler(self)
        server_cls = _Server6 if ":" in bind else _Server
        try:
            self.httpd = server_cls((bind, port), handler)
        except OSError as e:
            raise ServiceError(f"cannot serve {name} on {bind}:{port}: {e.strerror or e}") from e
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def address(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"{host}:{self.port}"

    def start(self) -> MetricsServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                        name=f"{self.name}-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.httpd.server_close()


def _handler(server: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "storagelab-metrics"

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError) as e:
                # a scraper that gave up (its scrape_timeout, on a slow host) closed the connection: its own
                # business, one line at debug, never a traceback in the daemon's log
                log.debug("%s: %s left before the answer (%s)", server.name, self.address_string(),
                          type(e).__name__)

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                try:
                    body = encoder(server.registry)
                except Exception as e:       # a store or file hiccup: 500 for this scrape, logged
                    log.exception("%s: collecting metrics failed", server.name)
                    self._send(500, f"collecting metrics failed: {e}\n".encode(), "text/plain; charset=utf-8")
                    return
                self._send(200, body, content_type)
            elif path == "/health":
                try:
                    healthy, data = server.health()
                except Exception as e:
                    log.exception("%s: health check failed", server.name)
                    healthy, data = False, {"up": 1, "healthy": False, "error": str(e)}
                self._send(200 if healthy else 503, (json.dumps(data) + "\n").encode(), "application/json")
            elif path == "/":
                self._send(200, b"storagelab exporter: /metrics /health\n", "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: /metrics or /health\n", "text/plain; charset=utf-8")

        do_HEAD = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s: %s " + format, server.name, self.address_string(), *args)

    return Handler
