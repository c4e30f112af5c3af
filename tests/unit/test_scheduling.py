"""The overnight queue's rules on a real SQLite store, with a recording dispatcher in place of Celery:
priorities, not-before, expiry, pause/resume, reservations with backfill that starves nobody, notifications."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    Artifact,
    Pause,
    Register,
    Resume,
    ScheduleAdd,
    ScheduleRemove,
    StepEnded,
    StepStarted,
    Submit,
)
from orchestrator.artifacts import ArtifactStore
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller
from orchestrator.controller.notify import Notifier
from orchestrator.notifysinks import listing
from orchestrator.runs.scheduling import decide
from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.models import Host, Run, Schedule
from tests.unit.conftest import Clock, RecordingDispatcher


def suite(runtime: int, n: int = 1, devices: int = 1) -> str:
    return (f"suite: s{runtime}x{n}\ndevices: {devices}\nprofiles:\n" +
            "".join(f"  - {{name: w{i}, rw: randread, bs: 4k, runtime: {runtime}}}\n" for i in range(n)))


@pytest.fixture
def env(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite'}")
    migrate(engine)
    db = sessions(engine)
    disp, clock = RecordingDispatcher(), Clock()
    notifier = Notifier(files=[tmp_path / "notifications.jsonl"])
    ctl = Controller(db, None, disp, ArtifactStore(tmp_path / "art"), ControllerTuning(), clock=clock,  # type: ignore[arg-type]
                     notifier=notifier)
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"), duts=(
        DeclaredDut(name="d0", path="/dev/loop90", kind="block", size_bytes=1 << 30),
        DeclaredDut(name="d1", path="/dev/loop91", kind="block", size_bytes=1 << 30))))
    return ctl, disp, clock, db, tmp_path, engine


def submit(ctl: Controller, run_id: str, text: str, devices: tuple[str, ...] = ("d0",), **kw: Any) -> None:
    reply = ctl.submit(Submit(run_id=run_id, suite_source=f"{run_id}.yaml", suite_text=text, host="h1",
                              devices=devices, reply_to="-", **kw))
    assert reply.ok, reply


def finish(ctl: Controller, attempt_id: str, fio_json: bytes) -> None:
    ctl.handle_event(StepStarted(host="h1", attempt_id=attempt_id, pid=1, fio_started_at=ctl.clock(), job_sha256="x"))
    ctl.handle_event(StepEnded(host="h1", attempt_id=attempt_id, outcome="exited", exit_code=0,
                               artifacts=(Artifact.of("fio.json", fio_json),)))


def started_runs(disp: RecordingDispatcher) -> list[str]:
    return [m.run_id for m in disp.starts()]


def test_priority_goes_first_and_a_waiting_run_reserves_its_device(env: Any) -> None:
    ctl, disp, clock, *_ = env
    submit(ctl, "low", suite(60))
    clock.t += 1
    submit(ctl, "high", suite(60), priority=5)
    ctl.schedule()
    assert started_runs(disp) == ["high"]
    ctl.schedule()
    assert started_runs(disp) == ["high"]           # one run per device


def test_not_before_waits_without_reserving_and_expiry_ends_runs_that_cannot_start(env: Any) -> None:
    ctl, disp, clock, db, *_ = env
    submit(ctl, "tonight", suite(60), not_before=clock.t + 3600, priority=9)
    submit(ctl, "now", suite(60))
    submit(ctl, "stale", suite(60), ("d1",), not_before=clock.t + 7200, expires_at=clock.t + 1800)
    ctl.schedule()
    assert started_runs(disp) == ["now"]            # the later not-before run does not block the device
    clock.t += 1801
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"), duts=(
        DeclaredDut(name="d0", path="/dev/loop90", kind="block", size_bytes=1 << 30),
        DeclaredDut(name="d1", path="/dev/loop91", kind="block", size_bytes=1 << 30))))
    ctl.schedule()
    with db() as s:
        stale = s.get(Run, "stale")
        assert stale is not None and stale.state == "EXPIRED" and stale.reason.startswith("expired: not started before")
        assert {st.state for st in stale.steps} == {"CANCELLED"}


def test_pause_lets_the_running_step_finish_and_resume_continues(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db, *_ = env
    submit(ctl, "r", suite(1, n=2))
    ctl.schedule()
    first = disp.starts()[0]
    assert ctl.pause_or_resume(Pause(run_id="r", reply_to="-")).ok
    finish(ctl, first.attempt_id, fio_outputs["4k-randread"])
    ctl.schedule()
    assert len(disp.starts()) == 1                  # paused: nothing new
    submit(ctl, "other", suite(1))
    ctl.schedule()
    assert started_runs(disp) == ["r"]              # a paused run keeps its device
    bad = ctl.pause_or_resume(Resume(run_id="other", reply_to="-"))
    assert not bad.ok and "not paused" in bad.errors[0]
    assert ctl.pause_or_resume(Resume(run_id="r", reply_to="-")).ok
    ctl.schedule()
    assert started_runs(disp) == ["r", "r"]
    with db() as s:
        assert s.get(Run, "r").state == "RUNNING"  # type: ignore[union-attr]


def test_backfill_uses_a_reserved_device_only_when_it_delays_nobody(env: Any) -> None:
    ctl, disp, clock, *_ = env
    submit(ctl, "holder", suite(600), ("d1",))                     # runs 10 min on d1
    ctl.schedule()
    submit(ctl, "big", suite(60, devices=2), ("d0", "d1"), priority=5)   # needs d0+d1: waits for d1
    submit(ctl, "long", suite(3000), ("d0",))                     # would delay "big": must wait
    clock.t += 1
    submit(ctl, "short", suite(30), ("d0",))                      # fits before d1 frees up: backfills
    with ctl.sessions() as s:     # what the scheduler is about to decide, with its reasons
        runs = list(s.scalars(select(Run).where(Run.state.in_(["QUEUED", "RUNNING", "PAUSED"]))))
        hosts = {h.name: h for h in s.scalars(select(Host))}
        waits = decide(runs, hosts, clock.t, ctl.host_up).waits
    assert waits["big"] == "device(s) /dev/loop91 held by run(s) holder"
    assert waits["long"].startswith("device /dev/loop90 reserved for run big (priority 5); too long to backfill")
    assert "short" not in waits and "holder" not in waits
    ctl.schedule()
    assert started_runs(disp) == ["holder", "short"]


def test_end_notifications_reach_the_file_and_a_webhook(env: Any, fio_outputs: dict[str, bytes]) -> None:
    ctl, disp, _clock, db, tmp, _engine = env
    got: list[dict[str, Any]] = []
    fail = [True]

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if fail[0]:
                self.send_response(503)
            else:
                got.append(json.loads(body))
                self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ctl.notifier.webhooks.append(f"http://127.0.0.1:{server.server_address[1]}/hook")
        submit(ctl, "n1", suite(1))
        ctl.schedule()
        finish(ctl, disp.starts()[0].attempt_id, fio_outputs["4k-randread"])
        ctl.notify()                                          # webhook down: not marked, retried
        with db() as s:
            assert s.get(Run, "n1").notified_at is None  # type: ignore[union-attr]
            states = {r["kind"]: r for r in listing(s)}       # what the web service and labctl show
        hook = states["webhook"]
        assert hook["state"] == "failing" and hook["last_error"] == "Service Unavailable" and hook["delivered"] == 0
        assert hook["target"] == "http://127.0.0.1/…" and hook["key"].startswith("webhook:") and hook["active"]
        assert states["file"]["state"] == "ok" and states["file"]["delivered"] == 1
        assert states["file"]["target"] == str(tmp / "notifications.jsonl")
        fail[0] = False
        ctl.notify()
        ctl.notify()                                          # delivered once
        with db() as s:
            hook = next(r for r in listing(s) if r["kind"] == "webhook")
        assert hook["state"] == "ok" and hook["delivered"] == 1 and hook["pending"] == 0
        assert hook["last_error"] == "Service Unavailable"    # the last failure stays, older than the success
    finally:
        server.shutdown()
    assert len(got) == 1
    body = got[0]
    assert body["event"] == "run.ended" and body["run"] == "n1" and body["state"] == "SUCCEEDED"
    assert body["steps"] == {"succeeded": 1} and body["results"][0]["iops"] > 0
    lines = [json.loads(x) for x in (tmp / "notifications.jsonl").read_text().splitlines()]
    assert [x["run"] for x in lines] == ["n1"]      # the file took it on the first pass: only the webhook was retried
    with db() as s:
        assert s.get(Run, "n1").notified_at is not None  # type: ignore[union-attr]


def test_a_hanging_webhook_never_holds_the_loop_and_every_other_sink_takes_the_run_once(
        env: Any, fio_outputs: dict[str, bytes]) -> None:
    """The daemon's delivery (each sink from its own thread): while one webhook hangs, a notify pass returns, the file
    and the other webhook take the run once each however many passes follow, and the run is notified only when the
    hanging one answers."""
    ctl, disp, _clock, db, tmp, _engine = env
    release, hanging = threading.Event(), threading.Event()
    got: dict[str, list[dict[str, Any]]] = {"/hang": [], "/ok": []}

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/hang":
                hanging.set()
                release.wait(120)
            got[self.path].append(body)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    ctl.notifier = Notifier([f"{base}/hang", f"{base}/ok"], [tmp / "n.jsonl"], timeout_s=120, background=True)
    try:
        submit(ctl, "h1", suite(1))
        ctl.schedule()
        finish(ctl, disp.starts()[0].attempt_id, fio_outputs["4k-randread"])

        def run_notified() -> tuple[float | None, list[str] | None]:
            with db() as s:
                run = s.get(Run, "h1")
                assert run is not None
                return run.notified_at, run.notified_sinks

        passes = threading.Thread(target=lambda: [ctl.notify() for _ in range(5)], daemon=True)
        passes.start()
        assert hanging.wait(60), "the hanging webhook was never called"
        passes.join(60)
        assert not passes.is_alive(), "a notify pass waited on the hanging webhook"
        for _ in range(600):                        # the other two sinks report back through the loop's passes
            ctl.notify()
            if len(run_notified()[1] or []) == 2:
                break
            threading.Event().wait(0.05)
        notified_at, sinks = run_notified()
        assert notified_at is None and sinks is not None and len(sinks) == 2 and f"file:{tmp / 'n.jsonl'}" in sinks
        with db() as s:
            rows = listing(s)
        assert [(r["state"], r["pending"], r["delivered"]) for r in rows if r["kind"] == "webhook"] in (
            [("waiting", 1, 0), ("ok", 0, 1)], [("ok", 0, 1), ("waiting", 1, 0)])    # the hanging one: 1 pending
        assert len(got["/ok"]) == 1 and got["/hang"] == []
        release.set()
        for _ in range(600):
            ctl.notify()
            if run_notified()[0] is not None:
                break
            threading.Event().wait(0.05)
        assert run_notified()[0] is not None
        for _ in range(3):
            ctl.notify()
    finally:
        release.set()
        server.shutdown()
        if ctl.delivery is not None:
            ctl.delivery.stop()
    assert [len(got["/hang"]), len(got["/ok"])] == [1, 1]
    assert [json.loads(x)["run"] for x in (tmp / "n.jsonl").read_text().splitlines()] == ["h1"]


def test_schedules_fire_once_per_due_time_and_refuse_bad_input(env: Any) -> None:
    ctl, _disp, clock, db, *_ = env
    clock.t = datetime(2026, 11, 21, 21, 58, tzinfo=UTC).timestamp()
    template = Submit(run_id="-", suite_source="n.yaml", suite_text=suite(1), host="h1", devices=("d0",),
                      reply_to="-", priority=2)
    bad = ctl.schedules(ScheduleAdd(name="nightly", cron="61 * * *", submit=template.model_copy(
        update={"host": "nohost"}), reply_to="-"))
    assert not bad.ok
    assert any(e.startswith("--cron: '61 * * *' is not a cron expression") for e in bad.errors)
    assert any(e.startswith("--host: unknown host 'nohost'") for e in bad.errors)
    ok = ctl.schedules(ScheduleAdd(name="nightly", cron="*/5 * * * *", submit=template, expires_after_s=3600,
                                   reply_to="-"))
    assert ok.ok
    assert not ctl.schedules(ScheduleAdd(name="nightly", cron="*/5 * * * *", submit=template, reply_to="-")).ok
    with db() as s:
        sch = s.get(Schedule, "nightly")
        assert sch is not None and sch.next_fire_at == clock.t + 120       # 22:00
    ctl.fire_schedules()
    with db() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 0
    clock.t += 120 + 3 * 300                                                 # the controller was away 15 min
    ctl.fire_schedules()
    ctl.fire_schedules()
    with db() as s:
        runs = s.scalars(select(Run)).all()
        assert len(runs) == 1                                               # once, not four times
        (run,) = runs
        assert run.priority == 2 and run.expires_at == clock.t + 3600 and run.state == "QUEUED"
        sch = s.get(Schedule, "nightly")
        assert sch is not None and sch.last_run_id == run.id and sch.next_fire_at == clock.t + 300
    assert ctl.schedules(ScheduleRemove(name="nightly", reply_to="-")).ok
    assert not ctl.schedules(ScheduleRemove(name="nightly", reply_to="-")).ok


def test_a_chat_sink_gets_a_line_a_person_reads_and_a_bad_url_is_refused(env: Any,
                                                                          fio_outputs: dict[str, bytes]) -> None:
    """``--notify-chat URL``: the chat's incoming webhook gets ``{"text": ...}`` (a chat refuses the raw JSON body):
    the run, its suite, host and device, its state and step counts; a regression body names each regression. A URL
    that is not http(s) is refused when the sinks are made."""
    from orchestrator.controller.notify import ChatSink, chat_text

    ctl, disp, _clock, _db, _tmp, _engine = env
    got: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ctl.notifier = Notifier(chats=[f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/secret"])
        submit(ctl, "c1", suite(1))
        ctl.schedule()
        finish(ctl, disp.starts()[0].attempt_id, fio_outputs["4k-randread"])
        ctl.notify()
    finally:
        server.shutdown()
    assert len(got) == 1 and set(got[0]) == {"text"}
    assert got[0]["text"].startswith("storagelab: run c1 (suite ") and "SUCCEEDED: 1 succeeded" in got[0]["text"]
    regressed = chat_text({"event": "run.regressed", "run": "n9", "suite": "nightly", "host": "h1",
                           "devices": ["/dev/nvme0n1"], "regressions": [
                               {"cell": "4k-random rwmixread=100", "metric": "iops", "change_pct": -23.4}]})
    assert regressed.splitlines() == ["storagelab: run n9 (suite nightly, h1:/dev/nvme0n1) REGRESSED against its "
                                      "history (1):", "- 4k-random rwmixread=100 iops -23.4%"]
    sink = ChatSink("https://hooks.slack.com/services/T0/B0/secret", 3.0)
    assert "secret" not in sink.label and sink.label.startswith("chat https://hooks.slack.com/")
    with pytest.raises(ValueError, match="--notify-chat: not an http"):
        ChatSink("file:///etc/passwd", 3.0)


def test_a_controller_started_without_a_sink_shows_the_old_ones_inactive(env: Any) -> None:
    """The store lists the sinks of the running controller: one started with other sinks (or none) leaves the
    earlier ones listed, inactive, with their history (notify_sinks, schema 0017)."""
    ctl, disp, clock, db, tmp, _engine = env
    ctl.notify()
    with db() as s:
        assert [(r["kind"], r["state"], r["origin"]) for r in listing(s)] == [("file", "waiting", "option")]
    hook = "https://ci.lab/hooks/T0/s3cret"
    again = Controller(db, None, disp, ArtifactStore(tmp / "art"), ControllerTuning(), clock=clock,  # type: ignore[arg-type]
                       notifier=Notifier([hook], origins={"webhook:" + sha256(hook.encode()).hexdigest()[:12]:
                                                          "lab file"}))
    again.notify()
    with db() as s:
        rows = listing(s)
    assert [(r["kind"], r["state"], r["origin"], r["target"]) for r in rows] == [
        ("webhook", "waiting", "lab file", "https://ci.lab/…"),
        ("file", "inactive", "option", str(tmp / "notifications.jsonl"))]
    Controller(db, None, disp, ArtifactStore(tmp / "art"), ControllerTuning(), clock=clock).notify()  # type: ignore[arg-type]
    with db() as s:
        assert {r["state"] for r in listing(s)} == {"inactive"} and "s3cret" not in repr(listing(s))
