"""The import graph of the house has no circles (issue 25): every ``import`` of every module of the rooms, at the
top, inside a function (a lazy import hides a circle, it does not untie it) or under ``TYPE_CHECKING``, read with
:mod:`ast` and resolved to the module file it names. A circle is a strongly connected set of more than one module.

The circles still known are listed in :data:`KNOWN` with what ties them; the test fails on any other circle (a new
one, or a known one grown), and on a known one that is gone (take it off the list: the list only shrinks). Untied so
far: the web app and its pages (the CSP, now ``orchestrator.web.headers``), the report model and its chart kinds
(``chart_kinds`` lives with the kinds), the report benchmark's disk and network data (``bench/reportbase.py``), the
export formats and their loader (``orchestrator/export/base.py``), the controller's step kinds and theirs
(``orchestrator/kinds/base.py``), the controller's intake and the controller (the intake types what it uses
of it: ``orchestrator.controller.intake.Applier``), the agent's platforms and their picker
(``agents/platform/base.py``), the read model and its printing (a metric and an entry in
``orchestrator/cellbase.py``; compare's terminal table only in ``orchestrator/comparetable.py``; network
comparisons' dead printer gone), the suite and its application part (the retry policy, the OP modes and the
problem wording in ``labcontract/suitebase.py``; the suite imports the application part once, at the top), the
agent's step kinds, its runner and its live reader (the attempt record in ``agents/attempt.py``, a kind's protocol
in ``agents/kinds/base.py``, the lab's filesystem markers in ``agents/labfs.py``, the live reader typed by the
kinds as ``LiveSource``). None is left."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("agents", "labcontract", "orchestrator", "bench", "dashboards")

# each a circle still to untie (issue 25), as the set of its modules
KNOWN: tuple[frozenset[str], ...] = ()


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of the house that the module ``name`` imports (anywhere in its body)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import mod` names the module mod; `from mod import name` names mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:          # `import a.b.c` of a module a.b.c, else its package
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def house_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def test_no_circle_but_the_known_ones_and_those_still_there() -> None:
    found = circles(house_graph())
    new = [sorted(c) for c in found if c not in KNOWN]
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert new == [], f"import circles (untie them; a lazy import does not): {new}"
    assert gone == [], f"these circles are untied: take them off KNOWN: {gone}"


def test_a_planted_wrong_way_import_is_a_circle() -> None:
    graph = house_graph()
    assert "orchestrator.htmlreport.charts" in graph["orchestrator.htmlreport"]
    graph["orchestrator.htmlreport.model"].add("orchestrator.htmlreport.charts")   # the model loading its kinds
    planted = [c for c in circles(graph) if "orchestrator.htmlreport.model" in c]
    assert planted and "orchestrator.htmlreport.charts" in planted[0]


def test_labctl_starts_without_the_store_the_broker_or_the_message_models() -> None:
    """``labctl --version`` and ``--help`` load the command modules only: the store (SQLAlchemy), the broker's client
    (redis), the message models (pydantic) and the read model (numpy) are imported by the command that uses them
    (issue 25: ``labctl --version`` took 1.3 s of CPU importing the controller; issue 27: rich and http.client took
    a third of what was left, bench/startup.py). Checked on what is imported, in a fresh interpreter, never on a
    time."""
    import subprocess
    import sys

    heavy = ("sqlalchemy", "redis", "pydantic", "numpy", "celery", "labcontract.protocol", "labcontract.suite",
             "orchestrator.canary", "orchestrator.controller", "orchestrator.store.models",
             "rich", "http.client", "ssl")       # the console, tables and help panels; the API's connection
    code = ("import sys; from orchestrator.cmd.labctl import app; "
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert res.stdout.strip() == "", f"imported at labctl's start: {res.stdout.strip()}"


def room_of(module: str, known: dict[str, Path]) -> str:
    """The room a module lives in: a top-level folder, a subpackage of orchestrator, or a loose module of its own."""
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) == 1:
        return parts[0]
    if len(parts) > 2 or known[module].name == "__init__.py":
        return f"orchestrator.{parts[1]}"
    return module


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    known = modules()
    rooms: dict[str, set[str]] = {}
    for name, targets in graph.items():
        for target in targets:
            a, b = room_of(name, known), room_of(target, known)
            if a != b:
                rooms.setdefault(a, set()).add(b)
    return rooms


# rooms that must never import other rooms (issue 25, docs/architecture.md "Rooms"): the clients of the lab (labctl
# and the web service) never the controller daemon, the daemons' entries, the agent or the test labs; a run before its
# results never a daemon, a client, a step kind or a view; nothing but the entries imports an entry
NEVER: dict[str, tuple[str, ...]] = {
    "orchestrator.labctl": ("orchestrator.controller", "orchestrator.cmd", "orchestrator.labs", "orchestrator.web",
                            "agents"),
    "orchestrator.web": ("orchestrator.controller", "orchestrator.cmd", "orchestrator.labs", "orchestrator.labctl",
                         "agents"),
    "orchestrator.runs": ("orchestrator.controller", "orchestrator.cmd", "orchestrator.labs", "orchestrator.labctl",
                          "orchestrator.web", "orchestrator.kinds", "orchestrator.htmlreport", "orchestrator.export",
                          "agents"),
    "orchestrator.store": ("orchestrator.controller", "orchestrator.cmd", "orchestrator.labs", "orchestrator.labctl",
                           "orchestrator.web", "orchestrator.kinds", "orchestrator.runs", "agents"),
    "orchestrator.controller": ("orchestrator.cmd", "orchestrator.labs", "orchestrator.labctl", "orchestrator.web"),
    "agents": ("orchestrator",),
    "labcontract": ("orchestrator", "agents"),
}


def wrong_way(rooms: dict[str, set[str]]) -> list[str]:
    out = []
    for room, banned in NEVER.items():
        for target in sorted(rooms.get(room, ())):
            if any(target == b or target.startswith(b + ".") for b in banned):
                out.append(f"{room} -> {target}")
    return out


def test_rooms_import_one_way_and_in_no_circle() -> None:
    """Folder-level: a lazy import inside a function counts (it hides a circle, it does not untie it)."""
    rooms = room_graph(house_graph())
    assert circles(rooms) == [], f"rooms in a circle: {[sorted(c) for c in circles(rooms)]}"
    assert wrong_way(rooms) == []


def test_a_planted_wrong_way_room_import_is_refused() -> None:
    graph = house_graph()
    graph["orchestrator.labctl.hosts"].add("orchestrator.controller.loop")      # labctl reaching into the daemon
    graph["orchestrator.runs.planner"].add("orchestrator.kinds.fio")            # a plan reaching up to a kind
    assert wrong_way(room_graph(graph)) == ["orchestrator.labctl -> orchestrator.controller",
                                            "orchestrator.runs -> orchestrator.kinds"]
    graph["orchestrator.store.db"].add("orchestrator.queries")                  # the store reading the read model
    assert circles(room_graph(graph))
