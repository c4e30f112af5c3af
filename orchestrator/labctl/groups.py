"""labctl's command groups, each imported and built only when a command line names it (issue 27: ``labctl --help``
and ``--version`` within 0.3 s of CPU, bench/startup.py).

typer turns every command it holds into a click command at each start, reading each one's parameters from its
signature (``inspect.signature``, ``typing.get_type_hints``): for labctl's 95 commands, about half of the CPU of
``labctl --help``; and some groups' modules import much (``hosts``: the SSH fleet, ``broker``: the ACL writer). The
top group (:class:`LazyGroups`) lists a group from its help in :data:`HELP` without importing it; its module is
imported, and its commands built, when it is invoked (or its help asked for).

A group is one line of :data:`HELP` (its help, which its module passes to ``command_group``) and one call of
:func:`add_group` (where its typer application lives). :data:`LOADED` holds what must happen to a group's
application before it is built (reach.guard: the commands that refuse ``--api``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar

import typer
import typer.main
from typer._click import Context, HelpFormatter
from typer._click.utils import make_default_short_help
from typer.core import TyperGroup

HELP: dict[str, str] = {
    "suite": "Check and expand suite files.",
    "run": "Inspect one run.",
    "hosts": "Registered hosts: state, DUTs, quarantine (no subcommand: list them).",
    "broker": "Broker users (Redis ACL) and their password files.",
    "token": "API tokens of the web service (need the broker user web: --broker redis://web@HOST:6379/0, or an "
             "admin's --api token).",
    "regressions": "Regressions of the run history: list them, acknowledge one.",
    "canary": "A short read-only canary per DUT on a schedule, judged against the DUT's own history; a drift flags "
              "(optionally quarantines) the device.",
    "prometheus": "Prometheus integration.",
    "schedule": "Recurring submissions on a cron schedule (a nightly regression, say).",
    "analyze": "Analyse series from elsewhere.",
    "lab": "The embedded one-machine lab with its web service.",
}

# functions run on a group's typer application when it is loaded, before it is built: (application, its path)
LOADED: list[Callable[[typer.Typer, str], None]] = []


class LazyGroups(TyperGroup):
    """A click group that also holds the groups of :attr:`groups` (name -> ``module:attribute`` of a
    ``typer.Typer``), imported and built on first use."""

    groups: ClassVar[dict[str, str]] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in self.groups if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in self.groups:
            self.commands[cmd_name] = _load(cmd_name, self.groups[cmd_name])
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """click's list of commands, a group not loaded yet shown from :data:`HELP` (the same words)."""
        names = [n for n in self.list_commands(ctx) if n not in self.commands or not self.commands[n].hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, self.commands[n].get_short_help_str(limit) if n in self.commands
                 else make_default_short_help(HELP[n], limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def lazy_app(help: str, **options: Any) -> typer.Typer:
    """labctl's top application: its groups are added with :func:`add_group`."""
    from orchestrator.labctl.common import command_group

    return command_group(help, cls=type("LabctlGroups", (LazyGroups,), {"groups": {}}), **options)


def add_group(app: typer.Typer, name: str, target: str) -> None:
    """The group ``name`` of ``app`` (made by :func:`lazy_app`) is the ``typer.Typer`` at ``target``
    (``module:attribute``), imported when first invoked; its help is ``HELP[name]``."""
    if name not in HELP:
        raise KeyError(f"labctl group {name!r} has no line in orchestrator/labctl/groups.py HELP")
    cls = app.info.cls
    assert isinstance(cls, type) and issubclass(cls, LazyGroups), "add_group needs an application of lazy_app"
    cls.groups[name] = target


def _load(name: str, target: str) -> Any:
    module, _, attr = target.partition(":")
    sub: typer.Typer = getattr(importlib.import_module(module), attr)
    for loaded in LOADED:
        loaded(sub, name)
    group = typer.main.get_group(sub)
    group.name = name
    return group
