"""notify sinks: the notification sinks the controller delivers to, redacted (a webhook by scheme, host and a hash of
its URL), with their delivery state (last success, last failure and its reason, runs pending), for the web service
and labctl notifications (orchestrator.controller.sinkstate)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 07:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a new table (both dialects): nothing to carry over, the controller fills it at its first notification pass
    op.create_table(
        "notify_sinks",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=32), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("delivered", sa.Integer(), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.Column("last_success_at", sa.Float(), nullable=True),
        sa.Column("last_failure_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("failing", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notify_sinks"),
    )


def downgrade() -> None:
    op.drop_table("notify_sinks")
