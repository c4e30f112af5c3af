"""The lab file: where a lab's pieces are, left by ``make demo`` (``labctl demo``) and ``labctl lab up`` in the lab's
directory, so that a plain ``labctl runs`` afterwards looks at that lab, as git finds its repository.

``<lab dir>/lab.toml``::

    # written by labctl lab up
    lab_dir = "/work/storagelab/.lab"
    broker = "redis://labctl@127.0.0.1:40123/0?password_file=/work/storagelab/.lab/secrets/labctl.pass"
    store = "sqlite:////work/storagelab/.lab/store.sqlite"
    api = "http://127.0.0.1:8080"                # lab up only
    token_file = "/tmp/storagelab-lab-x/web/admin.token"

No secret is written in it: a broker URL names its password *file* (labcontract.brokerauth). How labctl finds it
(:func:`find`): ``--lab-dir`` / ``LAB_DIR`` given: that directory's; else the nearest ``.lab/lab.toml`` from the current
directory upwards (``make demo`` runs the lab in the checkout's ``.lab``). An option or environment variable given
beats the file, key by key; the file beats the built-in defaults.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from labcontract.errors import ConfigError

NAME = "lab.toml"
DIR = ".lab"                  # where make demo keeps its lab, found from the current directory upwards
MAX_BYTES = 64 << 10
TEXT_KEYS = ("broker", "store", "api")
PATH_KEYS = ("lab_dir", "token_file")


@dataclass(frozen=True)
class LabFile:
    path: Path
    lab_dir: Path | None = None
    broker: str | None = None
    store: str | None = None
    api: str | None = None
    token_file: Path | None = None


def find(cwd: Path, lab_dir: Path | None) -> Path | None:
    """The lab file labctl uses: ``lab_dir``'s when a lab directory is given, else the nearest ``.lab/lab.toml`` from
    ``cwd`` upwards; None when there is none."""
    if lab_dir is not None:
        path = lab_dir / NAME
        return path if path.is_file() else None
    for d in (cwd, *cwd.parents):
        path = d / DIR / NAME
        if path.is_file():
            return path
    return None


def read(path: Path) -> LabFile:
    """The lab file at ``path``; ConfigError naming the file and every key that is wrong."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(str(path), "(file)", f"{size} bytes, over the {MAX_BYTES} of a lab file")
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(str(path), "(file)", f"cannot be read: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), "(file)", f"not TOML: {e}") from None
    problems = [f"{k}: unknown key (known: {', '.join((*PATH_KEYS, *TEXT_KEYS))})"
                for k in doc if k not in (*TEXT_KEYS, *PATH_KEYS)]
    problems += [f"{k}: expected a string, got {type(v).__name__}" for k, v in doc.items()
                 if k in (*TEXT_KEYS, *PATH_KEYS) and (not isinstance(v, str) or not v or len(v) > 4096)]
    if problems:
        raise ConfigError(str(path), "; ".join(p.split(":")[0] for p in problems), "; ".join(problems))
    paths = {k: Path(doc[k]) for k in PATH_KEYS if k in doc}
    return LabFile(path, paths.get("lab_dir"), doc.get("broker"), doc.get("store"), doc.get("api"),
                   paths.get("token_file"))


def write(lab_dir: Path, *, broker: str | None, store: str | None, api: str | None = None,
          token_file: Path | None = None, by: str = "labctl") -> Path:
    """Write ``<lab_dir>/lab.toml`` (mode 600: a broker URL written by hand may hold a password) atomically."""
    def q(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"# written by {by}; labctl run from here (or with LAB_DIR={lab_dir}) uses this lab",
             f"lab_dir = {q(str(lab_dir))}"]
    for key, value in (("broker", broker), ("store", store), ("api", api),
                       ("token_file", None if token_file is None else str(token_file))):
        if value:
            lines.append(f"{key} = {q(value)}")
    path, tmp = lab_dir / NAME, lab_dir / f".{NAME}.tmp"
    lab_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path
