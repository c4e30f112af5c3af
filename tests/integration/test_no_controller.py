"""labctl never calls a run queued at a broker where no controller of a lab ever registered (issue 27: a plain
``labctl submit`` went to another redis-server on the default port, waited 33 s, printed a run id and exited 0: that
run never existed). Once a controller registered, a submission while it is down waits in the broker as before
(tests/integration/test_restarts.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labcontract.protocol import COMMANDS_STREAM, CONTROLLER_PRESENCE_KEY
from labcontract.transport import redis_client
from orchestrator.labs.lab import Lab
from orchestrator.runs.client import ControllerClient
from orchestrator.store.db import make_engine, migrate

pytestmark = pytest.mark.integration


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(tmp_path / "lab")
    try:
        lab.start_redis()
        yield lab
    finally:
        lab.stop()


def test_a_submission_to_a_broker_no_controller_registered_at_is_refused_and_nothing_is_sent(
        bare: Lab, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert bare.labctl_url is not None
    argv = [sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(bare.root), "--broker", bare.labctl_url,
            "--store", store]
    migrate(make_engine(store))          # a store with its schema: only the broker is wrong
    res = subprocess.run([*argv, "schedule", "rm", "nightly"], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0, res.stdout
    assert "no controller of a lab has ever registered at the broker at 127.0.0.1:" in res.stderr, res.stderr
    assert "nothing was sent" in res.stderr and "removed" not in res.stdout
    admin = redis_client(bare.admin_url)
    assert not admin.exists(COMMANDS_STREAM) or admin.xlen(COMMANDS_STREAM) == 0
    # once a controller of a lab said it was here, the same command goes (and waits for its answer)
    admin.set(CONTROLLER_PRESENCE_KEY, '{"first_at": 1.0, "last_at": 1.0}')
    assert ControllerClient(redis_client(bare.labctl_url), timeout_s=0.5).cancel("r-nobody", "x") is None
    assert admin.xlen(COMMANDS_STREAM) == 1
