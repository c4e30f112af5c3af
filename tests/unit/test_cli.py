"""labctl commands that need no running lab: suites, steady-state analysis, clean failures."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app

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
