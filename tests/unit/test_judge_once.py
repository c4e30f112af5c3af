"""A submission is judged in one place (issue 25: labctl's client, labctl submit, the controller and the web API each
had checks of their own): labctl's check, the web API's and the controller's reply give the same problems for the
same submission, because all three call orchestrator.runs.submission.judge. The web names its fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from labcontract.errors import SubmissionError
from labcontract.protocol import Submit
from orchestrator.runs import submission
from orchestrator.runs.client import check_submission
from orchestrator.web.api.control import check_web_submission

PRECOND = """\
suite: pc
phases:
  precondition: {workload: {rw: randwrite, bs: 4k, iodepth: 4}, round: 1, max_rounds: 3}
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1}
"""
PLAIN = """\
suite: plain
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1}
"""

LONG = """\
suite: long
cell_limit: 2
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1000}
  - {name: b, rw: randwrite, bs: 4k, iodepth: 4, runtime: 1000}
"""

# (suite, host, devices, initiators, options): each refused for what the options or the target say
CASES: list[tuple[str, str, tuple[str, ...], tuple[str, ...], dict[str, Any]]] = [
    (PLAIN, "h1", ("dut0",), (), {"max_rounds": 2}),                   # no precondition phase to cap
    (LONG, "h1", ("dut0",), (), {"repeat": 2}),                        # past the suite's cell_limit
    (LONG, "h1", ("dut0",), (), {"scale": 1000.0}),                    # a runtime past the ceiling
    (PLAIN, "h1", ("dut7",), (), {}),                                  # not a declared DUT
    (PLAIN, "nohost", ("dut0",), (), {}),                              # unknown host
    (PLAIN, "h1", ("dut0",), ("h2",), {}),                             # initiators for a suite without network
    (PRECOND, "h1", ("dut0", "dut0"), (), {"repeat": 2}),              # the same device twice
]


def problems_of(call: Any) -> list[str]:
    with pytest.raises(SubmissionError) as e:
        call()
    return [str(p) for p in e.value.problems]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_labctl_the_web_api_and_the_controller_refuse_a_submission_for_the_same_problems(
        env: Any, tmp_path: Path, case: tuple[str, str, tuple[str, ...], tuple[str, ...], dict[str, Any]]) -> None:
    ctl, _disp, _clock, db = env
    text, host, devices, initiators, options = case
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    labctl = problems_of(lambda: check_submission(str(path), host, devices, db, initiators, **options))
    web = problems_of(lambda: check_web_submission(db, None, text, host, devices, initiators, **options))
    reply = ctl.submit(Submit(run_id="r1", suite_source=str(path), suite_text=text, host=host, devices=devices,
                              initiators=initiators, runtime_override=options.get("runtime"),
                              scale=options.get("scale"), repeat=options.get("repeat"),
                              max_rounds=options.get("max_rounds"), reply_to="-"))
    assert labctl, case
    assert not reply.ok and list(reply.errors) == labctl
    renamed = [p.replace("--device:", "devices:").replace("--initiator:", "initiators:")
               .replace("--max-rounds:", "max_rounds:") for p in labctl]
    assert web == renamed


def test_judge_without_the_store_judges_the_suite_only() -> None:
    from labcontract.suite import parse_suite

    suite = parse_suite(PLAIN, "plain.yaml")
    assert submission.judge(None, suite, "anyhost", ("anything",)) == []
    (p,) = submission.judge(None, suite, "h", ("d",), max_rounds=2, keys=submission.API_KEYS)
    assert p.location == "max_rounds" and "no precondition or rounds phase to cap" in p.message
