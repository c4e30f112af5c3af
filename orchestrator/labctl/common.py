"""What every ``labctl`` command module shares: the console, the lab config chosen by the global
options, clean failure, and store sessions."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from labcontract.errors import LabError
from orchestrator.config import LabConfig
from orchestrator.labfile import LabFile


class _Console:
    """rich's Console, made when a command first prints: ``labctl --help`` and ``--version`` never import rich
    (issue 27: start-up within 0.3 s of CPU, bench/startup.py)."""

    _console: Any = None

    @staticmethod
    def real() -> Any:
        """The Console itself (made now if it was not yet)."""
        if _Console._console is None:
            from rich.console import Console

            _Console._console = Console(width=None if sys.stdout.isatty() else 200)
        return _Console._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)

    def __enter__(self) -> Any:                 # (special methods are looked up on the type, not through getattr)
        return self.real().__enter__()

    def __exit__(self, *exc: object) -> Any:
        return self.real().__exit__(*exc)


out: Any = _Console()
F = TypeVar("F", bound=Callable[..., Any])


def command_group(help: str, **options: Any) -> typer.Typer:
    """A labctl command group. Help is click's plain text, not rich's panels: rendering them imported rich and took
    a third of ``labctl --help``'s CPU."""
    return typer.Typer(help=help, rich_markup_mode=None, **options)

SUITE_HELP = ("Suite YAML file, or the name of a built-in suite (labctl suite list). A bare name such as demo "
              "is the built-in suite even when a file or folder of that name is here: write ./demo for the file.")


def fail(message: str) -> None:
    """Errors go to stderr unwrapped: first line the reason, then one line per problem."""
    print(f"error: {message}", file=sys.stderr)


class State:
    config: LabConfig = LabConfig()
    lab: LabFile | None = None        # the lab file found (orchestrator.labfile), if any


def fails_cleanly(fn: F) -> F:
    """Any LabError ends the command with exit 1 and its reason (every problem, for input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LabError as e:
            fail(str(e))
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def checked_reply(reply: Any) -> Any:
    """The controller's reply to a command; LabError when it did not answer or refused (its reasons)."""
    if reply is None:
        raise LabError("the controller did not answer; is it running?")
    if not reply.ok:
        raise LabError("; ".join(reply.errors))
    return reply


def reply_or_fail(reply: Any, source: str) -> None:
    """:func:`checked_reply`, a refusal raised as a SubmissionError naming ``source`` with every reason."""
    from labcontract.errors import Problem, SubmissionError

    if reply is not None and not reply.ok:
        raise SubmissionError(source, [Problem("", e) for e in reply.errors])
    checked_reply(reply)


def sessions_or_fail(required: bool = True) -> Any:
    from orchestrator.store.db import make_engine, require_schema, sessions

    engine = make_engine(State.config.db_url)
    if required:
        require_schema(engine)
    return sessions(engine)


