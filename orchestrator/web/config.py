"""The web service's configuration, read once by its entry module (``orchestrator/cmd/web.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 1 << 20      # a suite is at most 256 KiB (labcontract.suite); a body 4x that is refused
DEFAULT_COMMAND_TIMEOUT_S = 10.0      # the controller answers in ms; this long silent, it is down (HTTP 503)
DEFAULT_SESSION_TTL_S = 12 * 3600     # a browser session lasts a working day


@dataclass(frozen=True)
class WebConfig:
    store_url: str                     # read-only use: the controller is the only writer
    broker_url: str                    # as ACL user ``web``: XADD lab:commands:web, replies, live status
    secret_file: Path                  # HMAC key of the session cookies (made 0600 when missing)
    cache_dir: Path                    # rendered reports of ended runs
    artifact_dir: Path                 # the controller's artifact store, read for downloads
    bind: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
    cookie_secure: bool = False        # True behind a TLS-terminating proxy (docs/web.md)
    session_ttl_s: int = DEFAULT_SESSION_TTL_S
