"""Fixtures of the unit tier: the controller's logic on a real SQLite store, with a recording
dispatcher in place of Celery and a clock the test moves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import CancelStep, Register, ReportStep, StartStep
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller
from orchestrator.store.db import make_engine, migrate, sessions


class RecordingDispatcher:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def start(self, msg: StartStep) -> None:
        self.sent.append(("start", msg.host, msg))

    def start_many(self, msgs: list[StartStep]) -> None:
        for msg in msgs:
            self.start(msg)

    def cancel(self, host: str, msg: CancelStep) -> None:
        self.sent.append(("cancel", host, msg))

    def report(self, host: str, msg: ReportStep) -> None:
        self.sent.append(("report", host, msg))

    def starts(self) -> list[StartStep]:
        return [m for kind, _h, m in self.sent if kind == "start"]


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def env(tmp_path: Path) -> tuple[Controller, RecordingDispatcher, Clock, sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite'}")
    migrate(engine)
    db = sessions(engine)
    disp, clock = RecordingDispatcher(), Clock()
    ctl = Controller(db, None, disp, ArtifactStore(tmp_path / "art"), ControllerTuning(), clock=clock)  # type: ignore[arg-type]
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1", fio_version="fio-3.33"),
                              duts=(DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30),)))
    return ctl, disp, clock, db


