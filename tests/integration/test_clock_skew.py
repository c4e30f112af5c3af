"""An agent whose wall clock is 300 s off the controller's (libfaketime): its steps complete normally (the
controller's deadline is on its own clock, the agent's on its monotonic clock) and ``labctl hosts`` shows
the skew measured at registration, with a warning."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.store.models import Host
from tests.conftest import QUICK_SUITE, LabHandle, start_lab

pytestmark = pytest.mark.integration

FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1")


def faketime_lib() -> str:
    for lib in FAKETIME_LIBS:
        if Path(lib).exists():
            return lib
    pytest.fail("libfaketime is not installed (apt-get install faketime)")


@pytest.fixture(params=["-300s", "+300s"], ids=["agent-behind", "agent-ahead"])
def skewed_lab(request: pytest.FixtureRequest, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LabHandle, float]]:
    handle = start_lab(tmp_path / "lab")
    try:
        handle.lab.stop_proc(handle.agent)
        fio = tmp_path / "fio-real-clock"          # libfaketime breaks fio's clock threads: fio runs without it
        fio.write_text('#!/bin/sh\nunset LD_PRELOAD FAKETIME\nexec fio "$@"\n')
        fio.chmod(0o755)
        started = time.time()
        with monkeypatch.context() as m:      # only the agent started here runs with the skewed clock
            m.setenv("LD_PRELOAD", faketime_lib())
            # the monotonic clock moves by the same constant (with FAKETIME_DONT_FAKE_MONOTONIC, libfaketime
            # 0.9.10 breaks Python's sleep), which changes no duration
            m.setenv("FAKETIME", request.param)
            handle.agent = handle.lab.start_agent(handle.host, [f"{n}={d.path}" for n, d in handle.duts.items()],
                                                  extra=("--fio", str(fio)))
        handle.wait_registered(after=started)
        yield handle, float(request.param.removesuffix("s"))
    finally:
        handle.lab.stop()


def test_skewed_agent_steps_complete_and_hosts_shows_the_skew(skewed_lab: tuple[LabHandle, float]) -> None:
    handle, skew = skewed_lab
    assert "FAKETIME" not in os.environ
    d = handle.wait_run(handle.submit(QUICK_SUITE), timeout=90)
    assert d.run.state == "SUCCEEDED", (d.run.reason, [(st.name, st.state, st.reason) for st in d.steps])
    assert all(st.state == "SUCCEEDED" for st in d.steps)
    assert "ran past its deadline" not in handle.controller.log.read_text()
    shown = handle.labctl("hosts")
    assert shown.returncode == 0, shown.stderr
    with handle.sessions() as s:
        host = s.get(Host, handle.host)
        assert host is not None and host.clock_skew_s is not None
        measured = host.clock_skew_s
        # the real agent announced its Linux kinds with their versions (issue 25)
        assert host.step_kinds == {"app": 1, "fio": 3, "net": 2, "purge": 1}
    assert abs(measured - skew) < 5, measured              # measured at registration
    flat = " ".join(shown.stdout.split())
    assert f"{measured:+.1f}s (!)" in flat, shown.stdout
    assert (f"warning: the clock of host {handle.host} is {abs(measured):.1f}s "
            f"{'ahead of' if skew > 0 else 'behind'} the controller's") in flat, shown.stdout
