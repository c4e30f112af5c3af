"""Fuzz (hypothesis, deterministic) of every decoder that reads what the network sends: agent events
(and the artifacts they carry), CLI commands, start messages (and the job file a decoded start message
renders). Whatever the input, only a LabError may escape, never within more than 2 s, and a start
message that decodes renders only the options render_job emits (no newline or section injection)."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from labcontract import protocol
from labcontract.errors import LabError, ProtocolError
from labcontract.facts import BlockDevice, DeclaredDut, HostFacts, NetPathDecl
from labcontract.fiojob import device_section, job_section, render_job
from labcontract.protocol import (
    Artifact,
    Cancel,
    HealthCheck,
    Heartbeat,
    Message,
    NetStart,
    Pause,
    Register,
    Release,
    Resume,
    ScheduleAdd,
    ScheduleRemove,
    StartStep,
    StepEnded,
    StepStarted,
    StepUnknown,
    Submit,
    decode,
    decode_command,
    decode_event,
    other_version_register,
)
from labcontract.suite import builtin_suites, load_suite
from tests.fuzzing import (
    INJECTION,
    JSON_VALUES,
    OPTION_LINES,
    as_json,
    bounded,
    fuzz_settings,
    mutated,
    mutated_text,
    report_inputs,
)

pytestmark = pytest.mark.usefixtures("report_inputs")
__all__ = ["report_inputs"]

RUN = "r20261124-0a1b2c"
ATTEMPT = f"{RUN}-s001-a1"
FIO_JSON = b'{"fio version": "fio-3.33", "jobs": [{"jobname": "a", "read": {"iops": 1000.0}}]}\n'


# --- valid messages of every type, the seeds of the mutations ------------------------------------------

def valid_events() -> list[dict[str, Any]]:
    facts = HostFacts(hostname="h1", cpu_model="x", cpu_cores=4, cpu_threads=8, memory_bytes=1 << 34, kernel="6.1",
                      os="Debian 12", fio_version="fio-3.33",
                      block_devices=(BlockDevice(name="loop3", path="/dev/loop3", size_bytes=1 << 27, kind="loop",
                                                 by_id=("/dev/disk/by-id/x",), backing_file="/tmp/x.img"),),
                      metrics_address="127.0.0.1:9100", net_paths=(NetPathDecl(name="p0", iface="lo", mtu=1500),))
    dut = DeclaredDut(name="dut0", path="/dev/disk/by-id/lab-dut0", kind="block", size_bytes=1 << 27, serial="S1",
                      wipe_ok=True, observed={"path": "/dev/disk/by-id/lab-dut0", "real_path": "/dev/loop3",
                                              "signatures": []})
    health = (HealthCheck(check="present", target="/dev/disk/by-id/lab-dut0", ok=False, detail="gone"),
              HealthCheck(check="serial", target="/dev/disk/by-id/lab-dut0", ok=True, observed="S1"))
    events: list[Message] = [
        Register(host="h1", agent_version="0.9.0", facts=facts, duts=(dut,), running=(ATTEMPT,), health=health),
        Heartbeat(host="h1", running=(ATTEMPT,), health=health),
        StepStarted(host="h1", attempt_id=ATTEMPT, pid=4242, fio_started_at=1.0e9, job_sha256="a" * 64),
        StepEnded(host="h1", attempt_id=ATTEMPT, outcome="exited", exit_code=0, fio_started_at=1.0e9,
                  fio_ended_at=1.0e9 + 5, artifacts=(Artifact.of("fio.json", FIO_JSON),
                                                     Artifact.of("fio.stderr", b"fio: ok\n"))),
        StepUnknown(host="h1", attempt_id=ATTEMPT),
    ]
    return [json.loads(ev.model_dump_json()) for ev in events]


def valid_commands() -> list[dict[str, Any]]:
    reply = "lab:reply:0123abcd"
    submit = Submit(run_id=RUN, suite_source="quick.yaml", suite_text="suite: q\nprofiles:\n  - {name: a, rw: read, "
                    "bs: 4k}\n", host="h1", devices=("dut0",), runtime_override=3, scale=0.5, priority=2,
                    not_before=1.0e9, expires_at=1.0e9 + 60, reply_to=reply)
    commands: list[Message] = [
        submit, Cancel(run_id=RUN, reply_to=reply), Pause(run_id=RUN, reply_to=reply),
        Resume(run_id=RUN, reply_to=reply),
        ScheduleAdd(name="nightly", cron="0 22 * * 1-5", submit=submit.model_copy(update={"reply_to": "-"}),
                    expires_after_s=36000, reply_to=reply),
        ScheduleRemove(name="nightly", reply_to=reply), Release(host="h1", device="dut0", reply_to=reply),
    ]
    return [json.loads(c.model_dump_json()) for c in commands]


def valid_starts() -> list[dict[str, Any]]:
    """A start message of each action, with the workloads of every built-in suite."""
    workloads = [w for path in builtin_suites().values() for w in load_suite(path).workloads]
    starts: list[StartStep] = []
    for i, w in enumerate(workloads[::3]):
        devices = ("/dev/disk/by-id/lab-dut0",) if i % 3 else ("/dev/disk/by-id/lab-dut0", "/dev/disk/by-id/lab-dut1")
        starts.append(StartStep(run_id=RUN, step_id=f"{RUN}-s{i:03d}", attempt_id=f"{RUN}-s{i:03d}-a1", host="h1",
                                devices=devices, job_name=w.name, kind="measure", suite="builtin", workload=w,
                                status_interval_s=1, timeout_s=w.expected_seconds + 60, dispatched_at=1.0e9))
    starts.append(StartStep(run_id=RUN, step_id=f"{RUN}-s900", attempt_id=f"{RUN}-s900-a1", host="h1", action="purge",
                            devices=("/dev/disk/by-id/lab-dut0",), job_name="purge", kind="purge", timeout_s=600,
                            dispatched_at=1.0e9))
    starts.append(StartStep(run_id=RUN, step_id=f"{RUN}-s901-h0", attempt_id=f"{RUN}-s901-h0-a1", host="h1",
                            action="net", devices=(), job_name=workloads[0].name, kind="net", workload=workloads[0],
                            net=NetStart(role="target", paths=("p0",), mtu=1500, start_at=1.0e9, seconds=10),
                            timeout_s=120, dispatched_at=1.0e9))
    return [s.model_dump(mode="json") for s in starts]


EVENTS, COMMANDS, STARTS = valid_events(), valid_commands(), valid_starts()


def test_the_seeds_are_valid() -> None:
    assert {e["type"] for e in EVENTS} == {"register", "heartbeat", "step_started", "step_ended", "step_unknown"}
    for e in EVENTS:
        decode_event(json.dumps(e))
    assert {c["type"] for c in COMMANDS} == {"submit", "cancel", "pause", "resume", "schedule_add", "schedule_rm",
                                             "release"}
    for c in COMMANDS:
        decode_command(json.dumps(c))
    assert {s["action"] for s in STARTS} == {"fio", "purge", "net"}
    for s in STARTS:
        decode(StartStep, s)


# --- events --------------------------------------------------------------------------------------------

def event_survives(raw: str | bytes) -> None:
    """Decoding an event (and reading it as another version's register), and inflating every artifact of a
    decoded step_ended, raises a LabError at worst."""
    def run() -> None:
        other_version_register(raw)          # read leniently first by the intake: never raises
        try:
            ev = decode_event(raw)
        except LabError:
            return
        if isinstance(ev, StepEnded):
            for artifact in ev.artifacts:
                with contextlib.suppress(LabError):
                    artifact.content()
    bounded("decode_event", run)


@fuzz_settings(max_examples=400)
@given(st.binary(max_size=2048) | st.text(max_size=512))
@example(b"\xff\xfe\x00")
@example("[" * 20_000)
@example('{"v": 5, "type": "heartbeat", "host": "h1", "running": ' + "[" * 5000 + "]" * 5000 + "}")
def test_any_bytes_are_an_event_or_a_protocol_error(raw: bytes | str) -> None:
    event_survives(raw)


@fuzz_settings(max_examples=400)
@given(JSON_VALUES | st.fixed_dictionaries(
    {"v": st.sampled_from([protocol.PROTOCOL_VERSION, 4, "5", None]),
     "type": st.sampled_from(["register", "heartbeat", "step_started", "step_ended", "step_unknown", "x"])},
    optional={"host": JSON_VALUES, "attempt_id": JSON_VALUES, "artifacts": JSON_VALUES, "running": JSON_VALUES}))
@example([1, 2, 3])
@example(None)
def test_any_json_is_an_event_or_a_protocol_error(doc: Any) -> None:
    event_survives(as_json(doc))


@fuzz_settings(max_examples=600)
@given(st.sampled_from(EVENTS).flatmap(mutated))
def test_mutated_events_are_applied_or_refused(doc: Any) -> None:
    event_survives(as_json(doc))


@fuzz_settings(max_examples=300)
@given(st.sampled_from(EVENTS).flatmap(lambda e: mutated_text(json.dumps(e))))
def test_mutated_event_text_is_an_event_or_a_protocol_error(raw: str) -> None:
    event_survives(raw)


ARTIFACT_FIELDS = st.fixed_dictionaries({
    "name": st.sampled_from(["fio.json", "job.fio", "../x"]),
    "sha256": st.sampled_from(["a" * 64, "0" * 64]),
    "size": st.sampled_from([0, 10, 1 << 20, 1 << 40, -1]),
    "content_gz_b64": st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode())
    | st.text(max_size=80)})


@fuzz_settings(max_examples=300)
@given(st.lists(ARTIFACT_FIELDS, min_size=1, max_size=3))
@example([{"name": "fio.json", "sha256": "a" * 64, "size": 10, "content_gz_b64": "H4sIAAAAAAAA/w=="}])   # corrupt gzip
def test_corrupt_artifacts_are_refused(artifacts: list[dict[str, Any]]) -> None:
    doc = dict(EVENTS[3], artifacts=artifacts)
    event_survives(as_json(doc))


# --- commands ------------------------------------------------------------------------------------------

def command_survives(raw: str | bytes) -> None:
    """A command decodes or is refused with a LabError; decoded, it answers only on a reply list (never a
    stream or an agent's queue)."""
    def run() -> Message | None:
        try:
            return decode_command(raw)
        except LabError:
            return None
    cmd = bounded("decode_command", run)
    if cmd is None:
        return
    replies = [cmd.reply_to] + ([cmd.submit.reply_to] if isinstance(cmd, ScheduleAdd) else [])  # type: ignore[attr-defined]
    for reply_to in replies:
        assert reply_to in ("", "-") or protocol.REPLY_TO_RE.fullmatch(reply_to), reply_to


@fuzz_settings(max_examples=400)
@given(JSON_VALUES | st.fixed_dictionaries(
    {"v": st.sampled_from([protocol.PROTOCOL_VERSION, 4, None]),
     "type": st.sampled_from(["submit", "cancel", "pause", "resume", "schedule_add", "schedule_rm", "release", "x"])},
    optional={"run_id": JSON_VALUES, "reply_to": JSON_VALUES, "suite_text": JSON_VALUES, "submit": JSON_VALUES}))
@example([1, 2, 3])
@example(None)
@example("pause")
@example(7)
@example({"v": protocol.PROTOCOL_VERSION, "type": "pause", "run_id": RUN, "reply_to": ["x"]})
def test_any_json_is_a_command_or_a_protocol_error(doc: Any) -> None:
    command_survives(as_json(doc))


@fuzz_settings(max_examples=500)
@given(st.sampled_from(COMMANDS).flatmap(mutated))
def test_mutated_commands_are_decoded_or_refused(doc: Any) -> None:
    command_survives(as_json(doc))


@fuzz_settings(max_examples=200)
@given(st.binary(max_size=1024) | st.sampled_from(COMMANDS).flatmap(lambda c: mutated_text(json.dumps(c))))
@example("[" * 20_000)
def test_mutated_command_text_is_a_command_or_a_protocol_error(raw: bytes | str) -> None:
    command_survives(raw)


# --- start messages and the job file they render ------------------------------------------------------

def assert_only_rendered_options(job: str, msg: StartStep, devices: list[str]) -> None:
    """Every line of ``job`` is an option render_job emits, its sections are exactly [global] and the
    workload's own, and its only filenames are the declared devices."""
    assert msg.workload is not None
    sections = ["[global]"] + ([f"[{job_section(msg.workload.name)}]"] if len(devices) == 1 else
                               [f"[{device_section(msg.workload.name, i)}]" for i in range(len(devices))])
    allowed_files = {f"filename={d}" for d in devices}
    seen_sections, seen_files = [], []
    for line in job.splitlines():
        if line.startswith("["):
            seen_sections.append(line)
        elif line.startswith("filename="):
            seen_files.append(line)
        else:
            assert any(p.fullmatch(line) for p in OPTION_LINES), f"job line {line!r} is not a rendered option:\n{job}"
    assert seen_sections == sections, job
    assert sorted(seen_files) == sorted(allowed_files) and len(seen_files) == len(devices), job


def start_survives(payload: Any) -> None:
    """A start payload decodes or is refused with a ProtocolError; decoded, it renders a clean job."""
    def run() -> StartStep | None:
        try:
            return decode(StartStep, payload)        # type: ignore[no-any-return]
        except ProtocolError:
            return None
    msg = bounded("decode StartStep", run)
    if msg is None or msg.workload is None:
        return
    devices = [f"/dev/disk/by-id/lab-dut{i}" for i in range(min(max(1, len(msg.devices)), 8))]
    job = bounded("render_job", lambda: render_job(msg.workload, devices))      # type: ignore[arg-type]
    assert_only_rendered_options(job, msg, devices)


FOOTPRINT_INJECTION = dict(STARTS[1], workload=dict(STARTS[1]["workload"], footprint=INJECTION))


@fuzz_settings(max_examples=700)
@given(st.sampled_from(STARTS).flatmap(mutated))
@example(FOOTPRINT_INJECTION)
@example(dict(STARTS[1], workload=dict(STARTS[1]["workload"], name="a]\n[evil")))
@example(dict(STARTS[1], workload=dict(STARTS[1]["workload"], ioengine="libaio\nexec_prerun=id")))
@example(dict(STARTS[1], attempt_id="x/../../../ESCAPED"))
def test_mutated_start_messages_decode_to_clean_jobs_or_are_refused(payload: Any) -> None:
    start_survives(payload)


WORKLOAD_VALUES = st.sampled_from(["1%", "100%", "4096", "1P", INJECTION, "read", "4k", "1%\n[x]"]) | JSON_VALUES


@fuzz_settings(max_examples=400)
@given(st.sampled_from(STARTS[:-2]), st.sampled_from(
    ["name", "rw", "bs", "rwmixread", "percentage_random", "iodepth", "numjobs", "runtime", "ramp_time", "ioengine",
     "direct", "footprint", "time_based", "refill_buffers", "norandommap", "randrepeat"]), WORKLOAD_VALUES)
def test_every_workload_field_reaching_the_job_file_is_checked(start: dict[str, Any], key: str, value: Any) -> None:
    start_survives(dict(start, workload=dict(start["workload"], **{key: value})))


@fuzz_settings(max_examples=200)
@given(JSON_VALUES)
@example([1, 2, 3])
@example(None)
def test_any_json_start_payload_is_refused_with_a_protocol_error(payload: Any) -> None:
    start_survives(payload)


def near(low: int, high: int) -> st.SearchStrategy[int]:
    """Within [low, high] (hypothesis favours the bounds themselves); past them is the mutation tests' part."""
    return st.integers(low, high)


PLAUSIBLE_WORKLOAD = st.fixed_dictionaries({
    "name": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.%-]{0,40}", fullmatch=True),
    "rw": st.sampled_from(["read", "write", "randread", "randwrite", "rw", "readwrite", "randrw"]),
    "bs": near(1, 1 << 17).map(lambda n: n * 512), "rwmixread": st.none() | near(0, 100),
    "percentage_random": st.none() | near(0, 100), "iodepth": near(1, 65536), "numjobs": near(1, 4096),
    "runtime": near(1, 7 * 86400), "ramp_time": near(0, 86400),
    "ioengine": st.sampled_from(["libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio"]),
    "direct": st.booleans(), "footprint": st.none() | st.from_regex(r"\d{1,3}(\.\d{1,9})?%|\d{1,16}", fullmatch=True),
    "time_based": st.booleans(), "refill_buffers": st.booleans(), "norandommap": st.booleans(),
    "randrepeat": st.booleans()})


@fuzz_settings(max_examples=300)
@given(st.sampled_from(STARTS[:-2]), PLAUSIBLE_WORKLOAD)
def test_plausible_workloads_decode_to_clean_jobs_or_are_refused(start: dict[str, Any], workload: Any) -> None:
    """Values near and past every bound, so that many start messages decode and their jobs are checked."""
    start_survives(dict(start, workload=workload))
