"""The agent's step-kind registry: one module per action of a start message, plus its registration.

A kind (:class:`StepKind`) says, for its action:

- which targets it needs and how they are checked (:meth:`StepKind.targets`: declared DUTs, declared
  network paths, an external workload's declaration), including the safety interlock on the host
  (:meth:`StepKind.interlock`: the operation it performs on which DUTs, and any exception to the rules);
- what it writes into the attempt directory and the argv it launches (:meth:`StepKind.launch`; the runner
  runs the argv under its ``sh`` wrapper in a session of its own);
- which files of the attempt directory go back with the end report (:attr:`StepKind.artifacts`);
- what must be released once its process has ended (:meth:`StepKind.cleanup`: before the end is reported,
  also after an agent restart and after a cancel or timeout kill);
- how it contributes live status (:meth:`StepKind.live`);
- the agent platforms it runs on (:attr:`StepKind.platforms`: ``fio`` on Linux and Windows; ``purge``,
  ``net`` and ``app`` use Linux tools): a start on another is refused (:func:`platform_refusal`).

Kinds register with :func:`register` (``agents.kinds.fio``, ``purge``, ``net`` and ``app`` on import of
this package); :func:`get` resolves an action and refuses one that has no kind. ``command_version`` (in the
spirit of Buildbot's worker commands) is the version of what a kind does on the agent; it is recorded in
the attempt's ``state.json``.
"""

from __future__ import annotations

from agents.kinds.base import (
    Host,
    Interlock,
    Launch,
    LiveFigures,
    LiveSource,
    StepKind,
    Targets,
    actions,
    all_artifacts,
    announced,
    find_dut,
    get,
    interlock_refusal,
    platform_refusal,
    register,
    resolve_duts,
    same_device,
)

__all__ = ["Host", "Interlock", "Launch", "LiveFigures", "LiveSource", "StepKind", "Targets", "actions",
           "all_artifacts", "announced", "find_dut", "get", "interlock_refusal", "platform_refusal", "register",
           "resolve_duts", "same_device"]


def _load() -> None:
    from agents.kinds import app, fio, net, purge

    for module in (fio, purge, net, app):
        register(module.KIND)


_load()
