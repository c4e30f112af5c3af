"""The ``--notify-*`` options of the commands that start a lab on this machine (``demo``, ``lab up``): the sinks its
controller delivers the end of each run to, kept in its lab file's notify table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.labfile import Notify

# the sinks a lab's controller delivers the end of each run to, kept in its lab file's [notify] (lab up, demo)
NotifyWebhooks = Annotated[list[str] | None, typer.Option(
    help="POST a JSON body here when a run ends (repeat); kept in the lab file's notify table.")]
NotifyFiles = Annotated[list[Path] | None, typer.Option(
    help="Append a JSON line to this file when a run ends (repeat); kept in the lab file's notify table.")]
NotifyChats = Annotated[list[str] | None, typer.Option(
    help="POST {\"text\": a line a person reads} to a chat's incoming webhook when a run ends (repeat); kept in "
         "the lab file's notify table.")]


def given_sinks(webhooks: list[str] | None, files: list[Path] | None, chats: list[str] | None) -> Notify:
    return Notify(tuple(webhooks or ()), tuple(p.absolute() for p in files or ()), tuple(chats or ()))
