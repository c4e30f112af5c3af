"""Host power on the embedded lab: an agent configured with a real Redfish service (sushy-static serving DMTF's
public mockup of a 1U server, tests/redfish.py) stores the step's power with its result and the reports show
IOPS per watt; an agent whose BMC hangs runs the step in the same time and says its power was not measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labcontract.power import HostPower
from orchestrator.power import efficiency
from tests.conftest import LabHandle, one_workload, start_lab
from tests.redfish import WATTS, redfish_mockup, silent_bmc


def bmc_file(d: Path, url: str, **extra: object) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "bmc-password").write_text("lab-bmc-password\n")
    f = d / "bmc.yaml"
    f.write_text(json.dumps({"url": url, "user": "storagelab", "password_file": str(d / "bmc-password"), **extra}))
    return f


def one_step(handle: LabHandle, runtime: int = 3) -> tuple[HostPower, float, float, str]:
    run_id = handle.submit(one_workload(runtime))
    detail = handle.wait_run(run_id)
    assert detail.run.state == "SUCCEEDED", detail.run.reason
    step = next(st for st in detail.steps if st.kind == "measure")
    res = detail.results[step.id]
    att = step.attempts[-1]
    assert att.fio_started_at is not None and att.fio_ended_at is not None
    power = HostPower.model_validate(res.provenance["power"])
    return power, att.fio_ended_at - att.fio_started_at, res.iops or 0.0, run_id


def test_power_from_a_redfish_bmc_and_iops_per_watt(tmp_path: Path, chromium: Any) -> None:
    with redfish_mockup(tmp_path / "sushy.log") as bmc:
        handle = start_lab(tmp_path / "lab", agent_extra=("--bmc", str(bmc_file(tmp_path / "cfg", bmc.url))))
        try:
            power, _seconds, iops, run_id = one_step(handle)
            assert power.measured and power.avg_w == WATTS and power.peak_w == WATTS
            assert power.reading == "Power.PowerControl" and power.samples >= 2 and power.coverage >= 0.5
            assert "lab-bmc-password" not in json.dumps(power.model_dump())
            detail = handle.detail(run_id)
            res = next(iter(detail.results.values()))
            assert efficiency(res)["iops_per_w"] == iops / WATTS
            out = handle.labctl("run", "show", run_id, check=True).stdout
            assert "IOPS/W" in out and "344 W avg" in out
            assert f"{iops / WATTS:,.1f}" in out
            compared = handle.labctl("compare", run_id, run_id, check=True).stdout
            assert "IOPS/W" in compared
            html = tmp_path / "report.html"
            done = handle.labctl("report", run_id, "--html", str(html))
            assert done.returncode == 0, done.stderr
            page = chromium.open(html)
            assert page.problems() == [], page.problems()
            (fig,) = page.of("power")
            assert fig.rows[0][1].startswith("344 W avg") and fig.rows[0][2] == f"{iops / WATTS:,.1f}"
            agent_log = handle.lab.root.joinpath("logs").glob("agent-*")
            assert not any("lab-bmc-password" in p.read_text(errors="replace") for p in agent_log)
        finally:
            handle.lab.stop()


def test_a_hung_bmc_leaves_the_step_timing_and_says_not_measured(tmp_path: Path) -> None:
    with silent_bmc() as url:
        handle = start_lab(tmp_path / "lab",
                           agent_extra=("--bmc", str(bmc_file(tmp_path / "cfg", url, timeout_s=5))))
        try:
            power, seconds, _iops, run_id = one_step(handle, runtime=2)
            assert not power.measured and power.error and "did not answer" in power.error
            assert seconds < 2 + 3            # fio's 2 s and its start, never the BMC's 5 s timeouts
            out = handle.labctl("run", "show", run_id, check=True).stdout
            assert "not measured" in out
        finally:
            handle.lab.stop()
