"""Application workloads end to end through a real lab (redis, controller, agent, loop DUT): the built-in
sysbench-oltp (real mariadbd + sysbench) and pgbench (real postgres + pgbench) suites, the worked external
example (ioping), reports / compare / export of their results, and what an agent SIGKILLed mid-sysbench leaves
(nothing: no server running, the DUT unmounted)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.labs.lab import wait_for
from orchestrator.store.models import Host
from tests.chromium import Chromium
from tests.conftest import LabHandle, start_lab

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="application steps make a filesystem on the DUT and mount it"),
    pytest.mark.skipif(not all(shutil.which(b) for b in ("sysbench", "pgbench", "mariadbd", "ioping")),
                       reason="make test installs mariadb-server, sysbench, postgresql and ioping"),
]

SMALL_SYSBENCH = """\
suite: small-sysbench
kind: sysbench
op_modes: [stock, "hp:20"]
sysbench: {tables: 2, table_size: 2000, threads: [2, 4], time: 2, warmup: 0, buffer_pool_mb: 64, log_file_mb: 16}
"""


@pytest.fixture(scope="module")
def applab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """One host with one 3 GiB loop DUT (the built-in suites' InnoDB log is 1 GiB) and the worked external
    example declared."""
    root = tmp_path_factory.mktemp("applab")
    decl = root / "workloads.yaml"
    text = (ROOT / "examples/external/workloads.yaml").read_text()
    decl.write_text(text.replace("/usr/local/lib/storagelab/ioping_workload.py",
                                 str(ROOT / "examples/external/ioping_workload.py")))
    handle = start_lab(root / "lab", size_mib=3072, agent_extra=("--app-workloads", str(decl)))
    yield handle
    handle.lab.stop()


def mounts_of(dut: str) -> list[str]:
    """Lines of /proc/self/mountinfo that mount ``dut`` (its source device is the field after " - fstype")."""
    real = os.path.realpath(dut)
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split(" - ", 1)[-1].split()[1:2] == [real]]


def servers_under(root: Path) -> list[str]:
    """Command lines of running mariadbd / postgres processes whose arguments name a path under ``root``."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("mariadbd" in cmd or "postgres" in cmd) and str(root) in cmd:
            out.append(f"{p.name}: {cmd}")
    return out


def labctl_ok(lab: LabHandle, *args: str) -> str:
    res = lab.labctl(*args)
    assert res.returncode == 0, f"labctl {' '.join(args)}:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def submit_builtin(lab: LabHandle, name: str, *extra: str) -> str:
    out = labctl_ok(lab, "submit", name, "--host", lab.host, "--device", "dut0", *extra)
    return out.strip().splitlines()[-1]


@pytest.mark.timeout(900)
def test_sysbench_oltp_builtin_runs_end_to_end(applab: LabHandle, tmp_path: Path, chromium: Chromium) -> None:
    run_id = submit_builtin(applab, "sysbench-oltp", "--runtime", "2", "--scale", "0.002")
    d = applab.wait_run(run_id, timeout=900)
    assert d.run.state == "SUCCEEDED", (d.run.reason, [(s.name, s.state, s.reason) for s in d.steps])
    points = [s for s in d.steps if s.kind == "app" and s.cell.get("threads")]
    assert sorted(s.cell["threads"] for s in points) == [2, 4, 8, 16, 32]
    for s in points:
        res = d.results[s.id]
        m = res.metrics["metrics"]
        assert res.kind == "sysbench" and res.tool == "sysbench" and res.throughput_unit == "TPS"
        assert m["tps"] > 0 and res.throughput == pytest.approx(m["tps"])
        assert m["lat_p99_ms"] >= m["lat_avg_ms"] > 0 and m["lat_p95_ms"] <= m["lat_p99_ms"]
        assert res.series and len(res.series["tps"]) >= 1
        assert res.provenance["op_mode"] == "hp:20"
        assert not (res.fio_version or "").startswith("sysbench")
    assert not mounts_of(applab.duts["dut0"].path), "the DUT was left mounted"
    assert not servers_under(applab.lab.root), "a database server was left running"
    shown = labctl_ok(applab, "run", "show", run_id)
    assert "TPS" in shown and "oltp_read_write" in shown
    export = labctl_ok(applab, "export", run_id, "--format", "csv")
    assert "tps" in export.splitlines()[0]
    html = tmp_path / "sysbench.html"
    labctl_ok(applab, "report", run_id, "--html", str(html))
    page = chromium.open(html)           # as people see it: every chart drawn with data, nothing else loaded
    assert page.problems() == [], "\n".join(page.problems())
    assert "apps" in page.kinds() and page.figures, sorted(page.kinds())


@pytest.mark.timeout(900)
def test_pgbench_builtin_runs_end_to_end_and_compares(applab: LabHandle, tmp_path: Path, chromium: Chromium) -> None:
    run_a = submit_builtin(applab, "pgbench", "--runtime", "2", "--scale", "0.005")
    da = applab.wait_run(run_a, timeout=900)
    assert da.run.state == "SUCCEEDED", (da.run.reason, [(s.name, s.state, s.reason) for s in da.steps])
    points = [s for s in da.steps if s.kind == "app" and s.cell.get("clients")]
    assert sorted(s.cell["clients"] for s in points) == [2, 4, 8, 16, 32]
    for s in points:
        res = da.results[s.id]
        m = res.metrics["metrics"]
        assert res.kind == "pgbench" and m["tps"] > 0 and m["lat_p99_ms"] >= m["lat_avg_ms"] > 0
        assert res.series and sum(res.series["tps"]) > 0
    assert not mounts_of(applab.duts["dut0"].path)
    assert not servers_under(applab.lab.root)
    run_b = submit_builtin(applab, "pgbench", "--runtime", "2", "--scale", "0.005")
    assert applab.wait_run(run_b, timeout=900).run.state == "SUCCEEDED"
    cmp = json.loads(labctl_ok(applab, "compare", run_a, run_b, "--format", "json"))
    assert cmp, "no cell in common between two runs of one suite"
    html = tmp_path / "cmp.html"
    labctl_ok(applab, "compare", run_a, run_b, "--html", str(html))
    page = chromium.open(html)
    assert page.problems() == [], "\n".join(page.problems())
    assert "apps" in page.kinds(), sorted(page.kinds())


def test_external_example_runs(applab: LabHandle) -> None:
    suite = ("suite: ioping\nkind: external\n"
             "external: {workload: ioping-latency, params: {count: 20, size: 4k}, time: 30}\n")
    run_id = applab.submit(suite)
    d = applab.wait_run(run_id, timeout=300)
    assert d.run.state == "SUCCEEDED", (d.run.reason, [(s.name, s.state, s.reason) for s in d.steps])
    (res,) = d.results.values()
    assert res.kind == "external" and res.tool
    m = res.metrics["metrics"]
    assert m["lat_avg_ms"] > 0 and m["requests"] == 20


def test_external_workload_not_declared_or_bad_params_is_refused(applab: LabHandle) -> None:
    for suite, needle in (
            ("suite: x1\nkind: external\nexternal: {workload: not-declared}\n", "not-declared"),
            ("suite: x2\nkind: external\nexternal: {workload: ioping-latency, params: {count: 0}}\n", "count")):
        run_id = applab.submit(suite)
        d = applab.wait_run(run_id, timeout=120)
        assert d.run.state == "FAILED"
        assert any(needle in s.reason for s in d.steps), [s.reason for s in d.steps]


def test_bad_app_suites_are_refused_with_every_problem(applab: LabHandle, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("suite: bad\nkind: sysbench\nsysbench: {threads: [0, 10000], tables: 0}\n"
                   "profiles: [{name: x, rw: read, bs: 4k}]\n")
    res = applab.labctl("submit", str(bad), "--host", applab.host, "--device", "dut0")
    assert res.returncode != 0
    err = res.stderr + res.stdout
    for needle in ("threads", "tables", "profiles"):
        assert needle in err, err
    res = applab.labctl("submit", "sysbench-oltp", "--host", applab.host, "--device", "nope")
    assert res.returncode != 0 and "nope" in res.stderr + res.stdout


def test_sysbench_on_a_mounted_dut_is_refused_and_nothing_is_left(applab: LabHandle, tmp_path: Path) -> None:
    dut = applab.duts["dut0"].path
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mkfs.ext4", "-F", "-q", dut], check=True)
    subprocess.run(["mount", dut, str(mnt)], check=True)
    try:
        run_id = applab.submit(SMALL_SYSBENCH)
        d = applab.wait_run(run_id, timeout=300)
        assert d.run.state == "FAILED"
        assert any("mounted" in s.reason for s in d.steps), [s.reason for s in d.steps]
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
        subprocess.run(["wipefs", "--all", "--quiet", dut], check=True)   # not the lab's filesystem: ours to undo
    assert not servers_under(applab.lab.root)


def test_a_db_that_cannot_start_fails_clearly_and_leaves_nothing(applab: LabHandle) -> None:
    # an InnoDB redo log larger than the DUT's filesystem: mariadbd refuses to start
    suite = SMALL_SYSBENCH.replace("log_file_mb: 16", "log_file_mb: 500000").replace("[stock, \"hp:20\"]", "[stock]")
    run_id = applab.submit(suite)
    d = applab.wait_run(run_id, timeout=600)
    assert d.run.state == "FAILED"
    prepare, *points = d.steps
    assert "mariadbd exited" in prepare.reason and "InnoDB" in prepare.reason, prepare.reason
    assert all(p.reason.startswith(f"not run: its prepare step {prepare.name} failed") for p in points), \
        [p.reason for p in points]
    assert not mounts_of(applab.duts["dut0"].path)
    assert not servers_under(applab.lab.root)


@pytest.mark.timeout(900)
def test_agent_sigkilled_mid_sysbench_leaves_no_server_and_the_dut_unmounted(applab: LabHandle) -> None:
    suite = SMALL_SYSBENCH.replace("time: 2", "time: 20").replace("[stock, \"hp:20\"]", "[stock]")
    run_id = applab.submit(suite)

    def measuring() -> bool:
        d = applab.detail(run_id)
        running = [s for s in d.steps if s.state == "RUNNING" and s.cell.get("threads")]
        return bool(running) and bool(servers_under(applab.lab.root))
    wait_for(measuring, 300, "a sysbench point measuring with its server up")

    def live_tps() -> float:          # the agent's live status: what the exporter and `labctl watch` show
        raw = applab.redis().get(f"lab:live:{applab.host}")
        apps = [st.get("app") or {} for st in json.loads(raw or "[]")]
        return max((a.get("tps") or 0.0 for a in apps), default=0.0)
    wait_for(live_tps, 60, "live TPS of the running point")

    with applab.sessions() as s:
        host = s.get(Host, applab.host)
        address = host.facts.get("metrics_address") if host is not None else None
    assert address, "the agent announced no exporter"

    def scraped_tps() -> bool:       # what Prometheus scrapes from the agent while the point runs
        body = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
        return any(line.startswith("lab_app_tps{") and float(line.rsplit(" ", 1)[1]) > 0
                   for line in body.splitlines())
    wait_for(scraped_tps, 60, "lab_app_tps on the agent's /metrics")
    os.kill(applab.agent.popen.pid, signal.SIGKILL)
    applab.agent.popen.wait()
    applab.restart_agent()
    d = applab.wait_run(run_id, timeout=600)
    assert d.run.state in ("SUCCEEDED", "FAILED"), d.run.state
    wait_for(lambda: not servers_under(applab.lab.root), 60, "no database server left")
    assert not mounts_of(applab.duts["dut0"].path)
