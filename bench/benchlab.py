"""The embedded lab the benchmarks run against: redis-server, controller, one agent, a loop DUT."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from labcontract.fioresult import parse_fio_output
from labcontract.suite import Suite
from labcontract.transport import redis_client
from orchestrator.labctl.client import ControllerClient
from orchestrator.labs.lab import Dut, Lab, wait_for
from orchestrator.queries import RunDetail, run_detail
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host

HOST = "bench-host"


@dataclass
class BenchLab:
    lab: Lab
    dut: Dut
    db: sessionmaker[Session]
    client: ControllerClient

    @property
    def root(self) -> Path:
        return self.lab.root

    def run_suite(self, suite: Suite, timeout: float, **overrides: object) -> RunDetail:
        run_id, _ = self.client.submit(suite, HOST, ["dut0"], **overrides)  # type: ignore[arg-type]

        def done() -> RunDetail | None:
            with self.db() as s:
                d = run_detail(s, run_id)
                return d if d.run.state in ("SUCCEEDED", "FAILED", "CANCELLED") else None
        d = wait_for(done, timeout, f"run {run_id}", interval=0.05)
        assert isinstance(d, RunDetail)
        assert d.run.state == "SUCCEEDED", d.run.reason
        return d

    def bare_fio(self, job: Path, out: Path) -> float:
        """fio run directly, in a session of its own as the agent runs it; returns total IOPS."""
        subprocess.run(["fio", "--output-format=json+", f"--output={out}", str(job)], check=True,
                       capture_output=True, start_new_session=True)
        return parse_fio_output(out.read_bytes()).combined.iops


@contextlib.contextmanager
def bench_lab(size_mib: int, backing_dir: Path | None = None) -> Iterator[BenchLab]:
    root = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    lab = Lab(root)
    try:
        broker = lab.start_redis()
        dut = lab.make_dut("bench-dut", size_mib, backing_dir=backing_dir)
        store = f"sqlite:///{root / 'store.sqlite'}"
        lab.start_controller(store)
        lab.start_agent(HOST, [f"dut0={dut.path}"])
        db = sessions(make_engine(store))

        def registered() -> bool:
            try:
                with db() as s:
                    return s.get(Host, HOST) is not None
            except Exception:
                return False
        wait_for(registered, 60, "the agent to register")
        yield BenchLab(lab, dut, db, ControllerClient(redis_client(broker)))
    finally:
        lab.stop()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
