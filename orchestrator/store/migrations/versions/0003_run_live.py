"""runs.live: per-second fio snapshots for every step of a run

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as b:
        b.add_column(sa.Column("live", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("runs") as b:
        b.drop_column("live")
