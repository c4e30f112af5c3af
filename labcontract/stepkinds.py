"""The names of the step kinds, as plans, start messages, live status and lab exports spell them: one definition
(a new kind is added here once; ``tests/unit/test_registry.py`` checks these against the controller's registry).

``StepKindName``: every kind a plan holds. ``AgentStepKindName``: those an agent runs (the rest, provisioning,
device state and facts, the controller runs itself through Ansible): a live status's phase. ``AgentActionName``: the
agent-side kinds a start message names (``measure`` and ``precondition`` are both the agent's ``fio``)."""

from __future__ import annotations

from typing import Literal

StepKindName = Literal["purge", "precondition", "measure", "provision", "dut_state", "facts", "net", "app"]
AgentStepKindName = Literal["purge", "precondition", "measure", "net", "app"]
# what a start message asks an agent to do (``StartStep.action``): the agent's registered kinds
AgentActionName = Literal["fio", "purge", "net", "app"]
