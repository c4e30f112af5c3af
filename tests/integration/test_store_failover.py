"""A store that survives its host: the lab's store is a PostgreSQL primary with a synchronous streaming standby,
the controller (and a stand-by controller) reach it through a multi-host URL with
``target_session_attrs=read-write``. The primary is stopped (immediate: its host lost) while a run's step runs and
the standby is promoted: the controller waits the outage out and goes on with nothing lost or duplicated (each
step one attempt and one result). Then the controller's own host is lost too (SIGKILL): the stand-by controller
takes the lease on the promoted store and runs the next submission. Outage and take-over times are printed
(pytest -s: the issue's note)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from orchestrator.labs.lab import wait_for
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Attempt, Result, Step
from tests.conftest import QUICK_SUITE, LabHandle, start_lab
from tests.pgreplica import ReplicatedPg, start_replicated_postgres

pytestmark = pytest.mark.integration

SIX_STEPS = "suite: six\nprofiles:\n" + "".join(
    f"  - {{name: s{i}, rw: randread, bs: 4k, iodepth: 4, runtime: 2s}}\n" for i in range(6))


@pytest.fixture
def replicated() -> Iterator[ReplicatedPg]:
    pair = start_replicated_postgres()
    try:
        yield pair
    finally:
        pair.stop()


def _counts(handle: LabHandle, run_id: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    with handle.sessions() as s:
        results = s.execute(select(Step.name, func.count(Result.id)).join(Result, Result.step_id == Step.id)
                            .where(Step.run_id == run_id).group_by(Step.name)).all()
        attempts = s.execute(select(Step.name, func.count(Attempt.id)).join(Attempt, Attempt.step_id == Step.id)
                             .where(Step.run_id == run_id).group_by(Step.name)).all()
    return sorted((n, c) for n, c in results), sorted((n, c) for n, c in attempts)


def test_store_primary_lost_mid_run_standby_promoted_nothing_lost(replicated: ReplicatedPg, tmp_path: Path) -> None:
    store = replicated.store_url()
    handle = start_lab(tmp_path / "lab", store_url=store)
    try:
        handle.wait_registered()
        wait_for(lambda: "holding the controller lease" in handle.controller.log.read_text(errors="replace"), 60,
                 "the controller to hold the lease")
        standby_ctl = handle.lab.start_controller(store, name="controller-standby")
        wait_for(lambda: "standing by" in standby_ctl.log.read_text(errors="replace"), 60,
                 "the second controller to stand by")

        run_id = handle.submit(SIX_STEPS)
        handle.wait_step_state(run_id, "RUNNING", timeout=60)
        replicated.primary.stop()                        # immediate shutdown: the store's host is gone
        lost = time.monotonic()
        replicated.promote()
        promoted = time.monotonic() - lost
        # a fresh engine (no pooled connection) reaches the new primary through the same URL
        probe = sessions(make_engine(store))

        def writable() -> bool:
            try:
                with probe() as s:
                    return s.scalar(select(func.pg_is_in_recovery())) is False
            except Exception:
                return False
        wait_for(writable, 60, "the store URL to reach the promoted standby", interval=0.1)

        d = handle.wait_run(run_id, timeout=240)
        assert d.run.state == "SUCCEEDED", (d.run.reason, [(st.name, st.state, st.reason) for st in d.steps])
        results, attempts = _counts(handle, run_id)
        assert results == [(f"s{i}", 1) for i in range(6)], results      # nothing lost, nothing twice
        assert attempts == [(f"s{i}", 1) for i in range(6)], attempts
        ctl = handle.controller.log.read_text(errors="replace")
        # the controller either waited the outage out (logged when it began and when it ended) or never met it: its
        # pool's pre-ping found the dead connection only after the promotion and reconnected through the same URL
        # (seen once in four clean-clone runs); an outage begun and never ended is a failure
        assert ("store unavailable" in ctl) == ("store available again" in ctl), ctl[-3000:]
        again = next((ln.split("] ")[-1] for ln in ctl.splitlines() if "store available again" in ln),
                     "met no outage (reconnected to the promoted standby at its next use of the store)")
        assert "Traceback" not in ctl
        assert "took over" not in standby_ctl.log.read_text(errors="replace")   # the holder went on

        # the controller's host is lost as well: the stand-by takes the lease on the promoted store
        handle.lab.stop_proc(handle.controller, signal.SIGKILL)
        killed = time.monotonic()
        after = handle.submit(QUICK_SUITE)
        wait_for(lambda: "took over the controller lease" in standby_ctl.log.read_text(errors="replace"), 60,
                 "the stand-by controller to take the lease")
        took = time.monotonic() - killed
        handle.controller = standby_ctl
        d2 = handle.wait_run(after, timeout=120)
        assert d2.run.state == "SUCCEEDED", d2.run.reason
        results2, _ = _counts(handle, after)
        assert [c for _n, c in results2] == [1, 1], results2
        assert "Traceback" not in standby_ctl.log.read_text(errors="replace")
        print(f"\nFIGURE store failover: standby promoted {promoted:.1f}s after the primary was lost; controller: "
              f"{again}; the stand-by controller took the lease {took:.1f}s after the holder was killed (same "
              "machine: it sees the holder's pid gone; from another host, after the lease's 10 s)")
    finally:
        handle.lab.stop()
