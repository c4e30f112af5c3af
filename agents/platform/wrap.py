"""The step wrapper where there is no ``sh`` (Windows): run ``argv`` with its output in ``fio.stdout`` /
``fio.stderr`` of the working directory, then record its exit code in ``rc`` (written to ``rc.tmp`` and
renamed, so that a reader never sees half a number). The same contract as the Linux ``sh`` wrapper
(:data:`agents.platform.linux.WRAPPER`): a restarted agent reads ``rc`` to report a step that ended while
it was away. ``python -m agents.platform.wrap ARGV...``; portable, so it is tested on Linux too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["main"]

NOT_STARTED = 127      # what a shell answers for a command it cannot run
# the wrapper has no console (DETACHED_PROCESS): without this, Windows gives fio, a console program, a new one
CREATE_NO_WINDOW = 0x08000000


def main(argv: Sequence[str]) -> int:
    """Run ``argv`` (the step's command line) in the current directory; returns its exit code."""
    if not argv:
        print("usage: python -m agents.platform.wrap COMMAND [ARG...]", file=sys.stderr)
        return 2
    with open("fio.stdout", "wb") as out, open("fio.stderr", "wb") as err:
        try:
            rc = subprocess.call(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 creationflags=CREATE_NO_WINDOW if os.name == "nt" else 0)
        except OSError as e:
            err.write(f"cannot start {argv[0]}: {e}\n".encode())
            rc = NOT_STARTED
    with open("rc.tmp", "w") as f:
        f.write(f"{rc}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace("rc.tmp", "rc")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
