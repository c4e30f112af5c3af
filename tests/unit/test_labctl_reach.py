"""Every labctl command says how it reaches the lab (orchestrator/labctl/reach.py), and one that cannot go through
``--api`` refuses it with the reason instead of reading the local store (issue 27)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.core
import typer.main

from orchestrator.cmd.labctl import app
from orchestrator.labctl.reach import LAB_FREE, NOT_THROUGH_API, THROUGH_API

ROOT = Path(__file__).resolve().parents[2]


def command_paths() -> set[str]:
    """Every command of labctl as a user types it (``hosts`` and ``regressions`` list with no subcommand)."""
    root = typer.main.get_command(app)
    ctx = root.make_context("labctl", ["--help"], resilient_parsing=True)
    found: set[str] = set()

    def walk(cmd: typer.core.TyperCommand | typer.core.TyperGroup, path: list[str]) -> None:
        if isinstance(cmd, typer.core.TyperGroup):
            if path and cmd.invoke_without_command:
                found.add(" ".join(path))
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name])
        else:
            found.add(" ".join(path))

    walk(root, [])
    return found


def test_every_command_is_in_exactly_one_table() -> None:
    paths = command_paths()
    tables = [set(THROUGH_API), set(LAB_FREE), set(NOT_THROUGH_API)]
    unknown = sorted(p for p in paths if not any(p in t for t in tables))
    assert not unknown, f"commands not in orchestrator/labctl/reach.py (say how each reaches the lab): {unknown}"
    twice = sorted(p for p in paths if sum(p in t for t in tables) > 1)
    assert not twice, twice
    gone = sorted(set().union(*tables) - paths)
    assert not gone, f"reach.py names commands labctl does not have: {gone}"
    assert {"watch", "compare", "regressions", "export", "hosts", "schedule add", "token create"} <= THROUGH_API


@pytest.mark.parametrize("path", sorted(NOT_THROUGH_API))
def test_a_command_that_cannot_go_through_the_api_refuses_it_with_the_reason(path: str, tmp_path: Path) -> None:
    """Refused before it does anything: no store, no broker, no file touched (the lab dir does not exist after)."""
    token = tmp_path / "t.token"
    token.write_text("slab_" + "A" * 43 + "\n")
    os.chmod(token, 0o600)
    lab_dir = tmp_path / "lab"
    args = {"run report": ["r20260101-abcdef"], "import": [str(tmp_path / "export")],
            "import-fio": [str(tmp_path / "out.json"), "--device", "nvme0", "--host", "h1"],
            "prometheus targets": ["--dir", str(tmp_path / "targets")],
            "broker acl": ["--hosts", "h1", "--out", str(tmp_path / "targets" / "acl")]}.get(path, [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAB_")}
    res = subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(lab_dir), "--api",
                          "http://127.0.0.1:9", "--token-file", str(token), *path.split(), *args],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert f"labctl {path}: not through --api: {NOT_THROUGH_API[path]}" in res.stderr, res.stderr
    assert not lab_dir.exists() and not (tmp_path / "targets").exists()
