"""``labctl demo``: the embedded one-machine lab, end to end, with real components; it leaves the demo run's
Markdown and HTML reports in the lab's report directory and prints their paths."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from rich.console import Console

from labcontract.brokerauth import redact_url
from labcontract.errors import ServiceError
from labcontract.suite import load_suite
from labcontract.transport import redis_client
from orchestrator import labfile
from orchestrator.config import LabConfig
from orchestrator.htmlreport import write_html
from orchestrator.labctl.watch import watch_run
from orchestrator.labs.lab import Lab, redis_ping, wait_for
from orchestrator.queries import run_detail
from orchestrator.report import write_markdown
from orchestrator.runs.client import ControllerClient
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host

DEMO_SUITE = "demo"
DEMO_HOST = "lab-local"


def run_demo(config: LabConfig, console: Console, *, runtime: int, size_mib: int, reuse_broker: bool,
             keep_dut: bool = False, notify: labfile.Notify | None = None) -> int:
    """The demo (module docstring). Its DUT's image (``size_mib`` MiB in the lab directory) is removed when it ends,
    unless ``keep_dut``: the store, artifacts and reports are what stays. ``notify``: sinks added to the lab file's
    ``[notify]`` (an existing lab file's are kept); the controller delivers the demo run's end to them all."""
    sinks = labfile.sinks_with(config.lab_dir, notify or labfile.Notify(), "labctl demo")
    lab = Lab(config.lab_dir)
    dut = None
    try:
        if reuse_broker and redis_ping(config.broker_url):
            operator = lab.broker_url = config.broker_url
            console.print(f"using the redis-server at {redact_url(operator)}")
        else:
            lab.start_redis()       # ACL users controller, labctl, agent-<host>; passwords in lab-dir/secrets
            assert lab.labctl_url
            operator = lab.labctl_url
            console.print(f"started redis-server at {redact_url(lab.broker_url)} (pid {lab.procs[-1].popen.pid}); "
                          f"ACL users and password files in {config.lab_dir / 'secrets'}")
        labfile.write(config.lab_dir, broker=operator, store=config.db_url, notify=sinks,     # labctl finds it,
                      by="labctl demo")                                                     # its controller too
        dut = lab.make_dut("demo-dut", size_mib)
        how = f"loop device {dut.loop} (direct I/O) on {dut.backing}" if dut.loop else f"file {dut.backing}"
        console.print(f"DUT: {how}, {size_mib} MiB")
        controller = lab.start_controller(config.db_url)
        agent = lab.start_agent(DEMO_HOST, [f"dut0={dut.path}"])
        engine = make_engine(config.db_url)
        db = sessions(engine)

        def registered() -> bool:
            for p in (controller, agent):
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited:\n{p.tail()}")
            try:
                with db() as s:
                    h = s.get(Host, DEMO_HOST)
                    return bool(h and h.last_seen and h.last_seen > time.time() - 10
                                and any(d.path == dut.path and d.declared for d in h.devices))
            except Exception:  # schema not created yet by the controller
                return False

        wait_for(registered, 60, "the agent to register with the controller", interval=0.2)
        console.print(f"controller pid {controller.popen.pid}, agent {DEMO_HOST} pid {agent.popen.pid}: up")
        suite = load_suite(DEMO_SUITE)
        run_id, _reply = ControllerClient(redis_client(operator)).submit(suite, DEMO_HOST, ["dut0"], runtime)
        console.print(f"submitted suite {suite.name} ({len(suite.workloads)} steps x {runtime}s): run {run_id}")
        code = watch_run(db, redis_client(operator), run_id, console,
                         timeout_s=len(suite.workloads) * (runtime + 60) + 60)
        with db() as s:
            detail = run_detail(s, run_id)
            report = write_markdown(detail, config.report_dir, config.artifact_dir)
            html = config.report_dir / f"{run_id}.html"
            write_html([detail], html)      # next to the Markdown one: what a reviewer opens first
        if sinks:
            console.print(notified(db, run_id), highlight=False)
        console.print(f"report: {report}")
        console.print(f"HTML report: {html}", highlight=False, soft_wrap=True)
        console.print(f"store: {redact_url(config.db_url)}   logs: {config.lab_dir / 'logs'}")
        engine.dispose()
        return code
    finally:
        lab.stop()
        if dut is not None and not keep_dut:
            dut.backing.unlink(missing_ok=True)
            console.print(f"demo lab stopped (redis, controller, agent); its DUT image {dut.backing.name} removed "
                          "(--keep-dut keeps it)", highlight=False)
        else:
            console.print("demo lab stopped (redis, controller, agent, DUT)")


def notified(db: Any, run_id: str, timeout_s: float = 30.0) -> str:
    """Once the controller delivered the run's end to every sink (or ``timeout_s`` passed): what it says of them."""
    from orchestrator.notifysinks import listing
    from orchestrator.store.models import Run

    def done() -> bool:
        with db() as s:
            run = s.get(Run, run_id)
            return bool(run is not None and run.notified_at)
    with contextlib.suppress(ServiceError):
        wait_for(done, timeout_s, f"the end of run {run_id} to reach every notification sink", interval=0.2)
    with db() as s:
        said = [f"{r['target']} {r['state']}" + (f" ({r['last_error']})" if r["state"] == "failing" else "")
                for r in listing(s) if r["active"]]
    return "notifications: " + ("; ".join(said) or "none recorded yet") + " (labctl notifications)"
