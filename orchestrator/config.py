"""Controller and lab configuration, read once by the entry modules and passed down."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_LAB_DIR = Path.home() / ".storagelab"
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class LabConfig:
    """Where the lab's pieces are. The CLI builds one from options and environment."""

    lab_dir: Path = DEFAULT_LAB_DIR
    broker_url: str = DEFAULT_BROKER
    store_url: str | None = None           # default: SQLite file in lab_dir

    @property
    def db_url(self) -> str:
        return self.store_url or f"sqlite:///{(self.lab_dir / 'store.sqlite').resolve()}"

    @property
    def artifact_dir(self) -> Path:
        return self.lab_dir / "artifacts"

    @property
    def report_dir(self) -> Path:
        return self.lab_dir / "reports"


@dataclass(frozen=True)
class ControllerTuning:
    heartbeat_timeout_s: float = 10.0     # a host silent this long is down; its steps are LOST
    dispatch_expires_s: float = 60.0      # a start message not consumed by then is dropped
    dispatch_retries: int = 3             # starts re-sent before the attempt fails
    step_timeout_margin_s: int = 120      # added to runtime+ramp for the agent's hard stop
    purge_timeout_s: int = 3600           # a purge (discard of a whole device) may take long
    block_ms: int = 100                   # longest wait on the streams per loop pass
    lost_give_up_s: float = 1800.0        # a LOST step whose host stays away this long fails (no retry)
    timeout_grace_s: float = 30.0         # past the agent's deadline by this much, the controller stops it
    ask_again_s: float = 15.0             # re-send an unanswered stop/report this often
    quarantine_after: int = 3             # failed health checks in a row that quarantine a host or DUT
    net_start_lead_s: float = 1.5         # a network cell's hosts start together this long after dispatch
    dispatch_batch: int = 16              # starts sent per loop pass at most (the rest go next pass, a few ms
                                          # later): bounds the time a start waits behind others in one batch
