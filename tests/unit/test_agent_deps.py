"""The slim agent install: the project's base dependencies are exactly what the agent needs.

- In a fresh interpreter where every module of the controller-only distributions (the ``controller`` extra
  less what the base needs: SQLAlchemy, alembic, psycopg, Ansible, fabric, matplotlib, typer, rich,
  croniter...) and ``orchestrator`` itself raise ImportError, every module of ``agents/`` imports and
  ``storagelab-agent`` builds its argument parser and parses a lab host's command line.
- The third-party modules that ``agents/`` and the ``labcontract`` modules it reaches import (at the top or
  inside a function) come from exactly the distributions of ``[project] dependencies``: a new import in
  the agent needs its dependency declared, a dependency the agent stopped using leaves the base.
- Everything ``orchestrator/`` imports is installed by the base plus the ``controller`` extra, and
  ``labctl`` / ``storagelab-agent`` are the entry points.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("agents", "labcontract", "orchestrator", "dashboards", "tests")
# blocked even when their distribution is not installed here (the list the issue names)
CONTROLLER_MODULES = ("sqlalchemy", "alembic", "psycopg", "psycopg_binary", "ansible", "ansible_runner", "fabric",
                      "invoke", "paramiko", "matplotlib", "typer", "rich", "croniter", "orchestrator")


def project() -> dict[str, object]:
    data: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return data


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def base_requirements() -> list[str]:
    deps = project()["dependencies"]
    assert isinstance(deps, list)
    return [str(d) for d in deps]


def extra_requirements(extra: str) -> list[str]:
    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    return [str(d) for d in extras[extra]]


def closure(reqs: list[str]) -> set[str]:
    """The normalized names of the distributions ``reqs`` install (as installed here: their metadata)."""
    todo, seen = [Requirement(r) for r in reqs], set()
    while todo:
        req = todo.pop()
        if norm(req.name) == "storagelab":       # a self-reference ([dev] -> [controller]): its own lists
            todo.extend(Requirement(r) for e in req.extras for r in extra_requirements(e))
            continue
        key = (norm(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            subs = requires(req.name) or []
        except PackageNotFoundError:
            continue
        for s in subs:
            sub = Requirement(s)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                todo.append(sub)
    return {name for name, _ in seen}


def module_file(name: str) -> Path | None:
    p = ROOT.joinpath(*name.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").is_file() else None


def imported_names(path: Path, modname: str) -> set[str]:
    """Every module ``path`` imports, at its top or in a function (``from a import b``: a and a.b)."""
    package = modname if path.name == "__init__.py" else modname.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            out |= {mod, *(f"{mod}.{a.name}" for a in node.names)}
    return out


def third_party_imports(package: str) -> tuple[dict[str, set[str]], set[str]]:
    """Third-party top-level module -> the first-party modules importing it, over the first-party import
    closure of every module of ``package``; and the first-party modules of that closure."""
    todo = [".".join(p.relative_to(ROOT).with_suffix("").parts[: -1 if p.name == "__init__.py" else None])
            for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts]
    seen: set[str] = set()
    third: dict[str, set[str]] = {}
    while todo:
        mod = todo.pop()
        path = module_file(mod)
        if mod in seen or path is None:
            continue
        seen.add(mod)
        for name in imported_names(path, mod):
            top = name.split(".")[0]
            if top in FIRST_PARTY:
                todo.append(name)
            elif top and top not in sys.stdlib_module_names:
                third.setdefault(top, set()).add(mod)
    return third, seen


def distributions_of(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    by_module = packages_distributions()
    missing = {m: sorted(users) for m, users in modules.items() if m not in by_module}
    assert not missing, f"imported but installed by no distribution here: {missing}"
    return {norm(d): modules[m] for m in modules for d in by_module[m]}


def test_the_base_dependencies_are_exactly_the_agents_imports() -> None:
    third, reached = third_party_imports("agents")
    assert not [m for m in reached if m.split(".")[0] == "orchestrator"], "agents/ must not import orchestrator"
    used = distributions_of(third)
    declared = {norm(Requirement(r).name) for r in base_requirements()}
    assert set(used) == declared, (
        f"pyproject [project] dependencies {sorted(declared)} != what agents/ imports {sorted(used)} "
        f"(by whom: {json.dumps({d: sorted(u) for d, u in used.items()})}); declare a new import of the agent "
        "in the base, move what only the controller uses to the controller extra")


def test_the_controller_extra_and_base_install_everything_orchestrator_imports() -> None:
    third, _ = third_party_imports("orchestrator")
    installed = closure(base_requirements() + extra_requirements("controller"))
    used = distributions_of(third)
    assert not set(used) - installed, f"orchestrator/ imports what neither the base nor [controller] installs: " \
                                      f"{ {d: sorted(u) for d, u in used.items() if d not in installed} }"


def test_dev_extra_includes_the_controller_and_entry_points() -> None:
    assert "storagelab[controller]" in extra_requirements("dev")
    assert not {norm(Requirement(r).name) for r in base_requirements()} & \
        {norm(Requirement(r).name) for r in extra_requirements("controller")}
    scripts = project()["scripts"]
    assert isinstance(scripts, dict)
    assert scripts == {"labctl": "orchestrator.cmd.labctl:main", "storagelab-agent": "agents.cmd.cli:main"}


def controller_only_modules() -> list[str]:
    """Top-level modules of the distributions only the controller extra installs, and the named ones."""
    only = closure(extra_requirements("controller")) - closure(base_requirements())
    mods = {m for m, dists in packages_distributions().items() if {norm(d) for d in dists} & only}
    return sorted(mods | set(CONTROLLER_MODULES))


AGENT_IMPORT = textwrap.dedent("""
    import importlib, importlib.abc, json, pkgutil, sys

    BLOCKED = set(json.loads(sys.argv[1]))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name}: a controller-only module (the agent's install has none)")
            return None

    sys.meta_path.insert(0, Block())
    import agents
    names = sorted(m.name for m in pkgutil.walk_packages(agents.__path__, "agents."))
    for name in names:
        importlib.import_module(name)
    from celery import Celery                      # agents.daemon.run_agent's, imported when it runs
    from labcontract.transport import celery_settings
    from agents.cmd.cli import build_parser
    ns = build_parser().parse_args(["--host", "h1", "--state-dir", "/tmp/x", "--dut", "d0=/dev/loop9",
                                    "--metrics-port", "9464", "--net-path", "a=eth1@10.0.0.2", "--wipe-ok", "d0"])
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps({"modules": names, "host": ns.host, "dut": ns.dut, "leaked": leaked}))
""")


def test_the_agent_imports_without_any_controller_dependency() -> None:
    blocked = controller_only_modules()
    assert {"sqlalchemy", "typer", "ansible", "matplotlib", "orchestrator"} <= set(blocked)
    res = subprocess.run([sys.executable, "-c", AGENT_IMPORT, json.dumps(blocked)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["leaked"] == []
    assert {"agents.cmd.agent", "agents.cmd.cli", "agents.daemon", "agents.netstep"} <= set(out["modules"])
    if module_file("agents.appstep") is not None:
        assert "agents.appstep" in out["modules"]
    assert out["host"] == "h1" and out["dut"] == ["d0=/dev/loop9"]


def test_storagelab_agent_help_needs_nothing_of_the_controller() -> None:
    blocker = AGENT_IMPORT.split("import agents\n")[0]
    res = subprocess.run([sys.executable, "-c", blocker + "from agents.cmd.cli import main\nmain(['--help'])\n",
                          json.dumps(controller_only_modules())], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("usage: storagelab-agent") and "--broker-password-file" in res.stdout
