"""Entry of the controller daemon: open the store once, migrate, build, run until SIGTERM."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType

from labcontract import __version__
from labcontract.brokerauth import redact_url
from labcontract.inventory import load_inventory
from labcontract.logs import setup_logging
from labcontract.telemetry import DEFAULT_CONTROLLER_METRICS_PORT
from labcontract.transport import redis_client
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning, LabConfig
from orchestrator.controller import Controller
from orchestrator.controller.dispatch import Dispatcher
from orchestrator.controller.lease import LeaseHeld, LeaseLost, migration_lock, take_lease
from orchestrator.controller.notify import Notifier
from orchestrator.controller.transient import FaultLog
from orchestrator.labfile import Notify, notify_problems
from orchestrator.runs.provisioning import Provisioner
from orchestrator.store.db import make_engine, migrate, sessions

log = logging.getLogger(__name__)
DEFAULT_PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def notifier_of(options: Notify, lab: Notify, lab_file: Path | None) -> Notifier:
    """The daemon's notifier: the lab file's sinks and the options', each once, every one checked now (every problem
    logged, exit 2) and logged by its secret-free label."""
    problems = notify_problems(options)
    both = lab.plus(options)
    notifier = Notifier(list(both.webhook), list(both.file), background=True, chats=list(both.chat))
    try:
        sinks = notifier.sinks()
    except ValueError as e:         # (the lab file's were checked when it was read; the options' just above)
        problems.append(str(e))
    if problems:
        for p in problems:
            log.error("%s", p)
        raise SystemExit(2)
    of_lab = {s.key for s in Notifier(list(lab.webhook), list(lab.file), chats=list(lab.chat)).sinks()}
    notifier.origins = {s.key: "lab file" if s.key in of_lab else "option" for s in sinks}
    for s in sinks:
        log.info("notifications of run ends to %s (from the %s)", s.label,
                 f"lab file {lab_file}" if s.key in of_lab else "--notify-* options")
    return notifier


def main(config: LabConfig, tuning: ControllerTuning, *, log_level: str = "INFO",
         metrics_port: int | None = DEFAULT_CONTROLLER_METRICS_PORT, metrics_bind: str = "127.0.0.1",
         notify_webhooks: tuple[str, ...] = (), notify_files: tuple[Path, ...] = (),
         notify_chats: tuple[str, ...] = (), inventory: Path | None = None, playbooks: Path = DEFAULT_PLAYBOOKS,
         standby: bool = True, lab_notify: Notify | None = None, lab_file: Path | None = None) -> None:
    """``metrics_port``: the exporter's port (0: an ephemeral one, logged); None: no exporter.
    ``standby``: when another controller holds the lease, wait and take over when it stops (else exit 2).
    ``lab_notify``: the sinks of the lab file ``lab_file`` (its ``[notify]``), delivered to beside the options'."""
    setup_logging(log_level, host="controller")
    stopping = threading.Event()
    running: list[Controller] = []

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping after this pass", signum)
        stopping.set()
        for ctl in running:
            ctl.stop()

    signal.signal(signal.SIGTERM, _stop)      # ansible-runner never replaces these (orchestrator.runs.provisioning)
    signal.signal(signal.SIGINT, _stop)
    notifier = notifier_of(Notify(notify_webhooks, tuple(p.absolute() for p in notify_files), notify_chats),
                           lab_notify or Notify(), lab_file)
    provisioner = None
    if inventory is not None:          # read once; every problem of it reported now, before anything runs
        provisioner = Provisioner(load_inventory(inventory), inventory, playbooks, config.lab_dir / "provisioning",
                                  search_path=os.environ.get("PATH", os.defpath))
    engine = make_engine(config.db_url)
    try:                    # exactly one controller: the lease holder (orchestrator.controller.lease)
        lease = take_lease(engine, standby=standby, stopping=stopping)
    except LeaseHeld as e:
        log.error("%s", e)
        engine.dispose()
        raise SystemExit(2) from None
    if lease is None:
        engine.dispose()
        log.info("controller stopped while standing by")
        return
    with migration_lock(engine):
        migrate(engine)
    lease.publish(heartbeat_timeout_s=tuning.heartbeat_timeout_s)   # readers call a host down as this one does
    fenced = sessions(engine)           # every write transaction proves the lease is still ours
    lease.fence(fenced)
    faults = FaultLog()
    dispatcher = Dispatcher(config.broker_url, expires_s=tuning.dispatch_expires_s)
    controller = Controller(fenced, redis_client(config.broker_url), dispatcher,
                            ArtifactStore(config.artifact_dir), tuning,
                            notifier=notifier,
                            provisioner=provisioner)
    server = None
    if metrics_port is not None:
        from prometheus_client import CollectorRegistry

        from labcontract.metrics_http import MetricsServer
        from orchestrator.controller.exporter import ControllerCollector

        collector = ControllerCollector(sessions(engine), tuning, last_pass=lambda: controller.last_pass_at,
                                        faults=faults, boundary=controller.boundary)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        server = MetricsServer(registry, collector.health, bind=metrics_bind, port=metrics_port,
                               name="controller-metrics").start()
        log.info("metrics on %s", server.address)

    running.append(controller)
    if stopping.is_set():
        controller.stop()
    # never a password (tests/redteam/test_redteam_broker.py)
    log.info("controller up (storagelab %s): store %s, broker %s", __version__,
             redact_url(engine.url.render_as_string(hide_password=True)), redact_url(config.broker_url))
    # The start-up heap (~130k objects: SQLAlchemy, Celery, pydantic) never dies; frozen, it is left out of
    # every full collection, which otherwise stops the loop ~75 ms about once a second (docs/performance.md)
    gc.collect()
    gc.freeze()
    lost: LeaseLost | None = None
    try:
        controller.run_forever(renew=lease.renew_if_due, faults=faults)
    except LeaseLost as e:
        lost = e
        log.error("stopping: %s; this controller wrote nothing since and exits (a supervisor restarting it "
                  "makes it stand by)", e)
    finally:
        if provisioner is not None:
            provisioner.close()         # a playbook still running is stopped (its step is retried)
        if server is not None:
            server.close()
        dispatcher.close()
        if lost is None:
            with contextlib.suppress(Exception):
                lease.release()         # a stand-by takes over at its next poll
        engine.dispose()
        log.info("controller stopped")
    if lost is not None:
        raise SystemExit(3)
