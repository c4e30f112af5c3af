"""labctl has one backend interface (issue 25, item 5: orchestrator/labctl/backend): every command calls the backend
the global options chose, never asking itself whether ``--api`` was given; the direct backend (store + broker) and the
API backend (the web service) implement every operation with the same signature.

What has no API equivalent is refused by the API backend with its reason (and, for the commands of
``reach.NOT_THROUGH_API``, by ``reach.guard`` before the command runs): ``run report`` (``markdown_report``: the
Markdown report links the artifacts on the store's disk), ``export --format lab`` (``export_lab``: it reads the store
and the artifact directory), ``report --markdown`` / ``--latency-cell`` and ``submit --wait`` (the service draws the
HTML report and the run's page instead)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from labcontract.errors import ExportError, LabError, SubmissionError
from orchestrator.labctl.backend import Backend, backend
from orchestrator.labctl.backend.direct import DirectBackend
from orchestrator.labctl.backend.viaapi import ApiBackend

LABCTL = Path(__file__).resolve().parents[2] / "orchestrator" / "labctl"
CHOOSER = LABCTL / "backend" / "__init__.py"
TOKEN = "slab_" + "x" * 43


def operations() -> list[str]:
    """The operations of the interface: its public methods, as the Protocol declares them."""
    return sorted(n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_"))


def test_the_interface_covers_the_commands_operations() -> None:
    ops = set(operations())
    assert {"submit", "run_command", "watch", "queue", "runs_table", "show_run", "compare", "report", "export",
            "artifacts", "show_hosts", "schedules", "tokens", "regressions", "canaries", "notifications"} <= ops


@pytest.mark.parametrize("impl", [DirectBackend, ApiBackend], ids=lambda c: c.__name__)
def test_each_backend_implements_every_operation_with_the_same_signature(impl: type) -> None:
    assert not inspect.isabstract(impl)
    for name in operations():
        method = getattr(impl, name)
        assert method is not getattr(Backend, name), f"{impl.__name__} does not implement {name}"
        assert inspect.signature(method) == inspect.signature(getattr(Backend, name)), (impl.__name__, name)


def _api_client_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == "api_client" or getattr(node.func, "attr", None) == "api_client")]


def test_no_command_branches_on_the_api_client_only_the_chooser_asks_it() -> None:
    calls = {str(p.relative_to(LABCTL)): lines for p in sorted(LABCTL.rglob("*.py"))
             if (lines := _api_client_calls(p))}
    assert list(calls) == ["backend/__init__.py"] and len(calls["backend/__init__.py"]) == 1, calls
    naming = [str(p.relative_to(LABCTL)) for p in sorted(LABCTL.rglob("*.py")) if "api_client" in p.read_text()]
    assert naming == ["apicmds.py", "backend/__init__.py"], naming     # where it is defined, and the chooser


def test_the_chooser_takes_the_global_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.labctl.apicmds import ApiOptions

    monkeypatch.setattr(ApiOptions, "url", None)
    monkeypatch.setattr(ApiOptions, "token_file", None)
    assert isinstance(backend(), DirectBackend)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    monkeypatch.setattr(ApiOptions, "url", "http://127.0.0.1:9")
    monkeypatch.setattr(ApiOptions, "token_file", token)
    b = backend()
    assert isinstance(b, ApiBackend) and b.api.base_url == "http://127.0.0.1:9"


def test_what_has_no_api_equivalent_is_refused_with_its_reason(tmp_path: Path) -> None:
    """Each refused before any request (the service at this URL does not exist)."""
    from orchestrator.labctl.api import ApiClient

    b = ApiBackend(ApiClient("http://127.0.0.1:9", TOKEN, timeout_s=1))
    with pytest.raises(LabError, match="run report: not through --api: the Markdown report links the artifacts"):
        b.markdown_report("last")
    with pytest.raises(ExportError, match="--format lab reads the store and the artifact directory"):
        b.export_lab(["last"], tmp_path / "x", None)
    for markdown, cells, html in ((True, None, tmp_path / "r.html"), (False, ["c"], tmp_path / "r.html"),
                                  (False, None, None)):
        with pytest.raises(LabError, match="through --api: the runs' HTML report with --html FILE"):
            list(b.report(["last"], html, markdown, cells))
    with pytest.raises(SubmissionError) as e:
        b.submit("demo", "h1", ["dut0"], initiators=[], runtime=None, scale=None, live=True, priority=0,
                 not_before=None, expires_at=None, max_rounds=None, repeat=None, problems=[], wait=True)
    assert "--wait: not through --api" in str(e.value)
