"""No check of untrusted text is fooled by a final newline: in Python's ``re``, ``$`` also matches just before a
newline that ends the string, so ``SAFE_ID.match("a1\\n")`` passed the agent's id check (issue 29). Every
pattern the code checks with ``match`` / ``search`` ends in ``\\Z`` (or is matched with ``fullmatch``), however it
is spelt: this test walks the source for a pattern ending in ``$`` (not MULTILINE) used with ``match`` or
``search``, compiled in one module and used in another included. (pydantic's ``Field(pattern=...)`` runs Rust's
regex, where ``$`` is the end of the text: not concerned.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents", "labcontract", "orchestrator", "playbooks", "dashboards")


def sources() -> list[tuple[Path, ast.Module]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.is_symlink():
                continue
            out.append((path, ast.parse(path.read_text(), str(path))))
    return out


def _const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _multiline(call: ast.Call) -> bool:
    return "MULTILINE" in ast.dump(call) or "re.M" in ast.unparse(call)


def dollar_anchored(pattern: str) -> bool:
    return pattern.endswith("$") and not pattern.endswith("\\$")


def compiled_dollar_patterns(trees: list[tuple[Path, ast.Module]]) -> dict[str, str]:
    """Names bound to ``re.compile(<a pattern ending in $>)`` anywhere (module level or class level)."""
    out: dict[str, str] = {}
    for _path, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign | ast.AnnAssign) or not isinstance(node.value, ast.Call):
                continue
            call = node.value
            if not (isinstance(call.func, ast.Attribute) and call.func.attr == "compile") or not call.args:
                continue
            pattern = _const(call.args[0])
            if pattern is None or not dollar_anchored(pattern) or _multiline(call):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = pattern
    return out


def offending_uses(trees: list[tuple[Path, ast.Module]]) -> list[str]:
    names = compiled_dollar_patterns(trees)
    found = []
    for path, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            method, owner = node.func.attr, node.func.value
            if method not in ("match", "search"):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(owner, ast.Name) and owner.id == "re":
                pattern = _const(node.args[0]) if node.args else None
                if pattern is not None and dollar_anchored(pattern) and not _multiline(node):
                    found.append(f"{where}: re.{method}({pattern!r}, ...)")
                continue
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else None
            if name in names:
                found.append(f"{where}: {name}.{method}(...) with {names[name]!r}")
    return found


def test_no_dollar_anchored_pattern_is_used_with_match_or_search() -> None:
    found = offending_uses(sources())
    assert not found, "use fullmatch, or end the pattern in \\Z:\n" + "\n".join(found)


def test_the_walk_finds_a_planted_offender() -> None:
    tree = ast.parse('import re\nSAFE = re.compile(r"^[a-z]+$")\ndef ok(v):\n    return SAFE.match(v)\n')
    assert offending_uses([(ROOT / "agents" / "planted.py", tree)]) == \
        ["agents/planted.py:4: SAFE.match(...) with '^[a-z]+$'"]
    assert re.compile(r"^[a-z]+$").match("abc\n") is not None       # why: the trap itself
    assert re.compile(r"^[a-z]+$").fullmatch("abc\n") is None
