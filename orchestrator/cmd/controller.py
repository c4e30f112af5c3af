"""Entry of the controller daemon: open the store once, migrate, build, run until SIGTERM."""

from __future__ import annotations

import gc
import logging
import os
import signal
from pathlib import Path
from types import FrameType

from labcontract.inventory import load_inventory
from labcontract.logs import setup_logging
from labcontract.telemetry import DEFAULT_CONTROLLER_METRICS_PORT
from labcontract.transport import redis_client
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning, LabConfig
from orchestrator.controller import Controller
from orchestrator.dispatch import Dispatcher
from orchestrator.notify import Notifier
from orchestrator.provisioning import Provisioner
from orchestrator.store.db import make_engine, migrate, sessions

log = logging.getLogger(__name__)
DEFAULT_PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def main(config: LabConfig, tuning: ControllerTuning, *, log_level: str = "INFO",
         metrics_port: int | None = DEFAULT_CONTROLLER_METRICS_PORT, metrics_bind: str = "0.0.0.0",
         notify_webhooks: tuple[str, ...] = (), notify_files: tuple[Path, ...] = (),
         inventory: Path | None = None, playbooks: Path = DEFAULT_PLAYBOOKS) -> None:
    """``metrics_port``: the exporter's port (0: an ephemeral one, logged); None: no exporter."""
    setup_logging(log_level, host="controller")
    provisioner = None
    if inventory is not None:          # read once; every problem of it reported now, before anything runs
        provisioner = Provisioner(load_inventory(inventory), inventory, playbooks, config.lab_dir / "provisioning",
                                  search_path=os.environ.get("PATH", os.defpath))
    engine = make_engine(config.db_url)
    migrate(engine)
    dispatcher = Dispatcher(config.broker_url, expires_s=tuning.dispatch_expires_s)
    controller = Controller(sessions(engine), redis_client(config.broker_url), dispatcher,
                            ArtifactStore(config.artifact_dir), tuning,
                            notifier=Notifier(list(notify_webhooks), list(notify_files)), provisioner=provisioner)
    server = None
    if metrics_port is not None:
        from prometheus_client import CollectorRegistry

        from labcontract.metrics_http import MetricsServer
        from orchestrator.exporter import ControllerCollector

        collector = ControllerCollector(sessions(engine), tuning, last_pass=lambda: controller.last_pass_at)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        server = MetricsServer(registry, collector.health, bind=metrics_bind, port=metrics_port,
                               name="controller-metrics").start()
        log.info("metrics on %s", server.address)

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping after this pass", signum)
        controller.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    log.info("controller up: store %s, broker %s", engine.url.render_as_string(hide_password=True),
             config.broker_url)
    # The start-up heap (~130k objects: SQLAlchemy, Celery, pydantic) never dies; frozen, it is left out of
    # every full collection, which otherwise stops the loop ~75 ms about once a second (docs/performance.md)
    gc.collect()
    gc.freeze()
    try:
        controller.run_forever()
    finally:
        if server is not None:
            server.close()
        dispatcher.close()
        engine.dispose()
        log.info("controller stopped")
