"""Helpers of the fuzz tests (tests/unit/test_fuzz_*.py): hypothesis settings that make a run
deterministic and bounded, JSON and text mutators, a per-call time and memory bound, and a count of
the inputs run (printed at the end of each fuzz module)."""

from __future__ import annotations

import copy
import json
import re
import signal
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from labcontract.fiojob import PERCENTILES

T = TypeVar("T")

INPUTS: Counter[str] = Counter()         # fuzz target -> inputs run, for the report
SPENT: dict[str, float] = {}             # fuzz target -> seconds spent in its calls
CALL_BOUND_S = 2.0                       # no single decode / parse may take longer
MEMORY_BOUND = 200 << 20                 # nor allocate more (tracemalloc peak), for the suite loader


def fuzz_settings(max_examples: int) -> settings:
    """Deterministic (derandomize, no example database), no per-example deadline (the bound is
    :func:`bounded`'s), and quiet about slow or large generated data."""
    return settings(derandomize=True, database=None, max_examples=max_examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.large_base_example])


class Hang(BaseException):
    """A call ran past :data:`CALL_BOUND_S` (a BaseException so the code under test cannot swallow it)."""


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def fire(_sig: int, _frame: FrameType | None) -> None:
        raise Hang(f"no answer within {seconds:g}s")
    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def bounded(target: str, fn: Callable[[], T], *, seconds: float = CALL_BOUND_S, memory: int | None = None) -> T:
    """``fn()`` counted as one input of ``target``, which must return (or raise) within ``seconds`` of CPU time
    (its thread's: what the input costs, whatever else the machine runs; the suite runs on two workers) and,
    with ``memory``, allocate at most that many bytes at its peak (traced by tracemalloc)."""
    INPUTS[target] += 1
    if memory is not None:
        tracemalloc.start()              # around the call only: tracing hypothesis's own work is slow
    started, cpu = time.monotonic(), time.thread_time()
    try:
        with _alarm(seconds * 10):         # the alarm only ends a real hang (wall clock); the bound is checked below
            return fn()
    finally:
        elapsed, used = time.monotonic() - started, time.thread_time() - cpu
        SPENT[target] = SPENT.get(target, 0.0) + elapsed
        assert used < seconds, f"{target}: took {used:.2f}s of CPU (bound {seconds:g}s)"
        if memory is not None:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert peak < memory, f"{target}: allocated {peak >> 20} MiB at its peak (bound {memory >> 20} MiB)"


@pytest.fixture(scope="module")
def report_inputs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Prints, at the end of the module, how many inputs each fuzz target ran."""
    before = Counter(INPUTS)
    yield
    ran = INPUTS - before
    lines = [f"fuzz inputs run: {sum(ran.values())} in {request.module.__name__}"]
    lines += [f"  {name}: {n} ({SPENT.get(name, 0.0):.1f}s in its calls)" for name, n in sorted(ran.items())]
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\n" + "\n".join(lines))


# --- values and mutations ---------------------------------------------------------------------------

INJECTION = "1%\nexec_prerun=touch X\n[evil]\nfilename=/dev/loop0\nrw=write\n;%"
NASTY_STRINGS = ("", " ", "\n", "\r\n", "\x00", "..", "../../../x", "x/../../../ESCAPED", "/", "%", "1%", "0%",
                 "100%", "101%", "1P", "1p", "-1", "nan", "inf", "1e308", "99999999999999", "${LAB_DUT}", "[evil]",
                 "a=b", ";", "#", "$(touch Y)", "`id`", "é", "\ud7ff", "x" * 300, "4k\nrw=write", INJECTION,
                 "lab:events", "lab:commands", "agent.h", "lab:reply:x")
NASTY_NUMBERS = (0, -1, 1, 2**31, 2**63, 2**64, 10**20, -(2**63), 1e308, -1e308, 0.5, -0.0, 1e-300)
LEAF = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
        | st.sampled_from(NASTY_STRINGS) | st.sampled_from(NASTY_NUMBERS))
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    LEAF, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``doc`` (dict keys and list indexes), the root excluded."""
    found: list[tuple[Any, ...]] = []
    items: list[tuple[Any, Any]] = []
    if isinstance(doc, dict):
        items = list(doc.items())
    elif isinstance(doc, list):
        items = list(enumerate(doc))
    for key, value in items:
        found.append((*prefix, key))
        found += _paths(value, (*prefix, key))
    return found


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: Any, *, max_mutations: int = 4) -> Any:
    """``base`` (a JSON document) with 1..max_mutations changes: a value replaced by another JSON
    value or a nasty one, a key or item deleted, a key added, a container doubled."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_mutations))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        op = draw(st.sampled_from(("replace", "replace", "replace", "delete", "add", "double")))
        if op == "replace":
            parent[path[-1]] = draw(JSON_VALUES)
        elif op == "delete":
            del parent[path[-1]]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(JSON_VALUES)
        elif op == "add":
            parent.insert(path[-1], draw(JSON_VALUES))
        elif isinstance(parent[path[-1]], list):
            parent[path[-1]] = parent[path[-1]] * draw(st.integers(2, 50))
    return doc


PUNCTUATION = ('"', "{", "}", "[", "]", ",", ":", "\\", "\n", " ", "&a ", "*a", "!!", "- ", "#", "0", "-", "9e999",
               "\\u0000", "null", "true")


@st.composite
def mutated_text(draw: st.DrawFn, base: str, *, max_edits: int = 6) -> str:
    """``base`` with a few character edits: deleted, inserted (JSON and YAML punctuation mostly), or
    a span repeated."""
    text = base
    for _ in range(draw(st.integers(1, max_edits))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(("delete", "insert", "repeat")))
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)):]
        elif op == "insert":
            piece = draw(st.sampled_from(PUNCTUATION) | st.text(max_size=4))
            text = text[:i] + piece + text[i:]
        else:
            j = draw(st.integers(i, min(len(text), i + 40)))
            text = text[:i] + text[i:j] * draw(st.integers(2, 20)) + text[j:]
    return text


# --- job files ----------------------------------------------------------------------------------------

SIZE = r"\d+[kmgtp]?"
OPTION_LINES = [re.compile(p) for p in (
    r"\[global\]", r"", r"ioengine=[a-z0-9_]+", r"direct=[01]", r"time_based=1", r"runtime=[1-9]\d*",
    r"ramp_time=\d+", rf"size=(?:\d{{1,3}}(?:\.\d+)?%|{SIZE})", r"group_reporting=1", r"lat_percentiles=1",
    "percentile_list=" + re.escape(":".join(f"{p:g}" for p in PERCENTILES)),
    r"rw=(?:read|write|randread|randwrite|rw|readwrite|randrw)", rf"bs={SIZE}", r"rwmixread=\d{1,3}",
    r"percentage_random=\d{1,3}", r"iodepth=[1-9]\d*", r"numjobs=[1-9]\d*", r"refill_buffers=1", r"norandommap=1",
    r"randrepeat=0", r"new_group=1",
    # the extended options (labcontract.fioextra), in their canonical spellings
    rf"bssplit={SIZE}/\d{{1,3}}(?::{SIZE}/\d{{1,3}})*",
    r"random_distribution=(?:random|(?:zipf|pareto|normal):[0-9.]+)",
    r"rate_iops=[1-9]\d*(,[1-9]\d*)?", rf"rate={SIZE}", r"buffer_compress_percentage=\d{1,3}",
    r"dedupe_percentage=\d{1,3}",
    rf"offset(?:_increment)?=(?:[0-9.]+%|{SIZE})", r"cpus_allowed=\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*", r"hipri=1",
    r"fixedbufs=1", r"verify=[a-z0-9-]+", r"verify_pattern=(?:0x[0-9a-f]+|\d+)")]
"""Every line render_job emits, sections and filenames aside (those depend on the workload and devices)."""


def as_json(doc: Any) -> str:
    return json.dumps(doc)


__all__ = ["INJECTION", "INPUTS", "JSON_VALUES", "NASTY_STRINGS", "OPTION_LINES", "Hang", "as_json", "bounded",
           "fuzz_settings", "mutated", "mutated_text", "report_inputs"]
