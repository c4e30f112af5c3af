"""Generate the lab's Grafana dashboards (Grafana 10.x, schemaVersion 38) from code.

    python -m dashboards.generate              # write dashboards/*.json
    python -m dashboards.generate --check      # exit 1 if the committed JSON (or the metrics table of
                                               # docs/telemetry.md) differs from what this code generates
    python -m dashboards.generate --metrics-doc   # print the metrics table (Markdown) of labcontract.telemetry

Every query reads the Prometheus data source of uid ``lab-prometheus``
(dashboards/provisioning/datasources/lab.yml) and only the series of :mod:`labcontract.telemetry`.
Run, step and suite names are not labels of the per-second series: a query selects a run by
joining with ``lab_step_info`` on host (:data:`JOIN`).

Pure Python, no network. The tests evaluate every panel query against a real Prometheus fed by a
real run (tests/integration/test_telemetry_prometheus.py), through :func:`panel_queries` and
:func:`substitute`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labcontract import telemetry as T

JSON = dict[str, Any]

DASHBOARD_DIR = Path(__file__).resolve().parent
DOCS_TELEMETRY = DASHBOARD_DIR.parent / "docs" / "telemetry.md"
DATASOURCE_UID = "lab-prometheus"
DATASOURCE: JSON = {"type": "prometheus", "uid": DATASOURCE_UID}
SCHEMA_VERSION = 38
TAG = "storagelab"

#: The run selection: attach run, step and suite of the host's running step, keeping only run $run.
JOIN = ' * on (host) group_left (run, step, suite) lab_step_info{run=~"$run"}'
#: Windows of the counters the controller exports (scraped every 5 s): fixed, wide enough for a few samples.
CONTROLLER_WINDOW = "1m"


# --- panels -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Q:
    """One query of a panel."""

    expr: str
    legend: str = "__auto"
    instant: bool = False
    table: bool = False


def _targets(queries: Sequence[Q]) -> list[JSON]:
    out: list[JSON] = []
    for i, q in enumerate(queries):
        t: JSON = {"datasource": DATASOURCE, "editorMode": "code", "expr": q.expr,
                   "legendFormat": q.legend, "range": not q.instant, "instant": q.instant,
                   "refId": chr(ord("A") + i)}
        if q.table:
            t["format"] = "table"
        out.append(t)
    return out


def _field_defaults(unit: str, *, decimals: int | None = None, min_: float | None = None,
                    max_: float | None = None, mappings: list[JSON] | None = None,
                    thresholds: list[JSON] | None = None, custom: JSON | None = None) -> JSON:
    d: JSON = {"unit": unit, "color": {"mode": "palette-classic"},
               "mappings": mappings or [],
               "thresholds": {"mode": "absolute",
                              "steps": thresholds or [{"color": "green", "value": None}]}}
    if decimals is not None:
        d["decimals"] = decimals
    if min_ is not None:
        d["min"] = min_
    if max_ is not None:
        d["max"] = max_
    if custom is not None:
        d["custom"] = custom
    return d


def _line_custom(*, stepped: bool = False, stack: bool = False, log_scale: bool = False, fill: int = 10) -> JSON:
    return {"drawStyle": "line", "lineInterpolation": "stepAfter" if stepped else "linear", "lineWidth": 1,
            "fillOpacity": fill, "gradientMode": "none", "showPoints": "never", "pointSize": 4,
            "spanNulls": False, "axisPlacement": "auto", "axisLabel": "", "axisCenteredZero": False,
            "scaleDistribution": {"type": "log", "log": 10} if log_scale else {"type": "linear"},
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            "thresholdsStyle": {"mode": "off"}, "hideFrom": {"legend": False, "tooltip": False, "viz": False}}


def timeseries(title: str, queries: Sequence[Q], *, unit: str = "short", description: str = "",
               stepped: bool = False, stack: bool = False, log_scale: bool = False,
               overrides: list[JSON] | None = None, calcs: Sequence[str] = ("mean", "max", "lastNotNull"),
               min_: float | None = 0) -> JSON:
    return {"type": "timeseries", "title": title, "description": description, "datasource": DATASOURCE,
            "fieldConfig": {"defaults": _field_defaults(unit, min_=None if log_scale else min_,
                                                        custom=_line_custom(stepped=stepped, stack=stack,
                                                                            log_scale=log_scale)),
                            "overrides": overrides or []},
            "options": {"legend": {"showLegend": True, "displayMode": "table", "placement": "bottom",
                                   "calcs": list(calcs)},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": _targets(queries)}


def stat(title: str, queries: Sequence[Q], *, unit: str = "short", description: str = "",
         calc: str = "lastNotNull", mappings: list[JSON] | None = None, thresholds: list[JSON] | None = None,
         color_mode: str = "value", decimals: int | None = None) -> JSON:
    return {"type": "stat", "title": title, "description": description, "datasource": DATASOURCE,
            "fieldConfig": {"defaults": _field_defaults(unit, mappings=mappings, thresholds=thresholds,
                                                        decimals=decimals),
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": [calc], "fields": "", "values": False},
                        "orientation": "auto", "textMode": "auto", "colorMode": color_mode, "graphMode": "area",
                        "justifyMode": "auto", "text": {}},
            "targets": _targets(queries)}


def gauge(title: str, queries: Sequence[Q], *, unit: str, min_: float, max_: float, description: str = "") -> JSON:
    return {"type": "bargauge", "title": title, "description": description, "datasource": DATASOURCE,
            "fieldConfig": {"defaults": _field_defaults(unit, min_=min_, max_=max_, decimals=0),
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                        "valueMode": "color", "minVizHeight": 10, "minVizWidth": 0, "text": {}},
            "targets": _targets(queries)}


def table(title: str, queries: Sequence[Q], *, columns: Sequence[str], description: str = "") -> JSON:
    """A table of an instant query's label values (``columns`` in that order, nothing else)."""
    index = {c: i for i, c in enumerate(columns)}
    return {"type": "table", "title": title, "description": description, "datasource": DATASOURCE,
            "fieldConfig": {"defaults": {"custom": {"align": "auto", "cellOptions": {"type": "auto"},
                                                    "inspect": False},
                                         "mappings": [],
                                         "thresholds": {"mode": "absolute",
                                                        "steps": [{"color": "green", "value": None}]}},
                            "overrides": []},
            "options": {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"],
                                                                           "fields": ""}},
            "transformations": [{"id": "labelsToFields", "options": {"mode": "columns"}},
                                {"id": "merge", "options": {}},
                                {"id": "filterFieldsByName",
                                 "options": {"include": {"names": list(columns)}}},
                                {"id": "organize", "options": {"indexByName": index, "excludeByName": {},
                                                               "renameByName": {}}}],
            "targets": _targets([Q(q.expr, q.legend, instant=True, table=True) for q in queries])}


UP_MAPPINGS: list[JSON] = [{"type": "value", "options": {
    "0": {"text": "DOWN", "color": "red", "index": 0},
    "1": {"text": "up", "color": "green", "index": 1}}}]


def state_timeline(title: str, queries: Sequence[Q], *, description: str = "",
                   mappings: list[JSON] | None = None, thresholds: list[JSON] | None = None) -> JSON:
    return {"type": "state-timeline", "title": title, "description": description, "datasource": DATASOURCE,
            "fieldConfig": {"defaults": {**_field_defaults("short", mappings=mappings, thresholds=thresholds),
                                         "color": {"mode": "thresholds"},
                                         "custom": {"fillOpacity": 80, "lineWidth": 0, "spanNulls": False,
                                                    "hideFrom": {"legend": False, "tooltip": False,
                                                                 "viz": False}}},
                            "overrides": []},
            "options": {"showValue": "auto", "mergeValues": True, "alignValue": "left", "rowHeight": 0.9,
                        "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "single", "sort": "none"}},
            "targets": _targets(queries)}


def right_axis(ref_id: str, *, unit: str, label: str) -> JSON:
    """An override: the series of query ``ref_id`` on the right axis, as steps."""
    return {"matcher": {"id": "byFrameRefID", "options": ref_id},
            "properties": [{"id": "unit", "value": unit},
                           {"id": "custom.axisPlacement", "value": "right"},
                           {"id": "custom.axisLabel", "value": label},
                           {"id": "custom.lineInterpolation", "value": "stepAfter"},
                           {"id": "custom.fillOpacity", "value": 0},
                           {"id": "custom.lineWidth", "value": 2}]}


# --- dashboards -----------------------------------------------------------------------------------

@dataclass
class Board:
    """A dashboard under construction: panels placed left to right in rows 24 units wide."""

    uid: str
    title: str
    description: str
    variables: list[JSON] = field(default_factory=list)
    annotations: list[JSON] = field(default_factory=list)
    panels: list[JSON] = field(default_factory=list)
    time_from: str = "now-30m"
    _x: int = 0
    _y: int = 0
    _row_h: int = 0

    def add(self, panel: JSON, w: int, h: int) -> None:
        if self._x + w > 24:
            self._x, self._y, self._row_h = 0, self._y + self._row_h, 0
        self.panels.append({"id": len(self.panels) + 1, "gridPos": {"h": h, "w": w, "x": self._x, "y": self._y},
                            **panel})
        self._x += w
        self._row_h = max(self._row_h, h)

    def json(self) -> JSON:
        return {
            "annotations": {"list": [
                {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                 "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
                 "type": "dashboard"},
                *self.annotations]},
            "description": self.description,
            "editable": True,
            "fiscalYearStartMonth": 0,
            "graphTooltip": 1,
            "id": None,
            "links": [{"type": "dashboards", "tags": [TAG], "asDropdown": True, "title": "Lab dashboards",
                       "includeVars": False, "keepTime": True, "targetBlank": False, "icon": "external link",
                       "tooltip": "", "url": ""}],
            "liveNow": False,
            "panels": self.panels,
            "refresh": "5s",
            "schemaVersion": SCHEMA_VERSION,
            "tags": [TAG],
            "templating": {"list": self.variables},
            "time": {"from": self.time_from, "to": "now"},
            "timepicker": {"refresh_intervals": ["5s", "10s", "30s", "1m", "5m", "15m"]},
            "timezone": "",
            "title": self.title,
            "uid": self.uid,
            "version": 1,
            "weekStart": "",
        }


def query_variable(name: str, label: str, metric: str, label_name: str, *, multi: bool = True,
                   sort: int = 1) -> JSON:
    """A query variable over ``label_values(metric, label_name)``; multi-valued ones offer All (regex .*)."""
    definition = f"label_values({metric}, {label_name})"
    var: JSON = {"type": "query", "name": name, "label": label, "datasource": DATASOURCE,
                 "definition": definition,
                 "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
                 "refresh": 2, "regex": "", "sort": sort, "hide": 0, "skipUrlSync": False,
                 "multi": multi, "includeAll": multi, "current": {}, "options": []}
    if multi:
        var["allValue"] = ".*"
        var["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return var


def prometheus_annotation(name: str, expr: str, *, title: str, text: str, color: str, step: str = "5s") -> JSON:
    return {"name": name, "datasource": DATASOURCE, "enable": True, "hide": False, "iconColor": color,
            "expr": expr, "step": step, "titleFormat": title, "textFormat": text, "tagKeys": "host",
            "useValueForTime": False}


HOST = 'host=~"$host"'
HOST_DEVICE = 'host=~"$host", device=~"$device"'


def lab_overview() -> JSON:
    b = Board("lab-overview", "Lab overview",
              "Agents, the controller's queue and store, and what each host runs now.")
    b.variables = [query_variable("host", "Host", T.CTRL_AGENT_UP.sample_name, "host")]
    b.add(stat("Agents up", [Q(f"sum({T.CTRL_AGENT_UP.sample_name}{{{HOST}}})", "up"),
                             Q(f"count({T.CTRL_AGENT_UP.sample_name}{{{HOST}}})", "known")],
               description="Hosts that heartbeated within the heartbeat timeout, of the hosts the controller knows."),
          6, 4)
    b.add(stat("Queue length", [Q(T.CTRL_QUEUE.sample_name, "queued runs")],
               description="Runs waiting to start (QUEUED).",
               thresholds=[{"color": "green", "value": None}, {"color": "yellow", "value": 10}]), 6, 4)
    b.add(stat("Reservations", [Q(T.CTRL_RESERVATIONS.sample_name, "devices")],
               description="Devices held by running runs."), 6, 4)
    b.add(stat("Last agent error", [Q(f"max by (host) ({T.AGENT_LAST_ERROR.sample_name}{{{HOST}}}) * 1000",
                                      "{{host}}")],
               unit="dateTimeFromNow", description="When each agent last logged an error (none since its start: -).",
               mappings=[{"type": "value", "options": {"0": {"text": "-", "color": "green", "index": 0}}}],
               color_mode="none"), 6, 4)
    b.add(state_timeline("Agent up per host",
                         [Q(f"max by (host) ({T.CTRL_AGENT_UP.sample_name}{{{HOST}}})", "{{host}} heartbeat"),
                          Q(f"max by (host) ({T.AGENT_UP.sample_name}{{{HOST}}})"
                            f' or max by (host) (up{{job="lab-agents", {HOST}}})', "{{host}} exporter")],
                         description="heartbeat: the controller heard the agent within its heartbeat timeout; "
                                     "exporter: Prometheus scrapes the agent's exporter (lab_agent_up, or up "
                                     "when the scrape fails).",
                         mappings=UP_MAPPINGS,
                         thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}]), 12, 8)
    b.add(timeseries("Heartbeat age",
                     [Q(f"max by (host) ({T.CTRL_AGENT_HEARTBEAT_AGE.sample_name}{{{HOST}}})", "{{host}} controller"),
                      Q(f"max by (host) ({T.AGENT_HEARTBEAT_AGE.sample_name}{{{HOST}}})", "{{host}} agent")],
                     unit="s", description="Seconds since the controller last heard each host, and since each "
                                           "agent last published a heartbeat."), 12, 8)
    b.add(table("Running step per host",
                [Q(f"max by (host, run, step, suite, phase) ({T.STEP_INFO.sample_name}{{{HOST}}})")],
                columns=("host", "run", "step", "suite", "phase"),
                description="From lab_step_info: the steps running now."), 12, 7)
    b.add(gauge("Step progress per host",
                [Q(f"max by (host) ({T.STEP_ELAPSED.sample_name}{{{HOST}}})"
                   f" / max by (host) ({T.STEP_EXPECTED.sample_name}{{{HOST}}})", "{{host}}")],
                unit="percentunit", min_=0, max_=1,
                description="Elapsed / planned length (runtime + ramp) of the running step."), 12, 7)
    b.add(timeseries("Runs by state", [Q(f"sum by (state) ({T.CTRL_RUNS.sample_name})", "{{state}}")],
                     stepped=True, calcs=("lastNotNull",)), 8, 8)
    b.add(timeseries("Steps by state", [Q(f"sum by (state) ({T.CTRL_STEPS.sample_name})", "{{state}}")],
                     stepped=True, calcs=("lastNotNull",)), 8, 8)
    b.add(timeseries("Steps completed and failed per minute",
                     [Q(f"sum(increase({T.CTRL_STEPS_COMPLETED.sample_name}[{CONTROLLER_WINDOW}]))", "completed"),
                      Q(f"sum(increase({T.CTRL_STEPS_FAILED.sample_name}[{CONTROLLER_WINDOW}]))", "failed")],
                     description="Steps that ended over the last minute.",
                     overrides=[{"matcher": {"id": "byName", "options": "failed"},
                                 "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]}]),
          8, 8)
    b.add(timeseries("fio processes per host",
                     [Q(f"max by (host) ({T.AGENT_FIO_RUNNING.sample_name}{{{HOST}}})", "{{host}}")],
                     stepped=True, description="Processes (fio or purge) each agent runs."), 24, 6)
    b.add(timeseries("Controller waiting out transient faults",
                     [Q(f"max by (kind) ({T.CTRL_DEGRADED.sample_name})", "{{kind}} degraded"),
                      Q(f"sum by (kind) (increase({T.CTRL_TRANSIENT_FAULTS.sample_name}[{CONTROLLER_WINDOW}]))",
                        "{{kind}} failed passes / min")],
                     stepped=True, description="1 while the controller waits for its store or Redis (full disk, "
                                               "lock, restart; alert LabControllerDegraded after 1 min), and "
                                               "its loop passes that failed on such a fault."), 24, 6)
    return b.json()


def live_run() -> JSON:
    b = Board("lab-live-run", "Live run",
              "The running steps of one run, second by second: IOPS, bandwidth and latency per device and "
              "direction, the preconditioning curve and the position on the thread x queue-depth ladder.",
              time_from="now-15m")
    b.variables = [
        query_variable("run", "Run", T.STEP_INFO.sample_name, "run", multi=False, sort=2),
        query_variable("host", "Host", f'{T.STEP_INFO.sample_name}{{run=~"$run"}}', "host"),
        query_variable("device", "Device", f"{T.FIO_IOS.sample_name}{{{HOST}}}", "device"),
    ]
    round_ = f"{T.PRECONDITION_ROUND.sample_name}{{{HOST}}}"
    info = f'{T.STEP_INFO.sample_name}{{run=~"$run", {HOST}}}'
    b.annotations = [
        prometheus_annotation(
            "Step starts", f"max by (host, run, step) ({info} unless {info} offset 5s)",
            title="{{step}}", text="step {{step}} of {{run}} starts on {{host}}", color="#8AB8FF"),
        prometheus_annotation(
            "Precondition rounds",
            f"max by (host) ({round_} != {round_} offset 5s or ({round_} unless {round_} offset 5s))",
            title="precondition round", text="a precondition round starts on {{host}}", color="#FF9830"),
    ]
    b.add(table("Step", [Q(f"max by (host, run, step, suite, phase) ({info})")],
                columns=("host", "run", "step", "suite", "phase")), 12, 5)
    b.add(state_timeline("Phase",
                         [Q(f"max by (host, phase) (({T.STEP_PHASE.sample_name}{{{HOST}}} == 1){JOIN})",
                            "{{host}} {{phase}}")],
                         description="The phase of the running step: purge, precondition or measure."), 12, 5)
    ios = f"rate({T.FIO_IOS.sample_name}{{{HOST_DEVICE}}}[$__rate_interval])"
    b.add(timeseries("IOPS per device and direction",
                     [Q(f"sum by (host, device, direction) ({ios}){JOIN}", "{{device}} {{direction}}")],
                     unit="iops"), 12, 9)
    bw = f"rate({T.FIO_BYTES.sample_name}{{{HOST_DEVICE}}}[$__rate_interval])"
    b.add(timeseries("Bandwidth per device and direction",
                     [Q(f"sum by (host, device, direction) ({bw}){JOIN}", "{{device}} {{direction}}")],
                     unit="Bps"), 12, 9)
    b.add(timeseries("Latency per device and direction: mean, p99, max",
                     [Q(f"max by (host, device, direction) ({m.sample_name}{{{HOST_DEVICE}}}){JOIN}",
                        f"{label} {{{{device}}}} {{{{direction}}}}")
                      for label, m in (("mean", T.FIO_LAT_MEAN), ("p99", T.FIO_LAT_P99), ("max", T.FIO_LAT_MAX))],
                     unit="s", log_scale=True,
                     description="Total I/O latency over each interval of about 1 s (fio's status reports); "
                                 "p99 and max to fio's histogram bin resolution."), 24, 9)
    b.add(timeseries("Preconditioning curve: IOPS and round",
                     [Q(f"sum by (host, device) ({ios})"
                        ' * on (host) group_left (run, step, suite) '
                        f'{T.STEP_INFO.sample_name}{{run=~"$run", phase="precondition"}}', "{{device}} IOPS"),
                      Q(f"max by (host) ({round_}){JOIN}", "{{host}} round")],
                     unit="iops",
                     description="Read + write IOPS of the precondition rounds, with the round number on the "
                                 "right axis: the burst at the start and the fall to steady state.",
                     overrides=[right_axis("B", unit="none", label="round")]), 16, 9)
    b.add(stat("Precondition round", [Q(f"max by (host) ({round_}){JOIN}", "{{host}}")], decimals=0), 8, 9)
    tq = [Q(f"max by (host, device) ({m.sample_name}{{{HOST_DEVICE}}}){JOIN}", f"{{{{device}}}} {label}")
          for label, m in (("threads", T.FIO_THREADS), ("iodepth", T.FIO_IODEPTH))]
    tq.append(Q(f"max by (host, device) ({T.FIO_THREADS.sample_name}{{{HOST_DEVICE}}}"
                f" * {T.FIO_IODEPTH.sample_name}{{{HOST_DEVICE}}}){JOIN}", "{{device}} outstanding I/Os"))
    b.add(timeseries("Thread x queue-depth ladder", tq, stepped=True, calcs=("lastNotNull",),
                     description="fio jobs (threads) and queue depth per job of the running step; their product "
                                 "is the outstanding I/Os.",
                     overrides=[right_axis("C", unit="short", label="outstanding I/Os")]), 12, 8)
    b.add(timeseries("Step elapsed and planned",
                     [Q(f"max by (host) ({T.STEP_ELAPSED.sample_name}{{{HOST}}}){JOIN}", "{{host}} elapsed"),
                      Q(f"max by (host) ({T.STEP_EXPECTED.sample_name}{{{HOST}}}){JOIN}", "{{host}} planned")],
                     unit="s", calcs=("lastNotNull",)), 8, 8)
    b.add(gauge("Step progress",
                [Q(f"max by (host) ({T.STEP_ELAPSED.sample_name}{{{HOST}}}"
                   f" / {T.STEP_EXPECTED.sample_name}{{{HOST}}}){JOIN}", "{{host}} {{step}}")],
                unit="percentunit", min_=0, max_=1), 4, 8)
    return b.json()


def network_paths() -> JSON:
    b = Board("lab-network-paths", "Network paths",
              "Throughput of the declared network paths in Gbps (10^9 bit/s), received (rx) and sent (tx), "
              "per path, per interface and per host: single path vs multipath, MTU 1500 vs 9000.")
    net = T.NET_PATH_BYTES.sample_name
    b.variables = [
        query_variable("host", "Host", net, "host"),
        query_variable("path", "Path", f"{net}{{{HOST}}}", "path"),
        query_variable("run", "Run", f"{T.STEP_INFO.sample_name}{{{HOST}}}", "run", multi=False, sort=2),
    ]
    sel = f'{net}{{{HOST}, path=~"$path"}}'
    gbps = "suffix: Gbps"
    b.add(timeseries("Gbps per path",
                     [Q(f"sum by (host, path, direction) (rate({sel}[$__rate_interval])) * 8 / 1e9",
                        "{{host}} {{path}} {{direction}}")], unit=gbps), 16, 9)
    b.add(stat("Peak Gbps per path",
               [Q(f"sum by (host, path, direction) (rate({sel}[$__rate_interval])) * 8 / 1e9",
                  "{{host}} {{path}} {{direction}}")], unit=gbps, calc="max", decimals=1), 8, 9)
    b.add(timeseries("Gbps per interface",
                     [Q(f"sum by (host, path, interface, direction) (rate({sel}[$__rate_interval])) * 8 / 1e9",
                        "{{host}} {{path}} {{interface}} {{direction}}")], unit=gbps), 12, 9)
    b.add(timeseries("Total Gbps per host",
                     [Q(f"sum by (host, direction) (rate({net}{{{HOST}}}[$__rate_interval])) * 8 / 1e9",
                        "{{host}} {{direction}}")], unit=gbps), 12, 9)
    b.add(timeseries("Gbps per path while run $run runs",
                     [Q(f"sum by (host, path, direction) (rate({sel}[$__rate_interval])) * 8 / 1e9{JOIN}",
                        "{{path}} {{direction}} ({{step}})")], unit=gbps,
                     description="The path throughput while a step of the selected run runs on the host."), 24, 9)
    return b.json()


def live_app() -> JSON:
    b = Board("lab-live-app", "Live application run",
              "The running application steps of one run (sysbench OLTP on MariaDB, pgbench on PostgreSQL, "
              "declared external workloads), second by second: transactions per second, latency and errors on "
              "the DUT.", time_from="now-15m")
    b.variables = [
        query_variable("run", "Run", T.STEP_INFO.sample_name, "run", multi=False, sort=2),
        query_variable("host", "Host", f'{T.STEP_INFO.sample_name}{{run=~"$run"}}', "host"),
        query_variable("device", "Device", f"{T.APP_TPS.sample_name}{{{HOST}}}", "device"),
    ]
    info = f'{T.STEP_INFO.sample_name}{{run=~"$run", {HOST}}}'
    b.annotations = [prometheus_annotation(
        "Step starts", f"max by (host, run, step) ({info} unless {info} offset 5s)",
        title="{{step}}", text="step {{step}} of {{run}} starts on {{host}}", color="#8AB8FF")]
    b.add(timeseries("Application TPS",
                     [Q(f"max by (host, device) ({T.APP_TPS.sample_name}{{{HOST_DEVICE}}}){JOIN}",
                        "{{device}} TPS ({{step}})"),
                      Q(f"max by (host, device) ({T.APP_POINT.sample_name}{{{HOST_DEVICE}}}){JOIN}",
                        "{{device}} threads / clients")],
                     unit="short",
                     description="Transactions per second of the running application step, each second, with the "
                                 "point of the ladder (threads / clients) on the right axis.",
                     overrides=[right_axis("B", unit="none", label="threads / clients")]), 24, 9)
    b.add(timeseries("Application latency: average, p95, p99",
                     [Q(f"max by (host, device) ({m.sample_name}{{{HOST_DEVICE}}}){JOIN}",
                        f"{label} {{{{device}}}}")
                      for label, m in (("avg", T.APP_LAT_AVG), ("p95", T.APP_LAT_P95), ("p99", T.APP_LAT_P99))],
                     unit="s", log_scale=True,
                     description="Transaction latency over each second, as the tool reports it."), 16, 9)
    b.add(timeseries("Application QPS and errors",
                     [Q(f"max by (host, device) ({T.APP_QPS.sample_name}{{{HOST_DEVICE}}}){JOIN}",
                        "{{device}} QPS"),
                      Q(f"max by (host, device) ({T.APP_ERRORS.sample_name}{{{HOST_DEVICE}}}){JOIN}",
                        "{{device}} errors/s")],
                     unit="short", overrides=[right_axis("B", unit="short", label="errors/s")]), 8, 9)
    return b.json()


DASHBOARDS: dict[str, Callable[[], JSON]] = {
    "lab-overview.json": lab_overview,
    "live-run.json": live_run,
    "network-paths.json": network_paths,
}
#: Dashboards of application steps: generated and checked like the others; their queries have data only while
#: an application step runs (the fio run of the Prometheus integration test has none).
APP_DASHBOARDS: dict[str, Callable[[], JSON]] = {
    "live-app.json": live_app,
}


def render(dashboard: JSON) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def generated() -> dict[str, str]:
    """File name -> the JSON text this code generates."""
    return {name: render(build()) for name, build in {**DASHBOARDS, **APP_DASHBOARDS}.items()}


# --- what the tests use --------------------------------------------------------------------------

def _panels(panels: Sequence[JSON]) -> Iterator[JSON]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))     # panels of a (collapsed) row


def panel_queries(dashboard_json: JSON | str) -> list[tuple[str, str]]:
    """``(panel title, expr)`` of every query of every panel, in order."""
    d = json.loads(dashboard_json) if isinstance(dashboard_json, str) else dashboard_json
    return [(p.get("title", ""), t["expr"]) for p in _panels(d.get("panels", []))
            for t in p.get("targets", []) if t.get("expr")]


def annotation_queries(dashboard_json: JSON | str) -> list[tuple[str, str]]:
    """``(annotation name, expr)`` of every Prometheus annotation."""
    d = json.loads(dashboard_json) if isinstance(dashboard_json, str) else dashboard_json
    return [(a["name"], a["expr"]) for a in d.get("annotations", {}).get("list", []) if a.get("expr")]


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>[a-zA-Z_]\w*)\)\Z")


def variable_queries(dashboard_json: JSON | str) -> list[tuple[str, str, str]]:
    """``(variable name, series selector, label)`` of every ``label_values`` query variable."""
    d = json.loads(dashboard_json) if isinstance(dashboard_json, str) else dashboard_json
    out: list[tuple[str, str, str]] = []
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = _LABEL_VALUES.match(q)
        if m is None:
            raise ValueError(f"variable {v['name']}: not a label_values query: {q}")
        out.append((v["name"], m["selector"], m["label"]))
    return out


#: Defaults for Grafana's built-in interval variables (data source timeInterval 1 s).
BUILTIN_DEFAULTS = {"__rate_interval": "5s", "__interval": "1s", "__range": "15m"}
_VAR = re.compile(r"\$\{(?P<braced>\w+)(?::\w+)?\}|\[\[(?P<old>\w+)\]\]|\$(?P<plain>\w+)")
_REGEX_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|\\]")


def _regex_escape(value: str) -> str:
    """Grafana's escaping of a multi-value variable for PromQL regex matchers: a backslash (itself
    escaped for the PromQL string) before each regex metacharacter."""
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


def substitute(expr: str, vars: Mapping[str, str | Sequence[str]]) -> str:
    """Replace ``$name``, ``${name}`` and ``[[name]]`` with concrete values, as Grafana does.

    Dashboard variables (host, device, run, path) are used in regex matchers: a string is
    regex-escaped, a list becomes ``(a|b)``, and ``.*`` stands for All. Built-ins
    (``$__rate_interval``, ``$__interval``, ``$__range``) default to :data:`BUILTIN_DEFAULTS`.
    A variable with no value raises KeyError.
    """
    values: dict[str, str | Sequence[str]] = {**BUILTIN_DEFAULTS, **vars}

    def one(m: re.Match[str]) -> str:
        name = m["braced"] or m["old"] or m["plain"]
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr}")
        value = values[name]
        if name.startswith("__"):
            return str(value)
        if isinstance(value, str):
            return value if value == ".*" else _regex_escape(value)
        escaped = [_regex_escape(v) for v in value]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

    return _VAR.sub(one, expr)


# --- metrics table ----------------------------------------------------------------------------------

METRICS_DOC_BEGIN = "<!-- metrics table: python -m dashboards.generate --metrics-doc -->"
METRICS_DOC_END = "<!-- end of metrics table -->"


def metrics_doc() -> str:
    """The Markdown table of every metric of :mod:`labcontract.telemetry`."""
    lines = [METRICS_DOC_BEGIN, "",
             "| series (PromQL name) | type | labels | exported by | meaning |", "|---|---|---|---|---|"]
    for source, metrics in (("agent", T.AGENT_METRICS), ("controller", T.CONTROLLER_METRICS)):
        for m in metrics:
            labels = ", ".join(f"`{lbl}`" for lbl in m.labels) or "-"
            lines.append(f"| `{m.sample_name}` | {m.kind} | {labels} | {source} | {m.help} |")
    lines += ["", METRICS_DOC_END]
    return "\n".join(lines) + "\n"


def _docs_table(text: str) -> str | None:
    begin, end = text.find(METRICS_DOC_BEGIN), text.find(METRICS_DOC_END)
    if begin < 0 or end < 0:
        return None
    return text[begin:end + len(METRICS_DOC_END)] + "\n"


def check(directory: Path = DASHBOARD_DIR, docs: Path = DOCS_TELEMETRY) -> list[str]:
    """What differs between the committed files and this code (empty: nothing)."""
    problems: list[str] = []
    for name, text in generated().items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing (run python -m dashboards.generate)")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path}: differs from the generator (run python -m dashboards.generate)")
    table_text = _docs_table(docs.read_text(encoding="utf-8")) if docs.exists() else None
    if table_text != metrics_doc():
        problems.append(f"{docs}: the metrics table differs from labcontract.telemetry "
                        "(paste the output of python -m dashboards.generate --metrics-doc)")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate",
                                     description="Generate the lab's Grafana dashboards from code.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="fail if the committed files differ from the code")
    group.add_argument("--metrics-doc", action="store_true", help="print the metrics table (Markdown)")
    parser.add_argument("--dir", type=Path, default=DASHBOARD_DIR, help="where the dashboards are")
    args = parser.parse_args(argv)
    if args.metrics_doc:
        sys.stdout.write(metrics_doc())
        return 0
    if args.check:
        problems = check(args.dir)
        for p in problems:
            print(p, file=sys.stderr)
        if not problems:
            print(f"{len(DASHBOARDS) + len(APP_DASHBOARDS)} dashboards and the metrics table are up to date")
        return 1 if problems else 0
    for name, text in generated().items():
        (args.dir / name).write_text(text, encoding="utf-8")
        print(args.dir / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
