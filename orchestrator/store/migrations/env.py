"""Alembic environment: the engine comes from the caller (orchestrator.store.db.migrate)."""

from __future__ import annotations

from alembic import context

from orchestrator.store.models import Base

config = context.config
engine = config.attributes["engine"]

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # Batch migrations rebuild SQLite tables (copy, drop, rename); with foreign keys enforced, dropping
        # a referenced table fails. The pragma only takes effect outside a transaction.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=sqlite)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
    if sqlite:
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        problems = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise RuntimeError(f"foreign key violations after migrating: {problems[:5]}")
