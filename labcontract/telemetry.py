"""The telemetry contract: every metric the agent and controller export, with type, labels and help.

Exporters, recording/alert rules, dashboards and tests all take names from here. Run, step and
suite names are *not* labels of the per-second series: they live on ``lab_step_info`` and are
joined in queries (``* on(host) group_left(run, step, suite) lab_step_info``), so a long run does
not multiply series.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "info"]


@dataclass(frozen=True)
class Metric:
    name: str            # for counters: without the _total suffix (prometheus-client adds it)
    kind: Kind
    labels: tuple[str, ...]
    help: str

    @property
    def sample_name(self) -> str:
        """The name as it appears in /metrics and PromQL."""
        return self.name + ("_total" if self.kind == "counter" else "_info" if self.kind == "info" else "")


DIRECTION = ("host", "device", "direction")   # direction: read | write

# --- agent: the running step (series removed when the step ends) ------------------------------
FIO_IOS = Metric("lab_fio_ios", "counter", DIRECTION, "I/Os issued by the running fio step (fio total_ios)")
FIO_BYTES = Metric("lab_fio_bytes", "counter", DIRECTION, "Bytes transferred by the running fio step")
FIO_LAT_MEAN = Metric("lab_fio_latency_mean_seconds", "gauge", DIRECTION,
                      "Mean total I/O latency over the last interval (about 1 s)")
FIO_LAT_MAX = Metric("lab_fio_latency_max_seconds", "gauge", DIRECTION,
                     "Max total I/O latency over the last interval (to fio's histogram bin resolution)")
FIO_LAT_P99 = Metric("lab_fio_latency_p99_seconds", "gauge", DIRECTION,
                     "99th percentile of total I/O latency over the last interval (from fio's histogram)")
FIO_THREADS = Metric("lab_fio_threads", "gauge", ("host", "device"), "fio jobs (threads) on the device")
FIO_IODEPTH = Metric("lab_fio_iodepth", "gauge", ("host", "device"), "Queue depth per fio job")
STEP_PHASE = Metric("lab_step_phase", "gauge", ("host", "phase"),
                    "1 for the phase of the running step (purge, precondition, measure)")
PRECONDITION_ROUND = Metric("lab_precondition_round", "gauge", ("host",),
                            "Round number of the running precondition step")
STEP_ELAPSED = Metric("lab_step_elapsed_seconds", "gauge", ("host",), "Seconds since the running step started")
STEP_EXPECTED = Metric("lab_step_expected_seconds", "gauge", ("host",),
                       "Planned length of the running step (runtime + ramp)")
STEP_INFO = Metric("lab_step", "info", ("host", "run", "step", "suite", "phase"),
                   "The running step of a host (value 1); join on host for run, step and suite names")

# --- agent: health (always present) -------------------------------------------------------------
AGENT_UP = Metric("lab_agent_up", "gauge", ("host",), "1 while the agent process serves metrics")
AGENT_HEARTBEAT_AGE = Metric("lab_agent_heartbeat_age_seconds", "gauge", ("host",),
                             "Seconds since the agent last published a heartbeat to the controller")
AGENT_FIO_RUNNING = Metric("lab_agent_fio_running", "gauge", ("host",), "Processes (fio or purge) the agent runs")
AGENT_LAST_ERROR = Metric("lab_agent_last_error_timestamp_seconds", "gauge", ("host",),
                          "Unix time of the agent's last error (0: none since start)")
NET_PATH_BYTES = Metric("lab_net_path_bytes", "counter", ("host", "path", "interface", "direction"),
                        "Bytes through a declared network path's interface (direction: rx | tx)")

# The agent's per-second application series (an app step's DUT; removed when the step ends). Labels as the
# per-device gauges of labcontract.telemetry (host, device).
APP_TPS = Metric("lab_app_tps", "gauge", ("host", "device"),
                 "Transactions per second of the running application step (last second)")
APP_QPS = Metric("lab_app_qps", "gauge", ("host", "device"),
                 "Queries per second of the running application step (last second)")
APP_LAT_AVG = Metric("lab_app_latency_avg_seconds", "gauge", ("host", "device"),
                     "Average transaction latency of the running application step (last second)")
APP_LAT_P95 = Metric("lab_app_latency_p95_seconds", "gauge", ("host", "device"),
                     "95th percentile transaction latency of the running application step (last second)")
APP_LAT_P99 = Metric("lab_app_latency_p99_seconds", "gauge", ("host", "device"),
                     "99th percentile transaction latency of the running application step (last second)")
APP_ERRORS = Metric("lab_app_errors_per_second", "gauge", ("host", "device"),
                    "Errors per second of the running application step (last second)")
APP_POINT = Metric("lab_app_point", "gauge", ("host", "device"),
                   "Threads / clients of the running application step's point")
APP_METRICS = (APP_TPS, APP_QPS, APP_LAT_AVG, APP_LAT_P95, APP_LAT_P99, APP_ERRORS, APP_POINT)

# --- controller ------------------------------------------------------------------------------------
CTRL_RUNS = Metric("lab_controller_runs", "gauge", ("state",), "Runs in the store by state")
CTRL_STEPS = Metric("lab_controller_steps", "gauge", ("state",), "Steps in the store by state")
CTRL_QUEUE = Metric("lab_controller_queue_length", "gauge", (), "Runs waiting to start (QUEUED)")
CTRL_STEPS_COMPLETED = Metric("lab_controller_steps_completed", "counter", (), "Steps that succeeded")
CTRL_STEPS_FAILED = Metric("lab_controller_steps_failed", "counter", (), "Steps that failed")
CTRL_AGENT_UP = Metric("lab_controller_agent_up", "gauge", ("host",),
                       "1 if the host heartbeated within the heartbeat timeout")
CTRL_AGENT_HEARTBEAT_AGE = Metric("lab_controller_agent_heartbeat_age_seconds", "gauge", ("host",),
                                  "Seconds since the controller last heard from the host")
CTRL_RESERVATIONS = Metric("lab_controller_reservations", "gauge", (),
                           "Devices held by running runs")
# transient faults (orchestrator/controller/transient.py): the loop waits them out instead of exiting
CTRL_DEGRADED = Metric("lab_controller_degraded", "gauge", ("kind",),
                       "1 while the controller waits out a transient fault of its store or broker (kind)")
CTRL_TRANSIENT_FAULTS = Metric("lab_controller_transient_faults", "counter", ("kind",),
                               "Loop passes that failed on a transient fault (kind: store or redis)")
# the boundary (orchestrator/controller/boundary.py): what the controller set aside instead of stopping
CTRL_SET_ASIDE = Metric("lab_controller_set_aside", "counter", ("duty",),
                        "Items a duty of the controller set aside with their reason (a schedule disabled, a step "
                        "failed, a run marked) instead of stopping")
CTRL_DUTY_FAILURES = Metric("lab_controller_duty_failures", "counter", ("duty",),
                            "Loop passes in which a duty of the controller failed outside any item (logged; the "
                            "pass went on)")

AGENT_METRICS = (FIO_IOS, FIO_BYTES, FIO_LAT_MEAN, FIO_LAT_MAX, FIO_LAT_P99, FIO_THREADS, FIO_IODEPTH, STEP_PHASE,
                 PRECONDITION_ROUND, STEP_ELAPSED, STEP_EXPECTED, STEP_INFO, AGENT_UP, AGENT_HEARTBEAT_AGE,
                 AGENT_FIO_RUNNING, AGENT_LAST_ERROR, NET_PATH_BYTES, *APP_METRICS)
CONTROLLER_METRICS = (CTRL_RUNS, CTRL_STEPS, CTRL_QUEUE, CTRL_STEPS_COMPLETED, CTRL_STEPS_FAILED, CTRL_AGENT_UP,
                      CTRL_AGENT_HEARTBEAT_AGE, CTRL_RESERVATIONS, CTRL_DEGRADED, CTRL_TRANSIENT_FAULTS, CTRL_SET_ASIDE,
                      CTRL_DUTY_FAILURES)

DEFAULT_AGENT_METRICS_PORT = 9464
DEFAULT_CONTROLLER_METRICS_PORT = 9465
LIVE_KEY_PREFIX = "lab:live:"     # redis: lab:live:<host> -> JSON LiveStatus, TTL a few seconds
