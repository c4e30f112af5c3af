"""What the controller's loop spends reading one fio result (issue 30: storing a result was 31% of the loop thread at
1,000 agents, its parsing 13%).

A live step's output is a ``--status-interval=1`` json+ stream: a cumulative report a second, the last the result.
fio itself writes one here (``--runtime`` seconds on a file under ``--dir``, json+ with latency percentiles, as the
lab's job files ask), then each arm reads it ``--rounds`` times, the arms interleaved, CPU time of this process:

- **bare**: ``json.JSONDecoder.raw_decode`` of every report of the stream, nothing else (the baseline);
- **before**: what the fio kind did per result until 2026-11-30: the stream parsed (samples and metrics), split
  again for its last report, and that report's total and completion latency bins read in two passes;
- **now**: the stream read once (``read_status_stream``: samples, metrics and the last report's text) and both
  histograms from one reading (``latency_bins_both``).

The figures are the median and the minimum over the rounds, and the ratios against bare's median.

Usage: python -m bench.resultparse [--runtime 10] [--rounds 40] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from labcontract.fioresult import latency_bins, latency_bins_both
from labcontract.fioseries import parse_status_stream, read_status_stream, split_status_stream


def fio_stream(directory: Path, runtime_s: int) -> bytes:
    """A real ``--status-interval=1`` json+ stream of ``runtime_s`` seconds of 4 KiB random mixed I/O."""
    if shutil.which("fio") is None:
        raise SystemExit("fio is not installed (make test-deps installs it)")
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        out = Path(tmp) / "fio.json"
        subprocess.run(["fio", "--name=bench", f"--filename={Path(tmp) / 'data'}", "--size=64m", "--rw=randrw",
                        "--bs=4k", "--iodepth=8", "--ioengine=libaio", "--time_based", f"--runtime={runtime_s}",
                        "--status-interval=1", "--output-format=json+", "--lat_percentiles=1",
                        f"--output={out}"], check=True, capture_output=True)
        return out.read_bytes()


def bare(raw: bytes) -> None:
    text, dec, i = raw.decode(), json.JSONDecoder(), 0
    while (start := text.find("{", i)) >= 0:
        _obj, i = dec.raw_decode(text, start)


def before(raw: bytes) -> None:
    parse_status_stream(raw)
    final = split_status_stream(raw)[-1]
    latency_bins(final)
    latency_bins(final, completion=True)


def now(raw: bytes) -> None:
    latency_bins_both(read_status_stream(raw).final)


def cpu_s(fn: Callable[[bytes], None], raw: bytes) -> float:
    t0 = time.process_time()
    fn(raw)
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", type=int, default=10, help="seconds of fio (one report a second)")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    a = ap.parse_args()
    raw = fio_stream(a.dir, a.runtime)
    arms: dict[str, Callable[[bytes], None]] = {"bare": bare, "before": before, "now": now}
    assert (latency_bins(split_status_stream(raw)[-1]), latency_bins(split_status_stream(raw)[-1], completion=True)) \
        == latency_bins_both(read_status_stream(raw).final), "the two readings differ"
    times: dict[str, list[float]] = {k: [] for k in arms}
    for r in range(a.rounds):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            times[name].append(cpu_s(arms[name], raw))
    base = statistics.median(times["bare"])
    print(f"one stream: {len(raw):,} bytes, {a.runtime} reports; {a.rounds} rounds, CPU ms per result")
    for name, got in times.items():
        med = statistics.median(got)
        print(f"  {name:<7} median {med * 1000:7.2f}  min {min(got) * 1000:7.2f}  x{med / base:5.2f} of bare")
    print(f"now / before (medians): {statistics.median(times['now']) / statistics.median(times['before']):.3f}")


if __name__ == "__main__":
    main()
