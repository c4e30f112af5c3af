"""A lab's history at team size for the web service's benchmark: 10,000 finished runs and 500,000 results in a
PostgreSQL store, written in bulk (PostgreSQL COPY in batches; SQLAlchemy core executemany on other stores),
plus one full 128-cell pattern-125 run made the way the report benchmark makes it (:mod:`bench.reportdata`).

The bulk rows are what the list and filter queries read — runs of several suites on six hosts with four device
models in two firmware revisions each, three OP modes, states and reasons, one attempt and one result per
measured step with its provenance (host, device model, firmware, OP mode) — with small metrics documents: the
list pages never read them, and full documents would only make the load slower. Everything is seeded.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Connection, Engine, Table, insert

from bench.reportdata import CARD, builtin_text, write_disk_run
from orchestrator.store.db import sessions
from orchestrator.store.models import ApiToken, Base, Device, Host

SEED = 15
T0 = 1_760_000_000.0                  # 2025-10-09: the first run; one run every ~50 minutes after it
HOSTS = [f"rd630-{i:02d}" for i in range(1, 7)]
MODELS = [("Micron P420m", ("B2160700", "B2180900")), ("Samsung PM1733", ("EPK9AB5Q", "EPK9CB5Q")),
          ("Intel P5800X", ("L0310200", "L0310600")), ("Kioxia CM6", ("0106", "0108"))]
SUITES = ["pattern-125", "enterprise-synthetic", "nightly-regression", "demo", "device-group", "quick"]
OP_MODES = ["stock", "hp:20", "hp:28"]
STATES = [("SUCCEEDED", 0.86, ""), ("FAILED", 0.08, "step 12 failed: fio exited with code 1"),
          ("CANCELLED", 0.06, "cancelled by user")]
BATCH = 20_000
PATTERN_RUN = "rweb-pattern128"


@dataclass(frozen=True)
class Populated:
    runs: int
    results: int
    pattern_run: str
    seconds: float
    hosts: list[str]
    device_models: list[str]
    firmware: list[str]


def _device(host: int, slot: int) -> tuple[str, str, str]:
    """(path, model, firmware) of a host's DUT in ``slot``: every host has the four models."""
    model, fws = MODELS[slot]
    return f"/dev/nvme{slot}n1", model, fws[host % 2]


def _hosts_and_devices() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    hosts, devices = [], []
    for h, name in enumerate(HOSTS):
        hosts.append({"name": name, "agent_version": "0.15.0", "protocol_version": 7,
                      "facts": {"hostname": name, "cpu_model": "Intel(R) Xeon(R) CPU E5-2620 0 @ 2.00GHz",
                                "cpu_cores": 12, "os": "Debian GNU/Linux 12 (bookworm)", "fio_version": "fio-3.33"},
                      "registered_at": T0, "last_seen": T0, "health": {}, "quarantine_reason": "", "incompatible": ""})
        for slot in range(len(MODELS)):
            path, model, fw = _device(h, slot)
            devices.append({"host": name, "name": f"ssd{slot}", "path": path, "kind": "block",
                            "size_bytes": 3_840_000_000_000, "model": model, "serial": f"S{h:02d}{slot:02d}X",
                            "firmware": fw, "by_id": None, "declared": True, "quarantine_reason": "",
                            "wipe_ok": True})
    return hosts, devices


def _rows(n_runs: int, per_run: int, rng: random.Random) -> Iterator[tuple[str, Any]]:
    """("runs" | "steps" | "attempts" | "results", row) in an order the foreign keys accept."""
    weights = [w for _s, w, _r in STATES]
    for i in range(n_runs):
        h = rng.randrange(len(HOSTS))
        slot = rng.randrange(len(MODELS))
        path, model, fw = _device(h, slot)
        suite = SUITES[i % len(SUITES)]
        mode = OP_MODES[rng.randrange(len(OP_MODES))]
        state, _w, reason = rng.choices(STATES, weights)[0]
        at = T0 + i * 3000 + rng.uniform(0, 600)
        rid = f"r{time.strftime('%Y%m%d', time.gmtime(at))}-{i:06x}"
        ended = at + 60 + per_run * 65
        yield "runs", {"id": rid, "suite_name": suite, "suite_source": f"builtin:{suite}",
                       "suite_text": f"suite: {suite}\n", "suite_sha256": f"{i:064x}", "host": HOSTS[h],
                       "device": path, "devices": [path],
                       "runtime_override": None, "scale": None, "live": True, "not_before": None, "expires_at": None,
                       "notified_at": ended, "state": state, "reason": reason, "priority": rng.choice((0, 0, 0, 5)),
                       "submitted_at": at, "started_at": at + 2, "ended_at": ended, "topology": None,
                       "submitted_by": rng.choice(("labctl", "token:alice", "token:bob", "schedule:nightly")),
                       "max_rounds": None, "rerun_count": 0}
        facts = {"hostname": HOSTS[h], "kernel": "6.1.0-27-amd64", "fio_version": "fio-3.33"}
        dev = {"name": f"ssd{slot}", "path": path, "model": model, "firmware": fw, "serial": f"S{h:02d}{slot:02d}X"}
        for j in range(per_run):
            sid = f"{rid}-s{j + 1:03d}"
            bs = (4096, 8192, 65536, 131072)[j % 4]
            qd = (1, 4, 16, 32, 64)[j % 5]
            t = at + 60 + j * 65
            cell = {"op_mode": mode, "profile": f"p{j % 25:02d}", "bs": bs, "iodepth": qd}
            yield "steps", {"id": sid, "run_id": rid, "seq": j + 1, "round": 0, "kind": "measure",
                            "name": f"{mode}.p{j % 25:02d}.bs{bs}.qd{qd}", "cell": cell, "note": "",
                            "workload": {"rw": "randrw", "bs": bs, "iodepth": qd, "runtime": 60},
                            "job_text": f"[global]\nioengine=libaio\ndirect=1\n[w]\nbs={bs}\niodepth={qd}\n",
                            "host": "", "state": "SUCCEEDED", "reason": "", "ended_at": t + 61}
            yield "attempts", {"id": f"{sid}-a1", "step_id": sid, "number": 1, "host": HOSTS[h], "device": path,
                               "state": "SUCCEEDED", "reason": "", "timeout_s": 360, "dispatch_count": 1,
                               "dispatched_at": t, "started_at": t, "fio_started_at": t, "fio_ended_at": t + 60,
                               "ended_at": t + 61, "pid": 1000 + j, "exit_code": 0, "lost_at": None,
                               "stop_cause": None}
            iops = rng.uniform(2e4, 7e5)
            lat = qd / iops * 1e9
            yield "results", {"attempt_id": f"{sid}-a1", "step_id": sid, "run_id": rid, "kind": "fio", "tool": "fio",
                              "tool_version": "fio-3.33", "throughput": iops, "throughput_unit": "IOPS",
                              "read_iops": iops * 0.7, "write_iops": iops * 0.3, "iops": iops,
                              "read_bw_bytes": iops * 0.7 * bs, "write_bw_bytes": iops * 0.3 * bs,
                              "bw_bytes": iops * bs, "lat_mean_ns": lat, "lat_max_ns": lat * 12,
                              "lat_stddev_ns": lat * 0.4, "lat_p99_ns": lat * 3, "runtime_ms": 60_000,
                              "fio_version": "fio-3.33",
                              "metrics": {"combined": {"iops": iops, "lat_mean_ns": lat}, "fio_version": "fio-3.33"},
                              "per_device": None, "series": None, "per_path": None, "lat_hist": None,
                              "provenance": {"host": facts, "device": dev, "devices": [dev], "op_mode": mode},
                              "created_at": t + 61}


def _bulk(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows``: PostgreSQL's COPY (about five times faster than executemany: the load is bound by the
    client's CPU), else SQLAlchemy core executemany."""
    if conn.dialect.name != "postgresql":
        conn.execute(insert(table), rows)
        return
    cols = [c.name for c in table.columns if c.name in rows[0]]
    is_json = {c.name for c in table.columns if isinstance(c.type, JSON)}
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cur, cur.copy(f"COPY {table.name} ({', '.join(cols)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([json.dumps(row[c]) if c in is_json and row[c] is not None else row[c] for c in cols])


def populate(engine: Engine, *, runs: int = 10_000, results: int = 500_000, token_sha256: str | None = None,
             progress: bool = True) -> Populated:
    """Write the history into the (migrated, empty) store of ``engine``; with ``token_sha256``, an admin token
    ``bench`` too (as the controller stores one)."""
    t0 = time.monotonic()
    rng = random.Random(SEED)
    per_run = max(1, results // max(1, runs))
    tables = {k: Base.metadata.tables[k] for k in ("runs", "steps", "attempts", "results")}
    order = ["runs", "steps", "attempts", "results"]
    hosts, devices = _hosts_and_devices()
    with engine.begin() as conn:
        conn.execute(insert(Host), hosts)
        conn.execute(insert(Device), devices)
        if token_sha256:
            conn.execute(insert(ApiToken), [{"name": "bench", "role": "admin", "token_sha256": token_sha256,
                                                        "created_at": time.time(), "created_by": "bench",
                                                        "expires_at": None, "revoked_at": None}])
    pending: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
    written = 0

    def flush() -> None:
        with engine.begin() as conn:
            for k in order:              # parents first: a batch never refers to a row of a later one
                if pending[k]:
                    _bulk(conn, tables[k], pending[k])
                    pending[k].clear()
    for kind, row in _rows(runs, per_run, rng):
        pending[kind].append(row)
        if kind == "results":
            written += 1
            if written % BATCH == 0:
                flush()
                if progress and written % (5 * BATCH) == 0:
                    print(f"  {written:,} results written ({time.monotonic() - t0:.0f}s)", flush=True)
    flush()
    with sessions(engine).begin() as s:       # the full pattern run a reviewer opens
        write_disk_run(s, PATTERN_RUN, builtin_text("pattern-125"), [("/dev/nvme0n1", CARD)],
                       at=T0 + runs * 3000 + 3600)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")        # the planner's statistics, as autovacuum would make them
    return Populated(runs + 1, written, PATTERN_RUN, time.monotonic() - t0, list(HOSTS),
                     [m for m, _ in MODELS], [fw for _, fws in MODELS for fw in fws])
