"""The one registry idiom (labcontract.registry): what every registry of the project is, checked on each."""

from __future__ import annotations

import pytest

from labcontract.errors import StepError
from labcontract.registry import Registry


def test_a_name_is_registered_once_and_an_unknown_one_is_refused_with_the_known_ones() -> None:
    reg: Registry[object] = Registry("widget")
    a, b = object(), object()
    assert reg.add("a", a) is a and reg.add("a", a) is a          # the same item again: a no-op (a re-import)
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        reg.add("a", b)
    with pytest.raises(ValueError, match="needs a name"):
        reg.add("", b)
    reg.add("c", b)
    assert list(reg) == ["a", "c"] and reg["c"] is b and "a" in reg and len(reg) == 2 and reg.names() == ["a", "c"]
    with pytest.raises(LookupError, match=r"no widget 'x' \(known: a, c\)"):
        reg.get_or_fail("x")
    custom: Registry[object] = Registry("kind", lambda name, known: StepError(f"{name}: not one of {known}"))
    with pytest.raises(StepError, match=r"x: not one of \[\]"):
        custom.get_or_fail("x")


def test_every_registry_of_the_project_is_one() -> None:
    from agents.kinds import base as agent_kinds
    from orchestrator import compare, kinds
    from orchestrator.cellmetrics import RESULT_KINDS
    from orchestrator.export import FORMATS
    from orchestrator.htmlreport.charts import chart_kinds
    from orchestrator.htmlreport.model import CHART_KINDS
    from orchestrator.web import api, pages

    for reg in (kinds._KINDS, agent_kinds._REGISTRY, FORMATS, CHART_KINDS, compare.FORMATS, api.ROUTERS,
                pages.ROUTERS, RESULT_KINDS):
        assert isinstance(reg, Registry) and len(reg) > 0, reg
    assert {k.name for k in chart_kinds()} == set(CHART_KINDS) and {"pts", "thermal", "wsat"} <= set(CHART_KINDS)
    assert list(RESULT_KINDS) == ["net", "app", "storage"]        # asked in this order: storage holds any other run
    from orchestrator.provenance import DESCRIBERS
    from orchestrator.report import VIEWS

    assert isinstance(VIEWS, Registry) and set(VIEWS) == set(RESULT_KINDS)    # every result kind has its view
    assert isinstance(DESCRIBERS, Registry) and set(DESCRIBERS) == set(RESULT_KINDS)    # and its provenance
    assert set(compare.FORMATS) == {"json", "csv"} and {"csv", "json"} <= set(FORMATS)
    assert api.ROUTERS["live"] == "orchestrator.web.live" and pages.ROUTERS["runs"] == "orchestrator.web.pages.runs"
    with pytest.raises(LookupError, match="no step kind 'nope'"):
        kinds.get("nope")
    with pytest.raises(StepError, match="has no step kind on this agent"):
        agent_kinds.get("nope")


def test_the_step_kind_names_are_defined_once_and_match_the_registries() -> None:
    """labcontract.stepkinds: every kind the controller registers is a name plans and messages may carry; those an
    agent runs are the live status's phases and each has the agent's kind registered."""
    from typing import get_args

    from agents.kinds import base as agent_kinds
    from labcontract.stepkinds import AgentActionName, AgentStepKindName, StepKindName
    from orchestrator import kinds

    assert set(kinds.names()) == set(get_args(StepKindName))
    agent_run = {n for n, (action, _v) in kinds.agent_kinds().items()}
    assert agent_run == set(get_args(AgentStepKindName))
    assert {action for action, _v in kinds.agent_kinds().values()} <= set(agent_kinds.actions())
    assert set(get_args(AgentActionName)) == set(agent_kinds.actions())       # what a start message may name


def test_the_exporters_idle_phases_are_the_kinds_own() -> None:
    """lab_step_phase's series that exist while nothing runs come from the agent kinds (exported_phases), in the order
    of the step kinds, not from a list in the exporter."""
    from agents.exporter import PHASES
    from agents.kinds import base as agent_kinds

    assert PHASES == ("purge", "precondition", "measure") == agent_kinds.exported_phases()
    assert agent_kinds.get("fio").exported_phases == ("precondition", "measure")
    assert agent_kinds.get("net").exported_phases == () and agent_kinds.get("app").exported_phases == ()
