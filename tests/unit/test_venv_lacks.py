"""The roles' lab_venv_lacks module (playbooks/library/lab_venv_lacks.py), run as Ansible runs a module: its own
Python process, its arguments in a JSON file, its answer as JSON on stdout.

What it lacks decides whether a host runs pip at all, so a wrong answer either skips an install a host needs or
costs minutes of pip; a hostile or broken wheel must be refused with its reason (failed, msg), never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[2] / "playbooks" / "library" / "lab_venv_lacks.py"


def run_module(tmp_path: Path, **args: str) -> dict:
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_wheel(path: Path, metadata: str | bytes | None, *, extra_members: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        if metadata is not None:
            zf.writestr("demo-1.0.dist-info/METADATA", metadata)
        for name, data in (extra_members or {}).items():
            zf.writestr(name, data)
    return path


def install(venv: Path, name: str, version: str, requires: list[str] = ()) -> None:
    """A distribution as pip leaves it: a .dist-info directory in the venv's site-packages."""
    site = venv / "lib" / f"python3.{sys.version_info.minor}" / "site-packages"
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


DEMO = "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: alpha>=2\n" \
       "Requires-Dist: beta; extra == 'ctl'\nProvides-Extra: ctl\n"


def test_a_venv_holding_everything_lacks_nothing(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    install(venv, "demo", "1.0", ["alpha>=2"])
    install(venv, "alpha", "2.5", ["gamma"])
    install(venv, "gamma", "1")
    install(venv, "beta", "1")
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", DEMO)
    out = run_module(tmp_path, wheel=str(wheel), venv=str(venv), extra="ctl")
    assert out.get("failed") is not True, out
    assert out["lacking"] == [] and out["installed"] == "1.0" and out["changed"] is False


def test_what_lacks_is_named_through_the_installed_requirements_and_the_extra(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    install(venv, "demo", "0.9")                  # an older version of the project itself
    install(venv, "alpha", "1.5", ["gamma"])      # too old for alpha>=2
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", DEMO)
    plain = run_module(tmp_path, wheel=str(wheel), venv=str(venv))
    assert plain["lacking"] == ["alpha>=2", "demo==1.0"] and plain["installed"] == "0.9"
    with_extra = run_module(tmp_path, wheel=str(wheel), venv=str(venv), extra="ctl")
    assert with_extra["lacking"] == ["alpha>=2", "beta", "demo==1.0"]
    (venv / "lib").rename(tmp_path / "gone")      # an empty venv lacks everything the wheel names
    empty = run_module(tmp_path, wheel=str(wheel), venv=str(venv), extra="ctl")
    assert empty["lacking"] == ["alpha>=2", "beta", "demo==1.0"] and empty["installed"] is None


def test_a_wheel_not_copied_yet_lacks_everything(tmp_path: Path) -> None:
    out = run_module(tmp_path, wheel=str(tmp_path / "absent.whl"), venv=str(tmp_path))
    assert out["lacking"] == ["absent.whl: not on the host yet"] and out.get("failed") is not True


@pytest.mark.parametrize(("content", "reason"), [
    (b"not a zip at all", "File is not a zip file"),
    (None, "0 .dist-info/METADATA files"),
    ("Metadata-Version: 2.1\nVersion: 1.0\n", "METADATA has no Name"),
    ("Metadata-Version: 2.1\nName: demo\n", "METADATA has no Version"),
    ("Metadata-Version: 2.1\nName: demo\nVersion: not.a version!\n", "Invalid version"),
    ("Metadata-Version: 2.1\nName: demo\nVersion: 1\nRequires-Dist: $(rm -rf /) ; ;\n", "METADATA: "),
    (b"Name: demo\nVersion: 1\n\xff\xfe", "codec can't decode"),
    ("Name: demo\nVersion: 1\n" + "X-Pad: " + "a" * (1 << 20) + "\n", "over 1048576"),
], ids=["not-a-zip", "no-metadata", "no-name", "no-version", "bad-version", "garbage-requirement", "not-utf8",
        "oversized"])
def test_a_broken_or_hostile_wheel_is_refused_with_its_reason(tmp_path: Path, content: str | bytes | None,
                                                              reason: str) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    if isinstance(content, bytes) and not content.startswith(b"Name"):
        wheel.write_bytes(content)
    else:
        make_wheel(wheel, content)
    out = run_module(tmp_path, wheel=str(wheel), venv=str(tmp_path / "venv"))
    assert out.get("failed") is True, out
    assert out["msg"].startswith(f"{wheel}: not a readable wheel: ") and reason in out["msg"], out["msg"]


def test_two_metadata_files_are_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "demo.whl", DEMO, extra_members={"other-2.0.dist-info/METADATA": b"Name: other\n"})
    out = run_module(tmp_path, wheel=str(wheel), venv=str(tmp_path / "venv"))
    assert out.get("failed") is True and "2 .dist-info/METADATA files, not one" in out["msg"], out


def test_an_installed_distribution_with_an_unreadable_requirement_is_named_not_fatal(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    install(venv, "demo", "1.0")
    install(venv, "alpha", "2", ["!!! not a requirement"])
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", DEMO)
    out = run_module(tmp_path, wheel=str(wheel), venv=str(venv))
    assert out["lacking"] == ["alpha: unreadable requirement '!!! not a requirement'"], out
