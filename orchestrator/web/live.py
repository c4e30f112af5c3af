"""``GET /api/runs/{run_id}/live``: a run's progress as server-sent events, shared by all its viewers.

Events: ``status`` (the run's state, steps done / total, its ETA, each precondition group's round and verdict, the
commands its state allows (web/runview.py), and each step's state, progress fraction, attempt and place in the
table: every step in the first one a viewer gets, ``"full": true``; afterwards only the steps that changed or were
planned since), ``sample`` (one per new second of a running step's live status: IOPS or TPS, MB/s, mean and p99
latency in µs), and ``end`` once the run is terminal (with the commands it then allows); a comment every
``HEARTBEAT_S`` keeps proxies from closing an idle stream.

Why a fan-out: the figures come from one store query and one Redis GET (``lab:live:<host>``, the agent's
per-second status, as ``labctl watch`` reads it). Fifty viewers of a run must cost that once per second, not
fifty times, so the service keeps ONE poller per watched run and copies its events into a bounded queue per
viewer; the poller stops when its last viewer leaves (a closed tab is noticed by Starlette, which cancels the
stream). A viewer too slow to drain its queue loses its oldest events, never the others' (every ``status`` is
a full snapshot, so nothing is lost that the next one does not restore).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import Busy
from labcontract.live import LiveStatus
from labcontract.telemetry import LIVE_KEY_PREFIX
from orchestrator.states import ACTIVE_STEP, TERMINAL_RUN, TERMINAL_STEP
from orchestrator.store.models import Attempt, PreconditionRecord, Run, Step
from orchestrator.web import queries, runview
from orchestrator.web.api.common import route
from orchestrator.web.auth import Principal, still_valid

log = logging.getLogger(__name__)

INTERVAL_S = 1.0          # the agent rewrites its live status each second
HEARTBEAT_S = 15.0
QUEUE_MAX = 64            # events a viewer may lag behind before its oldest are dropped
MAX_PER_TOKEN = 64        # live streams open at once per token (tabs, windows, a wall of screens on one token)
MAX_STREAMS = 512         # and in all: beyond, Busy (429), never a service slowed for everyone
RECHECK_S = 1.0           # a stream asks again this often whether its token still stands (revoked: it ends)
MAX_LIVE_BYTES = 1 << 20  # a live-status value larger than this is not the agent's
# what a status says of each precondition group (runview.preconditioning): its verdict line and where it stands
PRECOND_KEYS = ("seq", "name", "state", "rounds", "max_rounds", "window", "reached_round", "verdict", "line",
                "planned", "running")


@dataclass(frozen=True)
class Event:
    name: str                       # status | sample | end
    data: dict[str, Any]
    # a status that names only the steps that changed carries the whole picture, for viewers who join later
    snapshot: Event | None = field(default=None, compare=False, repr=False)

    def encode(self) -> bytes:
        return f"event: {self.name}\ndata: {json.dumps(self.data, separators=(',', ':'))}\n\n".encode()


Poll = Callable[[], list[Event]]    # one poll of one run (sync: it runs in a worker thread)


@dataclass(eq=False)
class Subscriber:
    run_id: str
    who: str = ""
    closed: bool = False
    queue: asyncio.Queue[Event | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_MAX))
    dropped: int = 0                # events lost because this viewer lagged

    def put(self, ev: Event | None) -> None:
        while True:
            try:
                self.queue.put_nowait(ev)
                return
            except asyncio.QueueFull:
                with contextlib.suppress(asyncio.QueueEmpty):
                    self.queue.get_nowait()
                    self.dropped += 1


@dataclass(eq=False)
class Watch:
    run_id: str
    poll: Poll
    subscribers: set[Subscriber] = field(default_factory=set)
    last_status: Event | None = None
    task: asyncio.Task[None] | None = None
    polls: int = 0


class Fanout:
    """One poller task per watched run, its events copied to every subscriber of that run."""

    def __init__(self, make_poll: Callable[[str], Poll], interval_s: float = INTERVAL_S) -> None:
        self.make_poll, self.interval_s = make_poll, interval_s
        self.watches: dict[str, Watch] = {}
        self.streams: dict[str, int] = {}        # who -> live streams open

    def subscribe(self, run_id: str, who: str = "") -> Subscriber:
        """A new viewer of ``run_id`` (starts the run's poller if it is the first); it gets the last status
        at once. Must be called in the event loop. Busy past MAX_PER_TOKEN streams of ``who`` or MAX_STREAMS."""
        if self.streams.get(who, 0) >= MAX_PER_TOKEN:
            raise Busy(f"{who or 'this caller'} has {MAX_PER_TOKEN} live streams open; close one first")
        if sum(self.streams.values()) >= MAX_STREAMS:
            raise Busy(f"{MAX_STREAMS} live streams are open; try again later")
        self.streams[who] = self.streams.get(who, 0) + 1
        sub = Subscriber(run_id, who)
        watch = self.watches.get(run_id)
        if watch is None:
            watch = self.watches[run_id] = Watch(run_id, self.make_poll(run_id))
            watch.task = asyncio.get_running_loop().create_task(self._run(watch), name=f"live-{run_id}")
        elif watch.last_status is not None:
            sub.put(watch.last_status)
        watch.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        """The viewer left; the last one to leave stops the poller. Once per subscriber, whoever calls first (the
        stream's end, or the collection of a stream never started)."""
        if sub.closed:
            return
        sub.closed = True
        left = self.streams.get(sub.who, 0) - 1
        if left > 0:
            self.streams[sub.who] = left
        else:
            self.streams.pop(sub.who, None)
        watch = self.watches.get(sub.run_id)
        if watch is None:
            return
        watch.subscribers.discard(sub)
        if not watch.subscribers:
            del self.watches[sub.run_id]
            if watch.task is not None:
                watch.task.cancel()

    def viewers(self, run_id: str) -> int:
        watch = self.watches.get(run_id)
        return len(watch.subscribers) if watch else 0

    async def _run(self, watch: Watch) -> None:
        failures = 0
        while True:
            try:
                events = await asyncio.to_thread(watch.poll)
                watch.polls += 1
                failures = 0
            except Exception as e:      # the store or broker hiccuped: the viewers wait, the stream stays
                failures += 1
                if failures in (1, 10, 100):
                    log.warning("live poll of run %s failed (%d in a row): %s", watch.run_id, failures, e)
                events = []
            ended = False
            for ev in events:
                if ev.name == "status":
                    watch.last_status = ev.snapshot or ev
                ended = ended or ev.name == "end"
                for sub in list(watch.subscribers):
                    sub.put(ev)
            if ended:
                for sub in list(watch.subscribers):
                    sub.put(None)
                if self.watches.get(watch.run_id) is watch:
                    del self.watches[watch.run_id]
                return
            await asyncio.sleep(self.interval_s)


async def stream(fanout: Fanout, run_id: str, heartbeat_s: float = HEARTBEAT_S, *, who: str = "",
                 valid: Callable[[], Awaitable[bool]] | None = None,
                 recheck_s: float = RECHECK_S, sub: Subscriber | None = None) -> AsyncGenerator[bytes, None]:
    """The SSE body for one viewer: its events until ``end``, a comment when idle for ``heartbeat_s``. With
    ``valid``, asked again every ``recheck_s``: once the caller's token no longer stands, the stream ends (the
    browser's reconnection then meets a 401). ``sub``: already subscribed (the route does, to answer 429 in time)."""
    sub = sub or fanout.subscribe(run_id, who)
    checked = idle_since = time.monotonic()
    wait = heartbeat_s if valid is None else min(heartbeat_s, recheck_s)
    try:
        yield b"retry: 3000\n\n"
        while True:
            got = True
            try:
                ev = await asyncio.wait_for(sub.queue.get(), wait)
            except TimeoutError:
                got, ev = False, None
            if got and ev is None:
                return                                   # the run ended: ``end`` was the last event
            now = time.monotonic()
            if valid is not None and now - checked >= recheck_s:
                checked = now
                if not await valid():
                    return
            if ev is None:
                if now - idle_since >= heartbeat_s:
                    idle_since = now
                    yield b": keepalive\n\n"
                continue
            idle_since = now
            yield ev.encode()
    finally:
        fanout.unsubscribe(sub)


# ------------------------------------------------------------------ one run's poll: a query and a GET


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1000, 3)


class RunPoller:
    """What a run's viewers see, one poll a second: ONE store query (the run, its steps and their latest
    attempts, joined) and ONE Redis GET per host running one of its steps (one, but for network runs); the
    precondition records only when a step's state changed (a round ended, another was planned)."""

    def __init__(self, db: sessionmaker[Session], client: Any, run_id: str) -> None:
        self.db, self.client, self.run_id = db, client, run_id
        self.last_run: dict[str, Any] | None = None
        self.last_steps: dict[str, dict[str, Any]] = {}
        self.seen: dict[str, tuple[float, float, int]] = {}     # attempt -> (updated_at, elapsed_s, bytes)
        self.shape: tuple[tuple[str, str], ...] = ()            # (step id, state) of the last records read
        self.records: list[PreconditionRecord] = []            # detached: read when the shape changed
        self.max_rounds: int | None = None                      # the run's precondition cap, as planned
        self.expected: dict[str, float] = {}                    # step id -> planned seconds of fio
        self.labels: dict[int, str] = {}                        # precondition group (seq) -> its cell's name

    def _rows(self) -> list[Any]:
        latest = (select(Attempt.step_id, func.max(Attempt.number).label("n"))
                  .join(Step, Step.id == Attempt.step_id).where(Step.run_id == self.run_id)
                  .group_by(Attempt.step_id).subquery())
        q = (select(Run.state, Run.reason, Run.host, Step.id, Step.name, Step.kind, Step.round, Step.state,
                    Step.reason, Step.host, Attempt.id, Attempt.fio_started_at, Attempt.number,
                    Step.seq, Attempt.state, Attempt.fio_ended_at, Attempt.ended_at, Attempt.lost_at, Step.ended_at)
             .select_from(Run).outerjoin(Step, Step.run_id == Run.id)
             .outerjoin(latest, latest.c.step_id == Step.id)
             .outerjoin(Attempt, and_(Attempt.step_id == Step.id, Attempt.number == latest.c.n))
             .where(Run.id == self.run_id).order_by(Step.seq, Step.round, Step.host))
        with self.db() as s:
            rows = list(s.execute(q).all())
            new = [r[3] for r in rows if r[3] is not None and r[3] not in self.expected]
            for i in range(0, len(new), 500):      # a step's workload is decoded once, when it is first seen
                for sid, workload in s.execute(select(Step.id, Step.workload).where(Step.id.in_(new[i:i + 500]))):
                    self.expected[sid] = runview.expected_s(workload)
            return rows

    def _live(self, hosts: set[str]) -> dict[str, LiveStatus]:
        out: dict[str, LiveStatus] = {}
        for host in sorted(hosts)[:16]:
            raw = self.client.get(LIVE_KEY_PREFIX + host) if self.client is not None else None
            if not raw or len(raw) > MAX_LIVE_BYTES:
                continue
            try:
                items = json.loads(raw)
                for item in items if isinstance(items, list) else []:
                    st = LiveStatus.model_validate(item)
                    if st.run_id == self.run_id:
                        out[st.attempt_id] = st
            except ValueError:
                continue
        return out

    def _preconditioning(self, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Where each precondition group stands; its record read again only when a step's state changed."""
        if not any(st["kind"] == "precondition" for st in steps):
            return []
        shape = tuple((st["id"], st["state"]) for st in steps)
        if shape != self.shape:
            with self.db() as s:
                if not self.shape:
                    run = s.get(Run, self.run_id)
                    self.max_rounds = runview.planned_max_rounds(run) if run is not None else None
                self.records = runview.records(s, self.run_id)
                self.labels = runview.labels(s, self.run_id)
            self.shape = shape
        return runview.preconditioning(steps, self.records, self.max_rounds, self.labels)

    def __call__(self) -> list[Event]:
        rows = self._rows()
        if not rows:
            return [Event("end", {"run_id": self.run_id, "state": "UNKNOWN", "reason": "no such run"})]
        run_state, run_reason, run_host = rows[0][0], rows[0][1], rows[0][2]
        active_hosts = {(r[9] or run_host) for r in rows if r[3] is not None and r[7] in ACTIVE_STEP}
        live = self._live(active_hosts) if active_hosts else {}
        now = time.time()
        steps: list[dict[str, Any]] = []
        for (_rs, _rr, _rh, sid, name, kind, rnd, state, reason, _host, att_id, fio_started, number,
             seq, att_state, fio_ended, att_ended, lost_at, step_ended) in rows:
            if sid is None:
                continue
            status = live.get(att_id) if att_id and att_state in ACTIVE_STEP else None
            stopped = fio_ended or att_ended or lost_at or step_ended
            exp = self.expected.get(sid, 0.0)
            progress = runview.progress(state, exp, fio_started, stopped, now,
                                        (status.elapsed_s, status.expected_s) if status is not None else None)
            steps.append({"id": sid, "index": len(steps), "seq": seq, "name": name, "kind": kind, "round": rnd,
                          "state": state, "reason": (reason or "")[:300], "progress": progress, "attempt": number,
                          "expected_s": exp})
        done = sum(1 for st in steps if st["state"] in TERMINAL_STEP)
        precond = self._preconditioning(steps)
        head = {"run_id": self.run_id, "state": run_state, "reason": (run_reason or "")[:500],
                "done": done, "total": len(steps), "eta": runview.eta(steps, precond),
                "actions": runview.actions(run_state, (st["state"] for st in steps)),
                "preconditioning": [{k: g[k] for k in PRECOND_KEYS} for g in precond]}
        events: list[Event] = []
        changed = [st for st in steps if self.last_steps.get(st["id"]) != st]
        if changed or head != self.last_run:
            # a run of hundreds of steps sends only the steps that moved (a running step's progress, each
            # second), not all of them: 50 viewers of a 400-step run would otherwise get 60 KB each a second
            full = Event("status", {**head, "steps": steps, "full": True})
            partial = len(changed) < len(steps)
            events.append(Event("status", {**head, "steps": changed, "full": False}, snapshot=full)
                          if partial else full)
            self.last_run, self.last_steps = head, {st["id"]: st for st in steps}
        for att_id, st in live.items():
            sample = self._sample(att_id, st)
            if sample is not None:
                events.append(Event("sample", sample))
        if run_state in TERMINAL_RUN:
            events.append(Event("end", {"run_id": self.run_id, "state": run_state, "reason": run_reason or "",
                                        "actions": head["actions"]}))
        return events

    def _sample(self, att_id: str, st: LiveStatus) -> dict[str, Any] | None:
        """The attempt's newest second, or None when it is the one already sent."""
        nbytes = sum(d.read.bytes_total + d.write.bytes_total for d in st.devices)
        prev = self.seen.get(att_id)
        if prev is not None and st.updated_at <= prev[0]:
            return None
        self.seen[att_id] = (st.updated_at, st.elapsed_s, nbytes)
        bw = None
        if prev is not None and st.elapsed_s > prev[1]:
            bw = round(max(nbytes - prev[2], 0) / (st.elapsed_s - prev[1]) / 1e6, 3)
        unit = "IOPS"
        if st.app is not None:
            unit = "TPS"
            iops = st.app.tps
            lat_mean = None if st.app.lat_avg_ms is None else st.app.lat_avg_ms * 1000
            lat_p99 = None if st.app.lat_p99_ms is None else st.app.lat_p99_ms * 1000
        else:
            dirs = [x for d in st.devices for x in (d.read, d.write)]
            rated = [x for x in dirs if x.iops]
            iops = sum(x.iops or 0.0 for x in dirs) if rated else None
            weight = sum(x.iops or 0.0 for x in rated if x.lat_mean_ns is not None)
            lat_mean = _us(sum((x.iops or 0.0) * (x.lat_mean_ns or 0.0) for x in rated if x.lat_mean_ns is not None)
                           / weight) if weight else None
            lat_p99 = _us(max((x.lat_p99_ns for x in dirs if x.lat_p99_ns is not None), default=None))
        return {"t": st.updated_at, "attempt_id": att_id, "step_id": st.step_id, "step": st.step_name,
                "phase": st.phase, "round": st.round, "unit": unit,
                "iops": None if iops is None else round(iops, 1), "bw_mbs": bw,
                "lat_mean_us": lat_mean, "lat_p99_us": lat_p99,
                "elapsed_s": round(st.elapsed_s, 1), "expected_s": round(st.expected_s, 1)}


# ------------------------------------------------------------------ the route

router = APIRouter()


def fanout_of(request: Request) -> Fanout:
    web = request.app.state.web
    fan = web.extras.get("live")
    if fan is None:
        fan = web.extras["live"] = Fanout(lambda rid: RunPoller(web.sessions, web.redis(), rid))
    assert isinstance(fan, Fanout)
    return fan


def _check(db: sessionmaker[Session], run_id: str) -> None:
    with db() as s:
        queries.get_run(s, run_id)          # NotFound (404) for an unknown or malformed id


@route(router, "GET", "/api/runs/{run_id}/live", "viewer", tags=["runs"], response_class=StreamingResponse,
       responses={200: {"content": {"text/event-stream": {}}, "description": "status, sample, end events"}})
async def live(request: Request, run_id: Annotated[str, Path(max_length=64)]) -> StreamingResponse:
    """The run's progress as server-sent events: ``status`` (steps' states and progress), ``sample`` (IOPS,
    MB/s, latency each second of a running step), then ``end`` once the run ended."""
    web = request.app.state.web
    await asyncio.to_thread(_check, web.sessions, run_id)
    who: Principal = request.state.principal
    checks: dict[tuple[str, str, str | None], tuple[float, bool]] = web.extras.setdefault("live-auth", {})

    async def valid() -> bool:
        """Still standing? One store query per token and second, whatever the number of its streams."""
        k = (who.name, who.key, who.csrf)
        at, ok = checks.get(k, (0.0, True))
        if time.monotonic() - at >= RECHECK_S:
            ok = await asyncio.to_thread(still_valid, request, who)
            if len(checks) > 10_000:
                checks.clear()
            checks[k] = (time.monotonic(), ok)
        return ok

    fan = fanout_of(request)
    sub = fan.subscribe(run_id, who.name)        # Busy (429) now, before the response starts
    body = stream(fan, run_id, who=who.name, valid=valid, sub=sub)
    weakref.finalize(body, fan.unsubscribe, sub)   # a client gone before the first byte: the body never starts
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
