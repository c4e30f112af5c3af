"""What a controller-side step kind is (:class:`StepKind`) and what it may use of the controller
(:class:`KindContext`): the kind modules import this, never the package that loads them
(:mod:`orchestrator.kinds`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from labcontract.protocol import StartStep
    from orchestrator.artifacts import ArtifactStore
    from orchestrator.config import ControllerTuning
    from orchestrator.store.models import Attempt, Run, Step


class KindContext(Protocol):
    """What a kind may use of the controller."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def tuning(self) -> ControllerTuning: ...

    @property
    def artifacts(self) -> ArtifactStore: ...


class StepKind(Protocol):
    @property
    def names(self) -> tuple[str, ...]:
        """The step kinds (``Step.kind``) it handles."""

    @property
    def local(self) -> bool:
        """The controller runs it itself (a playbook), not an agent."""

    @property
    def agent_kind(self) -> tuple[str, int] | None:
        """The agent's step kind its start messages name (their ``action``) and the least version of it they need
        (``agents.kinds.StepKind.command_version``, announced in the host's facts); None for a local kind."""

    @property
    def lab_fs(self) -> bool:
        """A filesystem signature on its devices may be the lab's own: the agent judges it, not the controller."""

    @property
    def retryable(self) -> bool:
        """A failed attempt that was no fault of its step may be retried (suite key ``retry``): the step does the
        same whole job again on the run's own devices, so running it twice leaves what running it once does."""

    @property
    def repurge_before_retry(self) -> bool:
        """With the suite's ``retry.repurge``, a purge of the run's devices comes before a retry of the step."""

    def operation(self, step: Step) -> str | None:
        """What the step does to its devices, for the interlock: purge, op_mode, write, or None."""

    def expected_seconds(self, ctx: KindContext, step: Step) -> int:
        """How long the step may take; the attempt's timeout adds the controller's margin."""

    def start_message(self, ctx: KindContext, run: Run, step: Step, att: Attempt) -> StartStep:
        """The start of ``att`` (also re-sent as is by the watchdog)."""

    def cohort(self, run: Run, step: Step) -> list[Step]:
        """The steps that start in the same pass as ``step`` (itself included, in start order)."""

    def store(self, ctx: KindContext, s: Session, att: Attempt, stored: Mapping[str, bytes]) -> None:
        """Store a successful end (``stored``: the attempt's artifacts by name); raise StepOutputError if unusable."""

    def after_end(self, ctx: KindContext, s: Session, att: Attempt) -> None:
        """After any end of ``att`` (ended, failed, cancelled; its step may be retried)."""
