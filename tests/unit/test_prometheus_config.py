"""deploy/prometheus and dashboards/: promtool accepts the config and the rules, the rules pass their
unit tests, the committed dashboards are what the generator makes, and every query names only
series of the telemetry contract (labcontract.telemetry)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate as G
from labcontract import telemetry as T
from orchestrator.labctl.promtargets import controller_targets, write_file_sd

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
RULE_TESTS = sorted((PROM_DIR / "tests").glob("*.yml"))
PROMTOOL = "/usr/bin/promtool"
UIDS = {"lab-overview.json": "lab-overview", "live-run.json": "lab-live-run",
        "network-paths.json": "lab-network-paths", "live-app.json": "lab-live-app"}


def promtool(*args: str, cwd: Path | None = None) -> str:
    """Run promtool; fail with its output when it fails, or when it is not installed."""
    exe = PROMTOOL if Path(PROMTOOL).exists() else shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not installed: `make test` installs it (Debian package prometheus)")
    res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    output = res.stdout + res.stderr
    if res.returncode != 0:
        pytest.fail(f"promtool {' '.join(args)} exited with {res.returncode}:\n{output}")
    return output


def rule_groups() -> list[dict[str, Any]]:
    return [g for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]]


def rules() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"]]


def recording_names() -> set[str]:
    return {r["record"] for r in rules() if "record" in r}


def dashboards() -> dict[str, dict[str, Any]]:
    return {name: json.loads((ROOT / "dashboards" / name).read_text())
            for name in {**G.DASHBOARDS, **G.APP_DASHBOARDS}}


def all_exprs() -> Iterator[tuple[str, str]]:
    """(where, expr) of every rule, panel query, annotation and variable query."""
    for r in rules():
        yield f"rule {r.get('record') or r.get('alert')}", r["expr"]
    for name, d in dashboards().items():
        for title, expr in G.panel_queries(d):
            yield f"{name}: panel {title!r}", expr
        for title, expr in G.annotation_queries(d):
            yield f"{name}: annotation {title!r}", expr
        for var, selector, _label in G.variable_queries(d):
            yield f"{name}: variable {var}", selector


# --- promtool -------------------------------------------------------------------------------------

def test_promtool_checks_the_config_with_target_files(tmp_path: Path) -> None:
    copy = tmp_path / "prometheus"
    shutil.copytree(PROM_DIR, copy)
    write_file_sd(copy / "targets" / "agents.json", [{"targets": ["dut-host-01:9464"], "labels": {"host": "h1"}}])
    write_file_sd(copy / "targets" / "controller.json", controller_targets("lab-ctl:9465"))
    out = promtool("check", "config", str(copy / "prometheus.yml"))
    assert "WARNING" not in out, out
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in out, out


def test_promtool_checks_the_rules() -> None:
    out = promtool("check", "rules", *map(str, RULE_FILES))
    assert out.count("SUCCESS") == len(RULE_FILES), out


def test_rule_unit_tests_pass() -> None:
    assert RULE_TESTS
    out = promtool("test", "rules", *map(str, RULE_TESTS), cwd=ROOT)
    assert out.count("SUCCESS") == len(RULE_TESTS), out


def test_every_rule_has_a_unit_test() -> None:
    tested_exprs: set[str] = set()
    firing: set[str] = set()
    loaded: set[str] = set()
    for f in RULE_TESTS:
        doc = yaml.safe_load(f.read_text())
        loaded |= {str((f.parent / r).resolve()) for r in doc["rule_files"]}
        for t in doc["tests"]:
            tested_exprs |= {c["expr"] for c in t.get("promql_expr_test", [])}
            firing |= {c["alertname"] for c in t.get("alert_rule_test", []) if c.get("exp_alerts")}
    assert loaded == {str(f.resolve()) for f in RULE_FILES}
    for name in recording_names():
        assert any(re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", e) for e in tested_exprs), \
            f"recording rule {name} has no promql_expr_test"
    alerts = {r["alert"] for r in rules() if "alert" in r}
    assert alerts == {"LabAgentDown", "LabStepStalled", "LabPreconditioningNotConverging", "LabLatencyHigh",
                      "LabControllerDegraded", "LabControllerSetAside"}
    assert alerts <= firing, f"alerts never tested firing: {alerts - firing}"


def test_the_config_scrapes_agents_each_second_from_file_sd() -> None:
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    assert cfg["global"]["scrape_interval"] == "15s"
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert jobs["lab-agents"]["scrape_interval"] == "1s"
    assert jobs["lab-agents"]["file_sd_configs"] == [{"files": ["targets/agents.json"], "refresh_interval": "30s"}]
    assert jobs["lab-controller"]["scrape_interval"] == "5s"
    assert jobs["lab-controller"]["file_sd_configs"][0]["files"] == ["targets/controller.json"]
    assert sorted(cfg["rule_files"]) == sorted(f"rules/{f.name}" for f in RULE_FILES)


def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query (variables substituted) as the expression of a recording rule."""
    values = {"host": "h1", "device": "/dev/nvme0n1", "run": "r20261121-02e5e9", "path": "mpath"}
    exprs = [(where, G.substitute(e, values)) for where, e in all_exprs()]
    doc = {"groups": [{"name": "dashboard-queries", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, (_where, e) in enumerate(exprs)]}]}
    f = tmp_path / "queries.yml"
    f.write_text(yaml.safe_dump(doc))
    promtool("check", "rules", str(f))


# --- dashboards ----------------------------------------------------------------------------------

def test_committed_dashboards_are_generated() -> None:
    assert G.check() == []
    assert G.main(["--check"]) == 0


def test_check_reports_a_stale_dashboard(tmp_path: Path) -> None:
    for name, text in G.generated().items():
        (tmp_path / name).write_text(text)
    assert G.check(tmp_path) == []
    (tmp_path / "live-run.json").write_text(G.generated()["live-run.json"].replace("IOPS", "iops"))
    (problem,) = G.check(tmp_path)
    assert "live-run.json" in problem and "differs" in problem


def test_dashboards_have_stable_uids_and_the_lab_datasource() -> None:
    for name, d in dashboards().items():
        assert d["uid"] == UIDS[name] and d["schemaVersion"] == 38 and d["id"] is None
        panels = list(G._panels(d["panels"]))
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        for p in panels:
            assert p["datasource"] == {"type": "prometheus", "uid": "lab-prometheus"}, (name, p["title"])
            assert p["targets"], (name, p["title"])
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "lab-prometheus", (name, p["title"])
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs))
            gp = p["gridPos"]
            assert gp["x"] >= 0 and gp["x"] + gp["w"] <= 24 and gp["h"] > 0
        for v in d["templating"]["list"]:
            assert v["datasource"]["uid"] == "lab-prometheus" and v["type"] == "query"
        for a in d["annotations"]["list"]:
            if "expr" in a:
                assert a["datasource"]["uid"] == "lab-prometheus"
    variables = {name: [v["name"] for v in d["templating"]["list"]] for name, d in dashboards().items()}
    assert variables == {"lab-overview.json": ["host"], "live-run.json": ["run", "host", "device"],
                         "network-paths.json": ["host", "path", "run"], "live-app.json": ["run", "host", "device"]}


def test_run_selection_joins_lab_step_info() -> None:
    d = dashboards()["live-run.json"]
    per_second = [e for _t, e in G.panel_queries(d) if "lab_fio_" in e]
    assert per_second
    for e in per_second:
        assert "* on (host) group_left (run, step, suite) lab_step_info{run=~\"$run\"" in e, e


def test_provisioning_points_at_the_lab_datasource_and_the_dashboards() -> None:
    ds = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/lab.yml").read_text())
    (source,) = ds["datasources"]
    assert source["uid"] == "lab-prometheus" and source["type"] == "prometheus"
    assert source["jsonData"]["timeInterval"] == "1s"
    prov = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards/lab.yml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].endswith("/dashboards")


# --- the telemetry contract -----------------------------------------------------------------------

_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_TOKEN = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SELECTOR = re.compile(r"\b(lab_\w+)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
CONTRACT = {m.sample_name: m for m in (*T.AGENT_METRICS, *T.CONTROLLER_METRICS)}
TARGET_LABELS = {"job", "instance"}


def lab_names(expr: str) -> set[str]:
    """Metric and recording-rule names (``lab_...``, ``lab:...``) in a PromQL expression."""
    bare = _STRING.sub('""', expr)
    return {t for t in _TOKEN.findall(bare) if t.startswith(("lab_", "lab:"))}


def test_lab_names_parses_names_not_strings() -> None:
    assert lab_names('sum by (host) (rate(lab_fio_ios_total{job="lab_x"}[5s])) / lab:fio_iops:rate5s') == \
        {"lab_fio_ios_total", "lab:fio_iops:rate5s"}


def test_every_metric_used_is_in_the_contract() -> None:
    known = set(CONTRACT) | recording_names()
    used: set[str] = set()
    for where, expr in all_exprs():
        names = lab_names(expr)
        unknown = names - known
        assert not unknown, f"{where}: {sorted(unknown)} not in labcontract.telemetry: {expr}"
        used |= names
    # the dashboards and rules together use the whole contract
    assert set(CONTRACT) - used == set(), f"metrics no dashboard or rule uses: {set(CONTRACT) - used}"


def test_labels_used_exist_on_the_metrics() -> None:
    for where, expr in all_exprs():
        bare = _STRING.sub('""', expr)
        for metric, matchers in _SELECTOR.findall(bare):
            labels = set(CONTRACT[metric].labels) | TARGET_LABELS
            for label in _MATCHER.findall(matchers):
                assert label in labels, f"{where}: {metric} has no label {label}: {expr}"
        in_expr = {lbl for n in lab_names(expr) if n in CONTRACT for lbl in CONTRACT[n].labels}
        if re.search(r"\bup\{", bare):
            in_expr.add("host")          # the file_sd target label of job lab-agents
        for group in _GROUPING.findall(bare):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in in_expr | TARGET_LABELS, f"{where}: no metric of the query has label {label}: {expr}"


def test_metrics_doc_lists_every_metric() -> None:
    doc = G.metrics_doc()
    for name in CONTRACT:
        assert f"| `{name}` |" in doc
    assert doc in (ROOT / "docs" / "telemetry.md").read_text()


# --- substitute ---------------------------------------------------------------------------------

def test_substitute_replaces_variables_like_grafana() -> None:
    expr = 'rate(lab_fio_ios_total{host=~"$host", device=~"${device}"}[$__rate_interval]) and [[run]]'
    assert G.substitute(expr, {"host": "h1", "device": "/tmp/dut0-1.img", "run": "r1"}) == \
        'rate(lab_fio_ios_total{host=~"h1", device=~"/tmp/dut0-1\\\\.img"}[5s]) and r1'
    assert G.substitute('x{host=~"$host"}[$__interval]', {"host": ["a", "b.c"], "__interval": "2s"}) == \
        'x{host=~"(a|b\\\\.c)"}[2s]'
    assert G.substitute('x{host=~"$host"}', {"host": ".*"}) == 'x{host=~".*"}'
    assert G.substitute('x{host=~"$hostname"}', {"hostname": "n", "host": "h"}) == 'x{host=~"n"}'
    with pytest.raises(KeyError, match="device"):
        G.substitute('x{device=~"$device"}', {})
