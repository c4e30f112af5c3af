"""The web service at team size (issue 15, Performance): list pages, the 128-cell run page, and 50 live viewers.

A private PostgreSQL (tests/pg.py) gets the schema from the project's migrations and a lab's history from
:mod:`bench.webdata`: 10,000 finished runs with 500,000 results (six hosts, four device models in two firmware
revisions, three OP modes, several suites and states) and one full 128-cell pattern-125 run. The embedded lab
(redis-server, controller, one agent with a DUT) runs on that store, and the web service runs as its own
process (``python -m orchestrator.cmd.web``, as ``labctl lab up`` starts it), with an admin token written into
``api_tokens`` directly (its SHA-256, as the controller stores it).

Measured, over one keep-alive HTTP connection, sequentially (the client's own time included):
- ``GET /api/runs`` pages: the first page, every page of a walk to the 10,000th run by cursor, and filtered
  walks (state, host, device model, firmware, OP mode, a date range): p50 / p99 over >= 200 requests each;
  the HTML ``/runs`` page (first page, a filter) likewise. Target: p99 <= 100 ms.
- the 128-cell run: ``GET /runs/{id}`` (the HTML page) and ``GET /api/runs/{id}``. Target <= 300 ms.
- 50 live viewers of one running run (a long fio step): 50 SSE connections to ``/api/runs/{id}/live`` for 30 s;
  the controller's CPU (utime + stime from /proc over the window, % of one core) next to the same window with
  no viewer, and the web service's. Target: the controller < 5%.

Usage: python -m bench.web [--runs 10000] [--results 500000] [--requests 200] [--viewers 50] [--window 30]
"""

from __future__ import annotations

import argparse
import http.client
import re
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.telemetry import cpu_seconds
from bench.webdata import PATTERN_RUN, Populated, populate
from labcontract.suite import parse_suite
from labcontract.telemetry import LIVE_KEY_PREFIX
from labcontract.transport import redis_client
from orchestrator.labs.lab import Lab, free_port, wait_for
from orchestrator.labs.up import wait_web
from orchestrator.runs.client import ControllerClient
from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.models import Host, Step
from orchestrator.tokens import new_token, token_hash

HOST = "web-bench"
LIST_P99_MS = 100.0
RUN_PAGE_MS = 300.0
CONTROLLER_CPU_PCT = 5.0


@dataclass
class Series:
    name: str
    ms: list[float] = field(default_factory=list)

    def pct(self, q: float) -> float:
        if not self.ms:
            return float("nan")
        xs = sorted(self.ms)
        return xs[min(len(xs) - 1, max(0, round(q / 100 * len(xs) + 0.5) - 1))]

    def row(self, target: float, at: float = 99) -> str:
        ok = "PASS" if self.pct(at) <= target else "FAIL"
        return (f"{self.name:<44} {len(self.ms):>5} {statistics.median(self.ms):>8.1f} {self.pct(99):>8.1f} "
                f"{max(self.ms):>8.1f}  {ok} (p{at:.0f} <= {target:.0f} ms)")


class Http:
    """One keep-alive connection, as a browser or a script holds one."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.port, self.headers = port, headers
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def get(self, path: str, query: dict[str, Any] | None = None) -> tuple[int, float, bytes]:
        url = path + (f"?{urlencode(query)}" if query else "")
        t0 = time.perf_counter()
        try:
            self.conn.request("GET", url, headers=self.headers)
            resp = self.conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException):          # a dropped keep-alive: once more, anew
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.conn.request("GET", url, headers=self.headers)
            resp = self.conn.getresponse()
            body = resp.read()
        ms = (time.perf_counter() - t0) * 1000
        if resp.status != 200:
            raise RuntimeError(f"GET {url}: HTTP {resp.status}: {body[:300]!r}")
        return resp.status, ms, body


def walk(client: Http, name: str, n: int, limit: int = 50, **filters: Any) -> Series:
    """``n`` requests: pages of a cursor walk; when the filter's runs run out, the walk starts again."""
    import json

    s = Series(name)
    cursor = None
    while len(s.ms) < n:
        q = {"limit": limit, **filters, **({"before": cursor} if cursor else {})}
        _st, ms, body = client.get("/api/runs", q)
        s.ms.append(ms)
        cursor = json.loads(body)["next"]
    return s


def repeat(client: Http, name: str, n: int, path: str, query: dict[str, Any] | None = None) -> Series:
    s = Series(name)
    for _ in range(n):
        s.ms.append(client.get(path, query)[1])
    return s


def session_cookie(port: int, token: str) -> str:
    """A browser session (POST /login with the token), for the HTML pages."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/login", body=urlencode({"token": token, "next": "/"}),
                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    resp = conn.getresponse()
    resp.read()
    cookie = next((v.split(";", 1)[0] for k, v in resp.getheaders() if k.lower() == "set-cookie"
                   and v.startswith("slab_session=")), None)
    conn.close()
    if cookie is None:
        raise RuntimeError(f"POST /login answered {resp.status} without a session cookie")
    return cookie


def viewer(port: int, token: str, run_id: str, until: float, counts: dict[str, int], lock: threading.Lock,
           started: threading.Barrier) -> None:
    """One live viewer: the SSE stream until ``until``; counts the events it received by name."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    mine: dict[str, int] = {}
    try:
        conn.request("GET", f"/api/runs/{run_id}/live", headers={"Authorization": f"Bearer {token}",
                                                                 "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"live: HTTP {resp.status}")
        started.wait(30)
        while time.monotonic() < until:
            line = resp.fp.readline()
            if not line:
                break
            if line.startswith(b"event: "):
                name = line[7:].strip().decode()
                mine[name] = mine.get(name, 0) + 1
    finally:
        conn.close()
        with lock:
            for k, v in mine.items():
                counts[k] = counts.get(k, 0) + v


def cpu_window(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """% of one core each pid spent over ``seconds`` (utime + stime, every thread of the process)."""
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)           # the measuring window itself: nothing to wait for, the clock is the point
    wall = time.monotonic() - t0
    return {k: (cpu_seconds(p) - before[k]) / wall * 100 for k, p in pids.items()}


def live_case(lab: Lab, store: str, port: int, token: str, viewers: int, window: float,
              pids: dict[str, int]) -> list[str]:
    """A long fio run on the lab's DUT; controller and web CPU with no viewer, then with ``viewers``."""
    assert lab.labctl_url
    runtime = int(2 * window + 90)
    suite = parse_suite(f"suite: live\nprofiles:\n  - {{name: long, rw: randread, bs: 4k, iodepth: 4, "
                        f"runtime: {runtime}s}}\n", "live.yaml")
    run_id, _ = ControllerClient(redis_client(lab.labctl_url)).submit(suite, HOST, ["dut0"], live=True)
    db = sessions(make_engine(store))

    def running() -> bool:
        with db() as s:
            return any(st.state == "RUNNING" for st in s.query(Step).filter(Step.run_id == run_id))
    wait_for(running, 120, f"run {run_id} to run", interval=0.2)
    broker: Any = redis_client(lab.labctl_url)
    wait_for(lambda: re.search(r'"iops":\s*[0-9]', broker.get(LIVE_KEY_PREFIX + HOST) or ""), 60,
             "the agent's first live snapshot of the run", interval=0.2)
    idle = cpu_window(pids, window)
    counts: dict[str, int] = {}
    lock = threading.Lock()
    started = threading.Barrier(viewers + 1)
    until = time.monotonic() + window + 5
    threads = [threading.Thread(target=viewer, args=(port, token, run_id, until, counts, lock, started),
                                daemon=True) for _ in range(viewers)]
    for t in threads:
        t.start()
    started.wait(60)
    watched = cpu_window(pids, window)
    for t in threads:
        t.join(window + 30)
    ControllerClient(redis_client(lab.labctl_url)).cancel(run_id, "benchmark done")
    added = watched["controller"] - idle["controller"]
    ok = "PASS" if added < CONTROLLER_CPU_PCT else "FAIL"
    return [f"live run {run_id} (fio {runtime}s randread 4k), window {window:.0f}s:",
            f"  controller CPU, no viewer:       {idle['controller']:6.2f}% of a core",
            f"  controller CPU, {viewers} viewers:      {watched['controller']:6.2f}% of a core: the viewers add "
            f"{added:+.2f}%  {ok} (< {CONTROLLER_CPU_PCT:.0f}%)",
            f"  web service CPU, no viewer:      {idle['web']:6.2f}%;  {viewers} viewers: {watched['web']:6.2f}%",
            f"  redis-server CPU, no viewer:     {idle['redis']:6.2f}%;  {viewers} viewers: {watched['redis']:6.2f}%",
            "  events received by the viewers:  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            + f" ({counts.get('sample', 0) / viewers / (window + 5):.2f} samples per viewer per second)"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--results", type=int, default=500_000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--viewers", type=int, default=50)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--size-mib", type=int, default=1024)
    args = ap.parse_args()
    from tests.pg import start_postgres

    pg = start_postgres()
    lab = Lab(Path(tempfile.mkdtemp(prefix="lab-bench-web-")))
    try:
        store = pg.url()
        engine = make_engine(store)
        migrate(engine)
        token = new_token()
        print(f"PostgreSQL {pg.bindir.parent.name} on port {pg.port}: writing {args.runs:,} runs, "
              f"{args.results:,} results and a 128-cell run ...", flush=True)
        data: Populated = populate(engine, runs=args.runs, results=args.results, token_sha256=token_hash(token))
        print(f"store written in {data.seconds:.0f}s: {data.runs:,} runs, {data.results:,} results", flush=True)
        with engine.begin() as conn:     # the planner's statistics of a freshly loaded store (autovacuum would, later)
            conn.exec_driver_sql("ANALYZE")
        lab.start_redis()
        dut = lab.make_dut("web-dut", args.size_mib)
        controller = lab.start_controller(store)
        lab.start_agent(HOST, [f"dut0={dut.path}"])
        db = sessions(engine)

        def registered() -> bool:
            with db() as s:
                return s.get(Host, HOST) is not None
        wait_for(registered, 90, "the agent to register", interval=0.2)
        port = free_port()
        web = lab.start_web(store, port)
        wait_web(f"http://127.0.0.1:{port}", token, web)
        api = Http(port, {"Authorization": f"Bearer {token}"})
        n = args.requests
        for _ in range(20):          # warm-up: connections of the pool, the planner's caches
            api.get("/api/runs", {"limit": 50})
        lists = [repeat(api, "GET /api/runs first page (50)", n, "/api/runs", {"limit": 50}),
                 walk(api, "GET /api/runs walk to the end (50/page)", n),
                 walk(api, "GET /api/runs state=FAILED walk", n, state="FAILED"),
                 walk(api, "GET /api/runs host= walk", n, host=data.hosts[2]),
                 walk(api, "GET /api/runs model= walk", n, model=data.device_models[1]),
                 walk(api, "GET /api/runs firmware= walk", n, firmware=data.firmware[3]),
                 walk(api, "GET /api/runs op_mode=hp:20 walk", n, op_mode="hp:20"),
                 walk(api, "GET /api/runs since/until (a month) walk", n, since=1_770_000_000,
                      until=1_772_600_000),
                 walk(api, "GET /api/runs limit=200 walk", n, limit=200)]
        page = Http(port, {"Cookie": session_cookie(port, token)})
        pages = [repeat(page, "GET /runs (HTML) first page", n, "/runs"),
                 repeat(page, "GET /runs (HTML) state=FAILED", n, "/runs", {"state": "FAILED"})]
        one = [repeat(page, f"GET /runs/{PATTERN_RUN} (HTML, 128 cells)", max(50, n // 4), f"/runs/{PATTERN_RUN}"),
               repeat(api, "GET /api/runs/{id} (128 cells)", max(50, n // 4), f"/api/runs/{PATTERN_RUN}")]
        print(f"\n{'request':<44} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for s in lists + pages:
            print(s.row(LIST_P99_MS))
        for s in one:
            print(s.row(RUN_PAGE_MS, at=100))
        pids = {"controller": controller.popen.pid, "web": web.popen.pid,
                "redis": next(p for p in lab.procs if p.name == "redis").popen.pid}
        print()
        for line in live_case(lab, store, port, token, args.viewers, args.window, pids):
            print(line)
        engine.dispose()
    finally:
        lab.stop()
        pg.stop()


if __name__ == "__main__":
    main()
