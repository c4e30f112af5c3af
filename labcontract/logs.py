"""Logging set-up shared by the daemons: every line carries ``[run …] [step …] [host …]``."""

from __future__ import annotations

import logging
import re
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


# user:password@ in any URL of a log line (scheme://user:PASSWORD@host): the password is replaced
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+@")


class _RedactPasswords(logging.Filter):
    """Last line of defence: a URL with a password that reached a log line anyway (an exception text, a
    library's message) is written with ``***`` instead. What the project logs itself goes through
    :func:`labcontract.brokerauth.redact_url` first."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "://" in message:
            redacted = _URL_PASSWORD.sub(r"\1***@", message)
            if redacted != message:
                record.msg, record.args = redacted, None
        if record.exc_info and record.exc_info[1] is not None and "://" in str(record.exc_info[1]):
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text, record.exc_info = _URL_PASSWORD.sub(r"\1***@", text), None
        return True


def setup_logging(level: str = "INFO", *, host: str = "-", logfile: str | None = None) -> None:
    handler: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(_ContextDefaults(host))
    handler.addFilter(_RedactPasswords())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("celery", "kombu", "amqp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
