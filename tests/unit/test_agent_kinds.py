"""The agent's step-kind registry (agents.kinds) and the ``app`` kind: resolution, the interlock for application
steps (the lab's own filesystem), app-spec.json, cleanup after the process ended, live figures and their export.

Unit tier: a real StepRunner on a temporary state directory, file DUTs, a fake step process (APPSTEP_ARGV) and a
fake release (the real one is agents.apps.cleanup, tested with its module)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import pytest

import agents.kinds.app as app_kind
import agents.labfs as labfs
from agents import kinds
from agents.daemon import DEFAULT_APP_MOUNT_ROOT, Agent, AgentConfig
from agents.exporter import AgentCollector
from agents.live import LiveReader
from agents.runner import StepRunner
from agents.workloads import parse
from labcontract import interlock
from labcontract.errors import StepError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.live import AppLive
from labcontract.protocol import Event, StartStep, StepEnded, StepStarted

SIZE = 256 << 20
WORKLOADS = """
workloads:
  - {name: reader, command: [/bin/true, --x], timeout_s: 60, destructive: false,
     params: {count: {type: int, min: 1, max: 10, default: 3}}}
  - {name: writer, command: [/bin/true], timeout_s: 60, destructive: true}
"""


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Agent, list[Event], Path]]:
    dut = tmp_path / "dut0.img"
    with dut.open("wb") as fh:
        fh.truncate(SIZE)
    duts = (DeclaredDut(name="dut0", path=str(dut), kind="file", size_bytes=SIZE),
            DeclaredDut(name="dut1", path=str(tmp_path / "dut1.img"), kind="file", size_bytes=SIZE))
    (tmp_path / "dut1.img").write_bytes(b"")
    state = tmp_path / "state"
    sent: list[Event] = []
    a = Agent(AgentConfig(host="h1", broker_url="redis://unused", state_dir=state, duts=duts,
                          workloads=parse(WORKLOADS, "w.yaml")),
              HostFacts(hostname="h1"), StepRunner(state), sent.append)
    yield a, sent, tmp_path
    for attempt in a.runner.pending():          # a failed test leaves no process behind
        if a.runner.running(attempt):
            a.runner.signal(attempt, signal.SIGKILL)


def app_payload(devices: list[str], app: dict[str, Any], attempt: str = "r1-s000-a1") -> dict[str, Any]:
    return {"v": StartStep.model_fields["v"].default, "run_id": "r1", "step_id": "r1-s000", "attempt_id": attempt,
            "host": "h1", "action": "app", "kind": "app", "devices": devices, "job_name": "oltp", "app": app,
            "timeout_s": 600, "dispatched_at": time.time()}


SYSBENCH_PREPARE = {"kind": "sysbench", "phase": "prepare", "sysbench": {"tables": 1, "table_size": 100}}
SYSBENCH_RUN = {"kind": "sysbench", "phase": "run", "point": 2, "sysbench": {"tables": 1, "table_size": 100}}


def ended(sent: list[Event]) -> list[StepEnded]:
    return [e for e in sent if isinstance(e, StepEnded)]


# --- the registry ---------------------------------------------------------------------------------------------

def test_each_action_resolves_to_its_one_kind() -> None:
    actions = get_args(StartStep.model_fields["action"].annotation)
    assert set(actions) == set(kinds.actions())
    for action in actions:
        kind = kinds.get(action)
        assert kind.action == action and isinstance(kind, kinds.StepKind) and kind.command_version >= 1
    assert len({id(kinds.get(a)) for a in actions}) == len(actions)


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(StepError, match="has no step kind"):
        kinds.get("rm-rf")


def test_an_action_cannot_be_registered_twice() -> None:
    class Other(kinds.StepKind):
        action = "fio"

        def launch(self, msg: StartStep, targets: kinds.Targets, host: kinds.Host) -> kinds.Launch:
            raise AssertionError

    with pytest.raises(ValueError, match="step kind 'fio' is registered twice"):
        kinds.register(Other())
    assert kinds.register(kinds.get("fio")) is kinds.get("fio")


def test_artifacts_are_per_kind() -> None:
    assert "job.fio" in kinds.get("fio").artifacts and "app.json" not in kinds.get("fio").artifacts
    assert kinds.get("purge").artifacts == ("purge.sh", "fio.stderr")
    assert {"app.json", "app-spec.json", "app.log", "server.log", "tool.out"} <= set(kinds.get("app").artifacts)
    assert "net.json" in kinds.get("net").artifacts


def test_an_unknown_action_is_refused_by_the_agent(agent: tuple[Agent, list[Event], Path]) -> None:
    a, _sent, tmp = agent
    msg = StartStep.model_construct(**{**app_payload([str(tmp / "dut0.img")], SYSBENCH_PREPARE), "action": "bogus"})
    _targets, refused = a.targets_for(msg)
    assert "has no step kind" in refused


# --- interlock: the lab's own filesystem --------------------------------------------------------------------

FS = interlock.Signature("ext4", "filesystem")
PT = interlock.Signature("gpt", "partition_table")


def obs(*sigs: interlock.Signature, mounted: bool = False) -> interlock.ObservedState:
    return interlock.ObservedState(path="/dev/x", real_path="/dev/x", signatures=sigs,
                                   mountpoints=("/mnt",) if mounted else ())


def test_the_lab_filesystem_lifts_only_the_filesystem_signature() -> None:
    declared = [interlock.DeclaredDut(name="d", path="/dev/x")]
    assert interlock.refusal_reasons("/dev/x", declared, obs(FS), "purge")
    assert interlock.refusal_reasons("/dev/x", declared, obs(FS), "purge", lab_fs=True) == []
    assert [r.code for r in interlock.refusal_reasons("/dev/x", declared, obs(FS, PT), "write", lab_fs=True)] == [
        interlock.SIGNATURE]
    codes = [r.code for r in interlock.refusal_reasons("/dev/x", declared, obs(FS, mounted=True), "write",
                                                       lab_fs=True)]
    assert codes == [interlock.MOUNTED]


def test_app_operations() -> None:
    assert interlock.app_operation("sysbench", "prepare") == "purge"
    assert interlock.app_operation("pgbench", "run") == "write"
    assert interlock.app_operation("external", "run", destructive=True) == "write"
    assert interlock.app_operation("external", "run") is None
    assert interlock.lab_filesystem("u1", "u1") and not interlock.lab_filesystem(None, None)
    assert not interlock.lab_filesystem("u1", "u2")


def signed(monkeypatch: pytest.MonkeyPatch, *sigs: interlock.Signature, mounted: bool = False) -> None:
    monkeypatch.setattr(interlock, "observe", lambda p: interlock.ObservedState(
        path=p, real_path=p, signatures=sigs, mountpoints=("/mnt/x",) if mounted else ()))


def marker(state: Path, uuid: str, name: str = "dut0") -> None:
    (state / "apps").mkdir(parents=True, exist_ok=True)
    (state / "apps" / f"{name}.json").write_text(json.dumps({"uuid": uuid, "fs": "ext4", "run_id": "r0",
                                                             "attempt_id": "r0-a", "kind": "sysbench",
                                                             "made_at": 1.0}))


@pytest.mark.parametrize("phase", [SYSBENCH_PREPARE, SYSBENCH_RUN])
def test_a_foreign_filesystem_is_refused_and_the_labs_own_allowed(agent: tuple[Agent, list[Event], Path],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  phase: dict[str, Any]) -> None:
    a, _sent, _tmp = agent
    msg = StartStep.model_validate(app_payload(["dut0"], phase))
    op = "purge" if phase["phase"] == "prepare" else "write"
    signed(monkeypatch, FS)
    monkeypatch.setattr(labfs, "filesystem_uuid", lambda p: "uuid-1")
    _t, refused = a.targets_for(msg)
    assert f"refusing {op}" in refused and "filesystem signature" in refused       # no marker
    marker(a.config.state_dir, "uuid-2")
    assert "filesystem signature" in a.targets_for(msg)[1]                          # another filesystem
    marker(a.config.state_dir, "uuid-1")
    assert a.targets_for(msg)[1] == ""                                              # the lab's own
    signed(monkeypatch, FS, mounted=True)
    assert "mounted on /mnt/x" in a.targets_for(msg)[1]                            # never when mounted
    signed(monkeypatch, FS, PT)
    assert "partition table" in a.targets_for(msg)[1]


def test_a_garbage_marker_is_no_marker(agent: tuple[Agent, list[Event], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    a, _sent, _tmp = agent
    (a.config.state_dir / "apps").mkdir(parents=True)
    (a.config.state_dir / "apps" / "dut0.json").write_text("{not json")
    assert labfs.recorded_uuid(a.config.state_dir, "dut0") is None
    (a.config.state_dir / "apps" / "dut0.json").write_text(json.dumps({"uuid": 5}))
    assert labfs.recorded_uuid(a.config.state_dir, "dut0") is None


def test_the_marker_exception_with_a_real_filesystem(agent: tuple[Agent, list[Event], Path]) -> None:
    """Real mkfs and blkid on a file DUT: refused until the marker records this filesystem's UUID."""
    a, _sent, tmp = agent
    dut = tmp / "dut0.img"
    subprocess.run(["mkfs.ext4", "-F", "-q", str(dut)], check=True)
    msg = StartStep.model_validate(app_payload(["dut0"], SYSBENCH_PREPARE))
    assert "filesystem signature" in a.targets_for(msg)[1]
    uuid = interlock.filesystem_uuid(str(dut))
    assert uuid
    marker(a.config.state_dir, uuid)
    assert a.targets_for(msg)[1] == ""


def test_sysbench_needs_exactly_one_dut(agent: tuple[Agent, list[Event], Path]) -> None:
    a, _sent, _tmp = agent
    msg = StartStep.model_validate(app_payload(["dut0", "dut1"], SYSBENCH_PREPARE))
    assert "exactly one DUT" in a.targets_for(msg)[1]
    msg = StartStep.model_validate(app_payload(["nope"], SYSBENCH_PREPARE))
    assert "not a declared DUT" in a.targets_for(msg)[1]


# --- external workloads at start -------------------------------------------------------------------------------

def external(workload: str, **params: Any) -> dict[str, Any]:
    return {"kind": "external", "phase": "run", "external": {"workload": workload, "params": params, "time": 5}}


def test_an_external_step_must_be_declared_and_its_params_pass(agent: tuple[Agent, list[Event], Path],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    a, _sent, _tmp = agent
    signed(monkeypatch)
    refused = a.targets_for(StartStep.model_validate(app_payload(["dut0"], external("hammerdb"))))[1]
    assert "'hammerdb' is not declared" in refused and "reader, writer" in refused
    refused = a.targets_for(StartStep.model_validate(app_payload(["dut0"], external("reader", count=11, x=1))))[1]
    assert "above the maximum 10" in refused and "'x' is unknown" in refused
    targets, refused = a.targets_for(StartStep.model_validate(app_payload(["dut0"], external("reader"))))
    assert refused == "" and targets.external is not None and targets.external.name == "reader"
    assert targets.app is not None and targets.app.external is not None
    assert targets.app.external.params == {"count": 3}                 # the declared default filled in


def test_external_interlock_follows_the_declaration(agent: tuple[Agent, list[Event], Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    a, _sent, _tmp = agent
    signed(monkeypatch, FS)
    assert a.targets_for(StartStep.model_validate(app_payload(["dut0"], external("reader"))))[1] == ""
    refused = a.targets_for(StartStep.model_validate(app_payload(["dut0"], external("writer"))))[1]
    assert "refusing write" in refused
    signed(monkeypatch, mounted=True)
    refused = a.targets_for(StartStep.model_validate(app_payload(["dut0"], external("reader"))))[1]
    assert "mounted on /mnt/x" in refused


# --- through the real runner -----------------------------------------------------------------------------------

FAKE_APPSTEP = """
import json, sys, time
spec = json.load(open(sys.argv[1]))
with open("live.tmp", "w") as fh:
    json.dump({"t": time.time(), "point": 2, "tps": 123.5, "lat_p99_ms": 4.5}, fh)
__import__("os").rename("live.tmp", "live.json")
deadline = time.time() + 120          # never outlives a failed test for long
while not __import__("os").path.exists("go") and time.time() < deadline:
    time.sleep(0.02)
with open(sys.argv[2], "w") as fh:
    json.dump({"tool": "fake", "metrics": {"tps": 123.5}}, fh)
"""


@pytest.fixture
def fake_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    script = tmp_path / "fake_appstep.py"
    script.write_text(FAKE_APPSTEP)
    monkeypatch.setattr(app_kind, "APPSTEP_ARGV", (sys.executable, str(script)))
    released: list[Path] = []

    def release(path: Path) -> list[str]:
        released.append(path)
        return ["nothing held"]

    monkeypatch.setattr(app_kind, "_release", release)
    return released


def test_an_app_step_writes_its_spec_and_is_released_when_it_ended(agent: tuple[Agent, list[Event], Path],
                                                                   fake_step: list[Path],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    a, sent, tmp = agent
    signed(monkeypatch)
    a.start_step(app_payload(["dut0"], SYSBENCH_PREPARE))
    assert [type(e).__name__ for e in sent] == ["StepStarted"], sent
    attempt = a.runner.get("r1-s000-a1")
    assert attempt is not None
    spec = json.loads(attempt.file("app-spec.json").read_text())
    assert spec == {"attempt_id": "r1-s000-a1", "run_id": "r1",
                    "app": StartStep.model_validate(app_payload(["dut0"], SYSBENCH_PREPARE)).app.model_dump(  # type: ignore[union-attr]
                        mode="json"),
                    "duts": [{"name": "dut0", "path": str(tmp / "dut0.img"), "kind": "file", "size_bytes": SIZE}],
                    "state_dir": str(a.config.state_dir.resolve()), "external": None,
                    "mount_root": str(DEFAULT_APP_MOUNT_ROOT),
                    "binaries": {"mariadbd": None, "mariadb_install_db": None, "sysbench": None, "pg_bin_dir": None,
                                 "pgbench": None}}
    try:
        from agents.apps import AppSpec
    except ImportError:
        pass
    else:
        AppSpec.model_validate(spec)
    state = attempt.state()
    assert state["action"] == "app" and state["command_version"] == 1
    # live figures while it runs, exported per second
    wait_for(lambda: attempt.file("live.json").exists())
    a.check_attempts()
    a.update_live(force=True)
    [live] = a.live
    assert live.phase == "app" and live.app is not None and live.app.tps == 123.5 and live.expected_s > 0
    assert live.app.device == "dut0"
    families = {f.name: f for f in AgentCollector(a).collect()}
    [sample] = families["lab_app_tps"].samples
    assert sample.labels == {"host": "h1", "device": "dut0"} and sample.value == 123.5
    assert families["lab_app_latency_p99_seconds"].samples[0].value == pytest.approx(0.0045)
    assert fake_step == []                                     # never while the process runs
    attempt.file("go").write_text("")
    wait_for(lambda: not a.runner.running(attempt))
    a.check_attempts()                  # the release runs in a thread of its own (slow_cleanup); no end yet
    wait_for(lambda: fake_step == [attempt.path] and not a.runner.releasing(attempt))
    a.check_attempts()
    assert fake_step == [attempt.path]                         # released before the end was reported
    [end] = ended(sent)
    assert end.outcome == "exited" and end.exit_code == 0
    names = {art.name for art in end.artifacts}
    assert {"app.json", "app-spec.json"} <= names and "job.fio" not in names
    assert attempt.file("released").read_text() == "nothing held\n"
    a.report_step({"v": StartStep.model_fields["v"].default, "attempt_id": "r1-s000-a1"})
    assert fake_step == [attempt.path]                         # once


def test_a_cancelled_app_step_is_released_and_a_failed_release_is_reported(agent: tuple[Agent, list[Event], Path],
                                                                           fake_step: list[Path],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    a, sent, _tmp = agent
    signed(monkeypatch)
    a.start_step(app_payload(["dut0"], SYSBENCH_PREPARE))
    attempt = a.runner.get("r1-s000-a1")
    assert attempt is not None
    calls: list[Path] = []

    def failing(path: Path) -> list[str]:
        calls.append(path)
        raise RuntimeError("umount: target is busy")

    monkeypatch.setattr(app_kind, "_release", failing)
    a.cancel_step({"v": StartStep.model_fields["v"].default, "attempt_id": "r1-s000-a1", "reason": "user"})
    wait_for(lambda: bool(calls) and not a.runner.releasing(attempt))   # in a thread of its own, after the kill
    a.check_attempts()
    assert calls == [attempt.path]         # once: the end reports its failure, the monitor never waits on a retry
    [end] = ended(sent)
    assert end.outcome == "cancelled" and "cleanup failed: umount: target is busy" in end.reason
    assert attempt.file("cleanup-error").exists() and not attempt.file("released").exists()


def test_a_restarted_agent_releases_an_app_step_that_ended_while_it_was_away(
        agent: tuple[Agent, list[Event], Path], fake_step: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    a, _sent, _tmp = agent
    signed(monkeypatch)
    a.start_step(app_payload(["dut0"], SYSBENCH_PREPARE))
    attempt = a.runner.get("r1-s000-a1")
    assert attempt is not None
    attempt.file("go").write_text("")
    wait_for(lambda: attempt.file("rc").exists() and not a.runner.running(attempt))
    sent2: list[Event] = []
    b = Agent(a.config, a.facts, StepRunner(a.config.state_dir), sent2.append)
    b.register()                       # its release starts, in a thread of its own
    wait_for(lambda: fake_step == [attempt.path] and not b.runner.releasing(attempt))
    b.check_attempts()
    assert fake_step == [attempt.path]
    assert [e.outcome for e in ended(sent2)] == ["exited"]


def test_a_fio_step_and_a_purge_step_still_run(agent: tuple[Agent, list[Event], Path]) -> None:
    a, sent, tmp = agent
    base = {"v": StartStep.model_fields["v"].default, "run_id": "r1", "step_id": "r1-s000", "host": "h1",
            "devices": [str(tmp / "dut0.img")], "job_name": "p", "timeout_s": 60, "dispatched_at": time.time()}
    a.start_step({**base, "attempt_id": "r1-s000-a1", "action": "purge", "kind": "purge"})
    wait_for(lambda: all(not a.runner.running(x) for x in a.runner.pending()))   # one step per DUT at a time
    workload = {"name": "p", "rw": "read", "bs": 4096, "runtime": 1, "footprint": "4%", "ioengine": "psync",
                "direct": False}
    a.start_step({**base, "attempt_id": "r1-s000-a2", "workload": workload})
    assert [e.attempt_id for e in sent if isinstance(e, StepStarted)] == ["r1-s000-a1", "r1-s000-a2"]
    wait_for(lambda: all(not a.runner.running(x) for x in a.runner.pending()))
    a.check_attempts()
    ends = {e.attempt_id: e for e in ended(sent)}
    assert ends["r1-s000-a1"].outcome == "exited" and ends["r1-s000-a1"].exit_code == 0
    assert {x.name for x in ends["r1-s000-a1"].artifacts} <= {"purge.sh", "fio.stderr"}
    assert ends["r1-s000-a2"].exit_code == 0 and "fio.json" in {x.name for x in ends["r1-s000-a2"].artifacts}


# --- live.json ----------------------------------------------------------------------------------------------

def test_live_json_is_bounded_and_stale_or_garbage_ignored(tmp_path: Path) -> None:
    from agents.runner import Attempt

    at = Attempt("a1", tmp_path)
    reader = LiveReader()
    now = time.time()
    assert reader.app_live(at, now) is None
    f = tmp_path / "live.json"
    f.write_text(json.dumps({"t": now, "tps": 10.0, "qps": 200, "point": 4, "extra": "ignored"}))
    assert reader.app_live(at, now) == AppLive(t=now, tps=10.0, qps=200.0, point=4)
    for bad in ({"t": now, "tps": -1}, {"t": now, "tps": "1e400"}, {"tps": 1.0}, [1, 2], {"t": now, "tps": 1e13}):
        f.write_text(json.dumps(bad))
        assert reader.app_live(at, now) is None, bad
    f.write_text(f'{{"t": {now}, "tps": NaN}}')
    assert reader.app_live(at, now) is None
    f.write_text(json.dumps({"t": now - 60, "tps": 1.0}))
    assert reader.app_live(at, now) is None                      # stale by its own time
    f.write_text(json.dumps({"t": now, "tps": 1.0, "pad": "x" * 5000}))
    assert reader.app_live(at, now) is None                      # too large
    f.write_text(json.dumps({"t": now, "tps": 1.0}))
    os.utime(f, (now - 60, now - 60))
    assert reader.app_live(at, now) is None                      # not rewritten for a minute


# --- the dashboard ------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_the_application_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    import yaml

    from dashboards import generate as G

    [(name, build)] = G.APP_DASHBOARDS.items()
    board = build()
    queries = G.panel_queries(board) + G.annotation_queries(board)
    assert any("lab_app_tps" in e for _t, e in queries)
    values = {"host": "h1", "device": "/dev/nvme0n1", "run": "r1"}
    doc = {"groups": [{"name": "q", "rules": [{"record": f"dashboard:query_{i}", "expr": G.substitute(e, values)}
                                                for i, (_t, e) in enumerate(queries)]}]}
    f = tmp_path / "queries.yml"
    f.write_text(yaml.safe_dump(doc))
    subprocess.run(["promtool", "check", "rules", str(f)], check=True, capture_output=True)
    assert (Path(G.__file__).parent / name).read_text() == G.render(board)


def test_a_start_on_a_dut_another_attempt_still_holds_is_refused(agent: tuple[Agent, list[Event], Path],
                                                                  fake_step: list[Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    a, sent, tmp = agent
    signed(monkeypatch)
    a.start_step(app_payload(["dut0"], SYSBENCH_PREPARE))
    base = {"v": StartStep.model_fields["v"].default, "run_id": "r2", "step_id": "r2-s000", "host": "h1",
            "devices": [str(tmp / "dut0.img")], "job_name": "p", "timeout_s": 60, "dispatched_at": time.time()}
    a.start_step({**base, "attempt_id": "r2-s000-a1", "action": "purge", "kind": "purge"})
    [end] = ended(sent)
    assert end.attempt_id == "r2-s000-a1" and end.outcome == "refused"
    assert "still held by attempt r1-s000-a1" in end.reason and a.runner.get("r2-s000-a1") is None
    a.start_step(app_payload(["dut0"], SYSBENCH_PREPARE))        # a redelivery of the holder's own start: no-op
    assert [e.attempt_id for e in ended(sent)] == ["r2-s000-a1"]
