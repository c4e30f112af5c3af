"""Engine, sessions and schema migration of the results store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import StoreError

MIGRATIONS = Path(__file__).parent / "migrations"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def make_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except Exception as e:
        raise StoreError(f"store URL {url!r} is not a database URL: {e}") from e
    if parsed.drivername == "postgresql":   # psycopg 3, not psycopg2
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        if parsed.database:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")     # readers (CLI) never block the writer
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
        return engine
    return create_engine(parsed, pool_pre_ping=True)


def sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (the controller does this at start)."""
    try:
        command.upgrade(alembic_config(engine), "head")
    except SQLAlchemyError as e:
        raise StoreError(f"cannot migrate the store at {engine.url!r}: {e}") from e


def require_schema(engine: Engine) -> None:
    """For read-only users (the CLI): fail clearly when no controller has created the store."""
    try:
        tables = inspect(engine).get_table_names()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot open the store at {engine.url!r}: {e}") from e
    if "runs" not in tables:
        raise StoreError(f"the store at {engine.url!r} has no schema yet: start the controller once "
                         "(labctl controller) or run labctl demo")


# indexes on expressions, which the models cannot declare for both dialects: made by their migration alone
MIGRATION_ONLY_INDEXES = frozenset({"ix_steps_run_id_op_mode"})


def schema_drift(conn: Any) -> list[Any]:
    """What differs between the migrated schema on ``conn`` and the models (alembic's autogenerate diff), but
    for the indexes only a migration makes (:data:`MIGRATION_ONLY_INDEXES`); [] when they agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from orchestrator.store.models import Base

    def include(obj: Any, name: str | None, type_: str, _reflected: bool, _compare_to: Any) -> bool:
        return not (type_ == "index" and name in MIGRATION_ONLY_INDEXES)

    ctx = MigrationContext.configure(conn, opts={"include_object": include})
    return list(compare_metadata(ctx, Base.metadata))
