"""Install the Ansible collections pinned in requirements.yml into a directory (``make`` runs it).

Why not ``ansible-galaxy collection install`` alone: lab networks and CI machines often reach PyPI (pip needs
it anyway) but not Ansible Galaxy. So the script asks Galaxy first and, when that fails, takes the same
collections out of the ``ansible`` release on PyPI that bundles exactly the pinned versions (BUNDLE, downloaded
without installing it: pip's cache keeps it for the next venv). Nothing is fetched when every pinned version is
already in the directory, so a re-run offline succeeds. A pin that the bundle does not carry is an error naming
both versions: a new pin needs a new BUNDLE (or Galaxy).

Usage: python scripts/install_collections.py REQUIREMENTS_YML DEST_DIR
(collections land in DEST_DIR/ansible_collections/<namespace>/<name>, playbooks/ansible.cfg's collections_path)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

# the PyPI release of the ansible community package whose bundled collections are requirements.yml's pins
BUNDLE = "ansible==12.3.0"
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_NAME = re.compile(r"^[a-z0-9_]+\.[a-z0-9_]+$")


class RequirementsError(Exception):
    """requirements.yml is not a list of collections with an exact version each."""


def pins(requirements: Path) -> dict[str, str]:
    """``namespace.name`` -> its exact pinned version; every problem of the file at once."""
    data = yaml.safe_load(requirements.read_text())
    entries = data.get("collections") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise RequirementsError(f"{requirements}: expected a non-empty 'collections:' list")
    out: dict[str, str] = {}
    problems: list[str] = []
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        version = str(entry.get("version", "")) if isinstance(entry, dict) else ""
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"collections[{i}]: 'name' must be namespace.name, got {name!r}")
        elif not _VERSION.match(version):
            problems.append(f"collections[{i}] ({name}): 'version' must be an exact X.Y.Z, got {version!r}")
        else:
            out[name] = version
    if problems:
        raise RequirementsError(f"{requirements}: " + "; ".join(problems))
    return out


def installed_version(dest: Path, name: str) -> str | None:
    manifest = dest / "ansible_collections" / Path(*name.split(".")) / "MANIFEST.json"
    try:
        return str(json.loads(manifest.read_text())["collection_info"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def missing(dest: Path, wanted: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in wanted.items() if installed_version(dest, n) != v}


def from_galaxy(requirements: Path, dest: Path) -> bool:
    """True when ansible-galaxy installed the requirements into ``dest``; only ``dest`` is looked at (a copy
    elsewhere, such as the old ``ansible`` package's in site-packages, does not count)."""
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(dest), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}
    try:
        res = subprocess.run([str(galaxy), "collection", "install", "-r", str(requirements), "-p", str(dest)],
                             capture_output=True, text=True, env=env, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"ansible-galaxy failed: {e}", file=sys.stderr)
        return False
    if res.returncode != 0:
        last = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        print(f"ansible-galaxy could not install them ({last[0]}); taking them from {BUNDLE} on PyPI",
              file=sys.stderr)
        return False
    return True


def from_pypi_bundle(dest: Path, wanted: dict[str, str]) -> None:
    """Extract each wanted collection from the BUNDLE wheel (downloaded, never installed) into ``dest``."""
    with tempfile.TemporaryDirectory(prefix="collections-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "-d", tmp, BUNDLE], check=True)
        wheel = next(Path(tmp).glob("ansible-*.whl"))
        staged = Path(tmp) / "staged"
        with zipfile.ZipFile(wheel) as zf:
            for name in wanted:
                prefix = f"ansible_collections/{name.replace('.', '/')}/"
                members = [m for m in zf.namelist() if m.startswith(prefix)]
                if not members:
                    raise RequirementsError(f"{BUNDLE} does not carry {name}: install it from Galaxy")
                zf.extractall(staged, members)
        for name, version in wanted.items():
            got = installed_version(staged, name)
            if got != version:
                raise RequirementsError(f"{BUNDLE} carries {name} {got}, requirements.yml pins {version}: "
                                        "pin that version or change BUNDLE in scripts/install_collections.py")
            rel = Path("ansible_collections", *name.split("."))
            target = dest / rel
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staged / rel), str(target))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    requirements, dest = Path(argv[0]), Path(argv[1]).resolve()
    try:
        wanted = pins(requirements)
        todo = missing(dest, wanted)
        if not todo:
            return 0
        dest.mkdir(parents=True, exist_ok=True)
        if not from_galaxy(requirements, dest) or missing(dest, wanted):
            from_pypi_bundle(dest, missing(dest, wanted))
        left = missing(dest, wanted)
        if left:
            raise RequirementsError(f"still missing after the install: {left}")
    except (RequirementsError, subprocess.CalledProcessError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("Ansible collections in " + str(dest) + ": " + ", ".join(f"{n} {v}" for n, v in sorted(wanted.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
