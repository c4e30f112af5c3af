"""the overnight queue: not-before, expiry, end notifications

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as b:
        b.add_column(sa.Column("not_before", sa.Float(), nullable=True))
        b.add_column(sa.Column("expires_at", sa.Float(), nullable=True))
        b.add_column(sa.Column("notified_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as b:
        b.drop_column("notified_at")
        b.drop_column("expires_at")
        b.drop_column("not_before")
