"""faults: attempt loss and stop causes, host health and quarantine, DUT interlock state

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as b:
        b.add_column(sa.Column("lost_at", sa.Float(), nullable=True))
        b.add_column(sa.Column("stop_cause", sa.String(length=16), nullable=True))
    with op.batch_alter_table("hosts") as b:
        b.add_column(sa.Column("health", sa.JSON(), nullable=False, server_default="{}"))
        b.add_column(sa.Column("quarantined_at", sa.Float(), nullable=True))
        b.add_column(sa.Column("quarantine_reason", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("devices") as b:
        b.add_column(sa.Column("quarantined_at", sa.Float(), nullable=True))
        b.add_column(sa.Column("quarantine_reason", sa.Text(), nullable=False, server_default=""))
        b.add_column(sa.Column("wipe_ok", sa.Boolean(), nullable=False, server_default=sa.false()))
        b.add_column(sa.Column("observed", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("devices") as b:
        b.drop_column("observed")
        b.drop_column("wipe_ok")
        b.drop_column("quarantine_reason")
        b.drop_column("quarantined_at")
    with op.batch_alter_table("hosts") as b:
        b.drop_column("quarantine_reason")
        b.drop_column("quarantined_at")
        b.drop_column("health")
    with op.batch_alter_table("attempts") as b:
        b.drop_column("stop_cause")
        b.drop_column("lost_at")
