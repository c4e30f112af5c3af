"""labctl commands that need no running lab: suites (and how a built-in name is resolved), steady-state
analysis, compare / report / export on a store filled by the test, clean failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cmd.labctl import app

runner = CliRunner()


def test_analyze_steady_state_prints_the_verdict(tmp_path: Path) -> None:
    f = tmp_path / "rounds.csv"
    f.write_text("round,iops\n1,100000\n2,80000\n3,60000\n4,45000\n5,41000\n6,40000\n7,40500\n8,39800\n9,40100\n")
    res = runner.invoke(app, ["analyze", "steady-state", str(f)])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "steady at round 9"
    flat = tmp_path / "drift.csv"
    flat.write_text("\n".join(str(100 - 5 * i) for i in range(12)) + "\n")
    res = runner.invoke(app, ["analyze", "steady-state", str(flat)])
    assert res.exit_code == 0 and res.stdout.splitlines()[0] == "not steady"


def test_analyze_reports_every_bad_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.csv"
    f.write_text("iops\n1\nabc\n3\nx,y\n")
    res = runner.invoke(app, ["analyze", "steady-state", str(f)])
    assert res.exit_code == 1
    assert "line 3: not a number" in res.stderr and "line 5: not a number" in res.stderr


def test_analyze_changes_prints_each_change_or_no_change(tmp_path: Path) -> None:
    f = tmp_path / "history.csv"
    values = [100, 102, 99, 101, 100, 98, 101, 100, 99, 101, 80, 81, 79, 80, 82, 80, 79, 81, 80, 80]
    f.write_text("run,value\n" + "".join(f"r{i},{v}\n" for i, v in enumerate(values, 1)))
    res = runner.invoke(app, ["analyze", "changes", str(f)])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["change at row 11: 100.1 -> 80.20"]
    flat = tmp_path / "flat.csv"
    flat.write_text("value\n" + "".join(f"{100 + (i % 3)}\n" for i in range(20)))
    res = runner.invoke(app, ["analyze", "changes", str(flat)])
    assert res.exit_code == 0 and res.stdout.splitlines() == ["no change"]
    bad = tmp_path / "bad.csv"
    bad.write_text("iops\n1\n")
    res = runner.invoke(app, ["analyze", "changes", str(bad)])
    assert res.exit_code == 1 and "value" in res.stderr and "history too short" not in res.stdout


def test_suite_list_and_render_builtins() -> None:
    res = runner.invoke(app, ["suite", "list"])
    assert res.exit_code == 0
    for name in ("demo", "enterprise-synthetic", "pattern-125", "device-group"):
        assert name in res.stdout
    res = runner.invoke(app, ["suite", "render", "enterprise-synthetic", "--device", "/dev/sdx", "--scale", "0.05"])
    assert res.exit_code == 0, res.output
    assert res.stdout.count("### step") == 42
    assert "### step 0: purge purge.4k-random.r100" in res.stdout
    assert "### step 1: precondition precondition.4k-random.r100.round1 (further rounds until steady state)" \
        in res.stdout
    assert "runtime=3" in res.stdout and "filename=/dev/sdx" in res.stdout


def test_unknown_builtin_and_bad_suites_fail_with_reasons(tmp_path: Path) -> None:
    res = runner.invoke(app, ["suite", "validate", "nonesuch"])
    assert res.exit_code == 1 and "no built-in suite 'nonesuch'" in res.stderr
    big = tmp_path / "big.yaml"
    big.write_text("suite: big\ncell_limit: 10\nprofiles:\n  - {name: p, rw: randrw, sweep: "
                   "{rwmixread: [0, 50, 100], bs: [4k, 8k, 16k, 32k]}}\n  - {name: q, rw: read, bs: 4k, "
                   "rwmixread: 30, footprint: 120%}\n")
    res = runner.invoke(app, ["suite", "validate", str(big)])
    assert res.exit_code == 1
    err = res.stderr
    assert "profiles[1].rwmixread: contradicts rw=read" in err
    assert "profiles[1].footprint: footprint '120%' must be above 0% and at most 100%" in err
    assert "cell_limit: the suite expands to 12 steps (12 measured cells), over the limit of 10" in err
    assert err.splitlines()[0] == f"error: {big}: 3 problems in suite"


# --- built-in suite names are never hidden by the current directory ----------------------------------

def test_a_builtin_name_is_the_builtin_whatever_the_current_directory_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from labcontract.errors import SuiteError
    from labcontract.suite import builtin_suites, load_suite

    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()                          # a folder called demo: `labctl demo` used to fail here
    assert load_suite("demo").source == str(builtin_suites()["demo"])
    with pytest.raises(SuiteError, match=r"^\./demo: 1 problem in suite\n  \./demo: is a directory, not a suite file$"):
        load_suite("./demo")
    own = "suite: mine\nprofiles:\n  - {name: p, rw: read, bs: 4k}\n"
    (tmp_path / "pattern-125").write_text(own)           # a file named like a built-in: reached as a path
    assert load_suite("pattern-125").name == "pattern-125"
    assert load_suite("./pattern-125").name == "mine"
    assert load_suite(tmp_path / "pattern-125").name == "mine"
    (tmp_path / "nightly").write_text(own)               # a bare name that is not built in: the file
    assert load_suite("nightly").name == "mine"
    (tmp_path / "demo.yaml").write_text(own)             # a .yaml name is always a file
    assert load_suite("demo.yaml").name == "mine"
    res = runner.invoke(app, ["suite", "validate", "demo", "./pattern-125"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["demo: ok: suite demo, 5 cells, 5 steps, ~25s measured",
                                       "./pattern-125: ok: suite mine, 1 cells, 1 steps, ~60s measured"]


# --- compare, report, export on a store ------------------------------------------------------------

@pytest.fixture
def store(tmp_path: Path) -> list[str]:
    """Global options pointing labctl at a store holding a stock run, an HP run and one still running."""
    from tests.unit.test_compare import add_run, c4k, figures, make_store

    db = make_store(tmp_path / "store.sqlite")
    with db() as s:
        add_run(s, "stock-run", [(c4k(100), figures(1000.0)), (c4k(0), figures(400.0))], at=1.0)
        add_run(s, "hp-run", [(c4k(100, "hp:20"), figures(1500.0)), (c4k(0, "hp:20"), figures(600.0))], at=2.0)
        add_run(s, "busy-run", [(c4k(100), figures(900.0)), (c4k(0), None)], state="RUNNING", at=3.0)
        add_run(s, "other", [(c4k(100, profile="8k"), figures(1.0))], suite="other", at=4.0)
    return ["--lab-dir", str(tmp_path / "lab"), "--store", f"sqlite:///{tmp_path / 'store.sqlite'}"]


def test_compare_formats_and_refusals(store: list[str]) -> None:
    res = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "busy"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "A: stock-run" in out and "B: hp-run" in out and "C: busy-run" in out and "(partial: 1 of 2" in out
    assert "4K random read 100% 1T16Q (4k-random)" in out and "+50.0%" in out and "-10.0%" in out and "None" not in out
    assert "warning: run busy-run is RUNNING: partial" in res.stderr
    res = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--format", "json"])
    doc = json.loads(res.stdout)
    assert [c["runs"][1]["vs_first_pct"]["iops"] for c in doc["cells"]] == [50.0, 50.0]
    res = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--format", "csv"])
    assert res.stdout.splitlines()[0].startswith("cell,run_ref,run,suite,state,partial,step,op_mode,iops,")
    for args, message in (
            (["stock-run", "nope"], "error: no run 'nope' in the store"),
            (["stock-run"], "error: compare needs at least 2 runs, got 1"),
            (["stock-run", "other"], "error: no cell in common between stock-run (suite demo: 2 cells) and "
                                     "other (suite other: 1 cells)"),
            (["stock-run", "hp-run", "--format", "xml"], "error: --format: unknown format 'xml'")):
        res = runner.invoke(app, [*store, "compare", *args])
        assert res.exit_code == 2 and res.stderr.splitlines()[0].startswith(message), (args, res.output)
        assert len(res.stderr.splitlines()) == 1


def test_compare_takes_a_baseline_among_the_runs(store: list[str]) -> None:
    """``--baseline RUN`` (an id, a prefix or ``last``) puts that run first: A, what the others are judged against;
    one that is not compared is refused with the reason, as a usage error."""
    res = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--baseline", "hp"])
    assert res.exit_code == 0, res.output
    assert "A: hp-run" in res.stdout and "B: stock-run" in res.stdout and "-33.3%" in res.stdout
    doc = json.loads(runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--baseline", "hp-run",
                                         "--format", "json"]).stdout)
    assert [r["id"] for r in doc["runs"]] == ["hp-run", "stock-run"]
    assert [c["runs"][1]["vs_first_pct"]["iops"] for c in doc["cells"]] == pytest.approx([-100 / 3, -100 / 3])
    same = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--baseline", "stock-run"])
    assert same.stdout == runner.invoke(app, [*store, "compare", "stock-run", "hp-run"]).stdout
    res = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--baseline", "busy-run"])
    assert res.exit_code == 2 and res.stderr == ("error: baseline 'busy-run' is not one of the compared runs "
                                                 "(stock-run, hp-run)\n"), res.output
    res = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--baseline", "nope"])
    assert res.exit_code == 2 and res.stderr == "error: no run 'nope' in the store\n"


def test_compare_and_report_write_html(store: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "cmp.html"
    res = runner.invoke(app, [*store, "compare", "stock-run", "hp-run", "--html", str(page)])
    assert res.exit_code == 0, res.output
    assert f"HTML report: {page}" in res.stdout and "stock-run" in page.read_text() and "hp-run" in page.read_text()
    res = runner.invoke(app, [*store, "report", "busy-run", "--html", str(tmp_path / "one.html")])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [str(tmp_path / "one.html")]
    assert "warning: run busy-run is RUNNING: partial report" in res.stderr
    assert "busy-run" in (tmp_path / "one.html").read_text()
    res = runner.invoke(app, [*store, "report", "stock-run", "hp-run"])        # no --html: Markdown per run
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [str(tmp_path / "lab" / "reports" / f"{r}.md") for r in ("stock-run", "hp-run")]
    seen: list[Any] = []

    def fake_write_html(details: Any, path: Path, *, options: Any = None, **_: Any) -> None:
        seen.append(([d.run.id for d in details], path, options))

    import orchestrator.htmlreport

    monkeypatch.setattr(orchestrator.htmlreport, "write_html", fake_write_html)
    res = runner.invoke(app, [*store, "report", "stock-run", "hp-run", "--html", "x.html", "--markdown",
                              "--latency-cell", "4k-random rwmixread=100", "--latency-cell", "4k-random rwmixread=0"])
    assert res.exit_code == 0, res.output
    assert seen == [(["stock-run", "hp-run"], Path("x.html"),
                     {"latency_cells": "4k-random rwmixread=100,4k-random rwmixread=0"})]
    assert len(res.stdout.splitlines()) == 3                                    # the HTML path and two .md
    res = runner.invoke(app, [*store, "report", "nope", "--html", "x.html"])
    assert res.exit_code == 2 and res.stderr == "error: no run 'nope' in the store\n"
    monkeypatch.undo()
    res = runner.invoke(app, [*store, "report", "stock-run", "--html", str(tmp_path)])        # a directory
    assert res.exit_code == 2 and res.stderr == f"error: {tmp_path}: cannot write the HTML report: Is a directory\n"


def test_export_writes_tables(store: list[str], tmp_path: Path) -> None:
    res = runner.invoke(app, [*store, "export", "stock-run", "busy-run", "--format", "csv"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("run,suite,host,devices,step,kind,round,repeat,cell,dims,op_mode,") and len(lines) == 4
    assert "None" not in res.stdout
    res = runner.invoke(app, [*store, "export", "last", "--format", "json", "--output", str(tmp_path / "o"),
                              "--table", "all"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [str(tmp_path / "o" / "export.json")]
    assert json.loads((tmp_path / "o" / "export.json").read_text())["results"][0]["run"] == "other"
    res = runner.invoke(app, [*store, "export", "stock-run", "--format", "csv", "--table", "all"])
    assert res.exit_code == 2 and "give --output DIR" in res.stderr


@pytest.mark.parametrize("argv", [
    ["submit", "demo", "--host", "h", "--device", "d", "--priority", "2000000"],
    ["schedule", "add", "n", "demo", "--cron", "0 3 * * *", "--host", "h", "--device", "d", "--priority", "-1000001"],
    ["canary", "add", "h", "d", "--priority", "99999999999"],
    ["submit", "demo", "--host", "h", "--device", "d", "--repeat", "51"],
])
def test_out_of_range_priorities_and_repeats_are_refused_before_anything_is_read_or_sent(
        tmp_path: Path, argv: list[str]) -> None:
    """The command's own bounds are the protocol's (MAX_PRIORITY, MAX_REPEAT): a usage error naming the option,
    never a traceback from building the message, and no store is opened."""
    res = runner.invoke(app, ["--lab-dir", str(tmp_path / "nolab"), *argv])
    assert res.exit_code == 2, res.output
    assert "Invalid value" in res.output and ("--priority" in res.output or "--repeat" in res.output), res.output
    assert not (tmp_path / "nolab").exists()
