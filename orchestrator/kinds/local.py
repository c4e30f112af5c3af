"""Steps the controller runs itself through Ansible (orchestrator.runs.provisioning): ``provision``, ``dut_state``
(purge and OP mode of the run's DUTs), ``facts``. Their start message is never sent (it carries the attempt's
identity to the playbook runner); their end is picked up by the controller's watchdog, which stores the
playbook's artifacts and note."""

from __future__ import annotations

from orchestrator.kinds.common import BaseKind
from orchestrator.store.models import Step


class LocalKind(BaseKind):
    names = ("provision", "dut_state", "facts")
    local = True
    agent_kind = None

    def operation(self, step: Step) -> str | None:
        if step.kind == "dut_state":
            return "purge" if step.cell.get("purge", True) else "op_mode"
        return None


KIND = LocalKind()
