"""The live fan-out (orchestrator/web/live.py) without a server: one poller per watched run whatever the number
of viewers, stopped when the last viewer leaves, ``end`` closing every stream, slow viewers losing only their
own oldest events, heartbeats when idle; and the run poller's events from a real store and a fake Redis."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import Busy
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Attempt, Base, Run, Step
from orchestrator.web import live
from orchestrator.web.live import Event, Fanout, RunPoller, Subscriber
from tests import aio


class Counter:
    """A fake poll: counts its calls, says ``status`` each time and ``end`` once told to."""

    def __init__(self) -> None:
        self.calls = 0
        self.finish = False

    def __call__(self) -> list[Event]:
        self.calls += 1
        out = [Event("status", {"n": self.calls})]
        if self.finish:
            out.append(Event("end", {"state": "SUCCEEDED"}))
        return out


async def until(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def test_fifty_viewers_share_one_poller() -> None:
    polls: dict[str, Counter] = {}

    def make(rid: str) -> Counter:
        polls[rid] = Counter()
        return polls[rid]

    async def main() -> None:
        fan = Fanout(make, interval_s=0.02)
        subs = [fan.subscribe("r1", f"viewer-{i}") for i in range(50)]
        assert list(polls) == ["r1"] and fan.viewers("r1") == 50
        await until(lambda: polls["r1"].calls >= 5)
        # every viewer got the same events, and the poll ran once per tick, not once per viewer
        calls = polls["r1"].calls
        got = [[ev.data["n"] for ev in drain(s) if ev is not None] for s in subs]
        assert all(g == got[0] for g in got) and len(got[0]) >= 5
        assert calls <= len(got[0]) + 1
        # a late viewer gets the last status at once
        late = fan.subscribe("r1")
        first = late.queue.get_nowait()
        assert first is not None and first.name == "status"
        for s in [*subs, late]:
            fan.unsubscribe(s)
        assert fan.viewers("r1") == 0 and "r1" not in fan.watches
        stopped = polls["r1"].calls
        await asyncio.sleep(0.1)
        assert polls["r1"].calls <= stopped + 1, "the poller kept polling with no viewer"

    aio.run(main())


def drain(sub: Subscriber) -> list[Event | None]:
    out = []
    while not sub.queue.empty():
        out.append(sub.queue.get_nowait())
    return out


def test_two_runs_two_pollers_and_end_closes_every_stream() -> None:
    polls: dict[str, Counter] = {}

    def make(rid: str) -> Counter:
        polls[rid] = Counter()
        return polls[rid]

    async def main() -> None:
        fan = Fanout(make, interval_s=0.01)
        streams = [live.stream(fan, "a"), live.stream(fan, "a"), live.stream(fan, "b")]
        firsts = [await s.__anext__() for s in streams]
        assert all(f.startswith(b"retry:") for f in firsts)
        assert sorted(polls) == ["a", "b"]
        polls["a"].finish = True

        async def read_all(s: Any) -> list[bytes]:
            return [chunk async for chunk in s]

        a1, a2 = await asyncio.wait_for(asyncio.gather(read_all(streams[0]), read_all(streams[1])), 5)
        for chunks in (a1, a2):
            assert chunks[-1].startswith(b"event: end\n"), chunks[-3:]
            assert json.loads(chunks[-1].split(b"data: ")[1]) == {"state": "SUCCEEDED"}
        assert "a" not in fan.watches and fan.viewers("b") == 1
        await streams[2].aclose()             # the viewer went away: its poller stops
        assert fan.watches == {}

    aio.run(main())


def test_slow_viewer_loses_only_its_own_oldest_events(monkeypatch: Any) -> None:
    monkeypatch.setattr(live, "QUEUE_MAX", 4)

    async def main() -> None:
        fan = Fanout(lambda rid: Counter(), interval_s=0.005)
        slow, fast = fan.subscribe("r"), fan.subscribe("r")
        seen: list[int] = []
        while len(seen) < 20:
            ev = await asyncio.wait_for(fast.queue.get(), 2)
            assert ev is not None
            seen.append(ev.data["n"])
        assert seen == list(range(1, 21))
        assert slow.queue.qsize() <= 4 and slow.dropped >= 15
        newest = [ev.data["n"] for ev in drain(slow) if ev is not None]
        assert newest == sorted(newest) and newest[-1] >= 19
        fan.unsubscribe(slow)
        fan.unsubscribe(fast)

    aio.run(main())


def test_heartbeat_when_idle_and_failing_polls_keep_the_stream() -> None:
    class Failing:
        calls = 0

        def __call__(self) -> list[Event]:
            self.calls += 1
            raise ConnectionError("store down")

    failing = Failing()

    async def main() -> None:
        fan = Fanout(lambda rid: failing, interval_s=0.01)
        s = live.stream(fan, "r", heartbeat_s=0.05)
        assert (await s.__anext__()).startswith(b"retry:")
        assert await asyncio.wait_for(s.__anext__(), 2) == b": keepalive\n\n"
        assert failing.calls >= 2 and fan.viewers("r") == 1
        await s.aclose()
        assert fan.watches == {}

    aio.run(main())


# ------------------------------------------------------------------ the run poller over a real store


class FakeRedis:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.gets = 0

    def get(self, key: str) -> str | None:
        self.gets += 1
        return self.values.get(key)


def _store(tmp_path: Path) -> sessionmaker[Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    Base.metadata.create_all(engine)
    return sessions(engine)


def _live_status(elapsed: float, updated: float, nbytes: int) -> dict[str, Any]:
    d = {"ios_total": 10, "bytes_total": nbytes, "iops": 1000.0, "lat_mean_ns": 50_000.0, "lat_p99_ns": 90_000.0}
    return {"host": "h1", "attempt_id": "s2-a1", "run_id": "run1", "step_id": "s2", "step_name": "m1",
            "suite": "x", "phase": "measure", "started_at": updated - elapsed, "elapsed_s": elapsed,
            "expected_s": 10.0, "updated_at": updated,
            "devices": [{"device": "/dev/x", "threads": 1, "iodepth": 4, "read": d}]}


def test_run_poller_status_samples_and_end(tmp_path: Path) -> None:
    db = _store(tmp_path)
    now = time.time()
    with db() as s:
        s.add(Run(id="run1", suite_name="x", suite_source="x.yaml", suite_text="", suite_sha256="0" * 64,
                  host="h1", device="/dev/x", devices=["/dev/x"], state="RUNNING", submitted_at=now))
        s.add(Step(id="s1", run_id="run1", seq=0, name="p", kind="purge", job_text="", state="SUCCEEDED"))
        s.add(Step(id="s2", run_id="run1", seq=1, name="m1", job_text="", state="RUNNING",
                   workload={"runtime": 10}))
        s.add(Step(id="s3", run_id="run1", seq=2, name="m2", job_text="", state="PENDING"))
        s.add(Step(id="s4", run_id="run1", seq=3, name="m3", job_text="", state="CANCELLED"))   # never started
        s.add(Attempt(id="s2-a1", step_id="s2", number=1, host="h1", device="/dev/x", state="RUNNING",
                      timeout_s=60, fio_started_at=now - 2))
        s.commit()
    r = FakeRedis()
    poll = RunPoller(db, r, "run1")
    evs = poll()
    assert [e.name for e in evs] == ["status"]
    st = evs[0].data
    assert st["state"] == "RUNNING" and (st["done"], st["total"]) == (2, 4) and st["full"] is True
    progress = {x["id"]: x["progress"] for x in st["steps"]}
    assert progress["s1"] == 1.0 and progress["s3"] == 0.0 and 0.1 < progress["s2"] < 0.5
    assert progress["s4"] == 0.0                  # a cancelled step that never ran shows no progress (issue 27)
    assert r.gets == 1                            # one GET for the one host running a step

    r.values["lab:live:h1"] = json.dumps([_live_status(4.0, now, 4_000_000)])
    evs = poll()
    assert [e.name for e in evs] == ["status", "sample"]
    # only the step that moved, and the whole picture for viewers who join later
    assert [x["id"] for x in evs[0].data["steps"]] == ["s2"] and evs[0].data["full"] is False
    assert evs[0].data["steps"][0]["progress"] == 0.4 and evs[0].data["steps"][0]["attempt"] == 1
    assert evs[0].snapshot is not None and len(evs[0].snapshot.data["steps"]) == 4
    assert evs[0].snapshot.data["full"] is True and evs[0].data["done"] == 2
    sample = evs[1].data
    assert sample["iops"] == 1000.0 and sample["lat_mean_us"] == 50.0 and sample["lat_p99_us"] == 90.0
    assert sample["bw_mbs"] is None               # the first second: no rate yet
    assert poll() == []                           # nothing new: nothing sent
    r.values["lab:live:h1"] = json.dumps([_live_status(5.0, now + 1, 6_000_000)])
    evs = poll()
    assert [e.name for e in evs] == ["status", "sample"] and evs[1].data["bw_mbs"] == 2.0

    r.values["lab:live:h1"] = "not json"          # garbage from the wire is ignored, not an error
    with db() as s:
        run = s.get(Run, "run1")
        assert run is not None
        run.state = "SUCCEEDED"
        for sid in ("s2", "s3"):
            step = s.get(Step, sid)
            assert step is not None
            step.state = "SUCCEEDED"
        s.commit()
    evs = poll()
    assert [e.name for e in evs] == ["status", "end"] and evs[1].data["state"] == "SUCCEEDED"
    assert RunPoller(db, r, "nope")()[0].name == "end"


def test_a_late_viewer_gets_the_whole_picture_not_the_last_change() -> None:
    full = Event("status", {"steps": [1, 2, 3], "full": True})
    delta = Event("status", {"steps": [2], "full": False}, snapshot=full)

    async def main() -> None:
        fan = Fanout(lambda rid: lambda: [delta], interval_s=0.01)
        first = fan.subscribe("r")
        got = await asyncio.wait_for(first.queue.get(), 2)
        assert got is delta                       # a viewer following along gets the change
        late = fan.subscribe("r")
        assert late.queue.get_nowait() is full    # one joining gets everything
        fan.unsubscribe(first)
        fan.unsubscribe(late)

    aio.run(main())


def test_streams_are_bounded_per_token_and_in_all_and_leaving_frees_them() -> None:
    async def main() -> None:
        fan = live.Fanout(lambda rid: Counter(), interval_s=0.01)
        mine = [fan.subscribe("r", "alice") for _ in range(live.MAX_PER_TOKEN)]
        with pytest.raises(Busy, match=f"alice has {live.MAX_PER_TOKEN} live streams"):
            fan.subscribe("r", "alice")
        fan.subscribe("r", "bob")                      # another token still may
        fan.unsubscribe(mine[0])
        fan.unsubscribe(mine[0])                       # twice (stream end, then collection): counted once
        assert fan.streams["alice"] == live.MAX_PER_TOKEN - 1
        fan.subscribe("r", "alice")
        for i in range(live.MAX_STREAMS - sum(fan.streams.values())):
            fan.subscribe("r", f"v{i}")
        with pytest.raises(Busy, match="live streams are open"):
            fan.subscribe("r", "carol")

    aio.run(main())


def test_a_stream_ends_once_its_token_no_longer_stands() -> None:
    async def main() -> None:
        fan = live.Fanout(lambda rid: Counter(), interval_s=0.01)
        standing = [True]

        async def valid() -> bool:
            return standing[0]

        s = live.stream(fan, "r", who="alice", valid=valid, recheck_s=0.02)
        assert await s.__anext__() == b"retry: 3000\n\n"
        await asyncio.wait_for(s.__anext__(), 2)      # events flow while the token stands
        standing[0] = False
        with pytest.raises(StopAsyncIteration):
            while True:
                await asyncio.wait_for(s.__anext__(), 2)
        assert fan.streams == {}

    aio.run(main())
