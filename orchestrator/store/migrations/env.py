"""Alembic environment: the engine comes from the caller (orchestrator.store.db.migrate)."""

from __future__ import annotations

from alembic import context

from orchestrator.store.models import Base

config = context.config
engine = config.attributes["engine"]

with engine.begin() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()
