"""The agent trusts nothing it receives (issue 12, item 1) and keeps its deadlines on its own monotonic clock
(item 6): start messages validated as strictly as a suite, path-safe attempt directories, the interlock run on
the job file actually rendered. Unit tier: a real StepRunner on a temporary state directory and file DUTs; the
checks refuse before anything is launched, so no fio runs here."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import agents.kinds.fio as fio_kind
import agents.runner as runner_mod
from agents.daemon import Agent, AgentConfig
from agents.runner import StepRunner
from labcontract import interlock
from labcontract.errors import StepError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import Event, StartStep, StepEnded

INJECTION = "1%\nexec_prerun=touch X\n[evil]\nfilename=/dev/loop7\nrw=write\n;%"


@pytest.fixture
def agent(tmp_path: Path) -> tuple[Agent, list[Event], Path]:
    dut = tmp_path / "dut0.img"
    dut.write_bytes(b"\0" * 65536)
    duts = (DeclaredDut(name="dut0", path=str(dut), kind="file", size_bytes=65536),)
    state = tmp_path / "state"
    sent: list[Event] = []
    a = Agent(AgentConfig(host="h1", broker_url="redis://unused", state_dir=state, duts=duts),
              HostFacts(hostname="h1", fio_version="fio-3.33"), StepRunner(state), sent.append)
    return a, sent, tmp_path


def payload(dut: str, **kw: Any) -> dict[str, Any]:
    workload = {"name": "p", "rw": "read", "bs": 4096, "runtime": 1, **kw.pop("workload", {})}
    msg = {"v": StartStep.model_fields["v"].default, "run_id": "r1", "step_id": "r1-s000", "attempt_id": "r1-s000-a1",
           "host": "h1", "devices": [dut], "job_name": "p", "workload": workload, "timeout_s": 60,
           "dispatched_at": time.time(), **kw}
    return msg


def refusals(sent: list[Event]) -> list[StepEnded]:
    return [e for e in sent if isinstance(e, StepEnded) and e.outcome == "refused"]


def created(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.name not in ("dut0.img",))


def test_the_footprint_injection_is_refused_before_anything_is_created(agent: tuple[Agent, list[Event], Path]) -> None:
    a, sent, tmp = agent
    a.start_step(payload(str(tmp / "dut0.img"), workload={"footprint": INJECTION}))
    [ended] = refusals(sent)
    assert ended.attempt_id == "r1-s000-a1"
    assert "malformed StartStep" in ended.reason and "footprint" in ended.reason
    assert created(tmp) == ["state", "state/attempts"]


@pytest.mark.parametrize("attempt_id", ["x/../../../ESCAPED", "..", "../ESCAPED", ".hidden", "a..b", "a/b", "x" * 200])
def test_an_attempt_id_that_is_not_path_safe_creates_nothing(agent: tuple[Agent, list[Event], Path],
                                                            attempt_id: str) -> None:
    a, sent, tmp = agent
    a.start_step(payload(str(tmp / "dut0.img"), attempt_id=attempt_id))
    assert refusals(sent) == []            # logged: an id like that names no attempt the controller knows
    assert created(tmp) == ["state", "state/attempts"]
    with pytest.raises(StepError, match="not path-safe"):
        a.runner.attempt_path(attempt_id)


def test_the_runner_refuses_an_unsafe_id_even_from_a_valid_looking_message(tmp_path: Path) -> None:
    runner = StepRunner(tmp_path / "state")
    msg = StartStep.model_construct(**{**payload("/x"), "attempt_id": "../../ESCAPED", "workload": None})
    with pytest.raises(StepError, match="not path-safe"):
        runner.start(msg, [])
    assert not (tmp_path / "ESCAPED").exists()


def test_a_job_file_naming_an_undeclared_device_is_refused(agent: tuple[Agent, list[Event], Path],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    a, sent, tmp = agent
    real = fio_kind.render_job
    monkeypatch.setattr(fio_kind, "render_job",
                        lambda w, d, **kw: real(w, d, **kw) + "\n[evil]\nfilename=/dev/loop7\nrw=write\n")
    a.start_step(payload(str(tmp / "dut0.img")))
    [ended] = refusals(sent)
    assert "job evil opens /dev/loop7, not a declared DUT this step names" in ended.reason
    assert created(tmp) == ["state", "state/attempts"]


def test_a_write_in_the_rendered_job_asks_the_interlock_though_the_workload_reads(
        agent: tuple[Agent, list[Event], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    a, sent, tmp = agent
    dut = str(tmp / "dut0.img")
    real = fio_kind.render_job
    monkeypatch.setattr(fio_kind, "render_job",
                        lambda w, d, **kw: real(w, d, **kw) + f"\n[also]\nfilename={dut}\nrw=write\n")
    monkeypatch.setattr(interlock, "observe", lambda p: interlock.ObservedState(path=p, real_path=p,
                                                                                 mountpoints=("/mnt/data",)))
    a.start_step(payload(dut))
    [ended] = refusals(sent)
    assert ended.reason.startswith(f"refusing write on {dut}: mounted on /mnt/data")
    assert created(tmp) == ["state", "state/attempts"]


def test_a_symlink_to_a_declared_dut_is_that_dut(agent: tuple[Agent, list[Event], Path]) -> None:
    a, _sent, tmp = agent
    link = tmp / "by-id-dut0"
    link.symlink_to(tmp / "dut0.img")
    assert a.dut_for(str(link)).name == "dut0"


def test_a_host_mismatch_and_a_non_mapping_payload_are_refused(agent: tuple[Agent, list[Event], Path]) -> None:
    a, sent, tmp = agent
    a.start_step([1, 2, 3])  # type: ignore[arg-type]
    a.start_step(payload(str(tmp / "dut0.img"), host="other"))
    assert [e.reason for e in refusals(sent)] == ["message for host other reached host h1"]


# --- deadlines on the agent's monotonic clock ----------------------------------------------------------

def attempt_with_state(tmp_path: Path, **state: Any) -> tuple[StepRunner, runner_mod.Attempt]:
    runner = StepRunner(tmp_path / "state")
    path = runner.root / "r1-s000-a1"
    path.mkdir()
    (path / "state.json").write_text(json.dumps(state))
    return runner, runner_mod.Attempt("r1-s000-a1", path)


@pytest.mark.parametrize("skew", [-300.0, 300.0, 86400.0])
def test_a_wall_clock_jump_never_makes_a_step_overdue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      skew: float) -> None:
    now = time.time()
    runner, att = attempt_with_state(tmp_path, launched_at=now, launched_mono=time.monotonic(),
                                     boot_id=runner_mod.boot_id(), timeout_s=120, deadline=now + 120)
    monkeypatch.setattr(runner_mod.time, "time", lambda: now + skew)
    assert not runner.overdue(att)


def test_the_timeout_runs_from_the_monotonic_launch(tmp_path: Path) -> None:
    runner, att = attempt_with_state(tmp_path, launched_at=time.time(), launched_mono=time.monotonic() - 121,
                                     boot_id=runner_mod.boot_id(), timeout_s=120)
    assert runner.overdue(att)


def test_after_a_reboot_or_from_an_older_agent_the_hosts_own_launch_time_counts(tmp_path: Path) -> None:
    runner, att = attempt_with_state(tmp_path, launched_at=time.time() - 10, launched_mono=1.0, boot_id="other",
                                     timeout_s=120)
    assert not runner.overdue(att)
    runner, att = attempt_with_state(tmp_path / "b", launched_at=time.time() - 200, deadline=time.time() - 80)
    assert runner.overdue(att)


def test_an_attempt_cut_by_a_power_loss_says_the_host_restarted(tmp_path: Path) -> None:
    """Found on the VM lab (tests/vmlab/test_4_faults.py): after a power loss the agent's report said only "killed
    with its wrapper"; an attempt launched in another boot says the host restarted."""
    runner, att = attempt_with_state(tmp_path, launched_at=time.time() - 10, launched_mono=1.0, boot_id="before",
                                     timeout_s=120)
    ended = runner.collect(att, "h1")
    assert ended.outcome == "error" and ended.reason.startswith("the host restarted while fio ran")
    runner, att = attempt_with_state(tmp_path / "b", launched_at=time.time() - 10, launched_mono=1.0,
                                     boot_id=runner_mod.boot_id(), timeout_s=120)
    assert "killed with its wrapper" in runner.collect(att, "h1").reason


def test_start_cancel_report_and_net_fields_are_bounded() -> None:
    from pydantic import ValidationError

    from labcontract.protocol import CancelStep, NetStart, ReportStep

    good = payload("/dev/loop3")
    StartStep.model_validate(good)
    for bad in ({"run_id": "../r"}, {"step_id": "a/b"}, {"attempt_id": "a..b"}, {"host": "h 1"},
                {"devices": ["/dev/loop3\n[evil]"]}, {"job_name": "p]\n[x"}, {"timeout_s": 10**12},
                {"dispatched_at": float("nan")}, {"status_interval_s": 0}, {"suite": "../s"}):
        with pytest.raises(ValidationError):
            StartStep.model_validate({**good, **bad})
    for model, data in ((CancelStep, {"attempt_id": "../x", "reason": "r"}), (ReportStep, {"attempt_id": "a/b"}),
                        (NetStart, {"role": "initiator", "paths": ["p1"], "mtu": 1500, "start_at": 1.0,
                                    "seconds": 10, "iqn": "iqn.x; rm -rf /"})):
        with pytest.raises(ValidationError):
            model.model_validate(data)


def test_agent_refuses_a_host_name_its_events_could_not_carry(tmp_path: Path) -> None:
    """A host name the controller would refuse on every event (and that could name another key) stops the
    agent at start, naming the option, before it connects anywhere."""
    from agents.cmd.agent import AgentOptions, main
    from labcontract.errors import ConfigError

    for bad in ("a:b", "../x", "h*", "x" * 65):
        with pytest.raises(ConfigError, match="--host"):
            main(AgentOptions(broker_url="redis://127.0.0.1:1/0", state_dir=tmp_path, dut_specs=(), host=bad))


def test_an_oversized_artifact_never_keeps_the_end_from_being_reported(tmp_path: Path, monkeypatch: Any) -> None:
    """An event cannot carry an artifact over the limit (it used to raise in collect(), so the attempt's end was
    never reported): fio.stderr is sent as its last MiB, anything else too big is left out and the end says so."""
    monkeypatch.setattr(runner_mod, "ARTIFACT_MAX_BYTES", 4096)
    monkeypatch.setattr(runner_mod, "STDERR_TAIL_BYTES", 1024)
    runner = StepRunner(tmp_path / "state", "fio")
    attempt = runner_mod.Attempt("r1-s000-a1", runner.attempt_path("r1-s000-a1"))
    attempt.path.mkdir(parents=True)
    attempt.file("rc").write_text("0\n")
    attempt.file("fio.json").write_bytes(b"{" + b" " * 5000 + b"}")
    attempt.file("fio.stderr").write_bytes(b"x" * 3000 + b"the last words")
    attempt.file("job.fio").write_text("[global]\n")
    ended = runner.collect(attempt, "h1")
    assert ended.outcome == "error"
    assert ended.reason == "over the 0 MiB limit of an artifact, not sent: fio.json (5002 bytes)"
    arts = {a.name: a.content() for a in ended.artifacts}
    assert set(arts) == {"job.fio", "fio.stderr"}
    assert arts["fio.stderr"].startswith(b"[first 1990 bytes left out]\n") and arts["fio.stderr"].endswith(b"words")


# --- issue 29: an id ending in a newline, declared patterns that could backtrack, Celery's own tasks -------------

@pytest.mark.parametrize("bad_id", ["r1-s000-a1\n", "a\n", "a1\r\n"])
def test_an_id_ending_in_a_newline_is_dropped_without_a_traceback(agent: tuple[Agent, list[Event], Path],
                                                                  bad_id: str) -> None:
    """``SAFE_ID.match`` took ``"a1\\n"`` (Python's ``$`` matches before a final newline): the agent published a
    refusal for that id, the event's own model refused it, and the task died with a traceback."""
    a, sent, tmp = agent
    a.start_step(payload(str(tmp / "dut0.img"), attempt_id=bad_id))
    a.start_step(payload(str(tmp / "dut0.img"), attempt_id=bad_id, workload={"footprint": INJECTION}))
    assert sent == []                     # an id that is not path-safe names no attempt the controller could know
    assert not (tmp / "state" / "attempts").exists() or not any((tmp / "state" / "attempts").iterdir())


@pytest.mark.timeout(30)
def test_a_backtracking_pattern_answers_at_once(tmp_path: Path) -> None:
    """``^(a+)+$`` against 32 'a' and a '!' held the agent at full CPU for minutes with Python's ``re`` (its
    heartbeats stopped); RE2 answers in linear time."""
    from agents.workloads import parse
    from labcontract.apps import ExternalParams

    decl = parse("workloads:\n  - name: w\n    command: [/bin/true]\n    timeout_s: 60\n    destructive: false\n"
                 "    params:\n      tag: {type: str, pattern: '^(a+)+$', max_length: 256}\n", "w.yaml")
    started = time.monotonic()
    for n in (32, 50, 255):
        _d, _values, problems = decl.resolve(ExternalParams(workload="w", params={"tag": "a" * n + "!"}))
        assert problems == ["parameter 'tag' of workload w: does not match '^(a+)+$'"]
    _d, values, problems = decl.resolve(ExternalParams(workload="w", params={"tag": "a" * 255}))
    assert problems == [] and values == {"tag": "a" * 255}
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("pattern", "why"), [
    (r"^(a)\1$", "cannot be matched without backtracking (RE2: invalid escape sequence: \\1)"),
    (r"^(?=a)a$", "cannot be matched without backtracking (RE2: invalid perl operator: (?=)"),
    ("(", "is not a regular expression"),
])
def test_a_pattern_re2_cannot_run_stops_the_agent_at_its_start(pattern: str, why: str) -> None:
    from agents.workloads import parse
    from labcontract.errors import ConfigError

    text = ("workloads:\n  - name: w\n    command: [/bin/true]\n    timeout_s: 60\n    destructive: false\n"
            f"    params:\n      tag: {{type: str, pattern: {json.dumps(pattern)}}}\n")
    with pytest.raises(ConfigError) as e:
        parse(text, "/etc/lab/w.yaml")
    assert "/etc/lab/w.yaml" in str(e.value) and "params.tag" in str(e.value) and why in str(e.value)


def test_the_worker_runs_only_the_labs_own_tasks(agent: tuple[Agent, list[Event], Path]) -> None:
    from agents.daemon import make_worker_app
    from labcontract.protocol import LAB_TASKS

    app = make_worker_app(agent[0], "redis://127.0.0.1:1/0")
    assert set(app.tasks) == LAB_TASKS       # no celery.accumulate, celery.chord_unlock, celery.backend_cleanup...


def test_a_slow_monitor_part_is_logged_with_what_waits_behind_it(agent: Any, monkeypatch: Any,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """The heartbeat shares the monitor thread with end detection: a part that holds it past SLOW_PART_S is named in
    the log (a controller may meanwhile judge the host silent), and the loop goes on."""
    import threading

    import agents.daemon as daemon

    a, _sent, _ = agent
    monkeypatch.setattr(daemon, "SLOW_PART_S", 0.05)
    passes = threading.Event()

    def slow() -> None:
        time.sleep(0.1)
        passes.set()
        a.stop()
    monkeypatch.setattr(a, "check_attempts", slow)
    monkeypatch.setattr(a, "heartbeat_if_due", lambda: None)
    monkeypatch.setattr(a, "update_live", lambda: None)
    with caplog.at_level("WARNING", logger="agents"):
        a.monitor()
    assert passes.is_set()
    assert any("monitor pass part slow took" in r.getMessage() and "heartbeats wait behind it" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_the_heartbeat_never_waits_for_the_periodic_register(tmp_path: Path, monkeypatch: Any) -> None:
    """The periodic full Register observes every DUT (wipefs, blkid, lsblk: slow on a loaded host); it goes out from
    a thread of its own, after the heartbeat it rides with, which never waits for it."""
    from labcontract.protocol import Heartbeat, Register
    from orchestrator.labs.lab import wait_for

    dut = tmp_path / "dut.img"
    dut.write_bytes(b"\0" * 65536)
    sent: list[Event] = []
    a = Agent(AgentConfig(host="h1", broker_url="redis://unused", state_dir=tmp_path / "state", heartbeat_s=0.0,
                          reregister_every=1,
                          duts=(DeclaredDut(name="dut0", path=str(dut), kind="file", size_bytes=65536),)),
              HostFacts(hostname="h1", fio_version="fio-3.33"), StepRunner(tmp_path / "state"), sent.append)
    observed = a.observe
    monkeypatch.setattr(a, "observe", lambda d: (time.sleep(2.0), observed(d))[1])
    began = time.monotonic()
    a.heartbeat_if_due()
    assert time.monotonic() - began < 1.5, "the heartbeat waited for the DUTs' observation"
    assert [type(e) for e in sent] == [Heartbeat]
    wait_for(lambda: any(isinstance(e, Register) for e in sent), 30, "the periodic register")
    reg = next(e for e in sent if isinstance(e, Register))
    assert reg.host == "h1" and [d.name for d in reg.duts] == ["dut0"] and reg.duts[0].observed is not None
