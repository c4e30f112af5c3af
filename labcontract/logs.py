"""Logging set-up shared by the daemons: every line carries ``[run …] [step …] [host …]``."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)-7s %(name)s [run %(run)s] [step %(step)s] [host %(host)s] %(message)s"


class _ContextDefaults(logging.Filter):
    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host

    def filter(self, record: logging.LogRecord) -> bool:
        for key, default in (("run", "-"), ("step", "-"), ("host", self.host)):
            if not hasattr(record, key):
                setattr(record, key, default)
        return True


def setup_logging(level: str = "INFO", *, host: str = "-", logfile: str | None = None) -> None:
    handler: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(_ContextDefaults(host))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("celery", "kombu", "amqp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
