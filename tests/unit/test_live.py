"""Tests for agents.live: live status of a running attempt from the tail of its fio.json stream.

Synthetic cumulative json+ reports built from known latency samples (with fio's histogram bin
rule) check every interval value exactly; real fio ``--status-interval=1`` streams of the job
files agents run (one device, and a device group) check the values against
:mod:`labcontract.fioseries` and the device mapping; a 2+ MB stream checks that tail reading
gives what a full parse of the last two reports gives, that it reads only the tail, and its cost.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import pytest

from agents.live import LiveReader, live_devices, read_live, tail_reports
from agents.runner import Attempt
from labcontract.fiojob import render_job
from labcontract.fioresult import parse_fio_groups
from labcontract.fioseries import parse_status_stream, split_status_stream
from labcontract.live import DeviceLive, DirectionLive
from labcontract.protocol import StartStep
from labcontract.suite import Workload, parse_suite
from tests.fiosynth import bin_value

FIO = shutil.which("fio")

# --------------------------------------------------------------------------- synthetic reports



class Part:
    """Cumulative state of one job entry's direction, as fio keeps it."""

    def __init__(self, bs: int = 4096) -> None:
        self.bs, self.n, self.total, self.sq, self.max, self.min = bs, 0, 0, 0, 0, 0
        self.bins: dict[int, int] = {}
        self.extra_ios = 0

    def add(self, samples: Sequence[int]) -> None:
        for x in samples:
            self.n += 1
            self.total += x
            self.sq += x * x
            self.max = max(self.max, x)
            self.min = x if self.n == 1 else min(self.min, x)
            b = bin_value(x)
            self.bins[b] = self.bins.get(b, 0) + 1

    def json(self, runtime_ms: int) -> dict[str, Any]:
        ios = self.n + self.extra_ios
        if self.n:
            mean = self.total / self.n
            var = (self.sq - self.total * self.total / self.n) / (self.n - 1) if self.n > 1 else 0.0
            lat: dict[str, Any] = {"min": self.min, "max": self.max, "mean": mean, "stddev": math.sqrt(max(var, 0)),
                                   "N": self.n, "bins": {str(k): v for k, v in self.bins.items()}}
        else:
            lat = {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}
        return {"io_bytes": ios * self.bs, "total_ios": ios, "runtime": runtime_ms if ios else 0,
                "iops": ios * 1000 / max(runtime_ms, 1), "bw_bytes": 0, "lat_ns": lat}


class Stream:
    """Cumulative reports of named job entries; ``step`` adds one interval's latencies."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.parts = {n: (Part(), Part()) for n in names}
        self.t_ms = 0

    def step(self, dt_ms: int, samples: Mapping[str, tuple[Sequence[int], Sequence[int]]]) -> str:
        self.t_ms += dt_ms
        for name, (r, w) in samples.items():
            self.parts[name][0].add(r)
            self.parts[name][1].add(w)
        return self.report()

    def report(self) -> str:
        doc = {"fio version": "fio-3.33", "timestamp_ms": 1_700_000_000_000 + self.t_ms,
               "jobs": [{"jobname": n, "groupid": i, "error": 0, "read": self.parts[n][0].json(self.t_ms),
                         "write": self.parts[n][1].json(self.t_ms)} for i, n in enumerate(self.names)]}
        return json.dumps(doc, indent=2)


def p99(samples: Sequence[int]) -> float:
    """fio's rule on the interval's histogram: the first bin whose cumulative count reaches 99 %."""
    values = sorted(bin_value(x) for x in samples)
    return float(values[math.ceil(0.99 * len(values)) - 1])


def docs(*reports: str) -> list[dict[str, Any]]:
    return [json.loads(r) for r in reports]


READS_1 = [1000] * 150 + [3000] * 48 + [40_000, 90_000]          # 200 reads in the first 900 ms
WRITES_1 = [5000] * 99 + [70_000]
READS_2 = [1200] * 290 + [2500] * 8 + [4000, 9000]           # max 9000 < the running max 90000
WRITES_2: list[int] = []


def two_intervals(names: Sequence[str] = ("w",)) -> tuple[Stream, str, str]:
    s = Stream(names)
    first = s.step(900, {n: (READS_1, WRITES_1) for n in names})
    second = s.step(1000, {n: (READS_2, WRITES_2) for n in names})
    return s, first, second


def test_first_report_is_an_interval_from_the_job_start() -> None:
    _, first, _ = two_intervals()
    (dev,) = live_devices(docs(first), ["/dev/sdx"], threads=2, iodepth=8)
    assert (dev.device, dev.threads, dev.iodepth) == ("/dev/sdx", 2, 8)
    r, w = dev.read, dev.write
    assert (r.ios_total, r.bytes_total, w.ios_total, w.bytes_total) == (200, 200 * 4096, 100, 100 * 4096)
    assert r.iops == pytest.approx(200 / 0.9) and w.iops == pytest.approx(100 / 0.9)
    assert r.lat_mean_ns == pytest.approx(statistics.fmean(READS_1), rel=1e-12)
    assert w.lat_mean_ns == pytest.approx(statistics.fmean(WRITES_1), rel=1e-12)
    assert (r.lat_max_ns, w.lat_max_ns) == (90_000, 70_000)          # the running max grew: exact
    assert r.lat_p99_ns == p99(READS_1) == bin_value(3000)           # not the max: 198th of 200
    assert w.lat_p99_ns == p99(WRITES_1) == bin_value(5000)


def test_second_interval_is_the_difference_of_two_reports() -> None:
    _, first, second = two_intervals()
    (dev,) = live_devices(docs(first, second), ["/dev/sdx"], threads=1, iodepth=1)
    r, w = dev.read, dev.write
    assert (r.ios_total, r.bytes_total) == (500, 500 * 4096)
    assert r.iops == pytest.approx(300 / 1.0)
    assert r.lat_mean_ns == pytest.approx(statistics.fmean(READS_2), rel=1e-9)
    # the running max (90000) did not grow: the largest bin that grew (fio's resolution)
    assert bin_value(9000) != 9000
    assert r.lat_max_ns == bin_value(9000)
    assert r.lat_p99_ns == p99(READS_2) == bin_value(2500)
    # no write completed in the interval: counters stay, no latency figures
    assert w == DirectionLive(ios_total=100, bytes_total=100 * 4096, iops=0.0)


def test_no_report_yet_gives_zero_counters_and_no_interval() -> None:
    devs = live_devices([], ["/dev/a", "/dev/b"], threads=4, iodepth=32)
    assert devs == (DeviceLive(device="/dev/a", threads=4, iodepth=32),
                    DeviceLive(device="/dev/b", threads=4, iodepth=32))
    assert devs[0].read == DirectionLive(ios_total=0, bytes_total=0, iops=None)


def test_device_group_entries_map_by_their_dev_suffix() -> None:
    s = Stream(["w.dev1", "w.dev0"])              # entry order need not be device order
    first = s.step(1000, {"w.dev0": ([1000] * 10, []), "w.dev1": ([2000] * 30, [])})
    devs = live_devices(docs(first), ["/dev/a", "/dev/b"], threads=1, iodepth=4)
    assert [d.device for d in devs] == ["/dev/a", "/dev/b"]
    assert devs[0].read.ios_total == 10 and devs[0].read.lat_mean_ns == pytest.approx(1000)
    assert devs[1].read.ios_total == 30 and devs[1].read.lat_mean_ns == pytest.approx(2000)
    # a single device takes the single entry whatever its name
    (one,) = live_devices(docs(Stream(["anything"]).step(1000, {"anything": ([5], [])})), ["/dev/z"], 1, 1)
    assert one.device == "/dev/z" and one.read.ios_total == 1


def test_ramp_reset_starts_the_interval_at_zero() -> None:
    s = Stream(["w"])
    s.parts["w"][0].extra_ios = 5000              # ramp_time: I/O counted, no latency recorded
    ramp = s.step(2000, {})
    s = Stream(["w"])                             # the ramp ended: fio zeroed every counter
    after = s.step(800, {"w": (READS_1, WRITES_1)})
    (dev,) = live_devices(docs(ramp, after), ["/dev/x"], 1, 1)
    assert dev.read.ios_total == 200
    assert dev.read.iops == pytest.approx(200 / 0.8)
    assert dev.read.lat_mean_ns == pytest.approx(statistics.fmean(READS_1))
    (during,) = live_devices(docs(ramp), ["/dev/x"], 1, 1)
    assert during.read.ios_total == 5000 and during.read.lat_mean_ns is None


def attempt_dir(root: Path, workload: Workload | None, devices: Sequence[str], *,
                kind: Literal["purge", "precondition", "measure"] = "measure",
                action: Literal["fio", "purge"] = "fio", attempt_id: str = "r1-s000-a1",
                launched_at: float = 1000.0) -> Attempt:
    msg = StartStep(run_id="r1", step_id="r1-s000", attempt_id=attempt_id, host="h1", action=action,
                    devices=tuple(devices), job_name=workload.name if workload else "purge", kind=kind,
                    round=3 if kind == "precondition" else 0, suite="demo", workload=workload,
                    status_interval_s=1 if workload else None, timeout_s=100, dispatched_at=launched_at - 1)
    path = root / attempt_id
    path.mkdir(parents=True)
    (path / "start.json").write_text(msg.model_dump_json())
    (path / "state.json").write_text(json.dumps({"pid": 1, "launched_at": launched_at}))
    return Attempt(attempt_id, path)


def workload(name: str = "4k-randread", runtime: int = 10, **kw: Any) -> Workload:
    extra = "".join(f", {k}: {v}" for k, v in kw.items())
    suite = parse_suite(f"suite: t\nprofiles:\n  - {{name: {name}, rw: randread, bs: 4k, iodepth: 8, "
                        f"runtime: {runtime}s{extra}}}\n", "t.yaml")
    return suite.workloads[0]


def test_read_live_fills_the_step_fields_and_tolerates_truncation(tmp_path: Path) -> None:
    w = workload(ramp_time="2s", numjobs=2)
    att = attempt_dir(tmp_path, w, ["/dev/sdx"], kind="precondition")
    none_yet = read_live(att, "h1", 1003.5)
    assert none_yet is not None and none_yet.devices[0].read.ios_total == 0
    _, first, second = two_intervals([w.name])
    (att.path / "fio.json").write_text("note: fio says something\n" + first + "\n" + second + "\n"
                                       + second[: len(second) // 2])  # the third report half written
    st = read_live(att, "h1", 1004.5)
    assert st is not None
    assert (st.host, st.attempt_id, st.run_id, st.step_id, st.step_name, st.suite) == (
        "h1", "r1-s000-a1", "r1", "r1-s000", w.name, "demo")
    assert (st.phase, st.round, st.started_at, st.elapsed_s, st.expected_s, st.updated_at) == (
        "precondition", 3, 1000.0, 4.5, 12.0, 1004.5)
    assert st.devices == live_devices(docs(first, second), ["/dev/sdx"], 2, 8)


def test_purge_has_no_device_figures_and_unreadable_attempts_are_none(tmp_path: Path) -> None:
    att = attempt_dir(tmp_path, None, ["/dev/sdx"], kind="purge", action="purge")
    st = read_live(att, "h1", 1010.0)
    assert st is not None and st.phase == "purge" and st.devices == () and st.expected_s == 0.0
    (att.path / "state.json").unlink()
    assert read_live(att, "h1", 1010.0) is None          # launched, state not written yet
    assert read_live(Attempt("gone", tmp_path / "gone"), "h1", 0.0) is None


# --------------------------------------------------------------------------- a big stream


def big_stream(n_reports: int, names: Sequence[str] = ("w",), seed: int = 7) -> Iterator[str]:
    """Reports of about 25 KB with wide latency histograms, one per second."""
    rnd = random.Random(seed)
    s = Stream(names)
    for _ in range(n_reports):
        yield s.step(1000, {n: ([int(rnd.lognormvariate(11, 1.2)) for _ in range(400)],
                               [int(rnd.lognormvariate(11.5, 1.0)) for _ in range(150)]) for n in names})


class CountingOpen:
    """Counts the bytes read through Path.open(..., 'rb') of one file."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
        self.bytes = 0
        real_open = Path.open
        counter = self

        class Wrapped:
            def __init__(self, f: Any) -> None:
                self.f = f

            def read(self, n: int = -1) -> bytes:
                data: bytes = self.f.read(n)
                counter.bytes += len(data)
                return data

            def __getattr__(self, name: str) -> Any:
                return getattr(self.f, name)

            def __enter__(self) -> Wrapped:
                return self

            def __exit__(self, *exc: object) -> None:
                self.f.close()

        def fake_open(path: Path, *args: Any, **kwargs: Any) -> Any:
            f = real_open(path, *args, **kwargs)
            return Wrapped(f) if path == target else f

        monkeypatch.setattr(Path, "open", fake_open)


def test_tail_of_a_big_stream_equals_the_full_parse_of_its_last_two_reports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = workload("w")
    att = attempt_dir(tmp_path, w, ["/dev/sdx"])
    fio_json = att.file("fio.json")
    reports = list(big_stream(90))
    text = "\n".join(reports) + "\n"
    fio_json.write_text(text)
    size = fio_json.stat().st_size
    assert size > 2 << 20
    last_two = [json.loads(r) for r in split_status_stream(text)[-2:]]
    expected = live_devices(last_two, ["/dev/sdx"], w.numjobs, w.iodepth)
    for tail in (512 * 1024, 4096, 10):           # 10 and 4096 bytes: the tail has to grow
        assert tail_reports(fio_json, 2, tail) == last_two
    counting = CountingOpen(monkeypatch, fio_json)
    st = read_live(att, "h1", 2000.0)
    assert st is not None and st.devices == expected
    assert counting.bytes <= 512 * 1024           # only the tail was read
    # and the figures are fioseries' last sample (pooled over the one entry's two directions)
    samples, _ = parse_status_stream(text)
    d = st.devices[0]
    assert d.read.iops == pytest.approx(samples[-1].read_iops)
    assert d.write.iops == pytest.approx(samples[-1].write_iops)
    assert max(d.read.lat_max_ns or 0, d.write.lat_max_ns or 0) == samples[-1].lat_max_ns
    pooled = ((d.read.lat_mean_ns or 0) * 400 + (d.write.lat_mean_ns or 0) * 150) / 550
    assert pooled == pytest.approx(samples[-1].lat_mean_ns, rel=1e-9)


def test_a_growing_stream_read_each_second_decodes_only_what_was_appended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = workload("w")
    att = attempt_dir(tmp_path, w, ["/dev/a", "/dev/b"])
    fio_json = att.file("fio.json")
    fio_json.write_bytes(b"")
    reader = LiveReader()
    counting = CountingOpen(monkeypatch, fio_json)
    per_pass: list[float] = []
    appended_max = 0
    with fio_json.open("a") as out:
        for k, report in enumerate(big_stream(90, ["w.dev0", "w.dev1"], seed=3)):
            half = len(report) // 2
            out.write(report[:half])      # fio is writing the report
            out.flush()
            reader.read(att, "h1", 0.0)
            out.write(report[half:] + "\n")
            out.flush()
            appended_max = max(appended_max, len(report) + 1)
            before = counting.bytes
            t0 = time.perf_counter()
            st = reader.read(att, "h1", 0.0)
            per_pass.append(time.perf_counter() - t0)
            assert st is not None
            if k >= 1:   # the rest of the half-written report only
                assert counting.bytes - before <= appended_max + 2
            if k in (0, 1, 2, 50, 89):
                assert st.devices == read_live(att, "h1", 0.0).devices  # type: ignore[union-attr]
    assert fio_json.stat().st_size > 2 << 20
    per_pass.sort()
    median = per_pass[len(per_pass) // 2]
    print(f"\nLiveReader pass on a {fio_json.stat().st_size / 2**20:.1f} MB two-device stream: "
          f"median {median * 1e3:.2f} ms, max {per_pass[-1] * 1e3:.2f} ms")
    # (no bound on the time: a test waits on conditions, never on a quiet machine; what keeps a pass cheap is the
    # bound on the bytes each pass reads, asserted above; its cost is printed for the curious)


# --------------------------------------------------------------------------- real fio streams


def run_fio(tmp: Path, w: Workload, devices: Sequence[str], name: str) -> str:
    assert FIO is not None
    for direct in ("direct=1", "direct=0"):      # buffered only where O_DIRECT is refused (tmpfs)
        job = tmp / f"{name}.fio"
        job.write_text(render_job(w, list(devices)).replace("direct=1", direct))
        out = tmp / f"{name}.json"
        res = subprocess.run([FIO, "--output-format=json+", f"--output={out}", "--status-interval=1", str(job)],
                             capture_output=True, text=True, timeout=60)
        if res.returncode == 0:
            return out.read_text()
    pytest.fail(f"fio failed: {res.stderr}")


@pytest.fixture(scope="module")
def real_streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Workload, list[str], str]]:
    if FIO is None:
        pytest.skip("fio is not installed")
    tmp = tmp_path_factory.mktemp("live-fio")
    files = []
    for i in range(2):
        f = tmp / f"dev{i}.img"
        with f.open("wb") as fh:
            fh.truncate(64 << 20)
        files.append(str(f))
    suite = parse_suite("suite: t\nprofiles:\n  - {name: 8k-7030, rw: randrw, bs: 8k, rwmixread: 70, iodepth: 4, "
                        "numjobs: 2, runtime: 3s}\n", "t.yaml")
    w = suite.workloads[0]
    return {"one": (w, files[:1], run_fio(tmp, w, files[:1], "one")),
            "group": (w, files, run_fio(tmp, w, files, "group"))}


@pytest.mark.parametrize("kind", ["one", "group"])
def test_real_stream_each_second(real_streams: dict[str, tuple[Workload, list[str], str]], kind: str,
                                 tmp_path: Path) -> None:
    w, devices, text = real_streams[kind]
    reports = split_status_stream(text)
    assert len(reports) >= 3                      # 2+ interim reports, then the final one
    att = attempt_dir(tmp_path, w, devices)
    reader = LiveReader()
    with att.file("fio.json").open("w") as out:
        for k in range(1, len(reports) + 1):
            out.write(reports[k - 1] + "\n")
            out.flush()
            st = reader.read(att, "h1", 0.0)
            assert st is not None
            devs = st.devices
            assert [d.device for d in devs] == devices
            assert all((d.threads, d.iodepth) == (2, 4) for d in devs)
            # cumulative counters: the report's own per-device figures (by section name)
            groups = parse_fio_groups(reports[k - 1])
            for i, d in enumerate(devs):
                g = groups[f"8k-7030.dev{i}"] if kind == "group" else next(iter(groups.values()))
                assert (d.read.ios_total, d.write.ios_total) == (g.read.ios, g.write.ios)
                assert (d.read.bytes_total, d.write.bytes_total) == (g.read.io_bytes, g.write.io_bytes)
            # interval figures: the per-second series' sample for the same interval
            sample = parse_status_stream("\n".join(reports[:k]))[0][-1]
            assert sum(d.read.iops or 0 for d in devs) == pytest.approx(sample.read_iops)
            assert sum(d.write.iops or 0 for d in devs) == pytest.approx(sample.write_iops)
            maxes = [v for d in devs for v in (d.read.lat_max_ns, d.write.lat_max_ns) if v is not None]
            assert max(maxes) == sample.lat_max_ns
            # p99 of the interval: from the difference of the two reports' histograms
            prev = json.loads(reports[k - 2]) if k >= 2 else None
            last = json.loads(reports[k - 1])
            for i, d in enumerate(devs):
                for ddir, live in (("read", d.read), ("write", d.write)):
                    bins_b = last["jobs"][i][ddir]["lat_ns"]["bins"]
                    bins_a = prev["jobs"][i][ddir]["lat_ns"].get("bins", {}) if prev else {}
                    grown = sorted(int(v) for v, c in bins_b.items() for _ in range(c - bins_a.get(v, 0)))
                    if not grown:
                        continue
                    need = math.ceil(Fraction(99, 100) * len(grown))
                    # where 0.99 * n is a whole number fio's long-double rounding decides; either neighbour
                    allowed = {grown[need - 1], grown[min(need, len(grown) - 1)]} if 99 * len(grown) % 100 == 0 \
                        else {grown[need - 1]}
                    assert live.lat_p99_ns in {float(v) for v in allowed}
                    assert live.lat_mean_ns is not None and live.lat_max_ns is not None
                    assert live.lat_max_ns >= live.lat_p99_ns * 0.99
