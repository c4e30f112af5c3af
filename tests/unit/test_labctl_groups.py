"""labctl's command groups are imported when named, and listed the same before (orchestrator/labctl/groups.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import typer.main
from typer._click.utils import make_default_short_help

from orchestrator.cmd.labctl import app
from orchestrator.labctl.groups import HELP, LazyGroups


def test_every_group_is_registered_with_its_help_and_builds_with_it() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, LazyGroups)
    assert set(root.groups) == set(HELP), "a HELP line without its group, or a group without its HELP line"
    ctx = root.make_context("labctl", ["--help"], resilient_parsing=True)
    for name in HELP:
        group = root.get_command(ctx, name)
        assert group is not None and group.name == name
        assert group.help == HELP[name], name        # the module passed its HELP line to command_group
        assert group.get_short_help_str(60) == make_default_short_help(HELP[name], 60)


def test_help_lists_every_group_without_importing_one() -> None:
    code = ("import sys, json, contextlib, io\n"
            "from orchestrator.cmd.labctl import main\n"
            "sys.argv = ['labctl', '--help']\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try:\n"
            "        main()\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(json.dumps({'help': buf.getvalue(), 'modules': sorted(sys.modules)}))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "COLUMNS": "100"})
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    group_modules = {"orchestrator.labctl.hosts", "orchestrator.labctl.fleet", "orchestrator.labctl.broker",
                     "orchestrator.labctl.tokens", "orchestrator.labctl.canary", "orchestrator.labctl.schedules",
                     "orchestrator.labctl.suites", "orchestrator.labctl.analyze", "orchestrator.cmd.labcmd"}
    assert not group_modules & set(seen["modules"]), sorted(group_modules & set(seen["modules"]))
    listed = {line.split()[0] for line in seen["help"].split("Commands:", 1)[1].splitlines() if line.strip()}
    assert set(HELP) <= listed and {"submit", "compare", "serve"} <= listed, listed


def test_a_group_named_on_the_command_line_runs(tmp_path: object) -> None:
    res = subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "suite", "list"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "enterprise-synthetic" in res.stdout, res.stdout + res.stderr
