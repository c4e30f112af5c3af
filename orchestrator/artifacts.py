"""Content-addressed artifact files (raw fio JSON, job files, stderr) under the lab directory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, data: bytes, sha256: str | None = None) -> tuple[str, str]:
        """Write ``data`` once; return (path relative to the root, sha256)."""
        digest = hashlib.sha256(data).hexdigest()
        if sha256 is not None and sha256 != digest:
            raise ValueError(f"artifact content does not match its sha256 {sha256}")
        rel = f"{digest[:2]}/{digest}"
        path = self.root / rel
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.replace(path)
        return rel, digest

    def path(self, rel: str) -> Path:
        return self.root / rel

    def read(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()


CHUNK = 1 << 20


def contained(root: Path, rel: str) -> Path | None:
    """``root / rel`` resolved, when it is a regular file inside ``root``; None otherwise (a row pointing elsewhere,
    by a symlink or ``..``, names no artifact: a download or a copy never reads another file)."""
    base = root.resolve()
    try:
        path = (base / rel).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        return None
    if not path.is_relative_to(base) or not path.is_file():
        return None
    return path


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
