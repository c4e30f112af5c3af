"""Application suites (kind sysbench / pgbench / external): the schema, every problem at once, the built-in
suites, overrides and capacity checks (labcontract.appsuite via labcontract.suite.parse_suite)."""

from __future__ import annotations

import pytest

from labcontract.apps import ExternalParams, PgbenchParams, SysbenchParams
from labcontract.errors import SuiteError
from labcontract.suite import (
    builtin_suites,
    capacity_problems,
    load_suite,
    override_problems,
    parse_suite,
    steps_of,
    with_overrides,
)


def problems(text: str) -> list[str]:
    with pytest.raises(SuiteError) as e:
        parse_suite(text, "s.yaml")
    assert str(e.value).startswith("s.yaml: ")
    return [str(p) for p in e.value.problems]


def test_sysbench_suite_parses_with_durations_and_defaults() -> None:
    s = parse_suite("suite: oltp\nkind: sysbench\nop_modes: [stock, 'hp:20']\nphases: {purge: true}\n"
                    "sysbench: {threads: [2, 4], time: 1m, warmup: 5s}\n", "s.yaml")
    assert s.kind == "sysbench" and s.cells == () and s.devices == 1
    assert isinstance(s.app, SysbenchParams)
    assert s.app.threads == (2, 4) and s.app.time == 60 and s.app.warmup == 5 and s.app.tables == 8
    assert steps_of(s) == 2 * (1 + 1 + 2)          # per mode: purge, prepare, 2 points


def test_pgbench_section_may_be_left_out_and_external_needs_its_workload() -> None:
    s = parse_suite("suite: pg\nkind: pgbench\n", "s.yaml")
    assert isinstance(s.app, PgbenchParams) and s.app.clients == (2, 4, 8, 16, 32)
    e = parse_suite("suite: ext\nkind: external\nexternal: {workload: tpcc-like, params: {warehouses: 4}}\n", "s")
    assert isinstance(e.app, ExternalParams) and e.app.params == {"warehouses": 4}
    assert steps_of(e) == 1
    assert problems("suite: ext\nkind: external\n") == [
        "external: required key is missing (external: {workload: NAME, params: {...}, time: N}: a workload the "
        "agent's configuration declares)"]


def test_every_problem_at_once_named_by_key() -> None:
    got = problems("suite: x\nkind: sysbench\ndevices: 2\nprofiles: []\ndefaults: {bs: 4k}\n"
                   "phases: {precondition: {}}\nnetwork: {paths: [a]}\nop_modes: ['hp:99']\npgbench: {}\n"
                   "sysbench: {threads: [0, 10000], bogus: 1, time: 0}\n")
    assert "profiles: an application suite has no profiles: its workload is the `sysbench` section" in got
    assert any(p.startswith("defaults: ") for p in got)
    assert any(p.startswith("network: ") for p in got)
    assert any(p.startswith("phases.precondition: not available") for p in got)
    assert "pgbench: a section of kind pgbench, in a suite of kind sysbench" in got
    assert any(p.startswith("devices: a sysbench suite runs one database on exactly one DUT") for p in got)
    assert any(p.startswith("op_modes: ") for p in got)
    assert "sysbench.threads[0]: 0 is out of range (must be >= 1)" in got
    assert "sysbench.threads[1]: 10000 is out of range (must be <= 1024)" in got
    assert "sysbench.bogus: unknown key" in got
    assert "sysbench.time: 0 is out of range (must be >= 1)" in got
    assert not any(p == "sysbench.threads: must not be empty" for p in got)


@pytest.mark.parametrize(("text", "expected"), [
    ("suite: x\nkind: sysbench\nsysbench: {threads: [4, 4]}\n", "sysbench: threads repeats a value"),
    ("suite: x\nkind: pgbench\npgbench: {clients: []}\n", "pgbench.clients: must not be empty"),
    ("suite: x\nkind: pgbench\nunknown: 1\n", "unknown: unknown key"),
    ("suite: x\nkind: external\nexternal: {workload: w, params: {profile: a}}\n", "external: "),
    ("suite: x\nkind: nosuch\nprofiles: [{name: a, rw: read, bs: 4k}]\n", "kind: 'nosuch' is not a suite kind"),
    ("suite: x\nkind: sysbench\ncell_limit: 3\n", "cell_limit: the suite expands to 6 steps"),
    ("suite: x\nkind: sysbench\nretry: {max_attempts: 0}\n", "retry.max_attempts: 0 is out of range"),
])
def test_single_problems(text: str, expected: str) -> None:
    got = problems(text)
    assert any(p.startswith(expected) for p in got), got


def test_builtin_app_suites_follow_the_reviews() -> None:
    assert {"sysbench-oltp", "pgbench"} <= set(builtin_suites())
    sb = load_suite("sysbench-oltp")
    assert sb.kind == "sysbench" and sb.op_modes == ("hp:20",) and sb.phases.purge
    assert isinstance(sb.app, SysbenchParams) and sb.app.threads == (2, 4, 8, 16, 32)
    assert sb.app.test == "oltp_read_write" and sb.app.warmup > 0
    pg = load_suite("pgbench")
    assert isinstance(pg.app, PgbenchParams) and pg.app.clients == (2, 4, 8, 16, 32) and pg.app.builtin == "tpcb-like"


def test_overrides_set_time_and_scale_durations_never_data() -> None:
    s = load_suite("sysbench-oltp")
    assert isinstance(s.app, SysbenchParams)
    r = with_overrides(s, runtime=3).app
    assert isinstance(r, SysbenchParams) and (r.time, r.warmup, r.table_size) == (3, 0, s.app.table_size)
    h = with_overrides(s, scale=0.5).app
    assert isinstance(h, SysbenchParams) and (h.time, h.warmup) == (150, 30)
    assert override_problems(s, runtime=100_000, scale=None)[0].location == "--runtime"
    assert override_problems(s, runtime=3, scale=None) == []


def test_capacity_leaves_room_for_the_filesystem() -> None:
    s = load_suite("sysbench-oltp")
    assert capacity_problems(s, 10 << 30, "dev") == []
    got = capacity_problems(s, 70 << 20, "device d (/dev/x)")
    assert len(got) == 1 and got[0].location == "op_modes" and "hp:20" in got[0].message


def test_fio_suites_accept_kind_fio() -> None:
    s = parse_suite("suite: f\nkind: fio\nprofiles: [{name: a, rw: read, bs: 4k}]\n", "s")
    assert s.kind == "fio" and s.app is None and len(s.cells) == 1


def test_points_and_seconds_for_suite_validate_and_list() -> None:
    from labcontract.suite import measured_points, measured_seconds

    s = load_suite("sysbench-oltp")
    assert measured_points(s) == 5 and measured_seconds(s) == 5 * 360
    demo = load_suite("demo")
    assert measured_points(demo) == len(demo.cells) and measured_seconds(demo) == 25
