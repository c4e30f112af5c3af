"""The facts the docs state that code can check: the run and step states and the step kinds the README names, the
chart kinds docs/reports.md's table lists, the built-in suites docs/suites.md's table and the README list, the
protocol version docs/deployment.md states, the export formats docs/metrics.md names, the artifacts the agent sends
for drive health and drive temperature. A doc that falls behind the code fails here, naming the doc and what it
lacks."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator import kinds
from orchestrator.htmlreport.charts import chart_kinds
from orchestrator.states import RunState, StepState

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _words(text: str) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_]+\b", text))


def _paragraph(text: str, start: str) -> str:
    """The list item of ``text`` that starts with ``start`` (up to the next item or blank line)."""
    i = text.index(start)
    rest = text[i:]
    end = re.search(r"\n(- |\n)", rest)
    return rest[: end.start()] if end else rest


def test_the_readme_names_every_run_and_step_state() -> None:
    runs = _words(_paragraph(README, "- Run states:"))
    steps = _words(_paragraph(README, "- Step states:"))
    assert {s.value for s in RunState} - runs == set(), "README.md: Run states lacks these"
    assert {s.value for s in StepState} - steps == set(), "README.md: Step states lacks these"


def test_the_readme_names_every_step_kind() -> None:
    tree = README[README.index("├─ steps"): README.index("└─ attempts")]
    assert set(kinds.names()) - _words(tree) == set(), "README.md: the steps line of the data model lacks these"


def test_the_reports_doc_lists_every_chart_kind() -> None:
    table = set(re.findall(r"^\| `([a-z]+)` \|", (ROOT / "docs" / "reports.md").read_text(), re.M))
    assert {k.name for k in chart_kinds()} - table == set(), "docs/reports.md: the chart table lacks these"


def test_the_drive_health_artifact_is_documented_where_artifacts_are_listed() -> None:
    from labcontract.drivehealth import ARTIFACT

    assert ARTIFACT in README and ARTIFACT in (ROOT / "docs" / "deployment.md").read_text()


def test_the_registration_functions_architecture_md_names_exist() -> None:
    import importlib

    text = (ROOT / "docs" / "architecture.md").read_text()
    named = re.findall(r"`((?:agents|orchestrator)(?:\.[a-z_]+)+)`", text)
    checked = 0
    for dotted in named:
        module, _, attr = dotted.rpartition(".")
        if not attr.startswith("_"):
            continue                              # the private registration hooks: the names a newcomer edits
        mod = importlib.import_module(module)
        assert hasattr(mod, attr), f"docs/architecture.md names {dotted}, which does not exist"
        checked += 1
    assert checked >= 2


def test_the_errors_module_draws_every_error_under_its_parent() -> None:
    """labcontract/errors.py draws the hierarchy at its top: every LabError subclass it defines is drawn, under the
    class it derives from, and nothing drawn is missing from the code."""
    import inspect

    from labcontract import errors

    drawn: dict[str, str] = {}
    parents: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^[\s│]*(?:[├└]── )?([A-Z][A-Za-z]+)\s{2,}", line)
        if not m or not ("── " in line or m.group(1) == "LabError"):
            continue
        name = m.group(1)
        depth = line.index(name)
        while parents and parents[-1][0] >= depth:
            parents.pop()
        drawn[name] = parents[-1][1] if parents else ""
        parents.append((depth, name))
    defined = {name: cls.__bases__[0].__name__ for name, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, errors.LabError) and cls.__module__ == errors.__name__}
    defined["LabError"] = ""
    assert drawn == defined, "labcontract/errors.py: the drawn hierarchy differs from the classes"


def test_the_suites_doc_and_the_readme_list_every_built_in_suite() -> None:
    from labcontract.suite import builtin_suites

    text = (ROOT / "docs" / "suites.md").read_text()
    table = text[text.index("## Built-in suites"):text.index("## Importing fio job files")]
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.M))
    assert set(builtin_suites()) - listed == set(), "docs/suites.md: the built-in suites table lacks these"
    assert {n for n in builtin_suites() if f"`{n}`" not in README} == set(), "README.md: the built-in suites lack these"


def test_the_protocol_version_deployment_md_states_is_the_codes() -> None:
    from labcontract.protocol import PROTOCOL_VERSION

    text = (ROOT / "docs" / "deployment.md").read_text()
    (stated,) = re.findall(r"PROTOCOL_VERSION`, currently (\d+)\)", text)
    assert int(stated) == PROTOCOL_VERSION, "docs/deployment.md states another protocol version"


def test_the_metrics_doc_names_every_export_format() -> None:
    from orchestrator.export import FORMATS

    text = (ROOT / "docs" / "metrics.md").read_text()
    (line,) = re.findall(r"`labctl export RUN \[RUN\.\.\.\] --format ([a-z|]+)", text)
    assert set(FORMATS) - set(line.split("|")) == set(), "docs/metrics.md: labctl export's --format lacks these"


def test_the_drive_temperature_artifact_is_documented() -> None:
    from labcontract.drivetemp import ARTIFACT

    assert ARTIFACT in (ROOT / "docs" / "power.md").read_text()
