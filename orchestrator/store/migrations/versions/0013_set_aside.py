"""set aside: a schedule the controller could not fire is disabled with its reason; a run one of the controller's
duties (its notification, its history) failed on is marked with the reason (orchestrator.controller.boundary)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28 04:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("disabled_reason", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("set_aside", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("set_aside")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("disabled_reason")
