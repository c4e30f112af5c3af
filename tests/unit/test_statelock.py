"""One agent per state directory (agents.statelock)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.statelock import LOCK_NAME, hold_state_dir
from labcontract.errors import ConfigError


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    first = hold_state_dir(tmp_path / "state")
    try:
        assert (tmp_path / "state" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(ConfigError) as err:
            hold_state_dir(tmp_path / "state", wait_s=0.3)
        assert err.value.key == str(tmp_path / "state")
        assert f"another agent (pid {os.getpid()}) uses this state directory" in err.value.message
    finally:
        first.close()


def test_the_lock_is_free_again_once_its_holder_lets_go(tmp_path: Path) -> None:
    hold_state_dir(tmp_path).close()
    again = hold_state_dir(tmp_path, wait_s=0)
    again.close()
