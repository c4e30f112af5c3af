"""The embedded lab the benchmarks run against: redis-server, controller, one agent, a loop DUT.

The harness must not compete with what it measures (issue 16): while fio runs, it blocks on the
agent's own events stream (XREAD BLOCK on ``lab:events:<host>``, which the agent writes anyway) and
looks at the store only when an event arrived, with one single-column query; never a timed poll of
the full run. With ``pin``, fio runs on CPUs of its own and everything else (redis, controller,
agent, the harness) on the others: see :func:`split_cpus`.

The pure helpers at the bottom (CPU split, /proc stat parsing, ratio statistics) are unit-tested in
tests/unit/test_bench_stats.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import FioError, ServiceError
from labcontract.fioresult import parse_fio_output
from labcontract.fioseries import split_status_stream
from labcontract.protocol import events_stream
from labcontract.suite import Suite
from labcontract.transport import redis_client
from orchestrator.labs.lab import Dut, Lab, wait_for
from orchestrator.queries import RunDetail, run_detail
from orchestrator.runs.client import ControllerClient
from orchestrator.states import TERMINAL_RUN
from orchestrator.stats.summary import Summary, summarize
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host, Run

HOST = "bench-host"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class BenchLab:
    lab: Lab
    dut: Dut
    db: sessionmaker[Session]
    client: ControllerClient
    events: Any                              # redis client (the lab's admin user) reading the agent's events
    agent_pid: int
    fio: str                                 # the fio the agent runs: "fio", or the pinning wrapper
    fio_cpus: frozenset[int] | None = None   # where fio runs when pinned

    @property
    def root(self) -> Path:
        return self.lab.root

    def run_state(self, run_id: str) -> str | None:
        with self.db() as s:
            return s.scalar(select(Run.state).where(Run.id == run_id))

    def wait_run(self, run_id: str, timeout: float) -> RunDetail:
        """Block until the run is terminal, waking only on the agent's events (see the module doc)."""
        stream = events_stream(HOST)
        last = self.events.xrevrange(stream, count=1)
        cursor = last[0][0] if last else "0-0"
        deadline = time.monotonic() + timeout
        ended = False                        # the last event was a step's end: the store is about to change
        while (state := self.run_state(run_id)) not in TERMINAL_RUN:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServiceError(f"timed out after {timeout:.0f}s waiting for run {run_id} (state {state})")
            block_ms = 20 if ended else int(min(left, 5.0) * 1000)
            got = self.events.xread({stream: cursor}, block=max(block_ms, 1), count=100)
            if got:
                entries = got[0][1]
                cursor = entries[-1][0]
                ended = any(_event_type(fields) == "step_ended" for _id, fields in entries)
        with self.db() as s:
            return run_detail(s, run_id)

    def run_suite(self, suite: Suite, timeout: float, **overrides: object) -> RunDetail:
        run_id, _ = self.client.submit(suite, HOST, ["dut0"], **overrides)  # type: ignore[arg-type]
        d = self.wait_run(run_id, timeout)
        assert d.run.state == "SUCCEEDED", d.run.reason
        return d

    def bare_fio(self, job: Path, out: Path, extra: Sequence[str] = ()) -> float:
        """fio run directly, in a session of its own as the agent runs it; returns total IOPS."""
        return self.bare_fio_cpu(job, out, extra)[0]

    def bare_fio_cpu(self, job: Path, out: Path, extra: Sequence[str] = ()) -> tuple[float, float, int]:
        """(IOPS, CPU seconds of the fio process, I/Os) of one bare run: the same binary (or pinning wrapper)
        the agent runs; its CPU from this process's rusage of reaped children."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([self.fio, "--output-format=json+", f"--output={out}", *extra, str(job)], check=True,
                       capture_output=True, start_new_session=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = parse_fio_output(out.read_bytes()).combined
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return res.iops, cpu, res.ios

    def agent_cpu(self) -> tuple[float, float]:
        """(the agent's own CPU seconds, CPU seconds of its reaped children: the fio steps it ran)."""
        return proc_cpu(Path(f"/proc/{self.agent_pid}/stat").read_text())

    def attempt_output(self, d: RunDetail, step_index: int = 0) -> bytes:
        """A step's fio output, as the agent kept it in its attempt directory."""
        att = d.steps[step_index].attempts[-1]
        return (self.root / "agents" / HOST / "attempts" / att.id / "fio.json").read_bytes()


def _event_type(fields: dict[Any, Any]) -> str | None:
    raw = fields.get(b"data", fields.get("data"))
    try:
        value = json.loads(raw).get("type") if raw is not None else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


@contextlib.contextmanager
def bench_lab(size_mib: int, backing_dir: Path | None = None, *, pin: bool = False,
              fio_nice: int = 0) -> Iterator[BenchLab]:
    """The lab; with ``pin`` (and at least 2 CPUs allowed), this process and so every daemon it starts on
    :func:`split_cpus`' first set, fio (bare and the agent's, through a ``taskset`` wrapper) on the second.
    ``fio_nice`` < 0 (root only) raises fio's CPU weight over other work on its CPU (both arms alike): on a shared
    machine, other processes' load then takes less of fio's CPU, which is what makes IOPS vary."""
    root = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    lab = Lab(root)
    old_affinity = os.sched_getaffinity(0)
    split = split_cpus(old_affinity) if pin else None
    fio = "fio"
    prefix = f"nice -n {fio_nice} " if fio_nice else ""
    if split is not None:
        rest, fio_cpus = split
        prefix += f"taskset -c {','.join(map(str, sorted(fio_cpus)))} "
        os.sched_setaffinity(0, rest)        # inherited by redis-server, the controller and the agent
    if prefix:
        wrapper = root / "fio-pinned"
        # fio runs in a session of its own, so with the kernel's autogroup scheduling (Linux's default for
        # processes in the root cpu cgroup) its session's group weight is what counts against other sessions
        group = f"echo {fio_nice} >/proc/self/autogroup 2>/dev/null\n" if fio_nice else ""
        wrapper.write_text(f"#!/bin/sh\n{group}exec {prefix}fio \"$@\"\n")
        wrapper.chmod(0o755)
        fio = str(wrapper)
    try:
        broker = lab.start_redis()
        dut = lab.make_dut("bench-dut", size_mib, backing_dir=backing_dir)
        store = f"sqlite:///{root / 'store.sqlite'}"
        lab.start_controller(store)
        agent = lab.start_agent(HOST, [f"dut0={dut.path}"], extra=("--fio", fio))
        db = sessions(make_engine(store))

        def registered() -> bool:
            try:
                with db() as s:
                    return s.get(Host, HOST) is not None
            except Exception:
                return False
        wait_for(registered, 60, "the agent to register")
        assert lab.admin_url
        yield BenchLab(lab, dut, db, ControllerClient(redis_client(broker)), redis_client(lab.admin_url),
                       agent.popen.pid, fio, split[1] if split else None)
    finally:
        lab.stop()
        os.sched_setaffinity(0, old_affinity)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --- pure helpers ------------------------------------------------------------------------------


def split_cpus(allowed: set[int] | frozenset[int]) -> tuple[frozenset[int], frozenset[int]] | None:
    """(CPUs for everything else, CPUs for fio), or None when fewer than 2 CPUs are allowed. fio gets the
    highest-numbered half (at least one CPU; on 2 CPUs: one each), the lab's daemons the rest."""
    cpus = sorted(allowed)
    if len(cpus) < 2:
        return None
    k = max(1, len(cpus) // 2)
    return frozenset(cpus[:-k]), frozenset(cpus[-k:])


def proc_cpu(stat: str, tick: int = TICK) -> tuple[float, float]:
    """(utime + stime, cutime + cstime) in seconds from a /proc/<pid>/stat line: the process's own CPU and
    that of the children it has waited for (fields 14-17; the command name may hold spaces and parens)."""
    fields = stat.rsplit(")", 1)[1].split()
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    return own / tick, children / tick


def last_report(text: str | bytes) -> dict[str, Any]:
    """fio's final JSON report: with ``--status-interval`` it prints one full report after another."""
    try:
        report = json.loads(split_status_stream(text)[-1])
    except FioError as e:
        raise ValueError(f"no fio JSON report found: {e}") from None
    if not isinstance(report, dict):
        raise ValueError("no fio JSON report found")
    return report


def fio_job_cpu(text: str | bytes) -> tuple[float, float]:
    """(CPU seconds of fio's job processes, their longest runtime in seconds) from the final report: each job's
    ``usr_cpu + sys_cpu`` is a percentage of its ``job_runtime``. The rest of fio's process CPU is its main
    process: the status output (live snapshots), the helper thread, start-up and the final report."""
    jobs = last_report(text).get("jobs") or []
    cpu = sum((float(j["usr_cpu"]) + float(j["sys_cpu"])) / 100 * float(j["job_runtime"]) / 1000 for j in jobs)
    runtime = max((float(j["job_runtime"]) / 1000 for j in jobs), default=0.0)
    return cpu, runtime


def ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """Per-pair ratios num[i] / den[i] (pairs measured together, so the pair is the unit)."""
    if len(num) != len(den):
        raise ValueError(f"ratios need as many numerators as denominators ({len(num)} vs {len(den)})")
    return [n / d for n, d in zip(num, den, strict=True)]


def ratio_summary(values: Sequence[float], source: str = "ratios") -> Summary:
    """Mean of the per-pair ratios with its 95% t interval, median and CoV (orchestrator.stats.summary)."""
    return summarize(values, source)


def fmt_ci(s: Summary, fmt: str = "{:.4f}") -> str:
    """``0.9712 [0.9501, 0.9923] (median 0.9700, n=7)``: the mean, its 95% interval, the median; a single
    value says it has no interval."""
    if s.ci_low is None or s.ci_high is None:
        ci = "[no interval: n=1]"
    else:
        ci = f"[{fmt.format(s.ci_low)}, {fmt.format(s.ci_high)}]"
    return f"{fmt.format(s.mean)} {ci} (median {fmt.format(s.median)}, n={s.n})"


def fmt_range(values: Sequence[float], fmt: str = "{:.4f}") -> str:
    return f"{fmt.format(min(values))} … {fmt.format(max(values))}" if values else "-"


def excludes(s: Summary, value: float) -> bool:
    """Whether the 95% interval of the mean excludes ``value`` (e.g. a ratio of 1: a difference is shown)."""
    return s.ci_low is not None and s.ci_high is not None and not (s.ci_low <= value <= s.ci_high)
