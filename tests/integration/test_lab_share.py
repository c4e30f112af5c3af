"""Labs that share results (issue 30): two real labs (redis, controller, agent, loop DUT each) run the quick suite;
lab B's export (``labctl export --format lab``) is imported into lab A's store through A's controller
(``labctl import``), and A's web service lists the runs with their lab, compare reads across the labs, a tampered
artifact refuses its run with the reason while the others go on, and importing again changes nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from orchestrator.store.models import Artifact, Attempt, NetGroup, PreconditionRecord, Result, Run, Step
from tests.conftest import QUICK_SUITE, LabHandle, start_lab
from tests.pg import PgServer, pg_server  # noqa: F401  (fixture, used by name)
from tests.webfix import WebHandle, api_labctl, web  # noqa: F401

LAB_B = "site-b"


@pytest.fixture(scope="module")
def lab_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    handle = start_lab(tmp_path_factory.mktemp("labb"), n_duts=2)
    yield handle
    handle.lab.stop()


@pytest.fixture(scope="module")
def shared(web: WebHandle, lab_b: LabHandle,  # noqa: F811
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run in lab A; two runs in lab B (one on each of its DUTs) and B's export of them (a directory and a
    .tar.gz)."""
    a_run = web.lab.submit(QUICK_SUITE)
    b_runs = [lab_b.submit(QUICK_SUITE, "dut0"), lab_b.submit(QUICK_SUITE, "dut1")]
    for rid in b_runs:
        assert lab_b.wait_run(rid, 120).run.state == "SUCCEEDED"
    assert web.lab.wait_run(a_run, 120).run.state == "SUCCEEDED"
    out = tmp_path_factory.mktemp("exports")
    for target in (out / "b", out / "b.tar.gz"):
        r = lab_b.labctl("export", *b_runs, "--format", "lab", "--lab", LAB_B, "--output", str(target))
        assert r.returncode == 0, r.stderr
    return {"a_run": a_run, "b_runs": b_runs, "dir": out / "b", "tar": out / "b.tar.gz", "tmp": out}


def store_counts(lab: LabHandle) -> dict[str, int]:
    with lab.sessions() as s:
        return {m.__tablename__: s.scalar(select(func.count()).select_from(m)) or 0
                for m in (Run, Step, Attempt, Result, Artifact, PreconditionRecord, NetGroup)}


def artifact_files(lab: LabHandle) -> list[str]:
    root = lab.lab.root / "artifacts"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_export_carries_everything_a_run_needs(shared: dict[str, Any], lab_b: LabHandle) -> None:
    doc = json.loads((shared["dir"] / "lab-export.json").read_text())
    assert doc["format"] == "storagelab-lab-export" and doc["lab"] == LAB_B
    assert [r["id"] for r in doc["runs"]] == shared["b_runs"]
    run = doc["runs"][0]
    stored = lab_b.detail(run["id"])
    assert len(run["steps"]) == len(stored.steps)
    measured = [at for st in run["steps"] for at in st["attempts"] if at["result"]]
    assert measured and all(at["result"]["provenance"] and at["artifacts"] for at in measured)
    for at in measured:
        for a in at["artifacts"]:
            assert (shared["dir"] / "artifacts" / a["sha256"]).stat().st_size == a["size"]


def test_tampered_artifact_refuses_its_run_and_the_others_go_on(shared: dict[str, Any], web: WebHandle,  # noqa: F811
                                                                 ) -> None:
    lab_a = web.lab
    doc = json.loads((shared["dir"] / "lab-export.json").read_text())
    shas = [{a["sha256"]: a["name"] for st in r["steps"] for at in st["attempts"] for a in at["artifacts"]}
            for r in doc["runs"]]
    only_second = sorted(set(shas[1]) - set(shas[0]))
    assert only_second, "the two runs share every artifact"
    tampered = shared["tmp"] / "tampered"
    shutil.copytree(shared["dir"], tampered)
    victim = tampered / "artifacts" / only_second[0]
    victim.write_bytes(victim.read_bytes().replace(b"\"", b"'", 1) + b" ")
    before = store_counts(lab_a)
    r = lab_a.labctl("import", str(tampered))
    assert r.returncode == 1, r.stdout + r.stderr
    first, second = shared["b_runs"]
    assert f"{first}: imported" in r.stdout
    refused = next(line for line in r.stdout.splitlines() if line.startswith(f"{second}: refused"))
    assert "sha256" in refused and only_second[0] in refused and "changed or damaged" in refused
    with lab_a.sessions() as s:
        assert s.get(Run, second) is None
        assert s.get(Run, first).lab == LAB_B
    assert store_counts(lab_a)["runs"] == before["runs"] + 1


def test_import_brings_the_runs_and_a_second_import_changes_nothing(shared: dict[str, Any], web: WebHandle,  # noqa: F811
                                                                     lab_b: LabHandle) -> None:
    lab_a = web.lab
    first, second = shared["b_runs"]
    r = lab_a.labctl("import", str(shared["dir"]))       # the export names its lab: no --lab needed
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{second}: imported" in r.stdout     # the first: imported by the tampered export's import when it ran
    assert f"{first}: unchanged" in r.stdout or f"{first}: imported" in r.stdout     # in this process before
    counts, files = store_counts(lab_a), artifact_files(lab_a)
    assert files and len(files) == len(set(files))
    for again in (shared["dir"], shared["tar"]):
        r = lab_a.labctl("import", str(again))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "0 imported, 2 unchanged, 0 refused" in r.stdout
        assert store_counts(lab_a) == counts and artifact_files(lab_a) == files
    r = lab_a.labctl("import", "--from-store", lab_b.store_url, "--from-artifacts",
                     str(lab_b.lab.root / "artifacts"), "--lab", LAB_B)      # the same runs, read from B's store
    assert r.returncode == 0 and "0 imported, 2 unchanged, 0 refused" in r.stdout, r.stdout + r.stderr
    r = lab_a.labctl("import", "--from-store", lab_b.store_url, "--from-artifacts",
                     str(lab_b.lab.root / "artifacts"), "--lab", LAB_B, "--run", first[:12])
    assert r.returncode == 0 and "0 imported, 1 unchanged, 0 refused" in r.stdout, r.stdout + r.stderr
    assert store_counts(lab_a) == counts
    listed = lab_a.labctl("runs")
    assert listed.returncode == 0 and f"{LAB_B}: testhost:" in listed.stdout, listed.stdout + listed.stderr
    for rid in shared["b_runs"]:     # every row as lab B holds it
        a, b = lab_a.detail(rid), shared_detail(shared, rid)
        assert a.run.lab == LAB_B and a.run.state == b["state"]
        assert sorted(a.results) == b["results"]


def shared_detail(shared: dict[str, Any], rid: str) -> dict[str, Any]:
    doc = json.loads((shared["dir"] / "lab-export.json").read_text())
    run = next(r for r in doc["runs"] if r["id"] == rid)
    return {"state": run["state"],
            "results": sorted(st["id"] for st in run["steps"] for at in st["attempts"] if at["result"])}


def test_hostile_run_from_the_wire_is_refused_and_the_controller_goes_on(shared: dict[str, Any],
                                                                          web: WebHandle) -> None:  # noqa: F811
    from labcontract.transport import redis_client
    from orchestrator.runs.client import ControllerClient

    client = ControllerClient(redis_client(web.lab.lab.labctl_url or web.lab.broker), timeout_s=30)
    bad = {"id": "r1", "suite_name": "x", "suite_source": "x", "suite_text": "", "suite_sha256": "0" * 64,
           "host": "h", "device": "/dev/x", "state": "RUNNING", "submitted_at": 1.0,
           "steps": [{"id": "other-run-s001", "seq": 0, "kind": "measure", "name": "n", "cell": {"x": 1e400},
                      "job_text": "", "state": "DISPATCHED"}]}
    reply = client.import_run("evil", json.dumps(bad).replace("Infinity", "1e400"))
    assert reply is not None and not reply.ok
    text = " ".join(reply.errors)
    assert "run.state" in text and "run.steps[0].state" in text, text
    reply = client.import_run("evil", "[not json")
    assert reply is not None and not reply.ok
    reply = client.import_artifact("fio.json", b"{}")
    assert reply is not None and reply.ok
    # a new run id whose step id is a step of lab A's run (run "r20261129" naming "r20261129-xxxxxx-s000")
    a_run = shared["a_run"]
    doc = json.loads((shared["dir"] / "lab-export.json").read_text())["runs"][0]
    taken = web.lab.detail(a_run).steps[0].id
    doc.update(id=a_run.split("-")[0], steps=[{**doc["steps"][0], "id": taken, "attempts": []}])
    reply = client.import_run("evil", json.dumps(doc))
    assert reply is not None and not reply.ok and "another run holds" in reply.errors[0], reply
    with web.lab.sessions() as s:
        assert s.get(Run, doc["id"]) is None
    web.lab.check_alive()


def imported(shared: dict[str, Any], web: WebHandle) -> None:  # noqa: F811
    """B's runs in A's store, whichever tests ran before in this process (importing again changes nothing)."""
    r = web.lab.labctl("import", str(shared["dir"]))
    assert r.returncode == 0, r.stdout + r.stderr


def test_web_lists_the_lab_and_compare_reads_across(shared: dict[str, Any], web: WebHandle) -> None:  # noqa: F811
    imported(shared, web)
    first = shared["b_runs"][0]
    with web.client("viewer") as c:
        runs = {r["id"]: r for r in c.get("/api/runs", params={"limit": 50}).json()["runs"]}
        assert runs[first]["lab"] == LAB_B and runs[shared["a_run"]]["lab"] == ""
        assert c.get(f"/api/runs/{first}").json()["lab"] == LAB_B
        page = c.get("/runs").text
        assert LAB_B in page
        js = c.get("/api/compare", params=[("run", shared["a_run"]), ("run", first), ("format", "json")])
        assert js.status_code == 200, js.text
        assert [r["id"] for r in js.json()["runs"]] == [shared["a_run"], first]
    r = web.lab.labctl("compare", shared["a_run"], first, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["lab"] for x in doc["runs"]] == ["", LAB_B]
    r = web.lab.labctl("compare", shared["a_run"], first)
    assert r.returncode == 0 and f"B: {first} (lab {LAB_B}, suite quick" in r.stdout, r.stdout + r.stderr


def test_reference_set_of_a_suite(shared: dict[str, Any], web: WebHandle, tmp_path: Path) -> None:  # noqa: F811
    """Lab A's run against every device measured with the suite: lab B's two DUTs (imported), figures equal to
    what compare reads of B's runs; through ``--api`` the same bytes, table and JSON, and the same refusal."""
    imported(shared, web)
    a_run, b_runs = shared["a_run"], shared["b_runs"]
    r = web.lab.labctl("compare", a_run, "--reference", "quick", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    ref = json.loads(r.stdout)
    assert sorted(d["run_id"] for d in ref["devices"]) == sorted(b_runs)
    assert {d["lab"] for d in ref["devices"]} == {LAB_B}
    r = web.lab.labctl("compare", a_run, *b_runs, "--format", "json")
    assert r.returncode == 0, r.stderr
    cmp = json.loads(r.stdout)
    cells = {c["cell"]: c["runs"] for c in cmp["cells"]}
    assert {f["metric"] for f in ref["figures"]} == {"iops", "mb_s", "lat_mean_us"}
    assert len(ref["figures"]) == 3 * len(cells)
    for f in ref["figures"]:
        mine, *others = (x[f["metric"]] for x in cells[f["cell"]])
        assert f["value"] == pytest.approx(mine) and f["n"] == 2
        assert (f["min"], f["max"]) == (pytest.approx(min(others)), pytest.approx(max(others)))
        assert f["median"] == pytest.approx(sum(others) / 2)
        better = sum((mine > o) if f["higher_is_better"] else (mine < o) for o in others)
        assert f["rank_pct"] == pytest.approx(better / 2 * 100)
    table = web.lab.labctl("compare", a_run, "--reference", "quick")
    assert table.returncode == 0 and "against 2 devices measured with quick" in table.stdout, table.stderr
    bad = web.lab.labctl("compare", a_run, "--reference", "no-such-suite")
    assert bad.returncode == 2 and "no device was measured with suite 'no-such-suite'" in bad.stderr, bad.stderr
    through_api = api_labctl(web, tmp_path)
    for args in (("--format", "json"), ()):
        local, remote = (run("compare", a_run, "--reference", "quick", *args) for run in (web.lab.labctl, through_api))
        assert remote.returncode == 0 and remote.stdout == local.stdout, (remote.stdout, remote.stderr)
    bad_api = through_api("compare", a_run, "--reference", "no-such-suite")
    assert bad_api.returncode == 2 and "no device was measured with suite 'no-such-suite'" in bad_api.stderr, \
        bad_api.stderr


def test_pages_in_the_browser(shared: dict[str, Any], web: WebHandle, chromium: Any) -> None:  # noqa: F811
    """The runs list, the compare page across labs (its charts drawn from the imported artifacts) and the
    reference set, as Chromium shows them: no console error, nothing failing to load."""
    imported(shared, web)
    problems: list[str] = []
    chromium.context.set_offline(False)
    page = chromium.context.new_page()
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(web.url)
               else (problems.append(f"leaving: {route.request.url}"), route.abort()))
    try:
        page.goto(f"{web.url}/login?next=/runs")
        page.fill("#token", web.tokens["viewer"])
        with page.expect_navigation():
            page.click("button[type=submit]")
        first = shared["b_runs"][0]
        row = page.locator("tr", has=page.locator(f"a[href='/runs/{first}']")).first.inner_text()
        assert LAB_B in row, row
        page.goto(f"{web.url}/compare?run={shared['a_run']}&run={first}", wait_until="load")
        assert f"(lab {LAB_B})" in page.inner_text("#chosen")
        frame = None
        for _ in range(600):
            frame = next((f for f in page.frames if "/compare/view?" in f.url), None)
            if frame is not None and frame.evaluate("() => document.querySelectorAll('figure.chart svg').length"):
                break
            page.wait_for_timeout(100)
        assert frame is not None
        drawn = frame.evaluate("() => [...document.querySelectorAll('figure.chart')].map(f => "
                               "f.querySelectorAll('svg path, svg circle, svg rect').length)")
        assert drawn and all(n > 0 for n in drawn), drawn
        page.goto(f"{web.url}/compare?run={shared['a_run']}&reference=quick", wait_until="load")
        rows = page.locator("#reference-figures tbody tr").all_inner_texts()
        assert rows and all("%" in r for r in rows), rows
        assert page.locator("#reference-devices li").count() == 2
        page.goto(f"{web.url}/compare?run={shared['a_run']}&reference=nothing-here", wait_until="load")
        assert "no device was measured" in page.inner_text("#reference-why")
        assert not problems, problems
    finally:
        page.close()
        chromium.context.clear_cookies()
        chromium.context.set_offline(True)


def test_import_into_a_postgresql_store(shared: dict[str, Any], pg_server: PgServer,  # noqa: F811
                                        tmp_path: Path) -> None:
    """A central lab on PostgreSQL: B's runs imported, a second import changes nothing, and the runs it holds
    export again as B exported them (every row kept as it came, but for their lab)."""
    central = start_lab(tmp_path / "central", store_url=pg_server.create_database("central"))
    try:
        r = central.labctl("import", str(shared["tar"]))
        assert r.returncode == 0 and "2 imported, 0 unchanged, 0 refused" in r.stdout, r.stdout + r.stderr
        counts = store_counts(central)
        r = central.labctl("import", str(shared["dir"]))
        assert r.returncode == 0 and "0 imported, 2 unchanged, 0 refused" in r.stdout, r.stdout + r.stderr
        assert store_counts(central) == counts
        again = tmp_path / "again"
        r = central.labctl("export", *shared["b_runs"], "--format", "lab", "--output", str(again))
        assert r.returncode == 0, r.stderr
        theirs = json.loads((shared["dir"] / "lab-export.json").read_text())["runs"]
        ours = json.loads((again / "lab-export.json").read_text())["runs"]
        assert [x.pop("lab") for x in ours] == [LAB_B, LAB_B] and [x.pop("lab") for x in theirs] == ["", ""]
        assert ours == theirs
    finally:
        central.lab.stop()
        central.sessions.kw["bind"].dispose()
