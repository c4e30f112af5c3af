"""notified sinks: the notification sinks that took a run's end (by key, orchestrator.controller.notify), so that a sink
that failed is retried alone and the others never get the run twice

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28 19:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN (nullable): a run notified before it has none, and needs none
    op.add_column("runs", sa.Column("notified_sinks", sa.JSON(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE runs DROP COLUMN notified_sinks")   # SQLite >= 3.35, keeping the table's indexes
    else:
        op.drop_column("runs", "notified_sinks")
