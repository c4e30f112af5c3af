"""What a command prints on a terminal, drawn as text elsewhere: the web service draws ``run show`` and ``compare``
for ``labctl --api`` at the client's terminal width and in its colours, so that the output is the same both ways."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Literal

from rich.console import Console

ColorSystem = Literal["standard", "256", "truecolor"]
COLOR_SYSTEMS: tuple[ColorSystem, ...] = ("standard", "256", "truecolor")


def drawn(draw: Callable[[Console], None], width: int, color_system: ColorSystem | None = None) -> str:
    """What ``draw`` prints on a terminal ``width`` columns wide (in colour with ``color_system``; else as into a
    pipe), as text."""
    buf = io.StringIO()
    draw(Console(file=buf, width=width, force_terminal=color_system is not None, legacy_windows=False,
                 color_system=color_system))
    return buf.getvalue()


def terminal_of(console: Console) -> tuple[int, ColorSystem | None]:
    """The width and colour system of the client's own console, as the API asks for them."""
    system = console.color_system
    return console.width, system if system in COLOR_SYSTEMS else None
