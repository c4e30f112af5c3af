"""Copied to the deployed controller host and run there (``python3 storeq.py STORE WHAT [ARG]``): what the VM
tier reads of the deployed store, as JSON on stdout, through sqlite3 alone (the store's own readers are labctl's;
this reads the rows a test asserts on without a table to parse).

WHAT: ``run RUN_ID`` (the run, its steps with their attempts, its results with metrics and provenance, a network
run's cells),
``hosts`` (every host: last heartbeat, registration, facts, devices with quarantine), ``last-run`` (the newest run's
id)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import time
from typing import Any


def rows(c: sqlite3.Connection, sql: str, *args: Any) -> list[dict[str, Any]]:
    cur = c.execute(sql, args)
    names = [d[0] for d in cur.description]
    out = []
    for r in cur.fetchall():
        row = dict(zip(names, r, strict=True))
        for k, v in row.items():
            if isinstance(v, str) and v[:1] in "[{":
                with contextlib.suppress(ValueError):
                    row[k] = json.loads(v)
        out.append(row)
    return out


def main() -> int:
    store, what = sys.argv[1], sys.argv[2]
    c = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    if what == "run":
        run_id = sys.argv[3]
        (run,) = rows(c, "SELECT * FROM runs WHERE id = ?", run_id) or [None]
        if run is None:
            print(json.dumps(None))
            return 0
        run.pop("suite_text", None)
        run["steps"] = rows(c, "SELECT id, name, kind, seq, round, state, reason, note FROM steps WHERE run_id = ? "
                               "ORDER BY seq, round", run_id)
        for st in run["steps"]:
            st["attempts"] = rows(c, "SELECT id, host, state, reason, dispatch_count FROM attempts WHERE step_id = ? "
                                     "ORDER BY number", st["id"])
        run["results"] = rows(c, "SELECT step_id, attempt_id, kind, tool, iops, read_bw_bytes, write_bw_bytes, "
                                 "lat_mean_ns, runtime_ms, metrics, per_path, provenance FROM results WHERE run_id = ?",
                              run_id)
        run["net_groups"] = rows(c, "SELECT seq, name, cell, skew_ms, window_start, window_end, total, per_path, "
                                    "per_host, failures, complete, reason FROM net_groups WHERE run_id = ? "
                                    "ORDER BY seq", run_id)
        print(json.dumps(run, default=str))
    elif what == "hosts":
        hosts = rows(c, "SELECT name, last_seen, registered_at, agent_version, facts, quarantined_at, "
                        "quarantine_reason, health FROM hosts")
        for h in hosts:
            h["devices"] = rows(c, "SELECT name, path, model, serial, firmware, size_bytes, declared, quarantined_at, "
                                   "quarantine_reason FROM devices WHERE host = ?", h["name"])
            h["age_s"] = time.time() - h["last_seen"] if h["last_seen"] else None
        print(json.dumps(hosts, default=str))
    elif what == "last-run":
        print(json.dumps(c.execute("SELECT id FROM runs ORDER BY submitted_at DESC LIMIT 1").fetchone()))
    else:
        print(f"unknown query {what}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
