"""What several step kinds share: default behaviour, the generic start message, the provenance of a result
row (host facts, the run's devices as identified in a review, OP mode, provisioning, digests)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.bounds import PROVENANCE_MAX_BYTES
from labcontract.protocol import StartStep
from labcontract.suite import Workload
from orchestrator.kinds.base import KindContext
from orchestrator.states import StepState
from orchestrator.store.models import Artifact, Attempt, Host, Run, Step, find_device

log = logging.getLogger("orchestrator.controller")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run_devices(run: Run) -> tuple[str, ...]:
    return tuple(run.devices or [run.device])


class BaseKind:
    """Defaults for a kind that runs on an agent, one step at a time, and stores nothing."""

    names: tuple[str, ...] = ()
    local = False
    agent_kind: tuple[str, int] | None = ("fio", 1)
    lab_fs = False
    retryable = False
    repurge_before_retry = False

    def operation(self, step: Step) -> str | None:
        return None

    def expected_seconds(self, ctx: KindContext, step: Step) -> int:
        return (Workload.model_validate(step.workload).expected_seconds if step.workload
                else ctx.tuning.purge_timeout_s)

    def start_message(self, ctx: KindContext, run: Run, step: Step, att: Attempt) -> StartStep:
        return generic_start(ctx, run, step, att, action="fio")

    def cohort(self, run: Run, step: Step) -> list[Step]:
        return [step]

    def store(self, ctx: KindContext, s: Session, att: Attempt, stored: Mapping[str, bytes]) -> None:
        return None

    def after_end(self, ctx: KindContext, s: Session, att: Attempt) -> None:
        return None


def generic_start(ctx: KindContext, run: Run, step: Step, att: Attempt, *, action: str,
                  workload: Workload | None = None, status_interval_s: int | None = None) -> StartStep:
    return StartStep(run_id=run.id, step_id=step.id, attempt_id=att.id, host=att.host,
                     action=action,
                     devices=run_devices(run), job_name=step.name, kind=step.kind,
                     round=step.round, suite=run.suite_name, workload=workload,
                     status_interval_s=status_interval_s,
                     timeout_s=att.timeout_s, dispatched_at=att.dispatched_at or ctx.clock())


def device_provenance(host: Host | None, run: Run) -> list[dict[str, Any]]:
    """For every device of the run what identifies it in a review (model, serial, firmware, capacity,
    driver): the declared DUT row, completed from the host's block-device facts matched by path or by-id."""
    blocks = [b for b in (host.facts.get("block_devices") or []) if isinstance(b, dict)] if host else []
    devices = []
    for path in run_devices(run):
        dev = find_device(host, path) if host else None
        entry: dict[str, Any] = {k: getattr(dev, k) for k in ("name", "path", "kind", "size_bytes", "model",
                                                              "serial", "firmware", "by_id")} if dev else {}
        links = {path, *([dev.path, dev.by_id] if dev else [])} - {None}
        block = next((b for b in blocks if b.get("path") in links or links & set(b.get("by_id") or ())), {})
        for k in ("name", "path", "size_bytes", "model", "serial", "firmware", "driver", "transport",
                  "controller", "rotational", "logical_block_size", "physical_block_size"):
            if entry.get(k) is None and block.get(k) is not None:
                entry[k] = block[k]
        devices.append(entry | {"path": entry.get("path") or path})
    return devices


# what a result row keeps of its host's facts: not the host's every block device (the run's own are in
# "devices") nor its external workload declarations (an application result names its own)
_NOT_IN_PROVENANCE = ("block_devices", "app_workloads")
_CUT_FIRST = ("storage_controllers", "net_paths")


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str))


def host_provenance(host: Host | None) -> dict[str, Any]:
    """What a result row stores of its host's facts, within PROVENANCE_MAX_BYTES of JSON (lists cut when the
    facts, each bounded on the wire, would still pass it): every result row copies it."""
    facts = {k: v for k, v in (host.facts or {}).items() if k not in _NOT_IN_PROVENANCE} if host else {}
    for key in _CUT_FIRST:
        while json_size(facts) > PROVENANCE_MAX_BYTES and isinstance(facts.get(key), list) and facts[key]:
            facts[key] = facts[key][:len(facts[key]) // 2]
    if json_size(facts) > PROVENANCE_MAX_BYTES:
        return {"hostname": str(facts.get("hostname", ""))[:255], "cut": "host facts too large to keep"}
    return facts


def result_provenance(ctx: KindContext, s: Session, att: Attempt) -> dict[str, Any]:
    """The provenance of a result on a host's DUTs: the host's facts as registered, the devices, the OP mode,
    what provisioning did before it, the suite's and the job's digests."""
    host = s.get(Host, att.host)
    step, run = att.step, att.step.run
    devices = device_provenance(host, run)
    return {
        "host": host_provenance(host),
        "agent_version": host.agent_version if host else None,
        "device": devices[0],
        "devices": devices,
        "op_mode": step.cell.get("op_mode", "stock"),
        "op_note": step.note,
        "suite_sha256": run.suite_sha256,
        **job_provenance(s, att, step),
        **provisioning_provenance(ctx, run, step),
    }


def job_provenance(s: Session, att: Attempt, step: Step) -> dict[str, str]:
    """``job_sha256``: the job the attempt ran (its stored ``job.fio``; the planned text when it has none). A
    Windows agent runs its own engine and filename spelling: then ``planned_job_sha256`` is the plan's."""
    planned = sha(step.job_text)
    ran = s.scalar(select(Artifact.sha256).where(Artifact.attempt_id == att.id, Artifact.name == "job.fio"))
    if ran is None or ran == planned:
        return {"job_sha256": planned}
    return {"job_sha256": ran, "planned_job_sha256": planned}


def provisioning_provenance(ctx: KindContext, run: Run, step: Step) -> dict[str, Any]:
    """What Ansible did to the DUTs before this result (methods, capacities) and the DUT facts (firmware,
    driver, health, wear) it recorded before the run; empty for suites that don't provision."""
    done = [st for st in run.steps if st.kind == "dut_state" and st.state == StepState.SUCCEEDED
            and st.cell.get("op_mode") == step.cell.get("op_mode") and (st.seq, st.round) < (step.seq, step.round)]
    out: dict[str, Any] = {}
    if done:
        out["provisioning"] = [st.note for st in done]
    before = next((st for st in run.steps if st.kind == "facts" and st.cell.get("phase") == "before"
                   and st.state == StepState.SUCCEEDED), None)
    art = next((a for a in before.attempts[-1].artifacts if a.name == "facts.json"), None) if before else None
    if art is not None:
        try:
            if art.size > PROVENANCE_MAX_BYTES:      # a lab host's module output: bounded like every fact
                raise ValueError(f"facts.json of {art.size} bytes, over {PROVENANCE_MAX_BYTES}")
            out["dut_facts"] = json.loads(ctx.artifacts.read(art.path))
        except (OSError, ValueError) as e:
            log.warning("DUT facts of run %s unreadable: %s", run.id, e, extra={"run": run.id})
    return out


def ctx_of(att: Attempt) -> dict[str, str]:
    """The log context of an attempt."""
    return {"run": att.step.run_id, "step": att.step.name, "host": att.host}
