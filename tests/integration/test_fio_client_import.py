"""``labctl import-fio`` (issue 28, item 5): ``fio --client`` output of real ``fio --server`` processes (the fixture of
test_fio_client.py) stored as a run of a real lab (redis, controller, agent, web service) through its controller.
The stored results are the figures ``labctl analyze fio`` prints (IOPS, MB/s, merged-histogram percentiles), each
server's apart; the file is the steps' artifact, its sha256 recorded, and the result computed again from the stored
bytes is the stored one; importing it again changes nothing, with other options it is refused; hostile files are
refused with their reasons and nothing is stored; runs, run show, compare (directly and through --api) and the
HTML report show the run like any other."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from labcontract.fioresult import parse_fio_groups, parse_fio_output
from orchestrator.fiorun import parse_fio_file, result_of
from orchestrator.store.models import Artifact, Attempt, Result, Run, Step
from tests.conftest import LabHandle
from tests.integration.test_fio_client import client_outputs  # noqa: F401  (its fixture)
from tests.webfix import WebHandle, api_labctl, web  # noqa: F401

pytestmark = pytest.mark.integration

LAB = "vendor-x"


def counts(lab: LabHandle) -> dict[str, int]:
    with lab.sessions() as s:
        return {m.__tablename__: s.scalar(select(func.count()).select_from(m)) or 0
                for m in (Run, Step, Attempt, Result, Artifact)}


def artifact_files(lab: LabHandle) -> list[str]:
    root = lab.lab.root / "artifacts"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def imported(web: WebHandle, client_outputs: dict[str, bytes],  # noqa: F811
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("fioimport")
    files = {name: d / f"{name}.json" for name in client_outputs}
    for name, path in files.items():
        path.write_bytes(client_outputs[name])
    t = time.monotonic()
    r = web.lab.labctl("import-fio", str(files["two"]), "--device", "nvme0n1", "--host", "bench-07", "--lab", LAB,
                       "--note", "vendor's 2-server run")
    seconds = time.monotonic() - t
    assert r.returncode == 0, r.stdout + r.stderr
    rid = re.match(r"^(fio-[0-9a-f]{16}): imported", r.stdout)
    assert rid is not None, r.stdout
    return {"run": rid.group(1), "files": files, "dir": d, "seconds": seconds}


def analyze_line(path: Path) -> dict[str, str]:
    """The figures ``labctl analyze fio --groups`` prints, per name (the file, then each group)."""
    res = subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "analyze", "fio", str(path), "--groups"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return {line.strip().split(": ", 1)[0]: line.strip().split(": ", 1)[1].split(" [")[0]
            for line in res.stdout.splitlines()}


def printed(res: Result | dict[str, Any]) -> str:
    """A stored result as analyze fio prints figures (its metrics: a StepMetrics dump)."""
    m = res.metrics if isinstance(res, Result) else res
    c = m["combined"]
    pct = c["percentiles_ns"]

    def us(ns: float | None) -> str:
        return "-" if ns is None else f"{ns / 1000:,.1f}"
    return (f"{c['iops']:,.0f} IOPS (read {m['read']['iops']:,.0f}, write {m['write']['iops']:,.0f}), "
            f"{c['bw_bytes'] / 1e6:,.1f} MB/s, latency mean {us(c['lat_mean_ns'])} us, p50 {us(pct.get('p50'))}, "
            f"p99 {us(pct.get('p99'))}, p99.9 {us(pct.get('p99.9'))}, p99.99 {us(pct.get('p99.99'))}")


def test_the_stored_run_holds_the_figures_analyze_fio_prints(imported: dict[str, Any], web: WebHandle) -> None:  # noqa: F811
    path = imported["files"]["two"]
    raw = path.read_bytes()
    d = web.lab.detail(imported["run"])
    assert d.run.lab == LAB and d.run.state == "SUCCEEDED" and d.run.submitted_by == "labctl import-fio"
    assert (d.run.host, d.run.device) == ("bench-07", "nvme0n1")
    (step,) = d.steps
    assert step.kind == "measure" and step.name == "mix" and step.cell == {"op_mode": "stock", "profile": "mix"}
    res = d.results[step.id]
    m = parse_fio_output(raw, source=str(path))          # what analyze fio computes
    assert res.metrics == m.model_dump(mode="json")
    assert (res.iops, res.bw_bytes, res.lat_p99_ns) == (m.combined.iops, m.combined.bw_bytes,
                                                        m.combined.percentiles_ns["p99"])
    lines = analyze_line(path)
    assert printed(res) == lines[str(path)]
    groups = parse_fio_groups(raw)
    assert res.per_device is not None and len(res.per_device) == 2
    for server, sm in res.per_device.items():
        assert sm == groups[f"mix@{server}"].model_dump(mode="json")
        assert printed(sm) == lines[f"mix@{server}"]
    # the merged bins are the result's: their percentiles are the stored ones
    assert res.lat_hist is not None and set(res.lat_hist["per_device"]) == set(res.per_device)


def test_the_file_is_the_artifact_and_the_result_recomputes_from_it(imported: dict[str, Any],
                                                                     web: WebHandle) -> None:  # noqa: F811
    raw = imported["files"]["two"].read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    d = web.lab.detail(imported["run"])
    assert d.run.live is False          # no per-second snapshots: run show says "live telemetry off"
    (step,) = d.steps
    (art,) = step.attempts[-1].artifacts
    assert (art.name, art.sha256, art.size) == ("fio.json", sha, len(raw))
    stored = (web.lab.lab.root / "artifacts" / art.path).read_bytes()
    assert stored == raw
    res = d.results[step.id]
    src = res.provenance["imported_from"]
    assert (src["file"], src["sha256"], src["fio_version"]) == ("two.json", sha, json.loads(
        raw[raw.index(b"{"):])["fio version"])
    assert src["client"] is True and len(src["servers"]) == 2 and src["job_options"]["numjobs"] == "2"
    assert src["global_options"]["group_reporting"] == "1" and src["note"] == "vendor's 2-server run"
    again = result_of(parse_fio_file(stored, "fio.json"), parse_fio_file(stored, "fio.json").jobs[0],
                      res.provenance)
    for column in ("iops", "bw_bytes", "lat_mean_ns", "lat_p99_ns", "metrics", "per_device", "lat_hist"):
        assert getattr(again, column) == getattr(res, column), column


def test_a_second_import_changes_nothing_and_other_options_are_refused(imported: dict[str, Any],
                                                                        web: WebHandle) -> None:  # noqa: F811
    before, files = counts(web.lab), artifact_files(web.lab)
    path = str(imported["files"]["two"])
    r = web.lab.labctl("import-fio", path, "--device", "nvme0n1", "--host", "bench-07", "--lab", LAB,
                       "--note", "vendor's 2-server run")
    assert r.returncode == 0 and f"{imported['run']}: unchanged (imported before)" in r.stdout, r.stdout + r.stderr
    r = web.lab.labctl("import-fio", path, "--device", "nvme1n1", "--host", "bench-07", "--lab", LAB)
    assert r.returncode == 1 and "stored already with other content" in r.stdout, r.stdout + r.stderr
    r = web.lab.labctl("import-fio", path, "--device", "nvme0n1", "--host", "bench-07", "--lab", "other-lab")
    assert r.returncode == 1 and f"stored already as a run of lab '{LAB}'" in r.stdout, r.stdout + r.stderr
    assert counts(web.lab) == before and artifact_files(web.lab) == files


def test_hostile_files_are_refused_with_their_reasons_and_nothing_is_stored(imported: dict[str, Any],
                                                                             web: WebHandle) -> None:  # noqa: F811
    d: Path = imported["dir"]
    good = imported["files"]["one"].read_bytes()
    text = good[good.index(b"{"):].decode()
    doc = json.loads(text)
    entry = doc["client_stats"][0]
    bad = {
        "truncated.json": text[: len(text) // 2],
        "huge.json": text.replace(f'"total_ios" : {entry["read"]["total_ios"]}', '"total_ios" : 1' + "0" * 30, 1),
        "inf.json": json.dumps({**doc, "client_stats": [{**entry, "read": {**entry["read"], "iops": 1e999}}]}),
        "nan.json": json.dumps({**doc, "client_stats": [{**entry, "write": {**entry["write"], "bw_bytes": "NaN"}}]}
                               ).replace('"NaN"', "NaN"),
        "types.json": json.dumps({**doc, "client_stats": [{**entry, "read": {**entry["read"], "io_bytes": "4096"}}]}),
        "nojobs.json": json.dumps({"fio version": "fio-3.33", "timestamp": 1, "jobs": []}),
        "options.json": json.dumps({**doc, "global options": {"filename": "/dev/x\n[evil]"}}),
    }
    assert '"total_ios" : 1' + "0" * 30 in bad["huge.json"]
    paths = []
    for name, content in bad.items():
        (d / name).write_text(content)
        paths.append(str(d / name))
    before, files = counts(web.lab), artifact_files(web.lab)
    r = web.lab.labctl("import-fio", str(imported["files"]["one"]), *paths, "--device", "nvme0n1", "--host", "b",
                       "--lab", LAB)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{len(bad)} problems in the fio output, nothing imported" in r.stderr, r.stderr
    reasons = {"truncated.json": "invalid JSON at line", "huge.json": "an integer beyond ±2^64",
               "inf.json": "read.iops: expected a number, got inf", "nan.json": "expected a number, got nan",
               "types.json": "io_bytes: expected an integer, got '4096'", "nojobs.json": "fio reported no jobs",
               "options.json": "'global options'.filename: expected a string of at most"}
    for name, why in reasons.items():
        line = next((ln for ln in r.stderr.splitlines() if ln.strip().startswith(str(d / name))), "")
        assert why in line, (name, r.stderr)
    assert counts(web.lab) == before and artifact_files(web.lab) == files
    web.lab.check_alive()


def test_runs_run_show_compare_and_the_report_show_it(imported: dict[str, Any], web: WebHandle,  # noqa: F811
                                                      tmp_path: Path) -> None:
    lab = web.lab
    r = lab.labctl("import-fio", str(imported["files"]["one"]), "--device", "nvme0n1", "--host", "bench-07",
                   "--lab", LAB)
    assert r.returncode == 0, r.stdout + r.stderr
    one = r.stdout.split(":")[0]
    two = imported["run"]
    listed = lab.labctl("runs")
    assert listed.returncode == 0 and f"{LAB}: bench-07:nvme0n1" in listed.stdout, listed.stdout + listed.stderr
    shown = lab.labctl("run", "show", two)
    assert shown.returncode == 0, shown.stderr
    assert "Imported fio output" in shown.stdout and "file two.json" in shown.stdout, shown.stdout
    res = lab.detail(two).results[lab.detail(two).steps[0].id]
    assert f"{res.iops:,.0f}" in shown.stdout, shown.stdout
    cmp = lab.labctl("compare", two, one, "--format", "json")
    assert cmp.returncode == 0, cmp.stderr
    doc = json.loads(cmp.stdout)
    assert [x["lab"] for x in doc["runs"]] == [LAB, LAB] and len(doc["cells"]) == 1
    assert doc["cells"][0]["runs"][0]["iops"] == pytest.approx(res.iops)
    through_api = api_labctl(web, tmp_path)
    for args in (("runs",), ("run", "show", two), ("compare", two, one, "--format", "json")):
        local, remote = lab.labctl(*args), through_api(*args)
        assert remote.returncode == 0, remote.stderr
        if args[0] != "runs":
            assert remote.stdout == local.stdout, args
        else:
            assert f"{LAB}: bench-07:nvme0n1" in remote.stdout
    refused = through_api("import-fio", str(imported["files"]["one"]), "--device", "d", "--host", "h")
    assert refused.returncode == 2 and "labctl import-fio: not through --api" in refused.stderr, refused.stderr
    html = tmp_path / "r.html"
    rep = lab.labctl("report", two, one, "--html", str(html))
    assert rep.returncode == 0, rep.stderr
    page = html.read_text()
    assert "Imported fio output" in page and two in page and "two.json" in page
