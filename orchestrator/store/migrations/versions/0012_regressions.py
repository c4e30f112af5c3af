"""regressions: the acknowledged regressions of the run history (orchestrator.stats.history)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 03:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "regression_acks",
        sa.Column("regression_id", sa.String(length=12), nullable=False),
        sa.Column("acknowledged_at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("regression_id", name=op.f("pk_regression_acks")),
    )


def downgrade() -> None:
    op.drop_table("regression_acks")
