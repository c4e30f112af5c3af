"""Entry of the web service (``labctl serve``): read the configuration once, build the app, run uvicorn."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from labcontract.logs import setup_logging
from orchestrator.config import LabConfig
from orchestrator.web.config import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, WebConfig

log = logging.getLogger(__name__)


def config_from(lab: LabConfig, *, bind: str = "127.0.0.1", port: int = DEFAULT_PORT, secret_file: Path | None = None,
                max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, cookie_secure: bool = False) -> WebConfig:
    return WebConfig(store_url=lab.db_url, broker_url=lab.broker_url,
                     secret_file=secret_file or lab.lab_dir / "web" / "session.key",
                     cache_dir=lab.lab_dir / "web" / "cache", artifact_dir=lab.artifact_dir, bind=bind, port=port,
                     max_body_bytes=max_body_bytes, cookie_secure=cookie_secure)


def main(cfg: WebConfig, *, log_level: str = "INFO") -> None:
    """Serve until SIGTERM / Ctrl-C. One worker process: reports are drawn in subprocesses of their own."""
    import uvicorn

    from labcontract.brokerauth import redact_url
    from orchestrator.web.app import create_app

    setup_logging(log_level, host="web")
    app = create_app(cfg)
    log.info("web service on http://%s:%d (store %s, broker %s)", cfg.bind, cfg.port,
             redact_url(cfg.store_url), redact_url(cfg.broker_url))
    uvicorn.run(app, host=cfg.bind, port=cfg.port, log_level=log_level.lower(), access_log=False,
                proxy_headers=True, forwarded_allow_ips="127.0.0.1", timeout_graceful_shutdown=5)


def cli() -> None:
    """``python -m orchestrator.cmd.web``: the same as ``labctl serve`` (used by the labs and benchmarks)."""
    p = argparse.ArgumentParser(prog="storagelab-web")
    p.add_argument("--store", required=True)
    p.add_argument("--broker", required=True, help="the broker URL of user web (password_file=...)")
    p.add_argument("--lab-dir", type=Path, required=True)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--secret-file", type=Path)
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    p.add_argument("--cookie-secure", action="store_true")
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args()
    lab = LabConfig(lab_dir=a.lab_dir, broker_url=a.broker, store_url=a.store)
    main(config_from(lab, bind=a.bind, port=a.port, secret_file=a.secret_file, max_body_bytes=a.max_body_bytes,
                     cookie_secure=a.cookie_secure), log_level=a.log_level)


if __name__ == "__main__":
    cli()
