"""Planning application suites: step kinds, names, cells and the AppStart each step carries; cells' identity."""

from __future__ import annotations

from labcontract.apps import AppStart
from labcontract.suite import load_suite, parse_suite, steps_of
from orchestrator.cells import cell_key
from orchestrator.runs.planner import plan

TWO_MODES = ("suite: oltp\nkind: sysbench\nop_modes: [stock, 'hp:20']\nphases: {purge: true}\n"
             "sysbench: {threads: [2, 8], time: 30, warmup: 10}\n")


def test_sysbench_plan_per_op_mode_purge_prepare_then_points() -> None:
    s = parse_suite(TWO_MODES, "s")
    steps = plan(s, ["/dev/x"], device_bytes=10 << 30)
    assert [(p.kind, p.name) for p in steps] == [
        ("purge", "purge.stock"), ("app", "sysbench-prepare.stock"), ("app", "stock.oltp_read_write.t2"),
        ("app", "stock.oltp_read_write.t8"), ("purge", "purge.hp20"), ("app", "sysbench-prepare.hp20"),
        ("app", "hp20.oltp_read_write.t2"), ("app", "hp20.oltp_read_write.t8")]
    assert len(steps) == steps_of(s)
    assert [p.seq for p in steps] == list(range(len(steps)))
    prep = steps[5]
    assert prep.cell == {"op_mode": "hp:20", "app": "sysbench", "phase": "prepare"} and prep.workload is None
    start = AppStart.model_validate_json(prep.job_text)
    assert (start.kind, start.phase, start.point) == ("sysbench", "prepare", 0)
    assert start.fs_size_bytes == (10 << 30) * 80 // 100 >> 20 << 20
    point = steps[7]
    assert point.cell == {"op_mode": "hp:20", "profile": "oltp_read_write", "app": "sysbench", "threads": 8}
    run = AppStart.model_validate_json(point.job_text)
    assert run.phase == "run" and run.point == 8 and run.sysbench is not None and run.sysbench.threads == (8,)
    assert AppStart.model_validate_json(steps[2].job_text).fs_size_bytes is None      # stock: the whole DUT
    assert "80%" in point.note


def test_one_mode_names_without_prefix_and_unknown_size_is_said() -> None:
    steps = plan(load_suite("pgbench"), ["/dev/x"], runtime=2)
    assert [p.name for p in steps] == ["purge.hp20", "pgbench-prepare.hp20", "tpcb-like.c2", "tpcb-like.c4",
                                       "tpcb-like.c8", "tpcb-like.c16", "tpcb-like.c32"]
    assert steps[2].cell == {"op_mode": "hp:20", "profile": "tpcb-like", "app": "pgbench", "clients": 2}
    start = AppStart.model_validate_json(steps[3].job_text)
    assert start.pgbench is not None and start.pgbench.time == 2 and start.pgbench.warmup == 0
    assert start.fs_size_bytes is None and "unknown" in steps[3].note


def test_external_is_one_run_step_without_prepare() -> None:
    s = parse_suite("suite: e\nkind: external\nexternal: {workload: tpcc-like, params: {warehouses: 4}, time: 9}\n",
                    "s")
    (step,) = plan(s, ["/dev/x"], scale=2.0)
    assert (step.kind, step.name) == ("app", "tpcc-like")
    assert step.cell == {"warehouses": 4, "op_mode": "stock", "profile": "tpcc-like", "app": "external"}
    start = AppStart.model_validate_json(step.job_text)
    assert start.external is not None and start.external.time == 18 and start.point == 0


def test_provisioned_app_suite_gets_dut_state_per_mode() -> None:
    s = parse_suite("suite: p\nkind: sysbench\nphases: {provision: true}\nsysbench: {threads: [4]}\n", "s")
    steps = plan(s, ["/dev/x"])
    assert [p.kind for p in steps] == ["provision", "facts", "dut_state", "app", "app", "facts"]
    assert len(steps) == steps_of(s)


def test_points_of_stock_and_hp_runs_are_the_same_cell_and_prepare_is_not_a_point() -> None:
    stock = plan(parse_suite(TWO_MODES.replace("[stock, 'hp:20']", "[stock]"), "s"), ["/dev/x"])
    hp = plan(parse_suite(TWO_MODES.replace("[stock, 'hp:20']", "['hp:20']"), "s"), ["/dev/x"])
    assert cell_key(stock[2].cell) == cell_key(hp[2].cell)
    assert dict(cell_key(stock[2].cell))["threads"] == "2"
    assert "phase" not in dict(cell_key(stock[1].cell))
    assert cell_key(stock[2].cell) != cell_key(stock[3].cell)
