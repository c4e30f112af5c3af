"""What the direct backend's areas share: the lab config, the store's sessions (made once, read only) and the
controller's client over the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.config import LabConfig
    from orchestrator.runs.client import ControllerClient


class DirectBase:
    """The lab of ``config``: its store and its broker, each reached when an operation first needs it."""

    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self._sessions: Any = None

    def sessions(self) -> Any:
        """The store's sessionmaker (LabError when the store has no schema)."""
        if self._sessions is None:
            from orchestrator.store.db import make_engine, require_schema, sessions

            engine = make_engine(self.config.db_url)
            require_schema(engine)
            self._sessions = sessions(engine)
        return self._sessions

    def redis(self) -> Any:
        from labcontract.transport import redis_client

        return redis_client(self.config.broker_url)

    def controller(self) -> ControllerClient:
        from orchestrator.runs.client import ControllerClient

        return ControllerClient(self.redis())

    def resolve(self, ref: str) -> str:
        from orchestrator.queries import resolve_run_id

        with self.sessions()() as s:
            return resolve_run_id(s, ref)
