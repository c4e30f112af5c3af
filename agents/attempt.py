"""The record of one attempt on the agent's disk: its directory, start message, state, exit code, and whether its
process is still the one started for it. Apart from the runner (which writes these records) so that the step
kinds and the live reader, which read them, do not import the runner that imports them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agents.platform import Platform, current
from labcontract.protocol import StartStep


@dataclass
class Attempt:
    """An attempt directory on disk."""

    attempt_id: str
    path: Path

    def file(self, name: str) -> Path:
        return self.path / name

    def start_message(self) -> StartStep:
        return StartStep.model_validate_json(self.file("start.json").read_text())

    def state(self) -> dict[str, object]:
        try:
            data: dict[str, object] = json.loads(self.file("state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data

    @property
    def reported(self) -> bool:
        return self.file("reported").exists()

    @property
    def exit_code(self) -> int | None:
        try:
            return int(self.file("rc").read_text().strip())
        except (OSError, ValueError):
            return None

    def alive(self, platform: Platform | None = None) -> bool:
        """Whether the recorded process is still the one started for this attempt (pid + start token), asked of
        ``platform`` (the runner's; None: this host's)."""
        st = self.state()
        pid, ticks = st.get("pid"), st.get("start_ticks")    # "start_ticks": the platform's start token
        if not isinstance(pid, int):
            return False
        return ticks is not None and (platform or current()).alive(pid, ticks)
