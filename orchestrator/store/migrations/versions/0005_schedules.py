"""recurring schedules

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21 12:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("cron", sa.String(length=128), nullable=False),
        sa.Column("submit", sa.JSON(), nullable=False),
        sa.Column("expires_after_s", sa.Integer(), nullable=True),
        sa.Column("next_fire_at", sa.Float(), nullable=False),
        sa.Column("last_fired_at", sa.Float(), nullable=True),
        sa.Column("last_run_id", sa.String(length=32), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_schedules"),
    )


def downgrade() -> None:
    op.drop_table("schedules")
