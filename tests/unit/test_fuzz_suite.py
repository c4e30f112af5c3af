"""Fuzz (hypothesis, deterministic) of the suite loader, labcontract.suite.parse_suite: random YAML-ish
text, random YAML documents shaped like suites, and mutations of every built-in suite. Whatever the
text, only a SuiteError escapes, each call returns within 2 s and allocates less than 200 MB at its
peak (tracemalloc), and every suite that parses renders job files holding only render_job's options."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from labcontract.errors import SuiteError
from labcontract.fiojob import render_job
from labcontract.suite import SWEEPABLE, Suite, builtin_suites, parse_suite
from tests.fuzzing import (
    INJECTION,
    JSON_VALUES,
    MEMORY_BOUND,
    OPTION_LINES,
    bounded,
    fuzz_settings,
    mutated,
    mutated_text,
    report_inputs,
)

pytestmark = pytest.mark.usefixtures("report_inputs")
__all__ = ["report_inputs"]

BUILTIN = {name: path.read_text() for name, path in sorted(builtin_suites().items())}
BUILTIN_DOCS = [yaml.safe_load(text) for text in BUILTIN.values()]
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))
MILLION_CELLS = ("suite: big\ncell_limit: 1000000000\nprofiles:\n  - name: p\n    rw: randread\n    bs: 4k\n"
                 "    sweep:\n      iodepth: [" + ", ".join(map(str, range(1, 101))) + "]\n"
                 "      numjobs: [" + ", ".join(map(str, range(1, 101))) + "]\n"
                 "      runtime: [" + ", ".join(f"{i}s" for i in range(1, 101)) + "]\n")


def assert_clean_jobs(suite: Suite) -> None:
    for w in suite.workloads[:20]:
        for devices in (["/dev/disk/by-id/lab-dut0"], ["/dev/disk/by-id/lab-dut0", "/dev/disk/by-id/lab-dut1"]):
            for line in render_job(w, devices).splitlines():
                assert line.startswith(("[", "filename=/dev/disk/by-id/lab-dut")) or any(
                    p.fullmatch(line) for p in OPTION_LINES), f"{w.name}: job line {line!r}"


def suite_survives(text: str) -> None:
    def run() -> Suite | None:
        try:
            return parse_suite(text, "fuzz.yaml")
        except SuiteError:
            return None
    suite = bounded("parse_suite", run, memory=MEMORY_BOUND)
    if suite is not None:
        assert_clean_jobs(suite)


YAML_TOKENS = [*"abcdefgkmps019%.:-_ ,'\"[]{}&*!|>#\n\t?@`",
               "suite: ", "profiles:\n", "  - ", "name: ", "bs: ", "rw: ", "sweep: ", "ladder: ", "&a ", "*a",
               "!!python/object ", "<<: ", "---\n", "cell_limit: ", "op_modes: ", "network:\n", "4k", "randrw"]
YAMLISH = st.lists(st.sampled_from(YAML_TOKENS), max_size=80).map("".join)


@fuzz_settings(max_examples=300)
@given(YAMLISH)
@example(LAUGHS)
@example(MILLION_CELLS)
@example("[" * 5000 + "]" * 5000)
@example("a:\n" + "".join(" " * i + "- \n" for i in range(1, 200)))
@example("suite: s\nprofiles:\n  - {name: x, rw: read, bs: 4k}\n" + "#" * (300 * 1024))
@example("!!python/object/apply:os.system ['touch /tmp/fuzzed']")
@example("suite: s\ncell_limit: 99999999999999999999\nprofiles:\n"
         "  - {name: x, rw: read, bs: 4k, runtime: 99999999999999}\n")
@example("suite: s\nprofiles:\n  - {name: x, rw: read, bs: 1P, footprint: 1P}\n")
def test_yamlish_text_is_a_suite_or_a_suite_error(text: str) -> None:
    suite_survives(text)


PROFILE = st.fixed_dictionaries(
    {"name": st.sampled_from(["p", "4k-random", "a]\n[evil", "x" * 70]) | st.text(max_size=10)},
    optional={**{k: JSON_VALUES for k in SWEEPABLE},
              "sweep": st.dictionaries(st.sampled_from(SWEEPABLE), st.lists(JSON_VALUES, max_size=6), max_size=3),
              "ladder": st.dictionaries(st.sampled_from(["numjobs", "iodepth"]), st.lists(JSON_VALUES, max_size=6),
                                        max_size=2)})
SUITE_DOC = st.fixed_dictionaries(
    {"suite": st.sampled_from(["s", "", INJECTION]) | JSON_VALUES, "profiles": st.lists(PROFILE, max_size=4)},
    optional={"defaults": st.dictionaries(st.sampled_from(SWEEPABLE), JSON_VALUES, max_size=4),
              "op_modes": st.lists(st.sampled_from(["stock", "hp:20", "hp:99", "x"]) | JSON_VALUES, max_size=3),
              "cell_limit": JSON_VALUES, "phases": JSON_VALUES, "retry": JSON_VALUES, "network": JSON_VALUES,
              "devices": JSON_VALUES})


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


@fuzz_settings(max_examples=350)
@given(SUITE_DOC | JSON_VALUES)
def test_suite_shaped_documents_are_a_suite_or_a_suite_error(doc: Any) -> None:
    suite_survives(dump(doc))


@fuzz_settings(max_examples=400)
@given(st.sampled_from(BUILTIN_DOCS).flatmap(mutated))
def test_mutated_builtin_suites_are_a_suite_or_a_suite_error(doc: Any) -> None:
    suite_survives(dump(doc))


@fuzz_settings(max_examples=250)
@given(st.sampled_from(list(BUILTIN.values())).flatmap(mutated_text))
def test_mutated_builtin_suite_text_is_a_suite_or_a_suite_error(text: str) -> None:
    suite_survives(text)


def test_the_builtin_suites_parse() -> None:
    for name, text in BUILTIN.items():
        suite = parse_suite(text, name)
        assert suite.cells or suite.app is not None, name      # an application suite has its workload, no cells
