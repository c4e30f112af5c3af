"""Suite -> plan: the steps a suite expands to on one device (what to run, not a run)."""

from __future__ import annotations

from dataclasses import dataclass

from labcontract.fiojob import render_job
from labcontract.suite import Suite, Workload


@dataclass(frozen=True)
class PlannedStep:
    seq: int
    name: str
    workload: Workload
    job_text: str


def plan(suite: Suite, device_path: str, *, runtime_override: int | None = None) -> list[PlannedStep]:
    if runtime_override is not None:
        suite = suite.with_runtime(runtime_override)
    return [PlannedStep(seq=i, name=w.name, workload=w, job_text=render_job(w, device_path))
            for i, w in enumerate(suite.workloads)]
