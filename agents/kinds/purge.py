"""Step kind ``purge``: return each named DUT to a fresh-out-of-box state as far as the host can without
vendor tools (``purge.sh``: blkdiscard a block device, punch out a file-backed DUT's blocks). The interlock
operation is ``purge`` on every DUT it names."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import ClassVar

from agents.kinds.base import Host, Interlock, Launch, StepKind, Targets
from labcontract.facts import DeclaredDut
from labcontract.protocol import StartStep


def purge_script(duts: Sequence[DeclaredDut]) -> str:
    """Commands that return each DUT to a fresh-out-of-box state as far as the host can without
    vendor tools: discard (TRIM/UNMAP) a block device, punch out a file-backed DUT's blocks."""
    lines = ["set -eu"]
    for d in duts:
        if d.kind == "block":
            lines.append(f"blkdiscard --force {shlex.quote(d.path)}")
        else:
            lines.append(f"fallocate --punch-hole --offset 0 --length {d.size_bytes} {shlex.quote(d.path)}")
    return "\n".join(lines) + "\n"


class PurgeKind(StepKind):
    action: ClassVar[str] = "purge"
    exported_phases: ClassVar[tuple[str, ...]] = ("purge",)
    platforms: ClassVar[frozenset[str]] = frozenset({"linux"})   # Linux tools (docs/windows.md)
    artifacts: ClassVar[tuple[str, ...]] = ("purge.sh", "fio.stderr")

    def interlock(self, msg: StartStep, targets: Targets, host: Host) -> Interlock:
        return Interlock("purge", targets.duts)

    def launch(self, msg: StartStep, targets: Targets, host: Host) -> Launch:
        job = purge_script(targets.duts)
        return Launch({"purge.sh": job}, ("/bin/sh", "purge.sh"), job)


KIND = PurgeKind()
