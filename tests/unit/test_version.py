"""The version is written once (labcontract/version.py) and everything else follows it: the CHANGELOG's latest
released heading, the distribution's metadata (pyproject's dynamic version), ``labctl --version`` and
``storagelab-agent --version``; docs/deployment.md's protocol sentence follows labcontract.protocol. The
collections the playbooks name are pinned in requirements.yml (ansible-core carries ansible.builtin only)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from datetime import date
from importlib.metadata import version as dist_version
from pathlib import Path

import pytest
import yaml

from labcontract import __version__
from labcontract.protocol import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})\b", re.MULTILINE)
# a module as a task's key, or a plugin after a pipe, `is`, or in map()/select()/lookup()...: its collection
FQCN = re.compile(r"(?:^\s*(?:- )?|(?:\||\bis|\b(?:map|select|reject|selectattr|rejectattr|lookup|query)\()\s*'?)"
                  r"([a-z][a-z0-9_]*\.[a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*\b", re.MULTILINE)
# namespaces whose names in the playbooks are not collections of requirements.yml
NOT_COLLECTIONS = {"ansible.builtin", "ansible.module_utils", "ansible.legacy"}


def releases() -> list[tuple[tuple[int, int, int], date]]:
    text = (ROOT / "CHANGELOG.md").read_text()
    return [((int(a), int(b), int(c)), date.fromisoformat(d)) for a, b, c, d in RELEASE.findall(text)]


def test_the_changelogs_latest_release_is_the_version() -> None:
    rel = releases()
    assert rel, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' release heading"
    latest = ".".join(map(str, rel[0][0]))
    assert latest == __version__, (f"CHANGELOG.md's latest release is {latest}, labcontract/version.py says "
                                   f"{__version__}: a release bumps both")


def test_releases_are_listed_newest_first_below_unreleased() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.*)$", text, re.MULTILINE)
    assert headings[0].startswith("[Unreleased"), headings[0]
    assert not [h for h in headings[1:] if h.startswith("[Unreleased")], "Unreleased is one section, on top"
    rel = releases()
    assert len(rel) == len(headings) - 1, "every other section is a release '[X.Y.Z] - YYYY-MM-DD'"
    versions, dates = [v for v, _ in rel], [d for _, d in rel]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), versions
    assert dates == sorted(dates, reverse=True), dates


def test_the_package_metadata_and_the_version_file_agree() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "labcontract.version.__version__"}
    assert dist_version("storagelab") == __version__, "the installed metadata is stale: reinstall (make)"


def test_the_commands_print_the_version() -> None:
    bin_dir = Path(sys.executable).parent
    labctl = subprocess.run([str(bin_dir / "labctl"), "--version"], capture_output=True, text=True, timeout=60)
    agent = subprocess.run([sys.executable, "-c", "from agents.cmd.cli import main; main(['--version'])"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert labctl.returncode == 0 and labctl.stdout.strip() == f"labctl (storagelab) {__version__}", labctl
    assert agent.returncode == 0 and agent.stdout.strip() == f"storagelab-agent {__version__}", agent


def test_deployment_doc_states_the_codes_protocol_version() -> None:
    text = (ROOT / "docs" / "deployment.md").read_text()
    found = re.findall(r"`labcontract\.protocol\.PROTOCOL_VERSION`, currently (\d+)", text)
    assert found == [str(PROTOCOL_VERSION)], (f"docs/deployment.md says protocol {found}, the code "
                                              f"{PROTOCOL_VERSION}")


def test_requirements_pin_exactly_the_collections_the_playbooks_use() -> None:
    reqs = yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    pinned = {r["name"]: str(r["version"]) for r in reqs}
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in pinned.values()), pinned
    used: dict[str, set[str]] = {}
    for path in (ROOT / "playbooks").rglob("*"):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
            for name in FQCN.findall(path.read_text()):
                if name not in NOT_COLLECTIONS:
                    used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert set(used) <= set(pinned), f"used but not in requirements.yml: { {k: sorted(v) for k, v in used.items()} }"
    # ansible.windows serves playbooks/windows_agent.yml (hosts beyond Linux); the others must be in use
    assert set(pinned) - {"ansible.windows"} <= set(used), f"pinned but unused: {set(pinned) - set(used)}"


def test_the_collection_installer_refuses_loose_pins_and_skips_what_is_installed(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("install_collections", ROOT / "scripts" / "install_collections.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    bad = tmp_path / "bad.yml"
    bad.write_text("collections:\n  - name: community.general\n    version: '>=11'\n  - name: Bad Name\n")
    with pytest.raises(mod.RequirementsError) as e:
        mod.pins(bad)
    assert "collections[0] (community.general)" in str(e.value) and "collections[1]" in str(e.value)
    pinned = mod.pins(ROOT / "requirements.yml")
    assert mod.missing(tmp_path, pinned) == pinned
    for name, version in pinned.items():          # what an install leaves: a MANIFEST.json per collection
        d = tmp_path.joinpath("ansible_collections", *name.split("."))
        d.mkdir(parents=True)
        (d / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": version}}))
    assert mod.missing(tmp_path, pinned) == {}
    assert mod.main([str(ROOT / "requirements.yml"), str(tmp_path)]) == 0      # nothing fetched: all there
