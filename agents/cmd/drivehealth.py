"""Entry of the root drive-health helper: ``python -m agents.cmd.drivehealth CONFIG``.

Run by systemd as root for each connection to ``storagelab-drive-health.socket`` (its standard output is the
connection): reads the DUTs of CONFIG (a root-owned file the ``lab_agent`` role renders from the inventory), writes
their readings as JSON and exits. It reads no input: the agent cannot choose a device or an argument.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agents.drivehealth import helper_answer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m agents.cmd.drivehealth CONFIG", file=sys.stderr)
        return 2
    try:
        answer = helper_answer(Path(args[0]))
    except (OSError, ValueError) as e:
        print(f"drive-health helper: {e}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(answer)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
