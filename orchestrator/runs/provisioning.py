"""Steps the controller runs itself, through Ansible (ansible-runner): ``provision`` (the host: packages,
driver, I/O tuning, the agent, ``playbooks/agent.yml``), ``dut_state`` (purge and OP mode
of the run's DUTs, ``playbooks/dut_state.yml``) and ``facts`` (firmware, driver, health and wear before
and after the run, ``playbooks/facts.yml``).

A playbook runs in a thread of ansible-runner (``run_async``), never in the controller's loop: the
controller starts it and polls it each pass. Every playbook event goes to the controller's log with
``[run …] [step …] [host …]`` and to the attempt's ``ansible.log`` artifact; the module's per-DUT
results and the facts become the step's artifacts and, through the store, the provenance of the run's
results.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labcontract.inventory import Inventory
from orchestrator.runs.opmode import applied_ops

log = logging.getLogger(__name__)
LOCAL_KINDS = frozenset({"provision", "dut_state", "facts"})
_DUT_TASKS = ("Purge DUTs", "Set the OP mode")
_CANCEL_CHECK_S = 0.5       # how often a running playbook checks whether it is cancelled


@dataclass
class LocalOutcome:
    ok: bool
    reason: str = ""
    note: str = ""
    artifacts: dict[str, bytes] = field(default_factory=dict)


@dataclass
class _Job:
    run_id: str
    step: str
    host: str
    kind: str
    workdir: Path
    thread: threading.Thread
    runner: Any
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LocalStep:
    attempt_id: str
    run_id: str
    step: str
    kind: str               # dut_state | facts
    host: str
    devices: Sequence[str]
    op_mode: str = ""
    purge: bool = True
    phase: str = "before"   # facts: before | after


class Provisioner:
    def __init__(self, inventory: Inventory, inventory_dir: Path, playbooks: Path, work_dir: Path,
                 search_path: str = os.defpath) -> None:
        """``search_path``: the PATH playbooks run with; the ansible-playbook installed beside this
        Python (the project's venv) goes first."""
        self.inventory, self.inventory_dir, self.playbooks = inventory, inventory_dir, playbooks
        self.work_dir = work_dir
        self.path = os.pathsep.join([str(Path(sys.executable).parent), search_path])
        self._jobs: dict[str, _Job] = {}
        self._closing = threading.Event()

    def close(self, timeout_s: float = 3.0) -> None:
        """At the controller's stop: playbooks still running are cancelled (ansible-runner kills their
        process group within ``_CANCEL_CHECK_S``), so the process exits within seconds of SIGTERM."""
        self._closing.set()
        deadline = time.monotonic() + timeout_s
        for attempt_id, job in list(self._jobs.items()):
            if job.thread.is_alive():
                log.warning("playbook of attempt %s cancelled: the controller stops", attempt_id,
                            extra={"run": job.run_id, "step": job.step, "host": job.host})
                job.thread.join(max(deadline - time.monotonic(), 0.1))

    def problems(self, host: str, devices: Sequence[str]) -> list[str]:
        """Why (host, devices) cannot be provisioned from this inventory (empty: they can)."""
        try:
            inv_host = self.inventory.host(host)
        except Exception as e:
            return [f"host {host} is not in the inventory {self.inventory_dir} ({e})"]
        out = []
        for dev in devices:
            try:
                inv_host.dut(dev)
            except Exception:
                out.append(f"{dev} is not a DUT of {host} in the inventory {self.inventory_dir}")
        return out

    def start(self, step: LocalStep) -> None:
        import ansible_runner

        workdir = self.work_dir / step.attempt_id
        shutil.rmtree(workdir, ignore_errors=True)
        (workdir / "out").mkdir(parents=True)
        (workdir / "runner" / "env").mkdir(parents=True)
        # how often the runner checks the cancel callback while the playbook is quiet (default 5 s)
        (workdir / "runner" / "env" / "settings").write_text(f"pexpect_timeout: {_CANCEL_CHECK_S}\n")
        if step.kind == "provision":
            playbook = "agent.yml"
            extravars: dict[str, Any] = {"agent_hosts": step.host}
        elif step.kind == "facts":
            playbook = "facts.yml"
            extravars = {"facts_hosts": step.host, "facts_phase": step.phase,
                                         "facts_dir": str(workdir / "out")}
        else:
            playbook = "dut_state.yml"
            extravars = {"dut_hosts": step.host, "dut_select": list(step.devices), "dut_purge": step.purge,
                         "dut_op_mode": step.op_mode, "dut_once_token": step.attempt_id,
                         "dut_report_dir": str(workdir / "out")}
        ctx = {"run": step.run_id, "step": step.step, "host": step.host}
        job = _Job(step.run_id, step.step, step.host, step.kind, workdir, threading.Thread(), None)

        def on_event(ev: dict[str, Any]) -> bool:
            text = str(ev.get("stdout") or "").strip()
            if text:
                job.lines.append(text)
                for line in text.splitlines():
                    if line.strip():
                        log.info("ansible: %s", line.strip(), extra=ctx)
            return True

        thread, runner = ansible_runner.run_async(
            private_data_dir=str(workdir / "runner"), playbook=str(self.playbooks / playbook),
            inventory=str(self.inventory_dir), limit=step.host, extravars=extravars,
            envvars={"ANSIBLE_CONFIG": str(self.playbooks / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                     "PATH": self.path},
            event_handler=on_event, quiet=True,
            # a cancel callback of our own: without one, ansible-runner installs SIGTERM/SIGINT handlers on
            # the main thread, and the controller no longer stops on SIGTERM (systemctl stop hangs)
            cancel_callback=self._closing.is_set)
        job.thread, job.runner = thread, runner
        self._jobs[step.attempt_id] = job
        log.info("playbook %s started", playbook, extra=ctx)

    def running(self, attempt_id: str) -> bool:
        job = self._jobs.get(attempt_id)
        return job is not None and job.thread.is_alive()

    def poll(self, attempt_id: str) -> LocalOutcome | None:
        """None while the playbook runs; its outcome once it ended (or if this controller never ran it)."""
        job = self._jobs.get(attempt_id)
        if job is None:
            return LocalOutcome(ok=False, reason="the controller restarted while this playbook ran")
        if job.thread.is_alive():
            return None
        del self._jobs[attempt_id]
        return outcome_of(job)


def _dut_results(runner: Any) -> tuple[list[dict[str, Any]], list[str]]:
    results, failures = [], []
    for ev in runner.events:
        data = ev.get("event_data", {})
        if ev.get("event") not in ("runner_item_on_ok", "runner_item_on_failed") or data.get("task") not in _DUT_TASKS:
            continue
        res = data.get("res", {})
        results.append({"task": data.get("task"), **{k: res.get(k) for k in (
            "method", "device", "op_mode", "capacity_before", "capacity_after", "footprint_bytes", "commands",
            "changed", "msg", "reasons")}})
        if ev.get("event") == "runner_item_on_failed":
            failures.append(str(res.get("msg") or res.get("reasons") or "failed"))
    return results, failures


def mixed_op_methods(results: list[dict[str, Any]]) -> list[str]:
    """Why an ``hp:`` OP mode set on the device (namespace resize, HPA, SCSI resize) for some devices of a
    group and by the footprint method for others cannot be measured: the group's devices share one fio job,
    so the footprint limit either applies to all of them or to none (orchestrator/runs/opmode.py)."""
    ops = [a for a in applied_ops(results) if a.op_mode != "stock"]
    resized = [a for a in ops if a.on_device]
    if not resized or len(resized) == len(ops):
        return []
    by_method = "; ".join(f"{a.device}: {a.method}" for a in ops)
    return [f"{ops[0].op_mode} was set on some devices of the group only ({by_method}): the devices share one "
            f"fio job, so all of them must be resized or none; give the group's DUTs the same op_methods in "
            f"the inventory"]


def outcome_of(job: _Job) -> LocalOutcome:
    runner = job.runner
    arts = {"ansible.log": ("\n".join(job.lines) + "\n").encode()}
    if job.kind == "provision":
        ok = runner.status == "successful"
        changed = (runner.stats or {}).get("changed", {}).get(job.host, 0)
        return LocalOutcome(ok=ok, reason="" if ok else f"agent.yml {runner.status} (rc {runner.rc})",
                            note=f"host {job.host} provisioned by agent.yml ({changed} change(s))", artifacts=arts)
    if job.kind == "facts":
        facts_file = job.workdir / "out" / f"{job.host}.{'after' if 'after' in job.step else 'before'}.json"
        found = sorted((job.workdir / "out").glob(f"{job.host}.*.json"))
        facts_file = facts_file if facts_file.exists() else (found[0] if found else facts_file)
        if facts_file.exists():
            arts["facts.json"] = facts_file.read_bytes()
        ok = runner.status == "successful" and "facts.json" in arts
        duts = json.loads(arts["facts.json"]).get("duts", []) if "facts.json" in arts else []
        note = "; ".join(f"{d.get('name')}: fw {d.get('firmware')}, "
                         f"{'healthy' if (d.get('health') or {}).get('healthy', True) else 'UNHEALTHY'}" for d in duts)
        return LocalOutcome(ok=ok, reason="" if ok else f"facts playbook {runner.status} (rc {runner.rc})",
                            note=note, artifacts=arts)
    results, failures = _dut_results(runner)
    failures += mixed_op_methods(results)
    arts["dut_state.json"] = json.dumps(results, indent=1).encode()
    ok = runner.status == "successful" and not failures
    note = "; ".join(f"{r['task'].split()[0].lower()} {(r.get('device') or {}).get('path', '?')}: {r.get('method')}"
                     + (f" ({r['op_mode']}, capacity {r.get('capacity_after')})" if r.get("op_mode") else "")
                     for r in results if not r.get("msg"))
    reason = "" if ok else ("; ".join(failures) or f"dut_state playbook {runner.status} (rc {runner.rc})")
    return LocalOutcome(ok=ok, reason=reason, note=note, artifacts=arts)
