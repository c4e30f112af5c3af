"""The agent starts where the Unix-only modules of the standard library do not exist (Windows): its entry,
daemon, runner, every registered step kind and the Windows platform import without ``pwd``, ``grp``,
``fcntl``, ``termios``, ``resource``, ``pty``, ``tty`` or ``syslog``. What needs them (application steps'
database servers, for one) imports them where it runs, never at the agent's start (docs/windows.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIX_ONLY = ("pwd", "grp", "fcntl", "termios", "resource", "pty", "tty", "syslog", "crypt", "spwd")
AGENT_MODULES = ("agents.cmd.agent", "agents.cmd.cli", "agents.daemon", "agents.runner", "agents.kinds",
                 "agents.exporter", "agents.health", "agents.platform.windows", "agents.platform.wrap")

PROBE = """
import importlib, sys
for name in {unix!r}:
    sys.modules[name] = None          # 'import pwd' now fails as it does on Windows
for mod in {mods!r}:
    importlib.import_module(mod)
import agents.kinds
print(" ".join(agents.kinds.actions()))
"""


def test_the_agent_and_every_step_kind_import_without_unix_only_modules() -> None:
    res = subprocess.run([sys.executable, "-c", PROBE.format(unix=UNIX_ONLY, mods=AGENT_MODULES)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert set(res.stdout.split()) >= {"fio", "purge", "net", "app"}, res.stdout


def test_the_probe_does_fail_on_a_module_that_imports_one() -> None:
    """The probe can fail: a module importing pwd at its top is caught."""
    res = subprocess.run([sys.executable, "-c", PROBE.format(unix=UNIX_ONLY, mods=("agents.apps.postgres",))],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "pwd" in res.stderr, res.stderr[-2000:]
