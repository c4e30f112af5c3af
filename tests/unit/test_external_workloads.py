"""External workload declarations (agents.workloads): the file is validated strictly at agent start, every
problem named with its key; a start's parameters are checked against the declared schema."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.workloads import Workloads, load, parse
from labcontract.apps import ExternalParams
from labcontract.errors import ConfigError

GOOD = """
workloads:
  - name: ioping-latency
    command: [/bin/true, --mode, latency]
    timeout_s: 600
    destructive: false
    params:
      count: {type: int, min: 1, max: 1000, default: 100}
      size: {type: str, pattern: "^[0-9]+[kKmM]?$", max_length: 8, default: "4k"}
      direct: {type: bool, default: true}
      rate: {type: float, min: 0.5, max: 10}
      label: {type: str, required: true}
  - name: writer
    command: [/bin/true]
    timeout_s: 60
    destructive: true
"""


def good() -> Workloads:
    return parse(GOOD, "w.yaml")


def test_a_good_file_declares_its_workloads(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(GOOD)
    w = load(f)
    assert w.names == ("ioping-latency", "writer")
    decl = w.by_name["ioping-latency"]
    assert decl.command == ("/bin/true", "--mode", "latency") and decl.timeout_s == 600 and not decl.destructive
    assert decl.spec() == {"name": "ioping-latency", "command": ["/bin/true", "--mode", "latency"],
                           "timeout_s": 600, "destructive": False}


def test_an_empty_file_declares_nothing() -> None:
    assert parse("", "w.yaml").names == ()
    assert parse("workloads: []\n", "w.yaml").names == ()


@pytest.mark.parametrize(("text", "expected"), [
    ("workloads: [{name: a, command: [rel/path], timeout_s: 1, destructive: false}]", "absolute path"),
    ("workloads: [{name: a, command: [], timeout_s: 1, destructive: false}]", "command"),
    ("workloads: [{name: a, command: /bin/sh -c 'x', timeout_s: 1, destructive: false}]", "command"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 0, destructive: false}]", "timeout_s"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1}]", "destructive"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: 'yes'}]", "destructive"),
    ("workloads: [{name: 'a b', command: [/bin/true], timeout_s: 1, destructive: false}]", "name"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false, shell: true}]", "shell"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false,"
     " params: {n: {type: int, min: 5, max: 1}}}]", "above max"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false,"
     " params: {n: {type: list}}}]", "params.n.type"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false,"
     " params: {n: {type: int, default: 0, min: 1}}}]", "default 0"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false,"
     " params: {n: {type: str, pattern: '('}}}]", "not a regular expression"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false,"
     " params: {n: {type: bool, min: 1}}}]", "min / max apply"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false,"
     " params: {'9x': {type: int}}}]", "params"),
    ("workloads: [{name: a, command: [/bin/true], timeout_s: 1, destructive: false},"
     " {name: a, command: [/bin/true], timeout_s: 1, destructive: false}]", "declared twice: a"),
    ("workloads: {a: 1}", "workloads"),
    ("{", "not YAML"),
    ("other: 1", "other"),
])
def test_each_kind_of_bad_entry_is_named(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(text, "/etc/lab/w.yaml")
    assert "/etc/lab/w.yaml" in str(e.value) and expected in str(e.value)


def test_every_problem_is_reported_at_once_with_its_workload() -> None:
    text = ("workloads:\n"
            "  - {name: first, command: [bin/x], timeout_s: 1, destructive: false}\n"
            "  - {name: second, command: [/bin/true], timeout_s: -1, destructive: false}\n")
    with pytest.raises(ConfigError) as e:
        parse(text, "w.yaml")
    msg = str(e.value)
    assert "workloads[0] (first)" in msg and "absolute path" in msg
    assert "workloads[1] (second).timeout_s" in msg


def test_a_command_that_is_not_executable_stops_the_start(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\n")
    f.write_text(f"workloads: [{{name: a, command: [{script}], timeout_s: 1, destructive: false}},"
                 f" {{name: b, command: [{tmp_path}/missing], timeout_s: 1, destructive: false}}]\n")
    with pytest.raises(ConfigError) as e:
        load(f)
    assert f"{script} is not an executable file" in str(e.value) and "missing is not" in str(e.value)
    os.chmod(script, 0o755)
    f.write_text(f"workloads: [{{name: a, command: [{script}], timeout_s: 1, destructive: false}}]\n")
    assert load(f).names == ("a",)


def test_an_unreadable_or_huge_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 << 20))
    with pytest.raises(ConfigError, match="limit"):
        load(big)


def test_params_are_checked_against_the_schema_with_every_problem() -> None:
    w = good()
    decl, values, problems = w.resolve(ExternalParams(workload="ioping-latency", params={"label": "x", "rate": 2}))
    assert decl is not None and problems == []
    assert values == {"count": 100, "size": "4k", "direct": True, "rate": 2.0, "label": "x"}
    _, _, problems = w.resolve(ExternalParams(workload="ioping-latency", params={
        "count": 0, "size": "4 k;rm", "direct": 1, "rate": "fast", "bogus": 1}))
    text = "\n".join(problems)
    assert len(problems) == 6, problems
    for expected in ("'bogus' is unknown", "'count'", "below the minimum 1", "'size'", "does not match",
                     "'direct'", "expected a bool", "'rate'", "expected a number", "'label'", "is required"):
        assert expected in text


def test_int_params_refuse_floats_and_bools() -> None:
    w = good()
    for bad in (1.5, True):
        _, _, problems = w.resolve(ExternalParams(workload="ioping-latency", params={"label": "x", "count": bad}))
        assert problems and "expected an int" in problems[0]
    _, _, problems = w.resolve(ExternalParams(workload="ioping-latency", params={"label": "x", "count": 5000}))
    assert "above the maximum 1000" in problems[0]


def test_an_undeclared_workload_is_refused_with_the_declared_names() -> None:
    decl, _, problems = good().resolve(ExternalParams(workload="hammerdb"))
    assert decl is None and "'hammerdb' is not declared" in problems[0] and "ioping-latency, writer" in problems[0]
    _, _, problems = Workloads().resolve(ExternalParams(workload="hammerdb"))
    assert "declared: none" in problems[0]


def test_the_facts_carry_the_schema_but_never_the_command() -> None:
    facts = good().facts()
    assert [f["name"] for f in facts] == ["ioping-latency", "writer"]
    assert "command" not in facts[0] and facts[0]["params"]["count"] == {"type": "int", "default": 100, "min": 1,
                                                                        "max": 1000}
    assert facts[1] == {"name": "writer", "timeout_s": 60, "destructive": True, "description": "", "params": {}}


def test_a_bad_declarations_file_stops_the_agent_at_its_start(tmp_path: Path) -> None:
    from agents.cmd.agent import AgentOptions, main

    bad = tmp_path / "workloads.yaml"
    bad.write_text("workloads: [{name: a, command: [sh, -c, 'x'], timeout_s: 1, destructive: false}]\n")
    with pytest.raises(ConfigError) as e:
        main(AgentOptions(broker_url="redis://127.0.0.1:1/0", state_dir=tmp_path, dut_specs=(), host="h1",
                          app_workloads=bad))
    assert str(bad) in str(e.value) and "absolute path" in str(e.value)
