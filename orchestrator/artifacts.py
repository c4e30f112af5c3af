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
